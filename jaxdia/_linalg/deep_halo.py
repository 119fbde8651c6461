"""Deep halos: several products of a row-sharded matrix after one exchange.

A polynomial of degree ``d`` in a :class:`jaxdia.ShardedDiaMatrix` (a Chebyshev
preconditioner's ``d - 1`` products, a smoothing's ``sweeps``) exchanges the product's
halo ``d - 1`` (or ``sweeps``) times: ``2 (d - 1)`` collective-permutes, each a latency.
With the input's halo ``depth`` times as deep (``depth * lower`` rows before the device's
block, ``depth * upper`` after), and the matrix's rows over that extended range, every
device can run all ``depth`` products itself: the ``k``-th product is exact on the rows
at least ``k`` halos away from the extended range's ends (its rows near the ends miss
terms), so after ``depth`` products the device's own rows are exact. One exchange of
``depth`` times the rows replaces ``depth`` exchanges; the price is the redundant work on
the ghost rows, ``(L + depth (lower + upper)) / L`` times the local products (``L`` rows
per device), which pays when the latency of a collective exceeds that of the extra
local work: many devices, slow links, thick slabs.

:func:`widen` builds the matrix's columns over the extended range once (a deeper copy of
the windows of :mod:`jaxdia._shard`), :func:`apply` runs a function of the local
product, the inverse diagonal and halo-extended vectors on every device and keeps its
own rows.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.sharding import Mesh, PartitionSpec

from .._kernels.primitives import spmm
from .._pytree import Immutable
from .._shard import ShardedDiaMatrix, in_context
from .._sharded_products import halos
from .smoothers import chebyshev_steps


@jax.tree_util.register_pytree_with_keys_class
class DeepHaloMatrix(Immutable):
    """A :class:`jaxdia.ShardedDiaMatrix` with each device's columns of ``data`` over
    ``depth`` halos on either side of its rows (the ``windows`` leaf, ``(P, n_diags,
    depth (lower + upper) + L)``), for polynomials in it with one exchange (see the
    module's docstring). ``matrix`` is the sharded matrix itself, for its products."""

    __slots__ = ("matrix", "windows", "depth")
    _leaves = ("matrix", "windows")
    _static = ("depth",)
    matrix: ShardedDiaMatrix
    windows: Array
    depth: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.matrix.shape

    @property
    def padded_size(self) -> int:
        return self.matrix.padded_size

    @property
    def dtype(self) -> np.dtype:
        return self.matrix.dtype

    def __matmul__(self, x: Array) -> Array:
        return self.matrix @ x

    def diagonal(self) -> Array:
        return self.matrix.diagonal()


def widen(S: ShardedDiaMatrix, depth: int) -> DeepHaloMatrix:
    """``S`` with its columns over ``depth`` halos each way (one exchange, in the setup)."""
    return DeepHaloMatrix._make(S, _widen(S, depth=depth), depth)


@jax.jit(static_argnames="depth")
def _widen(S: ShardedDiaMatrix, *, depth: int) -> Array:
    lower, upper = S.halo
    rows = S.rows_per_shard

    def local(window: Array) -> Array:
        own = window[0, :, lower : lower + rows]  # the device's own columns
        before, after = halos(own, depth * lower, depth * upper, S.axis, S.shards, dim=1)
        return jnp.concatenate([*before, own, *after], axis=1)[None]

    spec = PartitionSpec(S.axis)
    mesh = in_context(S.mesh)
    return jax.shard_map(local, mesh=mesh, in_specs=spec, out_specs=spec, axis_names={S.axis})(
        S.windows
    )


def apply(
    D: DeepHaloMatrix,
    fn: Callable[..., tuple[Array, ...]],
    vectors: tuple[Array, ...],
    scalars: tuple[Array, ...] = (),
) -> tuple[Array, ...]:
    """``fn(product, inverse_diagonal, *scalars, *extended)`` on every device, its
    outputs' own rows returned sharded like the ``vectors`` (length ``N`` each).

    ``extended`` are the vectors over the device's rows and ``D.depth`` halos each way,
    exchanged together (one collective-permute each way while the deep halo is within
    one neighbour's rows); ``product`` multiplies such a vector by the matrix's rows
    over the same range and ``inverse_diagonal`` is their ``1 / diag`` (1 where the
    range leaves the matrix, on rows whose vectors are zero). ``fn`` may apply
    ``product`` ``D.depth`` times; its outputs' rows are exact ``D.depth`` halos in
    from the ends, the device's own rows included.
    """
    S = D.matrix
    lower, upper = S.halo
    before, after = D.depth * lower, D.depth * upper
    rows = S.rows_per_shard
    extent = before + rows + after
    offsets = S.offsets
    center = offsets.index(0) if 0 in offsets else None

    def local(window: Array, stacked: Array, *values: Array) -> Array:
        window = window[0]
        first, last = halos(stacked, before, after, S.axis, S.shards, dim=1)
        extended = jnp.concatenate([*first, stacked, *last], axis=1)

        def product(v: Array) -> Array:
            return spmm(window, v[:, None], offsets=offsets, shape=(extent, extent))[:, 0]

        if center is None:
            inverse = jnp.zeros((extent,), window.dtype)
        else:
            diagonal = window[center]
            inverse = 1 / jnp.where(diagonal == 0, jnp.ones((), diagonal.dtype), diagonal)
        outputs = fn(product, inverse, *values, *extended)
        return jnp.stack([out[before : before + rows] for out in outputs])

    spec = PartitionSpec(S.axis)
    stacked = jnp.stack(vectors)
    scalar_specs = tuple(PartitionSpec() for _ in scalars)
    mesh: Mesh = in_context(S.mesh)
    out = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(spec, PartitionSpec(None, S.axis), *scalar_specs),
        out_specs=PartitionSpec(None, S.axis),
        axis_names={S.axis},
    )(D.windows, stacked.astype(jnp.result_type(stacked.dtype, S.dtype)), *scalars)
    return tuple(out)


def chebyshev_polynomial(
    D: DeepHaloMatrix, v: Array, lower: Array, upper: Array, degree: int
) -> Array:
    """The Chebyshev preconditioner's polynomial (:func:`chebyshev_steps` from zero,
    ``degree - 1`` products) on a sharded vector ``v``, after one exchange of depth
    ``degree - 1``."""

    def polynomial(product, inverse, lower, upper, extended):
        x, _ = chebyshev_steps(
            product,
            lambda r: inverse.astype(r.dtype) * r,
            extended,
            None,
            lower.astype(extended.dtype),
            upper.astype(extended.dtype),
            degree,
            residual=False,
        )
        return (x,)

    return apply(D, polynomial, (v,), (lower, upper))[0]
