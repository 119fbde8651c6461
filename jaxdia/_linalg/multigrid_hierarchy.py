"""Geometric multigrid hierarchies and V-cycles for stencil matrices, at the array level.

The matrices are stencils on structured grids (:mod:`jaxdia._linalg.stencil` says what
that is and holds their geometry: cells, offsets, colours).

Coarsening halves chosen axes: coarse point ``I`` sits on fine point ``2 I + 1``, so an
axis of ``n`` points keeps ``n // 2``. Interpolation ``P`` is linear along each coarsened
axis (fine ``2 I`` takes the mean of its coarse neighbours, 0 beyond the boundary),
restriction is ``R = P^T``, and the coarse operator is the Galerkin product ``R A P``,
again a stencil: at most ``3^dim`` diagonals. The finest level's product is taken on its
stored cells, one axis at a time (:func:`galerkin_cells`: 13 terms per cell and axis,
views of the matrix's diagonals, none of its zero cells read); coarser levels' by
probing (:func:`probe`: one product with ``3^dim`` coloured columns), a few whole-array
operations per level, so that the compiled program stays small.

Smoothers (:mod:`jaxdia._linalg.smoothers`) are polynomials in ``D^-1 A`` (``D`` the
diagonal): damped Jacobi, or the
Chebyshev polynomial smallest on ``[rho / 6, rho]`` (2-D, 3-D; ``[rho / 3, rho]`` in 1-D),
where ``rho`` is Gershgorin's bound on the spectrum of ``D^-1 A``, read off the stored
entries (no product is spent on it). The same polynomial before and after the coarse
correction keeps the cycle symmetric for a symmetric ``A``; ``rho`` bounds the spectrum,
so the smoother converges in the energy norm and the cycle is positive definite for a
symmetric positive definite ``A``, as conjugate gradients need. The coarsest level is
solved directly with what the setup made once (:func:`coarse_factor`): its banded LU on
CPU, its dense inverse on GPU and TPU.

Everything here works on one matrix; batches are ``jax.vmap``-ed over by the callers.
The cell functions take ``xp`` (``jax.numpy`` or ``numpy``): the ``"auto"`` coarsening
plan and a concrete matrix's hierarchy (:func:`host_setup`) are made on the host.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TypeAlias, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .. import _dispatch
from .._convert import dia_to_dense
from .._geometry import accumulation_dtype, by_rows
from .._kernels.primitives import spmm
from .._kernels.shared import interleave
from .._parts import DiaParts
from .._products import looped_matvec, matvec
from .._pytree import Immutable
from .._typing import DTypeLike, Grid
from . import ilu
from .banded import Factor, factor, solve
from .plan import Use, choose
from .smoothers import gershgorin, jacobi_steps, row_sums, smooth, smoothing_data
from .stencil import (
    Cells,
    StaticGrid,
    Step,
    Values,
    cells_of,
    colour,
    dia_from_rows,
    displacements,
    flat_offset,
    inside,
    live,
    stencil_rows,
    wavefront_weights,
)

#: The axes coarsened from each level to the next.
Plan: TypeAlias = tuple[tuple[int, ...], ...]
#: Grid-shaped values kept as they came: on the device, on the host, or either (cells).
_V = TypeVar("_V", Array, np.ndarray, Values)


def probe(A: DiaParts, grid: Grid, axes: Sequence[int]) -> Array:
    """``R A P`` read off by probing: the rows ``(n_coarse, 3^dim)`` for
    :func:`jaxdia._linalg.stencil.dia_from_rows` (``by_colour``).

    Column ``c`` is ``R A P e_c``, where ``e_c`` is 1 on the coarse points of colour
    ``c``: since the neighbours of a coarse point have distinct colours, its entry ``i``
    is ``(R A P)[i, j]`` for the one neighbour ``j`` of ``i`` of that colour. All colours
    go through one product with ``3^dim`` columns.
    """
    coarse = coarse_grid(grid, axes)
    width = 3 ** len(grid)
    probes = (colour(coarse)[..., None] == jnp.arange(width, dtype=np.int32)).astype(A.dtype)
    fine = interpolate(probes, axes, grid).reshape(-1, width)
    product = spmm(A.data, fine, offsets=A.offsets, shape=A.shape)
    return restrict(product.reshape(*grid, width), axes).reshape(-1, width)


def axis_strengths(cells: Cells, dim: int) -> list[float]:
    """``-sum_d cell_d * d_a^2``, summed over the grid, for each axis ``a`` (host cells).

    For a discretized ``-div(K grad u)`` this is ``2 K_aa`` in grid units, whatever the
    stencil's shape (the anisotropic 9-point stencils of bilinear elements have positive
    off-diagonal entries along the weak axis, which absolute values would count as
    coupling), so it compares the couplings along the axes. For complex cells (a
    complex-shifted or Crank-Nicolson operator, ``I + i dt/2 L``) the modulus of that
    sum: a complex coefficient has no sign.
    """
    totals = {d: complex(values.sum()) for d, values in cells.items() if any(d)}
    sums = [-sum(total * d[axis] ** 2 for d, total in totals.items()) for axis in range(dim)]
    complex_cells = any(np.iscomplexobj(values) for values in cells.values())
    return [abs(total) if complex_cells else total.real for total in sums]


# -- linear interpolation along one axis -------------------------------------------------------

_WEIGHT = {-1: 0.5, 0: 1.0, 1: 0.5}


def coarse_size(n: int) -> int:
    """Points kept on an axis of ``n``: the odd ones (0-based), coarse ``I`` at ``2I + 1``."""
    return n // 2


def coarse_grid(grid: Grid, axes: Sequence[int]) -> StaticGrid:
    return tuple(coarse_size(n) if axis in axes else n for axis, n in enumerate(grid))


def _index(x: _V, axis: int, item: int | slice) -> _V:
    return x[(slice(None),) * axis + (item,)]


def _pad_to(x: _V, axis: int, size: int, xp: ModuleType = jnp) -> _V:
    """``x`` zero-padded at the end of ``axis`` to ``size``."""
    extra = size - x.shape[axis]
    if extra <= 0:
        return x
    return xp.pad(x, [(0, extra) if a == axis else (0, 0) for a in range(x.ndim)])


def _points(x: _V, axis: int, p: int, xp: ModuleType = jnp) -> _V:
    """``x[2I + 1 + p]`` along ``axis`` for every coarse ``I`` (0 beyond the end)."""
    nc = coarse_size(x.shape[axis])
    x = _pad_to(x, axis, 2 * nc + 2, xp)
    return _index(x, axis, slice(1 + p, 1 + p + 2 * nc - 1, 2))


def restrict(x: Array, axes: Sequence[int]) -> Array:
    """``R x`` on a grid-shaped ``x``: coarse ``I`` gets ``x[2I + 1] + (x[2I] + x[2I + 2]) / 2``
    along each axis of ``axes``."""
    for axis in axes:
        x = _points(x, axis, 0) + 0.5 * (_points(x, axis, -1) + _points(x, axis, 1))
    return x


def interpolate(xc: Array, axes: Sequence[int], grid: Grid) -> Array:
    """``P xc`` onto ``grid``: along each axis of ``axes``, fine ``2I + 1`` gets ``xc[I]`` and
    fine ``2I`` the mean of ``xc[I - 1]`` and ``xc[I]`` (0 beyond the boundary)."""
    scatter = _dispatch.interleave_by_scatter(_dispatch.default_platform())
    for axis in axes:
        n, nc = grid[axis], xc.shape[axis]
        padded = jnp.pad(xc, [(1, 1) if a == axis else (0, 0) for a in range(xc.ndim)])
        # mean[J] = (xc[J - 1] + xc[J]) / 2 for J = 0 .. nc: the even fine points 2J.
        mean = 0.5 * (_index(padded, axis, slice(0, nc + 1)) + _index(padded, axis, slice(1, None)))
        # The even fine points interleaved with xc (odd n: the last fine point lies
        # between xc[nc - 1] and the boundary), not as pairs on a new minor axis of two,
        # which TPU would tile a row per pair.
        evens = _index(mean, axis, slice(0, n - nc))
        xc = interleave(evens, xc, axis, n, scatter=scatter)
    return xc


def _galerkin_terms(step: int) -> list[tuple[int, int, float]]:
    """``(p, D, weight)`` of the terms by which a fine cell of step ``d_a = step`` along a
    coarsened axis reaches coarse cell ``D_a = D``: ``w(p) w(q)`` for ``q = d + p - 2D``."""
    return [
        (p, D, _WEIGHT[p] * _WEIGHT[step + p - 2 * D])
        for p in (-1, 0, 1)
        for D in (-1, 0, 1)
        if abs(step + p - 2 * D) <= 1
    ]


def galerkin_cells(cells: Cells, grid: Grid, axis: int, xp: ModuleType = jnp) -> Cells:
    """The cells of ``R A P`` for linear interpolation along grid ``axis`` only.

    ``(R A P)[I, I + D] = sum w(p) w(q) A[i, i + d]`` over the fine points ``i = 2I + 1 +
    p`` (along ``axis``; the other coordinates and steps are unchanged) and steps ``d``
    with ``q = d + p - 2 D`` in ``{-1, 0, 1}``: 13 of the 27 triples ``(p, d, D)``, where
    ``w(0) = 1`` and ``w(+-1) = 1/2`` are the interpolation weights. Only the stored cells
    are read, and only the cells they reach are made.
    """
    out: Cells = {}
    views: dict[tuple[Step, int], Values] = {}
    nc = coarse_size(grid[axis])
    for d, values in cells.items():
        padded = _pad_to(values, axis, 2 * nc + 2, xp)  # once per cell: a copy on the host
        for p, D, weight in _galerkin_terms(d[axis]):
            if (d, p) not in views:
                views[d, p] = _index(padded, axis, slice(1 + p, 1 + p + 2 * nc - 1, 2))
            target = d[:axis] + (D,) + d[axis + 1 :]
            term = weight * views[d, p]
            out[target] = out[target] + term if target in out else term
    coarse = coarse_grid(grid, (axis,))
    result = {}
    for D, values in out.items():
        if live(D, coarse):
            # Couplings to coarse points beyond the boundary are not part of the operator.
            mask = inside(D, coarse, xp)
            result[D] = values if mask is None else xp.where(mask, values, 0)
    return result


# -- the hierarchy ---------------------------------------------------------------------------


@jax.tree_util.register_pytree_with_keys_class
class Hierarchy(Immutable):
    """A multigrid hierarchy of one matrix (or a batch, as leading dims of every leaf).

    Leaves: ``operators`` (``DiaParts`` of every level, finest first), and for every level
    but the coarsest its ``inverse_diagonals`` and Gershgorin ``bounds`` (and, for the
    ``"ilu"`` smoother, its ILU(0) ``factors``; else none); ``coarse_lu`` the coarsest
    level's solver (:func:`coarse_factor`). Static: ``grids`` (one per level), ``plan``
    (the axes coarsened from each level to the next), ``smoother`` and ``sweeps``.
    """

    __slots__ = (
        "operators",
        "inverse_diagonals",
        "bounds",
        "coarse_lu",
        "factors",
        "grids",
        "plan",
        "smoother",
        "sweeps",
    )
    _leaves = ("operators", "inverse_diagonals", "bounds", "coarse_lu", "factors")
    _static = ("grids", "plan", "smoother", "sweeps")
    operators: tuple[DiaParts, ...]
    inverse_diagonals: tuple[Array, ...]
    bounds: tuple[Array, ...]
    coarse_lu: Factor | Array
    factors: tuple[ilu.IncompleteFactor, ...]
    grids: tuple[StaticGrid, ...]
    plan: Plan
    smoother: str
    sweeps: int


def coarse_factor(A: DiaParts) -> Factor | Array:
    """The coarsest level's solver, made once in the setup and used by every cycle
    through :func:`coarse_solve`: on CPU its banded LU (LAPACK's); on GPU and TPU (see
    :func:`jaxdia._dispatch.coarse_solve_by_inverse`) its inverse, dense, so that each
    cycle's coarse solve is one matrix-vector product where a banded solve is a sequence
    of small kernels, about ``2 log2(n / m)`` of them for cyclic reduction (at most
    ``MAX_COARSE`` = 4096 unknowns: at most 128 MiB in float64)."""
    plan = choose(A.offsets, A.shape[0], use=Use.COARSE)
    if plan.dense:
        dense = dia_to_dense(A.data.astype(accumulation_dtype(A.dtype)), A.offsets, A.shape)
        return jnp.linalg.inv(dense)
    return factor(A, plan)


def coarse_solve(A: DiaParts, factor: Factor | Array, b: Array) -> Array:
    if isinstance(factor, Factor):
        return solve(A, factor, b, function="multigrid")
    return jnp.matmul(factor, b.astype(factor.dtype), precision=lax.Precision.HIGHEST).astype(
        jnp.result_type(A.dtype, b)
    )


def setup(
    parts: DiaParts, grid: StaticGrid, plan: Plan, smoother: str, sweeps: int, by_cells: bool = True
) -> Hierarchy:
    """The hierarchy of one stencil matrix ``parts`` on ``grid``, coarsened along
    ``plan[l]`` from level ``l`` to ``l + 1``.

    The finest level's product is ``parts`` itself. Its Galerkin product is taken on its
    stored cells (views of ``parts``' diagonals: the fine grid's arrays are the largest,
    and a 5- or 7-point stencil has 5 or 7 of the 9 or 27 cells); coarser ones by
    probing (:func:`probe`), a few whole-array operations per level, which keeps the
    compiled program small. ``by_cells`` False probes the finest level too (for a
    coarse level's 9- or 27-point stencil, where the cells would make a large program).
    """
    dim = len(grid)
    operators, inverses, bounds, grids = [parts], [], [], [grid]
    if plan and by_cells:
        cells = cells_of(parts, grid)
        center = cells.get((0,) * dim, jnp.zeros(grid, parts.dtype))
        inverse, rho = smoothing_data(
            center.reshape(-1), row_sums(list(cells.values())).reshape(-1)
        )
        inverses.append(inverse)
        bounds.append(rho)
        for axis in plan[0]:
            cells = galerkin_cells(cells, grid, axis)
            grid = coarse_grid(grid, (axis,))
        rows = stencil_rows(cells, grid, parts.dtype)
        operator = dia_from_rows(rows, grid, by_colour=False)
        operators.append(operator)
        grids.append(grid)
    for axes in plan[len(operators) - 1 :]:
        operator = operators[-1]
        inverse, rho = gershgorin(operator)
        inverses.append(inverse)
        bounds.append(rho)
        rows = probe(operator, grid, axes)
        grid = coarse_grid(grid, axes)
        operators.append(dia_from_rows(rows, grid, by_colour=True))
        grids.append(grid)
    factors = ()
    if smoother == "ilu":
        factors = tuple(ilu_smoother(A, level_grid) for A, level_grid in zip(operators, grids[:-1]))
    return Hierarchy._make(
        tuple(operators),
        tuple(inverses),
        tuple(bounds),
        coarse_factor(operators[-1]),
        factors,
        tuple(grids),
        plan,
        smoother,
        sweeps,
    )


def dia_of_cells(cells: Cells, grid: Grid, dtype: DTypeLike) -> DiaParts:
    """The DIA form of a stencil's host cells (NumPy), with the offsets of
    :func:`jaxdia._linalg.stencil.dia_from_rows` (every live displacement's, sorted):
    ``data[k, j] = A[j - o_k, j]``, the cell of displacement ``d`` at point ``j - o_k``.
    Equal offsets (on grids with an axis of 1 or 2 points) hold disjoint entries and are
    summed."""
    n = math.prod(grid)
    rows: dict[int, np.ndarray] = {}
    for d in displacements(len(grid)):
        if not live(d, grid):
            continue
        offset = flat_offset(d, grid)
        row = rows.setdefault(offset, np.zeros(n, dtype))
        if d in cells:
            row += by_rows(np.asarray(cells[d]).reshape(-1), -offset, np)
    offsets = tuple(sorted(rows))
    return DiaParts(np.stack([rows[offset] for offset in offsets]), offsets, (n, n))


def host_setup(
    data: np.ndarray, offsets: tuple[int, ...], grid: Grid, plan: Plan
) -> tuple[list[DiaParts], list[np.ndarray], list[np.ndarray]]:
    """The hierarchy of one concrete matrix (``data`` ``(n_diags, n)`` on the host),
    with NumPy: the coarse operators (levels 1 to the coarsest), and the inverse
    diagonals and Gershgorin bounds of every level but the coarsest.

    The same arrays as :func:`setup` (to rounding), without compiling a program of the
    grid's sizes: every level's Galerkin product on its cells (:func:`galerkin_cells`),
    where the compiled setup probes the coarse levels to keep its program small.
    """
    n = math.prod(grid)
    dim = len(grid)
    cells = cells_of(DiaParts(data, offsets, (n, n)), grid, np)
    operators, inverses, bounds = [], [], []
    for axes in plan:
        center = cells.get((0,) * dim, np.zeros(grid, data.dtype))
        with np.errstate(divide="ignore", invalid="ignore"):
            inverse, rho = smoothing_data(
                center.reshape(-1), row_sums(list(cells.values()), np).reshape(-1), np
            )
        inverses.append(inverse)
        bounds.append(rho)
        for axis in axes:
            cells = galerkin_cells(cells, grid, axis, np)
            grid = coarse_grid(grid, (axis,))
        operators.append(dia_of_cells(cells, grid, data.dtype))
    return operators, inverses, bounds


def ilu_smoother(A: DiaParts, grid: StaticGrid) -> ilu.IncompleteFactor:
    """A level's ILU(0) for the ``"ilu"`` smoother: exact on CPU, Chow–Patel's sweeps
    and solves by hyperplanes elsewhere (see :mod:`jaxdia._kernels.ilu_primitives`)."""
    factor, _ = ilu.factorize(
        A,
        kind="ilu",
        method="auto",
        sweeps=ilu.DEFAULT_SWEEPS,
        grid=grid,
        weights=wavefront_weights(A.offsets, grid),
    )
    return factor


#: The largest coarsest level: its direct solve is a banded LU, whose band is the
#: coarsest grid's last axis (2-D) or last two axes (3-D) wide, so its cost grows faster
#: than the level (``n b^2`` to factor, ``n b`` per cycle for band ``b``).
MAX_COARSE = 4096

#: With ``max_coarse=None`` on CPU a level is coarse enough when ``n b^2`` (``n``
#: unknowns, ``b`` the lower band width of its ``3^dim``-point stencil) is at most this:
#: the factorization of a 2-D grid's 64 x 64 level then costs about what a few products
#: with a 1000^2 fine level do, and each level not made is a piece less to compile
#: (benchmarks/README.md, compile time of the solvers); a 3-D grid's up to 11^3.
COARSE_WORK = 2**25


#: With ``max_coarse=None``, a finest level of at most this many unknowns is solved
#: directly; a larger one is coarsened at least once (a hierarchy, not a direct solve).
SMALL_GRID = 500


def coarse_enough(grid: Grid, max_coarse: int | None, finest: bool) -> bool:
    """Whether a level on ``grid`` (the ``finest`` or a coarse one) is solved directly:
    at most ``max_coarse`` unknowns; for None, at most :data:`SMALL_GRID`, or, for a
    coarse level, at most :data:`MAX_COARSE` and :data:`COARSE_WORK` to factor."""
    n = math.prod(grid)
    if max_coarse is not None or n <= SMALL_GRID:
        return n <= (max_coarse or SMALL_GRID)
    width = flat_offset((1,) * len(grid), grid)  # the stencil's lower band width
    return not finest and n <= MAX_COARSE and n * width**2 <= COARSE_WORK


def full_plan(grid: Grid, max_coarse: int | None, max_levels: int) -> Plan:
    """Coarsen every axis of 2 points or more until the level is coarse enough
    (:func:`coarse_enough`) or ``max_levels`` levels are made."""
    plan: list[tuple[int, ...]] = []
    while not coarse_enough(grid, max_coarse, not plan) and len(plan) + 1 < max_levels:
        axes = tuple(axis for axis, n in enumerate(grid) if n >= 2)
        if not axes:
            break
        plan.append(axes)
        grid = coarse_grid(grid, axes)
    return tuple(plan)


#: ``"auto"`` coarsening coarsens the axes whose coupling is at least this fraction of the
#: strongest (semi-coarsening along strongly coupled axes, where point smoothers leave
#: errors that are smooth along them only).
STRONG_AXIS = 0.5


def auto_plan(
    data: np.ndarray,
    offsets: tuple[int, ...],
    grid: Grid,
    max_coarse: int | None,
    max_levels: int,
) -> Plan:
    """Semi-coarsening: at each level, the axes with :data:`STRONG_AXIS` of the strongest
    coupling (:func:`axis_strengths`), on the host from concrete ``data`` (``(batch,
    n_diags, n)``: the strengths are summed over the batch). Where no axis has a positive
    coupling (a coarse level of few points, a diagonal matrix, NaN), every axis of 2 points
    or more is coarsened, so that each level is smaller than the one before."""
    n = math.prod(grid)
    dim = len(grid)
    stencils = [cells_of(DiaParts(values, offsets, (n, n)), grid, np) for values in data]
    plan: list[tuple[int, ...]] = []
    while not coarse_enough(grid, max_coarse, not plan) and len(plan) + 1 < max_levels:
        coarsenable = [axis for axis, size in enumerate(grid) if size >= 2]
        if not coarsenable:
            break
        strengths = np.sum([axis_strengths(cells, dim) for cells in stencils], axis=0)
        strongest = max(strengths[axis] for axis in coarsenable)
        axes = tuple(a for a in coarsenable if strengths[a] >= STRONG_AXIS * strongest)
        if not strongest > 0:  # no positive coupling to follow (or NaN): coarsen them all
            axes = tuple(coarsenable)
        plan.append(axes)
        for axis in axes:
            stencils = [galerkin_cells(cells, grid, axis, np) for cells in stencils]
            grid = coarse_grid(grid, (axis,))
    return tuple(plan)


def level_product(A: DiaParts) -> Callable[[Array], Array]:
    """``v -> A @ v`` for one level's matrix and a vector: the ``dia_spmm`` primitive,
    or on CPU for a small level with many diagonals the loop over them."""
    if _dispatch.loops_level_product(A.shape[0], len(A.offsets)):
        return looped_matvec(A)
    return matvec(A)


def vcycle(h: Hierarchy, b: Array) -> Array:
    """One V-cycle for ``A x = b`` from ``x = 0``, for one matrix and a vector ``b``."""
    return _cycle(h, 0, b)


def _cycle(h: Hierarchy, level: int, b: Array) -> Array:
    if level == len(h.plan):
        return coarse_solve(h.operators[-1], h.coarse_lu, b)
    A = h.operators[level]
    inverse, rho = h.inverse_diagonals[level], h.bounds[level]
    grid, axes, coarse = h.grids[level], h.plan[level], h.grids[level + 1]
    dim = len(grid)

    def smoothing(x: Array | None, residual: bool) -> tuple[Array, Array | None]:
        if h.smoother == "ilu":  # steps x += (L U)^-1 (b - A x) with the level's ILU(0)
            precondition = functools.partial(ilu.apply, h.factors[level])
            return jacobi_steps(matvec(A), precondition, b, x, jnp.asarray(1.0), h.sweeps, residual)
        return smooth(h.smoother, h.sweeps, dim, level_product(A), inverse, rho, b, x, residual)

    x, r = smoothing(None, residual=True)
    assert r is not None
    correction = _cycle(h, level + 1, restrict(r.reshape(grid), axes).reshape(-1))
    x = x + interpolate(correction.reshape(coarse), axes, grid).reshape(-1)
    return smoothing(x, residual=False)[0]
