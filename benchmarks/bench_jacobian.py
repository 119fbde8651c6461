"""Banded Jacobians and jaxdia's solvers inside optimistix and diffrax, against jax.jacfwd,
asdex/sparsejac, lineax's dense default and SciPy.

Run from the repository root (optimistix and diffrax: ``pip install '.[nonlinear]'``):

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_jacobian.py \\
        [--section colours|newton|diffrax|all] [--anchors PYTHON] [--quick] [--skip-dense]

Sections:

* ``colours``: products (JVPs) and host preparation per pattern at n ~ 1.3e5, jaxdia's
  colouring against ``jax.jacfwd`` (n JVPs) and, with ``--anchors PYTHON`` (an interpreter
  with ``asdex`` and ``sparsejac`` installed, JAX 0.10.2; they are not jaxdia
  dependencies), asdex's sparsity detection plus colouring and sparsejac's colouring of the
  true pattern, run in that interpreter. Every jaxdia Jacobian is first checked against
  ``jax.jacfwd`` at a small size (``check=True``).
* ``newton``: ``optimistix.Newton`` on the 2-D Bratu problem (``examples/bratu.py``) at
  n = 4096 and 65536 with ``jaxdia.BandedSolver`` and ``jaxdia.MultigridSolver``, against
  lineax's default dense solver (where it fits) and SciPy's Newton with the sparse
  Jacobian factored by SuperLU; the roots are compared first.
* ``diffrax``: diffrax's ``Kvaerno5`` on the 1-D (n = 1000) and 2-D (n = 2048) Brusselator
  (``examples/brusselator.py``) with ``jaxdia.BandedSolver`` against diffrax's default
  solver (where it runs in minutes) and SciPy's ``solve_ivp`` (Radau and BDF with
  ``jac_sparsity``, the right-hand side in NumPy); the solutions are compared first; a
  profile of one step's parts follows.

Times are medians of repeats after a warm-up call (compile time reported apart); ratios
come from one run. OPENBLAS_NUM_THREADS=1 keeps NumPy's BLAS on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


# -- the patterns ----------------------------------------------------------------------------


def tridiagonal(n):
    def f(u):
        p = jnp.pad(u, 1)
        return 2 * u - p[:-2] - p[2:] + u**3

    return f, (-1, 0, 1), None, n


def pentadiagonal(n):
    def f(u):
        p = jnp.pad(u, 2)
        return p[:-4] - 4 * p[1:-3] + 6 * u - 4 * p[3:-1] + p[4:] + jnp.sin(u)

    return f, (-2, -1, 0, 1, 2), None, n


def grid_steps(f_grid, N, dims):
    return lambda u: f_grid(u.reshape((N,) * dims)).reshape(-1)


def grid_mask(offsets, steps, grid):
    """The true pattern of a stencil on a C-order grid (no neighbour across an edge)."""
    n = int(np.prod(grid))
    columns = np.arange(n)
    rows = []
    for offset, step in zip(offsets, steps):
        point = np.unravel_index(np.clip(columns - offset, 0, n - 1), grid)
        inside = (columns - offset >= 0) & (columns - offset < n)
        for axis, delta in enumerate(step):
            inside &= (point[axis] + delta >= 0) & (point[axis] + delta < grid[axis])
        rows.append(inside)
    return np.stack(rows)


def five_point(N):
    def f(U):
        p = jnp.pad(U, 1)
        return 4 * U - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:] - jnp.exp(U)

    steps = [(-1, 0), (0, -1), (0, 0), (0, 1), (1, 0)]
    offsets = tuple(dy * N + dx for dy, dx in steps)
    return grid_steps(f, N, 2), offsets, grid_mask(offsets, steps, (N, N)), N * N


def nine_point(N):
    def f(U):
        p = jnp.pad(U, 1)
        total = sum(p[1 + a : N + 1 + a, 1 + b : N + 1 + b] for a in (-1, 0, 1) for b in (-1, 0, 1))
        return 9 * U - total + U**2

    steps = [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1)]
    offsets = tuple(a * N + b for a, b in steps)
    return grid_steps(f, N, 2), offsets, grid_mask(offsets, steps, (N, N)), N * N


def seven_point(N):
    def f(U):
        p = jnp.pad(U, 1)
        c = p[1:-1, 1:-1, 1:-1]
        neighbours = (
            p[:-2, 1:-1, 1:-1] + p[2:, 1:-1, 1:-1] + p[1:-1, :-2, 1:-1] + p[1:-1, 2:, 1:-1]
        ) + (p[1:-1, 1:-1, :-2] + p[1:-1, 1:-1, 2:])
        return 6 * c - neighbours + jnp.sinh(c)

    steps = [(-1, 0, 0), (0, -1, 0), (0, 0, -1), (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)]
    offsets = tuple(a * N * N + b * N + c for a, b, c in steps)
    return grid_steps(f, N, 3), offsets, grid_mask(offsets, steps, (N, N, N)), N**3


def periodic(n):
    def f(u):
        return 2 * u - jnp.roll(u, 1) - jnp.roll(u, -1) + u**3

    return f, (-(n - 1), -1, 0, 1, n - 1), None, n


def brusselator(N):
    from brusselator import brusselator_2d, pattern_2d

    offsets, mask = pattern_2d(N)
    return (lambda y: brusselator_2d(0.0, y, None)), offsets, mask, 2 * N * N


def patterns(quick):
    """name -> (pattern builder, its size parameter at n ~ 1.3e5, a small one)."""
    big = {
        "tridiagonal": (tridiagonal, 131072, 40),
        "pentadiagonal": (pentadiagonal, 131072, 40),
        "2-D 5-point": (five_point, 360, 7),
        "2-D 9-point": (nine_point, 360, 7),
        "3-D 7-point": (seven_point, 50, 4),
        "periodic tridiagonal": (periodic, 131072, 40),
        "2-D Brusselator (2 species)": (brusselator, 256, 5),
    }
    if quick:
        return {
            k: (b, max(s // 8, 8) if "D" not in k else max(s // 4, 6), t)
            for k, (b, s, t) in big.items()
        }
    return big


# -- timing ---------------------------------------------------------------------------------


def median_time(call, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def first_call(call):
    start = time.perf_counter()
    result = jax.block_until_ready(call())
    return result, time.perf_counter() - start


# -- colours ---------------------------------------------------------------------------------


def jaxdia_colours(builder, size, small):
    import jaxdia
    from jaxdia import _colouring, _jacobian

    # The oracle first: the same pattern at a small size, against jax.jacfwd.
    f, offsets, mask, n = builder(small)
    jaxdia.jacobian(f, offsets, mask=mask, check=True)(jnp.linspace(0.1, 0.9, n))
    rows = {}
    f, offsets, mask, n = builder(size)
    for label, used in (("masked", mask), ("offsets only", None)):
        if label == "masked" and mask is None:
            continue
        _colouring.column_colouring.cache_clear()
        start = time.perf_counter()
        structure = _jacobian.pattern(offsets, (n, n), used, "bench")
        colouring = _colouring.column_colouring(structure)
        prepared = time.perf_counter() - start
        jacobian = jax.jit(jaxdia.jacobian(f, offsets, mask=used))
        x = jnp.linspace(0.1, 0.9, n)
        _, compiled = first_call(lambda: jacobian(x).data)
        run = median_time(lambda: jacobian(x).data, 5)
        rows[label] = {
            "n": n,
            "colours": colouring.count,
            "kind": colouring.kind,
            "prepare_s": prepared,
            "compile_s": compiled,
            "jacobian_s": run,
        }
    return rows


def anchor_colours(builder, size):
    """asdex (detection + colouring) and sparsejac (colouring of the true pattern); run in
    the anchors' interpreter."""
    import asdex
    import scipy.sparse as sp
    import sparsejac
    from jax.experimental import sparse as jsparse

    f, offsets, mask, n = builder(size)
    x = jnp.linspace(0.1, 0.9, n)
    result = {}
    start = time.perf_counter()
    coloured = asdex.jacobian_coloring(f, x)
    result["asdex"] = {
        "colours": int(coloured.num_colors),
        "prepare_s": time.perf_counter() - start,
    }
    if mask is None:
        mask = np.ones((len(offsets), n), dtype=bool)
        rows = np.arange(n)[None, :] - np.asarray(offsets)[:, None]
        mask &= (rows >= 0) & (rows < n)
    pattern = sp.dia_array((mask.astype(np.float64), offsets), shape=(n, n)).tocoo()
    pattern = sp.coo_array((np.ones(pattern.nnz), (pattern.row, pattern.col)), shape=(n, n))
    sparsity = jsparse.BCOO.from_scipy_sparse(pattern)
    start = time.perf_counter()
    try:
        sparsejac.jacfwd(f, sparsity=sparsity)
        # sparsejac's colouring (networkx) ran above; count its colours the same way.
        connectivity = sparsejac.sparsejac._input_connectivity_from_sparsity(pattern.tocsr())
        _, count = sparsejac.sparsejac._greedy_color(connectivity, "largest_first")
        result["sparsejac"] = {"colours": int(count), "prepare_s": time.perf_counter() - start}
    except Exception as error:  # report, do not hide
        result["sparsejac"] = {"error": f"{type(error).__name__}: {error}"}
    return result


def colours_section(args):
    table = patterns(args.quick)
    anchors = {}
    if args.anchors:
        command = [args.anchors, __file__, "--anchor-worker"] + (["--quick"] if args.quick else [])
        output = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        if output.returncode:
            print("anchors failed:", output.stderr[-2000:])
        else:
            anchors = json.loads(output.stdout.splitlines()[-1])
    print("\n### Products and preparation per pattern\n")
    header = [
        "pattern",
        "n",
        "jaxdia colours (kind)",
        "jaxdia prepare",
        "asdex colours",
        "asdex prepare",
        "sparsejac colours",
        "sparsejac prepare",
        "jax.jacfwd JVPs",
        "jaxdia Jacobian (run / compile)",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, (builder, size, small) in table.items():
        rows = jaxdia_colours(builder, size, small)
        anchor = anchors.get(name, {})
        for index, (label, row) in enumerate(rows.items()):
            # The anchors detect the true pattern: they go with the first row (masked).
            a = anchor.get("asdex", {}) if index == 0 else {}
            s = anchor.get("sparsejac", {}) if index == 0 else {}
            cells = [
                f"{name} ({label})",
                str(row["n"]),
                f"{row['colours']} ({row['kind']})",
                f"{row['prepare_s'] * 1e3:.1f} ms",
                str(a.get("colours", "")),
                f"{a['prepare_s']:.2f} s" if "prepare_s" in a else "",
                str(s.get("colours", s.get("error", ""))),
                f"{s['prepare_s']:.2f} s" if "prepare_s" in s else "",
                str(row["n"]),
                f"{row['jacobian_s'] * 1e3:.1f} ms / {row['compile_s']:.2f} s",
            ]
            print("| " + " | ".join(cells) + " |", flush=True)


def anchor_worker(args):
    result = {}
    for name, (builder, size, _) in patterns(args.quick).items():
        result[name] = anchor_colours(builder, size)
        print(name, result[name], file=sys.stderr, flush=True)
    print(json.dumps(result))


# -- optimistix Newton on Bratu --------------------------------------------------------------


def newton_section(args):
    import lineax as lx
    import optimistix as optx
    from bratu import LAM, five_point_pattern, residual, scipy_newton

    import jaxdia

    sizes = (32, 64) if args.quick else (64, 256)
    print("\n### optimistix.Newton on 2-D Bratu (lam = 6, tolerance 1e-10)\n")
    print(
        "| n | solver | steps | time | first call (compile) | vs SciPy Newton + SuperLU "
        "| vs dense lineax |"
    )
    print("|---|---|---|---|---|---|---|")
    for N in sizes:
        n = N * N
        offsets, mask = five_point_pattern(N)
        reference, _ = scipy_newton(N, LAM, 1e-10)
        scipy_time = median_time(lambda: scipy_newton(N, LAM, 1e-10)[0], 3)
        solvers = {
            "jaxdia.BandedSolver": jaxdia.BandedSolver(offsets, mask=mask),
            "jaxdia.MultigridSolver (CG, rtol 1e-3)": jaxdia.MultigridSolver(
                offsets, (N, N), mask=mask, positive_definite=True, rtol=1e-3
            ),
        }
        dense_fits = n * n * 8 * 3 < 8e9
        if dense_fits and not args.skip_dense:
            solvers["lineax default (dense LU)"] = lx.AutoLinearSolver(well_posed=None)
        results = {}
        for label, linear_solver in solvers.items():
            newton = optx.Newton(rtol=1e-10, atol=1e-10, linear_solver=linear_solver)
            solve = jax.jit(
                lambda lam: optx.root_find(residual, newton, jnp.zeros(n), lam, max_steps=50)
            )
            solution, compiled = first_call(lambda: solve(LAM))
            error = float(np.max(np.abs(np.asarray(solution.value) - reference)))
            assert error < 1e-8, (label, error)
            repeats = 1 if "dense" in label else 5
            elapsed = median_time(lambda: solve(LAM).value, repeats)
            results[label] = (int(solution.stats["num_steps"]), elapsed, compiled)
        dense = results.get("lineax default (dense LU)")
        print(f"| {n} | SciPy Newton + SuperLU | - | {scipy_time * 1e3:.1f} ms | - | 1 | - |")
        for label, (steps, elapsed, compiled) in results.items():
            versus_dense = (
                f"{dense[1] / elapsed:.0f}x faster"
                if dense and "dense" not in label
                else ("1" if dense else "not run" if dense_fits else "does not fit (n^2 doubles)")
            )
            print(
                f"| {n} | {label} | {steps} | {elapsed * 1e3:.1f} ms | {compiled:.1f} s | "
                f"{elapsed / scipy_time:.2f} | {versus_dense} |",
                flush=True,
            )


# -- diffrax Kvaerno5 on the Brusselator -----------------------------------------------------


def numpy_brusselator_1d(t, y):
    from brusselator import ALPHA, A, B

    u, v = y[0::2], y[1::2]
    h = 1.0 / (u.size + 1)
    up, vp = np.pad(u, 1, constant_values=A), np.pad(v, 1, constant_values=B / A)
    out = np.empty_like(y)
    out[0::2] = A + u * u * v - (B + 1) * u + ALPHA * (up[:-2] - 2 * u + up[2:]) / h**2
    out[1::2] = B * u - u * u * v + ALPHA * (vp[:-2] - 2 * v + vp[2:]) / h**2
    return out


def numpy_brusselator_2d(t, y):
    from brusselator import ALPHA, A, B

    N = round((y.size // 2) ** 0.5)
    grid = y.reshape(N, N, 2)
    u, v = grid[..., 0], grid[..., 1]
    h = 1.0 / (N + 1)

    def laplacian(w, boundary):
        p = np.pad(w, 1, constant_values=boundary)
        return (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * w) / h**2

    out = np.empty_like(grid)
    out[..., 0] = A + u * u * v - (B + 1) * u + ALPHA * laplacian(u, A)
    out[..., 1] = B * u - u * u * v + ALPHA * laplacian(v, B / A)
    return out.ravel()


class CountingSolver:
    """Counts ``init`` (materialise + factor) and ``compute`` (solve) calls of a lineax
    solver at run time, for the profile."""

    def __new__(cls, inner):
        import equinox as eqx
        import lineax as lx

        counts = {"init": 0, "compute": 0}

        def bump(name):
            def callback():
                counts[name] += 1

            return callback

        class Counting(lx.AbstractLinearSolver):
            solver: lx.AbstractLinearSolver = eqx.field(static=True)

            def init(self, operator, options):
                jax.debug.callback(bump("init"))
                return self.solver.init(operator, options)

            def compute(self, state, vector, options):
                jax.debug.callback(bump("compute"))
                return self.solver.compute(state, vector, options)

            def transpose(self, state, options):
                return self.solver.transpose(state, options)

            def conj(self, state, options):
                return self.solver.conj(state, options)

            def assume_full_rank(self):
                return True

        return Counting(inner), counts


def diffrax_section(args):
    import lineax as lx
    import scipy.integrate
    import scipy.sparse as sp
    from brusselator import (
        brusselator_1d,
        brusselator_2d,
        initial_1d,
        initial_2d,
        kvaerno5,
        pattern_1d,
        pattern_2d,
    )

    import jaxdia

    tol, t1 = 1e-6, 10.0
    cases = [
        (
            "1-D",
            brusselator_1d,
            numpy_brusselator_1d,
            initial_1d(100 if args.quick else 500),
            pattern_1d(100 if args.quick else 500),
        ),
        ("1-D", brusselator_1d, numpy_brusselator_1d, initial_1d(100), pattern_1d(100)),
        (
            "2-D",
            brusselator_2d,
            numpy_brusselator_2d,
            initial_2d(16 if args.quick else 32),
            pattern_2d(16 if args.quick else 32),
        ),
    ]
    print(f"\n### diffrax Kvaerno5 on the Brusselator to t = {t1} (rtol = atol = {tol})\n")
    print(
        "| problem | n | solver | steps | time | first call (compile) | vs SciPy Radau "
        "| vs SciPy BDF | vs diffrax default |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    profiles = []
    for name, field, numpy_field, y0, (offsets, mask) in cases:
        n = y0.size
        sparsity = sp.diags_array(
            [np.ones(n - abs(k)) for k in offsets], offsets=offsets, format="csc"
        )
        scipy_results = {}
        for method in ("Radau", "BDF"):

            def run_scipy(method=method):
                return scipy.integrate.solve_ivp(
                    numpy_field,
                    (0.0, t1),
                    y0,
                    method=method,
                    jac_sparsity=sparsity,
                    rtol=tol,
                    atol=tol,
                )

            result = run_scipy()
            scipy_results[method] = (result, median_time(lambda: run_scipy().y, 3))
        reference = scipy.integrate.solve_ivp(
            numpy_field, (0.0, t1), y0, method="BDF", jac_sparsity=sparsity, rtol=1e-11, atol=1e-11
        ).y[:, -1]
        solvers = {"jaxdia.BandedSolver": jaxdia.BandedSolver(offsets, mask=mask)}
        if n <= 1000 and not args.skip_dense:
            solvers["diffrax default (dense LU)"] = lx.AutoLinearSolver(well_posed=None)
        rows = {}
        for label, solver in solvers.items():
            y, steps, elapsed, compiled = kvaerno5(field, jnp.asarray(y0), t1, solver, tol)
            if "dense" not in label:
                elapsed = min(elapsed, kvaerno5(field, jnp.asarray(y0), t1, solver, tol)[2])
            error = float(np.max(np.abs(y - reference)) / np.max(np.abs(reference)))
            assert error < 100 * tol, (label, error)
            rows[label] = (y, steps, elapsed, compiled)
        if "diffrax default (dense LU)" in rows:
            same = np.max(
                np.abs(rows["jaxdia.BandedSolver"][0] - rows["diffrax default (dense LU)"][0])
            )
            assert same < 1e-8, same
        radau_time, bdf_time = scipy_results["Radau"][1], scipy_results["BDF"][1]
        for method, (result, elapsed) in scipy_results.items():
            print(
                f"| {name} | {n} | SciPy {method} (jac_sparsity) | {len(result.t) - 1} | "
                f"{elapsed:.3f} s | - | {elapsed / radau_time:.2f} | {elapsed / bdf_time:.2f} | - |"
            )
        default = rows.get("diffrax default (dense LU)")
        for label, (_, steps, elapsed, compiled) in rows.items():
            versus = (
                f"{default[2] / elapsed:.1f}x faster"
                if default and "dense" not in label
                else ("1" if default else "not run (minutes)")
            )
            print(
                f"| {name} | {n} | {label} | {steps} | {elapsed:.3f} s | {compiled:.1f} s | "
                f"{elapsed / radau_time:.2f} | {elapsed / bdf_time:.2f} | {versus} |",
                flush=True,
            )
        scipy_stats = {
            m: (r.nfev, r.njev, r.nlu, len(r.t) - 1) for m, (r, _) in scipy_results.items()
        }
        profiles.append(
            (
                name,
                n,
                field,
                y0,
                offsets,
                mask,
                rows["jaxdia.BandedSolver"][1],
                rows["jaxdia.BandedSolver"][2],
                scipy_stats,
            )
        )
    profile_section(profiles, t1, tol)


def profile_section(profiles, t1, tol):
    """Where a Kvaerno5 step's time goes: counts of factorizations and solves per run, the
    cost of each part measured alone inside a compiled loop, and the shares of the run's
    time that the counts times those costs make."""
    import lineax as lx
    from brusselator import kvaerno5

    import jaxdia

    print("\n### Profile: one Kvaerno5 step with jaxdia.BandedSolver\n")
    header = [
        "problem",
        "n",
        "steps",
        "factorizations",
        "solves",
        "one materialise + factor",
        "one solve",
        "one vector field",
        "solves' share of the run",
        "factorizations' share",
        "SciPy Radau: f evals / Jacobians / LUs / steps",
        "SciPy BDF: f evals / Jacobians / LUs / steps",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, n, field, y0, offsets, mask, steps, elapsed, scipy_stats in profiles:
        counting, counts = CountingSolver(jaxdia.BandedSolver(offsets, mask=mask))
        kvaerno5(field, jnp.asarray(y0), t1, counting, tol)
        counts = {k: v // 2 for k, v in counts.items()}  # the warm-up call and the timed one
        solver = jaxdia.BandedSolver(offsets, mask=mask)
        y = jnp.asarray(y0)

        def loop(body, reps):
            run = jax.jit(lambda y: jax.lax.fori_loop(0, reps, body, y))
            jax.block_until_ready(run(y))
            return median_time(lambda: run(y), 3) / reps

        def factor_body(i, y):
            operator = lx.linearise(lx.JacobianLinearOperator(lambda v, _: field(0.0, v, None), y))
            state = solver.init(operator, {})
            return y + 1e-12 * state[0].lu[0, 0]

        operator = lx.linearise(lx.JacobianLinearOperator(lambda v, _: field(0.0, v, None), y))
        state = solver.init(operator, {})

        def solve_body(i, y):
            return y + 1e-12 * lx.linear_solve(operator, y, solver, state=state).value

        def field_body(i, y):
            return y + 1e-12 * field(0.0, y, None)

        factor, solve, vector_field = (
            loop(factor_body, 200),
            loop(solve_body, 500),
            loop(field_body, 2000),
        )
        radau, bdf = (" / ".join(map(str, scipy_stats[m])) for m in ("Radau", "BDF"))
        print(
            f"| {name} | {n} | {steps} | {counts['init']} | {counts['compute']} | "
            f"{factor * 1e6:.0f} us | {solve * 1e6:.0f} us | {vector_field * 1e6:.1f} us | "
            f"{counts['compute'] * solve / elapsed:.0%} | "
            f"{counts['init'] * factor / elapsed:.0%} | "
            f"{radau} | {bdf} |",
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", default="all", choices=["colours", "newton", "diffrax", "all"])
    parser.add_argument("--anchors", help="a Python interpreter with asdex and sparsejac")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument(
        "--skip-dense",
        action="store_true",
        help="leave out lineax's and diffrax's dense default (minutes)",
    )
    parser.add_argument("--anchor-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.anchor_worker:
        return anchor_worker(args)
    print(
        f"jax {jax.__version__}, {platform.machine()}, {os.cpu_count()} cores, "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}"
    )
    if args.section in ("colours", "all"):
        colours_section(args)
    if args.section in ("newton", "all"):
        newton_section(args)
    if args.section in ("diffrax", "all"):
        diffrax_section(args)


if __name__ == "__main__":
    main()
