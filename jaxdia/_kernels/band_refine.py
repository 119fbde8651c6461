"""The parallel LU's safety net: each solve checks its backward error and refines.

The cyclic-reduction LU (:mod:`jaxdia._kernels.band_parallel`) does not pivot across blocks. It
is backward stable for diagonally dominant and Hermitian positive definite matrices;
for others growth in its Schur complements can cost accuracy. So every solve with it
measures the normwise backward error of its result ``x`` per system,

    error = max|b - op(A) x| / (||op(A)||_inf max|x| + max|b|),

(the residual from ``A``'s own diagonals, one product) and, while a system's error is
above :func:`target` (a small multiple of the unit roundoff), refines it: ``x += solve(b
- op(A) x)``, at most :data:`STEPS` times (a loop of at most that many trips, whatever
``n``), keeping a step only where it lowered the error. A system whose error is then
still above :func:`limit` failed: the callers replace it (LAPACK on CPU, NaN elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .xla import spmv_xla

#: Refinement steps at most per solve.
STEPS = 3


def target(dtype) -> float:
    """The backward error a solve aims for: 32 units of roundoff of ``dtype``."""
    return 32 * float(np.finfo(dtype).eps)


def limit(dtype) -> float:
    """The backward error above which a refined solve has failed: ``sqrt(eps)``, half the
    digits of ``dtype`` lost."""
    return float(np.sqrt(np.finfo(dtype).eps))


def _product(data: Array, offsets: tuple[int, ...], x: Array, trans: int) -> Array:
    """``op(A) x`` for ``x`` ``(S, k, n)`` (the systems' columns, as the solves take them):
    ``k`` vectors of ``n`` in the lanes, no ``(n, k)`` transpose."""
    n = x.shape[-1]
    if trans == 2:
        data = data.conj()
    return spmv_xla(data[..., None, :, :], x, offsets=offsets, shape=(n, n), transpose=trans > 0)


def _norm(data: Array, offsets: tuple[int, ...], n: int, trans: int) -> Array:
    """``||op(A)||_inf`` per system: the largest row sum of ``|op(A)|``."""
    ones = jnp.ones((*data.shape[:-2], 1, n), np.finfo(data.dtype).dtype)
    sums = _product(jnp.abs(data), offsets, ones, min(trans, 1))
    return jnp.max(sums, axis=(-2, -1))


def _largest(values: Array) -> Array:
    return jnp.max(jnp.abs(values), axis=(-2, -1))


def refined(
    solve: Callable[[Array], Array],
    data: Array,
    offsets: tuple[int, ...],
    b: Array,
    *,
    trans: int,
    precision,
) -> tuple[Array, Array]:
    """``(x, error)``: ``solve(b)`` refined (see the module docstring) towards the
    :func:`target` of ``precision`` (the factor's dtype), and each system's backward
    error ``(S,)``. ``data`` ``(S or 1, nd, n)`` with zero padding slots; ``b`` ``(S, k,
    n)``; ``solve`` maps such a ``b`` to ``op(A)^-1 b``."""
    n = b.shape[-1]
    scale = _norm(data, offsets, n, trans)
    largest_b = _largest(b)
    goal = target(precision)

    def measure(x):
        residual = b - _product(data, offsets, x, trans)
        error = _largest(residual) / (scale * _largest(x) + largest_b)
        # 0 / 0 (b = 0 and x = 0) is exact; NaN anywhere else is a failure.
        error = jnp.where((largest_b == 0) & (_largest(x) == 0), 0, error)
        return residual, jnp.where(jnp.isnan(error), jnp.inf, error)

    x = solve(b)
    residual, error = measure(x)

    def wanted(error):
        # A system whose solve is not finite (a singular block) cannot be refined.
        return (error > goal) & jnp.isfinite(error)

    def more(state):
        _, _, error, step = state
        return (step < STEPS) & jnp.any(wanted(error))

    def refine(state):
        x, residual, error, step = state
        candidate = x + solve(residual)
        new_residual, new_error = measure(candidate)
        better = wanted(error) & (new_error < error)
        keep = better[:, None, None]
        return (
            jnp.where(keep, candidate, x),
            jnp.where(keep, new_residual, residual),
            jnp.where(better, new_error, error),
            step + 1,
        )

    x, _, error, _ = lax.while_loop(more, refine, (x, residual, error, jnp.int32(0)))
    return x, error
