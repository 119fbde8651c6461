"""Optional lineax integration: :class:`DiaLinearOperator`, a DiaMatrix as a lineax
operator; :class:`BandedSolver`, a lineax solver that factors it (or any banded operator,
materialised by compressed products) once; :func:`offsets_tag`, the tag that tells it
an operator's offsets.

Needs the ``lineax`` extra (``pip install 'jaxdia[lineax]'``). ``jaxdia`` imports this
module only when one of these names is first used, so jaxdia works without lineax
installed.
"""

from __future__ import annotations

import math
from typing import Any, TypeAlias

try:
    import equinox as eqx
    import equinox.internal as eqxi
    import lineax as lx
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "jaxdia.DiaLinearOperator, BandedSolver and offsets_tag need lineax; install it with "
        "`pip install 'jaxdia[lineax]'` (or `pip install lineax`)."
    ) from error

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import as_offsets, check_distinct, static_int
from ._geometry import diagonal_bounds
from ._jacobian import dia_from_linear, pattern
from ._linalg.factor import BandedCholesky, BandedLU, factor_unchecked
from ._linalg.krylov import bicgstab, cg
from ._linalg.lstsq import LeastSquares, factor_least_squares
from ._linalg.multigrid import Multigrid, multigrid
from ._linalg.plan import choose
from ._linalg.sharded_multigrid import ShardedMultigrid
from ._matrix import DiaMatrix, as_matrix
from ._pytree import StaticBooleans
from ._typing import ArrayLike, Grid, Offsets


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

    def __init__(self, matrix: DiaMatrix, tags: object = ()):
        as_matrix(matrix, "DiaLinearOperator: matrix")
        if matrix.batch_shape:
            raise ValueError(
                "DiaLinearOperator wraps one matrix, got a DiaMatrix of batch shape "
                f"{matrix.batch_shape}; build the operator inside jax.vmap instead."
            )
        self.matrix = matrix
        self.tags = _frozenset(tags)

    def mv(self, vector: jax.Array) -> jax.Array:
        return self.matrix @ vector

    def as_matrix(self) -> jax.Array:
        return self.matrix.todense()

    def transpose(self) -> DiaLinearOperator:
        if lx.is_symmetric(self):
            return self
        return DiaLinearOperator(self.matrix.T, lx.transpose_tags(self.tags))

    def in_structure(self) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((self.matrix.shape[1],), self.matrix.dtype)

    def out_structure(self) -> jax.ShapeDtypeStruct:
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


def _static_mask(mask: ArrayLike | None, function: str) -> StaticBooleans | None:
    if mask is None:
        return None
    array = np.asarray(mask)
    if array.dtype != np.bool_ or array.ndim != 2:
        raise ValueError(
            f"{function}: mask must be a 2-D boolean array of shape (len(offsets), n), got "
            f"{array.dtype} of shape {array.shape}"
        )
    array = array.copy()
    array.setflags(write=False)
    return StaticBooleans(array)


def _static_offsets(offsets: Offsets, function: str) -> tuple[int, ...]:
    return check_distinct(as_offsets(offsets, f"{function}: offsets"))


class OffsetsTag:
    """A lineax tag: the operator's matrix is banded, with these diagonals; see
    :func:`jaxdia.offsets_tag`."""

    __slots__ = ("offsets", "mask")

    def __init__(self, offsets: tuple[int, ...], mask: StaticBooleans | None):
        self.offsets: tuple[int, ...] = offsets
        self.mask: StaticBooleans | None = mask

    def __hash__(self) -> int:
        return hash((OffsetsTag, self.offsets, self.mask))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, OffsetsTag)
            and self.offsets == other.offsets
            and self.mask == other.mask
        )

    def __repr__(self) -> str:
        masked = ", mask=..." if self.mask is not None else ""
        return f"jaxdia.offsets_tag({self.offsets}{masked})"


def offsets_tag(offsets: Offsets, mask: ArrayLike | None = None) -> OffsetsTag:
    """A lineax tag saying that an operator's matrix has (at most) these diagonals.

    :class:`jaxdia.BandedSolver` without ``offsets`` reads it from the operator's tags.
    Tags travel with an operator, so one tag given to ``optimistix.root_find(...,
    tags=...)`` reaches both the solver's linear solves and those of its adjoint
    (``optimistix.ImplicitAdjoint(linear_solver=jaxdia.BandedSolver())``, the
    gradient's solves with the transposed Jacobian). lineax drops tags it does not
    know when it transposes an operator, which the solver does not need: it transposes
    its factor.

    Args:
      offsets: the diagonals (static ints, distinct, any order).
      mask: optional structural zeros, as for :func:`jaxdia.jacobian`.

    Returns:
      A hashable tag, equal for equal offsets and masks.

    Raises:
      ValueError: for duplicate offsets or a mask that is not a 2-D boolean array.

    Example:
      >>> import jax.numpy as jnp
      >>> import lineax as lx
      >>> import jaxdia
      >>> def residual(u):
      ...     padded = jnp.pad(u, 1)
      ...     return 2 * u - padded[:-2] - padded[2:] + u**3 - 1
      >>> tag = jaxdia.offsets_tag((-1, 0, 1))
      >>> operator = lx.JacobianLinearOperator(lambda u, _: residual(u), jnp.ones(6), tags=tag)
      >>> solution = lx.linear_solve(operator, jnp.ones(6), jaxdia.BandedSolver())
      >>> bool(jnp.allclose(operator.mv(solution.value), 1.0, atol=1e-5))
      True
    """
    return OffsetsTag(_static_offsets(offsets, "offsets_tag"), _static_mask(mask, "offsets_tag"))


#: A pytree's structure as static data: its treedef (``jax.tree_util.PyTreeDef``, which
#: JAX does not type for checkers) and its leaves' shapes.
_Structure: TypeAlias = tuple[Any, tuple[tuple[int, ...], ...]]
#: The input and output structures of an operator, as static state.
_Structures: TypeAlias = eqxi.Static[tuple[_Structure, _Structure]]
#: BandedSolver's state: the factor (a least-squares one for a tall operator), whether
#: solves are transposed and conjugated, and the operator's structures.
_BandedState: TypeAlias = tuple[
    BandedLU | BandedCholesky | LeastSquares, eqxi.Static[bool], eqxi.Static[bool], _Structures
]
#: MultigridSolver's state: the matrix, its preconditioner, whether it is symmetric and
#: whether solves are transposed, and the operator's structures.
_MultigridState: TypeAlias = tuple[
    DiaMatrix, Multigrid | ShardedMultigrid, eqxi.Static[bool], eqxi.Static[bool], _Structures
]


def _structure(tree: Any) -> _Structure:
    """``(treedef, shapes)`` of a pytree of arrays or ShapeDtypeStructs (static data)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, tuple(tuple(leaf.shape) for leaf in leaves)


def _ravel(tree: Any) -> jax.Array:
    leaves = jax.tree_util.tree_leaves(tree)
    if len(leaves) == 1:
        return jnp.ravel(leaves[0])
    return jnp.concatenate([jnp.ravel(leaf) for leaf in leaves])


def _unravel(vector: jax.Array, structure: _Structure) -> Any:
    treedef, shapes = structure
    sizes = [math.prod(shape) for shape in shapes]
    pieces = jnp.split(vector, np.cumsum(sizes)[:-1].tolist()) if len(sizes) > 1 else [vector]
    return treedef.unflatten([piece.reshape(shape) for piece, shape in zip(pieces, shapes)])


def _vector_dtype(structure: Any, function: str, side: str) -> np.dtype:
    dtypes = {np.dtype(leaf.dtype) for leaf in jax.tree_util.tree_leaves(structure)}
    if len(dtypes) != 1:
        raise ValueError(
            f"{function}: the operator's {side} structure must hold arrays of one dtype, got "
            f"{sorted(d.name for d in dtypes)}"
        )
    return dtypes.pop()


def _offsets_of(
    operator: lx.AbstractLinearOperator,
    offsets: tuple[int, ...] | None,
    mask: StaticBooleans | None,
    solver: str,
) -> tuple[tuple[int, ...], StaticBooleans | None]:
    """The solver's offsets and mask, else those of the operator's offsets tag."""
    if offsets is not None:
        return offsets, mask
    tags = [tag for tag in getattr(operator, "tags", ()) if isinstance(tag, OffsetsTag)]
    if len(tags) != 1:
        raise ValueError(
            f"jaxdia.{solver} solves with a jaxdia.DiaLinearOperator, or with any square "
            f"operator given its offsets: {solver}(offsets=...) or a jaxdia.offsets_tag(...) "
            f"among its tags; got {type(operator).__name__} "
            + ("with several offsets tags" if tags else "without offsets")
        )
    return tags[0].offsets, tags[0].mask


def _size(structure: Any) -> int:
    return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(structure))


def _check_shape(m: int, n: int, tall: bool, solver: str) -> None:
    if m == n or (tall and m > n):
        return
    tall_too = (
        " (or a tall one, more outputs than inputs, solved in the least-squares sense; an "
        "underdetermined system has no unique solution)"
        if tall
        else ""
    )
    raise ValueError(
        f"jaxdia.{solver} needs a square operator, got {m} outputs for {n} inputs{tall_too}"
    )


def _damping_rows(in_structure: Any, out_structure: Any) -> int | None:
    """``m`` where the operator's output is a pair ``(J y, c y)`` (``J`` with ``m`` rows,
    ``c y`` of the input's structure): the operator is ``[J; c I]``, whose lower block is
    the diagonal at offset ``-m`` (optimistix's Levenberg-Marquardt solves with it)."""
    if not (isinstance(out_structure, tuple) and len(out_structure) == 2):
        return None
    if _structure(out_structure[1]) != _structure(in_structure):
        return None
    return _size(out_structure[0])


def _as_dia(
    operator: lx.AbstractLinearOperator,
    offsets: tuple[int, ...] | None,
    mask: StaticBooleans | None,
    chunk_size: int | None,
    solver: str,
    tall: bool = False,
) -> tuple[DiaMatrix, np.ndarray | None]:
    """The operator's matrix as a DiaMatrix, square (or with more rows than columns if
    ``tall``): a DiaLinearOperator's as it is, any other operator's materialised from one
    product per colour of its pattern. A tall operator whose output is ``(J y, c y)``
    (see :func:`_damping_rows`) has the offsets of ``J`` and the diagonal ``-m``. Also
    returns the mask of its structural zeros (rows in the order of its offsets), if any."""
    if isinstance(operator, DiaLinearOperator):
        _check_shape(*operator.matrix.shape, tall, solver)
        return operator.matrix, None
    in_structure, out_structure = operator.in_structure(), operator.out_structure()
    dtype = _vector_dtype(in_structure, solver, "input")
    _vector_dtype(out_structure, solver, "output")
    n, m = _size(in_structure), _size(out_structure)
    _check_shape(m, n, tall, solver)
    offsets, mask = _offsets_of(operator, offsets, mask, solver)
    damping_rows = _damping_rows(in_structure, out_structure) if m > n else None
    if damping_rows is not None and -damping_rows not in offsets:
        # J's diagonals hold nothing in the damping rows, the damping diagonal nothing else.
        rows = np.arange(n)[None, :] - np.asarray(offsets)[:, None]
        in_j = (rows < damping_rows) & (mask.array if mask is not None else True)
        offsets = (*offsets, -damping_rows)
        mask = StaticBooleans(np.concatenate([in_j, np.ones((1, n), bool)]))
    linear = lx.linearise(operator)  # the primal computed once, not once per product
    structure = _structure(in_structure)

    def product(vector: jax.Array) -> jax.Array:
        return _ravel(linear.mv(_unravel(vector, structure)))

    structure_ = pattern(offsets, (m, n), None if mask is None else mask.array, solver)
    matrix = dia_from_linear(product, structure_, dtype, chunk_size=chunk_size)
    aligned = matrix.offsets == structure_.offsets
    return matrix, (structure_.mask if aligned else None)


def _structures(operator: lx.AbstractLinearOperator) -> _Structures:
    """The operator's input and output structures, as static state."""
    return eqxi.Static((_structure(operator.in_structure()), _structure(operator.out_structure())))


def _chunk_size(chunk_size: int | None, solver: str) -> int | None:
    if chunk_size is None:
        return None
    chunk_size = static_int(chunk_size, f"{solver}: chunk_size")
    if chunk_size < 1:
        raise ValueError(f"{solver}: chunk_size must be a positive int, got {chunk_size}")
    return chunk_size


class BandedSolver(lx.AbstractLinearSolver[_BandedState]):
    """A lineax solver that factors a banded operator once: a banded LU (or Cholesky)
    factor in ``init``, reused by every solve with its state.

    A :class:`DiaLinearOperator` is factored as it is. Any other square operator (the
    ``FunctionLinearOperator`` that ``optimistix.Newton`` builds, the linearized
    ``JacobianLinearOperator`` of ``optimistix.Chord`` and of diffrax's implicit solvers,
    a ``MatrixLinearOperator``) is first materialised into a DiaMatrix with the given
    ``offsets`` (or those of a :func:`jaxdia.offsets_tag` among its tags), from one
    product ``operator.mv(seed)`` per colour of the pattern, as :func:`jaxdia.jacobian`
    does: 3 products for a tridiagonal operator, 5 or 6 for a 2-D 5-point stencil,
    whatever ``n``. An operator on a pytree or an N-D array is taken as the matrix of
    its flattened vectors (leaves in order, each in C order).

    ``init`` computes :func:`jaxdia.cho_factor` (the upper triangle) when
    ``positive_definite`` is set or the operator is tagged
    ``lineax.positive_semidefinite_tag``, else :func:`jaxdia.lu_factor`. Pass its
    result as ``state`` to ``lineax.linear_solve`` to reuse the factor across solves, as
    ``optimistix.Chord`` and diffrax's ``VeryChord`` do (one materialisation and one
    factorization per Jacobian); without a ``state`` (``optimistix.Newton``),
    ``linear_solve`` materialises and factors on every call. Transposed and conjugated
    solves (which lineax's derivatives need) reuse the same factor. A factorization that
    fails (a singular matrix, or one that is not positive definite) reports
    ``lineax.RESULTS.singular`` (with ``throw=True``, lineax's error).

    A tall operator (more outputs ``m`` than inputs ``n``: a Jacobian of
    ``optimistix.least_squares`` with ``GaussNewton``) is solved in the least-squares
    sense, as :func:`jaxdia.lstsq_banded` solves (the banded normal equations' Cholesky
    and two refinement steps; ``mask``'s structural zeros keep their band narrow), with
    lineax's pseudoinverse contract: transposed solves give the minimum-norm solution,
    so derivatives and adjoints work. An operator whose output is a pair ``(J y, c y)``
    (``LevenbergMarquardt``'s ``[J; sqrt(lambda) I]``) is read with the offsets of ``J``
    plus its damping diagonal. A rank-deficient (or, for this method, too
    ill-conditioned) tall operator reports ``lineax.RESULTS.singular``.

    Entries of the operator outside the offsets add into the entries of their colour:
    check a new operator once with :func:`jaxdia.jacobian`'s ``check=True``.

    Args:
      offsets: the diagonals of the operator's matrix (static ints, any order); None:
        only a DiaLinearOperator, or an operator tagged with
        :func:`jaxdia.offsets_tag`.
      mask: optional structural zeros, as for :func:`jaxdia.jacobian`.
      positive_definite: the matrix is Hermitian positive definite (unchecked): factor
        by Cholesky, at half the work of LU.
      chunk_size: materialise with at most this many products at once (see
        :func:`jaxdia.jacobian`).

    Raises:
      ValueError: for duplicate offsets or a malformed mask; in ``init``, for an
        operator with fewer outputs than inputs, no offsets, or mixed dtypes.

    Example:
      >>> import jax
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
      >>> # Any square operator, given its offsets (optimistix.Newton hands the solver a
      >>> # FunctionLinearOperator like this one: docs/nonlinear.md).
      >>> vector = jax.ShapeDtypeStruct((5,), jnp.float32)
      >>> laplacian = lx.FunctionLinearOperator(lambda v: A @ v, vector)
      >>> solve = jax.jit(lambda b: lx.linear_solve(laplacian, b, jaxdia.BandedSolver((-1, 0, 1))))
      >>> [round(float(value), 3) for value in solve(jnp.ones(5)).value]
      [2.5, 4.0, 4.5, 4.0, 2.5]
    """

    offsets: tuple[int, ...] | None = eqx.field(static=True)
    mask: StaticBooleans | None = eqx.field(static=True)
    positive_definite: bool = eqx.field(static=True)
    chunk_size: int | None = eqx.field(static=True)

    def __init__(
        self,
        offsets: Offsets | None = None,
        *,
        mask: ArrayLike | None = None,
        positive_definite: bool = False,
        chunk_size: int | None = None,
    ):
        self.offsets = None if offsets is None else _static_offsets(offsets, "BandedSolver")
        if mask is not None and offsets is None:
            raise ValueError("BandedSolver: a mask needs offsets (the rows of the mask)")
        self.mask = _static_mask(mask, "BandedSolver")
        self.positive_definite = bool(positive_definite)
        self.chunk_size = _chunk_size(chunk_size, "BandedSolver")

    def init(self, operator: lx.AbstractLinearOperator, options: dict[str, Any]) -> _BandedState:
        del options
        matrix, mask = _as_dia(
            operator, self.offsets, self.mask, self.chunk_size, "BandedSolver", tall=True
        )
        m, n = matrix.shape
        if m > n:
            factor = factor_least_squares(matrix, None if mask is None else np.asarray(mask))
        else:  # a positive definite matrix: the Cholesky factor of its upper triangle
            definite = self.positive_definite or lx.is_positive_semidefinite(operator)
            plan = choose(matrix.offsets, n, False if definite else None, function="BandedSolver")
            factor = factor_unchecked(matrix, plan)
        return factor, eqxi.Static(False), eqxi.Static(False), _structures(operator)

    def compute(
        self, state: _BandedState, vector: Any, options: dict[str, Any]
    ) -> tuple[Any, lx.RESULTS, dict[str, Any]]:
        del options
        factor, transposed, conjugated, structures = state
        transposed, conjugated = transposed.value, conjugated.value
        vector = _ravel(vector)
        ok = factor.ok
        if isinstance(factor, LeastSquares):
            solution = _least_squares_solve(factor, vector, transposed, conjugated)
        elif isinstance(factor, BandedCholesky):
            # A is Hermitian: A^T = conj(A), A^H = A.
            flip = transposed != conjugated
            solution = factor.solve(vector.conj()).conj() if flip else factor.solve(vector)
        elif conjugated and not transposed:  # conj(A) x = b
            solution = factor.solve(vector.conj()).conj()
        else:
            solution = factor.solve(vector, trans=2 if conjugated else int(transposed))
        in_structure, out_structure = structures.value
        solution = _unravel(solution, out_structure if transposed else in_structure)
        result = lx.RESULTS.where(jnp.all(ok), lx.RESULTS.successful, lx.RESULTS.singular)
        return solution, result, {}

    def transpose(
        self, state: _BandedState, options: dict[str, Any]
    ) -> tuple[_BandedState, dict[str, Any]]:
        factor, transposed, conjugated, structures = state
        return (factor, eqxi.Static(not transposed.value), conjugated, structures), options

    def conj(
        self, state: _BandedState, options: dict[str, Any]
    ) -> tuple[_BandedState, dict[str, Any]]:
        factor, transposed, conjugated, structures = state
        return (factor, transposed, eqxi.Static(not conjugated.value), structures), options

    def assume_full_rank(self) -> bool:
        return True


def _least_squares_solve(
    problem: LeastSquares, vector: jax.Array, transposed: bool, conjugated: bool
) -> jax.Array:
    """The pseudoinverse solution with a tall ``A`` (lineax's contract): the least-squares
    ``x`` of ``A x = b`` (or ``conj(A) x = b``), the minimum-norm ``y`` of ``A^H y = c``
    (or ``A^T y = c``), whose derivatives lineax takes through these four."""
    flip = transposed != conjugated  # conj(A) or A^T: solve the conjugate problem
    vector = vector.conj() if flip else vector
    solution = problem.solve_adjoint(vector) if transposed else problem.solve(vector)
    return solution.conj() if flip else solution


class MultigridSolver(lx.AbstractLinearSolver[_MultigridState]):
    """A lineax solver for banded operators of a grid: the matrix materialised as
    :class:`jaxdia.BandedSolver` materialises it, then :func:`jaxdia.cg` (``positive_definite``
    or a ``lineax.positive_semidefinite_tag``) or :func:`jaxdia.bicgstab`, preconditioned
    by :func:`jaxdia.multigrid` on ``grid``.

    For large 2-D and 3-D grids, where a banded factor's fill (a band of ``N`` or
    ``N^2`` diagonals) costs more than the Krylov iterations: ``init`` materialises the
    matrix and sets the V-cycle hierarchy up once, and every solve with its state reuses
    both. ``optimistix.Newton`` (which calls ``init`` every step) gets an inexact Newton
    method whose linear solves stop at ``rtol``. The operator must be a stencil on
    ``grid`` in the sense of :func:`jaxdia.multigrid` (a point coupled to itself and its
    neighbours). A solve that does not reach the tolerance within ``maxiter`` reports
    ``lineax.RESULTS.max_steps_reached``.

    Args:
      offsets: the diagonals of the operator's matrix (see :class:`jaxdia.BandedSolver`).
      grid: the grid's points per axis (static ints), as for :func:`jaxdia.multigrid`.
      mask: optional structural zeros, as for :func:`jaxdia.jacobian`.
      positive_definite: the matrix is symmetric positive definite (unchecked): CG
        instead of BiCGStab.
      rtol, atol: the Krylov solver's tolerances on the residual norm.
      maxiter: the most Krylov iterations (None: ``jaxdia.cg``'s default).
      chunk_size: materialise with at most this many products at once.

    Raises:
      ValueError: as :class:`jaxdia.BandedSolver`.

    Example:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> import lineax as lx
      >>> import jaxdia
      >>> N = 32  # the 2-D Laplacian on an N x N grid, as an operator on (N, N) arrays
      >>> def laplacian(u):
      ...     grid = jnp.pad(u, 1)
      ...     return 4 * u - grid[:-2, 1:-1] - grid[2:, 1:-1] - grid[1:-1, :-2] - grid[1:-1, 2:]
      >>> grid_values = jax.ShapeDtypeStruct((N, N), jnp.float32)
      >>> operator = lx.FunctionLinearOperator(laplacian, grid_values)
      >>> solver = jaxdia.MultigridSolver(
      ...     (-N, -1, 0, 1, N), (N, N), positive_definite=True, rtol=1e-4  # float32
      ... )
      >>> solve = jax.jit(lambda b: lx.linear_solve(operator, b, solver))
      >>> int(solve(jnp.ones((N, N))).stats["num_steps"]) < 10  # CG iterations
      True
    """

    offsets: tuple[int, ...] | None = eqx.field(static=True)
    grid: tuple[int, ...] = eqx.field(static=True)
    mask: StaticBooleans | None = eqx.field(static=True)
    positive_definite: bool = eqx.field(static=True)
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    maxiter: int | None = eqx.field(static=True)
    chunk_size: int | None = eqx.field(static=True)

    def __init__(
        self,
        offsets: Offsets | None,
        grid: Grid,
        *,
        mask: ArrayLike | None = None,
        positive_definite: bool = False,
        rtol: float = 1e-5,
        atol: float = 0.0,
        maxiter: int | None = None,
        chunk_size: int | None = None,
    ):
        self.offsets = None if offsets is None else _static_offsets(offsets, "MultigridSolver")
        if mask is not None and offsets is None:
            raise ValueError("MultigridSolver: a mask needs offsets (the rows of the mask)")
        self.grid = as_offsets(grid, "MultigridSolver: grid")
        self.mask = _static_mask(mask, "MultigridSolver")
        self.positive_definite = bool(positive_definite)
        self.rtol, self.atol = float(rtol), float(atol)
        self.maxiter = None if maxiter is None else static_int(maxiter, "MultigridSolver: maxiter")
        self.chunk_size = _chunk_size(chunk_size, "MultigridSolver")

    def init(self, operator: lx.AbstractLinearOperator, options: dict[str, Any]) -> _MultigridState:
        del options
        matrix, _ = _as_dia(operator, self.offsets, self.mask, self.chunk_size, "MultigridSolver")
        symmetric = self.positive_definite or lx.is_positive_semidefinite(operator)
        return (
            matrix,
            multigrid(matrix, self.grid),
            eqxi.Static(symmetric),
            eqxi.Static(False),
            _structures(operator),
        )

    def compute(
        self, state: _MultigridState, vector: Any, options: dict[str, Any]
    ) -> tuple[Any, lx.RESULTS, dict[str, Any]]:
        del options
        matrix, preconditioner, symmetric, transposed, structures = state
        method = cg if symmetric.value else bicgstab
        solution, info = method(
            matrix,
            _ravel(vector),
            M=preconditioner,
            rtol=self.rtol,
            atol=self.atol,
            maxiter=self.maxiter,
        )
        in_structure, out_structure = structures.value
        solution = _unravel(solution, out_structure if transposed.value else in_structure)
        result = lx.RESULTS.where(
            info.converged, lx.RESULTS.successful, lx.RESULTS.max_steps_reached
        )
        return solution, result, {"num_steps": info.iterations}

    def transpose(
        self, state: _MultigridState, options: dict[str, Any]
    ) -> tuple[_MultigridState, dict[str, Any]]:
        matrix, preconditioner, symmetric, transposed, structures = state
        if not symmetric.value:
            matrix = matrix.T
            preconditioner = multigrid(matrix, self.grid)
        return (
            (matrix, preconditioner, symmetric, eqxi.Static(not transposed.value), structures),
            options,
        )

    def conj(
        self, state: _MultigridState, options: dict[str, Any]
    ) -> tuple[_MultigridState, dict[str, Any]]:
        # jaxdia.multigrid takes real matrices only, for which conj(A) = A.
        return state, options

    def assume_full_rank(self) -> bool:
        return True
