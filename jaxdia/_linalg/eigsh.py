"""The public :func:`jaxdia.eigsh`: SciPy's arguments checked and sorted into a problem of
:mod:`.eigsh_modes`, one compiled call, and SciPy's errors.

* The operators ``A``, ``M``, ``Minv``, ``OPinv`` are sorted and checked by
  :mod:`.eigsh_checks` (:func:`.eigsh_checks.sort_operand`).
* SciPy's rules follow: its ``ValueError``s for ``Minv``/``OPinv`` given where they
  are not used, its ``TypeError`` for ``k >= n`` with a sparse matrix or an operator
  (a dense ``A`` then gets all ``n`` eigenpairs from the dense solver, with SciPy's
  ``RuntimeWarning``), ``rng`` the seed of the random start vector.
* The solve is one jitted call (:func:`_run`): a batch of DIA matrices is mapped with
  ``vmap``; the eigenvalues have a ``custom_jvp`` (:func:`_solve`) for DIA and dense
  ``A`` and ``M``.
* Outside ``jit``, a factor that failed or pairs that did not converge raise
  (:mod:`.eigsh_checks`: ``numpy.linalg.LinAlgError``, and an exception that is SciPy's
  ``ArpackNoConvergence`` carrying the converged pairs). Under ``jit``,
  ``return_info=True``'s ``info`` says it.
"""

from __future__ import annotations

import math
import warnings
from functools import partial
from typing import Any, Literal, TypeAlias, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.custom_derivatives import SymbolicZero

from .._checks import as_array, converted, is_traced, scalar, static_int
from .._geometry import accumulation_dtype
from .._kernels.primitives import sddmm
from .._parts import DiaParts
from .._typing import ArrayLike, OperatorLike, Scalar
from .eigsh_checks import Operand, check_matrix, raise_failure, raise_no_convergence, sort_operand
from .eigsh_modes import (
    GIVEN,
    EigshInfo,
    Operators,
    Problem,
    apply,
    inverse_kinds,
    pairs,
)
from .lanczos import WHICH, Loop

#: Matrices up to this size are solved densely (``jnp.linalg.eigh``): exact, and faster
#: than the Krylov loop's per-step cost at this size.
DENSE_UP_TO = 128

#: SciPy's ``mode`` names and ARPACK's numbers of the shift-invert modes.
MODES = {"normal": 3, "buckling": 4, "cayley": 5}

__all__ = ["DENSE_UP_TO", "EigshInfo", "eigsh"]


def _positive_int(value: object, name: str) -> int:
    value = static_int(value, f"eigsh: {name}")
    if value <= 0:
        raise ValueError(f"eigsh: {name} must be a positive int, got {value}")
    return value


def _working_dtype(operands: list[Operand], v0: Any, n: int) -> np.dtype:
    """The dtype the problem is solved in: ``A``'s and ``M``'s promoted (a function's
    found by tracing it on a vector), at least float32 (16-bit matrices are solved in
    float32)."""
    known = [o.dtype for o in operands if o.dtype is not None]
    if v0 is not None and np.dtype(v0.dtype).kind in "fc":
        base = jnp.result_type(*known, v0.dtype)
    else:
        base = jnp.result_type(*known) if known else jnp.result_type(float)
    for operand in operands:
        if operand.dtype is None:
            vector = jax.ShapeDtypeStruct((n,), base)
            known.append(np.dtype(jax.eval_shape(operand.value, vector).dtype))
    return np.dtype(jnp.result_type(*known))


def _cast(X: Any, dtype: np.dtype) -> Any:
    if isinstance(X, DiaParts):
        return X.with_data(X.data.astype(dtype))
    if isinstance(X, jax.Array):
        return X.astype(dtype)
    return X


@partial(jax.jit, static_argnames=("problem", "dtype"))
def _run(ops: Operators, v0, sigma, tol, *, problem: Problem, dtype):
    """:func:`eigsh` for checked arguments, as one compiled call; a batch (of DIA
    matrices, and of start vectors) is flattened and mapped with ``vmap``."""
    n = problem.loop.n
    real = jnp.finfo(dtype).dtype
    A, M = _cast(ops.A, dtype), _cast(ops.M, dtype)
    batches = [X.data.shape[:-2] for X in (A, M) if isinstance(X, DiaParts)]
    batch = tuple(np.broadcast_shapes(*batches, v0.shape[:-1]))
    ops = ops._replace(A=A, M=M)
    v0 = jnp.broadcast_to(v0.astype(dtype), (*batch, n))
    sigma = jnp.asarray(sigma).astype(real)
    tol = jnp.asarray(tol).astype(real)
    if not batch:
        return _solve(problem, ops, v0, sigma, tol)
    size = math.prod(batch)

    def flat(X):
        """A DIA matrix's data broadcast to the batch, flattened (None: not mapped)."""
        if not isinstance(X, DiaParts):
            return None
        return jnp.broadcast_to(X.data, (*batch, *X.data.shape[-2:])).reshape(size, -1, n)

    def one(a, m, v):
        members = ops._replace(
            A=A if a is None else A.with_data(a), M=M if m is None else M.with_data(m)
        )
        return _solve(problem, members, v, sigma, tol)

    a, m = flat(A), flat(M)
    axes = (None if a is None else 0, None if m is None else 0, 0)
    out = jax.vmap(one, in_axes=axes)(a, m, v0.reshape(size, n))
    return jax.tree.map(lambda x: x.reshape(*batch, *x.shape[1:]), out)


# -- derivatives ---------------------------------------------------------------------------


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _solve(problem: Problem, ops: Operators, v0, sigma, tol):
    return pairs(problem, ops, v0, sigma, tol)


def _perturbed(tangent: Any) -> list[Array]:
    """The tangents in ``tangent`` (a pytree) that are not symbolic zeros."""
    return [t for t in jax.tree.leaves(tangent) if not isinstance(t, SymbolicZero)]


def _quadratic(X: Any, dX: Any, V: Array) -> Array:
    """``Re(v_i^H dX v_i)`` for each column ``v_i`` of ``V``: over the stored slots of a
    DIA ``X`` (``sddmm(conj(v_i), v_i)`` is the slot-wise ``conj(v_i[row]) v_i[column]``),
    or of a dense one."""
    if isinstance(X, DiaParts):
        weights = jax.vmap(
            lambda v: sddmm(jnp.conj(v)[:, None], v[:, None], offsets=X.offsets, shape=X.shape),
            in_axes=1,
        )(V)
        return jnp.real(jnp.einsum("idj,dj->i", weights, dX.data, precision=lax.Precision.HIGHEST))
    product = jnp.matmul(dX, V, precision=lax.Precision.HIGHEST)
    return jnp.real(jnp.sum(jnp.conj(V) * product, axis=0))


def _solve_jvp(problem: Problem, primals, tangents):
    """``d lambda_i = Re(v_i^H (dA - lambda_i dM) v_i) / (v_i^H M v_i)``, the derivative
    of a simple eigenvalue of the Hermitian parts of ``A`` and ``M``; the eigenvectors'
    tangent is NaN (not computed), the report's zero. Derivatives through a function
    operator (or ``Minv``, ``OPinv``) are refused: they are not computed."""
    ops, v0, sigma, tol = primals
    dops = tangents[0]
    lam, V, info, passed = _solve(problem, ops, v0, sigma, tol)
    for name in ops._fields:
        X, dX = getattr(ops, name), getattr(dops, name)
        matrix = name in ("A", "M") and isinstance(X, (DiaParts, jax.Array))
        if _perturbed(dX) and not matrix:
            raise TypeError(
                f"eigsh: cannot differentiate through {name} given as a function or "
                "LinearOperator (the eigenvalues' derivatives are computed for A and M "
                "given as a DiaMatrix or a dense array)"
            )
    dlam = jnp.zeros_like(lam)
    if _perturbed(dops.A):
        dlam = _quadratic(ops.A, dops.A, V).astype(lam.dtype)
    if _perturbed(dops.M):
        dlam = dlam - lam * _quadratic(ops.M, dops.M, V).astype(lam.dtype)
    if ops.M is not None or problem.mode == 4:  # V is B-orthonormal, not unit
        norms = jnp.real(jnp.sum(jnp.conj(V) * apply(ops.M, V), axis=0))
        dlam = dlam / norms.astype(lam.dtype)
    # Eigenvector derivatives are not computed: NaN, so that a loss reading them says so
    # (a product with the tangents, so that the tangent stays linear in them).
    moved = [jnp.sum(t) for t in _perturbed((dops.A, dops.M))]
    dV = (
        jnp.full(V.shape, jnp.nan, V.dtype) * jnp.sum(jnp.stack(moved)).astype(V.dtype)
        if moved
        else jnp.zeros_like(V)
    )
    dinfo = jax.tree.map(_zero_tangent, info)
    return (lam, V, info, passed), (dlam, dV, dinfo, _zero_tangent(passed))


_solve.defjvp(_solve_jvp, symbolic_zeros=True)


def _zero_tangent(x: Array) -> Array | np.ndarray:
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(x.shape, jax.dtypes.float0)


# -- the public function ------------------------------------------------------------------

#: What :func:`eigsh` returns: ``w``, then ``v`` with ``return_eigenvectors``, then
#: ``info`` with ``return_info`` (one array alone, as SciPy's).
EigshResult: TypeAlias = (
    Array | tuple[Array, Array] | tuple[Array, EigshInfo] | tuple[Array, Array, EigshInfo]
)


@overload
def eigsh(
    A: OperatorLike,
    k: int = ...,
    M: OperatorLike | None = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    return_eigenvectors: Literal[True] = ...,
    Minv: OperatorLike | None = ...,
    OPinv: OperatorLike | None = ...,
    mode: str = ...,
    rng: object = ...,
    *,
    return_info: Literal[False] = ...,
) -> tuple[Array, Array]: ...
@overload
def eigsh(
    A: OperatorLike,
    k: int = ...,
    M: OperatorLike | None = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    *,
    return_eigenvectors: Literal[False],
    Minv: OperatorLike | None = ...,
    OPinv: OperatorLike | None = ...,
    mode: str = ...,
    rng: object = ...,
    return_info: Literal[False] = ...,
) -> Array: ...
@overload
def eigsh(
    A: OperatorLike,
    k: int = ...,
    M: OperatorLike | None = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    return_eigenvectors: Literal[True] = ...,
    Minv: OperatorLike | None = ...,
    OPinv: OperatorLike | None = ...,
    mode: str = ...,
    rng: object = ...,
    *,
    return_info: Literal[True],
) -> tuple[Array, Array, EigshInfo]: ...
@overload
def eigsh(
    A: OperatorLike,
    k: int = ...,
    M: OperatorLike | None = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    *,
    return_eigenvectors: Literal[False],
    Minv: OperatorLike | None = ...,
    OPinv: OperatorLike | None = ...,
    mode: str = ...,
    rng: object = ...,
    return_info: Literal[True],
) -> tuple[Array, EigshInfo]: ...
@overload
def eigsh(
    A: OperatorLike,
    k: int = ...,
    M: OperatorLike | None = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    return_eigenvectors: bool = ...,
    Minv: OperatorLike | None = ...,
    OPinv: OperatorLike | None = ...,
    mode: str = ...,
    rng: object = ...,
    *,
    return_info: bool = ...,
) -> EigshResult: ...
def eigsh(
    A: OperatorLike,
    k: int = 6,
    M: OperatorLike | None = None,
    sigma: Scalar | None = None,
    which: str = "LM",
    v0: ArrayLike | None = None,
    ncv: int | None = None,
    maxiter: int | None = None,
    tol: Scalar = 0.0,
    return_eigenvectors: bool = True,
    Minv: OperatorLike | None = None,
    OPinv: OperatorLike | None = None,
    mode: str = "normal",
    rng: object = None,
    *,
    return_info: bool = False,
) -> EigshResult:
    """``k`` eigenvalues and eigenvectors of a Hermitian ``A``, or of ``A x = lambda M x``,
    as SciPy's ``eigsh``.

    The same arguments and results as ``scipy.sparse.linalg.eigsh``: ``which`` picks the
    eigenvalues of largest (``"LM"``) or smallest (``"SM"``) magnitude, largest
    (``"LA"``) or smallest (``"SA"``) value, or half from each end (``"BE"``). With
    ``M`` (Hermitian positive definite) it solves ``A x = lambda M x``. With ``sigma``
    it is a spectral transformation, and ``which`` applies to the transformed values
    ``nu`` of ``mode``: ``"normal"`` (shift-invert, ``nu = 1 / (lambda - sigma)``, so
    the default ``"LM"`` finds the eigenvalues nearest ``sigma``, the fast way to the
    bottom of a spectrum), ``"buckling"`` (``nu = lambda / (lambda - sigma)``, ``A``
    positive definite) or ``"cayley"`` (``nu = (lambda + sigma) / (lambda - sigma)``);
    ``M`` may then be semidefinite. Eigenvalues come back in ascending order (without
    eigenvectors and without ``sigma``, in SciPy's order: ``"LM"`` by increasing
    magnitude, ``"SM"`` by decreasing magnitude, ``"SA"`` descending), eigenvectors
    as the columns of ``v``: unit vectors, ``M``-orthonormal with ``M`` (``A``-orthonormal
    in buckling mode), as ARPACK's (their sign or complex phase is arbitrary).

    ``A``, ``M``, ``Minv`` and ``OPinv`` may each be a :class:`jaxdia.DiaMatrix` (a
    batch too), a ``scipy.sparse`` matrix (made a DiaMatrix: a band is what jaxdia
    factors), a dense 2-D array, a ``scipy.sparse.linalg.LinearOperator`` or anything
    ``aslinearoperator`` takes (one written in NumPy runs on the host through
    ``jax.pure_callback``, eagerly and under ``jit`` and ``vmap``, a host round trip per
    product; see :func:`jaxdia.cg`), a lineax operator, or a function ``v -> A v``
    written in JAX (given as ``A``, it needs ``v0`` for its size). The inverses are
    SciPy's, with jaxdia's factors: ``M^-1`` (without ``sigma``) is ``Minv`` if given,
    else from the banded Cholesky factor of a banded ``M`` (that of
    :func:`jaxdia.cho_factor`), a dense ``M``'s, or conjugate gradients for an
    operator; ``(A - sigma M)^-1`` is ``OPinv`` if given, else the banded LU of ``A -
    sigma M`` (:func:`jaxdia.lu_factor`'s, O(n l (l + u)) once and O(n (l + u)) a step;
    a tridiagonal one solved afresh each step), a dense LU, or GMRES (SciPy's
    ``gmres_loose`` tolerance) where ``A`` or ``M`` is an operator. Generalized problems
    run Lanczos in ``M``'s inner product (``A``'s in buckling mode), as ARPACK does.

    The solver is thick-restart Lanczos (Krylov-Schur) with full reorthogonalization and
    ARPACK's convergence test, ``||op v - nu v|| <= tol * |nu|`` estimated from the
    Krylov relation (``tol=0``: machine precision). ``ncv`` basis vectors (default
    ``min(n, max(2k + 1, 20))``) live in fixed buffers inside a ``lax.while_loop``, so
    the call works under ``jit`` and ``vmap`` (a batch of matrices runs until its slowest
    member has converged). Problems with ``n <= 128``, or ``ncv > n / 2``, are solved
    densely with ``jnp.linalg.eigh`` (operators applied to the identity first;
    ``Minv`` and ``OPinv`` are then not used). The estimate is exact only to its
    rounding, ``eps ||op||``, which a nearly singular ``A - sigma M`` makes huge: so a
    pair counts as converged only if its true residual passes too: ``||A v - lambda
    v|| <= tol |lambda|`` for a standard problem (with a shift, ``tol (|lambda| + ||A -
    sigma I||)``), ``||A v - lambda M v|| <= tol (||A|| + (|lambda| + |sigma|) ||M||)
    ||v||`` for a generalized one (a backward error), each plus ``1000 sqrt(n) eps``
    of rounding (on the dense path of a generalized problem too; an operator's norm is
    estimated from its products).

    Non-convergence outside ``jit`` raises, as SciPy's: an exception that is a
    ``scipy.sparse.linalg.ArpackNoConvergence`` whose ``eigenvalues`` and
    ``eigenvectors`` are the pairs that converged (and ``info`` the report below).
    Under ``jit`` nothing can raise: pass ``return_info=True`` for a last value
    ``info``, a named tuple (a pytree, batched like ``w``) of ``converged`` (all ``k``
    pairs passed the test), ``nconv`` (how many did), ``iterations`` (restarts),
    ``matvecs`` (applications of the operator Lanczos runs on) and ``residuals``
    (``||A v_i - lambda_i M v_i||``, in the order of ``w``); with it, an eager call
    returns the unconverged pairs instead of raising. A factor that fails raises at
    once outside ``jit`` (``A - sigma M`` exactly singular, ``M`` not positive definite:
    ``numpy.linalg.LinAlgError``; SciPy raises "Factor is exactly singular"), as does
    an inner iterative solve that does not converge (``ValueError``, as SciPy's); under
    ``jit`` the loop stops after its first restart with NaN eigenvalues and
    ``converged`` False (as it does for NaN entries).

    ``A`` and ``M`` must be Hermitian (real symmetric, or complex Hermitian); concrete
    matrices are checked (to 1000 rounding errors of their largest entry). Under ``jit``
    (and for functions) they cannot be, and a non-Hermitian one gives meaningless
    results, as in SciPy. Integer matrices are solved in the default float type (as
    SciPy computes them in float64), 16-bit ones in float32 and the results cast back;
    long double is refused. Where SciPy refuses a complex ``A`` with ``which="BE"`` or
    the buckling and Cayley modes, jaxdia solves them.

    Differentiation: the eigenvalues are differentiable w.r.t. ``A`` and ``M`` given
    as DiaMatrix (``A.data``) or dense arrays (``jax.grad``, ``jvp``) for simple
    eigenvalues, ``d lambda = Re(v^H (dA - lambda dM) v) / (v^H M v)``: the derivative
    of the eigenvalues of the Hermitian parts (a perturbation that breaks the symmetry
    counts through its Hermitian part, as ``jnp.linalg.eigh`` does). Eigenvector
    derivatives are not computed: their tangent is NaN, so a loss that reads the
    eigenvectors gets a NaN gradient, never a silently wrong one (the ``info`` fields
    have zero tangents). Degenerate eigenvalues have no derivative. Differentiating
    through an operator given as a function or ``LinearOperator`` (or ``Minv``,
    ``OPinv``) raises a ``TypeError``.

    Args:
      A: a square Hermitian operator (see above; a DiaMatrix possibly batched: leading
        dims of ``A.data``).
      k: the number of eigenpairs, ``1 <= k < n`` (static). ``k >= n`` is SciPy's call of
        ``scipy.linalg.eigh``: for a dense ``A`` all ``n`` pairs, with a
        ``RuntimeWarning``; a ``TypeError`` for a sparse ``A`` or an operator.
      M: the Hermitian ``M`` of ``A x = lambda M x`` (positive definite without
        ``sigma``; semidefinite with it; indefinite in buckling mode), or None.
      sigma: a real shift for the spectral transformation of ``mode``, or None.
      which: ``"LM"``, ``"SM"``, ``"LA"``, ``"SA"`` or ``"BE"``.
      v0: the starting vector ``(n,)`` (or a batch of them); default: a pseudo-random
        vector drawn from ``rng``, or a fixed one, so results are reproducible.
      ncv: the number of Lanczos vectors, ``k < ncv`` (static; more than ``n`` is ``n``,
        as SciPy's).
      maxiter: the largest number of restarts (static; default ``10 n``, as SciPy).
      tol: the relative accuracy of the eigenvalues; 0 means machine precision.
      return_eigenvectors: also return the eigenvectors (SciPy's flag; it also sets
        the order of the eigenvalues, see above).
      Minv: ``M^-1`` as an operator (only with ``M``, without ``sigma``).
      OPinv: ``(A - sigma M)^-1`` as an operator (only with ``sigma``, in every mode).
      mode: ``"normal"``, ``"buckling"`` or ``"cayley"`` (used with ``sigma``, as SciPy).
      rng: the seed (anything ``numpy.random.default_rng`` takes) of the random start
        vector when ``v0`` is None (SciPy's); None: jaxdia's fixed start.
      return_info: also return ``info`` (above) as the last value.

    Returns:
      ``w`` of shape ``(..., k)`` (real), then ``v`` of shape ``(..., n, k)`` if
      ``return_eigenvectors``, then ``info`` if ``return_info``.

    Raises:
      TypeError: if an operator is of no kind above, ``k``, ``ncv`` or ``maxiter`` are
        not static ints, ``sigma`` is complex, ``v0`` is complex for a real problem,
        ``A`` is a function without ``v0``, ``k >= n`` for a sparse ``A`` or an
        operator, or on differentiating through an operator.
      ValueError: if ``A`` or ``M`` is not square or of another size, or (concrete) not
        Hermitian or not finite; if ``k`` is not positive, ``which`` or ``mode`` is
        unknown, ``ncv <= k``, ``v0`` has the wrong shape; for ``Minv`` without ``M`` or
        with ``sigma``, or ``OPinv`` without ``sigma`` (SciPy's rules); if an inner
        iterative solve does not converge.
      numpy.linalg.LinAlgError: outside ``jit``, if ``A - sigma M`` is exactly singular
        or ``M`` is not positive definite.
      scipy.sparse.linalg.ArpackNoConvergence: outside ``jit`` and without
        ``return_info``, if pairs did not converge (a subclass of it).

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> n = 200
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
      >>> w, v = jaxdia.eigsh(A, k=3, which="SA")
      >>> exact = 2 - 2 * jnp.cos(jnp.arange(1, 4) * jnp.pi / (n + 1))
      >>> bool(jnp.allclose(w, exact, atol=1e-4)), v.shape  # float32: converged to ~1e-5
      (True, (200, 3))
      >>> w, info = jaxdia.eigsh(A, k=3, sigma=0.0, return_eigenvectors=False,
      ...                        return_info=True)
      >>> bool(info.converged), bool(jnp.allclose(w, exact, atol=1e-4))
      (True, True)

      A generalized problem: ``M`` the (banded) mass matrix of linear finite elements
      on ``[0, 1]``, whose lowest eigenvalues approach ``(j pi)^2``:

      >>> h = 1 / (n + 1)
      >>> K = A / h
      >>> M = jaxdia.diags([h / 6, 2 * h / 3, h / 6], offsets=[-1, 0, 1], shape=(n, n))
      >>> w = jaxdia.eigsh(K, k=2, M=M, sigma=0.0, return_eigenvectors=False)
      >>> [round(float(x / jnp.pi**2), 2) for x in w]
      [1.0, 4.0]
    """
    for flag, name in ((return_eigenvectors, "return_eigenvectors"), (return_info, "return_info")):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"eigsh: {name} must be a Python bool, got {type(flag).__name__}")
    a = sort_operand(A, "A")
    if a is None:
        raise TypeError("eigsh: A must be an operator, got None")
    named = ((M, "M"), (Minv, "Minv"), (OPinv, "OPinv"))
    m, minv, opinv = (sort_operand(X, name) for X, name in named)
    given = [o for o in (a, m, minv, opinv) if o is not None]
    if v0 is not None:
        v0 = as_array(v0, "eigsh: v0")
    n = next((o.n for o in given if o.n is not None), None)
    if n is None:
        if v0 is None or np.ndim(v0) == 0:
            raise TypeError(
                "eigsh: A is a function, whose size eigsh cannot know: pass v0 (its length "
                "is n), or A as a LinearOperator with a shape"
            )
        n = int(v0.shape[-1])
    for operand, name in zip((m, minv, opinv), ("M", "Minv", "OPinv")):
        if operand is not None and operand.n is not None and operand.n != n:
            raise ValueError(f"eigsh: {name} must be {n} x {n} as A is, got size {operand.n}")
    k = _positive_int(k, "k")
    if not isinstance(which, str) or which.upper() not in WHICH:
        raise ValueError(f"eigsh: which must be one of {', '.join(WHICH)}, got {which!r}")
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"eigsh: mode must be one of {', '.join(MODES)}, got {mode!r}")
    matrices = [o for o in (a, m) if o is not None]
    out_dtype = _working_dtype(matrices, v0, n)
    work = accumulation_dtype(out_dtype)
    for operand, name in zip((a, m), ("A", "M")):
        if operand is not None:
            check_matrix(operand, name)
    if k >= n:
        return _all_pairs(a, m, k, n, work, out_dtype, return_eigenvectors, return_info)
    if sigma is None:
        if opinv is not None:
            raise ValueError(
                "eigsh: OPinv should not be specified with sigma = None (SciPy's rule)"
            )
        if m is None and minv is not None:
            raise ValueError("eigsh: Minv should not be specified with M = None (SciPy's rule)")
        number = 1 if m is None else 2
        sigma = np.zeros((), np.float32)
    else:
        if minv is not None:
            raise ValueError(
                "eigsh: Minv should not be specified when sigma is specified (SciPy's rule)"
            )
        sigma = scalar(sigma, "eigsh: sigma", hint=" (a Hermitian A has real eigenvalues)")
        number = MODES[mode]
    ncv = min(n, max(2 * k + 1, 20)) if ncv is None else min(static_int(ncv, "eigsh: ncv"), n)
    if not k < ncv:
        raise ValueError(
            f"eigsh: ncv must satisfy k < ncv <= n ({k} < ncv <= {n}), got ncv = {ncv}"
        )
    maxiter = n * 10 if maxiter is None else _positive_int(maxiter, "maxiter")
    tol = scalar(tol, "eigsh: tol", nonnegative=True)
    v0 = _start(v0, rng, n, work, a.batch, m.batch if m is not None else ())
    dense = n <= DENSE_UP_TO or 2 * ncv > n
    minv_kind = opinv_kind = None
    if number == 2 and m is not None and not dense:
        minv_kind = GIVEN if minv is not None else inverse_kinds(m.kind, None)
    if number > 2 and not dense:
        opinv_kind = GIVEN if opinv is not None else inverse_kinds(a.kind, m and m.kind)
    problem = Problem(
        Loop(n, k, ncv, which.upper(), maxiter),
        number,
        dense,
        minv_kind,
        opinv_kind,
        bool(return_eigenvectors),
    )
    ops = Operators(
        a.value,
        None if m is None else m.value,
        None if minv is None or minv_kind != GIVEN else minv.value,
        None if opinv is None or opinv_kind != GIVEN else opinv.value,
    )
    w, v, info, passed = _run(ops, v0, sigma, tol, problem=problem, dtype=work)
    w, v = w.astype(np.finfo(out_dtype).dtype), v.astype(out_dtype)
    if not is_traced(w):
        raise_failure(problem, np.asarray(w), sigma, m is not None)
    if not return_info and not is_traced(info.converged):
        raise_no_convergence(w, v, info, passed)
    out: tuple[Any, ...] = (w, v) if return_eigenvectors else (w,)
    if return_info:
        out += (info,)
    return out[0] if len(out) == 1 else out


def _start(v0: Any, rng: object, n: int, dtype: np.dtype, *batches: tuple[int, ...]) -> Any:
    """The start vector: ``v0`` checked, or drawn from ``rng`` (SciPy's uniform on
    ``[-1, 1)``), or zero (jaxdia's fixed pseudo-random start)."""
    if v0 is None:
        if rng is None:
            return np.zeros(n, dtype)
        return np.random.default_rng(rng).uniform(-1.0, 1.0, n).astype(dtype)  # type: ignore[arg-type]
    if v0.shape[-1:] != (n,):
        raise ValueError(
            f"eigsh: v0 must have shape ({n},) (or a batch of them), got shape {v0.shape}"
        )
    if np.dtype(v0.dtype).kind == "c" and dtype.kind != "c":
        raise TypeError(f"eigsh: v0 is complex ({v0.dtype}) but A is real; pass a real v0")
    try:
        np.broadcast_shapes(v0.shape[:-1], *batches)
    except ValueError:
        raise ValueError(
            f"eigsh: v0's batch shape {v0.shape[:-1]} does not broadcast with A's batch "
            f"shape {batches[0]}"
        ) from None
    return converted(v0, dtype)  # the program then depends on the work's dtype only


def _all_pairs(
    a: Operand,
    m: Operand | None,
    k: int,
    n: int,
    dtype: np.dtype,
    out_dtype: np.dtype,
    vectors: bool,
    return_info: bool,
) -> EigshResult:
    """SciPy's ``k >= n``: all ``n`` pairs from the dense solver (SciPy calls
    ``scipy.linalg.eigh(A, b=M)``), with its ``RuntimeWarning``; its ``TypeError`` for a
    sparse ``A`` (jaxdia's DiaMatrix too) or an operator."""
    if a.given_as != "dense":
        raise TypeError(
            f"eigsh: k = {k} >= n = {n}, where SciPy calls scipy.linalg.eigh, which cannot "
            f"take a {a.given_as} A: k must be smaller than n; for all eigenvalues use "
            "jnp.linalg.eigh of the dense matrix"
        )
    if m is not None and m.given_as == "LinearOperator":
        raise TypeError(
            f"eigsh: k = {k} >= n = {n}: scipy.linalg.eigh cannot take a LinearOperator M"
        )
    warnings.warn(
        "eigsh: k >= N for N * N square matrix: all N eigenpairs from the dense solver "
        "(SciPy: 'Attempting to use scipy.linalg.eigh instead')",
        RuntimeWarning,
        stacklevel=3,
    )
    number = 1 if m is None else 2
    problem = Problem(Loop(n, n, n, "LA", 1), number, True, None, None, True)
    ops = Operators(a.value, None if m is None else m.value)
    zero = np.zeros((), np.float32)
    w, v, info, _ = _run(ops, np.zeros(n, dtype), zero, zero, problem=problem, dtype=dtype)
    w, v = w.astype(np.finfo(out_dtype).dtype), v.astype(out_dtype)
    if not is_traced(w):
        raise_failure(problem, np.asarray(w), zero, m is not None)
    out: tuple[Any, ...] = (w, v) if vectors else (w,)
    if return_info:
        out += (info,)
    return out[0] if len(out) == 1 else out
