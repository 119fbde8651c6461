"""A Krylov solver's arguments, checked and made ready for its compiled call:
:func:`solve_operands` (for :func:`jaxdia.cg`, :func:`jaxdia.bicgstab` and
:func:`jaxdia.gmres`).

``A`` and ``M`` are sorted by :func:`jaxdia._linalg.operators.as_operator` (every kind
SciPy takes) and passed as jit arguments (:func:`_static_callable`); ``b`` and ``x0``
are checked against ``A``'s size and batch (``x0="Mb"`` is SciPy's ``M @ b``); the
tolerances are checked as SciPy checks them (``atol=None``, ``"legacy"`` or a negative
value is SciPy's ``ValueError``); a ``callback`` becomes a :class:`Callback`, which the
loops call through an ordered host callback (:func:`Callback.report`) with each iterate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, TypeGuard

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from jax import Array

from .._checks import (
    as_array,
    broadcast_batch,
    check_square,
    converted,
    is_traced,
    scalar,
    static_int,
)
from .._matrix import DiaMatrix, as_square_matrix
from .._typing import ArrayLike, Operator, Scalar, TypedLinearMap
from .operators import apply, as_operator


class Callback:
    """A user's ``callback``, as the loops call it: a static jit argument (equal by the
    callback's identity and the kind of value it gets), applied on the host, in order,
    by ``jax.debug.callback(..., ordered=True)``.

    ``kind`` is ``"x"`` (the iterate, a writable NumPy array of the solution's shape) or
    ``"residual"`` (a residual norm: a Python float for one system, a NumPy array for a
    batch).
    """

    __slots__ = ("function", "kind")

    def __init__(self, function: Callable[[Any], Any], kind: str = "x"):
        self.function = function
        self.kind = kind

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Callback)
            and other.function is self.function
            and other.kind == self.kind
        )

    def __hash__(self) -> int:
        return hash((id(self.function), self.kind))

    def _on_host(self, value: np.ndarray, when: np.ndarray) -> None:
        if not when:
            return
        if self.kind == "residual" and np.ndim(value) == 0:
            self.function(np.asarray(value)[()])  # a NumPy scalar, as SciPy's (a float)
        else:
            self.function(np.array(value))

    def report(self, value: Array, when: Any = True) -> None:
        """Hands ``value`` to the callback, when ``when`` (a traced bool) holds."""
        jax.debug.callback(self._on_host, value, jnp.asarray(when), ordered=True)


def callback_of(callback: Any, function: str, kind: str = "x") -> Callback | None:
    """``callback`` (None, or a callable) as a :class:`Callback`."""
    if callback is None:
        return None
    if not callable(callback):
        raise TypeError(
            f"{function}: callback must be a function (called with each iterate), got "
            f"{type(callback).__name__}"
        )
    return Callback(callback, kind)


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


def _with_closure_arguments(f: Callable[[Array], Array], example: jax.ShapeDtypeStruct) -> Any:
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


def tolerance(value: Scalar, name: str) -> Array | float:
    """A tolerance: a traced one as it is, a concrete one checked and as a Python float.
    What SciPy refuses with a ``ValueError`` (None, a string such as SciPy's old
    ``"legacy"``, a negative value) is a ``ValueError`` here too."""
    if value is None or isinstance(value, str):
        raise ValueError(f"{name} must be a real, non-negative number, got {value!r}")
    value = scalar(value, name, nonnegative=True)
    return value if is_traced(value) else float(value)


def _operator(A: Any, function: str) -> tuple[Any, int | None, tuple[int, ...], Any, str]:
    """``A`` sorted (:func:`as_operator`): itself, its size and batch shape, its dtype
    (None where unknown: a function), and a hint for a ``b`` of the wrong size."""
    A, n, dtype = as_operator(A, function, "A")
    if isinstance(A, DiaMatrix):
        A = as_square_matrix(A, function)
        return A, A.shape[0], A.batch_shape, A.dtype, ""
    if n is not None:  # a matrix, a lineax operator or a host operator, made a function
        return A, n, (), dtype, ""
    if _is_operator(A):  # a ShardedDiaMatrix: its vectors are padded to padded_size rows
        check_square(A, function)
        n = int(getattr(A, "padded_size", A.shape[0]))
        hint = (
            f" (A's vectors are padded to {n} rows: make b with A.shard_vector(b), "
            "which pads and shards it)"
            if n != A.shape[0]
            else ""
        )
        return A, n, (), np.dtype(A.dtype), hint
    return A, None, (), None, ""


def _maxiter(maxiter: ArrayLike | None, n: int, function: str) -> Any:
    """``maxiter`` checked (None: ``10 * n``), as an int32 (a traced one too: it is an
    argument of the loop)."""
    if maxiter is None:
        return np.int32(min(10 * n, np.iinfo(np.int32).max))
    if is_traced(maxiter):
        return jnp.asarray(maxiter, np.int32)
    maxiter = static_int(maxiter, f"{function}: maxiter")
    if maxiter < 0:
        raise ValueError(f"{function}: maxiter must be >= 0, got {maxiter}")
    return np.int32(min(maxiter, np.iinfo(np.int32).max))


class SolveOperands(NamedTuple):
    """A Krylov solver's checked arguments, as its compiled call takes them: ``A`` and
    ``M`` as jit arguments (see :func:`_static_callable`), ``b`` and ``x0`` as given
    (``x0`` None when ``x0_is_Mb``: the compiled call starts from ``M b``), the
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
    x0_is_Mb: bool

    def vectors_in_dtype(self) -> tuple[Any, Any]:
        """``(b, x0)`` in the working dtype, converted before the compiled call: its
        program then depends on that dtype, not on ``b``'s and ``x0``'s own."""
        x0 = None if self.x0 is None else converted(self.x0, self.dtype)
        return converted(self.b, self.dtype), x0


def solve_operands(
    function: str,
    A: DiaMatrix | Operator,
    b: ArrayLike,
    M: Operator | None,
    x0: ArrayLike | str | None,
    rtol: Scalar,
    atol: Scalar,
    maxiter: ArrayLike | None,
) -> SolveOperands:
    """The arguments of the solver ``function`` (its name in the messages) checked and
    made ready for its compiled call (``maxiter`` None: ``10 * n``).

    The working dtype is that of ``A`` and ``b`` promoted (SciPy's: ``M`` does not enter
    it), integer matrices counting as the default float (float64 with x64 on), as SciPy
    computes them in float64; an integer ``b`` takes ``A``'s.
    """
    A, n, batch, dtype, hint = _operator(A, function)
    b = as_array(b, f"{function}: b")
    if b.ndim == 0 or (n is not None and b.shape[-1] != n):
        raise ValueError(
            f"{function}: b must have shape ({n if n is not None else 'n'},) or (..., n), got "
            f"shape {b.shape}{hint}"
        )
    n = b.shape[-1]
    batch = broadcast_batch(f"{function}: A and b", batch, b.shape[:-1])
    x0_is_Mb = isinstance(x0, str)
    if x0_is_Mb:
        if x0 != "Mb":
            raise ValueError(f"{function}: x0 must be an array or 'Mb' (M @ b), got {x0!r}")
        x0 = None
    elif x0 is not None:
        x0 = as_array(x0, f"{function}: x0")
        if x0.ndim == 0 or x0.shape[-1] != n:
            raise ValueError(f"{function}: x0 must have shape ({n},) or (..., {n}), got {x0.shape}")
        batch = broadcast_batch(f"{function}: A, b and x0", batch, x0.shape[:-1])
    if M is not None:
        M, size, _ = as_operator(M, function, "M")
        if isinstance(M, DiaMatrix) or _is_operator(M):  # applied to stacks of vectors
            M = jax.tree_util.Partial(apply, M)
        if size is not None and size != n:
            raise ValueError(f"{function}: M must be {n} x {n} as A is, got size {size}")
    maxiter = _maxiter(maxiter, n, function)
    # An integer b takes the operator's dtype (JAX's rule; asked of JAX with x64 off, an
    # int64 would warn): the default float where the operator's is unknown.
    inexact = [t for t in (dtype, b.dtype) if t is not None and np.dtype(t).kind in "fc"]
    result = jnp.result_type(*inexact) if inexact else jnp.result_type(float)
    rtol = tolerance(rtol, f"{function}: rtol")
    atol = tolerance(atol, f"{function}: atol")
    example = None
    if not is_traced(b):  # what a function operator gets, to trace it (multi-process runs)
        shape = (*batch, n)
        sharding = getattr(b, "sharding", None) if b.shape == shape else None
        example = jax.ShapeDtypeStruct(shape, result, sharding=sharding)
    return SolveOperands(
        _static_callable(A, example),
        b,
        x0,
        _static_callable(M, example),
        rtol,
        atol,
        maxiter,
        batch,
        np.dtype(result),
        x0_is_Mb,
    )
