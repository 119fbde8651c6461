"""Geometric multigrid on a row-sharded matrix: the large levels split over the devices,
the small ones gathered once and solved on every device.

A :class:`jaxdia.ShardedDiaMatrix` on ``P`` devices splits its rows, the grid's points in
C order, into ``P`` equal blocks: with ``grid[0]`` a multiple of ``P`` each device holds
``m = grid[0] / P`` whole planes of the grid (slowest axis, axis 0). The hierarchy of
:mod:`jaxdia._linalg.multigrid_hierarchy` keeps that layout while it can:

* Coarsening axis 0 keeps coarse plane ``I`` at fine plane ``2 I + 1``. When ``m`` is
  even, the coarse planes of device ``p``'s fine planes are ``[p m / 2, (p + 1) m / 2)``:
  the coarse level is split the same way, ``m / 2`` planes each. Restriction then needs
  one fine plane from the next device, interpolation one coarse plane from the previous
  one (:func:`restrict` and :func:`interpolate`: one ``ppermute`` each). Coarsening the
  other axes is local.
* Smoothing is the level's sharded product (halo rows from both neighbours) and
  elementwise updates; the Galerkin operator ``R A P`` is probed as on one device
  (:func:`jaxdia._linalg.multigrid_hierarchy.probe`), through the sharded transfers and a sharded
  product with ``3^dim`` columns, and turned into DIA diagonals with one plane of rows
  from each neighbour (:func:`coarse_data`).

The finest level is sharded; a coarser one stays sharded (the rule
:func:`sharded_levels` applies) while it has at least :data:`MIN_PLANES` planes and
``gather_below`` unknowns per device, is not the coarsest, and the level above it
coarsened into it with the shards aligned (``m`` even, or axis 0 not coarsened). The
first level that fails is *gathered*: its operator is all-gathered once in the setup,
its hierarchy (down to the direct solve of the coarsest level) is built and applied on
every device, replicated, as on one device. A V-cycle then moves, per sharded level, the
halos of its products and one plane per transfer, plus one all-gather of the gathered
level's residual (its correction comes back as each device's own slice: no
communication).

When the last sharded level has an odd ``m`` and coarsens axis 0, its coarse planes are
no blocks of the devices' (they own ``(m - 1) / 2`` and ``(m + 1) / 2`` in turn,
:func:`owned_planes`), so the transfer onto the gathered level restricts on each device
the coarse planes centred on its own fine planes (one plane from each neighbour,
:func:`restrict_chunk`) and all-gathers them; each device interpolates its own fine
planes from the replicated correction (:func:`scatter_interpolate`), and the Galerkin
operator is probed through the same transfers (:func:`gather_probe`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._checks import as_array
from .._matrix import DiaMatrix
from .._parts import DiaParts
from .._pytree import Immutable
from .._shard import ShardedDiaMatrix, in_context, place, shard
from .._sharded_products import halos
from .._sharding import explicit_spec, mesh_of
from .._typing import ArrayLike, DTypeLike, Grid
from . import multigrid_hierarchy, stencil
from .deep_halo import DeepHaloMatrix, apply, widen
from .multigrid_hierarchy import Plan
from .smoothers import smooth, smoothing_data

#: A sharded level keeps at least this many grid planes per device: its stencil's halo
#: (up to one plane and one line) then comes from the neighbours only.
MIN_PLANES = 2

#: The default ``gather_below``: a level with fewer unknowns per device is gathered.
GATHER_BELOW = 4096


def aligned(grid: Grid, axes: Sequence[int], shards: int) -> bool:
    """Whether coarsening ``grid`` along ``axes`` keeps the shards aligned: axis 0 is not
    coarsened, or each of the ``shards`` devices holds an even number of its planes (the
    coarse planes of a device's fine ones are then a block of the coarse grid's)."""
    return 0 not in axes or (grid[0] // shards) % 2 == 0


def sharded_levels(grids: Sequence[Grid], plan: Plan, shards: int, gather_below: int) -> int:
    """How many levels, from the finest, stay split over ``shards`` devices.

    Level 0 always is (``grid[0]`` a multiple of ``shards``, checked by the caller).
    Level ``l`` after it is sharded when it is not the coarsest, the level before it is
    sharded and coarsens into it with the shards aligned (:func:`aligned`), and it keeps
    :data:`MIN_PLANES` planes and ``gather_below`` unknowns per device. The last sharded
    level restricts onto the first gathered one through :func:`restrict` and an
    all-gather when it is aligned, else through :func:`restrict_chunk` and an all-gather
    (odd planes per device).
    """

    def planes(level: int) -> int:
        return grids[level][0] // shards

    gathered = 1
    while (
        gathered < len(plan)
        and aligned(grids[gathered - 1], plan[gathered - 1], shards)
        and planes(gathered) >= MIN_PLANES
        and math.prod(grids[gathered]) // shards >= gather_below
    ):
        gathered += 1
    return gathered


def _manual(
    local: Callable[..., Array],
    mesh: Mesh,
    axis: Hashable,
    in_specs: PartitionSpec | tuple[PartitionSpec, ...],
    out_specs: PartitionSpec | tuple[PartitionSpec, ...],
    check_vma: bool = True,
) -> Callable[..., Array]:
    return jax.shard_map(
        local,
        mesh=in_context(mesh),
        in_specs=in_specs,
        out_specs=out_specs,
        axis_names={axis},
        check_vma=check_vma,
    )


#: The replicated levels run in a ``shard_map`` without JAX's checks of which values vary
#: over the devices: after the all-gather every value there is the same on each device
#: (JAX types it as varying), and the one-device hierarchy's kernels (the coarsest
#: level's banded solve, the products' loops) start their loops from constants, which
#: those checks would have to be told vary too.
_REPLICATED = {"check_vma": False}


def restrict(r: Array, grid: Grid, axes: Sequence[int], mesh: Mesh, axis: Hashable) -> Array:
    """``R r`` for ``r`` ``(N, ...)`` sharded over ``axis`` (whole planes of ``grid`` per
    device): the coarse level sharded the same way. Coarsening axis 0 reads one plane
    from the next device."""
    shards = int(mesh.shape[axis])
    planes = grid[0] // shards

    def local(block: Array) -> Array:
        trailing = block.shape[1:]
        x = block.reshape(planes, *grid[1:], *trailing)
        if 0 in axes:  # coarse planes 2I + 1 of this device's even count read plane 2I + 2
            _, after = halos(x, 0, 1, axis, shards, dim=0)
            x = jnp.concatenate([x, *after])
        return multigrid_hierarchy.restrict(x, axes).reshape(-1, *trailing)

    spec = PartitionSpec(axis)
    return _manual(local, mesh, axis, spec, spec)(r)


def interpolate(c: Array, grid: Grid, axes: Sequence[int], mesh: Mesh, axis: Hashable) -> Array:
    """``P c`` onto ``grid`` for ``c`` sharded over ``axis`` as :func:`restrict` leaves it.
    Coarsening axis 0, the first fine plane of a device (even, ``2 I``) takes the mean of
    the previous device's last coarse plane and its own first."""
    shards = int(mesh.shape[axis])
    planes = grid[0] // shards
    coarse = multigrid_hierarchy.coarse_grid(grid, axes)
    coarse_planes = coarse[0] // shards

    def local(block: Array) -> Array:
        trailing = block.shape[1:]
        x = block.reshape(coarse_planes, *coarse[1:], *trailing)
        if 0 not in axes:
            return multigrid_hierarchy.interpolate(x, axes, (planes, *grid[1:])).reshape(
                -1, *trailing
            )
        before, _ = halos(x, 1, 0, axis, shards, dim=0)
        # Coarse planes [-1, planes / 2) interpolate to fine planes [-2, planes).
        x = jnp.concatenate([*before, x])
        fine = multigrid_hierarchy.interpolate(x, axes, (planes + 2, *grid[1:]))[2:]
        return fine.reshape(-1, *trailing)

    spec = PartitionSpec(axis)
    return _manual(local, mesh, axis, spec, spec)(c)


def probe(A: ShardedDiaMatrix, grid: Grid, axes: Sequence[int]) -> Array:
    """:func:`jaxdia._linalg.multigrid_hierarchy.probe` on a sharded level: the rows ``(N_c,
    3^dim)`` of ``R A P`` by colour, sharded over ``A.axis``."""
    mesh, axis = A.mesh, A.axis
    shards = A.shards
    coarse = multigrid_hierarchy.coarse_grid(grid, axes)
    coarse_planes = coarse[0] // shards
    width = 3 ** len(grid)

    def probes(block: Array) -> Array:  # this device's coarse points, one-hot by colour
        first = lax.axis_index(axis) * coarse_planes
        colours = stencil.colour((coarse_planes, *coarse[1:]), first)
        one_hot = colours[..., None] == jnp.arange(width, dtype=np.int32)
        return one_hot.astype(block.dtype).reshape(-1, width)

    spec = PartitionSpec(axis)
    anchor = jnp.zeros((math.prod(coarse),), A.dtype)  # gives probes its layout and dtype
    coloured = _manual(probes, mesh, axis, spec, spec)(place(anchor, mesh, spec))
    fine = interpolate(coloured, grid, axes, mesh, axis)
    return restrict(A @ fine, grid, axes, mesh, axis)


def owned_planes(grid: Grid, shards: int) -> list[range]:
    """The coarse planes that each device's fine planes restrict to when axis 0 of
    ``grid`` is coarsened: those centred (on fine plane ``2 I + 1``) on its own planes
    ``[p m, p m + m)``, ``m = grid[0] / shards``. For an odd ``m`` the devices own
    ``(m - 1) / 2`` and ``(m + 1) / 2`` of them in turn, so the coarse level cannot be
    split in equal blocks: it is gathered (:func:`restrict_chunk`)."""
    m = grid[0] // shards
    return [range(p * m // 2, (p + 1) * m // 2) for p in range(shards)]


def restrict_chunk(
    block: Array, grid: Grid, axes: Sequence[int], axis: Hashable, shards: int
) -> Array:
    """Inside ``shard_map``: the coarse planes of ``R r`` that this device's ``block`` of
    ``r`` (its planes of ``grid``, any number ``m`` per device; axis 0 coarsened) owns
    (:func:`owned_planes`), padded to ``ceil(m / 2)`` planes; :func:`join_chunks` joins the
    devices' chunks. One plane comes in from each neighbour (a coarse plane centred on a
    device's first or last plane reads the plane beyond it)."""
    m = grid[0] // shards
    trailing = block.shape[1:]
    x = block.reshape(m, *grid[1:], *trailing)
    before, after = halos(x, 1, 1, axis, shards, dim=0)
    # Fine planes [p m - 1, p m + m + 1), the last one zero (read only by a padding plane).
    x = jnp.concatenate([*before, x, *after, jnp.zeros_like(x[:1])])
    # The device's first coarse plane is centred on fine plane p m (p m odd) or p m + 1
    # (even): the window starts one plane before it and restricts to ceil(m / 2) coarse
    # planes, the last of which is padding where the device owns fewer.
    width = -(-m // 2)
    start = 1 - lax.axis_index(axis) * m % 2
    window = lax.dynamic_slice_in_dim(x, start, 2 * width + 1, axis=0)
    return multigrid_hierarchy.restrict(window, axes).reshape(-1, *trailing)


def join_chunks(chunks: Array, grid: Grid, axes: Sequence[int], shards: int) -> Array:
    """The whole coarse ``R r`` from the devices' :func:`restrict_chunk` results, joined
    in device order (an all-gather's result), padding planes dropped."""
    width = -(-(grid[0] // shards) // 2)
    plane = math.prod(multigrid_hierarchy.coarse_grid(grid, axes)[1:])
    owned = owned_planes(grid, shards)
    keep = np.concatenate([p * width + np.arange(len(r)) for p, r in enumerate(owned)])
    trailing = chunks.shape[1:]
    planes = chunks.reshape(shards * width, plane, *trailing)
    return planes[keep].reshape(-1, *trailing)


def scatter_interpolate(
    xc: Array, grid: Grid, axes: Sequence[int], axis: Hashable, shards: int
) -> Array:
    """Inside ``shard_map``: this device's planes of ``P xc`` on ``grid`` (its block, as
    the vectors are split) from the whole coarse ``xc`` (the same on every device; axis 0
    coarsened): no communication."""
    m = grid[0] // shards
    coarse = multigrid_hierarchy.coarse_grid(grid, axes)
    trailing = xc.shape[1:]
    x = xc.reshape(*coarse, *trailing)
    zero = jnp.zeros_like(x[:1])
    x = jnp.concatenate([zero, x, zero])  # coarse planes [-1, coarse[0]]
    # Coarse planes [j, j + count) interpolate to fine planes [2 j, 2 j + 2 count), right
    # from 2 j + 1 on (2 j also reads coarse plane j - 1); with j = (p m - 1) // 2 this
    # device's planes start at 2 j + 1 or 2 j + 2.
    count = (m + 3) // 2
    first = lax.axis_index(axis) * m
    j = (first - 1) // 2
    window = lax.dynamic_slice_in_dim(x, j + 1, count, axis=0)
    fine = multigrid_hierarchy.interpolate(window, axes, (2 * count, *grid[1:]))
    return lax.dynamic_slice_in_dim(fine, first - 2 * j, m, axis=0).reshape(-1, *trailing)


def gather_probe(A: ShardedDiaMatrix, grid: Grid, axes: Sequence[int]) -> Array:
    """:func:`jaxdia._linalg.multigrid_hierarchy.probe` across a transfer onto a gathered level
    (:func:`restrict_chunk`): the rows ``(N_c, 3^dim)`` of ``R A P`` by colour,
    replicated."""
    mesh, axis, shards = A.mesh, A.axis, A.shards
    coarse = multigrid_hierarchy.coarse_grid(grid, axes)
    width = 3 ** len(grid)
    colours = stencil.colour(coarse)[..., None] == jnp.arange(width, dtype=np.int32)
    probes = place(colours.astype(A.dtype).reshape(-1, width), mesh, PartitionSpec())
    spec = PartitionSpec(axis)

    def fine(probes: Array) -> Array:
        return scatter_interpolate(probes, grid, axes, axis, shards)

    def chunk(block: Array) -> Array:
        return restrict_chunk(block, grid, axes, axis, shards)

    product = A @ _manual(fine, mesh, axis, PartitionSpec(), spec)(probes)
    chunks = _manual(chunk, mesh, axis, spec, spec)(product)
    return join_chunks(place(chunks, mesh, PartitionSpec()), grid, axes, shards)


def coarse_data(rows: Array, coarse: Grid, mesh: Mesh, axis: Hashable) -> tuple[Array, tuple]:
    """:func:`jaxdia._linalg.stencil.dia_from_rows` (by colour) for rows sharded over
    ``axis``: ``(data, offsets)``, ``data`` ``(n_diags, N_c)`` with its columns sharded
    like the rows. Each device reads one plane of rows from each neighbour."""
    shards = int(mesh.shape[axis])
    planes = coarse[0] // shards
    plane = math.prod(coarse[1:])
    extended = (planes + 2, *coarse[1:])
    offsets = tuple(sorted(stencil.stencil_offsets(extended)))

    def local(block: Array) -> Array:
        before, after = halos(block, plane, plane, axis, shards, dim=0)
        rows = jnp.concatenate([*before, block, *after])
        first = lax.axis_index(axis) * planes - 1
        parts = stencil.dia_from_rows(rows, extended, by_colour=True, first=first)
        assert parts.offsets == offsets
        return parts.data[:, plane : plane + planes * plane]

    data = _manual(local, mesh, axis, PartitionSpec(axis), PartitionSpec(None, axis))(rows)
    return data, offsets


@jax.tree_util.register_pytree_with_keys_class
class ShardedHierarchy(Immutable):
    """A hierarchy whose first ``gathered`` levels are sharded.

    Leaves: ``operators`` (a :class:`jaxdia.ShardedDiaMatrix` per sharded level),
    their ``inverse_diagonals`` (sharded like the vectors) and Gershgorin ``bounds``, and
    ``local``, the :class:`jaxdia._linalg.multigrid_hierarchy.Hierarchy` of the gathered levels
    (replicated); ``deep``, empty or each sharded level widened to ``sweeps`` halos
    (smoothing after one exchange, :mod:`jaxdia._linalg.deep_halo`). Static: every
    level's ``grids`` and the ``plan``.
    """

    __slots__ = ("operators", "inverse_diagonals", "bounds", "local", "deep", "grids", "plan")
    _leaves = ("operators", "inverse_diagonals", "bounds", "local", "deep")
    _static = ("grids", "plan")
    operators: tuple[ShardedDiaMatrix, ...]
    inverse_diagonals: tuple[Array, ...]
    bounds: tuple[Array, ...]
    local: multigrid_hierarchy.Hierarchy
    deep: tuple[DeepHaloMatrix, ...]
    grids: tuple[Grid, ...]
    plan: Plan

    @property
    def gathered(self) -> int:
        """The index of the first gathered level."""
        return len(self.operators)


@functools.partial(
    jax.jit, static_argnames=("grids", "plan", "gathered", "smoother", "sweeps", "deep_halo")
)
def setup(
    A: ShardedDiaMatrix,
    *,
    grids: tuple,
    plan: Plan,
    gathered: int,
    smoother: str,
    sweeps: int,
    deep_halo: bool,
) -> ShardedHierarchy:
    """The hierarchy of ``A`` as one compiled call: ``gathered`` sharded levels, the
    rest replicated (see the module's docstring)."""
    operators, inverses, bounds = [A], [], []
    mesh, axis = A.mesh, A.axis
    local_finest = None
    for level in range(gathered):
        S = operators[level]
        diagonal = S.diagonal()
        inverse, rho = smoothing_data(diagonal, abs(S) @ jnp.ones_like(diagonal))
        inverses.append(inverse)
        bounds.append(rho)
        grid, axes, coarse = grids[level], plan[level], grids[level + 1]
        n = math.prod(coarse)
        if level + 1 == gathered and not aligned(grid, axes, S.shards):
            # Restricted onto every device: the rest of the hierarchy is built on each.
            rows = gather_probe(S, grid, axes)
            local_finest = stencil.dia_from_rows(rows, coarse, by_colour=True)
            continue
        data, offsets = coarse_data(probe(S, grid, axes), coarse, mesh, axis)
        if level + 1 < gathered:
            operators.append(shard(DiaMatrix(data, offsets, (n, n)), mesh, axis))
        else:  # gathered once, here; the rest of the hierarchy is built on every device
            local_finest = DiaParts(place(data, mesh, PartitionSpec()), offsets, (n, n))
    assert local_finest is not None
    local = multigrid_hierarchy.setup(
        local_finest, grids[gathered], plan[gathered:], smoother, sweeps, by_cells=False
    )
    deep = tuple(widen(S, sweeps) for S in operators) if deep_halo else ()
    return ShardedHierarchy._make(
        tuple(operators), tuple(inverses), tuple(bounds), local, deep, tuple(grids), plan
    )


def vcycle(h: ShardedHierarchy, b: Array) -> Array:
    """One V-cycle for ``A x = b`` from ``x = 0``, ``b`` of length ``N`` sharded like the
    finest level's vectors."""
    return _cycle(h, 0, b)


def _cycle(h: ShardedHierarchy, level: int, b: Array) -> Array:
    if level == h.gathered:
        return _gathered_cycle(h, b)
    A = h.operators[level]
    local = h.local
    inverse, rho = h.inverse_diagonals[level], h.bounds[level]
    grid, axes = h.grids[level], h.plan[level]
    dim = len(grid)

    kind, sweeps = local.smoother, local.sweeps

    def presmooth(product, inverse, rho, b) -> tuple[Array, Array]:
        x, r = smooth(kind, sweeps, dim, product, inverse, rho, b, None, residual=True)
        assert r is not None
        return x, r

    def postsmooth(product, inverse, rho, b, x):
        return smooth(kind, sweeps, dim, product, inverse, rho, b, x, residual=False)[:1]

    if h.deep:  # each smoothing's products after one exchange of its input's deep halos
        x, r = apply(h.deep[level], presmooth, (b,), (rho,))
    else:
        x, r = presmooth(A.__matmul__, inverse, rho, b)
    if level + 1 == h.gathered and not aligned(grid, axes, A.shards):
        x = x + _gathering_cycle(h, r)
    else:
        coarse_b = restrict(r, grid, axes, A.mesh, A.axis)
        correction = _cycle(h, level + 1, coarse_b)
        x = x + interpolate(correction, grid, axes, A.mesh, A.axis)
    if h.deep:
        return apply(h.deep[level], postsmooth, (b, x), (rho,))[0]
    return postsmooth(A.__matmul__, inverse, rho, b, x)[0]


def _gathered_cycle(h: ShardedHierarchy, b: Array) -> Array:
    """The replicated levels' V-cycle on every device: the one all-gather of a cycle in,
    this device's slice of the correction out."""
    finest = h.operators[-1]
    mesh, axis = finest.mesh, finest.axis
    rows = b.shape[0] // finest.shards

    def local(block: Array, hierarchy: multigrid_hierarchy.Hierarchy) -> Array:
        whole = lax.all_gather(block, axis, tiled=True)
        x = multigrid_hierarchy.vcycle(hierarchy, whole)
        return lax.dynamic_slice_in_dim(x, lax.axis_index(axis) * rows, rows)

    spec = PartitionSpec(axis)
    return _manual(local, mesh, axis, (spec, PartitionSpec()), spec, **_REPLICATED)(b, h.local)


def _gathering_cycle(h: ShardedHierarchy, r: Array) -> Array:
    """The correction of the last sharded level from the replicated levels, where its
    restriction cannot keep the shards aligned (an odd number of planes per device): the
    residual's coarse planes are restricted on the devices that own them and gathered
    (the one all-gather of a cycle), the replicated V-cycle runs on every device, and
    each interpolates its own planes of the correction."""
    last = h.operators[-1]
    mesh, axis, shards = last.mesh, last.axis, last.shards
    grid, axes = h.grids[h.gathered - 1], h.plan[h.gathered - 1]

    def local(block: Array, hierarchy: multigrid_hierarchy.Hierarchy) -> Array:
        chunk = restrict_chunk(block, grid, axes, axis, shards)
        whole = join_chunks(lax.all_gather(chunk, axis, tiled=True), grid, axes, shards)
        correction = multigrid_hierarchy.vcycle(hierarchy, whole)
        return scatter_interpolate(correction, grid, axes, axis, shards)

    spec = PartitionSpec(axis)
    return _manual(local, mesh, axis, (spec, PartitionSpec()), spec, **_REPLICATED)(r, h.local)


def sharded_operand(A: object) -> ShardedDiaMatrix | None:
    """``A`` as a :class:`jaxdia.ShardedDiaMatrix` when it is one, or a square unbatched
    DiaMatrix whose ``data`` columns are split over one mesh axis (by its type on
    ``Explicit`` axes, or a concrete array's ``NamedSharding``); else None."""
    if isinstance(A, ShardedDiaMatrix):
        return A
    if not isinstance(A, DiaMatrix) or A.batch_shape or A.shape[0] != A.shape[1]:
        return None
    columns = explicit_spec(A.data)[-1]
    if columns:
        mesh = mesh_of(A.data)
        if not isinstance(mesh, Mesh):
            concrete = jax.sharding.get_mesh()
            if concrete.empty or concrete.axis_names != mesh.axis_names:
                raise TypeError(
                    "multigrid: A's data is sharded over Explicit mesh axes, but no concrete "
                    "mesh is set; call it inside jax.set_mesh(mesh), or shard the matrix "
                    "with jaxdia.shard(A, mesh, axis)"
                )
            mesh = concrete
    else:
        sharding = getattr(A.data, "sharding", None)
        if not isinstance(sharding, NamedSharding) or len(sharding.spec) < 2:
            return None
        spec = sharding.spec[-1]
        columns = tuple(spec) if isinstance(spec, tuple) else (spec,) if spec else ()
        mesh = sharding.mesh
        if not columns or math.prod(int(mesh.shape[c]) for c in columns) == 1:
            return None
    assert isinstance(mesh, Mesh)
    if len(columns) != 1:
        raise ValueError(
            f"multigrid: A's data columns are split over mesh axes {columns}; a sharded "
            "multigrid splits the grid's planes over one axis: shard them over one"
        )
    return shard(A, mesh, columns[0])


@jax.tree_util.register_pytree_with_keys_class
class ShardedMultigrid(Immutable):
    """A multigrid V-cycle on a sharded matrix: what :func:`jaxdia.multigrid` returns for
    a :class:`jaxdia.ShardedDiaMatrix` (or a DiaMatrix whose columns are sharded).

    ``M(v)`` is one V-cycle for ``A x = v`` from zero, for ``v`` of length
    ``padded_size`` sharded like the matrix's vectors (``S.shard_vector``), or a stack of
    them (leading dims); the result is sharded the same way. The first
    ``sharded_levels`` levels are split over the devices; the rest were gathered once, in
    the setup, and run on every device (see :func:`jaxdia.multigrid` for the rule). It is
    a pytree, like :class:`jaxdia.Multigrid`.

    Attributes (read-only):
      levels: each level's operator: a ShardedDiaMatrix for the sharded levels, then
        DiaMatrix (replicated) for the gathered ones.
      sharded_levels: how many levels are sharded.
      grids, coarsening, smoother, sweeps, shape, dtype: as for :class:`jaxdia.Multigrid`.
      mesh, axis: the device mesh and the axis the sharded levels' rows are split over.

    Example:
      >>> import jax, jax.numpy as jnp, numpy as np, scipy.sparse as sp, jaxdia
      >>> T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(32, 32))
      >>> A = jaxdia.DiaMatrix.from_scipy(sp.kronsum(T, T).astype("float32"))
      >>> S = jaxdia.shard(A, jax.make_mesh((1,), ("rows",)), "rows")
      >>> M = jaxdia.multigrid(S, (32, 32), max_coarse=64, gather_below=64)
      >>> M.sharded_levels, M.grids
      (2, ((32, 32), (16, 16), (8, 8)))
      >>> x, info = jaxdia.cg(S, S.shard_vector(jnp.ones(32 * 32)), M=M, rtol=1e-4)
      >>> bool(info.converged), int(info.iterations) < 10
      (True, True)
    """

    # __weakref__: a preconditioner is a function, which jax.jit(M) refers to weakly.
    __slots__ = ("_hierarchy", "__weakref__")
    _leaves = ("_hierarchy",)
    _hierarchy: ShardedHierarchy

    def __init__(self, hierarchy: ShardedHierarchy):
        self._assign(hierarchy)

    @property
    def levels(self) -> tuple[ShardedDiaMatrix | DiaMatrix, ...]:
        h = self._hierarchy
        local = tuple(DiaMatrix._wrap(parts) for parts in h.local.operators)
        return (*h.operators, *local)

    @property
    def sharded_levels(self) -> int:
        return self._hierarchy.gathered

    @property
    def grids(self) -> tuple[Grid, ...]:
        return self._hierarchy.grids

    @property
    def coarsening(self) -> Plan:
        return self._hierarchy.plan

    @property
    def smoother(self) -> str:
        return self._hierarchy.local.smoother

    @property
    def sweeps(self) -> int:
        return self._hierarchy.local.sweeps

    @property
    def shape(self) -> tuple[int, int]:
        return self._hierarchy.operators[0].shape

    @property
    def dtype(self) -> np.dtype:
        return self._hierarchy.operators[0].dtype

    @property
    def mesh(self) -> Mesh:
        return self._hierarchy.operators[0].mesh

    @property
    def axis(self) -> Hashable:
        return self._hierarchy.operators[0].axis

    def __call__(self, v: ArrayLike) -> Array:
        v = as_array(v, "ShardedMultigrid: v")
        N = self._hierarchy.operators[0].padded_size
        if v.ndim == 0 or v.shape[-1] != N:
            raise ValueError(
                f"ShardedMultigrid: v must have shape ({N},) or (..., {N}) (the sharded "
                f"vectors of the finest level, S.shard_vector(v)), got shape {v.shape}"
            )
        dtype = jnp.result_type(self.dtype, v.dtype)
        if not jnp.issubdtype(dtype, jnp.inexact):
            dtype = self.dtype
        return _apply(self._hierarchy, v).astype(dtype)

    def __repr__(self) -> str:
        first = self._hierarchy.operators[0]
        lines = [
            f"ShardedMultigrid: {len(self.grids)} levels ({self.sharded_levels} sharded over "
            f"{first.shards} devices along {self.axis!r}), {self.smoother} smoother "
            f"({self.sweeps} sweeps), dtype {self.dtype.name}",
            f"  {'level':>5}  {'grid':<18}{'unknowns':>12}  {'layout':<11}coarsened",
        ]
        for index, grid in enumerate(self.grids):
            layout = "sharded" if index < self.sharded_levels else "replicated"
            if index < len(self.coarsening):
                action = f"axes ({', '.join(str(a) for a in self.coarsening[index])})"
            else:
                action = "direct solve"
            lines.append(
                f"  {index:>5}  {str(grid):<18}{math.prod(grid):>12,}  {layout:<11}{action}"
            )
        return "\n".join(lines)


@jax.jit
def _apply(h: ShardedHierarchy, v: Array) -> Array:
    """The V-cycle on ``v`` ``(..., N)``: stacks and the real and imaginary parts of a
    complex ``v`` are mapped over (the cycle's coefficients are real)."""
    dtype = h.operators[0].dtype
    split_complex = jnp.iscomplexobj(v)
    parts = jnp.stack([v.real, v.imag]) if split_complex else v
    flat = parts.reshape(-1, parts.shape[-1]).astype(dtype)
    if flat.shape[0] == 1:
        out = vcycle(h, flat[0])[None]
    else:
        out = jax.vmap(functools.partial(vcycle, h))(flat)
    out = out.reshape(parts.shape)
    return lax.complex(out[0], out[1]) if split_complex else out


def build(
    A: ShardedDiaMatrix,
    grid: Grid,
    plan: Plan,
    smoother: str,
    sweeps: int,
    dtype: DTypeLike | None,
    gather_below: int,
    deep_halo: bool,
) -> ShardedMultigrid:
    """The :class:`ShardedMultigrid` of ``A`` (its options checked by the caller,
    :func:`jaxdia.multigrid`); raises a ValueError when the grid does not split into
    whole planes or there is nothing to coarsen."""
    shards = A.shards
    if grid[0] % shards:
        raise ValueError(
            f"multigrid: a sharded matrix's grid must split into whole planes of its slowest "
            f"axis: grid[0] = {grid[0]} is not a multiple of the {shards} devices along "
            f"{A.axis!r} (rows are split in C order, so axis 0 is the one split)"
        )
    if not plan:
        raise ValueError(
            "multigrid: the hierarchy has one level (nothing to coarsen); a sharded "
            "multigrid needs at least one coarsening step (lower max_coarse)"
        )
    grids = [grid]
    for axes in plan:
        grids.append(multigrid_hierarchy.coarse_grid(grids[-1], axes))
    gathered = sharded_levels(grids, plan, shards, gather_below)
    if dtype is not None and np.dtype(dtype) != A.dtype:
        A = jax.tree.map(lambda windows: windows.astype(dtype), A)
    hierarchy = setup(
        A,
        grids=tuple(grids),
        plan=plan,
        gathered=gathered,
        smoother=smoother,
        sweeps=sweeps,
        deep_halo=deep_halo,
    )
    return ShardedMultigrid(hierarchy)
