"""Stiff initial value problems with banded Jacobians: :func:`solve_ivp` (SciPy's
``solve_ivp(method="BDF")``) and :func:`odeint` (SciPy's ``odeint`` with ``ml``/``mu``),
over :mod:`jaxdia._bdf`'s loop, keeping the Jacobian and its factor across steps.

This module is the public face: the arguments handed to :class:`jaxdia._ivp_problem.Problem`
(which checks them and runs the integration as one compiled program) and its outputs
shaped as SciPy's result where they are concrete."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import Array

from . import _bdf, _ivp_checks as checks
from ._checks import is_traced, static_int
from ._ivp_output import OdeSolution, head
from ._ivp_problem import Problem, Raw
from ._typing import ArrayLike, Grid, Offsets


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


def solve_ivp(
    fun: Callable[..., Any],
    t_span: Sequence[ArrayLike] | ArrayLike,
    y0: ArrayLike | Sequence[Any],
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

    Eager calls in a Python loop (a parameter sweep, time windows, a shooting method)
    compile once: the program is kept for the same ``fun`` (the same Python object, held
    weakly) and static configuration (``n``, the dtypes, the band, ``jac`` and the events
    as functions, the linear solver, ``dense_output``, ``max_steps``, ``t_eval``'s
    length, ``event_capacity``, ``args``' structure and its Python values), and the
    values of a call are its operands: ``y0``, ``t_span``, ``t_eval``, ``rtol`` and
    ``atol`` (scalars or per component alike), ``max_step``, ``first_step``,
    ``krylov_rtol``, a matrix ``jac`` and the arrays of ``args`` (NumPy or JAX values;
    a Python number in ``args`` is part of the program, as a static argument of
    ``jit``). The last 32 programs are kept; a ``fun``'s are dropped when it is
    collected. Each call compiles a program of its own, with ``args`` as its constants,
    where ``fun`` (or ``jac``, an event, a leaf of ``args`` that is not an array) cannot
    be hashed or ``fun`` cannot be weakly referenced, and where ``fun`` reads an array of
    ``args`` in Python (``float(p[0])``: as an operand it would not trace). Under the
    caller's own ``jit`` it is traced once into the caller's program as before.

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
    problem = Problem(
        fun,
        t_span,
        y0,
        t_eval,
        checks.extra_args(args),
        rtol=rtol,
        atol=atol,
        jac=jac,
        jac_sparsity=jac_sparsity,
        jac_offsets=jac_offsets,
        jac_mask=jac_mask,
        linear_solver=linear_solver,
        krylov_rtol=krylov_rtol,
        krylov_maxiter=krylov_maxiter,
        grid=grid,
        max_step=max_step,
        first_step=first_step,
        max_steps=max_steps,
        dense_output=dense_output,
        events=events,
        vectorized=vectorized,
    )
    raw = problem.run(capacity, rows=False)
    if raw.nevents is not None and not is_traced(raw.nevents):
        most = int(np.max(raw.nevents, initial=0))
        if most > capacity:  # eagerly, every occurrence is returned
            raw = problem.run(most, rows=False)
    return _result(raw, problem, eager=not is_traced(raw.status))


def _result(raw: Raw, problem: Problem, eager: bool) -> OdeResult:
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
        t,
        ys,
        raw.status,
        *raw.counts,
        sol=sol,
        t_events=t_events,
        y_events=y_events,
        nevents=raw.nevents,
    )


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
    returns what it has; call :func:`solve_ivp` for the status). Eager calls with the same
    ``func`` reuse one compiled program, as :func:`solve_ivp`'s.

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
    span = checks.value([times[0], times[-1]])
    problem = Problem(
        func,
        span,
        y0,
        times,
        tuple(args),
        rtol=rtol,
        atol=atol,
        jac_offsets=offsets,
        max_steps=max_steps,
        swapped=True,
    )
    return problem.run(1, rows=True).ys
