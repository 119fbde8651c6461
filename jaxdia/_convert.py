"""Array-level conversions between DIA ``data`` and canonical, dense, COO or BCOO form.

These functions work on ``(data, offsets, shape)`` (see :mod:`jaxdia._parts`) with static
slices and indices computed in the program from an iota: index tables built on the host
would be program constants of the size of the matrix, and one gather or scatter over the
whole ``(n_diags, n)`` grid of slots compiles faster than one piece per diagonal. They
trace under ``jit`` and ``vmap`` and are differentiable.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from ._checks import check_array_size
from ._geometry import diagonal_bounds, holds_entries, in_bounds, index_dtype, slot_indices
from ._parts import DiaParts
from ._sharding import on_auto_axes


def canonical(
    data: Array | np.ndarray, offsets: tuple[int, ...], shape: tuple[int, int]
) -> DiaParts:
    """The canonical parts of a checked matrix: offsets sorted ascending (``data`` rows
    permuted to match), diagonals with no slot inside the matrix dropped, and ``data``
    zero-padded or truncated to width ``n`` (as SciPy reads it).

    ``data`` is a JAX array or tracer, or a NumPy array, which is canonicalized on the
    host and transferred once.
    """
    order = sorted(range(len(offsets)), key=offsets.__getitem__)
    kept = [i for i in order if holds_entries(offsets[i], shape)]
    if kept != list(range(len(offsets))):
        data = data[..., np.asarray(kept, dtype=np.int64), :]
    width, n = data.shape[-1], shape[1]
    if width < n:
        pad = [(0, 0)] * (data.ndim - 1) + [(0, n - width)]
        data = np.pad(data, pad) if isinstance(data, np.ndarray) else jnp.pad(data, pad)
    elif width > n:
        data = data[..., :n]
    if isinstance(data, np.ndarray):
        # A private host copy, transferred as it is: on CPU device_put may alias a
        # NumPy buffer (which the caller could still change), and jnp.asarray, like
        # row selection or padding on the device, costs one more pass over data.
        data = jax.device_put(np.array(data, copy=True))
    return DiaParts(data, tuple(offsets[i] for i in kept), shape)


@functools.partial(jax.jit, static_argnums=(1, 2))
@on_auto_axes(last=False)
def dia_to_coo(
    data: Array, offsets: tuple[int, ...], shape: tuple[int, int]
) -> tuple[Array, Array]:
    """``(values, indices)`` of every in-bounds slot, diagonal by diagonal: ``values``
    ``(..., nse)`` and ``indices`` ``(..., nse, 2)`` of ``(row, col)`` pairs.

    Static slices of ``data`` and indices from an iota: no gather.
    """
    index = index_dtype(sum(shape))
    values, rows, cols = [], [], []
    for k, offset in enumerate(offsets):
        start, stop = diagonal_bounds(offset, shape)
        stop = max(start, stop)
        col = lax.iota(index, stop - start) + index(start)
        values.append(data[..., k, start:stop])
        rows.append(col - index(offset))
        cols.append(col)
    if not offsets:
        return jnp.zeros((*data.shape[:-2], 0), data.dtype), jnp.zeros(
            (*data.shape[:-2], 0, 2), index
        )
    indices = jnp.stack([jnp.concatenate(rows), jnp.concatenate(cols)], axis=1)
    values = jnp.concatenate(values, axis=-1)
    return values, jnp.broadcast_to(indices, (*data.shape[:-2], *indices.shape))


def to_dense(A: DiaParts) -> Array:
    """The dense ``(..., m, n)`` array of ``A``, or a ValueError if it cannot exist."""
    check_array_size((*A.batch_shape, *A.shape), A.dtype, "A.todense()")
    return dia_to_dense(A.data, A.offsets, A.shape)


@functools.partial(jax.jit, static_argnums=(1, 2))
@on_auto_axes()
def dia_to_dense(data: Array, offsets: tuple[int, ...], shape: tuple[int, int]) -> Array:
    """The dense ``(..., m, n)`` array of a DIA matrix (padding slots ignored)."""
    rows, cols, inside = slot_indices(offsets, shape)
    # Padding slot (k, j) lands on row m + k, past the last row: dropped. The indices stay
    # unique, which JAX needs to transpose the scatter (jax.linear_transpose).
    rows = jnp.where(inside, rows, shape[0] + lax.broadcasted_iota(rows.dtype, rows.shape, 0))
    dense = jnp.zeros((*data.shape[:-2], *shape), data.dtype)
    return dense.at[..., rows, cols].set(data, mode="drop", unique_indices=True)


@functools.partial(jax.jit, static_argnums=(1, 2))
@on_auto_axes()
def dense_to_dia(dense: Array, offsets: tuple[int, ...], shape: tuple[int, int]) -> Array:
    """DIA ``data`` ``(..., len(offsets), n)`` holding the given diagonals of ``dense``.

    ``dense`` is ``(..., m, n)``, or ``(..., m, 1)``: a column, standing for the matrix
    that repeats it in every column. Padding slots are zero; elements on other diagonals
    are not read.
    """
    rows, cols, inside = slot_indices(offsets, shape)
    rows = jnp.clip(rows, 0, max(shape[0] - 1, 0))
    if dense.shape[-1] != shape[1]:
        cols = jnp.zeros_like(cols)
    values = dense.at[..., rows, cols].get(mode="promise_in_bounds")
    return jnp.where(inside, values, 0)


def to_host(A: DiaParts) -> tuple[np.ndarray, np.ndarray]:
    """``(data, offsets)`` of a concrete, unbatched matrix as NumPy arrays for SciPy.

    ``data`` is a writable copy (SciPy's conversions return writable arrays; NumPy views
    of JAX arrays are read-only) with its padding slots zeroed: SciPy's ``dia_array``
    reads some of them (``sum(axis=0)`` does), and they may hold anything. SciPy has no
    16-bit float types, so those become float32. ``offsets`` are int32 where they fit,
    else int64 (a tall matrix may hold an offset below ``-2**31``).
    """
    dtype = np.dtype(A.data.dtype)
    wide = np.float32 if dtype.itemsize == 2 and dtype.kind != "c" else dtype
    data = np.asarray(A.data).astype(wide)
    data[~in_bounds(A.offsets, A.shape, host=True)] = 0
    offsets = np.asarray(A.offsets, dtype=index_dtype(max(map(abs, A.offsets), default=0)))
    return data, offsets


def nonzero_offsets(dense: np.ndarray) -> tuple[int, ...]:
    """Offsets of the diagonals holding a nonzero in a concrete ``(..., m, n)`` array."""
    mask = np.asarray(dense != 0)
    rows, cols = np.nonzero(mask.any(axis=tuple(range(mask.ndim - 2))))
    return tuple(int(k) for k in np.unique(cols - rows))


def coo_offsets(indices: np.ndarray, shape: tuple[int, int]) -> set[int]:
    """The diagonals that concrete COO ``indices`` ``(nse, 2)`` (signed) have entries on;
    indices outside ``shape`` (BCOO's padding) are ignored."""
    m, n = shape
    valid = (indices[:, 0] < m) & (indices[:, 1] < n)
    return set((indices[valid, 1] - indices[valid, 0]).tolist())


def coo_to_dia(
    values: Array, indices: Array, offsets: tuple[int, ...], shape: tuple[int, int]
) -> Array:
    """DIA ``data`` of the COO entries (duplicates summed) on the sorted ``offsets``;
    entries on other diagonals or outside ``shape`` are dropped.

    ``indices`` ``(nse, 2)`` must be of a signed dtype (``cols - rows`` must not wrap).
    """
    m, n = shape
    if not offsets:
        return jnp.zeros((0, n), values.dtype)
    rows, cols = indices[:, 0], indices[:, 1]
    table = jnp.asarray(offsets, dtype=indices.dtype)
    slot = jnp.searchsorted(table, cols - rows)
    on_diagonal = (
        (rows < m) & (cols < n) & (table[jnp.minimum(slot, len(offsets) - 1)] == cols - rows)
    )
    values = jnp.where(on_diagonal, values, 0)
    data = jnp.zeros((len(offsets), n), values.dtype)
    return data.at[jnp.where(on_diagonal, slot, 0), jnp.where(on_diagonal, cols, 0)].add(values)
