"""The XLA implementation of *run sums*, the kernel behind offset traces and diagonals.

A *run* of a flattened array is ``flat[start + t * stride]`` for ``t < size``. A dense
``(m, n)`` matrix holds diagonal ``k`` as a run of stride ``n + 1``; DIA ``data`` holds it
contiguously in its row. :func:`run_sums_xla` sums the requested runs, reading only their
elements (never the O(m * n) mask of ``jnp.trace``, never a padding slot of ``data``).

It picks its strategy by size; each choice answers a property of XLA:CPU (the
measurements are in ``benchmarks/notes/traces.md``):

* Small windows: the runs as strided slices, zero-padded into one window, then a
  ``fori_loop`` adding it up in chunks. The PjRt CPU client runs a program on the
  calling thread only when XLA's cost analysis estimates fewer than 1000 flops, and
  hands anything larger to a worker thread, which costs more than the whole sum of a
  1000 x 1000 matrix's diagonals. The cost analysis counts a loop body once, so chunks
  of a few hundred elements keep a standalone call inline; inside a larger ``jit`` it is
  just a short loop.
* Many small matrices (a batch, or ``vmap``): gathered a block of matrices at a time,
  which bounds the temporaries (fresh multi-MiB temporaries pay a page fault per 4 KiB
  on every call).
* Long contiguous runs (DIA data): a loop of slice-and-add per run. A reduction over a
  slice makes XLA:CPU copy the slice first.
* Long strided runs (large dense matrices), and many long runs: gathered a chunk at a
  time in one loop (a loop per run would compile one loop per run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import DTypeLike

from .._geometry import accumulation_dtype, index_dtype

#: XLA's flop estimate under which the PjRt CPU client runs a program on the calling
#: thread (with a margin: the loop counter adds a flop or two).
_INLINE_FLOPS = 960
#: The most loop iterations worth trading for inline dispatch (each costs about as much
#: as the hand-off they avoid, divided by this).
_MAX_INLINE_CHUNKS = 32
#: The most runs a small window is sliced from, or summed one loop each (compile time
#: grows with each slice or loop; more runs are gathered).
_MAX_SLICED_RUNS = 8
#: Windows (batch * q * run length) up to this size are summed in inline-sized chunks;
#: larger ones are read in chunks of this size (512 KiB of float64: in cache, and no page
#: faults on fresh temporaries).
_CHUNK_ELEMENTS = 1 << 16
#: Batches whose single-matrix window (q * run length) is at most this are gathered a
#: block of matrices at a time: chunking them along the runs instead would revisit every
#: matrix in every chunk.
_WINDOW_ELEMENTS = 1 << 16
#: Window elements gathered per block of matrices (2 MiB of float64: a few blocks beat
#: both many small ones and one window).
_BLOCK_ELEMENTS = 1 << 18

#: A run of a flattened array: (start, stride, size); its elements are
#: flat[start + t * stride] for 0 <= t < size.
Run = tuple[int, int, int]
EMPTY_RUN: Run = (0, 1, 0)


def sum_dtype(dtype: DTypeLike) -> np.dtype:
    """The dtype of a sum, as ``np.trace`` (and ``jnp.sum``) give it.

    bool and integers narrower than the default integer widen to the default (u)int,
    which is 64-bit with ``jax_enable_x64`` and 32-bit without; other dtypes are kept.
    """
    dtype = np.dtype(dtype)
    if dtype == np.bool_ or np.issubdtype(dtype, np.signedinteger):
        wide = jax.dtypes.canonicalize_dtype(np.int64)
    elif np.issubdtype(dtype, np.unsignedinteger):
        wide = jax.dtypes.canonicalize_dtype(np.uint64)
    else:
        return dtype
    return np.dtype(wide) if dtype.itemsize < np.dtype(wide).itemsize else dtype


def _run_table(runs: Sequence[Run]):
    """``(starts, strides, sizes)`` as ``(q, 1)`` int64 columns."""
    table = np.array(runs, np.int64).reshape(len(runs), 3)
    return table[:, 0:1], table[:, 1:2], table[:, 2:3]


def positions(runs: Sequence[Run], t):
    """Flat index of element ``t`` of every run, and whether it exists.

    ``t`` past a run's end reads the run's last element (always in bounds); the caller
    masks it out. Works on NumPy (static) and JAX (traced) ``t`` alike.
    """
    starts, strides, sizes = _run_table(runs)
    minimum = np.minimum if isinstance(t, np.ndarray) else jnp.minimum
    index = starts + minimum(t, np.maximum(sizes - 1, 0)) * strides
    return index, t < sizes


def _gather(flat: Array, index) -> Array:
    """``flat[..., index]`` for in-bounds ``index`` (``positions`` clamps it)."""
    index = jnp.asarray(index).astype(index_dtype(flat.shape[-1]))
    return flat.at[..., index].get(mode="promise_in_bounds")


def _masked(values: Array, valid, acc) -> Array:
    return jnp.where(valid, values.astype(acc), jnp.zeros((), acc))


def _window(flat: Array, runs: tuple[Run, ...], length: int) -> Array:
    """``(..., q, length)``: run ``j`` as a strided slice, zero-padded to ``length``.

    Slices rather than a gather: XLA:CPU splits a gather of a few thousand elements
    across threads (its cost model charges a gather for its whole operand), and the
    hand-off costs more than the sums.
    """
    rows = []
    for start, stride, size in runs:
        row = lax.slice_in_dim(flat, start, start + max(size - 1, 0) * stride + 1, stride, axis=-1)
        pad = [(0, 0, 0)] * (flat.ndim - 1) + [(0, length - size, 0)]
        rows.append(lax.pad(row[..., :size], jnp.zeros((), flat.dtype), pad))
    return jnp.stack(rows, axis=-2)


def _inline_sums(flat: Array, runs: tuple[Run, ...], acc) -> Array:
    """Run sums of a small window, in chunks sized for inline dispatch.

    The zero-padded window is sliced out at once (no arithmetic: 0 flops), then added
    up in chunks whose adds stay under the PjRt CPU client's inline budget: XLA's cost
    analysis counts a loop body once. More than ``_MAX_SLICED_RUNS`` runs are gathered
    instead, and summed in one pass.
    """
    rows = math.prod(flat.shape[:-1]) * len(runs)
    length = max(size for _, _, size in runs)
    if len(runs) > _MAX_SLICED_RUNS:
        # XLA compile time grows with the number of slices; a gather's does not.
        # Summed in one pass: q this large rarely fits the inline budget.
        index, valid = positions(runs, np.arange(length)[None, :])
        return _masked(_gather(flat, index), valid, acc).sum(-1)
    per_element = 2 + (np.dtype(acc) != flat.dtype)  # (convert,) add, final sum
    width = min(length, max(1, _INLINE_FLOPS // (per_element * rows)))
    if width > 32:
        width -= width % 32  # XLA splits longer final sums into 32-wide windows
    if -(-length // width) > _MAX_INLINE_CHUNKS:
        width = length  # too many chunks to pay off: one pass, dispatched off-thread
    n_chunks = -(-length // width)
    window = _window(flat, runs, n_chunks * width)
    if n_chunks == 1:
        return window.astype(acc).sum(-1)

    def add_chunk(i, total):
        return total + lax.dynamic_slice_in_dim(window, i * width, width, axis=-1).astype(acc)

    zeros = jnp.zeros((*flat.shape[:-1], len(runs), width), acc)
    return lax.fori_loop(0, n_chunks, add_chunk, zeros).sum(-1)


def _blockwise_sums(flat: Array, runs: tuple[Run, ...], acc) -> Array:
    """Run sums of many small matrices, gathered a block of matrices at a time.

    Blocks bound the temporaries (``_BLOCK_ELEMENTS``): fresh multi-MiB temporaries paid
    a page fault per 4 KiB on every call. The last block is shifted back to end at the
    last matrix, rewriting a few sums.
    """
    batch, q = flat.shape[:-1], len(runs)
    flat = flat.reshape(-1, flat.shape[-1])
    count = flat.shape[0]
    length = max(size for _, _, size in runs)
    index, valid = positions(runs, np.arange(length)[None, :])
    block = min(count, max(1, _BLOCK_ELEMENTS // (q * length)))

    def block_sums(first):
        window = _gather(lax.dynamic_slice_in_dim(flat, first, block, axis=0), index)
        # The barrier keeps XLA from fusing the gather into the sum, which recomputes
        # gather indices inside the reduction loop.
        return _masked(lax.optimization_barrier(window), valid, acc).sum(-1)

    n_blocks = -(-count // block)
    if n_blocks == 1:
        return block_sums(0).reshape(*batch, q)

    def add_block(i, sums):
        first = jnp.minimum(i * block, count - block)
        return lax.dynamic_update_slice_in_dim(sums, block_sums(first), first, axis=0)

    sums = lax.fori_loop(0, n_blocks, add_block, jnp.zeros((count, q), acc))
    return sums.reshape(*batch, q)


def _contiguous_sum(flat: Array, run: Run, acc) -> Array:
    """The sum of one long stride-1 run (a DIA diagonal), a chunk at a time.

    Whole chunks are added up in a loop (a slice and an add: nothing to mask), the
    remainder (shorter than a chunk) through one static slice.
    """
    start, _, size = run
    if size == 0:
        return jnp.zeros(flat.shape[:-1], acc)
    width = min(size, max(_CHUNK_ELEMENTS // math.prod(flat.shape[:-1]), 1))
    n_full = size // width
    total = lax.fori_loop(
        0,
        n_full,
        lambda i, total: (
            total + lax.dynamic_slice_in_dim(flat, start + i * width, width, axis=-1).astype(acc)
        ),
        jnp.zeros((*flat.shape[:-1], width), acc),
    )
    tail = flat[..., start + n_full * width : start + size].astype(acc)
    return total.sum(-1) + tail.sum(-1)


def _streamed_sums(flat: Array, runs: tuple[Run, ...], acc) -> Array:
    """Run sums of long strided runs, gathered a chunk at a time inside the loop."""
    q = len(runs)
    length = max(size for _, _, size in runs)
    width = min(length, max(_CHUNK_ELEMENTS // (math.prod(flat.shape[:-1]) * q), 1))

    def add_chunk(i, total):
        t = i * width + lax.broadcasted_iota(index_dtype(flat.shape[-1]), (q, width), 1)
        index, valid = positions(runs, t)
        return total + _masked(_gather(flat, index), valid, acc)

    zeros = jnp.zeros((*flat.shape[:-1], q, width), acc)
    return lax.fori_loop(0, -(-length // width), add_chunk, zeros).sum(-1)


def run_sums_xla(x: Array, *, runs: tuple[Run, ...]) -> Array:
    """``out[..., j] = sum(flat[..., start + t * stride] for t < size)`` for ``runs[j]``.

    It picks a strategy by size (see the module docstring).

    Args:
      x: ``(..., r, c)``; ``flat`` is ``x`` with its last two axes flattened.
      runs: static ``(start, stride, size)`` triples; a run of size 0 sums to 0. Only
        the elements of the runs are read.

    Returns:
      ``(..., len(runs))`` of :func:`_sum_dtype`; 16-bit floats accumulate in float32.
    """
    flat = x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])
    dtype = sum_dtype(x.dtype)
    acc = accumulation_dtype(dtype)
    batch, q = flat.shape[:-1], len(runs)
    length = max((size for _, _, size in runs), default=0)
    if length == 0 or math.prod(batch) == 0:
        sums = jnp.zeros((*batch, q), acc)
    elif math.prod(batch) * q * length <= _CHUNK_ELEMENTS:
        sums = _inline_sums(flat, runs, acc)
    elif q * length <= _WINDOW_ELEMENTS:
        sums = _blockwise_sums(flat, runs, acc)
    elif q <= _MAX_SLICED_RUNS and all(stride == 1 for _, stride, _ in runs):
        sums = jnp.stack([_contiguous_sum(flat, run, acc) for run in runs], axis=-1)
    else:
        sums = _streamed_sums(flat, runs, acc)
    return sums.astype(dtype)
