"""Short solves: Krylov solves against JAX's loops; a stored factor's solve per call.

Krylov (the default table): jaxdia.cg/bicgstab (with their report) against JAX's own loops.

An implicit time loop, ``(I + dt L) u_next = u`` for the 2-D Laplacian ``L`` on an
``N x N`` grid, ``steps`` steps in one ``lax.scan`` (one compiled call), each step one
solve from ``x = 0`` to ``rtol``; a small ``dt`` makes each solve take 1-2 iterations,
where a fixed cost per solve (the report's residual, the loop's set-up) shows most.
Competitors run in interleaved rounds; the table reports medians and ratios measured in
the same run. Every variant is checked first: the final state against SciPy's
``spsolve`` stepping, to the solves' tolerance.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_short_solves.py \\
        [--N 256] [--steps 100] [--dt 0.01] [--rounds 7]

A stored factor's solve, per call (``--factor``): the cost of one custom call of jaxdia's
LAPACK handlers, side by side with what else does the same solve: ``lu_factor(A)``'s
``solve`` in a compiled ``fori_loop`` against ``jax.lax.linalg.tridiagonal_solve``'s
factor-and-solve in the same loop (tridiagonal, n = 200 and 1000), against SciPy's
``dgbtrs`` called in a ``ctypes`` loop (a band of 5, n = 1000), and an eager
``lu.solve(b)`` against ``scipy.sparse.linalg.splu(A).solve(b)``. Every variant's result
is checked against SciPy first.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_short_solves.py \\
        --factor [--calls 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from collections.abc import Callable

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.sparse.linalg as jsl  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg.cython_lapack  # noqa: E402
import scipy.linalg.lapack as lapack  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402

RTOL = 1e-6


def problem(N: int, dt: float):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    S = (sp.eye_array(N * N) + dt * sp.kronsum(T, T)).todia()
    u0 = np.random.default_rng(0).standard_normal(N * N)
    return S, jaxdia.DiaMatrix.from_scipy(S), u0


def time_loops(A: jaxdia.DiaMatrix, steps: int) -> dict:
    """The time loops, jitted: each returns the final state and the iterations per step
    (0 for JAX's solvers, which do not count them)."""

    def jaxdia_solver(method):
        def solve(u):
            x, info = method(A, u, rtol=RTOL)
            return x, info.iterations

        return solve

    def jax_solver(method):
        def solve(u):
            return method(A, u, tol=RTOL)[0], jnp.int32(0)

        return solve

    def loop(solve):
        return jax.jit(lambda u: jax.lax.scan(lambda u, _: solve(u), u, length=steps))

    return {
        "jaxdia.bicgstab": loop(jaxdia_solver(jaxdia.bicgstab)),
        "jax bicgstab": loop(jax_solver(jsl.bicgstab)),
        "jaxdia.cg": loop(jaxdia_solver(jaxdia.cg)),
        "jax cg": loop(jax_solver(jsl.cg)),
    }


# -- a stored factor's solve, per call ----------------------------------------------------


def banded_matrix(n: int, width: int) -> sp.dia_array:
    """A diagonally dominant matrix with offsets ``-width .. width`` (rows with pivoting
    would be solved the same way; the values only need a well-conditioned solve)."""
    rng = np.random.default_rng(n + width)
    offsets = list(range(-width, width + 1))
    data = rng.standard_normal((len(offsets), n))
    data[width] += 2.0 * len(offsets)
    return sp.dia_array((data, offsets), shape=(n, n))


def in_fori_loop(step: Callable, calls: int) -> Callable:
    """``calls`` applications of ``step`` to ``x`` in one compiled ``fori_loop``."""
    return jax.jit(
        lambda *operands: jax.lax.fori_loop(
            0, calls, lambda _, x: step(*operands[:-1], x), operands[-1]
        )
    )


def ctypes_gbtrs(S: sp.dia_array, width: int) -> tuple[Callable, Callable]:
    """SciPy's ``dgbtrs`` through its Cython export, called from a ``ctypes`` loop with
    every argument prepared once: ``(loop(b, calls), solve(b))``."""
    n = S.shape[0]
    ab = np.zeros((3 * width + 1, n))
    dense = S.toarray()
    for j in range(n):
        for i in range(max(0, j - width), min(n, j + width + 1)):
            ab[2 * width + i - j, j] = dense[i, j]
    lu, pivots, info = lapack.dgbtrf(ab, width, width)
    assert info == 0
    lu = np.asfortranarray(lu)
    one_based = np.asfortranarray(pivots + 1, dtype=np.int32)
    capsule = scipy.linalg.cython_lapack.__pyx_capi__["dgbtrs"]
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype, pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    address = pointer(capsule, name(capsule))
    # PYFUNCTYPE: the loop keeps the GIL (no release and re-take per call).
    dgbtrs = ctypes.PYFUNCTYPE(None, *[ctypes.c_void_p] * 11)(address)
    scalars = np.array([n, width, 1, 3 * width + 1, 0], np.int32)  # n, kl, nrhs, ldab, info
    n_, kl, nrhs, ldab, info_ = (scalars.ctypes.data + 4 * i for i in range(5))
    letter = np.array([ord("N")], np.uint8)
    trans = letter.ctypes.data

    factor, rows = lu.ctypes.data, one_based.ctypes.data
    arrays = (lu, one_based, scalars, letter)  # the loop holds what the addresses point to

    def loop(b, calls):
        x = np.array(b, order="F")
        solution = x.ctypes.data
        for _ in range(calls):
            dgbtrs(trans, n_, kl, kl, nrhs, factor, ldab, rows, solution, n_, info_)
        assert arrays[2][4] == 0, "dgbtrs: info != 0"
        return x

    return loop, lambda b: loop(b, 1)


def time_calls(variants: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each variant over ``rounds`` interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for run in variants.values():
        jax.block_until_ready(run())  # compiled and warm
    rng = np.random.default_rng(2)
    for _ in range(rounds):
        for name in rng.permutation(list(variants)):
            start = time.perf_counter()
            jax.block_until_ready(variants[name]())
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def factor_rows(calls: int, rounds: int) -> list[tuple[str, str, float, str, float]]:
    """``(case, jaxdia's variant, seconds per call, the other, seconds per call)``."""
    rows = []
    for n in (200, 1000):
        S = banded_matrix(n, 1)
        A = jaxdia.DiaMatrix.from_scipy(S)
        b = np.random.default_rng(n).standard_normal(n)
        lu = jaxdia.lu_factor(A)
        dl = np.concatenate([[0.0], S.diagonal(-1)])
        du = np.concatenate([S.diagonal(1), [0.0]])
        d = S.diagonal()
        stored = in_fori_loop(lambda lu, x: lu.solve(x), calls)
        lax_solve = in_fori_loop(
            lambda dl, d, du, x: jax.lax.linalg.tridiagonal_solve(dl, d, du, x[:, None])[:, 0],
            calls,
        )
        expected = spla.spsolve(S.tocsc(), b)
        one = in_fori_loop(lambda lu, x: lu.solve(x), 1)(lu, b)
        check_one = in_fori_loop(
            lambda dl, d, du, x: jax.lax.linalg.tridiagonal_solve(dl, d, du, x[:, None])[:, 0], 1
        )(dl, d, du, b)
        for got in (one, check_one):
            np.testing.assert_allclose(got, expected, rtol=1e-10)
        median = time_calls(
            {"stored": lambda: stored(lu, b), "lax": lambda: lax_solve(dl, d, du, b)}, rounds
        )
        rows.append(
            (
                f"tridiagonal, n = {n}, {calls} solves in a compiled `fori_loop`",
                "`lu_factor(A).solve(b)` (stored factor)",
                median["stored"] / calls,
                "`jax.lax.linalg.tridiagonal_solve` (factor + solve)",
                median["lax"] / calls,
            )
        )
    n, width = 1000, 2
    S = banded_matrix(n, width)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = np.random.default_rng(5).standard_normal(n)
    lu = jaxdia.lu_factor(A)
    expected = spla.spsolve(S.tocsc(), b)
    loop, once = ctypes_gbtrs(S, width)
    np.testing.assert_allclose(once(b), expected, rtol=1e-10)
    stored = in_fori_loop(lambda lu, x: lu.solve(x), calls)
    np.testing.assert_allclose(
        in_fori_loop(lambda lu, x: lu.solve(x), 1)(lu, b), expected, rtol=1e-10
    )
    median = time_calls({"stored": lambda: stored(lu, b), "ctypes": lambda: loop(b, calls)}, rounds)
    rows.append(
        (
            f"band of 5, n = {n}, {calls} solves",
            "`lu_factor(A).solve(b)` in a compiled `fori_loop`",
            median["stored"] / calls,
            "SciPy's `dgbtrs` in a `ctypes` loop",
            median["ctypes"] / calls,
        )
    )
    eager_calls = max(calls // 10, 1)
    for n, width in ((1000, 1), (1000, 2)):
        S = banded_matrix(n, width)
        A = jaxdia.DiaMatrix.from_scipy(S)
        b = np.random.default_rng(6).standard_normal(n)
        lu, reference = jaxdia.lu_factor(A), spla.splu(S.tocsc())
        expected = spla.spsolve(S.tocsc(), b)
        np.testing.assert_allclose(lu.solve(b), expected, rtol=1e-10)
        np.testing.assert_allclose(reference.solve(b), expected, rtol=1e-10)
        b_device = jnp.asarray(b)

        def eager():
            for _ in range(eager_calls):
                x = lu.solve(b_device)
            return x

        def scipy_eager():
            for _ in range(eager_calls):
                x = reference.solve(b)
            return x

        median = time_calls({"eager": eager, "splu": scipy_eager}, rounds)
        rows.append(
            (
                f"{'tridiagonal' if width == 1 else 'band of 5'}, n = {n}, eager calls",
                "`lu.solve(b)`",
                median["eager"] / eager_calls,
                "`splu(A).solve(b)`",
                median["splu"] / eager_calls,
            )
        )
    return rows


def factor_table(calls: int, rounds: int) -> None:
    rows = factor_rows(calls, rounds)
    print(
        f"A stored factor's solve, per call; medians of {rounds} interleaved rounds; "
        f"jax {jax.__version__}, float64"
    )
    print("\n| case | jaxdia | per call | other | per call | jaxdia / other |")
    print("|---|---|---:|---|---:|---:|")
    for case, ours, t_ours, theirs, t_theirs in rows:
        print(
            f"| {case} | {ours} | {t_ours * 1e6:.1f} µs | {theirs} | {t_theirs * 1e6:.1f} µs "
            f"| {t_ours / t_theirs:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--dt", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--factor", action="store_true", help="the stored factor's table")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    if args.factor:
        factor_table(args.calls, args.rounds)
        return
    S, A, u0 = problem(args.N, args.dt)
    expected = u0
    solve = spla.factorized(S.tocsc())
    for _ in range(args.steps):
        expected = solve(expected)
    loops = time_loops(A, args.steps)
    iterations = None
    for name, f in loops.items():
        u, counts = jax.block_until_ready(f(jnp.asarray(u0)))
        error = np.linalg.norm(np.asarray(u) - expected) / np.linalg.norm(expected)
        assert error < 100 * RTOL, (name, error)
        if name == "jaxdia.bicgstab":
            iterations = np.unique(np.asarray(counts), return_counts=True)
    times: dict[str, list[float]] = {name: [] for name in loops}
    rng = np.random.default_rng(1)
    for _ in range(args.rounds):
        for name in rng.permutation(list(loops)):
            start = time.perf_counter()
            jax.block_until_ready(loops[name](jnp.asarray(u0)))
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"N = {args.N} (n = {args.N**2}), {args.steps} steps, dt = {args.dt}, rtol = {RTOL}; "
        f"BiCGStab iterations per solve (count): {dict(zip(*(v.tolist() for v in iterations)))}; "
        f"medians of {args.rounds} interleaved rounds; jax {jax.__version__}"
    )
    print("\n| solver | time | vs JAX's loop |\n|---|---:|---:|")
    for ours, theirs in (("jaxdia.bicgstab", "jax bicgstab"), ("jaxdia.cg", "jax cg")):
        for name in (ours, theirs):
            print(f"| {name} | {median[name]:.3f} s | {median[name] / median[theirs]:.2f} |")


if __name__ == "__main__":
    main()
