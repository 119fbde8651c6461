"""Row-sharded DIA products on a device mesh: :func:`shard` and :class:`ShardedDiaMatrix`.

A square ``n x n`` matrix is split into ``P`` blocks of ``L = ceil(n / P)`` consecutive
rows, one per device along one mesh axis (``n`` is padded to ``N = P * L`` with zero rows
and columns). Row ``i`` of ``A @ x`` needs ``x`` at columns ``i + offsets[k]``, so a
device holding rows ``[p L, p L + L)`` needs its own slice of ``x`` plus a *halo*: the
``lower = max(0, -min(offsets))`` rows before it and the ``upper = max(0, max(offsets))``
rows after it. Each product fetches exactly those rows from its neighbours with
``jax.lax.ppermute`` inside ``jax.shard_map`` (a halo wider than a shard is fetched from
as many neighbours as it spans), never all of ``x``: each device receives
``(lower + upper) * columns`` elements per product, whatever the number of devices.

Each device stores the columns of ``data`` (SciPy's layout: a data column is a matrix
column) that its halo-extended slice of ``x`` covers, ``[p L - lower, p L + L + upper)``.
With them its block of rows is the rectangular ``L x (lower + L + upper)`` DIA matrix
with offsets ``offsets + lower`` (all >= 0), so the local product is the ordinary
``dia_spmm`` primitive (the Pallas kernels on GPU/TPU) and inherits its JVP, transpose
and batching rules; ``ppermute`` transposes to the reverse permutation, so ``grad``,
``linear_transpose`` and the Krylov solvers work through the sharded product too.
When each halo comes from one neighbour (``lower, upper <= L``), the product with the
device's own rows of ``x`` is computed without waiting for the halos, which only add
terms to the first ``lower`` and last ``upper`` rows: XLA's scheduler may overlap that
product with the exchange.

Padding slots of ``data`` (outside the matrix) and the rows and columns added to reach
``N`` are stored as zeros when the matrix is sharded. Sharded vectors have length ``N``;
their padding rows must be zero (``shard_vector`` writes zeros, and products write zeros
there), which keeps padded vectors exact under any Krylov iteration.

Both mesh axis types work. On ``Explicit`` axes (``jax.make_mesh``'s default) a vector's
sharding is in its type, so ``S @ x`` checks it (and refuses rows split over another
axis rather than moving them); the ``shard_map`` is manual over the rows' axis and over
the Explicit axes splitting a block's columns, so each device multiplies its own columns.
JAX's Krylov solvers run inside ``jax.sharding.auto_axes`` there: the matrix then builds
its shardings on the region's mesh (the same devices, ``Auto`` axes).
"""

from __future__ import annotations

from collections.abc import Hashable

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
from jax.typing import ArrayLike

from ._geometry import band_widths, index_dtype, slot_indices
from ._kernels.primitives import spmm
from ._matrix import DiaMatrix, as_matrix
from ._pytree import Immutable
from ._sharded_products import halos
from ._sharding import explicit_spec, mesh_of, names_of, spec_entry


def _check_mesh_axis(mesh: object, axis: object) -> int:
    """Returns the size of mesh axis ``axis``, or raises saying what is wrong."""
    if not isinstance(mesh, Mesh):
        raise TypeError(
            f"mesh must be a jax.sharding.Mesh (e.g. jax.make_mesh((8,), ('rows',))), got "
            f"{type(mesh).__name__}"
        )
    if axis not in mesh.axis_names:
        raise ValueError(
            f"axis must be one of the mesh's axis names {mesh.axis_names}, got {axis!r}"
        )
    return int(mesh.shape[axis])


def in_context(mesh: Mesh) -> Mesh:
    """``mesh``, with the axis types of the mesh being traced under when that is the same
    mesh with other types: inside ``jax.sharding.auto_axes``, which makes ``Explicit``
    axes ``Auto`` for a region (the way to run JAX's Krylov solvers on them)."""
    context = jax.sharding.get_abstract_mesh()
    if (
        context.empty
        or context.axis_names != mesh.axis_names
        or context.axis_sizes != mesh.axis_sizes
        or context.axis_types == mesh.axis_types
        or not set(context.axis_types) <= {AxisType.Auto, AxisType.Explicit}
    ):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=context.axis_types)


def place(x: Array, mesh: Mesh, spec: PartitionSpec) -> Array:
    """``x`` laid out as ``spec`` on ``mesh`` says, eagerly or under a transformation.

    Eagerly that is a transfer (``device_put``). Traced, ``device_put`` does not constrain
    the layout on ``Auto`` mesh axes and ignores ``vmap``'s batch axis, so it is
    ``with_sharding_constraint`` there and ``reshard`` on ``Explicit`` axes (where the
    former only asserts).
    """
    sharding = NamedSharding(in_context(mesh), spec)
    if not isinstance(x, jax.core.Tracer):
        return jax.device_put(x, sharding)
    types = dict(zip(sharding.mesh.axis_names, sharding.mesh.axis_types))
    named = [name for entry in sharding.spec for name in names_of(entry) if name in types]
    if named:  # e.g. P("rows"): follow that axis's type
        explicit = all(types[name] == AxisType.Explicit for name in named)
    else:  # P(): replicated, which an Explicit axis anywhere must be told with reshard
        explicit = any(kind == AxisType.Explicit for kind in types.values())
    if explicit:
        spec = PartitionSpec(
            *(None if e is PartitionSpec.UNCONSTRAINED else e for e in sharding.spec)
        )
        return jax.sharding.reshard(x, NamedSharding(sharding.mesh, spec))
    return lax.with_sharding_constraint(x, sharding)


def _column_spec(x: ArrayLike, mesh: Mesh) -> object:
    """How the columns of an ``(N, c)`` block are to stay sharded: as ``x``'s type says on
    ``Explicit`` axes, as a concrete ``x`` on ``mesh`` is, else left to XLA on ``Auto``
    axes (``UNCONSTRAINED``) and replicated eagerly."""
    if isinstance(x, jax.core.Tracer):
        explicit = explicit_spec(x)[1]
        if explicit:
            return spec_entry(explicit)
        # UNCONSTRAINED needs an Auto axis; on Explicit ones the type says replicated.
        auto = AxisType.Auto in in_context(mesh).axis_types
        return PartitionSpec.UNCONSTRAINED if auto else None
    sharding = getattr(x, "sharding", None)
    if (
        isinstance(sharding, NamedSharding)
        and sharding.mesh.axis_names == mesh.axis_names
        and len(sharding.spec) > 1
    ):
        return sharding.spec[1]
    return None


@jax.tree_util.register_pytree_with_keys_class
class ShardedDiaMatrix(Immutable):
    """A square DIA matrix whose rows are split over one axis of a device mesh.

    Build it with :func:`shard`. ``S @ x`` multiplies a sharded vector (or ``(N, c)``
    block of columns) of length ``N = padded_size``, exchanging only the halo rows with
    the neighbouring devices; the result is sharded the same way. Use
    :meth:`shard_vector` to place a length-``n`` vector and :meth:`unshard_vector` to get
    one back. ``S`` has ``shape == (n, n)`` and ``@``, so it can be passed directly to
    ``jax.scipy.sparse.linalg.cg`` (and ``gmres``/``bicgstab``) with sharded vectors.

    It is a pytree whose only leaf, ``windows``, holds each device's columns of ``data``
    (shape ``(P, n_diags, lower + L + upper)``, sharded over the mesh axis); ``offsets``,
    ``shape``, ``mesh`` and ``axis`` are static aux data. To differentiate with respect to
    the matrix entries, differentiate through :func:`shard` (it is linear in ``A.data``).

    Attributes:
      offsets: the sorted offsets of the diagonals.
      shape: ``(n, n)``, the logical shape.
      mesh: the device mesh.
      axis: the name of the mesh axis the rows are split over.
      windows: the stored per-device data.

    Example:
      >>> import jax, jax.numpy as jnp, jaxdia
      >>> mesh = jax.make_mesh((1,), ("rows",))
      >>> S = jaxdia.shard(jaxdia.eye(4), mesh, "rows")
      >>> S.shape, S.offsets, S.axis
      ((4, 4), (0,), 'rows')
    """

    __slots__ = ("windows", "offsets", "shape", "mesh", "axis")
    _leaves = ("windows",)
    _static = ("offsets", "shape", "mesh", "axis")
    windows: Array
    offsets: tuple[int, ...]
    shape: tuple[int, int]
    mesh: Mesh
    axis: Hashable

    # ``np.ndarray @ S`` must not try to convert S.
    __array_ufunc__ = None

    def __init__(
        self,
        windows: Array,
        offsets: tuple[int, ...],
        shape: tuple[int, int],
        mesh: Mesh,
        axis: Hashable,
    ) -> None:
        # Internal: use ``shard``. Values are not validated here (pytree unflattening).
        self._assign(windows, offsets, shape, mesh, axis)

    # -- layout ----------------------------------------------------------------------------

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the stored data.

        Example:
          >>> import jax, jaxdia
          >>> jaxdia.shard(jaxdia.eye(4), jax.make_mesh((1,), ("rows",)), "rows").dtype
          dtype('float32')
        """
        return np.dtype(self.windows.dtype)

    @property
    def shards(self) -> int:
        """``P``, the number of devices along the mesh axis.

        Example:
          >>> import jax, jaxdia
          >>> S = jaxdia.shard(jaxdia.eye(5), jax.make_mesh((1,), ("rows",)), "rows")
          >>> S.shards, S.rows_per_shard, S.padded_size
          (1, 5, 5)
        """
        return int(self.mesh.shape[self.axis])

    @property
    def rows_per_shard(self) -> int:
        """``L = ceil(n / P)`` (at least 1): the rows each device holds.

        Example:
          >>> import jax, jaxdia
          >>> jaxdia.shard(jaxdia.eye(5), jax.make_mesh((1,), ("rows",)), "rows").rows_per_shard
          5
        """
        return max(1, -(-self.shape[0] // self.shards))

    @property
    def padded_size(self) -> int:
        """``N = P * L``: the length of sharded vectors (``n`` padded with zero rows).

        Example:
          >>> import jax, jaxdia
          >>> jaxdia.shard(jaxdia.eye(5), jax.make_mesh((1,), ("rows",)), "rows").padded_size
          5
        """
        return self.shards * self.rows_per_shard

    @property
    def halo(self) -> tuple[int, int]:
        """``(lower, upper)``: rows each product fetches from previous and next devices.

        Example:
          >>> import jax, jaxdia
          >>> A = jaxdia.diags([1.0, 1.0], offsets=[-2, 1], shape=(6, 6))
          >>> jaxdia.shard(A, jax.make_mesh((1,), ("rows",)), "rows").halo
          (2, 1)
        """
        return band_widths(self.offsets)

    @property
    def vector_sharding(self) -> NamedSharding:
        """The sharding of vectors and ``(N, c)`` blocks: rows split over ``axis``.

        Example:
          >>> import jax, jaxdia
          >>> S = jaxdia.shard(jaxdia.eye(4), jax.make_mesh((1,), ("rows",)), "rows")
          >>> S.vector_sharding.spec == jax.sharding.PartitionSpec("rows")
          True
        """
        return NamedSharding(self.mesh, PartitionSpec(self.axis))

    def __repr__(self) -> str:
        return (
            f"ShardedDiaMatrix(shape={self.shape}, dtype={self.dtype.name}, "
            f"offsets={self.offsets}, axis={self.axis!r}, shards={self.shards}, "
            f"halo={self.halo})"
        )

    # -- vectors ---------------------------------------------------------------------------

    def shard_vector(self, x: ArrayLike) -> Array:
        """Pads a length-``n`` vector (or ``(n, c)`` block) to ``N`` rows and shards it.

        Example:
          >>> import jax, jaxdia
          >>> mesh = jax.make_mesh((1,), ("rows",))
          >>> S = jaxdia.shard(jaxdia.eye(3), mesh, "rows")
          >>> S.shard_vector(jax.numpy.ones(3)).shape
          (3,)
        """
        x = jnp.asarray(x)
        n = self.shape[0]
        if x.ndim not in (1, 2) or x.shape[0] != n:
            raise ValueError(
                f"shard_vector expects a vector of shape ({n},) or a block ({n}, c), got "
                f"shape {x.shape}"
            )
        pad = [(0, self.padded_size - n)] + [(0, 0)] * (x.ndim - 1)
        return place(jnp.pad(x, pad), self.mesh, self._rows_spec(x))

    def _rows_spec(self, x: Array) -> PartitionSpec:
        """``vector_sharding``'s spec; an ``(N, c)`` block's columns keep their sharding."""
        if x.ndim == 1:
            return PartitionSpec(self.axis)
        return PartitionSpec(self.axis, _column_spec(x, self.mesh))

    def _check_vector(self, x: ArrayLike, what: str) -> None:
        """Raises a ValueError when ``x`` is sharded in a way ``S``'s vectors cannot be
        (``x`` is then neither moved nor gathered behind the caller's back)."""
        fix = "build it with S.shard_vector or place it with jax.device_put(x, S.vector_sharding)"
        mesh = self.mesh
        sharding = getattr(x, "sharding", None)  # a concrete array's
        devices = set(mesh.devices.flat)
        if isinstance(sharding, NamedSharding) and sharding.device_set != devices:
            raise ValueError(
                f"{what}: x lives on devices {sorted(d.id for d in sharding.device_set)}, "
                f"S on devices {sorted(d.id for d in devices)}; {fix}"
            )
        spec = explicit_spec(x)
        if not any(spec):
            return
        other = mesh_of(x)
        if (other.axis_names, other.axis_sizes) != (mesh.axis_names, mesh.axis_sizes):
            raise ValueError(
                f"{what}: x is sharded on a mesh of axes {dict(other.shape)}, but S's rows "
                f"are split over axis {self.axis!r} of a mesh of axes {dict(mesh.shape)}; "
                f"{fix}"
            )
        if spec[0] not in ((), (self.axis,)):
            raise ValueError(
                f"{what}: x's rows are sharded over mesh axes {spec[0]}, but S's rows over "
                f"{self.axis!r} (vectors must be laid out like them, "
                f"S.vector_sharding = {self.vector_sharding.spec}); reshard it with "
                "jax.sharding.reshard(x, S.vector_sharding) or "
                f"{fix.removeprefix('build it with ')}"
            )
        if len(spec) == 2 and self.axis in spec[1]:
            raise ValueError(
                f"{what}: the columns of the block x are sharded over {spec[1]}, which "
                f"includes S's row axis {self.axis!r}; shard its columns over another "
                "mesh axis, or none"
            )

    def diagonal(self) -> Array:
        """The main diagonal, laid out like the vectors: length ``N``, rows over ``axis``.

        Its padding rows (from ``n`` on) hold 1, so that dividing a sharded vector by it
        keeps the vector's padding rows 0 (what :func:`jaxdia.jacobi` does); zeros where
        the matrix stores no main diagonal. Each device reads its own rows: no
        communication. A preconditioner built from ``@``, ``diagonal()`` and elementwise
        operations works on the sharded vectors as they are.

        Example:
          >>> import jax, jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> jaxdia.shard(A, jax.make_mesh((1,), ("rows",)), "rows").diagonal()
          Array([-2., -2., -2.], dtype=float32)
        """
        return _diagonal(
            self.windows,
            offsets=self.offsets,
            n=self.shape[0],
            rows=self.rows_per_shard,
            mesh=in_context(self.mesh),
            axis=self.axis,
        )

    def __abs__(self) -> ShardedDiaMatrix:
        """The elementwise absolute value, sharded the same way (no communication).

        ``abs(S) @ ones`` are the absolute row sums, e.g. for Gershgorin's bound on the
        spectrum (what :func:`jaxdia.chebyshev` computes for a sharded matrix).

        Example:
          >>> import jax, jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> S = jaxdia.shard(A, jax.make_mesh((1,), ("rows",)), "rows")
          >>> abs(S) @ jnp.ones(3)
          Array([3., 4., 3.], dtype=float32)
        """
        return jax.tree_util.tree_map(jnp.abs, self)

    def unshard_vector(self, y: ArrayLike) -> Array:
        """The first ``n`` rows of a sharded vector, replicated on the mesh (a gather).

        Meant for results, not for loops: it moves the whole vector to every device.

        Example:
          >>> import jax, jax.numpy as jnp, jaxdia
          >>> S = jaxdia.shard(jaxdia.eye(4), jax.make_mesh((1,), ("rows",)), "rows")
          >>> S.unshard_vector(S.shard_vector(jnp.arange(4.0)))
          Array([0., 1., 2., 3.], dtype=float32)
        """
        y = jnp.asarray(y)
        if y.ndim not in (1, 2) or y.shape[0] != self.padded_size:
            raise ValueError(
                f"unshard_vector expects a sharded vector of shape ({self.padded_size},) or "
                f"({self.padded_size}, c), got shape {y.shape}"
            )
        replicated = place(y, self.mesh, PartitionSpec())
        return replicated[: self.shape[0]]

    # -- products --------------------------------------------------------------------------

    def __matmul__(self, x: ArrayLike) -> Array:
        if isinstance(x, (DiaMatrix, ShardedDiaMatrix)):
            return NotImplemented
        if not isinstance(x, (jax.Array, jax.core.Tracer)):
            x = jnp.asarray(x)
        N, n = self.padded_size, self.shape[0]
        if x.ndim not in (1, 2) or x.shape[0] != N:
            hint = (
                f" (a length-{n} vector must be padded and sharded first: S.shard_vector(x))"
                if x.ndim in (1, 2) and x.shape[0] == n
                else ""
            )
            raise ValueError(
                f"S @ x: S of shape {self.shape} sharded over {self.shards} devices multiplies "
                f"vectors of shape ({N},) or blocks ({N}, c), got shape {x.shape}{hint}"
            )
        self._check_vector(x, "S @ x")
        dtype = jnp.result_type(self.windows.dtype, x.dtype)
        x = place(x.astype(dtype), self.mesh, self._rows_spec(x))
        y = _sharded_product(
            self.windows.astype(dtype),
            x.reshape(N, -1),
            offsets=self.offsets,
            rows=self.rows_per_shard,
            mesh=in_context(self.mesh),
            axis=self.axis,
            columns=spec_entry(explicit_spec(x)[1]) if x.ndim == 2 else None,
        )
        return y if x.ndim == 2 else y[:, 0]

    def dot(self, x: ArrayLike) -> Array:
        """``S @ x`` (SciPy's spelling).

        Example:
          >>> import jax, jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(4, 4))
          >>> S = jaxdia.shard(A, jax.make_mesh((1,), ("rows",)), "rows")
          >>> S.unshard_vector(S.dot(S.shard_vector(jnp.arange(4.0))))
          Array([ 1.,  0.,  0., -4.], dtype=float32)
        """
        return self @ x

    def to_dia(self) -> DiaMatrix:
        """The unsharded :class:`DiaMatrix`, replicated on the mesh (padding slots are zeros).

        Meant for inspection and tests: it moves the whole matrix to every device.

        Example:
          >>> import jax, jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(4, 4))
          >>> S = jaxdia.shard(A, jax.make_mesh((1,), ("rows",)), "rows")
          >>> bool((S.to_dia().todense() == A.todense()).all())
          True
        """
        lower = self.halo[0]
        L = self.rows_per_shard
        windows = place(self.windows, self.mesh, PartitionSpec())
        own = windows[:, :, lower : lower + L]  # (P, n_diags, L): each device's own columns
        data = jnp.moveaxis(own, 0, 1).reshape(len(self.offsets), self.padded_size)
        return DiaMatrix(data[:, : self.shape[1]], self.offsets, self.shape)


@jax.jit(static_argnames=("offsets", "rows", "mesh", "axis", "columns"))
def _sharded_product(windows, x, *, offsets, rows, mesh, axis, columns=None):
    """``y = A x`` for ``x`` of shape ``(N, c)`` sharded over ``axis`` (and its columns
    over the ``Explicit`` axes ``columns``, if any)."""
    lower, upper = band_widths(offsets)
    shards = int(mesh.shape[axis])
    local_offsets = tuple(k + lower for k in offsets)
    local_shape = (rows, lower + rows + upper)

    def local(window, block):
        window = window[0]
        before, after = halos(block, lower, upper, axis, shards, dim=0)
        if lower > rows or upper > rows:  # a halo spans several neighbours: join, multiply
            extended = jnp.concatenate([*before, block, *after])
            return spmm(window, extended, offsets=local_offsets, shape=local_shape)
        # The product with this device's own rows of x (zeros in the halo) waits for no
        # communication, so XLA may run it while the halos are in flight; the halos'
        # terms, which reach only the first ``lower`` and last ``upper`` rows, are added
        # after, each from a small DIA block of ``window``.
        halo = lower + upper
        y = spmm(
            window,
            jnp.pad(block, [(lower, upper), (0, 0)]),
            offsets=local_offsets,
            shape=local_shape,
        )
        if lower:
            x_top = jnp.pad(before[0], [(0, halo), (0, 0)])
            top = spmm(
                window[:, : lower + halo], x_top, offsets=local_offsets, shape=(lower, lower + halo)
            )
            y = y.at[:lower].add(top)
        if upper:
            x_bottom = jnp.pad(after[0], [(halo, 0), (0, 0)])
            bottom = spmm(
                window[:, rows - upper :],
                x_bottom,
                offsets=local_offsets,
                shape=(upper, upper + halo),
            )
            y = y.at[rows - upper :].add(bottom)
        return y

    # Manual over the rows' axis and the Explicit axes splitting x's columns (each device
    # multiplies its own columns); other axes are left to XLA (on Auto axes, a block's
    # columns stay split as they are).
    spec = PartitionSpec(axis, columns)
    manual = {axis, *names_of(columns)}
    return jax.shard_map(
        local, mesh=mesh, in_specs=(PartitionSpec(axis), spec), out_specs=spec, axis_names=manual
    )(windows, x)


@jax.jit(static_argnames=("offsets", "n", "rows", "mesh", "axis"))
def _diagonal(windows, *, offsets, n, rows, mesh, axis):
    """The main diagonal of the windows' matrix, length ``N``, padding rows 1."""
    lower = band_widths(offsets)[0]

    def local(window):
        index = index_dtype(rows * int(mesh.shape[axis]) + 1)
        row = lax.axis_index(axis).astype(index) * rows + lax.iota(index, rows)
        if 0 in offsets:  # diagonal entry (i, i) is column i of data: own column i - p L
            own = window[0, offsets.index(0), lower : lower + rows]
        else:
            own = jnp.zeros((rows,), window.dtype)
        return jnp.where(row < n, own, jnp.ones((), window.dtype))

    spec = PartitionSpec(axis)
    return jax.shard_map(local, mesh=mesh, in_specs=spec, out_specs=spec, axis_names={axis})(
        windows
    )


@jax.jit(static_argnames=("offsets", "shape", "rows", "mesh", "axis"))
def _windows(data, *, offsets, shape, rows, mesh, axis):
    """Each device's columns ``[p L - lower, p L + L + upper)`` of ``data`` (N columns)."""
    lower, upper = band_widths(offsets)
    shards = int(mesh.shape[axis])

    def local(block):
        # Zero every slot outside the matrix (SciPy's padding and the padded columns), so
        # that the rectangular local matrices read zeros there.
        index = index_dtype(rows * shards + shape[0])
        column = lax.axis_index(axis).astype(index) * rows + lax.broadcasted_iota(
            index, block.shape, 1
        )
        _, _, inside = slot_indices(offsets, shape, columns=column)
        block = jnp.where(inside, block, jnp.zeros((), block.dtype))
        before, after = halos(block, lower, upper, axis, shards, dim=1)
        return jnp.concatenate([*before, block, *after], axis=1)[None]

    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=PartitionSpec(None, axis),
        out_specs=PartitionSpec(axis),
    )(data)


def shard(A: DiaMatrix, mesh: Mesh, axis: Hashable) -> ShardedDiaMatrix:
    """Splits the rows of a square DiaMatrix over one axis of a device mesh.

    Each device keeps ``ceil(n / P)`` rows (``P`` devices along ``axis``; ``n`` is padded
    with zero rows and columns up to a multiple of ``P``) and the columns of ``data``
    those rows reach. Other mesh axes, if any, hold replicas. Differentiable and usable
    under ``jit`` (with ``A.data`` traced); the offsets are static.

    Args:
      A: a square, unbatched DiaMatrix.
      mesh: the device mesh (``jax.make_mesh``), with ``Explicit`` axes (JAX's default)
        or ``Auto`` ones. On ``Explicit`` axes JAX's Krylov solvers (``cg``, ``gmres``,
        ``bicgstab``) must run inside ``jax.sharding.auto_axes`` (their ``jnp.vdot``
        refuses vectors split over an Explicit axis); the matrix follows the region's
        axis types. With ``Explicit`` axes, JAX also requires jitted functions that take
        unsharded inputs to run inside ``jax.set_mesh(mesh)``.
      axis: the name of the mesh axis to split the rows over.

    Returns:
      A :class:`ShardedDiaMatrix`. Its products ``S @ x`` are sharded like ``x``: rows
      over ``axis`` (``S.vector_sharding``), the columns of an ``(N, c)`` block as they
      were (e.g. over a second mesh axis). ``S.diagonal()`` and
      ``jaxdia.jacobi(S)(v)`` are sharded like the vectors; ``unshard_vector`` and
      ``to_dia`` replicate. Halos wider than a shard are supported (they are fetched from
      several neighbours), at the cost of one collective per neighbour.

    Raises:
      TypeError: if ``A`` is not a DiaMatrix or ``mesh`` is not a Mesh.
      ValueError: if ``A`` is not square, is batched, or ``axis`` is not a mesh axis.
        ``S @ x`` raises a ValueError for an ``x`` on other devices or another mesh, or
        (on Explicit axes) with its rows split over another axis.

    Example:
      >>> import jax, jax.numpy as jnp, jaxdia
      >>> mesh = jax.make_mesh((1,), ("rows",))
      >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(4, 4))
      >>> S = jaxdia.shard(A, mesh, "rows")
      >>> S.halo, S.padded_size
      ((1, 1), 4)
      >>> S.unshard_vector(S @ S.shard_vector(jnp.arange(4.0)))
      Array([ 1.,  0.,  0., -4.], dtype=float32)
    """
    as_matrix(A, "shard: A")
    shards = _check_mesh_axis(mesh, axis)
    m, n = A.shape
    if m != n:
        raise ValueError(
            f"shard supports square matrices (x and A @ x then share one row layout), got "
            f"A of shape {A.shape}"
        )
    if A.batch_shape:
        raise ValueError(
            f"shard supports one matrix, got A with batch shape {A.batch_shape}; shard each "
            "matrix separately"
        )
    rows = max(1, -(-n // shards))
    data = jnp.pad(A.data, [(0, 0), (0, rows * shards - n)])
    data = place(data, mesh, PartitionSpec(None, axis))
    windows = _windows(
        data, offsets=A.offsets, shape=A.shape, rows=rows, mesh=in_context(mesh), axis=axis
    )
    return ShardedDiaMatrix(windows, A.offsets, A.shape, mesh, axis)
