"""Banded direct solves in one call: :func:`solve_banded` (a one-shot LU unless the plan
stores a factor), :func:`solveh_banded` (a Cholesky factor, then its solve) and
:func:`factorized` (SciPy's name: a function solving with a stored LU factor), over the
factors of :mod:`jaxdia._linalg.factor`.
"""

from __future__ import annotations

import jax
from jax import Array
from jax.typing import ArrayLike

from .._matrix import DiaMatrix, as_square_matrix
from . import banded
from .factor import cho_factor, cho_solve, lu_factor, lu_solve
from .plan import Use, choose


def solve_banded(
    A: DiaMatrix,
    b: ArrayLike,
    *,
    method: str = "auto",
    overwrite_ab: bool = False,
    overwrite_b: bool = False,
    check_finite: bool = True,
) -> Array:
    """Solves ``A @ x == b`` directly, for a square banded DiaMatrix ``A``.

    ``jaxdia.lu_factor(A).solve(b)`` in one call: an LU factorization with partial
    pivoting within the band (row swaps widen the upper band of ``U`` to ``l + u``), then
    the solve, O(n l (l + u)) work for offsets within ``[-l, u]``. To solve with the same
    matrix again (time stepping, several right-hand sides arriving one by one), factor it
    once with :func:`jaxdia.lu_factor` (or :func:`jaxdia.cho_factor` for a Hermitian
    positive definite matrix) and reuse the factor.

    * On CPU, LAPACK's banded LU (``?gbtrf``/``?gbtrs``, the routines of
      ``scipy.linalg.solve_banded``; ``gtsv`` for a tridiagonal ``A``), called from the
      compiled program on its own buffers, a batch (``vmap`` or ``A.batch_shape``) in
      one call; for a band wider than tridiagonal, systems of 16 rows or fewer and
      batches of 64 or more systems of up to 128 rows run a ``lax.scan`` LU (the
      systems side by side) instead. A program
      holding such a LAPACK call cannot be serialized with ``jax.export``.
    * On GPUs, ``jax.lax.linalg.tridiagonal_solve`` (cuSPARSE's ``gtsv2``, which pivots)
      for a tridiagonal ``A``, block cyclic reduction for other bands; on TPU block cyclic
      reduction: O(log n) sequential steps, no loop over the rows. Cyclic reduction
      interchanges rows only within its blocks; its solve checks the backward error and
      refines, and a system it cannot solve is solved by LAPACK on CPU and is NaN on
      GPU/TPU (see :func:`jaxdia.lu_factor`).

    Periodic boundary conditions (corner diagonals at offsets near ``±n``, such as
    ``±(n - 1)``) are solved as a band plus a low-rank correction, as :func:`lu_factor`
    says: about the cost of a banded solve. Large 2-D/3-D stencils (bandwidth ``sqrt(n)``
    or ``n^(2/3)``: fill-in that a sparse LU's reordering avoids) are better solved with
    :func:`jaxdia.cg`/:func:`jaxdia.bicgstab` and :func:`jaxdia.multigrid`.

    A singular matrix (an exactly zero pivot, e.g. a zero column) gives an all-NaN
    solution; no exception is raised, as none can be under ``jit``
    (:func:`jaxdia.lu_factor` raises outside ``jit``). Under ``jit`` so does a periodic
    matrix whose band without its corners is singular or too ill-conditioned for the
    corner correction (outside ``jit`` the whole band is factored instead; see
    :func:`jaxdia.lu_factor`). An ill-conditioned matrix gives a finite solution with a
    small residual (partial pivoting is backward stable in practice) but a forward error
    that grows with the condition number.

    Batches follow :func:`jaxdia.matmul`'s rules: a 1-D ``b`` of length ``n`` is a
    vector; an N-D ``b`` is a stack of ``(n, k)`` right-hand sides whose batch dims
    broadcast with ``A.batch_shape``. The solve works under ``jit`` and ``vmap`` (over
    ``A.data``, ``b`` or both) and is differentiable in ``A.data`` and ``b`` (forward
    and reverse mode) by implicit differentiation: a gradient costs another solve, with
    ``A^T`` by the same stored factor, and never differentiates the LU itself.

    Args:
      A: a square DiaMatrix (possibly batched).
      b: the right-hand side(s): shape ``(n,)``, or ``(..., n, k)``.
      method: which implementation solves, as for :func:`jaxdia.lu_factor`
        (``"lapack"`` and ``"scan"`` factor ``A`` into LAPACK's stored layout first).
      overwrite_ab: unused (SciPy's signature): JAX arrays are never overwritten.
      overwrite_b: unused, likewise.
      check_finite: outside ``jit``, refuse a NaN or inf entry of ``A`` first, as
        SciPy's ``check_finite`` (a pass over ``A.data``); False skips that pass: a
        non-finite entry then goes into the factorization unchecked, as under ``jit``.

    Returns:
      ``x``, of the broadcast batch shape and ``b``'s trailing shape, in the promoted
      dtype of ``A`` and ``b`` (16-bit floats are solved in float32 and cast back).

    Raises:
      TypeError: if ``A`` is not a DiaMatrix, or ``b`` is not numeric.
      ValueError: if ``A`` is not square, ``b``'s shape does not fit, ``method`` is not
        one of :func:`jaxdia.lu_factor`'s, or (``check_finite``, outside ``jit``) ``A``
        holds a NaN or inf.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([[1.0] * 4, [4.0] * 5, [2.0] * 3], offsets=[-1, 0, 2])
      >>> x = jaxdia.solve_banded(A, jnp.arange(5.0))
      >>> bool(jnp.allclose(A @ x, jnp.arange(5.0), atol=1e-5))
      True
    """
    A = as_square_matrix(A, "solve_banded")
    del overwrite_ab, overwrite_b
    plan = choose(A.offsets, A.shape[0], use=Use.SOLVE, method=method, function="solve_banded")
    return banded.solve_once(A._parts, b, plan, check_finite=bool(check_finite))


def solveh_banded(
    A: DiaMatrix,
    b: ArrayLike,
    *,
    lower: bool = False,
    method: str = "auto",
    overwrite_ab: bool = False,
    overwrite_b: bool = False,
    check_finite: bool = True,
) -> Array:
    """Solves ``A @ x == b`` for a Hermitian positive definite banded ``A``, in one call.

    SciPy's name: :func:`cho_factor` then :func:`cho_solve` (factor once with those to
    solve many times). Reads the upper triangle of ``A`` unless ``lower``.

    Args:
      A: a square DiaMatrix (possibly batched).
      b: the right-hand side(s): shape ``(n,)``, or ``(..., n, k)``.
      lower: read the lower triangle instead.
      method: which implementation factors ``A``, as for :func:`lu_factor`.
      overwrite_ab: unused (SciPy's signature): JAX arrays are never overwritten.
      overwrite_b: unused, likewise.
      check_finite: unused: outside ``jit`` the factor refuses a NaN or inf entry
        whatever it says (it reads every entry anyway), as SciPy's default does.

    Returns:
      ``x``, as :func:`cho_solve` returns it.

    Raises:
      TypeError, ValueError: as :func:`cho_factor` and :func:`cho_solve`.
      numpy.linalg.LinAlgError: outside ``jit``, if ``A`` is not positive definite (under
        ``jit``, the solution is NaN).

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(3, 3))
      >>> x = jaxdia.solveh_banded(A, jnp.array([1.0, 0.0, 1.0]))
      >>> [round(float(value), 4) for value in x]
      [1.0, 1.0, 1.0]
    """
    del overwrite_ab, overwrite_b, check_finite
    return cho_solve(cho_factor(A, lower=lower, method=method), b)


def factorized(A: DiaMatrix, *, method: str = "auto") -> jax.tree_util.Partial:
    """A function solving ``A @ x == b``, with ``A`` factored once (SciPy's name).

    ``factorized(A)(b)`` is ``lu_factor(A).solve(b)``. The result is a
    ``jax.tree_util.Partial``: callable, and a pytree holding the factor, so it can be an
    argument or a result of a jitted function.

    Args:
      A: a square DiaMatrix (possibly batched).
      method: which implementation factors ``A``, as for :func:`lu_factor`.

    Returns:
      ``solve``, with ``solve(b)`` as :func:`lu_solve` (``solve(b, trans)`` too).

    Raises:
      TypeError, ValueError, numpy.linalg.LinAlgError: as :func:`lu_factor`.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> solve = jaxdia.factorized(jaxdia.diags([1.0, 3.0], offsets=[-1, 0], shape=(3, 3)))
      >>> solve(jnp.array([3.0, 4.0, 4.0]))
      Array([1., 1., 1.], dtype=float32)
    """
    return jax.tree_util.Partial(lu_solve, lu_factor(A, method=method))
