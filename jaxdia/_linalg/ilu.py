"""ILU(0) and IC(0) of a square matrix at the array level: the factor, and its application.

:func:`factorize` takes a ``DiaParts`` (possibly batched) to an :class:`IncompleteFactor` in
the row layout of :mod:`jaxdia._kernels.ilu`, by the primitives of
:mod:`jaxdia._kernels.ilu_primitives`; :func:`apply` solves with it, :func:`diagonals`
gives its triangles back as DIA data. The matrix is factored as it is: orderings are the
caller's (:mod:`jaxdia._linalg.incomplete`).

Given a ``grid`` (the unknowns are its points in C order), the factor keeps only entries
that couple grid neighbours (points whose coordinates differ by at most one along every
axis): what a stencil's factor holds anyway, and what the wavefront solves over the grid's
hyperplanes require. It is ILU(0) (IC(0)) on that pattern: where fill would reach a slot
that wraps around a grid line (:func:`jaxdia._kernels.ilu.wrapped_fill`: grids with an
axis of 3 points, say) the factorization keeps those slots at zero as it runs; elsewhere
it runs on the whole diagonals, whose wrapped slots stay zero, and they are masked after.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .._geometry import slot_indices
from .._kernels import ilu_primitives as prims
from .._kernels.ilu import wrapped_fill
from .._parts import DiaParts
from .._pytree import Immutable
from .._typing import ArrayLike

KINDS = ("ilu", "ic")

#: Chow–Patel sweeps where they are used and not asked for: two gave BiCGStab iteration
#: counts within 5 % of the exact factorization's on the convection-diffusion problems of
#: benchmarks/notes/preconditioners.md, one up to 60 % more.
DEFAULT_SWEEPS = 2


@jax.tree_util.register_pytree_with_keys_class
class IncompleteFactor(Immutable):
    """An incomplete factor of one matrix, or of a batch (leading dims of every array).

    ``kind="ilu"``: ``A ~ L U``, ``L`` unit lower triangular with the strictly lower
    entries ``lower`` ``(..., Kl, n)`` on ``lower_offsets``; ``U`` upper triangular with
    the strictly upper entries ``upper`` ``(..., Ku, n)`` on ``upper_offsets`` and the
    diagonal ``1 / inverse_diagonal`` ``(..., n)``. ``kind="ic"``: ``A ~ L L^H``, ``L``
    lower triangular with ``lower`` on ``lower_offsets`` and the diagonal ``1 /
    inverse_diagonal``; ``upper`` is None. Row layout. Static: the offsets, ``grid`` and
    ``weights`` (None, or the grid and hyperplane weights of the wavefront solves) and
    ``solves`` (``"auto"``, ``"scan"`` or ``"wavefront"``).
    """

    __slots__ = (
        "lower",
        "upper",
        "inverse_diagonal",
        "kind",
        "lower_offsets",
        "upper_offsets",
        "grid",
        "weights",
        "solves",
    )
    _leaves = ("lower", "upper", "inverse_diagonal")
    _static = ("kind", "lower_offsets", "upper_offsets", "grid", "weights", "solves")
    lower: Array
    upper: Array | None
    inverse_diagonal: Array
    kind: str
    lower_offsets: tuple[int, ...]
    upper_offsets: tuple[int, ...]
    grid: tuple[int, ...] | None
    weights: tuple[int, ...] | None
    solves: str

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.inverse_diagonal.shape[:-1])

    @property
    def dtype(self) -> np.dtype:
        return self.inverse_diagonal.dtype


def rows(data: Array, offsets: tuple[int, ...]) -> Array:
    """The row layout ``(..., K, n)`` of DIA ``data``: ``rows[k, i] = data[k, i + o_k]``
    (padding slots are not read)."""
    n = data.shape[-1]
    columns, _, inside = slot_indices(tuple(-o for o in offsets), (n, n))
    return _gather(data, columns, inside)


def diagonals(rows: Array, offsets: tuple[int, ...]) -> Array:
    """DIA ``data`` ``(..., K, n)`` of a row layout (padding slots zero)."""
    n = rows.shape[-1]
    source, _, inside = slot_indices(offsets, (n, n))
    return _gather(rows, source, inside)


def _gather(values: Array, columns: Array, inside: Array) -> Array:
    """``values[..., k, columns[k, j]]`` where ``inside``, else 0."""
    n = values.shape[-1]
    columns = jnp.broadcast_to(jnp.clip(columns, 0, n - 1), values.shape)
    return jnp.where(inside, jnp.take_along_axis(values, columns, axis=-1), 0)


def neighbours(offsets: tuple[int, ...], grid: tuple[int, ...]) -> Array:
    """Booleans ``(K, n)``: whether row ``i``'s slot ``i + offsets[k]`` couples grid
    neighbours (points whose coordinates differ by at most one along every axis)."""
    n = math.prod(grid)
    # In the row layout, slot (k, i) holds column j = i + o_k.
    j, i, ok = slot_indices(tuple(-o for o in offsets), (n, n))
    i, j = jnp.broadcast_to(i, ok.shape), jnp.broadcast_to(j, ok.shape)
    stride = n
    for size in grid:
        stride //= size
        ok = ok & (jnp.abs((i // stride) % size - (j // stride) % size) <= 1)
    return ok


def factorize(
    A: DiaParts,
    *,
    kind: str,
    method: str,
    sweeps: int,
    shift_by: ArrayLike = 0.0,
    grid: tuple[int, ...] | None = None,
    weights: tuple[int, ...] | None = None,
    solves: str = "auto",
) -> tuple[IncompleteFactor, Array]:
    """The ILU(0) or IC(0) factor of a square ``A`` holding its main diagonal, and the
    pivots (``U``'s diagonal for ILU, ``L``'s for IC: a breakdown shows as a zero or
    non-finite pivot, or for IC a NaN one).

    IC(0) reads the lower triangle (offsets ``<= 0``). The factor is of ``A + shift_by *
    diag(A)`` and is not differentiated (``stop_gradient``). ``method``: ``"auto"``,
    ``"exact"`` or ``"sweeps"`` (``sweeps`` Chow–Patel sweeps); see
    :mod:`jaxdia._kernels.ilu_primitives`.
    """
    offsets = A.offsets if kind == "ilu" else tuple(o for o in A.offsets if o <= 0)
    data = lax.stop_gradient(A.data)
    if kind == "ic":
        data = data[..., : len(offsets), :]
    layout = rows(data, offsets)
    center = offsets.index(0)
    if not (isinstance(shift_by, (int, float)) and shift_by == 0):
        scale = 1 + lax.stop_gradient(jnp.asarray(shift_by, layout.real.dtype))
        layout = layout.at[..., center, :].multiply(scale.astype(layout.dtype))
    # The pattern's mask inside the loops only where fill would wrap: elsewhere masking
    # after gives the same factor, and the common grids keep their programs.
    pattern = grid if grid is not None and wrapped_fill(offsets, grid, kind) else None
    factor = prims.factor(
        layout, offsets=offsets, kind=kind, method=method, sweeps=sweeps, grid=pattern
    )
    if grid is not None:
        factor = jnp.where(neighbours(offsets, grid), factor, 0)
    pivots = factor[..., center, :]
    lower = factor[..., :center, :]
    upper = factor[..., center + 1 :, :] if kind == "ilu" else None
    upper_offsets = offsets[center + 1 :] if kind == "ilu" else ()
    result = IncompleteFactor._make(
        lower, upper, 1 / pivots, kind, offsets[:center], upper_offsets, grid, weights, solves
    )
    return result, pivots


def _solve(
    factor: IncompleteFactor, coefficients, offsets, inverse_diagonal, b, transpose, conjugate
):
    if not offsets:  # a diagonal triangle
        if inverse_diagonal is None:
            return b
        return b * (inverse_diagonal.conj() if conjugate else inverse_diagonal)
    return prims.solve(
        coefficients,
        inverse_diagonal,
        b,
        offsets=offsets,
        transpose=transpose,
        conjugate=conjugate,
        grid=factor.grid,
        weights=factor.weights,
        method=factor.solves,
    )


def apply(factor: IncompleteFactor, b: Array, adjoint: bool = False) -> Array:
    """``(L U)^-1 b`` (``(L L^H)^-1 b`` for IC), or with ``adjoint`` its conjugate
    transpose applied, for ``b`` ``(..., n)`` of the factor's dtype whose batch dims equal
    the factor's, or for a factor without batch dims."""
    lower, inverse = factor.lower, factor.inverse_diagonal
    if factor.kind == "ic":  # (L L^H)^-1 is Hermitian
        y = _solve(factor, lower, factor.lower_offsets, inverse, b, False, False)
        return _solve(factor, lower, factor.lower_offsets, inverse, y, True, True)
    upper, offsets = factor.upper, factor.upper_offsets
    if adjoint:  # (L U)^-H = L^-H U^-H
        y = _solve(factor, upper, offsets, inverse, b, True, True)
        return _solve(factor, lower, factor.lower_offsets, None, y, True, True)
    y = _solve(factor, lower, factor.lower_offsets, None, b, False, False)
    return _solve(factor, upper, offsets, inverse, y, False, False)
