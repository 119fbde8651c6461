"""Helpers that the banded and ILU kernels share: the backends (``band_scan``,
``band_parallel``) never import each other, and the primitives' batching rules are alike."""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array


def magnitude(values: Array) -> Array:
    """LAPACK's pivoting magnitude: ``|re| + |im|`` for complex values (``i?amax``), so
    that every implementation chooses the same pivots."""
    if jnp.iscomplexobj(values):
        return jnp.abs(values.real) + jnp.abs(values.imag)
    return jnp.abs(values)


def to_front(value: Array, dim: int | None, size: int) -> Array:
    """A batching rule's operand with its batch axis ``dim`` moved to the front, or
    broadcast to ``size`` there when it has none (``dim`` None)."""
    if dim is None:
        return jnp.broadcast_to(value, (size, *value.shape))
    return jnp.moveaxis(value, dim, 0)
