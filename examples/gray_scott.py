"""SciPy's ``odeint`` tutorial Gray-Scott problem (1-D, ``u`` and ``v`` interleaved) with
``jaxdia.odeint``: the stiff BDF integrator that keeps its banded Jacobian and LU factor
across steps.

``u_t = Du u_xx - u v^2 + f (1 - u)``, ``v_t = Dv v_xx + u v^2 - (f + k) v`` on ``P``
points with zero-flux ends, stored ``y = (u_0, v_0, u_1, v_1, ...)`` as in the tutorial
(https://docs.scipy.org/doc/scipy/tutorial/integrate.html), so that the Jacobian is
banded with ``ml = mu = 2``. The port changes one line: ``scipy.integrate.odeint(...,
ml=2, mu=2)`` becomes ``jaxdia.odeint(..., ml=2, mu=2)`` with a ``jax.numpy``
right-hand side.

Checks: against SciPy's ``odeint`` (LSODA) at the same tolerances.

Run: ``python examples/gray_scott.py [--points 2500] [--small]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.integrate  # noqa: E402

import jaxdia  # noqa: E402

F, K, DU, DV, DX = 0.024, 0.055, 0.01, 0.005, 0.025


def laplacian(w: jax.Array) -> jax.Array:
    """The second difference with zero-flux ends (the tutorial's ``2 (w_1 - w_0)``)."""
    padded = jnp.concatenate([w[1:2], w, w[-2:-1]])
    return (padded[:-2] - 2 * w + padded[2:]) / DX**2


def gray_scott(y: jax.Array, t: jax.Array, f: float, k: float) -> jax.Array:
    """The right-hand side in ``odeint``'s argument order, ``y = (u_0, v_0, u_1, ...)``."""
    del t
    u, v = y[0::2], y[1::2]
    uv2 = u * v * v
    du = DU * laplacian(u) - uv2 + f * (1 - u)
    dv = DV * laplacian(v) + uv2 - (f + k) * v
    return jnp.stack([du, dv], axis=-1).reshape(-1)


def gray_scott_numpy(y: np.ndarray, t: float, f: float, k: float) -> np.ndarray:
    """The tutorial's right-hand side, for SciPy."""
    del t
    u, v = y[0::2], y[1::2]
    dydt = np.empty_like(y)
    uv2 = u * v * v
    lap = lambda w: np.concatenate([[2 * (w[1] - w[0])], np.diff(w, 2), [2 * (w[-2] - w[-1])]])  # noqa: E731
    dydt[0::2] = DU * lap(u) / DX**2 - uv2 + f * (1 - u)
    dydt[1::2] = DV * lap(v) / DX**2 + uv2 - (f + k) * v
    return dydt


def initial_value(points: int) -> np.ndarray:
    """The tutorial's random start (seeded)."""
    return np.random.default_rng(0).standard_normal(2 * points)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--points", type=int, default=2500)
    parser.add_argument("--small", action="store_true", help="200 points, t up to 10")
    options = parser.parse_args(argv)
    points, t_end = (200, 10.0) if options.small else (options.points, 50.0)
    y0 = initial_value(points)
    t = np.linspace(0, t_end, 11)
    rtol, atol = 1e-6, 1e-8

    solve = jax.jit(
        lambda y0, t: jaxdia.odeint(
            gray_scott, y0, t, args=(F, K), ml=2, mu=2, rtol=rtol, atol=atol
        )
    )
    start = time.perf_counter()
    ours = np.asarray(solve(jnp.asarray(y0), jnp.asarray(t)))
    first = time.perf_counter() - start
    start = time.perf_counter()
    ours = np.asarray(solve(jnp.asarray(y0), jnp.asarray(t)))
    ours_time = time.perf_counter() - start

    start = time.perf_counter()
    theirs = scipy.integrate.odeint(
        gray_scott_numpy, y0, t, args=(F, K), ml=2, mu=2, rtol=rtol, atol=atol
    )
    scipy_time = time.perf_counter() - start

    difference = float(np.max(np.abs(ours - theirs)))
    size = float(np.max(np.abs(theirs)))
    print(
        f"Gray-Scott, n = {2 * points}: jaxdia.odeint {ours_time:.3f} s (first call, with "
        f"compilation, {first:.1f} s), scipy odeint(ml=2, mu=2) {scipy_time:.3f} s; "
        f"max difference {difference:.2e} (max |y| {size:.2f})"
    )
    ok = np.all(np.isfinite(ours)) and difference <= 1e-3 * max(size, 1.0)
    print("[ok]" if ok else "FAILED: the solutions differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
