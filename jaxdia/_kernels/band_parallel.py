"""Banded factorizations and solves by block cyclic reduction: O(log n) sequential steps.

A band with ``kl`` subdiagonals and ``ku`` superdiagonals is block tridiagonal with
``m x m`` blocks, ``m = max(kl, ku, 1)``: block row ``k`` holds ``L[k]`` (coupling to
block ``k - 1``), ``D[k]`` and ``U[k]`` (to block ``k + 1``); the last block is padded
with identity rows. One level of cyclic reduction eliminates the odd-numbered blocks at
once: with ``E = D_odd^-1``, ``alpha = E L_odd`` and ``gamma = E U_odd``, each even
block row becomes a row of the half-sized block tridiagonal Schur complement

    D'[p] = D[p] - L[p] gamma[p - 1] - U[p] alpha[p]
    L'[p] = -L[p] alpha[p - 1],  U'[p] = -U[p] gamma[p]

(even block ``p`` has odd neighbours ``p - 1`` and ``p``; odd block ``q`` has even
neighbours ``q`` and ``q + 1``, missing neighbours are zero blocks). After
``ceil(log2 N)`` levels one block is left. Every level is a handful of batched ``m x m``
products over all its blocks: O(n m^2) work in all, O(log n) sequential steps, and no
loop whose length depends on ``n`` (the levels are unrolled; their count is static).

It is Gaussian elimination on the matrix reordered odd-even level by level, with
pivoting only inside each diagonal block (``E`` by Gauss-Jordan with partial pivoting):
backward stable where that elimination is, which covers matrices diagonally dominant by
rows or by columns (the reordering and the Schur complements stay dominant) and
Hermitian positive definite ones (they stay positive definite). Others may lose accuracy
to growth in the Schur complements; the callers check the residual (see
``jaxdia._kernels.band_refine``).

The layout: the block axis is the LAST (minor) one. A set of blocks is ``(S, r, c, N)``:
``S`` systems, an ``r x c`` block (``m x m``, ``m x 2m`` for two side by side, ``m x k``
for right-hand sides), then the ``N`` blocks. TPUs lay an array's two minor dims out in
tiles of 8 x 128 elements; with the blocks minor a level is elementwise work over
vectors of ``N`` lanes, where ``(S, N, m, m)`` would spend a whole tile on each small
block (and XLA's generated code follows the tiles). So every step works along the last
axis: the even/odd selection is a stride-2 slice, the interleave two interior pads (two
stride-2 scatters on TPU), the right-hand sides come in and go out by one gather each
(no array with ``m`` minor). The blocks' products and inverses have two forms
(:data:`FORMS`, chosen per platform by ``jaxdia._dispatch.block_form``): on TPU blocks of
up to :data:`LANE_BLOCKS` rows never leave the lanes (a product is elementwise work
reduced over the contracted index, an inverse Gauss-Jordan elimination over the ``m x
m`` dims, its pivot steps one loop past :data:`UNROLLED_PIVOTS` rows); on CPU and GPUs,
whose memory has no tiles, ``dot_general`` and ``jnp.linalg`` take all but the smallest
blocks (with the blocks in front, as their batch dims), as they do blocks of more than
:data:`LANE_BLOCKS` rows everywhere (tiles then filled much by the block itself).

A factor is five kinds of arrays, the levels one after the other: per level ``E``
``(S, m, m, odds)``, ``[alpha gamma]`` ``(S, m, 2m, odds)`` of its eliminated blocks and
``[L U]`` ``(S, m, 2m, evens)`` of its kept ones (which the solves need), then ``E`` of
the last block ``(S, m, m, 1)`` (see :func:`factor_shapes`).

Solves: ``A x = b`` reduces ``b`` level by level (``y = E b_odd``, ``b' = b_even - L y[p
- 1] - U y[p]``), solves the last block and substitutes back (``x_odd = y - alpha
x[q] - gamma x[q + 1]``); ``A^T x = b`` (and ``A^H``) applies the transposed operators
in the reverse order, with the same arrays.
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp
import jax.scipy.linalg  # noqa: F401  (cho_solve)
import numpy as np
from jax import Array, lax

from .shared import interleave, magnitude

#: Blocks of up to this many rows stay in the lanes throughout in the ``"lanes"`` form:
#: their products elementwise, their inverses Gauss-Jordan elimination (``O(m)``
#: operations). Larger blocks go through ``dot_general`` and ``jnp.linalg``, which put the
#: blocks in front (as their batch dims), where an ``m x m`` block fills much of its TPU
#: tiles itself. See ``benchmarks/notes/compile.md``.
LANE_BLOCKS = 16

#: Gauss-Jordan elimination of blocks of more than this many rows runs its pivot steps
#: as one ``fori_loop`` (the step a dynamic index), where smaller blocks unroll them: a
#: step is about 34 lines of program, so 21 diagonals (``m = 10``) unrolled made each
#: level's inverse 340 lines, 2-3x the program the blocks-major layout had.
UNROLLED_PIVOTS = 4


def level_sizes(blocks: int) -> list[int]:
    """The number of blocks at each level that eliminates (sizes > 1), top down."""
    sizes = []
    while blocks > 1:
        sizes.append(blocks)
        blocks -= blocks // 2
    return sizes


def odd_blocks(blocks: int) -> int:
    """The blocks of ``inverses``/``left``/``right``: eliminated blocks plus the last."""
    return sum(size // 2 for size in level_sizes(blocks)) + 1


def even_blocks(blocks: int) -> int:
    """The blocks of ``lower``/``upper``: the blocks kept at each level."""
    return sum(size - size // 2 for size in level_sizes(blocks))


def block_size(kl: int, ku: int) -> int:
    return max(kl, ku, 1)


# -- block helpers --------------------------------------------------------------------------


def _take(x: Array, start: int, stop: int, step: int = 1) -> Array:
    """Blocks ``start:stop:step`` (the last axis)."""
    return lax.slice_in_dim(x, start, stop, step, axis=x.ndim - 1)


def _fit(x: Array, size: int, shift: int) -> Array:
    """``out[p] = x[p - shift]`` for ``p < size``, zero where that is outside ``x``."""
    length = x.shape[-1]
    before, after = max(shift, 0), max(size - length - shift, 0)
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(before, after)])
    start = max(-shift, 0)
    return _take(x, start, start + size)


def _rows(x: Array, start: int, stop: int) -> Array:
    return x[..., start:stop, :, :]


def _cols(x: Array, start: int, stop: int) -> Array:
    return x[..., start:stop, :]


#: How the blocks' products and inverses are written (:func:`factor`'s ``form``; the
#: platform's is ``jaxdia._dispatch.block_form``'s choice).
FORMS = ("lanes", "dot")

#: Products contracting at most this many entries are written as sums of elementwise
#: products in every form, which XLA fuses with their neighbours (a ``dot`` is a kernel of
#: its own).
_UNROLLED = 4


def _mm(a: Array, b: Array, form: str) -> Array:
    """Block products ``a @ b``: ``(..., r, j, N)`` by ``(..., j, c, N)``."""
    j = a.shape[-2]
    if j <= _UNROLLED:
        # Column k of a (r x 1) by row k of b (1 x c), elementwise over the blocks.
        terms = [a[..., :, k : k + 1, :] * b[..., k : k + 1, :, :] for k in range(j)]
        return functools.reduce(operator.add, terms)
    if form == "lanes" and j <= 2 * LANE_BLOCKS:
        # One product (r, j, c) per block, summed over j: a major dim, the lanes stay.
        return jnp.sum(a[..., :, :, None, :] * b[..., None, :, :, :], axis=-3)
    return jnp.einsum("...rjn,...jcn->...rcn", a, b, precision=lax.Precision.HIGHEST)


def _transpose(a: Array, conj: bool) -> Array:
    a = jnp.swapaxes(a, -3, -2)
    return a.conj() if conj else a


def _eliminate(blocks: Array, *, hermitian: bool, invert: bool) -> tuple[Array, Array, Array]:
    """Gauss-Jordan elimination of the blocks ``(..., m, m, N)``, the blocks in the lanes:
    ``(work, pivots (..., m, N), interchanges (..., N))``, ``work`` with ``invert`` ``[I
    X]`` ``(..., m, 2m, N)``, ``X`` the inverses.

    Partial pivoting inside each block (the pivot of the largest :func:`magnitude` among
    the rows not yet eliminated, as LAPACK's ``?getrf``); none for ``hermitian``, whose
    pivots stay positive exactly where the block is positive definite. Each step is a
    handful of operations over the whole set of blocks: ``O(m)`` operations in all,
    ``O(m^3)`` work per block; past :data:`UNROLLED_PIVOTS` rows the steps are one
    ``fori_loop``, the same operations with the step's row and column taken by dynamic
    index. A zero pivot makes the inverse not finite."""
    m = blocks.shape[-2]
    index = lax.broadcasted_iota(np.int32, (m, 1), 0)  # a block's rows (..., m, N)
    row = index[:, :, None]  # and (..., m, c, N)
    work = blocks
    if invert:
        eye = (index == lax.broadcasted_iota(np.int32, (1, m), 1)).astype(blocks.dtype)
        work = jnp.concatenate([blocks, jnp.broadcast_to(eye[:, :, None], blocks.shape)], -2)
    swaps = jnp.zeros((*blocks.shape[:-3], blocks.shape[-1]), np.int32)

    def step(k, work: Array, swaps: Array, eliminate: bool) -> tuple[Array, Array, Array]:
        """Pivot step ``k`` (an int, or traced in the loop): ``(work, swaps, pivot)``."""
        if not hermitian:
            column = magnitude(_line(work, k, -2)[..., 0, :])
            chosen = jnp.argmax(jnp.where(index >= k, column, -1), axis=-2)  # (..., N)
            swaps = swaps + (chosen != k)
            is_chosen = (index == chosen[..., None, :])[..., None, :]  # (..., m, 1, N)
            pivot_row = jnp.sum(jnp.where(is_chosen, work, 0), axis=-3)
            work = jnp.where(is_chosen, _line(work, k, -3), work)  # row k to chosen
            work = jnp.where(row == k, pivot_row[..., None, :, :], work)
        current = _line(work, k, -3)  # (..., 1, c, N)
        pivot = _line(current, k, -2)[..., 0, 0, :]
        if not eliminate:
            return work, swaps, pivot
        normalized = current / pivot[..., None, None, :]
        eliminated = work - _line(work, k, -2) * normalized
        return jnp.where(row == k, normalized, eliminated), swaps, pivot

    if m <= UNROLLED_PIVOTS:
        pivots = []
        for k in range(m):
            # The last step's elimination is the inverse's only (its pivot is known).
            work, swaps, pivot = step(k, work, swaps, invert or k < m - 1)
            pivots.append(pivot)
        return work, jnp.stack(pivots, axis=-2), swaps

    def looped(k, carry):
        work, swaps, pivots = carry
        work, swaps, pivot = step(k, work, swaps, True)
        return work, swaps, lax.dynamic_update_index_in_dim(pivots, pivot, k, -2)

    pivots = jnp.zeros((*blocks.shape[:-3], m, blocks.shape[-1]), blocks.dtype)
    work, swaps, pivots = lax.fori_loop(0, m, looped, (work, swaps, pivots))
    return work, pivots, swaps


def _line(x: Array, k, axis: int) -> Array:
    """Row or column ``k`` of blocks ``(..., r, c, N)`` (``axis`` -3 or -2), kept as a
    dim of one: a static slice for an int ``k``, a dynamic one for a traced ``k``."""
    if isinstance(k, int):
        return lax.slice_in_dim(x, k, k + 1, axis=x.ndim + axis)
    return lax.dynamic_slice_in_dim(x, k, 1, x.ndim + axis, allow_negative_indices=False)


def _inverse(blocks: Array, hermitian: bool, form: str) -> tuple[Array, Array]:
    """``(blocks^-1, failed)`` of blocks ``(..., m, m, N)``: every invertible block is
    inverted (``1 x 1``: the reciprocal; ``2 x 2``: the adjugate over the determinant;
    larger, up to :data:`LANE_BLOCKS` rows in the ``"lanes"`` form: Gauss-Jordan with
    partial pivoting inside the block, see :func:`_eliminate`; else the platform's batched
    LU with partial pivoting, or for ``hermitian`` its Cholesky factorization). ``failed`` ``(...,
    N)``: the block is singular, or (``hermitian``) not positive definite; its inverse is
    then not finite."""
    m = blocks.shape[-2]
    if m == 1:
        pivot = blocks[..., 0, 0, :]
        failed = ~(pivot.real > 0) if hermitian else pivot == 0
        return 1 / blocks, failed
    if m == 2:
        p, q = blocks[..., 0, 0, :], blocks[..., 0, 1, :]
        r, s = blocks[..., 1, 0, :], blocks[..., 1, 1, :]
        determinant = p * s - q * r
        positive = (p.real > 0) & (determinant.real > 0)
        failed = ~positive if hermitian else determinant == 0
        adjugate = jnp.stack([jnp.stack([s, -q], -2), jnp.stack([-r, p], -2)], -3)
        return adjugate / determinant[..., None, None, :], failed
    if form == "lanes" and m <= LANE_BLOCKS:
        work, pivots, _ = _eliminate(blocks, hermitian=hermitian, invert=True)
        inverse = _cols(work, m, 2 * m)
        failed = ~jnp.isfinite(inverse).all(axis=(-3, -2))
        if hermitian:
            failed = failed | ~(pivots.real > 0).all(axis=-2)
            inverse = jnp.where(failed[..., None, None, :], jnp.nan, inverse)
        return inverse, failed
    # The platform's factorizations, the blocks in front (their batch dims).
    front = jnp.moveaxis(blocks, -1, -3)
    if hermitian:
        factor = jnp.linalg.cholesky(front)  # NaN where not positive definite
        eye = jnp.broadcast_to(jnp.eye(m, dtype=blocks.dtype), front.shape)
        inverse = jax.scipy.linalg.cho_solve((factor, True), eye)
    else:
        inverse = jnp.linalg.inv(front)
    inverse = jnp.moveaxis(inverse, -3, -1)
    return inverse, ~jnp.isfinite(inverse).all(axis=(-3, -2))


def slogdet_blocks(blocks: Array, *, form: str = "dot") -> tuple[Array, Array]:
    """``(sign, log|det|)`` ``(..., N)`` of each block of ``(..., m, m, N)`` (as
    ``jnp.linalg.slogdet``: sign 0 and ``-inf`` for a singular block); ``form``: see
    :func:`factor`."""
    m = blocks.shape[-2]
    if m > (LANE_BLOCKS if form == "lanes" else 2):
        return jnp.linalg.slogdet(jnp.moveaxis(blocks, -1, -3))
    swaps = None
    if m == 1:
        diagonal = blocks[..., 0, :, :]
    elif m == 2:
        p, q = blocks[..., 0, 0, :], blocks[..., 0, 1, :]
        r, s = blocks[..., 1, 0, :], blocks[..., 1, 1, :]
        diagonal = (p * s - q * r)[..., None, :]
    else:
        _, diagonal, swaps = _eliminate(blocks, hermitian=False, invert=False)
    size = jnp.abs(diagonal)
    logabs = jnp.sum(jnp.log(size), axis=-2)
    sign = jnp.prod(diagonal / jnp.where(size == 0, 1, size), axis=-2)
    if swaps is not None:
        sign = jnp.where(swaps % 2 == 1, -sign, sign)
    return jnp.where(jnp.any(size == 0, axis=-2), 0, sign).astype(blocks.dtype), logabs


# -- factorization --------------------------------------------------------------------------


def factor(lower: Array, diagonal: Array, upper: Array, *, hermitian: bool, form: str = "dot"):
    """``(arrays, failed_row)`` for the block tridiagonal ``(L, D, U)`` (``(S, m, m, N)``
    each; ``L[0]`` and ``U[N - 1]`` zero).

    ``arrays``: per level ``(inverses, couplings, kept)``: ``E`` ``(S, m, m, odds)``
    and ``[alpha gamma]`` ``(S, m, 2 m, odds)`` of its odd blocks, ``[L U]`` ``(S, m,
    2 m, evens)`` of its even ones; then ``E`` of the last block: ``3 * levels + 1``
    arrays (see :func:`factor_shapes`). ``failed_row`` ``(S,)``: -1, or the first row of
    the first block (in the matrix's order) whose diagonal block at its level was
    singular (``hermitian``: not positive definite, so neither is the matrix).

    ``form`` (:data:`FORMS`): ``"lanes"`` (TPU) keeps blocks of up to
    :data:`LANE_BLOCKS` rows in the lanes throughout: inverted by Gauss-Jordan elimination
    (:func:`_eliminate`), multiplied as one broadcast product summed over the contracted
    index (a reduction over a major dim, one operation whatever ``m``). ``"dot"`` (CPU and
    GPUs, whose memory has no tiles) multiplies by ``dot_general`` past 4 contracted
    entries and inverts blocks of more than 2 rows by ``jnp.linalg``, the blocks in
    front (as their batch dims), as every form does blocks of more than
    :data:`LANE_BLOCKS` rows.
    """
    m = diagonal.shape[-2]
    mm = functools.partial(_mm, form=form)
    arrays = []
    failed = jnp.full(diagonal.shape[:-3], -1, np.int32)
    stride = 1  # blocks of the matrix per block of this level

    def record(failed, bad, first_block):
        """``failed`` with this level's failures (its blocks are the matrix's blocks
        ``first_block + 2 q stride``; an iota, not a table the size of the level)."""
        blocks = first_block + 2 * stride * lax.broadcasted_iota(np.int32, bad.shape, bad.ndim - 1)
        rows = jnp.where(bad, blocks * m, _NONE).min(axis=-1)
        return jnp.where((rows != _NONE) & ((failed < 0) | (rows < failed)), rows, failed)

    zeros = None
    for size in level_sizes(diagonal.shape[-1]):
        evens = size - size // 2
        pair = jnp.concatenate([lower, upper], axis=-2)  # [L U]
        kept, coupled = _take(pair, 0, size, 2), _take(pair, 1, size, 2)  # even, odd
        inverse, bad = _inverse(_take(diagonal, 1, size, 2), hermitian, form)
        failed = record(failed, bad, stride)
        couplings = mm(inverse, coupled)  # [alpha gamma]
        arrays += [inverse, couplings, kept]
        alpha, gamma = _cols(couplings, 0, m), _cols(couplings, m, 2 * m)
        # Even block p: odd neighbours p - 1 (through L) and p (through U), so
        # [L U] [[gamma[p-1], alpha[p-1], 0], [alpha[p], 0, gamma[p]]] = [S, -L', -U'].
        if zeros is None or zeros.shape[-1] != evens:
            zeros = jnp.zeros((*alpha.shape[:-1], evens), alpha.dtype)
        left = jnp.concatenate([_fit(gamma, evens, 1), _fit(alpha, evens, 1), zeros], axis=-2)
        right = jnp.concatenate([_fit(alpha, evens, 0), zeros, _fit(gamma, evens, 0)], axis=-2)
        products = mm(kept, jnp.concatenate([left, right], axis=-3))
        diagonal = _take(diagonal, 0, size, 2) - _cols(products, 0, m)
        lower, upper = -_cols(products, m, 2 * m), -_cols(products, 2 * m, 3 * m)
        stride *= 2
    inverse, bad = _inverse(diagonal, hermitian, form)
    failed = record(failed, bad, 0)
    return (*arrays, inverse), failed


_NONE = np.iinfo(np.int32).max


def factor_shapes(blocks: int, m: int) -> list[tuple[int, int, int]]:
    """The ``(rows, columns, blocks)`` core shape of each of :func:`factor`'s arrays."""
    shapes = []
    for size in level_sizes(blocks):
        odds, evens = size // 2, size - size // 2
        shapes += [(m, m, odds), (m, 2 * m, odds), (m, 2 * m, evens)]
    return [*shapes, (m, m, min(blocks, 1))]


# -- solves ---------------------------------------------------------------------------------


def solve(arrays, b: Array, *, trans: int = 0, form: str = "dot") -> Array:
    """``x`` ``(S, m, k, N)`` solving ``op(A) x = b`` with :func:`factor`'s arrays
    (``trans``: 0 ``A``, 1 ``A^T``, 2 ``A^H``); the factor's ``S`` is ``b``'s or 1
    (broadcast). ``form``: see :func:`factor`."""
    mm = functools.partial(_mm, form=form)
    *levels, final = arrays
    levels = [levels[i : i + 3] for i in range(0, len(levels), 3)]
    m = final.shape[-2]
    conj = trans == 2
    saved = []
    for inverse, couplings, kept in levels:
        evens = kept.shape[-1]
        size = b.shape[-1]
        even, odd = _take(b, 0, size, 2), _take(b, 1, size, 2)
        if trans == 0:
            y = mm(inverse, odd)  # b' = b_even - L y[p - 1] - U y[p]
            neighbours = jnp.concatenate([_fit(y, evens, 1), _fit(y, evens, 0)], axis=-3)
            b = even - mm(kept, neighbours)
            saved.append(y)
        else:  # b' = b_even - alpha[p]^T b_odd[p] - gamma[p - 1]^T b_odd[p - 1]
            z = mm(_transpose(couplings, conj), odd)
            b = even - _fit(_rows(z, 0, m), evens, 0) - _fit(_rows(z, m, 2 * m), evens, 1)
            saved.append(odd)
    x = mm(_transpose(final, conj) if trans else final, b)
    for (inverse, couplings, kept), reduced in zip(reversed(levels), reversed(saved)):
        odds = inverse.shape[-1]
        # x[q] and x[q + 1], the even neighbours of odd block q.
        neighbours = jnp.concatenate([_take(x, 0, odds), _fit(x, odds, -1)], axis=-3)
        if trans == 0:
            x_odd = reduced - mm(couplings, neighbours)
        else:  # x_odd = E^T (b_odd - U[q]^T x[q] - L[q + 1]^T x[q + 1])
            transposed = jnp.concatenate(
                [_take(_cols(kept, m, 2 * m), 0, odds), _fit(_cols(kept, 0, m), odds, -1)],
                axis=-2,
            )
            coupled = mm(_transpose_blocks(transposed, m, conj), neighbours)
            x_odd = mm(_transpose(inverse, conj), reduced - coupled)
        x = _interleave(x, x_odd, form)
    return x


def _transpose_blocks(pair: Array, m: int, conj: bool) -> Array:
    """``[X^T Y^T]`` of ``[X Y]`` (two ``m x m`` blocks side by side)."""
    return jnp.concatenate(
        [_transpose(_cols(pair, 0, m), conj), _transpose(_cols(pair, m, 2 * m), conj)], axis=-2
    )


def _interleave(even: Array, odd: Array, form: str) -> Array:
    """Blocks ``even[0], odd[0], even[1], ...`` (``even`` has as many blocks as ``odd``
    or one more) along the lanes, no axis of two; in the ``"lanes"`` form (TPU) by
    scatters (see :func:`jaxdia._kernels.shared.interleave`)."""
    length = even.shape[-1] + odd.shape[-1]
    return interleave(even, odd, -1, length, scatter=form == "lanes")


# -- the selected inverse -------------------------------------------------------------------


def inverse_blocks(arrays, *, form: str = "dot") -> tuple[Array, Array, Array]:
    """The blocks of ``A^-1`` on ``A``'s block tridiagonal pattern, from :func:`factor`'s
    arrays: ``(lower, diagonal, upper)`` ``(S, m, m, N)``, ``lower[k] = X[k, k - 1]``,
    ``diagonal[k] = X[k, k]``, ``upper[k] = X[k, k + 1]`` for ``X = A^-1`` (zero blocks
    past the ends).

    Cyclic reduction run backwards (the block form of Takahashi's recurrences): with the
    odd blocks of a level eliminated, ``A^-1`` of the permuted matrix ``[[D_o, C], [R,
    D_e]]`` is ``[[E + E C X R E, -E C X], [-X R E, X]]`` for ``X = S^-1`` the inverse of
    the Schur complement, the next level's matrix. ``E C`` is the stored ``[alpha
    gamma]``, ``R`` the kept blocks' ``[L U]``: each odd block's entries of ``A^-1`` next to
    the band need only ``X``'s blocks on the (coarser) block tridiagonal pattern. So the
    levels are unwound from the last block up, each a few batched ``m x m`` products: O(n
    m^2) work and O(log n) sequential steps, as the factorization. ``form``: see
    :func:`factor`.
    """
    mm = functools.partial(_mm, form=form)
    *levels, final = arrays
    levels = [levels[i : i + 3] for i in range(0, len(levels), 3)]
    m = final.shape[-2]
    diagonal = final
    lower = upper = jnp.zeros_like(final)
    for inverse, couplings, kept in reversed(levels):
        odds, evens = inverse.shape[-1], kept.shape[-1]
        alpha, gamma = _cols(couplings, 0, m), _cols(couplings, m, 2 * m)
        # X on the even blocks q and q + 1 around odd block q.
        d0, d1 = _take(diagonal, 0, odds), _fit(diagonal, odds, -1)
        u0, l1 = _take(upper, 0, odds), _fit(lower, odds, -1)
        # R E: even q couples to odd q through its U, even q + 1 through its L.
        right = mm(_take(_cols(kept, m, 2 * m), 0, odds), inverse)
        left = mm(_fit(_cols(kept, 0, m), odds, -1), inverse)
        y0 = -(mm(d0, right) + mm(u0, left))  # X[even q, odd q]
        y1 = -(mm(l1, right) + mm(d1, left))  # X[even q + 1, odd q]
        z0 = -(mm(alpha, d0) + mm(gamma, l1))  # X[odd q, even q]
        z1 = -(mm(alpha, u0) + mm(gamma, d1))  # X[odd q, even q + 1]
        odd = inverse - mm(alpha, y0) - mm(gamma, y1)
        diagonal = _interleave(diagonal, odd, form)
        upper = _interleave(_fit(y0, evens, 0), z1, form)
        lower = _interleave(_fit(y1, evens, 1), z0, form)
    return lower, diagonal, upper


def inverse_residual(
    blocks: tuple[Array, Array, Array], inverse: tuple[Array, Array, Array], *, form: str = "dot"
) -> Array:
    """Per system ``(S,)``: the largest componentwise residual of the diagonal blocks of
    ``A X = I`` and of ``X A = I`` (``blocks`` ``A``'s ``(L, D, U)``, ``inverse``
    :func:`inverse_blocks`' ``X``, both ``(S, m, m, N)``): ``max |A X - I| / (|A| |X|)``
    and ``max |X A - I| / (|X| |A|)`` over those blocks, which the selected blocks of
    ``X`` determine. About ``eps`` where cyclic reduction is stable; large where the
    reduction grew (a matrix that needs row interchanges across blocks).

    Both sides: :func:`inverse_blocks` computes each odd block's ``X[odd, odd]`` from the
    rows of ``A X = I`` (``E - alpha X[even, odd] - gamma X[even', odd]``), so those rows'
    diagonal blocks hold to rounding whatever the growth was; the columns of ``X A = I``
    are not built in and show it (a tridiagonal permutation plus noise: ``A X`` exact,
    ``X A`` and the entries of ``X`` off by the growth). ``form``: see :func:`factor`."""
    mm = functools.partial(_mm, form=form)
    L, D, U = blocks
    lower, diagonal, upper = inverse
    size, m = D.shape[-1], D.shape[-2]
    if not size:
        return jnp.zeros(D.shape[:-3], np.finfo(D.dtype).dtype)
    above, below = _fit(upper, size, 1), _fit(lower, size, -1)  # X[k - 1, k], X[k + 1, k]
    # A[k - 1, k] and A[k + 1, k]: the blocks X[k, k - 1] and X[k, k + 1] meet in X A.
    coupled_above, coupled_below = _fit(U, size, 1), _fit(L, size, -1)
    eye = jnp.eye(m, dtype=D.dtype)[:, :, None]
    tiny = np.finfo(D.dtype).tiny

    def ratio(terms: list[tuple[Array, Array]]) -> Array:
        product = functools.reduce(operator.add, [mm(a, b) for a, b in terms])
        scale = functools.reduce(operator.add, [mm(magnitude(a), magnitude(b)) for a, b in terms])
        ratio = magnitude(product - eye) / jnp.maximum(scale, tiny)
        ratio = jnp.where(jnp.isfinite(ratio), ratio, jnp.inf)
        return jnp.max(ratio, axis=(-3, -2, -1))

    rows = ratio([(L, above), (D, diagonal), (U, below)])
    columns = ratio([(lower, coupled_above), (diagonal, D), (upper, coupled_below)])
    return jnp.maximum(rows, columns)


# -- from the band and back -------------------------------------------------------------------


def dia_blocks(
    data: Array, offsets: tuple[int, ...], m: int, triangle: str | None = None
) -> tuple[Array, Array, Array]:
    """``(L, D, U)`` ``(..., m, m, N)`` of the square matrix whose DIA ``data`` ``(...,
    nd, n)`` has these ``offsets`` (padding slots must hold zeros), ``N = ceil(n / m)``;
    rows past ``n`` are identity rows. ``triangle`` ``"upper"`` or ``"lower"``: the
    Hermitian matrix that triangle defines (with the real part of the diagonal).

    One gather: block ``K``'s entry ``(r, c)`` of ``[L D U]`` is ``A[K m + r, (K - 1) m +
    c]``, diagonal ``o = c - m - r``, read from column ``(K - 1) m + c`` (or, for the
    mirrored triangle, ``conj`` of diagonal ``-o`` at column ``K m + r``).
    """
    n = data.shape[-1]
    blocks = -(-n // m)
    r, c = np.meshgrid(np.arange(m), np.arange(3 * m), indexing="ij")
    offset = c - m - r
    mirrored = np.zeros_like(offset, bool)
    if triangle == "upper":
        mirrored = offset < 0
    elif triangle == "lower":
        mirrored = offset > 0
    source = np.where(mirrored, -offset, offset)
    row_of = {o: i for i, o in enumerate(offsets)}
    zero_row = len(offsets)
    diagonal_index = np.vectorize(lambda o: row_of.get(int(o), zero_row))(source)
    # Column read, relative to K m: (K - 1) m + c, or K m + r when mirrored.
    relative = np.where(mirrored, r, c - m)[:, :, None]
    offset, mirrored = offset[:, :, None], mirrored[:, :, None]
    padded = jnp.concatenate([data, jnp.zeros((*data.shape[:-2], 1, n), data.dtype)], axis=-2)
    starts = lax.broadcasted_iota(np.int32, (1, 1, blocks), 2) * m
    columns = starts + relative.astype(np.int32)
    rows = starts + r[:, :, None].astype(np.int32)
    target = starts + (c[:, :, None] - m).astype(np.int32)  # the column of A this entry is in
    inside = (rows < n) & (target >= 0) & (target < n)
    values = padded[..., diagonal_index[:, :, None], jnp.clip(columns, 0, max(n - 1, 0))]
    values = jnp.where(mirrored, values.conj(), values)
    if triangle is not None:
        values = jnp.where(offset == 0, values.real.astype(values.dtype), values)
    values = jnp.where(inside, values, 0)
    values = jnp.where((rows >= n) & (offset == 0), 1, values).astype(data.dtype)
    return _cols(values, 0, m), _cols(values, m, 2 * m), _cols(values, 2 * m, 3 * m)


def to_blocks(b: Array, m: int) -> Array:
    """Right-hand sides ``b`` ``(S, k, n)`` as blocks ``(S, m, k, N)`` (zero rows past
    ``n``): one gather of the rows ``K m + r``, so that no array has ``m`` minor."""
    if m == 1:
        return b[..., None, :, :]
    n = b.shape[-1]
    blocks = -(-n // m)
    rows = lax.broadcasted_iota(np.int32, (m, blocks), 1) * m
    rows = rows + lax.broadcasted_iota(np.int32, (m, blocks), 0)
    values = jnp.where(rows < n, b[..., jnp.minimum(rows, n - 1)], 0)  # (S, k, m, N)
    return jnp.swapaxes(values, -3, -2)


def from_blocks(x: Array, n: int) -> Array:
    """Blocks ``x`` ``(S, m, k, N)`` as rows ``(S, k, n)`` (:func:`to_blocks` undone):
    row ``i`` is entry ``i % m`` of block ``i // m``, one gather."""
    m, blocks = x.shape[-3], x.shape[-1]
    if m == 1:
        return x[..., 0, :, :n]
    flat = jnp.swapaxes(x, -3, -2).reshape(*x.shape[:-3], x.shape[-2], m * blocks)
    rows = lax.iota(np.int32, n)
    return flat[..., (rows % m) * blocks + rows // m]


# -- systems in the primitives' layout -------------------------------------------------------


def factor_systems(
    data: Array,
    offsets: tuple[int, ...],
    m: int,
    triangle: str | None = None,
    *,
    form: str = "dot",
) -> tuple[tuple[Array, ...], Array]:
    """:func:`factor` of the systems ``data`` ``(S, nd, n)`` (padding slots zero):
    ``(arrays, failed)``, the arrays ``(S, *core)`` (see :func:`factor_shapes`) and
    ``failed`` ``(S,)`` (-1, or a row, see :func:`factor`)."""
    lower, diagonal, upper = dia_blocks(data, offsets, m, triangle)
    hermitian = triangle is not None
    arrays, failed = factor(lower, diagonal, upper, hermitian=hermitian, form=form)
    return tuple(arrays), failed


def solve_systems(arrays, b: Array, *, trans: int = 0, form: str = "dot") -> Array:
    """:func:`solve` for :func:`factor_systems`' arrays (``(S, *core)``, or one factor
    without ``S``) and right-hand sides ``b`` ``(S, k, n)``: ``x`` of ``b``'s shape."""
    n = b.shape[-1]
    if n == 0:
        return b
    if arrays[-1].ndim == 3:  # one factor for every system
        arrays = tuple(a[None] for a in arrays)
    x = solve(arrays, to_blocks(b, arrays[-1].shape[-2]), trans=trans, form=form)
    return from_blocks(x, n)
