"""A DIA matrix as an operator: ``A @ X``, ``X @ A`` and ``A @ B`` (``_products.py``'s
work), and SciPy's ``LinearOperator`` protocol (``matvec``, ``rmatvec``, ``matmat``,
``rmatmat``, calling ``A``), so that ``scipy.sparse.linalg``'s solvers take a
``DiaMatrix`` as it is.
"""

from __future__ import annotations

from typing import Self, overload

import jax
import numpy as np
from jax import Array

from . import _convert
from ._matrix_base import MatrixBase
from ._parts import reads_data
from ._products import dense_dia_product, dia_dense_product, matrix_product, operator_product
from ._scipy_operator import ScipyOperator, host_precision
from ._typing import ArrayLike


class Operator(MatrixBase, ScipyOperator):
    """``DiaMatrix``'s products and SciPy's ``LinearOperator`` protocol (see the module
    docstring)."""

    __slots__ = ()

    @overload
    def __matmul__(self, other: Self) -> Self: ...
    @overload
    def __matmul__(self, other: ArrayLike) -> Array: ...
    @reads_data("A @ X")
    def __matmul__(self, other: Self | ArrayLike) -> Array | Self:
        if isinstance(other, MatrixBase):
            return self._wrap(matrix_product(self._parts, other._parts))
        return dia_dense_product(self._parts, other)

    @reads_data("X @ A")
    def __rmatmul__(self, other: ArrayLike) -> Array:
        return dense_dia_product(self._parts, other)

    # -- SciPy's LinearOperator protocol (scipy.sparse.linalg.aslinearoperator) -----------

    def _columns(self, x: Array | np.ndarray, adjoint: bool) -> Array | np.ndarray:
        if host_precision(x):
            # x64 off: JAX would round a float64 x to float32, and SciPy's float64 solvers
            # would then see float32 products and report convergence they never reached.
            # SciPy multiplies in float64 (the matrix's entries exactly), as here.
            S = _convert.to_scipy(self._parts)
            return (S.conj().T if adjoint else S) @ x
        return operator_product(self._parts, x, adjoint=adjoint)

    @reads_data("A.matvec(x)")
    def matvec(self, x: ArrayLike) -> np.ndarray:
        """``A @ x`` as SciPy's ``LinearOperator.matvec``: NumPy in, NumPy out.

        With :meth:`rmatvec`, :meth:`matmat`, :meth:`rmatmat`, ``shape`` and ``dtype``
        this is SciPy's ``LinearOperator`` protocol, so ``scipy.sparse.linalg``'s solvers
        (``cg``, ``gmres``, ``minres``, ``eigsh``, ``svds``, ``lobpcg``, ``onenormest``
        ...) and ``aslinearoperator`` take a ``DiaMatrix`` as it is. Each product is one
        compiled call. The result has SciPy's dtype, the promoted dtype of ``A`` and
        ``x``: with x64 off, a float64 (complex128) NumPy ``x`` is multiplied on the host
        by SciPy in double precision, as SciPy multiplies a float32 ``dia_array`` by it
        (in JAX it would be rounded to float32, and a float64 SciPy solver would report
        tolerances below float32's rounding as met). SciPy's shift-invert ``eigsh(A,
        sigma=...)`` is the exception among the solvers: pass it ``A.to_scipy()`` (see
        docs/migration.md).

        Example:
          >>> import numpy as np, scipy.sparse.linalg as spla, jaxdia
          >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(4, 4))
          >>> A.matvec(np.ones(4, np.float32))
          array([1., 0., 0., 1.], dtype=float32)
          >>> A.matvec(np.ones(4)).dtype  # float64, as SciPy's dia_array gives
          dtype('float64')
          >>> x, info = spla.cg(A, np.ones(4), rtol=1e-10)
          >>> info, bool(np.linalg.norm(A.matvec(x) - 1.0) < 1e-9)
          (0, True)
        """
        return self._protocol(x, adjoint=False, matrix=False)

    def __call__(self, x: ArrayLike) -> Array | np.ndarray:
        """``A @ x``, as SciPy's ``LinearOperator`` is called: a NumPy result for a NumPy
        ``x`` (so SciPy code that calls the operator, such as ``lobpcg``, takes ``A``
        directly; a 1-D or 2-D one as :meth:`matvec` computes it), a JAX array for a JAX
        array (so JAX's solvers, which call a callable operator, are unchanged).

        Example:
          >>> import numpy as np, jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> A(np.ones(3, np.float32))
          array([1., 0., 1.], dtype=float32)
          >>> A(jnp.ones(3))
          Array([1., 0., 1.], dtype=float32)
        """
        if isinstance(x, np.ndarray) and x.ndim in (1, 2):
            return self.matvec(x)
        y = self @ x
        return y if isinstance(x, jax.Array) else np.array(y)

    @reads_data("A.rmatvec(x)")
    def rmatvec(self, x: ArrayLike) -> np.ndarray:
        """``A^H @ x`` (the conjugate transpose) as SciPy's ``LinearOperator.rmatvec``.

        Example:
          >>> import numpy as np, jaxdia
          >>> A = jaxdia.diags([[1j, 2j]], offsets=[1], shape=(3, 3))
          >>> v = np.ones(3, np.complex64)
          >>> A.rmatvec(v).tolist() == (A.H @ v).tolist() == [0, -1j, -2j]
          True
        """
        return self._protocol(x, adjoint=True, matrix=False)

    @reads_data("A.matmat(X)")
    def matmat(self, X: ArrayLike) -> np.ndarray:
        """``A @ X`` for a 2-D ``X``, as SciPy's ``LinearOperator.matmat``.

        Example:
          >>> import numpy as np, jaxdia
          >>> jaxdia.eye(3, k=1).matmat(np.arange(6, dtype=np.float32).reshape(3, 2))
          array([[2., 3.],
                 [4., 5.],
                 [0., 0.]], dtype=float32)
        """
        return self._protocol(X, adjoint=False, matrix=True)

    @reads_data("A.rmatmat(X)")
    def rmatmat(self, X: ArrayLike) -> np.ndarray:
        """``A^H @ X`` for a 2-D ``X``, as SciPy's ``LinearOperator.rmatmat``.

        Example:
          >>> import numpy as np, jaxdia
          >>> jaxdia.eye(3, k=1).rmatmat(np.arange(6, dtype=np.float32).reshape(3, 2))
          array([[0., 0.],
                 [0., 1.],
                 [2., 3.]], dtype=float32)
        """
        return self._protocol(X, adjoint=True, matrix=True)
