"""The :class:`DiaMatrix` pytree: SciPy's DIA layout with static offsets."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import jax
import jax.core
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from jax import Array, export
from jax.typing import ArrayLike, DTypeLike

from . import _host, _ops
from ._checks import (
    as_array,
    as_offsets,
    as_shape,
    check_distinct,
    check_dtype,
    check_square,
    narrow,
)
from ._convert import (
    canonical,
    coo_offsets,
    coo_to_dia,
    dense_to_dia,
    dia_to_coo,
    nonzero_offsets,
    to_dense,
    to_host,
)
from ._geometry import diagonal_bounds, holds_entries, index_dtype
from ._parts import DiaParts
from ._products import dense_dia_product, dia_dense_product, matrix_product, operator_product
from ._pytree import Immutable
from ._scipy_names import SCIPY_EQUIVALENTS
from ._scipy_operator import ScipyOperator, host_precision
from ._traces import dense_traces, dia_diagonal, dia_trace, dia_traces

if TYPE_CHECKING:
    from jax.experimental import sparse as jsparse


def _as_data(data: npt.ArrayLike, function: str) -> Array | np.ndarray:
    """``data`` checked: a JAX array as given, anything else as a NumPy array (which the
    constructor canonicalizes on the host and transfers once) in the precision JAX has
    (see :func:`jaxdia._checks.narrow`)."""
    array = as_array(
        narrow(data, function), "data", expected="a numeric array of shape (..., n_diags, width)"
    )
    check_dtype(array.dtype)
    if array.ndim < 2:
        raise ValueError(
            f"data must have shape (..., n_diags, width) (rank >= 2), got shape {array.shape}"
        )
    return array


def _data_shape(A: DiaMatrix) -> tuple[int, ...] | None:
    """The shape of ``A.data``, or None when it is not an array (nor an abstract one)."""
    shape = getattr(A.data, "shape", None)  # every array type's shape is a tuple
    return shape if isinstance(shape, tuple) and not isinstance(A.data, DiaMatrix) else None


def _data_tail(A: DiaMatrix) -> tuple[int, int]:
    """The trailing dims ``(n_diags, n)`` that ``A.data`` must have."""
    return len(A.offsets), A.shape[1]


def check_layout(A: DiaMatrix, what: str) -> None:
    """Raises a ValueError unless ``A.data`` is laid out as ``(..., n_diags, n)``.

    The constructor guarantees that layout, but ``tree_unflatten`` cannot check it (JAX
    calls it with whatever leaves a transformation made, scalars and placeholders
    included), and two common ``vmap`` mistakes break it: mapping over a matrix without
    batch dims hands each call ``data`` of shape ``(n,)`` (one diagonal), and
    ``in_axes``/``out_axes`` other than 0 put a batch axis behind the diagonals. Reading
    such ``data`` would take the wrong slots silently, so every operation that reads it
    checks first. Non-array leaves are left to fail on their own.
    """
    shape = _data_shape(A)
    expected = _data_tail(A)
    if shape is None or shape[-2:] == expected:
        return
    raise ValueError(
        f"{what}: the DiaMatrix's data has shape {shape}, but its shape {A.shape} and "
        f"offsets {A.offsets} need data of shape (..., {expected[0]}, {expected[1]}). Under "
        "jax.vmap this comes from mapping over a matrix without batch dims (give it "
        "in_axes=None) or from in_axes/out_axes other than 0 for a DiaMatrix (its batch "
        "dims lead data)."
    )


def host_arrays(A: DiaMatrix, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(data, offsets)`` of one concrete matrix on the host, as SciPy stores them (see
    :func:`jaxdia._convert.to_host`); ``what`` names the caller in the ValueError for a
    batched or traced matrix."""
    if A.batch_shape:
        raise ValueError(
            f"{what} takes one matrix; this one has batch shape {A.batch_shape}. Take each "
            "matrix, e.g. DiaMatrix(A.data[i], A.offsets, A.shape)."
        )
    if isinstance(A.data, jax.core.Tracer):
        raise ValueError(
            f"{what} needs concrete data (it works on the host); under jit, vmap or grad "
            f"the data is traced: return the DiaMatrix from the transformation and call "
            f"{what} outside"
        )
    return to_host(A._parts)


def as_matrix(value: Any, name: str) -> DiaMatrix:
    """``value``, checked to be a DiaMatrix with the layout :func:`check_layout` wants.

    ``name`` says where it was passed (e.g. ``"kron: B"``) in the TypeError/ValueError.
    """
    if not isinstance(value, DiaMatrix):
        raise TypeError(f"{name} must be a jaxdia.DiaMatrix, got {type(value).__name__}")
    check_layout(value, name)
    return value


def as_square_matrix(value: Any, function: str) -> DiaMatrix:
    """``value``, checked to be a square DiaMatrix (``function`` names the caller)."""
    return check_square(as_matrix(value, f"{function}: A"), function)


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _reads_data(what: str) -> Callable[[_Method], _Method]:
    """Marks a method that reads ``data``: it checks the layout of the matrices it gets
    (``self`` and DiaMatrix arguments) first, see :func:`check_layout`."""

    def decorate(method: _Method) -> _Method:
        @functools.wraps(method)
        def checked(self: DiaMatrix, *args: Any, **kwargs: Any) -> Any:
            check_layout(self, what)
            for arg in args:
                if isinstance(arg, DiaMatrix):
                    check_layout(arg, what)
            return method(self, *args, **kwargs)

        return cast(_Method, checked)

    return decorate


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

    def __array__(self, dtype: DTypeLike | None = None, copy: Any = None) -> np.ndarray:
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

    def __init__(self, data: npt.ArrayLike, offsets: Any, shape: Any):
        shape = as_shape(shape)
        offsets = as_offsets(offsets)
        data = _as_data(data, type(self).__name__)
        if data.shape[-2] != len(offsets):
            raise ValueError(
                f"data has {data.shape[-2]} diagonals (shape {data.shape}) but "
                f"{len(offsets)} offsets were given: {offsets}"
            )
        self._assign(*canonical(data, check_distinct(offsets), shape))

    @classmethod
    def _wrap(cls, parts: DiaParts) -> DiaMatrix:
        """The matrix of canonical ``parts`` (what the array-level layer returns)."""
        return cls._make(*parts)

    @property
    def _parts(self) -> DiaParts:
        return DiaParts(self.data, self.offsets, self.shape)

    def _result(self, parts: DiaParts, value: Any) -> Any:
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
        return int(sum(max(0, stop - start) for start, stop in self._bounds()))

    def _bounds(self):
        return [diagonal_bounds(k, self.shape) for k in self.offsets]

    def __repr__(self) -> str:
        shape = _data_shape(self)
        if shape is None:
            # a pytree with other leaves, e.g. from jax.tree.map, a vmap in_axes spec, or
            # the nested matrices of jax.hessian with respect to a DiaMatrix
            return f"DiaMatrix(shape={self.shape}, offsets={self.offsets}, data={self.data!r})"
        if shape[-2:] != _data_tail(self):
            k, n = _data_tail(self)
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
    def from_scipy(cls, matrix: Any) -> DiaMatrix:
        """Converts any ``scipy.sparse`` matrix or array, losslessly.

        A ``dia_array``/``dia_matrix`` keeps its offsets and data (explicit zeros too);
        other formats go through SciPy's ``todia()`` (duplicate COO entries are summed).
        float64 input becomes float32 unless ``jax_enable_x64`` is on (JAX's usual rule),
        with a warning: convert ``S.astype(np.float32)`` first to keep it quiet.
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
        if not sp.issparse(matrix):
            raise TypeError(
                f"from_scipy expects a scipy.sparse matrix or array, got {type(matrix).__name__}"
            )
        if matrix.ndim != 2:
            raise ValueError(f"from_scipy expects a 2-D sparse matrix, got shape {matrix.shape}")
        check_dtype(matrix.dtype, "the scipy matrix")
        if matrix.format != "dia":
            matrix = matrix.todia()
        return cls(narrow(matrix.data, "from_scipy"), matrix.offsets, matrix.shape)

    @_reads_data("A.to_scipy()")
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
        return sp.dia_array(host_arrays(self, "to_scipy"), shape=self.shape)

    @classmethod
    def from_dense(cls, dense: npt.ArrayLike, offsets: Any = None) -> DiaMatrix:
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
        if sp.issparse(dense):
            raise TypeError(
                f"from_dense expects a dense array, got scipy.sparse.{type(dense).__name__}; "
                "convert it with DiaMatrix.from_scipy"
            )
        if offsets is None:
            if isinstance(dense, jax.core.Tracer):
                raise ValueError(
                    "from_dense(M) finds the nonzero diagonals of a concrete M; under jit/vmap "
                    "M is traced, so pass the offsets explicitly: from_dense(M, offsets=...)."
                )
            host = np.asarray(dense)
            if host.ndim < 2:
                raise ValueError(f"dense must have shape (..., m, n), got shape {host.shape}")
            offsets = nonzero_offsets(host)
        else:
            offsets = as_offsets(offsets)
        array = as_array(
            narrow(dense, "from_dense"), "dense", expected="a numeric array of shape (..., m, n)"
        )
        if array.ndim < 2:
            raise ValueError(f"dense must have shape (..., m, n), got shape {array.shape}")
        if array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer):
            array = array.astype(jax.dtypes.canonicalize_dtype(float))  # as diags does
        check_dtype(array.dtype, "dense")
        m, n = array.shape[-2:]
        offsets = tuple(sorted(k for k in check_distinct(offsets) if holds_entries(k, (m, n))))
        if array.ndim == 2 and _host.concrete(array) and array.dtype in _host.HOST_DTYPES:
            return cls(_host.dense_to_dia(np.asarray(array), offsets, (m, n)), offsets, (m, n))
        return cls(dense_to_dia(array, offsets, (m, n)), offsets, (m, n))

    @_reads_data("A.todense()")
    def todense(self, order: Any = None, out: None = None) -> Array:
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
        if order not in (None, "C"):
            raise ValueError(f"order must be None or 'C' (JAX arrays are row-major), got {order!r}")
        if out is not None:
            raise ValueError(
                "out must be None (JAX arrays are immutable; use the returned array), "
                f"got {type(out).__name__}"
            )
        return to_dense(self._parts)

    toarray = todense

    @_reads_data("A.to_bcoo()")
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
        from jax.experimental import sparse as jsparse  # on first use: it slows the import

        values, indices = dia_to_coo(self.data, self.offsets, self.shape)
        return jsparse.BCOO((values, indices), shape=(*self.batch_shape, *self.shape))

    @classmethod
    def from_bcoo(cls, matrix: jsparse.BCOO, offsets: Any = None) -> DiaMatrix:
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
        from jax.experimental import sparse as jsparse

        if not isinstance(matrix, jsparse.BCOO):
            raise TypeError(f"from_bcoo expects a BCOO, got {type(matrix).__name__}")
        if matrix.n_batch or matrix.n_dense or matrix.ndim != 2:
            raise ValueError(
                "from_bcoo supports unbatched 2-D BCOO matrices (n_batch == n_dense == 0), "
                f"got shape {matrix.shape}, n_batch={matrix.n_batch}, n_dense={matrix.n_dense}"
            )
        m, n = matrix.shape
        # Signed indices: with BCOO's unsigned index dtypes, cols - rows would wrap around.
        indices = matrix.indices.astype(index_dtype(max(m, n) + 1))
        concrete = not isinstance(indices, jax.core.Tracer)
        found: set[int] = set()
        if concrete:
            found = coo_offsets(np.asarray(indices), (m, n))
        if offsets is None:
            if not concrete:
                raise ValueError(
                    "from_bcoo needs concrete indices to find the offsets; under jit pass "
                    "offsets=... explicitly."
                )
            offsets = tuple(sorted(found))
        else:
            offsets = tuple(sorted(as_offsets(offsets)))
            if concrete and not found <= set(offsets):
                raise ValueError(
                    f"the BCOO matrix has entries on diagonals {sorted(found - set(offsets))} "
                    f"that are not among offsets={offsets}"
                )
        offsets = tuple(k for k in offsets if holds_entries(k, (m, n)))
        return cls(coo_to_dia(matrix.data, indices, offsets, (m, n)), offsets, (m, n))

    # -- products --------------------------------------------------------------------------

    @_reads_data("A @ X")
    def __matmul__(self, other: Any) -> Array | DiaMatrix:
        if isinstance(other, DiaMatrix):
            return self._wrap(matrix_product(self._parts, other._parts))
        return dia_dense_product(self._parts, other)

    @_reads_data("X @ A")
    def __rmatmul__(self, other: Any) -> Array:
        return dense_dia_product(self._parts, other)

    # -- SciPy's LinearOperator protocol (scipy.sparse.linalg.aslinearoperator) -----------

    def _columns(self, x: Any, adjoint: bool) -> Any:
        if host_precision(x):
            # x64 off: JAX would round a float64 x to float32, and SciPy's float64 solvers
            # would then see float32 products and report convergence they never reached.
            # SciPy multiplies in float64 (the matrix's entries exactly), as here.
            S = self.to_scipy()
            return (S.conj().T if adjoint else S) @ x
        return operator_product(self._parts, x, adjoint=adjoint)

    @_reads_data("A.matvec(x)")
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
        y: Any = self @ x
        return y if isinstance(x, jax.Array) else np.array(y)

    @_reads_data("A.rmatvec(x)")
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

    @_reads_data("A.matmat(X)")
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

    @_reads_data("A.rmatmat(X)")
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

    def dot(self, other: Any) -> Array | DiaMatrix:
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

    @_reads_data("A.traces(q)")
    def traces(self, q: Any) -> Array:
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

    @_reads_data("A.trace(offset)")
    def trace(self, offset: int = 0) -> Array:
        """The sum of diagonal ``offset``, as ``scipy.sparse.dia_array.trace``.

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> A.trace(), A.trace(offset=1)
          (Array(-6., dtype=float32), Array(2., dtype=float32))
        """
        return dia_trace(self.data, self.offsets, self.shape, offset)

    @_reads_data("A.diagonal(k)")
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
    @_reads_data("A.T")
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

    def transpose(self, axes: Any = None) -> DiaMatrix:
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

    @_reads_data("A.conj()")
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
    @_reads_data("A.real")
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
    @_reads_data("A.imag")
    def imag(self) -> DiaMatrix:
        """The imaginary part, with the same offsets (zeros for a real matrix).

        Example:
          >>> import jax.numpy as jnp, jaxdia
          >>> A = jaxdia.diags([jnp.array([1 + 2j, 3 - 1j])], offsets=[0])
          >>> A.imag.diagonal()
          Array([ 2., -1.], dtype=float32)
        """
        return self._wrap(_ops.imag(self._parts))

    @_reads_data("A.astype(dtype)")
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

    @_reads_data("-A")
    def __neg__(self) -> DiaMatrix:
        return self._wrap(_ops.neg(self._parts))

    @_reads_data("abs(A)")
    def __abs__(self) -> DiaMatrix:
        return self._wrap(_ops.absolute(self._parts))

    @_reads_data("A + B")
    def __add__(self, other: Any) -> Any:
        """``A + B``: a DiaMatrix with the union of the offsets (shapes must match).

        ``A + 0`` is ``A``; a nonzero scalar raises NotImplementedError (as in SciPy); a
        dense array gives a dense array.
        """
        parts = self._parts
        return self._result(parts, _ops.add(parts, _operand(other)))

    __radd__ = __add__

    @_reads_data("A - B")
    def __sub__(self, other: Any) -> Any:
        parts = self._parts
        return self._result(parts, _ops.add(parts, _operand(other), subtract=True))

    @_reads_data("B - A")
    def __rsub__(self, other: Any) -> Any:
        parts = self._parts
        return self._result(parts, _ops.add(parts, _operand(other), subtract=True, reverse=True))

    @_reads_data("A * B")
    def __mul__(self, other: Any) -> Any:
        """Elementwise ``A * other``, as ``A.multiply(other)`` (``dia_array`` semantics)."""
        parts = self._parts
        return self._result(parts, _ops.multiply(parts, _operand(other), strict=False))

    __rmul__ = __mul__

    @_reads_data("A / B")
    def __truediv__(self, other: Any) -> Any:
        """``A / s`` for a scalar, or ``A / X`` for a dense ``X``: A's stored entries
        divided by X's (A's offsets, as SciPy's ``dia_array / ndarray``)."""
        parts = self._parts
        return self._result(parts, _ops.divide(parts, _operand(other)))

    def __pow__(self, p: ArrayLike) -> DiaMatrix:
        """Elementwise ``A ** p``, as ``A.power(p)`` (``dia_array`` semantics)."""
        return self.power(p)

    @_reads_data("A.multiply(B)")
    def multiply(self, other: Any) -> DiaMatrix:
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

    @_reads_data("A.power(p)")
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

    @_reads_data("A.sum()")
    def sum(self, axis: Any = None, dtype: DTypeLike | None = None, out: None = None) -> Array:
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

    @_reads_data("A.mean()")
    def mean(self, axis: Any = None, dtype: DTypeLike | None = None, out: None = None) -> Array:
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

    @_reads_data("A.count_nonzero()")
    def count_nonzero(self, axis: Any = None) -> Any:
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

    @_reads_data("A.with_offsets(offsets)")
    def with_offsets(self, offsets: Any, *, check: bool = True) -> DiaMatrix:
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

    @_reads_data("A.eliminate_zeros()")
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

    @_reads_data("A.with_diagonal(values, k)")
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


# -- the functional forms of the methods ----------------------------------------------------


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


def traces(M: Any, q: Any) -> Array:
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
    shapes = {M.shape for M in parts}
    if len(shapes) > 1:
        raise ValueError(f"align: the matrices must have one shape, got {[M.shape for M in parts]}")
    union = tuple(sorted(set().union(*(M.offsets for M in parts))))
    return tuple(DiaMatrix._wrap(_ops.select(M, union)) for M in parts)


def _serialize_aux_data(aux_data: tuple[tuple[int, ...], tuple[int, int]]) -> bytes:
    return json.dumps(aux_data).encode()


def _deserialize_aux_data(serialized: bytes) -> tuple[tuple[int, ...], tuple[int, int]]:
    offsets, (m, n) = json.loads(serialized)
    return tuple(offsets), (m, n)


# ``jax.export``: a serialized Exported that takes or returns a DiaMatrix names it so.
export.register_pytree_node_serialization(
    DiaMatrix,
    serialized_name="jaxdia.DiaMatrix",
    serialize_auxdata=_serialize_aux_data,
    deserialize_auxdata=_deserialize_aux_data,
)


def _operand(value: Any) -> Any:
    """An operand of an operation with a DiaMatrix, for the array-level layer."""
    return value._parts if isinstance(value, DiaMatrix) else value
