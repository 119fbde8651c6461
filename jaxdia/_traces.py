"""Offset traces and diagonals of dense arrays and of DIA matrices.

Both kinds of input go through one primitive, ``run_sums_p``: every diagonal is a *run*
of a flattened array, ``flat[start + t * stride]`` for ``t < size``. A dense ``(m, n)``
matrix holds diagonal ``k`` at stride ``n + 1`` (from flat index ``k``, or ``-k * n``
below the main diagonal); DIA ``data`` holds it contiguously in its row. Only the
requested runs are read: O(q * min(m, n)) work, never the O(m * n) mask of
``jnp.trace``, and never a padding slot of ``data``.

The kernel picks its strategy by size; each choice answers a measurement on XLA:CPU
(jax 0.10.2, 2 shared cores):

* Small windows: the runs as strided slices, zero-padded into one window, then a
  ``fori_loop`` adding it up in chunks. The PjRt CPU client runs a program on the
  calling thread only when XLA's cost analysis estimates fewer than 1000 flops, and
  hands anything larger to a worker thread, which cost 25-60 us per call here: more
  than NumPy's whole ``np.trace`` loop at 1000x1000. The cost analysis counts a loop
  body once, so chunks of a few hundred elements keep a standalone call inline
  (1000x1000, q = 5: 12-18 us a call back to back, NumPy's list 12 us, instead of
  75-90 us). Inside a larger ``jit`` it is just a short loop.
* Many small matrices (a batch, or ``vmap``): gathered a block of matrices at a time.
  One window for the whole batch is a multi-MiB temporary, and fresh temporaries that
  size paid a page fault per 4 KiB on every call.
* Long contiguous runs (DIA data): a loop of slice-and-add per run. A reduction over a
  slice makes XLA:CPU copy the slice first: 40 MiB of temporaries at n = 1e6 and 5
  diagonals, 10-30x slower than SciPy (the loop: 1.3-3.7x, as fast as any XLA:CPU
  formulation measured).
* Long strided runs (large dense matrices): gathered a chunk at a time in a loop.

The primitive's batching rule hands ``vmap``'s batch to the kernel as leading dims (so
the strategy sees the whole batch), and its transpose scatters the cotangent onto the
runs (reverse mode through the loops would carry an O(m * n) cotangent through every
iteration).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax import Array, lax
from jax._src import dispatch
from jax.core import Tracer
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from ._dtypes import is_int, native
from ._primitives import output_aval
from ._xla import accumulation_dtype, diagonal_bounds, index_dtype

#: XLA's flop estimate under which the PjRt CPU client runs a program on the calling
#: thread (with a margin: the loop counter adds a flop or two).
_INLINE_FLOPS = 960
#: The most loop iterations worth trading for inline dispatch (about 1 us each here).
_MAX_INLINE_CHUNKS = 32
#: The most runs a small window is sliced from (compile time grows with each slice).
_MAX_SLICED_RUNS = 8
#: Windows (batch * q * run length) up to this size are summed in inline-sized chunks;
#: larger ones are read in chunks of this size (512 KiB of float64: in cache, and no page
#: faults on fresh temporaries).
_CHUNK_ELEMENTS = 1 << 16
#: Batches whose single-matrix window (q * run length) is at most this are gathered a
#: block of matrices at a time: chunking them along the runs instead would revisit every
#: matrix in every chunk.
_WINDOW_ELEMENTS = 1 << 16
#: Window elements gathered per block of matrices (2 MiB of float64: 1000 matrices of
#: 100x100 ran 10-25% faster in 2 blocks than in 8, or in one window).
_BLOCK_ELEMENTS = 1 << 18

_STATIC_HELP = (
    "must be static: an int or a sequence of Python ints known at trace time, not a traced "
    "JAX array. Under jit, pass it through static_argnums/static_argnames or close over it."
)

# A run of a flattened array: (start, stride, size); its elements are
# flat[start + t * stride] for 0 <= t < size.
_Run = tuple[int, int, int]
_EMPTY_RUN: _Run = (0, 1, 0)


def _static_int(value: Any, name: str) -> int:
    if isinstance(value, Tracer):
        raise TypeError(f"{name} {_STATIC_HELP}")
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0:
        array = np.asarray(value)
        if np.issubdtype(array.dtype, np.integer):
            return int(array)
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")
    return int(value)


def _requested_offsets(q: Any) -> tuple[int, ...]:
    """``range(q)`` for an int ``q``, else the offsets ``q`` lists, as Python ints."""
    if isinstance(q, Tracer):
        raise TypeError(f"q {_STATIC_HELP}")
    if isinstance(q, (np.ndarray, jax.Array)) and np.ndim(q) == 1:
        q = list(np.asarray(q))
    elif not isinstance(q, Sequence) or isinstance(q, (str, bytes)):
        count = _static_int(q, "q")
        if count < 0:
            raise ValueError(f"q must be a non-negative int (the number of offsets), got {count}")
        return tuple(range(count))
    return tuple(_static_int(k, "each offset in q") for k in q)


def _as_array(x: Any) -> Any:
    """``x`` itself if it is a JAX array or tracer, else ``np.asarray(x)`` in native byte
    order.

    JAX arrays are passed on untouched: re-wrapping one with ``jnp.asarray`` added
    10-20 us to every call here, as much as the 1000x1000 computation.
    """
    return x if isinstance(x, (jax.Array, Tracer)) else native(np.asarray(x))


def _sum_dtype(dtype: Any) -> np.dtype:
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


# -- the kernel -------------------------------------------------------------------------


def _run_table(runs: Sequence[_Run]):
    """``(starts, strides, sizes)`` as ``(q, 1)`` int64 columns."""
    table = np.array(runs, np.int64).reshape(len(runs), 3)
    return table[:, 0:1], table[:, 1:2], table[:, 2:3]


def _positions(runs: Sequence[_Run], t):
    """Flat index of element ``t`` of every run, and whether it exists.

    ``t`` past a run's end reads the run's last element (always in bounds); the caller
    masks it out. Works on NumPy (static) and JAX (traced) ``t`` alike.
    """
    starts, strides, sizes = _run_table(runs)
    minimum = np.minimum if isinstance(t, np.ndarray) else jnp.minimum
    index = starts + minimum(t, np.maximum(sizes - 1, 0)) * strides
    return index, t < sizes


def _gather(flat: Array, index) -> Array:
    """``flat[..., index]`` for in-bounds ``index`` (``_positions`` clamps it)."""
    index = jnp.asarray(index).astype(index_dtype(flat.shape[-1]))
    return flat.at[..., index].get(mode="promise_in_bounds")


def _masked(values: Array, valid, acc) -> Array:
    return jnp.where(valid, values.astype(acc), jnp.zeros((), acc))


def _window(flat: Array, runs: tuple[_Run, ...], length: int) -> Array:
    """``(..., q, length)``: run ``j`` as a strided slice, zero-padded to ``length``.

    Slices rather than a gather: XLA:CPU split a 5000-element gather across threads
    (its cost model charges a gather for its whole operand), and the hand-off made
    every other call 3x slower on this loaded 2-core machine.
    """
    rows = []
    for start, stride, size in runs:
        row = lax.slice_in_dim(flat, start, start + max(size - 1, 0) * stride + 1, stride, axis=-1)
        pad = [(0, 0, 0)] * (flat.ndim - 1) + [(0, length - size, 0)]
        rows.append(lax.pad(row[..., :size], jnp.zeros((), flat.dtype), pad))
    return jnp.stack(rows, axis=-2)


def _inline_sums(flat: Array, runs: tuple[_Run, ...], acc) -> Array:
    """Run sums of a small window, in chunks sized for inline dispatch.

    The zero-padded window is sliced out at once (no arithmetic: 0 flops), then added
    up in chunks whose adds stay under the PjRt CPU client's inline budget: XLA's cost
    analysis counts a loop body once. More than ``_MAX_SLICED_RUNS`` runs are gathered
    instead, and summed in one pass.
    """
    rows = math.prod(flat.shape[:-1]) * len(runs)
    length = max(size for _, _, size in runs)
    if len(runs) > _MAX_SLICED_RUNS:
        # XLA compile time grows with the number of slices (14 ms each); a gather's
        # does not. Summed in one pass: q this large rarely fits the inline budget.
        index, valid = _positions(runs, np.arange(length)[None, :])
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


def _blockwise_sums(flat: Array, runs: tuple[_Run, ...], acc) -> Array:
    """Run sums of many small matrices, gathered a block of matrices at a time.

    Blocks bound the temporaries (``_BLOCK_ELEMENTS``): fresh multi-MiB temporaries paid
    a page fault per 4 KiB on every call. The last block is shifted back to end at the
    last matrix, rewriting a few sums.
    """
    batch, q = flat.shape[:-1], len(runs)
    flat = flat.reshape(-1, flat.shape[-1])
    count = flat.shape[0]
    length = max(size for _, _, size in runs)
    index, valid = _positions(runs, np.arange(length)[None, :])
    block = min(count, max(1, _BLOCK_ELEMENTS // (q * length)))

    def block_sums(first):
        window = _gather(lax.dynamic_slice_in_dim(flat, first, block, axis=0), index)
        # The barrier keeps XLA from fusing the gather into the sum (3-5x slower).
        return _masked(lax.optimization_barrier(window), valid, acc).sum(-1)

    n_blocks = -(-count // block)
    if n_blocks == 1:
        return block_sums(0).reshape(*batch, q)

    def add_block(i, sums):
        first = jnp.minimum(i * block, count - block)
        return lax.dynamic_update_slice_in_dim(sums, block_sums(first), first, axis=0)

    sums = lax.fori_loop(0, n_blocks, add_block, jnp.zeros((count, q), acc))
    return sums.reshape(*batch, q)


def _contiguous_sum(flat: Array, run: _Run, acc) -> Array:
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


def _streamed_sums(flat: Array, runs: tuple[_Run, ...], acc) -> Array:
    """Run sums of long strided runs, gathered a chunk at a time inside the loop."""
    q = len(runs)
    length = max(size for _, _, size in runs)
    width = min(length, max(_CHUNK_ELEMENTS // (math.prod(flat.shape[:-1]) * q), 1))

    def add_chunk(i, total):
        t = i * width + lax.broadcasted_iota(index_dtype(flat.shape[-1]), (q, width), 1)
        index, valid = _positions(runs, t)
        return total + _masked(_gather(flat, index), valid, acc)

    zeros = jnp.zeros((*flat.shape[:-1], q, width), acc)
    return lax.fori_loop(0, -(-length // width), add_chunk, zeros).sum(-1)


def _kernel(x: Array, *, runs: tuple[_Run, ...]) -> Array:
    """``out[..., j] = sum(flat[..., start + t * stride] for t < size)`` for ``runs[j]``.

    The implementation of ``run_sums_p``; it picks a strategy by size (see the module
    docstring).

    Args:
      x: ``(..., r, c)``; ``flat`` is ``x`` with its last two axes flattened.
      runs: static ``(start, stride, size)`` triples; a run of size 0 sums to 0. Only
        the elements of the runs are read.

    Returns:
      ``(..., len(runs))`` of :func:`_sum_dtype`; 16-bit floats accumulate in float32.
    """
    flat = x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])
    dtype = _sum_dtype(x.dtype)
    acc = accumulation_dtype(dtype)
    batch, q = flat.shape[:-1], len(runs)
    length = max((size for _, _, size in runs), default=0)
    if length == 0 or math.prod(batch) == 0:
        sums = jnp.zeros((*batch, q), acc)
    elif math.prod(batch) * q * length <= _CHUNK_ELEMENTS:
        sums = _inline_sums(flat, runs, acc)
    elif q * length <= _WINDOW_ELEMENTS:
        sums = _blockwise_sums(flat, runs, acc)
    elif all(stride == 1 for _, stride, _ in runs):
        sums = jnp.stack([_contiguous_sum(flat, run, acc) for run in runs], axis=-1)
    else:
        sums = _streamed_sums(flat, runs, acc)
    return sums.astype(dtype)


# -- the primitive (linear: ``ad.deflinear2`` gives JVP and transpose) ----------------------

run_sums_p = Primitive("jaxdia_run_sums")
run_sums_p.def_impl(functools.partial(dispatch.apply_primitive, run_sums_p))
run_sums_p.def_abstract_eval(
    lambda x, *, runs: output_aval((*x.shape[:-2], len(runs)), _sum_dtype(x.dtype), x)
)
mlir.register_lowering(run_sums_p, mlir.lower_fun(_kernel, multiple_results=False))


@functools.partial(jax.jit, static_argnums=1)
def _run_sums(x: Array, runs: tuple[_Run, ...]) -> Array:
    # Jitted: an eager call is one C++ dispatch; an eager bind of the primitive cost
    # about 10x the 1000x1000 computation in Python.
    return run_sums_p.bind(x, runs=runs)


def _transpose(ct, x, *, runs):
    # d(out[..., j]) / d(flat[..., i]) is 1 on run j's elements: scatter ct onto them.
    if type(ct) is ad.Zero or not runs:
        return (ad.Zero(x.aval),)
    *batch, r, c = x.aval.shape
    dtype = x.aval.dtype
    flat = jnp.zeros((*batch, r * c), dtype)
    length = max(size for _, _, size in runs)
    # Indices computed in the program: a static table would embed q * length ints.
    t = lax.broadcasted_iota(index_dtype(r * c), (len(runs), length), 1)
    index, valid = _positions(runs, t)
    values = jnp.where(valid, ct[..., :, None].astype(dtype), jnp.zeros((), dtype))
    return (flat.at[..., index].add(values, mode="promise_in_bounds").reshape(x.aval.shape),)


ad.deflinear2(run_sums_p, _transpose)


def _batch(args, dims, *, runs):
    (x,), (dim,) = args, dims
    return run_sums_p.bind(jnp.moveaxis(x, dim, 0), runs=runs), 0


batching.primitive_batchers[run_sums_p] = _batch


def traces(M: Any, q: Any) -> Array:
    """Offset traces ``[trace(M, offset=k) for k in offsets]``, batched over leading dims.

    Equals ``np.stack([np.trace(M, offset=k, axis1=-2, axis2=-1) for k in offsets], -1)``
    for any shape, reading only the requested diagonals: O(q * min(m, n)) work, where
    ``jnp.trace`` masks all m * n entries. Works under ``jit`` (with ``q`` static),
    ``vmap`` and ``grad``. A :class:`jaxdia.DiaMatrix` is accepted too (as
    ``A.traces(q)``).

    Args:
      M: a dense array of shape ``(..., m, n)`` (leading dims are a batch), or a
        ``DiaMatrix``.
      q: an int (the offsets ``0, 1, ..., q - 1``) or a sequence of ints (any order,
        negative for diagonals below the main one). Offsets outside the matrix give 0,
        as in ``np.trace``. Must be static.

    Returns:
      An array of shape ``M.shape[:-2] + (len(offsets),)``. Its dtype follows
      ``np.trace``: bool and narrow integers sum in the default integer type, 16-bit
      floats keep their dtype (accumulated in float32), other dtypes are kept.

    Raises:
      TypeError: if ``q`` is not an int or a sequence of ints (floats, bools, traced
        arrays), or ``M`` is not numeric.
      ValueError: if ``q`` is a negative int or ``M`` has rank < 2.

    Example:
      >>> import numpy as np, jaxdia
      >>> M = np.arange(12.0).reshape(3, 4)
      >>> jaxdia.traces(M, 3)
      Array([15., 18.,  9.], dtype=float32)
      >>> jaxdia.traces(M, [-2, -1, 3])
      Array([ 8., 13.,  3.], dtype=float32)
    """
    from ._matrix import DiaMatrix, check_layout  # deferred: _matrix imports this module

    if isinstance(M, DiaMatrix):
        check_layout(M, "traces: M")
        return dia_traces(M.data, M.offsets, M.shape, q)
    offsets = _requested_offsets(q)
    given = type(M).__name__
    if sp.issparse(M):
        raise TypeError(
            f"M must be a dense array or a DiaMatrix, got scipy.sparse.{given}; convert it "
            "with jaxdia.DiaMatrix.from_scipy(...)"
        )
    M = _as_array(M)
    if not (M.dtype == np.bool_ or jnp.issubdtype(M.dtype, jnp.number)):
        raise TypeError(
            f"M must be a numeric array of shape (..., m, n), got {given}"
            + (f" of dtype {M.dtype}" if M.dtype != object else "")
        )
    if M.ndim < 2:
        raise ValueError(f"M must have shape (..., m, n) (rank >= 2), got shape {M.shape}")
    return _run_sums(M, _dense_runs(M.shape[-2:], offsets))


@functools.lru_cache(maxsize=256)
def _dense_runs(shape: tuple[int, int], requested: tuple[int, ...]) -> tuple[_Run, ...]:
    """The runs of a flattened dense ``(m, n)`` matrix holding diagonals ``requested``.

    Diagonal ``k`` starts at ``M[0, k]`` (flat index ``k``) or ``M[-k, 0]`` (``-k * n``)
    and steps one row down and one column right: ``n + 1`` flat elements.
    """
    m, n = shape
    runs = []
    for k in requested:
        start, stop = diagonal_bounds(k, shape)
        size = stop - start
        runs.append((k if k >= 0 else -k * n, n + 1, size) if size > 0 else _EMPTY_RUN)
    return tuple(runs)


@functools.lru_cache(maxsize=256)
def _dia_runs(
    width: int, offsets: tuple[int, ...], shape: tuple[int, int], requested: tuple[int, ...]
) -> tuple[_Run, ...]:
    """The runs of flattened DIA ``data`` (rows of ``width``) holding ``requested``."""
    row_of = {k: row for row, k in enumerate(offsets)}
    runs = []
    for k in requested:
        start, stop = diagonal_bounds(k, shape)
        stored = k in row_of and stop > start
        runs.append((row_of[k] * width + start, 1, stop - start) if stored else _EMPTY_RUN)
    return tuple(runs)


def dia_traces(data: Array, offsets: tuple[int, ...], shape: tuple[int, int], q: Any) -> Array:
    """Offset traces of a DIA matrix: the sums of its diagonals ``k`` for ``k`` in ``q``.

    Reads only the in-bounds slots of the requested stored diagonals (never padding);
    offsets that are not stored, or lie outside the matrix, give 0.

    Args:
      data: ``(..., n_diags, n)`` in SciPy's layout (``A[j - offsets[i], j] == data[i, j]``).
      offsets: the stored offsets (static, distinct).
      shape: ``(m, n)``.
      q: an int (offsets ``0 .. q - 1``) or a sequence of ints, as in :func:`traces`.

    Returns:
      ``data.shape[:-2] + (len(offsets requested),)``, of ``data``'s dtype.

    Example:
      >>> from jaxdia._traces import dia_traces
      >>> import numpy as np
      >>> data = np.array([[1., 2., 3.], [4., 5., 6.]])
      >>> dia_traces(data, (0, 1), (3, 3), [-1, 0, 1])
      Array([ 0.,  6., 11.], dtype=float32)
    """
    requested = _requested_offsets(q)
    data = _as_array(data)
    return _run_sums(data, _dia_runs(data.shape[-1], offsets, shape, requested))


def dia_trace(
    data: Array, offsets: tuple[int, ...], shape: tuple[int, int], offset: Any = 0
) -> Array:
    """The sum of diagonal ``offset`` of a DIA matrix (0 if it is not stored).

    Same as ``scipy.sparse.dia_array.trace(offset)``; batched ``data`` gives a batch.

    Example:
      >>> from jaxdia._traces import dia_trace
      >>> import numpy as np
      >>> dia_trace(np.array([[1., 2., 3.]]), (0,), (3, 3))
      Array(6., dtype=float32)
    """
    offset = _static_int(offset, "offset")
    return dia_traces(data, offsets, shape, [offset])[..., 0]


def dia_diagonal(
    data: Array, offsets: tuple[int, ...], shape: tuple[int, int], k: Any = 0
) -> Array:
    """Diagonal ``k`` of a DIA matrix, as ``scipy.sparse.dia_array.diagonal(k)`` gives it.

    Its length is that of the diagonal in the matrix; it is empty when ``k`` lies
    outside the matrix (``k <= -m`` or ``k >= n``), and zeros when ``k`` is not stored.
    Batched ``data`` gives ``data.shape[:-2] + (length,)``.

    Example:
      >>> from jaxdia._traces import dia_diagonal
      >>> import numpy as np
      >>> data = np.array([[1., 2., 3.], [4., 5., 6.]])
      >>> dia_diagonal(data, (0, 1), (3, 3), 1)
      Array([5., 6.], dtype=float32)
      >>> dia_diagonal(data, (0, 1), (3, 3), -1)
      Array([0., 0.], dtype=float32)
    """
    k = _static_int(k, "k")
    data = jnp.asarray(data)
    start, stop = diagonal_bounds(k, shape)
    stop = max(start, stop)
    if k not in offsets:
        return jnp.zeros((*data.shape[:-2], stop - start), data.dtype)
    return _stored_diagonal(data, offsets.index(k), start, stop)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _stored_diagonal(data: Array, row: int, start: int, stop: int) -> Array:
    """``data[..., row, start:stop]``, one compiled call: run eagerly, JAX's indexing took
    ~1.3 ms for a diagonal of 1e6 entries (SciPy returns a view in 3 us)."""
    return data[..., row, start:stop]
