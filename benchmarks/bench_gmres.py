"""Restarted GMRES: jaxdia.gmres against SciPy's gmres, time per inner iteration.

The Peclet problem: 2-D convection-diffusion ``-Laplacian(u) + Pe (1, 0.5) . grad(u)``,
upwinded, on an ``N x N`` grid (``tests/test_gmres.py`` solves the same family). Both
solve from ``x = 0`` to ``rtol`` with GMRES(``restart``) and the same preconditioner:
none, Jacobi (``jaxdia.jacobi(A)``; SciPy gets ``diags(1 / diag(A))`` as a CSR
matrix) or ILU(0) (``jaxdia.ilu0(A, (N, N))``; SciPy gets the same factors as CSR
matrices, applied by two ``spsolve_triangular``). SciPy runs on ``A`` as CSR; jaxdia
on the DiaMatrix, the solve compiled once before timing. A third row runs
``jax.scipy.sparse.linalg.gmres`` (``solve_method="incremental"``, SciPy's; jitted) for
reference: it reports nothing, so its iterations are not known and only its total time
is shown. Each result is checked first (the true residual, recomputed with SciPy, within
``rtol``; the iteration counts of jaxdia and SciPy within 5 % of each other, 10 % with
ILU(0), whose cycles SciPy's inner tolerance ends at other steps). Rounds are
interleaved; the table reports medians and the ratio of times per iteration against
SciPy's, measured in the same run, in wall-clock time and in CPU time (of all the
process's threads, ``time.process_time``: on a loaded machine the steadier of the two).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_gmres.py \\
        [--N 160] [--peclet 1 100] [--restart 20] [--rtol 1e-8] [--rounds 5]
        [--preconditioners none jacobi ilu0]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.sparse.linalg as jsl  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402


def peclet(N: int, pe: float) -> sp.dia_array:
    h = 1.0 / (N + 1)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N)) / h**2
    B = sp.diags_array([-1.0, 1.0], offsets=[-1, 0], shape=(N, N)) / h
    I = sp.eye_array(N)
    return sp.dia_array(sp.kronsum(T, T) + pe * (sp.kron(B, I) + 0.5 * sp.kron(I, B)))


PRECONDITIONERS = ("none", "jacobi", "ilu0")


def preconditioners(name: str, A: jaxdia.DiaMatrix, S: sp.dia_array, N: int):
    """jaxdia's preconditioner ``name`` and the same for SciPy (None, a matrix or an
    operator)."""
    if name == "none":
        return None, None
    if name == "jacobi":
        return jaxdia.jacobi(A), sp.diags_array(1 / S.diagonal()).tocsr()
    M = jaxdia.ilu0(A, (N, N))
    L, U = M.L.to_scipy().tocsr(), M.U.to_scipy().tocsr()

    def solve(v):
        y = spla.spsolve_triangular(L, v, lower=True, unit_diagonal=True)
        return spla.spsolve_triangular(U, y, lower=False)

    return M, spla.LinearOperator(S.shape, matvec=solve, dtype=S.dtype)


def timed(fn) -> tuple[float, float]:
    """The wall-clock and CPU time of one call of ``fn``."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description="jaxdia.gmres against SciPy's gmres")
    parser.add_argument("--N", type=int, default=160)
    parser.add_argument("--peclet", type=float, nargs="+", default=[1.0, 100.0])
    parser.add_argument("--restart", type=int, default=20)
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--maxiter", type=int, default=400, help="restart cycles")
    parser.add_argument(
        "--preconditioners", nargs="+", default=["none", "jacobi", "ilu0"], choices=PRECONDITIONERS
    )
    args = parser.parse_args()
    N, restart, rtol = args.N, args.restart, args.rtol
    print(f"N = {N} ({N * N} unknowns), GMRES({restart}), rtol = {rtol:g}, {args.rounds} rounds")
    print(
        "| Pe | M | solver | iterations | time | per iteration | vs SciPy per iteration "
        "| CPU per iteration | vs SciPy (CPU) |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for pe in args.peclet:
        S = peclet(N, pe)
        C = S.tocsr()
        A = jaxdia.DiaMatrix.from_scipy(S)
        b = np.random.default_rng(0).standard_normal(N * N)
        bj = jnp.asarray(b)
        for name in args.preconditioners:
            M, SM = preconditioners(name, A, S, N)
            count = [0]

            def scipy_solve(SM=SM, count=count):
                count[0] = 0
                x, flag = spla.gmres(
                    C,
                    b,
                    M=SM,
                    rtol=rtol,
                    atol=0.0,
                    restart=restart,
                    maxiter=args.maxiter,
                    callback=lambda _: count.__setitem__(0, count[0] + 1),
                    callback_type="pr_norm",
                )
                return x, flag

            def jaxdia_solve(M=M):
                x, info = jaxdia.gmres(A, bj, rtol=rtol, restart=restart, maxiter=args.maxiter, M=M)
                return x.block_until_ready(), info

            jax_gmres = jax.jit(
                lambda A, b, M: jsl.gmres(
                    A,
                    b,
                    M=M,
                    tol=rtol,
                    atol=0.0,
                    restart=restart,
                    maxiter=args.maxiter,
                    solve_method="incremental",
                )[0]
            )

            def jax_solve(M=M):
                return jax_gmres(A, bj, M).block_until_ready()

            xs, flag = scipy_solve()
            scipy_iterations = count[0]
            x, info = jaxdia_solve()
            jax_x = jax_solve()
            norm_b = np.linalg.norm(b)
            assert flag == 0, f"SciPy's gmres did not converge (Pe {pe}, M {name})"
            assert bool(info.converged)
            true = np.linalg.norm(b - S @ np.asarray(x))
            assert true <= rtol * norm_b * (1 + 1e-6), (true / norm_b, rtol)
            ours = int(info.iterations)
            slack = 0.1 if name == "ilu0" else 0.05
            assert abs(ours - scipy_iterations) <= slack * scipy_iterations + 1, (
                ours,
                scipy_iterations,
            )
            jax_residual = np.linalg.norm(b - S @ np.asarray(jax_x)) / norm_b
            solvers = {"scipy": scipy_solve, "jaxdia": jaxdia_solve, "jax": jax_solve}
            times = {key: [] for key in solvers}
            for _ in range(args.rounds):
                for key, solve in solvers.items():
                    times[key].append(timed(solve))
            wall = {key: statistics.median(t for t, _ in runs) for key, runs in times.items()}
            cpu = {key: statistics.median(c for _, c in runs) for key, runs in times.items()}
            per_scipy = wall["scipy"] / scipy_iterations
            per_ours = wall["jaxdia"] / ours
            cpu_scipy = cpu["scipy"] / scipy_iterations
            cpu_ours = cpu["jaxdia"] / ours
            print(
                f"| {pe:g} | {name} | SciPy gmres (CSR) | {scipy_iterations} | "
                f"{wall['scipy']:.3f} s | {1e6 * per_scipy:.0f} us | 1.00 | "
                f"{1e6 * cpu_scipy:.0f} us | 1.00 |"
            )
            print(
                f"| {pe:g} | {name} | jaxdia.gmres | {ours} | {wall['jaxdia']:.3f} s | "
                f"{1e6 * per_ours:.0f} us | {per_ours / per_scipy:.2f} | "
                f"{1e6 * cpu_ours:.0f} us | {cpu_ours / cpu_scipy:.2f} |"
            )
            print(
                f"| {pe:g} | {name} | jax gmres (no report; true rel. residual "
                f"{jax_residual:.1e}) | - | {wall['jax']:.3f} s | - | - | - | - |"
            )


if __name__ == "__main__":
    main()
