"""SciPy-parity operations: structure, arithmetic, products, reductions, structure helpers.

Every property test compares with SciPy or a NumPy dense oracle built from the in-bounds
slots only; the drawn matrices hold NaN in their padding, so a padding read shows up as
a NaN in the result.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, strategies as st
from jax import lax

import jaxdia
from jaxdia import _products
from jaxdia._geometry import in_bounds
from jaxdia.testing import batch_shapes, dia_matrices, dtypes, shapes

from .helpers import assert_close, dense_f64, program_lines, to_scipy_f64


def wide(dtype):
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def loosest(*dtypes_):
    """The dtype with the loosest tolerance (for results mixing several dtypes)."""
    from .helpers import tolerance

    return max(dtypes_, key=tolerance)


def scipy_offsets(S, shape):
    """SciPy's offsets of a DIA result, canonical: sorted, those inside the matrix."""
    m, n = shape
    return tuple(sorted(int(k) for k in S.offsets if max(0, k) < min(n, m + k)))


@st.composite
def pairs(draw, *, same_shape=True, max_side=8, dtype=None):
    """Two matrices; batch shapes that broadcast; shapes equal, or chained for A @ B."""
    m, n = draw(shapes(max_side))
    p = draw(st.integers(0, max_side))
    batch = draw(batch_shapes())
    batch_b = draw(st.sampled_from([(), batch, tuple(1 for _ in batch)]))
    A = draw(dia_matrices(shape=(m, n), batch_shape=batch, dtype=dtype))
    B = draw(dia_matrices(shape=(m, n) if same_shape else (n, p), batch_shape=batch_b, dtype=dtype))
    return A, B


# -- structure -------------------------------------------------------------------------------


@given(dia_matrices(batch_shape=None))
def test_transpose_matches_scipy(A):
    T, T2, TT = jax.jit(lambda A: (A.T, A.transpose((1, 0)), A.T.T))(A)
    assert T.shape == A.shape[::-1] and T.dtype == A.dtype and T.batch_shape == A.batch_shape
    assert T.offsets == tuple(sorted(-k for k in A.offsets))
    assert_close(dense_f64(T), np.swapaxes(dense_f64(A), -1, -2), A.dtype)
    if not A.batch_shape:
        assert T.offsets == scipy_offsets(to_scipy_f64(A).T, T.shape)
    assert T2.offsets == T.offsets and T2.shape == T.shape
    assert_close(dense_f64(TT), dense_f64(A), A.dtype)


def test_transpose_rejects_other_axes():
    with pytest.raises(ValueError, match=r"axes must be None or \(1, 0\)"):
        jaxdia.eye(3).transpose((0, 1))


@pytest.mark.parametrize("columns", [None, 1, 8])
def test_transposed_product_reads_data_in_place(columns):
    """Under jit, ``A.T @ X`` needs no more temporary memory than the product of a stored
    transpose: no transposed copy of ``data``."""
    n, offsets = 50_000, (-300, -1, 0, 1, 300)
    A = jaxdia.DiaMatrix(np.ones((len(offsets), n), np.float32), offsets, (n, n))
    X = np.ones((n,) if columns is None else (n, columns), np.float32)
    transposed = jax.jit(lambda A, X: A.T @ X).lower(A, X).compile()
    stored = jax.jit(lambda T, X: T @ X).lower(A.T, X).compile()
    np.testing.assert_allclose(transposed(A, X), to_scipy_f64(A).T @ X, rtol=1e-6)
    if stored.memory_analysis() is None:
        pytest.skip("no memory analysis on this backend")
    temp = transposed.memory_analysis().temp_size_in_bytes
    assert temp == stored.memory_analysis().temp_size_in_bytes < 4 * n * 4


@given(dia_matrices(batch_shape=None))
def test_conj_h_real_imag(A):
    dense = dense_f64(A)
    results = jax.jit(lambda A: (A.conj(), A.conjugate(), A.H, A.real, A.imag))(A)
    oracles = [
        dense.conj(),
        dense.conj(),
        np.swapaxes(dense.conj(), -1, -2),
        dense.real,
        dense.imag,
    ]
    for result, expected in zip(results, oracles):
        assert isinstance(result, jaxdia.DiaMatrix)
        assert_close(dense_f64(result), expected, A.dtype)
    assert results[3].offsets == results[4].offsets == A.offsets
    assert results[3].dtype == np.real(np.zeros(0, A.dtype)).dtype


@given(dia_matrices(), dtypes())
def test_astype(A, dtype):
    if A.dtype.kind == "c" and dtype.kind != "c":
        with pytest.raises(TypeError, match="take A.real or A.imag first"):
            A.astype(dtype)
        return
    B = A.astype(dtype)
    assert B.dtype == dtype and B.offsets == A.offsets
    assert_close(dense_f64(B), dense_f64(A), loosest(A.dtype, dtype))


def test_astype_refuses_int():
    with pytest.raises(TypeError, match=r"^dtype int32 is not supported: a DiaMatrix holds one"):
        jaxdia.eye(2).astype(np.int32)


# -- arithmetic ------------------------------------------------------------------------------


@given(dia_matrices(batch_shape=None), st.sampled_from([2, -0.5, 3.0 + 1.0j]))
def test_scalar_arithmetic(A, s):
    dense = dense_f64(A)
    tol_dtype = loosest(A.dtype, np.complex64) if isinstance(s, complex) else A.dtype
    results = jax.jit(
        lambda A: (
            -A,
            A * s,
            s * A,
            A / s,
            A * np.asarray(s),
            jnp.asarray(s) * A,
            A.multiply(s),
            abs(A),
        )
    )(A)
    oracles = [-dense] + [dense * s] * 2 + [dense / s] + [dense * s] * 3 + [np.abs(dense)]
    for result, expected in zip(results, oracles):
        assert isinstance(result, jaxdia.DiaMatrix) and result.offsets == A.offsets
        assert_close(dense_f64(result), expected, tol_dtype)
    assert results[1].dtype == A.dtype or isinstance(s, complex)  # Python scalars are weak


def test_scalar_arithmetic_under_jit():
    A = jaxdia.diags([1.0, 2.0, 3.0], 0)

    @jax.jit
    def f(A, s):
        return (A * s - A / s).todense()

    np.testing.assert_allclose(f(A, 2.0), np.diag([1.5, 3.0, 4.5]))


@given(pairs())
def test_add_sub_match_scipy(pair):
    A, B = pair
    dtype = loosest(A.dtype, B.dtype)
    total, difference = jax.jit(lambda A, B: (A + B, A - B))(A, B)
    for result, expected in [
        (total, dense_f64(A) + dense_f64(B)),
        (difference, dense_f64(A) - dense_f64(B)),
    ]:
        assert isinstance(result, jaxdia.DiaMatrix)
        assert result.offsets == tuple(sorted(set(A.offsets) | set(B.offsets)))
        assert result.dtype == jnp.result_type(A.dtype, B.dtype)
        assert result.batch_shape == np.broadcast_shapes(A.batch_shape, B.batch_shape)
        assert_close(dense_f64(result), expected, dtype)
    if not A.batch_shape and not B.batch_shape:
        # (SciPy's DIA sum fails on mixed real/complex operands: compare in complex.)
        S = to_scipy_f64(A).astype(np.complex128) + to_scipy_f64(B).astype(np.complex128)
        assert total.offsets == scipy_offsets(S, A.shape)


def test_add_zero_sum_and_dense():
    A, B = jaxdia.eye(3), jaxdia.eye(3, k=1)
    assert A + 0 is A and 0 + A is A
    assert_close((0 - A).todense(), -np.eye(3), np.float32)
    total = sum([A, B, A])
    assert isinstance(total, jaxdia.DiaMatrix) and total.offsets == (0, 1)
    dense = np.ones((3, 3))
    for result, expected in [
        (A + dense, np.eye(3) + 1),
        (dense + A, np.eye(3) + 1),
        (A - dense, np.eye(3) - 1),
        (dense - A, 1 - np.eye(3)),
        (jnp.asarray(dense) - A, 1 - np.eye(3)),
    ]:
        assert isinstance(result, jax.Array)
        np.testing.assert_allclose(result, expected)


def test_add_errors():
    A = jaxdia.eye(3)
    with pytest.raises(ValueError, match=r"inconsistent shapes.*\(3, 3\).*\(3, 4\)"):
        A + jaxdia.eye(3, 4)
    with pytest.raises(ValueError, match=r"inconsistent shapes.*\(3, 3\).*\(4, 3\)"):
        A - jaxdia.eye(4, 3)
    batched = jaxdia.DiaMatrix(np.ones((2, 1, 3)), 0, (3, 3))
    other = jaxdia.DiaMatrix(np.ones((3, 1, 3)), 0, (3, 3))
    with pytest.raises(ValueError, match=r"batch shapes \[\(2,\), \(3,\)\] do not broadcast"):
        batched + other
    with pytest.raises(NotImplementedError, match="nonzero scalar"):
        A + 1.0
    with pytest.raises(NotImplementedError, match="nonzero scalar"):
        jax.jit(lambda s: A + s)(0.0)
    with pytest.raises(TypeError, match="from_scipy"):
        A + sp.eye_array(3)
    with pytest.raises(TypeError, match="unsupported operand"):
        A + "x"
    with pytest.raises(TypeError):
        A * "x"
    with pytest.raises(ValueError, match=r"A of shape \(3, 3\) and a dense B of shape \(4, 4\)"):
        A + np.ones((4, 4))


@given(pairs())
def test_multiply_dia_matches_scipy(pair):
    A, B = pair
    expected = dense_f64(A) * dense_f64(B)
    results = jax.jit(lambda A, B: (A.multiply(B), A * B))(A, B)
    for result in results:
        assert result.offsets == tuple(k for k in A.offsets if k in B.offsets)
        assert result.batch_shape == np.broadcast_shapes(A.batch_shape, B.batch_shape)
        assert_close(dense_f64(result), expected, loosest(A.dtype, B.dtype))
    if not A.batch_shape and not B.batch_shape:
        S = to_scipy_f64(A).multiply(to_scipy_f64(B))
        assert results[0].offsets == scipy_offsets(S, A.shape)


@st.composite
def dense_operands(draw):
    A = draw(dia_matrices(batch_shape=None, max_side=7))
    m, n = A.shape
    kind = draw(st.sampled_from(["full", "row", "row2d", "column", "batched"]))
    shape = {
        "full": (m, n),
        "row": (n,),
        "row2d": (1, n),
        "column": (m, 1),
        "batched": (*(A.batch_shape or (2,)), m, n),
    }[kind]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return A, rng.standard_normal(shape)


@given(dense_operands())
def test_multiply_dense_keeps_offsets_like_scipy(operands):
    A, X = operands
    results = jax.jit(lambda A, X: (A.multiply(X), A * X, X * A))(A, X)
    for result in results:
        assert result.offsets == A.offsets
        assert_close(dense_f64(result), dense_f64(A) * X, A.dtype)
    if not A.batch_shape and X.ndim == 2 and 0 not in A.shape and 1 not in A.shape:
        S = to_scipy_f64(A).multiply(X)  # SciPy keeps DIA here too
        assert S.format == "dia" and scipy_offsets(S, A.shape) == A.offsets


def test_multiply_errors():
    A = jaxdia.eye(3, 4)
    with pytest.raises(ValueError, match=r"X of shape \(3, 3\) does not broadcast.*\(3, 4\)"):
        A.multiply(np.ones((3, 3)))
    with pytest.raises(ValueError, match="inconsistent shapes"):
        A.multiply(jaxdia.eye(4, 3))
    with pytest.raises(TypeError, match="got str"):
        A.multiply("x")
    with pytest.raises(TypeError, match="from_scipy"):
        A.multiply(sp.eye_array(3, 4))
    with pytest.raises(ValueError, match=r"A / X: X of shape \(3, 3\) does not broadcast"):
        A / np.ones((3, 3))
    with pytest.raises(TypeError, match=r"A / B of two sparse matrices is dense"):
        A / A
    with pytest.raises(TypeError, match="unsupported operand"):
        A / "x"
    with pytest.raises(TypeError, match="unsupported operand"):
        2.0 / A


@given(dense_operands())
def test_divide_by_dense_divides_the_stored_entries_like_scipy(operands):
    """``A / X`` divides A's stored entries and keeps A's offsets, as SciPy's
    ``dia_array / ndarray``; the padding stays zero and gradients stay finite there."""
    A, X = operands
    result = jax.jit(lambda A, X: A / X)(A, X)
    assert result.offsets == A.offsets
    ones = jaxdia.DiaMatrix(np.ones(A.data.shape[-2:]), A.offsets, A.shape)
    stored = dense_f64(ones) != 0
    expected = np.where(stored, dense_f64(A) / np.where(stored, X, 1), 0)
    assert_close(dense_f64(result), expected, A.dtype, scale=8)
    if not A.batch_shape and X.ndim == 2 and 0 not in A.shape:
        S = sp.dia_array((np.nan_to_num(to_scipy_f64(A).data), A.offsets), shape=A.shape)
        assert_close(dense_f64(result), (S / X).toarray(), A.dtype, scale=8)
    zero_divisor = np.zeros(A.shape)
    grad = jax.grad(
        lambda d: (jaxdia.DiaMatrix(d, A.offsets, A.shape) / (zero_divisor + 1)).data.sum()
    )
    assert np.isfinite(grad(jnp.asarray(ones.data))).all()


def test_operands_scipy_accepts():
    """Lists, integer scalars beyond int32, ``A.dot(scalar)`` and non-native byte order."""
    S = sp.diags_array([1.0, 2.0, 3.0], offsets=[-1, 0, 1], shape=(4, 4)).todia()
    A = jaxdia.DiaMatrix.from_scipy(S)
    row = [1.0, 2.0, 3.0, 4.0]
    for result, expected in [
        (A * row, S * row),
        (A.multiply(row), S.multiply(row)),
        (A / row, S / np.asarray(row)),
        (A.dot(2), S.dot(2)),
        (A * 2**40, S * 2**40),
        (A * np.int64(2**40), S * np.int64(2**40)),
        (A / 2**40, S / 2**40),
        (A * np.asarray(row, ">f8"), S * np.asarray(row)),
    ]:
        assert isinstance(result, jaxdia.DiaMatrix) and result.offsets == A.offsets
        assert_close(result.todense(), expected.toarray(), A.dtype)
    big_endian = np.arange(4.0).astype(">f8")
    assert_close(A @ big_endian, S @ np.arange(4.0), A.dtype)
    assert_close(A + np.ones((4, 4), ">f4"), S.toarray() + 1, A.dtype)
    assert A.astype(">f4").dtype == np.float32


@given(dia_matrices(batch_shape=None), st.sampled_from([1, 2, 3, -1, 0.5]))
def test_power_matches_scipy(A, p):
    if p < 1 and A.dtype.kind != "c":
        A = abs(A)  # real roots and inverses of positive values
    dense = dense_f64(A)
    expected = np.zeros_like(dense)
    np.power(dense, p, out=expected, where=dense != 0)
    results = jax.jit(lambda A: (A.power(p), A**p))(A)
    for result in results:
        assert result.offsets == A.offsets
        assert_close(dense_f64(result), expected, A.dtype, scale=10)
    if not A.batch_shape:
        with np.errstate(divide="ignore", invalid="ignore"):  # SciPy maps padding too
            S = to_scipy_f64(A).power(p)
        assert_close(dense_f64(results[0]), S.toarray(), A.dtype, scale=10)


def test_power_errors_and_dtype():
    A = jaxdia.eye(3)
    with pytest.raises(NotImplementedError, match="zero power"):
        A.power(0)
    with pytest.raises(NotImplementedError, match="zero power"):
        A ** jnp.asarray(0.0)
    with pytest.raises(TypeError, match=r"p must be a scalar, got ndarray of shape \(2,\)"):
        A.power(np.ones(2))
    assert A.power(2, dtype=np.complex64).dtype == np.complex64
    # A traced exponent cannot be checked for zero; it raises the stored entries only.
    assert_close(jax.jit(lambda p: A.power(p).todense())(2.0), np.eye(3), np.float32)
    # A complex exponent gives a complex matrix, as in NumPy, even 2 + 0j (it was real).
    for p in (2 + 0j, np.complex64(2), 2 + 1e-30j):
        squared = (A * 3.0) ** p
        assert squared.dtype == np.result_type(A.dtype, np.complex64)
        np.testing.assert_allclose(squared.todense(), 9 * np.eye(3))


@pytest.mark.parametrize("p", [1000, 1000.0, 37, -25])
def test_large_integral_powers_are_as_accurate_as_numpy(p):
    """Repeated squaring rounded once per step: A ** 1000 of float32 entries near 1 was
    off by 3.7e-5 relative (NumPy's pow: 5e-8)."""
    values = 1 + np.linspace(-1e-3, 1e-3, 50, dtype=np.float32)
    A = jaxdia.diags([values], offsets=[0])
    expected = values.astype(np.float64) ** p
    result = np.asarray((A**p).diagonal(), np.float64)
    np.testing.assert_allclose(result, expected, rtol=4e-7)


# -- A @ B -----------------------------------------------------------------------------------


def product_offsets(A, B):
    m, p = A.shape[0], B.shape[1]
    return tuple(sorted({a + b for a in A.offsets for b in B.offsets if -m < a + b < p}))


@given(pairs(same_shape=False))
def test_matmul_dia_matches_scipy(pair):
    A, B = pair
    C, D = jax.jit(lambda A, B: (A @ B, A.dot(B)))(A, B)
    assert isinstance(C, jaxdia.DiaMatrix) and C.shape == (A.shape[0], B.shape[1])
    assert C.offsets == product_offsets(A, B)
    assert C.dtype == jnp.result_type(A.dtype, B.dtype)
    expected = dense_f64(A) @ dense_f64(B)
    assert_close(dense_f64(C), expected, loosest(A.dtype, B.dtype), scale=A.shape[1] + 1)
    if not A.batch_shape and not B.batch_shape and C.offsets:
        S = to_scipy_f64(A) @ to_scipy_f64(B)
        assert S.format == "dia" and scipy_offsets(S, C.shape) == C.offsets
    assert D.offsets == C.offsets


def test_matmul_dia_errors_and_empty():
    with pytest.raises(ValueError, match=r"dimension mismatch.*\(3, 4\).*\(3, 3\)"):
        jaxdia.eye(3, 4) @ jaxdia.eye(3)
    C = jaxdia.eye(3, 2, k=-2) @ jaxdia.eye(2, 3, k=-1)  # the only pair lands outside
    assert C.offsets == () and C.shape == (3, 3)


def test_matmul_dia_jit_vmap_grad():
    rng = np.random.default_rng(0)
    A = jaxdia.DiaMatrix(rng.standard_normal((3, 5)), (-2, 0, 1), (4, 5))
    B = jaxdia.DiaMatrix(rng.standard_normal((2, 3)), (-1, 2), (5, 3))

    def loss(a, b):
        C = jaxdia.DiaMatrix(a, A.offsets, A.shape) @ jaxdia.DiaMatrix(b, B.offsets, B.shape)
        return jnp.sum(jnp.sin(C.todense()))

    def dense_loss(a, b):
        dense_a = jaxdia.DiaMatrix(a, A.offsets, A.shape).todense()
        dense_b = jaxdia.DiaMatrix(b, B.offsets, B.shape).todense()
        return jnp.sum(jnp.sin(dense_a @ dense_b))

    np.testing.assert_allclose(jax.jit(loss)(A.data, B.data), dense_loss(A.data, B.data))
    grads = jax.grad(loss, argnums=(0, 1))(A.data, B.data)
    expected = jax.grad(dense_loss, argnums=(0, 1))(A.data, B.data)
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    batch = rng.standard_normal((4, 3, 5))
    batched = jax.vmap(lambda a: (jaxdia.DiaMatrix(a, A.offsets, A.shape) @ B).data)(batch)
    direct = (jaxdia.DiaMatrix(batch, A.offsets, A.shape) @ B).data
    np.testing.assert_allclose(batched, direct, rtol=1e-12)


def nan_padded(shape, offsets, dtype, batch=(), seed=0):
    """A DiaMatrix of random in-bounds entries and NaN in every padding slot."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((*batch, len(offsets), shape[1]))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(data.shape)
    inside = np.asarray(in_bounds(offsets, shape, host=True))
    return jaxdia.DiaMatrix(np.where(inside, data, np.nan).astype(dtype), offsets, shape)


def pair_product(path):
    """``A @ B`` by ``_products.pair_products`` on a forced path, in a fresh ``jit``
    (``A @ B`` itself is one jitted function, cached per structure): unrolled or looped."""
    cap = 10**9 if path == "unrolled" else 0

    def product(A, B):
        saved, _products.MAX_UNROLLED_PAIRS = _products.MAX_UNROLLED_PAIRS, cap
        try:
            return jaxdia.DiaMatrix._wrap(_products.pair_products(A._parts, B._parts))
        finally:
            _products.MAX_UNROLLED_PAIRS = saved

    return product


#: (m, n, p, offsets of A, offsets of B): the adversarial products, each on both paths.
PRODUCTS = [
    (1, 1, 1, (0,), (0,)),
    (3, 5, 2, (-2, 0, 4), (-4, -1, 1)),  # rectangular
    (4, 9, 3, tuple(range(-3, 9)), tuple(range(-8, 3))),  # bands as wide as the matrices
    (7, 7, 7, (), (0, 1)),  # no diagonal
    (7, 7, 7, (3,), (5,)),  # the only pair lands outside: no diagonal
    (36, 36, 36, (-6, -1, 0, 1, 6), (-6, -1, 0, 1, 6)),  # 2-D stencils on a 6 x 6 grid
    (30, 20, 40, tuple(range(-29, 20, 3)), tuple(range(-19, 40, 4))),  # scattered, wider
    (60, 40, 60, tuple(range(-22, 3)), tuple(range(-2, 23))),  # tall bands that drift
]


@pytest.mark.parametrize(
    "m, n, p, offsets_a, offsets_b, path",
    [
        (*case, path)
        for case in PRODUCTS
        for path in ("default", "unrolled", "looped")
        # The unrolled form runs up to the cap only (beyond, its program grows with pairs).
        if path != "unrolled" or len(case[3]) * len(case[4]) <= _products.MAX_UNROLLED_PAIRS
    ],
)
def test_matmul_dia_paths_match_scipy(m, n, p, offsets_a, offsets_b, path):
    """Both forms of ``A @ B`` (and the default's choice) against SciPy's CSR product,
    NaN in every padding slot, in the dtypes and batches a DiaMatrix holds."""
    product = jax.jit(operator_matmul if path == "default" else pair_product(path))
    for dtype_a, dtype_b in [(np.float64, np.float64), (np.complex128, np.float32)]:
        A = nan_padded((m, n), offsets_a, dtype_a)
        B = nan_padded((n, p), offsets_b, dtype_b, seed=1)
        C = product(A, B)
        assert C.shape == (m, p) and C.offsets == product_offsets(A, B)
        assert C.dtype == jnp.result_type(dtype_a, dtype_b)
        expected = (to_scipy_f64(A).tocsr() @ to_scipy_f64(B).tocsr()).toarray()
        assert_close(dense_f64(C), expected, np.float32 if dtype_b == np.float32 else np.float64)
        inside = np.asarray(in_bounds(C.offsets, C.shape, host=True))
        assert np.all(np.asarray(C.data)[..., ~inside] == 0)  # the result's padding
    A = nan_padded((m, n), offsets_a, np.float64, batch=(2, 1))
    B = nan_padded((n, p), offsets_b, np.float64, batch=(3,), seed=1)
    C = product(A, B)
    assert C.batch_shape == (2, 3)
    assert_close(dense_f64(C), dense_f64(A) @ dense_f64(B), np.float64, scale=n + 1)


def operator_matmul(A, B):
    return A @ B


@pytest.mark.parametrize("path", ["unrolled", "looped"])
@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16])
def test_matmul_dia_16_bit_accumulates_in_float32(path, dtype):
    """Up to 41 terms per diagonal added in float32 and rounded once (added in 16 bits,
    their sum would drift by several units in the last place)."""
    offsets = tuple(range(-20, 21))
    A = jaxdia.DiaMatrix(np.full((41, 60), 1.0, dtype), offsets, (60, 60))
    B = jaxdia.DiaMatrix(np.full((41, 60), 0.1, dtype), offsets, (60, 60))
    if path == "unrolled":  # 64 pairs or fewer
        A, B = (jaxdia.DiaMatrix(M.data[17:24], offsets[17:24], M.shape) for M in (A, B))
    C = jax.jit(pair_product(path))(A, B)
    assert C.dtype == np.dtype(dtype)
    exact = dense_f64(A) @ dense_f64(B)  # 16-bit inputs are exact in float64
    np.testing.assert_array_equal(np.asarray(C.todense(), np.float64), exact.astype(dtype))


# The unrolled form's derivatives are those of static slices (test_matmul_dia_jit_vmap_grad).
@pytest.mark.parametrize("path", [pytest.param("unrolled", marks=pytest.mark.full), "looped"])
def test_matmul_dia_paths_grad_jvp_vmap(path):
    """Reverse and forward derivatives with respect to both operands' data, on both
    paths, against the dense product; NaN in padding reaches no value or derivative."""
    A = nan_padded((9, 8), (-5, -2, 0, 1, 4), np.complex128)
    B = nan_padded((8, 7), (-3, 0, 2, 6), np.float64, seed=1)
    product = pair_product(path)

    def loss(a, b, dense=False):
        A_, B_ = jaxdia.DiaMatrix(a, A.offsets, A.shape), jaxdia.DiaMatrix(b, B.offsets, B.shape)
        C = A_.todense() @ B_.todense() if dense else product(A_, B_).todense()
        return jnp.sum(jnp.abs(jnp.sin(C)) ** 2)

    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(A.data, B.data)
    expected = jax.grad(functools.partial(loss, dense=True), argnums=(0, 1))(A.data, B.data)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, np.nan_to_num(want), rtol=1e-10, atol=1e-12)
    tangents = (jnp.where(jnp.isnan(A.data), 0, 1 - 0.5j), jnp.where(jnp.isnan(B.data), 0, 0.25))
    _, forward = jax.jvp(loss, (A.data, B.data), tangents)
    _, dense = jax.jvp(functools.partial(loss, dense=True), (A.data, B.data), tangents)
    np.testing.assert_allclose(forward, dense, rtol=1e-10)
    batch = jnp.stack([A.data, 2 * A.data])
    mapped = jax.vmap(lambda a: product(jaxdia.DiaMatrix(a, A.offsets, A.shape), B).data)(batch)
    direct = product(jaxdia.DiaMatrix(batch, A.offsets, A.shape), B).data
    np.testing.assert_allclose(mapped, direct, rtol=1e-12)


def band(n, count, dtype=np.float64):
    offsets = tuple(range(-(count // 2), count - count // 2))
    return jaxdia.DiaMatrix(np.ones((count, n), dtype), offsets, (n, n))


def test_matmul_dia_program_does_not_grow_with_pairs():
    """Pins the form of ``A @ B``: up to ``MAX_UNROLLED_PAIRS`` pairs unrolled (no loop, a
    program bounded by the cap), beyond it one loop over B's diagonals whose program
    (StableHLO and compiled HLO) is the same at 13 and 53 diagonals, 169 and 2809 pairs
    (unrolled, 53 diagonals made 25,000 lines and compiled for 10-50 s)."""
    matmul = operator_matmul
    small, cap = band(120, 8), band(120, 9)  # 64 pairs (the cap), 81
    assert "stablehlo.while" not in jax.jit(matmul).lower(small, small).as_text()
    assert "stablehlo.while" in jax.jit(matmul).lower(cap, cap).as_text()
    assert program_lines(matmul, small, small, compiled=False)[0] < 700
    sizes = {count: program_lines(matmul, band(120, count), band(120, count)) for count in (13, 53)}
    assert abs(sizes[13][0] - sizes[53][0]) <= 4 and abs(sizes[13][1] - sizes[53][1]) <= 4
    # A.T @ A: the transpose slices each diagonal (for in-place products), the product
    # adds nothing per pair.
    transposed = lambda A: A.T @ A  # noqa: E731
    lines = {count: program_lines(transposed, band(120, count)) for count in (5, 53)}
    for kind in (0, 1):
        assert lines[53][kind] - lines[5][kind] <= 16 * (53 - 5)
    # A Galerkin product R A P: linear interpolation to 30 coarse points, whose DIA form
    # drifts over 31 diagonals, and A of 5 and of 53 diagonals.
    P = interpolation(60)
    galerkin = lambda A, P: P.T @ A @ P  # noqa: E731
    sizes = {count: program_lines(galerkin, band(60, count), P) for count in (5, 53)}
    assert abs(sizes[5][0] - sizes[53][0]) <= 24 and abs(sizes[5][1] - sizes[53][1]) <= 24


def interpolation(n):
    """1-D linear interpolation from ``n // 2`` coarse points (fine ``2I + 1``) to ``n``."""
    dense = np.zeros((n, n // 2))
    for coarse in range(n // 2):
        dense[2 * coarse + 1, coarse] = 1
        dense[2 * coarse, coarse] = 0.5
        if 2 * coarse + 2 < n:
            dense[2 * coarse + 2, coarse] = 0.5
    return jaxdia.DiaMatrix.from_dense(dense)


def test_galerkin_product_matches_scipy():
    P = interpolation(60)
    A = nan_padded((60, 60), tuple(range(-6, 7)), np.float64)
    coarse = jax.jit(lambda A, P: P.T @ A @ P)(A, P)
    S, SP = to_scipy_f64(A).tocsr(), to_scipy_f64(P).tocsr()
    assert_close(dense_f64(coarse), (SP.T @ S @ SP).toarray(), np.float64, scale=100)


def windows_read_by_static_slices(hlo: str) -> int:
    """Fusions of compiled HLO rooted at a ``dynamic-update-slice`` of a parameter that
    read that parameter through a static ``slice``: XLA does not match the two as the same
    rows, and makes the update a pass over the whole result instead of an in-place one."""
    count = 0
    for computation in re.split(r"\n(?=%|ENTRY)", hlo):
        root = re.search(r"ROOT %\S+ = \S+ dynamic-update-slice\((%[\w.\-]+),", computation)
        if root and re.search(r" slice\(" + re.escape(root.group(1)) + r"\)", computation):
            count += 1
    return count


def test_matmul_dia_loop_updates_its_windows_in_place():
    """Pins the loop's window updates as in-place ones where every window starts on the
    same row (XLA folds a constant start, and a window as tall as the result, into a
    static slice of the carried result): the upper triangle of ``A^H A`` (the normal
    equations) and a product with a diagonal matrix, beside a band product. They ran
    20-40x slower before."""
    A = band(40, 21)
    H = _products.adjoint(A._parts)
    upper = (np.asarray(H.offsets)[:, None] + np.asarray(A.offsets)[None, :]) >= 0
    D = jaxdia.DiaMatrix(np.ones((1, 40)), (0,), (40, 40))
    wide = band(40, 81)

    def normal(A):
        return _products.pair_products(_products.adjoint(A._parts), A._parts, upper).data

    for fn, args in [
        (normal, (A,)),
        (operator_matmul, (wide, D)),
        (operator_matmul, (wide, A)),
    ]:
        hlo = jax.jit(fn).lower(*args).compile().as_text()
        assert "while" in hlo and windows_read_by_static_slices(hlo) == 0


def test_matmul_dia_gradient_memory_stays_with_the_operands():
    """The loop's step is rematerialized in reverse mode: the gradient's temporaries stay
    within a few times the operands and result (storing each step's products, they were
    10x that: more than all the pairs' products)."""
    A = band(4000, 27)

    def loss(a, b):
        C = jaxdia.DiaMatrix(a, A.offsets, A.shape) @ jaxdia.DiaMatrix(b, A.offsets, A.shape)
        return jnp.sum(C.data**2)

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(A.data, A.data).compile()
    if compiled.memory_analysis() is None:
        pytest.skip("no memory analysis on this backend")
    operands = (27 + 27 + 53) * 4000 * 8  # A, B and C
    assert compiled.memory_analysis().temp_size_in_bytes < 4 * operands


# -- reductions ------------------------------------------------------------------------------


@given(dia_matrices(batch_shape=None), st.sampled_from([None, 0, 1, -1, -2, (0, 1), (-1, 0), (1,)]))
def test_sum_and_mean_match_scipy(A, axis):
    dense = dense_f64(A)
    axes = (0, 1) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    dense_axes = tuple((-2, -1)[a] for a in axes)
    expected = dense.sum(axis=dense_axes)
    result, mean = jax.jit(lambda A: (A.sum(axis=axis), A.mean(axis=axis)))(A)
    assert isinstance(result, jax.Array) and result.shape == np.shape(expected)
    assert_close(result, expected, A.dtype, scale=max(A.shape, default=1) ** (axis is None) * 8)
    if not A.batch_shape:
        # SciPy's column sums multiply padding by 0, so its oracle gets zero padding.
        S = sp.dia_array((np.nan_to_num(to_scipy_f64(A).data), A.offsets), shape=A.shape)
        assert np.shape(S.sum(axis=axis)) == result.shape
        count = np.prod([dense.shape[a] for a in dense_axes])
        if count:
            assert_close(mean, S.mean(axis=axis), A.dtype, scale=max(A.shape) * 8)


def test_column_sums_and_powers_avoid_slow_xla_ops():
    """Column sums add the rows (XLA CPU's reduction over the diagonals' axis was 40-70x
    slower), concrete integral powers multiply and ``p = 0.5`` is a square root (a traced
    exponent was a general ``pow``: 16x slower eagerly), a row operand of ``multiply`` lines
    up with data's columns without a gather, real ``conj``/``real`` are A."""
    A = jaxdia.DiaMatrix(np.ones((3, 8)), (-1, 0, 2), (8, 8))
    row = jax.jit(lambda A, r: A.multiply(r)).lower(A, np.ones(8)).as_text()
    assert "stablehlo.gather" not in row
    for reduction in (lambda A: A.sum(axis=0), lambda A: A.count_nonzero(axis=0)):
        assert "stablehlo.reduce" not in jax.jit(reduction).lower(A).as_text()
    for p in (2, 3.0, -1, np.int64(2), 0.5):
        assert "stablehlo.power" not in jax.jit(lambda A, p=p: A**p).lower(A).as_text()
    assert "stablehlo.power" in jax.jit(lambda A: A**1.5).lower(A).as_text()
    assert A.conj() is A and A.real is A


def test_sums_are_products_with_ones():
    """``sum`` and ``mean`` run the tuned product with a vector of ones: XLA CPU's
    reduction of the masked 2-D data was 5-10x slower for 27 diagonals at n = 1e6."""
    A = jaxdia.DiaMatrix(np.ones((3, 8)), (-1, 0, 2), (8, 8))
    for reduction in (A.sum, A.mean):
        for axis in (None, 0, 1):
            jaxpr = str(jax.make_jaxpr(lambda A, axis=axis: reduction.__func__(A, axis))(A))
            assert "dia_spmm" in jaxpr
            assert re.search(r"reduce_sum\[axes=\(\d+, \d", jaxpr) is None


def test_sum_dtype_and_axis_error():
    A = jaxdia.eye(3, dtype=np.float32)
    assert A.sum(dtype=np.float64).dtype == np.float64
    for axis in (2, (0, 0), (), [0]):
        with pytest.raises(ValueError, match=r"axis must be None, 0, 1, -2, -1 or a tuple"):
            A.sum(axis=axis)
        with pytest.raises(ValueError, match=r"axis must be None, 0, 1, -2, -1 or a tuple"):
            A.count_nonzero(axis=axis)


def test_mean_follows_numpy_dtypes_and_16_bit_range():
    """``mean`` computes as ``np.mean``: 16-bit floats in float32 (the count alone can be
    beyond float16's 65504), an integer or bool ``dtype`` summed and returned in it."""
    assert_close(jaxdia.eye(300, dtype=np.float16).mean(), 1 / 300, np.float16)
    with jax.enable_x64(False):  # m * n >= 2**31 overflowed as an int32 operand
        assert_close(jaxdia.eye(100_000).mean(), 1e-5, np.float32)
    wide = jaxdia.eye(2, 70_000, dtype=np.float16)
    assert wide.mean(axis=1).dtype == np.float16
    assert_close(wide.mean(axis=1), [1 / 70_000] * 2, np.float16)
    S = sp.diags_array([0.5, 1.5, -0.7], offsets=[-1, 0, 1], shape=(4, 4)).todia()
    A = jaxdia.DiaMatrix.from_scipy(S)
    for dtype in (np.int32, np.bool_, np.complex64):
        for axis in (None, 0, 1):
            result = A.mean(axis=axis, dtype=dtype)
            expected = np.mean(S.toarray(), axis=axis, dtype=dtype)
            assert result.dtype == expected.dtype
            assert_close(result, expected, np.complex64)


def test_numpy_sum_and_mean_functions():
    """``np.sum(A)`` and ``np.mean(A)`` call the methods with ``out=None``, as for SciPy."""
    S = sp.random_array((5, 4), density=0.5, format="dia", rng=0)
    A = jaxdia.DiaMatrix.from_scipy(S)
    for axis in (None, 0, 1):
        assert_close(np.sum(A, axis=axis), np.sum(S, axis=axis), A.dtype)
        assert_close(np.mean(A, axis=axis), np.mean(S, axis=axis), A.dtype)
    for method in (A.sum, A.mean):
        with pytest.raises(ValueError, match="out must be None .*got ndarray"):
            method(out=np.zeros(()))


def test_padding_masks_are_not_program_constants():
    """Masks of in-bounds slots come from an iota: a jitted program's size does not grow
    with ``n_diags * n`` (a NumPy mask was embedded as a constant of data's size)."""
    n = 100_000
    A = jaxdia.DiaMatrix(np.ones((27, n), np.float32), tuple(range(-13, 14)), (n, n))

    def everything(A):
        return (2 * A, A / 2, A**2, abs(A), A.multiply(A), A.sum(0), A.sum(1), A.mean())

    assert len(jax.jit(everything).lower(A).as_text()) < 100_000
    assert jnp.asarray(jax.jit(lambda A: A.count_nonzero())(A)) == A.nnz
    for result, expected in zip(jax.jit(everything)(A), everything(A), strict=True):
        if isinstance(expected, jaxdia.DiaMatrix):
            assert result.offsets == expected.offsets
            result, expected = result.data, expected.data
        np.testing.assert_array_equal(result, expected)


def test_conversions_compute_their_indices_in_the_program():
    """``from_dense``, ``todense``, ``A.multiply(column)``, ``A / column`` and ``kron``
    compute slot indices from an iota: a program's size does not grow with the number of
    stored entries (NumPy index tables were constants of that size: ``A.multiply(column)``
    for 27 diagonals at n = 1e6 compiled for 5.9 s). Lowered only: nothing this size runs."""
    n, offsets = 100_000, tuple(range(-13, 14))
    A = jaxdia.DiaMatrix(np.ones((27, n), np.float32), offsets, (n, n))
    column = jax.ShapeDtypeStruct((n, 1), np.float32)
    dense = jax.ShapeDtypeStruct((5_000, 5_000), np.float32)
    T = jaxdia.DiaMatrix(np.ones((3, 300), np.float32), (-1, 0, 1), (300, 300))
    wide = jaxdia.DiaMatrix(np.ones((2, 400), np.float32), (0, 1), (300, 400))
    programs = [
        jax.jit(lambda A, x: (A.multiply(x), A / x)).lower(A, column),
        jax.jit(lambda M: jaxdia.DiaMatrix.from_dense(M, offsets)).lower(dense),
        jax.jit(lambda data: jaxdia.DiaMatrix(data, offsets, (5_000, 5_000)).todense()).lower(
            jax.ShapeDtypeStruct((27, 5_000), np.float32)
        ),
        jax.jit(jaxdia.kron).lower(T, T),
        jax.jit(jaxdia.kron).lower(T, wide),
    ]
    for program in programs:
        assert len(program.as_text()) < 100_000


def test_sum_under_grad_ignores_padding():
    data = np.array([[np.nan, 1.0, 2.0], [3.0, 4.0, np.nan]])
    grad = jax.grad(lambda d: jaxdia.DiaMatrix(d, (1, -1), (3, 3)).sum(axis=1).sum())(data)
    np.testing.assert_array_equal(grad, [[0, 1, 1], [1, 1, 0]])


@given(dia_matrices(batch_shape=None))
def test_count_nonzero_and_nnz_match_scipy(A):
    data = np.asarray(A.data).copy()
    data[..., ::2] = 0  # explicit zeros (padding stays NaN where it was)
    A = jaxdia.DiaMatrix(np.where(np.isnan(np.asarray(A.data)), np.nan, data), A.offsets, A.shape)
    expected = np.count_nonzero(dense_f64(A), axis=(-2, -1))
    count = A.count_nonzero()
    if A.batch_shape:
        np.testing.assert_array_equal(count, expected)
    else:
        assert isinstance(count, int) and count == expected
        assert count == to_scipy_f64(A).count_nonzero()
        assert A.nnz == to_scipy_f64(A).nnz
    traced = jax.jit(lambda A: A.count_nonzero())(A)
    np.testing.assert_array_equal(traced, expected)
    for axis in (0, 1, -1):  # SciPy's DIA does not count along an axis; NumPy does
        expected = np.count_nonzero(dense_f64(A), axis=(-2, -1)[axis])
        np.testing.assert_array_equal(A.count_nonzero(axis=axis), expected)


# -- structure helpers -----------------------------------------------------------------------


def test_align_for_cond():
    A = jaxdia.diags([1.0, 2.0], [0, 2], shape=(4, 4))
    B = jaxdia.eye(4, k=-1)
    A2, B2 = jaxdia.align(A, B)
    assert A2.offsets == B2.offsets == (-1, 0, 2)
    np.testing.assert_array_equal(A2.todense(), A.todense())
    np.testing.assert_array_equal(B2.todense(), B.todense())

    @jax.jit
    def pick(flag):
        return lax.cond(flag, lambda: A2, lambda: B2).todense()

    np.testing.assert_array_equal(pick(True), A.todense())
    np.testing.assert_array_equal(pick(False), B.todense())
    with pytest.raises(TypeError):  # unaligned branches have different pytree structure
        lax.cond(True, lambda: A, lambda: B)


def test_align_errors():
    with pytest.raises(ValueError, match=r"one shape.*\(3, 3\), \(3, 4\)"):
        jaxdia.align(jaxdia.eye(3), jaxdia.eye(3, 4))
    with pytest.raises(TypeError, match="argument 1 must be a jaxdia.DiaMatrix, got ndarray"):
        jaxdia.align(jaxdia.eye(3), np.eye(3))


@given(dia_matrices(batch_shape=None), st.lists(st.integers(-13, 13), max_size=4, unique=True))
def test_with_offsets_adds_zero_diagonals(A, extra):
    B = A.with_offsets(A.offsets + tuple(k for k in extra if k not in A.offsets))
    m, n = A.shape
    assert B.offsets == tuple(
        sorted(set(A.offsets) | {k for k in extra if max(0, k) < min(n, m + k)})
    )
    assert_close(dense_f64(B), dense_f64(A), A.dtype)


def test_with_offsets_drops_checked_diagonals():
    A = jaxdia.diags([[1.0, 1.0], [0.0, 0.0, 0.0]], [1, 0], shape=(3, 3))
    assert A.with_offsets([1]).offsets == (1,)
    with pytest.raises(ValueError, match=r"would drop diagonals \[1\], which hold nonzero"):
        A.with_offsets([0])
    assert A.with_offsets([0], check=False).offsets == (0,)
    with pytest.raises(ValueError, match="duplicate"):
        A.with_offsets([0, 0])
    with pytest.raises(ValueError, match="cannot check.*check=False"):
        jax.jit(lambda A: A.with_offsets([1]))(A)
    dropped = jax.jit(lambda A: A.with_offsets([1], check=False))(A)
    assert dropped.offsets == (1,)


def test_eliminate_zeros():
    nan = np.nan
    data = np.array([[0.0, 0.0, nan], [nan, 0.0, 0.0], [0.0, 2.0, 0.0]])
    A = jaxdia.DiaMatrix(data, (-1, 1, 0), (3, 3))
    assert A.eliminate_zeros().offsets == (0,)
    batched = jaxdia.DiaMatrix(
        np.stack([data, np.nan_to_num(data) + [[0, 1, 0], [0] * 3, [0] * 3]]), (-1, 1, 0), (3, 3)
    )
    assert batched.eliminate_zeros().offsets == (-1, 0)
    with pytest.raises(ValueError, match="needs concrete data"):
        jax.jit(lambda A: A.eliminate_zeros())(A)


@st.composite
def kron_pairs(draw):
    A = draw(dia_matrices(max_side=4, batch_shape=None))
    B = draw(dia_matrices(max_side=4, batch_shape=draw(st.sampled_from([(), A.batch_shape]))))
    return A, B


@given(kron_pairs())
def test_kron_matches_scipy(pair):
    A, B = pair
    K = jaxdia.kron(A, B)
    assert K.shape == (A.shape[0] * B.shape[0], A.shape[1] * B.shape[1])
    outer = dense_f64(A)[..., :, None, :, None] * dense_f64(B)[..., None, :, None, :]
    expected = outer.reshape(*outer.shape[:-4], *K.shape)
    assert_close(dense_f64(K), expected, loosest(A.dtype, B.dtype))
    if not A.batch_shape:
        # SciPy may return BSR, whose dense blocks hold zeros: compare the nonzero offsets
        # (random in-bounds data holds no zero, so every stored slot of K is nonzero).
        S = sp.kron(to_scipy_f64(A), to_scipy_f64(B)).tocoo()
        S.eliminate_zeros()
        assert K.offsets == tuple(np.unique(S.col - S.row).tolist())


def test_kron_square_offsets_and_errors():
    T = jaxdia.diags([1.0, 2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
    assert jaxdia.kron(T, T).offsets == (-4, -3, -2, -1, 0, 1, 2, 3, 4)
    # Diagonals (1, -1) and (0, 2) of (A, B) both land on diagonal 1 * 3 - 1 = 2, in
    # disjoint slots; a batch of A broadcasts against an unbatched B.
    rng = np.random.default_rng(0)
    A = jaxdia.DiaMatrix(rng.standard_normal((2, 2, 4)), (0, 1), (4, 4))
    B = jaxdia.DiaMatrix(rng.standard_normal((2, 3)), (-1, 2), (3, 3))
    K = jax.jit(jaxdia.kron)(A, B)
    assert K.offsets == (-1, 2, 5)
    for i in range(2):
        np.testing.assert_allclose(K.todense()[i], np.kron(A.todense()[i], B.todense()))
    dense = np.kron(T.todense(), np.eye(3))  # as SciPy, a dense factor is accepted
    np.testing.assert_array_equal(jaxdia.kron(T, np.eye(3)).todense(), dense)
    with pytest.raises(TypeError, match="kron: B must be a DiaMatrix, a scalar or a 2-D array"):
        jaxdia.kron(T, "x")


def test_kron_grad():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((1, 2))

    def loss(a, b):
        K = jaxdia.kron(jaxdia.DiaMatrix(a, (0, 1), (3, 3)), jaxdia.DiaMatrix(b, 1, (3, 2)))
        return jnp.sum(K.todense() ** 2)

    def dense_loss(a, b):
        A = jaxdia.DiaMatrix(a, (0, 1), (3, 3)).todense()
        return jnp.sum(jnp.kron(A, jaxdia.DiaMatrix(b, 1, (3, 2)).todense()) ** 2)

    for g, e in zip(jax.grad(loss, (0, 1))(a, b), jax.grad(dense_loss, (0, 1))(a, b)):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_conversions_and_kron_transpose_linearly():
    """``jax.linear_transpose`` of the linear maps built on scatters and gathers equals
    their VJP (JAX transposes a scatter only when its indices are unique)."""
    rng = np.random.default_rng(2)
    data = rng.standard_normal((3, 4))

    def matrix(d):
        return jaxdia.DiaMatrix(d, (-1, 0, 1), (4, 4))

    maps = {
        "todense": lambda d: matrix(d).todense(),
        "from_dense": lambda d: jaxdia.DiaMatrix.from_dense(matrix(d).todense(), (-1, 1)).data,
        "multiply(column)": lambda d: matrix(d).multiply(np.arange(1.0, 5.0)[:, None]).data,
        "kron square": lambda d: jaxdia.kron(matrix(d), jaxdia.eye(2)).data,
        "kron wide": lambda d: jaxdia.kron(matrix(d), jaxdia.eye(2, 3, k=1)).data,
    }
    for name, f in maps.items():
        cotangent = rng.standard_normal(jax.eval_shape(f, data).shape)
        (transposed,) = jax.linear_transpose(f, data)(cotangent)
        (expected,) = jax.vjp(f, data)[1](cotangent)
        np.testing.assert_allclose(transposed, expected, rtol=1e-12, err_msg=name)


@st.composite
def setdiag_cases(draw):
    A = draw(dia_matrices(batch_shape=(), max_side=7, dtype=np.float64))
    m, n = A.shape
    k = draw(st.integers(-m + 1, n - 1)) if m and n else 0
    size = draw(st.one_of(st.none(), st.integers(0, max(m, n) + 2)))
    values = 7.5 if size is None else np.arange(1.0, size + 1)
    return A, values, k


@given(setdiag_cases())
def test_with_diagonal_matches_scipy_setdiag(case):
    A, values, k = case
    S = to_scipy_f64(A)
    S.setdiag(values, k)
    B = A.with_diagonal(values, k)
    assert_close(dense_f64(B), S.toarray(), A.dtype)
    assert B.offsets == scipy_offsets(S, A.shape)


def test_with_diagonal_batched_traced_and_errors():
    A = jaxdia.DiaMatrix(np.ones((2, 1, 3)), 0, (3, 3))
    B = A.with_diagonal(np.array([[1.0, 2.0], [3.0, 4.0]]), k=1)
    np.testing.assert_array_equal(B.todense()[:, 0, 1], [1.0, 3.0])
    f = jax.jit(lambda v: jaxdia.eye(3).with_diagonal(v, -1).todense())
    np.testing.assert_array_equal(f(jnp.array([5.0, 6.0])), np.eye(3) + np.diag([5.0, 6.0], -1))
    grad = jax.grad(lambda v: jaxdia.eye(3).with_diagonal(v, 1).sum())(jnp.ones(5))
    np.testing.assert_array_equal(grad, [1.0, 1.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"k exceeds array dimensions: k=3.*\(3, 3\)"):
        jaxdia.eye(3).with_diagonal(1.0, 3)
    with pytest.raises(TypeError, match="k must be an int"):
        jaxdia.eye(3).with_diagonal(1.0, 1.0)
    with pytest.raises(TypeError, match="values are complex"):
        jaxdia.eye(3).with_diagonal(1j)
    empty = jaxdia.eye(0, 3)
    assert empty.with_diagonal(1.0) is empty


def test_gradients_never_see_padding():
    nan = np.nan
    a = jnp.array([[nan, 1.0, -2.0], [3.0, 4.0, nan]])  # offsets (1, -1) in a 3 x 3 matrix
    b = jnp.array([[nan, 2.0, 5.0]])
    x = jnp.arange(1.0, 10.0).reshape(3, 3)

    def A(data):
        return jaxdia.DiaMatrix(data, (1, -1), (3, 3))

    def B(data):
        return jaxdia.DiaMatrix(data, 1, (3, 3))

    scalar_losses = [
        lambda s: (A(a) * s).sum(),
        lambda s: (A(a) / s).sum(),
        lambda p: abs(A(a)).power(p).sum(),
    ]
    for loss in scalar_losses:
        assert np.isfinite(jax.grad(loss)(1.5))
    data_losses = [
        lambda d: abs(A(d)).sum(),
        lambda d: abs(A(d)).power(0.5).sum(),
        lambda d: A(d).multiply(B(b)).sum(),
        lambda d: B(b).multiply(A(d)).sum(),
        lambda d: A(d).multiply(x).sum(),
        lambda d: (A(d) @ A(d)).sum(),
        lambda d: jaxdia.kron(A(d), A(d)).T.sum(axis=1).sum(),
    ]
    padding = np.isnan(np.asarray(a))
    for loss in data_losses:
        grad = np.asarray(jax.grad(loss)(a))
        assert np.all(np.isfinite(grad)) and np.all(grad[padding] == 0)
    assert np.all(np.isfinite(jax.grad(lambda x: A(a).multiply(x).sum())(x)))


def test_batch_and_operand_errors():
    A = jaxdia.DiaMatrix(np.ones((2, 1, 3)), 0, (3, 3))
    other = jaxdia.DiaMatrix(np.ones((3, 1, 3)), 0, (3, 3))
    with pytest.raises(ValueError, match=r"A @ B: batch shapes \[\(2,\), \(3,\)\]"):
        A @ other
    with pytest.raises(ValueError, match=r"A.multiply\(B\): batch shapes"):
        A.multiply(other)
    with pytest.raises(ValueError, match=r"A.multiply\(X\): batch shapes"):
        A.multiply(np.ones((3, 3, 3)))
    with pytest.raises(ValueError, match="with_diagonal: batch shapes"):
        A.with_diagonal(np.ones((3, 3)))
    with pytest.raises(ValueError, match="kron: batch shapes"):
        jaxdia.kron(A, other)
    with pytest.raises(TypeError, match="from_scipy"):
        A / sp.eye_array(3)


def test_equal_structure_hits_the_compilation_cache():
    from jaxdia import _ops

    # Batched: the compiled path (unbatched concrete matrices are combined on the host and
    # compile nothing, tests/test_host.py).
    A = jaxdia.DiaMatrix(np.ones((1, 2, 5)), (-3, 2), (17, 5))
    transposes, scalings = _ops.transpose._cache_size(), _ops._with_scalar._cache_size()
    A.T, (A * 2.0).T, jaxdia.DiaMatrix(np.zeros((1, 2, 5)), (2, -3), (17, 5)).T
    A * 3.0, 0.5 * jaxdia.DiaMatrix(np.zeros((1, 2, 5)), (2, -3), (17, 5))
    assert _ops.transpose._cache_size() == transposes + 1
    assert _ops._with_scalar._cache_size() == scalings + 1


# -- identity, repr --------------------------------------------------------------------------


def test_repr_and_identity_equality():
    A = jaxdia.eye(3, k=1, dtype=np.complex64)
    assert repr(A) == "DiaMatrix(shape=(3, 3), dtype=complex64, offsets=(1,))"
    B = jaxdia.DiaMatrix(np.ones((2, 4, 1, 3)), 0, (3, 3))
    assert repr(B) == "DiaMatrix(shape=(3, 3), dtype=float64, offsets=(0,), batch_shape=(2, 4))"
    shapes = jax.tree.map(lambda leaf: leaf.shape, A)  # other leaves, e.g. a vmap in_axes spec
    assert repr(shapes) == "DiaMatrix(shape=(3, 3), offsets=(1,), data=(1, 3))"
    C = jaxdia.eye(3, k=1, dtype=np.complex64)
    assert A == A and A != C  # identity, not elementwise
    assert bool(jnp.all(A.todense() == C.todense()))


def test_ops_under_jit_and_vmap():
    rng = np.random.default_rng(2)
    A = jaxdia.DiaMatrix(rng.standard_normal((3, 2, 4)), (-1, 1), (3, 4))

    def f(A):
        return ((A.T @ A) * 2.0 - A.H @ A.conj() + abs(A).T @ A).sum(axis=0)

    eager = f(A)
    # atol: entries that cancel to 0 may round to 1e-18 in a differently fused program
    np.testing.assert_allclose(jax.jit(f)(A), eager, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        jax.vmap(lambda d: f(jaxdia.DiaMatrix(d, A.offsets, A.shape)))(A.data),
        eager,
        rtol=1e-12,
        atol=1e-12,
    )
