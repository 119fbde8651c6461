"""Offset traces and diagonals: dense arrays against ``np.trace``, DIA against SciPy."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st
from jax.test_util import check_grads

import jaxdia
from jaxdia import _traces, traces
from jaxdia._kernels import xla_runs
from jaxdia._traces import dia_diagonal, dia_trace, dia_traces
from jaxdia.testing import batch_shapes, dia_matrices, random_values, shapes

from .helpers import assert_close, examples, to_scipy_f64

DENSE_DTYPES = [
    np.dtype(d)
    for d in (
        np.bool_,
        np.int8,
        np.int32,
        np.uint8,
        np.int64,
        np.float16,
        jnp.bfloat16,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
    )
]


def numpy_traces(M, offsets):
    """The oracle: ``np.trace`` per offset over the last two axes (floats in double)."""
    M = np.asarray(M)
    if M.dtype == jnp.bfloat16 or np.issubdtype(M.dtype, np.inexact):
        M = M.astype(np.complex128 if M.dtype.kind == "c" else np.float64)
    traces = [np.trace(M, offset=k, axis1=-2, axis2=-1) for k in offsets]
    return np.stack(traces, axis=-1) if traces else np.zeros((*M.shape[:-2], 0))


def random_dense(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape, dtype=dtype)
    return random_values(rng, shape, dtype)


def check_dense(M, offsets, got):
    """``got`` equals ``np.trace`` (exactly for integers, to tolerance for floats)."""
    M = np.asarray(M)
    expected = numpy_traces(M, offsets)
    assert got.shape == M.shape[:-2] + (len(offsets),)
    if M.dtype == jnp.bfloat16:
        assert got.dtype == M.dtype
    else:
        assert got.dtype == np.trace(np.zeros((1, 1), M.dtype)).dtype
    if M.dtype == np.bool_ or np.issubdtype(M.dtype, np.integer):
        np.testing.assert_array_equal(np.asarray(got), expected)
    else:
        # Sums of up to min(m, n) terms: scale the tolerance with the magnitude.
        wide = np.abs(np.asarray(M).astype(np.complex128))
        scale = 1 + max(M.shape[-2:], default=1) * (wide.max() if wide.size else 0)
        assert_close(got, expected, M.dtype, scale=scale)


@st.composite
def requested_offsets(draw, shape):
    """``q``: an int (sometimes beyond n) or a list of offsets, some outside the matrix."""
    m, n = shape
    as_count = st.integers(0, n + 3)
    as_list = st.lists(st.integers(-m - 2, n + 2), max_size=7)
    return draw(st.one_of(as_count, as_list))


@st.composite
def dense_cases(draw, max_side=12):
    shape = draw(shapes(max_side))
    batch = draw(batch_shapes())
    dtype = draw(st.sampled_from(DENSE_DTYPES))
    q = draw(requested_offsets(shape))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return random_dense(rng, (*batch, *shape), dtype), q


def offsets_of(q):
    return tuple(range(q)) if isinstance(q, int) else tuple(q)


# -- the kernel's code paths ----------------------------------------------------------------


# The patched thresholds are the same for every example: the fixture is safe to share.
every_path = settings(
    max_examples=examples(10), suppress_health_check=[HealthCheck.function_scoped_fixture]
)


PATHS = {
    # name: (patched thresholds, for 3 matrices 9x9 and q = 4: does the kernel loop, and
    # does the loop body gather)
    "default": ({}, False, False),
    "chunked": ({"_INLINE_FLOPS": 12}, True, False),
    "blockwise": ({"_CHUNK_ELEMENTS": 0, "_BLOCK_ELEMENTS": 1}, True, True),
    "streamed": ({"_CHUNK_ELEMENTS": 3, "_WINDOW_ELEMENTS": 0}, True, True),
}


@pytest.fixture(params=list(PATHS))
def path(request, monkeypatch):
    """Runs a test on each code path of the kernel, forced with small thresholds.

    ``default`` keeps the shipped thresholds (small inputs: one gather, one sum);
    ``chunked`` sums a gathered window in many small chunks (the inline-dispatch path);
    ``blockwise`` gathers the windows one matrix at a time (the many-matrices path);
    ``streamed`` reads the runs chunk by chunk inside loops (the long-runs paths: a
    gather for dense matrices, slices for DIA data).
    """
    for name, value in PATHS[request.param][0].items():
        monkeypatch.setattr(xla_runs, name, value)
    jax.clear_caches()  # the thresholds are read when the kernel is traced
    yield request.param
    jax.clear_caches()


def test_each_path_is_taken(path):
    runs = _traces._dense_runs((9, 9), tuple(range(4)))
    jaxpr = jax.make_jaxpr(partial(xla_runs.run_sums_xla, runs=runs))(np.ones((3, 9, 9)))
    loops = [eqn for eqn in jaxpr.eqns if eqn.primitive.name == "scan"]  # static fori_loop
    body = [eqn.primitive.name for loop in loops for eqn in loop.params["jaxpr"].eqns]
    assert (bool(loops), "gather" in body) == PATHS[path][1:]


@given(case=dense_cases())
def test_dense_traces_match_numpy(case):
    M, q = case
    check_dense(M, offsets_of(q), traces(M, q))


@pytest.mark.usefixtures("path")
@every_path
@given(case=dense_cases(max_side=9))
def test_dense_traces_match_numpy_on_every_path(case):
    M, q = case
    check_dense(M, offsets_of(q), traces(M, q))


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("shape", [(7, 7), (3, 8), (8, 3), (0, 4), (4, 0), (1, 1)])
def test_dense_rectangular_and_empty(shape):
    M = np.random.default_rng(0).standard_normal(shape)
    m, n = shape
    q = list(range(-m - 1, n + 2))
    check_dense(M, q, traces(M, q))
    check_dense(M, range(n + 3), traces(M, n + 3))


def test_dense_never_reads_other_diagonals():
    m, n = 6, 9
    M = np.full((m, n), np.nan)
    q = (-2, 0, 3)
    rows, cols = np.indices((m, n))
    on = np.isin(cols - rows, q)
    M[on] = np.arange(on.sum()) + 1.0
    got = np.asarray(traces(M, q))
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got, [np.nansum(np.where(cols - rows == k, M, 0)) for k in q])


def test_non_finite_values_on_a_diagonal_propagate():
    M = np.ones((4, 4))
    M[3, 3] = np.inf
    M[0, 1] = np.nan
    np.testing.assert_array_equal(np.asarray(traces(M, 3)), [np.inf, np.nan, 2.0])


def test_the_popular_wrong_answer_is_wrong_and_ours_is_not():
    """A published "fast" gather sums m[i, i+k] over i < n - q for every k: wrong."""
    n, q = 1000, 5
    mat = np.random.default_rng(3).uniform(size=(n, n))

    @jax.jit
    def get_traces_wrong(mat):
        base = jnp.arange(n - q)
        return jax.vmap(lambda i: jnp.sum(mat[base, base + i]))(jnp.arange(q))

    expected = np.array([np.trace(mat, offset=i) for i in range(q)])
    wrong = np.asarray(get_traces_wrong(mat))
    # Offset k misses q - k elements, each about 0.5: visibly wrong.
    assert np.all(np.abs(wrong - expected) > 0.1)
    np.testing.assert_allclose(np.asarray(traces(mat, q)), expected, rtol=1e-12)


def test_dense_under_jit_vmap_and_batch_dims_agree():
    rng = np.random.default_rng(1)
    M = rng.standard_normal((4, 3, 6, 5))
    q = (-3, 0, 1, 4)
    expected = numpy_traces(M, q)
    batched = traces(M, q)
    jitted = jax.jit(traces, static_argnums=1)(M, q)
    vmapped = jax.vmap(jax.vmap(lambda x: traces(x, q)))(M)
    for got in (batched, jitted, vmapped):
        assert_close(got, expected, np.float64, scale=10)


def test_dense_vmap_over_many_small_matrices():
    M = np.random.default_rng(2).standard_normal((1000, 10, 10))
    got = jax.jit(jax.vmap(lambda x: traces(x, 5)))(M)
    assert_close(got, numpy_traces(M, range(5)), np.float64, scale=10)


# Gradients: the transpose is the same on every path; the JVP runs the kernel.
@pytest.mark.parametrize("path", ["chunked", "streamed"], indirect=True)
@pytest.mark.usefixtures("path")
def test_dense_gradients():
    M = np.random.default_rng(4).standard_normal((2, 5, 7))
    q = (-2, 0, 3, 9)
    weights = np.arange(1.0, 5.0)

    def ours(M):
        return jnp.sum(traces(M, q) * weights)

    def dense(M):
        stacked = jnp.stack([jnp.trace(M, k, axis1=-2, axis2=-1) for k in q], axis=-1)
        return jnp.sum(stacked * weights)

    assert_close(jax.grad(ours)(M), jax.grad(dense)(M), np.float64)
    check_grads(lambda M: traces(M, q), (M,), order=1, modes=("fwd", "rev"))


def test_integer_results_are_exact_and_widened():
    M = np.full((300, 300), 100, np.int8)
    got = traces(M, 2)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(np.asarray(got), [30000, 29900])


def test_standalone_call_stays_under_the_inline_dispatch_threshold():
    """1000x1000, q = 5 must cost XLA < 1000 flops, or PjRt runs it off-thread (slow)."""
    spec = jax.ShapeDtypeStruct((1000, 1000), np.float64)
    compiled = jax.jit(traces, static_argnums=1).trace(spec, 5).lower().compile()
    assert compiled.cost_analysis()["flops"] < 1000


# -- DIA --------------------------------------------------------------------------------------


def scipy_traces(S, offsets):
    return np.array([S.diagonal(k).sum() if -S.shape[0] < k < S.shape[1] else 0 for k in offsets])


@st.composite
def dia_cases(draw, max_side=12):
    A = draw(dia_matrices(max_side=max_side, batch_shape=None))
    return A, draw(requested_offsets(A.shape))


def check_dia(A, q, got):
    offsets = offsets_of(q)
    assert got.shape == A.batch_shape + (len(offsets),)
    assert got.dtype == A.dtype
    for index in np.ndindex(*A.batch_shape):
        S = to_scipy_f64(jaxdia.DiaMatrix(A.data[index], A.offsets, A.shape))
        expected = scipy_traces(S, offsets)
        scale = 1 + max(A.shape) * np.nanmax(np.abs(S.data), initial=0)
        assert_close(got[index], expected, A.dtype, scale=scale)


@given(case=dia_cases())
def test_dia_traces_match_scipy(case):
    A, q = case
    check_dia(A, q, dia_traces(A.data, A.offsets, A.shape, q))


@pytest.mark.usefixtures("path")
@every_path
@given(case=dia_cases(max_side=9))
def test_dia_traces_match_scipy_on_every_path(case):
    A, q = case
    got = dia_traces(A.data, A.offsets, A.shape, q)
    check_dia(A, q, got)
    assert not jnp.isnan(got).any()  # padding holds NaN


@given(A=dia_matrices(max_side=10, batch_shape=None), k=st.integers(-12, 12))
def test_dia_diagonal_and_trace_match_scipy(A, k):
    diagonal = dia_diagonal(A.data, A.offsets, A.shape, k)
    trace = dia_trace(A.data, A.offsets, A.shape, k)
    m, n = A.shape
    length = max(0, min(m + min(k, 0), n - max(k, 0)))
    assert diagonal.shape == A.batch_shape + (length,)
    assert trace.shape == A.batch_shape
    for index in np.ndindex(*A.batch_shape):
        S = to_scipy_f64(jaxdia.DiaMatrix(A.data[index], A.offsets, A.shape))
        assert_close(diagonal[index], S.diagonal(k), A.dtype)
        scale = 1 + max(A.shape) * np.nanmax(np.abs(S.data), initial=0)
        assert_close(trace[index], S.diagonal(k).sum() if length else 0, A.dtype, scale=scale)


def test_dia_from_scipy_random_matrices():
    rng = np.random.default_rng(5)
    for m, n in [(20, 20), (15, 26), (26, 15)]:
        S = sp.random_array((m, n), density=0.2, rng=rng, format="dia")
        A = jaxdia.DiaMatrix.from_scipy(S)
        q = list(range(-m - 1, n + 1))
        np.testing.assert_allclose(
            np.asarray(dia_traces(A.data, A.offsets, A.shape, q)), scipy_traces(S, q), atol=1e-12
        )
        np.testing.assert_allclose(np.asarray(traces(A, q)), scipy_traces(S, q), atol=1e-12)
        np.testing.assert_allclose(
            np.asarray(traces(S.toarray(), q)), scipy_traces(S, q), atol=1e-12
        )


@pytest.mark.parametrize("path", ["chunked", "streamed"], indirect=True)
@pytest.mark.usefixtures("path")
def test_dia_under_jit_vmap_and_grad():
    rng = np.random.default_rng(6)
    shape, offsets = (7, 9), (-3, 0, 2, 8)
    data = rng.standard_normal((5, len(offsets), shape[1]))
    q = (-3, -1, 0, 8)
    batched = dia_traces(data, offsets, shape, q)
    jitted = jax.jit(dia_traces, static_argnums=(1, 2, 3))(data, offsets, shape, q)
    vmapped = jax.vmap(lambda d: dia_traces(d, offsets, shape, q))(data)
    for got in (jitted, vmapped):
        assert_close(got, batched, np.float64)

    def via_dense(data):
        dense = jaxdia.DiaMatrix(data, offsets, shape).todense()
        return jnp.stack([jnp.trace(dense, k, axis1=-2, axis2=-1) for k in q], axis=-1)

    weights = np.arange(1.0, 5.0)
    grad = jax.grad(lambda d: jnp.sum(dia_traces(d, offsets, shape, q) * weights))(data)
    expected = jax.grad(lambda d: jnp.sum(via_dense(d) * weights))(data)
    assert_close(grad, expected, np.float64)
    check_grads(lambda d: dia_traces(d, offsets, shape, q), (data,), order=1, modes=("fwd", "rev"))


def test_dia_diagonal_under_jit_and_vmap():
    data = np.arange(2 * 3 * 4.0).reshape(2, 3, 4)
    offsets, shape = (-1, 0, 2), (5, 4)
    expected = np.stack([sp.dia_array((d, offsets), shape=shape).diagonal(-1) for d in data])
    got = jax.jit(jax.vmap(lambda d: dia_diagonal(d, offsets, shape, -1)))(data)
    np.testing.assert_array_equal(np.asarray(got), expected)


def test_eager_diagonal_is_one_compiled_call():
    """Eager ``A.diagonal(k)`` of a stored diagonal reuses one compiled slice (JAX's eager
    indexing took ~1.3 ms for 1e6 entries, where SciPy returns a view)."""
    A = jaxdia.DiaMatrix(np.arange(12.0).reshape(3, 4), (-1, 0, 2), (5, 4))
    before = _traces._stored_diagonal._cache_size()
    for _ in range(3):
        np.testing.assert_array_equal(A.diagonal(2), [10.0, 11.0])  # A[0, 2], A[1, 3]
    assert _traces._stored_diagonal._cache_size() == before + 1


def test_dia_long_diagonals_stream_in_chunks():
    n = 70_000  # more than _CHUNK_ELEMENTS: the large, contiguous path
    rng = np.random.default_rng(7)
    offsets = (-2, 0, 5)
    data = rng.standard_normal((len(offsets), n))
    S = sp.dia_array((data, offsets), shape=(n, n))
    got = jax.jit(dia_traces, static_argnums=(1, 2, 3))(data, offsets, (n, n), (-2, 0, 1, 5))
    np.testing.assert_allclose(np.asarray(got), scipy_traces(S, (-2, 0, 1, 5)), rtol=1e-10)


def test_dia_matrix_methods():
    rng = np.random.default_rng(8)
    S = sp.random_array((30, 45), density=0.1, rng=rng, format="dia")
    A = jaxdia.DiaMatrix.from_scipy(S)
    q = (-31, -5, 0, 3, 44, 45)
    np.testing.assert_allclose(np.asarray(A.traces(q)), scipy_traces(S, q), atol=1e-12)
    np.testing.assert_allclose(np.asarray(A.traces(4)), scipy_traces(S, range(4)), atol=1e-12)
    for k in (-30, -29, -3, 0, 7, 44, 45):
        np.testing.assert_allclose(np.asarray(A.diagonal(k)), S.diagonal(k))
        np.testing.assert_allclose(np.asarray(A.trace(k)), S.trace(k), atol=1e-12)
    # Through jit and vmap, as a pytree with static offsets.
    np.testing.assert_allclose(np.asarray(jax.jit(lambda A: A.traces(q))(A)), scipy_traces(S, q))
    batch = jaxdia.DiaMatrix(jnp.stack([A.data, 2 * A.data]), A.offsets, A.shape)
    doubled = jax.vmap(lambda A: A.traces(q))(batch)
    np.testing.assert_allclose(np.asarray(doubled), [scipy_traces(S, q), 2 * scipy_traces(S, q)])


def test_without_x64():
    M = np.random.default_rng(9).standard_normal((2, 5, 6))
    with jax.enable_x64(False):
        got = traces(M, [-1, 0, 4])
        assert got.dtype == np.float32
        assert traces(np.ones((3, 3), np.int8), 2).dtype == np.int32
        grad = jax.grad(lambda M: traces(M, 2).sum())(M.astype(np.float32))
        data = dia_traces(np.ones((3, 6), np.float32), (-1, 0, 2), (5, 6), [0, 2, 3])
    assert_close(got, numpy_traces(M, [-1, 0, 4]), np.float32, scale=10)
    assert grad.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(data), [5.0, 4.0, 0.0])


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "q, error",
    [
        (-1, ValueError),
        (1.5, TypeError),
        (True, TypeError),
        (np.bool_(True), TypeError),
        ([0, 1.0], TypeError),
        ([0, True], TypeError),
        (np.array([0.5]), TypeError),
        ("3", TypeError),
        (None, TypeError),
    ],
)
def test_bad_q(q, error):
    with pytest.raises(error, match="q"):
        traces(np.ones((3, 3)), q)
    with pytest.raises(error, match="q"):
        dia_traces(np.ones((1, 3)), (0,), (3, 3), q)


def test_q_accepts_integer_arrays_and_numpy_ints():
    M = np.arange(16.0).reshape(4, 4)
    expected = numpy_traces(M, [1, -2])
    for q in (np.array([1, -2]), jnp.array([1, -2]), [np.int64(1), np.int32(-2)]):
        np.testing.assert_array_equal(np.asarray(traces(M, q)), expected)
    np.testing.assert_array_equal(np.asarray(traces(M, np.int64(2))), numpy_traces(M, [0, 1]))


def test_traced_q_is_rejected_with_advice():
    M = np.ones((3, 3))
    with pytest.raises(TypeError, match="static"):
        jax.jit(traces)(M, 2)
    with pytest.raises(TypeError, match="static"):
        jax.jit(lambda M, k: traces(M, [k]))(M, 1)
    with pytest.raises(TypeError, match="static"):
        jax.jit(lambda d, k: dia_diagonal(d, (0,), (3, 3), k))(np.ones((1, 3)), 0)


@pytest.mark.parametrize(
    "M, error",
    [
        (np.ones(3), ValueError),
        (np.float64(1.0), ValueError),
        (np.array([["a", "b"]]), TypeError),
        ([[object()]], TypeError),
    ],
)
def test_bad_matrix(M, error):
    with pytest.raises(error, match="M must"):
        traces(M, 2)


def test_bad_matrix_types_are_named():
    with pytest.raises(TypeError, match="got NoneType$"):
        traces(None, 2)
    with pytest.raises(TypeError, match="M is a scipy.sparse csr_array; .*from_scipy"):
        traces(sp.eye_array(3, format="csr"), 2)


def test_empty_batches():
    """A batch of zero matrices gives an empty result of the right shape, as NumPy."""
    expected = np.zeros((0, 2))
    np.testing.assert_array_equal(traces(np.ones((0, 3, 3)), 2), expected)
    np.testing.assert_array_equal(jax.vmap(lambda M: traces(M, 2))(jnp.ones((0, 3, 3))), expected)
    A = jaxdia.DiaMatrix(np.ones((0, 1, 3)), (0,), (3, 3))
    assert A.trace().shape == (0,) and A.traces(2).shape == (0, 2)


@pytest.mark.parametrize("k", [0.0, True, "1", None])
def test_bad_diagonal_index(k):
    with pytest.raises(TypeError):
        dia_diagonal(np.ones((1, 3)), (0,), (3, 3), k)
    with pytest.raises(TypeError):
        dia_trace(np.ones((1, 3)), (0,), (3, 3), k)
