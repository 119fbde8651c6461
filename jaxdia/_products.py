"""The three products of a DIA matrix: with a dense operand on either side, and with
another DIA matrix.

* :func:`dia_dense_product` (``A @ X``) and :func:`dense_dia_product` (``X @ A``) follow
  ``jnp.matmul``: the matrix is an array of shape ``batch_shape + (m, n)``, a 1-D operand
  is a vector, an N-D operand is a stack of matrices whose batch dims broadcast. They
  check the operand and call the ``dia_spmm`` primitive (:mod:`jaxdia._kernels.primitives`).
* :func:`dia_dia_product` (``A @ B``) is a DIA matrix, computed diagonal by diagonal
  (:func:`matrix_product`: on the host for concrete matrices, see :mod:`jaxdia._host`).
* :func:`matvec` is ``x -> A @ x`` (or ``A^T @ x``) for the solvers' loops: checked
  operands of the right shape and dtype, straight to the primitive.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from . import _host
from ._checks import (
    as_array,
    broadcast_batch,
    check_array_size,
    check_implementation,
    integers_as,
)
from ._geometry import accumulation_dtype, place_row, stack_rows
from ._kernels import xla
from ._kernels.primitives import spmm
from ._parts import DiaParts
from ._sharded_products import contracted_axes, sharded_spmm
from ._sharding import on_auto_axes
from ._typing import ArrayLike, DTypeLike


def _as_operand(x: ArrayLike, data_dtype: DTypeLike) -> Array | np.ndarray:
    """The dense operand ``X``, checked (NumPy arrays are transferred by the jitted call).

    A NumPy integer or bool ``X`` is converted on the host to the product's dtype (see
    :func:`jaxdia._checks.integers_as`).
    """
    x = as_array(
        x,
        "X",
        hint=" (the product of two DiaMatrix is a DiaMatrix) or pass a dense array",
    )
    if x.ndim == 0:
        raise ValueError("X must be at least 1-D for a matrix product, got a scalar")
    return integers_as(x, data_dtype)


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
    rows = shape[1] if op == "X @ A" else shape[0]
    if x.ndim == 1:
        out_shape = (*data.shape[:-2], rows)
    else:
        columns = x.shape[-1 if op == "A @ X" else -2]
        out_shape = (*jnp.broadcast_shapes(data.shape[:-2], x.shape[:-2]), rows, columns)
    check_array_size(out_shape, data.dtype, op)


def _align_batch(data: Array, x: Array) -> tuple[Array, Array]:
    """Gives ``data`` and ``x`` batch dims of equal rank (leading ones)."""
    rank = max(data.ndim, x.ndim) - 2
    data = data.reshape((1,) * (rank - (data.ndim - 2)) + data.shape)
    x = x.reshape((1,) * (rank - (x.ndim - 2)) + x.shape)
    return data, x


def _spmm(data: Array, x: Array, *, transpose: bool = False, **params: Any) -> Array:
    """The ``dia_spmm`` primitive, or, when the matrix's columns (or ``x``'s contracted
    rows) are split over Explicit mesh axes, the halo-exchanging product of
    :mod:`jaxdia._sharded_products`. Which one is a static property of the operands'
    types: unsharded operands are traced exactly as the primitive alone."""
    axes = contracted_axes(data, x, transpose)
    if axes:
        return sharded_spmm(data, x, axes=axes, transpose=transpose, **params)
    return spmm(data, x, transpose=transpose, **params)


@functools.partial(jax.jit, static_argnames=("offsets", "shape", "transpose", "implementation"))
def _product(data, x, *, offsets, shape, transpose, implementation) -> Array:
    """``A @ x`` (``x @ A`` with ``transpose``) for checked operands, as one jitted call.

    Jitted so that an eager product is one dispatch (run op by op, the promotion, the
    reshapes around a vector and the primitive would each be dispatched, and cost more
    than the product itself at n = 1e4). Under an outer ``jit`` it is inlined.
    """
    data, x = _promote(data, x)
    vector = x.ndim == 1
    if vector:
        x = x[:, None]
    elif transpose:
        x = jnp.swapaxes(x, -1, -2)
    data, x = _align_batch(data, x)
    y = _spmm(
        data, x, offsets=offsets, shape=shape, transpose=transpose, implementation=implementation
    )
    if vector:
        return y[..., 0]
    return jnp.swapaxes(y, -1, -2) if transpose else y


def dia_dense_product(A: DiaParts, x: ArrayLike, *, implementation: str | None = None) -> Array:
    """``A @ x`` for a dense ``x``."""
    return _dense_product(A, x, transpose=False, implementation=implementation)


def dense_dia_product(A: DiaParts, x: ArrayLike, *, implementation: str | None = None) -> Array:
    """``x @ A`` for a dense ``x``, computed as ``(A^T x^T)^T``."""
    return _dense_product(A, x, transpose=True, implementation=implementation)


def _dense_product(
    A: DiaParts, x: ArrayLike, *, transpose: bool, implementation: str | None
) -> Array:
    check_implementation(implementation)
    data, offsets, shape = A
    x = _as_operand(x, data.dtype)
    _check_shapes("X @ A" if transpose else "A @ X", shape, data, x)
    return _product(
        data, x, offsets=offsets, shape=shape, transpose=transpose, implementation=implementation
    )


def matvec(A: DiaParts, transpose: bool = False) -> Callable[[Array], Array]:
    """``x -> A @ x`` (``A^T @ x`` with ``transpose``) for one matrix and ``x`` of shape
    ``(n,)`` or ``(n, c)``, of the matrix's dtype: the ``dia_spmm`` primitive with no
    checks, for the inner loops of the solvers (Lanczos, multigrid, ``expm_multiply``).

    A vector stays 1-D around the product: XLA CPU reduces an ``(n, 1)`` array (the
    loops' norms) several times slower than a vector.
    """

    def product(x: Array) -> Array:
        column = x.ndim == 1
        y = spmm(
            A.data,
            x[:, None] if column else x,
            offsets=A.offsets,
            shape=A.shape,
            transpose=transpose,
        )
        return y[:, 0] if column else y

    return product


def looped_matvec(A: DiaParts) -> Callable[[Array], Array]:
    """``v -> A @ v`` for one matrix and a vector as one loop over its diagonals (see
    :func:`jaxdia._dispatch.loops_level_product`: multigrid's small levels with many
    diagonals on CPU), where :func:`matvec` unrolls one term per diagonal."""
    return lambda v: xla.looped_matvec(A.data, v, A.offsets, A.shape)


def operator_product(A: DiaParts, x: Array | np.ndarray, *, adjoint: bool) -> Array:
    """``A @ x`` or ``A^H @ x`` for SciPy's ``LinearOperator`` protocol (see
    :mod:`jaxdia._scipy_operator`, which checks the operands): ``x`` of shape ``(rows,)``
    or ``(rows, k)``, one compiled call."""
    x = integers_as(x, A.data.dtype)
    return _operator_product(A.data, x, offsets=A.offsets, shape=A.shape, adjoint=adjoint)


@functools.partial(jax.jit, static_argnames=("offsets", "shape", "adjoint"))
def _operator_product(data, x, *, offsets, shape, adjoint) -> Array:
    data, x = _promote(data, x)
    columns = x if x.ndim == 2 else x[:, None]
    if adjoint:  # A^H x = conj(A^T conj(x))
        y = jnp.conj(
            _spmm(
                data,
                jnp.conj(columns),
                offsets=offsets,
                shape=shape,
                transpose=True,
                implementation=None,
            )
        )
    else:
        y = _spmm(data, columns, offsets=offsets, shape=shape, implementation=None)
    return y if x.ndim == 2 else y[:, 0]


@jax.jit
@on_auto_axes()
def dia_dia_product(A: DiaParts, B: DiaParts) -> DiaParts:
    """``A @ B`` of two DIA matrices, as a DIA matrix.

    Diagonal ``a`` of A times diagonal ``b`` of B lands on diagonal ``c = a + b``:
    ``C[j - c, j] += A[j - c, j - b] * B[j - b, j]``, i.e. ``Cdata[c, j] += Adata[a, j - b]
    * Bdata[b, j]`` for ``max(0, c, b) <= j < min(p, m + c, n + b)``. That range is empty
    exactly when ``c`` lies outside the result, so the result offsets are the sums of
    pairs clipped to the result's shape, as SciPy's ``dia_matmat`` computes them.
    16-bit floats accumulate in float32.
    """
    if A.shape[1] != B.shape[0]:
        raise ValueError(
            f"A @ B: dimension mismatch: A has shape {A.shape} and B has shape {B.shape}; "
            "A.shape[1] must equal B.shape[0]"
        )
    batch = broadcast_batch("A @ B", A.batch_shape, B.batch_shape)
    (m, n), p = A.shape, B.shape[1]
    dtype = jnp.result_type(A.dtype, B.dtype)
    wide = accumulation_dtype(dtype)
    terms: dict[int, list[Array]] = {}
    for ia, a in enumerate(A.offsets):
        for ib, b in enumerate(B.offsets):
            c = a + b
            low, high = max(0, c, b), min(p, m + c, n + b)
            if low < high:
                product = A.data[..., ia, low - b : high - b].astype(wide) * B.data[
                    ..., ib, low:high
                ].astype(wide)
                terms.setdefault(c, []).append(place_row(product, low, p))
    offsets = tuple(sorted(terms))
    rows = [functools.reduce(jnp.add, terms[c]) for c in offsets]
    return DiaParts(stack_rows(rows, batch, p, dtype), offsets, (m, p))


def matrix_product(A: DiaParts, B: DiaParts) -> DiaParts:
    """``A @ B`` of two DIA matrices: :func:`dia_dia_product`, on the host when both are
    concrete (see :mod:`jaxdia._host`)."""
    if A.shape[1] == B.shape[0] and _host.concrete(A, B):
        return _host.host_matmul(A, B)
    return dia_dia_product(A, B)
