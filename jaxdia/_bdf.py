"""The variable-order, variable-step BDF integrator behind :func:`jaxdia.solve_ivp`, as
one ``lax.while_loop`` whose iterations are step attempts.

The method is SciPy's ``scipy.integrate.BDF`` (Shampine and Reichelt's quasi-constant
step size NDF/BDF of orders 1 to 5): the solution is carried as the backward
differences ``D`` of its interpolating polynomial, rescaled (``change_D``) whenever the
step size changes; each step solves the implicit formula by a simplified Newton
iteration on ``I - c J`` (at most ``NEWTON_MAXITER`` iterations, stopped early when the
convergence rate says it cannot converge in time); the local error is estimated from
the Newton correction, and the order is chosen every ``order + 1`` equal steps among
``order - 1``, ``order`` and ``order + 1``.

What this module adds is that the Jacobian ``J`` and the factor of ``I - c J`` are part
of the loop's state: ``J`` is recomputed only when Newton fails with a ``J`` from an
earlier step, and ``I - c J`` is refactored only when ``c`` (the step size or the order)
has changed since and SciPy would refactor. The linear algebra is passed in
(:class:`LinearSolver`), so that banded LU, periodic bands and Krylov solves share the
loop.

Differentiation: the step-size and order decisions and the Newton matrix are outside
differentiation (``stop_gradient``), so forward mode differentiates the computed
solution along the accepted steps: the tangent is itself solved by the simplified
Newton iteration, which converges to the sensitivity of each step's implicit equation.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

MAX_ORDER = 5
NEWTON_MAXITER = 4
MIN_FACTOR = 0.2
MAX_FACTOR = 10.0

# The NDF coefficients (SciPy's; kappa = 0 would be the classical BDF).
_KAPPA = np.array([0, -0.1850, -1 / 9, -0.0823, -0.0415, 0])
_GAMMA = np.hstack((0, np.cumsum(1 / np.arange(1, MAX_ORDER + 1))))
_ALPHA = (1 - _KAPPA) * _GAMMA
_ERROR_CONST = _KAPPA * _GAMMA + 1 / np.arange(1, MAX_ORDER + 2)

#: ``status`` values: SciPy's 0 (the end was reached) and -1 (a step below the spacing
#: of floats was needed), and jaxdia's own failures.
RUNNING = 2
TERMINATED = 1
SUCCESS = 0
STEP_TOO_SMALL = -1
MAX_STEPS_REACHED = -2
NON_FINITE = -3

MESSAGES = {
    RUNNING: "The integration is still running.",
    TERMINATED: "A termination event occurred.",
    SUCCESS: "The solver successfully reached the end of the integration interval.",
    STEP_TOO_SMALL: "Required step size is less than spacing between numbers.",
    MAX_STEPS_REACHED: "The number of step attempts reached max_steps before the end.",
    NON_FINITE: "The initial value or its derivative is not finite (NaN or inf).",
}


class LinearSolver(NamedTuple):
    """How the loop solves ``(I - c J) x = b``: ``prepare(J, c)`` returns the state
    reused across steps (a factor, a preconditioner) and whether it is usable;
    ``solve(state, b)`` solves with it (anything when ``prepare`` said it is not usable:
    the Newton iteration then fails), and returns a non-finite solution for a
    non-finite ``b`` (the Newton iteration reads a non-finite ``f`` from it)."""

    prepare: Callable[[Any, Array], tuple[Any, Array]]
    solve: Callable[[Any, Array], Array]


class Problem(NamedTuple):
    """What the loop needs of the problem (callables close over ``fun``'s ``args``)."""

    rhs: Callable[[Array, Array], Array]
    jacobian: Callable[[Array, Array], Any]
    #: ``(t, y) -> zeros`` with the structure of ``jacobian(t, y)``.
    jacobian_placeholder: Callable[[Array, Array], Any]
    linear_solver: LinearSolver
    constant_jacobian: bool


class Counts(NamedTuple):
    """Work done: right-hand sides, Jacobians, factorizations, accepted steps, attempts."""

    nfev: Array
    njev: Array
    nlu: Array
    nsteps: Array
    nattempts: Array


class Step(NamedTuple):
    """A step attempt as an :class:`Observer` sees it. For an accepted one, ``t_old``,
    ``t``, ``h`` (signed), ``order`` and ``D`` are the step's interpolant (SciPy's
    ``BdfDenseOutput``: :func:`interpolate`) and ``y`` the solution at ``t``; for a
    rejected one they are garbage."""

    accepted: Array
    t_old: Array
    t: Array
    h: Array
    order: Array
    D: Array  # (MAX_ORDER + 3, n): the rows 0 .. order interpolate
    y: Array


class Observer(NamedTuple):
    """What the loop carries for its caller beside the integration (a record of the
    steps, events): ``init(t0, y0)`` the first carry; ``observe(carry, step)`` returns
    the next carry, whether the integration stops at this (accepted) step, and where
    (the loop then ends with status ``TERMINATED`` at that time, and writes the ``t_eval``
    entries up to it)."""

    init: Callable[[Array, Array], Any]
    observe: Callable[[Any, Step], tuple[Any, Array, Array]]


class _State(NamedTuple):
    t: Array
    h_abs: Array
    D: Array  # (MAX_ORDER + 3, n): backward differences, for h_abs / pending_factor
    rescale_pending: Array  # the next attempt rescales D by pending_factor first
    pending_factor: Array
    order: Array
    n_equal_steps: Array
    jac: Any
    factor: Any
    factor_ok: Array  # the factor is of the current I - c J (or SciPy keeps it)
    factor_usable: Array  # what prepare said of it
    current_jac: Array  # J was computed during this step
    need_jac: Array  # the next attempt recomputes J (Newton failed with an old one)
    initial_jac: Array  # the next attempt computes the first J, at (t0, y0)
    new_step: Array  # the next attempt starts a step
    status: Array
    counts: Counts
    ys: Array  # (len(t_eval), n)
    next_out: Array  # the first t_eval not yet written
    observed: Any  # the Observer's carry (nothing without one)


def rms(x: Array) -> Array:
    """SciPy's ``norm``: the root mean square of ``|x|``."""
    return jnp.sqrt(jnp.mean(jnp.abs(x) ** 2))


def _r_matrix(order: Array, factor: Array, dtype: Any) -> Array:
    """SciPy's ``compute_R`` for a traced ``order``: the ``(MAX_ORDER + 1)`` square matrix
    whose leading ``order + 1`` block is ``compute_R(order, factor)``, the identity
    elsewhere."""
    i = np.arange(1, MAX_ORDER + 1)[:, None]
    j = np.arange(1, MAX_ORDER + 1)[None, :]
    M = jnp.zeros((MAX_ORDER + 1, MAX_ORDER + 1), dtype).at[0].set(1)
    M = M.at[1:, 1:].set(((i - 1 - factor * j) / i).astype(dtype))
    R = jnp.cumprod(M, axis=0)
    index = np.arange(MAX_ORDER + 1)
    inside = (index[:, None] <= order) & (index[None, :] <= order)
    return jnp.where(inside, R, jnp.eye(MAX_ORDER + 1, dtype=dtype))


def change_matrix(order: Array, factor: Array, dtype: Any) -> Array:
    """The ``(MAX_ORDER + 1)`` square matrix ``RU`` of SciPy's ``change_D``: the rows
    ``0 .. MAX_ORDER`` of the differences for the step size multiplied by ``factor`` are
    ``RU.T @ D[: MAX_ORDER + 1]`` (the identity beyond ``order``)."""
    return jnp.matmul(
        _r_matrix(order, factor, dtype),
        _r_matrix(order, jnp.ones((), dtype), dtype),
        precision="highest",
    )


def transform_rows(D: Array, M: Array) -> Array:
    """``D`` with its rows ``0 .. MAX_ORDER`` replaced by ``M.T @ D[: MAX_ORDER + 1]``:
    one product, written over those rows in place."""
    head = jnp.matmul(M.T.astype(D.dtype), D[: MAX_ORDER + 1], precision="highest")
    return lax.dynamic_update_slice_in_dim(D, head, 0, axis=0)


def _total(terms: Iterable[Array]) -> Array:
    """The sum of ``terms`` (one fused elementwise expression)."""
    return functools.reduce(operator.add, terms)


def rescale_if(rescaled: Array, D: Array, M: Array) -> Array:
    """``transform_rows(D, M)`` if ``rescaled``, else ``D``: a loop run once or not at all,
    so that the attempts that keep the step size and the order (most of them) do not
    pass over ``D`` (XLA keeps an unchanged carry in place; a ``lax.cond`` would copy it)."""
    _, D = lax.while_loop(
        lambda carry: carry[0],
        lambda carry: (jnp.bool_(False), transform_rows(carry[1], M)),
        (rescaled, D),
    )
    return D


def predict(D: Array, order: Array, weights: Array) -> tuple[Array, Array]:
    """``(y_predict, psi)``: the sum of the rows ``0 .. order`` and that of the rows
    ``1 .. order`` weighted by ``weights``, one branch per order, so that each reads only
    its own rows."""

    def of_order(o: int) -> Callable[[Array], tuple[Array, Array]]:
        def branch(D: Array) -> tuple[Array, Array]:
            psi = _total(weights[k] * D[k] for k in range(1, o + 1))
            return _total(D[k] for k in range(o + 1)), psi

        return branch

    return lax.switch(order - 1, [of_order(o) for o in range(1, MAX_ORDER + 1)], D)


def accept(
    D: Array,
    d: Array,
    order: Array,
    accepted: Array,
    scale: Array,
    error_const: Array,
) -> tuple[Array, Array, Array]:
    """``(D, error_m, error_p)`` after an attempt: for an accepted step, SciPy's update of
    the differences (rows ``order + 2`` and ``order + 1``, then ``D[i] += D[i + 1]`` from
    ``i = order`` down) and the error estimates of orders ``order - 1`` and ``order + 1``
    (infinite where there is no such order); else ``D`` unchanged.

    The update is a loop over the rows it changes, each row read and written in place,
    run once (accepted) or not at all: the same work for every order in one compiled
    body, where a branch per order compiled each order's rows apart."""
    inf = jnp.full((), jnp.inf, scale.dtype)

    def row(D: Array, i: Array) -> Array:
        return lax.dynamic_index_in_dim(D, i, keepdims=False)

    def put(D: Array, value: Array, i: Array) -> Array:
        return lax.dynamic_update_index_in_dim(D, value, i, axis=0)

    def update(carry):
        _, D, _, _ = carry
        o = order
        D = put(D, d - row(D, o + 1), o + 2)
        D = put(D, d, o + 1)
        # D[i] += D[i + 1] for i = o .. 0
        D = lax.fori_loop(
            0, o + 1, lambda k, D: put(D, row(D, o - k) + row(D, o - k + 1), o - k), D
        )
        # D[o] is now D[o] + d, and D[o + 2] = d - D[o + 1]: SciPy's two estimates.
        ec = error_const.astype(scale.dtype)
        error_m = jnp.where(o > 1, rms(ec[o - 1] * row(D, o) / scale), inf)
        error_p = jnp.where(
            o < MAX_ORDER, rms(ec[jnp.minimum(o + 1, MAX_ORDER)] * row(D, o + 2) / scale), inf
        )
        return jnp.bool_(False), D, error_m, error_p

    _, D, error_m, error_p = lax.while_loop(lambda carry: carry[0], update, (accepted, D, inf, inf))
    return D, error_m, error_p


def interpolate(D: Array, order: Array, t: Array, h: Array, at: Array) -> Array:
    """SciPy's ``BdfDenseOutput`` at one time ``at``: the interpolating polynomial of the
    step that ended at ``t`` with step ``h`` (signed)."""
    k = np.arange(MAX_ORDER)
    x = (at - (t - h * k)) / (h * (1 + k))
    p = jnp.where(k < order, jnp.cumprod(x), 0).astype(D.dtype)
    return D[0] + _total(p[i] * D[i + 1] for i in range(MAX_ORDER))


def _newton(
    problem: Problem,
    t_new: Array,
    y_predict: Array,
    c: Array,
    psi: Array,
    factor: Any,
    usable: Array,
    scale: Array,
    tol: Array,
) -> tuple[Array, Array, Array, Array]:
    """SciPy's ``solve_bdf_system``: ``(converged, iterations, y, d)``; with a factor that
    is not ``usable`` it fails at its first iteration."""
    real = scale.dtype

    def cond(carry):
        k, _, _, stop, _ = carry
        return (k < NEWTON_MAXITER) & ~stop

    def body(carry):
        # y and d as the rows of one array: both take dy in one pass.
        k, yd, dy_norm_old, _, _ = carry
        f = problem.rhs(t_new, yd[0])
        dy = problem.linear_solver.solve(factor, c * f - psi - yd[1])
        dy_norm = lax.stop_gradient(rms(dy / scale))
        have_rate = k > 0
        rate = dy_norm / jnp.where(have_rate, dy_norm_old, 1)
        slow = have_rate & (
            (rate >= 1) | (rate ** (NEWTON_MAXITER - k) / (1 - rate) * dy_norm > tol)
        )
        # A non-finite f makes dy non-finite (LinearSolver.solve propagates it).
        failed = ~usable | ~jnp.isfinite(dy_norm) | slow
        # After a failure y and d are garbage, unused: the attempt is rejected.
        yd = yd + dy
        converged = ~failed & ((dy_norm == 0) | (have_rate & (rate / (1 - rate) * dy_norm < tol)))
        return k + 1, yd, dy_norm, failed | converged, converged

    zero = jnp.zeros((), real)
    yd = jnp.stack([y_predict, jnp.zeros_like(y_predict)])
    k, yd, _, _, converged = lax.while_loop(
        cond, body, (jnp.int32(0), yd, zero, jnp.bool_(False), jnp.bool_(False))
    )
    return converged, k, yd[0], yd[1]


def start(
    problem: Problem,
    t0: Array,
    y0: Array,
    t_bound: Array,
    rtol,
    atol,
    max_step,
    first_step: Array | None = None,
) -> tuple[Array, Array]:
    """``(f0, h0)``: ``fun(t0, y0)`` and SciPy's ``select_initial_step`` for order 1, which
    evaluates ``fun`` once more. The two evaluations are a loop of two iterations, so
    that the right-hand side is compiled once for both. A ``first_step`` is ``h0`` (one
    evaluation, as SciPy's)."""
    if first_step is not None:
        return problem.rhs(t0, y0), lax.stop_gradient(jnp.asarray(first_step, t0.dtype))
    interval = jnp.abs(t_bound - t0)
    direction = jnp.sign(t_bound - t0)
    scale = atol + jnp.abs(y0) * rtol
    d0 = rms(y0 / scale)

    def first_guess(f0: Array) -> tuple[Array, Array]:
        d1 = rms(f0 / scale)
        h0 = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / jnp.where(d1 > 0, d1, 1))
        return jnp.minimum(h0, interval), d1

    def evaluate(i, carry):
        f0, _ = carry
        # The first iteration evaluates at (t0, y0), the second a step h0 along f0.
        step = jnp.where(i == 0, 0, first_guess(f0)[0] * direction)
        f = problem.rhs(t0 + step, y0 + step.astype(y0.dtype) * f0)
        return jnp.where(i == 0, f, f0), f

    zero = jnp.zeros_like(y0)
    f0, f1 = lax.fori_loop(0, 2, evaluate, (zero, zero))
    h0, d1 = first_guess(f0)
    d2 = rms((f1 - f0) / scale) / jnp.where(h0 > 0, h0, 1)
    flat = (d1 <= 1e-15) & (d2 <= 1e-15)
    h1 = jnp.where(
        flat,
        jnp.maximum(1e-6, h0 * 1e-3),
        jnp.sqrt(0.01 / jnp.maximum(jnp.maximum(d1, d2), 1e-300)),
    )
    h = jnp.minimum(jnp.minimum(100 * h0, h1), jnp.minimum(interval, max_step))
    return f0, lax.stop_gradient(h.astype(interval.dtype))


def integrate(
    problem: Problem,
    t0: Array,
    t_bound: Array,
    y0: Array,
    t_eval: Array,
    rtol: Array,
    atol: Array,
    max_step: Array,
    max_steps: int,
    first_step: Array | None = None,
    observer: Observer | None = None,
) -> tuple[Array, Array, Array, Counts, Any]:
    """Integrates from ``t0`` to ``t_bound``: ``(ys, t, status, counts, observed)`` with
    ``ys`` the solution at each ``t_eval`` (NaN where not reached), ``t`` the last time
    reached and ``observed`` the ``observer``'s last carry (``()`` without one)."""
    real = jnp.real(y0).dtype
    eps = float(jnp.finfo(real).eps)
    direction = jnp.sign(t_bound - t0)
    # SciPy's Newton tolerance is of a scalar rtol; per-component ones take the tightest.
    newton_rtol = rtol if jnp.ndim(rtol) == 0 else jnp.min(rtol)
    newton_tol = jnp.maximum(10 * eps / newton_rtol, jnp.minimum(0.03, jnp.sqrt(newton_rtol)))
    alpha, gamma, error_const = (jnp.asarray(c, real) for c in (_ALPHA, _GAMMA, _ERROR_CONST))

    f0, h0 = start(problem, t0, y0, t_bound, rtol, atol, max_step, first_step)
    D = jnp.concatenate(
        [
            y0[None],
            (f0 * (h0 * direction).astype(y0.dtype))[None],
            jnp.zeros((MAX_ORDER + 1, *y0.shape), y0.dtype),
        ]
    )
    # The first Jacobian, SciPy's J at (t0, y0), is computed by the first attempt, in
    # the loop's evaluation of J (one compiled copy of it); these zeros hold its place.
    jac0 = problem.jacobian_placeholder(t0, y0)
    factor0 = _zeros(jax.eval_shape(problem.linear_solver.prepare, jac0, h0)[0])

    # t_eval entries at t0 are y0; the others are written as steps pass them.
    at_start = direction * (t_eval - t0) <= 0
    ys = jnp.where(at_start[:, None], y0, jnp.nan).astype(y0.dtype)
    finite = jnp.all(jnp.isfinite(y0)) & jnp.all(jnp.isfinite(f0))
    done = direction * (t0 - t_bound) >= 0
    status = jnp.where(~finite, NON_FINITE, jnp.where(done, SUCCESS, RUNNING)).astype(jnp.int32)
    one = jnp.int32(1)
    state = _State(
        t=t0,
        h_abs=h0,
        D=D,
        rescale_pending=jnp.bool_(False),
        pending_factor=jnp.ones((), real),
        order=one,
        n_equal_steps=jnp.int32(0),
        jac=jac0,
        factor=factor0,
        factor_ok=jnp.bool_(False),
        factor_usable=jnp.bool_(False),
        current_jac=jnp.bool_(True),
        need_jac=jnp.bool_(False),
        initial_jac=jnp.bool_(True),
        new_step=jnp.bool_(True),
        status=status,
        counts=Counts(
            jnp.int32(2 if first_step is None else 1),
            # A constant Jacobian is given, not computed (SciPy's njev 0).
            jnp.int32(0 if problem.constant_jacobian else 1),
            jnp.int32(0),
            jnp.int32(0),
            jnp.int32(0),
        ),
        ys=ys,
        next_out=jnp.sum(at_start).astype(jnp.int32),
        observed=() if observer is None else observer.init(t0, y0),
    )

    def attempt(s: _State) -> _State:
        t, order = s.t, s.order
        # SciPy's 10 spacings of t, at least 10 of the smallest normal number: at t = 0 the
        # spacing is subnormal, which XLA's arithmetic flushes to 0 (no step too small).
        spacing = jnp.abs(jnp.nextafter(t, direction * jnp.inf) - t)
        min_step = 10 * jnp.maximum(spacing, jnp.finfo(spacing.dtype).smallest_normal)
        # At a step's start the step size is clamped to [min_step, max_step]; a retry
        # below min_step fails. Past t_bound, the step ends at t_bound.
        h_abs = jnp.where(s.new_step, jnp.clip(s.h_abs, min_step, max_step), s.h_abs)
        clamped = h_abs != s.h_abs
        too_small = h_abs < min_step
        t_new = t + h_abs * direction
        past = direction * (t_new - t_bound) > 0
        t_new = jnp.where(past, t_bound, t_new)
        h = t_new - t
        rescale = jnp.where(past, jnp.abs(h), h_abs) / s.h_abs
        changed = clamped | past
        # The one rescaling of D this attempt: the previous attempt's (its new step size
        # or order), then this one's clamp; the identity when neither changed it.
        rescaled = changed | s.rescale_pending
        factor = jnp.where(changed, rescale, 1) * jnp.where(s.rescale_pending, s.pending_factor, 1)
        D = rescale_if(rescaled, s.D, change_matrix(order, factor, real))
        n_equal = jnp.where(changed, 0, s.n_equal_steps)
        h_abs = jnp.abs(h)
        factor_ok = s.factor_ok & ~past
        current_jac = jnp.where(s.new_step, problem.constant_jacobian, s.current_jac)

        y_predict, psi = predict(D, order, (gamma / alpha[order]).astype(D.dtype))
        scale = atol + rtol * jnp.abs(y_predict)
        c = h / alpha[order]

        counts = s.counts

        def new_jacobian():
            # The first attempt's is SciPy's initial J, counted in the initial njev.
            t_jac = jnp.where(s.initial_jac, t0, t_new)
            y_jac = jnp.where(s.initial_jac, y0, y_predict)
            return problem.jacobian(t_jac, y_jac), counts.njev + s.need_jac

        jac, njev = lax.cond(s.need_jac | s.initial_jac, new_jacobian, lambda: (s.jac, counts.njev))
        current_jac = current_jac | s.need_jac
        factor_ok = factor_ok & ~s.need_jac

        def refactor(carry):
            lu, ok = problem.linear_solver.prepare(jac, c)
            return jnp.bool_(False), lu, ok, carry[-1] + 1

        # A loop run once or not at all rather than a lax.cond: XLA updates the factor
        # in place where a cond's branch that keeps it would copy it.
        _, lu, usable, nlu = lax.while_loop(
            lambda carry: carry[0], refactor, (~factor_ok, s.factor, s.factor_usable, counts.nlu)
        )
        converged, n_iter, y_new, d = _newton(
            problem, t_new, y_predict, c, psi, lu, usable, scale, newton_tol
        )

        safety = 0.9 * (2 * NEWTON_MAXITER + 1) / (2 * NEWTON_MAXITER + n_iter)
        scale = atol + rtol * jnp.abs(y_new)
        error_norm = lax.stop_gradient(rms(error_const[order] * d / scale))
        accurate = error_norm <= 1
        accepted = converged & accurate & ~too_small
        # A rejected attempt: halve after a Newton failure with a current J (a new factor
        # follows), shrink by the error estimate after an inaccurate step (the factor
        # is kept, as SciPy keeps it), or retry with a new J.
        shrink = jnp.where(
            converged,
            jnp.maximum(MIN_FACTOR, safety * error_norm ** (-1 / (order + 1))),
            0.5,
        )
        shrink_now = ~accepted & (converged | current_jac)

        D_next, error_m, error_p = accept(D, d, order, accepted, scale, error_const)
        # Every order + 1 equal steps: choose the order and the step size, from the
        # error estimates of orders order - 1 and order + 1.
        n_equal_acc = n_equal + 1
        norms = lax.stop_gradient(jnp.stack([error_m, error_norm, error_p]))
        factors = norms ** (-1.0 / (order + jnp.arange(3)))
        choose = n_equal_acc >= order + 1
        new_order = jnp.where(choose, order + jnp.argmax(factors) - 1, order).astype(jnp.int32)
        grow = jnp.minimum(MAX_FACTOR, safety * jnp.max(factors))
        h_acc = jnp.where(choose, h_abs * grow, h_abs)

        t_next = jnp.where(accepted, t_new, t)
        status = jnp.where(
            too_small,
            STEP_TOO_SMALL,
            jnp.where(accepted & (direction * (t_new - t_bound) >= 0), SUCCESS, RUNNING),
        )
        nattempts = counts.nattempts + 1
        status = jnp.where(
            (status == RUNNING) & (nattempts >= max_steps), MAX_STEPS_REACHED, status
        )
        order_next = jnp.where(accepted, new_order, order)
        observed, t_out = s.observed, t_next
        if observer is not None:
            step = Step(accepted, t, t_new, h, order_next, D_next, y_new)
            observed, stop, t_stop = observer.observe(s.observed, step)
            # A terminal event overrides reaching t_bound or max_steps, as in SciPy.
            stop = accepted & stop
            t_out = jnp.where(stop, t_stop, t_next)
            status = jnp.where(stop, TERMINATED, status)
        # D_next is still in the step size h; the next attempt rescales it.
        ys, next_out = _write_outputs(
            s.ys, s.next_out, t_eval, t_out, t_next, direction, D_next, order_next, h, accepted
        )
        return _State(
            t=t_out,
            h_abs=jnp.where(accepted, h_acc, jnp.where(shrink_now, h_abs * shrink, h_abs)),
            D=D_next,
            rescale_pending=jnp.where(accepted, choose, shrink_now),
            pending_factor=jnp.where(accepted, grow, shrink).astype(real),
            order=order_next,
            n_equal_steps=jnp.where(
                accepted, jnp.where(choose, 0, n_equal_acc), jnp.where(shrink_now, 0, n_equal)
            ),
            jac=jac,
            factor=lu,
            factor_usable=usable,
            factor_ok=jnp.where(accepted, ~choose, converged),
            current_jac=current_jac,
            need_jac=~converged & ~current_jac & ~too_small,
            initial_jac=jnp.bool_(False),
            new_step=accepted,
            status=status.astype(jnp.int32),
            counts=Counts(
                nfev=counts.nfev + n_iter,
                njev=njev,
                nlu=nlu,
                nsteps=counts.nsteps + accepted,
                nattempts=nattempts,
            ),
            ys=ys,
            next_out=next_out,
            observed=observed,
        )

    final = lax.while_loop(lambda s: s.status == RUNNING, attempt, state)
    return final.ys, final.t, final.status, final.counts, final.observed


def _zeros(shapes: Any) -> Any:
    """Zeros shaped like the ``jax.ShapeDtypeStruct`` leaves of ``shapes``."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _write_outputs(
    ys: Array,
    next_out: Array,
    t_eval: Array,
    bound: Array,
    t: Array,
    direction: Array,
    D: Array,
    order: Array,
    h: Array,
    accepted: Array,
) -> tuple[Array, Array]:
    """Writes the dense output of the step that ended at ``t`` at the ``t_eval`` entries
    it passed, up to ``bound`` (``t``, or where an event stopped the integration)."""
    m = t_eval.shape[0]

    def cond(carry):
        _, i = carry
        return accepted & (i < m) & (direction * (t_eval[jnp.minimum(i, m - 1)] - bound) <= 0)

    def body(carry):
        ys, i = carry
        return ys.at[i].set(interpolate(D, order, t, h, t_eval[i])), i + 1

    return lax.while_loop(cond, body, (ys, next_out))
