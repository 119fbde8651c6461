"""The XLA implementation of the DIA products: pure ``jax.numpy``, no Pallas.

It is the CPU path and the oracle the Pallas kernels are tested against. Every function
here reads only the in-bounds slots of ``data`` (static slices), so padding slots are
never read, whatever they hold.

Shapes (``B`` are batch dimensions of equal rank that broadcast against each other):

* ``spmm_xla(data, x)``: ``data`` ``(*B, n_diags, n)``, ``x`` ``(*B, rows, c)``; returns
  ``A @ x`` of shape ``(*B, m, c)`` (``rows == n``), or ``A^T @ x`` of shape ``(*B, n, c)``
  with ``transpose=True`` (``rows == m``).
* ``sddmm_xla(g, x)``: ``g`` ``(*B, m, c)``, ``x`` ``(*B, n, c)``; returns ``D`` of shape
  ``(*B, n_diags, n)`` with ``D[k, j] = sum_c g[j - offsets[k], c] * x[j, c]`` in bounds
  and 0 in padding slots: the cotangent of ``data`` in ``y = A @ x``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import Array, lax


def accumulation_dtype(dtype) -> np.dtype:
    """The dtype sums run in: float32 for 16-bit floats, else ``dtype`` itself."""
    dtype = np.dtype(dtype)
    if dtype.itemsize <= 2 and jnp.issubdtype(dtype, jnp.floating):
        return np.dtype(np.float32)
    return dtype


def diagonal_bounds(offset: int, shape: tuple[int, int]) -> tuple[int, int]:
    """Columns ``[start, stop)`` of the matrix that diagonal ``offset`` occupies."""
    m, n = shape
    return max(0, offset), min(n, m + offset)


def _broadcast_batch(*shapes: Sequence[int]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*(tuple(s) for s in shapes)))


def _pad_axis(x: Array, axis: int, before: int, after: int) -> Array:
    config = [(0, 0, 0)] * x.ndim
    config[axis] = (before, after, 0)
    return lax.pad(x, jnp.zeros((), x.dtype), config)


def spmm_xla(
    data: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool = False,
) -> Array:
    """``A @ x`` (or ``A^T @ x``) as a sum of statically sliced, shifted diagonals."""
    m, n = shape
    out_rows = n if transpose else m
    acc = accumulation_dtype(jnp.result_type(data, x))
    batch = _broadcast_batch(data.shape[:-2], x.shape[:-2])
    out = jnp.zeros((*batch, out_rows, x.shape[-1]), acc)
    for k, offset in enumerate(offsets):
        start, stop = diagonal_bounds(offset, shape)
        if stop <= start:
            continue
        diagonal = data[..., k, start:stop, None].astype(acc)
        if transpose:
            # y[j] += data[k, j] * x[j - offset] for matrix columns j in [start, stop).
            rows = x[..., start - offset : stop - offset, :].astype(acc)
            out_start = start
        else:
            # y[i] += data[k, i + offset] * x[i + offset] for rows i = j - offset.
            rows = x[..., start:stop, :].astype(acc)
            out_start = start - offset
        contribution = diagonal * rows
        out = out + _pad_axis(contribution, -2, out_start, out_rows - out_start - (stop - start))
    return out.astype(jnp.result_type(data, x))


def sddmm_xla(
    g: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
) -> Array:
    """``D[k, j] = sum_c g[j - offsets[k], c] * x[j, c]`` in bounds, 0 in padding slots."""
    m, n = shape
    out_dtype = jnp.result_type(g, x)
    acc = accumulation_dtype(out_dtype)
    batch = _broadcast_batch(g.shape[:-2], x.shape[:-2])
    rows = []
    for offset in offsets:
        start, stop = diagonal_bounds(offset, shape)
        if stop <= start:
            rows.append(jnp.zeros((*batch, n), acc))
            continue
        products = g[..., start - offset : stop - offset, :].astype(acc) * x[
            ..., start:stop, :
        ].astype(acc)
        diagonal = jnp.broadcast_to(products.sum(axis=-1), (*batch, stop - start))
        rows.append(_pad_axis(diagonal, -1, start, n - stop))
    if not rows:
        return jnp.zeros((*batch, 0, n), out_dtype)
    return jnp.stack(rows, axis=-2).astype(out_dtype)
