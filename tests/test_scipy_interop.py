"""SciPy's own solvers take a DiaMatrix through the LinearOperator protocol (``matvec``,
``rmatvec``, ``matmat``, ``rmatmat``, ``shape``, ``dtype``), with the same results as for
the same matrix as a ``dia_array``."""

import jax
import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsl
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia

N = 60


def laplacian(n=N, dtype=np.float64):
    S = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n), dtype=dtype).todia()
    return jaxdia.DiaMatrix.from_scipy(S), S


def nonsymmetric(n=N):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((4, n)) + np.array([[0.0], [4.0], [0.0], [0.0]])
    S = sp.dia_array((data, [-2, 0, 1, 3]), shape=(n, n))
    return jaxdia.DiaMatrix.from_scipy(S), S


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_protocol_matches_scipy(dtype):
    rng = np.random.default_rng(1)
    data = rng.standard_normal((3, 7)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal((3, 7))
    S = sp.dia_array((data, [-2, 0, 3]), shape=(5, 7))
    A = jaxdia.DiaMatrix.from_scipy(S)
    x, y = rng.standard_normal(7).astype(dtype), rng.standard_normal(5).astype(dtype)
    X, Y = rng.standard_normal((7, 3)).astype(dtype), rng.standard_normal((5, 3)).astype(dtype)
    tol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-12
    for got, expected in [
        (A.matvec(x), S @ x),
        (A.matvec(x[:, None]), S @ x[:, None]),
        (A.rmatvec(y), S.conj().T @ y),
        (A.matmat(X), S @ X),
        (A.rmatmat(Y), S.conj().T @ Y),
    ]:
        assert isinstance(got, np.ndarray) and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    operator = spla.aslinearoperator(A)
    assert operator.shape == (5, 7) and operator.dtype == A.dtype
    np.testing.assert_allclose(operator @ X, S @ X, rtol=tol, atol=tol)
    np.testing.assert_allclose(operator.H @ Y, S.conj().T @ Y, rtol=tol, atol=tol)


def test_calling_the_matrix_is_the_product_in_the_operands_kind():
    A, S = nonsymmetric()
    x = np.linspace(0.0, 1.0, N)
    y = A(x)
    assert isinstance(y, np.ndarray) and y.flags.writeable
    np.testing.assert_allclose(y, S @ x, rtol=1e-12)
    assert isinstance(A(jnp.asarray(x)), jax.Array)
    # JAX's solvers call a callable operator: under jit it sees tracers, as A @ x does.
    x_cg = jax.jit(lambda A, b: jsl.gmres(A, b, tol=1e-12)[0])(A, jnp.asarray(x))
    np.testing.assert_allclose(S @ np.asarray(x_cg), x, rtol=1e-8, atol=1e-8)


def test_protocol_errors():
    A = jaxdia.eye(3)
    with pytest.raises(ValueError, match=r"needs x of shape \(3,\) or \(3, k\)"):
        A.matvec(np.ones(4))
    with pytest.raises(ValueError, match="must be 2-D"):
        A.matmat(np.ones(3))
    batched = jaxdia.DiaMatrix(np.ones((2, 1, 3)), 0, (3, 3))
    with pytest.raises(ValueError, match="batch shape"):
        batched.matvec(np.ones(3))


@pytest.mark.parametrize("solver", [spla.cg, spla.minres, spla.gmres])
def test_scipy_krylov_solvers(solver):
    A, S = nonsymmetric() if solver is spla.gmres else laplacian()
    b = np.linspace(1.0, 2.0, N)
    x, info = solver(A, b, rtol=1e-10, maxiter=1000)
    x_ref, info_ref = solver(S, b, rtol=1e-10, maxiter=1000)
    assert info == info_ref == 0
    np.testing.assert_allclose(x, x_ref, rtol=1e-8, atol=1e-10)


def test_scipy_eigsh_svds_lobpcg():
    A, S = laplacian()
    w, _ = spla.eigsh(A, k=4, which="LA")
    w_ref, _ = spla.eigsh(S, k=4, which="LA")
    np.testing.assert_allclose(np.sort(w), np.sort(w_ref), rtol=1e-10)
    B, T = nonsymmetric()
    s = spla.svds(B, k=3, return_singular_vectors=False, random_state=0)
    s_ref = spla.svds(T, k=3, return_singular_vectors=False, random_state=0)
    np.testing.assert_allclose(np.sort(s), np.sort(s_ref), rtol=1e-10)
    X = np.random.default_rng(2).standard_normal((N, 3))
    w, _ = spla.lobpcg(A, X, largest=True, tol=1e-10, maxiter=500)  # it calls A(X)
    np.testing.assert_allclose(np.sort(w), np.sort(w_ref)[-3:], rtol=1e-8)


def test_scipy_onenormest_and_expm_multiply():
    B, T = nonsymmetric()
    estimates = []
    for operator in (B, T):
        np.random.seed(0)  # onenormest draws its random sign vectors from NumPy's global state
        estimates.append(spla.onenormest(operator))
    assert estimates[0] == pytest.approx(estimates[1], rel=1e-12)
    b = np.linspace(0.0, 1.0, N)
    expected = spla.expm_multiply(-0.1 * T, b)
    # SciPy's expm_multiply treats objects it does not know as dense arrays; through
    # aslinearoperator (with the exact trace) it stays sparse.
    got = spla.expm_multiply(spla.aslinearoperator(-0.1 * B), b, traceA=float((-0.1 * B).trace()))
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    np.testing.assert_allclose(spla.expm_multiply(-0.1 * B, b), expected, rtol=1e-10)
