"""Construction on the host (jaxdia/_host.py): concrete operands are combined with NumPy,
compiling nothing, with the same offsets, dtype and values as the compiled path (the same
operation under ``jit``), and SciPy's results."""

import operator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import jaxdia
from jaxdia._geometry import in_bounds

from .helpers import Compiles, examples

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
# Values of a normal range: subnormal numbers are flushed to zero by XLA CPU's arithmetic
# and kept by NumPy (the one documented difference besides fused multiply-adds).
VALUES = st.floats(-1e3, 1e3, allow_subnormal=False, width=32).filter(lambda v: abs(v) > 1e-3)


@st.composite
def matrices(draw, shape=None, dtype=None):
    """A DiaMatrix of random offsets and values, NaN in its padding slots."""
    if shape is None:
        shape = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    m, n = shape
    offsets = draw(st.lists(st.integers(-m + 1, n - 1), min_size=0, max_size=4, unique=True))
    dtype = np.dtype(dtype or draw(st.sampled_from(DTYPES)))
    size = (len(offsets), n)
    values = np.array(draw(st.lists(VALUES, min_size=size[0] * n, max_size=size[0] * n)))
    data = values.reshape(size).astype(dtype)
    if dtype.kind == "c":
        data = data * (1 - 0.5j)
    data = np.where(in_bounds(offsets, shape, host=True), data, np.nan).astype(dtype)
    return jaxdia.DiaMatrix(jnp.asarray(data), offsets, shape)


def assert_same(host, traced, exact=True):
    """Same offsets, shape and dtype, and the same in-bounds values: bit for bit (``-0``
    and ``0`` aside), or to rounding where XLA fuses multiply-adds (tuples: each)."""
    if isinstance(host, tuple):
        for h, t in zip(host, traced, strict=True):
            assert_same(h, t, exact)
        return
    assert host.offsets == traced.offsets and host.shape == traced.shape
    assert host.dtype == traced.dtype
    inside = np.asarray(in_bounds(host.offsets, host.shape))
    a, b = np.asarray(host.data)[..., inside], np.asarray(traced.data)[..., inside]
    if exact:
        np.testing.assert_array_equal(a, b)
    else:
        eps = np.finfo(host.dtype).eps
        np.testing.assert_allclose(a, b, rtol=8 * eps, atol=8 * eps * np.abs(b).max(initial=1))


def both(f, *args):
    """``f(*args)`` eagerly (on the host) and under ``jit`` (compiled)."""
    with Compiles() as compiles:
        host = f(*args)
    assert compiles.count == 0, f"the host path compiled {compiles.count} programs"
    return host, jax.jit(f)(*args)


@settings(max_examples=examples(6))
# Python, NumPy and weakly typed JAX scalars: the host promotes each as JAX does.
@given(
    st.data(),
    st.sampled_from([2.5, -3, np.float32(0.25), 1.5 - 2j, np.float64(-1 / 3), jnp.asarray(0.7)]),
)
def test_sums_and_scalars_match_the_compiled_path(data, scalar):
    A = data.draw(matrices())
    B = data.draw(matrices(shape=A.shape))
    real = A.dtype.kind != "c"
    assert_same(*both(lambda A, B: (A + B, A - B, -A, A.T), A, B))
    assert_same(*both(lambda A, B: A.multiply(B), A, B), exact=real and B.dtype.kind != "c")
    exact = real and not isinstance(scalar, complex)
    assert_same(*both(lambda A: scalar * A, A), exact=exact)


@settings(max_examples=examples(6))
@given(st.data())
def test_products_match_the_compiled_path_and_scipy(data):
    A = data.draw(matrices())
    B = data.draw(matrices(shape=(A.shape[1], data.draw(st.integers(1, 5)))))
    host, traced = both(operator.matmul, A, B)
    assert_same(host, traced, exact=False)
    expected = A.to_scipy().toarray() @ B.to_scipy().toarray()
    tolerance = 1e-5 if np.finfo(host.dtype).bits <= 32 else 1e-12
    np.testing.assert_allclose(host.todense(), expected, rtol=tolerance, atol=tolerance * 1e3)


@settings(max_examples=examples(6))
@given(st.data(), st.booleans())
def test_kron_matches_the_compiled_path_and_scipy(data, square):
    A = data.draw(matrices())
    mb = data.draw(st.integers(1, 4))
    B = data.draw(matrices(shape=(mb, mb) if square else (mb, data.draw(st.integers(1, 4)))))
    host, traced = both(jaxdia.kron, A, B)
    assert_same(host, traced, exact=A.dtype.kind != "c" and B.dtype.kind != "c")
    expected = sp.kron(A.to_scipy(), B.to_scipy()).toarray()
    np.testing.assert_array_equal(host.todense(), expected.astype(host.dtype))


@settings(max_examples=examples(4))
@given(st.data())
def test_from_dense_and_diags_match_the_compiled_path(data):
    A = data.draw(matrices())
    dense = np.asarray(A.todense())
    assert_same(*both(lambda M: jaxdia.DiaMatrix.from_dense(M, A.offsets), dense))
    assert_same(*both(lambda M: jaxdia.DiaMatrix.from_dense(M, A.offsets), jnp.asarray(dense)))
    diagonals = [jnp.asarray(np.diagonal(dense, k)) for k in A.offsets]
    if diagonals:
        assert_same(*both(lambda *d: jaxdia.diags(list(d), A.offsets, A.shape), *diagonals))


def nan_padded(offsets, shape, dtype, seed):
    """A DiaMatrix of random values in [-2, 2) (real and imaginary parts), NaN in its
    padding slots."""
    rng = np.random.default_rng(seed)
    data = rng.uniform(-2, 2, (len(offsets), shape[1]))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.uniform(-2, 2, data.shape)
    data = np.where(in_bounds(offsets, shape, host=True), data, np.nan).astype(dtype)
    return jaxdia.DiaMatrix(jnp.asarray(data), offsets, shape)


def test_past_the_compiled_thresholds_the_host_runs_the_same_formulas():
    """Where the compiled path changes form to bound its program (a transpose of over 64
    diagonals gathers, a product of over 64 pairs of diagonals loops) and the host keeps
    the slices, the results are still the compiled ones; so are a square kron whose pairs
    of diagonals meet on one, and a NumPy float64 scalar without x64 (JAX makes it
    float32, NumPy would not)."""
    wide = nan_padded(tuple(range(-34, 36)), (40, 40), np.float64, 0)
    assert_same(*both(lambda A: A.T, wide))
    band = nan_padded(tuple(range(-4, 5)), (40, 40), np.complex128, 1)
    assert_same(*both(operator.matmul, band, band), exact=False)
    A = nan_padded((-1, 0, 1), (4, 4), np.float32, 2)
    B = nan_padded((-2, 1), (3, 3), np.float32, 3)  # a * 3 + 1 and (a + 1) * 3 - 2 meet
    host, traced = both(jaxdia.kron, A, B)
    assert_same(host, traced)
    assert host.offsets == (-5, -2, 1, 4)
    with jax.enable_x64(False):
        host, traced = both(lambda A: np.float64(1 / 3) * A, A)
        assert host.dtype == np.float32
        assert_same(host, traced)


def spin_chain(L, kron, eye, Sx, Sz):
    """The transverse-field Ising Hamiltonian of ``L`` sites, as ports build it."""

    def site(op, i):
        return kron(kron(eye(2**i), op), eye(2 ** (L - i - 1)))

    H = -1.0 * site(Sx, 0)
    for i in range(1, L):
        H = H - site(Sx, i)
    for i in range(L - 1):
        H = H - 0.5 * (site(Sz, i) @ site(Sz, i + 1))
    return H


def test_spin_chain_builds_without_compiling():
    """A kron chain compiles nothing and equals SciPy's operator; integer factors and
    scalars are accepted as SciPy accepts them."""
    Sx = jaxdia.DiaMatrix.from_dense(np.array([[0, 1], [1, 0]]))  # integers: default float
    Sz = jaxdia.DiaMatrix.from_dense(np.array([[1, 0], [0, -1]]))
    assert Sx.dtype == jnp.result_type(float)
    with Compiles() as compiles:
        H = spin_chain(6, jaxdia.kron, jaxdia.eye, Sx, Sz)
        scaled = jaxdia.kron(1, H)
        twice = jaxdia.kron(H, 2.0)
    assert compiles.count == 0
    expected = spin_chain(
        6,
        sp.kron,
        sp.eye_array,
        sp.csr_array(np.array([[0.0, 1], [1, 0]])),
        sp.csr_array(np.array([[1.0, 0], [0, -1]])),
    ).toarray()
    np.testing.assert_array_equal(H.todense(), expected)
    np.testing.assert_array_equal(scaled.todense(), expected)
    np.testing.assert_array_equal(twice.todense(), 2 * expected)
    assert H.offsets == tuple(sorted({0} | {s * 2**k for k in range(6) for s in (1, -1)}))
    dense = jaxdia.kron(np.array([[1, 2], [3, 4]]), Sz)
    np.testing.assert_array_equal(dense.todense(), np.kron([[1, 2], [3, 4]], [[1, 0], [0, -1]]))
    from_scipy = jaxdia.kron(sp.eye_array(2, dtype=np.float32), Sz)
    np.testing.assert_array_equal(from_scipy.todense(), np.kron(np.eye(2), [[1, 0], [0, -1]]))


def test_compiled_path_kept_where_the_host_cannot_compute():
    """Tracers, batches and 16-bit floats take the compiled path (and still agree)."""
    A = jaxdia.diags([1.0, 2.0, 3.0], [-1, 0, 2], shape=(4, 4))
    half = A.astype(jnp.bfloat16)
    np.testing.assert_array_equal((half + half).todense(), 2 * half.todense())
    batch = jaxdia.DiaMatrix(jnp.stack([A.data, 2 * A.data]), A.offsets, A.shape)
    np.testing.assert_array_equal((batch @ A).todense()[1], 2 * (A @ A).todense())
    grad = jax.grad(lambda d: jnp.sum(jaxdia.kron(A, jaxdia.DiaMatrix(d, A.offsets, A.shape)).data))
    assert grad(A.data).shape == A.data.shape


def test_kron_errors():
    A = jaxdia.eye(2)
    with pytest.raises(TypeError, match="kron: A must be a DiaMatrix, a scalar or a 2-D array"):
        jaxdia.kron(np.ones((2, 2, 2)), A)
    with pytest.raises(TypeError, match="kron: B must be a DiaMatrix, a scalar or a 2-D array"):
        jaxdia.kron(A, "x")
