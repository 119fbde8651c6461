"""Argument checks: dtypes, offsets, shapes, static ints and array operands.

Each rule and each message is written here once; every public entry point checks its
arguments through these functions before anything is traced, so bad input gets a
``TypeError``/``ValueError`` naming the argument, what was given and what was expected.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Sequence
from typing import Any, Protocol, TypeGuard, TypeVar, overload

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

# -- dtypes ----------------------------------------------------------------------------------

#: dtypes a DiaMatrix can hold. Integer and bool matrices are rejected: convert them with
#: ``.astype`` first (the products, gradients and kernels are defined for inexact types).
SUPPORTED_DTYPES = tuple(
    np.dtype(d)
    for d in (jnp.bfloat16, np.float16, np.float32, np.float64, np.complex64, np.complex128)
)


_T = TypeVar("_T")


def is_traced(value: object) -> TypeGuard[jax.core.Tracer]:
    """Whether ``value`` is a tracer (under ``jit``, ``vmap``, ``grad``): not checkable."""
    return isinstance(value, jax.core.Tracer)


def is_int(value: object) -> bool:
    """Whether ``value`` is a Python or NumPy integer (bools excluded)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_numeric(dtype: DTypeLike) -> bool:
    """Whether ``dtype`` is a bool, integer, floating (bfloat16 included) or complex type."""
    dtype = np.dtype(dtype)
    return dtype == np.bool_ or bool(jnp.issubdtype(dtype, jnp.number))


def native(array: np.ndarray) -> np.ndarray:
    """``array`` in the machine's byte order (JAX rejects the other, e.g. data in a file
    written on a big-endian machine)."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def is_long_double(dtype: DTypeLike) -> bool:
    """Whether ``dtype`` is NumPy's long double (or its complex), where it is wider than
    float64 (x86's 80-bit extended precision): JAX has no such type."""
    dtype = np.dtype(dtype)
    return dtype.kind in "fc" and dtype.itemsize > (8 if dtype.kind == "f" else 16)


def long_double_message(name: str, dtype: DTypeLike) -> str:
    """What a refused long double ``name`` is told to do."""
    wide = "complex128" if np.dtype(dtype).kind == "c" else "float64"
    return (
        f"{name} has dtype {np.dtype(dtype).name}: JAX (and so jaxdia) has no long double, "
        f"and computes in at most {wide}. Convert it with .astype(np.{wide}) (and enable "
        'x64: jax.config.update("jax_enable_x64", True)); for more than double precision, '
        "stay with SciPy."
    )


def check_dtype(dtype: DTypeLike, what: str = "data") -> np.dtype:
    """Returns ``dtype`` (in native byte order) if a DiaMatrix can hold it, else raises a
    TypeError saying why."""
    dtype = np.dtype(dtype).newbyteorder("=")
    if is_long_double(dtype):
        raise TypeError(long_double_message(what, dtype))
    if dtype not in SUPPORTED_DTYPES:
        names = ", ".join(d.name for d in SUPPORTED_DTYPES)
        if what == "dtype":  # a requested result dtype, not the dtype of given values
            raise TypeError(
                f"dtype {dtype.name} is not supported: a DiaMatrix holds one of {names}"
            )
        hint = (
            " Convert integer or bool matrices first, e.g. S.astype(np.float64)."
            if dtype == np.bool_ or np.issubdtype(dtype, np.integer)
            else ""
        )
        raise TypeError(f"{what} has dtype {dtype.name}; a DiaMatrix holds one of {names}.{hint}")
    return dtype


@overload
def narrow(values: np.ndarray, function: str, stacklevel: int = 3) -> np.ndarray: ...
@overload
def narrow(values: _T, function: str, stacklevel: int = 3) -> _T: ...
def narrow(values: object, function: str, stacklevel: int = 3) -> object:
    """``values`` (a NumPy array) converted on the host to the precision JAX has, with a
    warning if that narrows float64 or complex128 (x64 off); anything else as it is.
    ``stacklevel`` is the warning's, counted from here (3: the caller's caller).

    JAX would narrow such input silently, and a float32 result may be far less accurate
    than the float64 program being ported. Python scalars and lists are not warned about:
    as in JAX, they take the default precision.
    """
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "fc":
        return values
    available = np.dtype(jax.dtypes.canonicalize_dtype(values.dtype))
    if available == values.dtype:
        return values
    warnings.warn(
        f"{function}: {values.dtype.name} input becomes {available.name}, as JAX computes "
        "without x64 by default. To keep double precision, enable x64 first: "
        'jax.config.update("jax_enable_x64", True) or JAX_ENABLE_X64=1; to silence this '
        f"warning, convert the input to {available.name} yourself.",
        UserWarning,
        stacklevel=stacklevel,
    )
    return values.astype(available)


def warn_if_unavailable(dtype: np.dtype, function: str) -> None:
    """Warns, as JAX does, when an explicitly requested ``dtype`` will be narrowed (float64
    and complex128 without x64): JAX would otherwise narrow it silently here."""
    available = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if available != dtype:
        warnings.warn(
            f"Explicitly requested dtype {dtype.name} requested in {function} is not "
            f"available, and will be truncated to dtype {available.name}. To enable more "
            "dtypes, set the jax_enable_x64 configuration option or the JAX_ENABLE_X64 "
            "shell environment variable.",
            UserWarning,
            stacklevel=3,
        )


# -- static values: offsets, shapes, ints ----------------------------------------------------

_STATIC_HELP = (
    "must be static Python ints, but a traced JAX value was given (inside jit, vmap, grad, "
    "cond or scan). Pass Python ints (close over them, or mark them static with "
    "jax.jit(..., static_argnames=...)); a DiaMatrix passed through a transformation keeps "
    "its offsets static as pytree aux data."
)


def static_int(value: Any, name: str, expected: str = "an int") -> int:
    """``value`` as a Python int: an int, or a 0-d integer array that is not traced."""
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{name} {_STATIC_HELP}")
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0:
        array = np.asarray(value)
        if np.issubdtype(array.dtype, np.integer):
            return int(array)
    if not is_int(value):
        raise TypeError(f"{name} must be {expected}, got {type(value).__name__}: {value!r}")
    return int(value)


def as_offsets(offsets: Any, name: str = "offsets") -> tuple[int, ...]:
    """Validates static offsets and returns them as a tuple of Python ints (unsorted)."""
    if isinstance(offsets, jax.core.Tracer):
        raise TypeError(f"{name} {_STATIC_HELP}")
    if isinstance(offsets, (np.ndarray, jax.Array)):
        array = np.asarray(offsets)
        if array.ndim > 1:
            raise ValueError(f"{name} must be 1-D, got an array of shape {array.shape}")
        if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"{name} must hold integers, got an array of dtype {array.dtype}")
        return tuple(int(k) for k in array.reshape(-1))
    if is_int(offsets):
        return (int(offsets),)
    if isinstance(offsets, (str, bytes)) or not isinstance(offsets, Sequence):
        raise TypeError(
            f"{name} must be an int or a sequence of ints, got {type(offsets).__name__}: "
            f"{offsets!r}"
        )
    return tuple(static_int(k, name, "integers") for k in offsets)


def check_distinct(offsets: tuple[int, ...]) -> tuple[int, ...]:
    """``offsets``, or SciPy's ValueError if one repeats."""
    if len(set(offsets)) != len(offsets):
        raise ValueError(f"offset array contains duplicate values: {offsets}")
    return offsets


#: XLA computes array sizes in bytes as int64, so no array can hold 2**63 bytes or more: a
#: complex128 vector of 2**59 entries is already too large. Larger extents abort the
#: process inside XLA instead of raising.
MAX_ARRAY_BYTES = 2**63 - 1
#: The largest matrix side: a vector of that length exists in every supported dtype.
MAX_SIDE = MAX_ARRAY_BYTES // 16


def check_array_size(shape: Sequence[Any], dtype: DTypeLike, what: str) -> None:
    """A ValueError unless an array of ``shape`` and ``dtype`` can exist in XLA (symbolic
    dims of ``jax.export`` are not checked)."""
    if not all(isinstance(d, int) for d in shape):
        return
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if size > MAX_ARRAY_BYTES:
        raise ValueError(
            f"{what} would be an array of shape {tuple(shape)} and dtype {np.dtype(dtype).name}: "
            f"{size:,} bytes, beyond what XLA can address (2**63 bytes)"
        )


def as_shape(shape: object) -> tuple[int, int]:
    """Validates a matrix shape ``(m, n)`` of non-negative ints, each at most
    :data:`MAX_SIDE`."""
    if isinstance(shape, np.ndarray) and shape.ndim == 1:
        shape = tuple(shape.tolist())
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or len(shape) != 2:
        raise ValueError(f"shape must be a pair (m, n) of non-negative ints, got {shape!r}")
    if not all(is_int(s) for s in shape):
        raise TypeError(f"shape must be a pair (m, n) of non-negative ints, got {shape!r}")
    m, n = (int(s) for s in shape)
    if m < 0 or n < 0:
        raise ValueError(f"shape must be a pair (m, n) of non-negative ints, got {shape!r}")
    if max(m, n) > MAX_SIDE:
        raise ValueError(
            f"shape {(m, n)} has a side longer than {MAX_SIDE} (2**59 - 1): no vector of "
            "that length can exist in XLA, which counts array bytes in int64"
        )
    return m, n


# -- array operands --------------------------------------------------------------------------


def is_scipy_sparse(value: object) -> bool:
    """Whether ``value`` is a ``scipy.sparse`` matrix or array, without importing SciPy
    (jaxdia's import stays light): an instance exists only once ``scipy.sparse`` is loaded."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and bool(sparse.issparse(value))


def reject_sparse(value: object, name: str, hint: str = "") -> None:
    """A TypeError if ``value`` is a ``scipy.sparse`` matrix: it must be converted first."""
    if is_scipy_sparse(value):
        raise TypeError(
            f"{name} is a scipy.sparse {type(value).__name__}; convert it with "
            f"jaxdia.DiaMatrix.from_scipy(...){hint}"
        )


def as_array(
    value: object, name: str, *, expected: str = "a numeric array", hint: str = ""
) -> jax.Array | np.ndarray:
    """``value`` as an array operand: a JAX array (or tracer) as given, anything else as a
    NumPy array in native byte order (a jitted call transfers it; ``jnp.asarray`` first
    would cost one more pass).

    Raises:
      TypeError: for ``scipy.sparse`` matrices (``hint`` is added to the message) and
        non-numeric values, naming ``name`` and saying what was ``expected``.
    """
    if isinstance(value, jax.Array):  # tracers are jax.Array instances too
        return value
    if (
        type(value) is np.ndarray
        and value.dtype.kind in "fc"
        and value.dtype.isnative
        and not is_long_double(value.dtype)
    ):
        return value  # the common case: an eager call skips the checks below
    reject_sparse(value, name, hint)
    if isinstance(value, jax.ShapeDtypeStruct):
        raise TypeError(
            f"{name} must be an array, got a jax.ShapeDtypeStruct; for an abstract matrix (for "
            "jit(...).lower or jax.export) trace the constructor: jax.eval_shape(lambda d: "
            "DiaMatrix(d, offsets, shape), jax.ShapeDtypeStruct((n_diags, n), dtype))"
        )
    host = np.asarray(value)
    if is_long_double(host.dtype):
        raise TypeError(long_double_message(name, host.dtype))
    if not is_numeric(host.dtype):
        raise TypeError(
            f"{name} must be {expected}, got {type(value).__name__}"
            + (f" of dtype {host.dtype}" if host.dtype != object else "")
        )
    return native(host)


def integers_as(value: _T, dtype: DTypeLike) -> _T | np.ndarray:
    """``value`` converted on the host to the inexact ``dtype`` if it is a NumPy integer or
    bool array (or scalar), else as it is.

    An operand of an operation with a matrix of ``dtype`` promotes to ``dtype`` anyway;
    converted by JAX instead, a NumPy int64 would first become int32 without x64, where
    2**40 wraps to 0 (SciPy computes with the exact value).
    """
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biu":
        return np.asarray(value, dtype=dtype)
    return value


def converted(value: Any, dtype: DTypeLike) -> Any:
    """``value`` as a strongly typed array of ``dtype``: NumPy arrays and Python scalars
    converted on the host, JAX arrays (tracers too) by JAX where their dtype or weak type
    differs.

    Converted before a jitted call, operands make its program depend on ``dtype`` alone,
    not on each operand's own dtype (one program where every pair of input dtypes would
    compile one)."""
    dtype = np.dtype(dtype)
    if isinstance(value, jax.Array):  # tracers too
        if value.dtype == dtype and not value.weak_type:
            return value
        return jax.lax.convert_element_type(value, dtype)
    return np.asarray(value, dtype)


#: The ``implementation`` choices of the products.
IMPLEMENTATIONS = (None, "xla", "pallas", "mosaic", "triton")


def check_implementation(implementation: object) -> None:
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")


def broadcast_batch(what: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    """The broadcast of batch ``shapes``, or a ValueError naming ``what`` and them."""
    shapes_ = [tuple(s) for s in shapes]
    if all(shape == shapes_[0] for shape in shapes_[1:]):
        return shapes_[0]  # the common case, without NumPy's general (slower) broadcast
    try:
        return tuple(np.broadcast_shapes(*shapes_))
    except ValueError:
        raise ValueError(f"{what}: batch shapes {shapes_} do not broadcast") from None


def spans_processes(value: object) -> TypeGuard[jax.Array]:
    """Whether ``value`` is a global ``jax.Array`` with shards on other processes'
    devices that is not replicated here: its values cannot be fetched to this host (a
    check that needs them must reduce on the devices instead)."""
    return (
        isinstance(value, jax.Array)
        and not value.is_fully_addressable
        and not value.is_fully_replicated
    )


@jax.jit
def _zeros_on_devices(values: jax.Array) -> tuple[jax.Array, jax.Array]:
    """How many entries of ``values`` are 0, and the flat index of the first: scalars
    that every process holds (computed where the shards are, reduced across them)."""
    zero = values == 0
    # The flat index from iotas: reshaping a sharded array would need a layout of its own.
    flat = sum(
        jax.lax.broadcasted_iota(
            np.int64 if values.size > 2**31 - 1 else np.int32, values.shape, axis
        )
        * math.prod(values.shape[axis + 1 :])
        for axis in range(values.ndim)
    )
    return jnp.sum(zero), jnp.min(jnp.where(zero, flat, values.size))


def check_nonzero_diagonal(diagonal: ArrayLike, function: str, consequence: str) -> None:
    """A ValueError naming the zeros (up to 5) of a concrete ``diagonal``, for the
    preconditioners and smoothers that divide by it; a traced one is not checked.

    A diagonal that spans other processes (:func:`spans_processes`) is checked on the
    devices: a reduction gives the number of zeros and the first one's index (named
    alone), and nothing is fetched to the host.
    """
    if is_traced(diagonal):
        return
    if spans_processes(diagonal):
        count, first = (int(value) for value in _zeros_on_devices(diagonal))
        if count:
            index = np.unravel_index(first, diagonal.shape)
            where = str(int(index[0]) if len(index) == 1 else tuple(int(i) for i in index))
            more = f" and {count - 1} more" if count > 1 else ""
            raise ValueError(
                f"{function}: A's diagonal must be nonzero, but it is 0 at index {where}{more}"
                f"{consequence}"
            )
        return
    zeros = np.argwhere(np.asarray(diagonal) == 0)
    if zeros.size:
        where = ", ".join(
            str(int(z[0]) if len(z) == 1 else tuple(int(i) for i in z)) for z in zeros[:5]
        )
        more = f" and {len(zeros) - 5} more" if len(zeros) > 5 else ""
        raise ValueError(
            f"{function}: A's diagonal must be nonzero, but it is 0 at index {where}{more}"
            f"{consequence}"
        )


# -- operators and their operands ------------------------------------------------------------


class _Shaped(Protocol):
    @property
    def shape(self) -> tuple[int, ...]: ...


_ShapedT = TypeVar("_ShapedT", bound=_Shaped)


def check_square(A: _ShapedT, function: str) -> _ShapedT:
    """``A`` (anything with a ``shape``), checked to be a square matrix (``function``
    names the caller)."""
    shape = tuple(A.shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"{function}: A must be square, got shape {shape}")
    return A


def check_rhs(
    function: str,
    n: int,
    batch_shape: tuple[int, ...],
    b: ArrayLike,
    dtype: DTypeLike,
    name: str = "b",
) -> tuple[jax.Array | np.ndarray, tuple[int, ...]]:
    """``b`` (called ``name`` in messages) checked for an ``n x n`` matrix of batch shape
    ``batch_shape`` and ``dtype``: returns ``(b, batch)``, ``batch`` the broadcast batch
    shape of the solution. Integer NumPy ``b`` is converted on the host (see
    :func:`jaxdia._checks.integers_as`)."""
    b = integers_as(as_array(b, f"{function}: {name}"), dtype)
    if b.ndim == 0 or b.shape[-2 if b.ndim > 1 else 0] != n:
        raise ValueError(
            f"{function}: {name} must have shape ({n},) or (..., {n}, k) for A of shape "
            f"{(n, n)}, got shape {b.shape}"
        )
    batch = broadcast_batch(f"{function}: A and {name}", batch_shape, b.shape[:-2])
    return b, batch


def result_dtype(matrix_dtype: DTypeLike, b: jax.Array | np.ndarray) -> np.dtype:
    """The dtype of a solution: the promoted dtype of the matrix and ``b`` (arrays: a
    NumPy float64 ``b`` is no explicit request), the default float for integers.

    Promotion depends only on the two dtypes, whether ``b`` is weakly typed and JAX's
    promotion settings, so each combination is promoted once: an eager solve then pays a
    dictionary look-up, not JAX's type lattice."""
    key = (
        np.dtype(matrix_dtype),
        np.dtype(b.dtype),
        isinstance(b, jax.Array) and b.weak_type,  # tracers too; NumPy arrays never
        jax.config.jax_enable_x64,  # pyright: ignore[reportAttributeAccessIssue]
        jax.config.jax_numpy_dtype_promotion,  # pyright: ignore[reportAttributeAccessIssue]
    )
    dtype = _PROMOTED.get(key)
    if dtype is None:
        promoted = jnp.result_type(key[0], b)  # a dtype promotes as an array of it
        if not jnp.issubdtype(promoted, jnp.inexact):
            promoted = jnp.result_type(float)
        dtype = _PROMOTED[key] = np.dtype(promoted)
    return dtype


#: :func:`result_dtype`'s promotions: (matrix dtype, ``b``'s dtype, weak, x64, promotion).
_PROMOTED: dict[tuple[np.dtype, np.dtype, bool, bool, str], np.dtype] = {}


# -- scalar arguments ------------------------------------------------------------------------


def scalar(
    value: ArrayLike, name: str, *, nonnegative: bool = False, hint: str = ""
) -> jax.Array | np.ndarray:
    """``value`` checked to be a real scalar (a traced one too: only its shape and dtype
    are checked), as an array; ``nonnegative`` also refuses a concrete value below 0 (or
    NaN). ``name`` names it in the messages, ``hint`` follows the complex-value one."""
    value = as_array(value, name, expected="a real scalar")
    if np.ndim(value) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {np.shape(value)}")
    if np.dtype(value.dtype).kind == "c":
        raise TypeError(f"{name} must be real, got dtype {value.dtype}{hint}")
    if nonnegative and not is_traced(value) and not float(value) >= 0:
        raise ValueError(f"{name} must be >= 0, got {float(value)}")
    return value


def reject_unsupported(function: str, name: str, value: object, why: str) -> None:
    """A NotImplementedError unless the SciPy argument ``name`` that jaxdia does not
    support is None (``why`` says why)."""
    if value is not None:
        raise NotImplementedError(f"{function}: {name} is not supported ({why}); got {value!r}")
