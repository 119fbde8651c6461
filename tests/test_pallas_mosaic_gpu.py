"""The Mosaic GPU kernels in Pallas's GPU interpreter on CPU, against SciPy and ``xla``.

The interpreter compiles a program per kernel that costs a second or two, so the drawn
cases are few and small (the same strategy as the Triton and TPU kernels' tests, NaN in
every padding slot of ``data``); the explicit cases cover what small draws miss: several
tiles (the last one shifted back), several column blocks (first, looped and ragged last),
windows that start before the arrays' first element or reach past their last one, both
ways of addressing an operand (2-D lines and flat), and tall, wide and batched shapes.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxdia._kernels import pallas_mosaic_gpu as mgpu, xla

from .helpers import examples
from .test_pallas import _cases, _check_sddmm, _check_spmm

MOSAIC_DTYPES = [np.float32, np.float64, jnp.bfloat16, np.float16]
SMALL = mgpu.BlockSizes(rows=128, cols=2)


@settings(max_examples=examples(4))  # transposed or not, drawn with the case
@given(case=_cases(MOSAIC_DTYPES), transpose=st.booleans())
def test_mosaic_spmm(case, transpose):
    _check_spmm(mgpu.spmm, case, transpose)


@settings(max_examples=examples(3))
@given(case=_cases(MOSAIC_DTYPES))
def test_mosaic_sddmm(case):
    _check_sddmm(mgpu.sddmm, case)


# (shape, offsets, columns, data batch, x batch, dtype, seed). 300 rows are three tiles of
# 128 (the last shifted back by 84 rows); 5 columns in blocks of 2 are a first block, one
# looped block and a ragged one; offsets reach both corners and lie more than a tile apart
# (separate windows) and within one (a shared window with its halo). Lines of 301 float32,
# 37 float64 or 301 bfloat16 break TMA's 16-byte rule, so those operands are addressed
# flat, the others as 2-D lines.
_SEVERAL_TILES = ((300, 301), (-299, -130, -1, 0, 1, 129, 300), 5, (1,), (1,), np.float32, 1)
_FLAT_FLOAT64 = ((37, 300), (-36, -3, 0, 1, 12, 299), 3, (1,), (2,), np.float64, 2)
_WIDE_BFLOAT16 = ((200, 301), (-199, -2, 0, 129, 256, 300), 1, (2,), (1,), jnp.bfloat16, 3)


@pytest.mark.parametrize(
    "case, transpose",
    [
        (_SEVERAL_TILES, False),
        (_SEVERAL_TILES, True),
        (_FLAT_FLOAT64, False),
        (_WIDE_BFLOAT16, True),
    ],
    ids=["tiles", "tiles-transposed", "flat-float64", "wide-bfloat16-transposed"],
)
def test_mosaic_spmm_several_blocks(case, transpose):
    case = (*case[:5], np.dtype(case[5]), case[6])
    _check_spmm(mgpu.spmm, case, transpose, block_sizes=SMALL)


@pytest.mark.parametrize("case", [_SEVERAL_TILES, _FLAT_FLOAT64], ids=["tiles", "flat-float64"])
def test_mosaic_sddmm_several_blocks(case):
    case = (*case[:5], np.dtype(case[5]), case[6])
    _check_sddmm(mgpu.sddmm, case, block_sizes=SMALL)


@pytest.mark.parametrize(
    "shape, offsets, data_batch, x_batch, n_cols",
    [
        ((0, 4), (), (), (), 2),
        ((3, 4), (), (), (), 2),
        ((3, 4), (-1, 2), (), (), 0),
        ((3, 4), (-1, 2), (0,), (1,), 2),
        ((3, 4), (7,), (), (), 1),
    ],
)
@pytest.mark.parametrize("transpose", [False, True])
def test_mosaic_spmm_empty(shape, offsets, data_batch, x_batch, n_cols, transpose):
    m, n = shape
    data = np.ones((*data_batch, len(offsets), n), np.float32)
    x = np.ones((*x_batch, m if transpose else n, n_cols), np.float32)
    y = mgpu.spmm(data, x, offsets=offsets, shape=shape, transpose=transpose, interpret=True)
    expected = xla.spmm_xla(data, x, offsets=offsets, shape=shape, transpose=transpose)
    assert y.shape == expected.shape and y.dtype == np.float32
    assert np.all(np.asarray(y) == 0)


def test_mosaic_sddmm_empty():
    d = mgpu.sddmm(
        np.ones((3, 0), np.float32),
        np.ones((4, 0), np.float32),
        offsets=(-1, 2),
        shape=(3, 4),
        interpret=True,
    )
    assert d.shape == (2, 4) and np.all(np.asarray(d) == 0)


def test_supports_and_bad_dtypes():
    assert all(mgpu.supports(d) for d in MOSAIC_DTYPES)
    for dtype in (np.complex64, np.complex128, np.int32, np.bool_):
        assert not mgpu.supports(dtype)
    with pytest.raises(TypeError, match="complex64"):
        mgpu.spmm(
            np.ones((1, 3), np.complex64), np.ones((3, 1), np.complex64), offsets=(0,), shape=(3, 3)
        )
    with pytest.raises(TypeError, match="int32"):
        mgpu.sddmm(np.ones((3, 1), np.int32), np.ones((3, 1), np.int32), offsets=(0,), shape=(3, 3))


def test_block_sizes():
    with pytest.raises(ValueError, match="multiple of 128"):
        mgpu.BlockSizes(rows=100, cols=1)
    with pytest.raises(ValueError, match="at least 1"):
        mgpu.BlockSizes(rows=128, cols=0)
    stencil = (-1000, -1, 0, 1, 1000)
    for n_cols in (1, 3, 8, 100):
        for dtype in MOSAIC_DTYPES:
            for op in ("spmm", "sddmm"):
                sizes = mgpu.BlockSizes.default((10**6, 10**6), stencil, n_cols, dtype, op=op)
                assert sizes is not None and 128 <= sizes.rows <= 1024
                assert 1 <= sizes.cols <= min(n_cols, 8)
    # No longer than the output needs.
    assert mgpu.BlockSizes.default((40, 40), (0,), 1, np.float32).rows == 128
    assert mgpu.BlockSizes.default((300, 40), (0,), 1, np.float32).rows == 512
    assert mgpu.BlockSizes.default((300, 40), (0,), 1, np.float32, transpose=True).rows == 128


def test_feasible():
    ok = dict(offsets=(-1, 0, 1), shape=(100, 100))
    assert mgpu.feasible("spmm", (3, 100), (100, 4), np.float32, **ok) is None
    assert mgpu.feasible("sddmm", (100, 4), (100, 4), np.float32, **ok) is None
    # 400 diagonals each more than a tile apart: no tile's windows fit shared memory.
    far = tuple(range(-200_000, 200_000, 1000))
    reason = mgpu.feasible(
        "spmm", (len(far), 10**6), (10**6, 1), np.float32, offsets=far, shape=(10**6, 10**6)
    )
    assert reason is not None and "shared memory" in reason
    # 3 * 2**30 float32 in lines of odd length: too many for TMA's 32-bit coordinates.
    n = 2**30 + 1
    reason = mgpu.feasible("spmm", (3, n), (n, 1), np.float32, offsets=(-1, 0, 1), shape=(n, n))
    assert reason is not None and "32-bit" in reason


def test_device_check_without_a_gpu():
    assert mgpu.unsupported_device() is None  # lowering without a GPU targets Hopper
