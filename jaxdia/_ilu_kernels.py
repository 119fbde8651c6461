"""Incomplete LU and Cholesky factorizations on a DIA pattern, and their triangular solves,
as ``lax`` loops over one matrix.

Everything here is in *row layout*: ``rows[k, i] = M[i, i + offsets[k]]``, zero where
``i + offsets[k]`` lies outside the matrix (the layout a row-by-row recurrence reads; DIA
``data`` holds the same diagonals shifted by their offsets). Offsets are sorted and
distinct. The factorizations keep the pattern of the offsets (ILU(0), IC(0)):

* ILU(0): ``A ~ L U``, ``L`` unit lower triangular in the negative offsets, ``U`` upper
  triangular in the others (its diagonal holds the pivots).
* IC(0): ``A ~ L L^H`` for a Hermitian ``A`` given by its lower triangle (offsets ``<= 0``).

Two ways to compute each:

* exactly, by a ``fori_loop`` over the rows (:func:`ilu_rows`, :func:`ic_rows`): row ``i``
  needs only rows ``i + p`` (``p < 0``), already final. ``n`` sequential steps, the
  textbook (IKJ) order.
* by Chow and Patel's fine-grained iteration (:func:`ilu_sweeps`, :func:`ic_sweeps`;
  SIAM J. Sci. Comput. 37(2), 2015): every entry of the factors is updated at once from
  the previous iterate, by the nonlinear equations ``(L U)[i, j] = A[i, j]`` on the
  pattern. Each sweep is a few whole-array operations (a sum over pairs of offsets), so
  it runs in parallel; its fixed point is the exact factorization.

The triangular solves read a factor's coefficients where they lie: ``scan_solve`` one row
at a time (``n`` steps), ``wavefront_solve`` one hyperplane of a grid at a time (see its
docstring: ``O(N)`` steps on an ``N x N`` or ``N^3`` grid, every point of a hyperplane at
once).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax.numpy as jnp
from jax import Array, lax

from ._geometry import place_row


def shift(v: Array, offset: int) -> Array:
    """``out[..., i] = v[..., i + offset]`` where that index exists, else 0."""
    n = v.shape[-1]
    if offset == 0:
        return v
    if abs(offset) >= n:
        return jnp.zeros_like(v)
    if offset > 0:
        return place_row(v[..., offset:], 0, n)
    return place_row(v[..., : n + offset], -offset, n)


def inside(offset: int, n: int) -> Array:
    """Booleans ``(n,)``: whether row ``i`` has a slot ``i + offset`` in the matrix."""
    i = lax.iota(jnp.int32, n)
    return (i + offset >= 0) & (i + offset < n)


# -- triangular solves ------------------------------------------------------------------------


def _steps(offsets: Sequence[int], transpose: bool) -> tuple[tuple[int, ...], bool]:
    """The offsets of the system solved (``op(T)``'s) and whether the sweep runs forward."""
    steps = tuple(-o for o in offsets) if transpose else tuple(offsets)
    return steps, all(s < 0 for s in steps)


def _coefficient(C: Array, k: int, i: Array, step: int, transpose: bool, conjugate: bool):
    """``op(T)[i, i + step]`` for row(s) ``i``: ``C[k, i]``, or ``C[k, i + step]`` for a
    transposed ``T`` (``T^T[i, i - o] = T[i - o, i]``), conjugated for ``T^H``."""
    n = C.shape[-1]
    value = C[k, jnp.clip(i + step, 0, n - 1) if transpose else i]
    return value.conj() if conjugate else value


def scan_solve(
    coefficients: Array,
    offsets: tuple[int, ...],
    inverse_diagonal: Array | None,
    b: Array,
    transpose: bool = False,
    conjugate: bool = False,
) -> Array:
    """``x`` with ``op(T) x = b`` for one triangular ``T``, row by row (``n`` steps).

    ``T`` has the strictly triangular part ``coefficients`` ``(K, n)`` (row layout) on
    ``offsets`` (all negative or all positive) and the diagonal ``1 / inverse_diagonal``
    (None: a unit diagonal). ``op`` is ``T``, ``T^T`` (``transpose``), ``T^H``
    (``transpose`` and ``conjugate``) or ``conj(T)`` (``conjugate``). ``b`` is ``(n,)``.
    """
    n = b.shape[-1]
    steps, forward = _steps(offsets, transpose)

    def body(step, x):
        i = step if forward else n - 1 - step
        total = x[i]
        for k, s in enumerate(steps):
            j = i + s
            c = _coefficient(coefficients, k, i, s, transpose, conjugate)
            total = total - jnp.where((j >= 0) & (j < n), c * x[jnp.clip(j, 0, n - 1)], 0)
        if inverse_diagonal is not None:
            scale = inverse_diagonal[i]
            total = total * (scale.conj() if conjugate else scale)
        return x.at[i].set(total)

    return lax.fori_loop(0, n, body, b)


def hyperplane_weights(displacements: Sequence[Sequence[int]], dim: int) -> tuple[int, ...]:
    """Integer weights ``w`` (last one 1) with ``w . d <= -1`` for every displacement
    ``d`` of a lower triangle (lexicographically negative, entries in ``{-1, 0, 1}``),
    as small as that allows: ``(1, 1)`` for a 5-point stencil, ``(2, 1)`` for a 9-point
    one (whose ``(-1, 1)`` neighbour would share a hyperplane ``i_1 + i_2``).

    Axis by axis from the last: ``w_a = 1 + max(0, max sum_{b > a} w_b d_b)`` over the
    displacements whose first nonzero entry is ``d_a = -1``.
    """
    weights = [1] * dim
    for axis in reversed(range(dim)):
        reach = [
            sum(weights[b] * d[b] for b in range(axis + 1, dim))
            for d in displacements
            if all(step == 0 for step in d[:axis]) and d[axis] == -1
        ]
        weights[axis] = 1 + max([0, *reach])
    return tuple(weights)


def hyperplanes(grid: Sequence[int], weights: Sequence[int]) -> int:
    """How many hyperplanes ``w . i = t`` the grid's points lie on."""
    return sum(w * (size - 1) for w, size in zip(weights, grid)) + 1


def wavefront_solve(
    coefficients: Array,
    offsets: tuple[int, ...],
    inverse_diagonal: Array | None,
    b: Array,
    grid: tuple[int, ...],
    weights: tuple[int, ...],
    transpose: bool = False,
    conjugate: bool = False,
) -> Array:
    """:func:`scan_solve` one hyperplane of ``grid`` at a time.

    The unknowns are the points of ``grid`` in C order and ``T`` couples each point only to
    grid neighbours lying on earlier hyperplanes ``w . i = t`` (``weights`` from
    :func:`hyperplane_weights`; later ones for an upper ``op(T)``): the points of one
    hyperplane then depend only on earlier ones, and are solved at once. The loop runs
    over the hyperplanes (``2 N - 1`` on an ``N x N`` grid with a 5-point stencil, ``3 N - 2``
    on ``N^3`` with a 7-point one), each step a gather of the hyperplane's points, their
    neighbours and coefficients, and a scatter of the result: ``prod(grid[:-1])`` lanes,
    one per line along the last axis, whose point on the hyperplane is ``i_last = t -
    sum_a w_a i_a`` (a lane without one is masked).
    """
    n = b.shape[-1]
    steps, forward = _steps(offsets, transpose)
    count = hyperplanes(grid, weights)
    lanes = math.prod(grid[:-1])
    index = lax.iota(jnp.int32, lanes)
    base = jnp.zeros((lanes,), jnp.int32)  # the flat index of each lane's first point
    level = jnp.zeros((lanes,), jnp.int32)  # sum_a w_a i_a over the lane's coordinates
    stride = math.prod(grid[1:])
    remainder = index
    for axis in range(len(grid) - 1):
        line_stride = math.prod(grid[axis + 1 : -1])
        coordinate = remainder // line_stride
        remainder = remainder % line_stride
        base = base + coordinate * stride
        level = level + coordinate * weights[axis]
        stride //= grid[axis + 1]
    last = grid[-1]

    def body(step, x):
        t = step if forward else count - 1 - step
        c = t - level
        on = (c >= 0) & (c < last)
        i = jnp.where(on, base + c, 0)
        total = x[i]
        for k, s in enumerate(steps):
            j = i + s
            coefficient = _coefficient(coefficients, k, i, s, transpose, conjugate)
            neighbour = x[jnp.clip(j, 0, n - 1)]
            total = total - jnp.where(on & (j >= 0) & (j < n), coefficient * neighbour, 0)
        if inverse_diagonal is not None:
            scale = inverse_diagonal[i]
            total = total * (scale.conj() if conjugate else scale)
        return x.at[jnp.where(on, i, n)].set(total, mode="drop")

    return lax.fori_loop(0, count, body, b)


# -- ILU(0) -----------------------------------------------------------------------------------


def _ilu_pairs(offsets: tuple[int, ...]) -> dict[int, list[tuple[int, int]]]:
    """For each offset ``r``: the pairs ``(p, q)``, ``p < 0 < q``, ``p + q = r``, through
    which ``L[i, i + p] U[i + p, i + r]`` enters entry ``(i, i + r)`` (``p < r`` holds as
    ``q > 0``)."""
    present = set(offsets)
    return {
        r: [(p, r - p) for p in offsets if p < 0 and r - p > 0 and r - p in present]
        for r in offsets
    }


def ilu_rows(rows: Array, offsets: tuple[int, ...]) -> Array:
    """Exact ILU(0) of one matrix, row by row: ``rows`` ``(K, n)`` of ``A`` in, the same
    layout out with ``L``'s entries on the negative offsets and ``U``'s on the others."""
    n = rows.shape[-1]
    index = {o: k for k, o in enumerate(offsets)}
    pairs = _ilu_pairs(offsets)
    center = index[0]
    lower = [o for o in offsets if o < 0]

    def body(i, F):
        w = {o: F[index[o], i] for o in offsets}
        # IKJ: for k = i + p ascending, L[i, k] = w[k] / U[k, k], then the row of U[k]
        # updates the later entries of row i that the pattern holds.
        for p in lower:
            k = jnp.maximum(i + p, 0)
            w[p] = jnp.where(i + p >= 0, w[p] / F[center, k], 0)
            for r in offsets:
                for p_, q in pairs[r]:
                    if p_ == p:
                        w[r] = w[r] - w[p] * F[index[q], k]
        column = jnp.stack([jnp.where((i + o >= 0) & (i + o < n), w[o], 0) for o in offsets])
        return lax.dynamic_update_slice(F, column[:, None], (0, i))

    return lax.fori_loop(0, n, body, rows)


def ilu_sweeps(rows: Array, offsets: tuple[int, ...], sweeps: int) -> Array:
    """``sweeps`` Chow–Patel sweeps for ILU(0) of one matrix, from ``L = tril(A) D^-1``,
    ``U = triu(A)`` (``D`` the diagonal); layouts as :func:`ilu_rows`."""
    n = rows.shape[-1]
    A = dict(zip(offsets, rows))
    slots = {o: inside(o, n) for o in offsets}
    pairs = _ilu_pairs(offsets)
    center = offsets.index(0)

    def lower_entry(r, value, U0):
        return jnp.where(slots[r], value / jnp.where(slots[r], shift(U0, r), 1), 0)

    start = jnp.stack([lower_entry(o, A[o], A[0]) if o < 0 else A[o] for o in offsets])

    def sweep(_, F):
        factor = dict(zip(offsets, F))
        new = []
        for r in offsets:
            total = A[r]
            for p, q in pairs[r]:
                total = total - factor[p] * shift(factor[q], p)
            new.append(lower_entry(r, total, F[center]) if r < 0 else total)
        return jnp.where(jnp.stack([slots[o] for o in offsets]), jnp.stack(new), 0)

    return lax.fori_loop(0, sweeps, sweep, start)


# -- IC(0) ------------------------------------------------------------------------------------


def _ic_pairs(offsets: tuple[int, ...]) -> dict[int, list[int]]:
    """For each strictly lower offset ``r``: the ``p < r`` through which ``L[i, i + p]
    conj(L[i + r, i + p])`` enters entry ``(i, i + r)`` (``L[i + r, i + p]`` lies on
    offset ``p - r``, which the pattern must hold)."""
    present = set(offsets)
    return {r: [p for p in offsets if p < r and p - r in present] for r in offsets if r < 0}


def _pivot_root(pivot: Array) -> Array:
    """``sqrt(pivot)`` of a real pivot, NaN where it is not positive (the factorization
    breaks down there; the caller reports the first such row)."""
    return jnp.where(pivot > 0, jnp.sqrt(jnp.where(pivot > 0, pivot, 1)), jnp.nan)


def ic_rows(rows: Array, offsets: tuple[int, ...]) -> Array:
    """Exact IC(0) of one Hermitian matrix from its lower triangle ``rows`` ``(K, n)`` on
    ``offsets`` (all ``<= 0``, 0 last), row by row: ``L`` in the same layout, its diagonal
    real (NaN from a non-positive pivot on)."""
    n = rows.shape[-1]
    index = {o: k for k, o in enumerate(offsets)}
    pairs = _ic_pairs(offsets)
    center = index[0]
    lower = [o for o in offsets if o < 0]

    def body(i, F):
        w = {o: F[index[o], i] for o in offsets}
        pivot = w[0].real
        for r in lower:
            k = jnp.maximum(i + r, 0)
            for p in pairs[r]:
                w[r] = w[r] - w[p] * F[index[p - r], k].conj()
            w[r] = jnp.where(i + r >= 0, w[r] / F[center, k], 0)
            pivot = pivot - (w[r].conj() * w[r]).real
        w[0] = _pivot_root(pivot).astype(F.dtype)
        column = jnp.stack([w[o] for o in offsets])
        return lax.dynamic_update_slice(F, column[:, None], (0, i))

    return lax.fori_loop(0, n, body, rows)


def ic_sweeps(rows: Array, offsets: tuple[int, ...], sweeps: int) -> Array:
    """``sweeps`` Chow–Patel sweeps for IC(0), from ``L = tril(A) D^-1/2``; layouts as
    :func:`ic_rows`."""
    n = rows.shape[-1]
    A = dict(zip(offsets, rows))
    slots = {o: inside(o, n) for o in offsets}
    pairs = _ic_pairs(offsets)
    center = offsets.index(0)

    def entries(factor, diagonal):
        new = []
        for r in offsets:
            if r == 0:
                continue
            total = A[r]
            for p in pairs[r]:
                total = total - factor[p] * shift(factor[p - r], r).conj()
            new.append(jnp.where(slots[r], total / jnp.where(slots[r], shift(diagonal, r), 1), 0))
        return new

    root = _pivot_root(A[0].real).astype(rows.dtype)
    start = jnp.stack([*entries(dict(zip(offsets, jnp.zeros_like(rows))), root), root])

    def sweep(_, F):
        factor = dict(zip(offsets, F))
        pivot = A[0].real
        for p in offsets[:-1]:
            pivot = pivot - (factor[p].conj() * factor[p]).real
        return jnp.stack([*entries(factor, F[center]), _pivot_root(pivot).astype(F.dtype)])

    return lax.fori_loop(0, sweeps, sweep, start)
