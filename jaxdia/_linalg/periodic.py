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

**When to split** is the plan's choice (:func:`jaxdia._linalg.plan.periodic_split`,
from the static offsets and ``n``): where the corners are well apart from the band (the
stencil covers at most half the circle of ``n`` points) and the split is cheaper than
the plain band.

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
is :data:`UNSTABLE`, as one whose band is singular has its
band's ``info``: ``jaxdia._linalg.banded.factor`` then factors the whole band outside
``jit`` (the plan's ``fallback``: a dense LU, ``O(n^2)`` memory, ``O(n^3)`` work), and
under ``jit`` reports the failure (``info != 0``, solves NaN). Transposed solves reuse
``Z`` and ``S`` and show the same growth in practice (their bound in norms is
``||B^-1 A||_1``, reached only where the rounding errors of the ``n``-term sums ``Z^T b``
all align).
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

#: The largest :func:`growth` a periodic factor is used with (see the module docstring):
#: its solves then lose at most about three decimal digits more than the banded LU's.
MAX_GROWTH = 1e3

#: ``info`` of a periodic factor whose band factored but whose correction ``S`` is
#: singular or not finite: ``A`` is singular, or its band nearly so.
SINGULAR = -2
#: ``info`` of a periodic factor whose band is too ill-conditioned, next to ``A``, for the
#: corner correction to be accurate: the growth ``1 + ||B^-1 U||_inf`` bounding its
#: solves' loss of accuracy is above :data:`MAX_GROWTH`.
UNSTABLE = -3


class Split(NamedTuple):
    """Where a square matrix's offsets split into a band and corners (the plan's choice,
    :func:`jaxdia._linalg.plan.periodic_split`): ``band`` the indices (into the offsets)
    of the band's diagonals, ``p`` and ``q`` the number of columns the upper-right and
    lower-left corners touch (the last ``p``, the first ``q``), ``widths`` the band's
    ``(kl, ku)``."""

    band: tuple[int, ...]
    p: int
    q: int
    widths: tuple[int, int]

    @property
    def rank(self) -> int:
        return self.p + self.q

    def band_offsets(self, offsets: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(offsets[i] for i in self.band)


#: The names of a :class:`Correction`'s arrays, in order (its pytree leaves, and the key
#: paths of a periodic ``jaxdia.BandedLU``'s last factor arrays).
CORRECTION_ARRAYS = ("corrections", "capacitance_lu", "capacitance_pivots")


@partial(jax.tree_util.register_dataclass, data_fields=CORRECTION_ARRAYS, meta_fields=())
@dataclass(frozen=True)
class Correction:
    """What a periodic factor holds besides its band's factor: the corner correction of
    ``A = B + U V^T`` (see the module docstring; where the corners are is the factor's
    plan's :class:`Split`). A pytree of its three arrays.

    Attributes:
      corrections: ``Z = B^-1 U``, ``(..., n, r)``.
      capacitance_lu: ``jax.scipy.linalg.lu_factor``'s ``lu`` of ``S = I + V^T Z``,
        ``(..., r, r)``.
      capacitance_pivots: its pivots, ``(..., r)``.
    """

    corrections: Array
    capacitance_lu: Array
    capacitance_pivots: Array

    @property
    def arrays(self) -> tuple[Array, Array, Array]:
        """``(corrections, capacitance_lu, capacitance_pivots)``."""
        return self.corrections, self.capacitance_lu, self.capacitance_pivots


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


def correct(
    data: Array,
    offsets: tuple[int, ...],
    where: Split,
    band_solve: Callable[[Array], Array],
    info: Array,
) -> tuple[Correction, Array]:
    """The correction of the corners ``where`` of the square matrix ``data`` stores, given
    ``band_solve(rhs)`` (``B^-1 rhs``, ``rhs`` ``(..., n, k)``) with a factor of its band
    whose ``info`` is given: ``Z = B^-1 U``, the LU of ``S = I + V^T Z``, and ``info``
    with :data:`SINGULAR` or :data:`UNSTABLE` where the band factored but the correction
    cannot be used."""
    n = data.shape[-1]
    Z = band_solve(corners(data, offsets, where))
    lu, pivots = capacitance(Z, n, where)
    bad = jnp.any(jnp.diagonal(lu, axis1=-2, axis2=-1) == 0, axis=-1)
    bad = bad | ~jnp.all(jnp.isfinite(lu), axis=(-2, -1))
    info = jnp.where(info != 0, info, jnp.where(bad, SINGULAR, 0))
    # NaN growth (a NaN in Z) is unstable too.
    stable = growth(Z) <= MAX_GROWTH
    info = jnp.where(info != 0, info, jnp.where(stable, 0, UNSTABLE))
    return Correction(Z, lu, pivots), info


def _dense_solve(lu: Array, pivots: Array, rhs: Array, trans: int) -> Array:
    """``op(S)^-1 rhs`` for ``rhs`` ``(..., r, k)``; a real ``S`` with a complex ``rhs``
    is solved in complex arithmetic (``r x r``: no cost worth splitting ``rhs`` for)."""
    dtype = jnp.result_type(lu, rhs)
    lu = jnp.broadcast_to(lu, (*rhs.shape[:-2], *lu.shape[-2:])).astype(dtype)
    pivots = jnp.broadcast_to(pivots, (*rhs.shape[:-2], pivots.shape[-1]))
    return dense_lu_solve((lu, pivots), rhs.astype(dtype), trans=trans)


def corrected(
    band_solve: Callable[[Array, int], Array],
    correction: Correction,
    where: Split,
    precision: np.dtype,
) -> Callable[[Array, int], Array]:
    """``solve(rhs, t)``: ``op_t(A)^-1 rhs`` for ``rhs`` ``(..., n, k)`` (``t`` 0 ``A``, 1
    ``A^T``, 2 ``A^H``), the band solve ``band_solve(rhs, t)`` (``op_t(B)^-1 rhs``)
    corrected for the corners ``where`` by the stored ``Z`` and ``S``'s LU, in
    ``precision``."""

    def solve(rhs: Array, trans: int) -> Array:
        Z = correction.corrections.astype(precision)
        lu = correction.capacitance_lu.astype(precision)
        pivots = correction.capacitance_pivots
        cols = columns(rhs.shape[-2], where)
        if trans == 0:
            y = band_solve(rhs, 0)
            return y - jnp.matmul(
                Z, _dense_solve(lu, pivots, y[..., cols, :], 0), precision=lax.Precision.HIGHEST
            )
        Zt = jnp.swapaxes(Z.conj() if trans == 2 else Z, -1, -2)
        removed = _dense_solve(
            lu, pivots, jnp.matmul(Zt, rhs, precision=lax.Precision.HIGHEST), trans
        )
        return band_solve(rhs.at[..., cols, :].add(-removed), trans)

    return solve
