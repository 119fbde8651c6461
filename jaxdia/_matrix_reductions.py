"""Reductions and diagonals of a DIA matrix, as SciPy's ``dia_array`` has them: ``sum``,
``mean``, ``count_nonzero``, ``trace``, ``traces`` and ``diagonal``; the work is
``_ops.py``'s and ``_traces.py``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from jax import Array

from . import _ops
from ._matrix_base import MatrixBase
from ._parts import reads_data
from ._traces import dia_diagonal, dia_trace, dia_traces
from ._typing import DTypeLike


class Reductions(MatrixBase):
    """``DiaMatrix``'s reductions and diagonals (see the module docstring)."""

    __slots__ = ()

    @reads_data("A.sum()")
    def sum(
        self, axis: int | None = None, dtype: DTypeLike | None = None, out: None = None
    ) -> Array:
        """The sum of all entries (axis None), column sums (0) or row sums (1).

        Returns dense JAX arrays with ``dia_array``'s shapes: ``batch_shape``,
        ``batch_shape + (n,)`` or ``batch_shape + (m,)``. ``out`` must be None (JAX
        arrays are immutable); it is there so that ``np.sum(A)`` works, as for SciPy.

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> A.sum(axis=1)
          Array([-1.,  0., -1.], dtype=float32)
        """
        return _ops.reduce_sum(self._parts, axis, dtype, out)

    @reads_data("A.mean()")
    def mean(
        self, axis: int | None = None, dtype: DTypeLike | None = None, out: None = None
    ) -> Array:
        """The mean of all ``m * n`` entries, or of each column (0) or row (1).

        ``out`` must be None, as in :meth:`sum` (``np.mean(A)`` works).

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> A.mean()
          Array(-0.22222222, dtype=float32)
          >>> A.mean(axis=1)
          Array([-0.33333334,  0.        , -0.33333334], dtype=float32)
        """
        return _ops.reduce_mean(self._parts, axis, dtype, out)

    @reads_data("A.count_nonzero()")
    def count_nonzero(self, axis: int | None = None) -> int | Array:
        """The number of nonzero in-bounds entries (explicit zeros and padding excluded).

        With ``axis=None``: a Python int for a concrete unbatched matrix; otherwise
        (batched, or traced under ``jit``) an integer JAX array of shape ``batch_shape``.
        ``axis=0`` / ``axis=1`` count per column / per row, as SciPy's (integer arrays
        of shape ``batch_shape + (n,)`` / ``batch_shape + (m,)``).

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([jnp.array([1.0, 0.0, 2.0])], offsets=[0])  # an explicit zero
          >>> A.nnz, A.count_nonzero()
          (3, 2)
        """
        return _ops.count_nonzero(self._parts, axis)

    @reads_data("A.traces(q)")
    def traces(self, q: int | Sequence[int]) -> Array:
        """Offset traces ``[trace(A, offset=k) for k in range(q)]``, batch dims first.

        ``q`` is an int or a sequence of offsets (negative ones too). Only the requested
        stored diagonals are read: O(q * min(m, n)) work. Offsets not stored, or outside
        the matrix, give 0, as ``np.trace`` does.

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([1.0, 2.0], offsets=[0, 1], shape=(3, 3))
          >>> A.traces(3)
          Array([3., 4., 0.], dtype=float32)
        """
        return dia_traces(self.data, self.offsets, self.shape, q)

    @reads_data("A.trace(offset)")
    def trace(self, offset: int = 0) -> Array:
        """The sum of diagonal ``offset``, as ``scipy.sparse.dia_array.trace``.

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> A.trace(), A.trace(offset=1)
          (Array(-6., dtype=float32), Array(2., dtype=float32))
        """
        return dia_trace(self.data, self.offsets, self.shape, offset)

    @reads_data("A.diagonal(k)")
    def diagonal(self, k: int = 0) -> Array:
        """Diagonal ``k``, as ``scipy.sparse.dia_array.diagonal(k)``.

        Empty when ``k`` lies outside the matrix; zeros when ``k`` is not stored.

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 3.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> A.diagonal()
          Array([-2., -2., -2.], dtype=float32)
          >>> A.diagonal(1)
          Array([3., 3.], dtype=float32)
        """
        return dia_diagonal(self.data, self.offsets, self.shape, k)
