"""What a SciPy port hits (issue 32): jaxdia's preconditioners and factors as SciPy's
``M=`` (the LinearOperator protocol), SciPy functions that need a SciPy matrix, SciPy's
shift-invert ``eigsh``; the ``A * u`` trap of ``dia_matrix`` code; multigrid on complex
matrices."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia
from jaxdia._linalg import krylov


def laplacian_1d(n=63, dtype=np.float64):
    return jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n), dtype=dtype)


# -- jaxdia's preconditioners and factors as SciPy's M= -------------------------------------


def test_preconditioners_and_factors_are_scipy_preconditioners():
    A = laplacian_1d()
    S = A.to_scipy()
    b = np.linspace(1.0, 2.0, 63)
    iterations = {}
    preconditioners = {
        "none": None,
        "jacobi": jaxdia.jacobi(A),
        "chebyshev": jaxdia.chebyshev(A, 4),
        "multigrid": jaxdia.multigrid(A, (63,), max_coarse=7),
        "lu": jaxdia.lu_factor(A),
        "cholesky": jaxdia.cho_factor(A),
    }
    for name, M in preconditioners.items():
        count = []
        x, info = spla.cg(S, b, M=M, rtol=1e-10, maxiter=500, callback=count.append)
        assert info == 0, name
        assert np.linalg.norm(S @ x - b) <= 1e-9 * np.linalg.norm(b), name
        iterations[name] = len(count)
        if M is None:
            continue
        operator = spla.aslinearoperator(M)
        assert operator.shape == (63, 63) and operator.dtype == np.float64
        v = np.cos(np.arange(63.0))
        y = M.matvec(v)
        assert isinstance(y, np.ndarray) and y.flags.writeable and y.dtype == np.float64
        expected = M.solve(jnp.asarray(v)) if name in ("lu", "cholesky") else M(jnp.asarray(v))
        np.testing.assert_allclose(y, expected, rtol=1e-13)
        V = np.stack([v, 2 * v], axis=1)
        np.testing.assert_allclose(M.matmat(V), np.stack([y, 2 * y], axis=1), rtol=1e-13)
    assert iterations["lu"] == iterations["cholesky"] == 1
    assert iterations["multigrid"] < iterations["chebyshev"] < iterations["none"]


def test_the_adjoint_protocol_is_the_adjoint():
    rng = np.random.default_rng(0)
    n = 12
    data = rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n))
    data[1] += 6
    A = jaxdia.DiaMatrix(data, (-1, 0, 1), (n, n))  # complex, not Hermitian
    v = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    w = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    for M in (jaxdia.jacobi(A), jaxdia.chebyshev(A, 3), jaxdia.lu_factor(A), A):
        np.testing.assert_allclose(np.vdot(w, M.matvec(v)), np.vdot(M.rmatvec(w), v), rtol=1e-12)
        np.testing.assert_allclose(M.rmatmat(w[:, None])[:, 0], M.rmatvec(w), rtol=1e-13)
    H = A @ A.H  # Hermitian positive definite: its Cholesky factor's adjoint is itself
    c = jaxdia.cho_factor(H)
    np.testing.assert_allclose(c.rmatvec(v), c.matvec(v), rtol=1e-12)
    np.testing.assert_allclose(H.matvec(c.matvec(v)), v, rtol=1e-10)


def test_protocol_errors_name_the_operator():
    A = laplacian_1d(15)
    M = jaxdia.multigrid(A, (15,), max_coarse=3)
    with pytest.raises(NotImplementedError, match="adjoint of a V-cycle"):
        M.rmatvec(np.ones(15))
    with pytest.raises(ValueError, match=r"Jacobi.matvec: Jacobi of shape \(15, 15\) needs x"):
        jaxdia.jacobi(A).matvec(np.ones(14))
    with pytest.raises(ValueError, match="BandedLU.matmat: X must be 2-D"):
        jaxdia.lu_factor(A).matmat(np.ones(15))
    batched = jaxdia.DiaMatrix(np.ones((2, 1, 3)), 0, (3, 3))
    with pytest.raises(ValueError, match="Jacobi.matvec: SciPy's LinearOperator is one operator"):
        jaxdia.jacobi(batched).matvec(np.ones(3))


# -- SciPy functions that need a SciPy matrix -----------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda A, b: spla.spsolve(A, b),
        lambda A, b: spla.splu(A),
        lambda A, b: spla.factorized(A),
        lambda A, b: spla.spilu(A),
        lambda A, b: spla.expm(A),
    ],
    ids=["spsolve", "splu", "factorized", "spilu", "expm"],
)
def test_scipy_functions_that_need_a_scipy_matrix_say_to_scipy(call):
    A = laplacian_1d(8)
    b = np.ones(8)
    with pytest.raises((ValueError, TypeError)) as raised, warnings.catch_warnings():
        warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
        call(A, b)
    # SciPy's own "unrecognized csc_array constructor input" is caused by np.asarray(A).
    message = str(raised.value.__cause__ or raised.value)
    assert "take A.to_scipy()" in message and "jaxdia.solve_banded" in message
    call(A.to_scipy().tocsc(), b)  # what the message says works


def test_scipy_shift_invert_eigsh_with_a_jaxdia_factor_as_OPinv():
    # Given a DiaMatrix, SciPy's eigsh(A, sigma=s) solves each step with GMRES through
    # matvec (IterOpInv): passing the factor of A - s I (or A.to_scipy()) factors once.
    n, sigma = 150, 0.05
    A = laplacian_1d(n)
    expected = spla.eigsh(A.to_scipy(), k=3, sigma=sigma, return_eigenvectors=False)
    factor = jaxdia.lu_factor(A - sigma * jaxdia.eye(n, dtype=A.dtype))
    got = spla.eigsh(A, k=3, sigma=sigma, OPinv=factor, return_eigenvectors=False)
    np.testing.assert_allclose(np.sort(got), np.sort(expected), rtol=1e-12)


# -- the A * u trap ---------------------------------------------------------------------------


def test_elementwise_products_with_dense_operands_stay_dia_as_scipy():
    rng = np.random.default_rng(3)
    A = jaxdia.DiaMatrix(rng.standard_normal((3, 7)), (-1, 0, 2), (5, 7))
    S = A.to_scipy()
    for u in (
        rng.standard_normal(7),
        rng.standard_normal((1, 7)),
        rng.standard_normal((5, 1)),
        rng.standard_normal((5, 7)),
    ):
        for product, expected in ((A * u, S * u), (u * A, u * S), (A.multiply(u), S.multiply(u))):
            assert isinstance(product, jaxdia.DiaMatrix) and sp.issparse(expected)
            assert product.offsets == A.offsets and product.data.shape == A.data.shape
            np.testing.assert_allclose(product.toarray(), expected.toarray(), rtol=1e-14)


def test_a_vector_spread_over_a_matrix_raises_with_the_matmul_hint():
    # dia_matrix code: u_next = u + dt * (A * u) is a product there; with dia_array (and
    # jaxdia) A * u is an n x n matrix, and adding u to it a dense n x n array.
    A = laplacian_1d(10)
    u = np.linspace(0.0, 1.0, 10)
    scipy_sum = u + 0.1 * (A.to_scipy() * u)
    assert isinstance(scipy_sum, np.ndarray) and scipy_sum.shape == (10, 10)  # SciPy densifies
    for spread in (lambda: u + 0.1 * (A * u), lambda: A - u[:, None], lambda: jnp.asarray(u) + A):
        with pytest.raises(ValueError, match=r"would broadcast over all 10 x 10 entries.*A @ u"):
            spread()
    np.testing.assert_allclose(u + 0.1 * (A @ u), u + 0.1 * (A.to_scipy() @ u), rtol=1e-14)
    X = np.ones((10, 10))
    np.testing.assert_allclose(A + X, A.to_scipy() + X, rtol=1e-14)  # a full X: dense, as SciPy


# -- multigrid on complex matrices ----------------------------------------------------------


def test_complex_multigrid():
    n = 31
    L = laplacian_1d(n).to_scipy().tocsr()
    I = sp.eye(n, format="csr")
    rng = np.random.default_rng(4)
    b = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    # A Hermitian positive definite matrix (a real Laplacian stored as complex),
    # Crank-Nicolson's I + i dt/2 L and a complex-shifted Laplacian (both complex
    # symmetric): one structure, so one compiled hierarchy and loop for the three.
    for S in (L.astype(np.complex128), I + 0.5j * L, L + (1 + 2j) * I):
        A = jaxdia.DiaMatrix.from_scipy(S.todia())
        M = jaxdia.multigrid(A, (n,), max_coarse=3)
        assert M.smoother == "jacobi" and M.dtype == np.complex128 and len(M.levels) == 4
        x, info = jaxdia.bicgstab(A, b, M=M, rtol=1e-10)
        assert bool(info.converged) and int(info.iterations) <= 6
        np.testing.assert_allclose(x, spla.spsolve(S.tocsc(), b), rtol=1e-8, atol=1e-10)
    assert krylov.large_program(M, jnp.asarray(b))  # BiCGStab applied it at one site


def test_complex_multigrid_refuses_the_chebyshev_smoother_and_mixed_dtypes():
    A = laplacian_1d(15).astype(np.complex64)
    with pytest.raises(ValueError, match="smoother='jacobi'"):
        jaxdia.multigrid(A, (15,), smoother="chebyshev")
    with pytest.raises(TypeError, match="dtype must be a complex dtype"):
        jaxdia.multigrid(A, (15,), dtype=np.float32)
    with pytest.raises(TypeError, match="dtype must be a float dtype"):
        jaxdia.multigrid(laplacian_1d(15), (15,), dtype=np.complex128)
    with pytest.raises(TypeError, match="complex128, got float16"):
        jaxdia.multigrid(laplacian_1d(15).astype(np.float16), (15,))
