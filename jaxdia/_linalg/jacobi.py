"""The Jacobi preconditioner ``M(v) = v / diag(A)``: :func:`jacobi` and :class:`Jacobi`.

Its one step of setup, the inverse of the main diagonal, works for a DiaMatrix (the
stored diagonal, possibly batched) and for any operator whose ``diagonal()`` is laid out
like its vectors (a :class:`jaxdia.ShardedDiaMatrix`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .._checks import check_nonzero_diagonal, check_square
from .._matrix import DiaMatrix, as_square_matrix
from .._parts import DiaParts
from .._pytree import Immutable
from .._scipy_operator import ScipyOperator
from .._shard import ShardedDiaMatrix
from .._typing import ArrayLike
from .smoothers import is_operator


@jax.tree_util.register_pytree_with_keys_class
class Jacobi(Immutable, ScipyOperator):
    """The Jacobi (diagonal) preconditioner ``M(v) = v / diag(A)``, what
    :func:`jaxdia.jacobi` returns.

    Callable on vectors laid out like ``inverse_diagonal`` (``(n,)``, or
    ``(*batch_shape, n)``; leading dims of ``v`` broadcast), a pytree (its leaf is the
    inverse diagonal), so it can be an argument or a result of a jitted function, and an
    operator with SciPy's ``LinearOperator`` protocol (``shape``, ``dtype``, ``matvec``,
    ``rmatvec``, ``matmat``, ``rmatmat``), so it is SciPy's ``M=`` too.

    Attributes:
      inverse_diagonal: ``1 / diag(A)``, shape ``(*batch_shape, n)``.
      shape, dtype, batch_shape: ``(n, n)``, the dtype and the batch dims of
        ``inverse_diagonal``.

    Example:
      >>> import numpy as np, scipy.sparse.linalg as spla, jaxdia
      >>> A = jaxdia.diags([-1.0, 4.0, -1.0], offsets=[-1, 0, 1], shape=(50, 50))
      >>> M = jaxdia.jacobi(A)
      >>> M.shape, M.inverse_diagonal[:2]
      ((50, 50), Array([0.25, 0.25], dtype=float32))
      >>> x, info = spla.cg(A, np.ones(50), M=M)  # SciPy's solvers take it as M
      >>> info
      0
    """

    # __weakref__: a preconditioner is a function, which jax.jit(M) refers to weakly.
    __slots__ = ("inverse_diagonal", "__weakref__")
    _leaves = ("inverse_diagonal",)
    _name = "Jacobi"
    inverse_diagonal: Array

    def __init__(self, inverse_diagonal: ArrayLike):
        self._assign(inverse_diagonal)

    def __call__(self, v: ArrayLike) -> Array:
        return self.inverse_diagonal * v

    @property
    def shape(self) -> tuple[int, int]:
        n = self.inverse_diagonal.shape[-1]
        return n, n

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.inverse_diagonal.dtype)

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.inverse_diagonal.shape[:-1])

    def _columns(self, x: Array | np.ndarray, adjoint: bool) -> Array:
        inverse = jnp.conj(self.inverse_diagonal) if adjoint else self.inverse_diagonal
        return inverse * x if x.ndim == 1 else inverse[:, None] * x

    def __repr__(self) -> str:
        batch = f", batch_shape={self.batch_shape}" if self.batch_shape else ""
        return f"Jacobi(shape={self.shape}, dtype={self.dtype.name}{batch})"


def jacobi(A: DiaMatrix | ShardedDiaMatrix) -> Jacobi:
    """The Jacobi (diagonal) preconditioner ``M(v) = v / diag(A)`` of a square ``A``.

    Pass it as ``M`` to :func:`jaxdia.cg` or :func:`jaxdia.bicgstab`, to
    ``jax.scipy.sparse.linalg``'s ``cg``, ``gmres`` or ``bicgstab``, or to SciPy's
    solvers. The result is a :class:`jaxdia.Jacobi`: callable, a pytree (it can be an
    argument of a jitted function), and a SciPy ``LinearOperator``. ``M`` applies to
    vectors of shape ``(n,)`` (or ``(*batch_shape, n)`` for a batched ``A``).

    ``A`` may also be a :class:`jaxdia.ShardedDiaMatrix` (from :func:`jaxdia.shard`), or
    any linear operator whose ``diagonal()`` returns its main diagonal laid out like the
    vectors it multiplies: ``M`` then applies to those vectors (for a sharded matrix,
    padded and sharded; ``M`` is elementwise, so it needs no communication and keeps
    their sharding and zero padding rows).

    For ``cg`` the preconditioner must be Hermitian positive definite, which the Jacobi
    preconditioner of a Hermitian positive definite ``A`` is.

    Args:
      A: a square DiaMatrix, possibly batched; or a ShardedDiaMatrix (or an operator
        with ``@`` and ``diagonal()``).

    Returns:
      ``M``, a :class:`jaxdia.Jacobi` with ``M(v) == v / diag(A)``.

    Raises:
      TypeError: if ``A`` is neither a DiaMatrix nor an operator with ``diagonal()``.
      ValueError: if ``A`` is not square, or (when ``A.data`` is concrete) its diagonal
        holds a zero. Under ``jit``/``vmap`` the diagonal cannot be checked and a zero
        entry gives ``inf`` in ``M(v)``.

    Example:
      >>> import jax.numpy as jnp
      >>> import jax.scipy.sparse.linalg as jsl
      >>> import jaxdia
      >>> n = 50
      >>> A = jaxdia.diags([-1.0, 2.5, -1.0], offsets=[-1, 0, 1], shape=(n, n))
      >>> b = jnp.ones(n)
      >>> x, _ = jsl.cg(A, b, M=jaxdia.jacobi(A), tol=1e-6)
      >>> bool(jnp.linalg.norm(A @ x - b) < 1e-4 * jnp.linalg.norm(b))
      True
    """
    if not isinstance(A, DiaMatrix) and is_operator(A):
        check_square(A, "jacobi")
        return _inverse_diagonal(A.diagonal())
    if not isinstance(A, DiaMatrix):
        raise TypeError(
            "jacobi: A must be a jaxdia.DiaMatrix, a ShardedDiaMatrix or a linear operator "
            f"with @, shape and diagonal(), got {type(A).__name__}"
        )
    return _jacobi_of(as_square_matrix(A, "jacobi")._parts)


def _main_diagonal(A: DiaParts) -> Array:
    """The main diagonal of a square ``A``, shape ``(*batch_shape, n)`` (zeros if unstored)."""
    if 0 not in A.offsets:
        return jnp.zeros((*A.batch_shape, A.shape[1]), A.dtype)
    return A.data[..., A.offsets.index(0), :]


def _jacobi_of(A: DiaParts) -> Jacobi:
    """``M(v) = v / diag(A)`` for a square ``A`` (see :func:`jaxdia.jacobi`).

    Raises a ValueError naming the zeros of a concrete diagonal.
    """
    stored = "" if 0 in A.offsets else " (A stores no main diagonal)"
    return _inverse_diagonal(_main_diagonal(A), stored)


def _inverse_diagonal(diagonal: Array, hint: str = "") -> Jacobi:
    """``M(v) = v / diagonal``, laid out (and sharded) as ``diagonal`` is.

    Raises a ValueError naming the zeros of a concrete ``diagonal`` (``hint`` follows the
    message).
    """
    check_nonzero_diagonal(
        diagonal, "jacobi", f"{hint}; the Jacobi preconditioner 1/diag(A) does not exist."
    )
    return Jacobi(1 / diagonal)
