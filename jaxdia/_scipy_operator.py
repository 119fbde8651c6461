"""SciPy's ``LinearOperator`` protocol for jaxdia's operators: NumPy in, NumPy out.

``scipy.sparse.linalg.aslinearoperator``, which SciPy's solvers apply to ``A`` and to
``M``, takes any object with ``shape`` and ``matvec`` (and reads ``rmatvec``, ``rmatmat``
and ``dtype`` where it has them). :class:`ScipyOperator` gives a class these methods over
one hook, ``_columns(x, adjoint)``, the operator (or its adjoint) applied to a vector or
to the columns of a matrix: a ``DiaMatrix`` (its product), and the preconditioners and
factors (``M``, or a factor's solve), so that ``scipy.sparse.linalg.cg(A, b,
M=jaxdia.multigrid(A, grid))`` works as it is.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from ._checks import as_array


def host_precision(x: object) -> bool:
    """Whether ``x`` is a NumPy array whose precision JAX lacks (float64 or complex128
    with x64 off): a product in JAX would round it to single precision."""
    return (
        isinstance(x, np.ndarray)
        and x.dtype.kind in "fc"
        and np.dtype(jax.dtypes.canonicalize_dtype(x.dtype)) != x.dtype
    )


class ScipyOperator:
    """SciPy's ``LinearOperator`` protocol over ``_columns``: ``matvec``, ``rmatvec``,
    ``matmat`` and ``rmatmat`` on NumPy (or JAX) operands of one operator, returning
    writable NumPy arrays (SciPy's solvers write into them).

    A subclass has ``shape``, ``dtype`` and ``batch_shape``, and defines
    ``_columns(x, adjoint)``: the operator (``adjoint``: its conjugate transpose) applied
    to ``x`` of shape ``(rows,)`` or ``(rows, k)``, the same rank back. ``_name`` names
    the class in error messages.
    """

    __slots__ = ()
    _name = "the operator"

    # Subclasses define these as properties or as attributes: typed there.
    shape: Any
    dtype: Any
    batch_shape: Any

    def _columns(self, x: Array | np.ndarray, adjoint: bool) -> ArrayLike:
        raise NotImplementedError

    def _protocol(self, x: ArrayLike, *, adjoint: bool, matrix: bool) -> np.ndarray:
        """``_columns`` of ``x`` checked: one operator, the right number of rows, 2-D for
        ``matmat``/``rmatmat``; the result a writable NumPy array, its dtype promoted
        with a float ``x``'s (float64 for a float64 ``x``, as SciPy's would be)."""
        method = (
            ("rmatmat" if adjoint else "matmat") if matrix else ("rmatvec" if adjoint else "matvec")
        )
        what = f"{self._name}.{method}"
        if self.batch_shape:
            raise ValueError(
                f"{what}: SciPy's LinearOperator is one operator; this one has batch shape "
                f"{tuple(self.batch_shape)}"
            )
        x = as_array(x, f"{what}: x")
        rows = self.shape[0] if adjoint else self.shape[1]
        if matrix and x.ndim != 2:
            raise ValueError(f"{what}: X must be 2-D, got shape {x.shape}")
        if x.ndim not in (1, 2) or x.shape[0] != rows:
            raise ValueError(
                f"{what}: {self._name} of shape {tuple(self.shape)} needs x of shape "
                f"({rows},) or ({rows}, k), got shape {x.shape}"
            )
        y = np.asarray(self._columns(x, adjoint))
        dtype = y.dtype
        if dtype.kind in "fc" and x.dtype.kind in "fc":
            # x64 off, a float64 x meets a single-precision result: SciPy's dtype.
            dtype = np.promote_types(dtype, x.dtype)
        # A copy: writable, as SciPy's solvers need (a view of a JAX array is read-only).
        return np.array(y, dtype=dtype)

    def matvec(self, x: ArrayLike) -> np.ndarray:
        """The operator applied to a vector ``x`` (``(n,)`` or ``(n, 1)``), as SciPy's
        ``LinearOperator.matvec``: a NumPy array.

        Example:
          >>> import numpy as np, jaxdia
          >>> A = jaxdia.diags([-1.0, 4.0, -1.0], offsets=[-1, 0, 1], shape=(4, 4))
          >>> jaxdia.jacobi(A).matvec(np.ones(4))
          array([0.25, 0.25, 0.25, 0.25])
        """
        return self._protocol(x, adjoint=False, matrix=False)

    def rmatvec(self, x: ArrayLike) -> np.ndarray:
        """The conjugate transpose applied to ``x``, as SciPy's ``LinearOperator.rmatvec``.

        Example:
          >>> import numpy as np, jaxdia
          >>> A = jaxdia.diags([[2j, 4j]], offsets=[0])
          >>> jaxdia.jacobi(A).rmatvec(np.ones(2, np.complex64))
          array([0.+0.5j , 0.+0.25j], dtype=complex64)
        """
        return self._protocol(x, adjoint=True, matrix=False)

    def matmat(self, X: ArrayLike) -> np.ndarray:
        """The operator applied to the columns of a 2-D ``X``, as SciPy's
        ``LinearOperator.matmat``.

        Example:
          >>> import numpy as np, jaxdia
          >>> A = jaxdia.diags([-1.0, 4.0, -1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> jaxdia.jacobi(A).matmat(np.ones((3, 2))).shape
          (3, 2)
        """
        return self._protocol(X, adjoint=False, matrix=True)

    def rmatmat(self, X: ArrayLike) -> np.ndarray:
        """The conjugate transpose applied to the columns of a 2-D ``X``, as SciPy's
        ``LinearOperator.rmatmat``.

        Example:
          >>> import numpy as np, jaxdia
          >>> A = jaxdia.diags([-1.0, 4.0, -1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> jaxdia.jacobi(A).rmatmat(np.ones((3, 2))).shape
          (3, 2)
        """
        return self._protocol(X, adjoint=True, matrix=True)
