"""The XLA implementation of the DIA products: pure ``jax.numpy``, no Pallas.

It is the CPU path and the oracle the Pallas kernels are tested against. Every function
here reads only the in-bounds slots of ``data`` (static slices), so padding slots are
never read, whatever they hold.

Shapes (``B`` are batch dimensions of equal rank that broadcast against each other):

* ``spmm_xla(data, x)``: ``data`` ``(*B, n_diags, n)``, ``x`` ``(*B, rows, c)``; returns
  ``A @ x`` of shape ``(*B, m, c)`` (``rows == n``), or ``A^T @ x`` of shape ``(*B, n, c)``
  with ``transpose=True`` (``rows == m``).
* ``spmv_xla(data, x)``: the same for vectors, ``x`` ``(*B, rows)``, returning ``(*B, m)``
  (or ``(*B, n)``): no ``(rows, 1)`` array anywhere, which TPU would tile one row per
  element (cyclic reduction's refinement takes its right-hand sides as rows this way).
* ``sddmm_xla(g, x)``: ``g`` ``(*B, m, c)``, ``x`` ``(*B, n, c)``; returns ``D`` of shape
  ``(*B, n_diags, n)`` with ``D[k, j] = sum_c g[j - offsets[k], c] * x[j, c]`` in bounds
  and 0 in padding slots: the cotangent of ``data`` in ``y = A @ x``.

How ``spmm_xla`` is formulated (the measurements behind each choice are in
``benchmarks/notes/products.md``). Each diagonal contributes ``d_k[r + a_k] * x[r + b_k]`` to the
output rows ``r`` of a static range ``[lo_k, hi_k)``. The rows where every diagonal is in
range (the *interior*, all of them but ``max|offset|`` or so at each end) are one sum of
statically sliced, equally long operands: XLA CPU fuses it into a single loop with no
bounds checks, which LLVM vectorizes and XLA splits over the cores. The two small edge
blocks are per-diagonal slices padded to the block (so with bounds checks). The output is
written once and no ``(n_diags, n)`` temporary exists:

* one column: the interior is padded to the full output and the edges go in with
  ``dynamic_update_slice``, which XLA performs in place; large enough products run on
  1-D vectors (see ``_VECTOR_MIN_SIZE``);
* several columns: one ``concatenate`` of edge, interior and edge, which XLA CPU emits
  as one loop per piece, so the interior loop is branch-free and vectorized over the
  columns (a pad of the interior would leave a branch per row in it). For one column
  it is the other way round (see ``spmm_xla``). The interior's terms are summed
  pairwise, which shortens each output's chain of dependent adds (see ``_interior``).

When the interior is small next to the edges (wide offsets on a short matrix), the whole
output is the edge formulation instead, which is also one fused loop; with more than a few
diagonals (scattered offsets, as ``kron`` builds) it is the loop over the diagonals.

``sddmm_xla`` is one gather (see its docstring). What else was tried, and the numbers, are
in ``benchmarks/notes/products.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.sharding import NamedSharding, PartitionSpec

from .._geometry import accumulation_dtype, index_dtype, live_terms, pairwise_sum, slot_indices

# Below this fraction of interior rows the interior/edge split is not worth a second and
# third fused loop; the all-bounds-checked formulation is used instead.
_MIN_INTERIOR_FRACTION = 0.5

# Products with more terms (diagonals holding entries) than this run as one loop over the
# diagonals (see ``_looped``): the unrolled formulations compile one piece per term, so
# their compile time grows with the terms, where the loop's stays constant. For one column
# the loop is as fast beyond this; for several it stays slower than the unrolled loops
# (it revisits the output window once per diagonal), so those unroll further, up to where
# compile time starts to outweigh that (benchmarks/notes/compile.md).
_MAX_UNROLLED_TERMS = 64
_MAX_UNROLLED_TERMS_SEVERAL_COLUMNS = 200

# Products with a small interior (wide offsets) and more terms than this run as the loop
# over the diagonals too. Their bounds-checked sum is one fused loop on its own, but where
# the product has several consumers (a solver's loop) XLA CPU duplicates the sum into each
# and writes every padded term to a buffer of its own: a program growing with the terms
# (benchmarks/notes/products.md, "How the product is computed").
_MAX_BOUNDED_TERMS = 8

# Matrix-vector products with at least this many output elements (batch included) run on
# 1-D vectors (see ``spmm_xla``). Below, the ``(rows, 1)`` form is kept: XLA's cost model
# splits the 1-D loop over two threads, and for small outputs the hand-off costs more
# than the copy it saves.
_VECTOR_MIN_SIZE = 20_000


def _broadcast_batch(*shapes: Sequence[int]) -> tuple[int, ...]:
    return tuple(jnp.broadcast_shapes(*(tuple(s) for s in shapes)))


def _pad_axis(x: Array, axis: int, before: int, after: int) -> Array:
    config = [(0, 0, 0)] * x.ndim
    config[axis] = (before, after, 0)
    return lax.pad(x, jnp.zeros((), x.dtype), config)


def _term_product(data, x, term, lo, hi, acc):
    """``data[k, r + shift_d] * x[r + shift_x]`` for rows ``r`` in ``[lo, hi)``, in ``acc``.

    ``x`` is ``(*B, rows, c)``, or ``(*B, rows)`` for a single column (then so is the
    result).
    """
    d = data[..., term.k, lo + term.shift_d : hi + term.shift_d].astype(acc)
    if x.ndim == data.ndim:  # (*B, rows, c)
        return d[..., None] * x[..., lo + term.shift_x : hi + term.shift_x, :].astype(acc)
    return d * x[..., lo + term.shift_x : hi + term.shift_x].astype(acc)


def _interior(data, x, terms, lo, hi, acc, *, pairwise):
    """Rows ``[lo, hi)`` where every term is in range: a plain sum of equal slices.

    ``pairwise`` sums the terms as a balanced tree rather than in order. Summed in order,
    each output vector of a product with several columns waits on a chain of ``n_diags``
    dependent multiply-adds, and XLA CPU's loop over the columns is bound by that latency
    once the operands are in cache (it matters for many diagonals; for few it makes no
    difference). Matrix-vector products sum in order, which is as fast or faster there.
    """
    parts = [_term_product(data, x, term, lo, hi, acc) for term in terms]
    if pairwise:
        return pairwise_sum(parts)
    out = parts[0]
    for part in parts[1:]:
        out = out + part
    return out


def _bounded(data, x, terms, lo, hi, out_shape, acc):
    """Rows ``[lo, hi)``, each term sliced to its own range and zero-padded to the block.

    ``out_shape`` is the block's shape, with the rows on axis ``len(batch)``.
    """
    axis = data.ndim - 2
    out = jnp.zeros(out_shape, acc)
    for term in terms:
        start, stop = max(lo, term.lo), min(hi, term.hi)
        if stop <= start:
            continue
        product = _term_product(data, x, term, start, stop, acc)
        out = out + _pad_axis(product, axis, start - lo, hi - stop)
    return out


def _zeros_like_results(shape: tuple, dtype, *operands: Array) -> Array:
    """Zeros typed as the results of operations on ``operands``: varying over the manual
    mesh axes that any of them varies over (inside ``shard_map``), and on the mesh that
    one of them is replicated on where no mesh is in context (a program traced on
    ``Explicit`` mesh axes without ``jax.set_mesh`` holds replicated arrays of both
    kinds). A loop carry, or the operand of an in-place update, must have the type of
    what is added to it. Where no operand is sharded these are plain zeros, so such
    programs are unchanged."""
    types = [jax.typeof(operand) for operand in operands]
    meshes = [t.sharding.mesh for t in types if not t.sharding.mesh.empty]
    sharding = None
    if meshes and jax.sharding.get_abstract_mesh().empty:
        sharding = NamedSharding(meshes[0], PartitionSpec())
    out = jnp.zeros(shape, dtype)
    if sharding:
        # ``reshard``, not ``jnp.zeros(out_sharding=...)``: from JAX 0.12 the latter types
        # a replicated result without its mesh, which an in-place update refuses.
        out = jax.sharding.reshard(out, sharding)
    axes = frozenset().union(*(t.manual_axis_type.varying for t in types))
    if axes:
        out = lax.pcast(out, tuple(sorted(axes, key=str)), to="varying")
    return out


def _looped(data, x, offsets, shape, transpose, batch, acc):
    """All rows as one ``fori_loop`` over the diagonals: compile time independent of their
    number, and only static-size slices (a gather per diagonal is several times slower).

    Each diagonal's contribution is aligned with its own data row: ``A @ x`` adds
    ``data[k, j] * x[j]`` to output row ``j - offsets[k]`` (a window of a padded output),
    ``A^T @ x`` adds ``data[k, j] * x[j - offsets[k]]`` to output row ``j`` (a window of a
    padded ``x``). Padding slots are masked out with a select.
    """
    m, n = shape
    # Row j - offset of the output (or of x) sits at j - offset + shift >= 0 in the
    # padded array, which is long enough for every window of n rows.
    shift = max(0, max(offsets))
    length = shift + max(m, n - min(offsets))
    index = index_dtype(length + n)
    table = jnp.asarray(np.array(offsets, index))
    column = lax.iota(index, n)
    axis = data.ndim - 2  # the rows of x and of the output
    trailing = () if x.ndim < data.ndim else (x.shape[-1],)  # vectors, or columns
    if transpose:
        x = _pad_axis(x, axis, shift, length - shift - m)
        out = _zeros_like_results((*batch, n, *trailing), acc, data, x)
    else:
        out = _zeros_like_results((*batch, length, *trailing), acc, data, x)
    expand = (slice(None), *(None for _ in trailing))

    def add_diagonal(k, out):
        offset = table[k]
        diagonal = lax.dynamic_index_in_dim(data, k, axis=axis, keepdims=False)
        inside = ((column >= offset) & (column < m + offset))[expand]
        start = shift - offset
        xs = lax.dynamic_slice_in_dim(x, start, n, axis=axis) if transpose else x
        term = jnp.where(inside, diagonal[(..., *expand)].astype(acc) * xs.astype(acc), 0)
        if transpose:
            return out + term
        window = lax.dynamic_slice_in_dim(out, start, n, axis=axis)
        return lax.dynamic_update_slice_in_dim(out, window + term, start, axis=axis)

    out = lax.fori_loop(0, len(offsets), add_diagonal, out)
    return out if transpose else lax.slice_in_dim(out, shift, shift + m, axis=axis)


def looped_matvec(data: Array, x: Array, offsets: tuple[int, ...], shape: tuple[int, int]) -> Array:
    """``A @ x`` for one matrix ``data`` ``(n_diags, n)`` and a vector ``x``, as the loop
    over the diagonals of :func:`spmm_xla`'s many-diagonal case: one piece of code to
    compile whatever the number of diagonals (for the small levels of a multigrid
    cycle, where the loop's per-diagonal overhead is small next to compiling one piece
    per diagonal)."""
    acc = accumulation_dtype(jnp.result_type(data, x))
    out = _looped(data, x[:, None], offsets, shape, False, (), acc)[:, 0]
    return out.astype(jnp.result_type(data, x))


def spmm_xla(
    data: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool = False,
    rows: bool = False,
) -> Array:
    """``A @ x`` (or ``A^T @ x``) as a sum of statically sliced, shifted diagonals.

    Args:
      data: ``(*B, n_diags, n)`` diagonals in SciPy's DIA layout; padding slots are never
        read.
      x: ``(*B, rows, c)``, ``rows == n`` (or ``m`` with ``transpose=True``).
      offsets: static, distinct offsets, one per row of ``data``.
      shape: static ``(m, n)`` of ``A``.
      transpose: compute ``A^T @ x`` (no conjugation) from the same ``data``.
      rows: ``x`` and the result as rows ``(*B, c, rows)``: one large enough vector runs
        as :func:`spmv_xla`, the rest as columns (as the primitive takes them on CPU).

    Returns:
      ``(*B, m, c)`` (or ``(*B, n, c)``) in the result dtype of ``data`` and ``x``;
      16-bit floats are accumulated in float32.
    """
    if rows:
        if x.shape[-2] == 1 and _large(data, x, shape, transpose):
            # As for columns: the reshapes around the vector cancel with the caller's.
            vector = x[..., 0, :]
            y = spmv_xla(data, vector, offsets=offsets, shape=shape, transpose=transpose)
            return y[..., None, :]
        columns = jnp.swapaxes(x, -1, -2)
        y = spmm_xla(data, columns, offsets=offsets, shape=shape, transpose=transpose)
        return jnp.swapaxes(y, -1, -2)
    columns = x.shape[-1]
    # Shapes are ints, or symbolic dims under jax.export (taken as several columns and
    # a large batch; they may not be compared with ints).
    several = not isinstance(columns, int) or columns > 1
    vector = not several and _large(data, x, shape, transpose)
    return _product(data, x, offsets, shape, transpose, several, vector)


def _large(data, x, shape, transpose: bool) -> bool:
    """Whether a product of one vector (a column or a row of ``x``) has outputs enough to
    run on 1-D vectors (:data:`_VECTOR_MIN_SIZE`; a symbolic size counts as large)."""
    batch = _broadcast_batch(data.shape[:-2], x.shape[:-2])
    size = math.prod(batch) * (shape[1] if transpose else shape[0])
    return not isinstance(size, int) or size >= _VECTOR_MIN_SIZE


def spmv_xla(
    data: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool = False,
) -> Array:
    """``A @ x`` (or ``A^T @ x``) for vectors ``x`` ``(*B, rows)``: :func:`spmm_xla` of one
    column, with the rows minor throughout (no ``(rows, 1)`` array, which TPU would tile
    one row per element). Returns ``(*B, m)`` (or ``(*B, n)``)."""
    return _product(data, x, offsets, shape, transpose, several=False, vector=True)


def _product(data, x, offsets, shape, transpose: bool, several: bool, vector: bool) -> Array:
    """:func:`spmm_xla` (``x`` columns ``(*B, rows, c)``; ``vector``: its interior on
    vectors) or :func:`spmv_xla` (``x`` vectors ``(*B, rows)``, every path on them)."""
    m, n = shape
    out_rows = n if transpose else m
    out_dtype = jnp.result_type(data, x)
    acc = accumulation_dtype(out_dtype)
    vectors = x.ndim < data.ndim
    batch = _broadcast_batch(data.shape[:-2], x.shape[: x.ndim - (1 if vectors else 2)])
    columns = () if vectors else (x.shape[-1],)
    terms = live_terms(offsets, shape, transpose)
    if not terms or out_rows == 0:
        return jnp.zeros((*batch, out_rows, *columns), out_dtype)
    if len(terms) > (_MAX_UNROLLED_TERMS_SEVERAL_COLUMNS if several else _MAX_UNROLLED_TERMS):
        return _looped(data, x, offsets, shape, transpose, batch, acc).astype(out_dtype)
    lo = max(term.lo for term in terms)
    hi = min(term.hi for term in terms)
    if hi - lo < _MIN_INTERIOR_FRACTION * out_rows:
        if len(terms) > _MAX_BOUNDED_TERMS:
            return _looped(data, x, offsets, shape, transpose, batch, acc).astype(out_dtype)
        out = _bounded(data, x, terms, 0, out_rows, (*batch, out_rows, *columns), acc)
        return out.astype(out_dtype)
    if vector and not vectors:
        # A matrix-vector product runs on vectors: ``A @ v`` reshapes ``v`` to ``(n, 1)``
        # and the product back, and those reshapes then cancel with these. A reshape
        # left after the in-place edge updates below makes XLA copy the whole output.
        x = x[..., 0]
    trailing = () if vector else columns
    axis = len(batch)  # the rows
    # Each piece is cast before it is placed, so that no pass over the output follows.
    interior = _interior(data, x, terms, lo, hi, acc, pairwise=several).astype(out_dtype)
    interior = jnp.broadcast_to(interior, (*batch, hi - lo, *trailing))

    def edge(start, stop):
        block = (*batch, stop - start, *trailing)
        return _bounded(data, x, terms, start, stop, block, acc).astype(out_dtype)

    if several:
        # Rows of several columns: one concatenation, which XLA CPU emits as one loop per
        # piece, so the interior loop has no branch and is vectorized over the columns
        # (a pad of the interior left a branch per row in it, and a scalar loop).
        pieces = [edge(0, lo)] if lo > 0 else []
        pieces.append(interior)
        if hi < out_rows:
            pieces.append(edge(hi, out_rows))
        return lax.concatenate(pieces, axis)
    # One column: a concatenation would run every piece's loop over the interior's length
    # with masked loads and stores (where the interior alone needs none), so the
    # interior is padded to the output and the edges are written into it in place.
    out = _pad_axis(interior, axis, lo, out_rows - hi)
    for start, stop in ((0, lo), (hi, out_rows)):
        if stop > start:
            out = lax.dynamic_update_slice_in_dim(out, edge(start, stop), start, axis)
    return out[..., None] if vector and not vectors else out


def sddmm_xla(
    g: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
) -> Array:
    """``D[k, j] = sum_c g[j - offsets[k], c] * x[j, c]`` in bounds, 0 in padding slots.

    One gather of ``g`` rows at ``j - offsets[k]`` (indices from an iota, clamped, and the
    out-of-range slots masked): a single fused loop whatever the number of diagonals, so
    compile time does not grow with it (per-diagonal slices would compile one piece per
    diagonal).
    """
    m, n = shape
    out_dtype = jnp.result_type(g, x)
    acc = accumulation_dtype(out_dtype)
    batch = _broadcast_batch(g.shape[:-2], x.shape[:-2])
    if not offsets or m == 0 or n == 0:
        return jnp.zeros((*batch, len(offsets), n), out_dtype)
    rows, _, inside = slot_indices(offsets, shape)
    shifted = jnp.take(g, jnp.clip(rows, 0, m - 1), axis=-2, mode="clip")  # (*B, k, n, c)
    products = (shifted.astype(acc) * x[..., None, :, :].astype(acc)).sum(axis=-1)
    out = jnp.where(inside, products, jnp.zeros((), acc)).astype(out_dtype)
    return jnp.broadcast_to(out, (*batch, len(offsets), n))
