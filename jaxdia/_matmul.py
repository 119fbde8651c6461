"""``A @ X`` and ``X @ A``: argument checks and shapes around the product primitives.

Follows ``jnp.matmul``: the matrix is an array of shape ``batch_shape + (m, n)``, a 1-D
operand is a vector, an N-D operand is a stack of matrices whose batch dims broadcast.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax import Array

from ._dtypes import is_numeric
from ._primitives import IMPLEMENTATIONS, spmm


def check_implementation(implementation: Any) -> None:
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")


def _as_operand(x: Any, name: str) -> Array:
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
        x = jnp.asarray(host)
    if x.ndim == 0:
        raise ValueError(f"{name} must be at least 1-D for a matrix product, got a scalar")
    return x


def _promote(data: Array, x: Array) -> tuple[Array, Array]:
    dtype = jnp.result_type(data.dtype, x.dtype)
    return data.astype(dtype), x.astype(dtype)


def _align_batch(data: Array, x: Array, describe: str) -> tuple[Array, Array]:
    """Gives ``data`` and ``x`` batch dims of equal rank and checks they broadcast."""
    rank = max(data.ndim, x.ndim) - 2
    data = data.reshape((1,) * (rank - (data.ndim - 2)) + data.shape)
    x = x.reshape((1,) * (rank - (x.ndim - 2)) + x.shape)
    try:
        np.broadcast_shapes(data.shape[:-2], x.shape[:-2])
    except ValueError:
        raise ValueError(f"{describe}: batch dims do not broadcast") from None
    return data, x


def _describe(op, shape, data, x) -> str:
    a = f"A of shape {shape}" + (f" with batch shape {data.shape[:-2]}" if data.ndim > 2 else "")
    return f"{op}: {a} and X of shape {x.shape}"


def dia_matmul(data, offsets, shape, x, *, implementation=None) -> Array:
    """``A @ x`` for the matrix ``(data, offsets, shape)``."""
    check_implementation(implementation)
    x = _as_operand(x, "X")
    describe = _describe("A @ X", shape, data, x)
    rows = x.shape[0] if x.ndim == 1 else x.shape[-2]
    if rows != shape[1]:
        raise ValueError(f"{describe}: X needs {shape[1]} rows, it has {rows}")
    data, x = _promote(data, x)
    vector = x.ndim == 1
    data, x = _align_batch(data, x[:, None] if vector else x, describe)
    y = spmm(data, x, offsets=offsets, shape=shape, implementation=implementation)
    return y[..., 0] if vector else y


def dia_rmatmul(data, offsets, shape, x, *, implementation=None) -> Array:
    """``x @ A`` for the matrix ``(data, offsets, shape)``, computed as ``(A^T x^T)^T``."""
    check_implementation(implementation)
    x = _as_operand(x, "X")
    describe = _describe("X @ A", shape, data, x)
    if x.shape[-1] != shape[0]:
        raise ValueError(f"{describe}: X needs {shape[0]} columns, it has {x.shape[-1]}")
    data, x = _promote(data, x)
    vector = x.ndim == 1
    data, xt = _align_batch(data, x[:, None] if vector else jnp.swapaxes(x, -1, -2), describe)
    y = spmm(data, xt, offsets=offsets, shape=shape, transpose=True, implementation=implementation)
    return y[..., 0] if vector else jnp.swapaxes(y, -1, -2)
