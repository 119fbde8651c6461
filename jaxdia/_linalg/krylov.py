"""Krylov solvers that report: preconditioned conjugate gradients and BiCGStab.

:func:`cg` and :func:`bicgstab` (public) check their operands and run the loops below as
one compiled call, returning ``(x, info)`` with a :class:`SolveInfo` (iterations, final
residual, whether it converged).

The loops (:func:`cg_iterations`, :func:`bicgstab_iterations`) follow
``jax.scipy.sparse.linalg.cg`` and ``bicgstab`` (the same recurrences, stopping test and
breakdown rules), with three differences: they return the number of iterations; they solve
a batch of independent systems at once (leading dims of ``b``: each system has its own step
sizes, stops on its own and keeps its solution while the others go on); and a breakdown
stops the system instead of returning NaN. Their ``matvec`` and ``M`` map arrays of ``b``'s
shape ``(*batch, n)`` to the same shape.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import ArrayLike

from .._checks import as_array, broadcast_batch, is_traced, scalar, static_int
from .._matrix import DiaMatrix, as_square_matrix

Operator = Callable[[Array], Array]


def _dot(a: Array, b: Array) -> Array:
    """``vdot`` over the last axis (conjugating ``a``), one per system."""
    return jnp.sum(a.conj() * b, axis=-1)


def _squared_norm(a: Array) -> Array:
    return jnp.sum((a.conj() * a).real, axis=-1)


def _where(active: Array, new: Array, old: Array) -> Array:
    """Per system: ``new`` where the system is active, else ``old``."""
    if new.ndim > active.ndim:
        active = active[..., None]
    return jnp.where(active, new, old)


def _divide(a: Array, b: Array, ok: Array) -> Array:
    """``a / b`` where ``ok``, else 0 (no NaN from a stopped or broken-down system)."""
    return jnp.where(ok, a / jnp.where(ok, b, 1), 0)


def cg_iterations(
    matvec: Operator, b: Array, x0: Array | None, M: Operator, threshold: Array, maxiter: Any
):
    """Preconditioned CG from ``x0`` (None: zeros, which saves a product) until
    ``|b - A x| <= threshold`` (per system, on the recursively updated residual) or
    ``maxiter`` iterations. Returns ``(x, iterations)``.

    The loop body applies ``M`` once (the first direction is made in the loop, from
    ``p = 0``), so a large preconditioner such as a V-cycle is compiled once.
    """
    r = b if x0 is None else b - matvec(x0)
    x0 = jnp.zeros_like(b) if x0 is None else x0
    threshold2 = threshold**2
    k = jnp.zeros(r.shape[:-1], jnp.int32)
    active = (_squared_norm(r) > threshold2) & (k < maxiter)
    gamma = jnp.ones(r.shape[:-1], r.dtype)

    def cond(state):
        return jnp.any(state[-1])

    def body(state):
        x, r, p, gamma_before, k, active = state
        z = M(r)
        gamma = _dot(r, z)
        ok = active & (gamma != 0)
        beta = _divide(gamma, gamma_before, ok)  # p is 0 on the first iteration
        p = _where(ok, z + beta[..., None] * p, p)
        q = matvec(p)
        pq = _dot(p, q)
        ok = ok & (pq != 0)
        alpha = _divide(gamma, pq, ok)
        x = x + alpha[..., None] * p
        r = r - alpha[..., None] * q
        k = k + ok
        active = ok & (_squared_norm(r) > threshold2) & (k < maxiter)
        return x, r, p, _where(ok, gamma, gamma_before), k, active

    x, *_, k, _ = lax.while_loop(cond, body, (x0, r, jnp.zeros_like(r), gamma, k, active))
    return x, k


def bicgstab_iterations(
    matvec: Operator,
    b: Array,
    x0: Array | None,
    M: Operator,
    threshold: Array,
    maxiter: Any,
    *,
    one_site: bool = False,
):
    """Preconditioned BiCGStab (van der Vorst's, as in ``jax.scipy.sparse.linalg``) from
    ``x0``; stopping as :func:`cg`. Returns ``(x, iterations)``.

    Each iteration applies ``M`` and ``A`` twice, to ``p`` and then to ``s``, and stops a
    system half way when ``s`` meets the tolerance (as JAX and SciPy do). The loop body
    is one iteration, as JAX's, unless ``one_site``: then it is a half iteration that
    alternates the two (all systems in step) and applies ``M`` once, so that a large
    preconditioner such as a V-cycle is compiled once, and stops the whole loop at a half
    step where every system is done. That loop passes its state through two
    ``lax.cond`` each half step, which on CPU costs about two vector copies per state
    vector: for a cheap ``M`` it is the slower loop (see :func:`large_program`).
    """
    r = b if x0 is None else b - matvec(x0)
    x0 = jnp.zeros_like(b) if x0 is None else x0
    threshold2 = threshold**2
    shape = r.shape[:-1]
    one = jnp.ones(shape, r.dtype)
    k = jnp.zeros(shape, jnp.int32)
    active = (_squared_norm(r) > threshold2) & (k < maxiter)
    zeros = jnp.zeros_like(r)
    if not one_site:
        return _bicgstab_full(matvec, M, threshold2, maxiter, x0, r, one, k, active, zeros)
    # x, r, rhat, alpha, omega, rho, rho_next, p, v, s, phat, ok, k, active, second half
    state = (x0, r, r, one, one, one, one, zeros, zeros, zeros, zeros, active, k, active, False)

    def cond(state):
        return jnp.any(state[-2])

    def first_direction(state):
        x, r, rhat, alpha, omega, rho, _, p, v, s, phat, _, k, active, _ = state
        rho_next = _dot(rhat, r)
        ok = active & (rho_next != 0) & (omega != 0)
        beta = _divide(rho_next, rho, ok) * _divide(alpha, omega, ok)
        p = _where(ok, r + beta[..., None] * (p - omega[..., None] * v), p)
        return p, rho_next, ok, p

    def second_direction(state):
        p, rho_next, ok, s = state[7], state[6], state[11], state[9]
        return p, rho_next, ok, s

    def first_half(state, p, rho_next, ok, phat, v_next):
        x, r, rhat, alpha, omega, rho, _, _, v, s, _, _, k, active, _ = state
        v = _where(ok, v_next, v)
        rv = _dot(rhat, v)
        ok = ok & (rv != 0)
        alpha = _where(ok, _divide(rho_next, rv, ok), alpha)
        s = r - alpha[..., None] * v
        half = ok & (_squared_norm(s) <= threshold2)
        x = _where(half, x + alpha[..., None] * phat, x)
        r = _where(half, s, r)
        k = k + half
        # A system done half way takes no part in the second half.
        ok = ok & ~half
        return (x, r, rhat, alpha, omega, rho, rho_next, p, v, s, phat, ok, k, ok, True)

    def second_half(state, shat, t):
        x, r, rhat, alpha, omega, rho, rho_next, p, v, s, phat, ok, k, active, _ = state
        tt = _dot(t, t)
        full = ok & (tt != 0)
        omega = _where(full, _divide(_dot(t, s), tt, full), omega)
        step = jnp.where(full, omega, 0)[..., None]
        x = _where(ok, x + alpha[..., None] * phat + step * shat, x)
        r = _where(ok, s - step * t, r)
        k = k + ok
        active = full & (_squared_norm(r) > threshold2) & (k < maxiter) & (omega != 0)
        rho = _where(ok, rho_next, rho)
        return (x, r, rhat, alpha, omega, rho, rho_next, p, v, s, phat, ok, k, active, False)

    def body(state):
        second = state[-1]
        p, rho_next, ok, u = lax.cond(second, second_direction, first_direction, state)
        w = M(u)
        y = matvec(w)
        return lax.cond(
            second,
            lambda state: second_half(state, w, y),
            lambda state: first_half(state, p, rho_next, ok, w, y),
            state,
        )

    state = lax.while_loop(cond, body, state)
    return state[0], state[-3]


def _bicgstab_full(matvec, M, threshold2, maxiter, x0, r, one, k, active, zeros):
    """:func:`bicgstab_iterations`' loop with one iteration per body (JAX's)."""

    def cond(state):
        return jnp.any(state[-1])

    def body(state):
        x, r, rhat, alpha, omega, rho, p, v, k, active = state
        rho_next = _dot(rhat, r)
        ok = active & (rho_next != 0) & (omega != 0)
        beta = _divide(rho_next, rho, ok) * _divide(alpha, omega, ok)
        p = _where(ok, r + beta[..., None] * (p - omega[..., None] * v), p)
        phat = M(p)
        v = _where(ok, matvec(phat), v)
        rv = _dot(rhat, v)
        ok = ok & (rv != 0)
        alpha = _where(ok, _divide(rho_next, rv, ok), alpha)
        s = r - alpha[..., None] * v
        half = ok & (_squared_norm(s) <= threshold2)
        shat = M(s)
        t = matvec(shat)
        tt = _dot(t, t)
        full = ok & ~half & (tt != 0)
        omega = _where(full, _divide(_dot(t, s), tt, full), omega)
        step = jnp.where(full, omega, 0)[..., None]
        x = _where(ok, x + alpha[..., None] * phat + step * shat, x)
        r = _where(ok, s - step * t, r)
        k = k + ok
        active = full & (_squared_norm(r) > threshold2) & (k < maxiter) & (omega != 0)
        rho = _where(ok, rho_next, rho)
        return x, r, rhat, alpha, omega, rho, p, v, k, active

    state = (x0, r, r, one, one, one, zeros, zeros, k, active)
    x, *_, k, _ = lax.while_loop(cond, body, state)
    return x, k


#: A preconditioner of more operations than this (counted in its traced program, nested
#: ones included) is applied at one site of BiCGStab's loop, so that it is compiled once;
#: a smaller one (none, Jacobi's: 1, a Chebyshev polynomial: under 100, a banded LU
#: solve: about 25) at two, the faster loop. The smallest V-cycles have about 300.
LARGE_PROGRAM = 200


def _operations(jaxpr: jax.extend.core.Jaxpr) -> int:
    """The equations of ``jaxpr`` and of the programs nested in them (loop bodies,
    branches, inner ``jit`` calls)."""
    total = len(jaxpr.eqns)
    for equation in jaxpr.eqns:
        for value in equation.params.values():
            for nested in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(nested, jax.extend.core.ClosedJaxpr):
                    nested = nested.jaxpr
                if isinstance(nested, jax.extend.core.Jaxpr):
                    total += _operations(nested)
    return total


def large_program(M: Operator | None, b: Array) -> bool:
    """Whether ``M`` applied to arrays like ``b`` traces to more than
    :data:`LARGE_PROGRAM` operations (a trace only: nothing is compiled or run)."""
    if M is None:
        return False
    program = jax.make_jaxpr(M)(jax.ShapeDtypeStruct(b.shape, b.dtype))
    return _operations(program.jaxpr) > LARGE_PROGRAM


def threshold(b: Array, rtol: ArrayLike, atol: ArrayLike) -> Array:
    """``max(rtol * |b|, atol)`` per system, SciPy's and JAX's stopping rule."""
    return jnp.maximum(rtol * jnp.sqrt(_squared_norm(b)), atol)


def residual_norm(matvec: Operator, b: Array, x: Array) -> Array:
    return jnp.sqrt(_squared_norm(b - matvec(x)))


# -- the public solvers -------------------------------------------------------------------


def vector_product(A: Any) -> Callable[[Array], Array]:
    """``v -> A @ v`` for vectors stacked on leading dims (``(*batch, n)``): ``A`` a
    DiaMatrix (or another operator with ``@``), or a function."""

    def matvec(v: Array) -> Array:
        if callable(A) and not isinstance(A, DiaMatrix):
            result: Any = A(v)
            return result
        product: Any = A @ (v if v.ndim == 1 else v[..., None])
        return product if v.ndim == 1 else product[..., 0]

    return matvec


class SolveInfo(NamedTuple):
    """What :func:`jaxdia.cg` and :func:`jaxdia.bicgstab` report (a pytree, one entry per
    system of a batch).

    Attributes:
      iterations: the iterations run (int32).
      residual_norm: ``|b - A x|`` of the returned ``x``, recomputed with one more product
        (not the recursively updated residual the iteration tracks).
      converged: whether ``residual_norm <= max(rtol * |b|, atol)``. False when
        ``maxiter`` ran out, when the method broke down, or when rounding kept the true
        residual above the tolerance that the recursive one met.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(100, 100))
      >>> x, info = jaxdia.cg(A, jnp.ones(100), maxiter=5)
      >>> int(info.iterations), bool(info.converged)
      (5, False)
    """

    iterations: Array
    residual_norm: Array
    converged: Array


def _static_callable(f: Any) -> Any:
    """``f`` as a jit argument: pytrees (DiaMatrix, Multigrid, Partial, ...) as they are,
    a plain function as a ``Partial`` (the function itself is static)."""
    if f is None:
        return None
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(f)):
        return jax.tree_util.Partial(f)
    return f


def _solve_args(function: str, A: Any, b: ArrayLike, M: Any, x0: ArrayLike | None, maxiter: Any):
    if isinstance(A, DiaMatrix):
        A = as_square_matrix(A, function)
        n, batch, dtype = A.shape[0], A.batch_shape, A.dtype
    elif callable(A):
        n, batch, dtype = None, (), None
    else:
        raise TypeError(
            f"{function}: A must be a jaxdia.DiaMatrix or a function v -> A v, got "
            f"{type(A).__name__}"
        )
    b = as_array(b, f"{function}: b")
    if b.ndim == 0 or (n is not None and b.shape[-1] != n):
        raise ValueError(
            f"{function}: b must have shape ({n if n is not None else 'n'},) or (..., n), got "
            f"shape {b.shape}"
        )
    n = b.shape[-1]
    batch = broadcast_batch(f"{function}: A and b", batch, b.shape[:-1])
    if x0 is not None:
        x0 = as_array(x0, f"{function}: x0")
        if x0.ndim == 0 or x0.shape[-1] != n:
            raise ValueError(f"{function}: x0 must have shape ({n},) or (..., {n}), got {x0.shape}")
        batch = broadcast_batch(f"{function}: A, b and x0", batch, x0.shape[:-1])
    if M is not None and not callable(M):
        raise TypeError(
            f"{function}: M must be a preconditioner function v -> M v (e.g. jaxdia.multigrid, "
            f"jaxdia.chebyshev, jaxdia.jacobi), got {type(M).__name__}"
        )
    if maxiter is None:
        maxiter = np.int32(min(10 * n, np.iinfo(np.int32).max))
    elif is_traced(maxiter):  # a traced count is fine: it is an argument of the loop
        maxiter = jnp.asarray(maxiter, np.int32)
    else:
        maxiter = static_int(maxiter, f"{function}: maxiter")
        if maxiter < 0:
            raise ValueError(f"{function}: maxiter must be >= 0, got {maxiter}")
        maxiter = np.int32(min(maxiter, np.iinfo(np.int32).max))
    result = jnp.result_type(*(t for t in (dtype, b.dtype) if t is not None))
    if not jnp.issubdtype(result, jnp.inexact):
        result = jnp.result_type(float)
    return A, b, M, x0, maxiter, batch, np.dtype(result)


@functools.partial(jax.jit, static_argnames=("method", "batch", "dtype"))
def _run_krylov(A, b, x0, M, rtol, atol, maxiter, *, method, batch, dtype):
    """The solve as one compiled call; ``maxiter`` is an argument, so that changing it
    does not compile again."""
    n = b.shape[-1]
    b = jnp.broadcast_to(b.astype(dtype), (*batch, n))
    x0 = None if x0 is None else jnp.broadcast_to(x0.astype(dtype), b.shape)
    matvec = vector_product(A)
    precondition = (lambda v: v) if M is None else M
    if method == "cg":
        loop = cg_iterations
    else:
        loop = functools.partial(bicgstab_iterations, one_site=large_program(M, b))

    def solve(matvec, rhs):
        limit = threshold(rhs, rtol, atol)
        x, iterations = loop(matvec, rhs, x0, precondition, limit, maxiter)
        return x.astype(rhs.dtype), (iterations, limit)

    x, (iterations, limit) = lax.custom_linear_solve(
        matvec, b, solve, solve, symmetric=method == "cg", has_aux=True
    )
    residual = residual_norm(matvec, b, x)
    # An infinite tolerance (|b| not finite in the working precision) is met by nothing:
    # inf <= inf would report success for an x that is all zeros.
    converged = (residual <= limit) & jnp.isfinite(residual)
    return x, SolveInfo(iterations, residual, converged)


def _tolerance(value: Any, name: str) -> Any:
    """A tolerance: a traced one as it is, a concrete one checked and as a Python float."""
    value = scalar(value, name, nonnegative=True)
    return value if is_traced(value) else float(value)


def cg(
    A: Any,
    b: ArrayLike,
    *,
    M: Any = None,
    x0: ArrayLike | None = None,
    rtol: ArrayLike = 1e-5,
    atol: ArrayLike = 0.0,
    maxiter: int | None = None,
) -> tuple[Array, SolveInfo]:
    """Solves ``A x = b`` by preconditioned conjugate gradients, and says how it went.

    ``A`` must be Hermitian positive definite, and so must ``M``
    (:func:`jaxdia.multigrid` of a symmetric positive definite stencil,
    :func:`jaxdia.chebyshev`, :func:`jaxdia.jacobi`). The iteration is
    ``jax.scipy.sparse.linalg.cg``'s, stopping when ``|b - A x| <= max(rtol * |b|,
    atol)`` (SciPy's rule; JAX calls ``rtol`` ``tol``) or after ``maxiter`` iterations,
    and returns ``(x, info)``: ``info.iterations``, ``info.residual_norm`` (recomputed
    from ``x``) and ``info.converged``, so non-convergence is visible without computing
    the residual by hand.

    It runs as one compiled call (under ``jit`` it is inlined), works under ``vmap``, and
    is differentiable in ``b`` and ``A.data`` by implicit differentiation
    (``lax.custom_linear_solve``, as JAX's solvers): a gradient costs one more solve with
    the same ``M`` and never differentiates through the iterations or the preconditioner.
    A batched ``A`` and/or ``b`` (leading dims) solves independent systems at once, each
    with its own iterations, stopping on its own.

    Args:
      A: a square DiaMatrix (possibly batched), or a function ``v -> A v`` on arrays of
        ``b``'s shape.
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      M: the preconditioner, a function ``v -> M v`` on arrays of ``b``'s shape (None:
        none).
      x0: the initial guess (default zeros).
      rtol, atol: relative and absolute tolerances on the residual norm.
      maxiter: the most iterations (default ``10 * n``); an argument of the compiled
        solve (changing it compiles nothing), which may be traced.

    Returns:
      ``(x, info)``: the solution, of the broadcast batch shape and ``b``'s last dim, in
      the promoted dtype of ``A`` and ``b``; and a :class:`jaxdia.SolveInfo` whose fields
      have the batch shape.

    Raises:
      TypeError: if ``A`` is neither a DiaMatrix nor a function, or ``M`` is not
        callable.
      ValueError: if ``A`` is not square, the shapes do not fit, or a tolerance or
        ``maxiter`` is negative.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.0, 2.5, -1.0], offsets=[-1, 0, 1], shape=(50, 50))
      >>> x, info = jaxdia.cg(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-6)
      >>> bool(info.converged), bool(info.residual_norm < 1e-6 * jnp.sqrt(50.0))
      (True, True)
    """
    return _solve("cg", A, b, M, x0, rtol, atol, maxiter)


def bicgstab(
    A: Any,
    b: ArrayLike,
    *,
    M: Any = None,
    x0: ArrayLike | None = None,
    rtol: ArrayLike = 1e-5,
    atol: ArrayLike = 0.0,
    maxiter: int | None = None,
) -> tuple[Array, SolveInfo]:
    """Solves ``A x = b`` by preconditioned BiCGStab, for nonsymmetric ``A``, and says how
    it went.

    The iteration is ``jax.scipy.sparse.linalg.bicgstab``'s (van der Vorst's BiCGStab,
    with right preconditioning by ``M``); everything else (stopping rule, ``info``,
    batches, compilation, implicit differentiation) is as for :func:`jaxdia.cg`. A
    breakdown (a zero inner product) stops the system and leaves ``info.converged``
    False, where JAX's returns NaN. The gradient solves with ``A^T`` using the same
    ``M``, as JAX's does.

    Args:
      A: a square DiaMatrix (possibly batched), or a function ``v -> A v``.
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      M: the preconditioner, a function ``v -> M v`` (None: none).
      x0: the initial guess (default zeros).
      rtol, atol: relative and absolute tolerances on the residual norm.
      maxiter: the most iterations (default ``10 * n``); each costs two products with
        ``A`` and two applications of ``M``.

    Returns:
      ``(x, info)`` as :func:`jaxdia.cg`.

    Raises:
      TypeError: if ``A`` is neither a DiaMatrix nor a function, or ``M`` is not
        callable.
      ValueError: if ``A`` is not square, the shapes do not fit, or a tolerance or
        ``maxiter`` is negative.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.2, 2.5, -0.8], offsets=[-1, 0, 1], shape=(50, 50))
      >>> x, info = jaxdia.bicgstab(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-5)
      >>> bool(info.converged)  # float32 (x64 off): 1e-5 is well above its rounding
      True
    """
    return _solve("bicgstab", A, b, M, x0, rtol, atol, maxiter)


def _solve(method, A, b, M, x0, rtol, atol, maxiter):
    A, b, M, x0, maxiter, batch, dtype = _solve_args(method, A, b, M, x0, maxiter)
    rtol = _tolerance(rtol, f"{method}: rtol")
    atol = _tolerance(atol, f"{method}: atol")
    return _run_krylov(
        _static_callable(A),
        b,
        x0,
        _static_callable(M),
        rtol,
        atol,
        maxiter,
        method=method,
        batch=batch,
        dtype=dtype,
    )
