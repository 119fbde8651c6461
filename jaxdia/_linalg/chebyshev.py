"""The Chebyshev polynomial preconditioner: :func:`chebyshev` and :class:`Chebyshev`.

``M(v) = p(D^-1 A) D^-1 v``, a fixed polynomial in ``A``: products with ``A`` and vector
updates only, so it runs wherever ``A @ v`` runs (a DiaMatrix, a sharded matrix, with a
deep halo: :mod:`jaxdia._linalg.deep_halo`). The iteration itself is
:func:`jaxdia._linalg.smoothers.chebyshev_steps`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .._checks import as_array, check_square, is_traced, static_int
from .._matrix import DiaMatrix, as_square_matrix
from .._parts import DiaParts
from .._pytree import Immutable
from .._scipy_operator import ScipyOperator
from .._shard import ShardedDiaMatrix
from .._typing import ArrayLike, DTypeLike, TypedLinearMap
from .deep_halo import DeepHaloMatrix, chebyshev_polynomial, widen
from .operators import vector_product
from .smoothers import (
    chebyshev_steps,
    check_diagonal,
    fusible_product,
    gershgorin,
    is_operator,
    smoothing_data,
)


def default_lower(degree: int) -> float:
    """The lower end of the default interval, as a fraction of the upper bound: about
    where the Chebyshev polynomial of ``degree`` starts to pay in conjugate gradients
    (tuned on 2-D Poisson; see benchmarks/notes/preconditioners.md)."""
    return 1.0 / degree**2


@jax.tree_util.register_pytree_with_keys_class
class Chebyshev(Immutable, ScipyOperator):
    """A Chebyshev polynomial preconditioner, the one :func:`jaxdia.chebyshev` returns.

    ``M(v) = p(D^-1 A) D^-1 v``: ``degree`` steps of Chebyshev iteration for ``A x = v``
    from ``x = 0``, damping the spectrum of ``D^-1 A`` on ``[lower, upper]``
    (``degree - 1`` products with ``A``), computed in ``operator``'s dtype and returned in
    the promoted dtype of ``v`` and the bounds. It uses nothing but ``operator @ v``, the
    inverse diagonal and the two bounds, so any operator with ``@`` (and a pytree, to
    pass through transformations) can be wrapped: ``jaxdia.Chebyshev(operator,
    inverse_diagonal, lower, upper, degree)`` (``inverse_diagonal`` None: no scaling). For
    a DiaMatrix the product is written so that XLA fuses each step into one loop.

    Attributes:
      operator: the matrix (or operator) the polynomial is in.
      inverse_diagonal: ``1 / diag(A)``, shape ``(*batch_shape, n)``, or None.
      lower, upper: the interval damped, shape ``batch_shape``.
      degree: the polynomial's degree (static).

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(50, 50))
      >>> M = jaxdia.chebyshev(A, degree=4)
      >>> M.degree, M(jnp.ones(50)).shape
      (4, (50,))
    """

    # __weakref__: a preconditioner is a function, which jax.jit(M) refers to weakly.
    __slots__ = ("operator", "inverse_diagonal", "lower", "upper", "degree", "__weakref__")
    _leaves = ("operator", "inverse_diagonal", "lower", "upper")
    _static = ("degree",)
    _name = "Chebyshev"
    operator: TypedLinearMap
    inverse_diagonal: Array | None
    lower: ArrayLike
    upper: ArrayLike
    degree: int

    def __init__(
        self,
        operator: TypedLinearMap,
        inverse_diagonal: Array | None,
        lower: ArrayLike,
        upper: ArrayLike,
        degree: int,
    ):
        self._assign(operator, inverse_diagonal, lower, upper, degree)

    def __call__(self, v: ArrayLike) -> Array:
        # One compiled call (jit's cache: one compile per structure and shape); eagerly,
        # the polynomial's loop would otherwise be traced and compiled on every call.
        return _apply_chebyshev(self, as_array(v, "Chebyshev: v"))

    @property
    def shape(self) -> tuple[int, int]:
        rows, columns = self.operator.shape
        return rows, columns

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(jnp.result_type(self.operator.dtype, jnp.asarray(self.lower).dtype))

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(jnp.shape(self.lower))

    def _columns(self, x: Array | np.ndarray, adjoint: bool) -> Array:
        M = self
        if adjoint:
            # M = p(D^-1 A) D^-1 with real coefficients, so M^H = p(D^-H A^H) D^-H: the
            # same polynomial of A^H.
            if not isinstance(self.operator, DiaMatrix):
                raise NotImplementedError(
                    f"Chebyshev.rmatvec needs the adjoint of A, which a "
                    f"{type(self.operator).__name__} does not give; SciPy's cg, bicgstab, "
                    "gmres and minres call only M.matvec"
                )
            inverse = self.inverse_diagonal
            M = self._replace(
                operator=self.operator.H,
                inverse_diagonal=None if inverse is None else inverse.conj(),
            )
        return M(x) if x.ndim == 1 else M(x.T).T


@jax.jit
def _apply_chebyshev(M: Chebyshev, v: Array) -> Array:
    """``M(v)`` (see :class:`Chebyshev`)."""
    inverse = M.inverse_diagonal
    lower, upper = jnp.asarray(M.lower), jnp.asarray(M.upper)
    result = jnp.result_type(v.dtype, lower.dtype)
    if not jnp.issubdtype(result, jnp.inexact):
        result = jnp.result_type(float)
    operator = M.operator
    if isinstance(operator, DiaMatrix):
        # In the matrix's precision (jaxdia.chebyshev(..., dtype=) may have narrowed it).
        work = np.dtype(operator.dtype)
        if jnp.issubdtype(result, jnp.complexfloating):
            work = np.dtype(jnp.result_type(work, jnp.complex64))
        matvec = fusible_product(operator._parts)
    elif isinstance(operator, DeepHaloMatrix):  # the polynomial after one exchange
        flat = jnp.asarray(v, result).reshape(-1, v.shape[-1])

        def polynomial(u: Array) -> Array:
            return chebyshev_polynomial(operator, u, lower, upper, M.degree)

        return jax.vmap(polynomial)(flat).reshape(v.shape).astype(result)
    else:
        work = result
        matvec = vector_product(operator)

    def scale(r):
        return r if inverse is None else inverse.astype(work) * r

    x, _ = chebyshev_steps(
        matvec,
        scale,
        jnp.asarray(v, work),
        None,
        lower.astype(work)[..., None],
        upper.astype(work)[..., None],
        M.degree,
        residual=False,
        # Unrolled, XLA would recompute the fused product in each consumer.
        unroll=False if isinstance(operator, DiaMatrix) else None,
    )
    return x.astype(result)


def chebyshev(
    A: DiaMatrix | ShardedDiaMatrix,
    degree: int = 16,
    *,
    bounds: Sequence[ArrayLike] | None = None,
    dtype: DTypeLike | None = None,
    deep_halo: bool = False,
) -> Chebyshev:
    """A Chebyshev polynomial preconditioner for a Hermitian positive definite ``A``.

    ``M(v)`` is ``degree`` steps of Chebyshev iteration on ``D^-1 A x = D^-1 v`` from
    zero (``D`` the diagonal): a fixed polynomial in ``A``, so ``M`` is linear, and
    Hermitian positive definite when the bounds hold (valid for conjugate gradients). It
    costs ``degree - 1`` products with ``A`` and a few vector updates, fused into one
    loop per step, and nothing else: no triangular solves and no setup beyond the
    diagonal, so it runs unchanged wherever ``A @ v`` runs (GPU, TPU, a sharded matrix).
    Each conjugate-gradient iteration then does the work of about ``degree`` iterations
    of Jacobi-preconditioned CG (the product count stays about the same) with far fewer
    inner products and vector passes; for a structured grid, :func:`jaxdia.multigrid`
    needs far fewer products.

    ``bounds`` default to ``[rho / degree^2, rho]`` with ``rho`` Gershgorin's bound on the
    spectrum of ``D^-1 A`` (its largest absolute row sum, from the stored diagonals):
    the polynomial damps the upper part of the spectrum, which dominates for
    discretized PDEs, and conjugate gradients handles the eigenvalues below.

    ``dtype=jnp.float32`` for a float64 ``A`` applies the polynomial in single precision
    (the matrix is converted once, here): half the memory traffic, for a preconditioner
    that is exact to about ``1e-7`` relative, which conjugate gradients tolerates down to
    tolerances far below that (the same iterations at 1e-8, a few more at 1e-10 in the
    tests; the solve itself stays in float64). ``M`` is then linear and symmetric only up
    to that rounding.

    Args:
      A: a square DiaMatrix (float or complex), possibly batched; or a
        :class:`jaxdia.ShardedDiaMatrix` (any operator with ``@``, ``shape``,
        ``diagonal()`` and ``abs()``): ``M`` then works on its sharded vectors, each step
        one sharded product (its halo exchange) and no inner product.
      degree: the polynomial's degree, >= 1 (1 is the Jacobi preconditioner scaled by a
        constant). Higher degrees mean fewer conjugate-gradient iterations at about the
        same number of products.
      bounds: ``(lower, upper)`` with ``0 < lower < upper``: the part of the spectrum of
        ``D^-1 A`` to damp (scalars, or arrays of ``A.batch_shape``). ``upper`` must bound
        the spectrum, or ``M`` may be indefinite.
      dtype: the precision the polynomial is applied in (default ``A.dtype``): a float
        (or complex for complex ``A``) dtype no wider than ``A``'s (a DiaMatrix only).
      deep_halo: for a ShardedDiaMatrix: exchange ``degree - 1`` halos at once, then run
        the polynomial's products locally (one collective-permute each way per
        application instead of ``degree - 1``; each device also computes the ghost rows,
        ``(L + (degree - 1) (lower + upper)) / L`` times the local work for ``L`` rows
        per device). The same ``M`` to rounding.

    Returns:
      A :class:`jaxdia.Chebyshev`, callable on vectors ``(n,)`` (``(*batch_shape, n)``).

    Raises:
      TypeError: if ``A`` is not a DiaMatrix or an operator, ``dtype`` is not a
        float/complex type (or is given for an operator), or ``deep_halo`` is set for
        anything but a ShardedDiaMatrix.
      ValueError: if ``A`` is not square, stores no main diagonal, ``degree < 1``,
        concrete ``bounds`` are not ``0 < lower < upper``, or (for a concrete ``A``) its
        diagonal holds a zero.

    Example:
      >>> import jax.numpy as jnp, numpy as np, scipy.sparse as sp, jaxdia
      >>> n = 32
      >>> T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
      >>> A = jaxdia.DiaMatrix.from_scipy(sp.kronsum(T, T).astype("float32"))
      >>> b = jnp.ones(n * n)
      >>> _, plain = jaxdia.cg(A, b, M=jaxdia.jacobi(A), rtol=1e-4)
      >>> _, poly = jaxdia.cg(A, b, M=jaxdia.chebyshev(A, degree=8), rtol=1e-4)
      >>> bool(poly.converged), int(poly.iterations) < int(plain.iterations) // 4
      (True, True)
    """
    degree = static_int(degree, "chebyshev: degree")
    if degree < 1:
        raise ValueError(f"chebyshev: degree must be >= 1, got {degree}")
    if deep_halo and not isinstance(A, ShardedDiaMatrix):
        raise TypeError(
            f"chebyshev: deep_halo=True is for a ShardedDiaMatrix (jaxdia.shard), got "
            f"{type(A).__name__}"
        )
    if not isinstance(A, DiaMatrix) and is_operator(A):
        return _operator_chebyshev(A, degree, bounds, dtype, deep_halo)
    A = as_square_matrix(A, "chebyshev")
    if dtype is not None:
        dtype = np.dtype(dtype)
        if not jnp.issubdtype(dtype, jnp.inexact) or (
            jnp.issubdtype(A.dtype, jnp.complexfloating)
            != jnp.issubdtype(dtype, jnp.complexfloating)
        ):
            kind = "complex" if jnp.issubdtype(A.dtype, jnp.complexfloating) else "float"
            raise TypeError(
                f"chebyshev: dtype must be a {kind} dtype for A of dtype {A.dtype.name}, got "
                f"{dtype.name}"
            )
    check_diagonal("chebyshev", A)
    batch = A.batch_shape
    inverse, rho = _bounds(A.data.reshape(-1, *A.data.shape[-2:]), offsets=A.offsets, shape=A.shape)
    inverse, rho = inverse.reshape(*batch, -1), rho.reshape(batch)
    lower, upper = _chebyshev_bounds(bounds, rho, degree)
    operator = A
    if dtype is not None and dtype != A.dtype:
        operator, inverse = A.astype(dtype), inverse.astype(dtype)
    return Chebyshev(operator, inverse, lower, upper, degree)


def _chebyshev_bounds(bounds: object, rho: Array, degree: int) -> tuple[Array, Array]:
    """``(lower, upper)``: the given ``bounds`` checked, or ``[rho / degree^2, rho]``."""
    if bounds is None:
        return rho * default_lower(degree), rho
    if isinstance(bounds, (str, bytes)) or not isinstance(bounds, Sequence) or len(bounds) != 2:
        raise TypeError(f"chebyshev: bounds must be a pair (lower, upper), got {bounds!r}")
    lower, upper = (
        jnp.broadcast_to(jnp.asarray(as_array(b, "chebyshev: bounds"), rho.dtype), rho.shape)
        for b in bounds
    )
    concrete = not (is_traced(lower) or is_traced(upper))
    if concrete and not bool(jnp.all((lower > 0) & (lower < upper))):
        raise ValueError(f"chebyshev: bounds must satisfy 0 < lower < upper, got {tuple(bounds)}")
    return lower, upper


def _operator_chebyshev(
    A: ShardedDiaMatrix, degree: int, bounds: object, dtype: DTypeLike | None, deep_halo: bool
) -> Chebyshev:
    """:func:`chebyshev` for an operator with ``@``, ``shape``, ``diagonal()`` and
    ``abs()`` (a :class:`jaxdia.ShardedDiaMatrix`): Gershgorin's bound from
    ``abs(A) @ ones``, everything in the vectors' layout (``diagonal()``'s)."""
    check_square(A, "chebyshev")
    if dtype is not None:
        raise TypeError(
            f"chebyshev: dtype= converts a DiaMatrix; {type(A).__name__} is used in its own "
            "dtype (convert it before sharding)"
        )
    diagonal = A.diagonal()
    inverse, rho = smoothing_data(diagonal, abs(A) @ jnp.ones_like(diagonal))
    lower, upper = _chebyshev_bounds(bounds, rho, degree)
    operator = widen(A, degree - 1) if deep_halo else A
    return Chebyshev(operator, inverse, lower, upper, degree)


@functools.partial(jax.jit, static_argnames=("offsets", "shape"))
def _bounds(data: Array, *, offsets, shape) -> tuple[Array, Array]:
    """``(1 / diag, Gershgorin bound of D^-1 A)`` of a batch ``(B, n_diags, n)``."""
    return jax.vmap(lambda d: gershgorin(DiaParts(d, offsets, shape)))(data)
