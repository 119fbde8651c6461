"""The jaxdia port of ``oscillator_scipy.py``: the same matrix with ``jaxdia.diags`` and
shift-invert ``jaxdia.eigsh``."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdia  # noqa: E402

n, half_width = 2000, 10.0
x = jnp.linspace(-half_width, half_width, n)
h = x[1] - x[0]
H = jaxdia.diags(
    [jnp.full(n - 1, -0.5 / h**2), 1.0 / h**2 + x**2 / 2, jnp.full(n - 1, -0.5 / h**2)],
    offsets=[-1, 0, 1],
)
levels = jaxdia.eigsh(H, k=10, sigma=0.0, return_eigenvectors=False)
print("levels", np.round(np.sort(np.asarray(levels)), 6))
