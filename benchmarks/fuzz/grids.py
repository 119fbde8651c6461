"""Stencil matrices on structured grids, the ``ilu``, ``multigrid`` and ``sharded`` families'
problems: a ``points``-point stencil on a grid of 1 to 3 axes with random coefficients.
"""

from __future__ import annotations

import numpy as np

from .core import random_values, wide_dtype

STENCILS = {1: (3,), 2: (5, 9), 3: (7, 27)}


def _cells(dim: int, points: int) -> list[tuple[int, ...]]:
    """The displacements of a stencil of ``points`` points (the centre excluded)."""
    cells = [d for d in np.ndindex(*(3,) * dim)]
    cells = [tuple(int(s) - 1 for s in d) for d in cells]
    cells = [d for d in cells if any(d)]
    if points in (3, 5, 7):  # the axis neighbours only
        cells = [d for d in cells if sum(map(abs, d)) == 1]
    return cells


def _strides(grid) -> tuple[int, ...]:
    return tuple(int(np.prod(grid[a + 1 :])) for a in range(len(grid)))


def flat_index(d, grid) -> int:
    return int(sum(s * t for s, t in zip(d, _strides(grid))))


def is_live(d, grid) -> bool:
    return all(size > abs(step) for step, size in zip(d, grid))


def stencil_matrix(rng, grid, points, problem, dtype, count=1, shift=1.0):
    """``(dense, offsets)``: ``count`` matrices of a ``points``-point stencil on ``grid``
    (C order, Dirichlet boundaries eliminated) for ``problem``; the offsets are those of
    the live stencil cells (what SciPy's DIA form of such a matrix stores).

    Problems: ``poisson`` (constant coefficients), ``anisotropic`` (one axis weighted
    1e-3..1e-1), ``varcoef`` (log-normal link weights, symmetric), ``convdiff``
    (upwinded convection, nonsymmetric M-matrix), ``random_dd`` (random signs,
    diagonally dominant), ``complex_herm`` (Hermitian with phases, positive definite),
    ``complex_shift`` (a Laplacian plus ``i s I``: complex symmetric), ``zero_pivot``
    (a zero first diagonal entry: ILU(0) breaks down)."""
    dim = len(grid)
    n = int(np.prod(grid))
    cells = _cells(dim, points)
    wide = wide_dtype(dtype)
    dense = np.zeros((count, n, n), wide)
    coords = np.array(list(np.ndindex(*grid))).reshape(n, dim) if n else np.zeros((0, dim), int)
    weights_axis = np.ones(dim)
    if problem == "anisotropic" and dim > 1:
        weights_axis[int(rng.integers(dim))] = 10.0 ** -rng.uniform(1, 3)
    velocity = rng.standard_normal(dim) * 10.0 ** rng.uniform(0, 2)
    offsets = sorted({flat_index(d, grid) for d in cells if is_live(d, grid)} | {0})
    for d in cells:
        target = coords + np.array(d)
        inside = np.all((target >= 0) & (target < np.array(grid)), axis=1)
        i = np.nonzero(inside)[0]
        if not len(i):
            continue
        j = i + flat_index(d, grid)
        axis_weight = float(np.prod([weights_axis[a] for a in range(dim) if d[a]]))
        if problem in ("poisson", "anisotropic", "complex_shift", "zero_pivot"):
            value = -axis_weight * np.ones((count, len(i)))
        elif problem in ("varcoef", "complex_herm"):
            if flat_index(d, grid) < 0:
                continue  # set with the mirrored cell
            value = -np.exp(1.5 * rng.standard_normal((count, len(i))))
            if problem == "complex_herm":
                value = value * np.exp(1j * rng.uniform(0, 2 * np.pi, (count, len(i))))
            dense[:, j, i] = np.conj(value)
        elif problem == "convdiff":
            flow = max(0.0, -float(np.dot(velocity, d))) if sum(map(abs, d)) == 1 else 0.0
            value = (
                -(1.0 + flow) * np.ones((count, len(i))) * (1 + 0.1 * rng.random((count, len(i))))
            )
        else:  # random_dd
            value = random_values(rng, (count, len(i)), dtype)
        dense[:, i, j] = value
    rows = np.arange(n)
    off = np.abs(dense).sum(-1)
    # Dirichlet boundaries: the missing neighbours' couplings stay on the diagonal.
    full = sum(
        float(np.prod([weights_axis[a] for a in range(dim) if d[a]])) for d in cells
    ) * np.ones((count, n))
    diag = (
        np.maximum(
            off,
            full if problem in ("poisson", "anisotropic", "complex_shift", "zero_pivot") else off,
        )
        + 0.05 * shift
    )
    if problem == "random_dd":
        diag = (
            diag * rng.uniform(1.1, 2.0, (count, n)) * np.where(rng.random((count, n)) < 0.2, -1, 1)
        )
    dense[:, rows, rows] = diag
    if problem == "complex_shift":
        dense[:, rows, rows] += 1j * rng.uniform(0.1, 2.0)
    if problem == "zero_pivot" and n:
        dense[:, 0, 0] = 0
    return dense.astype(wide), tuple(int(k) for k in offsets if -n < k < n)
