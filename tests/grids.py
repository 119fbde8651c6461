"""Stencil problems on structured grids (``grid`` a tuple of axis lengths), shared by the
tests of multigrid, Chebyshev, the Krylov solvers, ILU(0) and the sharded solvers; and
two checks of iterative solutions. Problems on ``n x n`` grids by size and dimension (the
banded, Jacobi and lineax tests'): tests/helpers.py."""

import math

import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp


def stencil_matrix(grid, coefficients):
    """The matrix with ``A[i, i + d] = coefficients[d][i]`` for the neighbours of ``i``
    (``coefficients`` maps displacements to grid-shaped arrays)."""
    n = math.prod(grid)
    points = np.indices(grid).reshape(len(grid), n).T
    rows, cols, values = [], [], []
    for d, c in coefficients.items():
        target = points + np.asarray(d)
        inside = np.all((target >= 0) & (target < grid), axis=1)
        rows.append(np.flatnonzero(inside))
        cols.append(np.ravel_multi_index(target[inside].T, grid))
        values.append(np.asarray(c).reshape(n)[inside])
    S = sp.coo_array(
        (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)
    )
    return S.todia()


def diffusion(grid, k, anisotropy=None):
    """``-div(k grad u)`` with Dirichlet boundaries, 5/7-point, harmonic means on faces:
    symmetric positive definite. ``anisotropy`` scales the coupling per axis."""
    dim = len(grid)
    k = np.broadcast_to(np.asarray(k, float), grid)
    scale = anisotropy or (1.0,) * dim
    coefficients = {(0,) * dim: np.zeros(grid)}
    for axis in range(dim):
        for step in (-1, 1):
            neighbour = np.roll(k, -step, axis=axis)
            face = scale[axis] * 2 * k * neighbour / (k + neighbour)
            # A boundary face (the neighbour is outside) takes k itself (Dirichlet).
            edge = [slice(None)] * dim
            edge[axis] = -1 if step == 1 else 0
            face[tuple(edge)] = scale[axis] * k[tuple(edge)]
            coefficients[(0,) * dim] = coefficients[(0,) * dim] + face
            d = tuple(step if a == axis else 0 for a in range(dim))
            coefficients[d] = -face
    return stencil_matrix(grid, coefficients)


def poisson(grid):
    return diffusion(grid, 1.0)


def jump(grid, contrast=1e3):
    """A coefficient ``contrast`` times larger in the middle of the domain."""
    middle = np.ones(grid, bool)
    for axis, n in enumerate(grid):
        index = np.arange(n).reshape([n if a == axis else 1 for a in range(len(grid))])
        middle = middle & (index >= n // 3) & (index < 2 * n // 3)
    return diffusion(grid, np.where(middle, contrast, 1.0))


def convection_diffusion(n, peclet=20.0):
    """Upwinded 2-D convection-diffusion on an ``n x n`` grid: nonsymmetric."""
    h = 1.0 / (n + 1)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    upwind = sp.diags_array([-1.0, 1.0], offsets=[-1, 0], shape=(n, n))
    I = sp.eye_array(n)
    S = (sp.kron(T, I) + sp.kron(I, T)) / h**2 + peclet / h * (
        sp.kron(upwind, I) + 0.5 * sp.kron(I, upwind)
    )
    return S.todia()


def assert_solution(x, expected, rtol):
    """``x`` close to ``expected`` in norm (an iterative solution's error is a vector
    bounded in norm, not entry by entry)."""
    error = np.linalg.norm(np.asarray(x, np.float64) - expected) / np.linalg.norm(expected)
    assert error <= rtol, error


def operator_matrix(M, n):
    """The dense matrix of a linear ``M``: column ``j`` is ``M(e_j)``."""
    return np.asarray(M(jnp.eye(n))).T


GRID_2D = (15, 16)  # odd and even axes
