"""The jaxdia port of ``gray_scott_scipy.py``: the same right-hand side in ``jax.numpy``
(``.at[...].set`` for the tutorial's writes through views, the interleaving by a
reshape) and ``jaxdia.odeint`` for ``scipy.integrate.odeint``, called as the tutorial
calls it (eagerly, ``ml=2, mu=2``, the default tolerances). Prints the same numbers."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdia  # noqa: E402


def G(u, v, f, k):
    return f * (1 - u) - u * v**2


def H(u, v, f, k):
    return -(f + k) * v + u * v**2


def grayscott1d(y, t, f, k, Du, Dv, dx):
    """Differential equations for the 1-D Gray-Scott equations (method of lines)."""
    u = y[::2]
    v = y[1::2]
    dudt = jnp.empty_like(u)
    dvdt = jnp.empty_like(v)
    dudt = dudt.at[0].set(G(u[0], v[0], f, k) + Du * (-2.0 * u[0] + 2.0 * u[1]) / dx**2)
    dudt = dudt.at[1:-1].set(G(u[1:-1], v[1:-1], f, k) + Du * jnp.diff(u, 2) / dx**2)
    dudt = dudt.at[-1].set(G(u[-1], v[-1], f, k) + Du * (-2.0 * u[-1] + 2.0 * u[-2]) / dx**2)
    dvdt = dvdt.at[0].set(H(u[0], v[0], f, k) + Dv * (-2.0 * v[0] + 2.0 * v[1]) / dx**2)
    dvdt = dvdt.at[1:-1].set(H(u[1:-1], v[1:-1], f, k) + Dv * jnp.diff(v, 2) / dx**2)
    dvdt = dvdt.at[-1].set(H(u[-1], v[-1], f, k) + Dv * (-2.0 * v[-1] + 2.0 * v[-2]) / dx**2)
    return jnp.stack([dudt, dvdt], axis=1).reshape(-1)


y0 = np.random.default_rng(0).standard_normal(5000)
t = np.linspace(0, 50, 11)
f, k, Du, Dv, dx = 0.024, 0.055, 0.01, 0.005, 0.025
sol = np.asarray(jaxdia.odeint(grayscott1d, y0, t, args=(f, k, Du, Dv, dx), ml=2, mu=2))
u, v = sol[-1, ::2], sol[-1, 1::2]
print(f"values {u.mean():.9f} {v.mean():.9f} {np.abs(sol).max():.9f}")
