"""The events of :func:`jaxdia.solve_ivp`: SciPy's ``events=``, located in the loop.

An event is a function ``event(t, y, *args)`` whose zeros are wanted, with SciPy's
attributes ``terminal`` (False, or the occurrence that stops the integration: True is
the first) and ``direction`` (positive: only zeros where it increases; negative: where
it decreases; 0: both). As in SciPy (``find_active_events``, ``handle_events``), after
each accepted step every event is evaluated at the step's end; one whose sign changed in
the allowed direction (a zero at either end counts) is located on the step's
interpolating polynomial by Brent's method (:func:`brentq`, SciPy's ``brentq`` with its
tolerances ``4 eps``); when a terminal event reaches its count, the integration stops at
the earliest such zero, and the zeros of that step after it are dropped.

Events traced with JAX run in the program; events written in NumPy run on the host
(:mod:`jaxdia._ivp_host`), a round trip per evaluation. The zeros and the solution there
are written into arrays with a slot per occurrence (``capacity`` per event) and a count
of the occurrences, which keeps counting past the slots (so a count above ``capacity``
says that occurrences were not kept); :func:`jaxdia.solve_ivp` called eagerly runs again
with enough slots. The zeros are outside differentiation (the times of events are held
fixed; the solution there is differentiated along the interpolant).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from . import _bdf
from ._ivp_host import HostArgs, HostCall, traces

_TERMINAL = "The `terminal` attribute of each event must be a boolean or positive integer."
#: SciPy's brentq's iterations.
MAX_ITERATIONS = 100


class Events(NamedTuple):
    """The events, checked: each as a function of ``(t, y)`` returning a real scalar in
    the program, with SciPy's terminal count (``inf``: not terminal) and direction."""

    functions: tuple[Callable[[Array, Array], Array], ...]
    terminal: np.ndarray  # (E,) floats
    direction: np.ndarray  # (E,) floats


def prepare(events: Any, args: tuple[Any, ...], n: int, dtype: np.dtype, real: np.dtype) -> Events:
    """SciPy's ``prepare_events``: ``events`` (a function or a sequence of them) with
    their ``terminal`` and ``direction`` attributes checked, each traced once to tell a
    JAX function from a NumPy one."""
    functions: Sequence[Any] = (events,) if callable(events) else tuple(events)
    terminal = np.empty(len(functions))
    direction = np.empty(len(functions))
    wrapped = []
    t_shape, y_shape = jax.ShapeDtypeStruct((), real), jax.ShapeDtypeStruct((n,), dtype)
    for i, event in enumerate(functions):
        if not callable(event):
            raise TypeError(f"solve_ivp: events[{i}] must be callable, got {type(event).__name__}")
        count = getattr(event, "terminal", None)
        if count is None or count == 0:
            terminal[i] = np.inf
        elif _whole(count) and count > 0:
            terminal[i] = int(count)
        else:
            raise ValueError(_TERMINAL)
        direction[i] = float(getattr(event, "direction", 0))
        wrapped.append(_as_function(event, i, args, t_shape, y_shape, real))
    return Events(tuple(wrapped), terminal, direction)


def _whole(value: Any) -> bool:
    try:
        return int(value) == value
    except (TypeError, ValueError, OverflowError):
        return False


def _as_function(
    event: Callable[..., Any],
    i: int,
    args: tuple[Any, ...],
    t_shape: jax.ShapeDtypeStruct,
    y_shape: jax.ShapeDtypeStruct,
    real: np.dtype,
) -> Callable[[Array, Array], Array]:
    """``event(t, y, *args)`` as a real scalar in the program: traced, or on the host."""
    what = f"events[{i}]"
    out = traces(lambda t, y: event(t, y, *args), t_shape, y_shape)
    if out is not None:
        if out.size != 1 or jnp.issubdtype(out.dtype, jnp.complexfloating):
            raise TypeError(
                f"solve_ivp: {what} must return a real scalar, got {out.dtype} of shape {out.shape}"
            )
        return lambda t, y: jnp.reshape(event(t, y, *args), ()).astype(real)

    def on_host(t: Any, y: np.ndarray, args: tuple[Any, ...]) -> np.ndarray:
        value = np.asarray(event(t, y, *args))
        if value.size != 1 or np.iscomplexobj(value):
            raise TypeError(
                f"solve_ivp: {what} must return a real scalar, got {value.dtype} of shape "
                f"{value.shape}"
            )
        return value.reshape(())

    return HostCall(on_host, jax.ShapeDtypeStruct((), real), HostArgs(args), what)


def brentq(f: Callable[[Array], Array], a: Array, b: Array) -> Array:
    """A zero of ``f`` between ``a`` and ``b`` by Brent's method, as SciPy's ``brentq``
    with ``xtol = rtol = 4 eps`` and at most 100 iterations, in one ``lax.while_loop``.
    Where ``f(a)`` and ``f(b)`` have the same sign (an event found at the steps' ends whose
    polynomial rounds to the other side; SciPy raises there) the end nearer a zero is
    returned."""
    eps = jnp.finfo(a.dtype).eps
    tol = 4 * eps
    f_ends = jax.vmap(f)(jnp.stack([a, b]))
    f_a, f_b = f_ends[0], f_ends[1]
    same_sign = jnp.signbit(f_a) == jnp.signbit(f_b)
    start = jnp.where(
        f_a == 0,
        a,
        jnp.where(f_b == 0, b, jnp.where(jnp.abs(f_a) <= jnp.abs(f_b), a, b)),
    )
    done = (f_a == 0) | (f_b == 0) | same_sign
    zero = jnp.zeros((), a.dtype)
    # (x_pre, x_cur, x_blk, f_pre, f_cur, f_blk, s_pre, s_cur, iteration, done)
    state = (a, jnp.where(done, start, b), zero, f_a, f_b, zero, zero, zero, jnp.int32(0), done)

    def body(state):
        x_pre, x_cur, x_blk, f_pre, f_cur, f_blk, s_pre, s_cur, i, _ = state
        # The bracket is [x_cur, x_blk] when the signs of f_pre and f_cur differ.
        crossed = (f_pre != 0) & (f_cur != 0) & (jnp.signbit(f_pre) != jnp.signbit(f_cur))
        x_blk = jnp.where(crossed, x_pre, x_blk)
        f_blk = jnp.where(crossed, f_pre, f_blk)
        s_pre = jnp.where(crossed, x_cur - x_pre, s_pre)
        s_cur = jnp.where(crossed, x_cur - x_pre, s_cur)
        # x_cur is the better end.
        swap = jnp.abs(f_blk) < jnp.abs(f_cur)
        x_pre, x_cur, x_blk = (
            jnp.where(swap, x_cur, x_pre),
            jnp.where(swap, x_blk, x_cur),
            jnp.where(swap, x_cur, x_blk),
        )
        f_pre, f_cur, f_blk = (
            jnp.where(swap, f_cur, f_pre),
            jnp.where(swap, f_blk, f_cur),
            jnp.where(swap, f_cur, f_blk),
        )
        delta = (tol + tol * jnp.abs(x_cur)) / 2
        s_bis = (x_blk - x_cur) / 2
        converged = (f_cur == 0) | (jnp.abs(s_bis) < delta)
        # Inverse quadratic (or secant) step where it is short enough, else bisection.
        secant = -f_cur * (x_cur - x_pre) / (f_cur - f_pre)
        d_pre = (f_pre - f_cur) / (x_pre - x_cur)
        d_blk = (f_blk - f_cur) / (x_blk - x_cur)
        quadratic = -f_cur * (f_blk * d_blk - f_pre * d_pre) / (d_blk * d_pre * (f_blk - f_pre))
        s_try = jnp.where(x_pre == x_blk, secant, quadratic)
        interpolate = (jnp.abs(s_pre) > delta) & (jnp.abs(f_cur) < jnp.abs(f_pre))
        short = 2 * jnp.abs(s_try) < jnp.minimum(jnp.abs(s_pre), 3 * jnp.abs(s_bis) - delta)
        good = interpolate & short
        s_pre_next = jnp.where(good, s_cur, s_bis)
        s_cur_next = jnp.where(good, s_try, s_bis)
        step = jnp.where(
            jnp.abs(s_cur_next) > delta, s_cur_next, jnp.where(s_bis > 0, delta, -delta)
        )
        x_next = x_cur + step
        f_next = lax.cond(converged, lambda: f_cur, lambda: f(x_next))
        return (
            jnp.where(converged, x_pre, x_cur),
            jnp.where(converged, x_cur, x_next),
            x_blk,
            jnp.where(converged, f_pre, f_cur),
            f_next,
            f_blk,
            jnp.where(converged, s_pre, s_pre_next),
            jnp.where(converged, s_cur, s_cur_next),
            i + 1,
            converged,
        )

    final = lax.while_loop(lambda s: ~s[-1] & (s[-2] < MAX_ITERATIONS), body, state)
    return final[1]


class Found(NamedTuple):
    """The events so far: the last values, the occurrences kept (their times and the
    solution there, NaN in unused slots) and counted, and the solution where a terminal
    event stopped the integration."""

    g: Array  # (E,)
    occurred: Array  # (E,) int32
    t: Array  # (E, capacity)
    y: Array  # (E, capacity, n)
    y_stop: Array  # (n,)


def observer(events: Events, capacity: int) -> _bdf.Observer:
    """The loop's :class:`jaxdia._bdf.Observer` that finds the events of each accepted
    step (SciPy's ``find_active_events`` and ``handle_events``)."""
    functions = events.functions
    terminal = jnp.asarray(events.terminal)
    sign = np.sign(events.direction)

    def values(t: Array, y: Array) -> Array:
        return jnp.stack([g(t, y) for g in functions])

    def init(t0: Array, y0: Array) -> Found:
        E = len(functions)
        return Found(
            g=values(t0, y0),
            occurred=jnp.zeros(E, jnp.int32),
            t=jnp.full((E, capacity), jnp.nan, t0.dtype),
            y=jnp.full((E, capacity, *y0.shape), jnp.nan, y0.dtype),
            y_stop=y0,
        )

    def observe(found: Found, step: _bdf.Step) -> tuple[Found, Array, Array]:
        def solution(at: Array) -> Array:
            return _bdf.interpolate(step.D, step.order, step.t, step.h, at)

        def on_step() -> tuple[Array, Array]:
            g_new = values(step.t, step.y)
            up = (found.g <= 0) & (g_new >= 0)
            down = (found.g >= 0) & (g_new <= 0)
            active = (up & (sign > 0)) | (down & (sign < 0)) | ((up | down) & (sign == 0))
            return g_new, active

        no_events = jnp.zeros(len(functions), bool)
        g_new, active = lax.cond(step.accepted, on_step, lambda: (found.g, no_events))

        def locate() -> tuple[Array, Array]:
            roots = []
            for i, g in enumerate(functions):

                def zero(g: Callable[[Array, Array], Array] = g) -> Array:
                    return brentq(lambda at: g(at, solution(at)), step.t_old, step.t)

                roots.append(lax.cond(active[i], zero, lambda: step.t))
            roots_ = lax.stop_gradient(jnp.stack(roots))
            return roots_, jax.vmap(solution)(roots_)

        def nothing() -> tuple[Array, Array]:
            return jnp.full(len(functions), step.t), jnp.zeros_like(found.y[:, 0])

        roots, at_roots = lax.cond(jnp.any(active), locate, nothing)
        counted = found.occurred + active
        reached = active & (counted >= terminal)
        stop = jnp.any(reached)
        # The earliest zero of a terminal event that reached its count ends the
        # integration; the zeros after it in this step are dropped.
        along = jnp.sign(step.h) * roots
        first = jnp.argmin(jnp.where(reached, along, jnp.inf))
        kept = active & (~stop | (along <= along[first]))
        slots = jnp.minimum(found.occurred, capacity - 1)
        rows = jnp.arange(len(functions))
        t_rec = found.t.at[rows, slots].set(jnp.where(kept, roots, found.t[rows, slots]))
        y_old = found.y[rows, slots]
        y_rec = found.y.at[rows, slots].set(jnp.where(kept[:, None], at_roots, y_old))
        y_stop = jnp.where(stop, at_roots[first], found.y_stop)
        new = Found(g_new, found.occurred + kept.astype(jnp.int32), t_rec, y_rec, y_stop)
        return new, stop, roots[first]

    return _bdf.Observer(init, observe)
