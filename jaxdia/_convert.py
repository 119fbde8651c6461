"""Array-level conversions between DIA ``data`` and dense or COO index form.

These functions know nothing of :class:`jaxdia.DiaMatrix`; they map ``(data, offsets,
shape)`` to and from other layouts with static index arrays, so they trace under ``jit``
and ``vmap`` and are differentiable.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from ._xla import diagonal_bounds


def in_bounds_slots(offsets: tuple[int, ...], shape: tuple[int, int]):
    """Static indices of every in-bounds slot of ``data``.

    Returns:
      ``(diag, row, col)``: three int arrays of equal length, one entry per stored
      matrix element: ``data[diag, col]`` holds ``A[row, col]``.
    """
    diags, rows, cols = [], [], []
    for k, offset in enumerate(offsets):
        start, stop = diagonal_bounds(offset, shape)
        col = np.arange(start, max(start, stop))
        diags.append(np.full(col.shape, k))
        rows.append(col - offset)
        cols.append(col)
    if not offsets:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    return np.concatenate(diags), np.concatenate(rows), np.concatenate(cols)


@functools.partial(jax.jit, static_argnums=(1, 2))
def dia_to_coo(
    data: Array, offsets: tuple[int, ...], shape: tuple[int, int]
) -> tuple[Array, Array]:
    """``(values, indices)`` of every in-bounds slot, diagonal by diagonal: ``values``
    ``(..., nse)`` and int32 ``indices`` ``(..., nse, 2)`` of ``(row, col)`` pairs.

    Static slices of ``data`` and indices from an iota: no gather, and no index table
    built on the host (eager NumPy index arrays made a 27-diagonal matrix at n = 1e6
    take 1.6 s, against 0.16 s jitted).
    """
    values, rows, cols = [], [], []
    for k, offset in enumerate(offsets):
        start, stop = diagonal_bounds(offset, shape)
        col = lax.iota(np.int32, max(0, stop - start)) + np.int32(start)
        values.append(data[..., k, start : max(start, stop)])
        rows.append(col - np.int32(offset))
        cols.append(col)
    batch = data.shape[:-2]
    if not offsets:
        return jnp.zeros((*batch, 0), data.dtype), jnp.zeros((*batch, 0, 2), np.int32)
    indices = jnp.stack([jnp.concatenate(rows), jnp.concatenate(cols)], axis=1)
    indices = jnp.broadcast_to(indices, (*batch, *indices.shape))
    return jnp.concatenate(values, axis=-1), indices


def dia_to_dense(data: Array, offsets: tuple[int, ...], shape: tuple[int, int]) -> Array:
    """The dense ``(..., m, n)`` array of a DIA matrix (padding slots ignored)."""
    diag, row, col = in_bounds_slots(offsets, shape)
    dense = jnp.zeros((*data.shape[:-2], *shape), data.dtype)
    return dense.at[..., row, col].set(data[..., diag, col], unique_indices=True)


def dense_to_dia(dense: Array, offsets: tuple[int, ...]) -> Array:
    """DIA ``data`` ``(..., len(offsets), n)`` holding the given diagonals of ``dense``.

    Padding slots are zero. Elements of ``dense`` on other diagonals are not read.
    """
    m, n = dense.shape[-2:]
    shape = (m, n)
    diag, row, col = in_bounds_slots(offsets, shape)
    data = jnp.zeros((*dense.shape[:-2], len(offsets), shape[1]), dense.dtype)
    return data.at[..., diag, col].set(dense[..., row, col], unique_indices=True)


def nonzero_offsets(dense: np.ndarray) -> tuple[int, ...]:
    """Offsets of the diagonals holding a nonzero in a concrete ``(..., m, n)`` array."""
    mask = np.asarray(dense != 0)
    rows, cols = np.nonzero(mask.any(axis=tuple(range(mask.ndim - 2))))
    return tuple(int(k) for k in np.unique(cols - rows))
