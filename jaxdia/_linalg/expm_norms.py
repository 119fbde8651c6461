"""The 1-norms that choose :func:`jaxdia.expm_multiply`'s Taylor degree ``m`` and
substeps ``s``: SciPy's ``LazyOperatorNormInfo`` and ``_fragment_3_1`` (Al-Mohy & Higham
2011, code fragment 3.1, with SciPy's table of ``theta_m``).

Fragment 3.1 reads ``||A||_1`` and, where condition (3.13) fails, ``d_p = ||A^p||_1^(1/p)``
for ``p = 2 .. p_max + 1``. For a DiaMatrix both are exact: ``||A||_1`` is the largest
column sum of ``|A|`` (:func:`one_norm`), and ``||A^p||_1`` for ``p <= 9`` comes from the
DIA powers ``A^p`` (:func:`power_norms`), where SciPy estimates it with ``onenormest`` (an
underestimate). Powers with more than :data:`POWER_ENTRIES` stored entries are bounded
instead (``||A^(a + b)|| <= ||A^a|| ||A^b||``), which may cost substeps, never accuracy.
Where the powers' offsets spread over more than :data:`POWER_ROWS` diagonals (scattered
offsets, as ``kron`` builds for a spin chain: ``0, +-2^k``) their program would grow with
the spread, so the norms are estimated as SciPy estimates them: Higham and Tisseur's
block 1-norm estimator (:func:`onenormest_matrix_power`) on products with ``A`` and
``A^H``, a program of fixed size. An operator that is not a DiaMatrix gets the same
estimator on its own products (``jaxdia._linalg.expm_operators``).

The norms are computed only when fragment 3.1 needs them (:class:`LazyOperatorNormInfo`:
a ``lax.cond`` on condition (3.13)), in the graph, so ``(m, s)`` are traced integers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .._geometry import in_bounds, pairwise_sum
from .._ops import absolute, reduce_sum
from .._parts import DiaParts
from .._products import matvec as dia_matvec
from .._typing import DTypeLike

#: ``theta_m``: the largest ``||t A||_1`` for which ``s = 1`` substep of the degree-``m``
#: Taylor series meets double precision's unit roundoff (SciPy's ``_theta``: Higham's
#: "Computing matrix functions", table A.3, and Al-Mohy & Higham 2011, table 3.1).
THETA = {
    1: 2.29e-16,
    2: 2.58e-8,
    3: 1.39e-5,
    4: 3.40e-4,
    5: 2.40e-3,
    6: 9.07e-3,
    7: 2.38e-2,
    8: 5.00e-2,
    9: 8.96e-2,
    10: 1.44e-1,
    11: 2.14e-1,
    12: 3.00e-1,
    13: 4.00e-1,
    14: 5.14e-1,
    15: 6.41e-1,
    16: 7.81e-1,
    17: 9.31e-1,
    18: 1.09,
    19: 1.26,
    20: 1.44,
    21: 1.62,
    22: 1.82,
    23: 2.01,
    24: 2.22,
    25: 2.43,
    26: 2.64,
    27: 2.86,
    28: 3.08,
    29: 3.31,
    30: 3.54,
    35: 4.7,
    40: 6.0,
    45: 7.2,
    50: 8.5,
    55: 9.9,
}
M_MAX = 55
_ELL = 2  # SciPy's ell: columns of its norm estimates, which enter condition (3.13)
#: SciPy's ``_compute_p_max(55)``: the largest ``p`` with ``p (p - 1) <= m_max + 1``.
P_MAX = max(p for p in range(2, M_MAX) if p * (p - 1) <= M_MAX + 1)  # 8
_DEGREES = np.array(list(THETA), np.int32)
_THETAS = np.array(list(THETA.values()))
# Equation (3.11)'s candidates, in SciPy's order (p outer, m inner: the first minimum wins).
_CANDIDATES = [
    (p, m) for p in range(2, P_MAX + 1) for m in range(p * (p - 1) - 1, M_MAX + 1) if m in THETA
]

#: Powers ``A^p`` holding more stored entries than this are not formed; their norms are
#: bounded by products of the lower ones.
POWER_ENTRIES = 2**23
#: Powers whose offsets spread over more diagonals than this are not formed at all: the
#: program that forms them handles each diagonal of the power on its own (compile time
#: and memory growing with their number), so their norms are estimated instead.
POWER_ROWS = 64
#: The block 1-norm estimator's columns and iterations (SciPy's ``onenormest``: t = 2,
#: itmax = 5).
ESTIMATOR_COLUMNS = 2
ESTIMATOR_ITERATIONS = 5

#: A product ``X -> A X`` on ``(n,)`` vectors and ``(n, c)`` blocks.
Product = Callable[[Array], Array]


class LazyOperatorNormInfo(NamedTuple):
    """What fragment 3.1 reads of ``A``, as SciPy's ``LazyOperatorNormInfo``: ``onenorm``
    (``||A||_1``, or an estimate) and ``powers(scale)``, the ``d_p = ||A^p||_1^(1/p)``
    for ``p = 1 .. p_max + 1`` (:func:`fragment_3_1`'s ``norms``), computed only when
    fragment 3.1 needs them for ``scale * A`` (condition (3.13) fails), else all
    ``onenorm``."""

    onenorm: Array
    powers: Callable[[Array], Array]


# -- a DiaMatrix: exact norms ------------------------------------------------------------------


def one_norm(A: DiaParts) -> Array:
    """``||A||_1``, the largest column sum of ``|A|`` (exact, from the stored slots)."""
    return jnp.max(reduce_sum(absolute(A), axis=0), axis=-1, initial=0.0)


def inf_norm(A: DiaParts) -> Array:
    """``||A||_inf = ||A^T||_1``, the largest row sum of ``|A|``."""
    return jnp.max(reduce_sum(absolute(A), axis=1), axis=-1, initial=0.0)


def operator_size(A: DiaParts) -> Array:
    """A bound on ``||A x|| / ||x||`` in the norm of the Taylor series' early stop
    (``jaxdia._linalg.expm_taylor.exact_inf_norm``: largest row sum of ``|re| + |im|``):
    ``||A||_inf``, times sqrt(2) for complex entries (``|re| + |im| <= sqrt(2) |z|``)."""
    return inf_norm(A) * (math.sqrt(2) if A.dtype.kind == "c" else 1)


def _sumset(a: tuple[int, ...], b: tuple[int, ...], n: int) -> tuple[int, ...]:
    """The offsets of the product of two ``n x n`` matrices with offsets ``a`` and ``b``."""
    return tuple(sorted({x + y for x in a for y in b if -n < x + y < n}))


def _rows_from(grid: tuple[int, ...], shift: int, P: Array) -> Array:
    """``R[r] = P[row of grid[r] - shift]``, zero where ``grid`` lacks that offset, built
    from static slices and zero blocks (a gather would cost XLA CPU an indexed loop)."""
    row = {c: i for i, c in enumerate(grid)}
    source = [row.get(c - shift, -1) for c in grid]  # -1: no such diagonal in P
    pieces, start = [], 0
    while start < len(source):
        stop = start + 1
        if source[start] < 0:
            while stop < len(source) and source[stop] < 0:
                stop += 1
            pieces.append(jnp.zeros((stop - start, P.shape[1]), P.dtype))
        else:
            while stop < len(source) and source[stop] == source[stop - 1] + 1:
                stop += 1
            pieces.append(P[source[start] : source[start] + stop - start])
        start = stop
    return jnp.concatenate(pieces) if len(pieces) > 1 else pieces[0]


def power_grids(offsets: tuple[int, ...], n: int) -> list[tuple[int, ...]] | None:
    """The offsets of ``A, A^2, ...`` up to ``A^(p_max + 1)`` that :func:`power_norms`
    forms (fewer where a power would hold more than :data:`POWER_ENTRIES` entries), or
    None when one of them spreads over more than :data:`POWER_ROWS` diagonals."""
    grids = [offsets]
    while len(grids) < P_MAX + 1:
        grid = _sumset(grids[-1], offsets, n)
        if len(grid) * n > POWER_ENTRIES:
            break
        if len(grid) > POWER_ROWS:
            return None
        grids.append(grid)
    return grids


def _scaled(A: DiaParts, norm: Array) -> Array:
    """``A / ||A||_1``'s data in single precision with zero padding: the norms of its
    powers only choose ``(m, s)``, and scaled they cannot overflow."""
    narrow = np.complex64 if A.dtype.kind == "c" else np.float32
    scale = jnp.where(norm > 0, 1 / norm, 1)
    return (jnp.where(in_bounds(A.offsets, A.shape), A.data, 0) * scale).astype(narrow)


def power_norms(A: DiaParts, norm: Array, grids: list[tuple[int, ...]]) -> Array:
    """``d_p = ||A^p||_1^(1/p)`` for ``p in 1..p_max + 1``, of a square, unbatched ``A``
    that stores offset 0, given ``norm = ||A||_1`` (:func:`one_norm`) and the offsets of
    its powers, :func:`power_grids`.

    The powers live on one grid of rows, the offsets of the largest power formed (they
    include every lower power's, since ``0`` is an offset of ``A``), so one compiled loop
    body forms them all: ``C[c, j] = sum_b P[c - b, j - b] A[b, j]``, a shifted product of
    all rows per diagonal ``b`` of ``A``. Powers are formed while the grid holds at most
    :data:`POWER_ENTRIES` entries; larger ones are bounded by the best product
    ``||A^a|| ||A^(p - a)||`` of lower ones. The powers are those of ``A / ||A||_1``
    (no overflow), in single precision (twice as fast; the norms only choose ``(m, s)``).
    """
    n = A.shape[1]
    count = P_MAX + 1
    data = _scaled(A, norm)
    grid = grids[-1]
    formed = len(grids)  # A^1 .. A^formed are formed exactly
    rows = {c: i for i, c in enumerate(grid)}
    first = (
        jnp.zeros((len(grid), n), data.dtype).at[np.array([rows[c] for c in A.offsets])].set(data)
    )

    def column_norm(P):
        # Adds of rows: XLA CPU reduces over the leading axis one strided element at a time.
        return jnp.max(pairwise_sum([jnp.abs(P[i]) for i in range(len(grid))]))

    def times_A(p, state):
        P, scaled = state
        C = None
        for k, b in enumerate(A.offsets):
            shifted_rows = _rows_from(grid, b, P)
            width = min(abs(b), n)
            zeros = jnp.zeros((len(grid), width), P.dtype)
            if b > 0:  # column j of the product reads column j - b of P
                term = jnp.concatenate([zeros, shifted_rows[:, : n - width] * data[k, width:]], 1)
            elif b < 0:
                term = jnp.concatenate([shifted_rows[:, width:] * data[k, : n - width], zeros], 1)
            else:
                term = shifted_rows * data[k]
            C = term if C is None else C + term
        return C, scaled.at[p].set(column_norm(C))

    scaled = jnp.ones(count, data.real.dtype)
    _, scaled = lax.fori_loop(1, formed, times_A, (first, scaled))
    norms = {p: scaled[p - 1] for p in range(1, formed + 1)}
    for p in range(formed + 1, count + 1):
        norms[p] = jnp.min(jnp.stack([norms[a] * norms[p - a] for a in range(1, p)]))
    scaled = jnp.stack([norms[p] for p in range(1, count + 1)])
    roots = (1.0 / np.arange(1, count + 1)).astype(norm.dtype)
    return norm * scaled.astype(norm.dtype) ** roots


# -- any operator: the block 1-norm estimator ------------------------------------------------


def hash_signs(n: int) -> Array:
    """A fixed pseudo-random vector of ``+-1`` (an integer hash of the index): the
    estimator's second starting column, the same on every run."""
    index = lax.iota(np.uint32, n) * np.uint32(0x9E3779B9)
    index = (index ^ (index >> 16)) * np.uint32(0x45D9F3B)
    return jnp.where((index ^ (index >> 15)) & 1, 1.0, -1.0)


def onenormest_matrix_power(
    forward: Product, adjoint: Product, n: int, dtype: DTypeLike, power: Array
) -> Array:
    """A lower bound on ``||A^p||_1`` (``p = power``, traced), as SciPy's
    ``_onenormest_matrix_power`` (``onenormest`` of ``A^p``): Higham and Tisseur's block
    estimator (algorithm 2.4 with :data:`ESTIMATOR_COLUMNS` columns and at most
    :data:`ESTIMATOR_ITERATIONS` iterations), each iteration one product with ``A^p``
    (``forward``, ``p`` times) and one with ``(A^H)^p`` (``adjoint``), on ``(n, 2)``
    blocks of ``dtype``.

    Its second starting column is a fixed hash (:func:`hash_signs`), so the estimate is
    deterministic, and it keeps neither SciPy's resampling of parallel columns nor the
    history of visited unit vectors: both only make later iterations useful, and an
    iteration that revisits gives no larger estimate, which stops the loop (test (1)).
    Where ``n <= 2`` it is exact from the columns of the identity, as SciPy's (no
    ``adjoint`` then)."""
    t = ESTIMATOR_COLUMNS
    dtype = np.dtype(dtype)

    def apply(product, X):
        return lax.fori_loop(0, power, lambda _, X: product(X), X)

    if n <= t:  # as SciPy: the exact norm from the columns of the identity
        Y = apply(forward, jnp.eye(n, dtype=dtype))
        return jnp.max(jnp.sum(jnp.abs(Y), axis=0), initial=0.0)

    def iteration(state):
        k, X, estimate, S, indices, best, _ = state
        Y = apply(forward, X)
        magnitudes = jnp.sum(jnp.abs(Y), axis=0)
        new = jnp.max(magnitudes)
        best = jnp.where((k == 2) | (new > estimate), indices[jnp.argmax(magnitudes)], best)
        stop = ((k >= 2) & (new <= estimate)) | (k > ESTIMATOR_ITERATIONS)  # (1)
        estimate = jnp.maximum(new, estimate)

        def refine():
            size = jnp.abs(Y)
            signs = jnp.where(size == 0, 1, Y / jnp.where(size == 0, 1, size).astype(Y.dtype))
            repeated = jnp.all(
                jnp.any(
                    jnp.real(jnp.matmul(signs.T, S, precision=lax.Precision.HIGHEST)) >= n - 0.5,
                    axis=1,
                )
            )  # (2)
            h = jnp.max(jnp.abs(apply(adjoint, signs)), axis=1)
            converged = (k >= 2) & (jnp.max(h) == h[best])  # (4)
            top = lax.top_k(h, t)[1].astype(np.int32)
            X = jax.nn.one_hot(top, n, dtype=dtype, axis=0)
            return k + 1, X, estimate, signs, top, best, repeated | converged

        return lax.cond(stop, lambda: (k, X, estimate, S, indices, best, True), refine)

    first = jnp.stack([jnp.ones(n), hash_signs(n)], axis=1).astype(dtype) / n
    real = np.finfo(dtype).dtype
    zeros = jnp.zeros((n, t), dtype)
    index = jnp.zeros(t, np.int32)
    state = (jnp.int32(1), first, jnp.zeros((), real), zeros, index, jnp.int32(0), False)
    return lax.while_loop(lambda state: ~state[-1], iteration, state)[2]


def estimate_power_norm(A: DiaParts, power: Array) -> Array:
    """:func:`onenormest_matrix_power` of a DiaMatrix (its products ``A x`` and
    ``A^H x``)."""
    forward, backward = dia_matvec(A), dia_matvec(A, transpose=True)

    def adjoint(X):
        return jnp.conj(backward(jnp.conj(X))) if A.dtype.kind == "c" else backward(X)

    return onenormest_matrix_power(forward, adjoint, A.shape[1], A.dtype, power)


def _estimated(estimate: Callable[[Array], Array], norm: Array) -> Array:
    """``d_p`` for ``p in 1..p_max + 1`` from ``norm = ||A||_1`` and ``estimate(p)``, an
    estimate of ``||(A / ||A||_1)^p||_1`` for ``p >= 2``."""
    powers = jnp.arange(2, P_MAX + 2, dtype=np.int32)
    estimates = lax.map(estimate, powers)
    roots = (1.0 / np.arange(2, P_MAX + 2)).astype(norm.dtype)
    return jnp.concatenate([norm[None], norm * estimates.astype(norm.dtype) ** roots])


def estimated_power_norms(A: DiaParts, norm: Array) -> Array:
    """``d_p ~ ||A^p||_1^(1/p)`` for ``p in 1..p_max + 1`` as :func:`power_norms` returns
    them, with ``||A^p||_1`` (``p >= 2``) estimated by :func:`estimate_power_norm` (what
    SciPy does for every matrix), on ``A / ||A||_1`` in single precision."""
    scaled = DiaParts(_scaled(A, norm), A.offsets, A.shape)
    return _estimated(lambda p: estimate_power_norm(scaled, p), norm)


def estimated_operator_norms(
    forward: Product, adjoint: Product, n: int, dtype: DTypeLike, norm: Array
) -> Array:
    """:func:`estimated_power_norms` of an operator given by its products ``X -> A X``
    and ``X -> A^H X``, estimated on ``A / norm`` (``norm ~ ||A||_1``) in ``dtype``."""
    scale = jnp.where(norm > 0, 1 / norm, 1).astype(dtype)

    def scaled(product):
        return lambda X: product(X) * scale

    return _estimated(
        lambda p: onenormest_matrix_power(scaled(forward), scaled(adjoint), n, dtype, p), norm
    )


# -- the choice of (m, s) -------------------------------------------------------------------


def fragment_3_1(norms: Array, scale: Array, columns: int) -> tuple[Array, Array]:
    """``(m, s)`` of code fragment 3.1 for ``scale * A``, as SciPy's ``_fragment_3_1``.

    ``norms[p - 1] = ||A^p||_1^(1/p)`` (:func:`power_norms`); ``columns`` is the number
    of columns of ``B`` (SciPy's ``n0``). A zero or non-finite norm gives ``(0, 1)``,
    SciPy's choice for ``t A == 0`` (the caller turns the result into NaN when the norm
    is not finite).
    """
    real = norms.dtype  # the tables below enter with it (NumPy float64 would promote)
    norm = scale * norms[0]
    d = scale * norms[1:]  # d_p for p = 2, 3, ...
    # Condition (3.13): the plain 1-norm suffices.
    degrees = jnp.asarray(_DEGREES)
    s_norm = jnp.ceil(norm / jnp.asarray(_THETAS, real))
    best_norm = jnp.argmin(degrees.astype(real) * s_norm)
    # Equation (3.11): alpha_p = max(d_p, d_(p+1)) for the candidates (p, m).
    p_of = np.array([p for p, _ in _CANDIDATES])
    m_of = jnp.asarray([m for _, m in _CANDIDATES], np.int32)
    alpha = jnp.maximum(d[p_of - 2], d[p_of - 1])
    s_alpha = jnp.ceil(alpha / jnp.asarray([THETA[m] for _, m in _CANDIDATES], real))
    best_alpha = jnp.argmin(m_of.astype(real) * s_alpha)
    small = norm <= condition_3_13(columns)
    m = jnp.where(small, degrees[best_norm], m_of[best_alpha])
    s = jnp.where(small, s_norm[best_norm], jnp.maximum(s_alpha[best_alpha], 1))
    trivial = (norm == 0) | ~jnp.isfinite(norm) | ~jnp.isfinite(s)
    m = jnp.where(trivial, 0, m).astype(np.int32)
    s = jnp.where(trivial, 1, jnp.minimum(s, 2**30)).astype(np.int32)
    return m, s


def condition_3_13(columns: int) -> float:
    """Condition (3.13), SciPy's ``_condition_3_13``: up to this ``||scale A||_1`` the
    plain 1-norm chooses ``(m, s)`` (``columns``: SciPy's ``n0``)."""
    return 2 * _ELL * P_MAX * (P_MAX + 3) * THETA[M_MAX] / (columns * M_MAX)


def lazily(norm: Array, scale: Array, columns: int, powers: Callable[[], Array]) -> Array:
    """``powers()`` (the ``d_p``), computed only when fragment 3.1 needs them at
    ``scale`` (condition (3.13) fails for ``scale * norm``); else ``norm`` for each."""
    return lax.cond(
        scale * norm > condition_3_13(columns),
        powers,
        lambda: jnp.full(P_MAX + 1, norm),
    )


def dia_norm_info(A: DiaParts, columns: int) -> LazyOperatorNormInfo:
    """The norms of a square, unbatched DiaMatrix that stores offset 0: ``||A||_1``
    exact, and the ``d_p`` from :func:`power_norms`, or :func:`estimated_power_norms`
    where the powers spread too far to be formed."""
    norm = one_norm(A)
    grids = power_grids(A.offsets, A.shape[1])

    def formed_or_estimated():
        return estimated_power_norms(A, norm) if grids is None else power_norms(A, norm, grids)

    def powers(scale):
        return lazily(norm, scale, columns, formed_or_estimated)

    return LazyOperatorNormInfo(norm, powers)
