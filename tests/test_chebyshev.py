"""The Chebyshev polynomial preconditioner (jaxdia.chebyshev, jaxdia/_linalg/chebyshev.py):
against the closed form of the Chebyshev polynomial on the eigenvalues of ``D^-1 A``; its
bounds, batches, jit and single precision; its errors, and the Krylov solvers' errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse.linalg as spla

import jaxdia

from .grids import GRID_2D, jump, operator_matrix, poisson
from .helpers import rhs


def _chebyshev_reference(S, degree, lower, upper):
    """``p(D^-1 A) D^-1`` from the closed form on the eigenvalues ``l`` of ``D^-1 A``:
    ``(1 - T_k(s(l)) / T_k(s(0))) / l`` with ``s(l) = (upper + lower - 2 l) / (upper -
    lower)``."""
    dense = S.toarray()
    d = np.sqrt(np.diag(dense))
    eigenvalues, vectors = np.linalg.eigh(dense / d[:, None] / d[None, :])
    coefficients = [0.0] * degree + [1.0]  # T_k

    def s(x):
        return (upper + lower - 2 * x) / (upper - lower)

    T = np.polynomial.chebyshev.chebval(s(eigenvalues), coefficients)
    q = (1 - T / np.polynomial.chebyshev.chebval(s(0.0), coefficients)) / eigenvalues
    return (vectors * q) @ vectors.T / d[:, None] / d[None, :]


@pytest.mark.parametrize("degree", [1, 2, 5, 8])
def test_chebyshev_is_the_chebyshev_polynomial(degree):
    S = jump((9, 10))
    A = jaxdia.DiaMatrix.from_scipy(S)
    M = jaxdia.chebyshev(A, degree=degree)
    dense = S.toarray()
    rho = np.max(np.abs(dense).sum(axis=1) / np.diag(dense))  # Gershgorin on D^-1 A
    np.testing.assert_allclose(float(M.upper), rho, rtol=1e-12)
    np.testing.assert_allclose(float(M.lower), rho / degree**2, rtol=1e-12)
    matrix = operator_matrix(M, S.shape[0])
    if degree == 1:  # lower == upper: the Jacobi preconditioner divided by rho
        expected = np.diag(1 / (rho * np.diag(dense)))
    else:
        expected = _chebyshev_reference(S, degree, float(M.lower), float(M.upper))
    np.testing.assert_allclose(matrix, expected, rtol=1e-8, atol=1e-10 * np.abs(expected).max())
    assert np.linalg.eigvalsh((matrix + matrix.T) / 2).min() > 0


def test_chebyshev_bounds_batches_and_jit():
    S = jump(GRID_2D)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0])
    M = jaxdia.chebyshev(A, degree=6, bounds=(0.05, 2.5))
    matrix = operator_matrix(M, S.shape[0])
    np.testing.assert_allclose(matrix, _chebyshev_reference(S, 6, 0.05, 2.5), rtol=1e-8, atol=1e-12)
    _, plain = jaxdia.cg(A, b, M=jaxdia.jacobi(A), rtol=1e-8)
    _, poly = jaxdia.cg(A, b, M=jaxdia.chebyshev(A, degree=6), rtol=1e-8)
    assert bool(poly.converged) and 3 * int(poly.iterations) < int(plain.iterations)
    # In single precision for a double-precision solve: the same iterations at 1e-8; at
    # 1e-10, within a few (how many depends on the compiler's rounding, e.g. fused
    # multiply-adds).
    for rtol, extra in ((1e-8, 1), (1e-10, 5)):
        M32 = jaxdia.chebyshev(A, degree=6, dtype=np.float32)
        x, single = jaxdia.cg(A, b, M=M32, rtol=rtol)
        _, double = jaxdia.cg(A, b, M=jaxdia.chebyshev(A, degree=6), rtol=rtol)
        assert x.dtype == np.float64 and bool(single.converged)
        exact = spla.spsolve(S.tocsc(), b)
        assert np.linalg.norm(x - exact) <= 100 * rtol * np.linalg.norm(exact)
        assert abs(int(single.iterations) - int(double.iterations)) <= extra
    batch = jaxdia.DiaMatrix(jnp.stack([A.data, 2 * A.data]), A.offsets, A.shape)
    Mb = jax.jit(lambda A: jaxdia.chebyshev(A, degree=6))(batch)
    assert Mb.lower.shape == (2,)
    np.testing.assert_allclose(
        np.asarray(Mb(np.stack([b, b]))[1]) * 2, np.asarray(jaxdia.chebyshev(A, 6)(b)), rtol=1e-10
    )


def test_chebyshev_and_solver_errors():
    A = jaxdia.DiaMatrix.from_scipy(poisson(GRID_2D))
    with pytest.raises(TypeError, match="chebyshev: A must be a jaxdia.DiaMatrix"):
        jaxdia.chebyshev(np.eye(3))
    with pytest.raises(ValueError, match="degree must be >= 1"):
        jaxdia.chebyshev(A, degree=0)
    with pytest.raises(ValueError, match="0 < lower < upper"):
        jaxdia.chebyshev(A, bounds=(2.0, 1.0))
    with pytest.raises(TypeError, match="bounds must be a pair"):
        jaxdia.chebyshev(A, bounds=1.0)
    with pytest.raises(TypeError, match="dtype must be a float dtype for A of dtype float64"):
        jaxdia.chebyshev(A, dtype=np.int32)
    with pytest.raises(ValueError, match="chebyshev: A's diagonal must be nonzero"):
        jaxdia.chebyshev(A.with_diagonal(np.zeros(240)))
    b = np.ones(240)
    for solver in (jaxdia.cg, jaxdia.bicgstab):
        name = solver.__name__
        with pytest.raises(TypeError, match=f"{name}: A must be a jaxdia.DiaMatrix"):
            solver("A", b)
        with pytest.raises(ValueError, match=rf"{name}: b must have shape \(240,\)"):
            solver(A, np.ones(239))
        with pytest.raises(ValueError, match=rf"{name}: x0 must have shape"):
            solver(A, b, x0=np.ones(3))
        with pytest.raises(TypeError, match=f"{name}: M must be a jaxdia.DiaMatrix"):
            solver(A, b, M="jacobi")
        with pytest.raises(ValueError, match=f"{name}: rtol must be >= 0"):
            solver(A, b, rtol=-1.0)
        with pytest.raises(ValueError, match=f"{name}: maxiter must be >= 0"):
            solver(A, b, maxiter=-1)
        with pytest.raises(ValueError, match="must be square"):
            solver(jaxdia.DiaMatrix(A.data, A.offsets, (240, 241)), b)
