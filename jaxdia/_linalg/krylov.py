"""Krylov solvers that report: preconditioned conjugate gradients and BiCGStab.

:func:`cg` and :func:`bicgstab` (public) check their operands (:mod:`.operands`: every
operator SciPy takes, SciPy's ``x0="Mb"`` and ``callback``) and run the loops below as
one compiled call, returning ``(x, info)`` with a :class:`SolveInfo` (iterations, final
residual, whether it converged).

The loops (:func:`cg_iterations`, :func:`bicgstab_iterations`) follow
``jax.scipy.sparse.linalg.cg`` and ``bicgstab`` (the same recurrences, stopping test and
breakdown rules), with three differences: they return the number of iterations; they solve
a batch of independent systems at once (leading dims of ``b``: each system has its own step
sizes, stops on its own and keeps its solution while the others go on); and a breakdown
stops the system instead of returning NaN. Their ``matvec`` and ``M`` map arrays of ``b``'s
shape ``(*batch, n)`` to the same shape.

:func:`cg_fused_iterations` and :func:`bicgstab_fused_iterations` are the same methods
rearranged so that the inner products of each step are one reduction (a stack of
elementwise products summed at once): on a sharded matrix, one all-reduce per CG
iteration (Chronopoulos and Gear, J. Comput. Appl. Math. 25, 1989) and one per BiCGStab
half step, where the standard loops pay three and three to five (see
:func:`jaxdia.bicgstab`). Both test the residual norm one step late, with the next
step's inner products, and so apply ``M`` and ``A`` once more before stopping than the
standard loops; the iterates are the same in exact arithmetic.
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

from .._typing import ArrayLike, OperatorLike, Scalar
from .operands import callback_of, solve_operands
from .operators import on_host, vector_product

#: What the loops apply: ``A`` and ``M`` as functions of ``(*batch, n)`` arrays.
MatVec = Callable[[Array], Array]
#: What the loops hand each iterate to (``report(x, when)``: ``when`` a traced bool, False
#: for a loop body that did not move ``x``): a callback's host call (:func:`reporter`).
Report = Callable[[Array, Any], None]


def _dot(a: Array, b: Array) -> Array:
    """``vdot`` over the last axis (conjugating ``a``), one per system."""
    return jnp.sum(a.conj() * b, axis=-1)


def _zeros_like(v: Array) -> Array:
    """Zeros of ``v``'s shape, dtype and sharding (``jnp.zeros_like`` of a traced
    sharded vector loses its sharding inside ``custom_linear_solve`` on JAX 0.12, and
    a replicated loop state costs an all-gather per iteration)."""
    return jnp.where(False, v, jnp.zeros((), v.dtype))


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
    matvec: MatVec,
    b: Array,
    x0: Array | None,
    M: MatVec,
    threshold: Array,
    maxiter: ArrayLike,
    report: Report | None = None,
):
    """Preconditioned CG from ``x0`` (None: zeros, which saves a product) until
    ``|b - A x| <= threshold`` (per system, on the recursively updated residual) or
    ``maxiter`` iterations. Returns ``(x, iterations)``. ``report`` (see :data:`Report`)
    gets each iterate.

    The loop body applies ``M`` once (the first direction is made in the loop, from
    ``p = 0``), so a large preconditioner such as a V-cycle is compiled once.
    """
    r = b if x0 is None else b - matvec(x0)
    x0 = _zeros_like(b) if x0 is None else x0
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
        if report is not None:
            report(x, True)
        return x, r, p, _where(ok, gamma, gamma_before), k, active

    x, *_, k, _ = lax.while_loop(cond, body, (x0, r, _zeros_like(r), gamma, k, active))
    return x, k


def bicgstab_iterations(
    matvec: MatVec,
    b: Array,
    x0: Array | None,
    M: MatVec,
    threshold: Array,
    maxiter: ArrayLike,
    report: Report | None = None,
    *,
    one_site: bool = False,
):
    """Preconditioned BiCGStab (van der Vorst's, as in ``jax.scipy.sparse.linalg``) from
    ``x0``; stopping as :func:`cg`. Returns ``(x, iterations)``; ``report`` gets the
    iterate after each iteration (and after a half-way stop that ends the loop).

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
    x0 = _zeros_like(b) if x0 is None else x0
    threshold2 = threshold**2
    shape = r.shape[:-1]
    one = jnp.ones(shape, r.dtype)
    k = jnp.zeros(shape, jnp.int32)
    active = (_squared_norm(r) > threshold2) & (k < maxiter)
    zeros = _zeros_like(r)
    if not one_site:
        return _bicgstab_full(matvec, M, threshold2, maxiter, x0, r, one, k, active, zeros, report)
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
        # ``active``: the systems the first half left going (not those it stopped).
        x, r, rhat, alpha, omega, rho, rho_next, p, v, s, phat, ok, k, active, _ = state
        tt = _dot(t, t)
        full = active & (tt != 0)
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
        state = lax.cond(
            second,
            lambda state: second_half(state, w, y),
            lambda state: first_half(state, p, rho_next, ok, w, y),
            state,
        )
        if report is not None:  # a whole iteration done, or the loop ending half way
            report(state[0], second | ~jnp.any(state[-2]))
        return state

    state = lax.while_loop(cond, body, state)
    return state[0], state[-3]


def _bicgstab_full(matvec, M, threshold2, maxiter, x0, r, one, k, active, zeros, report):
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
        if report is not None:
            report(x, True)
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


def large_program(M: MatVec | None, b: Array) -> bool:
    """Whether ``M`` applied to arrays like ``b`` traces to more than
    :data:`LARGE_PROGRAM` operations (a trace only: nothing is compiled or run)."""
    if M is None:
        return False
    program = jax.make_jaxpr(M)(jax.ShapeDtypeStruct(b.shape, b.dtype))
    return _operations(program.jaxpr) > LARGE_PROGRAM


def _reduce(*pairs: tuple[Array, Array]) -> list[Array]:
    """``[_dot(a, b) for a, b in pairs]`` as one reduction: the elementwise products
    stacked and summed over the last axis together (on a sharded vector, one all-reduce
    of ``len(pairs)`` scalars per system instead of one each)."""
    dtype = jnp.result_type(*(x.dtype for pair in pairs for x in pair))
    products = jnp.stack([(a.conj() * b).astype(dtype) for a, b in pairs])
    return list(jnp.sum(products, axis=-1))


def cg_fused_iterations(
    matvec: MatVec,
    b: Array,
    x0: Array | None,
    M: MatVec,
    threshold: Array,
    maxiter: ArrayLike,
    report: Report | None = None,
):
    """Chronopoulos and Gear's conjugate gradients: :func:`cg_iterations` with the
    inner products of an iteration, ``(r, z)``, ``(z, A z)`` and ``|r|^2``, in one
    reduction. Returns ``(x, iterations)``.

    With ``z = M r`` and ``w = A z`` the step length is ``alpha = gamma / (delta - beta
    gamma / alpha_before)`` (``gamma = (r, z)``, ``delta = (z, w)``), and ``s = A p`` is
    updated by the recurrence ``s = w + beta s`` rather than computed: the same
    ``x``, ``r`` and ``p`` as standard CG in exact arithmetic, one more vector update per
    iteration. The stopping test reads ``|r|^2`` of the same reduction, so the iteration
    that finds ``r`` small enough has applied ``M`` and ``A`` once for nothing; the
    iteration count is standard CG's.
    """
    r = b if x0 is None else b - matvec(x0)
    x0 = _zeros_like(b) if x0 is None else x0
    threshold2 = threshold**2
    shape = r.shape[:-1]
    k = jnp.zeros(shape, jnp.int32)
    active = (_squared_norm(r) > threshold2) & (k < maxiter)
    one = jnp.ones(shape, r.dtype)

    def cond(state):
        return jnp.any(state[-1])

    def body(state):
        x, r, p, s, gamma_before, alpha_before, k, active = state
        z = M(r)
        w = matvec(z)
        gamma, delta, rr = _reduce((r, z), (z, w), (r, r))
        active = active & (rr.real > threshold2)
        ok = active & (gamma != 0)
        beta = _divide(gamma, gamma_before, ok & (k > 0))  # p = s = 0 before the first
        denominator = delta - beta * _divide(gamma, alpha_before, ok)
        ok = ok & (denominator != 0)
        alpha = _divide(gamma, denominator, ok)
        p = _where(ok, z + beta[..., None] * p, p)
        s = _where(ok, w + beta[..., None] * s, s)
        x = x + alpha[..., None] * p
        r = r - alpha[..., None] * s
        k = k + ok
        gamma = _where(ok, gamma, gamma_before)
        alpha = _where(ok, alpha, alpha_before)
        if report is not None:  # not the last body, which only reads the stopping test
            report(x, jnp.any(ok))
        return x, r, p, s, gamma, alpha, k, ok & (k < maxiter)

    zeros = _zeros_like(r)
    state = (x0, r, zeros, zeros, one, one, k, active)
    x, *_, k, _ = lax.while_loop(cond, body, state)
    return x, k


def bicgstab_fused_iterations(
    matvec: MatVec,
    b: Array,
    x0: Array | None,
    M: MatVec,
    threshold: Array,
    maxiter: ArrayLike,
    report: Report | None = None,
):
    """BiCGStab (:func:`bicgstab_iterations`'s) with one reduction per half step, two
    per iteration: the fewest its two step lengths allow (``alpha`` needs ``A M p``,
    ``omega`` needs ``A M s``, and ``s`` needs ``alpha``). Returns ``(x, iterations)``.

    The first half's reduction holds ``(rhat, A M p)`` and ``|r|^2`` (the stopping test
    of the previous iteration); the second's ``(t, s)``, ``|t|^2`` and ``|s|^2`` (the
    half-way stop) with ``(rhat, s)`` and ``(rhat, t)``, from which the next ``rho =
    (rhat, s - omega t)`` follows without a reduction of its own. The loop runs half
    steps, as :func:`bicgstab_iterations`: its body applies ``M`` once.
    """
    r = b if x0 is None else b - matvec(x0)
    x0 = _zeros_like(b) if x0 is None else x0
    threshold2 = threshold**2
    shape = r.shape[:-1]
    one = jnp.ones(shape, r.dtype)
    k = jnp.zeros(shape, jnp.int32)
    rho, rr = _reduce((r, r), (r, r))
    active = (rr.real > threshold2) & (k < maxiter)
    zeros = _zeros_like(r)
    # x, r, rhat, p, v, s, phat, alpha, omega, rho_before, rho, k, active, second half
    state = (x0, r, r, zeros, zeros, zeros, zeros, one, one, one, rho, k, active, False)

    def cond(state):
        return jnp.any(state[-2])

    def first_vectors(state):
        x, r, rhat, p, v, s, phat, alpha, omega, rho_before, rho, k, active, _ = state
        ok = active & (rho != 0) & (omega != 0)
        beta = _divide(rho, rho_before, ok) * _divide(alpha, omega, ok)
        p = _where(ok, r + beta[..., None] * (p - omega[..., None] * v), p)
        return p, p, r  # the vector M applies to, the new p, the one whose norm is read

    def second_vectors(state):
        return state[5], state[3], state[5]

    def first_half(state, p, phat, v, dots):
        x, r, rhat, _, _, s, _, alpha, omega, rho_before, rho, k, active, _ = state
        rv, rr = dots[0], dots[1].real
        ok = active & (rr > threshold2) & (rho != 0) & (omega != 0) & (rv != 0)
        alpha = _where(ok, _divide(rho, rv, ok), alpha)
        s = r - alpha[..., None] * v
        return (x, r, rhat, p, v, s, phat, alpha, omega, rho_before, rho, k, ok, True)

    def second_half(state, shat, t, dots):
        x, r, rhat, p, v, s, phat, alpha, omega, rho_before, rho, k, active, _ = state
        rt, ss, ts, tt, rs = dots[0], dots[1].real, dots[2], dots[3].real, dots[4]
        # s small enough (or t = 0, so that s is 0 too): stop half way, as JAX and SciPy do.
        half = active & ((ss <= threshold2) | (tt == 0))
        full = active & ~half
        omega = _where(full, _divide(ts, tt, full), omega)
        x = _where(active, x + alpha[..., None] * phat, x)
        x = _where(full, x + omega[..., None] * shat, x)
        r = _where(active, s - jnp.where(full, omega, 0)[..., None] * t, r)
        k = k + active
        rho_before = _where(full, rho, rho_before)
        rho = _where(full, rs - omega * rt, rho)
        active = full & (k < maxiter) & (omega != 0)
        return (x, r, rhat, p, v, s, phat, alpha, omega, rho_before, rho, k, active, False)

    def body(state):
        second = state[-1]
        u, p, other = lax.cond(second, second_vectors, first_vectors, state)
        w = M(u)
        y = matvec(w)
        rhat = state[2]
        dots = _reduce((rhat, y), (other, other), (y, other), (y, y), (rhat, other))
        new = lax.cond(
            second,
            lambda state: second_half(state, w, y, dots),
            lambda state: first_half(state, p, w, y, dots),
            state,
        )
        if report is not None:  # x moves in the second half only
            report(new[0], second & jnp.any(state[-2]))
        return new

    state = lax.while_loop(cond, body, state)
    return state[0], state[-3]


def threshold(b: Array, rtol: Scalar, atol: Scalar) -> Array:
    """``max(rtol * |b|, atol)`` per system, SciPy's and JAX's stopping rule."""
    return jnp.maximum(rtol * jnp.sqrt(_squared_norm(b)), atol)


def start_from(x0: Array | None, b: Array) -> Array | None:
    """The initial guess: ``x0``, with zeros for a system whose ``b`` is zero. That is its
    solution, as SciPy returns it whatever ``x0``: from elsewhere no iteration could meet
    the zero tolerance ``rtol * |b|`` (with ``atol = 0``)."""
    if x0 is None:
        return None
    return jnp.where((_squared_norm(b) == 0)[..., None], jnp.zeros((), x0.dtype), x0)


def residual_norm(matvec: MatVec, b: Array, x: Array) -> Array:
    return jnp.sqrt(_squared_norm(b - matvec(x)))


# -- the public solvers -------------------------------------------------------------------


class SolveInfo(NamedTuple):
    """What :func:`jaxdia.cg`, :func:`jaxdia.bicgstab` and :func:`jaxdia.gmres` report (a
    pytree, one entry per system of a batch).

    Attributes:
      iterations: the iterations run (int32); for :func:`jaxdia.gmres`, the Arnoldi steps
        over all restart cycles.
      residual_norm: ``|b - A x|`` of the returned ``x``, recomputed from ``x`` (with one
        more product for CG and BiCGStab; :func:`jaxdia.gmres` recomputes it at the end
        of every cycle), not the recursively updated residual the iteration tracks.
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


#: The loops of each method and variant.
LOOPS = {
    ("cg", "standard"): cg_iterations,
    ("cg", "fused"): cg_fused_iterations,
    ("bicgstab", "standard"): bicgstab_iterations,
    ("bicgstab", "fused"): bicgstab_fused_iterations,
}
VARIANTS = ("standard", "fused")


@functools.partial(
    jax.jit, static_argnames=("method", "variant", "batch", "dtype", "x0_is_Mb", "callback")
)
def _run_krylov(
    A, b, x0, M, rtol, atol, maxiter, *, method, variant, batch, dtype, x0_is_Mb, callback
):
    """The solve as one compiled call; ``maxiter`` is an argument, so that changing it
    does not compile again. ``callback`` (a :class:`~.operands.Callback`) sees the
    iterates of the solve, not those of the transposed solve a gradient runs."""
    n = b.shape[-1]
    b = jnp.broadcast_to(b.astype(dtype), (*batch, n))
    x0 = None if x0 is None else jnp.broadcast_to(x0.astype(dtype), b.shape)
    matvec = vector_product(A)
    precondition = (lambda v: v) if M is None else M
    loop = LOOPS[method, variant]
    if (method, variant) == ("bicgstab", "standard"):
        # A product on the host costs far more than the half-step loop's conds.
        one_site = large_program(M, b) or on_host(A) or on_host(M)
        loop = functools.partial(loop, one_site=one_site)

    def solver(report):
        def solve(matvec, rhs):
            limit = threshold(rhs, rtol, atol)
            start = precondition(rhs).astype(rhs.dtype) if x0_is_Mb else x0
            x, iterations = loop(
                matvec, rhs, start_from(start, rhs), precondition, limit, maxiter, report
            )
            return x.astype(rhs.dtype), (iterations, limit)

        return solve

    report = None if callback is None else callback.report
    x, (iterations, limit) = lax.custom_linear_solve(
        matvec,
        b,
        solver(report),
        None if on_host(A) else solver(None),
        symmetric=method == "cg",
        has_aux=True,
    )
    residual = residual_norm(matvec, b, x)
    # An infinite tolerance (|b| not finite in the working precision) is met by nothing:
    # inf <= inf would report success for an x that is all zeros.
    converged = (residual <= limit) & jnp.isfinite(residual)
    return x, SolveInfo(iterations, residual, converged)


def cg(
    A: OperatorLike,
    b: ArrayLike,
    x0: ArrayLike | str | None = None,
    *,
    rtol: Scalar = 1e-5,
    atol: Scalar = 0.0,
    maxiter: int | None = None,
    M: OperatorLike | None = None,
    callback: Callable[[np.ndarray], object] | None = None,
    variant: str = "standard",
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

    ``A`` and ``M`` may be anything SciPy's ``cg`` takes: a dense or
    ``scipy.sparse`` matrix, a ``scipy.sparse.linalg.LinearOperator`` (a product written
    in NumPy runs on the host through ``jax.pure_callback``: it works under ``jit`` and
    ``vmap``, costs a host round trip per product and cannot be differentiated), a
    lineax operator. ``callback(xk)`` is called with each iterate, as SciPy calls it
    (under ``jit`` too, in order, by an ordered host callback; a NumPy array of the
    solution's shape); ``x0="Mb"`` starts from ``M @ b``. Integer matrices compute in the
    default float dtype (float64 with x64 on, as SciPy); long double is refused.

    ``A`` may be a :class:`jaxdia.ShardedDiaMatrix`: ``b`` (and ``x0``) are then its
    padded, sharded vectors (``S.shard_vector(b)``), and every Krylov vector stays
    sharded. ``variant="fused"`` is Chronopoulos and Gear's CG: the three inner products
    of an iteration in one reduction, so one all-reduce per iteration on a sharded matrix
    instead of three (the latency that dominates on many devices). It is the same
    method in exact arithmetic (the iteration counts agree); in floating point its
    residual recurrence drifts a little further from ``b - A x``, visible in
    ``info.residual_norm`` only near the rounding level of very ill-conditioned
    problems (tested against SciPy's CG on condition numbers up to about ``1e8``).
    It applies ``M`` and ``A`` once more than standard CG before it stops.

    Args:
      A: a square DiaMatrix (possibly batched), a :class:`jaxdia.ShardedDiaMatrix`, a
        function ``v -> A v`` on arrays of ``b``'s shape written in JAX (in a
        multi-process run, one that closes over arrays spanning processes is traced once
        more and those arrays become arguments of the compiled solve), or any operator
        SciPy takes (above).
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      x0: the initial guess (default zeros), or ``"Mb"``: ``M @ b``.
      rtol, atol: relative and absolute tolerances on the residual norm.
      maxiter: the most iterations (default ``10 * n``); an argument of the compiled
        solve (changing it compiles nothing), which may be traced.
      M: the preconditioner, an operator as ``A`` is (a function ``v -> M v`` on arrays
        of ``b``'s shape; None: none).
      callback: called as ``callback(xk)`` after each iteration (the iterates of a
        batch together, shape ``(..., n)``; under ``vmap``, once per member); not called
        for the transposed solve a gradient runs.
      variant: ``"standard"`` (JAX's and SciPy's recurrences) or ``"fused"``
        (Chronopoulos and Gear's, one reduction per iteration).

    Returns:
      ``(x, info)``: the solution, of the broadcast batch shape and ``b``'s last dim, in
      the promoted dtype of ``A`` and ``b``; and a :class:`jaxdia.SolveInfo` whose fields
      have the batch shape.

    Raises:
      TypeError: if ``A`` or ``M`` is none of the operators above, holds long doubles, or
        a host operator is differentiated; if ``callback`` is not callable.
      ValueError: if ``A`` is not square, the shapes do not fit (for a ShardedDiaMatrix,
        ``b`` not padded to its ``padded_size``), a tolerance is negative, None or a
        string (SciPy's errors), ``maxiter`` is negative, ``x0`` a string other than
        ``"Mb"``, or ``variant`` is unknown.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.0, 2.5, -1.0], offsets=[-1, 0, 1], shape=(50, 50))
      >>> x, info = jaxdia.cg(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-6)
      >>> bool(info.converged), bool(info.residual_norm < 1e-6 * jnp.sqrt(50.0))
      (True, True)
      >>> _, fused = jaxdia.cg(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-6, variant="fused")
      >>> int(fused.iterations) == int(info.iterations)
      True

      SciPy's operators and callback (a LinearOperator in NumPy runs on the host):

      >>> import numpy as np, scipy.sparse.linalg as spla
      >>> S = spla.LinearOperator((3, 3), matvec=lambda v: 2 * v, dtype=np.float32)
      >>> seen = []
      >>> x, info = jaxdia.cg(S, np.ones(3, np.float32), callback=seen.append)
      >>> x, len(seen)
      (Array([0.5, 0.5, 0.5], dtype=float32), 1)
    """
    return _solve("cg", A, b, x0, M, rtol, atol, maxiter, callback, variant)


def bicgstab(
    A: OperatorLike,
    b: ArrayLike,
    x0: ArrayLike | str | None = None,
    *,
    rtol: Scalar = 1e-5,
    atol: Scalar = 0.0,
    maxiter: int | None = None,
    M: OperatorLike | None = None,
    callback: Callable[[np.ndarray], object] | None = None,
    variant: str = "standard",
) -> tuple[Array, SolveInfo]:
    """Solves ``A x = b`` by preconditioned BiCGStab, for nonsymmetric ``A``, and says how
    it went.

    The iteration is ``jax.scipy.sparse.linalg.bicgstab``'s (van der Vorst's BiCGStab,
    with right preconditioning by ``M``); everything else (stopping rule, ``info``,
    batches, compilation, implicit differentiation) is as for :func:`jaxdia.cg`. A
    breakdown (a zero inner product) stops the system and leaves ``info.converged``
    False, where JAX's returns NaN. The gradient solves with ``A^T`` using the same
    ``M``, as JAX's does.

    ``variant="fused"`` computes the inner products of each half step in one reduction:
    two all-reduces per iteration on a sharded matrix (the fewest BiCGStab's two step
    lengths allow, each waiting for a product) instead of three (the standard loop of one
    iteration per body, which a small ``M`` gets; independent reductions compile into
    one) to five (the half-step loop of a large ``M``). The next
    ``rho = (rhat, r)`` then comes from a recurrence, ``(rhat, s) - omega (rhat, t)``,
    whose rounding error grows as the residual falls; the iteration counts agree with
    the standard loop's to within a few on ill-conditioned problems (tested against
    SciPy), and ``info`` reports the true residual either way.

    Args:
      A: an operator as for :func:`jaxdia.cg`.
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      x0: the initial guess (default zeros), or ``"Mb"``: ``M @ b``.
      rtol, atol: relative and absolute tolerances on the residual norm.
      maxiter: the most iterations (default ``10 * n``); each costs two products with
        ``A`` and two applications of ``M``.
      M: the preconditioner, an operator as ``A`` (None: none).
      callback: called as ``callback(xk)`` after each iteration, as SciPy calls it (and
        after a half-way stop that ends the solve).
      variant: ``"standard"`` (JAX's recurrences) or ``"fused"`` (one reduction per
        half step).

    Returns:
      ``(x, info)`` as :func:`jaxdia.cg`.

    Raises:
      TypeError, ValueError: as :func:`jaxdia.cg`.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.2, 2.5, -0.8], offsets=[-1, 0, 1], shape=(50, 50))
      >>> x, info = jaxdia.bicgstab(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-5)
      >>> bool(info.converged)  # float32 (x64 off): 1e-5 is well above its rounding
      True
    """
    return _solve("bicgstab", A, b, x0, M, rtol, atol, maxiter, callback, variant)


def _solve(method, A, b, x0, M, rtol, atol, maxiter, callback, variant):
    if variant not in VARIANTS:
        raise ValueError(f"{method}: variant must be one of {VARIANTS}, got {variant!r}")
    operands = solve_operands(method, A, b, M, x0, rtol, atol, maxiter)
    return _run_krylov(
        operands.A,
        *operands.vectors_in_dtype(),
        operands.M,
        operands.rtol,
        operands.atol,
        operands.maxiter,
        method=method,
        variant=variant,
        batch=operands.batch,
        dtype=operands.dtype,
        x0_is_Mb=operands.x0_is_Mb,
        callback=callback_of(callback, method),
    )
