"""The :class:`DiaMatrix` pytree: SciPy's DIA layout with static offsets."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import jax
import jax.core
import numpy as np
import numpy.typing as npt
from jax import Array, export

from . import _convert, _ops
from ._checks import check_square
from ._geometry import diagonal_bounds
from ._parts import DiaParts, check_layout, data_shape, data_tail, reads_data
from ._products import dense_dia_product, dia_dense_product, matrix_product, operator_product
from ._pytree import Immutable
from ._scipy_names import SCIPY_EQUIVALENTS
from ._scipy_operator import ScipyOperator, host_precision
from ._traces import dia_diagonal, dia_trace, dia_traces
from ._typing import ArrayLike, DTypeLike, Offsets, Shape

if TYPE_CHECKING:
    import scipy.sparse as sp
    from jax.experimental import sparse as jsparse


def host_arrays(A: DiaMatrix, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(data, offsets)`` of one concrete matrix on the host, as SciPy stores them (see
    :func:`jaxdia._convert.to_host`); ``what`` names the caller in the ValueError for a
    batched or traced matrix."""
    return _convert.to_host(A._parts, what)


def as_matrix(value: object, name: str) -> DiaMatrix:
    """``value``, checked to be a DiaMatrix laid out as :func:`jaxdia._parts.check_layout`
    wants.

    ``name`` says where it was passed (e.g. ``"kron: B"``) in the TypeError/ValueError.
    """
    if not isinstance(value, DiaMatrix):
        raise TypeError(f"{name} must be a jaxdia.DiaMatrix, got {type(value).__name__}")
    check_layout(value, name)
    return value


def as_square_matrix(value: object, function: str) -> DiaMatrix:
    """``value``, checked to be a square DiaMatrix (``function`` names the caller)."""
    A = as_matrix(value, f"{function}: A")
    return check_square(A, function)


@jax.tree_util.register_pytree_with_keys_class
class DiaMatrix(Immutable, ScipyOperator):
    """A sparse matrix in DIA (diagonal) format, laid out exactly as SciPy's ``dia_array``.

    ``data[..., k, j]`` holds ``A[j - offsets[k], j]``: a column of ``data`` is a column
    of the matrix. Slots whose row ``j - offsets[k]`` lies outside ``[0, m)`` are padding:
    no jaxdia operation reads them.

    A ``DiaMatrix`` is a pytree whose only leaf is ``data``; ``offsets`` and ``shape``
    are static aux data, so it passes through ``jit``, ``vmap``, ``grad``, ``lax.cond``
    and ``lax.scan`` with its offsets known at trace time. Leading dimensions of
    ``data`` are a batch of matrices sharing the offsets (what ``vmap`` produces).

    The constructor canonicalizes: offsets are sorted ascending (``data`` rows permuted
    to match); ``data`` is padded with zeros or truncated to width ``n`` (as SciPy reads
    it); offsets of diagonals with no slot inside the matrix (``k <= -m`` or ``k >= n``,
    or any offset when ``m`` or ``n`` is 0) hold no entry and are dropped. Matrices
    are immutable.

    Args:
      data: array-like of shape ``(..., n_diags, width)`` of a floating or complex dtype.
      offsets: the diagonals' offsets: an int, a sequence of ints, or a 1-D integer
        array. They must be static (concrete), and distinct.
      shape: ``(m, n)``.

    Attributes:
      data: the diagonals, a JAX array of shape ``(*batch_shape, n_diags, n)``.
      offsets: the sorted offsets, a tuple of ints.
      shape: ``(m, n)``, a tuple of ints.

    Raises:
      ValueError: on duplicate offsets, ``data`` of rank < 2, ``n_diags != len(offsets)``
        or a malformed shape.
      TypeError: on non-integer or traced offsets, a non-integer shape, or data of an
        unsupported dtype.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.DiaMatrix(jnp.array([[1., 2., 3.], [4., 5., 6.]]), (1, 0), (3, 3))
      >>> A.offsets
      (0, 1)
      >>> A.todense()
      Array([[4., 2., 0.],
             [0., 5., 3.],
             [0., 0., 6.]], dtype=float32)
    """

    __slots__ = ("data", "offsets", "shape")
    _leaves = ("data",)
    _static = ("offsets", "shape")
    _immutable_hint = "; its methods return new matrices"
    _name = "A"
    data: Array
    offsets: tuple[int, ...]
    shape: tuple[int, int]

    # ``np.ndarray @ A`` must defer to ``A.__rmatmul__`` instead of densifying A.
    __array_ufunc__ = None

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        # Without this, ``np.asarray(A)`` is a 0-d object array (as for scipy.sparse) and
        # ``jnp.asarray(A)`` fails inside NumPy with "float() argument must be ...".
        # SciPy's spsolve, splu, factorized and spilu call np.asarray(A) when A is no
        # SciPy matrix: this message is the cause of their "unrecognized csc_array
        # constructor input" error, so it names what to pass them.
        raise TypeError(
            "a DiaMatrix does not convert to a NumPy or JAX array implicitly: write A @ X "
            "for a product, call A.toarray() for a dense jax.Array or A.to_scipy() for a "
            "scipy.sparse dia_array. SciPy functions that need a SciPy matrix (spsolve, "
            "splu, factorized, spilu, expm, inv) take A.to_scipy(); jaxdia's own banded "
            "solvers are jaxdia.solve_banded, lu_factor and factorized (the table in "
            "docs/migration.md). To combine A with a scipy.sparse matrix S, convert S with "
            "jaxdia.DiaMatrix.from_scipy(S)"
        )

    def __bool__(self) -> bool:
        # As SciPy's and NumPy's: ``if A:`` would otherwise be true for every matrix.
        if self.shape != (1, 1) or self.batch_shape:
            raise ValueError(
                "The truth value of a DiaMatrix with more than one element is ambiguous; "
                "test A.count_nonzero() for nonzero entries, or `A is not None`"
            )
        return bool(self.todense()[0, 0])

    def __init__(self, data: npt.ArrayLike, offsets: Offsets, shape: Shape):
        self._assign(*_convert.checked(data, offsets, shape, type(self).__name__))

    @classmethod
    def _wrap(cls, parts: DiaParts) -> DiaMatrix:
        """The matrix of canonical ``parts`` (what the array-level layer returns)."""
        return cls._make(*parts)

    @property
    def _parts(self) -> DiaParts:
        return DiaParts(self.data, self.offsets, self.shape)

    def _result(self, parts: DiaParts, value: object) -> Any:
        """What an array-level operation on ``parts`` (this matrix's) returned, as a
        DiaMatrix where it is a matrix: this one where it is ``parts`` unchanged."""
        if value is parts:
            return self
        return self._wrap(value) if isinstance(value, DiaParts) else value

    if not TYPE_CHECKING:  # hidden from type checkers: they would accept any attribute

        def __getattr__(self, name: str) -> Any:
            # Only reached for names DiaMatrix lacks: point SciPy's names to jaxdia's.
            hint = SCIPY_EQUIVALENTS.get(name)
            message = f"'DiaMatrix' object has no attribute {name!r}"
            raise AttributeError(f"{message}; for SciPy's {name}, use {hint}" if hint else message)

    # -- properties ------------------------------------------------------------------------

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

    def __repr__(self) -> str:
        shape = data_shape(self)
        if shape is None:
            # a pytree with other leaves, e.g. from jax.tree.map, a vmap in_axes spec, or
            # the nested matrices of jax.hessian with respect to a DiaMatrix
            return f"DiaMatrix(shape={self.shape}, offsets={self.offsets}, data={self.data!r})"
        if shape[-2:] != data_tail(self):
            k, n = data_tail(self)
            return (
                f"DiaMatrix(shape={self.shape}, offsets={self.offsets}, data of shape {shape}: "
                f"not (..., {k}, {n}))"
            )
        batch = f", batch_shape={self.batch_shape}" if self.batch_shape else ""
        return (
            f"DiaMatrix(shape={self.shape}, dtype={self.dtype.name}, offsets={self.offsets}{batch})"
        )

    # -- conversions -----------------------------------------------------------------------

    @classmethod
    def from_scipy(cls, matrix: sp.sparray | sp.spmatrix) -> DiaMatrix:
        """Converts any ``scipy.sparse`` matrix or array, losslessly.

        A ``dia_array``/``dia_matrix`` keeps its offsets and data (explicit zeros too);
        other formats go through SciPy's ``todia()`` (duplicate COO entries are summed).
        float64 input becomes float32 unless ``jax_enable_x64`` is on (JAX's usual rule),
        with a warning: convert ``S.astype(np.float32)`` first to keep it quiet. Integer
        and bool matrices become JAX's default float dtype (float64 with x64 on, as SciPy
        computes with them), as in :meth:`from_dense`; long double is refused (JAX has
        none: convert it to float64).
        SciPy data narrower than the matrix is padded to width ``n``, so ``A.nnz`` counts
        slots that ``S.nnz`` leaves out (see :attr:`nnz`).

        Example:
          >>> from jaxdia import DiaMatrix
          >>> import scipy.sparse as sp
          >>> S = sp.diags_array([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(4, 4))
          >>> S.dtype
          dtype('float64')
          >>> import warnings
          >>> with warnings.catch_warnings(record=True) as caught:  # x64 is off
          ...     warnings.simplefilter("always")
          ...     A = DiaMatrix.from_scipy(S)
          >>> A
          DiaMatrix(shape=(4, 4), dtype=float32, offsets=(-1, 0, 1))
          >>> str(caught[0].message)[:41]
          'from_scipy: float64 input becomes float32'
          >>> A = DiaMatrix.from_scipy(S.astype("float32"))  # no warning
        """
        return cls._wrap(_convert.from_scipy(matrix))

    @reads_data("A.to_scipy()")
    def to_scipy(self) -> sp.dia_array:
        """Returns a ``scipy.sparse.dia_array`` with the same offsets and data.

        For a ``dia_matrix``, wrap it: ``scipy.sparse.dia_matrix(A.to_scipy())``. SciPy has
        no 16-bit float types: bfloat16 and float16 matrices come back as float32. The
        result owns a writable copy of the data, with zeros in its padding slots (SciPy
        reads some of them, e.g. in ``sum(axis=0)``).

        Example:
          >>> from jaxdia import DiaMatrix
          >>> import numpy as np
          >>> A = DiaMatrix(np.ones((1, 3), np.float32), 0, (3, 3))
          >>> A.to_scipy().toarray()
          array([[1., 0., 0.],
                 [0., 1., 0.],
                 [0., 0., 1.]], dtype=float32)
        """
        return _convert.to_scipy(self._parts)

    @classmethod
    def from_dense(cls, dense: npt.ArrayLike, offsets: Offsets | None = None) -> DiaMatrix:
        """Builds a DiaMatrix from a dense ``(..., m, n)`` array.

        Args:
          dense: the matrix (or a batch of matrices); integer and bool arrays become JAX's
            default float dtype (as in :func:`jaxdia.diags`).
          offsets: the diagonals to keep. If None, every diagonal holding a nonzero (in
            any batch member) is kept, which needs a concrete ``dense``; under ``jit`` pass
            offsets explicitly. Elements on diagonals not listed are dropped.

        Example:
          >>> from jaxdia import DiaMatrix
          >>> import numpy as np
          >>> A = DiaMatrix.from_dense(np.array([[1., 2.], [0., 3.]], np.float32))
          >>> A.offsets
          (0, 1)
        """
        return cls._wrap(_convert.from_dense(dense, offsets))

    @reads_data("A.todense()")
    def todense(self, order: str | None = None, out: None = None) -> Array:
        """The dense ``(..., m, n)`` JAX array (batch dims kept).

        ``order`` and ``out`` are accepted for SciPy compatibility: ``order`` may be None
        or ``"C"`` (JAX arrays are row-major) and ``out`` only None (JAX arrays are
        immutable).

        Example:
          >>> import jaxdia
          >>> jaxdia.eye(2, 3, k=1).todense()
          Array([[0., 1., 0.],
                 [0., 0., 1.]], dtype=float32)
        """
        return _convert.to_dense(self._parts, order, out)

    toarray = todense

    @reads_data("A.to_bcoo()")
    def to_bcoo(self) -> jsparse.BCOO:
        """A ``jax.experimental.sparse.BCOO`` holding every in-bounds slot (zeros too).

        Batched matrices give a BCOO with ``n_batch = len(batch_shape)``.

        Example:
          >>> import jaxdia
          >>> B = jaxdia.diags([1.0, 2.0], offsets=[0, 1], shape=(3, 3)).to_bcoo()
          >>> B.nse, B.todense()
          (5, Array([[1., 2., 0.],
                 [0., 1., 2.],
                 [0., 0., 1.]], dtype=float32))
        """
        return _convert.to_bcoo(self._parts)

    @classmethod
    def from_bcoo(cls, matrix: jsparse.BCOO, offsets: Offsets | None = None) -> DiaMatrix:
        """Converts an unbatched 2-D ``BCOO`` (duplicate entries are summed).

        Args:
          matrix: the BCOO matrix (``n_batch == n_dense == 0``).
          offsets: the diagonals to store. If None they are read from the (then
            necessarily concrete) indices, and every entry is kept. With explicit offsets
            under ``jit``, entries on other diagonals cannot be checked and are dropped.

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> from jax.experimental import sparse
          >>> B = sparse.BCOO.fromdense(jnp.array([[1.0, 2.0], [0.0, 3.0]]))
          >>> A = jaxdia.DiaMatrix.from_bcoo(B)
          >>> A.offsets
          (0, 1)
          >>> A.todense()
          Array([[1., 2.],
                 [0., 3.]], dtype=float32)
        """
        return cls._wrap(_convert.from_bcoo(matrix, offsets))

    # -- products --------------------------------------------------------------------------

    @overload
    def __matmul__(self, other: DiaMatrix) -> DiaMatrix: ...
    @overload
    def __matmul__(self, other: ArrayLike) -> Array: ...
    @reads_data("A @ X")
    def __matmul__(self, other: DiaMatrix | ArrayLike) -> Array | DiaMatrix:
        if isinstance(other, DiaMatrix):
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
            S = self.to_scipy()
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

    def dot(self, other: DiaMatrix | ArrayLike) -> Array | DiaMatrix:
        """``A @ other`` (SciPy's spelling): a dense array, or a DiaMatrix for a DiaMatrix.

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> A.dot(jnp.array([1.0, 2.0, 3.0]))
          Array([ 0.,  0., -4.], dtype=float32)

        A scalar ``other`` scales the matrix (``A * other``), as in SciPy.
        """
        if np.ndim(other) == 0 and not isinstance(other, DiaMatrix):
            return self * other
        return self @ other

    # -- diagonals and traces --------------------------------------------------------------

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

    # -- SciPy parity (see _ops.py) ---------------------------------------------------------
    # ``==`` is not elementwise: DiaMatrix keeps object identity for ``==`` and hashing.
    # Compare values with ``A.todense() == B.todense()``, or ``jaxdia.align(A, B)`` and
    # compare the aligned ``data`` on in-bounds slots.

    @property
    @reads_data("A.T")
    def T(self) -> DiaMatrix:
        """The transpose, a DiaMatrix of shape ``(n, m)`` with offsets negated.

        Eagerly ``data`` is shifted into a new array (as SciPy's ``A.T`` does); inside
        ``jax.jit``, ``A.T @ x`` reads ``A.data`` in place, as ``x @ A`` does.

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([[1.0, 2.0]], offsets=[1], shape=(3, 3))
          >>> A.T.offsets, A.T.todense()[1:, 0:2].tolist()
          ((-1,), [[1.0, 0.0], [0.0, 2.0]])
        """
        return self._wrap(_ops.transposed(self._parts))

    def transpose(self, axes: Sequence[int] | None = None) -> DiaMatrix:
        """``A.T``; ``axes`` may only be None or ``(1, 0)`` (as in SciPy).

        Example:
          >>> import jaxdia
          >>> A = jaxdia.eye(2, 3, k=1)
          >>> A.transpose().shape, A.transpose().offsets
          ((3, 2), (-1,))
        """
        if axes is not None and (not isinstance(axes, Sequence) or tuple(axes) != (1, 0)):
            raise ValueError(
                f"axes must be None or (1, 0): a sparse matrix can only swap its two "
                f"dimensions, got {axes!r}"
            )
        return self.T

    @reads_data("A.conj()")
    def conj(self) -> DiaMatrix:
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
    def H(self) -> DiaMatrix:
        """The conjugate transpose ``A.conj().T`` (SciPy's ``dia_matrix.getH()``).

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([jnp.array([1j, 2j])], offsets=[1], shape=(3, 3))
          >>> A.H.offsets, A.H.diagonal(-1)
          ((-1,), Array([0.-1.j, 0.-2.j], dtype=complex64))
        """
        return self.conj().T

    @property
    @reads_data("A.real")
    def real(self) -> DiaMatrix:
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
    def imag(self) -> DiaMatrix:
        """The imaginary part, with the same offsets (zeros for a real matrix).

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([jnp.array([1 + 2j, 3 - 1j])], offsets=[0])
          >>> A.imag.diagonal()
          Array([ 2., -1.], dtype=float32)
        """
        return self._wrap(_ops.imag(self._parts))

    @reads_data("A.astype(dtype)")
    def astype(self, dtype: DTypeLike, copy: bool = True) -> DiaMatrix:
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
    def __neg__(self) -> DiaMatrix:
        return self._wrap(_ops.neg(self._parts))

    @reads_data("abs(A)")
    def __abs__(self) -> DiaMatrix:
        return self._wrap(_ops.absolute(self._parts))

    @overload
    def __add__(self, other: DiaMatrix | complex) -> DiaMatrix: ...
    @overload
    def __add__(self, other: Array | np.ndarray) -> Array: ...
    @reads_data("A + B")
    def __add__(self, other: DiaMatrix | ArrayLike) -> DiaMatrix | Array:
        """``A + B``: a DiaMatrix with the union of the offsets (shapes must match).

        ``A + 0`` is ``A``; a nonzero scalar raises NotImplementedError (as in SciPy); a
        dense array gives a dense array.
        """
        parts = self._parts
        return self._result(parts, _ops.add(parts, _operand(other)))

    __radd__ = __add__

    @overload
    def __sub__(self, other: DiaMatrix | complex) -> DiaMatrix: ...
    @overload
    def __sub__(self, other: Array | np.ndarray) -> Array: ...
    @reads_data("A - B")
    def __sub__(self, other: DiaMatrix | ArrayLike) -> DiaMatrix | Array:
        parts = self._parts
        return self._result(parts, _ops.add(parts, _operand(other), subtract=True))

    @overload
    def __rsub__(self, other: complex) -> DiaMatrix: ...
    @overload
    def __rsub__(self, other: Array | np.ndarray) -> Array: ...
    @reads_data("B - A")
    def __rsub__(self, other: ArrayLike) -> DiaMatrix | Array:
        parts = self._parts
        return self._result(parts, _ops.add(parts, _operand(other), subtract=True, reverse=True))

    @reads_data("A * B")
    def __mul__(self, other: DiaMatrix | ArrayLike) -> DiaMatrix:
        """Elementwise ``A * other``, as ``A.multiply(other)`` (``dia_array`` semantics)."""
        parts = self._parts
        return self._result(parts, _ops.multiply(parts, _operand(other), strict=False))

    __rmul__ = __mul__

    @reads_data("A / B")
    def __truediv__(self, other: ArrayLike) -> DiaMatrix:
        """``A / s`` for a scalar, or ``A / X`` for a dense ``X``: A's stored entries
        divided by X's (A's offsets, as SciPy's ``dia_array / ndarray``)."""
        parts = self._parts
        return self._result(parts, _ops.divide(parts, _operand(other)))

    def __pow__(self, p: ArrayLike) -> DiaMatrix:
        """Elementwise ``A ** p``, as ``A.power(p)`` (``dia_array`` semantics)."""
        return self.power(p)

    @reads_data("A.multiply(B)")
    def multiply(self, other: DiaMatrix | ArrayLike) -> DiaMatrix:
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
        return self._result(parts, _ops.multiply(parts, _operand(other)))

    @reads_data("A.power(p)")
    def power(self, p: ArrayLike, dtype: DTypeLike | None = None) -> DiaMatrix:
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

    @reads_data("A.with_offsets(offsets)")
    def with_offsets(self, offsets: Offsets, *, check: bool = True) -> DiaMatrix:
        """The same matrix stored with exactly the diagonals ``offsets``.

        New diagonals are zero. Offsets outside the matrix are ignored (a DiaMatrix holds
        none). Dropping a diagonal is checked: it must be zero in bounds.

        Args:
          offsets: the diagonals to store (static ints).
          check: whether to check that dropped diagonals are zero. Under ``jit``,
            ``vmap`` or ``grad`` the data cannot be checked, so dropping a diagonal then
            raises unless ``check=False`` (which discards the dropped entries).

        Raises:
          ValueError: on duplicate offsets, or if a dropped diagonal holds a nonzero (or
            cannot be checked).

        Example:
          >>> import jaxdia
          >>> jaxdia.eye(3).with_offsets([-1, 0]).offsets
          (-1, 0)
        """
        return self._wrap(_ops.with_offsets(self._parts, offsets, check=check))

    @reads_data("A.eliminate_zeros()")
    def eliminate_zeros(self) -> DiaMatrix:
        """The matrix without the diagonals that are zero in bounds (in every batch member).

        Needs concrete data: the result's offsets depend on the values.

        Raises:
          ValueError: under ``jit``/``vmap``/``grad``.

        Example:
          >>> import jaxdia
          >>> (jaxdia.eye(3) * 0.0).eliminate_zeros().offsets
          ()
        """
        return self._wrap(_ops.eliminate_zeros(self._parts))

    @reads_data("A.with_diagonal(values, k)")
    def with_diagonal(self, values: ArrayLike, k: int = 0) -> DiaMatrix:
        """SciPy's ``setdiag(values, k)`` as a pure function: a new matrix.

        A scalar fills the whole diagonal ``k``; an array sets its first ``len(values)``
        entries (longer arrays are truncated, and the rest of the diagonal is unchanged).
        Leading dims of ``values`` broadcast with the batch. The offset is added if absent.

        Raises:
          ValueError: if diagonal ``k`` lies outside the matrix ("k exceeds array
            dimensions").
          TypeError: if ``k`` is not an int, or complex values meet a real matrix.

        Example:
          >>> import jaxdia
          >>> jaxdia.eye(3).with_diagonal([5.0, 6.0], k=1).todense()
          Array([[1., 5., 0.],
                 [0., 1., 6.],
                 [0., 0., 1.]], dtype=float32)
        """
        parts = self._parts
        return self._result(parts, _ops.with_diagonal(parts, values, k))


# ``jax.export``: a serialized Exported that takes or returns a DiaMatrix names it so.
export.register_pytree_node_serialization(
    DiaMatrix,
    serialized_name="jaxdia.DiaMatrix",
    serialize_auxdata=lambda aux: json.dumps(aux).encode(),  # (offsets, shape)
    deserialize_auxdata=lambda serialized: tuple(map(tuple, json.loads(serialized))),
)


def _operand(value: object) -> object:
    """An operand of an operation with a DiaMatrix, for the array-level layer."""
    return value._parts if isinstance(value, DiaMatrix) else value
