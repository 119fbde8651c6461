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

A factor is five arrays, the levels one after the other along the block axis:
``inverses``, ``left``, ``right`` (``E``, ``alpha``, ``gamma`` of every eliminated block,
then ``E`` of the last block, with zero ``left``/``right``) and ``lower``, ``upper``
(``L``, ``U`` of every kept block, which the solves need): shapes
``(..., odd_blocks(N), m, m)`` and ``(..., even_blocks(N), m, m)``.

Solves: ``A x = b`` reduces ``b`` level by level (``y = E b_odd``, ``b' = b_even - L y[p
- 1] - U y[p]``), solves the last block and substitutes back (``x_odd = y - alpha
x[q] - gamma x[q + 1]``); ``A^T x = b`` (and ``A^H``) applies the transposed operators
in the reverse order, with the same arrays.

Arrays are ``(P, N, Q, m, m)``: the block axis is 1, ``P`` and ``Q`` are systems side by
side (the callers choose the layout: systems leading, or after the blocks where a level's
even/odd selection should move whole rows of systems). For ``m = 1`` the products are
elementwise.
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp
import jax.scipy.linalg  # noqa: F401  (cho_solve)
import numpy as np
from jax import Array, lax

from .shared import magnitude

#: The block axis of the ``(P, N, Q, m, m)`` arrays.
AXIS = 1


def level_sizes(blocks: int) -> list[int]:
    """The number of blocks at each level that eliminates (sizes > 1), top down."""
    sizes = []
    while blocks > 1:
        sizes.append(blocks)
        blocks -= blocks // 2
    return sizes


def odd_blocks(blocks: int) -> int:
    """The length of ``inverses``/``left``/``right``: eliminated blocks plus the last."""
    return sum(size // 2 for size in level_sizes(blocks)) + 1


def even_blocks(blocks: int) -> int:
    """The length of ``lower``/``upper``: the blocks kept at each level."""
    return sum(size - size // 2 for size in level_sizes(blocks))


def block_size(kl: int, ku: int) -> int:
    return max(kl, ku, 1)


# -- block helpers --------------------------------------------------------------------------


def _take(x: Array, start: int, stop: int, step: int = 1) -> Array:
    return lax.slice_in_dim(x, start, stop, step, axis=AXIS)


def _pad(x: Array, before: int, after: int) -> Array:
    pad = [(0, 0)] * x.ndim
    pad[AXIS] = (before, after)
    return jnp.pad(x, pad)


def _fit(x: Array, size: int, shift: int) -> Array:
    """``out[p] = x[p - shift]`` for ``p < size``, zero where that is outside ``x``."""
    length = x.shape[AXIS]
    x = _pad(x, max(shift, 0), max(size - length - shift, 0))
    start = max(-shift, 0)
    return _take(x, start, start + size)


#: Products contracting at most this many entries are written as sums of elementwise
#: products, which XLA fuses with their neighbours (a ``dot`` is a kernel of its own).
_UNROLLED = 4


def _mm(a: Array, b: Array) -> Array:
    """Batched block products ``a @ b``."""
    if a.shape[-1] <= _UNROLLED:
        terms = [a[..., :, k : k + 1] * b[..., k : k + 1, :] for k in range(a.shape[-1])]
        return functools.reduce(operator.add, terms)
    return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def _transpose(a: Array, conj: bool) -> Array:
    a = jnp.swapaxes(a, -1, -2)
    return a.conj() if conj else a


def _inverse(blocks: Array, hermitian: bool) -> tuple[Array, Array]:
    """``(blocks^-1, failed)``: every invertible block is inverted (``1 x 1``: the
    reciprocal; ``2 x 2``: the adjugate over the determinant; larger: the platform's
    batched LU with partial pivoting, or for ``hermitian`` its Cholesky factorization).
    ``failed``: the block is singular, or (``hermitian``) not positive definite; its
    inverse is then not finite."""
    m = blocks.shape[-1]
    if m == 1:
        pivot = blocks[..., 0, 0]
        failed = ~(pivot.real > 0) if hermitian else pivot == 0
        return 1 / blocks, failed
    if m == 2:
        p, q, r, s = blocks[..., 0, 0], blocks[..., 0, 1], blocks[..., 1, 0], blocks[..., 1, 1]
        determinant = p * s - q * r
        positive = (p.real > 0) & (determinant.real > 0)
        failed = ~positive if hermitian else determinant == 0
        adjugate = jnp.stack([jnp.stack([s, -q], -1), jnp.stack([-r, p], -1)], -2)
        return adjugate / determinant[..., None, None], failed
    eye = jnp.broadcast_to(jnp.eye(m, dtype=blocks.dtype), blocks.shape)
    if hermitian:
        factor = jnp.linalg.cholesky(blocks)  # NaN where not positive definite
        failed = ~jnp.isfinite(factor).all(axis=(-2, -1))
        return jax.scipy.linalg.cho_solve((factor, True), eye), failed
    inverse = jnp.linalg.inv(blocks)
    return inverse, ~jnp.isfinite(inverse).all(axis=(-2, -1))


# -- factorization --------------------------------------------------------------------------


def factor(lower: Array, diagonal: Array, upper: Array, *, hermitian: bool):
    """``(arrays, failed_row)`` for the block tridiagonal ``(L, D, U)`` (``(P, N, Q, m,
    m)`` each; ``L[0]`` and ``U[N - 1]`` zero).

    ``arrays``: per level ``(inverses, couplings, kept)``: ``E`` ``(P, odds, Q, m, m)``
    and ``[alpha gamma]`` ``(..., m, 2 m)`` of its odd blocks, ``[L U]`` ``(..., m, 2 m)``
    of its even ones; then ``E`` of the last block: ``3 * levels + 1`` arrays (see
    :func:`factor_shapes`). ``failed_row`` ``(P, Q)``: -1, or the first row of the first
    block (in the matrix's order) whose diagonal block at its level was singular
    (``hermitian``: not positive definite, so neither is the matrix).
    """
    m = diagonal.shape[-1]
    arrays = []
    failed = jnp.full((diagonal.shape[0], diagonal.shape[2]), -1, np.int32)
    stride = 1  # blocks of the matrix per block of this level

    def record(failed, bad, first_block):
        """``failed`` with this level's failures (its blocks are the matrix's blocks
        ``first_block + 2 q stride``; an iota, not a table the size of the level)."""
        blocks = first_block + 2 * stride * lax.broadcasted_iota(np.int32, bad.shape, AXIS)
        rows = jnp.where(bad, blocks * m, _NONE).min(axis=AXIS)
        return jnp.where((rows != _NONE) & ((failed < 0) | (rows < failed)), rows, failed)

    zeros = None
    for size in level_sizes(diagonal.shape[AXIS]):
        evens = size - size // 2
        kept = _take(jnp.concatenate([lower, upper], axis=-1), 0, size, 2)  # [L U] even
        coupled = _take(jnp.concatenate([lower, upper], axis=-1), 1, size, 2)  # [L U] odd
        inverse, bad = _inverse(_take(diagonal, 1, size, 2), hermitian)
        failed = record(failed, bad, stride)
        couplings = _mm(inverse, coupled)  # [alpha gamma]
        arrays += [inverse, couplings, kept]
        alpha, gamma = couplings[..., :m], couplings[..., m:]
        # Even block p: odd neighbours p - 1 (through L) and p (through U), so
        # [L U] [[gamma[p-1], alpha[p-1], 0], [alpha[p], 0, gamma[p]]] = [S, -L', -U'].
        if zeros is None or zeros.shape[AXIS] != evens:
            zeros = jnp.zeros((*alpha.shape[:AXIS], evens, *alpha.shape[AXIS + 1 :]), alpha.dtype)
        left = jnp.concatenate([_fit(gamma, evens, 1), _fit(alpha, evens, 1), zeros], axis=-1)
        right = jnp.concatenate([_fit(alpha, evens, 0), zeros, _fit(gamma, evens, 0)], axis=-1)
        products = _mm(kept, jnp.concatenate([left, right], axis=-2))
        diagonal = _take(diagonal, 0, size, 2) - products[..., :m]
        lower, upper = -products[..., m : 2 * m], -products[..., 2 * m :]
        stride *= 2
    inverse, bad = _inverse(diagonal, hermitian)
    failed = record(failed, bad, 0)
    return (*arrays, inverse), failed


_NONE = np.iinfo(np.int32).max


def factor_shapes(blocks: int, m: int) -> list[tuple[int, int, int]]:
    """The ``(blocks, rows, columns)`` core shape of each of :func:`factor`'s arrays."""
    shapes = []
    for size in level_sizes(blocks):
        odds, evens = size // 2, size - size // 2
        shapes += [(odds, m, m), (odds, m, 2 * m), (evens, m, 2 * m)]
    return [*shapes, (min(blocks, 1), m, m)]


# -- solves ---------------------------------------------------------------------------------


def solve(arrays, b: Array, *, trans: int = 0) -> Array:
    """``x`` ``(P, N, Q, m, k)`` solving ``op(A) x = b`` with :func:`factor`'s arrays
    (``trans``: 0 ``A``, 1 ``A^T``, 2 ``A^H``); the factor's ``P``/``Q`` are ``b``'s or
    1 (broadcast)."""
    *levels, final = arrays
    levels = [levels[i : i + 3] for i in range(0, len(levels), 3)]
    m = final.shape[-1]
    conj = trans == 2
    saved = []
    for inverse, couplings, kept in levels:
        evens = kept.shape[AXIS]
        size = b.shape[AXIS]
        even, odd = _take(b, 0, size, 2), _take(b, 1, size, 2)
        if trans == 0:
            y = _mm(inverse, odd)  # b' = b_even - L y[p - 1] - U y[p]
            neighbours = jnp.concatenate([_fit(y, evens, 1), _fit(y, evens, 0)], axis=-2)
            b = even - _mm(kept, neighbours)
            saved.append(y)
        else:  # b' = b_even - alpha[p]^T b_odd[p] - gamma[p - 1]^T b_odd[p - 1]
            z = _mm(_transpose(couplings, conj), odd)
            b = even - _fit(z[..., :m, :], evens, 0) - _fit(z[..., m:, :], evens, 1)
            saved.append(odd)
    x = _mm(_transpose(final, conj) if trans else final, b)
    for (inverse, couplings, kept), reduced in zip(reversed(levels), reversed(saved)):
        odds = inverse.shape[AXIS]
        # x[q] and x[q + 1], the even neighbours of odd block q.
        neighbours = jnp.concatenate([_take(x, 0, odds), _fit(x, odds, -1)], axis=-2)
        if trans == 0:
            x_odd = reduced - _mm(couplings, neighbours)
        else:  # x_odd = E^T (b_odd - U[q]^T x[q] - L[q + 1]^T x[q + 1])
            transposed = jnp.concatenate(
                [_take(kept[..., m:], 0, odds), _fit(kept[..., :m], odds, -1)], axis=-1
            )
            coupled = _mm(_transpose_blocks(transposed, m, conj), neighbours)
            x_odd = _mm(_transpose(inverse, conj), reduced - coupled)
        x = _interleave(x, x_odd)
    return x


def _transpose_blocks(pair: Array, m: int, conj: bool) -> Array:
    """``[X^T Y^T]`` of ``[X Y]`` (two ``m x m`` blocks side by side)."""
    return jnp.concatenate(
        [_transpose(pair[..., :m], conj), _transpose(pair[..., m:], conj)], axis=-1
    )


def _interleave(even: Array, odd: Array) -> Array:
    """Blocks ``even[0], odd[0], even[1], ...``."""
    odds = odd.shape[AXIS]
    pairs = jnp.stack([_take(even, 0, odds), odd], axis=AXIS + 1)
    joined = pairs.reshape(*pairs.shape[:AXIS], 2 * odds, *pairs.shape[AXIS + 2 :])
    if even.shape[AXIS] > odds:
        joined = jnp.concatenate([joined, _take(even, odds, odds + 1)], axis=AXIS)
    return joined


# -- the selected inverse -------------------------------------------------------------------


def inverse_blocks(arrays) -> tuple[Array, Array, Array]:
    """The blocks of ``A^-1`` on ``A``'s block tridiagonal pattern, from :func:`factor`'s
    arrays (``(S, ...)``: systems leading, no ``Q``): ``(lower, diagonal, upper)``
    ``(S, N, m, m)``, ``lower[k] = X[k, k - 1]``, ``diagonal[k] = X[k, k]``, ``upper[k] =
    X[k, k + 1]`` for ``X = A^-1`` (zero blocks past the ends).

    Cyclic reduction run backwards (the block form of Takahashi's recurrences): with the
    odd blocks of a level eliminated, ``A^-1`` of the permuted matrix ``[[D_o, C], [R,
    D_e]]`` is ``[[E + E C X R E, -E C X], [-X R E, X]]`` for ``X = S^-1`` the inverse of
    the Schur complement, the next level's matrix. ``E C`` is the stored ``[alpha
    gamma]``, ``R`` the kept blocks' ``[L U]``: each odd block's entries of ``A^-1`` next to
    the band need only ``X``'s blocks on the (coarser) block tridiagonal pattern. So the
    levels are unwound from the last block up, each a few batched ``m x m`` products: O(n
    m^2) work and O(log n) sequential steps, as the factorization.
    """
    *levels, final = arrays
    levels = [levels[i : i + 3] for i in range(0, len(levels), 3)]
    m = final.shape[-1]
    diagonal = final
    lower = upper = jnp.zeros_like(final)
    for inverse, couplings, kept in reversed(levels):
        odds, evens = inverse.shape[AXIS], kept.shape[AXIS]
        alpha, gamma = couplings[..., :m], couplings[..., m:]
        # X on the even blocks q and q + 1 around odd block q.
        d0, d1 = _take(diagonal, 0, odds), _fit(diagonal, odds, -1)
        u0, l1 = _take(upper, 0, odds), _fit(lower, odds, -1)
        # R E: even q couples to odd q through its U, even q + 1 through its L.
        right = _mm(_take(kept[..., m:], 0, odds), inverse)
        left = _mm(_fit(kept[..., :m], odds, -1), inverse)
        y0 = -(_mm(d0, right) + _mm(u0, left))  # X[even q, odd q]
        y1 = -(_mm(l1, right) + _mm(d1, left))  # X[even q + 1, odd q]
        z0 = -(_mm(alpha, d0) + _mm(gamma, l1))  # X[odd q, even q]
        z1 = -(_mm(alpha, u0) + _mm(gamma, d1))  # X[odd q, even q + 1]
        odd = inverse - _mm(alpha, y0) - _mm(gamma, y1)
        diagonal = _interleave(diagonal, odd)
        upper = _interleave(_fit(y0, evens, 0), z1)
        lower = _interleave(_fit(y1, evens, 1), z0)
    return lower, diagonal, upper


def inverse_residual(
    blocks: tuple[Array, Array, Array], inverse: tuple[Array, Array, Array]
) -> Array:
    """Per system ``(S,)``: the largest componentwise residual of the diagonal blocks of
    ``A X = I`` (``blocks`` ``A``'s ``(L, D, U)``, ``inverse`` :func:`selected_inverse`'s
    ``X``, both ``(S, N, m, m)``): ``max |A X - I| / (|A| |X|)`` over those blocks, which
    the selected blocks of ``X`` determine. About ``eps`` where cyclic reduction is
    stable; large where the reduction grew (a matrix that needs row interchanges across
    blocks)."""
    L, D, U = blocks
    lower, diagonal, upper = inverse
    size = D.shape[AXIS]
    above, below = _fit(upper, size, 1), _fit(lower, size, -1)  # X[k - 1, k], X[k + 1, k]
    product = _mm(L, above) + _mm(D, diagonal) + _mm(U, below)
    residual = magnitude(product - jnp.eye(D.shape[-1], dtype=D.dtype))
    scale = _mm(magnitude(L), magnitude(above)) + _mm(magnitude(D), magnitude(diagonal))
    scale = scale + _mm(magnitude(U), magnitude(below))
    tiny = np.finfo(residual.dtype).tiny
    ratio = residual / jnp.maximum(scale, tiny)
    ratio = jnp.where(jnp.isfinite(ratio), ratio, jnp.inf)
    return jnp.max(ratio, axis=(1, 2, 3)) if size else jnp.zeros(D.shape[:1], ratio.dtype)


# -- from the band ---------------------------------------------------------------------------


def dia_blocks(
    data: Array, offsets: tuple[int, ...], m: int, triangle: str | None = None
) -> tuple[Array, Array, Array]:
    """``(L, D, U)`` ``(..., N, m, m)`` of the square matrix whose DIA ``data``
    ``(..., nd, n)`` has these ``offsets`` (padding slots must hold zeros), ``N =
    ceil(n / m)``; rows past ``n`` are identity rows. ``triangle`` ``"upper"`` or
    ``"lower"``: the Hermitian matrix that triangle defines (with the real part of the
    diagonal).

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
    relative = np.where(mirrored, r, c - m)
    padded = jnp.concatenate([data, jnp.zeros((*data.shape[:-2], 1, n), data.dtype)], axis=-2)
    starts = lax.broadcasted_iota(np.int32, (blocks, 1, 1), 0) * m
    columns = starts + relative.astype(np.int32)
    rows = starts + r.astype(np.int32)
    target = starts + (c - m).astype(np.int32)  # the column of A this entry is in
    inside = (rows < n) & (target >= 0) & (target < n)
    values = padded[..., diagonal_index, jnp.clip(columns, 0, max(n - 1, 0))]
    values = jnp.where(mirrored, values.conj(), values)
    if triangle is not None:
        values = jnp.where(offset == 0, values.real.astype(values.dtype), values)
    values = jnp.where(inside, values, 0)
    values = jnp.where((rows >= n) & (offset == 0), 1, values).astype(data.dtype)
    return values[..., :m], values[..., m : 2 * m], values[..., 2 * m :]


# -- systems in the primitives' layout -------------------------------------------------------


def factor_systems(
    data: Array, offsets: tuple[int, ...], m: int, triangle: str | None = None
) -> tuple[tuple[Array, ...], Array]:
    """:func:`factor` of the systems ``data`` ``(S, nd, n)`` (padding slots zero):
    ``(arrays, failed)``, the arrays ``(S, *core)`` (see :func:`factor_shapes`) and
    ``failed`` ``(S,)`` (-1, or a row, see :func:`factor`)."""
    lower, diagonal, upper = (x[:, :, None] for x in dia_blocks(data, offsets, m, triangle))
    arrays, failed = factor(lower, diagonal, upper, hermitian=triangle is not None)
    return tuple(a[:, :, 0] for a in arrays), failed[:, 0]


def solve_systems(arrays, b: Array, *, trans: int = 0) -> Array:
    """:func:`solve` for :func:`factor_systems`' arrays (``(S, *core)``, or one factor
    without ``S``) and right-hand sides ``b`` ``(S, k, n)``: ``x`` of ``b``'s shape."""
    systems, k, n = b.shape
    m = arrays[-1].shape[-1]
    blocks = -(-n // m)
    rhs = jnp.pad(b, [(0, 0), (0, 0), (0, blocks * m - n)])
    rhs = jnp.moveaxis(rhs.reshape(systems, k, blocks, m), 1, -1)[:, :, None]  # (S, N, 1, m, k)
    if arrays[-1].ndim == 3:  # one factor for every system
        arrays = tuple(a[None, :, None] for a in arrays)
    else:
        arrays = tuple(a[:, :, None] for a in arrays)
    x = solve(arrays, rhs, trans=trans)[:, :, 0]  # (S, N, m, k)
    return jnp.moveaxis(x, -1, 1).reshape(systems, k, blocks * m)[..., :n]
