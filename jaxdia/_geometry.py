"""The geometry of SciPy's DIA layout: where each diagonal lies, which slots are inside.

``data[..., k, j]`` holds ``A[j - offsets[k], j]``. Slot ``(k, j)`` is *inside* the
matrix when its row ``j - offsets[k]`` lies in ``[0, m)``; every other slot is padding,
which no jaxdia operation reads. Everything here is static arithmetic on offsets and
shapes (Python ints, NumPy, or iotas that XLA fuses into their consumer); nothing imports
the rest of the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import DTypeLike

#: Values on the host or in JAX: what a function taking ``xp`` gives back is of their kind.
_Row = TypeVar("_Row", Array, np.ndarray)


def diagonal_bounds(offset: int, shape: tuple[int, int]) -> tuple[int, int]:
    """Columns ``[start, stop)`` of the matrix that diagonal ``offset`` occupies.

    ``stop <= start`` when the diagonal lies outside the matrix.

    Example:
      >>> from jaxdia._geometry import diagonal_bounds
      >>> diagonal_bounds(1, (3, 3)), diagonal_bounds(-1, (3, 3))
      ((1, 3), (0, 2))
    """
    m, n = shape
    return max(0, offset), min(n, m + offset)


def holds_entries(offset: int, shape: tuple[int, int]) -> bool:
    """Whether diagonal ``offset`` has at least one slot inside a ``shape`` matrix."""
    start, stop = diagonal_bounds(offset, shape)
    return start < stop


def band_widths(offsets: Sequence[int]) -> tuple[int, int]:
    """``(lower, upper)``: how far the diagonals reach below and above the main one.

    Example:
      >>> from jaxdia._geometry import band_widths
      >>> band_widths((-2, 0, 3)), band_widths((1, 2)), band_widths(())
      ((2, 3), (0, 2), (0, 0))
    """
    return max(0, -min(offsets, default=0)), max(0, max(offsets, default=0))


def index_dtype(size: int) -> type:
    """int32 where it can index ``size`` elements, else int64, which only exists with x64:
    without it, a ValueError saying so (JAX would silently make the indices int32)."""
    if size <= np.iinfo(np.int32).max:
        return np.int32
    if not jax.config.read("jax_enable_x64"):
        raise ValueError(
            f"indexing {size} elements needs 64-bit indices, which JAX only has with x64: "
            'set jax.config.update("jax_enable_x64", True)'
        )
    return np.int64


def real_dtype(dtype: DTypeLike) -> np.dtype:
    """The real dtype of ``dtype``'s precision: ``float32`` for ``complex64``, a real
    floating dtype itself.

    Example:
      >>> import numpy as np
      >>> from jaxdia._geometry import real_dtype
      >>> real_dtype(np.complex64), real_dtype(np.float64)
      (dtype('float32'), dtype('float64'))
    """
    return np.dtype(np.finfo(dtype).dtype)


def accumulation_dtype(dtype: DTypeLike) -> np.dtype:
    """The dtype sums run in: float32 for 16-bit floats, else ``dtype`` itself."""
    dtype = np.dtype(dtype)
    if dtype.itemsize <= 2 and jnp.issubdtype(dtype, jnp.floating):
        return np.dtype(np.float32)
    return dtype


def slot_indices(
    offsets: Sequence[int],
    shape: tuple[int, int],
    *,
    columns: Array | np.ndarray | None = None,
    host: bool = False,
) -> tuple[Any, Any, Any]:
    """``(rows, cols, inside)`` for the slots of ``data``: slot ``(k, j)`` holds
    ``A[rows[k, j], cols[k, j]]`` where ``inside`` is true, and is padding elsewhere.

    This is the one definition of padding in jaxdia.

    Args:
      offsets: the diagonals, one per row of ``data``.
      shape: ``(m, n)`` of the matrix.
      columns: the matrix columns of ``data``'s columns; by default ``0 .. n - 1`` (the
        whole ``data``). Given explicitly (e.g. a device's shifted window of columns),
        columns outside ``[0, n)`` count as padding too.
      host: NumPy arrays (for host-side code) instead of an iota that XLA computes
        inside the gather, scatter or select that uses it. NumPy index tables in a
        program would be constants the size of ``data``.

    Returns:
      Arrays broadcastable to ``(len(offsets), width)``.

    Example:
      >>> from jaxdia._geometry import slot_indices
      >>> rows, cols, inside = slot_indices((-1, 1), (3, 3), host=True)
      >>> inside.astype(int)
      array([[1, 1, 0],
             [0, 1, 1]])
    """
    m, n = shape
    index = index_dtype(m + n)  # rows j - offsets[k] lie in (-m, m + n)
    explicit = columns is not None
    if not explicit:
        if host:
            columns = np.arange(n, dtype=index)[None, :]
        else:
            columns = lax.broadcasted_iota(index, (len(offsets), n), 1)
    rows = columns - np.asarray(offsets, index)[:, None]
    inside = (rows >= 0) & (rows < m)
    if explicit:
        inside = inside & (columns >= 0) & (columns < n)
    return rows, columns, inside


def in_bounds(offsets: Sequence[int], shape: tuple[int, int], *, host: bool = False) -> Any:
    """``(len(offsets), n)`` booleans, true on the slots of ``data`` inside the matrix."""
    return slot_indices(offsets, shape, host=host)[2]


class Term(NamedTuple):
    """Diagonal ``k`` adds ``data[k, r + shift_d] * x[r + shift_x]`` to rows ``[lo, hi)``."""

    k: int
    shift_d: int
    shift_x: int
    lo: int
    hi: int


def live_terms(
    offsets: Sequence[int], shape: tuple[int, int], transpose: bool = False
) -> list[Term]:
    """The terms of ``A @ x`` (or ``A^T @ x``): one per diagonal holding entries.

    Example:
      >>> from jaxdia._geometry import live_terms
      >>> live_terms((-1, 5), (3, 3))  # offset 5 lies outside the matrix
      [Term(k=0, shift_d=-1, shift_x=-1, lo=1, hi=3)]
    """
    terms = []
    for k, offset in enumerate(offsets):
        start, stop = diagonal_bounds(offset, shape)
        if stop <= start:
            continue
        if transpose:
            # y[j] += data[k, j] * x[j - offset] for matrix columns j in [start, stop).
            terms.append(Term(k, 0, -offset, start, stop))
        else:
            # y[i] += data[k, i + offset] * x[i + offset] for rows i = j - offset.
            terms.append(Term(k, offset, offset, start - offset, stop - offset))
    return terms


def pairwise_sum(parts: Sequence[Array]) -> Array:
    """``parts[0] + parts[1] + ...`` added as a balanced tree (dependency depth log2)."""
    parts = list(parts)
    while len(parts) > 1:
        pairs = [a + b for a, b in zip(parts[::2], parts[1::2])]
        parts = pairs + parts[2 * len(pairs) :]
    return parts[0]


def place_row(values: _Row, start: int, width: int, xp: ModuleType = jnp) -> _Row:
    """A row of ``width`` slots holding ``values`` from ``start`` on and zeros elsewhere
    (``xp`` is ``jax.numpy`` or ``numpy``)."""
    pad = [(0, 0)] * (values.ndim - 1) + [(start, width - start - values.shape[-1])]
    return xp.pad(values, pad)


def placed_rows(pieces: Sequence[tuple[_Row, int]], width: int) -> _Row:
    """Rows of ``width`` slots stacked on axis -2, one per piece ``(values, start)``
    (``values`` of shape ``(..., 1, length)``, at least one piece) holding ``values``
    from ``start`` on and zeros elsewhere.

    In JAX, pads joined by one ``concatenate`` with no reshape between, so that XLA folds
    a product's slices of them into slices of the pieces' operand; in NumPy, written into
    one array of zeros (a copy fewer).

    Example:
      >>> import numpy as np
      >>> from jaxdia._geometry import placed_rows
      >>> placed_rows([(np.ones((1, 2)), 1), (np.full((1, 1), 2.0), 0)], 4)
      array([[0., 1., 1., 0.],
             [2., 0., 0., 0.]])
    """
    first = pieces[0][0]
    if isinstance(first, np.ndarray):
        out = np.zeros((*first.shape[:-2], len(pieces), width), first.dtype)
        for row, (values, start) in enumerate(pieces):
            out[..., row : row + 1, start : start + values.shape[-1]] = values
        return out
    return jnp.concatenate([place_row(values, start, width) for values, start in pieces], -2)


def stack_rows(
    rows: list[_Row], batch: tuple[int, ...], width: int, dtype: DTypeLike, xp: ModuleType = jnp
) -> _Row:
    """Stacks rows of width ``width`` (broadcast to ``batch``) into ``(*batch, len, width)``
    (``xp`` is ``jax.numpy`` or ``numpy``)."""
    if not rows:
        return xp.zeros((*batch, 0, width), dtype)
    rows = [xp.broadcast_to(r, (*batch, width)).astype(dtype, copy=False) for r in rows]
    return xp.stack(rows, -2)


def by_rows(row: _Row, offset: int, xp: ModuleType = jnp) -> _Row:
    """A diagonal's values by row: ``out[i] = row[i + offset]`` (``A[i, i + offset]``
    for a row of DIA ``data``) where that is inside ``row``, else 0 (1-D; ``xp`` is
    ``jax.numpy`` or ``numpy``)."""
    n = row.shape[-1]
    if offset == 0:
        return row
    zeros = xp.zeros((min(abs(offset), n),), row.dtype)
    if abs(offset) >= n:
        return zeros
    if offset > 0:
        return xp.concatenate([row[offset:], zeros])
    return xp.concatenate([zeros, row[: n + offset]])
