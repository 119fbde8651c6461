"""``jaxdia._kernels.xla`` against SciPy, one test per formulation branch of ``spmm_xla``.

Branches of ``spmm_xla``: no in-range diagonal (zeros); a small interior (the
all-bounds-checked formulation); the interior plus two edge blocks, with either edge
empty (all offsets on one side of the main diagonal); one column on 1-D vectors or kept
as ``(rows, 1)`` (the ``vector_path`` fixture moves ``_VECTOR_MIN_SIZE`` so that small
shapes take both). Every case puts NaN in all padding slots of ``data``, so reading
padding as an entry fails. Shapes stay small: the formulation depends on the offsets and
the shape, not on the size.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from jaxdia._kernels import xla

from .helpers import examples, spmm_oracle, tolerance, wide

DTYPES = [np.float32, np.float64, np.complex64, np.complex128, jnp.bfloat16, np.float16]


def _random(rng, shape, dtype):
    values = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def _with_nan_padding(data, offsets, shape):
    m, n = shape
    j = np.arange(n)
    data = np.array(data)
    for k, offset in enumerate(offsets):
        data[..., k, (j - offset < 0) | (j - offset >= m)] = np.nan
    return data


def _check_spmm(data, x, offsets, shape, transpose=False, jit=True):
    offsets = tuple(offsets)
    fn = lambda d, v: xla.spmm_xla(d, v, offsets=offsets, shape=shape, transpose=transpose)
    if jit:
        fn = jax.jit(fn)
    got = fn(jnp.asarray(data), jnp.asarray(x))
    expected, scale = spmm_oracle(data, x, offsets, shape, transpose)
    assert got.shape == expected.shape
    assert got.dtype == jnp.result_type(data, x)
    tol = tolerance(got.dtype) * (len(offsets) + 1)
    error = np.abs(wide(got) - expected)
    assert np.all(np.isfinite(error)), "padding (NaN) was read"
    assert np.all(error <= tol * (scale + 1.0))


def _case(rng, offsets, shape, cols, dtype, batch_d=(), batch_x=(), transpose=False):
    m, n = shape
    data = _with_nan_padding(_random(rng, (*batch_d, len(offsets), n), dtype), offsets, shape)
    x = _random(rng, (*batch_x, n if not transpose else m, cols), dtype)
    return data, x


# Stencils on n x n: (offsets, formulation branch they reach).
SQUARE_CASES = {
    "tridiagonal": ((-1, 0, 1), 50),  # interior + both edges
    "5-point": ((-7, -1, 0, 1, 7), 49),
    "7-point": ((-16, -4, -1, 0, 1, 4, 16), 64),
    "27-band": (tuple(range(-13, 14)), 80),
    "upper only": ((0, 2, 5), 40),  # no top edge, bottom edge only
    "lower only": ((-6, -3), 40),  # top edge only
    "main diagonal": ((0,), 30),  # interior only, no edges
    "wide": ((-25, 0, 25), 30),  # interior < half: bounded formulation
    "extremes": ((-29, 29), 30),  # offsets at -m+1 and n-1
}


@pytest.fixture(params=["vector", "column"])
def vector_path(request, monkeypatch):
    """Runs a test with matrix-vector products on 1-D vectors, and on ``(rows, 1)``."""
    monkeypatch.setattr(xla, "_VECTOR_MIN_SIZE", 0 if request.param == "vector" else 10**9)
    return request.param


@pytest.mark.parametrize("name", list(SQUARE_CASES))
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize(
    "cols, path", [(1, "vector"), (1, "column"), (8, "column"), (64, "column")]
)
def test_spmm_square_stencils(name, transpose, cols, path, monkeypatch):
    """Each stencil on both single-column paths (1-D vector, ``(rows, 1)``) and wider X."""
    monkeypatch.setattr(xla, "_VECTOR_MIN_SIZE", 0 if path == "vector" else 10**9)
    offsets, n = SQUARE_CASES[name]
    rng = np.random.default_rng(abs(hash((name, transpose, cols))) % 2**32)
    data, x = _case(rng, offsets, (n, n), cols, np.float64, transpose=transpose)
    _check_spmm(data, x, offsets, (n, n), transpose)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("cols", [1, 3])
def test_spmm_dtypes(dtype, transpose, cols, monkeypatch):
    monkeypatch.setattr(xla, "_VECTOR_MIN_SIZE", 0)
    rng = np.random.default_rng(1)
    offsets, shape = (-5, -1, 0, 2, 9), (37, 41)
    data, x = _case(rng, offsets, shape, cols, dtype, transpose=transpose)
    _check_spmm(data, x, offsets, shape, transpose)


@pytest.mark.parametrize(
    "shape, offsets",
    [
        ((20, 50), (-3, 0, 4, 30)),  # wide: diagonals end at the bottom row
        ((50, 20), (-30, -2, 0, 5)),  # tall
        ((1, 9), (0, 4, 8)),
        ((9, 1), (-8, 0)),
        ((40, 45), (-39, -1, 0, 1, 44)),  # extremes on a rectangle
        ((30, 30), (-40, 35, 0)),  # offsets beyond the shape store nothing
    ],
)
@pytest.mark.parametrize("transpose", [False, True])
def test_spmm_rectangular(shape, offsets, transpose):
    rng = np.random.default_rng(2)
    data, x = _case(rng, offsets, shape, 2, np.float32, transpose=transpose)
    _check_spmm(data, x, offsets, shape, transpose)


@pytest.mark.parametrize("transpose", [False, True])
def test_spmm_no_diagonals(transpose):
    for offsets in [(), (-50, 60)]:
        shape = (30, 20)
        rng = np.random.default_rng(3)
        data, x = _case(
            rng, offsets, shape, 4, np.float32, batch_d=(2,), batch_x=(2,), transpose=transpose
        )
        got = xla.spmm_xla(
            jnp.asarray(data), jnp.asarray(x), offsets=offsets, shape=shape, transpose=transpose
        )
        assert got.shape == (2, 20 if transpose else 30, 4)
        assert not np.any(np.asarray(got))


@pytest.mark.parametrize(
    "batch_d, batch_x",
    [((3,), (3,)), ((3,), (1,)), ((1,), (4,)), ((2, 1), (1, 3)), ((64,), (64,))],
)
@pytest.mark.parametrize("name", ["tridiagonal", "wide", "lower only"])
@pytest.mark.parametrize("transpose", [False, True])
def test_spmm_batched(batch_d, batch_x, name, transpose, vector_path):
    offsets, n = SQUARE_CASES[name]
    rng = np.random.default_rng(4)
    data, x = _case(rng, offsets, (n, n), 1, np.float32, batch_d, batch_x, transpose)
    _check_spmm(data, x, offsets, (n, n), transpose)


def test_spmm_vmap_and_grad():
    offsets, n = (-4, -1, 0, 1, 4), 30
    rng = np.random.default_rng(5)
    data, x = _case(rng, offsets, (n, n), 1, np.float64, batch_d=(6,), batch_x=(6,))
    fn = lambda d, v: xla.spmm_xla(d, v, offsets=offsets, shape=(n, n))
    got = jax.jit(jax.vmap(fn))(jnp.asarray(data), jnp.asarray(x))
    expected, _ = spmm_oracle(data, x, offsets, (n, n), False)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-12)
    # The gradient with respect to x is A^T applied to the cotangent (ones).
    clean = np.nan_to_num(data[0])
    grad = jax.jit(jax.grad(lambda v: fn(jnp.asarray(clean), v).sum()))(jnp.asarray(x[0]))
    A = sp.dia_array((clean, offsets), shape=(n, n)).tocsr()
    np.testing.assert_allclose(np.asarray(grad), A.T @ np.ones((n, 1)), rtol=1e-12)


def test_spmm_eager():
    offsets, n = (-3, 0, 2), 25
    rng = np.random.default_rng(6)
    data, x = _case(rng, offsets, (n, n), 2, np.float32)
    _check_spmm(data, x, offsets, (n, n), jit=False)


@st.composite
def _spmm_problems(draw):
    m = draw(st.integers(1, 24))
    n = draw(st.integers(1, 24))
    offsets = sorted(draw(st.sets(st.integers(-m + 1, n - 1), max_size=6)))
    cols = draw(st.sampled_from([1, 2, 8]))
    transpose = draw(st.booleans())
    batch_d, batch_x = draw(st.sampled_from([((), ()), ((2,), (2,)), ((1,), (3,)), ((2,), (1,))]))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.complex64]))
    return offsets, (m, n), cols, transpose, batch_d, batch_x, dtype


@settings(max_examples=examples(12))
@given(_spmm_problems(), st.integers(0, 2**32 - 1))
def test_spmm_random(problem, seed):
    offsets, shape, cols, transpose, batch_d, batch_x, dtype = problem
    rng = np.random.default_rng(seed)
    data, x = _case(rng, offsets, shape, cols, dtype, batch_d, batch_x, transpose)
    _check_spmm(data, x, offsets, shape, transpose)


def _sddmm_oracle(g, x, offsets, shape):
    g, x = wide(g), wide(x)
    m, n = shape
    batch = np.broadcast_shapes(g.shape[:-2], x.shape[:-2])
    out = np.zeros((*batch, len(offsets), n), g.dtype)
    for k, offset in enumerate(offsets):
        for j in range(max(0, offset), min(n, m + offset)):
            out[..., k, j] = (g[..., j - offset, :] * x[..., j, :]).sum(-1)
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    "shape, offsets, batch_g, batch_x",
    [
        ((30, 30), (-1, 0, 1), (), ()),
        ((20, 35), (-19, -2, 0, 3, 34, 40), (2,), (1,)),
        ((35, 20), (-30, 0, 5), (1,), (3,)),
        ((10, 10), (), (), ()),
    ],
)
def test_sddmm(dtype, shape, offsets, batch_g, batch_x):
    m, n = shape
    rng = np.random.default_rng(7)
    g = _random(rng, (*batch_g, m, 3), dtype)
    x = _random(rng, (*batch_x, n, 3), dtype)
    got = jax.jit(lambda a, b: xla.sddmm_xla(a, b, offsets=offsets, shape=shape))(g, x)
    expected = _sddmm_oracle(g, x, offsets, shape)
    assert got.shape == expected.shape and got.dtype == jnp.result_type(g, x)
    tol = tolerance(got.dtype) * 4
    np.testing.assert_allclose(wide(got), expected, rtol=tol, atol=tol)


def test_no_temporary_of_data_size():
    """One jitted matvec needs no ``(n_diags, n)`` temporary (no more than one output)."""
    n, offsets = 200_000, tuple(range(-13, 14))
    fn = jax.jit(lambda d, v: xla.spmm_xla(d, v, offsets=offsets, shape=(n, n)))
    compiled = fn.lower(
        jax.ShapeDtypeStruct((27, n), jnp.float32), jax.ShapeDtypeStruct((n, 1), jnp.float32)
    ).compile()
    stats = compiled.memory_analysis()
    if stats is None:
        pytest.skip("no memory analysis on this backend")
    assert stats.temp_size_in_bytes <= 4 * n


@pytest.mark.parametrize("rows", [1_000, 50_000])
def test_matvec_writes_the_output_once(rows):
    """``A @ v`` (reshaped to one column and back, as ``jaxdia.matmul`` does) compiles to
    in-place edge updates with no copy of the output, on both sides of _VECTOR_MIN_SIZE."""
    offsets = (-7, -1, 0, 1, 7)
    fn = jax.jit(
        lambda d, v: xla.spmm_xla(d, v[:, None], offsets=offsets, shape=(rows, rows))[:, 0]
    )
    text = (
        fn.lower(
            jax.ShapeDtypeStruct((5, rows), jnp.float64), jax.ShapeDtypeStruct((rows,), jnp.float64)
        )
        .compile()
        .as_text()
    )
    entry = text[text.index("ENTRY") :]
    if rows >= xla._VECTOR_MIN_SIZE:
        assert " copy(" not in entry, entry
    assert entry.count("fusion(") <= 3, entry


@pytest.mark.parametrize("columns", [2, 8, 64])
@pytest.mark.parametrize("transpose", [False, True])
def test_multicolumn_product_is_one_loop_nest(columns, transpose):
    """With several columns, edges and interior are one concatenation: a single fusion that
    writes the output once, with no copy and no temporary (the padded form took three)."""
    rows, offsets = 5_000, (-70, -1, 0, 1, 70)
    fn = jax.jit(
        lambda d, x: xla.spmm_xla(d, x, offsets=offsets, shape=(rows, rows), transpose=transpose)
    )
    compiled = fn.lower(
        jax.ShapeDtypeStruct((5, rows), jnp.float32),
        jax.ShapeDtypeStruct((rows, columns), jnp.float32),
    ).compile()
    entry = compiled.as_text()
    entry = entry[entry.index("ENTRY") :]
    assert entry.count("fusion(") == 1 and "concatenate" in entry, entry
    assert " copy(" not in entry, entry
    stats = compiled.memory_analysis()
    if stats is not None:
        assert stats.temp_size_in_bytes == 0
