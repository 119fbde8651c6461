"""LAPACK's banded factorizations and solves in pure JAX: ``lax.scan`` over the rows.

The same routines and layouts as :mod:`jaxdia._kernels.lapack` (``gbtrf/gbtrs``, ``pbtrf/pbtrs``,
``gttrf/gttrs``, ``pttrf/pttrs``; see its docstring), so that a factor computed by either
is solved by either. This is the implementation on GPU and TPU, where a host call would
copy the system to the host, and on CPU for systems too small to pay for one. Every
function takes *one* system (batches are ``jax.vmap``\\ ped over them, which runs a batch
as one scan with the systems side by side) with right-hand sides ``b`` of shape
``(k, n)``.

Each factorization is one scan over the ``n`` columns carrying a small window of the
active rows (``kl + 1`` rows for the LU, ``kd + 1`` for the Cholesky factor); each
triangular solve one scan carrying the ``bandwidth`` values still being updated. The work
per step is O(bandwidth^2) for a factorization and O(bandwidth * k) for a solve; the
steps are sequential, so a scan takes ``n`` loop iterations whatever the band.

A zero pivot (LU) or a non-positive one (Cholesky) sets ``info`` as LAPACK does (the
1-based index of the first); the factor is then not usable, which the callers check.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .shared import magnitude


def shift_columns(matrix: Array, shifts) -> Array:
    """``out[j, c] = matrix[j + shifts[c], c]``, zero where that row is outside.

    One gather whose indices XLA computes from an iota (no index table in the program).
    Moves each diagonal of a band between row-wise and column-wise storage.
    """
    n, width = matrix.shape
    if n == 0:
        return matrix
    rows = lax.broadcasted_iota(np.int32, (n, width), 0) + np.asarray(shifts, np.int32)[None, :]
    inside = (rows >= 0) & (rows < n)
    taken = jnp.take_along_axis(matrix, jnp.clip(rows, 0, n - 1), axis=0)
    return jnp.where(inside, taken, 0)


def _row_ids(n: int) -> Array:
    return jnp.arange(n, dtype=np.int32)


def _swap_to_top(window: Array, choice: Array) -> Array:
    """``window`` with rows 0 and ``choice`` swapped (partial pivoting's interchange)."""
    positions = np.arange(window.shape[0])
    return window[jnp.where(positions == 0, choice, jnp.where(positions == choice, 0, positions))]


def _first_failure(bad: Array) -> Array:
    """LAPACK's ``info``: the 1-based index of the first true entry of ``bad``, else 0."""
    first = jnp.argmax(bad)
    return jnp.where(bad[first], first + 1, 0).astype(np.int32)


# -- triangular band solves on column storage ------------------------------------------------


def _sweep(
    cols: Array, b: Array, kd: int, *, lower: bool, transpose: bool, conj: bool, unit: bool = False
) -> Array:
    """Solves ``T x = b`` (``T^T x = b`` with ``transpose``; conjugated entries with
    ``conj``) for a triangular band ``T`` stored by columns: ``cols[j, i]`` holds
    ``T[j + i, j]`` (``lower``, diagonal at ``i = 0``) or ``T[j - kd + i, j]`` (upper,
    diagonal at ``i = kd``). ``b`` is ``(n, k)``. Entries outside the matrix are not read.

    ``T x = b`` eliminates column by column (the window holds the ``kd + 1`` right-hand
    side rows still being updated); ``T^T x = b`` takes row ``j`` of ``T^T``, which is
    column ``j`` of ``T``, as a dot product with the ``kd`` solved values before it.
    """
    n, k = b.shape
    if conj:
        cols = cols.conj()
    if kd == 0:
        return b if unit else b / cols[:, :1]
    diag = cols[:, 0] if lower else cols[:, kd]
    off = cols[:, 1:] if lower else cols[:, :kd]
    # off[j, i] is T[j + 1 + i, j] (lower) or T[j - kd + i, j] (upper): mask rows outside.
    offsets = np.arange(1, kd + 1) if lower else np.arange(-kd, 0)
    ids = _row_ids(n)
    # The scan runs forwards for lower T and for upper T^T (both lower triangular).
    forward = lower != transpose

    def masked(j, row):
        rows = j + offsets
        return jnp.where((rows >= 0) & (rows < n), row, 0)

    if not transpose:
        # Column sweep. forward: window rows j .. j + kd; backward: rows j - kd .. j.
        def step(window, xs):
            j, d, o, incoming = xs
            o = masked(j, o)
            if forward:
                x = window[0] if unit else window[0] / d
                rest = window[1:] - o[:, None] * x
                return jnp.concatenate([rest, incoming[None]]), x
            x = window[kd] if unit else window[kd] / d
            rest = window[:kd] - o[:, None] * x
            return jnp.concatenate([incoming[None], rest]), x

        padded = jnp.concatenate([b, jnp.zeros((kd + 1, k), b.dtype)])
        if forward:
            first = padded[: kd + 1]
            incoming = padded[kd + 1 : kd + 1 + n]  # row j + kd + 1 enters at step j
        else:
            front = jnp.concatenate([jnp.zeros((kd + 1, k), b.dtype), b])
            first = front[n : n + kd + 1]  # rows n - 1 - kd .. n - 1
            incoming = front[:n]  # row j - kd - 1 enters at step j
        _, x = lax.scan(step, first, (ids, diag, off, incoming), reverse=not forward)
        return x

    # Dot products with the kd values solved before (forward: rows j - kd .. j - 1 in
    # the order of off; backward: rows j + 1 .. j + kd).
    def dot_step(solved, xs):
        j, d, o, rhs = xs
        o = masked(j, o)
        value = rhs - jnp.matmul(o, solved, precision=lax.Precision.HIGHEST)
        x = value if unit else value / d
        if forward:
            return jnp.concatenate([solved[1:], x[None]]), x
        return jnp.concatenate([x[None], solved[:-1]]), x

    _, x = lax.scan(dot_step, jnp.zeros((kd, k), b.dtype), (ids, diag, off, b), reverse=not forward)
    return x


# -- banded LU -------------------------------------------------------------------------------


def gbtrf(ab: Array, *, kl: int, ku: int) -> tuple[Array, Array, Array]:
    """``(lu, pivots, info)`` of the bands ``ab`` ``(n, 2 kl + ku + 1)`` (LAPACK's layout:
    ``ab[j, kl + ku + i - j] = A[i, j]``; the first ``kl`` columns are fill room).

    A window of the ``kl + 1`` rows that can hold the pivot of column ``i``, over columns
    ``i .. i + kl + ku``, slides down the matrix: each step swaps the pivot row to the
    top, records it as row ``i`` of ``U`` and the multipliers as column ``i`` of ``L``,
    eliminates, and takes in row ``i + kl + 1``.
    """
    n = ab.shape[0]
    width = kl + ku + 1  # the window's columns: U's row i spans kl + ku + 1 entries
    ldab = ab.shape[1]
    if n == 0:
        return ab, jnp.zeros((0,), np.int32), jnp.zeros((), np.int32)
    # Rows of A: R[r, c] = A[r, r - kl + c] = ab[r - kl + c, 2 kl + ku - c].
    band = shift_columns(ab[:, ::-1][:, :width], np.arange(width) - kl)
    u_rows, factors, choices, zeros = _eliminate(band, kl=kl, ku=ku)
    pivots = _row_ids(n) + choices
    # U[j - t, j] = u_rows[j - t, t] goes to lu[j, kl + ku - t].
    upper = shift_columns(u_rows[:, ::-1], np.arange(width) - (width - 1))
    lu = jnp.concatenate([upper, factors], axis=1)
    assert lu.shape[1] == ldab
    info = _first_failure(zeros)
    return lu, pivots, info


def _eliminate(band: Array, *, kl: int, ku: int) -> tuple[Array, Array, Array, Array]:
    """:func:`gbtrf`'s scan over the rows ``band`` ``(n, kl + ku + 1)`` of ``A``
    (``band[r, c] = A[r, r - kl + c]``): per step ``i``, row ``i`` of ``U`` (``(n, kl + ku
    + 1)``, ``U[i, i + t]`` at ``t``), the multipliers (``(n, kl)``), the pivot row's
    distance below row ``i`` (int32) and whether the pivot is zero."""
    n = band.shape[0]
    width = kl + ku + 1
    # The first window: rows 0 .. kl over columns 0 .. kl + ku: W0[r, c] = R[r, c - r + kl].
    padded = jnp.concatenate([band, jnp.zeros((kl + 1, width), band.dtype)])
    # Index tables as iotas: NumPy ones would be constants of (kl + 1) * width elements.
    rows = lax.broadcasted_iota(np.int32, (kl + 1, width), 0)
    source = lax.broadcasted_iota(np.int32, (kl + 1, width), 1) - rows + kl
    inside = (source < width) & (rows < n)
    window = jnp.where(inside, padded[rows, jnp.minimum(source, width - 1)], 0)
    # Row r = i + kl + 1 enters after step i, over columns i + 1 .. i + 1 + kl + ku.
    incoming = padded[kl + 1 : kl + 1 + n]

    def eliminate(window, row):
        choice = jnp.argmax(magnitude(window[:, 0]))
        window = _swap_to_top(window, choice)
        pivot = window[0, 0]
        zero = pivot == 0
        factors = jnp.where(zero, 0, window[1:, 0] / jnp.where(zero, 1, pivot))
        rest = window[1:] - factors[:, None] * window[0]
        shifted = jnp.concatenate([rest[:, 1:], jnp.zeros((kl, 1), rest.dtype)], axis=1)
        new_window = jnp.concatenate([shifted, row[None]])
        return new_window, (window[0], factors, choice.astype(np.int32), zero)

    _, steps = lax.scan(eliminate, window, incoming)
    return steps


def pivoted_diagonal(band: Array, *, kl: int, ku: int) -> Array:
    """``U``'s diagonal ``(n,)`` in :func:`gbtrf`'s factor ``P A = L U`` (partial
    pivoting) of ``A`` given by its rows ``band`` ``(n, kl + ku + 1)``
    (``band[r, c] = A[r, r - kl + c]``). Differentiable in ``band`` with the pivots held
    at those chosen (piecewise constant): ``sum log U_ii`` is ``log det A`` up to the
    interchanges' sign, so its reverse mode gives ``A^-T`` on the band."""
    if band.shape[0] == 0:
        return band[:, 0]
    return _eliminate(band, kl=kl, ku=ku)[0][:, 0]


def _interchange_forward(lu: Array, pivots: Array, b: Array, *, kl: int, ku: int) -> Array:
    """``y = L^-1 P b`` in ``gbtrf``'s form: at step ``j``, swap rows ``j`` and
    ``pivots[j]``, then subtract multiples of row ``j`` from rows ``j + 1 .. j + kl``."""
    n, k = b.shape
    multipliers = lu[:, kl + ku + 1 :]
    ids = _row_ids(n)
    padded = jnp.concatenate([b, jnp.zeros((kl + 1, k), b.dtype)])
    below = np.arange(1, kl + 1)

    def step(window, xs):
        j, pivot, m, incoming = xs
        choice = pivot - j
        window = _swap_to_top(window, choice)
        m = jnp.where(j + below < n, m, 0)
        rest = window[1:] - m[:, None] * window[0]
        return jnp.concatenate([rest, incoming[None]]), window[0]

    _, y = lax.scan(step, padded[: kl + 1], (ids, pivots, multipliers, padded[kl + 1 : kl + 1 + n]))
    return y


def _interchange_backward(
    lu: Array, pivots: Array, b: Array, *, kl: int, ku: int, conj: bool
) -> Array:
    """``x = P^T L^-T y``: for ``j`` from the last row up, subtract the dot product of
    column ``j``'s multipliers with rows ``j + 1 .. j + kl``, then swap rows ``j`` and
    ``pivots[j]`` (``gbtrs``'s transposed solve)."""
    n, k = b.shape
    multipliers = lu[:, kl + ku + 1 :]
    if conj:
        multipliers = multipliers.conj()
    ids = _row_ids(n)
    below = np.arange(1, kl + 1)
    # Step j holds rows j .. j + kl; after it, row j + kl is final.
    tail = jnp.concatenate([b, jnp.zeros((kl, k), b.dtype)])

    def step(window, xs):
        j, pivot, m, incoming = xs
        m = jnp.where(j + below < n, m, 0)
        top = window[0] - jnp.matmul(m, window[1:], precision=lax.Precision.HIGHEST)
        window = jnp.concatenate([top[None], window[1:]])
        choice = pivot - j
        window = _swap_to_top(window, choice)
        return jnp.concatenate([incoming[None], window[:kl]]), window[kl]

    # Row j - 1 enters after step j (a placeholder after step 0); the first window holds
    # rows n - 1 .. n - 1 + kl.
    incoming = jnp.concatenate([jnp.zeros((1, k), b.dtype), b[: n - 1]])
    first = tail[n - 1 : n + kl]
    final, done = lax.scan(step, first, (ids, pivots, multipliers, incoming), reverse=True)
    # After step 0 the carry holds rows -1 .. kl - 1 (row -1 a placeholder): rows 0 ..
    # kl - 1 are final; done[j] is row j + kl.
    return jnp.concatenate([final[1:], done])[:n]


def gbtrs(lu: Array, pivots: Array, b: Array, *, kl: int, ku: int, trans: int) -> Array:
    """``x`` ``(k, n)`` solving ``A x = b`` (``trans`` 0), ``A^T x = b`` (1) or
    ``A^H x = b`` (2) with ``gbtrf``'s factor; ``b`` is ``(k, n)``."""
    n = lu.shape[0]
    if n == 0:
        return b
    rhs = b.T
    upper = lu[:, : kl + ku + 1]
    if trans == 0:
        y = _interchange_forward(lu, pivots, rhs, kl=kl, ku=ku) if kl else rhs
        x = _sweep(upper, y, kl + ku, lower=False, transpose=False, conj=False)
    else:
        conj = trans == 2
        y = _sweep(upper, rhs, kl + ku, lower=False, transpose=True, conj=conj)
        x = _interchange_backward(lu, pivots, y, kl=kl, ku=ku, conj=conj) if kl else y
    return x.T


# -- banded Cholesky -------------------------------------------------------------------------


def _upper_rows(ab: Array, kd: int, lower: bool) -> Array:
    """``G[i, t] = A[i, i + t]`` for ``t`` in ``0 .. kd`` from LAPACK's Cholesky layout
    (upper: ``ab[j, kd + i - j] = A[i, j]``; lower: ``ab[j, i - j] = A[i, j]``)."""
    if lower:
        return ab.conj()  # A[i, i + t] = conj(A[i + t, i]) = conj(ab[i, t])
    return shift_columns(ab[:, ::-1], np.arange(kd + 1))


def pbtrf(ab: Array, *, kd: int, lower: bool) -> tuple[Array, Array]:
    """``(c, info)``: the Cholesky factor of the Hermitian positive definite bands ``ab``
    ``(n, kd + 1)`` in LAPACK's layout (``U^H U`` or ``L L^H`` with ``lower``).

    The window is the ``(kd + 1) x (kd + 1)`` top-left block of the trailing matrix; each
    step takes the square root of its corner as ``U[i, i]``, scales the first row into
    row ``i`` of ``U``, subtracts its outer product and takes in row/column ``i + kd + 1``.
    """
    n = ab.shape[0]
    if n == 0:
        return ab, jnp.zeros((), np.int32)
    rows_g = _upper_rows(ab, kd, lower)  # G[i, t] = A[i, i + t]
    # Incoming column for the window of step i + 1: A[i + 1 + s, i + 1 + kd] = G[i + 1 +
    # s, kd - s] for s in 0 .. kd (s = kd: the new diagonal entry).
    columns = shift_columns(rows_g[:, ::-1], np.arange(kd + 1))  # C[i, s] = G[i + s, kd - s]
    padded = jnp.concatenate([columns[1:], jnp.zeros((1, kd + 1), ab.dtype)])
    size = min(kd + 1, n)
    # Index tables as iotas: NumPy ones would be constants of (kd + 1)^2 elements.
    r = lax.broadcasted_iota(np.int32, (kd + 1, kd + 1), 0)
    c = lax.broadcasted_iota(np.int32, (kd + 1, kd + 1), 1)
    upper_part = rows_g[jnp.minimum(r, n - 1), jnp.clip(c - r, 0, kd)]
    lower_part = rows_g[jnp.minimum(c, n - 1), jnp.clip(r - c, 0, kd)].conj()
    window = jnp.where(c >= r, upper_part, lower_part)
    window = jnp.where((r < size) & (c < size), window, jnp.where(r == c, 1, 0))
    window = window.astype(ab.dtype)

    def step(window, xs):
        i, column = xs
        corner = window[0, 0].real if jnp.iscomplexobj(window) else window[0, 0]
        bad = ~(corner > 0)
        root = jnp.sqrt(jnp.where(bad, 1, corner))
        row = window[0] / root
        row = row.at[0].set(root)
        rest = window[1:, 1:] - jnp.outer(row[1:].conj(), row[1:])
        # The new last column (rows i + 1 .. i + 1 + kd), last row its conjugate.
        inside = i + 1 + kd < n
        new_column = jnp.where(inside, column, jnp.where(np.arange(kd + 1) == kd, 1, 0))
        top = jnp.concatenate([rest, new_column[:kd, None]], axis=1)
        bottom = jnp.concatenate([new_column[:kd].conj(), new_column[kd:]])
        return jnp.concatenate([top, bottom[None]]), (row, bad)

    _, (u_rows, bad) = lax.scan(step, window, (_row_ids(n), padded))
    # Entries of U beyond the matrix (row i, column i + t >= n) are zero.
    outside = _row_ids(n)[:, None] + np.arange(kd + 1)[None, :] >= n
    u_rows = jnp.where(outside, 0, u_rows)
    info = _first_failure(bad)
    if lower:
        return u_rows.conj(), info  # L[j + t, j] = conj(U[j, j + t])
    # U[j - t, j] = u_rows[j - t, t] goes to c[j, kd - t].
    return shift_columns(u_rows[:, ::-1], np.arange(kd + 1) - kd), info


def pbtrs(c: Array, b: Array, *, kd: int, lower: bool) -> Array:
    """``x`` ``(k, n)`` solving ``A x = b`` with ``pbtrf``'s factor ``c``."""
    if c.shape[0] == 0:
        return b
    rhs = b.T
    if lower:  # L L^H x = b
        y = _sweep(c, rhs, kd, lower=True, transpose=False, conj=False)
        x = _sweep(c, y, kd, lower=True, transpose=True, conj=True)
    else:  # U^H U x = b
        y = _sweep(c, rhs, kd, lower=False, transpose=True, conj=True)
        x = _sweep(c, y, kd, lower=False, transpose=False, conj=False)
    return x.T


# -- tridiagonal forms -----------------------------------------------------------------------


def gttrf(bands: Array) -> tuple[Array, Array, Array]:
    """``(lu, pivots, info)`` of the tridiagonal rows ``dl, d, du, 0`` (``(4, n)``,
    ``dl[i] = A[i + 1, i]``, ``du[i] = A[i, i + 1]``), in ``?gttrf``'s form: rows ``dl``
    (the multipliers), ``d``, ``du``, ``du2`` of ``U``.

    ``?gttrf``'s algorithm with scalars for a window: step ``i`` holds row ``i``'s
    diagonal and superdiagonal as eliminated so far, chooses it or row ``i + 1`` as the
    pivot row, records that row of ``U`` and the multiplier, and eliminates.
    """
    n = bands.shape[-1]
    if n == 0:
        return bands, jnp.zeros((0,), np.int32), jnp.zeros((), np.int32)
    # dl and du hold n - 1 entries: the last slot of each may hold anything.
    inside = _row_ids(n) < n - 1
    dl, d, du = jnp.where(inside, bands[0], 0), bands[1], jnp.where(inside, bands[2], 0)

    def step(carry, xs):
        diagonal, upper = carry  # row i: U[i, i] and U[i, i + 1] before pivoting
        below, next_diagonal, next_upper = xs  # A[i + 1, i], A[i + 1, i + 1], A[i + 1, i + 2]
        swap = magnitude(below) > magnitude(diagonal)
        pivot = jnp.where(swap, below, diagonal)
        zero = pivot == 0
        factor = jnp.where(zero, 0, jnp.where(swap, diagonal, below) / jnp.where(zero, 1, pivot))
        u1 = jnp.where(swap, next_diagonal, upper)
        u2 = jnp.where(swap, next_upper, 0)
        carry = (
            jnp.where(swap, upper, next_diagonal) - factor * u1,
            jnp.where(swap, 0, next_upper) - factor * u2,
        )
        return carry, (factor, pivot, u1, u2, swap)

    shifted = (dl[:-1], d[1:], du[1:])
    (last, _), (factor, pivot, u1, u2, swap) = lax.scan(step, (d[0], du[0]), shifted)
    zero = jnp.zeros((1,), bands.dtype)
    lu = jnp.stack(
        [
            jnp.concatenate([factor, zero]),
            jnp.concatenate([pivot, last[None]]),
            jnp.concatenate([u1, zero]),
            jnp.concatenate([u2, zero]),
        ]
    )
    pivots = _row_ids(n) + jnp.concatenate([swap, jnp.zeros((1,), bool)]).astype(np.int32)
    zeros = lu[1] == 0
    info = _first_failure(zeros)
    return lu, pivots, info


def gttrs(lu: Array, pivots: Array, b: Array, *, trans: int) -> Array:
    """``x`` ``(k, n)`` solving ``op(A) x = b`` with ``gttrf``'s factor (``?gtts2``'s
    recurrences: one scalar carry per right-hand side forwards, two backwards)."""
    n = lu.shape[-1]
    if n == 0:
        return b
    rhs = b.T  # (n, k)
    if trans == 2:
        lu = lu.conj()
    multipliers, diagonal, upper, upper2 = lu[0], lu[1], lu[2], lu[3]
    swap = (pivots != _row_ids(n))[:-1]
    zero = jnp.zeros((1, rhs.shape[1]), rhs.dtype)
    if trans == 0:
        # L y = P b: step i carries row i as eliminated so far, takes in row i + 1.
        def forward(carry, xs):
            m, s, incoming = xs
            y = jnp.where(s, incoming, carry)
            return jnp.where(s, carry, incoming) - m * y, y

        last, y = lax.scan(forward, rhs[0], (multipliers[:-1], swap, rhs[1:]))
        y = jnp.concatenate([y, last[None]])

        # U x = y: x[i] = (y[i] - du[i] x[i + 1] - du2[i] x[i + 2]) / d[i].
        def backward(carry, xs):
            x1, x2 = carry
            value, d, u1, u2 = xs
            x = (value - u1 * x1 - u2 * x2) / d
            return (x, x1), x

        start = (zero[0], zero[0])
        _, x = lax.scan(backward, start, (y, diagonal, upper, upper2), reverse=True)
        return x.T

    # U^T y = b: y[i] = (b[i] - du[i - 1] y[i - 1] - du2[i - 2] y[i - 2]) / d[i].
    def forward_t(carry, xs):
        y1, y2 = carry
        value, d, u1, u2 = xs
        y = (value - u1 * y1 - u2 * y2) / d
        return (y, y1), y

    before = jnp.concatenate([jnp.zeros((1,), lu.dtype), upper[:-1]])
    before2 = jnp.concatenate([jnp.zeros((2,), lu.dtype), upper2[:-2]])[:n]
    _, y = lax.scan(forward_t, (zero[0], zero[0]), (rhs, diagonal, before, before2))

    # L^T x = y, from the last row up: step i carries row i + 1, takes in row i.
    def backward_t(carry, xs):
        m, s, value = xs
        temp = value - m * carry
        return jnp.where(s, carry, temp), jnp.where(s, temp, carry)

    first, x = lax.scan(backward_t, y[-1], (multipliers[:-1], swap, y[:-1]), reverse=True)
    return jnp.concatenate([first[None], x]).T


def pttrf(d: Array, e: Array) -> tuple[Array, Array, Array]:
    """``(d, e, info)``: ``A = L D L^H`` for the real diagonal ``d`` and subdiagonal ``e``
    (``e[i] = A[i + 1, i]``; ``e[n - 1]`` unused), as ``?pttrf``: ``e`` becomes the
    subdiagonal of the unit lower bidiagonal ``L``."""
    n = d.shape[0]
    if n == 0:
        return d, e, jnp.zeros((), np.int32)

    def step(previous, xs):
        d_i, e_before = xs  # A[i, i], A[i, i - 1] (0 for i = 0; then previous is 1)
        below = e_before / previous  # L[i, i - 1]
        value = d_i - (below * e_before.conj()).real
        return value, (value, below)

    e_before = jnp.concatenate([jnp.zeros((1,), e.dtype), e[:-1]])
    _, (diagonal, below) = lax.scan(step, jnp.ones((), d.dtype), (d, e_before))
    bad = ~(diagonal > 0)
    info = _first_failure(bad)
    # below[i] = L[i, i - 1]; e_out[i] = L[i + 1, i].
    e_out = jnp.concatenate([below[1:], jnp.zeros((1,), e.dtype)])
    return diagonal, e_out, info


def pttrs(d: Array, e: Array, b: Array) -> Array:
    """``x`` ``(k, n)`` solving ``L D L^H x = b`` with ``pttrf``'s ``d`` and ``e``."""
    n = d.shape[0]
    if n == 0:
        return b
    rhs = b.T
    ones = jnp.ones((n, 1), e.dtype)
    # L's columns: L[j, j] = 1, L[j + 1, j] = e[j] (lower storage, kd = 1).
    e_masked = jnp.where(_row_ids(n) < n - 1, e, 0)
    cols = jnp.concatenate([ones, e_masked[:, None]], axis=1)
    y = _sweep(cols, rhs, 1, lower=True, transpose=False, conj=False, unit=True)
    z = y / d[:, None]
    x = _sweep(cols, z, 1, lower=True, transpose=True, conj=True, unit=True)
    return x.T
