"""Transverse-field Ising quench, the jaxdia port of ``ising_scipy.py``: the same
operators with ``jaxdia.kron`` chains, ``jaxdia.eigsh`` and ``jaxdia.expm_multiply``;
nothing from SciPy at run time. Prints the same checksum."""

import functools
import operator

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

import jaxdia  # noqa: E402

L, J, H0_FIELD, H1_FIELD = 12, 1.0, 0.5, 1.5
X = jaxdia.DiaMatrix.from_dense(jnp.array([[0.0, 1.0], [1.0, 0.0]]))
Z = jaxdia.DiaMatrix.from_dense(jnp.array([[1.0, 0.0], [0.0, -1.0]]))


def site(op, i):
    return jaxdia.kron(jaxdia.kron(jaxdia.eye(2**i), op), jaxdia.eye(2 ** (L - i - 1)))


ZZ = functools.reduce(operator.add, (site(Z, i) @ site(Z, i + 1) for i in range(L - 1)))
MX = functools.reduce(operator.add, (site(X, i) for i in range(L)))


def hamiltonian(h):
    return -J * ZZ - h * MX


_, vectors = jaxdia.eigsh(hamiltonian(H0_FIELD), k=1, which="SA")
psi0 = vectors[:, 0].astype(jnp.complex128)
H1 = hamiltonian(H1_FIELD).astype(jnp.complex128)
psi = jaxdia.expm_multiply(-1j * H1, psi0, start=0.0, stop=5.0, num=101)
magnetization = jnp.real(jnp.einsum("ti,ti->t", psi.conj(), (MX @ psi.T).T)) / L
print(f"checksum {float(magnetization.sum()):.10f}")
