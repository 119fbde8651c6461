"""Stencils on structured grids: the geometry that multigrid and ILU(0) with a grid share.

A square matrix ``A`` of size ``prod(grid)`` is a *stencil on* ``grid`` when every entry
``A[i, j]`` couples grid points ``i`` and ``j`` (unknowns in C order, as ``np.ravel``
lays them out) that are neighbours: ``|i_a - j_a| <= 1`` along every axis ``a``. Entry
``A[i, i + d]`` for the displacement ``d`` in ``{-1, 0, 1}^dim`` is the stencil's *cell*
``d`` at point ``i``; where ``i + d`` leaves the grid the cell is 0 (Dirichlet boundaries
are eliminated, as in ``pyamg.gallery.poisson``). A dict of cells holds the stored ones
(the 5 of a 5-point stencil), each shaped as the grid.

Here: a grid's strides and neighbour displacements and the DIA offsets they make
(:func:`flat_offset`), the checks of a grid and of a matrix's stencil on it
(:func:`as_grid`, :func:`check_stencil`), a matrix's cells (:func:`cells_of`) and back
(:func:`dia_from_rows`), and the point colouring that probing uses (:func:`colour`). The
cell functions take ``xp`` (``jax.numpy`` or ``numpy``): some callers work on the host
with concrete values.

>>> from jaxdia._linalg.stencil import flat_offset, stencil_offsets
>>> flat_offset((1, -1), (4, 5))  # one row down, one column left on a 4 x 5 grid
4
>>> sorted(stencil_offsets((4, 5)))
[-6, -5, -4, -1, 0, 1, 4, 5, 6]
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from types import ModuleType
from typing import TypeAlias

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .._checks import is_int, static_int
from .._geometry import by_rows, diagonal_bounds
from .._kernels.ilu import hyperplane_weights
from .._matrix import DiaMatrix
from .._parts import DiaParts
from .._shard import ShardedDiaMatrix
from .._typing import DTypeLike, Grid

#: A checked grid (:func:`as_grid`): a tuple, hashable, so that it can be a static argument.
StaticGrid: TypeAlias = tuple[int, ...]
#: A displacement ``d`` in ``{-1, 0, 1}^dim``: from a grid point to a neighbour.
Step: TypeAlias = tuple[int, ...]
#: Cell values (of the grid's shape), on the device or on the host.
Values: TypeAlias = Array | np.ndarray
#: A stencil's stored cells: displacement -> values; absent cells are zero.
Cells: TypeAlias = dict[Step, Values]


def strides(grid: Grid) -> tuple[int, ...]:
    """C-order strides of ``grid``, in elements."""
    return tuple(math.prod(grid[axis + 1 :]) for axis in range(len(grid)))


def displacements(dim: int) -> list[tuple[int, ...]]:
    """The ``3^dim`` neighbour displacements, in the order of a stencil array's cells."""
    return list(itertools.product((-1, 0, 1), repeat=dim))


def flat_offset(d: Sequence[int], grid: Grid) -> int:
    """The DIA offset (column minus row) of displacement ``d`` on ``grid``."""
    return sum(step * stride for step, stride in zip(d, strides(grid)))


def live(d: Sequence[int], grid: Grid) -> bool:
    """Whether displacement ``d`` couples at least one pair of points of ``grid``."""
    return all(size > abs(step) for step, size in zip(d, grid))


def stencil_offsets(grid: Grid) -> set[int]:
    """The offsets of the neighbour displacements on ``grid`` (the 3^d-point stencil's)."""
    return {flat_offset(d, grid) for d in displacements(len(grid)) if live(d, grid)}


def stencil_misfits(offsets: Sequence[int], grid: Grid) -> list[int]:
    """The offsets that are no neighbour displacement on ``grid``."""
    fitting = stencil_offsets(grid)
    return [offset for offset in offsets if offset not in fitting]


def wavefront_weights(offsets: Sequence[int], grid: Grid) -> tuple[int, ...]:
    """The hyperplane weights (:func:`jaxdia._kernels.ilu.hyperplane_weights`) under which
    both triangles of a stencil with ``offsets`` couple each point to earlier or later
    hyperplanes only: its lower displacements, and its upper ones negated."""
    steps = []
    for d in displacements(len(grid)):
        offset = flat_offset(d, grid)
        if live(d, grid) and offset in offsets and offset != 0:
            steps.append(d if offset < 0 else tuple(-step for step in d))
    return hyperplane_weights(steps, len(grid))


def wrapped_entries(data: np.ndarray, offsets: Sequence[int], grid: Grid) -> list[tuple]:
    """Nonzero entries ``(i, j, value)`` of a concrete matrix (host ``data``, one matrix)
    on stencil diagonals that couple points which are no neighbours (a diagonal of
    offset ``n2 - 1`` on an ``(n1, n2)`` grid holds the neighbours ``(a, b) -> (a + 1,
    b - 1)`` but also ``(a, 0) -> (a, n2 - 1)``, which wraps around a grid line)."""
    n = math.prod(grid)
    coordinates: dict[int, np.ndarray] = {}

    def coordinate(axis: int) -> np.ndarray:  # the grid coordinate of every point
        if axis not in coordinates:
            index = np.arange(n, dtype=np.int64 if n > 2**31 - 1 else np.int32)
            coordinates[axis] = (index // strides(grid)[axis]) % grid[axis]
        return coordinates[axis]

    found: list[tuple] = []
    for k, offset in enumerate(offsets):
        if offset == 0:
            continue
        start, stop = diagonal_bounds(offset, (n, n))  # the columns j of this diagonal
        nonzero = data[k, start:stop] != 0
        if not nonzero.any():
            continue
        covered = np.zeros(stop - start, bool)
        for d in displacements(len(grid)):
            if not live(d, grid) or flat_offset(d, grid) != offset:
                continue
            ok = np.ones(stop - start, bool)
            for axis, step in enumerate(d):
                if step:  # rows i = j - offset must have i + d inside the grid
                    c = coordinate(axis)[start - offset : stop - offset] + step
                    ok &= (c >= 0) & (c < grid[axis])
            covered |= ok
        bad = np.flatnonzero(nonzero & ~covered)[:3] + start
        found.extend((int(j - offset), int(j), data[k, j].item()) for j in bad)
        if len(found) >= 3:
            break
    return found


def inside(d: Sequence[int], grid: Grid, xp: ModuleType = jnp) -> Values | None:
    """Booleans broadcastable to ``grid``: whether ``i + d`` lies in the grid (None:
    everywhere). With ``jax.numpy`` under ``jit`` they are computed in the program (from
    iotas), not embedded as constants of the grid's size."""
    mask = None
    for axis, (step, size) in enumerate(zip(d, grid)):
        if step == 0:
            continue
        index = xp.arange(size).reshape([size if a == axis else 1 for a in range(len(grid))])
        ok = (index + step >= 0) & (index + step < size)
        mask = ok if mask is None else mask & ok
    return mask


def cells_of(parts: DiaParts, grid: Grid, xp: ModuleType = jnp) -> Cells:
    """The stored cells of one matrix's stencil, as views of its diagonals."""
    data, offsets, _ = parts
    cells = {}
    for d in displacements(len(grid)):
        offset = flat_offset(d, grid)
        if not live(d, grid) or offset not in offsets:
            continue
        # data[k, j] == A[j - offset, j], so A[i, i + offset] == data[k, i + offset].
        values = by_rows(data[offsets.index(offset)], offset, xp).reshape(grid)
        mask = inside(d, grid, xp)
        cells[d] = values if mask is None else xp.where(mask, values, 0)
    return cells


def stencil_rows(cells: Cells, grid: Grid, dtype: DTypeLike, xp: ModuleType = jnp) -> Values:
    """The cells as rows ``(prod(grid), 3^dim)``: row ``i`` holds ``A[i, i + d]`` in
    column ``displacements(dim).index(d)``."""
    zeros = xp.zeros(grid, dtype)
    rows = xp.stack([cells.get(d, zeros) for d in displacements(len(grid))], axis=-1)
    return rows.reshape(math.prod(grid), -1)


def colour(grid: Grid, first: int | Array = 0) -> Array:
    """Each point's colour, ``sum_a (i_a mod 3) 3^(dim - 1 - a)``, shaped as the grid:
    the ``3^dim`` neighbours of a point (itself included) have distinct colours.

    ``first``: the index along axis 0 of ``grid``'s first plane in a larger grid (a
    device's slab of planes), so that the colours are the larger grid's.
    """
    dim = len(grid)
    total = jnp.zeros(grid, np.int32)
    for axis in range(dim):
        index = lax.broadcasted_iota(np.int32, grid, axis)
        if axis == 0:
            index = index + first
        total = total + (index % 3) * 3 ** (dim - 1 - axis)
    return total


def dia_from_rows(rows: Values, grid: Grid, by_colour: bool, first: int | Array = 0) -> DiaParts:
    """The DIA form of a stencil whose row ``i`` (of ``rows``, ``(prod(grid), 3^dim)``)
    holds ``A[i, i + d]`` in the column of displacement ``d`` (``by_colour`` False, see
    :func:`stencil_rows`) or of the colour of point ``i + d`` (True, what probing gives,
    see :func:`jaxdia._linalg.multigrid_hierarchy.probe`; ``first`` as for
    :func:`colour`). One gather for all diagonals: ``data[k, j] = A[j - o_k, j]`` is row
    ``j - d`` where that point lies in the grid, else 0.
    """
    dim = len(grid)
    n = math.prod(grid)
    steps = [d for d in displacements(dim) if live(d, grid)]
    points = [lax.broadcasted_iota(np.int32, (len(steps), *grid), axis + 1) for axis in range(dim)]
    shift = np.asarray(steps, np.int32).reshape(len(steps), dim, *([1] * dim))
    source = [points[axis] - shift[:, axis] for axis in range(dim)]  # i = j - d
    inside = functools.reduce(
        lambda a, b: a & b, [(i >= 0) & (i < size) for i, size in zip(source, grid)]
    )
    flat = sum(i * stride for i, stride in zip(source, strides(grid)))
    if by_colour:
        column = jnp.broadcast_to(colour(grid, first), (len(steps), *grid))
    else:
        index = [displacements(dim).index(d) for d in steps]
        column = np.asarray(index, np.int32).reshape(len(steps), *([1] * dim))
    width = rows.shape[-1]
    take = jnp.clip(flat, 0, n - 1) * width + column
    values = jnp.where(inside, rows.reshape(-1)[take], 0).reshape(len(steps), n)
    # Equal offsets (only on grids with an axis of 1 or 2 points) hold disjoint entries.
    by_offset: dict[int, list[int]] = {}
    for index, d in enumerate(steps):
        by_offset.setdefault(flat_offset(d, grid), []).append(index)
    offsets = tuple(sorted(by_offset))
    if all(len(by_offset[o]) == 1 for o in offsets):
        data = values[np.asarray([by_offset[o][0] for o in offsets])]
    else:
        data = jnp.stack([sum(values[k] for k in by_offset[o]) for o in offsets])
    return DiaParts(data, offsets, (n, n))


# -- checks ---------------------------------------------------------------------------------


def as_grid(grid: object, n: int, function: str = "multigrid") -> StaticGrid:
    """``grid`` (what a caller was given: an int or a sequence of ints, else a TypeError)
    checked: 1 to 3 positive ints whose product is ``n`` (``function`` names the caller in
    the messages)."""
    if isinstance(grid, (str, bytes)) or not isinstance(grid, Sequence):
        if is_int(grid):
            grid = (grid,)
        else:
            raise TypeError(
                f"{function}: grid must be a tuple of 1 to 3 ints (the grid's points per axis), "
                f"got {type(grid).__name__}: {grid!r}"
            )
    grid = tuple(static_int(size, f"{function}: grid", "a tuple of ints") for size in grid)
    if not 1 <= len(grid) <= 3 or any(size < 1 for size in grid):
        raise ValueError(
            f"{function}: grid must be 1 to 3 positive ints (2-D: (n1, n2), 3-D: (n1, n2, n3)), "
            f"got {grid}"
        )
    if math.prod(grid) != n:
        raise ValueError(
            f"{function}: grid {grid} has {math.prod(grid)} points, but A has shape ({n}, {n}): "
            "the unknowns must be the grid's points, in C order (as np.ravel lays them out)"
        )
    return grid


def check_stencil(
    A: DiaMatrix | ShardedDiaMatrix,
    grid: tuple[int, ...],
    host: np.ndarray | None,
    function: str = "multigrid",
    alternative: str = "use jaxdia.chebyshev",
) -> None:
    """Raises if ``A``'s offsets, or (``host``: its concrete data, flat batch) its
    entries, are no stencil on ``grid`` (``function`` names the caller, ``alternative``
    what to do for a matrix that is no stencil)."""
    misfits = stencil_misfits(A.offsets, grid)
    if misfits:
        steps = strides(grid)
        terms = " + ".join(
            f"d{axis + 1}" + (f" * {stride}" if stride != 1 else "")
            for axis, stride in enumerate(steps)
        )
        fitting = sorted(stencil_offsets(grid))
        raise ValueError(
            f"{function}: A's offset {misfits[0]} does not fit a stencil on grid {grid}"
            + (f" (nor do {misfits[1:]})" if len(misfits) > 1 else "")
            + f": the neighbours of a grid point lie at offsets {terms} with each d in "
            f"{{-1, 0, 1}}, i.e. {fitting}. Check the grid's shape and order (C order, as "
            f"np.ravel), or {alternative} for matrices that are no stencil"
        )
    if host is None:
        return
    for member, values in enumerate(host):
        wrapped = wrapped_entries(values, A.offsets, grid)
        if wrapped:
            i, j, value = wrapped[0]
            where = f" (batch member {member})" if len(host) > 1 else ""
            raise ValueError(
                f"{function}: A[{i}, {j}] = {value}{where} couples grid points "
                f"{_point(i, grid)} and {_point(j, grid)}, which are no "
                f"neighbours on grid {grid}, so A is no stencil on it (periodic boundaries, "
                "or the wrong grid shape?)"
            )


def _point(index: int, grid: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(index, grid))
