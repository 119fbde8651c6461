"""The 2-D Bratu problem ``-Laplacian(u) = lam exp(u)``, solved by optimistix's Newton
method with jaxdia's banded solver.

On the unit square with ``u = 0`` on the boundary and the 5-point Laplacian on an
``N x N`` grid of interior points, the residual ``F(u) = A u - lam exp(u)`` has a
Jacobian ``A - lam diag(exp(u))`` with the 5-point stencil's offsets ``(-N, -1, 0, 1,
N)``. ``jaxdia.BandedSolver(offsets, mask=...)`` materialises the Jacobian that
``optimistix.Newton`` hands it (a ``lineax.FunctionLinearOperator``) from 5 Jacobian-vector
products, whatever ``N`` (the mask is the stencil's true pattern: no neighbour across the
grid's edge), and factors it with jaxdia's banded LU; the default, dense
``lineax.AutoLinearSolver`` would form an ``N^2 x N^2`` matrix from ``N^2`` products.

Checks: ``jaxdia.jacobian`` against ``jax.jacfwd`` (``check=True``, on a small grid), and
the root against SciPy: Newton's method with the sparse Jacobian factored by SuperLU
(``scipy.sparse.linalg.splu``), and ``scipy.optimize.root``.

Run: ``python examples/bratu.py [--small]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optimistix as optx  # noqa: E402
import scipy.optimize  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402

LAM = 6.0  # below the fold at lam ~ 6.81, where the lower branch of solutions ends


def residual(u, lam):
    """``A u - lam exp(u)`` for the ``N x N`` grid's unknowns ``u`` (flattened, C order)."""
    N = round(u.size**0.5)
    h = 1.0 / (N + 1)
    grid = jnp.pad(u.reshape(N, N), 1)  # the zero boundary values
    centre = grid[1:-1, 1:-1]
    neighbours = grid[:-2, 1:-1] + grid[2:, 1:-1] + grid[1:-1, :-2] + grid[1:-1, 2:]
    return ((4 * centre - neighbours) / h**2 - lam * jnp.exp(centre)).reshape(-1)


def five_point_pattern(N: int):
    """The 5-point stencil's offsets and its true pattern as a mask in ``data``'s layout:
    entry ``(i, i + 1)`` exists unless point ``i`` ends a grid row, ``(i, i - 1)`` unless
    it starts one."""
    offsets = (-N, -1, 0, 1, N)
    column = np.arange(N * N)
    mask = np.ones((5, N * N), dtype=bool)
    mask[1] = (column + 1) % N != 0  # entry (column + 1, column)
    mask[3] = column % N != 0  # entry (column - 1, column)
    return offsets, mask


def scipy_newton(N: int, lam: float, tol: float):
    """Newton's method in SciPy: the sparse Jacobian factored by SuperLU at every step."""
    h = 1.0 / (N + 1)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    A = (sp.kronsum(T, T, format="csc") / h**2).tocsc()

    def F(u):
        return A @ u - lam * np.exp(u)

    u = np.zeros(N * N)
    for _ in range(50):
        step = spla.splu((A - sp.diags_array(lam * np.exp(u))).tocsc()).solve(F(u))
        u -= step
        if np.max(np.abs(step)) <= tol * (1 + np.max(np.abs(u))):
            break
    return u, F


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a small grid (a quick check)")
    args = parser.parse_args(argv)
    N = 12 if args.small else 64
    checks = []

    # Check a new residual's Jacobian once, on a small grid: an entry outside the offsets
    # or the mask would corrupt the entries that share its colour.
    small = 6
    offsets, mask = five_point_pattern(small)
    J = jaxdia.jacobian(residual, offsets, mask=mask, check=True)(jnp.full(small**2, 0.1), LAM)
    checks.append(check("Jacobian vs jax.jacfwd", True, f"{J.shape}, offsets {J.offsets}"))

    offsets, mask = five_point_pattern(N)
    tol = 1e-10
    newton = optx.Newton(rtol=tol, atol=tol, linear_solver=jaxdia.BandedSolver(offsets, mask=mask))
    solve = jax.jit(lambda lam: optx.root_find(residual, newton, jnp.zeros(N * N), lam))
    start = time.perf_counter()
    solution = solve(LAM)
    u = np.asarray(solution.value)
    compiled = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(solve(LAM).value)
    elapsed = time.perf_counter() - start
    steps = int(solution.stats["num_steps"])
    print(
        f"2-D Bratu, lam = {LAM}, {N} x {N} grid: optimistix.Newton with jaxdia.BandedSolver, "
        f"{steps} steps in {elapsed * 1e3:.1f} ms (first call {compiled:.2f} s, compiling)"
    )
    start = time.perf_counter()
    reference, F = scipy_newton(N, LAM, tol)
    scipy_time = time.perf_counter() - start
    print(f"  SciPy Newton + SuperLU: {scipy_time * 1e3:.1f} ms")
    error = float(np.max(np.abs(u - reference)) / np.max(np.abs(reference)))
    checks.append(check("vs SciPy Newton + SuperLU", error < 1e-9, f"relative error {error:.1e}"))
    size = float(np.max(np.abs(F(u))))
    checks.append(check("residual", size < 1e-6, f"max |F(u)| = {size:.1e}"))
    if args.small:  # scipy.optimize.root builds a dense Jacobian: small grids only
        root = scipy.optimize.root(
            lambda v: np.asarray(residual(jnp.asarray(v), LAM)),
            np.zeros(N * N),
            jac=lambda v: np.asarray(jax.jacfwd(residual)(jnp.asarray(v), LAM)),
            tol=1e-12,
        ).x
        error = float(np.max(np.abs(u - root)) / np.max(np.abs(root)))
        checks.append(check("vs scipy.optimize.root", error < 1e-9, f"relative error {error:.1e}"))
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
