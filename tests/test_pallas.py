"""The Pallas kernels, run in interpret mode on CPU, against SciPy and ``jaxdia._kernels.xla``.

Interpret mode compiles once per shape, so the Hypothesis tests keep sizes small
(sides <= 40, up to 5 columns) and example counts modest, and each case runs its kernel
and the XLA reference as one jitted program each, as jaxdia calls them (called eagerly,
their wrappers compiled an operation at a time: four times the programs). Every drawn
case puts NaN in all padding slots of ``data``: a kernel that reads padding as an entry
fails. What
interpret mode cannot see (the compiled Mosaic TPU program) is read from the lowering.
"""

import base64
import functools
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax._src.interpreters import mlir
from jax._src.lib import tpu
from jax._src.lib.mlir import ir

from jaxdia._kernels import pallas_tpu, pallas_triton, xla
from jaxdia.testing import offsets as offsets_strategy

from .helpers import examples, spmm_oracle, tolerance, wide

TRITON_DTYPES = [np.float32, np.float64, jnp.bfloat16, np.float16, np.complex64, np.complex128]
TPU_DTYPES = [np.float32, jnp.bfloat16]


def _random(rng, shape, dtype):
    values = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def _padding_mask(offsets, shape, batch=()):
    """True in the slots of ``data`` that lie outside the matrix."""
    m, n = shape
    j = np.arange(n)
    mask = np.array([(j - o < 0) | (j - o >= m) for o in offsets], bool).reshape(len(offsets), n)
    return np.broadcast_to(mask, (*batch, len(offsets), n))


def _sddmm_oracle(g, x, offsets, shape):
    """``D[k, j] = sum_c g[j - o_k, c] x[j, c]`` by explicit loops, and its error scale."""
    g, x = wide(g), wide(x)
    batch = np.broadcast_shapes(g.shape[:-2], x.shape[:-2])
    m, n = shape
    d = np.zeros((*batch, len(offsets), n), g.dtype)
    scale = np.zeros(d.shape)
    for k, o in enumerate(offsets):
        for j in range(max(0, o), min(n, m + o)):
            d[..., k, j] = (g[..., j - o, :] * x[..., j, :]).sum(-1)
            scale[..., k, j] = (abs(g[..., j - o, :]) * abs(x[..., j, :])).sum(-1)
    return d, scale


def _assert_close(actual, expected, scale, dtype):
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == np.dtype(dtype), (actual.dtype, dtype)
    error = abs(actual.astype(np.complex128) - expected)
    bound = tolerance(dtype) * (scale + 1.0)
    assert np.all(error <= bound), f"max error {error.max()} (bound {bound.min()})"


@st.composite
def _cases(draw, dtypes, max_side=40, max_cols=5):
    """A product case: shape, sorted offsets, batch shapes that broadcast, dtype, seed."""
    m = draw(st.integers(1, max_side))
    n = draw(st.integers(1, max_side))
    offsets = tuple(sorted(draw(offsets_strategy((m, n)))))
    n_cols = draw(st.integers(1, max_cols))
    sizes = draw(st.lists(st.integers(2, 3), max_size=2))
    first = tuple(draw(st.sampled_from([s, 1])) for s in sizes)
    second = tuple(draw(st.sampled_from([s, 1])) for s in sizes)
    dtype = draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, 2**32 - 1))
    return (m, n), offsets, n_cols, first, second, np.dtype(dtype), seed


def _spmm_inputs(case, transpose):
    shape, offsets, n_cols, data_batch, x_batch, dtype, seed = case
    rng = np.random.default_rng(seed)
    data = _random(rng, (*data_batch, len(offsets), shape[1]), dtype)
    data[_padding_mask(offsets, shape, data_batch)] = np.nan
    x = _random(rng, (*x_batch, shape[0] if transpose else shape[1], n_cols), dtype)
    return data, x


def jitted(kernel, dtype, **static):
    """``kernel`` with its static arguments bound, compiled as one program; for bfloat16
    run an op at a time instead: XLA:CPU of jax 0.12.1, fully optimized, aborts the
    process compiling an interpreted kernel's bfloat16 transposes ("LLVM ERROR: Cannot
    select: v8bf16 = X86ISD::VBROADCAST" in a ``transpose_copy_fusion``; `make
    test-newest`, ``test_tpu_spmm`` transposed, the case ``((31, 34), (-15, 13), 5, (3,), (3,),
    bfloat16, 0)``)."""
    bound = functools.partial(kernel, **static)
    return bound if np.dtype(dtype) == jnp.bfloat16 else jax.jit(bound)


def _check_spmm(spmm, case, transpose, **kwargs):
    shape, offsets, dtype = case[0], case[1], case[5]
    data, x = _spmm_inputs(case, transpose)
    y = jitted(
        spmm, dtype, offsets=offsets, shape=shape, transpose=transpose, interpret=True, **kwargs
    )(data, x)
    expected, scale = spmm_oracle(data, x, offsets, shape, transpose)
    _assert_close(y, expected, scale, dtype)
    reference = jitted(xla.spmm_xla, dtype, offsets=offsets, shape=shape, transpose=transpose)(
        data, x
    )
    _assert_close(y, wide(reference), scale, dtype)


def _check_sddmm(sddmm, case, **kwargs):
    shape, offsets, n_cols, g_batch, x_batch, dtype, seed = case
    rng = np.random.default_rng(seed)
    g = _random(rng, (*g_batch, shape[0], n_cols), dtype)
    x = _random(rng, (*x_batch, shape[1], n_cols), dtype)
    d = jitted(sddmm, dtype, offsets=offsets, shape=shape, interpret=True, **kwargs)(g, x)
    expected, scale = _sddmm_oracle(g, x, offsets, shape)
    _assert_close(d, expected, scale, dtype)
    reference = jitted(xla.sddmm_xla, dtype, offsets=offsets, shape=shape)(g, x)
    _assert_close(d, wide(reference), scale, dtype)
    padding = _padding_mask(offsets, shape, d.shape[:-2])
    assert np.all(np.asarray(d)[padding] == 0)


@settings(max_examples=examples(8))  # transposed or not, drawn with the case
@given(case=_cases(TRITON_DTYPES), transpose=st.booleans())
def test_triton_spmm(case, transpose):
    _check_spmm(pallas_triton.spmm, case, transpose)


@settings(max_examples=examples(6))
@given(case=_cases(TRITON_DTYPES))
def test_triton_sddmm(case):
    _check_sddmm(pallas_triton.sddmm, case)


@settings(max_examples=examples(8))  # transposed or not, drawn with the case
@given(case=_cases(TPU_DTYPES), transpose=st.booleans())
def test_tpu_spmm(case, transpose):
    _check_spmm(pallas_tpu.spmm, case, transpose)


@settings(max_examples=examples(6))
@given(case=_cases(TPU_DTYPES))
def test_tpu_sddmm(case):
    _check_sddmm(pallas_tpu.sddmm, case)


# Explicit cases: several blocks of rows and columns (small blocks), far offsets, dtypes.
_WIDE = ((13, 37), (-12, -5, -1, 0, 2, 36), 5, (2,), (1,), np.dtype(np.float32), 1)
_TALL = ((37, 13), (-36, -3, 0, 1, 12), 3, (), (), np.dtype(np.complex64), 2)


@pytest.mark.parametrize("case", [_WIDE, _TALL], ids=["wide", "tall"])
@pytest.mark.parametrize("transpose", [False, True])
def test_triton_spmm_small_blocks(case, transpose):
    blocks = pallas_triton.BlockSizes(rows=4, cols=2, num_warps=2)
    _check_spmm(pallas_triton.spmm, case, transpose, block_sizes=blocks)


@pytest.mark.parametrize("case", [_WIDE, _TALL], ids=["wide", "tall"])
def test_triton_sddmm_small_blocks(case):
    _check_sddmm(pallas_triton.sddmm, case, block_sizes=pallas_triton.BlockSizes(4, 2))


_TPU_TALL = ((300, 200), (-299, -130, -128, -1, 0, 1, 128, 199), 10, (2,), (1,), np.float32, 3)
_TPU_WIDE = ((200, 300), (-199, -2, 0, 129, 256, 299), 2, (), (), jnp.bfloat16, 4)
# The SDDMM sums 20 columns in three blocks of 8 (the last one ragged).
_TPU_SDDMM = ((200, 300), (-199, -2, 0, 129, 256, 299), 20, (1, 2), (3, 1), np.float32, 5)


@pytest.mark.parametrize("case", [_TPU_TALL, _TPU_WIDE], ids=["tall", "wide"])
@pytest.mark.parametrize("transpose", [False, True])
def test_tpu_spmm_several_blocks(case, transpose):
    """Several row blocks of 128, offsets beyond one block, 10 columns in blocks of 8."""
    case = (*case[:5], np.dtype(case[5]), case[6])
    blocks = pallas_tpu.BlockSizes(rows=128, cols=8)
    _check_spmm(pallas_tpu.spmm, case, transpose, block_sizes=blocks)


@pytest.mark.parametrize("case", [_TPU_TALL, _TPU_SDDMM], ids=["tall", "wide"])
def test_tpu_sddmm_several_blocks(case):
    case = (*case[:5], np.dtype(case[5]), case[6])
    _check_sddmm(pallas_tpu.sddmm, case, block_sizes=pallas_tpu.BlockSizes(rows=128, cols=8))


@pytest.mark.parametrize(
    "shape, offsets, data_batch, x_batch, n_cols",
    [
        ((0, 4), (), (), (), 2),
        ((4, 0), (), (), (), 2),
        ((3, 4), (), (), (), 2),
        ((3, 4), (-1, 2), (), (), 0),
        ((3, 4), (-1, 2), (0,), (1,), 2),
    ],
)
@pytest.mark.parametrize("spmm", [pallas_triton.spmm, pallas_tpu.spmm], ids=["triton", "tpu"])
@pytest.mark.parametrize("transpose", [False, True])
def test_spmm_empty(spmm, shape, offsets, data_batch, x_batch, n_cols, transpose):
    m, n = shape
    data = np.ones((*data_batch, len(offsets), n), np.float32)
    x = np.ones((*x_batch, m if transpose else n, n_cols), np.float32)
    y = spmm(data, x, offsets=offsets, shape=shape, transpose=transpose, interpret=True)
    expected = xla.spmm_xla(data, x, offsets=offsets, shape=shape, transpose=transpose)
    assert y.shape == expected.shape and y.dtype == np.float32
    assert np.all(np.asarray(y) == 0)


@pytest.mark.parametrize(
    "shape, offsets, n_cols",
    [((0, 4), (), 2), ((4, 0), (), 2), ((3, 4), (), 2), ((3, 4), (-1, 2), 0), ((0, 4), (1,), 1)],
)
@pytest.mark.parametrize("sddmm", [pallas_triton.sddmm, pallas_tpu.sddmm], ids=["triton", "tpu"])
def test_sddmm_empty(sddmm, shape, offsets, n_cols):
    m, n = shape
    g = np.ones((m, n_cols), np.float32)
    x = np.ones((n, n_cols), np.float32)
    d = sddmm(g, x, offsets=offsets, shape=shape, interpret=True)
    assert d.shape == (len(offsets), n) and d.dtype == np.float32
    assert np.all(np.asarray(d) == 0)


def test_supports():
    assert all(pallas_triton.supports(d) for d in TRITON_DTYPES)
    assert all(pallas_tpu.supports(d) for d in TPU_DTYPES)
    for dtype in (np.int32, np.bool_):
        assert not pallas_triton.supports(dtype)
        assert not pallas_tpu.supports(dtype)
    for dtype in (np.float64, np.float16, np.complex64):
        assert not pallas_tpu.supports(dtype)
    with pytest.raises(TypeError, match="float32 and bfloat16"):
        pallas_tpu.spmm(np.ones((1, 3)), np.ones((3, 1)), offsets=(0,), shape=(3, 3))
    with pytest.raises(TypeError, match="float32 and bfloat16"):
        pallas_tpu.sddmm(np.ones((3, 1)), np.ones((3, 1)), offsets=(0,), shape=(3, 3))


def test_block_sizes():
    with pytest.raises(ValueError, match="power of 2"):
        pallas_triton.BlockSizes(rows=12, cols=2)
    with pytest.raises(ValueError, match="multiple of 128"):
        pallas_tpu.BlockSizes(rows=100, cols=8)
    with pytest.raises(ValueError, match="multiple of 8"):
        pallas_tpu.BlockSizes(rows=128, cols=4)
    # The heuristics stay within their documented ranges.
    for n_cols in (1, 3, 8, 100):
        for dtype in TRITON_DTYPES:
            sizes = pallas_triton.BlockSizes.default((10**6, 10**6), n_cols, dtype)
            assert 16 <= sizes.rows <= 1024 and min(n_cols, 16) <= sizes.cols <= 16
            sizes = pallas_triton.BlockSizes.default((10**6, 10**6), n_cols, dtype, op="sddmm")
            assert 16 <= sizes.rows <= 1024 and min(n_cols, 8) <= sizes.cols <= 8
        for op in ("spmm", "spmm_t", "sddmm"):
            sizes = pallas_tpu.BlockSizes.default(
                (10**6, 10**6), n_cols, np.float32, offsets=(-1000, -1, 0, 1, 1000), op=op
            )
            assert 128 <= sizes.rows <= 2048 and 8 <= sizes.cols <= 64
    assert pallas_triton.BlockSizes.default((5, 3), 1, np.float32).rows == 8
    assert pallas_tpu.BlockSizes.default((5, 3), 1, np.float32).rows == 128


def _mosaic_tpu_kernels(lowered_text: str) -> list[str]:
    """The Mosaic TPU kernels of a program lowered for ``tpu``, as MLIR text (each
    ``tpu_custom_call`` carries its kernel as base64 MLIR bytecode)."""
    kernels = []
    for config in re.findall(r'backend_config = "(\{\\22custom_call_config.*?)"', lowered_text):
        body = json.loads(config.replace("\\22", '"'))["custom_call_config"]["body"]
        context = mlir.make_ir_context()
        tpu.register_dialect(context)
        with context, ir.Location.unknown():
            context.allow_unregistered_dialects = True
            kernels.append(str(ir.Module.parse(base64.b64decode(body))))
    return kernels


@pytest.mark.parametrize("kernel", ["spmm", "spmm_t", "sddmm"])
@pytest.mark.parametrize("batch", [(), (2,)])
def test_tpu_kernels_index_in_int32_under_x64(kernel, batch):
    # With jax_enable_x64 on (as here), an index map returning a Python int returned an
    # int64, and Mosaic TPU failed to compile every kernel on a real TPU ("failed to
    # legalize operation 'func.return'"). Interpret mode never compiles the kernel, so
    # the test reads the Mosaic program: no int64 value, only int64 attributes.
    shape, offsets = (1000, 1000), (-1, 0, 1)
    data = jnp.ones((*batch, len(offsets), shape[1]), jnp.float32)
    x = jnp.ones((shape[1], 4), jnp.float32)
    if kernel == "sddmm":
        g = jnp.ones((*batch, shape[0], 4), jnp.float32)
        traced = jax.jit(lambda g, x: pallas_tpu.sddmm(g, x, offsets=offsets, shape=shape)).trace(
            g, x
        )
    else:
        traced = jax.jit(
            lambda d, x: pallas_tpu.spmm(
                d, x, offsets=offsets, shape=shape, transpose=kernel == "spmm_t"
            )
        ).trace(data, x)
    kernels = _mosaic_tpu_kernels(traced.lower(lowering_platforms=("tpu",)).as_text())
    assert len(kernels) == 1
    values = re.sub(r"-?\d+ : i64|array<i64[^>]*>", "", kernels[0])
    assert "func.return" in values and "i64" not in values, re.findall(r".{80}i64.{20}", values)
