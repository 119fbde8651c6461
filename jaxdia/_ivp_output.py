"""The dense output of :func:`jaxdia.solve_ivp`: the interpolant of every accepted step
recorded by the loop (:func:`recorder`) and :class:`OdeSolution`, SciPy's ``sol``.

Each accepted step's interpolant is SciPy's ``BdfDenseOutput``: the step's end ``t``, its
size ``h``, its order and the rows ``0 .. order`` of its differences ``D`` (the polynomial
through the last ``order + 1`` solutions, :func:`jaxdia._bdf.interpolate`). The loop
writes them into arrays of a fixed number of slots, one per possible step (``max_steps``,
which bounds the attempts and so the accepted steps), with a count: ``(max_steps, 6, n)``
values of ``y``'s dtype for the differences (all six rows, for any order) and three
scalars per step, so ``48 n max_steps`` bytes in float64. Each attempt writes its step
into the slot after the last accepted one (a rejected attempt's is overwritten by the
next), so that recording costs one in-place write of ``6 n`` values per attempt and no
branch; without ``dense_output`` nothing is recorded or compiled.

:class:`OdeSolution` is a pytree of those arrays (it leaves ``jit``, and ``vmap``
batches it), callable on a time or an array of times under ``jit`` and ``vmap`` as
SciPy's ``OdeSolution``: the segment is found by a binary search over the steps' ends
(at a step's end, the next step's segment, SciPy's choice for BDF), and times outside
the integrated range use the first or last segment's polynomial (SciPy extrapolates
the same way).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from . import _bdf
from ._checks import is_traced
from ._pytree import Immutable, built_by

#: Rows of the differences an interpolant reads: ``0 .. MAX_ORDER``.
ROWS = _bdf.MAX_ORDER + 1


class Record(NamedTuple):
    """The accepted steps' interpolants so far, in slots ``0 .. recorded - 1``."""

    t: Array  # (capacity,) the step's end
    h: Array  # (capacity,) its signed size
    order: Array  # (capacity,)
    D: Array  # (capacity, ROWS, n)
    recorded: Array


def recorder(capacity: int) -> _bdf.Observer:
    """The loop's :class:`jaxdia._bdf.Observer` that records every accepted step."""

    def init(t0: Array, y0: Array) -> Record:
        return Record(
            t=jnp.zeros(capacity, t0.dtype),
            h=jnp.ones(capacity, t0.dtype),
            order=jnp.zeros(capacity, jnp.int32),
            D=jnp.zeros((capacity, ROWS, *y0.shape), y0.dtype),
            recorded=jnp.int32(0),
        )

    def observe(record: Record, step: _bdf.Step) -> tuple[Record, Array, Array]:
        slot = jnp.minimum(record.recorded, capacity - 1)
        put = jax.lax.dynamic_update_index_in_dim
        updated = Record(
            t=put(record.t, step.t, slot, 0),
            h=put(record.h, step.h, slot, 0),
            order=put(record.order, step.order, slot, 0),
            D=put(record.D, step.D[:ROWS], slot, 0),
            recorded=record.recorded + step.accepted.astype(jnp.int32),
        )
        return updated, jnp.bool_(False), step.t

    return _bdf.Observer(init, observe)


@jax.tree_util.register_pytree_with_keys_class
@built_by("solve_ivp(..., dense_output=True)")
class OdeSolution(Immutable):
    """The continuous solution of :func:`jaxdia.solve_ivp` with ``dense_output=True``:
    SciPy's ``OdeSolution``, the interpolating polynomial of each accepted BDF step.

    ``sol(t)`` is the solution at a time (shape ``(n,)``) or at a 1-D array of times
    (shape ``(n, len(t))``), in any order, under ``jit`` and ``vmap`` too; at a step's
    end it is the next step's polynomial (SciPy's choice for BDF), and outside
    ``[t_min, t_max]`` the first or last step's polynomial extrapolates, as SciPy's
    does. A pytree: it leaves ``jit``; a batch of solutions (from ``vmap``) is called
    under ``vmap``: ``jax.vmap(lambda s: s(t))(sol)``.

    Attributes:
      ts: the steps' ends, ``t0`` first (SciPy's ``ts``, in the direction of
        integration): the breakpoints ``0 .. n_segments``; NaN beyond them under
        ``jit`` (the arrays have a slot per possible step), trimmed eagerly.
      n_segments: the number of steps (at least one: an integration that took none
        is the constant ``y0``).
      t_min, t_max: the interval the steps cover.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> res = jaxdia.solve_ivp(lambda t, y: -y, (0.0, 2.0), jnp.ones(1),
      ...                        dense_output=True, rtol=1e-6, atol=1e-9)
      >>> float(res.sol(1.0)[0])  # exp(-1)
      0.3678...
      >>> res.sol(jnp.array([0.5, 1.5])).shape
      (1, 2)
    """

    __slots__ = ("_ts", "_t", "_h", "_order", "_D", "_count", "_y0")
    _leaves = __slots__

    _ts: Array
    _t: Array
    _h: Array
    _order: Array
    _D: Array
    _count: Array
    _y0: Array

    def __call__(self, t: Any) -> Array:
        """The solution at ``t`` (a scalar: shape ``(n,)``; 1-D: ``(n, len(t))``)."""
        times = jnp.asarray(t)
        if times.ndim > 1:
            raise ValueError(f"OdeSolution: t must be a scalar or 1-D, got shape {times.shape}")
        if times.dtype.kind not in "iuf":
            raise TypeError(f"OdeSolution: t must be real, got dtype {times.dtype}")
        values = _evaluate(self, jnp.atleast_1d(times).astype(self._ts.dtype))
        return values[:, 0] if times.ndim == 0 else values

    @property
    def n_segments(self) -> Array:
        """The number of steps (segments), at least one."""
        return jnp.maximum(self._count, 1)

    @property
    def ts(self) -> Array:
        """The breakpoints: ``t0`` and each step's end (SciPy's ``ts``)."""
        if is_traced(self._count) or np.ndim(self._count) > 0:
            return self._ts
        return head(self._ts, int(self.n_segments) + 1)

    @property
    def t_min(self) -> Array:
        """The start or the end of the integration, whichever is smaller."""
        return jnp.minimum(self._ts[0], self._ts[self.n_segments])

    @property
    def t_max(self) -> Array:
        """The start or the end of the integration, whichever is larger."""
        return jnp.maximum(self._ts[0], self._ts[self.n_segments])

    def __repr__(self) -> str:
        return f"OdeSolution(n_segments={self.n_segments}, n={self._y0.shape[-1]})"


def head(values: Array, count: int) -> Array:
    """The first ``count`` entries of a concrete array (without compiling a slice)."""
    return jnp.asarray(np.asarray(values)[:count])


def _values(sol: OdeSolution, times: Array) -> Array:
    """``(n, len(times))``: each time on its segment's polynomial."""
    count = sol._count
    # The interior breakpoints ts[1 .. count - 1], ascending in the direction of
    # integration, the unused slots after them: the segment is how many are passed.
    direction = jnp.where(sol._ts[sol.n_segments] >= sol._ts[0], 1, -1).astype(times.dtype)
    interior = jnp.arange(sol._t.shape[0]) < count - 1
    keys = jnp.where(interior, direction * sol._t, jnp.inf)
    segment = jnp.searchsorted(keys, direction * times, side="right")
    segment = jnp.clip(segment, 0, sol.n_segments - 1)

    def one(k: Array, at: Array) -> Array:
        value = _bdf.interpolate(sol._D[k], sol._order[k], sol._t[k], sol._h[k], at)
        return jnp.where(count > 0, value, sol._y0)

    return jax.vmap(one)(segment, times).T


_evaluate = jax.jit(_values)


def solution(
    record: Record, t0: Array, y0: Array, t_final: Array, terminated: Array
) -> OdeSolution:
    """The :class:`OdeSolution` of the recorded steps of an integration that ended at
    ``t_final``. An integration stopped by an event at the start of its last step drops
    that step (SciPy's: its interpolant would cover no time)."""
    capacity = record.t.shape[0]
    count = record.recorded
    previous = record.t[jnp.clip(count - 2, 0, capacity - 1)]
    empty_last = terminated & (count > 1) & (t_final == previous)
    count = count - empty_last.astype(count.dtype)
    # No step (an empty interval, a failure at the first): one constant segment.
    segments = jnp.maximum(count, 1)
    ts = jnp.concatenate([t0[None], record.t])
    ts = jnp.where(jnp.arange(capacity + 1) < segments, ts, jnp.nan).at[segments].set(t_final)
    return OdeSolution._make(ts, record.t, record.h, record.order, record.D, count, y0)


def steps(sol: OdeSolution, y_final: Array) -> tuple[Array, Array]:
    """SciPy's ``t`` and ``y`` without ``t_eval``: every step's end and the solution
    there (``y_final`` at the last), NaN in the unused slots."""
    segments = sol.n_segments
    index = jnp.arange(sol._ts.shape[0])
    ys = jnp.concatenate([sol._y0[None], sol._D[:, 0]])
    ys = jnp.where((index < segments)[:, None], ys, jnp.nan).at[segments].set(y_final)
    return sol._ts, ys.T
