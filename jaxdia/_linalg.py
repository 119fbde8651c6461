"""Public linear solvers of a DiaMatrix: :func:`jacobi` and :func:`solve_banded`.

Factorizations that are kept and reused (``lu_factor``, ``cho_factor``) are in
:mod:`jaxdia._factor`. Iterative solves need nothing more: ``jax.scipy.sparse.linalg.cg``,
``gmres`` and ``bicgstab`` accept a DiaMatrix as the operator (they call ``A @ x``), and
:func:`jacobi` builds the preconditioner ``M`` they take.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax import Array

from . import _solve
from ._matrix import DiaMatrix, as_matrix


def square(A: Any, function: str) -> DiaMatrix:
    """``A``, checked to be a square DiaMatrix (``function`` names the caller)."""
    as_matrix(A, f"{function}: A")
    return square_operator(A, function)


def square_operator(A: Any, function: str) -> Any:
    """``A``, an operator with a ``shape``, checked to be square."""
    shape = tuple(A.shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"{function}: A must be square, got shape {shape}")
    return A


def jacobi(A: Any) -> jax.tree_util.Partial:
    """The Jacobi (diagonal) preconditioner ``M(v) = v / diag(A)`` of a square ``A``.

    Pass it as ``M`` to ``jax.scipy.sparse.linalg.cg``, ``gmres`` or ``bicgstab``. The
    result is a ``jax.tree_util.Partial``: callable, and a pytree, so it can be an
    argument of a jitted function. ``M`` applies to vectors of shape ``(n,)`` (or
    ``(*batch_shape, n)`` for a batched ``A``).

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
      ``M``, with ``M(v) == v / diag(A)``.

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
        square_operator(A, "jacobi")
        return _solve.inverse_diagonal_preconditioner(A.diagonal())
    if not isinstance(A, DiaMatrix):
        raise TypeError(
            "jacobi: A must be a jaxdia.DiaMatrix, a ShardedDiaMatrix or a linear operator "
            f"with @, shape and diagonal(), got {type(A).__name__}"
        )
    return _solve.jacobi_preconditioner(square(A, "jacobi")._parts)


def is_operator(A: Any) -> bool:
    """Whether ``A`` is an operator other than a DiaMatrix with ``@``, ``shape`` and
    ``diagonal()`` (a :class:`jaxdia.ShardedDiaMatrix`), as :func:`jacobi` and
    :func:`jaxdia.chebyshev` take."""
    return (
        callable(getattr(A, "diagonal", None))
        and hasattr(A, "__matmul__")
        and hasattr(A, "shape")
        and not isinstance(A, (np.ndarray, jax.Array))
    )


def solve_banded(A: DiaMatrix, b: Any) -> Array:
    """Solves ``A @ x == b`` directly, for a square banded DiaMatrix ``A``.

    ``jaxdia.lu_factor(A).solve(b)`` in one call: an LU factorization with partial
    pivoting within the band (row swaps widen the upper band of ``U`` to ``l + u``), then
    the solve, O(n l (l + u)) work for offsets within ``[-l, u]``. To solve with the same
    matrix again (time stepping, several right-hand sides arriving one by one), factor it
    once with :func:`jaxdia.lu_factor` (or :func:`jaxdia.cho_factor` for a Hermitian
    positive definite matrix) and reuse the factor.

    * On CPU, LAPACK's banded LU (``?gbtrf``/``?gbtrs``, the routines of
      ``scipy.linalg.solve_banded``), called from the compiled program on its own
      buffers, except for small systems (16 rows or fewer) and batches of 64 or more
      systems of up to 128 rows, where the ``lax.scan`` implementation below is faster. A
      program holding such a LAPACK call cannot be serialized with ``jax.export``.
    * On GPU and TPU, the same algorithm as a sequential ``lax.scan`` over the ``n``
      columns, with compile time independent of ``n``; a batch runs as one scan.
    * A tridiagonal ``A`` is solved by ``jax.lax.linalg.tridiagonal_solve`` on CPU and
      GPUs (LAPACK's ``gtsv``, cuSPARSE's ``gtsv2``; both pivot), and by the factor's
      scan on TPU (whose ``tridiagonal_solve`` does not pivot).

    The band is what the offsets span, whatever the entries: corner entries of periodic
    boundary conditions (offsets ``±(n - 1)``) make it the whole matrix and the solve
    O(n^3), far slower than ``scipy.sparse.linalg.spsolve``'s sparse LU. Solve such systems,
    and large 2-D/3-D stencils (bandwidth ``sqrt(n)`` or ``n^(2/3)``: fill-in that a
    sparse LU's reordering avoids), with ``jax.scipy.sparse.linalg.gmres``, ``bicgstab``
    or ``cg``.

    A singular matrix (an exactly zero pivot, e.g. a zero column) gives an all-NaN
    solution; no exception is raised, as none can be under ``jit``
    (:func:`jaxdia.lu_factor` raises outside ``jit``). An ill-conditioned matrix gives a
    finite solution with a small residual (partial pivoting is backward stable in
    practice) but a forward error that grows with the condition number.

    Batches follow :func:`jaxdia.matmul`'s rules: a 1-D ``b`` of length ``n`` is a
    vector; an N-D ``b`` is a stack of ``(n, k)`` right-hand sides whose batch dims
    broadcast with ``A.batch_shape``. The solve works under ``jit`` and ``vmap`` (over
    ``A.data``, ``b`` or both) and is differentiable in ``A.data`` and ``b`` (forward
    and reverse mode) by implicit differentiation: a gradient costs another solve, with
    ``A^T`` by the same stored factor, and never differentiates the LU itself.

    Args:
      A: a square DiaMatrix (possibly batched).
      b: the right-hand side(s): shape ``(n,)``, or ``(..., n, k)``.

    Returns:
      ``x``, of the broadcast batch shape and ``b``'s trailing shape, in the promoted
      dtype of ``A`` and ``b`` (16-bit floats are solved in float32 and cast back).

    Raises:
      TypeError: if ``A`` is not a DiaMatrix, or ``b`` is not numeric.
      ValueError: if ``A`` is not square, or ``b``'s shape does not fit.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([[1.0] * 4, [4.0] * 5, [2.0] * 3], offsets=[-1, 0, 2])
      >>> x = jaxdia.solve_banded(A, jnp.arange(5.0))
      >>> bool(jnp.allclose(A @ x, jnp.arange(5.0), atol=1e-5))
      True
    """
    return _solve.solve_banded(square(A, "solve_banded")._parts, b)
