"""The Brusselator reaction-diffusion system in 1-D and 2-D, integrated by diffrax's stiff
``Kvaerno5`` with jaxdia's banded solver inside its Newton iterations.

``u_t = a + u^2 v - (b + 1) u + alpha Laplacian(u)``, ``v_t = b u - u^2 v + alpha
Laplacian(v)`` with ``a = 1``, ``b = 3``, ``alpha = 0.02`` and the boundary values
``u = a``, ``v = b / a`` (Hairer and Wanner's test problem; diffusion makes it stiff). The
method of lines stores the two species of each grid point side by side, ``(u_0, v_0,
u_1, v_1, ...)``: the Jacobian then has the offsets ``(-2, -1, 0, 1, 2)`` in 1-D and
``(-2 N, -2, -1, 0, 1, 2, 2 N)`` on an ``N x N`` grid, a band of width ``2 N`` where the
layout ``(u..., v...)`` would give ``N^2``.

diffrax's implicit Runge-Kutta methods solve each stage by a chord method
(``diffrax.VeryChord``), which computes the Jacobian once per step, calls the linear
solver's ``init`` and reuses its state in every iteration. ``jaxdia.BandedSolver`` makes
``init`` materialise the ``lineax.JacobianLinearOperator`` into a DiaMatrix (4 products in
1-D, 7 in 2-D, with the mask of the true pattern) and factor it once; diffrax's default
densifies it (``n`` products) and runs a dense LU.

Checks: each solution against SciPy's ``solve_ivp(method="BDF", jac_sparsity=...)`` at
tight tolerances. (``benchmarks/bench_jacobian.py`` also runs diffrax's default solver,
which takes the same steps to rounding.)

Run: ``python examples/brusselator.py [--small]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import diffrax as dfx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.integrate  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import jaxdia  # noqa: E402

A, B, ALPHA = 1.0, 3.0, 0.02


def reaction(u, v):
    return A + u * u * v - (B + 1) * u, B * u - u * u * v


def brusselator_1d(t, y, args):
    """The right-hand side for ``P`` points of ``(0, 1)``, ``y = (u_0, v_0, u_1, ...)``."""
    del t, args
    u, v = y[0::2], y[1::2]
    h = 1.0 / (u.size + 1)
    up, vp = jnp.pad(u, 1, constant_values=A), jnp.pad(v, 1, constant_values=B / A)
    du, dv = reaction(u, v)
    du = du + ALPHA * (up[:-2] - 2 * u + up[2:]) / h**2
    dv = dv + ALPHA * (vp[:-2] - 2 * v + vp[2:]) / h**2
    return jnp.stack([du, dv], axis=-1).reshape(-1)


def laplacian_2d(w, boundary):
    N = w.shape[0]
    h = 1.0 / (N + 1)
    p = jnp.pad(w, 1, constant_values=boundary)
    return (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * w) / h**2


def brusselator_2d(t, y, args):
    """The right-hand side on an ``N x N`` grid, ``y[2 (i N + j) + s]`` species ``s``."""
    del t, args
    N = round((y.size // 2) ** 0.5)
    grid = y.reshape(N, N, 2)
    u, v = grid[..., 0], grid[..., 1]
    du, dv = reaction(u, v)
    du = du + ALPHA * laplacian_2d(u, A)
    dv = dv + ALPHA * laplacian_2d(v, B / A)
    return jnp.stack([du, dv], axis=-1).reshape(-1)


def pattern_1d(points: int):
    """Offsets ``(-2, -1, 0, 1, 2)`` and the true pattern: ``+-1`` couple the two species of
    one point only (``(u_i, v_i)`` and ``(v_i, u_i)``), ``+-2`` a species with itself at
    the neighbouring points."""
    offsets = (-2, -1, 0, 1, 2)
    column = np.arange(2 * points)
    mask = np.ones((5, 2 * points), dtype=bool)
    mask[1] = column % 2 == 0  # entry (column + 1, column): (v_i, u_i)
    mask[3] = column % 2 == 1  # entry (column - 1, column): (u_i, v_i)
    return offsets, mask


def pattern_2d(N: int):
    """Offsets ``(-2N, -2, -1, 0, 1, 2, 2N)`` and the true pattern (``+-2``: no neighbour
    across the edge of a grid row)."""
    offsets = (-2 * N, -2, -1, 0, 1, 2, 2 * N)
    column = np.arange(2 * N * N)
    point = column // 2
    mask = np.ones((7, 2 * N * N), dtype=bool)
    mask[1] = (point + 1) % N != 0  # entry (column + 2, column): point + 1 on the row
    mask[2] = column % 2 == 0
    mask[4] = column % 2 == 1
    mask[5] = point % N != 0  # entry (column - 2, column): point - 1 on the row
    return offsets, mask


def initial_1d(points: int) -> np.ndarray:
    x = np.arange(1, points + 1) / (points + 1)
    return np.stack([1 + np.sin(2 * np.pi * x), np.full(points, B / A)], axis=-1).ravel()


def initial_2d(N: int) -> np.ndarray:
    x = np.arange(1, N + 1) / (N + 1)
    X, Y = np.meshgrid(x, x, indexing="ij")
    u = 1 + np.sin(2 * np.pi * X) * np.sin(np.pi * Y)
    v = np.full((N, N), B / A) + 0.5 * np.sin(np.pi * X) * np.sin(2 * np.pi * Y)
    return np.stack([u, v], axis=-1).ravel()


def kvaerno5(vector_field, y0, t1, linear_solver, tol):
    """diffrax's Kvaerno5 to ``t1`` with the given linear solver in its chord iterations."""
    root_finder = dfx.with_stepsize_controller_tols(dfx.VeryChord)(linear_solver=linear_solver)

    @jax.jit
    def run(y0):
        solution = dfx.diffeqsolve(
            dfx.ODETerm(vector_field),
            dfx.Kvaerno5(root_finder=root_finder),
            0.0,
            t1,
            None,
            y0,
            stepsize_controller=dfx.PIDController(rtol=tol, atol=tol),
            max_steps=100_000,
        )
        return solution.ys[-1], solution.stats["num_steps"]

    start = time.perf_counter()
    jax.block_until_ready(run(y0))
    compiled = time.perf_counter() - start
    start = time.perf_counter()
    y, steps = jax.block_until_ready(run(y0))
    return np.asarray(y), int(steps), time.perf_counter() - start, compiled


def scipy_bdf(vector_field, y0, t1, offsets):
    sparsity = sp.diags_array(
        [np.ones(y0.size - abs(k)) for k in offsets], offsets=offsets, format="csc"
    )
    f = jax.jit(lambda y: vector_field(0.0, y, None))
    result = scipy.integrate.solve_ivp(
        lambda t, y: np.asarray(f(y)),
        (0.0, t1),
        y0,
        method="BDF",
        jac_sparsity=sparsity,
        rtol=1e-11,
        atol=1e-11,
    )
    return result.y[:, -1]


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}")
    return ok


def relative(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small grids (a quick check)")
    args = parser.parse_args(argv)
    points, N = (16, 5) if args.small else (500, 32)
    t1, tol = (2.0, 1e-8) if args.small else (10.0, 1e-6)
    checks = []

    for name, field, y0, (offsets, mask) in [
        (f"1-D, {points} points", brusselator_1d, initial_1d(points), pattern_1d(points)),
        (f"2-D, {N} x {N} grid", brusselator_2d, initial_2d(N), pattern_2d(N)),
    ]:
        solver = jaxdia.BandedSolver(offsets, mask=mask)
        y, steps, elapsed, compiled = kvaerno5(field, jnp.asarray(y0), t1, solver, tol)
        print(
            f"Brusselator {name} (n = {y0.size}) to t = {t1}: Kvaerno5 with "
            f"jaxdia.BandedSolver, {steps} steps in {elapsed:.3f} s "
            f"(first call {compiled:.1f} s, compiling)"
        )
        reference = scipy_bdf(field, y0, t1, offsets)
        error = relative(y, reference)
        checks.append(
            check("vs SciPy BDF", error < 100 * tol, f"relative error {error:.1e} (tol {tol})")
        )
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
