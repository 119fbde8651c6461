"""SciPy's banded-Jacobian tutorial, the original: the 1-D Gray-Scott equations by the
method of lines, ``u`` and ``v`` interleaved so that the Jacobian has bandwidths
``ml = mu = 2``, integrated by ``odeint`` (LSODA) to ``t = 50``.

As the tutorial ("Solving a system with a banded Jacobian matrix" in SciPy's integrate
tutorial): its ``G``, ``H`` and ``grayscott1d``, ``y0`` of 5000 values (2500 grid points,
two species), ``t = linspace(0, 50, 11)``, ``odeint``'s default tolerances. The one
change: ``y0`` is seeded (the tutorial's ``np.random.randn(5000)`` is not), so that the
port can print the same numbers."""

import numpy as np
from scipy.integrate import odeint


def G(u, v, f, k):
    return f * (1 - u) - u * v**2


def H(u, v, f, k):
    return -(f + k) * v + u * v**2


def grayscott1d(y, t, f, k, Du, Dv, dx):
    """Differential equations for the 1-D Gray-Scott equations (method of lines)."""
    u = y[::2]
    v = y[1::2]
    dydt = np.empty_like(y)
    dudt = dydt[::2]
    dvdt = dydt[1::2]
    dudt[0] = G(u[0], v[0], f, k) + Du * (-2.0 * u[0] + 2.0 * u[1]) / dx**2
    dudt[1:-1] = G(u[1:-1], v[1:-1], f, k) + Du * np.diff(u, 2) / dx**2
    dudt[-1] = G(u[-1], v[-1], f, k) + Du * (-2.0 * u[-1] + 2.0 * u[-2]) / dx**2
    dvdt[0] = H(u[0], v[0], f, k) + Dv * (-2.0 * v[0] + 2.0 * v[1]) / dx**2
    dvdt[1:-1] = H(u[1:-1], v[1:-1], f, k) + Dv * np.diff(v, 2) / dx**2
    dvdt[-1] = H(u[-1], v[-1], f, k) + Dv * (-2.0 * v[-1] + 2.0 * v[-2]) / dx**2
    return dydt


y0 = np.random.default_rng(0).standard_normal(5000)
t = np.linspace(0, 50, 11)
f, k, Du, Dv, dx = 0.024, 0.055, 0.01, 0.005, 0.025
sol = odeint(grayscott1d, y0, t, args=(f, k, Du, Dv, dx), ml=2, mu=2)
u, v = sol[-1, ::2], sol[-1, 1::2]
print(f"values {u.mean():.9f} {v.mean():.9f} {np.abs(sol).max():.9f}")
