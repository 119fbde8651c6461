"""Stiff method-of-lines integrations: ``jaxdia.solve_ivp(method="BDF")`` (the banded
Jacobian and its LU kept across steps) against SciPy's ``odeint`` (LSODA, ``ml``/``mu``),
``solve_ivp`` BDF and Radau (``jac_sparsity``) and diffrax's ``Kvaerno5`` with
``jaxdia.BandedSolver``, side by side in one run.

Cases: SciPy's odeint tutorial Gray-Scott (1-D, u/v interleaved, ``examples/gray_scott.py``)
at odeint's default tolerances, and the Brusselator in 1-D (n = 1000) and 2-D (n = 2048)
(``examples/brusselator.py``, to t = 10 at rtol = atol = 1e-6, as ``bench_jacobian.py``'s
diffrax section). Each solver's error is measured against a tight reference (LSODA at
1e-12 for Gray-Scott, SciPy's BDF at 1e-11 for the Brusselator), its time is the median
of ``--repeats`` runs after a first (compiling) call, reported apart; counts are steps,
Jacobians, LU factorizations and right-hand sides. Each time is reported as wall time and
as the process's CPU time (``time.process_time``: all of XLA's threads), each against
SciPy's fastest in CPU time too (on a loaded machine the CPU time is the steadier one).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_ivp.py \\
        [--quick] [--repeats 3] [--cases gray_scott,brusselator_1d,brusselator_2d,tight] \\
        [--no-diffrax] [--profile] [--points 2500]
    ... bench_ivp.py --cases eager_loop [--calls 10] [--repeats 3] [--no-before]

``--cases eager_loop`` (not in the default cases): a loop of eager calls, the whole
program's time against SciPy's (:func:`eager_loop_case`).

``--profile`` adds, per diffrax row, the solves counted at run time, one solve and one
materialise-and-factor timed alone in compiled loops in the same interleaved rounds as the
run again, and their shares of the run's time (counts times cost over the median run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.integrate  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import jaxdia  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import brusselator  # noqa: E402  # pyright: ignore[reportMissingImports]
import gray_scott  # noqa: E402  # pyright: ignore[reportMissingImports]


def interleaved(calls: dict, repeats: int) -> dict:
    """``{name: (result, first call seconds, median seconds, median CPU seconds)}``: one
    first (compiling) call each, then ``repeats`` rounds that run every call in turn (so
    that a change in the machine's load falls on all of them alike)."""
    results, firsts = {}, {}
    times, cpu = {name: [] for name in calls}, {name: [] for name in calls}
    for name, call in calls.items():
        start = time.perf_counter()
        results[name] = jax.block_until_ready(call())
        firsts[name] = time.perf_counter() - start
    for _ in range(repeats):
        for name, call in calls.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(call())
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {
        name: (
            results[name],
            firsts[name],
            statistics.median(times[name]),
            statistics.median(cpu[name]),
        )
        for name in calls
    }


def band_sparsity(n: int, offsets):
    return sp.diags_array(
        [np.ones(n - abs(k)) for k in offsets if abs(k) < n],
        offsets=[k for k in offsets if abs(k) < n],  # pyright: ignore[reportArgumentType]
        format="csc",
    )


def relative_error(y: np.ndarray, reference: np.ndarray) -> float:
    return float(np.max(np.abs(y - reference)) / np.max(np.abs(reference)))


class Table:
    def __init__(self):
        self.rows = []
        #: ``(case, steps, solves, seconds per run, one solve, one materialise + factor)``.
        self.profiles = []

    def add(self, case, solver, seconds, cpu, compile_s, steps, njev, nlu, nfev, error):
        self.rows.append([case, solver, seconds, cpu, compile_s, steps, njev, nlu, nfev, error])

    def print(self):
        print(
            f"\nload average {os.getloadavg()[0]:.1f} at the end\n"
            "| case | solver | time | CPU time | compile | vs SciPy's fastest (CPU) | steps "
            "| Jacobians | LUs | f evals | rel. error |\n" + "|---" * 11 + "|"
        )
        fastest, fastest_cpu = {}, {}
        for case, solver, seconds, cpu, *_ in self.rows:
            if solver.startswith("SciPy"):
                fastest[case] = min(fastest.get(case, np.inf), seconds)
                fastest_cpu[case] = min(fastest_cpu.get(case, np.inf), cpu)
        for case, solver, seconds, cpu, compile_s, steps, njev, nlu, nfev, error in self.rows:
            ratio = seconds / fastest[case] if case in fastest else float("nan")
            ratio_cpu = cpu / fastest_cpu[case] if case in fastest_cpu else float("nan")
            compiled = f"{compile_s:.1f} s" if compile_s is not None else "-"
            print(
                f"| {case} | {solver} | {seconds * 1e3:.0f} ms | {cpu * 1e3:.0f} ms | {compiled} "
                f"| {ratio:.2f} ({ratio_cpu:.2f}) | {steps} | {njev} | {nlu} | {nfev} "
                f"| {error:.1e} |"
            )
        if self.profiles:
            print(
                "\n| case (diffrax Kvaerno5 + BandedSolver) | steps | solves | one solve "
                "| one materialise + factor | solves' share | factorizations' share (one "
                "a step) |\n|---|---|---|---|---|---|---|"
            )
        for case, steps, solves, seconds, solve, factor in self.profiles:
            print(
                f"| {case} | {steps} | {solves} | {solve * 1e6:.0f} us | {factor * 1e6:.0f} us "
                f"| {solves * solve / seconds:.0%} | {steps * factor / seconds:.0%} |"
            )


def jaxdia_call(field, y0, t1, t_eval, tol, offsets, mask):
    solve = jax.jit(
        lambda y0: jaxdia.solve_ivp(
            field,
            (0.0, t1),
            y0,
            t_eval=t_eval,
            rtol=tol[0],
            atol=tol[1],
            jac_offsets=offsets,
            jac_mask=mask,
        )
    )
    y0 = jnp.asarray(y0)
    return lambda: solve(y0)


def scipy_ivp_call(numpy_field, y0, t1, tol, offsets, method):
    sparsity = band_sparsity(y0.size, offsets)
    return lambda: scipy.integrate.solve_ivp(
        numpy_field,
        (0.0, t1),
        y0,
        method=method,
        jac_sparsity=sparsity,
        rtol=tol[0],
        atol=tol[1],
    )


def report(table, case, timings, reference, compiled=()):
    """Adds each solver's row: its counts and its error at the end against ``reference``."""
    for name, (result, first, seconds, cpu) in timings.items():
        compile_s = first - seconds if name in compiled else None
        if name.startswith("jaxdia"):
            assert int(result.status) == 0, result.message
            counts = (int(result.nsteps), int(result.njev), int(result.nlu), int(result.nfev))
            y = np.asarray(result.y[:, -1])
        elif name.startswith("SciPy solve_ivp"):
            counts = (len(result.t) - 1, result.njev, result.nlu, result.nfev)
            y = result.y[:, -1]
        elif name.startswith("SciPy odeint"):
            y, info = result
            counts = (int(info["nst"][-1]), int(info["nje"][-1]), "-", int(info["nfe"][-1]))
            y = y[-1]
        else:  # diffrax: (y, steps)
            y, steps = result
            counts = (int(steps), "-", "-", "-")
            y = np.asarray(y)
        table.add(case, name, seconds, cpu, compile_s, *counts, relative_error(y, reference))


def gray_scott_case(table, args):
    points = args.points if not args.quick else 200
    t_end = 50.0 if not args.quick else 10.0
    case = f"Gray-Scott n = {2 * points}"
    y0 = gray_scott.initial_value(points)
    t = np.linspace(0, t_end, 11)
    tol = (1.49012e-8, 1.49012e-8)  # odeint's defaults, as in the tutorial
    fk = (gray_scott.F, gray_scott.K)
    reference = scipy.integrate.odeint(
        gray_scott.gray_scott_numpy,
        y0,
        t,
        args=fk,
        ml=2,
        mu=2,
        rtol=1e-12,
        atol=1e-12,
        mxstep=100_000,
    )[-1]

    def numpy_field(s, y):
        return gray_scott.gray_scott_numpy(y, s, *fk)

    calls = {
        "SciPy odeint LSODA (ml=2, mu=2)": lambda: scipy.integrate.odeint(
            gray_scott.gray_scott_numpy, y0, t, args=fk, ml=2, mu=2, full_output=True
        ),
        "SciPy solve_ivp BDF": scipy_ivp_call(numpy_field, y0, t_end, tol, range(-2, 3), "BDF"),
        "jaxdia.solve_ivp BDF": jaxdia_call(
            lambda s, y: gray_scott.gray_scott(y, s, *fk),
            y0,
            t_end,
            jnp.asarray(t),
            tol,
            tuple(range(-2, 3)),
            None,
        ),
    }
    report(table, case, interleaved(calls, args.repeats), reference, {"jaxdia.solve_ivp BDF"})


def brusselator_case(table, args, dims, tight=False):
    """At rtol = atol = 1e-6 against every solver; ``tight``: at 1e-8, SciPy's BDF and
    jaxdia's (the accuracy diffrax's Kvaerno5 reaches at 1e-6)."""
    tol = (1e-8, 1e-8) if tight else (1e-6, 1e-6)
    t1 = 10.0
    if dims == 1:
        points = 500 if not args.quick else 50
        y0, (offsets, mask) = brusselator.initial_1d(points), brusselator.pattern_1d(points)
        field = brusselator.brusselator_1d
        case = f"Brusselator 1-D n = {y0.size}, tol {tol[0]:g}"
    else:
        N = 32 if not args.quick else 8
        y0, (offsets, mask) = brusselator.initial_2d(N), brusselator.pattern_2d(N)
        field = brusselator.brusselator_2d
        case = f"Brusselator 2-D n = {y0.size}, tol {tol[0]:g}"
    reference = brusselator.scipy_bdf(field, y0, t1, offsets)
    compiled_field = jax.jit(lambda y: field(0.0, y, None))

    def numpy_field(s, y):
        return np.asarray(compiled_field(y))

    calls = {
        f"SciPy solve_ivp {method}": scipy_ivp_call(numpy_field, y0, t1, tol, offsets, method)
        for method in (("BDF",) if tight else ("Radau", "BDF"))
    }
    calls["jaxdia.solve_ivp BDF"] = jaxdia_call(
        lambda s, y: field(s, y, None), y0, t1, None, tol, offsets, mask
    )
    compiled = {"jaxdia.solve_ivp BDF"}
    name = "diffrax Kvaerno5 + jaxdia.BandedSolver"
    if not args.no_diffrax and not tight:
        calls[name] = diffrax_call(field, y0, t1, jaxdia.BandedSolver(offsets, mask=mask), tol[0])
        compiled.add(name)
    timings = interleaved(calls, args.repeats)
    report(table, case, timings, reference, compiled)
    if args.profile and name in timings:
        _, steps = timings[name][0]
        profile = diffrax_profile(field, y0, t1, offsets, mask, tol[0], args.repeats)
        table.profiles.append((case, int(steps), *profile))


def diffrax_profile(field, y0, t1, offsets, mask, tol, repeats):
    """``(solves, seconds per run, per solve, per materialise + factor)`` of
    :func:`diffrax_call`'s run: the solves counted at run time (``bench_jacobian``'s
    counting wrapper); the run and each part alone in a compiled loop timed in the same
    interleaved rounds (medians). The compiled run factors once per step: diffrax also
    hands the solver the identity at each step's explicit stage, but that factor is never
    used and XLA drops it (writing it out instead of factoring it measured no change, see
    ``notes/nonlinear.md``)."""
    import lineax as lx
    from bench_jacobian import CountingSolver  # pyright: ignore[reportMissingImports]

    solver = jaxdia.BandedSolver(offsets, mask=mask)
    counting, counts = CountingSolver(solver)
    jax.block_until_ready(diffrax_call(field, y0, t1, counting, tol)())
    y = jnp.asarray(y0)
    operator = lx.linearise(lx.JacobianLinearOperator(lambda v, _: field(0.0, v, None), y))
    state = solver.init(operator, {})

    def factor_body(_, y):
        linear = lx.linearise(lx.JacobianLinearOperator(lambda v, _: field(0.0, v, None), y))
        factor = solver.init(linear, {})[0]
        assert isinstance(factor, jaxdia.BandedLU)
        return y + 1e-12 * factor.info.astype(y.dtype)

    def solve_body(_, y):
        return y + 1e-12 * lx.linear_solve(operator, y, solver, state=state).value

    loops = {"solve": (solve_body, 500), "factor": (factor_body, 50)}

    def in_loop(body, count):
        run = jax.jit(lambda y: jax.lax.fori_loop(0, count, body, y))
        return lambda: run(y)

    calls = {name: in_loop(body, count) for name, (body, count) in loops.items()}
    calls["run"] = diffrax_call(field, y0, t1, solver, tol)
    medians = {name: median for name, (_, _, median) in interleaved(calls, repeats).items()}
    per = {name: medians[name] / count for name, (_, count) in loops.items()}
    return counts["compute"], medians["run"], per["solve"], per["factor"]


def diffrax_call(field, y0, t1, linear_solver, tol):
    """diffrax's Kvaerno5 with ``linear_solver``, as ``examples/brusselator.py`` runs it."""
    import diffrax as dfx

    root_finder = dfx.with_stepsize_controller_tols(dfx.VeryChord)(linear_solver=linear_solver)

    @jax.jit
    def run(y0):
        solution = dfx.diffeqsolve(
            dfx.ODETerm(field),
            dfx.Kvaerno5(root_finder=root_finder),
            0.0,
            t1,
            None,
            y0,
            stepsize_controller=dfx.PIDController(rtol=tol, atol=tol),
            max_steps=100_000,
        )
        assert solution.ys is not None
        return solution.ys[-1], solution.stats["num_steps"]

    y0 = jnp.asarray(y0)
    return lambda: run(y0)


def eager_loop_case(args) -> None:
    """``--cases eager_loop``: ``--calls`` eager ``solve_ivp`` calls in a Python loop (a
    sweep of the diffusion ``alpha``, an array argument, and of ``y0``), the 1-D
    Brusselator on 20 points (n = 40) to t = 10, against SciPy's BDF (``jac_sparsity``)
    in the same loop. A round is the whole loop with a fresh ``fun`` (a new closure: its
    program compiles again, as in a new process), so jaxdia's loop time includes its one
    compile; ``--repeats`` rounds, interleaved, medians. "a program per call" is the
    behaviour before eager programs were kept (a ``fun`` that cannot key the cache, one
    round). "the loop again": the same loop a second time with the same ``fun``, every
    call reusing the program."""
    points, calls = 20, args.calls
    n = 2 * points
    offsets, mask = brusselator.pattern_1d(points)
    sparsity = band_sparsity(n, offsets)
    alphas = np.linspace(0.01, 0.03, calls)
    y0 = brusselator.initial_1d(points)

    def make():
        def field(t, y, alpha):
            u, v = y[0::2], y[1::2]
            h = 1.0 / (points + 1)
            up, vp = jnp.pad(u, 1, constant_values=1.0), jnp.pad(v, 1, constant_values=3.0)
            du = 1 + u * u * v - 4 * u + alpha * (up[:-2] - 2 * u + up[2:]) / h**2
            dv = 3 * u - u * u * v + alpha * (vp[:-2] - 2 * v + vp[2:]) / h**2
            return jnp.stack([du, dv], axis=-1).reshape(-1)

        return field

    def numpy_field(t, y, alpha):
        u, v = y[0::2], y[1::2]
        h = 1.0 / (points + 1)
        up, vp = np.pad(u, 1, constant_values=1.0), np.pad(v, 1, constant_values=3.0)
        du = 1 + u * u * v - 4 * u + alpha * (up[:-2] - 2 * u + up[2:]) / h**2
        dv = 3 * u - u * u * v + alpha * (vp[:-2] - 2 * v + vp[2:]) / h**2
        return np.stack([du, dv], axis=-1).reshape(-1)

    class PerCall:  # not hashable: cannot key the cache, a program per call
        def __eq__(self, other: object) -> bool:  # and so no __hash__
            return self is other

        def __init__(self):
            self.field = make()

        def __call__(self, t, y, alpha):
            return self.field(t, y, alpha)

    def jaxdia_loop(fun):
        out = []
        for i, alpha in enumerate(alphas):
            out.append(
                jaxdia.solve_ivp(
                    fun,
                    (0.0, 10.0),
                    y0 * (1 + 0.01 * i),
                    args=(alpha,),
                    rtol=1e-6,
                    atol=1e-6,
                    jac_offsets=offsets,
                    jac_mask=mask,
                ).y[:, -1]
            )
        return np.asarray(jax.block_until_ready(out))

    def scipy_loop():
        return np.stack(
            [
                scipy.integrate.solve_ivp(
                    numpy_field,
                    (0.0, 10.0),
                    y0 * (1 + 0.01 * i),
                    method="BDF",
                    args=(alpha,),
                    rtol=1e-6,
                    atol=1e-6,
                    jac_sparsity=sparsity,
                ).y[:, -1]
                for i, alpha in enumerate(alphas)
            ]
        )

    def timed(call):
        start, start_cpu = time.perf_counter(), time.process_time()
        out = call()
        return out, time.perf_counter() - start, time.process_time() - start_cpu

    first, again = "jaxdia (its one compile included)", "jaxdia, the loop again (compiled)"
    rows = {first: [], again: [], "SciPy BDF": []}
    error = float("nan")
    for _ in range(args.repeats):
        fun = make()
        ours, *t_ours = timed(lambda: jaxdia_loop(fun))
        rows[first].append(t_ours)
        rows[again].append(timed(lambda: jaxdia_loop(fun))[1:])
        theirs, *t_theirs = timed(scipy_loop)
        rows["SciPy BDF"].append(t_theirs)
        error = relative_error(ours, theirs)
    if not args.no_before:
        rows["jaxdia, a program per call (before)"] = [timed(lambda: jaxdia_loop(PerCall()))[1:]]
    scipy_wall = statistics.median(t[0] for t in rows["SciPy BDF"])
    print(
        f"\neager loop: {calls} solve_ivp calls, 1-D Brusselator n = {n}, t = 10, "
        f"rtol = atol = 1e-6; load average {os.getloadavg()[0]:.1f} at the end; jaxdia vs "
        f"SciPy max relative error {error:.1e}\n"
        "| loop of calls | wall | CPU | per call | vs SciPy (wall) |\n|---|---|---|---|---|"
    )
    for name, times in rows.items():
        wall = statistics.median(t[0] for t in times)
        cpu = statistics.median(t[1] for t in times)
        print(
            f"| {name} | {wall:.2f} s | {cpu:.2f} s | {wall / calls * 1e3:.0f} ms "
            f"| {wall / scipy_wall:.2f} |"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--points", type=int, default=2500, help="Gray-Scott grid points")
    parser.add_argument("--cases", default="gray_scott,brusselator_1d,brusselator_2d,tight")
    parser.add_argument("--no-diffrax", action="store_true")
    parser.add_argument("--calls", type=int, default=10, help="eager_loop's calls")
    parser.add_argument(
        "--no-before", action="store_true", help="eager_loop without a program per call"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="diffrax's solves and factorizations: counts, each timed alone, shares of the run",
    )
    args = parser.parse_args(argv)
    table = Table()
    cases = args.cases.split(",")
    if "gray_scott" in cases:
        gray_scott_case(table, args)
    if "brusselator_1d" in cases:
        brusselator_case(table, args, 1)
    if "brusselator_2d" in cases:
        brusselator_case(table, args, 2)
    if "tight" in cases:
        brusselator_case(table, args, 1, tight=True)
        brusselator_case(table, args, 2, tight=True)
    if "eager_loop" in cases:
        eager_loop_case(args)
    if table.rows:
        table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
