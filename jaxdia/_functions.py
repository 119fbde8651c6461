"""The functional forms of :class:`jaxdia.DiaMatrix`'s methods: :func:`matmul` (with a
choice of implementation), :func:`traces` (of a DiaMatrix or a dense array) and
:func:`align` (several matrices on one set of offsets)."""

from __future__ import annotations

from collections.abc import Sequence

from jax import Array

from ._matrix import DiaMatrix, as_matrix
from ._ops import aligned
from ._products import dia_dense_product
from ._traces import dense_traces, dia_traces
from ._typing import ArrayLike


def matmul(A: DiaMatrix, X: ArrayLike, *, implementation: str | None = None) -> Array:
    """``A @ X`` with a choice of implementation.

    Follows ``jnp.matmul``'s rules with ``A`` as an array of shape
    ``A.batch_shape + A.shape``: a 1-D ``X`` of length ``n`` is a vector, an N-D ``X`` is
    a stack of ``(n, c)`` matrices whose batch dims broadcast with ``A.batch_shape``.
    dtypes promote with JAX's rules; bfloat16/float16 products accumulate in float32.

    Args:
      A: the sparse matrix.
      X: the dense right-hand side.
      implementation: None picks the best for the platform (Pallas kernels on GPU/TPU,
        XLA on CPU; README's "What runs where"); ``"xla"`` forces XLA, ``"pallas"`` the
        platform's best Pallas kernel, ``"mosaic"`` or ``"triton"`` that GPU kernel
        family. A forced choice that cannot run raises when the computation is
        lowered.

    Example:
      >>> import numpy as np, jaxdia
      >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
      >>> jaxdia.matmul(A, np.ones(3), implementation="xla")
      Array([-1.,  0., -1.], dtype=float32)
    """
    return dia_dense_product(as_matrix(A, "matmul: A")._parts, X, implementation=implementation)


def traces(M: ArrayLike | DiaMatrix, q: int | Sequence[int]) -> Array:
    """Offset traces ``[trace(M, offset=k) for k in offsets]``, batched over leading dims.

    Equals ``np.stack([np.trace(M, offset=k, axis1=-2, axis2=-1) for k in offsets], -1)``
    for any shape, reading only the requested diagonals: O(q * min(m, n)) work, where
    ``jnp.trace`` masks all m * n entries. Works under ``jit`` (with ``q`` static),
    ``vmap`` and ``grad``. A :class:`jaxdia.DiaMatrix` is accepted too (as
    ``A.traces(q)``).

    Args:
      M: a dense array of shape ``(..., m, n)`` (leading dims are a batch), or a
        ``DiaMatrix``.
      q: an int (the offsets ``0, 1, ..., q - 1``) or a sequence of ints (any order,
        negative for diagonals below the main one). Offsets outside the matrix give 0,
        as in ``np.trace``. Must be static.

    Returns:
      An array of shape ``M.shape[:-2] + (len(offsets),)``. Its dtype follows
      ``np.trace``: bool and narrow integers sum in the default integer type, 16-bit
      floats keep their dtype (accumulated in float32), other dtypes are kept.

    Raises:
      TypeError: if ``q`` is not an int or a sequence of ints (floats, bools, traced
        arrays), or ``M`` is not numeric.
      ValueError: if ``q`` is a negative int or ``M`` has rank < 2.

    Example:
      >>> import numpy as np, jaxdia
      >>> M = np.arange(12.0).reshape(3, 4)
      >>> jaxdia.traces(M, 3)
      Array([15., 18.,  9.], dtype=float32)
      >>> jaxdia.traces(M, [-2, -1, 3])
      Array([ 8., 13.,  3.], dtype=float32)
    """
    if isinstance(M, DiaMatrix):
        A = as_matrix(M, "traces: M")
        return dia_traces(A.data, A.offsets, A.shape, q)
    return dense_traces(M, q)


def align(*matrices: DiaMatrix) -> tuple[DiaMatrix, ...]:
    """The same matrices, each stored with the union of their offsets.

    Matrices with equal offsets, shape, dtype and batch shape have equal pytree
    structure, which ``lax.cond`` branches, ``lax.scan`` carries and ``lax.while_loop``
    states require. The added diagonals are zero; dtypes and batch shapes are kept.

    Args:
      *matrices: DiaMatrix instances of one shape.

    Returns:
      A tuple of DiaMatrix, one per argument, in order.

    Raises:
      TypeError: if an argument is not a DiaMatrix.
      ValueError: if the shapes differ.

    Example:
      >>> import jax, jaxdia
      >>> A = jaxdia.eye(3)
      >>> B = jaxdia.eye(3, k=1)
      >>> A2, B2 = jaxdia.align(A, B)
      >>> A2.offsets, B2.offsets
      ((0, 1), (0, 1))
      >>> C = jax.lax.cond(True, lambda: A2, lambda: B2)
      >>> C.todense()[0]
      Array([1., 0., 0.], dtype=float32)
    """
    parts = [as_matrix(M, f"align: argument {i}")._parts for i, M in enumerate(matrices)]
    return tuple(map(DiaMatrix._wrap, aligned(parts)))
