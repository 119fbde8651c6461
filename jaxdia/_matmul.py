"""``A @ X`` and ``X @ A``: argument checks and shapes around the product primitives.

Follows ``jnp.matmul``: the matrix is an array of shape ``batch_shape + (m, n)``, a 1-D
operand is a vector, an N-D operand is a stack of matrices whose batch dims broadcast.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax import Array

from ._dtypes import is_numeric, native
from ._primitives import IMPLEMENTATIONS, spmm


def check_implementation(implementation: Any) -> None:
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")


def _as_operand(x: Any, name: str) -> Array | np.ndarray:
    """``x`` checked, as a JAX array or a NumPy array (which the jitted product transfers:
    at n = 1e6, 0.2 ms, where ``jnp.asarray`` first took 1 ms)."""
    if sp.issparse(x):
        raise TypeError(
            f"{name} is a scipy.sparse {type(x).__name__}; convert it with "
            "jaxdia.DiaMatrix.from_scipy(...) (the product of two DiaMatrix is a DiaMatrix) "
            "or pass a dense array"
        )
    if not isinstance(x, jax.Array):  # tracers are jax.Array instances too
        host = np.asarray(x)
        if not is_numeric(host.dtype):
            raise TypeError(
                f"{name} must be a numeric array, got {type(x).__name__}"
                + (f" of dtype {host.dtype}" if host.dtype != object else "")
            )
        x = native(host)
    if x.ndim == 0:
        raise ValueError(f"{name} must be at least 1-D for a matrix product, got a scalar")
    return x


def _promote(data: Array, x: Array) -> tuple[Array, Array]:
    dtype = jnp.result_type(data.dtype, x.dtype)
    return data.astype(dtype), x.astype(dtype)


def _check_shapes(op: str, shape: tuple[int, int], data: Array, x: Array | np.ndarray) -> None:
    """A ``ValueError`` naming both shapes unless ``x`` fits ``A`` in ``op`` (``"A @ X"`` or
    ``"X @ A"``): the contracted length, and batch dims that broadcast."""
    if op == "A @ X":
        need, have, what = shape[1], x.shape[0] if x.ndim == 1 else x.shape[-2], "rows"
    else:
        need, have, what = shape[0], x.shape[-1], "columns"
    problem = None
    if have != need:
        problem = f"X needs {need} {what}, it has {have}"
    elif data.ndim > 2 or x.ndim > 2:
        try:
            jnp.broadcast_shapes(data.shape[:-2], x.shape[:-2])
        except ValueError:
            problem = "batch dims do not broadcast"
    if problem is not None:
        batch = f" with batch shape {data.shape[:-2]}" if data.ndim > 2 else ""
        raise ValueError(f"{op}: A of shape {shape}{batch} and X of shape {x.shape}: {problem}")


def _align_batch(data: Array, x: Array) -> tuple[Array, Array]:
    """Gives ``data`` and ``x`` batch dims of equal rank (leading ones)."""
    rank = max(data.ndim, x.ndim) - 2
    data = data.reshape((1,) * (rank - (data.ndim - 2)) + data.shape)
    x = x.reshape((1,) * (rank - (x.ndim - 2)) + x.shape)
    return data, x


@functools.partial(jax.jit, static_argnames=("offsets", "shape", "transpose", "implementation"))
def _product(data, x, *, offsets, shape, transpose, implementation) -> Array:
    """``A @ x`` (``x @ A`` with ``transpose``) for checked operands, as one jitted call.

    Jitted so that an eager product is one dispatch: run op by op, the promotion, the
    reshapes around a vector and the primitive took 212 us at n = 1e4 (24 us jitted) and
    1.6 ms at n = 1e6 (0.22 ms jitted, SciPy 0.67 ms). Under an outer ``jit`` it is inlined.
    """
    data, x = _promote(data, x)
    vector = x.ndim == 1
    if vector:
        x = x[:, None]
    elif transpose:
        x = jnp.swapaxes(x, -1, -2)
    data, x = _align_batch(data, x)
    y = spmm(
        data, x, offsets=offsets, shape=shape, transpose=transpose, implementation=implementation
    )
    if vector:
        return y[..., 0]
    return jnp.swapaxes(y, -1, -2) if transpose else y


def dia_matmul(data, offsets, shape, x, *, implementation=None) -> Array:
    """``A @ x`` for the matrix ``(data, offsets, shape)``."""
    check_implementation(implementation)
    x = _as_operand(x, "X")
    _check_shapes("A @ X", shape, data, x)
    return _product(
        data, x, offsets=offsets, shape=shape, transpose=False, implementation=implementation
    )


def dia_rmatmul(data, offsets, shape, x, *, implementation=None) -> Array:
    """``x @ A`` for the matrix ``(data, offsets, shape)``, computed as ``(A^T x^T)^T``."""
    check_implementation(implementation)
    x = _as_operand(x, "X")
    _check_shapes("X @ A", shape, data, x)
    return _product(
        data, x, offsets=offsets, shape=shape, transpose=True, implementation=implementation
    )
