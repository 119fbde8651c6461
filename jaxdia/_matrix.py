"""The :class:`DiaMatrix` pytree: SciPy's DIA layout with static offsets.

Here: the class, its construction and checks, its conversions and the helpers other modules
check matrices with. Its thin methods come in groups, a module a concern
(``_matrix_base.py`` says which); the work is done at the array level, on ``DiaParts``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import numpy.typing as npt
from jax import Array, export

from . import _convert
from ._checks import check_square
from ._matrix_elementwise import Elementwise
from ._matrix_operator import Operator
from ._matrix_reductions import Reductions
from ._matrix_structure import Structure
from ._parts import check_layout, data_shape, data_tail, reads_data
from ._scipy_names import SCIPY_EQUIVALENTS
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
class DiaMatrix(Elementwise, Reductions, Structure, Operator):
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
      data: array-like of shape ``(..., n_diags, width)`` of a floating or complex dtype;
        integer and bool data become JAX's default float dtype (float64 with x64 on,
        float32 otherwise), as SciPy's solvers upcast them.
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

    if not TYPE_CHECKING:  # hidden from type checkers: they would accept any attribute

        def __getattr__(self, name: str) -> Any:
            # Only reached for names DiaMatrix lacks: point SciPy's names to jaxdia's.
            hint = SCIPY_EQUIVALENTS.get(name)
            message = f"'DiaMatrix' object has no attribute {name!r}"
            raise AttributeError(f"{message}; for SciPy's {name}, use {hint}" if hint else message)

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

    # -- what combines the groups ----------------------------------------------------------

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


# ``jax.export``: a serialized Exported that takes or returns a DiaMatrix names it so.
export.register_pytree_node_serialization(
    DiaMatrix,
    serialized_name="jaxdia.DiaMatrix",
    serialize_auxdata=lambda aux: json.dumps(aux).encode(),  # (offsets, shape)
    deserialize_auxdata=lambda serialized: tuple(map(tuple, json.loads(serialized))),
)
