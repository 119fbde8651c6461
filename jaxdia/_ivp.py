"""Stiff initial value problems with banded Jacobians: :func:`solve_ivp` (SciPy's
``solve_ivp(method="BDF")``) and :func:`odeint` (SciPy's ``odeint`` with ``ml``/``mu``),
over :mod:`jaxdia._bdf`'s loop, keeping the Jacobian and its factor across steps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from . import _bdf
from ._checks import as_array, is_traced, static_int
from ._jacobian import jacobian as banded_jacobian, pattern
from ._kernels.primitives import forward_only
from ._linalg.factor import lu_unchecked, solve_unchecked
from ._linalg.incomplete import ilu0
from ._linalg.krylov import bicgstab
from ._linalg.multigrid import multigrid
from ._matrix import DiaMatrix
from ._parts import DiaParts
from ._typing import ArrayLike, Grid, Offsets

_LINEAR_SOLVERS = ("banded", "bicgstab", "multigrid")
#: Without ``jac_offsets`` or ``jac`` the Jacobian is the whole matrix: for small systems.
_DENSE_LIMIT = 1024
_REVERSE_MODE = (
    "jaxdia.solve_ivp (and odeint) cannot be differentiated in reverse mode (jax.grad, "
    "jax.vjp, jax.jacrev): the integration is a lax.while_loop of unbounded length. Use "
    "forward mode, jax.jacfwd or jax.jvp (one integration per input direction), e.g. "
    "jax.jacfwd(loss)(y0) for the gradient of a scalar loss"
)


class OdeResult(NamedTuple):
    """What :func:`solve_ivp` returns (a pytree: it can leave ``jit`` and be batched by ``vmap``).

    Attributes:
      t: the times of the solution, shape ``(m,)``: ``t_eval``, or ``t_span`` without it.
      y: the solution at ``t``, shape ``(n, m)`` as SciPy's; NaN at times the
        integration did not reach (when it failed).
      status: 0 when the end of ``t_span`` was reached; -1 when a step below the spacing
        of floats was needed (SciPy's failure); -2 when ``max_steps`` attempts ran out;
        -3 when ``y0`` or ``fun(t0, y0)`` is not finite.
      nfev: evaluations of ``fun`` (the Jacobian's linearizations not counted).
      njev: Jacobians computed.
      nlu: factorizations of ``I - c J`` (preconditioners, for the Krylov ``linear_solver``s).
      nsteps: accepted steps.
      nattempts: step attempts (accepted and rejected; ``max_steps`` bounds them).

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

    @property
    def success(self) -> Array:
        """``status >= 0``: the end of the interval was reached."""
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


def _value(value: Any) -> Any:
    """``value`` as a NumPy array where it is concrete (checked and cast on the host, with
    no program compiled), else as the traced array."""
    if any(is_traced(leaf) for leaf in jax.tree.leaves(value)):
        return jnp.asarray(value)
    return np.asarray(value)


def _as_times(t_span: Any, t_eval: Any, dtype: np.dtype) -> tuple[Any, Any, Any]:
    """``(t0, t1, t_eval)`` checked, in ``dtype``; ``t_eval`` None is ``t_span``."""
    span = _value(t_span)
    if span.shape != (2,):
        raise ValueError(f"solve_ivp: t_span must be (t0, t1), got shape {span.shape}")
    if not (jnp.issubdtype(span.dtype, jnp.integer) or jnp.issubdtype(span.dtype, jnp.floating)):
        raise TypeError(f"solve_ivp: t_span must be real numbers, got dtype {span.dtype}")
    span = span.astype(dtype)
    t0, t1 = span[0], span[1]
    times = span if t_eval is None else _value(t_eval)
    if times.ndim != 1 or times.shape[0] == 0:
        raise ValueError(f"solve_ivp: t_eval must be 1-D and not empty, got shape {times.shape}")
    times = times.astype(dtype)
    if not is_traced(times) and not is_traced(span):
        host, a, b = np.asarray(times), float(t0), float(t1)
        if np.any(~np.isfinite(host)) or not np.isfinite(a) or not np.isfinite(b):
            raise ValueError("solve_ivp: t_span and t_eval must be finite")
        if np.any(host < min(a, b)) or np.any(host > max(a, b)):
            raise ValueError(f"solve_ivp: values in t_eval are not within t_span ({a}, {b})")
        steps = np.diff(host) * (1 if b >= a else -1)
        if np.any(steps < 0):
            raise ValueError("solve_ivp: t_eval must be sorted in the direction of t_span")
    return t0, t1, times


def _grid(grid: Grid | None, linear_solver: str, n: int) -> tuple[int, ...] | None:
    """``grid`` checked: given exactly for ``linear_solver="multigrid"``, of ``n`` points."""
    if linear_solver != "multigrid":
        if grid is not None:
            raise ValueError(
                f"solve_ivp: grid is for linear_solver='multigrid', got it with {linear_solver!r}"
            )
        return None
    if grid is None:
        raise ValueError("solve_ivp: linear_solver='multigrid' needs grid, e.g. grid=(64, 64)")
    shape = tuple(static_int(size, "solve_ivp: grid") for size in np.atleast_1d(grid))
    if not 1 <= len(shape) <= 3 or min(shape) < 1 or int(np.prod(shape)) != n:
        raise ValueError(
            f"solve_ivp: grid must be 1 to 3 positive sizes whose product is n = {n}, got {grid!r}"
        )
    return shape


def _tolerance(value: Any, name: str, n: int, dtype: np.dtype) -> Any:
    tol = _value(value)
    if tol.ndim > 1 or (tol.ndim == 1 and tol.shape[0] != n):
        raise ValueError(f"solve_ivp: {name} must be a scalar or of shape ({n},), got {tol.shape}")
    if not is_traced(tol) and np.any(~(np.asarray(tol) >= 0)):
        raise ValueError(f"solve_ivp: {name} must be non-negative, got {value!r}")
    return tol.astype(dtype)


def _jacobian_function(
    fun: Callable[..., Any],
    jac: Callable[..., Any] | None,
    jac_offsets: Offsets | None,
    jac_mask: ArrayLike | None,
    n: int,
    args: tuple[Any, ...],
    dtype: np.dtype,
) -> tuple[Callable[[Array, Array], DiaMatrix], Callable[[Array, Array], DiaMatrix]]:
    """``(jacobian, placeholder)``: ``(t, y) -> J``, outside differentiation, from ``jac``,
    else by compressed differentiation of ``fun`` on the offsets (all of them for a small
    system); and ``(t, y) -> zeros`` of its structure, without tracing the compressed
    differentiation a second time."""
    if jac is not None:
        if jac_offsets is not None or jac_mask is not None:
            raise ValueError("solve_ivp: give jac, or jac_offsets (and jac_mask), not both")
        user_jac = jac
        stored = None

        def evaluate(t: Array, y: Array) -> DiaMatrix:
            J = user_jac(t, y, *args)
            if not isinstance(J, DiaMatrix) or J.shape != (n, n):
                raise TypeError(
                    f"solve_ivp: jac must return a jaxdia.DiaMatrix of shape ({n}, {n}), got "
                    f"{type(J).__name__} of shape {getattr(J, 'shape', None)}"
                )
            if J.batch_shape:
                raise ValueError(
                    f"solve_ivp: jac must return one matrix, got a batch {J.batch_shape}"
                )
            return J

    else:
        if jac_offsets is None:
            if jac_mask is not None:
                raise ValueError("solve_ivp: jac_mask needs jac_offsets")
            if n > _DENSE_LIMIT:
                raise ValueError(
                    f"solve_ivp: give jac_offsets (the Jacobian's diagonals) or jac for a "
                    f"system of n = {n} > {_DENSE_LIMIT} equations; without them the "
                    "Jacobian would be the whole matrix"
                )
            jac_offsets = range(-(n - 1), n)
        offsets = tuple(int(k) for k in np.atleast_1d(np.asarray(jac_offsets)))
        # jaxdia.jacobian's result: the offsets that hold entries, sorted, in y's dtype.
        stored = pattern(offsets, (n, n), jac_mask, "solve_ivp").offsets

        def evaluate(t: Array, y: Array) -> DiaMatrix:
            J = banded_jacobian(lambda v: fun(t, v, *args), offsets, mask=jac_mask)(y)
            return cast(DiaMatrix, J)

    def jacobian(t, y):
        J = evaluate(*jax.lax.stop_gradient((t, y)))
        return jax.lax.stop_gradient(J)

    def placeholder(t: Array, y: Array) -> DiaMatrix:
        if stored is None:
            shapes = jax.eval_shape(jacobian, t, y)
            return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        zeros = jnp.zeros((len(stored), n), dtype)
        return DiaMatrix._wrap(DiaParts(zeros, stored, (n, n)))

    return jacobian, placeholder


def solve_ivp(
    fun: Callable[..., Any],
    t_span: Sequence[ArrayLike] | ArrayLike,
    y0: ArrayLike,
    method: str = "BDF",
    t_eval: Sequence[ArrayLike] | ArrayLike | None = None,
    *,
    args: tuple[Any, ...] = (),
    rtol: ArrayLike = 1e-3,
    atol: ArrayLike = 1e-6,
    jac: Callable[..., DiaMatrix] | None = None,
    jac_offsets: Offsets | None = None,
    jac_mask: ArrayLike | None = None,
    linear_solver: str = "banded",
    krylov_rtol: float = 1e-6,
    krylov_maxiter: int | None = None,
    grid: Grid | None = None,
    max_step: float = float("inf"),
    max_steps: int = 100_000,
) -> OdeResult:
    """Integrates a stiff system ``y' = fun(t, y, *args)`` whose Jacobian is banded, by
    SciPy's BDF method, keeping the Jacobian and the factor of ``I - c J`` across steps.

    As ``scipy.integrate.solve_ivp(fun, t_span, y0, method="BDF", t_eval=t_eval,
    args=args, rtol=rtol, atol=atol, jac_sparsity=...)``: the same variable-order (1 to
    5), quasi-constant step size NDF formulas, error estimate, order selection and
    Newton iteration, so that it takes the same steps to rounding. ``J`` comes from
    :func:`jaxdia.jacobian` on ``jac_offsets`` (one product per colour: 5 for a 1-D
    two-species problem with offsets ``-2 .. 2``), or from ``jac``; like SciPy it is
    recomputed only when Newton fails to converge with a ``J`` from an earlier step,
    and ``I - c J`` is refactored when the step size or the order changes.

    The whole integration is one ``lax.while_loop``: it runs under ``jit`` (``t_eval``
    has a static length) and ``vmap`` (a batch of ``y0``, of ``args``, of tolerances;
    batched, every member runs until the last finishes, and ``vmap`` turns the loop's
    branches into selects, so the batch computes a Jacobian and a factor at every step
    attempt: for large batches of small systems that is still one program, but not
    SciPy's counts of work). Failures are reported, never
    hidden: ``status`` is negative and ``y`` is NaN from the first ``t_eval`` the
    integration did not reach.

    Differentiation: forward mode (``jax.jvp``, ``jax.jacfwd``) with respect to ``y0``
    and ``args``; the step sizes, orders and Newton matrices are held fixed, so the
    tangent is that of the computed solution along its steps. Reverse mode
    (``jax.grad``, ``jax.vjp``) is not supported (the loop has no bound): it raises a
    ``ValueError`` that says so; ``jax.jacfwd(loss)`` gives the gradient of a scalar
    loss in one integration per input.

    Args:
      fun: the right-hand side ``fun(t, y, *args)``, returning an array shaped like ``y``.
      t_span: ``(t0, t1)``; ``t1 < t0`` integrates backwards.
      y0: the initial value, 1-D (real or complex floats; integers are cast to floats).
      method: ``"BDF"`` (the only method).
      t_eval: times at which to return the solution (sorted in the direction of
        ``t_span``, within it), from the interpolating polynomial of the step that
        covers each (no extra steps). None: ``t_span``'s two ends (SciPy returns every
        step; a static shape cannot).
      args: extra arguments of ``fun`` (and ``jac``).
      rtol: relative tolerance (below ``100 eps`` it is raised to it, as SciPy does).
      atol: absolute tolerance, a scalar or one per component.
      jac: ``jac(t, y, *args)`` returning the Jacobian as a :class:`jaxdia.DiaMatrix`;
        None computes it from ``jac_offsets``.
      jac_offsets: the Jacobian's diagonals (SciPy ``odeint``'s ``ml``, ``mu`` are
        ``range(-ml, mu + 1)``; periodic problems add the corners ``±(n - 1)`` ..., which
        the banded LU factors as a band plus a low-rank correction). None without
        ``jac``: the whole matrix, for ``n <= 1024``.
      jac_mask: structural zeros within ``jac_offsets`` (see :func:`jaxdia.jacobian`),
        e.g. for interleaved species; fewer colours.
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
      max_step: the largest step size.
      max_steps: the most step attempts (accepted and rejected); status -2 beyond.

    Returns:
      An :class:`OdeResult`: ``t``, ``y`` (shape ``(n, len(t))``), ``status``,
      ``success``, ``message``, ``nfev``, ``njev``, ``nlu``, ``nsteps``, ``nattempts``.

    Raises:
      ValueError: for a method other than ``"BDF"``, a ``y0`` that is not 1-D,
        ``t_span``/``t_eval`` of the wrong shape, outside ``t_span`` or unsorted,
        negative tolerances, ``jac`` together with ``jac_offsets``, or no
        ``jac_offsets`` for ``n > 1024``; and when reverse mode differentiates it.
      TypeError: for a ``fun`` whose output is not shaped like ``y0``, or a ``jac`` that
        does not return a DiaMatrix of shape ``(n, n)``.

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
    """
    if method != "BDF":
        raise ValueError(f"solve_ivp: method must be 'BDF' (the only one), got {method!r}")
    if linear_solver not in _LINEAR_SOLVERS:
        raise ValueError(
            f"solve_ivp: linear_solver must be one of {_LINEAR_SOLVERS}, got {linear_solver!r}"
        )
    ys, status, counts, times = _solve(
        fun, t_span, y0, t_eval, args, rtol, atol, jac, jac_offsets, jac_mask,
        linear_solver, krylov_rtol, krylov_maxiter, grid, max_step, max_steps, rows=False,
    )  # fmt: skip
    return OdeResult(times, ys, status, *counts)


def _solve(
    fun: Callable[..., Any],
    t_span: Any,
    y0: ArrayLike,
    t_eval: Any,
    args: tuple[Any, ...],
    rtol: ArrayLike,
    atol: ArrayLike,
    jac: Callable[..., DiaMatrix] | None,
    jac_offsets: Offsets | None,
    jac_mask: ArrayLike | None,
    linear_solver: str,
    krylov_rtol: float,
    krylov_maxiter: int | None,
    grid: Grid | None,
    max_step: float,
    max_steps: int,
    rows: bool,
) -> tuple[Array, Array, _bdf.Counts, Array]:
    """:func:`solve_ivp`'s arguments checked (with NumPy where they are concrete) and its
    integration as one compiled program: ``(ys, status, counts, t_eval)`` with the
    solutions as the rows of ``ys`` if ``rows``, else as its columns."""
    max_steps = static_int(max_steps, "solve_ivp: max_steps")
    if max_steps < 1:
        raise ValueError(f"solve_ivp: max_steps must be positive, got {max_steps}")
    if not isinstance(args, tuple):
        raise TypeError(f"solve_ivp: args must be a tuple, got {type(args).__name__}")
    y0 = as_array(y0, "solve_ivp: y0")
    dtype0 = np.dtype(y0.dtype)
    if not jnp.issubdtype(dtype0, jnp.inexact):
        dtype0 = np.dtype(jnp.result_type(float))
    dtype0 = np.dtype(jax.dtypes.canonicalize_dtype(dtype0))
    if y0.ndim != 1 or y0.shape[0] == 0:
        raise ValueError(f"solve_ivp: y0 must be 1-D and not empty, got shape {y0.shape}")
    n = y0.shape[0]
    real = np.dtype(jnp.finfo(dtype0).dtype)
    t0, t1, times = _as_times(t_span, t_eval, real)
    out = jax.eval_shape(
        lambda t, y: fun(t, y, *args),
        jax.ShapeDtypeStruct((), real),
        jax.ShapeDtypeStruct((n,), dtype0),
    )
    if getattr(out, "shape", None) != (n,):
        raise TypeError(
            f"solve_ivp: fun(t, y, *args) must return an array of shape ({n},) like y0, got "
            f"{getattr(out, 'shape', type(out).__name__)}"
        )
    dtype = np.dtype(jnp.result_type(dtype0, out.dtype))
    eps = float(np.finfo(real).eps)
    rtol_ = _tolerance(rtol, "rtol", n, real)
    rtol_ = jnp.maximum(rtol_, 100 * eps) if is_traced(rtol_) else np.maximum(rtol_, 100 * eps)
    atol_ = _tolerance(atol, "atol", n, real)
    max_step_ = _value(max_step).astype(real)

    def rhs(t, y):
        return jnp.asarray(fun(t, y, *args)).astype(dtype)

    grid_shape = _grid(grid, linear_solver, n)
    if linear_solver == "banded":
        solver = _banded_solver()
    else:
        solver = _bicgstab_solver(krylov_rtol, krylov_maxiter, grid_shape)
    jacobian, placeholder = _jacobian_function(fun, jac, jac_offsets, jac_mask, n, args, dtype)
    problem = _bdf.Problem(
        rhs=rhs,
        jacobian=jacobian,
        jacobian_placeholder=placeholder,
        linear_solver=solver,
        constant_jacobian=False,
    )

    def integrate(t0, t1, y0, times, rtol, atol, max_step):
        y0 = jnp.asarray(y0).astype(dtype)
        ys, _, status, counts = _bdf.integrate(
            problem, t0, t1, y0, times, rtol, atol, max_step, max_steps
        )
        ys = forward_only(ys if rows else ys.T, _REVERSE_MODE)
        return ys, status, counts, jnp.asarray(times)

    # One compiled program: its inputs are the checked arguments, and everything else
    # (casts, the set-up before the loop, the layout of the solutions) is inside it.
    operands = (t0, t1, y0, times, rtol_, atol_, max_step_)
    return jax.jit(integrate)(*operands)


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
    times = _value(t)
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
    ys, *_ = _solve(
        lambda s, y, *a: func(y, s, *a), _value([times[0], times[-1]]), y0, times,
        tuple(args), rtol, atol, None, offsets, None, "banded", 1e-6, None, None,
        float("inf"), max_steps, rows=True,
    )  # fmt: skip
    return ys
