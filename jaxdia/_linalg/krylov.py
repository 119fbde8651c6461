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
from typing import Any, NamedTuple, TypeGuard

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .._checks import as_array, broadcast_batch, check_square, is_traced, scalar, static_int
from .._matrix import DiaMatrix, as_square_matrix
from .._typing import ArrayLike, Operator, Scalar, TypedLinearMap

#: What the loops apply: ``A`` and ``M`` as functions of ``(*batch, n)`` arrays.
MatVec = Callable[[Array], Array]


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
    matvec: MatVec, b: Array, x0: Array | None, M: MatVec, threshold: Array, maxiter: ArrayLike
):
    """Preconditioned CG from ``x0`` (None: zeros, which saves a product) until
    ``|b - A x| <= threshold`` (per system, on the recursively updated residual) or
    ``maxiter`` iterations. Returns ``(x, iterations)``.

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
    x0 = _zeros_like(b) if x0 is None else x0
    threshold2 = threshold**2
    shape = r.shape[:-1]
    one = jnp.ones(shape, r.dtype)
    k = jnp.zeros(shape, jnp.int32)
    active = (_squared_norm(r) > threshold2) & (k < maxiter)
    zeros = _zeros_like(r)
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
    matvec: MatVec, b: Array, x0: Array | None, M: MatVec, threshold: Array, maxiter: ArrayLike
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
        return x, r, p, s, gamma, alpha, k, ok & (k < maxiter)

    zeros = _zeros_like(r)
    state = (x0, r, zeros, zeros, one, one, k, active)
    x, *_, k, _ = lax.while_loop(cond, body, state)
    return x, k


def bicgstab_fused_iterations(
    matvec: MatVec, b: Array, x0: Array | None, M: MatVec, threshold: Array, maxiter: ArrayLike
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
        return lax.cond(
            second,
            lambda state: second_half(state, w, y, dots),
            lambda state: first_half(state, p, w, y, dots),
            state,
        )

    state = lax.while_loop(cond, body, state)
    return state[0], state[-3]


def threshold(b: Array, rtol: Scalar, atol: Scalar) -> Array:
    """``max(rtol * |b|, atol)`` per system, SciPy's and JAX's stopping rule."""
    return jnp.maximum(rtol * jnp.sqrt(_squared_norm(b)), atol)


def residual_norm(matvec: MatVec, b: Array, x: Array) -> Array:
    return jnp.sqrt(_squared_norm(b - matvec(x)))


# -- the public solvers -------------------------------------------------------------------


def vector_product(A: DiaMatrix | Operator) -> MatVec:
    """``v -> A @ v`` for vectors stacked on leading dims (``(*batch, n)``): ``A`` a
    DiaMatrix, another operator with ``@`` on vectors and ``(n, c)`` blocks (a
    :class:`jaxdia.ShardedDiaMatrix`: a stack goes through as one block), or a function."""

    def matvec(v: Array) -> Array:
        if callable(A) and not isinstance(A, DiaMatrix):
            return A(v)
        if v.ndim == 1:
            product: Any = A @ v  # DiaMatrix's @ is typed for matrices too
            return product
        if isinstance(A, DiaMatrix):  # broadcasts a batch of matrices with the vectors
            product = A @ v[..., None]
            return product[..., 0]
        n = v.shape[-1]
        block = A @ v.reshape(-1, n).T
        return block.T.reshape(v.shape)

    return matvec


class SolveInfo(NamedTuple):
    """What :func:`jaxdia.cg`, :func:`jaxdia.bicgstab` and :func:`jaxdia.gmres` report (a
    pytree, one entry per system of a batch).

    Attributes:
      iterations: the iterations run (int32); for :func:`jaxdia.gmres`, the Arnoldi steps
        over all restart cycles.
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


def _static_callable(f: Any, example: jax.ShapeDtypeStruct | None = None) -> Any:
    """``f`` as a jit argument: pytrees (DiaMatrix, Multigrid, Partial, ...) as they are,
    a plain function as a ``Partial`` (the function itself is static).

    A static function's closed-over arrays become constants of the compiled program,
    which JAX refuses for an array spanning devices of other processes. In a
    multi-process run, a plain function is therefore traced once on ``example`` (a
    ``jax.ShapeDtypeStruct`` of the vectors it gets) and, when it closes over such
    arrays, passed as its jaxpr with those arrays as arguments (see
    :func:`_with_closure_arguments`).
    """
    if f is None:
        return None
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(f)):
        if example is not None and jax.process_count() > 1:
            return _with_closure_arguments(f, example)
        return jax.tree_util.Partial(f)
    return f


def _with_closure_arguments(f: MatVec, example: jax.ShapeDtypeStruct) -> MatVec:
    """``f`` as a ``Partial`` of its jaxpr, with the arrays it closes over as arguments,
    if one of them is not fully addressable (it spans devices of other processes);
    else as ``_static_callable`` passes a function."""
    closed = jax.make_jaxpr(f)(example)
    remote = any(
        isinstance(const, jax.Array) and not const.is_fully_addressable for const in closed.consts
    )
    if not remote:
        return jax.tree_util.Partial(f)
    if len(closed.jaxpr.outvars) != 1:
        raise TypeError(
            f"a function operator must return one array v -> A v, got {len(closed.jaxpr.outvars)} "
            "outputs"
        )
    return jax.tree_util.Partial(functools.partial(_evaluate, closed.jaxpr), list(closed.consts))


def _evaluate(jaxpr: jax.extend.core.Jaxpr, consts: list[Any], v: Array) -> Array:
    """The function a jaxpr with closed-over ``consts`` computes, applied to ``v``."""
    (out,) = jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(jaxpr, consts))(v)
    return out


def _is_operator(A: object) -> TypeGuard[TypedLinearMap]:
    """Whether ``A`` is a matrix-like operator other than a DiaMatrix: ``@`` and a square
    ``shape``, vectors of length ``padded_size`` when it has one (a
    :class:`jaxdia.ShardedDiaMatrix`)."""
    return (
        not callable(A)
        and hasattr(A, "__matmul__")
        and len(getattr(A, "shape", ())) == 2
        and not isinstance(A, (np.ndarray, jax.Array))
    )


def _solve_args(
    function: str,
    A: DiaMatrix | Operator,
    b: ArrayLike,
    M: Operator | None,
    x0: ArrayLike | None,
    maxiter: ArrayLike | None,
):
    hint = ""
    if isinstance(A, DiaMatrix):
        A = as_square_matrix(A, function)
        n, batch, dtype = A.shape[0], A.batch_shape, A.dtype
    elif _is_operator(A):  # a ShardedDiaMatrix: its vectors are padded to padded_size rows
        check_square(A, function)
        n, batch, dtype = int(getattr(A, "padded_size", A.shape[0])), (), np.dtype(A.dtype)
        if n != A.shape[0]:
            hint = (
                f" (A's vectors are padded to {n} rows: make b with A.shard_vector(b), "
                "which pads and shards it)"
            )
    elif callable(A):
        n, batch, dtype = None, (), None
    else:
        raise TypeError(
            f"{function}: A must be a jaxdia.DiaMatrix or a function v -> A v (or a "
            f"jaxdia.ShardedDiaMatrix), got {type(A).__name__}"
        )
    b = as_array(b, f"{function}: b")
    if b.ndim == 0 or (n is not None and b.shape[-1] != n):
        raise ValueError(
            f"{function}: b must have shape ({n if n is not None else 'n'},) or (..., n), got "
            f"shape {b.shape}{hint}"
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


#: The loops of each method and variant.
LOOPS = {
    ("cg", "standard"): cg_iterations,
    ("cg", "fused"): cg_fused_iterations,
    ("bicgstab", "standard"): bicgstab_iterations,
    ("bicgstab", "fused"): bicgstab_fused_iterations,
}
VARIANTS = ("standard", "fused")


@functools.partial(jax.jit, static_argnames=("method", "variant", "batch", "dtype"))
def _run_krylov(A, b, x0, M, rtol, atol, maxiter, *, method, variant, batch, dtype):
    """The solve as one compiled call; ``maxiter`` is an argument, so that changing it
    does not compile again."""
    n = b.shape[-1]
    b = jnp.broadcast_to(b.astype(dtype), (*batch, n))
    x0 = None if x0 is None else jnp.broadcast_to(x0.astype(dtype), b.shape)
    matvec = vector_product(A)
    precondition = (lambda v: v) if M is None else M
    loop = LOOPS[method, variant]
    if (method, variant) == ("bicgstab", "standard"):
        loop = functools.partial(loop, one_site=large_program(M, b))

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


def _tolerance(value: Scalar, name: str) -> Array | float:
    """A tolerance: a traced one as it is, a concrete one checked and as a Python float."""
    value = scalar(value, name, nonnegative=True)
    return value if is_traced(value) else float(value)


def cg(
    A: DiaMatrix | Operator,
    b: ArrayLike,
    *,
    M: Operator | None = None,
    x0: ArrayLike | None = None,
    rtol: Scalar = 1e-5,
    atol: Scalar = 0.0,
    maxiter: int | None = None,
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
      A: a square DiaMatrix (possibly batched), a :class:`jaxdia.ShardedDiaMatrix`, or a
        function ``v -> A v`` on arrays of ``b``'s shape (in a multi-process run, one
        that closes over arrays spanning processes is traced once more and those arrays
        become arguments of the compiled solve).
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      M: the preconditioner, a function ``v -> M v`` on arrays of ``b``'s shape (None:
        none).
      x0: the initial guess (default zeros).
      rtol, atol: relative and absolute tolerances on the residual norm.
      maxiter: the most iterations (default ``10 * n``); an argument of the compiled
        solve (changing it compiles nothing), which may be traced.
      variant: ``"standard"`` (JAX's and SciPy's recurrences) or ``"fused"``
        (Chronopoulos and Gear's, one reduction per iteration).

    Returns:
      ``(x, info)``: the solution, of the broadcast batch shape and ``b``'s last dim, in
      the promoted dtype of ``A`` and ``b``; and a :class:`jaxdia.SolveInfo` whose fields
      have the batch shape.

    Raises:
      TypeError: if ``A`` is neither a DiaMatrix, a ShardedDiaMatrix nor a function, or
        ``M`` is not callable.
      ValueError: if ``A`` is not square, the shapes do not fit (for a ShardedDiaMatrix,
        ``b`` not padded to its ``padded_size``), a tolerance or ``maxiter`` is
        negative, or ``variant`` is unknown.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.0, 2.5, -1.0], offsets=[-1, 0, 1], shape=(50, 50))
      >>> x, info = jaxdia.cg(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-6)
      >>> bool(info.converged), bool(info.residual_norm < 1e-6 * jnp.sqrt(50.0))
      (True, True)
      >>> _, fused = jaxdia.cg(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-6, variant="fused")
      >>> int(fused.iterations) == int(info.iterations)
      True
    """
    return _solve("cg", A, b, M, x0, rtol, atol, maxiter, variant)


def bicgstab(
    A: DiaMatrix | Operator,
    b: ArrayLike,
    *,
    M: Operator | None = None,
    x0: ArrayLike | None = None,
    rtol: Scalar = 1e-5,
    atol: Scalar = 0.0,
    maxiter: int | None = None,
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
      A: a square DiaMatrix (possibly batched), a :class:`jaxdia.ShardedDiaMatrix`, or a
        function ``v -> A v`` (as for :func:`jaxdia.cg`).
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      M: the preconditioner, a function ``v -> M v`` (None: none).
      x0: the initial guess (default zeros).
      rtol, atol: relative and absolute tolerances on the residual norm.
      maxiter: the most iterations (default ``10 * n``); each costs two products with
        ``A`` and two applications of ``M``.
      variant: ``"standard"`` (JAX's recurrences) or ``"fused"`` (one reduction per
        half step).

    Returns:
      ``(x, info)`` as :func:`jaxdia.cg`.

    Raises:
      TypeError: if ``A`` is neither a DiaMatrix, a ShardedDiaMatrix nor a function, or
        ``M`` is not callable.
      ValueError: if ``A`` is not square, the shapes do not fit, a tolerance or
        ``maxiter`` is negative, or ``variant`` is unknown.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.2, 2.5, -0.8], offsets=[-1, 0, 1], shape=(50, 50))
      >>> x, info = jaxdia.bicgstab(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-5)
      >>> bool(info.converged)  # float32 (x64 off): 1e-5 is well above its rounding
      True
    """
    return _solve("bicgstab", A, b, M, x0, rtol, atol, maxiter, variant)


class SolveOperands(NamedTuple):
    """A Krylov solver's checked arguments, as its compiled call takes them: ``A`` and
    ``M`` as jit arguments (see :func:`_static_callable`), ``b`` and ``x0`` as given, the
    tolerances and ``maxiter`` checked, the batch shape and the working dtype."""

    A: Any
    b: Array | np.ndarray
    x0: Array | np.ndarray | None
    M: Any
    rtol: Array | float
    atol: Array | float
    maxiter: Any
    batch: tuple[int, ...]
    dtype: np.dtype


def solve_operands(
    method: str,
    A: DiaMatrix | Operator,
    b: ArrayLike,
    M: Operator | None,
    x0: ArrayLike | None,
    rtol: Scalar,
    atol: Scalar,
    maxiter: ArrayLike | None,
) -> SolveOperands:
    """The arguments of the solver ``method`` (its name in the messages) checked and made
    ready for its compiled call (``maxiter`` None: ``10 * n``)."""
    A, b, M, x0, maxiter, batch, dtype = _solve_args(method, A, b, M, x0, maxiter)
    rtol = _tolerance(rtol, f"{method}: rtol")
    atol = _tolerance(atol, f"{method}: atol")
    example = None
    if not is_traced(b):  # what a function operator gets, to trace it (multi-process runs)
        shape = (*batch, b.shape[-1])
        sharding = getattr(b, "sharding", None) if b.shape == shape else None
        example = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
    return SolveOperands(
        _static_callable(A, example),
        b,
        x0,
        _static_callable(M, example),
        rtol,
        atol,
        maxiter,
        batch,
        dtype,
    )


def _solve(method, A, b, M, x0, rtol, atol, maxiter, variant):
    if variant not in VARIANTS:
        raise ValueError(f"{method}: variant must be one of {VARIANTS}, got {variant!r}")
    A, b, x0, M, rtol, atol, maxiter, batch, dtype = solve_operands(
        method, A, b, M, x0, rtol, atol, maxiter
    )
    return _run_krylov(
        A, b, x0, M, rtol, atol, maxiter, method=method, variant=variant, batch=batch, dtype=dtype
    )
