"""Helpers that the banded and ILU kernels share (the backends, ``band_scan`` and
``band_parallel``, never import each other, and the primitives' batching rules are
alike), and the interleave that cyclic reduction and multigrid's interpolation share."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import Array, lax


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


def interleave(even: Array, odd: Array, axis: int, length: int, *, scatter: bool) -> Array:
    """``even[0], odd[0], even[1], odd[1], ...`` along ``axis``, zeros after them up to
    ``length`` (at least ``2 * len(even) - 1`` and ``2 * len(odd)``): no axis of two, which
    a TPU would tile a row per pair.

    Two forms of the same values (``jaxdia._dispatch.interleave_by_scatter`` chooses): two
    interior pads, summed (CPU and GPUs: one fused loop), or two stride-2 scatters into
    zeros (TPU: its generated code for an interior pad along the lanes grows with the
    length, 148 MB and 41 s of compilation for three pads of 2^20; the scatters' stays
    about 1 MB). See ``benchmarks/notes/compile.md``.

    >>> import jax.numpy as jnp
    >>> from jaxdia._kernels.shared import interleave
    >>> interleave(jnp.array([1, 2, 3]), jnp.array([10, 20]), 0, 6, scatter=True)
    Array([ 1, 10,  2, 20,  3,  0], dtype=int32)
    """
    axis %= even.ndim
    evens, odds = even.shape[axis], odd.shape[axis]
    before = (slice(None),) * axis
    if scatter:
        shape = (*even.shape[:axis], length, *even.shape[axis + 1 :])
        out = jnp.zeros(shape, jnp.result_type(even, odd))
        out = out.at[(*before, slice(0, max(2 * evens - 1, 0), 2))].set(even)
        return out.at[(*before, slice(1, 2 * odds, 2))].set(odd)
    zero = np.zeros((), even.dtype)

    def spread(values: Array, first: int) -> Array:
        config = [(0, 0, 0)] * values.ndim
        spread_length = max(2 * values.shape[axis] - 1, 0)
        config[axis] = (first, length - first - spread_length, 1)
        return lax.pad(values, zero, config)

    return spread(even, 0) + spread(odd, 1)
