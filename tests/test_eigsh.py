"""jaxdia.eigsh against scipy.sparse.linalg.eigsh (and dense eigh), under jit, vmap, grad."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, settings, strategies as st
from jax.test_util import check_grads

import jaxdia
from jaxdia._geometry import in_bounds
from jaxdia._linalg import eigsh as eigsh_module, eigsh_checks

from .helpers import dense_f64, examples

# -- problems --------------------------------------------------------------------------------

N = 150  # above eigsh_module.DENSE_UP_TO: the Lanczos path


def hermitian_band(n, upper=(0, 1, 3), complex_=False, seed=0, scale=1.0):
    """A random Hermitian band: random diagonals ``upper`` and their conjugate transposes."""
    rng = np.random.default_rng(seed)
    S = sp.dia_array((n, n), dtype=np.complex128 if complex_ else np.float64)
    for k in upper:
        values = rng.standard_normal(n - k) * scale
        if complex_ and k:
            values = values + 1j * rng.standard_normal(n - k) * scale
        S = S + sp.diags_array(values, offsets=k, shape=(n, n))
        if k:
            S = S + sp.diags_array(np.conj(values), offsets=-k, shape=(n, n))
    return S.todia()


def nan_padded(S):
    """The DiaMatrix of ``S`` with NaN in its padding slots (which must never be read)."""
    A = jaxdia.DiaMatrix.from_scipy(S)
    return jaxdia.DiaMatrix(
        jnp.where(in_bounds(A.offsets, A.shape), A.data, jnp.nan), A.offsets, A.shape
    )


def harmonic_oscillator(n, L=10.0):
    """Finite differences of ``-1/2 d^2/dx^2 + x^2 / 2`` on ``[-L, L]``."""
    x = np.linspace(-L, L, n)
    dx = x[1] - x[0]
    off = np.full(n - 1, -0.5 / dx**2)
    return sp.diags_array([off, 1 / dx**2 + x**2 / 2, off], offsets=[-1, 0, 1]).todia()


def laplacian_2d(N):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    return sp.kronsum(T, T, format="dia")


def check_pairs(A, w, v, expected, rtol=1e-10):
    """Eigenvalues as SciPy's (relative to ||A||), eigenvectors normalized with small
    residuals."""
    w, v = np.asarray(w), np.asarray(v)
    dense = dense_f64(A)
    scale = np.abs(np.linalg.eigvalsh(dense)).max()
    np.testing.assert_allclose(w, expected, rtol=0, atol=rtol * scale)
    assert np.all(np.diff(w) >= 0), "eigenvalues must be ascending"
    np.testing.assert_allclose(np.linalg.norm(v, axis=0), 1, atol=1e-10)
    residual = np.linalg.norm(dense @ v - v * w, axis=0)
    assert residual.max() <= 1e-8 * scale, residual


# -- against SciPy ---------------------------------------------------------------------------


def selected(S, k, which, sigma=None):
    """The eigenvalues eigsh should return, from the dense spectrum (ascending)."""
    evals = np.linalg.eigvalsh(S.toarray())
    keys = evals if sigma is None else 1 / (evals - sigma)
    order = {
        "LM": np.argsort(-np.abs(keys), kind="stable"),
        "SM": np.argsort(np.abs(keys), kind="stable"),
        "LA": np.argsort(-keys, kind="stable"),
        "SA": np.argsort(keys, kind="stable"),
    }
    if which == "BE":
        ascending = np.argsort(keys, kind="stable")
        wanted = np.concatenate([ascending[len(keys) - (k - k // 2) :], ascending[: k // 2]])
    else:
        wanted = order[which][:k]
    return np.sort(evals[wanted])


@pytest.mark.parametrize("which", ["LM", "SM", "LA", "SA", "BE"])
def test_matches_scipy(which):
    S = hermitian_band(N)
    w, v = jaxdia.eigsh(nan_padded(S), k=3, which=which)
    check_pairs(nan_padded(S), w, v, selected(S, 3, which))
    if which != "SM":  # SciPy's ARPACK does not converge for SM here (1500 iterations)
        expected = spla.eigsh(S.tocsr(), k=3, which=which, return_eigenvectors=False)
        check_pairs(nan_padded(S), w, v, np.sort(expected))


@pytest.mark.parametrize("which", ["LM", "SA"])
def test_shift_invert_matches_scipy(which):
    S = hermitian_band(N, seed=1)
    w, v = jaxdia.eigsh(nan_padded(S), k=3, sigma=0.3, which=which)
    expected = spla.eigsh(S.tocsc(), k=3, sigma=0.3, which=which, return_eigenvectors=False)
    check_pairs(nan_padded(S), w, v, np.sort(expected))


@pytest.mark.parametrize("sigma", [None, -0.2])
def test_complex_hermitian_matches_scipy(sigma):
    S = hermitian_band(N, upper=(0, 2), complex_=True, seed=2)
    which = "SA" if sigma is None else "LM"
    w, v = jaxdia.eigsh(nan_padded(S), k=3, sigma=sigma, which=which)
    assert w.dtype == np.float64 and v.dtype == np.complex128
    expected = np.linalg.eigvalsh(S.toarray())
    if sigma is None:
        expected = expected[:3]
    else:
        expected = np.sort(expected[np.argsort(np.abs(expected - sigma))[:3]])
    check_pairs(nan_padded(S), w, v, expected)


@pytest.mark.parametrize(
    "which, sigma", [("LM", None), ("SM", 0.5), ("LA", None), ("SA", 0.5), ("BE", None)]
)
def test_dense_path_matches_scipy(which, sigma):
    """Small matrices (n <= 128) and k close to n go through jnp.linalg.eigh."""
    n, k = 40, 25
    S = hermitian_band(n, seed=3)
    w, v = jaxdia.eigsh(nan_padded(S), k=k, sigma=sigma, which=which)
    solver_args = {"sigma": sigma, "which": which, "return_eigenvectors": False}
    expected = spla.eigsh(S.tocsc() if sigma is not None else S.tocsr(), k=k, **solver_args)
    check_pairs(nan_padded(S), w, v, np.sort(expected))


@settings(max_examples=examples(8))
@given(st.integers(0, 2**31), st.sampled_from([(None, False), (0.1, True)]))
def test_random_hermitian_bands(seed, case):
    sigma, complex_ = case
    S = hermitian_band(N, upper=(0, 2) if complex_ else (0, 1, 3), complex_=complex_, seed=seed)
    w, v = jaxdia.eigsh(nan_padded(S), k=3, sigma=sigma, which="LM")
    expected = np.linalg.eigvalsh(S.toarray())
    key = np.abs(expected) if sigma is None else -np.abs(expected - sigma)
    check_pairs(nan_padded(S), w, v, np.sort(expected[np.argsort(key)[::-1][:3]]))


@pytest.mark.parametrize("mode", [{"which": "SA"}, {"sigma": 0.0}])
def test_harmonic_oscillator_matches_scipy(mode):
    """The 20 lowest levels, n = 2048: agreement with SciPy to 1e-10 and with n + 1/2."""
    S = harmonic_oscillator(2048)
    w, v = jaxdia.eigsh(jaxdia.DiaMatrix.from_scipy(S), k=20, **mode)
    expected = np.sort(spla.eigsh(S.tocsc(), k=20, return_eigenvectors=False, **mode))
    np.testing.assert_allclose(w, expected, rtol=1e-10, atol=0)
    np.testing.assert_allclose(w, np.arange(20) + 0.5, atol=0.02)  # discretization error
    residual = np.linalg.norm(S @ np.asarray(v) - np.asarray(v) * np.asarray(w), axis=0)
    assert residual.max() < 1e-8


@pytest.mark.parametrize("mode", [{"which": "SA"}, {"sigma": 0.0}])
def test_laplacian_2d_matches_scipy(mode):
    """Its eigenvalues are double: a single-vector Krylov method must still find both."""
    S = laplacian_2d(40)
    w, _ = jaxdia.eigsh(jaxdia.DiaMatrix.from_scipy(S), k=12, **mode)
    expected = np.sort(spla.eigsh(S.tocsc(), k=12, return_eigenvectors=False, **mode))
    np.testing.assert_allclose(w, expected, rtol=1e-10, atol=0)
    N_ = 40
    exact = np.add.outer(*[2 - 2 * np.cos(np.arange(1, N_ + 1) * np.pi / (N_ + 1))] * 2)
    np.testing.assert_allclose(w, np.sort(exact.ravel())[:12], rtol=1e-10)


def test_float32():
    S = hermitian_band(N, seed=4)
    A = jaxdia.DiaMatrix.from_scipy(S).astype(np.float32)
    w, v = jaxdia.eigsh(A, k=3, which="LA")
    assert w.dtype == np.float32 and v.dtype == np.float32
    expected = np.sort(np.linalg.eigvalsh(S.toarray()))[-3:]
    np.testing.assert_allclose(w, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


# -- transformations -------------------------------------------------------------------------


def test_jit_and_vmap_over_a_batch():
    matrices = [hermitian_band(N, seed=s) for s in (5, 6, 7)]
    data = jnp.stack([nan_padded(S).data for S in matrices])
    offsets = nan_padded(matrices[0]).offsets
    batch = jaxdia.DiaMatrix(data, offsets, (N, N))
    w, v = jax.jit(lambda A: jaxdia.eigsh(A, k=3, which="SA"))(batch)
    w_mapped, _ = jax.vmap(
        lambda d: jaxdia.eigsh(jaxdia.DiaMatrix(d, offsets, (N, N)), k=3, which="SA")
    )(data)
    assert w.shape == (3, 3) and v.shape == (3, N, 3)
    for i, S in enumerate(matrices):
        expected = np.sort(np.linalg.eigvalsh(S.toarray()))[:3]
        check_pairs(nan_padded(S), w[i], v[i], expected)
        np.testing.assert_allclose(w_mapped[i], expected, atol=1e-10 * abs(expected).max())


def test_v0_and_info():
    S = hermitian_band(N, seed=8)
    A = nan_padded(S)
    v0 = np.random.default_rng(0).standard_normal(N)
    w, v, info = jaxdia.eigsh(A, k=3, which="LA", v0=v0, ncv=12, return_info=True)
    assert isinstance(info, eigsh_module.EigshInfo)
    assert bool(info.converged) and int(info.nconv) == 3
    assert int(info.iterations) >= 1 and int(info.matvecs) >= 12
    expected_residuals = np.linalg.norm(S @ np.asarray(v) - np.asarray(v) * np.asarray(w), axis=0)
    np.testing.assert_allclose(info.residuals, expected_residuals, rtol=1e-6, atol=1e-13)
    np.testing.assert_allclose(w, np.sort(np.linalg.eigvalsh(S.toarray()))[-3:], atol=1e-10)
    only_w = jaxdia.eigsh(A, k=3, which="LA", return_eigenvectors=False)
    np.testing.assert_allclose(only_w, w, atol=1e-10)


def test_invariant_subspaces_are_left():
    """A start vector in a small invariant subspace (a 5 x 5 block, uncoupled from the
    rest): the Krylov space stops growing at the 5th step, and Lanczos goes on in a new
    direction orthogonal to the basis, which reaches the other block, where the wanted
    eigenvalues are."""
    n, small = 300, 5
    main = np.where(np.arange(n) < small, 2.0, 10.0)
    off = np.where(np.arange(n - 1) == small - 1, 0.0, -1.0)  # no coupling between blocks
    S = sp.diags_array([off, main, off], offsets=[-1, 0, 1])
    v0 = np.where(np.arange(n) < small, 1.0, 0.0)
    A = jaxdia.DiaMatrix.from_scipy(S.todia())
    w, v, info = jaxdia.eigsh(A, k=3, which="LA", v0=v0, return_info=True)
    assert bool(info.converged)
    check_pairs(A, w, v, np.sort(np.linalg.eigvalsh(S.toarray()))[-3:])


def test_not_converged_is_reported():
    S = harmonic_oscillator(600)
    A = jaxdia.DiaMatrix.from_scipy(S)
    w, info = jaxdia.eigsh(
        A, k=6, which="SA", maxiter=1, return_eigenvectors=False, return_info=True
    )
    assert not bool(info.converged) and int(info.iterations) == 1
    with pytest.raises(spla.ArpackNoConvergence, match="no convergence") as raised:
        jaxdia.eigsh(A, k=6, which="SA", maxiter=1)
    error = raised.value
    assert error.eigenvalues.shape == (int(info.nconv),)
    assert error.eigenvectors.shape == (600, int(info.nconv))
    assert not bool(error.info.converged)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, jit_info = jax.jit(
            lambda A: jaxdia.eigsh(A, k=6, which="SA", maxiter=1, return_info=True)
        )(A)  # no eager check: the report says it
    assert not bool(jit_info.converged)


def test_shift_at_an_eigenvalue_reports_inaccurate_pairs():
    """sigma an eigenvalue to rounding (not exactly: no LinAlgError): ``(A - sigma I)^-1``
    has a norm near 1 / eps, the Krylov relation's rounding swamps the pairs away from
    sigma, and their estimates passed the test with true residuals of 1e-3 (reported
    converged). Now either a pair's true residual passes the test, or converged is
    false."""
    S = hermitian_band(150, upper=(0, 1, 2), seed=0)
    evals = np.linalg.eigvalsh(S.toarray())
    sigma = float(evals[70])
    A = nan_padded(S)

    w, v, info = jaxdia.eigsh(A, k=3, which="SA", sigma=sigma, maxiter=300, return_info=True)
    dense = S.toarray()
    residual = np.linalg.norm(dense @ np.asarray(v) - np.asarray(v) * np.asarray(w), axis=0)
    np.testing.assert_allclose(info.residuals, residual, rtol=1e-6, atol=1e-12)
    scale = np.abs(evals).max()
    accurate = residual <= 1e-10 * scale
    assert int(info.nconv) <= int(np.sum(accurate))
    if bool(info.converged):
        assert np.all(accurate), residual
        np.testing.assert_allclose(w, selected(S, 3, "SA", sigma), atol=1e-9 * scale)


# -- derivatives -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, sigma", [(N, None), (N, 0.4), pytest.param(30, None, marks=pytest.mark.full)]
)
def test_eigenvalue_gradient(n, sigma):
    S = hermitian_band(n, seed=9)
    A = nan_padded(S)
    weights = jnp.arange(1.0, 4.0)

    def loss(data):
        w = jaxdia.eigsh(
            jaxdia.DiaMatrix(data, A.offsets, A.shape),
            k=3,
            sigma=sigma,
            which="LM",
            return_eigenvectors=False,
        )
        return jnp.sum(weights * jnp.sort(w))  # SciPy orders LM by magnitude without v

    clean = jnp.where(in_bounds(A.offsets, A.shape), A.data, 0)
    # Finite differences need symmetric perturbations: parametrize A = U + U^T by the
    # upper diagonals U.
    upper = tuple(k for k in A.offsets if k >= 0)
    U = jaxdia.DiaMatrix(clean[len(A.offsets) - len(upper) :], upper, A.shape)
    U = U.with_diagonal(U.diagonal() / 2)

    def symmetric_loss(values):
        U_ = jaxdia.DiaMatrix(values, upper, A.shape)
        return loss(jaxdia.align(U_ + U_.T, A)[0].data)

    check_grads(symmetric_loss, (U.data,), order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)

    def dense_loss(data):  # the same eigenvalues from jnp.linalg.eigh of the dense matrix
        dense = jaxdia.DiaMatrix(data, A.offsets, A.shape).todense()
        evals = jnp.linalg.eigh(dense)[0]
        key = jnp.abs(evals) if sigma is None else 1 / jnp.abs(evals - sigma)
        return jnp.sum(weights * jnp.sort(evals[jnp.argsort(-key)[:3]]))

    grad = jax.grad(loss)(A.data)
    expected = jax.grad(dense_loss)(clean)
    inside = in_bounds(A.offsets, A.shape)
    np.testing.assert_allclose(np.where(inside, grad, 0), expected, atol=1e-9)
    assert np.all(np.asarray(grad)[~np.asarray(inside)] == 0)  # padding gets no gradient


def test_complex_hermitian_gradient_is_that_of_the_hermitian_part():
    S = hermitian_band(N, upper=(0, 2), complex_=True, seed=10)
    A = nan_padded(S)
    clean = jnp.where(in_bounds(A.offsets, A.shape), A.data, 0)

    def loss(data):
        return jnp.sum(
            jaxdia.eigsh(
                jaxdia.DiaMatrix(data, A.offsets, A.shape),
                k=3,
                which="SA",
                return_eigenvectors=False,
            )
        )

    def dense_loss(data):
        return jnp.sum(jnp.linalg.eigh(jaxdia.DiaMatrix(data, A.offsets, A.shape).todense())[0][:3])

    np.testing.assert_allclose(jax.grad(loss)(clean), jax.grad(dense_loss)(clean), atol=1e-9)
    tangent = jnp.asarray(np.random.default_rng(1).standard_normal(clean.shape) + 0j)
    _, t = jax.jvp(loss, (clean,), (tangent,))
    _, t_dense = jax.jvp(dense_loss, (clean,), (tangent,))
    np.testing.assert_allclose(t, t_dense, atol=1e-9)


def test_eigenvector_derivatives_are_nan():
    S = hermitian_band(N, seed=11)
    A = nan_padded(S)

    def eigenvector_loss(data):
        _, v = jaxdia.eigsh(jaxdia.DiaMatrix(data, A.offsets, A.shape), k=3, which="LA")
        return jnp.sum(v**2 * jnp.arange(N)[:, None])

    def eigenvalue_loss(data):  # eigenvectors returned but unused: a finite gradient
        w, _ = jaxdia.eigsh(jaxdia.DiaMatrix(data, A.offsets, A.shape), k=3, which="LA")
        return jnp.sum(w)

    assert np.all(np.isnan(jax.grad(eigenvector_loss)(A.data)))
    assert np.all(np.isfinite(jax.grad(eigenvalue_loss)(A.data)))


# -- errors ----------------------------------------------------------------------------------


def test_errors():
    S = hermitian_band(N)
    A = jaxdia.DiaMatrix.from_scipy(S)
    with pytest.raises(TypeError, match="eigsh: A must be a jaxdia.DiaMatrix"):
        jaxdia.eigsh("A")
    with pytest.raises(ValueError, match="eigsh: A must be square"):
        jaxdia.eigsh(jaxdia.eye(5, 6))
    with pytest.raises(ValueError, match="which must be one of"):
        jaxdia.eigsh(A, which="XX")
    with pytest.raises(ValueError, match="k must be a positive int"):
        jaxdia.eigsh(A, k=0)
    with pytest.raises(TypeError, match="k must be smaller than n"):
        jaxdia.eigsh(A, k=N)
    with pytest.raises(TypeError, match="k must be static"):
        jax.jit(lambda k: jaxdia.eigsh(A, k=k))(3)
    with pytest.raises(ValueError, match="ncv must satisfy"):
        jaxdia.eigsh(A, k=5, ncv=5)
    with pytest.raises(ValueError, match="maxiter must be a positive int"):
        jaxdia.eigsh(A, maxiter=0)
    with pytest.raises(ValueError, match="tol must be >= 0"):
        jaxdia.eigsh(A, tol=-1.0)
    with pytest.raises(ValueError, match="mode must be one of normal, buckling, cayley"):
        jaxdia.eigsh(A, sigma=0.0, mode="shift")
    with pytest.raises(ValueError, match=r"M must be 150 x 150 as A is, got size 5"):
        jaxdia.eigsh(A, M=jaxdia.eye(5))
    with pytest.raises(ValueError, match="Minv should not be specified with M = None"):
        jaxdia.eigsh(A, Minv=A)
    with pytest.raises(ValueError, match="Minv should not be specified when sigma"):
        jaxdia.eigsh(A, M=A, Minv=A, sigma=1.0)
    with pytest.raises(ValueError, match="OPinv should not be specified with sigma = None"):
        jaxdia.eigsh(A, OPinv=A)
    with pytest.raises(ValueError, match="M must be symmetric"):
        jaxdia.eigsh(A, M=np.triu(np.ones((N, N))))
    with pytest.raises(TypeError, match="sigma must be real"):
        jaxdia.eigsh(A, sigma=1j)
    with pytest.raises(ValueError, match=r"v0 must have shape \(150,\)"):
        jaxdia.eigsh(A, v0=np.ones(3))
    with pytest.raises(TypeError, match="v0 is complex"):
        jaxdia.eigsh(A, v0=np.ones(N) * 1j)
    with pytest.raises(ValueError, match="A must be symmetric"):
        jaxdia.eigsh(jaxdia.diags([1.0, 2.0, 3.0], offsets=[-1, 0, 1], shape=(N, N)))
    with pytest.raises(ValueError, match="A must be Hermitian"):
        jaxdia.eigsh(jaxdia.diags([1j, 2.0, 1j], offsets=[-1, 0, 1], shape=(N, N)))
    with pytest.raises(TypeError, match="return_info must be a Python bool"):
        jaxdia.eigsh(A, return_info=None)
    with pytest.raises(TypeError, match="ncv must be static"):
        jax.jit(lambda ncv: jaxdia.eigsh(A, ncv=ncv))(30)


def test_cpu_lanczos_program_structure():
    """What keeps eigsh's compiled program small on CPU: each Lanczos step
    orthogonalizes in one BLAS host call (gmres's Gram-Schmidt), the thick restart runs
    after every sweep (no conditional: after the last, V's first rows are the Ritz
    vectors returned), and LAPACK reads T's upper triangle as it is (no symmetrization)."""
    A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(300, 300))
    text = jax.jit(lambda A: jaxdia.eigsh(A, k=4, which="SA")).lower(A).as_text()
    assert text.count("custom_call @jaxdia_lapack_gram_schmidt") == 1
    assert "stablehlo.case" not in text
    assert "uplo = 85" in text  # ord("U")
    w, v = jaxdia.eigsh(A, k=4, which="SA")
    exact = 2 - 2 * np.cos(np.arange(1, 5) * np.pi / 301)
    np.testing.assert_allclose(np.asarray(w), exact, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(A @ v), np.asarray(v * w), atol=1e-9)


@settings(max_examples=examples(40), deadline=None)
@given(
    n=st.integers(1, 12),
    offsets=st.lists(st.integers(-14, 14), min_size=1, max_size=6, unique=True),
    batch=st.sampled_from([(), (2,)]),
    complex_=st.booleans(),
    symmetric=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_hermitian_check_on_the_host_matches_scipy(n, offsets, batch, complex_, symmetric, seed):
    """The check of a concrete A (NumPy, one slice per diagonal: no SciPy to import)
    finds max|A - A^H| and max|A| as SciPy's sparse arithmetic does, with offsets
    outside the matrix, missing mirror diagonals and batches."""
    offsets = tuple(sorted(offsets))
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((*batch, len(offsets), n))
    if complex_:
        data = data + 1j * rng.standard_normal(data.shape)
    host = np.where(in_bounds(offsets, (n, n), host=True), data, 0)
    if symmetric:  # A + A^H, stored on the union of the offsets and their mirrors
        S = sp.dia_array((host.reshape(-1, len(offsets), n)[0], np.array(offsets)), shape=(n, n))
        S = (S + S.conj().T).todia()
        offsets = tuple(int(o) for o in S.offsets)
        host = np.where(in_bounds(offsets, (n, n), host=True), S.data, 0)[None]
    defect, scale = eigsh_checks._host_hermitian_defect(host, offsets, n)
    expected_defect = expected_scale = 0.0
    for index in np.ndindex(*host.shape[:-2]):
        S = sp.dia_array((host[index], np.array(offsets)), shape=(n, n)).tocsr()
        difference = abs(S - S.conj().T)
        expected_defect = max(expected_defect, difference.max() if difference.nnz else 0.0)
        expected_scale = max(expected_scale, abs(S).max() if S.nnz else 0.0)
    assert defect == expected_defect and scale == expected_scale
    if symmetric:
        assert defect == 0.0


# -- generalized problems, SciPy's modes and operators ----------------------------------------


def mass(n, complex_=False, scale=1.0):
    """A Hermitian positive definite band (diagonally dominant), complex off its diagonal
    with ``complex_``."""
    off = np.full(n - 1, 1.0 + (0.5j if complex_ else 0)) * scale
    return sp.diags_array([np.conj(off), np.full(n, 4.0), off], offsets=[-1, 0, 1]).todia()


def generalized(A, M, k, which, sigma=None, mode="normal"):
    """The eigenvalues eigsh should return, from ``scipy.linalg.eigh(A, M)`` and SciPy's
    documented key of each mode."""
    evals = sl.eigh(A, M, eigvals_only=True) if M is not None else np.linalg.eigvalsh(A)
    if sigma is None:
        keys = evals
    elif mode == "normal":
        keys = 1 / (evals - sigma)
    elif mode == "buckling":
        keys = evals / (evals - sigma)
    else:
        keys = (evals + sigma) / (evals - sigma)
    order = {
        "LM": np.argsort(-np.abs(keys), kind="stable"),
        "SM": np.argsort(np.abs(keys), kind="stable"),
        "LA": np.argsort(-keys, kind="stable"),
        "SA": np.argsort(keys, kind="stable"),
    }[which]
    return np.sort(evals[order[:k]])


def check_generalized(A, M, w, v, expected, rtol, B=None):
    """Eigenvalues as expected (relative to the largest), ``A v = lambda M v`` to
    ``rtol``, and ``v`` orthonormal in ``B``'s inner product (``M``'s, ``A``'s in
    buckling mode)."""
    w, v = np.asarray(w, np.float64), np.asarray(v).astype(np.complex128)
    M_ = np.eye(len(A)) if M is None else M
    scale = np.abs(expected).max()
    np.testing.assert_allclose(np.sort(w), expected, rtol=0, atol=rtol * scale)
    size = np.abs(A).sum(0).max() + np.abs(w).max() * np.abs(M_).sum(0).max()
    residual = np.linalg.norm(A @ v - M_ @ v * w, axis=0)
    assert residual.max() <= rtol * size, residual
    B = M_ if B is None else B
    gram = v.conj().T @ B @ v
    np.testing.assert_allclose(gram, np.eye(len(w)), atol=rtol * np.abs(B).sum(0).max() * 10)


def test_generalized_banded_lanczos_path():
    """``A x = lambda M x`` with a banded ``M`` on the Lanczos path: mode 2 (``M``'s
    banded Cholesky factor) and mode 3 (the banded LU of ``A - sigma M``), under jit."""
    S, Mb = hermitian_band(N, seed=12), mass(N)
    A, M = jaxdia.DiaMatrix.from_scipy(S), jaxdia.DiaMatrix.from_scipy(Mb)
    dense_a, dense_m = S.toarray(), Mb.toarray()
    w, v, info = jax.jit(lambda A, M: jaxdia.eigsh(A, k=3, M=M, which="LA", return_info=True))(A, M)
    assert bool(info.converged) and int(info.iterations) >= 1
    check_generalized(dense_a, dense_m, w, v, generalized(dense_a, dense_m, 3, "LA"), 1e-9)
    w, v = jaxdia.eigsh(A, k=3, M=M, sigma=0.1)
    check_generalized(dense_a, dense_m, w, v, generalized(dense_a, dense_m, 3, "LM", 0.1), 1e-9)


@pytest.mark.parametrize(
    "sigma, mode", [(None, "normal"), (0.3, "normal"), (-2.0, "buckling"), (0.3, "cayley")]
)
def test_small_generalized_modes_match_dense_eigh(sigma, mode):
    """n = 5, k = 4 (the dense path): each of SciPy's modes against scipy.linalg.eigh."""
    n, k = 5, 4
    S = hermitian_band(n, seed=13).toarray()
    if mode == "buckling":  # A positive definite: its inner product
        S = S + (np.abs(np.linalg.eigvalsh(S)).max() + 1) * np.eye(n)
    Mb = mass(n).toarray()
    w, v = jaxdia.eigsh(S, k=k, M=Mb, sigma=sigma, mode=mode, which="LM")
    B = S if mode == "buckling" else Mb
    check_generalized(S, Mb, w, v, generalized(S, Mb, k, "LM", sigma, mode), 1e-10, B=B)


def test_linear_operators_on_the_host_and_under_jit():
    """``A`` and ``M`` as SciPy LinearOperators (NumPy products on the host), a lineax
    operator and a function: the same pairs, eagerly and under jit; the inverses by
    conjugate gradients and GMRES, or given as ``Minv``/``OPinv``."""
    import lineax as lx

    n = N
    S, Mb = hermitian_band(n, seed=14), mass(n)
    dense_a, dense_m = S.toarray(), Mb.toarray()
    linear_a = spla.LinearOperator((n, n), matvec=lambda x: S @ x, dtype=np.float64)
    linear_m = spla.LinearOperator((n, n), matvec=lambda x: Mb @ x, dtype=np.float64)
    expected = generalized(dense_a, dense_m, 3, "LA")
    w, v = jaxdia.eigsh(linear_a, k=3, M=linear_m, which="LA")
    check_generalized(dense_a, dense_m, w, v, expected, 1e-8)
    minv = spla.LinearOperator((n, n), matvec=lambda x: np.linalg.solve(dense_m, x), dtype=float)
    w, v = jax.jit(lambda: jaxdia.eigsh(linear_a, k=3, M=linear_m, Minv=minv, which="LA"))()
    check_generalized(dense_a, dense_m, w, v, expected, 1e-8)
    lineax_a = lx.MatrixLinearOperator(jnp.asarray(dense_a), lx.symmetric_tag)
    w = jaxdia.eigsh(lineax_a, k=3, which="LA", return_eigenvectors=False)
    np.testing.assert_allclose(np.sort(w), generalized(dense_a, None, 3, "LA"), atol=1e-8)
    opinv = np.linalg.inv(dense_a - 0.2 * np.eye(n))
    w = jaxdia.eigsh(
        lambda x: jnp.asarray(dense_a) @ x,
        k=3,
        sigma=0.2,
        OPinv=opinv,
        v0=np.ones(n),
        return_eigenvectors=False,
    )
    np.testing.assert_allclose(np.sort(w), generalized(dense_a, None, 3, "LM", 0.2), atol=1e-8)


def test_rng_seeds_the_start():
    """``rng`` (SciPy's): anything default_rng takes draws the start vector; the same
    seed gives the same run, and None jaxdia's fixed start."""
    S = hermitian_band(N, seed=15)
    A = jaxdia.DiaMatrix.from_scipy(S)
    runs = [
        jaxdia.eigsh(A, k=2, which="LA", ncv=8, rng=rng, return_info=True)
        for rng in (3, np.random.default_rng(3), None)
    ]
    (w, v, info), (w2, v2, info2), (w3, _, info3) = runs
    np.testing.assert_array_equal(np.asarray(v), np.asarray(v2))
    assert int(info.matvecs) == int(info2.matvecs)
    expected = np.sort(np.linalg.eigvalsh(S.toarray()))[-2:]
    for values in (w, w3):
        np.testing.assert_allclose(values, expected, atol=1e-10 * np.abs(expected).max())
    assert not np.array_equal(
        np.asarray(v), np.asarray(jaxdia.eigsh(A, k=2, which="LA", ncv=8, rng=4)[1])
    )


def test_m_not_positive_definite_is_refused_or_reported():
    """Mode 2 needs a positive definite ``M``: its failed Cholesky factor raises eagerly
    (numpy.linalg.LinAlgError) and, under jit, gives NaN and ``converged`` False."""
    S = hermitian_band(N, seed=16)
    A = jaxdia.DiaMatrix.from_scipy(S)
    indefinite = jaxdia.DiaMatrix.from_scipy(mass(N) - 5 * sp.eye_array(N).todia())
    with pytest.raises(np.linalg.LinAlgError, match="M is not positive definite"):
        jaxdia.eigsh(A, k=3, M=indefinite)
    w, _, info = jax.jit(lambda A, M: jaxdia.eigsh(A, k=3, M=M, return_info=True))(A, indefinite)
    assert not bool(info.converged) and not np.isfinite(np.asarray(w)).any()


@pytest.mark.full
def test_ill_conditioned_m_is_solved_or_reported():
    """cond(M) ~ 1e12: the pairs pass the backward-error test or are reported
    unconverged, never wrong with success."""
    S = hermitian_band(N, seed=16)
    A = jaxdia.DiaMatrix.from_scipy(S)
    diagonal = np.geomspace(1e-12, 1.0, N)
    Mb = sp.diags_array([diagonal], offsets=[0]).todia()
    w, v, info = jaxdia.eigsh(
        A, k=3, M=jaxdia.DiaMatrix.from_scipy(Mb), which="LM", maxiter=50, return_info=True
    )
    residual = np.linalg.norm(S @ np.asarray(v) - Mb @ np.asarray(v) * np.asarray(w), axis=0)
    scale = (abs(S).sum(0).max() + np.abs(np.asarray(w)) * 1.0) * np.linalg.norm(
        np.asarray(v), axis=0
    )
    # The residuals agree to the rounding of computing them.
    np.testing.assert_allclose(info.residuals, residual, rtol=1e-6, atol=1e-13 * scale.max())
    if bool(info.converged):
        assert np.all(residual <= 1e-8 * scale)
        np.testing.assert_allclose(w, generalized(S.toarray(), Mb.toarray(), 3, "LM"), rtol=1e-8)


MODES = [(None, "normal"), (0.3, "normal"), (-2.0, "buckling"), (0.3, "cayley")]
KINDS = {
    "dia": lambda X: jaxdia.DiaMatrix.from_dense(X),
    "dense": lambda X: X,
    "linear_operator": lambda X: spla.LinearOperator(
        X.shape, matvec=lambda x: X @ x, dtype=X.dtype
    ),
}


def modes_problem(n, dtype, mode, seed):
    """``(A, M)`` in ``dtype`` for ``mode``: ``A`` positive definite in buckling mode."""
    complex_ = np.dtype(dtype).kind == "c"
    S = hermitian_band(n, upper=(0, 1, 2), complex_=complex_, seed=seed).toarray()
    if mode == "buckling":
        S = S + (np.abs(np.linalg.eigvalsh(S)).max() + 1) * np.eye(n)
    return S.astype(dtype), mass(n, complex_).toarray().astype(dtype)


@pytest.mark.full
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("sigma, mode", MODES)
@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_small_modes_sweep(n, sigma, mode, dtype):
    """Every mode and dtype at n = 2..5, against scipy.linalg.eigh (in float64): ``k = n
    - 1`` largest in magnitude and ``k = 1`` smallest algebraic, each kind of operator in
    turn (a DiaMatrix, a dense array, a host LinearOperator)."""
    A, M = modes_problem(n, dtype, mode, seed=n)
    oracle_a, oracle_m = A.astype(np.complex128), M.astype(np.complex128)
    rtol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9
    kinds = sorted(KINDS)
    for turn, (k, which) in enumerate(((n - 1, "LM"), (1, "SA"))):
        kind = KINDS[kinds[(n + turn) % len(kinds)]]
        w, v = jaxdia.eigsh(kind(A), k=k, M=kind(M), sigma=sigma, mode=mode, which=which)
        assert w.dtype == np.finfo(dtype).dtype and v.dtype == dtype
        expected = generalized(oracle_a, oracle_m, k, which, sigma, mode)
        B = oracle_a if mode == "buckling" else oracle_m
        check_generalized(oracle_a, oracle_m, w, v, expected, rtol, B=B)


@pytest.mark.full
@pytest.mark.parametrize(
    "kind, sigma, mode",
    [("dia", sigma, mode) for sigma, mode in MODES] + [("linear_operator", None, "normal")],
)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_lanczos_modes_sweep(sigma, mode, dtype, kind):
    """Every mode on the Lanczos path (n = 150) with banded factors for DiaMatrix
    operands; mode 2 with host LinearOperators (conjugate gradients for ``M``)."""
    A, M = modes_problem(N, dtype, mode, seed=17)
    for which in ("LM", "LA", "SA"):
        w, v, info = jaxdia.eigsh(
            KINDS[kind](A),
            k=3,
            M=KINDS[kind](M),
            sigma=sigma,
            mode=mode,
            which=which,
            return_info=True,
        )
        assert bool(info.converged)
        expected = generalized(A, M, 3, which, sigma, mode)
        check_generalized(A, M, w, v, expected, 1e-8, B=A if mode == "buckling" else M)


@pytest.mark.parametrize("sigma", [None, pytest.param(0.1, marks=pytest.mark.full)])
def test_generalized_eigenvalue_gradient(sigma):
    """``d lambda = v^H (dA - lambda dM) v`` for ``M``-orthonormal ``v``: finite
    differences of dense Hermitian ``A`` and ``M`` (n = 5, the dense path), in modes 2 and
    3."""
    rng = np.random.default_rng(18)
    X, Y = rng.standard_normal((2, 5, 5))

    def loss(X, Y, sigma):
        A, M = (X + X.T) / 2, (Y + Y.T) / 10 + 4 * jnp.eye(5)
        w = jaxdia.eigsh(A, k=2, M=M, sigma=sigma, which="LM", return_eigenvectors=False)
        return jnp.sum(jnp.sort(w) * jnp.array([1.0, 2.0]))

    check_grads(lambda X, Y: loss(X, Y, sigma), (X, Y), order=1, modes=("fwd", "rev"))


def test_k_at_least_n_is_scipys_dense_eigh():
    """SciPy's ``k >= n``: all pairs of a dense ``A`` (with a dense or sparse ``M``) with
    its RuntimeWarning, against scipy.linalg.eigh; a TypeError for a sparse or operator
    ``A`` and an operator ``M``."""
    A = hermitian_band(4, seed=19).toarray()
    Mb = mass(4)
    for M in (Mb.toarray(), Mb):
        with pytest.warns(RuntimeWarning, match="k >= N"):
            w, v = jaxdia.eigsh(A, k=5, M=M)
        check_generalized(A, Mb.toarray(), w, v, sl.eigh(A, Mb.toarray(), eigvals_only=True), 1e-12)
    with pytest.raises(TypeError, match="cannot take a LinearOperator A"):
        jaxdia.eigsh(spla.aslinearoperator(A), k=4)
    with pytest.raises(TypeError, match="cannot take a sparse A"):
        jaxdia.eigsh(sp.csr_array(A), k=4)
    with pytest.raises(TypeError, match="cannot take a LinearOperator M"):
        jaxdia.eigsh(A, k=4, M=spla.aslinearoperator(Mb.toarray()))


def test_generalized_program_factors_once():
    """The inverses of a banded problem, read from the lowered program on CPU: mode 2
    factors ``M`` once by banded Cholesky (LAPACK ``pbtrf``), mode 3 ``A - sigma M`` once
    by banded LU (``gbtrf``); the loop only solves with the stored factor (the start's
    ``op v0`` and each step's: two solve calls)."""
    n = 300
    A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    M = jaxdia.diags([0.5, 1.0, 4.0, 1.0, 0.5], offsets=[-2, -1, 0, 1, 2], shape=(n, n))
    for sigma, factor, solve in ((None, "pbtrf", "pbtrs"), (0.1, "gbtrf", "gbtrs")):
        lowered = jax.jit(lambda A, M: jaxdia.eigsh(A, k=3, M=M, sigma=sigma, which="LA"))
        text = lowered.lower(A, M).as_text()
        assert text.count(f"custom_call @jaxdia_lapack_{factor}") == 1
        assert text.count(f"custom_call @jaxdia_lapack_{solve}") == 2
