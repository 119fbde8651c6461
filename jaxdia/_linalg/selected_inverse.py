"""The selected inverse of a square banded matrix: ``A^-1`` on ``A``'s own pattern.

:func:`selected_inverse` returns a DiaMatrix with ``A``'s offsets holding the entries of
``A^-1`` there: the posterior variances of a Gaussian Markov random field (its diagonal),
and the gradient of ``log |det A|`` (``A^-T`` on ``A``'s pattern, see
:mod:`jaxdia._linalg.determinant`).

How: the band is block tridiagonal with ``m x m`` blocks (``m`` the wider of the two
half-bandwidths), and every entry of ``A^-1`` within the band lies in the block tridiagonal
part of ``A^-1``. Block cyclic reduction factors ``A`` and
:func:`jaxdia._kernels.band_parallel.inverse_blocks` unwinds it, level by level, into
those blocks (the block form of Takahashi's recurrences ``Z = U^-1 L^-1`` on the band):
O(n m^2) work, O(log n) sequential steps, on every platform, and no dense inverse or
``n`` solves. Everything is ``jax.numpy``, so the result is differentiable (at the same
banded cost), batched, and usable under ``jit`` and ``vmap``.

On CPU, a Hermitian positive definite matrix's inverse on the band is read instead from
its LAPACK Cholesky factor (``?pbtrf``'s, or ``?pttrf``'s ``L D L^H`` for a tridiagonal
one) by Takahashi's recurrences, one compiled pass over the rows
(:func:`jaxdia._kernels.lapack.pbsinv`; :func:`factor_data`): the gradient of
``cho_factor(A).logdet()`` then costs little more than the factor it reuses, and
``selected_inverse(A, assume_a="pos")`` a factor and that pass (where no diagonal of the
triangle not read lies beyond the band of the one read). Its derivative differentiates
the cyclic reduction above.

Cyclic reduction pivots only inside its ``m x m`` blocks: it is exact (up to rounding,
backward stable) for Hermitian positive definite matrices and matrices diagonally
dominant by rows or columns. For any other matrix the result is checked: the diagonal
blocks of ``A X = I`` and of ``X A = I`` depend only on the selected blocks of ``X``, and
a system whose componentwise residual there exceeds :func:`max_residual` (``32 eps``:
the reduction grew, as it does for a matrix that needs row interchanges across blocks,
or ``A`` is singular) is refused. The check is necessary, not sufficient: a reduction
that grew can still meet it on those blocks (a tridiagonal permutation plus noise in
float32 does, with errors of a few hundred ``eps``). On CPU a refused general system is
computed again from the banded LU with partial pivoting (:func:`pivoted_data`: reverse
mode through it, two loops over the rows, run only when some system is refused); on
GPU/TPU, and for ``assume_a="pos"``, it is all NaN.

Periodic matrices (:mod:`jaxdia._linalg.periodic`): ``A = B + U V^T`` with ``B`` the
band and the corners of rank ``r``; :func:`periodic_data` corrects ``B``'s selected
inverse by ``r`` solves each with ``B`` and ``A^T`` (the periodic factor's), O(n m^2 + n
r (m + r)) in all.
"""

from __future__ import annotations

from functools import cache, partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .. import _dispatch
from .._checks import is_traced
from .._geometry import accumulation_dtype, band_widths, in_bounds
from .._kernels import band_parallel, band_scan, lapack
from .._kernels.band_layouts import PB, PT
from .._matrix import DiaMatrix, as_square_matrix
from .._parts import DiaParts
from . import banded, periodic
from .plan import Plan, Use, choose, hermitian_offsets


def _triangle(lower: bool | None) -> str | None:
    if lower is None:
        return None
    return "lower" if lower else "upper"


def block_inverse(A: DiaParts, lower: bool | None) -> tuple[tuple[Array, Array, Array], Array]:
    """``((lower, diagonal, upper), ok)``: the blocks ``(S, m, m, N)`` of ``A^-1`` on
    ``A``'s block tridiagonal pattern, ``A``'s batch flattened to ``S`` systems (``lower``
    given: of the Hermitian matrix that triangle defines), and ``ok`` ``(S,)``: whether
    the residual check passed."""
    data, offsets, (n, _) = A
    # Blocks as wide as all the offsets, those of the triangle not read included: their
    # entries of the inverse lie in the block tridiagonal part only then.
    m = band_parallel.block_size(*band_widths(offsets))
    data = jnp.where(in_bounds(offsets, (n, n)), data, 0)
    data = data.astype(accumulation_dtype(data.dtype))
    flat = data.reshape(-1, *data.shape[-2:])
    form = _dispatch.block_form(_dispatch.default_platform())
    blocks = band_parallel.dia_blocks(flat, offsets, m, _triangle(lower))
    arrays, _ = band_parallel.factor(*blocks, hermitian=lower is not None, form=form)
    inverse = band_parallel.inverse_blocks(arrays, form=form)
    residual = band_parallel.inverse_residual(blocks, inverse, form=form)
    return inverse, residual <= max_residual(data.dtype)


def max_residual(dtype: np.dtype) -> float:
    """The largest componentwise residual of the diagonal blocks of ``A X = I`` and ``X A
    = I`` a selected inverse is returned with: ``32 eps``, what a backward stable
    reduction leaves (see the module docstring). Unlike a solve, a selected inverse has no
    refinement to recover digits a grown reduction lost: its error is about the residual
    times ``cond(A)``, so a looser bound (``sqrt(eps)``) returned well conditioned
    matrices with thousands of ``eps`` of error as a success."""
    return 32 * float(np.finfo(dtype).eps)


def gather(
    inverse: tuple[Array, Array, Array],
    offsets: tuple[int, ...],
    n: int,
    *,
    transpose: bool = False,
) -> Array:
    """DIA ``data`` ``(S, nd, n)`` holding ``X[i, j]`` at the slot of ``A[i, j]`` (or
    ``X[j, i]`` with ``transpose``: ``X^T`` on ``A``'s pattern), from the blocks ``(S, m,
    m, N)`` of :func:`block_inverse`; zero in the padding slots."""
    lower, diagonal, upper = inverse
    m = diagonal.shape[-2]
    # Indices computed in the program (iota), not folded in as (nd, n) constants.
    slots = lax.broadcasted_iota(np.int32, (len(offsets), n), 1)
    rows = slots - jnp.asarray(offsets, np.int32)[:, None]  # A[rows, slots] sits here
    inside = (rows >= 0) & (rows < n)
    cols = slots
    if transpose:
        rows, cols = cols, rows
    rows, cols = jnp.where(inside, rows, 0), jnp.where(inside, cols, 0)
    block = rows // m
    local = jnp.clip(cols - (block - 1) * m, 0, 3 * m - 1)  # [0, 3 m) for |rows - cols| <= m
    joined = jnp.concatenate([lower, diagonal, upper], axis=-2)  # (S, m, 3 m, N)
    values = joined[:, rows % m, local, block]
    return jnp.where(inside, values, 0)


def selected_data(
    A: DiaParts,
    plan: Plan,
    *,
    transpose: bool = False,
    factor: banded.Factor | None = None,
) -> Array:
    """DIA ``data`` of ``A^-1`` (``transpose``: of ``A^-T``) on ``A``'s pattern, of
    ``A.data``'s shape (batch included), by the route ``plan`` names; a Cholesky plan
    (``plan.lower`` given): the inverse of the Hermitian matrix that triangle of ``A``
    defines, from its whole band. NaN for a system the residual check refuses.

    A periodic plan goes through the periodic LU factor (``factor``, or one factored
    here): :func:`periodic_data`, at banded cost; where that factor was refused eagerly
    (its ``info`` nonzero outside ``jit``) as the whole band its offsets span, as
    :func:`jaxdia._linalg.banded.factor` does."""
    n = A.shape[0]
    if n == 0:
        return jnp.zeros(A.data.shape, accumulation_dtype(A.dtype))
    if plan.split is not None:
        if factor is None:
            factor = banded.factor_periodic(A, plan)
        if factor.correction is not None and _usable(factor.info):
            return periodic_data(A, factor, transpose=transpose)
    if plan.lower is None:
        return band_data(A, transpose=transpose, pivoted=plan.pivoted)
    # assume_a="pos" for a matrix that is not: NaN, as its Cholesky factor would be.
    inverse, ok = block_inverse(A, plan.lower)
    values = gather(inverse, A.offsets, n, transpose=transpose)
    values = jnp.where(ok[:, None, None], values, jnp.nan)
    return values.reshape(A.data.shape)


def _reduction(data: Array, offsets: tuple[int, ...], transpose: bool) -> tuple[Array, Array]:
    """:func:`gather`'s values ``(S, nd, n)`` of :func:`block_inverse` of the ``S``
    matrices of ``data``, and the residual check's ``ok`` ``(S,)``."""
    n = data.shape[-1]
    inverse, ok = block_inverse(DiaParts(data, offsets, (n, n)), None)
    return gather(inverse, offsets, n, transpose=transpose), ok


def band_data(A: DiaParts, *, transpose: bool, pivoted: bool) -> Array:
    """:func:`selected_data` of a general ``A`` (no periodic split): cyclic reduction's
    values where the residual check passes, and elsewhere, where the plan says
    ``pivoted`` (on CPU), :func:`pivoted_data` (exact for any nonsingular matrix, computed
    only when some system was refused), else NaN."""
    n = A.shape[0]
    data = jnp.where(in_bounds(A.offsets, (n, n)), A.data, 0)
    data = data.astype(accumulation_dtype(data.dtype)).reshape(-1, *A.data.shape[-2:])
    if pivoted:
        values = _pivoting_band_data(data, A.offsets, transpose)
    else:
        values, ok = _reduction(data, A.offsets, transpose)
        values = jnp.where(ok[:, None, None], values, jnp.nan)
    return values.reshape(A.data.shape)


@partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _pivoting_band_data(data: Array, offsets: tuple[int, ...], transpose: bool) -> Array:
    """:func:`band_data` on CPU, for ``S`` clean matrices ``data`` ``(S, nd, n)``."""
    values, ok = _reduction(data, offsets, transpose)
    return _compiled_refused(values, ok, data, offsets, transpose)


@_pivoting_band_data.defjvp
def _pivoting_band_data_jvp(offsets, transpose, primals, tangents):
    """Cyclic reduction's derivative where the check passes, the pivoted LU's elsewhere.
    Cyclic reduction runs on the identity in place of a refused matrix: on that matrix
    its values are not finite, and reverse mode would multiply their zero cotangent by
    them (NaN). One more reduction than the values take, for derivatives only."""
    (data,), (tangent,) = primals, tangents
    n = data.shape[-1]
    _, ok = _reduction(lax.stop_gradient(data), offsets, transpose)
    with_diagonal = tuple(sorted({*offsets, 0}))
    rows = [with_diagonal.index(k) for k in offsets]
    keep = ok[:, None, None]
    eye = jnp.zeros((len(with_diagonal), n), data.dtype).at[with_diagonal.index(0)].set(1)
    eye = jnp.where(in_bounds(with_diagonal, (n, n)), eye, 0)

    def plain(data: Array) -> Array:
        widened = jnp.zeros((*data.shape[:-2], len(with_diagonal), n), data.dtype)
        widened = widened.at[:, rows].set(data)
        safe = jnp.where(keep, widened, eye)
        inverse, _ = block_inverse(DiaParts(safe, with_diagonal, (n, n)), None)
        values = gather(inverse, offsets, n, transpose=transpose)
        return _recompute_refused(values, ok, data, offsets, transpose)

    return jax.jvp(plain, (data,), (tangent,))


def _recompute_refused(
    values: Array, ok: Array, data: Array, offsets: tuple[int, ...], transpose: bool
) -> Array:
    """``values`` where ``ok``, :func:`pivoted_data` elsewhere, behind a ``lax.cond`` on
    every system passing, so that the common case runs no scan. Only ``data`` enters the
    cond (``values`` passed through it would be copied in and out)."""
    shape, dtype = values.shape, values.dtype
    exact = lax.cond(
        jnp.all(ok),
        lambda data: jnp.zeros(shape, dtype),
        lambda data: pivoted_data(data, offsets, transpose=transpose),
        data,
    )
    return jnp.where(ok[:, None, None], values, exact)


@cache
def _systems_under_vmap(offsets: tuple[int, ...], transpose: bool):
    """:func:`_recompute_refused` whose ``jax.vmap`` folds the mapped axis into the
    systems: a vmapped ``lax.cond`` would become a ``select`` that runs the scans on
    every call."""

    @jax.custom_batching.custom_vmap
    def recompute(values: Array, ok: Array, data: Array) -> Array:
        return _recompute_refused(values, ok, data, offsets, transpose)

    @recompute.def_vmap
    def _rule(size: int, batched: list[bool], values: Array, ok: Array, data: Array):
        values, ok, data = (
            x if mapped else jnp.broadcast_to(x, (size, *x.shape))
            for x, mapped in zip((values, ok, data), batched, strict=True)
        )
        out = recompute(
            values.reshape(-1, *values.shape[2:]), ok.reshape(-1), data.reshape(-1, *data.shape[2:])
        )
        return out.reshape(values.shape), True

    return recompute


#: One compiled call: eagerly, the scans' reverse mode would be traced op by op.
_compiled_refused = jax.jit(
    lambda values, ok, data, offsets, transpose: _systems_under_vmap(offsets, transpose)(
        values, ok, data
    ),
    static_argnums=(3, 4),
)


def pivoted_data(data: Array, offsets: tuple[int, ...], *, transpose: bool) -> Array:
    """DIA ``data`` ``(S, nd, n)`` of ``A^-1`` (``transpose``: ``A^-T``) on ``A``'s
    pattern for the ``S`` matrices of ``data`` (zero padding), exact up to rounding for any
    nonsingular ``A``; NaN for a singular one.

    ``d log |det A| = Re tr(A^-1 dA)``: the gradient of ``log det A = sum log U_ii`` (up
    to the sign of the interchanges) with respect to ``A``'s entries is ``A^-T``. Reverse
    mode through the banded LU with partial pivoting
    (:func:`jaxdia._kernels.band_scan.pivoted_diagonal`, the pivots held at those its
    forward pass chooses) gives it on the band the LU reads: O(n l (l + u)) work and
    memory, ``n`` sequential steps each way (Takahashi's recurrences with the row
    interchanges, written by JAX). ``A^-1`` on ``A``'s pattern is ``A^-T`` on the mirrored
    offsets, so without ``transpose`` the band is widened to hold those. Differentiable
    again (JAX differentiates the scans)."""
    n = data.shape[-1]
    full = offsets if transpose else tuple(sorted({*offsets, *(-k for k in offsets)}))
    kl, ku = band_widths(full)
    # The rows of the band: one column per offset -kl .. ku, A[r, r + o] = data[o, r + o].
    columns = [
        data[:, offsets.index(k), :] if k in offsets else jnp.zeros_like(data[:, 0, :])
        for k in range(-kl, ku + 1)
    ]
    stacked = jnp.stack(columns, axis=-1)  # (S, n, kl + ku + 1), column-aligned

    def gradient(stacked: Array) -> tuple[Array, Array]:
        def logdet(stacked: Array) -> Array:
            rows = band_scan.shift_columns(stacked, np.arange(-kl, ku + 1))
            diagonal = band_scan.pivoted_diagonal(rows, kl=kl, ku=ku)
            if jnp.iscomplexobj(diagonal):  # holomorphic: its transpose is A^-T, unconjugated
                return jnp.sum(jnp.log(diagonal))
            return jnp.sum(jnp.log(jnp.abs(diagonal)))

        value, pullback = jax.vjp(logdet, stacked)
        (grad,) = pullback(jnp.ones((), value.dtype))
        return grad, jnp.isfinite(value)  # singular: log 0

    grad, regular = jax.vmap(gradient)(stacked)  # grad[s, j, c]: A^-T[j - o, j], o = c - kl
    rows = []
    for k in offsets:
        if transpose:
            rows.append(grad[:, :, k + kl])
        else:  # A^-1[j - k, j] = A^-T[j, j - k]: offset -k, column j - k
            rows.append(_shifted(grad[:, :, kl - k], k))
    values = jnp.where(in_bounds(offsets, (n, n)), jnp.stack(rows, axis=-2), 0)
    return jnp.where(regular[:, None, None], values, jnp.nan)


def _shifted(row: Array, shift: int) -> Array:
    """``out[..., j] = row[..., j - shift]``, zero where that is outside ``row``."""
    n = row.shape[-1]
    pad = [(0, 0)] * (row.ndim - 1)
    if shift >= 0:
        return jnp.pad(row[..., : max(n - shift, 0)], [*pad, (min(shift, n), 0)])
    return jnp.pad(row[..., -shift:], [*pad, (0, min(-shift, n))])


def _upper_band(factor: banded.Factor) -> tuple[Array, int, bool]:
    """``(c, kd, lower)``: ``?pbtrf``'s band array of ``factor`` (``PB``'s own, or
    ``R = D^1/2 L^H`` of ``PT``'s ``L D L^H`` as an upper band, ``kd = 1``)."""
    if factor.plan.layout is PB:
        kd, lower = factor.plan.widths
        return factor.arrays[0], kd, bool(lower)
    d, e = factor.arrays  # e[i] = L[i + 1, i]
    root = jnp.sqrt(d).astype(e.dtype)
    above = _shifted(root * e.conj(), 1)  # R[j - 1, j], column j
    return jnp.stack([above, root], axis=-1), 1, False


def _beyond(factor: banded.Factor, offsets: tuple[int, ...]) -> np.ndarray:
    """``(nd, 1)``: the diagonals farther from the main one than ``factor``'s band."""
    kd = factor.plan.widths[0] if factor.plan.layout is PB else 1
    return np.array([abs(offset) > kd for offset in offsets], bool)[:, None]


@partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _factor_data(
    data: Array, factor: banded.Factor, offsets: tuple[int, ...], transpose: bool
) -> Array:
    n = data.shape[-1]
    c, kd, stored_lower = _upper_band(factor)
    z = lapack.pbsinv(c, kd=kd, lower=stored_lower)  # Z = A^-1 on c's triangle
    rows = []
    for offset in offsets:
        if abs(offset) > kd:  # zero: see factor_data
            rows.append(jnp.zeros(z.shape[:-1], z.dtype))
        elif stored_lower:  # z[j, i - j] = Z[i, j], i >= j
            rows.append(z[..., -offset] if offset <= 0 else _shifted(z[..., offset].conj(), offset))
        else:  # z[j, kd + i - j] = Z[i, j], i <= j
            below = _shifted(z[..., kd + offset].conj(), offset)
            rows.append(z[..., kd - offset] if offset >= 0 else below)
    values = jnp.stack(rows, axis=-2)
    if transpose:  # A^-T = conj(A^-1)
        values = values.conj()
    values = jnp.where(in_bounds(offsets, (n, n)) & ~_beyond(factor, offsets), values, 0)
    return jnp.where((factor.info == 0)[..., None, None], values, jnp.nan)


@_factor_data.defjvp
def _factor_data_jvp(offsets, transpose, primals, tangents):
    data, factor = primals
    n = data.shape[-1]
    value = _factor_data(data, factor, offsets, transpose)

    def reduction(data: Array) -> Array:
        return selected_data(DiaParts(data, offsets, (n, n)), factor.plan, transpose=transpose)

    _, tangent = jax.jvp(reduction, (data,), (tangents[0],))
    return value, jnp.where(_beyond(factor, offsets), 0, tangent).astype(value.dtype)


def factor_data(A: DiaParts, factor: banded.Factor, *, transpose: bool = False) -> Array:
    """:func:`selected_data` of the Hermitian positive definite matrix that the triangle of
    ``A`` its LAPACK Cholesky ``factor`` (``PB`` or ``PT``: where the plan says
    ``takahashi``) read defines, by Takahashi's recurrences on that factor: the same
    entries, except those of the other triangle farther from the diagonal than the
    factor's band (zero here; unused by the log-determinant's gradient). NaN for a system
    whose factor failed (``info`` nonzero). Differentiable in ``A.data`` (the derivative
    is cyclic reduction's, :func:`selected_data`'s)."""
    layout = factor.plan.layout
    if layout not in (PB, PT):
        raise ValueError(f"factor_data: needs a banded Cholesky factor, got {layout!r}")
    n = A.shape[0]
    if n == 0:
        return jnp.zeros(A.data.shape, accumulation_dtype(A.dtype))
    return _factor_data(A.data, factor, A.offsets, transpose)


def _usable(info: Array) -> bool:
    """Whether a periodic factor is used: always under a trace (its ``info`` masks the
    result), and eagerly when it did not fail (else :func:`jaxdia._linalg.banded.factor`
    would have replaced it by the whole band's)."""
    return is_traced(info) or not np.any(np.asarray(info))


def _corner_entries(
    offsets: tuple[int, ...], n: int, where: periodic.Split
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The corner slots of an ``n x n`` matrix's DIA ``data`` (the diagonals outside
    ``where.band``): ``(diagonal, slot, row, column)``, each ``(count,)``, for the entries
    ``A[row, column]`` in bounds."""
    diagonals, slots = [], []
    for k, offset in enumerate(offsets):
        if k in where.band:
            continue
        column = np.arange(n)
        keep = (column - offset >= 0) & (column - offset < n)
        diagonals.append(np.full(int(keep.sum()), k))
        slots.append(column[keep])
    diagonal, slot = np.concatenate(diagonals), np.concatenate(slots)
    return diagonal, slot, slot - np.asarray(offsets)[diagonal], slot


def periodic_data(A: DiaParts, factor: banded.Factor, *, transpose: bool = False) -> Array:
    """:func:`selected_data` of a general periodic ``A = B + U V^T`` (``n > 0``) from its
    periodic ``factor`` (band ``B``'s factor and the corners' correction), at banded cost.

    ``B A^-1 = I - U V^T A^-1`` gives ``A^-1 = B^-1 - Z Q`` for ``Z = B^-1 U`` (``r``
    solves with ``B``) and ``Q = V^T A^-1``, the ``r`` rows of ``A^-1`` that ``V^T``
    selects (``r`` transposed solves with ``A``, through the periodic factor). On ``B``'s
    diagonals, the selected inverse of ``B`` (:func:`block_inverse`) minus ``Z Q`` on those
    entries, O(nnz r); on the corner diagonals, whose entries sit in ``V``'s columns, and
    for ``A^-1`` (not ``A^-T``) in the corner rows, rows of ``A^-1`` read directly (the
    corner rows not among ``V``'s columns cost one more transposed solve each). The solves
    are ``factor``'s (LAPACK's on CPU, cyclic reduction's on GPU/TPU), so derivatives come
    from them and from ``B``'s selected inverse, at the same cost. NaN for a system whose
    ``factor.info`` is nonzero (``B`` singular, ``A`` singular, or the correction's growth
    too large: see :mod:`jaxdia._linalg.periodic`) or whose ``B`` the residual check
    refuses.
    """
    return _periodic_data(A.data, factor, offsets=A.offsets, transpose=transpose)


@partial(jax.jit, static_argnames=("offsets", "transpose"))
def _periodic_data(
    data: Array, factor: banded.Factor, *, offsets: tuple[int, ...], transpose: bool
) -> Array:
    """:func:`periodic_data` as one compiled call."""
    n = data.shape[-1]
    A = DiaParts(data, offsets, (n, n))
    where = factor.plan.split
    assert where is not None and factor.correction is not None
    work = accumulation_dtype(A.dtype)
    data = jnp.where(in_bounds(offsets, (n, n)), A.data, 0).astype(work)
    A = A.with_data(data)
    band_offsets = where.band_offsets(offsets)
    band = DiaParts(data[..., list(where.band), :], band_offsets, (n, n))
    band_factor = banded.Factor(factor.plan.band, factor.arrays, factor.info)
    Z = banded.solve(band, band_factor, periodic.corners(data, offsets, where))
    # The rows of A^-1 to compute: V's columns, then (for A^-1) the other corner rows.
    diagonal, slot, row, column = _corner_entries(offsets, n, where)
    columns = periodic.columns(n, where)
    extra = np.setdiff1d(row, columns) if not transpose else np.zeros(0, np.int32)
    rows = np.concatenate([columns, extra]).astype(np.int32)
    position = np.full(n, -1)
    position[rows] = np.arange(len(rows))
    unit = jnp.zeros((n, len(rows)), work).at[rows, np.arange(len(rows))].set(1)
    # Q^T: column c is row rows[c] of A^-1, Q^T[j, c] = A^-1[rows[c], j].
    Qt = banded.solve(A, factor, unit, trans=1)
    systems = int(np.prod(A.batch_shape, dtype=int))
    Z = Z.reshape(systems, n, where.rank)
    Qt = Qt.reshape(systems, n, len(rows))
    # B's diagonals: B^-1 minus Z Q on their entries (i, j) = (j - offset, j).
    values = band_data(band, transpose=transpose, pivoted=factor.plan.pivoted)
    values = values.reshape(systems, len(band_offsets), n)
    slots = np.arange(n)
    first = np.clip(slots[None, :] - np.asarray(band_offsets)[:, None], 0, n - 1)  # i
    second = np.broadcast_to(slots, first.shape)  # j
    if transpose:  # X[j, i]
        first, second = second, first
    product = jnp.sum(Z[:, first, :] * Qt[:, second, : where.rank], axis=-1)
    inside = in_bounds(band_offsets, (n, n))
    values = jnp.where(inside, values - product, 0)
    out = jnp.zeros((systems, len(offsets), n), values.dtype)
    out = out.at[:, list(where.band)].set(values)
    # The corner diagonals: A^-1[i, j] = Q^T[j, position[i]] (A^-T: A^-1[j, i]).
    first, second = (column, row) if transpose else (row, column)
    out = out.at[:, diagonal, slot].set(Qt[:, second, position[first]])
    ok = factor.info.reshape(-1) == 0  # B's selected inverse: NaN already where refused
    out = jnp.where(ok[:, None, None], out, jnp.nan)
    return out.reshape(A.data.shape)


def selected_inverse(
    A: DiaMatrix, *, assume_a: str = "gen", lower: bool = False, method: str = "auto"
) -> DiaMatrix:
    """``A^-1`` on ``A``'s pattern: a DiaMatrix with ``A``'s offsets holding ``A^-1``'s
    entries there (exact up to rounding, at banded cost).

    The diagonal of a sparse precision matrix's inverse is the vector of posterior
    variances of a Gaussian Markov random field, and ``A^-T`` on ``A``'s pattern is the
    gradient of ``log |det A|`` (:func:`jaxdia.slogdet` uses it). Computing all of
    ``A^-1`` would take O(n^2) memory; this takes O(n m^2) work and memory for offsets
    within ``[-m, m]``, by block cyclic reduction run backwards (Takahashi's recurrences in
    block form; O(log n) sequential steps on every platform; on CPU, with ``"pos"``, by
    those recurrences on LAPACK's Cholesky factor, one compiled pass over the rows). See
    ``docs/solvers.md`` ("Determinants and the selected inverse").

    ``assume_a="pos"`` (SciPy's name in ``scipy.linalg.solve``): ``A`` is Hermitian
    positive definite and only the triangle ``lower`` selects is read (as
    :func:`jaxdia.cho_factor`); the result still holds every offset of ``A`` (``A^-1`` is
    Hermitian). ``"gen"``: any square matrix. Both are exact for Hermitian positive
    definite and diagonally dominant matrices; other matrices are checked (componentwise
    residual of ``A X = I`` or ``X A = I`` on its diagonal blocks above ``32 eps``: the
    matrix needs row interchanges across the ``m x m`` blocks; a check that a grown
    reduction can still pass, see the module docstring). With ``"gen"`` on CPU such a
    matrix's result is computed again from the banded LU with partial pivoting, exactly, at
    O(n l (l + u)) work but ``n`` sequential steps (only when some matrix of the batch
    needs it); on GPU/TPU, and with ``"pos"`` (for a matrix that is then not positive
    definite), it is all NaN, as is the result for a singular matrix.

    Differentiable in ``A.data`` (forward and reverse mode, at the same banded cost),
    batched over ``A.batch_shape``, and usable under ``jit`` and ``vmap``. A periodic
    matrix (corner diagonals that :func:`jaxdia.lu_factor` splits off as a low-rank
    correction ``A = B + U V^T``) costs about as much as its band: ``B``'s selected inverse
    corrected on ``A``'s pattern by ``r`` solves with the periodic factor (``r`` the
    corners' rank). Where that factor is refused (``B`` singular or too ill-conditioned
    next to ``A``), as ``lu_factor`` does: outside ``jit`` the whole band its offsets span
    (exact, but O(n^3)), under ``jit`` all NaN.

    Args:
      A: a square DiaMatrix (possibly batched).
      assume_a: ``"gen"`` (general) or ``"pos"`` (Hermitian positive definite).
      lower: with ``"pos"``: read the lower triangle instead of the upper one.
      method: which implementation factors ``A`` where a factor is used (a periodic
        matrix's, and with ``"pos"`` on CPU the Cholesky factor), as for
        :func:`jaxdia.lu_factor`.

    Returns:
      A DiaMatrix of ``A``'s offsets, shape and batch shape (16-bit matrices in float32).

    Raises:
      TypeError: if ``A`` is not a DiaMatrix or ``lower`` not a bool.
      ValueError: if ``A`` is not square, ``assume_a`` is not ``"gen"`` or ``"pos"``, or
        ``method`` is not one of :func:`jaxdia.lu_factor`'s.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([-1.0, 2.5, -1.0], offsets=[-1, 0, 1], shape=(5, 5))
      >>> X = jaxdia.selected_inverse(A, assume_a="pos")
      >>> bool(jnp.allclose(X.diagonal(), jnp.diag(jnp.linalg.inv(A.todense())), atol=1e-6))
      True
    """
    A = as_square_matrix(A, "selected_inverse")
    if assume_a not in ("gen", "pos"):
        raise ValueError(f"selected_inverse: assume_a must be 'gen' or 'pos', got {assume_a!r}")
    if not isinstance(lower, (bool, np.bool_)):
        raise TypeError(f"selected_inverse: lower must be a bool, got {type(lower).__name__}")
    parts, triangle = A._parts, bool(lower)
    plan = choose(
        parts.offsets,
        parts.shape[0],
        None if assume_a == "gen" else triangle,
        use=Use.INVERSE,
        method=method,
        function="selected_inverse",
    )
    if plan.compiled_whole:
        data = _compiled_selected_inverse(
            parts.data, parts.offsets, parts.shape, assume_a, triangle, plan
        )
    else:
        data = _selected_inverse(parts, assume_a, triangle, plan)
    return DiaMatrix._wrap(parts.with_data(data))


@partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))
def _compiled_selected_inverse(
    data: Array,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    assume_a: str,
    lower: bool,
    plan: Plan,
) -> Array:
    """:func:`selected_inverse`'s values of a band, as one compiled program: eagerly its
    hundreds of operations would each compile apart (seconds for the first call)."""
    return _selected_inverse(DiaParts(data, offsets, shape), assume_a, lower, plan)


def _selected_inverse(parts: DiaParts, assume_a: str, triangle: bool, plan: Plan) -> Array:
    """:func:`selected_inverse`'s values (checked arguments), by the route ``plan``
    names."""
    if assume_a == "gen":
        return selected_data(parts, plan)
    if plan.split is not None:
        # Periodic: the Hermitian matrix's corners split off as a general matrix's are.
        hermitian = hermitian_parts(parts, triangle)
        values = selected_data(hermitian, plan)
        rows = [hermitian.offsets.index(k) for k in parts.offsets]
        return values[..., rows, :]
    if plan.takahashi:
        return factor_data(parts, banded.factor(parts, plan))
    return selected_data(parts, plan)


def hermitian_parts(A: DiaParts, lower: bool) -> DiaParts:
    """The Hermitian matrix that the triangle ``lower`` selects of a square ``A`` defines
    (the real part of its diagonal), with :func:`jaxdia._linalg.plan.hermitian_offsets`
    (zero on those of
    ``A``'s that neither the triangle nor its mirror image holds)."""
    data, offsets, (n, _) = A
    data = jnp.where(in_bounds(offsets, (n, n)), data, 0)
    triangle = [k for k in offsets if (k <= 0 if lower else k >= 0)]
    full = hermitian_offsets(offsets, lower)
    rows = []
    for k in full:
        if k == 0 and 0 in triangle:
            rows.append(data[..., offsets.index(0), :].real.astype(data.dtype))
        elif k in triangle:
            rows.append(data[..., offsets.index(k), :])
        elif -k in triangle:  # H[i, i + k] = conj(H[i + k, i]): column i + k of offset -k
            rows.append(jnp.roll(data[..., offsets.index(-k), :], k, axis=-1).conj())
        else:
            rows.append(jnp.zeros(data.shape[:-2] + (n,), data.dtype))
    stacked = jnp.stack(rows, axis=-2)
    return DiaParts(jnp.where(in_bounds(full, (n, n)), stacked, 0), full, (n, n))
