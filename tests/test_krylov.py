"""jaxdia.cg and jaxdia.bicgstab (jaxdia/_linalg/krylov.py): iteration counts against
SciPy's, solutions against ``spsolve`` and JAX's solvers, the reported ``info``, operators
given as functions, argument errors (with Chebyshev's: tests/test_chebyshev.py). The fused
variants: tests/test_krylov_variants.py."""

import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsl
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia

from .grids import GRID_2D, assert_solution, convection_diffusion, jump, poisson
from .helpers import rhs


def _scipy_iterations(solver, S, b, M, rtol):
    count = [0]

    def callback(_):
        count[0] += 1

    operator = spla.LinearOperator(S.shape, matvec=lambda v: np.asarray(M(v)))
    x, flag = solver(S, b, rtol=rtol, M=operator, callback=callback, maxiter=10 * S.shape[0])
    assert flag == 0
    return x, count[0]


def test_cg_matches_scipy():
    S = jump(GRID_2D)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0])
    for M in (jaxdia.multigrid(A, GRID_2D, max_coarse=4),):
        x, info = jaxdia.cg(A, b, M=M, rtol=1e-10)
        expected, iterations = _scipy_iterations(spla.cg, S, b, M, 1e-10)
        assert abs(int(info.iterations) - iterations) <= 1
        assert bool(info.converged)
        residual = np.linalg.norm(b - S @ np.asarray(x))
        np.testing.assert_allclose(float(info.residual_norm), residual, rtol=1e-3)
        assert residual <= 1e-10 * np.linalg.norm(b)
        assert_solution(x, spla.spsolve(S.tocsc(), b), 1e-7)


def test_bicgstab_matches_jax():
    S = convection_diffusion(15)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0])
    M = jaxdia.jacobi(A)
    x, info = jaxdia.bicgstab(A, b, M=M, rtol=1e-10)
    expected, _ = jsl.bicgstab(A, jnp.asarray(b), M=M, tol=1e-10)
    _, iterations = _scipy_iterations(spla.bicgstab, S, b, M, 1e-10)
    assert bool(info.converged) and abs(int(info.iterations) - iterations) <= 1
    np.testing.assert_allclose(np.asarray(x), np.asarray(expected), rtol=1e-8)


@pytest.mark.parametrize("solver", [jaxdia.cg, jaxdia.bicgstab])
def test_info_reports_non_convergence_and_trivial_cases(solver):
    S = poisson(GRID_2D)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0])
    x, info = solver(A, b, maxiter=3)
    assert int(info.iterations) == 3 and not bool(info.converged)
    np.testing.assert_allclose(
        float(info.residual_norm), np.linalg.norm(b - S @ np.asarray(x)), rtol=1e-10
    )
    exact = spla.spsolve(S.tocsc(), b)
    _, info = solver(A, b, x0=exact, rtol=1e-8)
    assert int(info.iterations) == 0 and bool(info.converged)
    x, info = solver(A, np.zeros_like(b))
    assert int(info.iterations) == 0 and bool(info.converged) and not np.any(np.asarray(x))
    _, info = solver(A, b, rtol=0.0, atol=1e3 * np.linalg.norm(b))
    assert int(info.iterations) == 0 and bool(info.converged)


def test_solvers_take_functions_and_complex_hermitian_matrices():
    S = poisson(GRID_2D).astype(np.complex128)
    S = (S + 0.5j * (sp.eye_array(S.shape[0], k=1) - sp.eye_array(S.shape[0], k=-1))).todia()
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0]) + 1j * rhs(S.shape[0], seed=1)
    x, info = jaxdia.cg(lambda v: A @ v, b, M=jaxdia.chebyshev(A, degree=3), rtol=1e-10)
    assert bool(info.converged)
    expected = spla.spsolve(S.tocsc(), b)
    assert np.linalg.norm(np.asarray(x) - expected) <= 1e-8 * np.linalg.norm(expected)
