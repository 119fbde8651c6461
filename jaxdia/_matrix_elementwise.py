"""Elementwise arithmetic of a DIA matrix, SciPy's ``dia_array`` semantics: ``+ - * /
**``, negation, ``abs``, ``multiply``, ``power``, the conjugate, real and imaginary parts
and ``astype``; the work is ``_ops.py``'s.

``==`` is not elementwise: a matrix keeps object identity for ``==`` and hashing. Compare
values with ``A.todense() == B.todense()``, or ``jaxdia.align(A, B)`` and compare the
aligned ``data`` on in-bounds slots.
"""

from __future__ import annotations

from typing import Self, overload

import numpy as np
from jax import Array

from . import _ops
from ._matrix_base import MatrixBase, operand
from ._parts import reads_data
from ._typing import ArrayLike, DTypeLike


class Elementwise(MatrixBase):
    """``DiaMatrix``'s elementwise arithmetic (see the module docstring)."""

    __slots__ = ()

    @reads_data("A.conj()")
    def conj(self) -> Self:
        """The elementwise complex conjugate (the matrix itself for real dtypes).

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([jnp.array([1 + 2j, 3 - 1j])], offsets=[0])
          >>> A.conj().diagonal()
          Array([1.-2.j, 3.+1.j], dtype=complex64)
        """
        if self.dtype.kind != "c":
            return self  # matrices are immutable: no copy needed (eager jnp.conj copies)
        return self._wrap(_ops.conj(self._parts))

    conjugate = conj

    @property
    @reads_data("A.real")
    def real(self) -> Self:
        """The real part, with the same offsets.

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([jnp.array([1 + 2j, 3 - 1j])], offsets=[0])
          >>> A.real.diagonal()
          Array([1., 3.], dtype=float32)
        """
        if self.dtype.kind != "c":
            return self
        return self._wrap(_ops.real(self._parts))

    @property
    @reads_data("A.imag")
    def imag(self) -> Self:
        """The imaginary part, with the same offsets (zeros for a real matrix).

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([jnp.array([1 + 2j, 3 - 1j])], offsets=[0])
          >>> A.imag.diagonal()
          Array([ 2., -1.], dtype=float32)
        """
        return self._wrap(_ops.imag(self._parts))

    @reads_data("A.astype(dtype)")
    def astype(self, dtype: DTypeLike, copy: bool = True) -> Self:
        """The matrix converted to ``dtype`` (a floating or complex dtype).

        ``copy`` is accepted for SciPy compatibility and has no effect (JAX arrays are
        immutable, so sharing ``data`` is always safe).

        Raises:
          TypeError: for integer, bool or other dtypes a DiaMatrix cannot hold, and for
            a complex-to-real cast (take ``A.real`` or ``A.imag`` first; SciPy warns and
            drops the imaginary part, JAX refuses).

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> jaxdia.eye(2).astype(jnp.bfloat16).dtype
          dtype(bfloat16)
        """
        return self._wrap(_ops.astype(self._parts, dtype))

    @reads_data("-A")
    def __neg__(self) -> Self:
        return self._wrap(_ops.neg(self._parts))

    @reads_data("abs(A)")
    def __abs__(self) -> Self:
        return self._wrap(_ops.absolute(self._parts))

    @overload
    def __add__(self, other: Self | complex) -> Self: ...
    @overload
    def __add__(self, other: Array | np.ndarray) -> Array: ...
    @reads_data("A + B")
    def __add__(self, other: Self | ArrayLike) -> Self | Array:
        """``A + B``: a DiaMatrix with the union of the offsets (shapes must match).

        ``A + 0`` is ``A``; a nonzero scalar raises NotImplementedError (as in SciPy); a
        dense array gives a dense array.
        """
        parts = self._parts
        return self._result(parts, _ops.add(parts, operand(other)))

    __radd__ = __add__

    @overload
    def __sub__(self, other: Self | complex) -> Self: ...
    @overload
    def __sub__(self, other: Array | np.ndarray) -> Array: ...
    @reads_data("A - B")
    def __sub__(self, other: Self | ArrayLike) -> Self | Array:
        parts = self._parts
        return self._result(parts, _ops.add(parts, operand(other), subtract=True))

    @overload
    def __rsub__(self, other: complex) -> Self: ...
    @overload
    def __rsub__(self, other: Array | np.ndarray) -> Array: ...
    @reads_data("B - A")
    def __rsub__(self, other: ArrayLike) -> Self | Array:
        parts = self._parts
        return self._result(parts, _ops.add(parts, operand(other), subtract=True, reverse=True))

    @reads_data("A * B")
    def __mul__(self, other: Self | ArrayLike) -> Self:
        """Elementwise ``A * other``, as ``A.multiply(other)`` (``dia_array`` semantics)."""
        parts = self._parts
        return self._result(parts, _ops.multiply(parts, operand(other), strict=False))

    __rmul__ = __mul__

    @reads_data("A / B")
    def __truediv__(self, other: ArrayLike) -> Self:
        """``A / s`` for a scalar, or ``A / X`` for a dense ``X``: A's stored entries
        divided by X's (A's offsets, as SciPy's ``dia_array / ndarray``)."""
        parts = self._parts
        return self._result(parts, _ops.divide(parts, operand(other)))

    def __pow__(self, p: ArrayLike) -> Self:
        """Elementwise ``A ** p``, as ``A.power(p)`` (``dia_array`` semantics)."""
        return self.power(p)

    @reads_data("A.multiply(B)")
    def multiply(self, other: Self | ArrayLike) -> Self:
        """The elementwise product, staying in DIA.

        Args:
          other: a DiaMatrix of the same shape (the result stores the offsets both
            store), a scalar, or a dense array broadcastable to ``(..., m, n)`` such as a
            row ``(n,)``/``(1, n)`` or column ``(m, 1)`` vector (the result keeps A's
            offsets, as SciPy's ``dia_array.multiply`` does). Batch dims broadcast.

        Raises:
          ValueError: on mismatched shapes.
          TypeError: on other operand types (convert ``scipy.sparse`` ones with
            ``DiaMatrix.from_scipy``).

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([1.0, 2.0, 3.0], offsets=0, shape=(3, 3))
          >>> A.multiply(jnp.array([1.0, 10.0, 100.0])).data
          Array([[  1.,  20., 300.]], dtype=float32)
        """
        parts = self._parts
        return self._result(parts, _ops.multiply(parts, operand(other)))

    @reads_data("A.power(p)")
    def power(self, p: ArrayLike, dtype: DTypeLike | None = None) -> Self:
        """Elementwise power of the stored entries, like ``dia_array.power``.

        Args:
          p: a scalar exponent (it may be traced; a concrete ``p == 0`` raises).
          dtype: if given, the data is converted to it first.

        Raises:
          NotImplementedError: for ``p == 0`` (it would make the matrix dense), as SciPy.
          TypeError: for a non-scalar ``p``.

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 3.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> A.power(2).todense()
          Array([[4., 9., 0.],
                 [1., 4., 9.],
                 [0., 1., 4.]], dtype=float32)
        """
        return self._wrap(_ops.power(self._parts, p, dtype))
