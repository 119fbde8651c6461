"""SciPy-parity operations on DIA matrices, at the array level.

Each function takes and returns :class:`jaxdia._parts.DiaParts` (or dense arrays where
SciPy returns them); the ``DiaMatrix`` methods (``A.T``, ``A + B``, ``A.sum()``, ...) are
thin calls into this module. Result offsets are computed from the operands' static
offsets, so everything here traces under ``jit`` and ``vmap`` and is differentiable in
``data``. Padding slots of the inputs are never read: diagonals are cut out with static
slices, or padding is replaced with ``jnp.where`` before data meets another operand or a
nonlinear map (so neither values nor gradients ever see it). Linear maps (negation,
conjugation, sums) carry padding along into the result's padding, which is never read
either.

The array work runs inside ``jax.jit`` (static offsets and shapes travel as the parts'
pytree aux data), so eager calls compile once per structure instead of once per
primitive; checks that need concrete values stay outside the jitted cores. The
construction operations (sums, negation, products with a scalar or elementwise,
``A.T``, ``kron``) are each one formula over an array namespace ``xp``: jitted with
``jax.numpy``, or run in NumPy for concrete operands (:mod:`jaxdia._host`), compiling
nothing.
"""

from __future__ import annotations

import functools
import numbers
import operator
from collections.abc import Callable, Sequence
from types import ModuleType, NotImplementedType
from typing import TypeAlias, TypeGuard, overload

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from . import _host
from ._checks import (
    as_array,
    as_offsets,
    broadcast_batch,
    check_distinct,
    check_dtype,
    integers_as,
    is_int,
    is_traced,
    reject_sparse,
    spans_processes,
    static_int,
)
from ._convert import dense_to_dia, to_dense
from ._geometry import (
    accumulation_dtype,
    diagonal_bounds,
    holds_entries,
    in_bounds,
    index_dtype,
    pairwise_sum,
    placed_rows,
    slot_indices,
)
from ._parts import DiaParts
from ._products import dense_dia_product, dia_dense_product
from ._sharding import on_auto_axes
from ._typing import ArrayLike, DTypeLike, Offsets, Values

# -- helpers ---------------------------------------------------------------------------------


def _filled(A: DiaParts, fill: ArrayLike = 0, *, xp: ModuleType = jnp) -> Array:
    """A's ``data`` with its padding slots set to ``fill``.

    Used wherever data meets another operand or a nonlinear map: a select (unlike a
    product with a mask) sends zero gradient to padding, so NaN or inf there cannot reach
    a gradient through ``0 * nan``.
    """
    return xp.where(in_bounds(A.offsets, A.shape, host=xp is np), A.data, fill)


def _any_nonzero_in_bounds(host: np.ndarray, A: DiaParts, k: int) -> bool:
    """Whether row ``k`` of the host copy of ``A.data`` holds a nonzero in-bounds entry."""
    start, stop = diagonal_bounds(A.offsets[k], A.shape)
    return bool(np.any(host[..., k, start:stop] != 0))


def _nonzero_diagonals(A: DiaParts) -> list[bool]:
    """Whether each stored diagonal of a concrete ``A`` holds a nonzero in-bounds entry
    (in some batch member): on the host, or by a reduction on the devices for data that
    spans other processes (which this host cannot fetch)."""
    if spans_processes(A.data):
        return [bool(flag) for flag in np.asarray(_nonzero_on_devices(A))]
    host = np.asarray(A.data)
    return [_any_nonzero_in_bounds(host, A, k) for k in range(len(A.offsets))]


@jax.jit
def _nonzero_on_devices(A: DiaParts) -> Array:
    nonzero = _filled(A) != 0
    return jnp.any(nonzero, axis=tuple(a for a in range(nonzero.ndim) if a != nonzero.ndim - 2))


def _same_shape(what: str, A: DiaParts, B: DiaParts) -> None:
    if A.shape != B.shape:
        raise ValueError(
            f"{what}: inconsistent shapes: the first matrix has shape {A.shape}, the second "
            f"{B.shape}"
        )


#: What an elementwise operation with a matrix returns: a matrix, a dense array, or
#: NotImplemented for an operand type it does not know (Python then tries the other side).
Result: TypeAlias = DiaParts | Array | NotImplementedType
#: SciPy's reduction axis: 0, 1 (or -2, -1), a tuple of them, or None for all entries.
Axis: TypeAlias = int | tuple[int, ...] | None


def _is_array_like(value: object) -> TypeGuard[ArrayLike]:
    return isinstance(value, (numbers.Number, np.generic, np.ndarray, jax.Array))


def _as_operand(A: DiaParts, value: object, what: str) -> object:
    """An operand of an elementwise operation with ``A``, as JAX takes it.

    Numeric lists and tuples become NumPy arrays (SciPy accepts them). Integer and bool
    scalars and NumPy arrays are converted on the host to A's dtype, as SciPy computes
    with them: JAX would first make them int32 (x64 off), where 2**40 wraps to 0, or
    int64, where 2**70 overflows. Other values are returned as they are (the caller
    decides whether it knows them).
    """
    reject_sparse(value, f"{what}: the other operand")
    if isinstance(value, (int, np.integer, np.bool_)):
        return np.asarray(value, dtype=A.dtype)
    if isinstance(value, (list, tuple)):
        array = np.asarray(value)
        value = array if array.dtype != object else value
    if isinstance(value, np.ndarray):
        value = integers_as(as_array(value, f"{what}: the other operand"), A.dtype)
    return value


# -- structure -------------------------------------------------------------------------------

#: Above this many diagonals, operations that would handle each diagonal with its own
#: slices (compile time growing with their number) use one gather instead.
_MAX_UNROLLED_DIAGONALS = 64


def _transpose(A: DiaParts, *, xp: ModuleType = jnp) -> DiaParts:
    """``A.T``: offsets negate, and each diagonal's in-bounds slice shifts by its offset.

    Row ``k`` of ``data`` (offset ``o``) holds ``A[j - o, j]`` at column ``j``; in ``A.T``
    (offset ``-o``) the same element sits at column ``j - o``.

    Under ``jit`` the rows are ``(1, m)`` pads of ``(1, stop - start)`` slices joined by one
    ``concatenate`` (:func:`jaxdia._geometry.placed_rows`), with no reshape between: XLA
    then folds a product's slices of them into slices of ``A.data``, so ``A.T @ x`` reads
    ``A.data`` in place (no transposed copy; tested).
    """
    m, n = A.shape
    if A.n_diags == 0:
        return DiaParts(xp.zeros((*A.batch_shape, 0, m), A.dtype), (), (n, m))
    offsets = tuple(-k for k in reversed(A.offsets))
    if xp is not np and A.n_diags > _MAX_UNROLLED_DIAGONALS:
        # One gather: row r of the result (offset -o) at column c is A.data[k, c + o].
        # The unrolled slices below compile one piece per diagonal (NumPy, which compiles
        # nothing, keeps them: they copy less).
        rows, _, inside = slot_indices(offsets, (n, m))
        index = jnp.clip(rows, 0, n - 1).reshape((1,) * len(A.batch_shape) + rows.shape)
        gathered = jnp.take_along_axis(A.data[..., ::-1, :], index, axis=-1)
        return DiaParts(jnp.where(inside, gathered, 0), offsets, (n, m))
    pieces = []
    for k in reversed(range(A.n_diags)):
        offset = A.offsets[k]
        start, stop = diagonal_bounds(offset, A.shape)
        pieces.append((A.data[..., k : k + 1, start:stop], start - offset))
    return DiaParts(placed_rows(pieces, m), offsets, (n, m))


transpose = jax.jit(on_auto_axes()(_transpose))


def transposed(A: DiaParts) -> DiaParts:
    """``A.T``: :func:`transpose`, on the host for a concrete matrix (see
    :mod:`jaxdia._host`)."""
    return _host.computed(_transpose, A) if _host.concrete(A) else transpose(A)


def conj(A: DiaParts) -> DiaParts:
    return A.with_data(jnp.conj(A.data))


def real(A: DiaParts) -> DiaParts:
    return A.with_data(jnp.real(A.data))


def imag(A: DiaParts) -> DiaParts:
    return A.with_data(jnp.imag(A.data))


def astype(A: DiaParts, dtype: DTypeLike) -> DiaParts:
    dtype = check_dtype(dtype, "dtype")
    if A.dtype.kind == "c" and dtype.kind != "c":
        raise TypeError(
            f"astype: casting {A.dtype} to {dtype} would discard the imaginary part (JAX "
            "refuses complex-to-real casts); take A.real or A.imag first"
        )
    return A.with_data(A.data.astype(dtype))


# -- arithmetic ------------------------------------------------------------------------------


@overload
def add(
    A: DiaParts, other: DiaParts, *, subtract: bool = False, reverse: bool = False
) -> DiaParts: ...
@overload
def add(A: DiaParts, other: object, *, subtract: bool = False, reverse: bool = False) -> Result: ...
def add(A: DiaParts, other: object, *, subtract: bool = False, reverse: bool = False) -> Result:
    """``A + other`` (``A - other`` with ``subtract``; ``other - A`` with ``reverse`` too).

    Returns NotImplemented for operand types it does not know (Python then raises).
    """
    symbol = "-" if subtract else "+"
    what = f"A {symbol} B"
    other = _as_operand(A, other, what)
    sign_a = -1 if (subtract and reverse) else 1
    sign_b = -1 if (subtract and not reverse) else 1
    if isinstance(other, DiaParts):
        _same_shape(what, A, other)
        broadcast_batch(what, A.batch_shape, other.batch_shape)
        if _host.concrete(A, other):
            return _host.computed(_added, A, other, sign_a=sign_a, sign_b=sign_b)
        return _add_dia(A, other, sign_a, sign_b)
    if not _is_array_like(other):
        return NotImplemented
    if np.ndim(other) == 0:
        if not is_traced(other) and np.asarray(other) == 0:
            return A if sign_a == 1 else neg(A)
        raise NotImplementedError(
            f"adding a nonzero scalar to a sparse matrix is not supported (it would make "
            f"every entry nonzero); got {other!r}. Use A.todense() {symbol} s for a dense "
            "result. A traced scalar cannot be checked for zero, so it is refused too."
        )
    matrix_shape = (*A.batch_shape, *A.shape)
    try:
        np.broadcast_shapes(matrix_shape, np.shape(other))
    except ValueError:
        raise ValueError(
            f"{what}: A of shape {matrix_shape} and a dense B of shape {np.shape(other)} "
            "do not broadcast"
        ) from None
    if tuple(np.shape(other)[-2:]) != A.shape:
        # A vector spread over every entry: the classic trap of dia_matrix code, whose
        # ``A * u`` is a product (elementwise here), so that ``u + dt * (A * u)`` would
        # silently build a dense m x n array.
        raise ValueError(
            f"{what}: B of shape {np.shape(other)} would broadcast over all {A.shape[0]} x "
            f"{A.shape[1]} entries of A, a dense array. For a matrix-vector product write "
            "A @ u (scipy.sparse.dia_matrix's A * u is one; for a dia_array and a "
            "DiaMatrix * is elementwise, so A * u is a matrix); for the dense result write "
            f"A.todense() {symbol} B"
        )
    dense = to_dense(A)
    return sign_a * dense + sign_b * jnp.asarray(other)


def _added(A: DiaParts, B: DiaParts, sign_a: int, sign_b: int, *, xp: ModuleType = jnp) -> DiaParts:
    batch = broadcast_batch("A + B", A.batch_shape, B.batch_shape)
    offsets = tuple(sorted(set(A.offsets) | set(B.offsets)))
    dtype = xp.result_type(A.dtype, B.dtype)
    a, b = _data_on(A.data, A.offsets, offsets, xp), _data_on(B.data, B.offsets, offsets, xp)
    data = sign_a * a.astype(dtype, copy=False) + sign_b * b.astype(dtype, copy=False)
    return DiaParts(xp.broadcast_to(data, (*batch, *data.shape[-2:])), offsets, A.shape)


_add_dia = jax.jit(_added, static_argnums=(2, 3))


def _data_on(
    data: Values, offsets: tuple[int, ...], wanted: tuple[int, ...], xp: ModuleType = jnp
) -> Values:
    """``data``'s rows for the offsets ``wanted`` (zero rows for offsets not stored).

    One gather along the diagonals' axis, which XLA fuses into the elementwise op that
    uses it (stacked one by one, the rows would be copied first).
    """
    if offsets == wanted:
        return data
    if not offsets:  # nothing to gather from
        return xp.zeros((*data.shape[:-2], len(wanted), data.shape[-1]), data.dtype)
    row = {k: i for i, k in enumerate(offsets)}
    index = np.array([row.get(k, len(offsets)) for k in wanted], np.int32)
    if isinstance(data, np.ndarray):  # NumPy's take has no fill: zeroed after
        rows = data[..., np.minimum(index, len(offsets) - 1), :]
        rows[..., index == len(offsets), :] = 0
        return rows
    return jnp.take(data, index, axis=-2, mode="fill", fill_value=0)


def _negated(A: DiaParts, *, xp: ModuleType = jnp) -> DiaParts:
    """``-A``: written alike in either namespace (``xp`` unused)."""
    return A.with_data(-A.data)


def neg(A: DiaParts) -> DiaParts:
    return _host.computed(_negated, A) if _host.concrete(A) else _negated(A)


def multiply(A: DiaParts, other: object, *, strict: bool = True) -> Result:
    """Elementwise ``A * other`` (SciPy's ``dia_array.multiply``), staying in DIA.

    With ``strict=False`` (the ``*`` operator) unknown operand types give NotImplemented.
    """
    other = _as_operand(A, other, "A.multiply(other)")
    if not isinstance(other, DiaParts) and not _is_array_like(other):
        if strict:
            raise TypeError(
                "A.multiply(other): other must be a DiaMatrix, a scalar or a dense array, "
                f"got {type(other).__name__}"
            )
        return NotImplemented
    if isinstance(other, DiaParts):
        _same_shape("A.multiply(B)", A, other)
        if _host.concrete(A, other):
            return _host.computed(_multiplied, A, other)
        return _multiply_dia(A, other)
    if np.ndim(other) == 0:
        if _host.concrete(A, other):
            return _host.computed(_scaled, A, other, op=operator.mul)
        return _with_scalar(A, other, op=operator.mul)
    return _with_dense(A, other, op=operator.mul)


def _scaled(
    A: DiaParts,
    s: ArrayLike,
    *,
    op: Callable[[Array, ArrayLike], Array],
    fill: ArrayLike = 0,
    xp: ModuleType = jnp,
) -> DiaParts:
    """``op(data, s)`` on the in-bounds slots, padding set to ``fill`` first."""
    return A.with_data(op(_filled(A, fill, xp=xp), s))


_with_scalar = jax.jit(_scaled, static_argnames=("op", "fill"))


def _multiplied(A: DiaParts, B: DiaParts, *, xp: ModuleType = jnp) -> DiaParts:
    _same_shape("A.multiply(B)", A, B)
    batch = broadcast_batch("A.multiply(B)", A.batch_shape, B.batch_shape)
    offsets = tuple(k for k in A.offsets if k in set(B.offsets))
    dtype = xp.result_type(A.dtype, B.dtype)
    a = _data_on(_filled(A, xp=xp), A.offsets, offsets, xp).astype(dtype, copy=False)
    b = _data_on(_filled(B, xp=xp), B.offsets, offsets, xp).astype(dtype, copy=False)
    return DiaParts(xp.broadcast_to(a * b, (*batch, *a.shape[-2:])), offsets, A.shape)


_multiply_dia = jax.jit(_multiplied)


@functools.partial(jax.jit, static_argnames="op")
@on_auto_axes()
def _with_dense(A: DiaParts, x: Array, *, op: Callable[[Array, Array], Array]) -> DiaParts:
    """``op(A, X)`` on A's stored entries for a dense ``X`` that broadcasts to A's shape
    (``A.multiply(X)`` and ``A / X``, as SciPy computes them): the result keeps A's
    offsets."""
    what = "A / X" if op is operator.truediv else "A.multiply(X)"
    m, n = A.shape
    if x.ndim == 1:
        x = x[None, :]
    if x.shape[-2] not in (1, m) or x.shape[-1] not in (1, n):
        raise ValueError(
            f"{what}: X of shape {x.shape} does not broadcast to the matrix shape "
            f"{A.shape}; expected (..., {m} or 1, {n} or 1) (for the product with vectors, "
            "scipy.sparse.dia_matrix's A * X, write A @ X)"
        )
    batch = broadcast_batch(what, A.batch_shape, x.shape[:-2])
    if x.shape[-2] == 1:
        # A row: slot (k, j) of data lies in column j, so X's row lines up with data's
        # columns as it is.
        x = jnp.broadcast_to(x, (*batch, A.n_diags, n))
    else:
        x = dense_to_dia(jnp.broadcast_to(x, (*batch, *x.shape[-2:])), A.offsets, A.shape)
    # 1 in X's padding slots: A / X stays 0 there, with finite values and gradients.
    stored = jnp.where(in_bounds(A.offsets, A.shape), x, 1)
    return A.with_data(op(_filled(A), stored))


def divide(A: DiaParts, other: object) -> DiaParts | NotImplementedType:
    """``A / s`` for a scalar, ``A / X`` for a dense ``X`` (A's stored entries divided,
    as SciPy does); NotImplemented for other operand types."""
    if isinstance(other, DiaParts):
        raise TypeError(
            "A / B of two sparse matrices is dense (NaN for 0 / 0 wherever neither stores "
            "an entry, as SciPy's result): use A.todense() / B.todense()"
        )
    other = _as_operand(A, other, "A / X")
    if not _is_array_like(other):
        return NotImplemented
    if np.ndim(other) == 0:
        # Compiled even for concrete operands (not on the host): XLA's quotients need not
        # be NumPy's correctly rounded ones.
        return _with_scalar(A, other, op=operator.truediv)
    return _with_dense(A, other, op=operator.truediv)


def power(A: DiaParts, p: ArrayLike, dtype: DTypeLike | None = None) -> DiaParts:
    """Elementwise ``A ** p`` on the stored entries (SciPy's ``dia_array.power``)."""
    if not _is_array_like(p) or np.ndim(p) != 0:
        raise TypeError(
            f"power: p must be a scalar, got {type(p).__name__}"
            + (f" of shape {np.shape(p)}" if _is_array_like(p) else "")
        )
    if not is_traced(p) and np.asarray(p) == 0:
        raise NotImplementedError(
            "zero power is not supported as it would densify the matrix. "
            "Use jnp.ones(A.shape, dtype=A.dtype) for this case."
        )
    if dtype is not None:
        A = astype(A, dtype)
    if not is_traced(p) and not np.iscomplexobj(p):
        p = float(np.asarray(p))
        if (p.is_integer() and abs(p) <= _MAX_MULTIPLIED_POWER) or p == 0.5:
            # A few exponents are compiled in (XLA then multiplies, or takes the square
            # root, instead of a general ``pow``): a bounded set of programs.
            return _static_power(A, p)
    # Every other exponent is an argument of one compiled ``pow`` per structure, not a
    # program per value. A complex one (even ``2 + 0j``) makes the result complex, as in
    # NumPy. 1 in padding: finite values and derivatives.
    return _with_scalar(A, p, op=operator.pow, fill=1)


# Integral exponents up to this size multiply (``lax.integer_pow``, as ``x ** 2`` in JAX);
# repeated squaring rounds once per step, so larger ones take ``pow`` as NumPy does
# (``A ** 1000`` of float32 entries near 1 lost four digits to repeated squaring).
_MAX_MULTIPLIED_POWER = 4


@functools.partial(jax.jit, static_argnums=1)
def _static_power(A: DiaParts, p: float) -> DiaParts:
    base = _filled(A, 1)  # 1 in padding: finite values and derivatives
    if p == 0.5:
        return A.with_data(jnp.sqrt(base))  # as NumPy computes it
    return A.with_data(lax.integer_pow(base, int(p)))


@jax.jit
def absolute(A: DiaParts) -> DiaParts:
    return A.with_data(jnp.abs(_filled(A)))


# -- reductions ------------------------------------------------------------------------------


def _axis(axis: Axis) -> int | None:
    """0 (down the columns), 1 (along the rows) or None (both), as SciPy reads ``axis``."""
    if axis is None:
        return None
    axes = axis if isinstance(axis, tuple) else (axis,)
    if all(is_int(a) and -2 <= a <= 1 for a in axes) and axes:
        normalized = {int(a) % 2 for a in axes}
        if len(normalized) == len(axes):
            return normalized.pop() if len(axes) == 1 else None
    raise ValueError(f"axis must be None, 0, 1, -2, -1 or a tuple of distinct ones, got {axis!r}")


def _reject_out(what: str, out: object) -> None:
    if out is not None:
        raise ValueError(
            f"{what}: out must be None (JAX arrays are immutable; use the returned array), "
            f"got {type(out).__name__}"
        )


def reduce_sum(
    A: DiaParts, axis: Axis = None, dtype: DTypeLike | None = None, out: object = None
) -> Array:
    """Sum of the entries (axis None), of each column (axis 0) or of each row (axis 1)."""
    _reject_out("sum", out)
    return _sum(A, _axis(axis), None if dtype is None else np.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2))
@on_auto_axes()
def _sum(A: DiaParts, axis: int | None, dtype: np.dtype | None) -> Array:
    inexact = dtype is None or jnp.issubdtype(dtype, jnp.inexact)
    if not inexact or (A.dtype.kind == "c" and np.dtype(dtype).kind != "c"):
        # An integer or bool sum of the entries (as np.sum(..., dtype=int)), or a real
        # sum of complex entries (NumPy drops the imaginary parts).
        if axis == 1:  # the row sums of A are the column sums of A.T, whose padding is zero
            return _sum_diagonals(transpose(A).data, dtype)
        if axis == 0:
            return _sum_diagonals(_filled(A), dtype)
        return jnp.sum(_filled(A), axis=(-2, -1), dtype=dtype)
    # Products with ones: the product's loop reads each diagonal once without temporaries
    # and runs on every core, where XLA CPU's reduction of the masked data does neither.
    A = A if dtype is None else astype(A, dtype)
    m, n = A.shape
    if axis == 0:
        return dense_dia_product(A, jnp.ones(m, A.dtype))
    rows = dia_dense_product(A, jnp.ones(n, A.dtype))
    return rows if axis == 1 else jnp.sum(rows, axis=-1)


def _sum_diagonals(data: Array, dtype: np.dtype | None = None) -> Array:
    """``jnp.sum(data, axis=-2, dtype=dtype)`` as adds of the rows, pairwise.

    XLA CPU reduces over the leading axis of an ``(n_diags, n)`` array one strided
    element at a time, where adding rows streams them (contiguous loads). 16-bit
    floats are added in float32, as ``jnp.sum`` accumulates them.
    """
    spec = jax.ShapeDtypeStruct(data.shape, data.dtype)
    result = jax.eval_shape(functools.partial(jnp.sum, axis=-2, dtype=dtype), spec).dtype
    acc = accumulation_dtype(result)
    if not data.shape[-2]:
        return jnp.zeros((*data.shape[:-2], data.shape[-1]), result)
    return pairwise_sum([data[..., k, :].astype(acc) for k in range(data.shape[-2])]).astype(result)


def reduce_mean(
    A: DiaParts, axis: Axis = None, dtype: DTypeLike | None = None, out: object = None
) -> Array:
    """The mean over all entries (zeros included), or over axis 0 or 1."""
    _reject_out("mean", out)
    return _mean(A, _axis(axis), None if dtype is None else np.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2))
@on_auto_axes()
def _mean(A: DiaParts, axis: int | None, dtype: np.dtype | None) -> Array:
    # As np.mean: sum in ``dtype``, divide, return ``dtype``. 16-bit floats are summed and
    # divided in float32 (as jnp.mean does): the count alone can exceed float16's range.
    result = np.dtype(A.dtype if dtype is None else dtype)
    inexact = jnp.issubdtype(result, jnp.inexact)
    total = _sum(A, axis, accumulation_dtype(result) if inexact else result)
    m, n = A.shape
    count = m * n if axis is None else (m if axis == 0 else n)
    return (total / float(count)).astype(result)  # an int count over 2**31 overflows int32


def count_nonzero(A: DiaParts, axis: Axis = None) -> int | Array:
    """Nonzero in-bounds entries: per matrix (an int if concrete and unbatched), or per
    column (axis 0) or row (axis 1)."""
    axis = _axis(axis)
    count = _count_nonzero(A, axis)
    if axis is not None or is_traced(count) or A.batch_shape:
        return count
    return int(count)


@functools.partial(jax.jit, static_argnums=1)
@on_auto_axes()
def _count_nonzero(A: DiaParts, axis: int | None) -> Array:
    if axis == 1:  # the rows of A are the columns of A.T, whose padding is zero
        return _count_nonzero(transpose(A), 0)
    nonzero = in_bounds(A.offsets, A.shape) & (A.data != 0)
    if axis == 0:
        return _sum_diagonals(nonzero)
    return jnp.sum(nonzero, axis=(-2, -1))


# -- structure helpers -----------------------------------------------------------------------


def with_offsets(A: DiaParts, offsets: Offsets, *, check: bool = True) -> DiaParts:
    """A with exactly the diagonals ``offsets`` (new ones zero, dropped ones checked)."""
    wanted = check_distinct(as_offsets(offsets))
    wanted = tuple(sorted(k for k in wanted if holds_entries(k, A.shape)))
    dropped = [i for i, k in enumerate(A.offsets) if k not in set(wanted)]
    if dropped and check:
        if is_traced(A.data):
            raise ValueError(
                f"with_offsets would drop diagonals {[A.offsets[i] for i in dropped]}, and "
                "under jit/vmap/grad it cannot check that they are zero. Pass check=False to "
                "drop them unchecked (their entries are then discarded)."
            )
        flags = _nonzero_diagonals(A)
        nonzero = [A.offsets[i] for i in dropped if flags[i]]
        if nonzero:
            raise ValueError(
                f"with_offsets would drop diagonals {nonzero}, which hold nonzero entries; "
                "pass check=False to drop them anyway"
            )
    return select(A, wanted)


@functools.partial(jax.jit, static_argnums=1)
def select(A: DiaParts, offsets: tuple[int, ...]) -> DiaParts:
    """A stored with exactly ``offsets`` (canonical): missing ones zero, others dropped."""
    return DiaParts(_data_on(A.data, A.offsets, offsets), offsets, A.shape)


def aligned(matrices: Sequence[DiaParts]) -> list[DiaParts]:
    """The matrices (of one shape), each stored with the union of their offsets."""
    shapes = {M.shape for M in matrices}
    if len(shapes) > 1:
        raise ValueError(
            f"align: the matrices must have one shape, got {[M.shape for M in matrices]}"
        )
    union = tuple(sorted(set().union(*(M.offsets for M in matrices))))
    return [select(M, union) for M in matrices]


def shifted(A: DiaParts, mu: Array | float) -> DiaParts:
    """``A - mu I`` for a square ``A`` (the main diagonal is added if not stored)."""
    offsets = tuple(sorted(set(A.offsets) | {0}))
    B = select(A, offsets)
    return B.with_data(B.data.at[..., offsets.index(0), :].add(-mu))


def eliminate_zeros(A: DiaParts) -> DiaParts:
    """A without the diagonals that are zero in bounds (in every batch member)."""
    if is_traced(A.data):
        raise ValueError(
            "eliminate_zeros needs concrete data: the result's offsets depend on the values, "
            "and under jit/vmap/grad they are traced. Call it outside the transformation, or "
            "use A.with_offsets(offsets, check=False) with offsets you know."
        )
    kept = tuple(k for k, nonzero in zip(A.offsets, _nonzero_diagonals(A)) if nonzero)
    return select(A, kept)


def with_diagonal(A: DiaParts, values: ArrayLike, k: int = 0) -> DiaParts:
    """SciPy's ``setdiag(values, k)`` as a pure function."""
    k = static_int(k, "k")
    m, n = A.shape
    if (k > 0 and k >= n) or (k < 0 and -k >= m):
        raise ValueError(f"k exceeds array dimensions: k={k} for a matrix of shape {A.shape}")
    values = values if isinstance(values, jax.Array) else jnp.asarray(np.asarray(values))
    if values.dtype.kind == "c" and A.dtype.kind != "c":
        raise TypeError(
            f"values are complex ({values.dtype}) but the matrix is real ({A.dtype}); "
            "convert the matrix first with A.astype(...)"
        )
    if not holds_entries(k, A.shape):  # k == 0 on a matrix with no entries
        return A
    broadcast_batch("with_diagonal", A.batch_shape, values.shape[:-1])
    return _set_diagonal(A, values, k)


@functools.partial(jax.jit, static_argnums=2)
@on_auto_axes()
def _set_diagonal(A: DiaParts, values: Array, k: int) -> DiaParts:
    start, stop = diagonal_bounds(k, A.shape)
    if values.ndim == 0:
        count = stop - start
        values = jnp.broadcast_to(values, (count,))
    else:
        count = min(stop - start, values.shape[-1])
        values = values[..., :count]
    batch = broadcast_batch("with_diagonal", A.batch_shape, values.shape[:-1])
    n = A.shape[1]
    offsets = tuple(sorted(set(A.offsets) | {k}))
    data = jnp.broadcast_to(_data_on(A.data, A.offsets, offsets), (*batch, len(offsets), n))
    row = offsets.index(k)
    data = data.at[..., row, start : start + count].set(values.astype(A.dtype))
    return DiaParts(data, offsets, A.shape)


def kronecker(A: DiaParts, B: DiaParts) -> DiaParts:
    """The Kronecker product ``A ⊗ B`` (see :func:`jaxdia.kron`), on the host when both
    are concrete (see :mod:`jaxdia._host`)."""
    return _host.computed(_kron, A, B) if _host.concrete(A, B) else _kronecker(A, B)


def _kron_offsets(A: DiaParts, B: DiaParts) -> np.ndarray:
    """The sorted offsets of ``kron(A, B)``: ``a * nB + b + i1 * (nB - mB)`` for each row
    ``i1`` of each diagonal ``a`` of A and each diagonal ``b`` of B."""
    mb, nb = B.shape
    parts = [np.zeros(0, np.int64)]
    for a in A.offsets:
        start, stop = diagonal_bounds(a, A.shape)
        rows = np.arange(start - a, stop - a, dtype=np.int64)
        spread = np.unique(a * nb + rows * (nb - mb))
        parts.append((spread[:, None] + np.asarray(B.offsets, np.int64)[None, :]).ravel())
    return np.unique(np.concatenate(parts))


def _kron(A: DiaParts, B: DiaParts, *, xp: ModuleType = jnp) -> DiaParts:
    batch = broadcast_batch("kron", A.batch_shape, B.batch_shape)
    (ma, na), (mb, nb) = A.shape, B.shape
    shape = (ma * mb, na * nb)
    dtype = xp.result_type(A.dtype, B.dtype)
    offsets = _kron_offsets(A, B)
    host = xp is np
    # Padding zeroed first: no NaN from padding reaches a value or a gradient.
    a = _filled(A, xp=xp).astype(dtype, copy=False)
    b = _filled(B, xp=xp).astype(dtype, copy=False)
    if mb == nb:
        # Diagonals a of A and b of B fill diagonal a * nB + b: its columns j1 * nB + j2
        # hold A[j1 - a, j1] * B[j2 - b, j2], the outer product of the two rows of data
        # (zero wherever either factor's slot is padding). One product for all pairs,
        # ordered by their diagonal; pairs that share one (b and b - nB) fill disjoint
        # slots, so their rows add.
        pairs = sorted(
            (offset_a * nb + offset_b, i, k)
            for i, offset_a in enumerate(A.offsets)
            for k, offset_b in enumerate(B.offsets)
        )
        pick_a, pick_b = (np.array([p[side] for p in pairs], np.int32) for side in (1, 2))
        # And a select: a stored inf or NaN of one factor times a padding slot of the
        # other is 0, as in SciPy, not inf * 0.
        inside = (
            in_bounds(A.offsets, A.shape, host=host)[pick_a, :, None]
            & in_bounds(B.offsets, B.shape, host=host)[pick_b, None, :]
        )
        outer = xp.where(inside, a[..., pick_a, :, None] * b[..., pick_b, None, :], 0)
        outer = xp.broadcast_to(outer, (*batch, len(pairs), na, nb)).reshape(
            *batch, len(pairs), na * nb
        )
        if len(offsets) == len(pairs):
            return DiaParts(outer, tuple(map(int, offsets)), shape)
        diagonal = np.searchsorted(offsets, [p[0] for p in pairs])
        data = xp.zeros((*batch, len(offsets), shape[1]), dtype)
        if isinstance(data, np.ndarray):
            np.add.at(data, diagonal, outer)
        else:
            data = data.at[..., diagonal, :].add(outer)
        return DiaParts(data, tuple(map(int, offsets)), shape)
    # A rectangular B spreads each pair of diagonals over several: scatter the product
    # of every pair of slots to its place (the diagonal found by binary search), dropping
    # pairs that involve padding (sent to distinct rows past the last, so that indices
    # stay unique, as transposing the scatter needs).
    index = index_dtype(sum(shape))
    slots_a = slot_indices(A.offsets, A.shape, host=host)
    rows_a, cols_a, inside_a = (x[:, :, None, None] for x in slots_a)
    rows_b, cols_b, inside_b = slot_indices(B.offsets, B.shape, host=host)
    rows = rows_a.astype(index) * mb + rows_b.astype(index)
    cols = cols_a.astype(index) * nb + cols_b.astype(index)
    found = xp.searchsorted(offsets.astype(index), cols - rows).astype(index)
    qa, qb = len(A.offsets), len(B.offsets)
    pair = xp.arange(qa * qb, dtype=index).reshape(qa, 1, qb, 1)
    which = xp.where(inside_a & inside_b, found, len(offsets) + pair)
    values = a[..., :, :, None, None] * b[..., None, None, :, :]
    data = xp.zeros((*batch, len(offsets), shape[1]), dtype)
    if isinstance(data, np.ndarray):  # NumPy has no dropping scatter: leave them out
        which, cols = np.broadcast_arrays(which, cols)
        kept = which < len(offsets)
        data[which[kept], cols[kept]] = values[kept]
    else:
        data = data.at[..., which, cols].set(values, mode="drop", unique_indices=True)
    return DiaParts(data, tuple(map(int, offsets)), shape)


_kronecker = jax.jit(on_auto_axes()(_kron))
