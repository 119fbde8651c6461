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

**When to split** (:func:`split`, from the static offsets and ``n``). The matrix must be
a periodic band: a stencil reaching ``L = max(l, p)`` below and ``U = max(u, q)`` above
the diagonal (``l``, ``u`` the band's widths) on a circle of ``n`` points, with
``2 (L + U + 1) <= n``. The stencil then covers at most half the circle: in every row
the corner entries are at least as many zero columns away from the band's as the stencil
is wide, and no corner diagonal is a band diagonal seen from the other side (the ``±1``
of a ``2 x 2`` tridiagonal matrix are ``±(n - 1)`` only in that sense: it is a band).
Small ``n`` never splits. Among the splits that qualify, :func:`split` compares the work
of the plain band with that of each (the band's factor plus the ``r`` corrections) and
picks the cheapest.

**When the split is accurate** (:func:`growth`). The corrected solve computes
``y = B^-1 b`` and subtracts ``Z S^-1 V^T y``: exact in exact arithmetic whatever ``B``
is, but its rounding errors scale with ``y``, not with ``x``. Since ``y = B^-1 A x =
(I + Z V^T) x``, the residual of the computed ``x`` is, to first order, at most a small
multiple of ``eps (||A|| + ||B|| + ||U||) g ||x||`` (infinity norms), with the growth

    g = 1 + ||Z||_inf >= ||B^-1 A||_inf

(the errors of ``y``, of ``Z``, of ``S``'s factor and of the subtraction each contribute
one such term): a backward error of ``eps g`` where partial pivoting's is ``eps``, and a
forward error ``g`` times the banded LU's bound, ``eps cond(A)``. ``g`` is small when
``B`` is about as well conditioned as ``A`` (``A`` strictly diagonally dominant by rows:
``g < 2``; periodic Laplacians plus a shift and implicit advection-diffusion steps:
``g`` below 10), and huge when ``B`` is nearly singular although ``A`` is not (a cyclic
shift plus a small multiple of ``I``: ``B^-1`` grows geometrically along the band,
``A^-1`` does not).

Every periodic factor computes ``g`` (``O(n r)`` on the stored ``Z``, no further solve)
and is refused above :data:`MAX_GROWTH`, ``1e3``: its solves lose at most about three
decimal digits more than the banded LU's, in any precision. A refused factor's ``info``
is ``jaxdia._linalg.banded.UNSTABLE_CORRECTION``, as one whose band is singular has its
band's ``info``: ``jaxdia._linalg.banded.factor_lu`` then factors the whole band outside
``jit`` (a dense LU: ``O(n^2)`` memory, ``O(n^3)`` work), and under ``jit`` reports the
failure (``info != 0``, solves NaN). Transposed solves reuse ``Z`` and ``S`` and show the
same growth in practice (their bound in norms is ``||B^-1 A||_1``, reached only where the
rounding errors of the ``n``-term sums ``Z^T b`` all align).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.scipy.linalg import lu_factor as dense_lu_factor, lu_solve as dense_lu_solve

from .._geometry import band_widths

#: The largest :func:`growth` a periodic factor is used with (see the module docstring):
#: its solves then lose at most about three decimal digits more than the banded LU's.
MAX_GROWTH = 1e3


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


def separated(n: int, lower: int, upper: int, p: int, q: int) -> bool:
    """Whether a band of ``lower``/``upper`` diagonals and corners touching the last ``p``
    and the first ``q`` columns are a periodic stencil covering at most half the circle
    of ``n`` points (see the module docstring): ``2 (L + U + 1) <= n``."""
    return 2 * (max(lower, p) + max(upper, q) + 1) <= n


def split(offsets: tuple[int, ...], n: int) -> Split | None:
    """The cheapest split of an ``n x n`` matrix's ``offsets`` into a band and corner
    diagonals that are :func:`separated`, or None when the plain band is cheapest or no
    split is separated (no corners, corners that reach too far to be a small correction,
    or ``n`` too small for the corners to be told from the band)."""
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
            if p + q == 0 or not separated(n, l, u, p, q):
                continue
            work = _work(n, l, u, p + q)
            if work < best_work:
                best, best_work = Split.of(offsets, n, p, q), work
    return best


#: The names of a :class:`Correction`'s arrays, in order (its pytree leaves, and the key
#: paths of a periodic ``jaxdia.BandedLU``'s last factor arrays).
CORRECTION_ARRAYS = ("corrections", "capacitance_lu", "capacitance_pivots")


@partial(jax.tree_util.register_dataclass, data_fields=CORRECTION_ARRAYS, meta_fields=("p", "q"))
@dataclass(frozen=True)
class Correction:
    """What a periodic factor holds besides its band's factor: the corner correction of
    ``A = B + U V^T`` (see the module docstring). A pytree: the arrays are its leaves,
    ``p`` and ``q`` (the corners' columns, as :class:`Split`'s) static.

    Attributes:
      corrections: ``Z = B^-1 U``, ``(..., n, r)``.
      capacitance_lu: ``jax.scipy.linalg.lu_factor``'s ``lu`` of ``S = I + V^T Z``,
        ``(..., r, r)``.
      capacitance_pivots: its pivots, ``(..., r)``.
      p: the number of last columns the upper-right corner touches.
      q: the number of first columns the lower-left corner touches.
    """

    corrections: Array
    capacitance_lu: Array
    capacitance_pivots: Array
    p: int
    q: int

    @property
    def arrays(self) -> tuple[Array, Array, Array]:
        """``(corrections, capacitance_lu, capacitance_pivots)``."""
        return self.corrections, self.capacitance_lu, self.capacitance_pivots

    def split(self, offsets: tuple[int, ...]) -> Split:
        """The :class:`Split` of the ``offsets`` of the matrix this factor corrects."""
        n = self.corrections.shape[-2]
        return Split.of(offsets, n, self.p, self.q)


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


def growth(Z: Array) -> Array:
    """``g = 1 + ||Z||_inf`` per matrix (shape ``Z.shape[:-2]``), a bound of
    ``||B^-1 A||_inf``: the factor by which the corrected solve's rounding errors exceed a
    backward stable solve's (see the module docstring). NaN if ``Z`` holds a NaN."""
    return 1 + jnp.max(jnp.sum(jnp.abs(Z), axis=-1), axis=-1)


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


def solve(
    band_solve: Callable[[Array, int], Array],
    Z: Array,
    lu: Array,
    pivots: Array,
    rhs: Array,
    trans: int,
    where: Split,
) -> Array:
    """``op(A)^-1 rhs`` for ``rhs`` ``(..., n, k)``, given ``band_solve(rhs, t)``
    (``op_t(B)^-1 rhs``) and the stored ``Z``, ``S``'s LU: ``trans`` 0 ``A``, 1 ``A^T``, 2
    ``A^H``."""
    n = rhs.shape[-2]
    cols = columns(n, where)
    if trans == 0:
        y = band_solve(rhs, 0)
        return y - jnp.matmul(
            Z, _dense_solve(lu, pivots, y[..., cols, :], 0), precision=lax.Precision.HIGHEST
        )
    Zt = jnp.swapaxes(Z.conj() if trans == 2 else Z, -1, -2)
    correction = _dense_solve(
        lu, pivots, jnp.matmul(Zt, rhs, precision=lax.Precision.HIGHEST), trans
    )
    return band_solve(rhs.at[..., cols, :].add(-correction), trans)
