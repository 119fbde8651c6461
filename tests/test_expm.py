"""jaxdia.expm_multiply against scipy.sparse.linalg.expm_multiply and dense expm, under
jit, vmap and grad."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, settings, strategies as st
from jax.test_util import check_grads

import jaxdia
from jaxdia._geometry import in_bounds
from jaxdia._linalg import expm_gradients, expm_norms

from .helpers import Compiles, examples

# -- problems --------------------------------------------------------------------------------


def band(n, offsets=(-2, 0, 1, 3), complex_=False, seed=0, scale=1.0):
    """A random (non-normal) band."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((len(offsets), n)) * scale
    if complex_:
        data = data + 1j * rng.standard_normal((len(offsets), n)) * scale
    return sp.dia_array((data, offsets), shape=(n, n))


def nan_padded(S):
    """The DiaMatrix of ``S`` with NaN in its padding slots (which must never be read)."""
    A = jaxdia.DiaMatrix.from_scipy(S)
    return jaxdia.DiaMatrix(
        jnp.where(in_bounds(A.offsets, A.shape), A.data, jnp.nan), A.offsets, A.shape
    )


def schrodinger(n, dx=0.1):
    """A 1-D Schrödinger operator ``-1/2 d^2/dx^2 + cos(x)`` (tridiagonal, Hermitian)."""
    x = (np.arange(n) - n / 2) * dx
    off = np.full(n - 1, -0.5 / dx**2)
    return sp.diags_array([off, 1 / dx**2 + np.cos(x), off], offsets=[-1, 0, 1]).todia()


def relative_error(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    return np.abs(actual - expected).max() / np.abs(expected).max()


def vectors(n, shape=(), complex_=False, seed=1):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((n, *shape))
    return B + 1j * rng.standard_normal((n, *shape)) if complex_ else B


# -- against SciPy ---------------------------------------------------------------------------


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("columns", [(), (3,)])
@pytest.mark.parametrize("scale", [0.05, 3.0])  # condition (3.13) holds / fails
def test_single_time_matches_scipy(complex_, columns, scale):
    S = band(40, complex_=complex_, scale=scale)
    B = vectors(40, columns, complex_)
    X = jaxdia.expm_multiply(nan_padded(S), B)
    assert X.shape == B.shape
    assert relative_error(X, spla.expm_multiply(S.tocsr(), B)) < 1e-12
    assert relative_error(X, sla.expm(S.toarray()) @ B) < 1e-11


@pytest.mark.parametrize(
    "grid",
    [
        {"start": 0, "stop": 1, "num": 5},  # q <= s: a step per point
        {"start": 0, "stop": 2, "num": 41},  # q > s, q % s == 0
        {"start": 0.5, "stop": 2, "num": 40, "endpoint": False},  # q > s, q % s != 0
        {"start": -1.5, "stop": 0.5},  # num defaults to 50
    ],
)
def test_time_grid_matches_scipy(grid):
    S = band(30, scale=1.5, seed=2)
    B = vectors(30, (2,))
    X = jaxdia.expm_multiply(nan_padded(S), B, **grid)
    expected = spla.expm_multiply(S.tocsr(), B, **grid)
    assert X.shape == expected.shape
    assert relative_error(X, expected) < 1e-12
    times = np.linspace(
        grid["start"], grid["stop"], grid.get("num", 50), endpoint=grid.get("endpoint", True)
    )
    dense = np.stack([sla.expm(t * S.toarray()) @ B for t in times])
    assert relative_error(X, dense) < 1e-11


def test_schrodinger_matches_scipy():
    """``exp(-i H t) psi`` for a tridiagonal Hamiltonian: SciPy's result to 1e-10, norm kept."""
    n = 2000
    H = schrodinger(n)
    x = (np.arange(n) - n / 2) * 0.1
    psi = np.exp(-((x / 5) ** 2) + 2j * x)
    psi /= np.linalg.norm(psi)
    A = jaxdia.DiaMatrix.from_scipy((-1j * 0.3) * H)
    X = jaxdia.expm_multiply(A, psi)
    assert relative_error(X, spla.expm_multiply(((-1j * 0.3) * H).tocsr(), psi)) < 1e-10
    np.testing.assert_allclose(np.linalg.norm(X), 1, atol=1e-12)
    grid = jaxdia.expm_multiply(jaxdia.DiaMatrix.from_scipy(-1j * H), psi, start=0, stop=0.3, num=4)
    np.testing.assert_allclose(grid[-1], X, atol=1e-12)


@settings(max_examples=examples(10))
@given(st.integers(0, 2**31), st.floats(0.01, 4.0), st.booleans())
def test_random_bands(seed, scale, complex_):
    S = band(25, complex_=complex_, seed=seed, scale=scale)
    B = vectors(25, (), complex_, seed=seed)
    X = jaxdia.expm_multiply(nan_padded(S), B.astype(np.complex128))
    assert relative_error(X, sla.expm(S.toarray()) @ B) < 1e-11


def test_float32_and_16_bit():
    S = band(30, scale=0.5, seed=3)
    B = vectors(30)
    expected = sla.expm(S.toarray()) @ B
    A32 = jaxdia.DiaMatrix.from_scipy(S).astype(np.float32)
    X = jaxdia.expm_multiply(A32, B.astype(np.float32))
    assert X.dtype == np.float32 and relative_error(X, expected) < 1e-5
    X16 = jaxdia.expm_multiply(A32.astype(jnp.bfloat16), B.astype(np.float32))
    assert X16.dtype == np.float32 and relative_error(X16, expected) < 3e-2


def test_result_dtype_is_the_promoted_one_for_every_pair_of_dtypes():
    """16-bit, single and complex operands in every pairing: the result has the promoted
    dtype (JAX's promotion; the work runs in at least single precision) and the values of
    the work's precision."""
    S = band(12, seed=6, scale=0.3)
    B = vectors(12)
    expected = sla.expm(S.toarray()) @ B
    dtypes = (jnp.bfloat16, np.float16, np.float32, np.complex64)
    for a_dtype in dtypes:
        A = jaxdia.DiaMatrix.from_scipy(S).astype(a_dtype)
        for b_dtype in dtypes:
            X = jaxdia.expm_multiply(A, B.astype(b_dtype))
            promoted = jnp.result_type(a_dtype, b_dtype)
            assert X.dtype == promoted, (a_dtype, b_dtype)
            tolerance = 3e-2 if {a_dtype, b_dtype} & {jnp.bfloat16, np.float16} else 1e-5
            assert relative_error(X, expected) < tolerance, (a_dtype, b_dtype)


def test_one_program_for_every_operand_dtype_of_the_same_work():
    """The operands are converted to the dtype of the work before the compiled call: a B
    of another dtype (or a trace) that promotes to the same work compiles nothing more,
    for a DiaMatrix and for any other operator (a LinearOperator of float64 here)."""
    S = band(16, seed=2, scale=0.5)
    B = vectors(16, (2,))
    expected = sla.expm(S.toarray()) @ B
    for operator in (jaxdia.DiaMatrix.from_scipy(S), spla.aslinearoperator(S.toarray())):
        reference = jaxdia.expm_multiply(operator, B, traceA=S.trace())
        with Compiles() as compiles:
            others = [
                jaxdia.expm_multiply(operator, B.astype(np.float32), traceA=np.float32(S.trace())),
                jaxdia.expm_multiply(operator, np.round(B).astype(np.int32), traceA=int(S.trace())),
            ]
        assert compiles.count == 0
        assert all(X.dtype == np.float64 for X in others)
        np.testing.assert_allclose(others[0], reference, rtol=1e-6, atol=1e-6)
        exact = jaxdia.expm_multiply(operator, np.round(B), traceA=S.trace())
        np.testing.assert_allclose(others[1], exact, rtol=1e-12, atol=1e-12)
        assert relative_error(reference, expected) < 1e-12


def test_complex64_forward_and_grid():
    """complex64 under x64: the Taylor loop's norms stay float32 (a float64 constant in
    the complex operator bound made the loop carry's types differ: a TypeError)."""
    S = band(12, complex_=True, seed=9, scale=0.6)
    A = jaxdia.DiaMatrix.from_scipy(S).astype(np.complex64)
    B = vectors(12, (2,), complex_=True).astype(np.complex64)
    M = S.toarray().astype(np.complex64).astype(np.complex128)
    X = jaxdia.expm_multiply(A, B)
    assert X.dtype == np.complex64 and relative_error(X, sla.expm(M) @ B) < 1e-5
    grid = jaxdia.expm_multiply(A, B, start=0.0, stop=1.0, num=3)
    assert relative_error(grid[1], sla.expm(0.5 * M) @ B) < 1e-5


def test_trace_given_and_edge_cases():
    S = band(20, seed=4)
    A = nan_padded(S)
    B = vectors(20)
    expected = sla.expm(S.toarray()) @ B
    for traceA in (S.trace(), 0.0, 3.7):  # any shift gives the same result
        assert relative_error(jaxdia.expm_multiply(A, B, traceA=traceA), expected) < 1e-11
    zero = jaxdia.DiaMatrix(jnp.zeros((1, 20)), (0,), (20, 20))
    np.testing.assert_array_equal(jaxdia.expm_multiply(zero, B), B)
    no_diagonal = band(20, offsets=(-1, 2), seed=5)
    X = jaxdia.expm_multiply(nan_padded(no_diagonal), B)
    assert relative_error(X, sla.expm(no_diagonal.toarray()) @ B) < 1e-11
    bad = jaxdia.DiaMatrix(jnp.full((1, 20), jnp.inf), (0,), (20, 20))
    assert np.all(np.isnan(jaxdia.expm_multiply(bad, B)))
    empty = jaxdia.DiaMatrix(jnp.zeros((1, 0)), (0,), (0, 0))
    assert jaxdia.expm_multiply(empty, jnp.zeros(0)).shape == (0,)


# -- transformations -------------------------------------------------------------------------


def test_jit_and_vmap():
    matrices = [band(25, seed=s, scale=s / 2) for s in (1, 2, 3)]
    data = jnp.stack([nan_padded(S).data for S in matrices])
    offsets = nan_padded(matrices[0]).offsets
    batch = jaxdia.DiaMatrix(data, offsets, (25, 25))
    B = vectors(25)
    X = jax.jit(lambda A, B: jaxdia.expm_multiply(A, B))(batch, B)
    Y = jax.vmap(
        lambda d, B: jaxdia.expm_multiply(jaxdia.DiaMatrix(d, offsets, (25, 25)), B),
        in_axes=(0, None),
    )(data, B)
    grid = jax.jit(lambda A, t: jaxdia.expm_multiply(A, B, start=0, stop=t, num=3))(batch, 0.7)
    assert X.shape == (3, 25) and grid.shape == (3, 3, 25)
    for i, S in enumerate(matrices):
        expected = sla.expm(S.toarray()) @ B
        assert relative_error(X[i], expected) < 1e-11
        assert relative_error(Y[i], expected) < 1e-11
        assert relative_error(grid[i, -1], sla.expm(0.7 * S.toarray()) @ B) < 1e-11


# -- derivatives -----------------------------------------------------------------------------


def dense_expm_multiply(A, B, times=None):
    """The oracle: ``jax.scipy.linalg.expm`` of the dense matrix (differentiable)."""
    M = A.todense()
    if times is None:
        return jax.scipy.linalg.expm(M) @ B
    return jnp.stack([jax.scipy.linalg.expm(t * M) @ B for t in times])


@pytest.mark.parametrize(
    # complex gradients stay fast in test_gradient_through_many_panels_and_a_batch
    "complex_",
    [False, pytest.param(True, marks=pytest.mark.full)],
)
def test_gradients_match_dense_expm(complex_):
    S = band(12, complex_=complex_, seed=6, scale=1.2)
    A = nan_padded(S)
    B = vectors(12, (2,), complex_)
    rng = np.random.default_rng(7)
    G = rng.standard_normal((12, 2))

    def loss(data, B, oracle=False):
        A_ = jaxdia.DiaMatrix(data, A.offsets, A.shape)
        X = dense_expm_multiply(A_, B) if oracle else jaxdia.expm_multiply(A_, B)
        return jnp.sum(jnp.abs(X * G) ** 2)

    clean = jnp.where(in_bounds(A.offsets, A.shape), A.data, 0)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(A.data, B)
    expected = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(clean, B, True)
    inside = in_bounds(A.offsets, A.shape)
    np.testing.assert_allclose(jnp.where(inside, grads[0], 0), expected[0], rtol=1e-10, atol=1e-10)
    assert np.all(np.asarray(grads[0])[~np.asarray(inside)] == 0)  # padding: no gradient
    np.testing.assert_allclose(grads[1], expected[1], rtol=1e-10, atol=1e-10)
    if complex_:  # finite differences too (once: the dense oracle covers the real case)
        check_grads(jax.jit(loss), (clean, B), order=1, modes=("rev",), atol=1e-6, rtol=1e-6)


@pytest.mark.full  # the fast tier: the time grid's gradient in test_expm_operators.py
def test_time_grid_gradients_match_dense_expm():
    S = band(10, seed=8, scale=0.8)
    A = nan_padded(S)
    clean = jnp.where(in_bounds(A.offsets, A.shape), A.data, 0)
    B = vectors(10)
    G = np.random.default_rng(9).standard_normal((4, 10))

    def loss(data, B, start, stop, oracle=False):
        A_ = jaxdia.DiaMatrix(data, A.offsets, A.shape)
        if oracle:
            X = dense_expm_multiply(A_, B, jnp.linspace(start, stop, 4))
        else:
            X = jaxdia.expm_multiply(A_, B, start=start, stop=stop, num=4)
        return jnp.sum(X * G)

    args = (A.data, B, 0.2, 1.3)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(*args)
    oracle = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)), static_argnums=4)
    expected = oracle(clean, B, 0.2, 1.3, True)
    np.testing.assert_allclose(
        jnp.where(in_bounds(A.offsets, A.shape), grads[0], 0), expected[0], rtol=1e-10, atol=1e-10
    )
    for got, want in zip(grads[1:], expected[1:]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    check_grads(jax.jit(loss), (clean, B, 0.2, 1.3), order=1, modes=("rev",), atol=1e-6, rtol=1e-6)


def exact_directional_derivative(H, s, B, E, weights):
    """``d/de sum(weights * Re(X)^3)`` for ``X = exp(-i s (H + e E)) B`` (``H`` real
    symmetric, ``E`` dense), from the eigendecomposition of ``H``: the Fréchet derivative
    of ``exp`` at a normal matrix, ``V (Phi o V^T dA V) V^T``, exact to rounding (where
    ``jax.scipy.linalg.expm``'s scaling and squaring loses digits at large norms)."""
    lam, V = np.linalg.eigh(H)
    mu = -1j * s * lam
    X = V @ (np.exp(mu) * (V.T @ B))
    difference = mu[:, None] - mu[None, :]
    same = np.abs(difference) < 1e-12
    Phi = np.where(
        same,
        np.exp(mu)[:, None],
        (np.exp(mu)[:, None] - np.exp(mu)[None, :]) / np.where(same, 1, difference),
    )
    L = V @ ((Phi * (V.T @ (-1j * s * E) @ V)) @ (V.T @ B))
    return np.sum(weights * 3 * np.real(X) ** 2 * np.real(L))


def test_gradient_through_many_panels_and_a_batch():
    """``||A||_1`` large enough for two checkpoint levels (more than 64 panels), batched."""
    H = schrodinger(30, dx=0.25)
    scales = (4.0, 9.0)
    data = jnp.stack([jaxdia.DiaMatrix.from_scipy(-1j * s * H).data for s in scales])
    A = jaxdia.DiaMatrix(data, (-1, 0, 1), (30, 30))
    B = vectors(30, (), True)
    weights = np.linspace(0.5, 1.5, 30)

    def loss(data):
        X = jaxdia.expm_multiply(jaxdia.DiaMatrix(data, A.offsets, A.shape), B)
        return jnp.sum(weights * jnp.real(X) ** 3)

    assert (
        np.abs(9.0 * H.toarray()).sum(axis=0).max() / expm_norms.THETA[30]
        > expm_gradients.CHECKPOINTS
    )
    grad = np.asarray(jax.grad(loss)(data))
    rng = np.random.default_rng(10)
    for i, s in enumerate(scales):
        E = rng.standard_normal((3, 30)) * np.asarray(in_bounds(A.offsets, A.shape))
        dense_E = np.asarray(jaxdia.DiaMatrix(E, A.offsets, A.shape).todense())
        # JAX's gradient g of a real loss of complex data: dL = Re(sum(g * dz)); here
        # dz = -i s E (the perturbation of H).
        got = np.real(np.sum(grad[i] * (-1j * s) * E))
        expected = exact_directional_derivative(H.toarray(), s, B, dense_E, weights)
        np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_gradient_beyond_the_checkpoints_is_nan():
    # trace(A) = 0, so the shift leaves ||A||_1 = 2e4: more than 64**2 panels of 3.54.
    A = jaxdia.DiaMatrix(jnp.array([[1.0, -1.0, 1.0, -1.0]]) * -2e4j, (0,), (4, 4))
    A = A + jaxdia.DiaMatrix(jnp.ones((1, 4)), (1,), (4, 4))
    B = jnp.ones(4, complex)
    X, vjp = jax.vjp(
        lambda d: jaxdia.expm_multiply(jaxdia.DiaMatrix(d, A.offsets, A.shape), B), A.data
    )
    assert np.all(np.isfinite(X))
    assert np.all(np.isnan(vjp(jnp.ones(4, complex))[0][:, 1:]))


# -- errors ----------------------------------------------------------------------------------


def test_errors():
    S = band(10)
    A = jaxdia.DiaMatrix.from_scipy(S)
    B = np.ones(10)
    with pytest.raises(TypeError, match="expm_multiply: A must be a jaxdia.DiaMatrix"):
        jaxdia.expm_multiply("A", B)
    with pytest.raises(ValueError, match="expm_multiply: A must be square"):
        jaxdia.expm_multiply(jaxdia.eye(5, 6), np.ones(6))
    with pytest.raises(ValueError, match=r"B must have shape \(10,\) or \(..., 10, k\)"):
        jaxdia.expm_multiply(A, np.ones(9))
    with pytest.raises(ValueError, match="B must have shape"):
        jaxdia.expm_multiply(A, np.ones((9, 2)))
    with pytest.raises(TypeError, match="B must be a numeric array"):
        jaxdia.expm_multiply(A, "x")
    with pytest.raises(TypeError, match="B is a scipy.sparse"):
        jaxdia.expm_multiply(A, sp.eye_array(10))
    with pytest.raises(ValueError, match="batch shapes"):
        jaxdia.expm_multiply(
            jaxdia.DiaMatrix(np.ones((2, 1, 10)), (0,), (10, 10)), np.ones((3, 10, 1))
        )
    with pytest.raises(TypeError, match="needs both start and stop"):
        jaxdia.expm_multiply(A, B, start=0)
    with pytest.raises(TypeError, match="needs both start and stop"):
        jaxdia.expm_multiply(A, B, num=5)
    with pytest.raises(ValueError, match="at least two time points"):
        jaxdia.expm_multiply(A, B, start=0, stop=1, num=1)
    with pytest.raises(TypeError, match="num must be static"):
        jax.jit(lambda num: jaxdia.expm_multiply(A, B, start=0, stop=1, num=num))(5)
    with pytest.raises(TypeError, match="endpoint must be a Python bool"):
        jaxdia.expm_multiply(A, B, start=0, stop=1, endpoint="yes")
    with pytest.raises(TypeError, match="stop must be real"):
        jaxdia.expm_multiply(A, B, start=0, stop=1j)
    with pytest.raises(ValueError, match="start must be a scalar"):
        jaxdia.expm_multiply(A, B, start=np.zeros(2), stop=1)
    with pytest.raises(ValueError, match="traceA must be a scalar"):
        jaxdia.expm_multiply(A, B, traceA=np.ones(3))
