"""Multigrid-preconditioned CG for 2-D Poisson with jaxdia, side by side with PyAMG.

The PyAMG recipe ::

    A = pyamg.gallery.poisson((N, N), format="csr")
    ml = pyamg.smoothed_aggregation_solver(A)
    x = ml.solve(b, tol=1e-8, accel="cg")

becomes ::

    A = jaxdia.DiaMatrix.from_scipy(pyamg.gallery.poisson((N, N)))
    M = jaxdia.multigrid(A, (N, N))       # geometric: the grid's shape is the structure
    x, info = jaxdia.cg(A, b, M=M, rtol=1e-8)

Both are run here (PyAMG only if it is installed: ``pip install 'jaxdia[bench]'``; the
matrix then comes from ``scipy.sparse`` instead, the same one), the multigrid hierarchy
is printed, the solutions are checked against each other and against SciPy's
``spsolve``, and the residual of each iteration is plotted (with matplotlib: ``pip
install 'jaxdia[plot]'``). jaxdia's residual history comes from solving again with
``maxiter = k`` for each ``k``: ``maxiter`` is an argument of the compiled solve, so this
compiles once.

Run: ``python examples/multigrid.py [--small] [--size N] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402

try:
    import pyamg
except ImportError:
    pyamg = None

RTOL = 1e-8


def poisson(N: int) -> sp.csr_array:
    """``pyamg.gallery.poisson((N, N))``: the 5-point Laplacian (4 on the diagonal),
    unknowns in C order, Dirichlet boundaries eliminated; built with SciPy without PyAMG."""
    if pyamg is not None:
        return sp.csr_array(pyamg.gallery.poisson((N, N), format="csr"))
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    return sp.csr_array(sp.kronsum(T, T))


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 64 x 64 grid (a quick check)")
    parser.add_argument("--size", type=int, default=None, help="grid side N (default 500)")
    parser.add_argument(
        "--out", type=Path, default=Path("build/multigrid.png"), help="the plot (%(default)s)"
    )
    args = parser.parse_args(argv)
    N = args.size or (64 if args.small else 500)
    S = poisson(N)
    b = np.random.default_rng(0).standard_normal(N * N)
    A = jaxdia.DiaMatrix.from_scipy(S)
    print(f"2-D Poisson, {N} x {N} grid: n = {N * N:,}, offsets {A.offsets}, on {jax.devices()[0]}")

    M = jaxdia.multigrid(A, (N, N))
    print(M)

    @jax.jit
    def solve(A, b, maxiter):
        M = jaxdia.multigrid(A, (N, N))
        return jaxdia.cg(A, b, M=M, rtol=RTOL, maxiter=maxiter)

    solve_to = jax.jit(lambda A, b: jaxdia.cg(A, b, M=jaxdia.multigrid(A, (N, N)), rtol=RTOL))
    start = time.perf_counter()
    jax.block_until_ready(solve_to(A, b))
    first = time.perf_counter() - start
    start = time.perf_counter()
    x, info = jax.block_until_ready(solve_to(A, b))
    t_jax = time.perf_counter() - start
    x = np.asarray(x)
    print(
        f"jaxdia multigrid-CG: {int(info.iterations)} iterations, residual "
        f"{float(info.residual_norm) / np.linalg.norm(b):.1e}, converged {bool(info.converged)}; "
        f"{t_jax:.3f} s (setup + solve), first call {first:.1f} s (compiles)"
    )
    # The residual after each iteration: the same solve stopped after k iterations.
    history = [
        float(solve(A, b, k)[1].residual_norm) / np.linalg.norm(b)
        for k in range(int(info.iterations) + 1)
    ]

    curves = {"jaxdia multigrid-CG": history}
    checks = [
        check("converged", bool(info.converged), f"{int(info.iterations)} iterations"),
        check(
            "residual",
            np.linalg.norm(S @ x - b) <= 1.01 * RTOL * np.linalg.norm(b),
            f"|Ax - b| / |b| = {np.linalg.norm(S @ x - b) / np.linalg.norm(b):.1e}",
        ),
        check("few iterations", int(info.iterations) <= 12, "multigrid needs no more than 12"),
    ]
    if N <= 200:
        reference = spla.spsolve(S.tocsc(), b)
        error = np.linalg.norm(x - reference) / np.linalg.norm(reference)
        checks.append(check("vs spsolve", error < 1e-6, f"relative difference {error:.1e}"))
    if pyamg is None:
        print("(PyAMG is not installed, so no comparison with it: pip install 'jaxdia[bench]')")
    else:
        start = time.perf_counter()
        ml = pyamg.smoothed_aggregation_solver(S)
        residuals: list[float] = []
        y = ml.solve(b, tol=RTOL, accel="cg", residuals=residuals)
        t_amg = time.perf_counter() - start
        print(ml)
        print(
            f"PyAMG SA-CG: {len(residuals) - 1} iterations; {t_amg:.3f} s (setup + solve); "
            f"jaxdia / PyAMG = {t_jax / t_amg:.2f}"
        )
        curves["PyAMG smoothed aggregation + CG"] = [r / residuals[0] for r in residuals]
        agree = np.linalg.norm(x - y) / np.linalg.norm(y)
        checks.append(check("vs PyAMG", agree < 1e-6, f"relative difference {agree:.1e}"))
    plot(args.out, curves, N)
    return 0 if all(checks) else 1


def plot(path: Path, curves: dict[str, list[float]], N: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed, so no plot: pip install 'jaxdia[plot]')")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, values in curves.items():
        ax.semilogy(range(len(values)), values, marker="o", label=label)
    ax.axhline(RTOL, color="gray", linestyle=":", label=f"tolerance {RTOL:g}")
    ax.set(
        xlabel="iteration",
        ylabel="|b - A x| / |b|",
        title=f"2-D Poisson, {N} x {N} grid",
    )
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
