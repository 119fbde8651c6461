"""The jaxdia port of ``poisson_pyamg.py``: the same matrix built with ``jaxdia.kron``,
``jaxdia.multigrid`` and ``jaxdia.cg`` to 1e-8. Prints the relative residual."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdia  # noqa: E402

N = 500
T = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
A = jaxdia.kron(T, jaxdia.eye(N)) + jaxdia.kron(jaxdia.eye(N), T)
b = jnp.asarray(np.random.default_rng(0).standard_normal(N * N))
M = jaxdia.multigrid(A, (N, N))
x, info = jaxdia.cg(A, b, M=M, rtol=1e-8)
print(f"residual {float(jnp.linalg.norm(b - A @ x) / jnp.linalg.norm(b)):.2e}")
