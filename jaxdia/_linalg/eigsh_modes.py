""":func:`jaxdia.eigsh`'s problems: ARPACK's five modes as the operator that Lanczos runs
on, their back-transforms, the dense path, and the check of each returned pair.

A problem is ``A x = lambda M x`` (``M`` None: the identity) with Hermitian ``A`` and
``M``; :mod:`.lanczos` finds Ritz pairs ``(theta, x)`` of an operator ``op`` Hermitian
in the inner product of ``B``, and each mode says what ``op`` and ``B`` are, as SciPy's
``eigsh`` documents them (``which`` ranks ``theta``):

====  ==================  ==============================  ===  ===============================
mode  SciPy's arguments   op                              B    lambda
====  ==================  ==============================  ===  ===============================
1     no M, no sigma      A                               I    theta
2     M, no sigma         M^-1 A                          M    theta
3     sigma, "normal"     (A - sigma M)^-1 M              M    sigma + 1 / theta
4     sigma, "buckling"   (A - sigma M)^-1 A              A    sigma theta / (theta - 1)
5     sigma, "cayley"     (A - sigma M)^-1 (A + sigma M)  M    sigma (theta + 1) / (theta - 1)
====  ==================  ==============================  ===  ===============================

Each operator (``A``, ``M``, ``Minv``, ``OPinv``) arrives as one of three kinds: a
``DiaParts`` (banded), a 2-D array (dense), or a function of one vector (anything else:
a host ``LinearOperator``, a lineax operator, a JAX function). The inverses follow
SciPy's choices with jaxdia's factors: ``M^-1`` is ``Minv`` when given, else the banded
Cholesky factor of a banded ``M`` (:func:`jaxdia.cho_factor`'s), a dense one's, or
conjugate gradients (SciPy's ``IterInv`` runs GMRES); ``(A - sigma M)^-1`` is
``OPinv`` when given, else the banded LU of ``A - sigma M`` (as the plan chooses for
repeated solves), a dense LU, or GMRES to SciPy's ``gmres_loose`` tolerance. A failed
factor (``M`` not positive definite, ``A - sigma M`` singular) or an iterative solve
that did not converge makes NaN, which stops the loop at its first restart.

Generalized problems run Lanczos in ``B``'s inner product (ARPACK's way), not on
``L^-1 A L^-H`` with ``M = L L^H``: that needs solves with each triangular factor,
which the banded factors do not offer (the GPU/TPU ones do not even store ``L``), and
``M``-inner products also serve a semidefinite ``M`` (modes 3 and 5) and ``B = A``
(mode 4). The eigenvectors come back ``B``-orthonormal, as ARPACK's.

Small problems (``dense``) are solved with ``jnp.linalg.eigh`` after the operators are
made dense: without ``M`` (and not in mode 2) ``eigh(A)``; with a positive definite
``M``, as LAPACK's ``?hegv``, ``eigh`` of ``L^-1 A L^-H`` with ``M = L L^H`` (the pairs
then ranked by each mode's ``theta``); otherwise (modes 3 to 5, ``M`` semidefinite, or
indefinite in buckling mode) ``eigh`` of ``R (A - sigma M)^-1 R^H`` with ``B = R^H R``
(``R = D^{1/2} Q^H`` from ``B = Q D Q^H``), whose eigenvalues are mode 3's ``theta``.

Every pair of a generalized problem is checked against the true residual ``||A x -
lambda M x||`` (:func:`accurate`), on the dense path too: a wrong pair is never
reported converged.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .._convert import dia_to_dense
from .._geometry import in_bounds
from .._kernels.primitives import spmm
from .._ops import add, shifted
from .._parts import DiaParts
from .._products import matvec as dia_matvec
from .banded import factor, solve
from .gmres import gmres_cycles
from .krylov import cg
from .lanczos import Loop, lanczos, rank
from .plan import Use, choose

_HIGHEST = lax.Precision.HIGHEST

#: How each inverse is applied: given by the caller, a banded factor, a dense one, or an
#: iterative solve.
GIVEN, BANDED, DENSE, ITERATIVE = "given", "banded", "dense", "iterative"


class Problem(NamedTuple):
    """The static part of a solve: the Lanczos sizes, ARPACK's ``mode`` (1 to 5),
    whether it is solved densely, how ``M^-1`` (mode 2) and ``(A - sigma M)^-1`` (modes 3
    to 5) are applied (:data:`GIVEN`, ...; None where not used), and whether the
    eigenvectors are returned (SciPy orders the eigenvalues by it)."""

    loop: Loop
    mode: int
    dense: bool
    minv: str | None
    opinv: str | None
    vectors: bool


class Operators(NamedTuple):
    """A problem's operators, each a ``DiaParts``, a 2-D array, a function, or None."""

    A: Any
    M: Any = None
    Minv: Any = None
    OPinv: Any = None


class EigshInfo(NamedTuple):
    """How :func:`jaxdia.eigsh` ended (a pytree; batched like the eigenvalues).

    Attributes:
      converged: whether all ``k`` wanted eigenpairs passed the convergence test
        (always true for the dense path of a standard problem).
      nconv: how many of them passed it.
      iterations: restarts of the Lanczos loop (0 for the dense path).
      matvecs: applications of the operator Lanczos runs on (``A``, ``(A - sigma
        I)^{-1}``, ``M^{-1} A``, ... see ``mode``).
      residuals: ``||A v_i - lambda_i M v_i||`` of each returned pair (``M = I``
        without ``M``), in the order of the eigenvalues.
    """

    converged: Array
    nconv: Array
    iterations: Array
    matvecs: Array
    residuals: Array


# -- the three kinds of operator --------------------------------------------------------------


def apply(X: Any, v: Array) -> Array:
    """``X @ v`` for one vector ``(n,)`` or columns ``(n, c)`` (``X`` None: ``v``)."""
    if X is None:
        return v
    if isinstance(X, DiaParts):
        return dia_matvec(X)(v)
    if isinstance(X, jax.Array):
        return jnp.matmul(X, v, precision=_HIGHEST)
    if v.ndim == 1:
        return jnp.asarray(X(v)).astype(v.dtype)
    return jax.vmap(lambda x: jnp.asarray(X(x)).astype(v.dtype), in_axes=1, out_axes=1)(v)


def dense(X: Any, n: int, dtype: Any) -> Array:
    """``X`` as a dense ``(n, n)`` array (a function: its product with the identity)."""
    if X is None:
        return jnp.eye(n, dtype=dtype)
    if isinstance(X, DiaParts):
        return dia_to_dense(X.data, X.offsets, X.shape)
    if isinstance(X, jax.Array):
        return X
    return apply(X, jnp.eye(n, dtype=dtype))


def norm_bound(X: Any, columns: Array, products: Array) -> Array:
    """``||X||_1`` (``= ||X||_inf`` for a Hermitian ``X``) of a matrix; for a function,
    an estimate from the ``products = X @ columns`` at hand (the largest ratio of norms:
    a lower bound, so a check that reads it errs on the strict side)."""
    real = jnp.finfo(products.dtype).dtype
    if X is None:
        return jnp.ones((), real)
    if isinstance(X, DiaParts):
        inside = in_bounds(X.offsets, X.shape)
        return jnp.max(jnp.sum(jnp.abs(jnp.where(inside, X.data, 0)), axis=0), initial=0.0)
    if isinstance(X, jax.Array):
        return jnp.max(jnp.sum(jnp.abs(X), axis=0), initial=0.0).astype(real)
    ratios = jnp.linalg.norm(products, axis=0) / jnp.linalg.norm(columns, axis=0)
    return jnp.max(jnp.where(jnp.isfinite(ratios), ratios, 0), initial=0.0).astype(real)


def _kind(X: Any) -> str:
    if X is None or isinstance(X, DiaParts):
        return BANDED
    return DENSE if isinstance(X, jax.Array) else ITERATIVE


def inverse_kinds(A_kind: str, M_kind: str | None) -> str:
    """How ``(A - sigma M)^-1`` is applied when ``OPinv`` is not given, from the kinds
    of ``A`` and ``M`` (:data:`BANDED` for None): the kind of the least structured."""
    kinds = {A_kind, M_kind or BANDED}
    for kind in (ITERATIVE, DENSE):
        if kind in kinds:
            return kind
    return BANDED


# -- the inverses ------------------------------------------------------------------------------


def _loose(x: Array, tol: Array) -> Array:
    """SciPy's ``gmres_loose`` tolerance of an inner solve: ``tol`` (0: twice the machine
    precision), at least ``1000 sqrt(n) eps``."""
    eps = float(jnp.finfo(x.dtype).eps)
    tol = jnp.where(tol > 0, tol, 2 * eps)
    return jnp.maximum(tol, 1000 * math.sqrt(x.shape[-1]) * eps)


def _nan_unless(converged: Array, x: Array) -> Array:
    return jnp.where(converged, x, jnp.nan)


def _banded_inverse(S: DiaParts, use: Use, lower: bool | None):
    """``x -> S^-1 x`` by a banded factor (a Cholesky factor with ``lower`` given), as the
    plan has it: factored once, each application one solve with the stored factor; a
    tridiagonal ``S`` under ``Use.SOLVES`` solved afresh each time (a one-shot solve)."""
    plan = choose(S.offsets, S.shape[0], lower, use=use)
    if not plan.stored:  # no arrays: made where it is used, not carried by the loops
        return lambda x: solve(S, factor(S, plan), x, function="eigsh")
    stored = factor(S, plan)
    return lambda x: solve(S, stored, x, function="eigsh")


def inverse_of_m(problem: Problem, ops: Operators, tol: Array):
    """``x -> M^-1 x`` for mode 2 (see the module docstring)."""
    M = ops.M
    if problem.minv == GIVEN:
        return lambda x: apply(ops.Minv, x)
    if problem.minv == BANDED:
        return _banded_inverse(M, Use.FACTOR, False)
    if problem.minv == DENSE:
        factor_ = jax.scipy.linalg.cho_factor(M)
        return lambda x: jax.scipy.linalg.cho_solve(factor_, x)

    def iterative(x):
        y, info = cg(lambda v: apply(M, v), x, rtol=_loose(x, tol), atol=0.0)
        return _nan_unless(info.converged, y)

    return iterative


def shift_inverse(problem: Problem, ops: Operators, sigma: Array, tol: Array, dtype: Any):
    """``x -> (A - sigma M)^-1 x`` for modes 3 to 5 (see the module docstring), in
    ``dtype``."""
    A, M = ops.A, ops.M
    if problem.opinv == GIVEN:
        return lambda x: apply(ops.OPinv, x)
    if problem.opinv == BANDED:
        if M is None:
            S = shifted(A, sigma)
        else:
            S = add(A, M.with_data(M.data * sigma.astype(M.data.dtype)), subtract=True)
        return _banded_inverse(S, Use.SOLVES, None)
    n = problem.loop.n
    if problem.opinv == DENSE:
        S = dense(A, n, dtype) - sigma.astype(dtype) * dense(M, n, dtype)
        lu = jax.scipy.linalg.lu_factor(S)
        return lambda x: jax.scipy.linalg.lu_solve(lu, x)

    def iterative(x):
        # jaxdia.gmres's loop without its custom_linear_solve, whose transposed solve
        # would transpose a host product (the inner solves are never differentiated:
        # the eigenvalues' derivative is explicit).
        limit = _loose(x, tol) * jnp.linalg.norm(x)
        y, _, residual = gmres_cycles(
            lambda v: apply(A, v) - sigma.astype(v.dtype) * apply(M, v),
            x,
            None,
            lambda v: v,
            limit,
            10 * n,
            restart=min(20, n),
            side="right",
        )
        return _nan_unless((residual <= limit) & jnp.isfinite(residual), y)

    return iterative


def operator(problem: Problem, ops: Operators, sigma: Array, tol: Array, dtype: Any):
    """``(op, B)`` of the problem's mode for :func:`.lanczos.lanczos` (``B`` None: the
    Euclidean inner product, ``op`` of ``v``; else ``op`` of ``(v, B v)``), on vectors
    of ``dtype``."""
    A, M = ops.A, ops.M
    mode = problem.mode
    if mode == 1:
        return (lambda v: apply(A, v)), None
    if mode == 2:
        solve_m = inverse_of_m(problem, ops, tol)
        return (lambda v, Bv: solve_m(apply(A, v))), (lambda v: apply(M, v))
    inverse = shift_inverse(problem, ops, sigma, tol, dtype)
    if mode == 3:
        if M is None:
            return inverse, None
        return (lambda v, Bv: inverse(Bv)), (lambda v: apply(M, v))
    if mode == 4:  # B = A, and op v = (A - sigma M)^-1 (B v)
        return (lambda v, Bv: inverse(Bv)), (lambda v: apply(A, v))
    s = lambda v: sigma.astype(v.dtype)  # noqa: E731
    if M is None:
        return (lambda v: inverse(apply(A, v) + s(v) * v)), None
    return (lambda v, Bv: inverse(apply(A, v) + s(v) * Bv)), (lambda v: apply(M, v))


def eigenvalues(mode: int, theta: Array, sigma: Array) -> Array:
    """``lambda`` from the Ritz values ``theta`` of ``mode``'s operator."""
    if mode <= 2:
        return theta
    if mode == 3:
        return sigma + 1 / theta
    if mode == 4:
        return sigma * theta / (theta - 1)
    return sigma * (theta + 1) / (theta - 1)


def keys(mode: int, lam: Array, sigma: Array) -> Array:
    """The Ritz values of ``mode``'s operator for the eigenvalues ``lam`` (what ``which``
    ranks)."""
    if mode <= 2:
        return lam
    if mode == 3:
        return 1 / (lam - sigma)
    if mode == 4:
        return lam / (lam - sigma)
    return (lam + sigma) / (lam - sigma)


# -- the dense path ----------------------------------------------------------------------------


def _root(B: Array) -> Array:
    """``R`` with ``B = R^H R`` for a Hermitian positive semidefinite ``B`` (rounding's
    negative eigenvalues taken as zero)."""
    d, Q = jnp.linalg.eigh(B)
    return jnp.sqrt(jnp.maximum(d, 0))[:, None] * jnp.conj(Q.T)


def _pencil(A: Array, M: Array) -> tuple[Array, Array]:
    """All eigenpairs ``(lambda, X)`` of ``A x = lambda M x`` (columns ``M``-orthonormal)
    as LAPACK's ``?hegv`` finds them: ``C = L^-1 A L^-H`` with ``M = L L^H``, ``eigh(C)``,
    ``X = L^-H Y``. NaN where ``M`` is not positive definite."""
    L = jnp.linalg.cholesky(M)
    solve = jax.scipy.linalg.solve_triangular
    C = solve(L, jnp.conj(solve(L, jnp.conj(A.T), lower=True).T), lower=True)
    evals, Y = jnp.linalg.eigh((C + jnp.conj(C.T)) / 2)
    return evals, solve(L, Y, lower=True, trans="C")


def _transformed(mode: int, A: Array, M: Array, sigma: Array, dtype: Any):
    """All eigenpairs of modes 3 to 5 through the operator that Lanczos would run on
    (``B`` semidefinite allowed), its Ritz values ``theta`` for ranking: ``eigh`` of ``R
    (A - sigma M)^-1 R^H`` with ``B = R^H R``."""
    R = _root(A if mode == 4 else M).astype(dtype)
    lu = jax.scipy.linalg.lu_factor(A - sigma.astype(dtype) * M)
    Z = jax.scipy.linalg.lu_solve(lu, jnp.conj(R.T))  # (A - sigma M)^-1 R^H
    G = jnp.matmul(R, Z, precision=_HIGHEST)
    nu, Y = jnp.linalg.eigh((G + jnp.conj(G.T)) / 2)  # mode 3's theta
    lam = sigma + 1 / nu if mode != 4 else sigma * nu / (nu - 1)
    return lam, jnp.matmul(Z, Y, precision=_HIGHEST) / nu, 1 + 2 * sigma * nu if mode == 5 else nu


def dense_pairs(problem: Problem, ops: Operators, sigma: Array, dtype: Any) -> tuple[Array, Array]:
    """``(lambda, X)``: the ``k`` wanted eigenpairs, most wanted first, eigenvectors as
    the rows of ``X`` (``B``-orthonormal), of the problem made dense in ``dtype`` (see
    the module docstring)."""
    n, k, which = problem.loop.n, problem.loop.k, problem.loop.which
    mode = problem.mode
    A = dense(ops.A, n, dtype)
    if ops.M is None and mode != 2:
        evals, evecs = jnp.linalg.eigh(A)
        wanted = rank(keys(mode, evals, sigma), which)[:k]
        lam, X = evals[wanted], evecs[:, wanted].T
        if mode == 4:  # B = A: x^H A x = lambda for a unit x (NaN: A is not definite)
            X = X / jnp.sqrt(jnp.where(lam > 0, lam, jnp.nan))[:, None].astype(X.dtype)
        return lam, X
    M = dense(ops.M, n, dtype)

    def definite(_):
        """The pencil by ``M``'s Cholesky factor: the most accurate pairs."""
        lam, X = _pencil(A, M)
        if mode == 4:  # A-orthonormal: x^H A x = lambda x^H M x = lambda
            X = X / jnp.sqrt(jnp.where(lam > 0, lam, jnp.nan)).astype(X.dtype)
        return lam, X, keys(mode, lam, sigma)

    if mode == 2:  # M must be positive definite (NaN otherwise)
        lam, X, theta = definite(None)
    else:  # M may be semidefinite (indefinite in buckling mode): the transformed operator
        lam, X, theta = lax.cond(
            jnp.all(jnp.isfinite(jnp.linalg.cholesky(M))),
            definite,
            lambda _: _transformed(mode, A, M, sigma, dtype),
            None,
        )
    wanted = rank(theta, which)[:k]
    return lam[wanted], X[:, wanted].T


# -- one problem -------------------------------------------------------------------------------


def output_order(problem: Problem, lam: Array) -> Array:
    """The order SciPy returns the eigenvalues in: ascending, except without eigenvectors
    in modes 1 and 2 (ARPACK's order: from the least wanted to the most for ``LM``,
    ``SM``, ``SA``; ascending for ``LA`` and ``BE``)."""
    if problem.vectors or problem.mode > 2:
        return jnp.argsort(lam, stable=True)
    which = problem.loop.which
    key = {"LM": jnp.abs(lam), "SM": -jnp.abs(lam), "SA": -lam}.get(which, lam)
    return jnp.argsort(key, stable=True)


def pairs(
    problem: Problem, ops: Operators, v0: Array, sigma: Array, tol: Array
) -> tuple[Array, Array, EigshInfo, Array]:
    """``(w, V as columns, EigshInfo, passed)`` of one problem, in SciPy's order;
    ``passed`` says which pairs passed the convergence test."""
    loop, mode = problem.loop, problem.mode
    k = loop.k
    standard = ops.M is None and mode in (1, 3)
    if problem.dense:
        lam, Y = dense_pairs(problem, ops, sigma, v0.dtype)
        passed = jnp.ones((k,), bool)
        iterations = matvecs = jnp.int32(0)
    else:
        op, B = operator(problem, ops, sigma, tol, v0.dtype)
        ritz = lanczos(op, v0, loop, tol, B)
        lam = jnp.real(eigenvalues(mode, ritz.theta, sigma))
        Y, passed, iterations, matvecs = ritz.Y, ritz.passed, ritz.iterations, ritz.matvecs
    order = output_order(problem, lam)
    lam, Y, passed = lam[order], Y[order], passed[order]
    V = Y.T  # eigenvectors as columns, as SciPy returns them
    A, M = ops.A, ops.M
    if isinstance(A, DiaParts):
        AV = spmm(A.data, V, offsets=A.offsets, shape=A.shape)
    else:
        AV = apply(A, V)
    MV = apply(M, V)
    residuals = jnp.linalg.norm(AV - MV * lam.astype(V.dtype), axis=0)
    if problem.dense and standard:
        converged, nconv = jnp.bool_(True), jnp.int32(k)
    else:
        fine = passed & accurate(problem, ops, lam, V, AV, MV, residuals, sigma, tol)
        passed = fine
        converged, nconv = jnp.all(fine), jnp.sum(fine, dtype=np.int32)
    info = EigshInfo(converged, nconv, iterations, matvecs, residuals)
    return lam.astype(residuals.dtype), V, info, passed


#: The rounding allowance of the true residual test (:func:`accurate`), in units of
#: ``sqrt(n) eps`` times the scale of the residual.
RESIDUAL_ROUNDING = 1e3


def accurate(
    problem: Problem,
    ops: Operators,
    lam: Array,
    V: Array,
    AV: Array,
    MV: Array,
    residuals: Array,
    sigma: Array,
    tol: Array,
) -> Array:
    """Whether each pair's true residual ``||A v - lambda M v||`` passes the test that
    the Krylov relation estimated, plus rounding, ``RESIDUAL_ROUNDING sqrt(n) eps``
    times the residual's scale. The estimate is exact only up to the relation's
    rounding, ``eps ||op||``: where ``A - sigma M`` is nearly singular, ``||op||`` is
    huge and the pairs away from ``sigma`` pass the estimate with true residuals many
    orders of magnitude above it.

    A standard problem (no ``M``, mode 1 or 3) is tested as ARPACK's estimate is:
    ``tol |lambda|`` (with a shift ``tol (|lambda| + ||A - sigma I||)``), with rounding
    ``sqrt(n) eps ||A||``. A generalized one by its backward error: ``tol (||A|| +
    (|lambda| + |sigma|) ||M||) ||v||``, with rounding ``sqrt(n) eps (||A|| + |lambda|
    ||M||) ||v||``: the pair is then an exact one of ``A`` and ``M`` perturbed by
    ``tol`` relative to their norms. The norms of functions are estimated from the
    products at hand (:func:`norm_bound`)."""
    real = residuals.dtype
    eps = float(jnp.finfo(real).eps)
    tol = jnp.where(tol > 0, tol, eps).astype(real)
    rounding = RESIDUAL_ROUNDING * math.sqrt(problem.loop.n) * eps
    a = norm_bound(ops.A, V, AV).astype(real)
    size = jnp.abs(lam).astype(real)
    if ops.M is None and problem.mode in (1, 3):
        allowed = tol * size
        if problem.mode == 3:
            allowed = allowed + tol * (a + jnp.abs(sigma).astype(real))
        return residuals <= allowed + rounding * a
    m = norm_bound(ops.M, V, MV).astype(real)
    shift = jnp.abs(sigma).astype(real) if problem.mode > 2 else 0
    length = jnp.linalg.norm(V, axis=0).astype(real)
    allowed = tol * (a + (size + shift) * m) * length
    return residuals <= allowed + rounding * (a + size * m) * length
