"""The heat equation ``u_t = Laplacian(u)``, stepped in time with ``lax.scan``.

Two implicit schemes on the unit interval/square with zero Dirichlet boundary values. The
matrix of each is the same at every step: it is factored once, before the time loop
(``jaxdia.cho_factor``: both are symmetric positive definite), and each step is a solve
with the stored factor inside ``lax.scan``:

* 1-D Crank–Nicolson: each step solves the tridiagonal system
  ``(I + dt/2 L) u_next = (I - dt/2 L) u``;
* 2-D backward Euler: each step solves ``(I + dt L) u_next = u``, a band of ``N``
  diagonals above and below the main one (the grid's rows). For much larger grids the
  band's fill-in grows as ``N^3`` and a preconditioned iterative solver (CG, or multigrid)
  becomes the faster route.

Sine modes are eigenvectors of the discrete Laplacian, so the exact discrete solution is
known: each mode is multiplied by its scheme's amplification factor at every step. Both
runs are checked against it, to solver precision (in 2-D through SciPy's discrete sine
transform, for an initial Gaussian bump that excites every mode). The 1-D run, which
starts from three modes, is also checked against the continuous solution
``exp(-k^2 pi^2 t) sin(k pi x)`` per mode, to discretization error.

Run: ``python examples/heat_equation.py [--small]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.fft  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from jax import lax  # noqa: E402

import jaxdia  # noqa: E402


def laplacian_1d(N: int) -> jaxdia.DiaMatrix:
    """``L = tridiag(-1, 2, -1) / h^2`` on ``N`` interior points of ``(0, 1)``."""
    h = 1.0 / (N + 1)
    return jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N)) * (1 / h**2)


def eigenvalue(k, N: int):
    """The eigenvalue of ``laplacian_1d(N)`` for the mode ``sin(k pi x)`` (``k`` >= 1)."""
    h = 1.0 / (N + 1)
    return 4 / h**2 * np.sin(k * np.pi * h / 2) ** 2


def crank_nicolson_1d(N: int, dt: float, steps: int):
    """1-D Crank–Nicolson: the tridiagonal matrix factored once, a solve per step.

    Returns the solution, the exact discrete solution and the continuous solution.
    """
    L = laplacian_1d(N)
    implicit = jaxdia.eye(N, dtype=jnp.float64) + L * (dt / 2)
    explicit = jaxdia.eye(N, dtype=jnp.float64) - L * (dt / 2)
    x = np.arange(1, N + 1) / (N + 1)
    modes = {1: 1.0, 3: 0.5, 7: 0.25}
    u0 = sum(a * np.sin(k * np.pi * x) for k, a in modes.items())

    @jax.jit
    def run(implicit, explicit, u0):
        factor = jaxdia.cho_factor(implicit)  # once, outside the time loop

        def step(u, _):
            return factor.solve(explicit @ u), None

        return lax.scan(step, u0, length=steps)[0]

    u = np.asarray(run(implicit, explicit, jnp.asarray(u0)))
    discrete, continuous = np.zeros(N), np.zeros(N)
    for k, a in modes.items():
        lam = eigenvalue(k, N)
        discrete += a * ((1 - dt * lam / 2) / (1 + dt * lam / 2)) ** steps * np.sin(k * np.pi * x)
        continuous += a * np.exp(-(k**2) * np.pi**2 * dt * steps) * np.sin(k * np.pi * x)
    return u, discrete, continuous


def backward_euler_2d(N: int, dt: float, steps: int):
    """2-D backward Euler: the band matrix factored once, a solve per step; returns the
    solution and the discrete exact one."""
    L1 = laplacian_1d(N).to_scipy()
    I1 = jaxdia.eye(N, dtype=jnp.float64).to_scipy()
    L = sp.kron(L1, I1) + sp.kron(I1, L1)
    system = jaxdia.DiaMatrix.from_scipy((sp.eye_array(N * N) + dt * L).todia())
    x = np.arange(1, N + 1) / (N + 1)
    X, Y = np.meshgrid(x, x, indexing="ij")
    u0 = np.exp(-((X - 0.3) ** 2 + (Y - 0.6) ** 2) / 0.01)

    @jax.jit
    def run(system, u0):
        factor = jaxdia.cho_factor(system)  # banded Cholesky, once

        def step(u, _):
            return factor.solve(u), None

        return lax.scan(step, u0, length=steps)[0]

    u = np.asarray(run(system, jnp.asarray(u0.ravel())))
    # The DST-I diagonalizes the Dirichlet Laplacian: mode (k, l) has eigenvalue
    # eigenvalue(k) + eigenvalue(l), and backward Euler divides it by (1 + dt lambda).
    lam = eigenvalue(np.arange(1, N + 1), N)
    factor = (1 + dt * (lam[:, None] + lam[None, :])) ** -steps
    discrete = scipy.fft.idstn(scipy.fft.dstn(u0, type=1) * factor, type=1)
    return u, discrete.ravel()


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}")
    return ok


def relative(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small grids (a quick check)")
    args = parser.parse_args(argv)
    N1, N2, steps = (64, 24, 50) if args.small else (2000, 128, 200)
    t_end = 0.05
    dt = t_end / steps
    checks = []

    start = time.perf_counter()
    u, discrete, continuous = crank_nicolson_1d(N1, dt, steps)
    elapsed = time.perf_counter() - start
    print(f"1-D Crank-Nicolson, N = {N1}, {steps} steps to t = {t_end} ({elapsed:.2f} s)")
    checks.append(
        check(
            "vs exact discrete",
            relative(u, discrete) < 1e-10,
            f"relative error {relative(u, discrete):.2e}",
        )
    )
    checks.append(
        check(
            "vs continuous",
            relative(u, continuous) < 5e-3,
            f"relative error {relative(u, continuous):.2e} (dt^2 + h^2)",
        )
    )

    start = time.perf_counter()
    u, discrete = backward_euler_2d(N2, dt, steps)
    elapsed = time.perf_counter() - start
    print(f"2-D backward Euler, {N2} x {N2} grid, {steps} steps ({elapsed:.2f} s)")
    checks.append(
        check(
            "vs exact discrete",
            relative(u, discrete) < 1e-10,
            f"relative error {relative(u, discrete):.2e}",
        )
    )
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
