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
Jacobians, LU factorizations and right-hand sides.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_ivp.py \\
        [--quick] [--repeats 3] [--cases gray_scott,brusselator_1d,brusselator_2d] \\
        [--no-diffrax] [--points 2500]
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

import brusselator  # noqa: E402
import gray_scott  # noqa: E402


def timed(call, repeats: int) -> tuple[object, float, float]:
    """``(result, first call seconds, median seconds of the repeats)``."""
    start = time.perf_counter()
    result = jax.block_until_ready(call())
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return result, first, statistics.median(times)


def band_sparsity(n: int, offsets) -> sp.csc_array:
    return sp.diags_array(
        [np.ones(n - abs(k)) for k in offsets if abs(k) < n],
        offsets=[k for k in offsets if abs(k) < n],
        format="csc",
    )


def relative_error(y: np.ndarray, reference: np.ndarray) -> float:
    return float(np.max(np.abs(y - reference)) / np.max(np.abs(reference)))


class Table:
    def __init__(self):
        self.rows = []

    def add(self, case, solver, seconds, compile_s, steps, njev, nlu, nfev, error):
        self.rows.append([case, solver, seconds, compile_s, steps, njev, nlu, nfev, error])

    def print(self):
        print(
            "\n| case | solver | time | compile | vs SciPy's fastest | steps | Jacobians "
            "| LUs | f evals | rel. error |\n|---|---|---|---|---|---|---|---|---|---|"
        )
        fastest = {}
        for case, solver, seconds, *_ in self.rows:
            if solver.startswith("SciPy"):
                fastest[case] = min(fastest.get(case, np.inf), seconds)
        for case, solver, seconds, compile_s, steps, njev, nlu, nfev, error in self.rows:
            ratio = seconds / fastest[case] if case in fastest else float("nan")
            compiled = f"{compile_s:.1f} s" if compile_s is not None else "-"
            print(
                f"| {case} | {solver} | {seconds * 1e3:.0f} ms | {compiled} | {ratio:.2f} | "
                f"{steps} | {njev} | {nlu} | {nfev} | {error:.1e} |"
            )


def jaxdia_run(table, case, field, y0, t1, t_eval, tol, offsets, mask, repeats, reference):
    solve = jax.jit(
        lambda y0: jaxdia.solve_ivp(
            field, (0.0, t1), y0, t_eval=t_eval, rtol=tol[0], atol=tol[1],
            jac_offsets=offsets, jac_mask=mask,
        )
    )  # fmt: skip
    result, first, seconds = timed(lambda: solve(jnp.asarray(y0)), repeats)
    assert int(result.status) == 0, result.message
    y = np.asarray(result.y[:, -1])
    table.add(
        case, "jaxdia.solve_ivp BDF", seconds, first - seconds, int(result.nsteps),
        int(result.njev), int(result.nlu), int(result.nfev), relative_error(y, reference),
    )  # fmt: skip
    return result


def scipy_ivp_run(table, case, numpy_field, y0, t1, tol, offsets, method, repeats, reference):
    call = lambda: scipy.integrate.solve_ivp(  # noqa: E731
        numpy_field, (0.0, t1), y0, method=method, jac_sparsity=band_sparsity(y0.size, offsets),
        rtol=tol[0], atol=tol[1],
    )  # fmt: skip
    result, _, seconds = timed(call, repeats)
    table.add(
        case, f"SciPy solve_ivp {method}", seconds, None, len(result.t) - 1, result.njev,
        result.nlu, result.nfev, relative_error(result.y[:, -1], reference),
    )  # fmt: skip


def gray_scott_case(table, args):
    points = args.points if not args.quick else 200
    t_end = 50.0 if not args.quick else 10.0
    case = f"Gray-Scott n = {2 * points}"
    y0 = gray_scott.initial_value(points)
    t = np.linspace(0, t_end, 11)
    tol = (1.49012e-8, 1.49012e-8)  # odeint's defaults, as in the tutorial
    fk = (gray_scott.F, gray_scott.K)
    reference = scipy.integrate.odeint(
        gray_scott.gray_scott_numpy, y0, t, args=fk, ml=2, mu=2, rtol=1e-12, atol=1e-12,
        mxstep=100_000,
    )[-1]  # fmt: skip
    call = lambda: scipy.integrate.odeint(  # noqa: E731
        gray_scott.gray_scott_numpy, y0, t, args=fk, ml=2, mu=2, full_output=True
    )
    (y, info), _, seconds = timed(call, args.repeats)
    table.add(
        case, "SciPy odeint LSODA (ml=2, mu=2)", seconds, None, int(info["nst"][-1]),
        int(info["nje"][-1]), "-", int(info["nfe"][-1]), relative_error(y[-1], reference),
    )  # fmt: skip

    def numpy_field(s, y):
        return gray_scott.gray_scott_numpy(y, s, *fk)

    scipy_ivp_run(
        table, case, numpy_field, y0, t_end, tol, range(-2, 3), "BDF", 1, reference
    )
    field = lambda s, y: gray_scott.gray_scott(y, s, *fk)  # noqa: E731
    jaxdia_run(
        table, case, field, y0, t_end, jnp.asarray(t), tol, range(-2, 3), None, args.repeats,
        reference,
    )  # fmt: skip


def brusselator_case(table, args, dims):
    tol = (1e-6, 1e-6)
    t1 = 10.0
    if dims == 1:
        points = 500 if not args.quick else 50
        y0, (offsets, mask) = brusselator.initial_1d(points), brusselator.pattern_1d(points)
        field = brusselator.brusselator_1d
        case = f"Brusselator 1-D n = {y0.size}"
    else:
        N = 32 if not args.quick else 8
        y0, (offsets, mask) = brusselator.initial_2d(N), brusselator.pattern_2d(N)
        field = brusselator.brusselator_2d
        case = f"Brusselator 2-D n = {y0.size}"
    reference = brusselator.scipy_bdf(field, y0, t1, offsets)
    compiled_field = jax.jit(lambda y: field(0.0, y, None))

    def numpy_field(s, y):
        return np.asarray(compiled_field(y))

    for method in ("Radau", "BDF"):
        scipy_ivp_run(table, case, numpy_field, y0, t1, tol, offsets, method, 1, reference)
    jaxdia_run(
        table, case, lambda s, y: field(s, y, None), y0, t1, None, tol, offsets, mask,
        args.repeats, reference,
    )  # fmt: skip
    if not args.no_diffrax:
        solver = jaxdia.BandedSolver(offsets, mask=mask)
        y, steps, seconds, first = brusselator.kvaerno5(field, jnp.asarray(y0), t1, solver, tol[0])
        table.add(
            case, "diffrax Kvaerno5 + jaxdia.BandedSolver", seconds, first - seconds, steps,
            "-", "-", "-", relative_error(y, reference),
        )  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--points", type=int, default=2500, help="Gray-Scott grid points")
    parser.add_argument("--cases", default="gray_scott,brusselator_1d,brusselator_2d")
    parser.add_argument("--no-diffrax", action="store_true")
    args = parser.parse_args(argv)
    table = Table()
    cases = args.cases.split(",")
    if "gray_scott" in cases:
        gray_scott_case(table, args)
    if "brusselator_1d" in cases:
        brusselator_case(table, args, 1)
    if "brusselator_2d" in cases:
        brusselator_case(table, args, 2)
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
