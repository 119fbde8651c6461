"""Arrays sharded over ``Explicit`` mesh axes: what their types say, and a way to run code
that JAX cannot type on them.

``jax.make_mesh`` gives ``AxisType.Explicit`` axes by default. On such an axis an array's
sharding is part of its type (``jax.typeof(x).sharding.spec``), and every operation must
say how its result is sharded. JAX refuses the ones it cannot decide alone: a static
slice of a sharded dim whose length is not a multiple of the number of devices, a
scatter (``.at[...]``) into a sharded array, a reshape that merges a sharded dim with a
minor one. jaxdia's array-level code uses all three on ``data``'s columns (the diagonals
are shifted against each other by their offsets).

* :func:`explicit_spec` reads, per dim of an array, the ``Explicit`` axes it is sharded
  over. Code that sees none runs exactly as for an unsharded array.
* :func:`on_auto_axes` decorates an array-level function so that, when an operand is
  sharded over an ``Explicit`` axis, it runs with the mesh's ``Explicit`` axes switched
  to ``Auto`` (what ``jax.sharding.auto_axes`` does): XLA's partitioner then decides the
  communication (halo exchanges of neighbouring columns for shifted slices), and the
  results are given the sharding the decorator's rule states (see :func:`result_spec`).
  The products do not go this way: they exchange their halos themselves
  (:mod:`jaxdia._sharded_products`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeAlias, TypeGuard, TypeVar

import jax
import jax.core
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec
from jax.typing import ArrayLike

#: Mesh axis names (a name is any hashable, usually a str).
Axes = tuple[Hashable, ...]
#: A mesh, or the abstract mesh of an array's type.
MeshLike: TypeAlias = Mesh | AbstractMesh
_F = TypeVar("_F", bound=Callable[..., Any])


def names_of(entry: object) -> Axes:
    """The axis names of one entry of a ``PartitionSpec``: None (or ``UNCONSTRAINED``),
    a name, or a tuple of names."""
    if entry is None or entry is PartitionSpec.UNCONSTRAINED:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _is_array(value: object) -> TypeGuard[jax.Array]:
    return isinstance(value, (jax.Array, jax.core.Tracer))


def mesh_of(x: ArrayLike) -> AbstractMesh:
    """The (abstract) mesh of ``x``'s type; empty for an unsharded or host array."""
    return jax.typeof(x).sharding.mesh


def explicit_spec(x: object) -> tuple[Axes, ...]:
    """Per dim of ``x``, the ``Explicit`` mesh axes its type says it is sharded over.

    All empty for NumPy arrays, Python scalars, arrays on one device, arrays on ``Auto``
    axes (whose sharding is not part of the type) and inside ``shard_map`` for its manual
    axes.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxdia._sharding import explicit_spec
      >>> explicit_spec(jnp.ones((2, 3)))
      ((), ())
    """
    ndim = len(getattr(x, "shape", ()))
    if not _is_array(x):
        return ((),) * ndim
    sharding = jax.typeof(x).sharding
    mesh = sharding.mesh
    if mesh.empty:
        return ((),) * ndim
    types = dict(zip(mesh.axis_names, mesh.axis_types))
    spec = tuple(sharding.spec) + (None,) * (ndim - len(sharding.spec))
    return tuple(
        tuple(name for name in names_of(entry) if types.get(name) == AxisType.Explicit)
        for entry in spec[:ndim]
    )


def axes_size(mesh: MeshLike, axes: Axes) -> int:
    """The number of devices along ``axes`` of ``mesh`` (1 for none)."""
    return math.prod(int(mesh.shape[name]) for name in axes)


def spec_entry(axes: Axes) -> Hashable | None:
    """``axes`` as one entry of a ``PartitionSpec``: None, a name, or a tuple of names."""
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else tuple(axes)


def result_spec(
    shape: Sequence[int], like: jax.Array, *, last: bool, mesh: MeshLike
) -> PartitionSpec:
    """The sharding :func:`on_auto_axes` gives a result of ``shape``: ``like``'s batch.

    ``like`` is the first operand sharded over an Explicit axis, laid out as a matrix
    (``data`` ``(..., n_diags, n)`` or a dense ``(..., m, n)``): its dims before the last
    two are batch dims, its last dim indexes matrix columns. A result's leading dims are
    sharded as ``like``'s batch dims where their lengths agree; its last dim, when
    ``last`` says that it indexes matrix rows or columns, over ``like``'s column axes if
    its length is a multiple of their size; every other dim is replicated.
    """
    spec = explicit_spec(like)
    batch = spec[:-2] if len(spec) >= 2 else ()
    entries: list[Axes] = [()] * len(shape)
    for i, axes in enumerate(batch[: len(shape)]):
        if shape[i] == like.shape[i]:
            entries[i] = axes
    used = {name for axes in entries for name in axes}
    columns = spec[-1] if spec else ()
    if (
        last
        and len(shape) > len(batch)
        and columns
        and not used & set(columns)
        and shape[-1] % axes_size(mesh, columns) == 0
    ):
        entries[-1] = columns
    return PartitionSpec(*map(spec_entry, entries))


def on_auto_axes(last: bool = True) -> Callable[[_F], _F]:
    """Runs the decorated function on ``Auto`` axes when an operand is sharded over an
    ``Explicit`` one; a plain call otherwise (the same program as without the decorator).

    Args:
      last: whether the last dim of each result indexes matrix rows or columns (then it
        keeps the operand's column sharding, see :func:`result_spec`).

    Put it under ``jax.jit`` (it reads the types of the traced operands).
    """

    def decorate(fun: _F) -> _F:
        @functools.wraps(fun)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            leaves = [leaf for leaf in jax.tree.leaves((args, kwargs)) if _is_array(leaf)]
            sharded = [leaf for leaf in leaves if any(explicit_spec(leaf))]
            if not sharded:
                return fun(*args, **kwargs)
            like = sharded[0]
            mesh = mesh_of(like)
            auto = mesh.update_axis_types(
                {name: AxisType.Auto for name in mesh.axis_names if name in _explicit(mesh)}
            )

            def to_auto(value: Any) -> Any:
                return jax.sharding.reshard(value, PartitionSpec()) if _is_array(value) else value

            with jax.sharding.use_abstract_mesh(auto):
                out = fun(*jax.tree.map(to_auto, args), **jax.tree.map(to_auto, kwargs))

            def to_explicit(value: Any) -> Any:
                if not _is_array(value):
                    return value
                spec = result_spec(value.shape, like, last=last, mesh=mesh)
                return jax.sharding.reshard(value, NamedSharding(mesh, spec))

            return jax.tree.map(to_explicit, out)

        return wrapped  # type: ignore[return-value]

    return decorate


def _explicit(mesh: MeshLike) -> set[Any]:
    return {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit}
