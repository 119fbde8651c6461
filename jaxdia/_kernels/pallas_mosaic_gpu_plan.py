"""The static plan of the Mosaic GPU kernels (:mod:`jaxdia._kernels.pallas_mosaic_gpu`):
tile sizes, where each window of each operand lies in shared memory, and how TMA addresses
each operand.

All of it is decided from static shapes and offsets before a kernel is traced (the kernel
module's docstring says why the windows are laid out so); the kernels only read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from jax.experimental import pallas as pl

from .._geometry import Term, live_terms
from .pallas_common import round_up

# Elements per TMA copy: TMA's limit on a box dimension. A copy of fewer (the 128-row
# tiles) must still be a multiple of 128 bytes, which 128 elements of 2 bytes are.
_CHUNK = 256
_ROW_CHOICES = (1024, 512, 256, 128)
# Shared memory per program the default block sizes aim at (a few programs per SM keep
# enough copies in flight), and the most one program may use (Hopper: 227 KiB).
_SMEM_TARGET = 64 * 1024
_SMEM_LIMIT = 200 * 1024
_MAX_COLS = 8
# Registers per thread the accumulators may take (one per tile row / 128 per sum).
_MAX_ACCUMULATOR_WORDS = 64
_INT32_MAX = 2**31 - 1


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """What TMA moves: float64 as uint64 (TMA has no 64-bit float type)."""
    return np.dtype(np.uint64) if dtype == np.float64 else dtype


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes of one Mosaic GPU program.

    Attributes:
        rows: output rows (``spmm``) or data columns (``sddmm``) per program: a multiple
            of 128 (one row per thread of a warpgroup and load).
        cols: columns of ``X`` per step of the program's loop over them.

    Example:
        >>> from jaxdia._kernels.pallas_mosaic_gpu import BlockSizes
        >>> import jax.numpy as jnp
        >>> BlockSizes.default((10**6, 10**6), (-1000, -1, 0, 1, 1000), 1, jnp.float32)
        BlockSizes(rows=1024, cols=1)
    """

    rows: int
    cols: int

    def __post_init__(self):
        if self.rows < 128 or self.rows % 128:
            raise ValueError(f"BlockSizes.rows must be a multiple of 128, got {self.rows}")
        if self.cols < 1:
            raise ValueError(f"BlockSizes.cols must be at least 1, got {self.cols}")

    @classmethod
    def default(
        cls,
        shape: tuple[int, int],
        offsets: Sequence[int],
        n_cols: int,
        dtype,
        *,
        op: str = "spmm",
        transpose: bool = False,
    ) -> BlockSizes | None:
        """The largest tile (1024 rows down to 128, no longer than the output needs; up
        to 8 columns) whose shared memory fits 64 KiB (else 200 KiB) and whose sums fit
        64 registers per thread; ``None`` when no tile fits (too many diagonals, or too
        wide a spread between them).

        The speed of these tiles is unmeasured: a starting point to tune.
        """
        terms = live_terms(offsets, shape, transpose if op == "spmm" else True)
        itemsize = storage_dtype(np.dtype(dtype)).itemsize
        words = 2 if itemsize == 8 else 1  # float64 sums take two registers
        out_rows = (shape[1] if transpose else shape[0]) if op == "spmm" else shape[1]
        # No tile longer than the output needs: the smallest choice that covers it.
        cap = min([r for r in _ROW_CHOICES if r >= out_rows], default=max(_ROW_CHOICES))
        for limit in (_SMEM_TARGET, _SMEM_LIMIT):
            for rows in (r for r in _ROW_CHOICES if r <= cap):
                for cols in range(min(max(n_cols, 1), _MAX_COLS), 0, -1):
                    sums = cols if op == "spmm" else len(terms)
                    if rows // 128 * sums * words > _MAX_ACCUMULATOR_WORDS:
                        continue
                    sizes = cls(rows, cols)
                    if tile_plan(op, terms, len(offsets), sizes).smem_bytes(itemsize) <= limit:
                        return sizes
        return None


@dataclasses.dataclass(frozen=True)
class Windows:
    """The windows of one line (a column of ``X``) that a tile reads, in shared memory.

    Window ``w`` holds the line's rows ``r0 + starts[w]`` onwards (``r0`` the tile's first
    row) at ``offsets[w]``, ``lengths[w]`` elements; term ``t`` reads ``rows`` elements of
    window ``reads[t][0]`` from position ``reads[t][1]`` on.
    """

    starts: tuple[int, ...]
    offsets: tuple[int, ...]
    lengths: tuple[int, ...]
    reads: tuple[tuple[int, int], ...]

    @property
    def size(self) -> int:
        return sum(self.lengths)


def _chunk(rows: int) -> int:
    return _CHUNK if rows % _CHUNK == 0 else 128


def _group_windows(shifts: Sequence[int], rows: int) -> Windows:
    """Windows for terms reading ``rows`` rows from ``r0 + shift`` each: shifts less than
    a tile apart share one window (the tile plus the halo between them)."""
    chunk = _chunk(rows)
    groups: list[list[int]] = []
    for shift in sorted(set(shifts)):
        if groups and shift - groups[-1][-1] < rows:
            groups[-1].append(shift)
        else:
            groups.append([shift])
    starts, offsets, lengths = [], [], []
    for group in groups:
        starts.append(group[0])
        offsets.append(sum(lengths))
        lengths.append(round_up(rows + group[-1] - group[0], chunk))
    reads = []
    for shift in shifts:
        w = max(i for i, start in enumerate(starts) if start <= shift)
        reads.append((w, shift - starts[w]))
    return Windows(tuple(starts), tuple(offsets), tuple(lengths), tuple(reads))


@dataclasses.dataclass(frozen=True)
class Plan:
    """Shared-memory layout of one program (``op`` "spmm" or "sddmm").

    spmm: the ``direct`` buffer holds one window of ``data`` per term (``rows`` rows from
    ``r0 + shift_d``), the ``grouped`` buffer ``cols`` columns of ``X``, each with the
    ``windows`` of the terms' ``shift_x``; the output is ``cols`` columns of ``rows``.
    sddmm: ``direct`` holds ``cols`` columns of ``X`` (``rows`` rows from ``r0``),
    ``grouped`` ``cols`` columns of ``G`` (the terms' ``shift_x``); the output is one
    row of ``D`` per diagonal.

    Every buffer starts with ``rows`` spare elements (see the module docstring).
    """

    op: str
    terms: tuple[Term, ...]
    n_diags: int
    rows: int
    cols: int
    windows: Windows

    @property
    def chunk(self) -> int:
        return _chunk(self.rows)

    @property
    def direct_lines(self) -> int:
        return len(self.terms) if self.op == "spmm" else self.cols

    @property
    def direct_size(self) -> int:
        return self.rows * (1 + self.direct_lines)

    @property
    def grouped_size(self) -> int:
        return self.rows + self.cols * self.windows.size

    @property
    def out_size(self) -> int:
        return self.rows * (self.cols if self.op == "spmm" else self.n_diags)

    def smem_bytes(self, itemsize: int) -> int:
        return itemsize * (self.direct_size + self.grouped_size + self.out_size) + 64

    def copies(self, width: int, first: bool) -> int:
        """TMA copies of a block of ``width`` columns (spmm's ``data`` windows come with
        the first block)."""
        per_line = self.rows // self.chunk
        grouped = width * self.windows.size // self.chunk
        if self.op == "spmm":
            return grouped + (len(self.terms) * per_line if first else 0)
        return grouped + width * per_line


def tile_plan(op: str, terms: Sequence[Term], n_diags: int, sizes: BlockSizes) -> Plan:
    windows = _group_windows([t.shift_x for t in terms], sizes.rows)
    return Plan(op, tuple(terms), n_diags, sizes.rows, sizes.cols, windows)


@dataclasses.dataclass(frozen=True)
class View:
    """How TMA addresses a ``(lines, width)`` operand: 2-D, or flat when a line's byte
    size breaks TMA's 16-byte stride rule."""

    lines: int
    width: int
    flat: bool

    @classmethod
    def choose(cls, lines: int, width: int, itemsize: int, margin: int) -> View | None:
        """``margin``: how far past a line's end a window may reach."""
        if (width * itemsize) % 16 == 0 and width + margin <= _INT32_MAX:
            return cls(lines, width, False)
        if lines * width + margin <= _INT32_MAX:
            return cls(lines, width, True)
        return None

    def shape(self) -> tuple[int, ...]:
        return (self.lines * self.width,) if self.flat else (self.lines, self.width)

    def coordinate(self, line, start):
        """The copy coordinate of row ``start`` of ``line`` (flat or within the line)."""
        return line * self.width + start if self.flat else start

    def at(self, ref, line, coordinate, size: int):
        if self.flat:
            return ref.at[pl.ds(coordinate, size)]
        return ref.at[line, pl.ds(coordinate, size)]


def operand_views(plan: Plan, shapes, itemsize: int) -> tuple[View, View, View] | None:
    """The views of the two inputs and the output, or ``None`` when an operand is too
    large for TMA's 32-bit coordinates."""
    # How far past a line's end a copy's coordinate can reach: a window starts at most a
    # tile plus the longest operand's length past a line's start (the tile's first row,
    # shifted by up to the matrix's size), and spans at most the windows' total size.
    longest = max(width for _, width in shapes)
    margin = 2 * (plan.rows + longest) + plan.windows.size
    views = []
    for lines, width in shapes:
        view = View.choose(lines, width, itemsize, margin)
        if view is None:
            return None
        views.append(view)
    return views[0], views[1], views[2]
