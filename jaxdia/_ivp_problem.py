"""The integration of :func:`jaxdia.solve_ivp` as one compiled program: :class:`Problem`
holds the arguments checked (:mod:`jaxdia._ivp_checks`), the right-hand side traced or put
on the host (:mod:`jaxdia._ivp_host`), its Jacobian (:mod:`jaxdia._ivp_jacobian`), the
linear solver of the Newton iteration and the loop's observers for ``dense_output``
(:mod:`jaxdia._ivp_output`) and ``events`` (:mod:`jaxdia._ivp_events`); :meth:`Problem.run`
compiles and runs :func:`jaxdia._bdf.integrate` with them and returns :class:`Raw`, the
program's fixed-shape outputs."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.stages import Wrapped

from . import _bdf, _ivp_checks as checks
from ._checks import as_array, is_traced
from ._colouring import Pattern
from ._ivp_cache import PROGRAMS, Args, split_args
from ._ivp_events import Found, observer as events_observer, prepare as prepare_events
from ._ivp_host import HostArgs, HostCall, traces, vectorized_calls
from ._ivp_jacobian import band, constant_matrix, jacobian_of
from ._ivp_output import OdeSolution, Record, recorder, solution, steps
from ._kernels.primitives import forward_only
from ._linalg.factor import lu_unchecked, solve_unchecked
from ._linalg.incomplete import ilu0
from ._linalg.krylov import bicgstab
from ._linalg.multigrid import multigrid
from ._matrix import DiaMatrix
from ._parts import DiaParts
from ._typing import ArrayLike, Grid, Offsets

REVERSE_MODE = (
    "jaxdia.solve_ivp (and odeint) cannot be differentiated in reverse mode (jax.grad, "
    "jax.vjp, jax.jacrev): the integration is a lax.while_loop of unbounded length. Use "
    "forward mode, jax.jacfwd or jax.jvp (one integration per input direction), e.g. "
    "jax.jacfwd(loss)(y0) for the gradient of a scalar loss"
)


def _newton_matrix(J: DiaMatrix, c: Array) -> DiaMatrix:
    """``I - c J`` with the offsets of ``J`` and 0."""
    offsets = tuple(sorted(set(J.offsets) | {0}))
    rows = []
    for offset in offsets:
        row = (
            -c.astype(J.dtype) * J.data[..., J.offsets.index(offset), :]
            if offset in J.offsets
            else jnp.zeros(J.data.shape[:-2] + J.data.shape[-1:], J.dtype)
        )
        rows.append(row + 1 if offset == 0 else row)
    return DiaMatrix._wrap(DiaParts(jnp.stack(rows, axis=-2), offsets, J.shape))


def _banded_solver() -> _bdf.LinearSolver:
    def prepare(J, c):
        lu = lu_unchecked(_newton_matrix(J, c))
        return lu, lu.ok

    # The loop reads lu.ok itself: no NaN select over each solution.
    return _bdf.LinearSolver(prepare, solve_unchecked)


def _bicgstab_solver(
    rtol: ArrayLike, maxiter: int | None, grid: tuple[int, ...] | None
) -> _bdf.LinearSolver:
    """BiCGStab on ``I - c J`` preconditioned by its ILU(0), or, on a ``grid``, by a
    multigrid V-cycle of it."""

    def prepare(J, c):
        M = _newton_matrix(J, c)
        return (M, ilu0(M) if grid is None else multigrid(M, grid)), jnp.bool_(True)

    def solve(state, b):
        M, preconditioner = state
        # A relative residual below 100 eps is not attainable (float32's 1e-6, say).
        floor = 100 * jnp.finfo(b.dtype).eps
        x, info = bicgstab(
            M, b, M=preconditioner, rtol=jnp.maximum(rtol, floor), atol=0.0, maxiter=maxiter
        )
        # A solve that did not converge (or a non-finite b) fails the Newton iteration.
        return jnp.where(info.converged, x, jnp.nan)

    return _bdf.LinearSolver(prepare, solve)


class Raw(NamedTuple):
    """The compiled program's outputs (fixed shapes)."""

    ys: Array
    status: Array
    counts: _bdf.Counts
    t: Array
    t_final: Array
    sol: OdeSolution | None
    t_events: Array | None  # (E, capacity)
    y_events: Array | None  # (E, capacity, n)
    nevents: Array | None  # (E,)


class Operands(NamedTuple):
    """The program's operands: the values of a call (``first_step`` and ``jac`` may be
    None, which ``jax.jit`` keys on)."""

    t0: Any
    t1: Any
    y0: Any
    times: Any
    rtol: Any
    atol: Any
    max_step: Any
    first_step: Any
    krylov_rtol: Any
    jac: DiaMatrix | None  # a matrix jac: constant


class Spec(NamedTuple):
    """What fixes the program besides ``fun`` and the operands' shapes and dtypes:
    hashable where its functions and ``args``' static leaves are (the key of
    :data:`jaxdia._ivp_cache.PROGRAMS`)."""

    swapped: bool  # fun(y, t, *args): odeint's order
    vectorized: bool
    jac: Callable[..., Any] | None  # a function jac (a matrix is an operand)
    band: Pattern | None
    linear_solver: str
    krylov_maxiter: int | None
    grid: tuple[int, ...] | None
    max_steps: int
    dense_output: bool
    # The events with the attributes read (terminal, direction): SciPy reads them per call.
    events: tuple[tuple[Callable[..., Any], Any, Any], ...] | None
    t_eval: bool  # given (else the ends of t_span)
    capacity: int
    rows: bool
    args: Args


class Problem:
    """:func:`jaxdia.solve_ivp`'s arguments (its names) checked, with NumPy where they are
    concrete, and :meth:`run`, the integration as one compiled program."""

    def __init__(
        self,
        fun: Callable[..., Any],
        t_span: Any,
        y0: ArrayLike | Sequence[Any],
        t_eval: Any,
        args: tuple[Any, ...],
        *,
        rtol: ArrayLike,
        atol: ArrayLike,
        jac: Any = None,
        jac_sparsity: Any = None,
        jac_offsets: Offsets | None = None,
        jac_mask: ArrayLike | None = None,
        linear_solver: str = "banded",
        krylov_rtol: float = 1e-6,
        krylov_maxiter: int | None = None,
        grid: Grid | None = None,
        max_step: ArrayLike = float("inf"),
        first_step: ArrayLike | None = None,
        max_steps: int | None = None,
        dense_output: bool = False,
        events: Any = None,
        vectorized: bool = False,
        swapped: bool = False,
    ):
        y0 = as_array(y0, "solve_ivp: y0")
        dtype0 = _inexact(y0.dtype)
        if y0.ndim != 1:
            raise ValueError(f"solve_ivp: y0 must be 1-D, got shape {y0.shape}")
        self.n = n = y0.shape[0]
        self.y0 = y0
        self.dtype = dtype0  # of an empty y0 (the program finds fun's)
        self.real = real = np.dtype(jnp.finfo(dtype0).dtype)
        self.t_eval = t_eval
        self.t0, self.t1, self.times = checks.times(t_span, t_eval, real)
        self.dense_output = bool(dense_output)
        self.max_steps = checks.steps_limit(max_steps, self.dense_output, n, dtype0)
        self.max_step, self.first_step = checks.step_sizes(
            max_step, first_step, self.t0, self.t1, real
        )
        eps = float(np.finfo(real).eps)
        rtol_ = checks.tolerance(rtol, "rtol", n, real)
        rtol_ = jnp.maximum(rtol_, 100 * eps) if is_traced(rtol_) else np.maximum(rtol_, 100 * eps)
        # One per component: a scalar and a vector share the program (the same steps:
        # the Newton iteration's is the smallest).
        self.rtol = _per_component(rtol_, n)
        self.atol = _per_component(checks.tolerance(atol, "atol", n, real), n)
        self.krylov_rtol = checks.value(krylov_rtol).astype(real)
        self.grid = checks.grid_shape(grid, linear_solver, n)
        self.band = band(jac_offsets, jac_mask, jac_sparsity, n)
        if events is not None and n == 0:
            raise ValueError("solve_ivp: events need a non-empty y0")
        self.jac_matrix: DiaMatrix | None = None
        if jac is not None and not callable(jac) and n:
            self.jac_matrix = constant_matrix(jac, self.band, n)
        self.fun, self.args, self.jac, self.events = fun, args, jac, events
        self.swapped, self.vectorized = swapped, vectorized
        self.linear_solver, self.krylov_maxiter = linear_solver, krylov_maxiter

    def _spec(self, args: Args, capacity: int, rows: bool) -> Spec:
        events = None
        if self.events is not None:
            given = (self.events,) if callable(self.events) else tuple(self.events)
            events = tuple(
                (e, getattr(e, "terminal", None), getattr(e, "direction", 0)) for e in given
            )
        return Spec(
            self.swapped,
            bool(self.vectorized),
            self.jac if callable(self.jac) else None,
            self.band,
            self.linear_solver,
            self.krylov_maxiter,
            self.grid,
            self.max_steps,
            self.dense_output,
            events,
            self.t_eval is not None,
            capacity,
            rows,
            args,
        )

    def run(self, capacity: int, rows: bool) -> Raw:
        """The integration as one compiled program, ``capacity`` slots per event: the
        solutions as the rows of ``ys`` if ``rows``, else as its columns."""
        if self.n == 0:
            return self._nothing(rows)
        program, operands, values = self.program(capacity, rows)
        return program(operands, values)

    def program(self, capacity: int, rows: bool) -> tuple[Wrapped, Operands, tuple[Any, ...]]:
        """``(program, operands, values)``: the jitted integration of :meth:`run`, called as
        ``program(operands, values)`` (``values``: the arrays of ``args``). The program is
        kept (:data:`jaxdia._ivp_cache.PROGRAMS`) and reused by a later call with the same
        ``fun`` and :class:`Spec`, whatever its operands' values."""
        operands = Operands(
            self.t0,
            self.t1,
            self.y0,
            self.times,
            self.rtol,
            self.atol,
            self.max_step,
            self.first_step,
            self.krylov_rtol,
            self.jac_matrix,
        )
        static, values = split_args(self.args)
        spec = self._spec(static, capacity, rows)

        def make(fun: Callable[..., Any]) -> Wrapped | None:
            if values and self._needs_values(static, values):
                return None
            return jax.jit(functools.partial(_integrate, spec, fun))

        program = PROGRAMS.get(self.fun, spec, make)
        if program is None:
            # Not kept: fun or a part of spec is not hashable (or fun needs args' values):
            # a program of this call's, args closed over as constants.
            static, values = split_args(self.args, operands=False)
            spec = self._spec(static, capacity, rows)
            program = jax.jit(functools.partial(_integrate, spec, self.fun))
        return program, operands, values

    def _needs_values(self, static: Args, values: tuple[Any, ...]) -> bool:
        """Whether ``fun`` traces with ``args``' arrays as given but not with them as
        operands (it reads their values in Python): its program then closes over them,
        as before, rather than running ``fun`` on the host."""
        if all(is_traced(v) for v in values):
            return False
        dtype0 = _inexact(self.y0.dtype)
        t, y = jax.ShapeDtypeStruct((), self.real), jax.ShapeDtypeStruct((self.n,), dtype0)
        fun = _ordered(self.fun, self.swapped)
        single = _single(fun, self.vectorized)
        shapes = [jax.ShapeDtypeStruct(np.shape(v), jnp.result_type(v)) for v in values]
        if traces(lambda t, y, *v: single(t, y, static.rebuild(v)), t, y, *shapes) is not None:
            return False
        return traces(lambda t, y: single(t, y, self.args), t, y) is not None

    def _nothing(self, rows: bool) -> Raw:
        """An empty ``y0``: nothing to integrate (SciPy's single step to ``t1``)."""
        times = jnp.asarray(self.times)
        if self.t_eval is None:
            times = jnp.stack([jnp.asarray(self.t0), jnp.asarray(self.t1)])
        m = times.shape[0]
        ys = jnp.zeros((m, 0) if rows else (0, m), self.dtype)
        zero = jnp.int32(0)
        counts = _bdf.Counts(zero, zero, zero, jnp.int32(1), jnp.int32(1))
        sol = None
        if self.dense_output:
            t0, t1 = jnp.asarray(self.t0), jnp.asarray(self.t1)
            sol = OdeSolution._make(
                jnp.stack([t0, t1]),
                t1[None],
                (t1 - t0)[None],
                jnp.zeros(1, jnp.int32),
                jnp.zeros((1, _bdf.MAX_ORDER + 1, 0), self.dtype),
                jnp.int32(1),
                jnp.zeros(0, self.dtype),
            )
        return Raw(ys, jnp.int32(0), counts, times, jnp.asarray(self.t1), sol, None, None, None)


def _together(observers: list[_bdf.Observer]) -> _bdf.Observer | None:
    """One observer of ``observers`` (None for none): their carries as a tuple; the last
    may stop the integration (the events)."""
    if not observers:
        return None

    def init(t0: Array, y0: Array) -> tuple[Any, ...]:
        return tuple(o.init(t0, y0) for o in observers)

    def observe(carry: tuple[Any, ...], step: _bdf.Step) -> tuple[Any, Array, Array]:
        results = [o.observe(c, step) for o, c in zip(observers, carry, strict=True)]
        _, stop, t_stop = results[-1]
        return tuple(r[0] for r in results), stop, t_stop

    return _bdf.Observer(init, observe)


def _inexact(dtype: Any) -> np.dtype:
    """The dtype of the solution for ``y0`` of ``dtype`` (integers: floats)."""
    dtype = np.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = np.dtype(jnp.result_type(float))
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _per_component(tol: Any, n: int) -> Any:
    """A tolerance (a scalar or ``(n,)``) as ``(n,)``."""
    return jnp.broadcast_to(tol, (n,)) if is_traced(tol) else np.broadcast_to(tol, (n,))


def _ordered(fun: Callable[..., Any], swapped: bool) -> Callable[..., Any]:
    """``fun`` as a function of ``(t, y, *args)`` (odeint's is of ``(y, t, *args)``)."""
    if not swapped:
        return fun
    return lambda t, y, *args: fun(y, t, *args)


def _single(fun: Callable[..., Any], vectorized: bool) -> Callable[[Any, Any, tuple], Any]:
    """``fun`` of one ``y``: ``single(t, y, args)``."""
    if vectorized:

        def single(t: Any, y: Any, args: tuple[Any, ...]) -> Any:
            out = fun(t, y[:, None], *args)
            return jnp.reshape(jnp.asarray(out), (-1,))
    else:

        def single(t: Any, y: Any, args: tuple[Any, ...]) -> Any:
            return fun(t, y, *args)

    return single


def _right_hand_side(
    fun: Callable[..., Any],
    args: tuple[Any, ...],
    n: int,
    dtype0: np.dtype,
    real: np.dtype,
    vectorized: bool,
) -> tuple[np.dtype, Callable[[Array, Array], Array], Any]:
    """``(dtype, rhs, host)``: the solution's dtype, ``fun`` as a function of ``(t, y)``
    in the program, and SciPy's ``(fun_single, fun_vectorized)`` on the host for a
    ``fun`` that does not trace (else None)."""
    one = _single(fun, vectorized)

    def single(t: Any, y: Any) -> Any:
        return one(t, y, args)

    shapes = jax.ShapeDtypeStruct((), real), jax.ShapeDtypeStruct((n,), dtype0)
    out = traces(single, *shapes)
    if out is not None:
        if out.shape != (n,):
            raise TypeError(
                f"solve_ivp: fun(t, y, *args) must return an array of shape ({n},) like "
                f"y0, got {out.shape}"
            )
        dtype = np.dtype(jnp.result_type(dtype0, out.dtype))

        def rhs(t: Array, y: Array) -> Array:
            return jnp.asarray(single(t, y)).astype(dtype)

        return dtype, rhs, None
    # As SciPy's, fun's values are cast to y0's dtype.
    host = vectorized_calls(fun, vectorized, n, dtype0, "fun")
    call = HostCall(
        lambda t, y, args: host[0](t, y, args),
        jax.ShapeDtypeStruct((n,), dtype0),
        HostArgs(args),
        "fun",
    )
    return dtype0, call, host


def _integrate(
    spec: Spec, fun: Callable[..., Any], operands: Operands, values: tuple[Any, ...]
) -> Raw:
    """The program: ``fun`` (a function of the ``args`` that ``spec.args`` rebuilds from
    ``values``), its Jacobian, the linear solver and the observers made from the traced
    operands, and :func:`jaxdia._bdf.integrate` run with them."""
    args = spec.args.rebuild(values)
    fun = _ordered(fun, spec.swapped)
    t0, t1, y0, times = operands.t0, operands.t1, operands.y0, operands.times
    n = y0.shape[0]
    dtype0 = _inexact(y0.dtype)
    real = np.dtype(jnp.finfo(dtype0).dtype)
    dtype, rhs, host = _right_hand_side(fun, args, n, dtype0, real, spec.vectorized)
    if spec.linear_solver == "banded":
        solver = _banded_solver()
    else:
        solver = _bicgstab_solver(operands.krylov_rtol, spec.krylov_maxiter, spec.grid)
    events = None
    if spec.events is not None:
        events = prepare_events(tuple(e for e, _, _ in spec.events), args, n, dtype, real)
    jac = operands.jac if operands.jac is not None else spec.jac
    jacobian = jacobian_of(None if host is not None else rhs, host, jac, spec.band, n, args, dtype)
    max_steps, dense, capacity = spec.max_steps, spec.dense_output, spec.capacity
    atol = operands.atol

    y0 = jnp.asarray(y0).astype(dtype)
    problem = _bdf.Problem(
        rhs=rhs,
        jacobian=lambda t, y: jacobian.evaluate(t, y, atol),
        jacobian_placeholder=jacobian.placeholder,
        linear_solver=solver,
        constant_jacobian=jacobian.constant,
    )
    observers = [recorder(max_steps)] if dense else []
    if events is not None:
        observers.append(events_observer(events, capacity))
    ys, t_final, status, counts, observed = _bdf.integrate(
        problem,
        t0,
        t1,
        y0,
        times,
        operands.rtol,
        atol,
        operands.max_step,
        max_steps,
        operands.first_step,
        _together(observers),
    )
    times = jnp.asarray(times)
    terminated = status == _bdf.TERMINATED
    sol = found = None
    if events is not None:
        found = observed[-1]
        assert isinstance(found, Found)
    if dense:
        record = observed[0]
        assert isinstance(record, Record)
        sol = solution(record, t0, y0, t_final, terminated)
        sol = sol._replace(_D=forward_only(sol._D, REVERSE_MODE))
    if not spec.t_eval and sol is not None:
        last = sol._D[jnp.maximum(sol._count - 1, 0), 0]
        last = jnp.where(sol._count > 0, last, y0)
        if found is not None:
            last = jnp.where(terminated, found.y_stop, last)
        times, ys = steps(sol, last)
        ys = ys.T
    elif not spec.t_eval and found is not None:
        # t_span's ends, the last where a terminal event stopped the integration.
        times = times.at[-1].set(jnp.where(terminated, t_final, times[-1]))
        ys = ys.at[-1].set(jnp.where(terminated, found.y_stop, ys[-1]))
    ys = forward_only(ys if spec.rows else ys.T, REVERSE_MODE)
    if found is None:
        return Raw(ys, status, counts, times, t_final, sol, None, None, None)
    y_events = forward_only(found.y, REVERSE_MODE)
    return Raw(ys, status, counts, times, t_final, sol, found.t, y_events, found.occurred)
