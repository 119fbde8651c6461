"""What :class:`jaxdia.DiaMatrix`'s groups of methods build on: its fields, their
``DiaParts`` view, and the facts its shape and ``data`` give.

``DiaMatrix`` (``_matrix.py``: construction, conversions, SciPy's names) is assembled from
groups of thin methods, one module a concern, each a class over this one: elementwise
arithmetic (``_matrix_elementwise.py``), reductions and diagonals
(``_matrix_reductions.py``), structure edits (``_matrix_structure.py``) and the matrix as
an operator (``_matrix_operator.py``: ``@`` and SciPy's ``LinearOperator`` protocol). The
work is done below them, at the array level, on ``DiaParts``; a method reads
:attr:`MatrixBase._parts`, calls that layer and wraps what comes back with
:meth:`MatrixBase._wrap` or :meth:`MatrixBase._result`. The groups return ``Self``: the
only class built from them is ``DiaMatrix`` (``docs/api.md`` writes it so).
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np
from jax import Array

from ._geometry import diagonal_bounds
from ._parts import DiaParts
from ._pytree import Immutable


class MatrixBase(Immutable):
    """The fields of a DIA matrix (``data``, and the static ``offsets`` and ``shape``:
    the subclass lists them in ``__slots__``) and what its methods share."""

    __slots__ = ()
    data: Array
    offsets: tuple[int, ...]
    shape: tuple[int, int]

    @classmethod
    def _wrap(cls, parts: DiaParts) -> Self:
        """The matrix of canonical ``parts`` (what the array-level layer returns)."""
        return cls._make(*parts)

    @property
    def _parts(self) -> DiaParts:
        return DiaParts(self.data, self.offsets, self.shape)

    def _result(self, parts: DiaParts, value: object) -> Any:
        """What an array-level operation on ``parts`` (this matrix's) returned, as a
        matrix where it is one: this one where it is ``parts`` unchanged."""
        if value is parts:
            return self
        return self._wrap(value) if isinstance(value, DiaParts) else value

    @property
    def dtype(self) -> np.dtype:
        """The dtype of ``data``.

        Example:
          >>> import jaxdia
          >>> jaxdia.eye(3).dtype
          dtype('float32')
        """
        return np.dtype(self.data.dtype)

    @property
    def ndim(self) -> int:
        """Always 2: a batch of matrices is still a matrix with leading batch dims.

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.DiaMatrix(jnp.ones((5, 2, 3)), (0, 1), (3, 3))  # a batch of 5
          >>> A.ndim, A.batch_shape
          (2, (5,))
        """
        return 2

    @property
    def n_diags(self) -> int:
        """The number of stored diagonals, ``len(offsets)``.

        Example:
          >>> import jaxdia
          >>> jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(4, 4)).n_diags
          3
        """
        return len(self.offsets)

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading batch dimensions of ``data`` (``()`` for a single matrix).

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> jaxdia.DiaMatrix(jnp.ones((5, 2, 3)), (0, 1), (3, 3)).batch_shape
          (5,)
          >>> jaxdia.eye(3).batch_shape
          ()
        """
        return tuple(self.data.shape[:-2])

    @property
    def nnz(self) -> int:
        """Stored in-bounds slots per matrix, as SciPy's ``dia_array.nnz`` counts them.

        Explicit zeros count; padding slots do not. A DiaMatrix stores every diagonal at
        full width, so for SciPy data narrower than the matrix (columns beyond its width
        are implicitly zero) ``nnz`` also counts the in-bounds slots SciPy leaves out.

        Example:
          >>> import jaxdia
          >>> jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(4, 4)).nnz  # 3 + 4 + 3
          10
        """
        bounds = (diagonal_bounds(k, self.shape) for k in self.offsets)
        return int(sum(max(0, stop - start) for start, stop in bounds))


def operand(value: object) -> object:
    """An operand of an operation with a matrix, for the array-level layer: a matrix's
    ``DiaParts``, anything else as it is."""
    return value._parts if isinstance(value, MatrixBase) else value
