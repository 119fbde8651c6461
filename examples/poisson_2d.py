"""2-D Poisson equation: SciPy builds it, jaxdia solves it with CG + Jacobi.

Solves ``-Laplacian(u) = f`` on the unit square with zero Dirichlet boundary values, on an
``N x N`` interior grid (5-point stencil), for ``f = 2 (x (1 - x) + y (1 - y))`` whose
exact solution ``u = x (1 - x) y (1 - y)`` the stencil reproduces exactly (it is exact
for cubics in each variable), so the discrete solution can be checked to round-off.
The matrix is assembled with ``scipy.sparse.kron`` and converted with
``DiaMatrix.from_scipy``; jaxdia's solution (CG + Jacobi) is checked against
``scipy.sparse.linalg.spsolve``, SciPy's CG and the exact solution, and all are timed.

Run: ``python examples/poisson_2d.py [--small]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.sparse.linalg as jsl  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402


def poisson_problem(N: int):
    """The scaled 5-point Laplacian (a ``dia_array``), right-hand side and exact solution."""
    h = 1.0 / (N + 1)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    I = sp.eye_array(N)
    S = ((sp.kron(T, I) + sp.kron(I, T)) / h**2).todia()
    x = np.linspace(h, 1 - h, N)
    X, Y = np.meshgrid(x, x, indexing="ij")
    exact = (X * (1 - X) * Y * (1 - Y)).ravel()
    f = (2 * (X * (1 - X) + Y * (1 - Y))).ravel()
    return S, f, exact


def timed(fn, *args, repeats=3):
    """Median wall time of ``fn(*args)`` over ``repeats`` runs, and its last result."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 48 x 48 grid (a quick check)")
    parser.add_argument("--size", type=int, default=None, help="grid side N (default 256)")
    args = parser.parse_args(argv)
    N = args.size or (48 if args.small else 256)

    S, f, exact = poisson_problem(N)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = jnp.asarray(f)
    print(f"2-D Poisson, {N} x {N} grid: n = {N * N}, offsets {A.offsets}, on {jax.devices()[0]}")

    @jax.jit
    def solve(A, b):
        return jsl.cg(A, b, M=jaxdia.jacobi(A), tol=1e-10, maxiter=20 * N)[0]

    start = time.perf_counter()
    jax.block_until_ready(solve(A, b))
    first = time.perf_counter() - start
    t_jax, x = timed(solve, A, b)
    t_spsolve, reference = timed(spla.spsolve, S.tocsr(), f, repeats=1)
    t_scipy_cg, (x_scipy_cg, _) = timed(
        lambda: spla.cg(S.tocsr(), f, rtol=1e-10, maxiter=20 * N), repeats=1
    )

    x = np.asarray(x)
    residual = np.linalg.norm(S @ x - f) / np.linalg.norm(f)
    versus_scipy = np.linalg.norm(x - reference) / np.linalg.norm(reference)
    error = np.abs(x - exact).max() / np.abs(exact).max()
    print(f"  {'solver':<32}{'time [s]':>10}")
    print(f"  {'jaxdia CG + Jacobi (jit, warm)':<32}{t_jax:>10.3f}")
    print(f"  {'jaxdia, first call (compiles)':<32}{first:>10.3f}")
    print(f"  {'scipy spsolve (SuperLU)':<32}{t_spsolve:>10.3f}")
    print(f"  {'scipy CG (no preconditioner)':<32}{t_scipy_cg:>10.3f}")
    checks = [
        check("residual", residual < 1e-9, f"|Ax - b| / |b| = {residual:.2e}"),
        check("vs spsolve", versus_scipy < 1e-8, f"relative difference {versus_scipy:.2e}"),
        check(
            "vs SciPy CG",
            np.linalg.norm(x - x_scipy_cg) / np.linalg.norm(x) < 1e-7,
            "solutions agree",
        ),
        check("vs exact solution", error < 1e-8, f"max relative error {error:.2e}"),
    ]
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
