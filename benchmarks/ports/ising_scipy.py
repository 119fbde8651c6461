"""Transverse-field Ising quench, SciPy original: the ground state of H(h0) by ``eigsh``,
then ``psi(t) = exp(-i H(h1) t) psi0`` on 101 times by ``expm_multiply``, and the
magnetization <X>(t). Operators built with ``kron`` chains. Prints a checksum."""

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

L, J, H0_FIELD, H1_FIELD = 12, 1.0, 0.5, 1.5
X = sp.csr_array([[0.0, 1.0], [1.0, 0.0]])
Z = sp.csr_array([[1.0, 0.0], [0.0, -1.0]])


def site(op, i):
    return sp.kron(sp.kron(sp.eye_array(2**i), op), sp.eye_array(2 ** (L - i - 1)))


ZZ = sum(site(Z, i) @ site(Z, i + 1) for i in range(L - 1))
MX = sum(site(X, i) for i in range(L))


def hamiltonian(h):
    return (-J * ZZ - h * MX).tocsr()


_, vectors = spla.eigsh(hamiltonian(H0_FIELD), k=1, which="SA")
psi0 = vectors[:, 0].astype(np.complex128)
psi = spla.expm_multiply(-1j * hamiltonian(H1_FIELD), psi0, start=0.0, stop=5.0, num=101)
magnetization = np.real(np.einsum("ti,ti->t", psi.conj(), (MX @ psi.T).T)) / L
print(f"checksum {magnetization.sum():.10f}")
