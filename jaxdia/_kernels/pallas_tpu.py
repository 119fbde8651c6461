"""Pallas TPU kernels (Mosaic) for the DIA products ``A @ X``, ``A^T @ X`` and SDDMM.

The semantics are exactly those of :mod:`jaxdia._kernels.xla` (``spmm_xla``, ``sddmm_xla``); this
module only changes how they run on a TPU. It is imported lazily by the TPU lowering rule,
so importing :mod:`jaxdia` never imports Pallas. Only float32 and bfloat16 are handled
(TPUs have no 64-bit vector types; bfloat16 is computed in float32); everything else stays
on XLA.

Design (``docs/design.md`` records the designs that lower and those that did not):

* the matrix dimension lies on the 128 lanes: ``X`` (and SDDMM's ``G``) is transposed to
  ``(c, rows)`` (free for one column), ``data`` is viewed as ``(n_diags, 1, n)``; the grid
  is ``(batch, row blocks, column blocks of X)`` (SDDMM) or ``(batch, column blocks,
  row blocks)`` (products), with an explicit batch axis over the flattened broadcast batch
  (each operand finds its own batch entry by index arithmetic in its index map);
* a row block ``[i T, (i + 1) T)`` of the output needs, for a diagonal whose shift is
  ``q T + r`` (``0 <= r < T``), the blocks ``i + q`` and ``i + q + 1`` of the shifted
  operand (``data`` and ``X`` for ``A @ X``; ``X`` alone for ``A^T @ X``; ``G`` for SDDMM,
  whose ``data``-shaped output is aligned with ``X``). Each needed block shift is passed as
  its own operand with a clamped index map, so Pallas' pipeline fetches every window by
  DMA; the two blocks are joined with a static ``pltpu.roll`` by ``T - r`` and a lane
  select;
* entries are selected with ``jnp.where`` on their global positions (computed from the
  unclamped block index) before they are summed: padding slots of ``data``, rows outside
  the matrix and the ragged ends of edge blocks are never read as entries.

Cost: the shifted operand is fetched once per distinct block shift (three times for a band
narrower than ``T``), ``data`` twice for ``A @ X`` and once for ``A^T @ X``. A ring buffer
of blocks in VMEM would fetch each once; it is not done here (unmeasured on hardware).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .._geometry import diagonal_bounds, holds_entries
from .pallas_common import broadcast_batch_index, kernel_out_shape, product_operands, round_up

_SUPPORTED = frozenset(np.dtype(d) for d in (jnp.float32, jnp.bfloat16))
_LANES = 128


def supports(dtype) -> bool:
    """Whether the TPU kernel handles ``dtype`` (float32 and bfloat16).

    Example:
        >>> from jaxdia._kernels.pallas_tpu import supports
        >>> import jax.numpy as jnp
        >>> supports(jnp.bfloat16), supports(jnp.float64)
        (True, False)
    """
    return np.dtype(dtype) in _SUPPORTED


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes of one grid step.

    Attributes:
        rows: matrix rows per step, on lanes: a multiple of 128.
        cols: columns of ``X`` per step, on sublanes: a multiple of 8; when ``X`` has no
            more columns than this, all of them are taken at once.

    Example:
        >>> from jaxdia._kernels.pallas_tpu import BlockSizes
        >>> import jax.numpy as jnp
        >>> BlockSizes.default((100_000, 100_000), 1, jnp.float32, offsets=(-1, 0, 1))
        BlockSizes(rows=2048, cols=8)
        >>> BlockSizes.default((100_000, 100_000), 200, jnp.float32,
        ...                    offsets=tuple(range(-13, 14)))
        BlockSizes(rows=1024, cols=64)
    """

    rows: int
    cols: int

    def __post_init__(self):
        if self.rows < _LANES or self.rows % _LANES:
            raise ValueError(f"BlockSizes.rows must be a multiple of 128, got {self.rows}")
        if self.cols < 8 or self.cols % 8:
            raise ValueError(f"BlockSizes.cols must be a multiple of 8, got {self.cols}")

    @classmethod
    def default(
        cls,
        shape: tuple[int, int],
        n_cols: int,
        dtype,
        *,
        offsets: tuple[int, ...] = (),
        op: str = "spmm",
    ) -> BlockSizes:
        """The heuristic: the largest ``rows`` in 128..2048 whose buffers fit 8 MiB of VMEM.

        ``op`` is ``"spmm"``, ``"spmm_t"`` (``A^T @ X``) or ``"sddmm"``. ``cols`` takes up
        to 64 columns (rounded up to 8). The VMEM estimate (:func:`_vmem_words`) counts
        the double-buffered blocks of every operand and of the output. ``rows`` is also
        kept at most the matrix' larger side rounded up to 128. Unmeasured on hardware: a
        starting point to tune.
        """
        del dtype  # bfloat16 blocks occupy as many bytes as float32 ones (16-row tiles).
        cols = min(round_up(max(n_cols, 1), 8), 64)
        limit = round_up(max(shape[0], shape[1], 1), _LANES)
        rows = _LANES
        for candidate in (256, 512, 1024, 2048):
            if candidate > limit or _vmem_words(op, offsets, shape, candidate, cols) * 4 > 2**23:
                break
            rows = candidate
        return cls(rows=rows, cols=cols)


def _vmem_words(op: str, offsets, shape, block: int, cols: int) -> int:
    """32-bit VMEM words of all double-buffered blocks (and accumulators) of one step.

    A block ``(r, T)`` occupies ``round_up(r, 8)`` sublanes; ``(1, T)`` rows of ``data``
    held in a ``(n_diags, 1, T)`` block take 8 sublanes each.
    """
    transposed = op != "spmm"
    x_shifts, data_ops = _operand_plan(offsets, shape, block, transposed)
    sublanes = round_up(cols, 8) * len(x_shifts)  # X (spmm) or G (sddmm) windows
    if op == "spmm":
        sublanes += 8 * len(data_ops) + round_up(cols, 8)  # data blocks, output
    elif op == "spmm_t":
        sublanes += 8 * len(offsets) + round_up(cols, 8)  # aligned data, output
    else:
        sublanes += round_up(cols, 8) + 16 * len(offsets)  # X, out and sums (n_diags, 1, T)
    return 2 * block * sublanes


def _block_spec(block_shape: tuple, index_map: Callable[..., tuple]) -> pl.BlockSpec:
    """A block spec whose block indices are int32 whatever ``jax_enable_x64`` says: with
    x64 on, a Python int (or an index computed from one) in an index map is an int64, and
    Mosaic TPU refuses to compile a kernel whose index map returns one."""

    def int32_indices(*grid_indices):
        return tuple(jnp.asarray(i, jnp.int32) for i in index_map(*grid_indices))

    return pl.BlockSpec(block_shape, int32_indices)


def _shift_split(shift: int, block: int) -> tuple[int, int]:
    """``shift = q * block + r`` with ``0 <= r < block``."""
    return shift // block, shift % block


def _needed(q: int, r: int) -> tuple[int, ...]:
    return (q, q + 1) if r else (q,)


def _operand_plan(offsets, shape, block: int, transpose: bool):
    """Block shifts of ``X`` to fetch, and the ``(k, shift)`` blocks of ``data`` (``A @ X``).

    For ``A^T @ X`` the data list is empty: one aligned block of all diagonals is used.
    """
    live = [k for k, o in enumerate(offsets) if holds_entries(o, shape)]
    x_shifts, data_ops = set(), []
    for k in live:
        q, r = _shift_split(-offsets[k] if transpose else offsets[k], block)
        x_shifts.update(_needed(q, r))
        if not transpose:
            data_ops.extend((k, s) for s in _needed(q, r))
    return sorted(x_shifts), data_ops


def _join_shifted(low: Array, high: Array | None, r: int, lane: Array) -> Array:
    """Lanes ``[r, T)`` of ``low`` followed by lanes ``[0, r)`` of ``high``."""
    if r == 0:
        return low
    assert high is not None  # only r == 0 comes without a high block
    block = low.shape[-1]
    # Mosaic wants an int32 shift, also under jax_enable_x64 (roll's annotation says int).
    shift: Any = np.int32(block - r)
    return jnp.where(
        lane < block - r,
        pltpu.roll(low, shift, axis=low.ndim - 1),
        pltpu.roll(high, shift, axis=high.ndim - 1),
    )


def _spmm_kernel(
    # inputs
    *refs,
    # static configuration
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool,
    x_shifts: tuple[int, ...],
    data_ops: tuple[tuple[int, int], ...],
    # block information
    block_rows: int,
):
    n_x = len(x_shifts)
    n_data = 1 if transpose else len(data_ops)
    x_refs = dict(zip(x_shifts, refs[:n_x]))
    data_refs = refs[n_x : n_x + n_data]
    (out_ref,) = refs[n_x + n_data :]
    row_block = pl.program_id(2)
    # Lane positions at the full block shape, so that no boolean mask needs a broadcast.
    lane = lax.broadcasted_iota(jnp.int32, out_ref.shape, 1)
    acc = jnp.zeros(out_ref.shape, jnp.float32)

    x_blocks = {}

    def x_at(shift):  # each window of X is loaded once, however many diagonals use it
        if shift not in x_blocks:
            x_blocks[shift] = x_refs[shift][...].astype(jnp.float32)
        return x_blocks[shift]

    if transpose:
        # y[j] += data[k, j] * x[j - offset]: data is aligned with the output rows j.
        j = row_block * block_rows + lane
        for k, offset in enumerate(offsets):
            start, stop = diagonal_bounds(offset, shape)
            if stop <= start:
                continue
            q, r = _shift_split(-offset, block_rows)
            window = _join_shifted(x_at(q), x_at(q + 1) if r else None, r, lane)
            diagonal = data_refs[0][k].astype(jnp.float32)  # (1, T)
            ok = (j >= start) & (j < stop)
            acc = acc + jnp.where(ok, diagonal * window, 0.0)
    else:
        # y[i] += z_k[i + offset] with z_k[j] = data[k, j] * x[j], j in the diagonal's span.
        data_blocks = dict(zip(data_ops, data_refs))
        for k, offset in enumerate(offsets):
            start, stop = diagonal_bounds(offset, shape)
            if stop <= start:
                continue
            q, r = _shift_split(offset, block_rows)
            products = []
            for shift in _needed(q, r):
                j = (row_block + shift) * block_rows + lane  # unclamped global columns
                ok = (j >= start) & (j < stop)
                diagonal = data_blocks[(k, shift)][...].astype(jnp.float32)  # (1, T)
                products.append(jnp.where(ok, diagonal * x_at(shift), 0.0))
            acc = acc + _join_shifted(products[0], products[-1], r, lane)
    out_ref[...] = acc.astype(out_ref.dtype)


def spmm(
    data: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool = False,
    block_sizes: BlockSizes | None = None,
    interpret: bool = False,
    rows: bool = False,
) -> Array:
    """``A @ x`` (or ``A^T @ x``, no conjugation) with a Pallas TPU kernel.

    Args:
        data: ``(*B, n_diags, n)`` diagonals in SciPy's DIA layout, float32 or bfloat16.
        x: ``(*B, rows, c)`` with ``rows == n`` (or ``m`` with ``transpose=True``); its batch
            dimensions have the rank of ``data``'s and broadcast against them.
        offsets: static, sorted, distinct diagonal offsets (``len(offsets) == n_diags``).
        shape: the matrix shape ``(m, n)``.
        transpose: compute ``A^T @ x`` instead.
        block_sizes: tile sizes; ``BlockSizes.default(...)`` when ``None``.
        interpret: run the kernel in Pallas' interpreter (any backend, for tests).
        rows: ``x`` and the result as rows ``(*B, c, rows)``, the layout the kernel
            computes in (no transposes around it).

    Returns:
        ``(*B, m, c)`` (or ``(*B, n, c)``, or with ``rows`` ``(*B, c, m)``) of the
        inputs' dtype.

    Raises:
        TypeError: for a dtype other than float32 and bfloat16.

    Example:
        >>> from jaxdia._kernels.pallas_tpu import spmm
        >>> import numpy as np
        >>> data = np.array([[1., 2., 3.], [4., 5., 6.]], np.float32)
        >>> y = spmm(data, np.ones((3, 1), np.float32), offsets=(0, 1), shape=(3, 3),
        ...          interpret=True)
        >>> y[:, 0].tolist()  # [1 + 5, 2 + 6, 3]
        [6.0, 8.0, 3.0]
    """
    data, x, dtype, batch, n_cols = product_operands(data, x)
    if rows:
        n_cols = x.shape[-2]
    if not supports(dtype):
        raise TypeError(f"the TPU kernel handles float32 and bfloat16, not {dtype}")
    m, n = shape
    x_rows, out_rows = (m, n) if transpose else (n, m)
    out_shape = (*batch, n_cols, out_rows) if rows else (*batch, out_rows, n_cols)
    offsets = tuple(offsets)
    if math.prod(out_shape) == 0 or not any(holds_entries(o, shape) for o in offsets):
        return jnp.zeros(out_shape, dtype)
    if block_sizes is None:
        block_sizes = BlockSizes.default(
            shape, n_cols, dtype, offsets=offsets, op="spmm_t" if transpose else "spmm"
        )
    block = block_sizes.rows
    cols = n_cols if n_cols <= block_sizes.cols else block_sizes.cols
    x_shifts, data_ops = _operand_plan(offsets, shape, block, transpose)

    # Matrix dimension on lanes. Lane dimensions shorter than one block are zero-padded
    # to it (cheap: under 2048 entries), so that every block lies within its array.
    xt = x if rows else jnp.swapaxes(x, -1, -2)
    xt = xt.astype(dtype).reshape(-1, n_cols, x_rows)
    xt = _pad_lanes(xt, block)
    data3 = _pad_lanes(data.astype(dtype).reshape(-1, len(offsets), 1, n), block)
    n_batch = math.prod(batch)
    data_batch, x_batch = tuple(data.shape[:-2]), tuple(x.shape[:-2])
    x_blocks, data_blocks = pl.cdiv(xt.shape[-1], block), pl.cdiv(data3.shape[-1], block)

    def clamp(index, count):
        return jnp.minimum(jnp.maximum(index, 0), count - 1)

    def x_spec(shift):
        return _block_spec(
            (None, cols, block),
            lambda b, c, i: (
                broadcast_batch_index(b, batch, x_batch),
                c,
                clamp(i + shift, x_blocks),
            ),
        )

    def data_spec(k, shift):
        if transpose:
            return _block_spec(
                (None, len(offsets), 1, block),
                lambda b, c, i: (broadcast_batch_index(b, batch, data_batch), 0, 0, i),
            )
        return _block_spec(
            (None, None, 1, block),
            lambda b, c, i: (
                broadcast_batch_index(b, batch, data_batch),
                k,
                0,
                clamp(i + shift, data_blocks),
            ),
        )

    data_specs = [data_spec(0, 0)] if transpose else [data_spec(k, s) for k, s in data_ops]
    out_lanes = max(out_rows, block)
    kernel = functools.partial(
        _spmm_kernel,
        offsets=offsets,
        shape=(m, n),
        transpose=transpose,
        x_shifts=tuple(x_shifts),
        data_ops=tuple(data_ops),
        block_rows=block,
    )
    yt = pl.pallas_call(
        kernel,
        out_shape=kernel_out_shape((n_batch, n_cols, out_lanes), dtype, x),
        grid=(n_batch, pl.cdiv(n_cols, cols), pl.cdiv(out_lanes, block)),
        in_specs=[x_spec(s) for s in x_shifts] + data_specs,
        out_specs=_block_spec((None, cols, block), lambda b, c, i: (b, c, i)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel")
        ),
        interpret=interpret,
        name="jaxdia_spmm_t" if transpose else "jaxdia_spmm",
    )(*([xt] * len(x_shifts)), *([data3] * len(data_specs)))
    yt = yt[..., :out_rows]
    return yt.reshape(out_shape) if rows else jnp.swapaxes(yt, -1, -2).reshape(out_shape)


def _pad_lanes(array: Array, block: int) -> Array:
    size = array.shape[-1]
    if size >= block:
        return array
    return jnp.pad(array, [(0, 0)] * (array.ndim - 1) + [(0, block - size)])


def _sddmm_kernel(
    # inputs
    *refs,
    # static configuration
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    g_shifts: tuple[int, ...],
    n_cols: int,
    # block information
    block_rows: int,
    block_cols: int,
):
    n_g = len(g_shifts)
    g_refs = dict(zip(g_shifts, refs[:n_g]))
    x_ref, out_ref, sums_ref = refs[n_g:]
    row_block, col_block = pl.program_id(1), pl.program_id(2)
    lane = lax.broadcasted_iota(jnp.int32, x_ref.shape, 1)
    # Columns of a ragged last block hold garbage, and here they are summed over: mask.
    col_ok = col_block * block_cols + lax.broadcasted_iota(jnp.int32, x_ref.shape, 0) < n_cols
    j = row_block * block_rows + lane  # data columns

    @pl.when(col_block == 0)
    def _():
        sums_ref[...] = jnp.zeros(sums_ref.shape, jnp.float32)

    x_block = x_ref[...].astype(jnp.float32)
    for k, offset in enumerate(offsets):
        start, stop = diagonal_bounds(offset, shape)
        if stop <= start:
            continue
        q, r = _shift_split(-offset, block_rows)  # g[j - offset] is a shifted window
        low = g_refs[q][...].astype(jnp.float32)
        high = g_refs[q + 1][...].astype(jnp.float32) if r else None
        window = _join_shifted(low, high, r, lane)
        ok = (j >= start) & (j < stop) & col_ok
        products = jnp.where(ok, window * x_block, 0.0)
        sums_ref[k] += jnp.sum(products, axis=0, keepdims=True)

    @pl.when(col_block == pl.num_programs(2) - 1)
    def _():
        out_ref[...] = sums_ref[...].astype(out_ref.dtype)


def sddmm(
    g: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    block_sizes: BlockSizes | None = None,
    interpret: bool = False,
) -> Array:
    """``D[k, j] = sum_c g[j - offsets[k], c] * x[j, c]`` with a Pallas TPU kernel.

    It is the cotangent of ``data`` in ``y = A @ x`` (``g`` the cotangent of ``y``). The
    grid runs over ``(batch, data-column blocks, column blocks of x)``; the last axis is a
    reduction, summed in a float32 VMEM accumulator.

    Args:
        g: ``(*B, m, c)``, float32 or bfloat16.
        x: ``(*B, n, c)``; its batch dimensions have the rank of ``g``'s and broadcast
            against them.
        offsets: static, sorted, distinct diagonal offsets.
        shape: the matrix shape ``(m, n)``.
        block_sizes: tile sizes; ``BlockSizes.default(..., op="sddmm")`` when ``None``.
        interpret: run the kernel in Pallas' interpreter (any backend, for tests).

    Returns:
        ``(*B, len(offsets), n)`` of the inputs' dtype, exactly 0 in padding slots.

    Raises:
        TypeError: for a dtype other than float32 and bfloat16.

    Example:
        >>> from jaxdia._kernels.pallas_tpu import sddmm
        >>> import numpy as np
        >>> g = np.array([[1.], [2.]], np.float32)
        >>> x = np.array([[3.], [4.]], np.float32)
        >>> sddmm(g, x, offsets=(-1, 0), shape=(2, 2), interpret=True).tolist()
        [[6.0, 0.0], [3.0, 8.0]]
    """
    g, x, dtype, batch, n_cols = product_operands(g, x)
    if not supports(dtype):
        raise TypeError(f"the TPU kernel handles float32 and bfloat16, not {dtype}")
    m, n = shape
    offsets = tuple(offsets)
    out_shape = (*batch, len(offsets), n)
    if (
        math.prod(out_shape) == 0
        or n_cols == 0
        or not any(holds_entries(o, shape) for o in offsets)
    ):
        return jnp.zeros(out_shape, dtype)
    if block_sizes is None:
        block_sizes = BlockSizes.default(shape, n_cols, dtype, offsets=offsets, op="sddmm")
    block = block_sizes.rows
    cols = n_cols if n_cols <= block_sizes.cols else block_sizes.cols
    g_shifts, _ = _operand_plan(offsets, shape, block, True)

    gt = _pad_lanes(jnp.swapaxes(g.astype(dtype), -1, -2).reshape(-1, n_cols, m), block)
    xt = _pad_lanes(jnp.swapaxes(x.astype(dtype), -1, -2).reshape(-1, n_cols, n), block)
    n_batch = math.prod(batch)
    g_batch, x_batch = tuple(g.shape[:-2]), tuple(x.shape[:-2])
    g_blocks = pl.cdiv(gt.shape[-1], block)
    out_lanes = max(n, block)

    def g_spec(shift):
        return _block_spec(
            (None, cols, block),
            lambda b, i, c: (
                broadcast_batch_index(b, batch, g_batch),
                c,
                jnp.minimum(jnp.maximum(i + shift, 0), g_blocks - 1),
            ),
        )

    x_spec = _block_spec(
        (None, cols, block), lambda b, i, c: (broadcast_batch_index(b, batch, x_batch), c, i)
    )
    kernel = functools.partial(
        _sddmm_kernel,
        offsets=offsets,
        shape=(m, n),
        g_shifts=tuple(g_shifts),
        n_cols=n_cols,
        block_rows=block,
        block_cols=cols,
    )
    d = pl.pallas_call(
        kernel,
        out_shape=kernel_out_shape((n_batch, len(offsets), 1, out_lanes), dtype, x),
        grid=(n_batch, pl.cdiv(out_lanes, block), pl.cdiv(n_cols, cols)),
        in_specs=[*(g_spec(s) for s in g_shifts), x_spec],
        # (n_diags, 1, T) blocks: every diagonal is its own tile row, so the per-diagonal
        # sums are stored at aligned positions.
        out_specs=_block_spec((None, len(offsets), 1, block), lambda b, i, c: (b, 0, 0, i)),
        scratch_shapes=[pltpu.VMEM((len(offsets), 1, block), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        interpret=interpret,
        name="jaxdia_sddmm",
    )(*([gt] * len(g_shifts)), xt)
    return d[..., 0, :n].reshape(out_shape)
