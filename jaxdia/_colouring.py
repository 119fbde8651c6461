"""Colourings of a DIA pattern, for Jacobians by compressed differentiation.

Curtis, Powell and Reid: columns ``j`` and ``j'`` of a sparse matrix can share one
seeded product ``A @ s`` (``s`` the sum of their unit vectors) when no row holds an entry
in both. A *colouring* gives each column a colour such that columns of one colour never
share a row; ``C`` colours give the whole matrix from ``C`` products. For a DIA pattern
(static offsets, a shape, and optionally a structural mask over the slots of ``data``)
everything here is host arithmetic on the offsets, done once per pattern at trace time
and cached:

- *modular*: colour ``j mod C``, valid when no difference ``o - o'`` of two offsets that
  share a row is a multiple of ``C`` (two columns of equal residue differ by a multiple
  of ``C``, and they share row ``i`` exactly when ``j = i + o`` and ``j' = i + o'``);
- *blocked*: colour ``(j + s * (j // b)) mod C`` for a block length ``b`` among the
  offsets: the colourings ``(x + s y) mod C`` of a grid of rows of length ``b``, which
  reach the lower bound where the grid's true pattern (a mask without the wrap-around
  entries) is given;
- *greedy*: first fit in column order over the pattern, which skips ahead by whole periods
  once the colours repeat where the pattern does.

The fewest colours win; no colouring can use fewer than the most entries of one row.
Seeds and the decompression of the products into ``data`` are computed in the program
from iotas (a greedy colouring adds one table of ``n`` colours): a gather with static
indices, no scatter.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from ._geometry import diagonal_bounds, in_bounds, index_dtype
from ._typing import DTypeLike


class Pattern:
    """A DIA structure: sorted offsets that hold entries, a shape ``(m, n)``, and an
    optional structural mask (``(len(offsets), n)`` booleans in ``data``'s layout, true
    where an entry may be non-zero). Hashable by value, so colourings can be cached."""

    __slots__ = ("offsets", "shape", "mask", "slots", "_key")

    def __init__(self, offsets: tuple[int, ...], shape: tuple[int, int], mask: Any = None):
        self.offsets = offsets
        self.shape = shape
        if mask is not None:
            mask = np.array(mask, dtype=bool) & in_bounds(offsets, shape, host=True)
            mask.setflags(write=False)
        self.mask = mask
        #: ``(len(offsets), n)`` booleans: the slots inside the matrix that may hold an
        #: entry.
        self.slots = in_bounds(offsets, shape, host=True) if mask is None else mask
        digest = None if mask is None else (mask.shape, np.packbits(mask).tobytes())
        self._key = (offsets, shape, digest)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pattern) and self._key == other._key

    def transpose(self) -> Pattern:
        """The pattern of ``A^T``: offsets negated, shape swapped, and the mask moved to
        ``A^T``'s slots (``A^T``'s slot ``(k, i)`` is ``A``'s ``(k, i + offsets[k])``)."""
        m, n = self.shape
        offsets = tuple(-k for k in reversed(self.offsets))
        if self.mask is None:
            return Pattern(offsets, (n, m))
        mask = np.zeros((len(offsets), m), dtype=bool)
        for row, k in zip(mask, reversed(range(len(self.offsets)))):
            offset = self.offsets[k]
            i = np.arange(m)
            j = i + offset
            inside = (j >= 0) & (j < n)
            row[inside] = self.mask[k, j[inside]]
        return Pattern(offsets, (n, m), mask)


@dataclasses.dataclass(frozen=True, eq=False)
class Colouring:
    """``count`` colours of the columns of a pattern; see :func:`column_colouring`.

    Column ``j`` has colour ``(j + sum(s * (j // b) for b, s in levels)) mod count``, or
    ``table[j]`` for a greedy colouring.
    """

    count: int
    kind: str  # "modular", "blocked" or "greedy"
    levels: tuple[tuple[int, int], ...] = ()  # "blocked": (block length, shift) pairs
    table: np.ndarray | None = None  # "greedy": the colour of each column

    def host(self, n: int) -> np.ndarray:
        """The colour of each of ``n`` columns, as NumPy."""
        if self.table is not None:
            return self.table
        return self.of(np.arange(n, dtype=np.int64))

    def of(self, columns: Any) -> Any:
        """The colours of integer ``columns`` (NumPy, or traced: computed in the
        program)."""
        if self.table is not None:
            table = jnp.asarray(self.table, _small_int(self.count))
            return table[columns].astype(columns.dtype)
        colours = columns
        for block, shift in self.levels:
            colours = colours + shift * (columns // block)
        return colours % max(self.count, 1)


def _small_int(count: int) -> type:
    return np.int8 if count < 2**7 else np.int16 if count < 2**15 else np.int32


# -- conflicts and bounds --------------------------------------------------------------------


def _conflicts(pattern: Pattern) -> dict[int, np.ndarray]:
    """For each distance ``d > 0``: ``(n,)`` booleans, true at column ``j`` when columns
    ``j`` and ``j - d`` share a row."""
    slots = pattern.slots
    n = pattern.shape[1]
    conflicts: dict[int, np.ndarray] = {}
    for k, offset in enumerate(pattern.offsets):
        for k_other, other in enumerate(pattern.offsets):
            d = offset - other
            if not 0 < d < n:
                continue
            # Column j holds row j - offset on diagonal k; column j - d holds the same
            # row on diagonal k_other.
            shared = slots[k, d:] & slots[k_other, : n - d]
            if shared.any():
                row = conflicts.setdefault(d, np.zeros(n, dtype=bool))
                row[d:] |= shared
    return conflicts


def _lower_bound(pattern: Pattern) -> int:
    """The most entries of one row: columns of one row need distinct colours."""
    m = pattern.shape[0]
    counts = np.zeros(m, dtype=np.int64)
    for slots, offset in zip(pattern.slots, pattern.offsets):
        start, stop = diagonal_bounds(offset, pattern.shape)
        counts[start - offset : stop - offset] += slots[start:stop]
    return int(counts.max(initial=0))


def _is_valid(colours: np.ndarray, conflicts: dict[int, np.ndarray], stop: int) -> bool:
    """Whether no two conflicting columns below ``stop`` share a colour."""
    head = colours[:stop]
    for d, conflict in conflicts.items():
        if d < stop and np.any(conflict[d:stop] & (head[d:] == head[:-d])):
            return False
    return True


# -- the three colourings --------------------------------------------------------------------


def _modular(distances: list[int], start: int) -> int:
    """The smallest ``C >= start`` dividing none of ``distances``."""
    count = max(start, 1)
    while any(d % count == 0 for d in distances):
        count += 1
    return count


#: The most candidate blocked colourings tried for one number of colours.
_BLOCKED_CANDIDATES = 2000


def _block_levels(
    offsets: tuple[int, ...], n: int, count: int
) -> list[tuple[tuple[int, int], ...]]:
    """Candidate levels of a blocked colouring with ``count`` colours: one block length
    among the offsets (a 2-D grid's row), or two where one divides the other (a 3-D grid's
    row and plane, or a grid of pairs of unknowns), with every non-zero shift."""
    blocks = sorted({abs(k) for k in offsets if 1 < abs(k) < n})
    shifts = range(1, count)
    candidates: list[tuple[tuple[int, int], ...]] = [
        ((block, shift),) for block in blocks for shift in shifts
    ]
    for inner, outer in itertools.combinations(blocks, 2):
        if outer % inner == 0:
            candidates += [((inner, a), (outer, b)) for a in range(count) for b in shifts]
    return candidates[:_BLOCKED_CANDIDATES]


def _blocked(
    pattern: Pattern, conflicts: dict[int, np.ndarray], lower: int, fewer_than: int
) -> Colouring | None:
    """The blocked colouring with the fewest colours below ``fewer_than``, if any."""
    n = pattern.shape[1]
    reach = max(conflicts)
    j = np.arange(n, dtype=np.int64)
    for count in range(max(lower, 1), fewer_than):
        for levels in _block_levels(pattern.offsets, n, count):
            colouring = Colouring(count, "blocked", levels)
            # Invalid candidates fail within a few blocks: check there first.
            head = min(n, 2 * reach + 2 * levels[-1][0] + 1)
            if _is_valid(colouring.of(j[:head]), conflicts, head) and _is_valid(
                colouring.of(j), conflicts, n
            ):
                return colouring
    return None


#: At most this many comparisons per attempt to find a period of the greedy colours.
_PERIOD_SEARCH = 4_000_000


def _greedy(conflicts: dict[int, np.ndarray], n: int, fewer_than: int) -> np.ndarray | None:
    """First-fit colours in column order: each column takes the smallest colour that no
    earlier conflicting column has; None as soon as that needs ``fewer_than`` colours
    (the colours of the first columns never depend on later ones, so the count only
    grows: a colouring that will not win is abandoned early).

    The colour of column ``j`` depends only on the colours of the columns it conflicts with,
    at most ``window`` before it, and on which of them conflict. So where the last
    ``window`` colours repeat those ``P`` columns earlier, and the conflicts ahead repeat
    those ``P`` columns earlier too, the colours ahead repeat with period ``P``: the loop
    copies them and moves on (through the interior of a stencil's pattern in one step).
    The window is the longest distance at which columns conflict in the middle of the
    pattern; a longer one that occurs only near an end (a periodic matrix's corners)
    stops the copying where it occurs.
    """
    distances = sorted(conflicts)
    if not distances:
        return np.zeros(n, dtype=np.int64)
    rows = np.stack([conflicts[d] for d in distances])  # (len(distances), n)
    middle = np.any(rows[:, n // 4 : max(3 * n // 4, n // 4 + 1)], axis=1).tolist()
    window = max((d for d, active in zip(distances, middle) if active), default=distances[-1])
    beyond = np.any(rows[np.asarray(distances) > window], axis=0)  # a longer distance conflicts
    colours = [0] * n
    search = window < n and _PERIOD_SEARCH // window > 0
    j, attempt = 0, 2 * window + 1
    while j < n:
        stop = min(n, attempt) if search else n
        flags = rows[:, j:stop].tolist()  # the conflicts at each distance, over the stretch
        for index, column in enumerate(range(j, stop)):
            used = 0
            for d, flag in zip(distances, flags):
                if flag[index]:
                    used |= 1 << colours[column - d]
            colour = (~used & (used + 1)).bit_length() - 1
            if colour >= fewer_than - 1:
                return None
            colours[column] = colour
        j = stop
        if j >= n or not search:
            continue
        attempt = j + max(j, 4 * window)  # attempts at geometrically spaced columns
        period = _period(np.asarray(colours[:j]), window, _PERIOD_SEARCH // window)
        if period is None:
            continue
        # How far ahead the conflicts repeat with that period, within the window.
        differs = np.any(rows[:, j:] != rows[:, j - period : n - period], axis=0)
        stops = np.flatnonzero(np.logical_or(differs, beyond[j:]))
        length = int(stops[0]) if stops.size else n - j
        if length:
            source = np.asarray(colours[j - period : j])
            colours[j : j + length] = source[np.arange(length) % period].tolist()
            j += length
            attempt = j + 4 * window
    return np.asarray(colours, dtype=np.int64)


def _period(colours: np.ndarray, window: int, longest: int) -> int | None:
    """The smallest ``P`` for which the last ``window`` colours equal those ``P`` before."""
    j = colours.size
    longest = min(longest, j - window)
    if longest < 1:
        return None
    candidates = np.arange(1, longest + 1)
    for position in range(j - 1, j - window - 1, -1):
        candidates = candidates[colours[position - candidates] == colours[position]]
        if not candidates.size:
            return None
    return int(candidates[0])


@functools.lru_cache(maxsize=64)
def column_colouring(pattern: Pattern) -> Colouring:
    """The colouring of ``pattern``'s columns with the fewest colours among the modular,
    blocked and greedy ones (cached per pattern).

    Example:
      >>> from jaxdia._colouring import Pattern, column_colouring
      >>> column_colouring(Pattern((-1, 0, 1), (100, 100))).count
      3
    """
    conflicts = _conflicts(pattern)
    lower = _lower_bound(pattern)
    if lower == 0:
        return Colouring(0, "modular")
    best = Colouring(_modular(list(conflicts), lower), "modular")
    if best.count > lower:
        best = _blocked(pattern, conflicts, lower, best.count) or best
    if best.count > lower:
        table = _greedy(conflicts, pattern.shape[1], best.count)
        if table is not None:
            count = int(table.max(initial=0)) + 1
            best = Colouring(count, "greedy", table=table.astype(_small_int(count)))
    return best


def row_colouring(pattern: Pattern) -> Colouring:
    """A colouring of ``pattern``'s rows (rows of one colour share no column): the
    column colouring of the transposed pattern, for products ``s^T A``."""
    return column_colouring(pattern.transpose())


# -- seeds and decompression -----------------------------------------------------------------


def seeds(colouring: Colouring, size: int, dtype: DTypeLike) -> Array:
    """``(count, size)``: row ``c`` is the indicator of the columns (or rows) of colour
    ``c``."""
    index = index_dtype(size)
    colours = colouring.of(lax.broadcasted_iota(index, (1, size), 1))
    wanted = lax.broadcasted_iota(index, (colouring.count, 1), 0)
    return (colours == wanted).astype(dtype)


def decompress(products: Array, pattern: Pattern, colouring: Colouring, *, rows: bool) -> Array:
    """``data`` ``(len(offsets), n)`` of the matrix from its compressed products.

    With ``rows`` False, ``products`` is ``(count, m)``, row ``c`` being ``A @ seed_c``
    for the column colouring; entry ``A[j - o, j]`` is row ``j - o`` of the product of
    ``j``'s colour. With ``rows`` True, ``products`` is ``(count, n)``, row ``c`` being
    ``seed_c^T A`` for a row colouring; the entry is column ``j`` of the product of row
    ``j - o``'s colour. Slots outside the pattern are zero.
    """
    m, n = pattern.shape
    offsets = pattern.offsets
    width = products.shape[1]
    if colouring.count == 0:  # no slot of the pattern can hold an entry
        return jnp.zeros((len(offsets), n), products.dtype)
    index = index_dtype(max(colouring.count, 1) * max(width, 1) + m + n)
    columns = lax.broadcasted_iota(index, (len(offsets), n), 1)
    matrix_rows = columns - np.asarray(offsets, index)[:, None]
    inside = (matrix_rows >= 0) & (matrix_rows < m)
    safe_rows = jnp.clip(matrix_rows, 0, max(m - 1, 0))
    if rows:
        flat = colouring.of(safe_rows) * width + columns
    else:
        flat = colouring.of(columns) * width + safe_rows
    values = products.reshape(-1)[flat]
    keep = inside if pattern.mask is None else inside & jnp.asarray(pattern.mask)
    return jnp.where(keep, values, jnp.zeros((), products.dtype))
