"""The construction operations on the host, for concrete matrices: NumPy instead of a
compiled program per structure.

Every structure (offsets, shape) of an intermediate is a new XLA program for the jitted
operations of :mod:`jaxdia._ops` and :mod:`jaxdia._products`, so building an operator
eagerly from ``kron``, sums and products (a spin chain's Hamiltonian) compiled once per
intermediate. When every operand is concrete, unbatched, of a 32- or 64-bit float or
complex dtype and (for JAX arrays) on one CPU device, the same formulas run here in NumPy
and the result is transferred once; tracers (``jit``, ``vmap``, ``grad``), batches,
16-bit floats and accelerator arrays take the compiled path as before.

Each formula is written once, over an array namespace ``xp`` (``jax.numpy`` compiled,
``numpy`` here: :func:`computed` runs it; casts say ``copy=False``, JAX's default, so
that NumPy does not copy for nothing), so the offsets, dtype and in-bounds values are
the same; the exceptions are the rounding of products that XLA CPU contracts into fused
multiply-adds (the sums of products of ``A @ B``, and complex products), which agree to
rounding, and subnormal numbers, which XLA CPU flushes to zero in arithmetic and NumPy
keeps (``tests/test_host.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ._parts import DiaParts

#: The dtypes computed on the host (16-bit floats compile: XLA's rounding of their
#: arithmetic need not be NumPy's).
HOST_DTYPES = frozenset(map(np.dtype, (np.float32, np.float64, np.complex64, np.complex128)))


def _on_host(value: object) -> bool:
    """Whether ``value`` (an operand's data, a scalar or a dense array) can be read on the
    host as it is: NumPy values and Python numbers, or a concrete JAX array on one CPU
    device."""
    if isinstance(value, (int, float, complex, np.ndarray, np.generic)):
        return True
    if isinstance(value, jax.core.Tracer) or not isinstance(value, jax.Array):
        return False
    if not value.is_fully_addressable or len(value.devices()) != 1:
        return False
    return next(iter(value.devices())).platform == "cpu"


def concrete(*operands: object) -> bool:
    """Whether an operation on ``operands`` (``DiaParts``, scalars, dense arrays) runs
    here: every one on the host (see the module's docstring), matrices unbatched and of a
    dtype in ``HOST_DTYPES``."""
    for operand in operands:
        if isinstance(operand, DiaParts):
            if operand.batch_shape or operand.dtype not in HOST_DTYPES:
                return False
            operand = operand.data
        if not _on_host(operand):
            return False
    return True


def _device(like: list[DiaParts], data: np.ndarray) -> jax.Array:
    """``data`` transferred to the device of the first committed operand (where JAX
    would have computed the result), else to the default device."""
    for parts in like:
        if isinstance(parts.data, jax.Array) and parts.data.committed:
            return jax.device_put(data, parts.data.sharding)
    return jax.device_put(data)


def computed(formula: Callable[..., DiaParts], *operands: Any, **static: Any) -> DiaParts:
    """``formula(*operands, **static, xp=numpy)`` for ``concrete`` operands, its result
    transferred once.

    Matrices are read on the host; a scalar becomes a 0-d array of the dtype JAX promotes
    it to with the matrices (JAX's rules: a weakly typed scalar keeps a float32 matrix
    float32, and without x64 nothing is 64-bit). As XLA, the arithmetic gives inf and NaN
    without warnings (padding slots, which no result reads, may hold anything).
    """
    matrices = [x for x in operands if isinstance(x, DiaParts)]
    dtypes = [A.dtype for A in matrices]
    host = [
        DiaParts(np.asarray(x.data), x.offsets, x.shape)
        if isinstance(x, DiaParts)
        else np.asarray(x, jnp.result_type(*dtypes, x))
        for x in operands
    ]
    with np.errstate(all="ignore"):
        result = formula(*host, **static, xp=np)
    return DiaParts(_device(matrices, result.data), result.offsets, result.shape)
