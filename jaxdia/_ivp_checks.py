"""The checks of :func:`jaxdia.solve_ivp`'s arguments, with NumPy where they are concrete
(no program is compiled for them), each error naming the argument, what came and what
is expected; SciPy's messages where SciPy has one."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import is_traced, static_int
from ._typing import Grid

LINEAR_SOLVERS = ("banded", "bicgstab", "multigrid")
#: The default of ``max_steps``.
MAX_STEPS = 100_000
#: The most memory ``dense_output`` may take with the default ``max_steps`` (a larger
#: system must say how many steps it may take).
DENSE_BYTES = 2**30


def value(given: Any) -> Any:
    """``given`` as a NumPy array where it is concrete (checked and cast on the host, with
    no program compiled), else as the traced array."""
    if any(is_traced(leaf) for leaf in jax.tree.leaves(given)):
        return jnp.asarray(given)
    return np.asarray(given)


def method(given: Any) -> None:
    """``"BDF"``, or SciPy's class ``scipy.integrate.BDF`` (named, not imported)."""
    if given == "BDF":
        return
    if getattr(given, "__name__", None) == "BDF" and str(
        getattr(given, "__module__", "")
    ).startswith("scipy.integrate"):
        return
    raise ValueError(f"solve_ivp: method must be 'BDF' (the only one), got {given!r}")


def extra_args(args: Any) -> tuple[Any, ...]:
    """``args`` as a tuple (None: none), SciPy's error for one that cannot be unpacked."""
    if args is None:
        return ()
    if isinstance(args, tuple):
        return args
    if isinstance(args, list):
        return tuple(args)
    raise TypeError(
        f"solve_ivp: Supplied 'args' cannot be unpacked. Please supply `args` as a tuple "
        f"(e.g. `args=({args!r},)`), got {type(args).__name__}"
    )


def times(t_span: Any, t_eval: Any, dtype: np.dtype) -> tuple[Any, Any, Any]:
    """``(t0, t1, t_eval)`` checked, in ``dtype``; ``t_eval`` None is ``t_span``. ``t1`` may
    be infinite (an integration that an event ends, as SciPy's)."""
    span = value(t_span)
    if span.shape != (2,):
        raise ValueError(f"solve_ivp: t_span must be (t0, t1), got shape {span.shape}")
    if span.dtype.kind not in "iuf":
        raise TypeError(f"solve_ivp: t_span must be real numbers, got dtype {span.dtype}")
    span = span.astype(dtype)
    t0, t1 = span[0], span[1]
    chosen = span if t_eval is None else value(t_eval)
    if chosen.ndim != 1 or chosen.shape[0] == 0:
        raise ValueError(f"solve_ivp: t_eval must be 1-D and not empty, got shape {chosen.shape}")
    chosen = chosen.astype(dtype)
    if not is_traced(chosen) and not is_traced(span):
        host, a, b = np.asarray(chosen), float(t0), float(t1)
        if not np.isfinite(a) or np.isnan(b):
            raise ValueError(f"solve_ivp: t_span must be (t0, t1) with t0 finite, got ({a}, {b})")
        if t_eval is not None and np.any(~np.isfinite(host)):
            raise ValueError("solve_ivp: t_eval must be finite")
        if np.any(host < min(a, b)) or np.any(host > max(a, b)):
            raise ValueError(f"solve_ivp: values in t_eval are not within t_span ({a}, {b})")
        steps = np.diff(host) * (1 if b >= a else -1)
        if np.any(steps < 0):
            raise ValueError("solve_ivp: t_eval must be sorted in the direction of t_span")
    return t0, t1, chosen


def grid_shape(grid: Grid | None, linear_solver: str, n: int) -> tuple[int, ...] | None:
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


def tolerance(given: Any, name: str, n: int, dtype: np.dtype) -> Any:
    """``rtol`` or ``atol``: a scalar or one per component, non-negative."""
    tol = value(given)
    if tol.ndim > 1 or (tol.ndim == 1 and tol.shape[0] != n):
        raise ValueError(f"solve_ivp: {name} must be a scalar or of shape ({n},), got {tol.shape}")
    if not is_traced(tol) and np.any(~(np.asarray(tol) >= 0)):
        raise ValueError(f"solve_ivp: {name} must be non-negative, got {given!r}")
    return tol.astype(dtype)


def step_sizes(
    max_step: Any, first_step: Any, t0: Any, t1: Any, dtype: np.dtype
) -> tuple[Any, Any]:
    """``max_step`` (positive) and ``first_step`` (None, or positive and within
    ``t_span``), SciPy's checks and messages."""
    largest = value(max_step).astype(dtype)
    if largest.ndim != 0:
        raise ValueError(f"solve_ivp: max_step must be a scalar, got shape {largest.shape}")
    if not is_traced(largest) and not float(largest) > 0:
        raise ValueError(f"solve_ivp: `max_step` must be positive, got {max_step!r}")
    if first_step is None:
        return largest, None
    first = value(first_step).astype(dtype)
    if first.ndim != 0:
        raise ValueError(f"solve_ivp: first_step must be a scalar, got shape {first.shape}")
    if not any(is_traced(v) for v in (first, t0, t1)):
        if not float(first) > 0:
            raise ValueError(f"solve_ivp: `first_step` must be positive, got {first_step!r}")
        if float(first) > abs(float(t1) - float(t0)):
            raise ValueError(
                f"solve_ivp: `first_step` exceeds bounds: {first_step!r} > |t1 - t0| = "
                f"{abs(float(t1) - float(t0))}"
            )
    return largest, first


def steps_limit(max_steps: int | None, dense_output: bool, n: int, dtype: np.dtype) -> int:
    """``max_steps`` (None: :data:`MAX_STEPS`), positive; with ``dense_output`` and the
    default, an error where recording the steps would take more than a GiB."""
    limit = MAX_STEPS if max_steps is None else static_int(max_steps, "solve_ivp: max_steps")
    if limit < 1:
        raise ValueError(f"solve_ivp: max_steps must be positive, got {limit}")
    recorded = limit * 6 * n * np.dtype(dtype).itemsize
    if dense_output and max_steps is None and recorded > DENSE_BYTES:
        raise ValueError(
            f"solve_ivp: dense_output=True records 6 n values per step for up to max_steps "
            f"= {MAX_STEPS} steps: {recorded / 2**30:.1f} GiB for n = {n}; pass max_steps "
            "(the most step attempts) to say how many steps it may take"
        )
    return limit


def capacity(given: Any) -> int:
    """``event_capacity``: a positive int."""
    slots = static_int(given, "solve_ivp: event_capacity")
    if slots < 1:
        raise ValueError(f"solve_ivp: event_capacity must be positive, got {slots}")
    return slots
