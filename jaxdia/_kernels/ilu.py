"""Incomplete LU and Cholesky factorizations on a DIA pattern, and their triangular solves,
as ``lax`` loops over one matrix.

Everything here is in *row layout*: ``rows[k, i] = M[i, i + offsets[k]]``, zero where
``i + offsets[k]`` lies outside the matrix (the layout a row-by-row recurrence reads; DIA
``data`` holds the same diagonals shifted by their offsets). Offsets are sorted and
distinct. The factorizations keep the pattern of the offsets (ILU(0), IC(0)):

* ILU(0): ``A ~ L U``, ``L`` unit lower triangular in the negative offsets, ``U`` upper
  triangular in the others (its diagonal holds the pivots).
* IC(0): ``A ~ L L^H`` for a Hermitian ``A`` given by its lower triangle (offsets ``<= 0``).

Both solve the equations ``(L U)[i, j] = A[i, j]`` on the pattern, where entry
``(i, i + r)`` takes ``L[i, i + p] U[i + p, i + r]`` for the *pairs* ``(p, r - p)`` of
offsets (``p < 0 < r - p``; for IC(0), ``U[k, j] = conj(L[j, k])``). Two ways:

* exactly, by a ``fori_loop`` over the rows (:func:`ilu_rows`, :func:`ic_rows`): row ``i``
  needs rows ``i + p`` (``p < 0``), already final; ``n`` sequential steps of scalar
  arithmetic, the textbook (IKJ) order.
* by Chow and Patel's fine-grained iteration (:func:`ilu_sweeps`, :func:`ic_sweeps`;
  SIAM J. Sci. Comput. 37(2), 2015): every entry updated at once from the previous
  iterate (Jacobi's way), a few whole-array operations per sweep (one gather for all
  pairs), whose fixed point is the exact factorization.

Given a ``grid`` (the unknowns its points in C order), each takes the pattern of the
slots that couple grid neighbours (:func:`grid_pattern`) instead of the whole diagonals:
a diagonal such as ``n2 - 1`` on an ``(n1, n2)`` grid holds neighbours, ``(a, b) -> (a +
1, b - 1)``, and also pairs that wrap around a grid line, ``(a, 0) -> (a, n2 - 1)``. Only
where fill reaches such a slot can the two patterns give different factors
(:func:`wrapped_fill`: on an axis of 3 points, say, two steps along it land on the offset
of a neighbour); elsewhere the callers factor on the whole diagonals, which costs no mask.

Where whole arrays are updated (the sweeps, the wavefront's hyperplanes) one operation
serves all offsets or pairs at once, so that the programs stay small (a 27-point stencil
has 27 offsets and over a hundred pairs); the row-by-row loops read scalars instead, which
XLA fuses into one loop body.

The triangular solves read a factor's coefficients where they lie: :func:`scan_solve`
one row at a time (``n`` steps), :func:`wavefront_solve` one hyperplane of a grid at a
time (``O(N)`` steps on an ``N x N`` or ``N^3`` grid, every point of a hyperplane at
once).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import Array, lax


def _take(F: Array, rows: np.ndarray, columns: Array) -> Array:
    """``F[rows, columns]`` of ``F`` ``(K, n)``, the columns clipped into the matrix
    (callers mask what lies outside); ``rows`` static, broadcast against ``columns``."""
    n = F.shape[-1]
    rows = np.asarray(rows, np.int32)
    rows = rows.reshape(rows.shape + (1,) * (columns.ndim - rows.ndim))
    return F[rows, jnp.clip(columns, 0, n - 1)]


def _segment_sum(terms: Array, segments: np.ndarray, count: int) -> Array:
    """Sums of ``terms`` (leading axis) by ``segments``: a product with a 0/1 matrix."""
    if terms.shape[0] == 0:
        return jnp.zeros((count, *terms.shape[1:]), terms.dtype)
    indicator = (np.arange(count)[:, None] == np.asarray(segments)[None, :]).astype(np.float32)
    return jnp.tensordot(jnp.asarray(indicator, terms.real.dtype).astype(terms.dtype), terms, 1)


# -- triangular solves ------------------------------------------------------------------------


def _steps(offsets: Sequence[int], transpose: bool) -> tuple[np.ndarray, bool]:
    """The offsets of the system solved (``op(T)``'s) and whether the sweep runs forward."""
    steps = np.asarray([-o for o in offsets] if transpose else list(offsets), np.int32)
    return steps, bool(np.all(steps < 0))


def _coefficients(C: Array, i: Array, steps: np.ndarray, transpose: bool, conjugate: bool):
    """``op(T)[i, i + steps]`` for rows ``i`` (a scalar or lanes ``(H,)``): ``C[k, i]``,
    or ``C[k, i + step]`` for a transposed ``T`` (``T^T[i, i - o] = T[i - o, i]``),
    conjugated for ``T^H``; shape ``(K, *i.shape)``."""
    ks = np.arange(len(steps))
    i = jnp.asarray(i)[None]
    shape = steps.reshape(-1, *([1] * (i.ndim - 1)))
    value = _take(
        C, ks, i + shape if transpose else jnp.broadcast_to(i, (len(steps), *i.shape[1:]))
    )
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
        # Scalar reads, one per offset: XLA fuses them into one loop body, where gathers
        # of small vectors would each be an operation of their own in every step.
        for k, s in enumerate(steps.tolist()):
            j = i + s
            c = coefficients[k, jnp.clip(j, 0, n - 1) if transpose else i]
            c = c.conj() if conjugate else c
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
    # Each lane's first point (flat index) and its sum_a w_a i_a, from its coordinates.
    strides = [math.prod(grid[a + 1 :]) for a in range(len(grid))]
    base = jnp.zeros((lanes,), jnp.int32)
    level = jnp.zeros((lanes,), jnp.int32)
    index = lax.iota(jnp.int32, lanes)
    for axis in range(len(grid) - 1):
        coordinate = (index // math.prod(grid[axis + 1 : -1])) % grid[axis]
        base = base + coordinate * strides[axis]
        level = level + coordinate * weights[axis]
    last = grid[-1]

    def body(step, x):
        t = step if forward else count - 1 - step
        c = t - level
        on = (c >= 0) & (c < last)
        i = jnp.where(on, base + c, 0)
        j = i[None] + steps[:, None]
        coefficient = _coefficients(coefficients, i, steps, transpose, conjugate)
        neighbour = x[jnp.clip(j, 0, n - 1)]
        terms = jnp.where(on & (j >= 0) & (j < n), coefficient * neighbour, 0)
        total = x[i] - jnp.sum(terms, axis=0)
        if inverse_diagonal is not None:
            scale = inverse_diagonal[i]
            total = total * (scale.conj() if conjugate else scale)
        return x.at[jnp.where(on, i, n)].set(total, mode="drop")

    return lax.fori_loop(0, count, body, b)


# -- the grid's pattern -----------------------------------------------------------------------


def grid_pattern(offsets: Sequence[int], grid: tuple[int, ...]) -> Array:
    """Booleans ``(K, n)``: whether row ``i``'s slot ``i + offsets[k]`` lies in the matrix
    and couples grid neighbours (points whose coordinates differ by at most one along
    every axis)."""
    n = math.prod(grid)
    i = lax.broadcasted_iota(jnp.int32, (len(offsets), n), 1)
    j = i + np.asarray(offsets, np.int32)[:, None]
    keep = (j >= 0) & (j < n)
    stride = n
    for size in grid:
        stride //= size
        keep = keep & (jnp.abs((i // stride) % size - (j // stride) % size) <= 1)
    return keep


def wrapped_fill(offsets: Sequence[int], grid: tuple[int, ...], kind: str) -> bool:
    """Whether ILU(0) (``kind="ilu"``) or IC(0) (``"ic"``, ``offsets`` its lower
    triangle's) on the whole diagonals of ``offsets`` puts fill into a slot that couples
    no neighbours of ``grid`` (a wrapped slot), for a matrix that is zero there. If not,
    the wrapped slots stay zero, and that factorization, masked after, is the one on
    :func:`grid_pattern`; if so, the fill can feed entries computed after it, and only
    masking as the factorization runs gives the factor of the pattern.

    Fill enters slot ``(x, x + e)`` from ``L[x, x + d1] U[x + d1, x + e]`` (for IC(0),
    ``U[k, j] = conj(L[j, k])``), with neighbour displacements ``d1`` (lower) and ``d2 =
    e - d1`` (upper). While every wrapped slot is zero only such products of neighbours
    are nonzero, so fill reaches one if and only if some ``e`` with a step of 2 lies on a
    stored offset and the grid holds the three points ``x``, ``x + d1``, ``x + e``: on an
    ``(n1, 3)`` grid ``e = (1, -2)`` has the offset 1 of ``(0, 1)``. Where every axis
    after the first has 4 points or more no such ``e`` exists (offsets are then unique).
    """
    dim = len(grid)
    strides = [math.prod(grid[axis + 1 :]) for axis in range(dim)]
    steps = [
        d
        for d in itertools.product((-1, 0, 1), repeat=dim)
        if all(abs(step) < size for step, size in zip(d, grid))
    ]
    present = set(offsets)
    upper = present if kind == "ilu" else {-o for o in present}
    for d1 in steps:
        p = sum(step * stride for step, stride in zip(d1, strides))
        if p >= 0 or p not in present:
            continue
        for d2 in steps:
            q = sum(step * stride for step, stride in zip(d2, strides))
            e = [a + b for a, b in zip(d1, d2)]
            if q <= 0 or q not in upper or p + q not in present or max(map(abs, e)) <= 1:
                continue
            if all(max(0, a, b) - min(0, a, b) < size for a, b, size in zip(d1, e, grid)):
                return True
    return False


# -- the equations on the pattern -----------------------------------------------------------


def _ilu_pairs(offsets: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """``(r, p, q)``: ``L[i, i + p] U[i + p, i + p + q]`` enters entry ``(i, i + r)``,
    ``p < 0 < q``, ``p + q = r``, for every pair of offsets the pattern holds."""
    present = set(offsets)
    return [
        (r, p, r - p) for r in offsets for p in offsets if p < 0 and r - p > 0 and r - p in present
    ]


def _ic_pairs(offsets: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """``(r, p, s)``: ``L[i, i + p] conj(L[i + r, i + p])`` enters the strictly lower
    entry ``(i, i + r)`` for ``p < r``, ``L[i + r, i + p]`` lying on offset ``s = p - r``."""
    present = set(offsets)
    return [(r, p, p - r) for r in offsets if r < 0 for p in offsets if p < r and p - r in present]


# -- ILU(0) ------------------------------------------------------------------------------------


def ilu_rows(rows: Array, offsets: tuple[int, ...], grid: tuple[int, ...] | None = None) -> Array:
    """Exact ILU(0) of one matrix, row by row: ``rows`` ``(K, n)`` of ``A`` in, the same
    layout out with ``L``'s entries on the negative offsets and ``U``'s on the others.
    ``grid``: on :func:`grid_pattern`'s slots (the others zero), else on the diagonals."""
    n = rows.shape[-1]
    index = {o: k for k, o in enumerate(offsets)}
    pairs = _ilu_pairs(offsets)
    center = index[0]
    lower = [o for o in offsets if o < 0]
    keep = None if grid is None else grid_pattern(offsets, grid)

    def body(i, F):
        # Scalar reads and updates: XLA fuses them into one loop body (gathers of small
        # vectors would each be an operation of its own, in every one of the n steps).
        w = {o: F[index[o], i] for o in offsets}
        # IKJ: for k = i + p ascending, L[i, k] = w[k] / U[k, k], then the row of U[k]
        # updates the later entries of row i that the pattern holds.
        # With a pattern, L[i, k] is zero off it before it updates anything.
        for p in lower:
            k = jnp.maximum(i + p, 0)
            inside = i + p >= 0 if keep is None else keep[index[p], i]
            w[p] = jnp.where(inside, w[p] / F[center, k], 0)
            for r, p_, q in pairs:
                if p_ == p:
                    w[r] = w[r] - w[p] * F[index[q], k]
        column = jnp.stack(
            [
                jnp.where(
                    (i + o >= 0) & (i + o < n) if keep is None else keep[index[o], i], w[o], 0
                )
                for o in offsets
            ]
        )
        return lax.dynamic_update_slice(F, column[:, None], (0, i))

    return lax.fori_loop(0, n, body, rows)


def _slots(offsets: Sequence[int], n: int) -> Array:
    """Booleans ``(K, n)``: whether row ``i`` has a slot ``i + offsets[k]`` in the matrix."""
    j = lax.broadcasted_iota(jnp.int32, (len(offsets), n), 1)
    j = j + np.asarray(offsets, np.int32)[:, None]
    return (j >= 0) & (j < n)


def ilu_sweeps(
    rows: Array, offsets: tuple[int, ...], sweeps: int, grid: tuple[int, ...] | None = None
) -> Array:
    """``sweeps`` Chow–Patel sweeps for ILU(0) of one matrix, from ``L = tril(A) D^-1``,
    ``U = triu(A)`` (``D`` the diagonal); layouts and ``grid`` as :func:`ilu_rows`."""
    n = rows.shape[-1]
    index = {o: k for k, o in enumerate(offsets)}
    pairs = _ilu_pairs(offsets)
    r = np.asarray([index[t[0]] for t in pairs], np.int32)
    kp = np.asarray([index[t[1]] for t in pairs], np.int32)
    kq = np.asarray([index[t[2]] for t in pairs], np.int32)
    p = np.asarray([t[1] for t in pairs], np.int32)
    slots = _slots(offsets, n) if grid is None else grid_pattern(offsets, grid)
    columns = lax.broadcasted_iota(jnp.int32, (len(offsets), n), 1)
    lower = np.asarray(offsets) < 0
    to_pivot = columns + np.asarray(offsets, np.int32)[:, None]
    center = np.full(len(offsets), index[0])

    def finish(total, F):
        """The lower entries divided by the pivots at ``i + r``, the rest as they are."""
        pivot = jnp.where(lower[:, None], _take(F, center, to_pivot), 1)
        return jnp.where(slots, total / jnp.where(slots, pivot, 1), 0)

    def sweep(_, F):
        i = lax.broadcasted_iota(jnp.int32, (len(pairs), n), 1) + p[:, None]
        products = jnp.where(i >= 0, F[kp] * _take(F, kq, i), 0)
        return finish(rows - _segment_sum(products, r, len(offsets)), F)

    return lax.fori_loop(0, sweeps, sweep, finish(rows, rows))


# -- IC(0) ------------------------------------------------------------------------------------


def _pivot_root(pivot: Array) -> Array:
    """``sqrt(pivot)`` of a real pivot, NaN where it is not positive (the factorization
    breaks down there; the caller reports the first such row)."""
    return jnp.where(pivot > 0, jnp.sqrt(jnp.where(pivot > 0, pivot, 1)), jnp.nan)


def ic_rows(rows: Array, offsets: tuple[int, ...], grid: tuple[int, ...] | None = None) -> Array:
    """Exact IC(0) of one Hermitian matrix from its lower triangle ``rows`` ``(K, n)`` on
    ``offsets`` (all ``<= 0``, 0 last), row by row: ``L`` in the same layout, its diagonal
    real (NaN from a non-positive pivot on). ``grid`` as for :func:`ilu_rows`."""
    n = rows.shape[-1]
    index = {o: k for k, o in enumerate(offsets)}
    pairs = _ic_pairs(offsets)
    center = index[0]
    lower = [o for o in offsets if o < 0]
    keep = None if grid is None else grid_pattern(offsets, grid)

    def body(i, F):
        w = {o: F[index[o], i] for o in offsets}
        pivot = w[0].real
        for r in lower:  # ascending: every p < r of row i is final
            k = jnp.maximum(i + r, 0)
            for r_, p, s in pairs:
                if r_ == r:
                    w[r] = w[r] - w[p] * F[index[s], k].conj()
            inside = i + r >= 0 if keep is None else keep[index[r], i]
            w[r] = jnp.where(inside, w[r] / F[center, k], 0)
            pivot = pivot - (w[r].conj() * w[r]).real
        w[0] = _pivot_root(pivot).astype(F.dtype)
        column = jnp.stack([w[o] for o in offsets])
        return lax.dynamic_update_slice(F, column[:, None], (0, i))

    return lax.fori_loop(0, n, body, rows)


def ic_sweeps(
    rows: Array, offsets: tuple[int, ...], sweeps: int, grid: tuple[int, ...] | None = None
) -> Array:
    """``sweeps`` Chow–Patel sweeps for IC(0), from ``L = tril(A) D^-1/2``; layouts and
    ``grid`` as :func:`ic_rows`."""
    n = rows.shape[-1]
    index = {o: k for k, o in enumerate(offsets)}
    pairs = _ic_pairs(offsets)
    center = index[0]
    r = np.asarray([index[t[0]] for t in pairs], np.int32)
    kp = np.asarray([index[t[1]] for t in pairs], np.int32)
    ks = np.asarray([index[t[2]] for t in pairs], np.int32)
    at = np.asarray([t[0] for t in pairs], np.int32)
    slots = _slots(offsets, n) if grid is None else grid_pattern(offsets, grid)
    to_pivot = lax.broadcasted_iota(jnp.int32, (len(offsets), n), 1)
    to_pivot = to_pivot + np.asarray(offsets, np.int32)[:, None]
    centers = np.full(len(offsets), center)
    diagonal = np.asarray(offsets) == 0

    def finish(total, F, root):
        """The strict entries divided by the pivots at ``i + r``, the diagonal ``root``."""
        pivot = _take(F, centers, to_pivot)
        strict = jnp.where(slots, total / jnp.where(slots, pivot, 1), 0)
        return jnp.where(diagonal[:, None], root[None], strict)

    root = _pivot_root(rows[center].real).astype(rows.dtype)

    def sweep(_, F):
        i = lax.broadcasted_iota(jnp.int32, (len(pairs), n), 1) + at[:, None]
        products = jnp.where(i >= 0, F[kp] * _take(F, ks, i).conj(), 0)
        strict = F[:center]
        pivot = rows[center].real - jnp.sum((strict.conj() * strict).real, axis=0)
        root = _pivot_root(pivot).astype(F.dtype)
        return finish(rows - _segment_sum(products, r, len(offsets)), F, root)

    start = finish(rows, rows.at[center].set(root), root)
    return lax.fori_loop(0, sweeps, sweep, start)
