"""Offset traces and diagonals of dense arrays and of DIA matrices.

Both kinds of input go through one primitive, ``run_sums`` (see :mod:`jaxdia._kernels.xla_runs`):
every diagonal is a *run* of a flattened array, ``flat[start + t * stride]`` for
``t < size``. A dense ``(m, n)`` matrix holds diagonal ``k`` at stride ``n + 1`` (from flat
index ``k``, or ``-k * n`` below the main diagonal); DIA ``data`` holds it contiguously in
its row. Only the requested runs are read: O(q * min(m, n)) work, never the O(m * n) mask
of ``jnp.trace``, and never a padding slot of ``data``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._checks import as_array, static_int
from ._geometry import diagonal_bounds
from ._kernels.primitives import run_sums
from ._kernels.xla_runs import EMPTY_RUN, Run
from ._sharding import on_auto_axes
from ._typing import ArrayLike, Offsets


def requested_offsets(q: Offsets) -> tuple[int, ...]:
    """``range(q)`` for an int ``q``, else the offsets ``q`` lists, as Python ints."""
    if isinstance(q, jax.core.Tracer):
        static_int(q, "q")  # raises, saying why
    if isinstance(q, (np.ndarray, jax.Array)) and np.ndim(q) == 1:
        q = list(np.asarray(q))
    elif not isinstance(q, Sequence) or isinstance(q, (str, bytes)):
        count = static_int(q, "q")
        if count < 0:
            raise ValueError(f"q must be a non-negative int (the number of offsets), got {count}")
        return tuple(range(count))
    return tuple(static_int(k, "each offset in q") for k in q)


def dense_traces(M: ArrayLike, q: Offsets) -> Array:
    """Offset traces of a dense ``(..., m, n)`` array (see :func:`jaxdia.traces`)."""
    offsets = requested_offsets(q)
    M = as_array(M, "M", expected="a numeric array of shape (..., m, n)")
    if M.ndim < 2:
        raise ValueError(f"M must have shape (..., m, n) (rank >= 2), got shape {M.shape}")
    return run_sums(M, _dense_runs(M.shape[-2:], offsets))


@functools.lru_cache(maxsize=256)
def _dense_runs(shape: tuple[int, int], requested: tuple[int, ...]) -> tuple[Run, ...]:
    """The runs of a flattened dense ``(m, n)`` matrix holding diagonals ``requested``.

    Diagonal ``k`` starts at ``M[0, k]`` (flat index ``k``) or ``M[-k, 0]`` (``-k * n``)
    and steps one row down and one column right: ``n + 1`` flat elements.
    """
    m, n = shape
    runs = []
    for k in requested:
        start, stop = diagonal_bounds(k, shape)
        size = stop - start
        runs.append((k if k >= 0 else -k * n, n + 1, size) if size > 0 else EMPTY_RUN)
    return tuple(runs)


@functools.lru_cache(maxsize=256)
def _dia_runs(
    width: int, offsets: tuple[int, ...], shape: tuple[int, int], requested: tuple[int, ...]
) -> tuple[Run, ...]:
    """The runs of flattened DIA ``data`` (rows of ``width``) holding ``requested``."""
    row_of = {k: row for row, k in enumerate(offsets)}
    runs = []
    for k in requested:
        start, stop = diagonal_bounds(k, shape)
        stored = k in row_of and stop > start
        runs.append((row_of[k] * width + start, 1, stop - start) if stored else EMPTY_RUN)
    return tuple(runs)


def dia_traces(
    data: ArrayLike, offsets: tuple[int, ...], shape: tuple[int, int], q: Offsets
) -> Array:
    """Offset traces of a DIA matrix: the sums of its diagonals ``k`` for ``k`` in ``q``.

    Reads only the in-bounds slots of the requested stored diagonals (never padding);
    offsets that are not stored, or lie outside the matrix, give 0.

    Args:
      data: ``(..., n_diags, n)`` in SciPy's layout (``A[j - offsets[i], j] == data[i, j]``).
      offsets: the stored offsets (static, distinct).
      shape: ``(m, n)``.
      q: an int (offsets ``0 .. q - 1``) or a sequence of ints, as in
        :func:`jaxdia.traces`.

    Returns:
      ``data.shape[:-2] + (len(offsets requested),)``, of ``data``'s dtype.

    Example:
      >>> from jaxdia._traces import dia_traces
      >>> import numpy as np
      >>> data = np.array([[1., 2., 3.], [4., 5., 6.]])
      >>> dia_traces(data, (0, 1), (3, 3), [-1, 0, 1])
      Array([ 0.,  6., 11.], dtype=float32)
    """
    requested = requested_offsets(q)
    data = as_array(data, "data")
    return run_sums(data, _dia_runs(data.shape[-1], offsets, shape, requested))


def dia_trace(
    data: Array, offsets: tuple[int, ...], shape: tuple[int, int], offset: int = 0
) -> Array:
    """The sum of diagonal ``offset`` of a DIA matrix (0 if it is not stored), as
    ``scipy.sparse.dia_array.trace(offset)``; batched ``data`` gives a batch.

    Example:
      >>> from jaxdia._traces import dia_trace
      >>> import numpy as np
      >>> dia_trace(np.array([[1., 2., 3.]]), (0,), (3, 3))
      Array(6., dtype=float32)
    """
    offset = static_int(offset, "offset")
    return dia_traces(data, offsets, shape, [offset])[..., 0]


def dia_diagonal(
    data: ArrayLike, offsets: tuple[int, ...], shape: tuple[int, int], k: int = 0
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
    k = static_int(k, "k")
    data = jnp.asarray(data)
    start, stop = diagonal_bounds(k, shape)
    stop = max(start, stop)
    if k not in offsets:
        return jnp.zeros((*data.shape[:-2], stop - start), data.dtype)
    return _stored_diagonal(data, offsets.index(k), start, stop)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
@on_auto_axes()
def _stored_diagonal(data: Array, row: int, start: int, stop: int) -> Array:
    """``data[..., row, start:stop]``, one compiled call (eager indexing would dispatch
    several operations)."""
    return data[..., row, start:stop]
