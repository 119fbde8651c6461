"""The functions of a :func:`jaxdia.solve_ivp` problem that are written in NumPy: told
apart from JAX ones by tracing them once, and run on the host.

SciPy calls ``fun(t, y)`` with NumPy values, so right-hand sides written for it return
lists, call NumPy on ``y`` or branch on ``t`` in Python. Traced by JAX, such a function
raises (a concretization or array-conversion error) or returns a value that does not
depend on the tracers (a NumPy array): :func:`traces` says which. Those that do not trace
run through ``jax.pure_callback`` (:class:`HostCall`): each call is a round trip to the
host in which the device waits for Python; they work under ``jit`` and ``vmap`` (one call
per member of a batch) and cannot be differentiated (a ``TypeError`` that says so).

A right-hand side on the host has no derivative to take: its Jacobian is SciPy's
``num_jac`` (forward differences along ``f``'s sign, steps ``sqrt(eps) max(atol, |y|)``,
and a ten times larger step for the columns whose difference drowned in rounding),
restricted to the band (:func:`banded_num_jac`): one evaluation of ``fun`` per colour of
the band's columns (Curtis, Powell and Reid, SciPy's ``group_columns``: 3 for a
tridiagonal Jacobian), all on the host in one round trip per Jacobian. Unlike SciPy, each
Jacobian starts from SciPy's first step factor rather than the one the previous Jacobian
left (a callback keeps no state between calls).

A ``jac`` written in NumPy (a dense array or a ``scipy.sparse`` matrix) runs on the host
too, its result read into the DIA data of the given diagonals (:func:`dia_data`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._checks import is_scipy_sparse, is_traced

#: What JAX raises when a function needs concrete values: it is run on the host instead.
TRACING_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.NonConcreteBooleanIndexError,
)

# SciPy's num_jac constants (scipy.integrate._ivp.common), in units of the dtype's eps.
_DIFF_REJECT = 0.875
_DIFF_SMALL = 0.75
_DIFF_BIG = 0.25


def needs_values(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from: SciPy's sparse constructors
    re-raise a conversion error as their own) is JAX's refusal of a tracer."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, TRACING_ERRORS):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def traces(function: Callable[..., Any], *shapes: jax.ShapeDtypeStruct) -> Any:
    """``function``'s output as ``jax.ShapeDtypeStruct`` (of ``jnp.asarray`` of it: a list
    of scalars is an array) when it traces with abstract arguments of ``shapes`` and its
    output depends on them; None when it must run on the host."""
    seen: dict[str, bool] = {}

    def probe(*values: Any) -> Any:
        out = function(*values)
        seen["traced"] = any(is_traced(leaf) for leaf in jax.tree.leaves(out))
        return jnp.asarray(out)

    try:
        out = jax.eval_shape(probe, *shapes)
    except Exception as error:
        if needs_values(error):
            return None
        raise
    return out if seen["traced"] else None


class HostArgs:
    """``args`` split for a host call: the traced leaves travel as the callback's
    operands, the others (NumPy and Python values, concrete JAX arrays as NumPy) stay
    here, as SciPy would pass them."""

    def __init__(self, args: tuple[Any, ...]):
        leaves, self.tree = jax.tree.flatten(args)
        self.traced = [i for i, leaf in enumerate(leaves) if is_traced(leaf)]
        self.leaves = [
            np.asarray(leaf) if isinstance(leaf, jax.Array) and not is_traced(leaf) else leaf
            for leaf in leaves
        ]
        self.operands = [leaves[i] for i in self.traced]

    def rebuild(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        leaves = list(self.leaves)
        for i, value in zip(self.traced, values, strict=True):
            leaves[i] = np.asarray(value)
        return jax.tree.unflatten(self.tree, leaves)


class HostCall:
    """A NumPy function of ``(t, y, ...)`` called from the program through
    ``jax.pure_callback``: ``evaluate(t, y, *arrays, args)`` runs on the host with NumPy
    values (``t`` a NumPy scalar, ``y`` a writable copy) and returns an array of
    ``result``'s shape and dtype. Static (compared by identity), so that it is a
    ``custom_jvp``'s non-differentiable argument."""

    def __init__(
        self,
        evaluate: Callable[..., np.ndarray],
        result: jax.ShapeDtypeStruct,
        args: HostArgs,
        what: str,
    ):
        self.evaluate = evaluate
        self.result = result
        self.args = args
        self.what = what

    def __call__(self, *arrays: Array) -> Array:
        return _host_call(self, *arrays, *self.args.operands)

    def on_host(self, *values: np.ndarray) -> np.ndarray:
        count = len(values) - len(self.args.operands)
        own, traced = values[:count], values[count:]
        t, *rest = own
        arrays = [np.array(value) for value in rest]
        out = self.evaluate(np.asarray(t)[()], *arrays, self.args.rebuild(traced))
        return np.asarray(out).astype(self.result.dtype, copy=False)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _host_call(call: HostCall, *operands: Array) -> Array:
    # One call per batch member: a function written for SciPy takes one y.
    return jax.pure_callback(call.on_host, call.result, *operands, vmap_method="sequential")


@_host_call.defjvp
def _host_call_jvp(call: HostCall, primals: Any, tangents: Any) -> Any:
    raise TypeError(
        f"solve_ivp: {call.what} is written in NumPy (it does not trace with JAX), so it "
        "runs on the host through jax.pure_callback and cannot be differentiated; write it "
        "in jax.numpy to differentiate the solution"
    )


def as_vector(value: Any, n: int, dtype: np.dtype, what: str) -> np.ndarray:
    """``value`` (an array, a list) as a NumPy vector of ``n`` entries in ``dtype``; a
    ``TypeError`` naming ``what`` for another shape or complex values in a real system."""
    out = np.asarray(value)
    if out.shape != (n,):
        raise TypeError(f"solve_ivp: {what} must return shape ({n},) like y0, got {out.shape}")
    return _cast(out, dtype, what)


def _cast(out: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    if out.dtype.kind == "c" and dtype.kind != "c":
        if np.any(np.imag(out)):
            raise TypeError(
                f"solve_ivp: {what} returned complex values for a real y0; make y0 complex"
            )
        out = np.real(out)
    return out.astype(dtype, copy=False)


def vectorized_calls(
    fun: Callable[..., Any], vectorized: bool, n: int, dtype: np.dtype, what: str
) -> tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]]:
    """``(single, columns)``: ``fun(t, y, *args)`` of one ``y`` and of the columns of an
    ``(n, k)`` array, as SciPy's ``fun_single`` and ``fun_vectorized``: a ``vectorized``
    ``fun`` takes the columns at once (``y[:, None]`` for one), another is called per
    column."""

    def single(t: Any, y: np.ndarray, args: tuple[Any, ...]) -> np.ndarray:
        if vectorized:
            out = np.asarray(fun(t, y[:, None], *args))
            if out.size != n:
                raise TypeError(
                    f"solve_ivp: {what} (vectorized) must return shape ({n}, 1) for y of "
                    f"shape ({n}, 1), got {out.shape}"
                )
            return _cast(out.reshape(n), dtype, what)
        return as_vector(fun(t, y, *args), n, dtype, what)

    def columns(t: Any, Y: np.ndarray, args: tuple[Any, ...]) -> np.ndarray:
        if vectorized:
            out = np.asarray(fun(t, Y, *args))
            if out.shape != Y.shape:
                raise TypeError(
                    f"solve_ivp: {what} (vectorized) must return shape {Y.shape} for y of "
                    f"shape {Y.shape}, got {out.shape}"
                )
            return _cast(out, dtype, what)
        return np.stack([single(t, column, args) for column in Y.T], axis=1)

    return single, columns


def banded_num_jac(
    columns: Callable[[Any, np.ndarray], np.ndarray],
    t: Any,
    y: np.ndarray,
    f: np.ndarray,
    threshold: np.ndarray,
    offsets: tuple[int, ...],
    slots: np.ndarray,
    colours: np.ndarray,
) -> np.ndarray:
    """SciPy's ``num_jac`` (from its first step factor) on a DIA pattern: the Jacobian's
    ``data`` (``(len(offsets), n)``, zero outside ``slots``) by forward differences of
    ``columns(t, Y)`` (``fun`` of the columns of ``Y``), one column of ``Y`` per colour
    of ``colours`` (columns of one colour share no row of the pattern)."""
    n = y.shape[0]
    if not offsets:
        return np.zeros((0, n), y.dtype)
    eps = np.finfo(np.real(y).dtype).eps
    offsets_ = np.asarray(offsets, dtype=np.int64)
    column = np.arange(n)
    rows = np.clip(column[None, :] - offsets_[:, None], 0, n - 1)  # slot (k, j) is J[rows, j]
    factor = np.full(n, eps**0.5)
    f_sign = 2 * (np.real(f) >= 0).astype(np.real(y).dtype) - 1
    y_scale = f_sign * np.maximum(threshold, np.abs(y))
    h = (y + factor * y_scale) - y
    for i in np.nonzero(h == 0)[0]:  # SciPy's: a step that vanished in y's rounding grows
        while h[i] == 0:
            factor[i] *= 10
            h[i] = (y[i] + factor[i] * y_scale[i]) - y[i]

    def differences(step: np.ndarray, wanted: np.ndarray, groups: np.ndarray):
        """Forward differences of ``fun`` along ``step`` on the colours ``groups`` for
        the columns ``wanted``: their slots' differences, the largest of each column and
        its scale (SciPy's ``max_diff`` and ``scale``)."""
        index = np.full(int(colours.max(initial=0)) + 1, -1)
        index[groups] = np.arange(groups.size)
        Y = y[:, None] + step[:, None] * (colours[:, None] == groups[None, :])
        f_new = columns(t, Y)
        group = index[colours[wanted]]
        diff = f_new[rows[:, wanted], group[None, :]] - f[rows[:, wanted]]
        diff = np.where(slots[:, wanted], diff, 0)
        # The largest entry of each column, the first in increasing rows on a tie as
        # SciPy's (the rows of slots decrease with k).
        k = diff.shape[0] - 1 - np.argmax(np.abs(diff[::-1]), axis=0)
        picked = np.arange(wanted.size)
        biggest = np.abs(diff[k, picked])
        row = rows[k, wanted]
        scale = np.maximum(np.abs(f[row]), np.abs(f_new[row, group]))
        return diff, biggest, scale

    everything = np.unique(colours)
    diff, biggest, scale = differences(h, column, everything)
    small = np.nonzero(biggest < eps**_DIFF_REJECT * scale)[0]
    if small.size:
        h_new = (y[small] + 10 * factor[small] * y_scale[small]) - y[small]
        step = np.zeros_like(h)
        step[small] = h_new
        diff_new, biggest_new, scale_new = differences(step, small, np.unique(colours[small]))
        better = biggest[small] * scale_new < biggest_new * scale[small]
        h[small[better]] = h_new[better]
        diff[:, small[better]] = diff_new[:, better]
    return diff / h[None, :]


def dia_data(matrix: Any, offsets: tuple[int, ...], n: int, dtype: np.dtype) -> np.ndarray:
    """A ``jac``'s value on the host (a dense array, a list of rows, a ``scipy.sparse``
    matrix) as the DIA data of ``offsets``: a ``ValueError`` for another shape or a
    nonzero entry off those diagonals (they would be dropped)."""
    if is_scipy_sparse(matrix):
        coo = matrix.tocoo()
        rows, cols, values = coo.row, coo.col, coo.data
        shape = coo.shape
    else:
        dense = np.asarray(matrix)
        shape = dense.shape
        if dense.ndim == 2 and shape == (n, n):
            rows, cols = np.nonzero(dense)
            values = dense[rows, cols]
        else:
            rows = cols = values = np.zeros(0)
    if shape != (n, n):
        raise ValueError(f"solve_ivp: jac must return a matrix of shape ({n}, {n}), got {shape}")
    slot = {offset: k for k, offset in enumerate(offsets)}
    diagonal = np.asarray(cols, np.int64) - np.asarray(rows, np.int64)
    where = np.array([slot.get(int(k), -1) for k in diagonal], dtype=np.int64)
    if np.any(where < 0):
        outside = sorted(set(diagonal[where < 0].tolist()))[:5]
        raise ValueError(
            f"solve_ivp: jac returned entries on the diagonals {outside} outside jac_offsets "
            f"(or jac_sparsity) {list(offsets)[:10]}: give every diagonal it fills"
        )
    data = np.zeros((len(offsets), n), dtype=np.result_type(values, dtype))
    np.add.at(data, (where, np.asarray(cols, np.int64)), values)
    return _cast(data, dtype, "jac")
