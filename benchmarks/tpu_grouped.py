"""A candidate Pallas TPU kernel (Mosaic) for ``A @ X`` and ``A^T @ X`` in the matrix's own
layout, the diagonals eight at a time: checked in Pallas's interpreter and lowered for TPU
here, not yet run on a TPU. ``benchmarks/tune_tpu_products.py`` checks and times it on the
chip; once it passes there it replaces the block-shift kernel of
``jaxdia/_kernels/pallas_tpu.py`` (benchmarks/notes/gpu.md, "The product's layout").

The semantics are exactly those of :mod:`jaxdia._kernels.xla` (``spmm_xla``); only float32
and bfloat16 (computed in float32) are handled.

Why this layout: XLA stores ``data`` ``(n_diags, n)`` in ``(8, 128)`` tiles, eight diagonals
side by side in a tile's sublanes. A kernel that takes one diagonal at a time works on
``(1, T)`` rows, one sublane of eight, so its vector units do an eighth of the work they
could (on a TPU v5e such a kernel ran at 0.2 of a copy's bandwidth with 27 diagonals).
Here the block is the whole ``(n_diags, T)`` slab as stored, and eight diagonals move at once
with one *strided* lane rotation (``pltpu.roll(..., stride=1, stride_axis=0)``: sublane
``s`` rotated by ``base + s``), which shifts diagonals whose offsets are consecutive (a band,
or a run of a stencil) by their own offsets in one instruction per vreg.

* ``A @ X``: ``y[p] = sum_k z_k[p + o_k]`` with ``z_k[j] = data[k, j] x[j]``: the products are
  formed in place and rotated by ``-o_k``; rotations grow with the sublane, so a group's
  rows are first reversed (a sublane gather), which puts consecutive offsets in decreasing
  order;
* ``A^T @ X``: ``y[j] = sum_k data[k, j] x[j - o_k]``: ``x`` is broadcast to eight sublanes,
  rotated by ``o_k`` (increasing with the row: no reversal), and multiplied by the aligned
  ``data``.

A *pass* is a set of rows of one group of eight whose rotations are ``base + slot`` for one
``base``: consecutive offsets. A band of ``d`` diagonals takes ``ceil(d / 8)`` passes (plus
one where a group straddles two runs); a 5-point stencil ``(-N, -1, 0, 1, N)`` three.
Mosaic rotates by at most 128 lanes within a vreg, so a pass whose ``base mod 128`` exceeds
``128 - 7`` rotates by ``base - extra`` and then by ``extra`` without a stride.

Each grid step reads its block of ``T`` columns and halos of ``h`` columns on either side
(``h`` the largest offset, rounded up to 128 lanes), so ``data`` and ``X`` are read about
once; every entry is selected by its global column (``jnp.where`` on the diagonal's span),
so padding slots, halo blocks clamped at the ends and ragged edge blocks are never read as
entries. Offsets beyond :data:`MAX_HALO` are not handled here
(:func:`applies`); :mod:`jaxdia._kernels.pallas_tpu`'s block-shift kernel takes them.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from jaxdia._geometry import diagonal_bounds, holds_entries
from jaxdia._kernels.pallas_common import (
    broadcast_batch_index,
    kernel_out_shape,
    product_operands,
    round_up,
)

_LANES = 128
_SUBLANES = 8
#: The largest rotation within a vreg that Mosaic's strided rotation accepts is 128 lanes:
#: with slots 0..7 rotated by ``base + slot``, ``base mod 128`` may be at most this.
_MAX_STRIDED_BASE = _LANES - (_SUBLANES - 1)
_SUPPORTED = frozenset(np.dtype(d) for d in (jnp.float32, jnp.bfloat16))


@dataclasses.dataclass(frozen=True)
class Pass:
    """Rows of one group of eight that one strided rotation shifts.

    Attributes:
        group: the group: ``data`` rows ``[8 group, 8 group + 8)``.
        rows: the diagonals (``data`` rows) taking part.
        slots: each row's sublane after the group's optional reversal.
        base: the strided rotation's amount (slot ``s`` is rotated by ``base + s``).
        extra: a rotation without stride applied after it (0, or what keeps ``base mod
            128`` within Mosaic's limit).
    """

    group: int
    rows: tuple[int, ...]
    slots: tuple[int, ...]
    base: int
    extra: int


def passes(offsets: tuple[int, ...], shape: tuple[int, int], transpose: bool) -> list[Pass]:
    """The passes of a product: ``A @ X`` rotates row ``k`` by ``-offsets[k]`` (rows of a
    group reversed), ``A^T @ X`` by ``offsets[k]``.

    Example:
        >>> from tpu_grouped import passes
        >>> [(p.rows, p.base) for p in passes((-1, 0, 1), (10, 10), transpose=True)]
        [((0, 1, 2), -1)]
        >>> [(p.rows, p.slots) for p in passes((-1, 0, 1), (10, 10), transpose=False)]
        [((0, 1, 2), (7, 6, 5))]
    """
    by_key: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for k, offset in enumerate(offsets):
        if not holds_entries(offset, shape):
            continue
        group, position = divmod(k, _SUBLANES)
        slot = position if transpose else _SUBLANES - 1 - position
        amount = offset if transpose else -offset
        by_key.setdefault((group, amount - slot), []).append((k, slot))
    result = []
    for (group, base), members in sorted(by_key.items()):
        extra = base % _LANES - _MAX_STRIDED_BASE if base % _LANES > _MAX_STRIDED_BASE else 0
        rows, slots = zip(*members)
        result.append(Pass(group, tuple(rows), tuple(slots), base - extra, extra))
    return result


def halo(offsets: tuple[int, ...], shape: tuple[int, int]) -> int:
    """Columns read on either side of a block: the largest offset of a diagonal with
    entries, rounded up to whole lanes (at least one)."""
    reach = max((abs(o) for o in offsets if holds_entries(o, shape)), default=0)
    return max(round_up(reach, _LANES), _LANES)


#: The widest halo taken: beyond it (diagonals far from the main one) the blocks, at least
#: two halos wide, would not fit in VMEM.
MAX_HALO = 8192


def applies(offsets: tuple[int, ...], shape: tuple[int, int], dtype) -> bool:
    """Whether this kernel computes the product: a supported dtype and halos of at most
    :data:`MAX_HALO` columns."""
    return np.dtype(dtype) in _SUPPORTED and halo(offsets, shape) <= MAX_HALO


def _rotate(values: Array, amount: int, *, strided: bool) -> Array:
    """``values`` rotated along lanes by ``amount`` (sublane ``s`` by ``amount + s`` when
    ``strided``), as ``jnp.roll`` does: ``out[j] = values[j - amount]``."""
    width = values.shape[-1]
    shift = np.int32(amount % width)
    if strided:
        return pltpu.roll(values, shift, 1, stride=1, stride_axis=0)
    if shift == 0:
        return values
    return pltpu.roll(values, shift, 1)


def _bounds(rows_and_slots, offsets, shape, stop_if_absent: int) -> tuple[Array, Array]:
    """``(lo, hi)`` ``(8, 1)``: the span of columns of the diagonal in each slot (an empty
    span in slots of no row of the pass)."""
    slot = lax.broadcasted_iota(jnp.int32, (_SUBLANES, 1), 0)
    lo = jnp.full((_SUBLANES, 1), stop_if_absent, jnp.int32)
    hi = jnp.zeros((_SUBLANES, 1), jnp.int32)
    for k, s in rows_and_slots:
        start, stop = diagonal_bounds(offsets[k], shape)
        lo = jnp.where(slot == s, np.int32(start), lo)
        hi = jnp.where(slot == s, np.int32(stop), hi)
    return lo, hi


def _kernel(
    # inputs
    *refs,
    # static configuration
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool,
    plan: tuple[Pass, ...],
    n_cols: int,
    # block information
    block: int,
    halo_width: int,
):
    """One block of ``T`` output rows (lanes) for all columns of ``X`` in the step."""
    if transpose:
        data_ref, x_low, x_main, x_high, out_ref = refs
    else:
        d_low, d_main, d_high, x_low, x_main, x_high, out_ref = refs
    i = pl.program_id(2)
    h, width = halo_width, block + 2 * halo_width
    x = jnp.concatenate([x_low[...], x_main[...], x_high[...]], axis=-1).astype(jnp.float32)
    if transpose:
        data = data_ref[...].astype(jnp.float32)
        first, span = i * block, block  # data is aligned with the output
    else:
        data = jnp.concatenate([d_low[...], d_main[...], d_high[...]], axis=-1)
        data = data.astype(jnp.float32)
        first, span = i * block - h, width
    rows = round_up(data.shape[0], _SUBLANES)
    if rows > data.shape[0]:
        data = jnp.concatenate([data, jnp.zeros((rows - data.shape[0], span), jnp.float32)], axis=0)
    column = first + lax.broadcasted_iota(jnp.int32, (1, span), 1)
    reverse = _SUBLANES - 1 - lax.broadcasted_iota(jnp.int32, (_SUBLANES, span), 0)
    sums = [jnp.zeros((_SUBLANES, block), jnp.float32) for _ in range(n_cols)]
    for step in plan:
        group = data[_SUBLANES * step.group : _SUBLANES * (step.group + 1)]
        if not transpose:
            group = jnp.take_along_axis(group, reverse, axis=0)
        lo, hi = _bounds(zip(step.rows, step.slots), offsets, shape, shape[1])
        inside = (column >= lo) & (column < hi)
        for c in range(n_cols):
            if transpose:
                window = jnp.broadcast_to(x[c : c + 1], (_SUBLANES, width))
                window = _rotate(window, step.base, strided=True)
                window = _rotate(window, step.extra, strided=False)[:, h : h + block]
                sums[c] = sums[c] + jnp.where(inside, group * window, 0.0)
            else:
                products = jnp.where(inside, group * x[c : c + 1], 0.0)
                products = _rotate(products, step.base, strided=True)
                products = _rotate(products, step.extra, strided=False)
                sums[c] = sums[c] + products[:, h : h + block]
    out = jnp.concatenate([jnp.sum(s, axis=0, keepdims=True) for s in sums], axis=0)
    out_ref[...] = out.astype(out_ref.dtype)


def _spec(block_shape: tuple, index_map) -> pl.BlockSpec:
    """A block spec with int32 block indices (Mosaic refuses int64 ones, which a Python
    int becomes under ``jax_enable_x64``)."""

    def int32_indices(*grid):
        return tuple(jnp.asarray(i, jnp.int32) for i in index_map(*grid))

    return pl.BlockSpec(block_shape, int32_indices)


def spmm(
    data: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool = False,
    block: int = 32768,
    columns: int = 8,
    interpret: bool = False,
) -> Array:
    """``A @ x`` (or ``A^T @ x``, no conjugation) for offsets within :data:`MAX_HALO` of
    the main diagonal (:func:`applies`).

    Args:
        data: ``(*B, n_diags, n)`` diagonals in SciPy's DIA layout, float32 or bfloat16.
        x: ``(*B, rows, c)`` with ``rows == n`` (``m`` with ``transpose=True``); its batch
            dimensions have the rank of ``data``'s and broadcast against them.
        offsets: static, sorted, distinct diagonal offsets.
        shape: the matrix shape ``(m, n)``.
        transpose: compute ``A^T @ x`` instead.
        block: output rows per grid step, a multiple of 128 (at most the matrix's larger
            side, at least two halos, and a multiple of the halo).
        columns: columns of ``x`` per grid step.
        interpret: run the kernel in Pallas' interpreter (any backend, for tests).

    Returns:
        ``(*B, m, c)`` (or ``(*B, n, c)``) of the inputs' dtype.

    """
    data, x, dtype, batch, n_cols = product_operands(data, x)
    m, n = shape
    offsets = tuple(offsets)
    x_rows, out_rows = (m, n) if transpose else (n, m)
    out_shape = (*batch, out_rows, n_cols)
    if math.prod(out_shape) == 0 or not any(holds_entries(o, shape) for o in offsets):
        return jnp.zeros(out_shape, dtype)
    if not applies(offsets, shape, dtype):
        raise ValueError(
            f"the grouped TPU kernel takes float32 and bfloat16 and offsets within {MAX_HALO} "
            f"of the main diagonal, got {dtype} and offsets {offsets}"
        )
    h = halo(offsets, shape)
    block = round_up(max(min(block, round_up(max(m, n), _LANES)), 2 * h), h)
    cols = min(n_cols, columns)
    plan = tuple(passes(offsets, shape, transpose))

    # The matrix dimension on lanes; arrays shorter than a block are padded to one (cheap),
    # so that every block starts inside its array.
    xt = _pad_lanes(jnp.swapaxes(x.astype(dtype), -1, -2).reshape(-1, n_cols, x_rows), block)
    d3 = _pad_lanes(data.astype(dtype).reshape(-1, len(offsets), n), block)
    n_batch = math.prod(batch)
    data_batch, x_batch = tuple(data.shape[:-2]), tuple(x.shape[:-2])
    per_block = block // h

    def halo_specs(rows: int, lanes: int, operand_batch, chunked: bool):
        """Specs of the low halo, the block and the high halo of an operand with ``lanes``
        columns (clamped at its ends)."""
        last_block, last_halo = pl.cdiv(lanes, block) - 1, pl.cdiv(lanes, h) - 1

        def at(b, c, index):
            return (broadcast_batch_index(b, batch, operand_batch), c if chunked else 0, index)

        return [
            _spec((None, rows, h), lambda b, c, i: at(b, c, jnp.maximum(i * per_block - 1, 0))),
            _spec((None, rows, block), lambda b, c, i: at(b, c, jnp.minimum(i, last_block))),
            _spec(
                (None, rows, h),
                lambda b, c, i: at(b, c, jnp.minimum((i + 1) * per_block, last_halo)),
            ),
        ]

    x_specs = halo_specs(cols, xt.shape[-1], x_batch, chunked=True)
    if transpose:
        last = pl.cdiv(d3.shape[-1], block) - 1
        data_specs = [
            _spec(
                (None, len(offsets), block),
                lambda b, c, i: (
                    broadcast_batch_index(b, batch, data_batch),
                    0,
                    jnp.minimum(i, last),
                ),
            )
        ]
        operands = [d3, xt, xt, xt]
    else:
        data_specs = halo_specs(len(offsets), d3.shape[-1], data_batch, chunked=False)
        operands = [d3, d3, d3, xt, xt, xt]
    out_lanes = max(out_rows, block)
    kernel = functools.partial(
        _kernel,
        offsets=offsets,
        shape=(m, n),
        transpose=transpose,
        plan=plan,
        n_cols=cols,
        block=block,
        halo_width=h,
    )
    yt = pl.pallas_call(
        kernel,
        out_shape=kernel_out_shape((n_batch, n_cols, out_lanes), dtype, x),
        grid=(n_batch, pl.cdiv(n_cols, cols), pl.cdiv(out_lanes, block)),
        in_specs=[*data_specs, *x_specs],
        out_specs=_spec((None, cols, block), lambda b, c, i: (b, c, i)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel"),
            vmem_limit_bytes=100 * 2**20,
        ),
        interpret=interpret,
        name="jaxdia_spmm_t_grouped" if transpose else "jaxdia_spmm_grouped",
    )(*operands)
    yt = yt[..., :out_rows]
    return jnp.swapaxes(yt, -1, -2).reshape(out_shape)


def _pad_lanes(array: Array, block: int) -> Array:
    size = array.shape[-1]
    if size >= block:
        return array
    return jnp.pad(array, [(0, 0)] * (array.ndim - 1) + [(0, block - size)])
