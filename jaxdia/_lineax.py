"""Optional lineax integration: :class:`DiaLinearOperator`, a DiaMatrix as a lineax
operator, and :class:`BandedSolver`, a lineax solver that factors it once.

Needs the ``lineax`` extra (``pip install 'jaxdia[lineax]'``). ``jaxdia`` imports this
module only when ``jaxdia.DiaLinearOperator`` or ``jaxdia.BandedSolver`` is first used, so
jaxdia works without lineax installed.
"""

from __future__ import annotations

from typing import Any

try:
    import equinox as eqx
    import equinox.internal as eqxi
    import lineax as lx
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "jaxdia.DiaLinearOperator and jaxdia.BandedSolver need lineax; install it with "
        "`pip install 'jaxdia[lineax]'` (or `pip install lineax`)."
    ) from error

import jax
import jax.numpy as jnp

from ._geometry import diagonal_bounds
from ._linalg.factor import BandedCholesky, cholesky_unchecked, lu_unchecked
from ._matrix import DiaMatrix, as_matrix


class DiaLinearOperator(lx.AbstractLinearOperator):
    """A :class:`jaxdia.DiaMatrix` as a ``lineax`` linear operator.

    ``mv`` is the sparse product ``A @ v``; ``as_matrix`` densifies (lineax calls it only
    for dense solvers such as ``LU`` or ``Triangular``). Use it with
    ``lineax.linear_solve`` and the ``CG``, ``GMRES``, ``BiCGStab``, ``Tridiagonal`` or
    ``Diagonal`` solvers, ``AutoLinearSolver``, or :class:`jaxdia.BandedSolver` (a
    banded LU or Cholesky factorization, reusable across solves). Solves are
    differentiable with respect to ``A.data`` and the right-hand side, and the operator
    can be vmapped over.

    Structure that the static offsets prove is reported without tags: a square matrix with
    offsets within ``{0}`` is diagonal (and symmetric), within ``{-1, 0, 1}`` tridiagonal,
    all offsets ``<= 0`` lower triangular, all ``>= 0`` upper triangular. Properties of
    the values must be declared with lineax tags (unchecked, as in lineax):
    ``lineax.positive_semidefinite_tag`` (needed by ``CG``), ``symmetric_tag``,
    ``negative_semidefinite_tag``, ``unit_diagonal_tag``.

    Args:
      matrix: an unbatched DiaMatrix (vmap over the operator for a batch of matrices).
      tags: a lineax tag or an iterable of tags.

    Raises:
      TypeError: if ``matrix`` is not a DiaMatrix.
      ValueError: if ``matrix`` is batched, or tagged symmetric/semidefinite while not
        square.

    Example:
      >>> import jax.numpy as jnp
      >>> import lineax as lx
      >>> import jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(5, 5))
      >>> operator = jaxdia.DiaLinearOperator(A, lx.positive_semidefinite_tag)
      >>> solution = lx.linear_solve(operator, jnp.ones(5), lx.CG(rtol=1e-6, atol=1e-6))
      >>> [round(float(value), 3) for value in solution.value]
      [2.5, 4.0, 4.5, 4.0, 2.5]
    """

    matrix: DiaMatrix
    tags: frozenset[object] = eqx.field(static=True)

    def __init__(self, matrix: DiaMatrix, tags: Any = ()):
        as_matrix(matrix, "DiaLinearOperator: matrix")
        if matrix.batch_shape:
            raise ValueError(
                "DiaLinearOperator wraps one matrix, got a DiaMatrix of batch shape "
                f"{matrix.batch_shape}; build the operator inside jax.vmap instead."
            )
        self.matrix = matrix
        self.tags = _frozenset(tags)

    def mv(self, vector):
        return self.matrix @ vector

    def as_matrix(self):
        return self.matrix.todense()

    def transpose(self):
        if lx.is_symmetric(self):
            return self
        return DiaLinearOperator(self.matrix.T, lx.transpose_tags(self.tags))

    def in_structure(self):
        return jax.ShapeDtypeStruct((self.matrix.shape[1],), self.matrix.dtype)

    def out_structure(self):
        return jax.ShapeDtypeStruct((self.matrix.shape[0],), self.matrix.dtype)


def _frozenset(tags: Any) -> frozenset[object]:
    if isinstance(tags, (str, bytes)):
        return frozenset([tags])
    try:
        return frozenset(tags)
    except TypeError:
        return frozenset([tags])


def _square(operator: DiaLinearOperator) -> bool:
    m, n = operator.matrix.shape
    return m == n


def _band(operator: DiaLinearOperator, offset: int) -> jax.Array:
    """Diagonal ``offset`` of the matrix as a vector of its own length (zeros if unstored)."""
    A = operator.matrix
    start, stop = diagonal_bounds(offset, A.shape)
    if offset not in A.offsets:
        return jnp.zeros((max(0, stop - start),), A.dtype)
    return A.data[A.offsets.index(offset), start:stop]


@lx.linearise.register(DiaLinearOperator)
@lx.materialise.register(DiaLinearOperator)
def _(operator):
    # Already linear, and already stored (sparsely): materialising keeps it sparse.
    return operator


@lx.diagonal.register(DiaLinearOperator)
def _(operator):
    return _band(operator, 0)


@lx.tridiagonal.register(DiaLinearOperator)
def _(operator):
    return _band(operator, 0), _band(operator, -1), _band(operator, 1)


@lx.conj.register(DiaLinearOperator)
def _(operator):
    A = operator.matrix
    return DiaLinearOperator(DiaMatrix(A.data.conj(), A.offsets, A.shape), operator.tags)


@lx.is_diagonal.register(DiaLinearOperator)
def _(operator):
    return lx.diagonal_tag in operator.tags or (
        _square(operator) and set(operator.matrix.offsets) <= {0}
    )


@lx.is_tridiagonal.register(DiaLinearOperator)
def _(operator):
    return lx.tridiagonal_tag in operator.tags or (
        _square(operator) and set(operator.matrix.offsets) <= {-1, 0, 1}
    )


@lx.is_lower_triangular.register(DiaLinearOperator)
def _(operator):
    return lx.lower_triangular_tag in operator.tags or (
        _square(operator) and all(k <= 0 for k in operator.matrix.offsets)
    )


@lx.is_upper_triangular.register(DiaLinearOperator)
def _(operator):
    return lx.upper_triangular_tag in operator.tags or (
        _square(operator) and all(k >= 0 for k in operator.matrix.offsets)
    )


@lx.is_symmetric.register(DiaLinearOperator)
def _(operator):
    if lx.symmetric_tag in operator.tags or lx.is_diagonal(operator):
        return True
    # Semidefinite means Hermitian, which is symmetric only for real matrices.
    semidefinite = {lx.positive_semidefinite_tag, lx.negative_semidefinite_tag}
    return bool(semidefinite & operator.tags) and operator.matrix.dtype.kind != "c"


@lx.is_positive_semidefinite.register(DiaLinearOperator)
def _(operator):
    return lx.positive_semidefinite_tag in operator.tags


@lx.is_negative_semidefinite.register(DiaLinearOperator)
def _(operator):
    return lx.negative_semidefinite_tag in operator.tags


@lx.has_unit_diagonal.register(DiaLinearOperator)
def _(operator):
    return lx.unit_diagonal_tag in operator.tags


# -- the solver ------------------------------------------------------------------------------


class BandedSolver(lx.AbstractLinearSolver):
    """A lineax solver for a :class:`DiaLinearOperator`: a banded direct solve whose
    ``init`` factors the matrix once.

    ``init`` computes :func:`jaxdia.cho_factor` (the upper triangle) when the operator is
    tagged ``lineax.positive_semidefinite_tag``, else :func:`jaxdia.lu_factor`. Pass its
    result as ``state`` to ``lineax.linear_solve`` to reuse the factor across solves, as
    diffrax's implicit solvers do; without a ``state``, ``linear_solve`` factors on
    every call. Transposed and conjugated solves (which lineax's derivatives need) reuse
    the same factor. A factorization that fails (a singular matrix, or a tagged matrix
    that is not positive definite) reports ``lineax.RESULTS.singular`` (with
    ``throw=True``, lineax's error).

    Example:
      >>> import jax.numpy as jnp
      >>> import lineax as lx
      >>> import jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(5, 5))
      >>> operator = jaxdia.DiaLinearOperator(A)
      >>> solver = jaxdia.BandedSolver()
      >>> state = solver.init(operator, {})
      >>> solution = lx.linear_solve(operator, jnp.ones(5), solver, state=state)
      >>> [round(float(value), 3) for value in solution.value]
      [2.5, 4.0, 4.5, 4.0, 2.5]
    """

    def init(self, operator: Any, options: dict[str, Any]) -> Any:
        del options
        if not isinstance(operator, DiaLinearOperator):
            raise ValueError(
                "jaxdia.BandedSolver solves with a jaxdia.DiaLinearOperator, got "
                f"{type(operator).__name__}"
            )
        matrix = operator.matrix
        m, n = matrix.shape
        if m != n:
            raise ValueError(
                f"jaxdia.BandedSolver needs a square operator, got shape {matrix.shape}"
            )
        if lx.is_positive_semidefinite(operator):
            factor = cholesky_unchecked(matrix, lower=False)
        else:
            factor = lu_unchecked(matrix)
        return factor, eqxi.Static(False), eqxi.Static(False)

    def compute(self, state: Any, vector: jax.Array, options: dict[str, Any]) -> Any:
        del options
        factor, transposed, conjugated = state
        transposed, conjugated = transposed.value, conjugated.value
        if isinstance(factor, BandedCholesky):
            # A is Hermitian: A^T = conj(A), A^H = A.
            flip = transposed != conjugated
            solution = factor.solve(vector.conj()).conj() if flip else factor.solve(vector)
        elif conjugated and not transposed:  # conj(A) x = b
            solution = factor.solve(vector.conj()).conj()
        else:
            solution = factor.solve(vector, trans=2 if conjugated else int(transposed))
        result = lx.RESULTS.where(jnp.all(factor.ok), lx.RESULTS.successful, lx.RESULTS.singular)
        return solution, result, {}

    def transpose(self, state: Any, options: dict[str, Any]) -> Any:
        factor, transposed, conjugated = state
        return (factor, eqxi.Static(not transposed.value), conjugated), options

    def conj(self, state: Any, options: dict[str, Any]) -> Any:
        factor, transposed, conjugated = state
        return (factor, transposed, eqxi.Static(not conjugated.value)), options

    def assume_full_rank(self) -> bool:
        return True
