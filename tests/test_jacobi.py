"""The Jacobi preconditioner (jaxdia.jacobi, jaxdia/_linalg/jacobi.py): as ``M`` of JAX's
Krylov solvers against ``spsolve`` (and their gradients against a dense solve), its values,
batches and errors."""

import jax
import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsl
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia

from .helpers import (
    convection_diffusion,
    dense_solution,
    helmholtz,
    laplacian_1d,
    poisson,
    relative_error,
    rhs,
)


@pytest.mark.parametrize(
    "name, S, solver",
    [
        ("poisson-2d", poisson(16, 2), jsl.cg),
        ("poisson-3d", poisson(7, 3), jsl.cg),
        ("convection-diffusion", convection_diffusion(14), jsl.gmres),
        ("convection-diffusion", convection_diffusion(14), jsl.bicgstab),
        ("helmholtz", helmholtz(12), jsl.gmres),
        ("helmholtz", helmholtz(12), jsl.bicgstab),
    ],
)
def test_iterative_solve_matches_spsolve(name, S, solver):
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0], S.dtype)
    expected = spla.spsolve(S.tocsc(), b)
    options = {"restart": 60} if solver is jsl.gmres else {}
    solve = jax.jit(lambda A, b, M: solver(A, b, M=M, tol=1e-10, maxiter=2000, **options)[0])
    x = solve(A, b, jaxdia.jacobi(A))
    assert relative_error(x, expected) < 1e-7, name


def test_jacobi_reduces_iterations():
    """A badly scaled SPD matrix: Jacobi fixes the scaling, so CG converges much faster."""
    n = 100
    scale = sp.diags_array(np.logspace(0, 3, n))
    S = (scale @ laplacian_1d(n) @ scale).todia()
    A, b = jaxdia.DiaMatrix.from_scipy(S), rhs(n)
    x_plain, _ = jsl.cg(A, b, tol=1e-10, maxiter=120)
    x_jacobi, _ = jsl.cg(A, b, M=jaxdia.jacobi(A), tol=1e-10, maxiter=120)
    expected = spla.spsolve(S.tocsc(), b)
    assert relative_error(x_jacobi, expected) < 1e-6
    assert relative_error(x_plain, expected) > 1e-2


@pytest.mark.parametrize(
    "S, solver",
    [
        (poisson(4, 2), jsl.cg),
        (convection_diffusion(4), jsl.gmres),
        (helmholtz(4), jsl.bicgstab),
    ],
)
def test_gradients_through_iterative_solve(S, solver):
    """grad of a loss of x = A^{-1} b w.r.t. A.data and b equals the dense solve's."""
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0], S.dtype, seed=1)
    weights = jnp.asarray(rhs(S.shape[0], seed=2))

    def loss(solve):
        def f(data, b):
            x = solve(data, b)
            return jnp.sum(weights * jnp.abs(x) ** 2)

        return jax.grad(f, argnums=(0, 1))(A.data, b)

    def iterative(data, b):
        matrix = jaxdia.DiaMatrix(data, A.offsets, A.shape)
        return solver(matrix, b, M=jaxdia.jacobi(matrix), tol=1e-13, atol=0.0, maxiter=500)[0]

    got = loss(iterative)
    expected = loss(lambda data, b: dense_solution(data, A.offsets, A.shape, b))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-7, atol=1e-9 * np.abs(e).max())


def test_jacobi_values_and_batches():
    A = jaxdia.diags([[1.0, 2.0], [2.0, 4.0, 8.0]], offsets=[1, 0])
    v = jnp.array([2.0, 4.0, 8.0])
    np.testing.assert_allclose(jaxdia.jacobi(A)(v), [1.0, 1.0, 1.0])
    batched = jaxdia.DiaMatrix(jnp.stack([A.data, 2 * A.data]), A.offsets, A.shape)
    np.testing.assert_allclose(jaxdia.jacobi(batched)(v), [[1.0] * 3, [0.5] * 3])
    M = jax.jit(jaxdia.jacobi)(A)  # a Partial is a pytree: it can be returned from jit
    np.testing.assert_allclose(jax.jit(lambda M, v: M(v))(M, v), [1.0, 1.0, 1.0])


def test_jacobi_errors():
    with pytest.raises(ValueError, match=r"0 at index 1\b"):
        jaxdia.jacobi(jaxdia.diags([[1.0, 0.0, 3.0]], offsets=[0]))
    with pytest.raises(ValueError, match="stores no main diagonal"):
        jaxdia.jacobi(jaxdia.diags([[1.0, 1.0]], offsets=[1], shape=(3, 3)))
    with pytest.raises(ValueError, match="square"):
        jaxdia.jacobi(jaxdia.eye(2, 3))
    with pytest.raises(TypeError, match="DiaMatrix"):
        jaxdia.jacobi(np.eye(3))
    # Under jit the diagonal is traced and cannot be checked: a zero gives inf.
    A = jaxdia.diags([[1.0, 0.0]], offsets=[0])
    assert np.isinf(jax.jit(lambda A: jaxdia.jacobi(A)(jnp.ones(2)))(A)[1])
