"""Stiff initial value problems with banded Jacobians: :func:`solve_ivp` (SciPy's
``solve_ivp(method="BDF")``) and :func:`odeint` (SciPy's ``odeint`` with ``ml``/``mu``),
over :mod:`jaxdia._bdf`'s loop, keeping the Jacobian and its factor across steps.

This module is the driver: the arguments checked (:mod:`jaxdia._ivp_checks`), the
right-hand side traced or put on the host (:mod:`jaxdia._ivp_host`), its Jacobian
(:mod:`jaxdia._ivp_jacobian`), the loop's observers for ``dense_output``
(:mod:`jaxdia._ivp_output`) and ``events`` (:mod:`jaxdia._ivp_events`), one compiled
program, and the result shaped as SciPy's where it is concrete."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from . import _bdf, _ivp_checks as checks
from ._checks import as_array, is_traced, static_int
from ._ivp_events import Events, Found, observer as events_observer, prepare as prepare_events
from ._ivp_host import HostArgs, HostCall, traces, vectorized_calls
from ._ivp_jacobian import Jacobian, band, jacobian_of
from ._ivp_output import OdeSolution, Record, head, recorder, solution, steps
from ._kernels.primitives import forward_only
from ._linalg.factor import lu_unchecked, solve_unchecked
from ._linalg.incomplete import ilu0
from ._linalg.krylov import bicgstab
from ._linalg.multigrid import multigrid
from ._matrix import DiaMatrix
from ._parts import DiaParts
from ._typing import ArrayLike, Grid, Offsets

_REVERSE_MODE = (
    "jaxdia.solve_ivp (and odeint) cannot be differentiated in reverse mode (jax.grad, "
    "jax.vjp, jax.jacrev): the integration is a lax.while_loop of unbounded length. Use "
    "forward mode, jax.jacfwd or jax.jvp (one integration per input direction), e.g. "
    "jax.jacfwd(loss)(y0) for the gradient of a scalar loss"
)


class OdeResult(NamedTuple):
    """What :func:`solve_ivp` returns (a pytree: it can leave ``jit`` and be batched by ``vmap``).

    Attributes:
      t: the times of the solution: ``t_eval``; without it, ``t_span``'s two ends (the
        last where an event stopped the integration), or with ``dense_output`` every
        step's end (SciPy's ``t``).
      y: the solution at ``t``, shape ``(n, len(t))`` as SciPy's; NaN at times the
        integration did not reach (when it failed).
      status: 0 when the end of ``t_span`` was reached; 1 when a terminal event stopped
        it (SciPy's); -1 when a step below the spacing of floats was needed (SciPy's
        failure); -2 when ``max_steps`` attempts ran out; -3 when ``y0`` or
        ``fun(t0, y0)`` is not finite.
      nfev: evaluations of ``fun`` (the Jacobian's linearizations or finite
        differences not counted, as in SciPy).
      njev: Jacobians computed.
      nlu: factorizations of ``I - c J`` (preconditioners, for the Krylov ``linear_solver``s).
      nsteps: accepted steps.
      nattempts: step attempts (accepted and rejected; ``max_steps`` bounds them).
      sol: with ``dense_output``, the :class:`jaxdia.OdeSolution` (SciPy's ``sol``); else None.
      t_events: with ``events``, the times of each event's occurrences, a list of
        arrays (SciPy's); else None.
      y_events: with ``events``, the solution at them, a list of ``(count, n)`` arrays
        (shape ``(0,)`` for none, as SciPy's); else None.
      nevents: with ``events``, how many times each event occurred (a jaxdia
        addition: under ``jit`` it says how many of ``t_events``' slots hold one).

    Eagerly ``t``, ``y``, ``t_events`` and ``y_events`` have SciPy's lengths. Under
    ``jit`` (and ``vmap``) shapes are static: with ``dense_output`` and no ``t_eval``,
    ``t`` and ``y`` have a slot per possible step (``max_steps + 1``), NaN after the
    last; after a terminal event the ``t_eval`` entries it did not reach are NaN in
    ``y``; each ``t_events[i]`` has ``event_capacity`` slots (``y_events[i]``
    ``(event_capacity, n)``), NaN after the ``nevents[i]`` first.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> sol = jaxdia.solve_ivp(lambda t, y: y**2, (0.0, 2.0), jnp.ones(1),
      ...                        t_eval=[0.5, 1.5])  # y = 1 / (1 - t) blows up at t = 1
      >>> bool(sol.success), int(sol.status) < 0, bool(jnp.isnan(sol.y[0, 1]))
      (False, True, True)
    """

    t: Array
    y: Array
    status: Array
    nfev: Array
    njev: Array
    nlu: Array
    nsteps: Array
    nattempts: Array
    sol: OdeSolution | None = None
    t_events: list[Array] | None = None
    y_events: list[Array] | None = None
    nevents: Array | None = None

    @property
    def success(self) -> Array:
        """``status >= 0``: the end of the interval, or a terminal event, was reached."""
        return self.status >= 0

    @property
    def message(self) -> str | list[str]:
        """SciPy's message for ``status`` (a list for a batch); needs a concrete status."""
        if is_traced(self.status):
            raise TypeError(
                "OdeResult.message needs a concrete status: return the result from jit "
                "and read it outside (status and success work under jit)"
            )
        status = np.asarray(self.status)
        if status.ndim == 0:
            return _bdf.MESSAGES[int(status)]
        return [_bdf.MESSAGES[int(code)] for code in status.ravel()]


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


class _Raw(NamedTuple):
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


def solve_ivp(
    fun: Callable[..., Any],
    t_span: Sequence[ArrayLike] | ArrayLike,
    y0: ArrayLike,
    method: Any = "BDF",
    t_eval: Sequence[ArrayLike] | ArrayLike | None = None,
    dense_output: bool = False,
    events: Callable[..., Any] | Sequence[Callable[..., Any]] | None = None,
    vectorized: bool = False,
    args: tuple[Any, ...] | None = None,
    *,
    rtol: ArrayLike = 1e-3,
    atol: ArrayLike = 1e-6,
    jac: Any = None,
    jac_sparsity: Any = None,
    jac_offsets: Offsets | None = None,
    jac_mask: ArrayLike | None = None,
    first_step: ArrayLike | None = None,
    max_step: ArrayLike = float("inf"),
    linear_solver: str = "banded",
    krylov_rtol: float = 1e-6,
    krylov_maxiter: int | None = None,
    grid: Grid | None = None,
    max_steps: int | None = None,
    event_capacity: int = 16,
) -> OdeResult:
    """Integrates a stiff system ``y' = fun(t, y, *args)`` whose Jacobian is banded, by
    SciPy's BDF method, keeping the Jacobian and the factor of ``I - c J`` across steps.

    As ``scipy.integrate.solve_ivp(fun, t_span, y0, method="BDF", t_eval, dense_output,
    events, vectorized, args, rtol=, atol=, jac=, jac_sparsity=, first_step=,
    max_step=)``: the same variable-order (1 to 5), quasi-constant step size NDF
    formulas, error estimate, order selection and Newton iteration, so that it takes the
    same steps to rounding; SciPy's dense output (``sol``) and events. ``J`` comes from
    :func:`jaxdia.jacobian` on ``jac_offsets`` (one product per colour: 5 for a 1-D
    two-species problem with offsets ``-2 .. 2``), or from ``jac``; like SciPy it is
    recomputed only when Newton fails to converge with a ``J`` from an earlier step,
    and ``I - c J`` is refactored when the step size or the order changes.

    ``fun`` (and ``jac``, the events) may be written in ``jax.numpy`` (traced into the
    program) or, as for SciPy, in NumPy: a function that does not trace (it returns a
    list of numbers, calls NumPy on ``y``, branches on ``t`` in Python) is told apart by
    tracing it once and runs on the host through ``jax.pure_callback``. That costs a
    round trip to Python per evaluation (each Newton iteration's ``fun``), works under
    ``jit`` and ``vmap`` (one call per member), and cannot be differentiated; its
    Jacobian is SciPy's finite differences on the band (``jac_offsets``,
    ``jac_sparsity``), one evaluation of ``fun`` per colour of the band's columns, on
    the host.

    The whole integration is one ``lax.while_loop``: it runs under ``jit`` (``t_eval``
    has a static length) and ``vmap`` (a batch of ``y0``, of ``args``, of tolerances;
    batched, every member runs until the last finishes, and ``vmap`` turns the loop's
    branches into selects, so the batch computes a Jacobian and a factor at every step
    attempt: for large batches of small systems that is still one program, but not
    SciPy's counts of work). Failures are reported, never
    hidden: ``status`` is negative and ``y`` is NaN from the first ``t_eval`` the
    integration did not reach.

    ``dense_output=True`` records every accepted step's interpolating polynomial (SciPy's
    ``BdfDenseOutput``) in arrays with a slot per possible step: ``6 n`` values of ``y``'s
    dtype per step, ``48 n max_steps`` bytes in float64, allocated whole (pass
    ``max_steps`` for large systems; with the default, more than a GiB is an error).
    ``events`` are SciPy's: functions ``event(t, y, *args)`` with the attributes
    ``terminal`` (a bool, or the occurrence that stops) and ``direction``, located on
    each step's polynomial by Brent's method to SciPy's tolerance.

    Differentiation: forward mode (``jax.jvp``, ``jax.jacfwd``) with respect to ``y0``
    and ``args``; the step sizes, orders, Newton matrices and event times are held
    fixed, so the tangent is that of the computed solution along its steps. Reverse mode
    (``jax.grad``, ``jax.vjp``) is not supported (the loop has no bound): it raises a
    ``ValueError`` that says so; ``jax.jacfwd(loss)`` gives the gradient of a scalar
    loss in one integration per input.

    Args:
      fun: the right-hand side ``fun(t, y, *args)``, returning an array (or a list)
        shaped like ``y``; in ``jax.numpy`` or NumPy (see above).
      t_span: ``(t0, t1)``; ``t1 < t0`` integrates backwards; ``t1`` may be infinite
        (for an integration that a terminal event ends).
      y0: the initial value, 1-D (real or complex floats; integers are cast to floats);
        empty, nothing is integrated (SciPy's result: ``t_span``'s ends).
      method: ``"BDF"`` or SciPy's class ``scipy.integrate.BDF`` (the only method).
      t_eval: times at which to return the solution (sorted in the direction of
        ``t_span``, within it), from the interpolating polynomial of the step that
        covers each (no extra steps). None: with ``dense_output`` every step's end (as
        SciPy's), else ``t_span``'s two ends (every step needs the record that
        ``dense_output`` keeps).
      dense_output: return ``sol``, the interpolant of every step (see above).
      events: a function ``event(t, y, *args)`` or a sequence of them, with SciPy's
        ``terminal`` and ``direction`` attributes: their zeros are returned in
        ``t_events`` and ``y_events``, and ``status`` is 1 when a terminal one stopped
        the integration.
      vectorized: ``fun`` takes ``y`` of shape ``(n, k)`` and returns ``(n, k)``
        (SciPy's): its finite-difference Jacobian on the host evaluates all colours in
        one call.
      args: extra arguments of ``fun`` (and ``jac``, the events); a tuple (None: none).
      rtol: relative tolerance, a scalar or one per component (below ``100 eps`` it is
        raised to it, as SciPy does; the Newton iteration's tolerance is of the
        smallest).
      atol: absolute tolerance, a scalar or one per component.
      jac: the Jacobian: a matrix (a :class:`jaxdia.DiaMatrix`, a dense array or a
        ``scipy.sparse`` matrix: constant, never recomputed, ``njev`` 0), or
        ``jac(t, y, *args)`` returning one (a ``DiaMatrix``; a dense or ``scipy.sparse``
        matrix is read on ``jac_offsets``/``jac_sparsity``, every diagonal without them
        for ``n <= 1024``). None: differentiate ``fun`` on the band.
      jac_sparsity: SciPy's: an ``(n, n)`` array or ``scipy.sparse`` matrix whose
        nonzeros may be nonzero in the Jacobian (read on the host into ``jac_offsets``
        and ``jac_mask``).
      jac_offsets: the Jacobian's diagonals (SciPy ``odeint``'s ``ml``, ``mu`` are
        ``range(-ml, mu + 1)``; periodic problems add the corners ``±(n - 1)`` ..., which
        the banded LU factors as a band plus a low-rank correction). None without
        ``jac`` or ``jac_sparsity``: the whole matrix, for ``n <= 1024``.
      jac_mask: structural zeros within ``jac_offsets`` (see :func:`jaxdia.jacobian`),
        e.g. for interleaved species; fewer colours.
      first_step: the first step size (positive, at most ``|t1 - t0|``); None:
        SciPy's ``select_initial_step``.
      linear_solver: ``"banded"`` (:func:`jaxdia.lu_factor`: the default, best for
        bands up to a few hundred wide), ``"bicgstab"`` (:func:`jaxdia.bicgstab`
        preconditioned by :func:`jaxdia.ilu0` of ``I - c J``, rebuilt when SciPy would
        refactor: for 2-D and 3-D grids whose band is too wide to factor) or
        ``"multigrid"`` (:func:`jaxdia.bicgstab` preconditioned by a
        :func:`jaxdia.multigrid` V-cycle of ``I - c J`` on ``grid``: for one unknown per
        point of a large 2-D or 3-D grid, ``J`` a 5-, 7-, 9- or 27-point stencil; the
        docs' "which solver" table).
      krylov_rtol: the relative residual of each ``"bicgstab"`` or ``"multigrid"``
        solve (at least 100 eps of ``y``'s dtype); a solve that does not reach it in
        ``krylov_maxiter`` iterations fails the Newton iteration, which then retries
        with a smaller step, as after any Newton failure (a run whose steps shrink below
        the spacing of floats ends with status -1).
      krylov_maxiter: the most iterations of each Krylov solve (None: ``10 n``).
      grid: for ``linear_solver="multigrid"``, the grid ``(n1, n2)`` or ``(n1, n2, n3)``
        whose points in C order are ``y``'s components (``prod(grid) == n``).
      max_step: the largest step size (positive).
      max_steps: the most step attempts (accepted and rejected); status -2 beyond. None:
        100 000. With ``dense_output`` it is the number of steps recorded.
      event_capacity: the occurrences of each event kept under ``jit`` (an eager call
        runs again with enough when an event occurs more often).

    Returns:
      An :class:`OdeResult`: ``t``, ``y`` (shape ``(n, len(t))``), ``sol``,
      ``t_events``, ``y_events``, ``status``, ``success``, ``message``, ``nfev``,
      ``njev``, ``nlu``, ``nsteps``, ``nattempts``, ``nevents``.

    Raises:
      ValueError: for a method other than BDF, a ``y0`` that is not 1-D,
        ``t_span``/``t_eval`` of the wrong shape, outside ``t_span`` or unsorted,
        negative tolerances, a non-positive ``max_step`` or ``first_step``, an event's
        ``terminal`` that is not a bool or a positive int, a matrix ``jac`` together
        with ``jac_offsets``, or no band for ``n > 1024``; and when reverse mode
        differentiates it.
      TypeError: for a ``fun`` whose output is not shaped like ``y0``, a ``jac`` that
        does not return a matrix of shape ``(n, n)``, or an event that does not return
        a real scalar.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> def heat(t, u):  # u' = u'' on 50 points, zero boundary values
      ...     p = jnp.pad(u, 1)
      ...     return (p[:-2] - 2 * u + p[2:]) * 51.0**2
      >>> x = jnp.linspace(0, 1, 52)[1:-1]
      >>> sol = jaxdia.solve_ivp(heat, (0.0, 0.1), jnp.sin(jnp.pi * x),
      ...                        t_eval=[0.05, 0.1], jac_offsets=(-1, 0, 1), rtol=1e-4)
      >>> bool(sol.success), sol.y.shape, sol.y.dtype
      (True, (50, 2), dtype('float32'))
      >>> exact = jnp.exp(-jnp.pi**2 * 0.1) * jnp.sin(jnp.pi * x)  # the grid's mode decays
      >>> bool(jnp.max(jnp.abs(sol.y[:, -1] - exact)) < 1e-3)
      True

      A ball thrown up, written in NumPy as for SciPy, stopped when it lands:

      >>> import numpy as np
      >>> def hit_ground(t, y):
      ...     return y[0]
      >>> hit_ground.terminal, hit_ground.direction = True, -1
      >>> res = jaxdia.solve_ivp(lambda t, y: [y[1], -9.81], (0.0, 10.0), [0.0, 10.0],
      ...                        events=hit_ground, dense_output=True)
      >>> int(res.status), round(float(res.t_events[0][0]), 4)  # 2 v0 / g
      (1, 2.0387)
    """
    checks.method(method)
    if linear_solver not in checks.LINEAR_SOLVERS:
        raise ValueError(
            f"solve_ivp: linear_solver must be one of {checks.LINEAR_SOLVERS}, got "
            f"{linear_solver!r}"
        )
    capacity = checks.capacity(event_capacity)
    problem = _Problem(
        fun, t_span, y0, t_eval, checks.extra_args(args), rtol, atol, jac, jac_sparsity,
        jac_offsets, jac_mask, linear_solver, krylov_rtol, krylov_maxiter, grid, max_step,
        first_step, max_steps, dense_output, events, vectorized,
    )  # fmt: skip
    raw = problem.run(capacity, rows=False)
    if raw.nevents is not None and not is_traced(raw.nevents):
        most = int(np.max(raw.nevents, initial=0))
        if most > capacity:  # eagerly, every occurrence is returned
            raw = problem.run(most, rows=False)
    return _result(raw, problem, eager=not is_traced(raw.status))


def _result(raw: _Raw, problem: _Problem, eager: bool) -> OdeResult:
    """The program's outputs as :class:`OdeResult`: eagerly with SciPy's lengths."""
    t, ys, sol = raw.t, raw.ys, raw.sol
    t_events = y_events = None
    if raw.t_events is not None and raw.y_events is not None and raw.nevents is not None:
        t_events, y_events = list(raw.t_events), list(raw.y_events)
        if eager:
            counts = [int(k) for k in np.asarray(raw.nevents)]
            t_events = [head(times, k) for times, k in zip(t_events, counts, strict=True)]
            # SciPy's np.asarray([]) for an event that never occurred: shape (0,).
            y_events = [
                head(values, k) if k else jnp.zeros(0, values.dtype)
                for values, k in zip(y_events, counts, strict=True)
            ]
    if eager:
        if problem.t_eval is None and sol is not None:
            kept = int(sol.n_segments) + 1
            t, ys = head(t, kept), head(ys.T, kept).T
        elif problem.t_eval is not None and int(raw.status) == _bdf.TERMINATED:
            # SciPy returns the t_eval entries before a terminal event only.
            direction = np.sign(float(problem.t1) - float(problem.t0))
            kept = int(np.sum(direction * (np.asarray(t) - float(raw.t_final)) <= 0))
            t, ys = head(t, kept), head(ys.T, kept).T
    return OdeResult(
        t, ys, raw.status, *raw.counts, sol=sol, t_events=t_events, y_events=y_events,
        nevents=raw.nevents,
    )  # fmt: skip


class _Problem:
    """:func:`solve_ivp`'s arguments checked (with NumPy where they are concrete), and
    :meth:`run`, the integration as one compiled program."""

    def __init__(
        self,
        fun: Callable[..., Any],
        t_span: Any,
        y0: ArrayLike,
        t_eval: Any,
        args: tuple[Any, ...],
        rtol: ArrayLike,
        atol: ArrayLike,
        jac: Any,
        jac_sparsity: Any,
        jac_offsets: Offsets | None,
        jac_mask: ArrayLike | None,
        linear_solver: str,
        krylov_rtol: float,
        krylov_maxiter: int | None,
        grid: Grid | None,
        max_step: ArrayLike,
        first_step: ArrayLike | None,
        max_steps: int | None,
        dense_output: bool,
        events: Any,
        vectorized: bool,
    ):
        y0 = as_array(y0, "solve_ivp: y0")
        dtype0 = np.dtype(y0.dtype)
        if not jnp.issubdtype(dtype0, jnp.inexact):
            dtype0 = np.dtype(jnp.result_type(float))
        dtype0 = np.dtype(jax.dtypes.canonicalize_dtype(dtype0))
        if y0.ndim != 1:
            raise ValueError(f"solve_ivp: y0 must be 1-D, got shape {y0.shape}")
        self.n = n = y0.shape[0]
        self.y0 = y0
        self.real = real = np.dtype(jnp.finfo(dtype0).dtype)
        self.t_eval = t_eval
        self.t0, self.t1, self.times = checks.times(t_span, t_eval, real)
        self.dense_output = bool(dense_output)
        self.max_steps = checks.steps_limit(max_steps, self.dense_output, n, dtype0)
        self.max_step, self.first_step = checks.step_sizes(
            max_step, first_step, self.t0, self.t1, real
        )
        self.dtype, self.rhs, host = self._right_hand_side(fun, args, n, dtype0, vectorized)
        eps = float(np.finfo(real).eps)
        rtol_ = checks.tolerance(rtol, "rtol", n, real)
        self.rtol = (
            jnp.maximum(rtol_, 100 * eps) if is_traced(rtol_) else np.maximum(rtol_, 100 * eps)
        )
        self.atol = checks.tolerance(atol, "atol", n, real)
        grid_shape = checks.grid_shape(grid, linear_solver, n)
        if linear_solver == "banded":
            self.solver = _banded_solver()
        else:
            self.solver = _bicgstab_solver(krylov_rtol, krylov_maxiter, grid_shape)
        given = band(jac_offsets, jac_mask, jac_sparsity, n)
        self.events: Events | None = None
        if events is not None:
            if n == 0:
                raise ValueError("solve_ivp: events need a non-empty y0")
            self.events = prepare_events(events, args, n, self.dtype, real)
        self.jacobian: Jacobian | None = None
        if n:
            jax_rhs = None if host is not None else self.rhs
            self.jacobian = jacobian_of(jax_rhs, host, jac, given, n, args, self.dtype)

    def _right_hand_side(
        self, fun: Callable[..., Any], args: tuple[Any, ...], n: int, dtype0: np.dtype,
        vectorized: bool,
    ) -> tuple[np.dtype, Callable[[Array, Array], Array], Any]:  # fmt: skip
        """``(dtype, rhs, host)``: the solution's dtype, ``fun`` as a function of
        ``(t, y)`` in the program, and SciPy's ``(fun_single, fun_vectorized)`` on the
        host for a ``fun`` that does not trace (else None)."""
        if vectorized:

            def single(t: Any, y: Any) -> Any:
                out = fun(t, y[:, None], *args)
                return jnp.reshape(jnp.asarray(out), (-1,))
        else:

            def single(t: Any, y: Any) -> Any:
                return fun(t, y, *args)

        shapes = jax.ShapeDtypeStruct((), self.real), jax.ShapeDtypeStruct((n,), dtype0)
        out = traces(single, *shapes) if n else jax.ShapeDtypeStruct((0,), dtype0)
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

    def run(self, capacity: int, rows: bool) -> _Raw:
        """The integration as one compiled program, ``capacity`` slots per event: the
        solutions as the rows of ``ys`` if ``rows``, else as its columns."""
        if self.n == 0:
            return self._nothing(rows)
        jacobian, max_steps, dense, events = (
            self.jacobian,
            self.max_steps,
            self.dense_output,
            self.events,
        )
        assert jacobian is not None
        dtype, solver, rhs, t_eval = self.dtype, self.solver, self.rhs, self.t_eval

        def integrate(t0, t1, y0, times, rtol, atol, max_step, first_step):
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
                problem, t0, t1, y0, times, rtol, atol, max_step, max_steps, first_step,
                _together(observers),
            )  # fmt: skip
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
                sol = sol._replace(_D=forward_only(sol._D, _REVERSE_MODE))
            if t_eval is None and sol is not None:
                last = sol._D[jnp.maximum(sol._count - 1, 0), 0]
                last = jnp.where(sol._count > 0, last, y0)
                if found is not None:
                    last = jnp.where(terminated, found.y_stop, last)
                times, ys = steps(sol, last)
                ys = ys.T
            elif t_eval is None and found is not None:
                # t_span's ends, the last where a terminal event stopped the integration.
                times = times.at[-1].set(jnp.where(terminated, t_final, times[-1]))
                ys = ys.at[-1].set(jnp.where(terminated, found.y_stop, ys[-1]))
            ys = forward_only(ys if rows else ys.T, _REVERSE_MODE)
            if found is None:
                return _Raw(ys, status, counts, times, t_final, sol, None, None, None)
            y_events = forward_only(found.y, _REVERSE_MODE)
            return _Raw(ys, status, counts, times, t_final, sol, found.t, y_events, found.count)

        # One compiled program: its inputs are the checked arguments, and everything else
        # (casts, the set-up before the loop, the layout of the solutions) is inside it.
        operands = (
            self.t0, self.t1, self.y0, self.times, self.rtol, self.atol, self.max_step,
            self.first_step,
        )  # fmt: skip
        return jax.jit(integrate)(*operands)

    def _nothing(self, rows: bool) -> _Raw:
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
                jnp.stack([t0, t1]), t1[None], (t1 - t0)[None], jnp.zeros(1, jnp.int32),
                jnp.zeros((1, _bdf.MAX_ORDER + 1, 0), self.dtype), jnp.int32(1),
                jnp.zeros(0, self.dtype),
            )  # fmt: skip
        return _Raw(ys, jnp.int32(0), counts, times, jnp.asarray(self.t1), sol, None, None, None)


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


def odeint(
    func: Callable[..., Any],
    y0: ArrayLike,
    t: ArrayLike,
    args: tuple[Any, ...] = (),
    ml: int | None = None,
    mu: int | None = None,
    rtol: float = 1.49012e-8,
    atol: float = 1.49012e-8,
    max_steps: int = 100_000,
) -> Array:
    """SciPy's ``odeint(func, y0, t, args, ml=ml, mu=mu)`` by :func:`solve_ivp`'s BDF:
    ``func(y, t, *args)`` (odeint's argument order), the solution at the times ``t``
    as rows (shape ``(len(t), n)``, the first row ``y0``).

    ``ml`` and ``mu`` are the Jacobian's lower and upper bandwidths (``jac_offsets =
    range(-ml, mu + 1)``); without them the Jacobian is the whole matrix (small systems).
    Where the integration fails, the rows it did not reach are NaN (odeint warns and
    returns what it has; call :func:`solve_ivp` for the status).

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> y = jaxdia.odeint(lambda y, t, k: -k * y, jnp.ones(3), jnp.linspace(0, 1, 5),
      ...                   args=(2.0,), ml=0, mu=0, rtol=1e-5, atol=1e-8)
      >>> bool(jnp.allclose(y[-1], jnp.exp(-2.0), rtol=1e-3))
      True
    """
    times = checks.value(t)
    if times.ndim != 1 or times.shape[0] < 1:
        raise ValueError(f"odeint: t must be 1-D and not empty, got shape {times.shape}")
    offsets = None
    if ml is not None or mu is not None:
        if ml is None or mu is None:
            raise ValueError("odeint: give both ml and mu (the Jacobian's bandwidths)")
        lower, upper = static_int(ml, "odeint: ml"), static_int(mu, "odeint: mu")
        if lower < 0 or upper < 0:
            raise ValueError(f"odeint: ml and mu must be >= 0, got ml={ml}, mu={mu}")
        offsets = tuple(range(-lower, upper + 1))
    problem = _Problem(
        lambda s, y, *a: func(y, s, *a), checks.value([times[0], times[-1]]), y0, times,
        tuple(args), rtol, atol, None, None, offsets, None, "banded", 1e-6, None, None,
        float("inf"), None, max_steps, False, None, False,
    )  # fmt: skip
    return problem.run(1, rows=True).ys
