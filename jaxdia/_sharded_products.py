"""Products of a DIA matrix whose columns are sharded over ``Explicit`` mesh axes.

SciPy's DIA layout stores matrix column ``j`` in ``data[:, j]``, so sharding ``data``'s
last dim over mesh axes ``C`` (``P`` devices, ``L = n / P`` columns each) gives each
device a block of matrix columns ``[p L, p L + L)``. Seen from device ``p``, its columns
are a rectangular DIA matrix ``B_p`` of shape ``(upper + L + lower, L)`` with offsets
``offsets - upper`` (``lower, upper`` the band widths) holding the matrix rows
``[p L - upper, p L + L + lower)``; its ``data`` is the device's block of ``data``
unchanged. So, for a square matrix and vectors sharded like the columns:

* ``A @ x``: each device multiplies ``B_p`` by its own rows of ``x`` (no communication),
  giving partial sums for rows ``[p L - upper, p L + L + lower)``; the first ``upper``
  and the last ``lower`` of them belong to the neighbours, which receive them with
  ``jax.lax.ppermute`` and add them (:func:`fold_halos`: the exchange of output halos).
* ``x @ A`` (``A^T @ x``): each device fetches the ``upper`` rows of ``x`` before its
  block and the ``lower`` rows after it from the neighbours (:func:`halos`, the exchange
  of input halos that :mod:`jaxdia._shard` also uses), then multiplies by ``B_p^T``.

Each device sends ``(lower + upper) * columns`` elements per product, whatever the
number of devices; ``x`` is never gathered. A halo wider than a block comes from (or
goes to) as many neighbours as it spans. The local products are the ``dia_spmm``
primitive (the Pallas kernels on GPU/TPU), run inside ``jax.shard_map``, whose
``ppermute`` transposes to the reverse permutation: JVP, ``grad``, ``vmap`` and
``jax.linear_transpose`` work through it.

Operands are resharded first where their types disagree: ``x`` to the columns' layout
(a local slice when ``x`` is replicated, an all-to-all when it is split over other axes),
or, when only ``x`` is sharded, ``data`` to ``x``'s layout (a local slice when ``data``
is replicated). Batch dims and the columns of ``x`` keep their shardings.

A rectangular matrix (``m != n``) has no common layout for ``x`` and the result: ``A @ x``
sums the devices' partial results (a reduce-scatter over ``C`` when ``m`` is a multiple
of ``P``, else an all-reduce: ``O(m)`` elements per device) and ``x @ A`` gathers ``x``
when it is sharded.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array, lax
from jax.sharding import PartitionSpec
from jax.typing import ArrayLike

from ._geometry import band_widths, index_dtype, slot_indices
from ._kernels.primitives import spmm
from ._sharding import Axes, axes_size, explicit_spec, mesh_of, names_of, spec_entry


def _exchange(piece: Array, axis: Hashable, shards: int, hop: int) -> Array:
    """``piece`` sent from each device ``s`` to ``s + hop``; zeros where none arrives."""
    pairs = [(s, s + hop) for s in range(max(0, -hop), min(shards, shards - hop))]
    return lax.ppermute(piece, axis, pairs) if pairs else jnp.zeros_like(piece)


def halos(
    block: Array, before: int, after: int, axis: Hashable, shards: int, dim: int
) -> tuple[list[Array], list[Array]]:
    """The ``before`` rows preceding ``block`` and the ``after`` rows following it.

    Runs inside ``shard_map``: ``block`` is this device's slice along dimension ``dim``
    of an array sharded over ``axis`` in ``shards`` equal blocks. Rows from beyond
    the first or last shard are zeros (``ppermute`` fills devices that receive nothing
    with zeros). A halo wider than a block spans several neighbours: one ``ppermute`` per
    neighbour, each sending only the rows the receiver needs. Joined in order,
    ``[*before, block, *after]`` are the rows ``[p L - before, p L + L + after)``.
    """
    rows = block.shape[dim]
    first, last = [], []
    # Rows [p L - before, p L): the last rows of shard p - hops first, down to shard p - 1.
    for hop in range(-(-before // rows) if before else 0, 0, -1):
        need = min(rows, before - (hop - 1) * rows)
        piece = lax.slice_in_dim(block, rows - need, rows, axis=dim)
        first.append(_exchange(piece, axis, shards, hop))
    # Rows [p L + L, p L + L + after): the first rows of shard p + 1, p + 2, ...
    for hop in range(1, (-(-after // rows) if after else 0) + 1):
        need = min(rows, after - (hop - 1) * rows)
        last.append(_exchange(lax.slice_in_dim(block, 0, need, axis=dim), axis, shards, -hop))
    return first, last


def fold_halos(
    extended: Array, before: int, after: int, axis: Hashable, shards: int, dim: int
) -> Array:
    """The transpose of :func:`halos`: partial sums for rows ``[p L - before, p L + L +
    after)`` in, this device's rows ``[p L, p L + L)`` out, with the neighbours' partial
    sums for them added (rows beyond the first or last shard are dropped)."""
    rows = extended.shape[dim] - before - after
    block = lax.slice_in_dim(extended, before, before + rows, axis=dim)

    def pad(piece: Array, low: int, high: int) -> Array:
        config = [(0, 0)] * piece.ndim
        config[dim] = (low, high)
        return jnp.pad(piece, config)

    # Rows of shard p - hop: extended[before - hop L, before - (hop - 1) L), clipped at 0.
    for hop in range(1, (-(-before // rows) if before else 0) + 1):
        start, stop = max(0, before - hop * rows), before - (hop - 1) * rows
        piece = lax.slice_in_dim(extended, start, stop, axis=dim)
        block = block + pad(_exchange(piece, axis, shards, -hop), rows - (stop - start), 0)
    # Rows of shard p + hop: the next L rows after this shard's, clipped at the end.
    for hop in range(1, (-(-after // rows) if after else 0) + 1):
        start = before + hop * rows
        stop = min(before + rows + after, start + rows)
        piece = lax.slice_in_dim(extended, start, stop, axis=dim)
        block = block + pad(_exchange(piece, axis, shards, hop), 0, rows - (stop - start))
    return block


def contracted_axes(data: ArrayLike, x: ArrayLike, transpose: bool, rows: bool = False) -> Axes:
    """The Explicit axes a product is sharded over: those of ``data``'s columns, else
    those of ``x``'s rows (the dim ``A`` contracts or, transposed, its rows; ``rows``:
    ``x`` is rows ``(*B, c, n)``, that dim its last); none when neither is sharded over
    an Explicit axis (then the product is the plain one)."""
    columns = explicit_spec(data)[-1]
    if columns:
        return columns
    return explicit_spec(x)[-1 if rows else -2]


def _unify_batch(data: Array, x: Array, skip: set[Any]) -> tuple[Axes, ...]:
    """The batch dims' shardings of the result: each dim as the operand of full length
    that is sharded there says (``data`` first); axes in ``skip`` are the product's."""
    spec_d, spec_x = explicit_spec(data)[:-2], explicit_spec(x)[:-2]
    batch = []
    for i, (d, c) in enumerate(zip(spec_d, spec_x)):
        size = max(data.shape[i], x.shape[i])
        options = [s for s, length in ((d, data.shape[i]), (c, x.shape[i])) if length == size]
        axes = next((s for s in options if s), ())
        batch.append(tuple(name for name in axes if name not in skip))
    return tuple(batch)


def sharded_spmm(
    data: Array,
    x: Array,
    *,
    axes: Axes,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool,
    implementation: str | None,
) -> Array:
    """``spmm(data, x)`` (see :func:`jaxdia._kernels.primitives.spmm`) with the matrix's columns
    split over the Explicit mesh ``axes``: ``data`` ``(*B, n_diags, n)`` and ``x``
    ``(*B, rows, c)``, batch dims of equal rank that broadcast.

    Returns ``(*B, out_rows, c)``: its rows sharded over ``axes`` (for a rectangular
    ``A @ x``, only when ``m`` is a multiple of their size), its batch dims as the
    operands', its columns as ``x``'s.
    """
    mesh = mesh_of(data) if not mesh_of(data).empty else mesh_of(x)
    m, n = shape
    shards = axes_size(mesh, axes)
    if n % shards:  # only x is split (over its m rows), A's columns cannot be: gather x
        x = jax.sharding.reshard(x, jax.NamedSharding(mesh, _spec(x, rows=())))
        return spmm(
            data,
            x,
            offsets=offsets,
            shape=shape,
            transpose=transpose,
            implementation=implementation,
        )
    skip = set(axes)
    batch = _unify_batch(data, x, skip)
    x_columns = tuple(name for name in explicit_spec(x)[-1] if name not in skip)
    square = m == n
    # x's rows: like data's columns when they are its columns (A @ x) or line up with
    # them (square); else whole on every device (a gather only where x was split).
    x_rows = axes if square or not transpose else ()
    data_spec = PartitionSpec(*map(spec_entry, _broadcast(batch, data)), None, spec_entry(axes))
    x_spec = PartitionSpec(
        *map(spec_entry, _broadcast(batch, x)), spec_entry(x_rows), spec_entry(x_columns)
    )
    data = jax.sharding.reshard(data, jax.NamedSharding(mesh, data_spec))
    x = jax.sharding.reshard(x, jax.NamedSharding(mesh, x_spec))
    lower, upper = band_widths(offsets)
    L = n // shards
    local_offsets = tuple(k - upper for k in offsets)
    local_shape = (upper + L + lower, L)
    reduce = not transpose and not square
    axis = spec_entry(axes)
    scatter = reduce and m % shards == 0
    out_rows = axes if square or transpose or scatter else ()
    out_spec = PartitionSpec(*map(spec_entry, batch), spec_entry(out_rows), spec_entry(x_columns))

    def local(block: Array, xb: Array) -> Array:
        index = index_dtype(n + shards)
        first = lax.axis_index(axis).astype(index) * L
        columns = first + lax.broadcasted_iota(index, block.shape[-2:], 1)
        _, _, inside = slot_indices(offsets, shape, columns=columns)
        block = jnp.where(inside, block, jnp.zeros((), block.dtype))  # padding is not read
        if transpose:
            if square:
                before, after = halos(xb, upper, lower, axis, shards, dim=-2)
                window = jnp.concatenate([*before, xb, *after], axis=-2)
            else:  # rows [p L - upper, p L + L + lower) of the whole x
                xb = _pad_rows(xb, upper, max(0, n + lower - m))
                window = lax.dynamic_slice_in_dim(xb, first, upper + L + lower, axis=-2)
            return spmm(
                block,
                window,
                offsets=local_offsets,
                shape=local_shape,
                transpose=True,
                implementation=implementation,
            )
        partial = spmm(
            block, xb, offsets=local_offsets, shape=local_shape, implementation=implementation
        )
        if square:
            return fold_halos(partial, upper, lower, axis, shards, dim=-2)
        # Rectangular: place the partial rows in a whole-length result and sum it.
        whole = jnp.zeros(
            (*partial.shape[:-2], upper + max(m, n) + lower, partial.shape[-1]), partial.dtype
        )
        whole = lax.dynamic_update_slice_in_dim(whole, partial, first, axis=-2)
        whole = lax.slice_in_dim(whole, upper, upper + m, axis=-2)
        if scatter:
            return lax.psum_scatter(whole, axis, scatter_dimension=whole.ndim - 2, tiled=True)
        return lax.psum(whole, axis)

    # Manual over every axis the operands are split over: each device then works on its
    # own blocks of the batch and of x's columns too (left to the partitioner, those
    # would be gathered around the shard_map).
    manual = {name for spec in (data_spec, x_spec, out_spec) for e in spec for name in names_of(e)}
    return jax.shard_map(
        local, mesh=mesh, in_specs=(data_spec, x_spec), out_specs=out_spec, axis_names=manual
    )(data, x)


def _pad_rows(x: Array, before: int, after: int) -> Array:
    return jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(before, after), (0, 0)])


def _broadcast(batch: tuple[Axes, ...], operand: Array) -> list[Axes]:
    """``batch``'s shardings for ``operand``'s batch dims (none where it has length 1)."""
    return [axes if operand.shape[i] != 1 else () for i, axes in enumerate(batch)]


def _spec(x: ArrayLike, *, rows: Axes) -> PartitionSpec:
    """``x``'s explicit sharding with its rows (dim -2) over ``rows``."""
    spec = list(explicit_spec(x))
    spec[-2] = rows
    return PartitionSpec(*map(spec_entry, spec))
