"""Periodic (cyclic) banded matrices: a band plus wrap-around corner diagonals.

Periodic boundary conditions put diagonals at offsets near ``±n`` (``±(n - 1)`` for a
periodic tridiagonal matrix). Taken as a band, such a matrix is full. Split instead as
``A = B + U V^T``, with ``B`` the band of the central offsets and the corner diagonals a
matrix whose non-zero columns are the last ``p`` and the first ``q`` (``p``, ``q``: how far
the upper-right and lower-left corners reach), the Sherman-Morrison-Woodbury identity

    A^-1 = B^-1 - Z S^-1 V^T B^-1,   Z = B^-1 U,   S = I + V^T Z

solves with ``A`` at the cost of a banded solve plus O(n r) for the rank ``r = p + q``:
``V`` selects those ``r`` columns, ``U`` holds them (the corner entries), so ``S`` is
``I + Z[columns]``, an ``r x r`` matrix factored densely. Transposed solves use the same
``Z`` and ``S``: ``A^-T = B^-T (I - V S^-T Z^T)``.

:func:`split` decides from the static offsets and ``n`` whether, and where, to split: it
compares the work of the plain band with that of every split (a band of the central
offsets plus corners), and picks the cheapest. ``B`` must be nonsingular:
``jaxdia._linalg.banded.factor_lu`` falls back to the plain band when the periodic
factorization fails outside ``jit``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.scipy.linalg import lu_factor as dense_lu_factor, lu_solve as dense_lu_solve

from .._geometry import band_widths


class Split(NamedTuple):
    """Where a square matrix's offsets split into a band and corners: ``band`` the
    indices (into the offsets) of the band's diagonals, ``p`` and ``q`` the number of
    columns the upper-right and lower-left corners touch (the last ``p``, the first
    ``q``)."""

    band: tuple[int, ...]
    p: int
    q: int

    @property
    def rank(self) -> int:
        return self.p + self.q

    @classmethod
    def of(cls, offsets: tuple[int, ...], n: int, p: int, q: int) -> Split:
        """The split whose corners touch the last ``p`` and the first ``q`` columns."""
        band = tuple(i for i, k in enumerate(offsets) if -(n - q) < k < n - p)
        return cls(band, p, q)

    def band_offsets(self, offsets: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(offsets[i] for i in self.band)


def _work(n: int, lower: int, upper: int, rank: int) -> int:
    """Multiply-adds of factoring a band of ``lower``/``upper`` diagonals plus ``rank``
    corrections (their solves and the dense ``rank x rank`` factor), and of one solve."""
    band = n * (lower + 1) * (lower + upper + 1) + n * (2 * lower + upper + 1)
    return band + rank * n * (2 * lower + upper + 1) + rank**3 + 2 * n * rank


def split(offsets: tuple[int, ...], n: int) -> Split | None:
    """The cheapest split of an ``n x n`` matrix's ``offsets`` into a band and corner
    diagonals, or None when the plain band is cheapest (no corners, or corners that
    reach too far to be a small correction)."""
    lower, upper = band_widths(offsets)
    best, best_work = None, _work(n, lower, upper, 0)
    uppers = sorted({0, *(k for k in offsets if k > 0)})
    lowers = sorted({0, *(-k for k in offsets if k < 0)})
    for u in uppers:
        above = [k for k in offsets if k > u]
        p = n - min(above) if above else 0
        for l in lowers:
            below = [k for k in offsets if k < -l]
            q = n + max(below) if below else 0
            if p + q == 0 or p + q > n // 2:
                continue
            work = _work(n, l, u, p + q)
            if work < best_work:
                best, best_work = Split.of(offsets, n, p, q), work
    return best


def columns(n: int, where: Split) -> np.ndarray:
    """The ``r`` columns the corners touch: the last ``p``, then the first ``q``."""
    return np.concatenate([np.arange(n - where.p, n), np.arange(where.q)]).astype(np.int32)


def corners(data: Array, offsets: tuple[int, ...], where: Split) -> Array:
    """``U`` ``(..., n, r)``: column ``c`` is column ``columns[c]`` of the corner
    diagonals (the offsets outside the band) of the square matrix ``data`` stores."""
    n = data.shape[-1]
    cols = columns(n, where)
    rows, slots, diagonals, entries = [], [], [], []
    for k, offset in enumerate(offsets):
        if k in where.band:
            continue
        i = cols - offset  # A[i, j] sits at data[k, j] for j - i == offset
        keep = (i >= 0) & (i < n)
        rows.append(i[keep])
        slots.append(np.flatnonzero(keep))
        diagonals.append(np.full(int(keep.sum()), k))
        entries.append(cols[keep])
    U = jnp.zeros((*data.shape[:-2], n, where.rank), data.dtype)
    index = (np.concatenate(rows), np.concatenate(slots))
    values = data[..., np.concatenate(diagonals), np.concatenate(entries)]
    return U.at[(..., *index)].set(values)


def capacitance(Z: Array, n: int, where: Split) -> tuple[Array, Array]:
    """The LU factor (``jax.scipy.linalg.lu_factor``'s) of ``S = I + V^T Z``."""
    S = jnp.eye(where.rank, dtype=Z.dtype) + Z[..., columns(n, where), :]
    return dense_lu_factor(S)


def _dense_solve(lu: Array, pivots: Array, rhs: Array, trans: int) -> Array:
    """``op(S)^-1 rhs`` for ``rhs`` ``(..., r, k)``; a complex ``rhs`` for a real ``S`` as
    its real and imaginary parts side by side."""
    if jnp.iscomplexobj(rhs) and not jnp.iscomplexobj(lu):
        k = rhs.shape[-1]
        both = jnp.concatenate([rhs.real, rhs.imag], axis=-1)
        solved = _dense_solve(lu, pivots, both, trans)
        return solved[..., :k] + 1j * solved[..., k:]
    lu = jnp.broadcast_to(lu, (*rhs.shape[:-2], *lu.shape[-2:]))
    pivots = jnp.broadcast_to(pivots, (*rhs.shape[:-2], pivots.shape[-1]))
    return dense_lu_solve((lu, pivots), rhs.astype(jnp.result_type(lu, rhs)), trans=trans)


def solve(band_solve, Z: Array, lu: Array, pivots: Array, rhs: Array, trans: int, where: Split):
    """``op(A)^-1 rhs`` for ``rhs`` ``(..., n, k)``, given ``band_solve(rhs, t)``
    (``op_t(B)^-1 rhs``) and the stored ``Z``, ``S``'s LU: ``trans`` 0 ``A``, 1 ``A^T``, 2
    ``A^H``."""
    n = rhs.shape[-2]
    cols = columns(n, where)
    if trans == 0:
        y = band_solve(rhs, 0)
        return y - Z @ _dense_solve(lu, pivots, y[..., cols, :], 0)
    Zt = jnp.swapaxes(Z.conj() if trans == 2 else Z, -1, -2)
    correction = _dense_solve(lu, pivots, Zt @ rhs, trans)
    return band_solve(rhs.at[..., cols, :].add(-correction), trans)
