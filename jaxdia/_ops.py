"""SciPy-parity operations on :class:`DiaMatrix` that return DIA matrices.

Each function takes and returns ``DiaMatrix`` objects (or dense arrays where SciPy returns
them). Result offsets are computed from the operands' static offsets, so everything here
traces under ``jit`` and ``vmap`` and is differentiable in ``data``. Padding slots of the
inputs are never read: diagonals are cut out with static slices, or padding is replaced
with ``jnp.where`` before data meets another operand or a nonlinear map (so neither values
nor gradients ever see it). Linear maps (negation, conjugation, sums) carry padding along
into the result's padding, which is never read either.

The array work runs inside ``jax.jit`` (static offsets and shapes travel as the
DiaMatrix's pytree aux data), so eager calls compile once per structure instead of once
per primitive; checks that need concrete values stay outside the jitted cores.

The ``DiaMatrix`` methods (``A.T``, ``A + B``, ``A.sum()``, ...) delegate here; only
:func:`align` and :func:`kron` are public functions.
"""

from __future__ import annotations

import functools
import numbers
import operator
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax import Array, lax

from ._convert import dense_to_dia, slot_indices
from ._dtypes import check_dtype, is_int, is_numeric, native
from ._matmul import dia_matmul, dia_rmatmul
from ._matrix import DiaMatrix, as_matrix, as_offsets, holds_entries
from ._xla import accumulation_dtype, diagonal_bounds, index_dtype, pairwise_sum

# -- helpers ---------------------------------------------------------------------------------


def _is_traced(value: Any) -> bool:
    return isinstance(value, jax.core.Tracer)


def _in_bounds(offsets: tuple[int, ...], shape: tuple[int, int]) -> Array:
    """``(len(offsets), n)`` booleans, True on the in-bounds slots of ``data``.

    Computed from an iota and each diagonal's bounds, so XLA fuses it into its consumer.
    A NumPy mask would be embedded in the program as a constant the size of ``data``
    (108 MB, and 2.4 s to compile ``2 * A``, for 27 diagonals at n = 4e6).
    """
    index = index_dtype(shape[1])
    bounds = np.array([diagonal_bounds(k, shape) for k in offsets], index).reshape(-1, 2)
    column = lax.broadcasted_iota(index, (len(offsets), shape[1]), 1)
    return (column >= bounds[:, :1]) & (column < bounds[:, 1:])


def _filled(A: DiaMatrix, fill: Any = 0) -> Array:
    """A's ``data`` with its padding slots set to ``fill``.

    Used wherever data meets another operand or a nonlinear map: a select (unlike a
    product with a mask) sends zero gradient to padding, so NaN or inf there cannot reach
    a gradient through ``0 * nan``.
    """
    return jnp.where(_in_bounds(A.offsets, A.shape), A.data, fill)


def _any_nonzero_in_bounds(host: np.ndarray, A: DiaMatrix, k: int) -> bool:
    """Whether row ``k`` of the host copy of ``A.data`` holds a nonzero in-bounds entry."""
    start, stop = diagonal_bounds(A.offsets[k], A.shape)
    return bool(np.any(host[..., k, start:stop] != 0))


def _place(values: Array, start: int, width: int) -> Array:
    """A row of ``width`` slots holding ``values`` from ``start`` on and zeros elsewhere."""
    pad = [(0, 0)] * (values.ndim - 1) + [(start, width - start - values.shape[-1])]
    return jnp.pad(values, pad)


def _stack(rows: list[Array], batch: tuple[int, ...], width: int, dtype: Any) -> Array:
    """Stacks rows of width ``width`` (broadcast to ``batch``) into ``(*batch, len, width)``."""
    if not rows:
        return jnp.zeros((*batch, 0, width), dtype)
    return jnp.stack([jnp.broadcast_to(r, (*batch, width)).astype(dtype) for r in rows], -2)


def _broadcast_batch(what: str, *matrices_or_shapes: Any) -> tuple[int, ...]:
    shapes = [m.batch_shape if isinstance(m, DiaMatrix) else tuple(m) for m in matrices_or_shapes]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"{what}: batch shapes {shapes} do not broadcast") from None


def _same_shape(what: str, A: DiaMatrix, B: DiaMatrix) -> None:
    if A.shape != B.shape:
        raise ValueError(
            f"{what}: inconsistent shapes: the first matrix has shape {A.shape}, the second "
            f"{B.shape}"
        )


def _is_array_like(value: Any) -> bool:
    return isinstance(value, (numbers.Number, np.generic, np.ndarray, jax.Array))


def _as_operand(value: Any) -> Any:
    """An elementwise operand as JAX takes it: numeric lists and tuples as NumPy arrays
    (SciPy accepts them), NumPy arrays in native byte order."""
    if isinstance(value, (list, tuple)):
        array = np.asarray(value)
        value = array if is_numeric(array.dtype) else value
    if isinstance(value, np.ndarray):
        value = native(value)
    return value


def _as_scalar(A: DiaMatrix, s: Any) -> Any:
    """A concrete integer scalar in A's dtype: JAX would first make it an int32 (x64 off),
    where 2**40 wraps to 0, or an int64, where 2**70 overflows; SciPy scales exactly."""
    if isinstance(s, (int, np.integer, np.bool_)):
        return np.asarray(s, dtype=A.dtype)
    return s


def _reject_scipy(what: str, other: Any) -> None:
    if sp.issparse(other):
        raise TypeError(
            f"{what}: got a scipy.sparse {type(other).__name__}; convert it first with "
            "jaxdia.DiaMatrix.from_scipy(...)"
        )


# -- structure -------------------------------------------------------------------------------


@jax.jit
def transpose(A: DiaMatrix) -> DiaMatrix:
    """``A.T``: offsets negate, and each diagonal's in-bounds slice shifts by its offset.

    Row ``k`` of ``data`` (offset ``o``) holds ``A[j - o, j]`` at column ``j``; in ``A.T``
    (offset ``-o``) the same element sits at column ``j - o``.

    Under ``jit`` the rows are ``(1, m)`` pads of ``(1, stop - start)`` slices joined by one
    ``concatenate``, with no reshape between: XLA then folds a product's slices of them
    into slices of ``A.data``, so ``A.T @ x`` reads ``A.data`` in place (no transposed
    copy; tested).
    """
    m, n = A.shape
    if A.n_diags == 0:
        return DiaMatrix(jnp.zeros((*A.batch_shape, 0, m), A.dtype), (), (n, m))
    rows = []
    for k in reversed(range(A.n_diags)):
        offset = A.offsets[k]
        start, stop = diagonal_bounds(offset, A.shape)
        rows.append(_place(A.data[..., k : k + 1, start:stop], start - offset, m))
    data = jnp.concatenate(rows, axis=-2)
    return DiaMatrix(data, tuple(-k for k in reversed(A.offsets)), (n, m))


def with_data(A: DiaMatrix, data: Array) -> DiaMatrix:
    """A matrix with A's offsets and shape and new ``data`` (elementwise maps of A's)."""
    return DiaMatrix(data, A.offsets, A.shape)


def astype(A: DiaMatrix, dtype: Any) -> DiaMatrix:
    dtype = check_dtype(dtype, "dtype")
    if A.dtype.kind == "c" and dtype.kind != "c":
        raise TypeError(
            f"astype: casting {A.dtype} to {dtype} would discard the imaginary part (JAX "
            "refuses complex-to-real casts); take A.real or A.imag first"
        )
    return with_data(A, A.data.astype(dtype))


# -- arithmetic ------------------------------------------------------------------------------


def add(A: DiaMatrix, other: Any, *, subtract: bool = False, reverse: bool = False) -> Any:
    """``A + other`` (``A - other`` with ``subtract``; ``other - A`` with ``reverse`` too).

    Returns NotImplemented for operand types it does not know (Python then raises).
    """
    symbol = "-" if subtract else "+"
    what = f"A {symbol} B"
    _reject_scipy(what, other)
    other = _as_operand(other)
    sign_a = -1 if (subtract and reverse) else 1
    sign_b = -1 if (subtract and not reverse) else 1
    if isinstance(other, DiaMatrix):
        _same_shape(what, A, other)
        _broadcast_batch(what, A, other)
        return _add_dia(A, other, sign_a, sign_b)
    if not _is_array_like(other):
        return NotImplemented
    if np.ndim(other) == 0:
        if not _is_traced(other) and np.asarray(other) == 0:
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
    dense = A.todense()
    return sign_a * dense + sign_b * jnp.asarray(other)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _add_dia(A: DiaMatrix, B: DiaMatrix, sign_a: int, sign_b: int) -> DiaMatrix:
    batch = _broadcast_batch("A + B", A, B)
    offsets = tuple(sorted(set(A.offsets) | set(B.offsets)))
    dtype = jnp.result_type(A.dtype, B.dtype)
    a, b = _data_on(A.data, A.offsets, offsets), _data_on(B.data, B.offsets, offsets)
    data = sign_a * a.astype(dtype) + sign_b * b.astype(dtype)
    return DiaMatrix(jnp.broadcast_to(data, (*batch, *data.shape[-2:])), offsets, A.shape)


def _data_on(data: Array, offsets: tuple[int, ...], wanted: tuple[int, ...]) -> Array:
    """``data``'s rows for the offsets ``wanted`` (zero rows for offsets not stored).

    One gather along the diagonals' axis, fused into the elementwise op that uses it:
    stacking the rows one by one took 2x a plain add of two ``data`` arrays.
    """
    if offsets == wanted:
        return data
    if not offsets:  # nothing to gather from
        return jnp.zeros((*data.shape[:-2], len(wanted), data.shape[-1]), data.dtype)
    row = {k: i for i, k in enumerate(offsets)}
    index = np.array([row.get(k, len(offsets)) for k in wanted], np.int32)
    return jnp.take(data, index, axis=-2, mode="fill", fill_value=0)


def neg(A: DiaMatrix) -> DiaMatrix:
    return with_data(A, -A.data)


def multiply(A: DiaMatrix, other: Any, *, strict: bool = True) -> Any:
    """Elementwise ``A * other`` (SciPy's ``dia_array.multiply``), staying in DIA.

    With ``strict=False`` (the ``*`` operator) unknown operand types give NotImplemented.
    """
    _reject_scipy("A.multiply(other)", other)
    other = _as_operand(other)
    if not isinstance(other, DiaMatrix) and not _is_array_like(other):
        if strict:
            raise TypeError(
                "A.multiply(other): other must be a DiaMatrix, a scalar or a dense array, "
                f"got {type(other).__name__}"
            )
        return NotImplemented
    if isinstance(other, DiaMatrix):
        return _multiply_dia(A, other)
    if np.ndim(other) == 0:
        return _with_scalar(A, _as_scalar(A, other), op=operator.mul)
    return _with_dense(A, other, op=operator.mul)


@functools.partial(jax.jit, static_argnames=("op", "fill"))
def _with_scalar(A: DiaMatrix, s: Any, *, op: Any, fill: Any = 0) -> DiaMatrix:
    """``op(data, s)`` on the in-bounds slots, padding set to ``fill`` first, in one call."""
    return with_data(A, op(_filled(A, fill), s))


@jax.jit
def _multiply_dia(A: DiaMatrix, B: DiaMatrix) -> DiaMatrix:
    _same_shape("A.multiply(B)", A, B)
    batch = _broadcast_batch("A.multiply(B)", A, B)
    offsets = tuple(k for k in A.offsets if k in set(B.offsets))
    dtype = jnp.result_type(A.dtype, B.dtype)
    a = _data_on(_filled(A), A.offsets, offsets).astype(dtype)
    b = _data_on(_filled(B), B.offsets, offsets).astype(dtype)
    return DiaMatrix(jnp.broadcast_to(a * b, (*batch, *a.shape[-2:])), offsets, A.shape)


@functools.partial(jax.jit, static_argnames="op")
def _with_dense(A: DiaMatrix, x: Array, *, op: Any) -> DiaMatrix:
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
            f"{A.shape}; expected (..., {m} or 1, {n} or 1)"
        )
    batch = _broadcast_batch(what, A, x.shape[:-2])
    if x.shape[-2] == 1:
        # A row: slot (k, j) of data lies in column j, so X's row lines up with data's
        # columns as it is.
        x = jnp.broadcast_to(x, (*batch, A.n_diags, n))
    else:
        x = dense_to_dia(jnp.broadcast_to(x, (*batch, *x.shape[-2:])), A.offsets, A.shape)
    # 1 in X's padding slots: A / X stays 0 there, with finite values and gradients.
    stored = jnp.where(_in_bounds(A.offsets, A.shape), x, 1)
    return with_data(A, op(_filled(A), stored))


def divide(A: DiaMatrix, other: Any) -> Any:
    """``A / s`` for a scalar, ``A / X`` for a dense ``X`` (A's stored entries divided,
    as SciPy does); NotImplemented for other operand types."""
    _reject_scipy("A / X", other)
    if isinstance(other, DiaMatrix):
        raise TypeError(
            "A / B of two sparse matrices is dense (NaN for 0 / 0 wherever neither stores "
            "an entry, as SciPy's result): use A.todense() / B.todense()"
        )
    other = _as_operand(other)
    if not _is_array_like(other):
        return NotImplemented
    if np.ndim(other) == 0:
        return _with_scalar(A, _as_scalar(A, other), op=operator.truediv)
    return _with_dense(A, other, op=operator.truediv)


def power(A: DiaMatrix, p: Any, dtype: Any = None) -> DiaMatrix:
    """Elementwise ``A ** p`` on the stored entries (SciPy's ``dia_array.power``)."""
    if not _is_array_like(p) or np.ndim(p) != 0:
        raise TypeError(
            f"power: p must be a scalar, got {type(p).__name__}"
            + (f" of shape {np.shape(p)}" if _is_array_like(p) else "")
        )
    if not _is_traced(p) and np.asarray(p) == 0:
        raise NotImplementedError(
            "zero power is not supported as it would densify the matrix. "
            "Use jnp.ones(A.shape, dtype=A.dtype) for this case."
        )
    if dtype is not None:
        A = astype(A, dtype)
    if not _is_traced(p) and not np.iscomplexobj(p):
        # A concrete real exponent is compiled in. Passed as a traced exponent it was a
        # general ``pow``: eager ``A ** 2`` took 42 ms for 5 x 1e6 float32 entries, 2.6 ms
        # inside a ``jit`` (where XLA sees the 2). A complex one (even ``2 + 0j``) makes
        # the result complex, as in NumPy, and takes the general path.
        return _static_power(A, float(p))
    # 1 in padding: finite values and derivatives.
    return _with_scalar(A, p, op=operator.pow, fill=1)


# Integral exponents up to this size multiply (``lax.integer_pow``, as ``x ** 2`` in JAX);
# repeated squaring rounds once per step, so larger ones take ``pow`` as NumPy does
# (``A ** 1000`` of float32 entries near 1 was off by 3.7e-5 relative; ``pow``: 5e-8).
_MAX_MULTIPLIED_POWER = 4


@functools.partial(jax.jit, static_argnums=1)
def _static_power(A: DiaMatrix, p: float) -> DiaMatrix:
    base = _filled(A, 1)  # 1 in padding: finite values and derivatives
    if p.is_integer() and abs(p) <= _MAX_MULTIPLIED_POWER:
        return with_data(A, lax.integer_pow(base, int(p)))
    if p == 0.5:
        return with_data(A, jnp.sqrt(base))  # as NumPy computes it
    return with_data(A, jnp.power(base, p))


@jax.jit
def absolute(A: DiaMatrix) -> DiaMatrix:
    return with_data(A, jnp.abs(_filled(A)))


@jax.jit
def matmul(A: DiaMatrix, B: DiaMatrix) -> DiaMatrix:
    """``A @ B`` of two DIA matrices, as a DIA matrix.

    Diagonal ``a`` of A times diagonal ``b`` of B lands on diagonal ``c = a + b``:
    ``C[j - c, j] += A[j - c, j - b] * B[j - b, j]``, i.e. ``Cdata[c, j] += Adata[a, j - b]
    * Bdata[b, j]`` for ``max(0, c, b) <= j < min(p, m + c, n + b)``. That range is empty
    exactly when ``c`` lies outside the result, so the result offsets are the sums of
    pairs clipped to the result's shape, as SciPy's ``dia_matmat`` computes them.
    16-bit floats accumulate in float32.
    """
    if A.shape[1] != B.shape[0]:
        raise ValueError(
            f"A @ B: dimension mismatch: A has shape {A.shape} and B has shape {B.shape}; "
            "A.shape[1] must equal B.shape[0]"
        )
    batch = _broadcast_batch("A @ B", A, B)
    (m, n), p = A.shape, B.shape[1]
    dtype = jnp.result_type(A.dtype, B.dtype)
    wide = accumulation_dtype(dtype)
    terms: dict[int, list[Array]] = {}
    for ia, a in enumerate(A.offsets):
        for ib, b in enumerate(B.offsets):
            c = a + b
            low, high = max(0, c, b), min(p, m + c, n + b)
            if low < high:
                product = A.data[..., ia, low - b : high - b].astype(wide) * B.data[
                    ..., ib, low:high
                ].astype(wide)
                terms.setdefault(c, []).append(_place(product, low, p))
    offsets = tuple(sorted(terms))
    rows = [functools.reduce(jnp.add, terms[c]) for c in offsets]
    return DiaMatrix(_stack(rows, batch, p, dtype), offsets, (m, p))


# -- reductions ------------------------------------------------------------------------------


def _axis(axis: Any) -> int | None:
    """0 (down the columns), 1 (along the rows) or None (both), as SciPy reads ``axis``."""
    if axis is None:
        return None
    axes = axis if isinstance(axis, tuple) else (axis,)
    if all(is_int(a) and -2 <= a <= 1 for a in axes) and axes:
        normalized = {int(a) % 2 for a in axes}
        if len(normalized) == len(axes):
            return normalized.pop() if len(axes) == 1 else None
    raise ValueError(f"axis must be None, 0, 1, -2, -1 or a tuple of distinct ones, got {axis!r}")


def _reject_out(what: str, out: Any) -> None:
    if out is not None:
        raise ValueError(
            f"{what}: out must be None (JAX arrays are immutable; use the returned array), "
            f"got {type(out).__name__}"
        )


def reduce_sum(A: DiaMatrix, axis: Any = None, dtype: Any = None, out: Any = None) -> Array:
    """Sum of the entries (axis None), of each column (axis 0) or of each row (axis 1)."""
    _reject_out("sum", out)
    return _sum(A, _axis(axis), None if dtype is None else np.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _sum(A: DiaMatrix, axis: int | None, dtype: np.dtype | None) -> Array:
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
    # and runs on every core. XLA CPU's reductions of the masked data were 5-10x slower
    # for 27 diagonals at n = 1e6 (37 ms for A.sum() in float32, SciPy 8 ms, now 6 ms).
    A = A if dtype is None else astype(A, dtype)
    m, n = A.shape
    if axis == 0:
        return dia_rmatmul(A.data, A.offsets, A.shape, jnp.ones(m, A.dtype))
    rows = dia_matmul(A.data, A.offsets, A.shape, jnp.ones(n, A.dtype))
    return rows if axis == 1 else jnp.sum(rows, axis=-1)


def _sum_diagonals(data: Array, dtype: np.dtype | None = None) -> Array:
    """``jnp.sum(data, axis=-2, dtype=dtype)`` as adds of the rows, pairwise.

    XLA CPU reduces over the leading axis of an ``(n_diags, n)`` array 40-70x slower than
    it adds the rows (5 x 1e6 float32: 48 ms against 0.7 ms). 16-bit floats are added in
    float32, as ``jnp.sum`` accumulates them.
    """
    spec = jax.ShapeDtypeStruct(data.shape, data.dtype)
    result = jax.eval_shape(functools.partial(jnp.sum, axis=-2, dtype=dtype), spec).dtype
    acc = accumulation_dtype(result)
    if not data.shape[-2]:
        return jnp.zeros((*data.shape[:-2], data.shape[-1]), result)
    return pairwise_sum([data[..., k, :].astype(acc) for k in range(data.shape[-2])]).astype(result)


def reduce_mean(A: DiaMatrix, axis: Any = None, dtype: Any = None, out: Any = None) -> Array:
    """The mean over all entries (zeros included), or over axis 0 or 1."""
    _reject_out("mean", out)
    return _mean(A, _axis(axis), None if dtype is None else np.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _mean(A: DiaMatrix, axis: int | None, dtype: np.dtype | None) -> Array:
    # As np.mean: sum in ``dtype``, divide, return ``dtype``. 16-bit floats are summed and
    # divided in float32 (as jnp.mean does): the count alone can exceed float16's range.
    result = np.dtype(A.dtype if dtype is None else dtype)
    inexact = jnp.issubdtype(result, jnp.inexact)
    total = _sum(A, axis, accumulation_dtype(result) if inexact else result)
    m, n = A.shape
    count = m * n if axis is None else (m if axis == 0 else n)
    return (total / float(count)).astype(result)  # an int count over 2**31 overflows int32


def count_nonzero(A: DiaMatrix, axis: Any = None) -> Any:
    """Nonzero in-bounds entries: per matrix (an int if concrete and unbatched), or per
    column (axis 0) or row (axis 1)."""
    axis = _axis(axis)
    count = _count_nonzero(A, axis)
    if axis is not None or _is_traced(count) or A.batch_shape:
        return count
    return int(count)


@functools.partial(jax.jit, static_argnums=1)
def _count_nonzero(A: DiaMatrix, axis: int | None) -> Array:
    if axis == 1:  # the rows of A are the columns of A.T, whose padding is zero
        return _count_nonzero(transpose(A), 0)
    nonzero = _in_bounds(A.offsets, A.shape) & (A.data != 0)
    if axis == 0:
        return _sum_diagonals(nonzero)
    return jnp.sum(nonzero, axis=(-2, -1))


# -- structure helpers -----------------------------------------------------------------------


def with_offsets(A: DiaMatrix, offsets: Any, *, check: bool = True) -> DiaMatrix:
    """A with exactly the diagonals ``offsets`` (new ones zero, dropped ones checked)."""
    wanted = as_offsets(offsets)
    if len(set(wanted)) != len(wanted):
        raise ValueError(f"offsets contains duplicate values: {wanted}")
    wanted = tuple(sorted(k for k in wanted if holds_entries(k, A.shape)))
    dropped = [i for i, k in enumerate(A.offsets) if k not in set(wanted)]
    if dropped and check:
        if _is_traced(A.data):
            raise ValueError(
                f"with_offsets would drop diagonals {[A.offsets[i] for i in dropped]}, and "
                "under jit/vmap/grad it cannot check that they are zero. Pass check=False to "
                "drop them unchecked (their entries are then discarded)."
            )
        host = np.asarray(A.data)
        nonzero = [A.offsets[i] for i in dropped if _any_nonzero_in_bounds(host, A, i)]
        if nonzero:
            raise ValueError(
                f"with_offsets would drop diagonals {nonzero}, which hold nonzero entries; "
                "pass check=False to drop them anyway"
            )
    return _select(A, wanted)


@functools.partial(jax.jit, static_argnums=1)
def _select(A: DiaMatrix, offsets: tuple[int, ...]) -> DiaMatrix:
    """A stored with exactly ``offsets`` (canonical): missing ones zero, others dropped."""
    return DiaMatrix(_data_on(A.data, A.offsets, offsets), offsets, A.shape)


def eliminate_zeros(A: DiaMatrix) -> DiaMatrix:
    """A without the diagonals that are zero in bounds (in every batch member)."""
    if _is_traced(A.data):
        raise ValueError(
            "eliminate_zeros needs concrete data: the result's offsets depend on the values, "
            "and under jit/vmap/grad they are traced. Call it outside the transformation, or "
            "use A.with_offsets(offsets, check=False) with offsets you know."
        )
    host = np.asarray(A.data)
    kept = tuple(k for i, k in enumerate(A.offsets) if _any_nonzero_in_bounds(host, A, i))
    return _select(A, kept)


def with_diagonal(A: DiaMatrix, values: Any, k: Any = 0) -> DiaMatrix:
    """SciPy's ``setdiag(values, k)`` as a pure function."""
    if not is_int(k):
        raise TypeError(f"k must be an int, got {type(k).__name__}: {k!r}")
    k = int(k)
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
    _broadcast_batch("with_diagonal", A, values.shape[:-1])
    return _set_diagonal(A, values, k)


@functools.partial(jax.jit, static_argnums=2)
def _set_diagonal(A: DiaMatrix, values: Array, k: int) -> DiaMatrix:
    start, stop = diagonal_bounds(k, A.shape)
    if values.ndim == 0:
        count = stop - start
        values = jnp.broadcast_to(values, (count,))
    else:
        count = min(stop - start, values.shape[-1])
        values = values[..., :count]
    batch = _broadcast_batch("with_diagonal", A, values.shape[:-1])
    n = A.shape[1]
    offsets = tuple(sorted(set(A.offsets) | {k}))
    data = jnp.broadcast_to(_data_on(A.data, A.offsets, offsets), (*batch, len(offsets), n))
    row = offsets.index(k)
    data = data.at[..., row, start : start + count].set(values.astype(A.dtype))
    return DiaMatrix(data, offsets, A.shape)


def align(*matrices: DiaMatrix) -> tuple[DiaMatrix, ...]:
    """The same matrices, each stored with the union of their offsets.

    Matrices with equal offsets, shape, dtype and batch shape have equal pytree
    structure, which ``lax.cond`` branches, ``lax.scan`` carries and ``lax.while_loop``
    states require. The added diagonals are zero; dtypes and batch shapes are kept.

    Args:
      *matrices: DiaMatrix instances of one shape.

    Returns:
      A tuple of DiaMatrix, one per argument, in order.

    Raises:
      TypeError: if an argument is not a DiaMatrix.
      ValueError: if the shapes differ.

    Example:
      >>> import jax, jaxdia
      >>> A = jaxdia.eye(3)
      >>> B = jaxdia.eye(3, k=1)
      >>> A2, B2 = jaxdia.align(A, B)
      >>> A2.offsets, B2.offsets
      ((0, 1), (0, 1))
      >>> C = jax.lax.cond(True, lambda: A2, lambda: B2)
      >>> C.todense()[0]
      Array([1., 0., 0.], dtype=float32)
    """
    for i, M in enumerate(matrices):
        as_matrix(M, f"align: argument {i}")
    shapes = {M.shape for M in matrices}
    if len(shapes) > 1:
        raise ValueError(
            f"align: the matrices must have one shape, got {[M.shape for M in matrices]}"
        )
    union = sorted(set().union(*(M.offsets for M in matrices)))
    return tuple(_select(M, tuple(union)) for M in matrices)


def kron(A: DiaMatrix, B: DiaMatrix) -> DiaMatrix:
    """The Kronecker product ``A ⊗ B`` as a DiaMatrix, like ``scipy.sparse.kron``.

    Entry ``A[i1, j1] * B[i2, j2]`` sits at row ``i1 * mB + i2`` and column
    ``j1 * nB + j2``. For a square ``B`` of size ``s`` the result offsets are
    ``a * s + b`` for the offsets ``a`` of A and ``b`` of B; a rectangular ``B`` spreads
    each pair over ``a * nB + b + i1 * (nB - mB)`` for every row ``i1`` of diagonal ``a``.
    Every stored in-bounds entry of A and B contributes (explicit zeros too), so the
    offsets are static; SciPy's result (BSR or COO) drops explicit zeros. Batch
    dimensions broadcast.

    Args:
      A: the left factor, shape ``(mA, nA)``.
      B: the right factor, shape ``(mB, nB)``.

    Returns:
      The DiaMatrix of shape ``(mA * mB, nA * nB)``.

    Raises:
      TypeError: if A or B is not a DiaMatrix.
      ValueError: if the batch shapes do not broadcast.

    Example:
      >>> import jaxdia
      >>> T = jaxdia.diags([1.0, 2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
      >>> K = jaxdia.kron(jaxdia.eye(2), T)
      >>> K.shape, K.offsets
      ((6, 6), (-1, 0, 1))
      >>> float(K.todense()[3, 2])
      0.0
    """
    as_matrix(A, "kron: A")
    as_matrix(B, "kron: B")
    return _kron(A, B)


def _kron_offsets(A: DiaMatrix, B: DiaMatrix) -> np.ndarray:
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


@jax.jit
def _kron(A: DiaMatrix, B: DiaMatrix) -> DiaMatrix:
    batch = _broadcast_batch("kron", A, B)
    (ma, na), (mb, nb) = A.shape, B.shape
    shape = (ma * mb, na * nb)
    dtype = jnp.result_type(A.dtype, B.dtype)
    offsets = _kron_offsets(A, B)
    a, b = _filled(A).astype(dtype), _filled(B).astype(dtype)  # padding zero: no NaN * 0
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
        outer = a[..., pick_a, :, None] * b[..., pick_b, None, :]
        outer = jnp.broadcast_to(outer, (*batch, len(pairs), na, nb)).reshape(
            *batch, len(pairs), na * nb
        )
        if len(offsets) < len(pairs):
            diagonal = np.searchsorted(offsets, [p[0] for p in pairs])
            outer = (
                jnp.zeros((*batch, len(offsets), shape[1]), dtype).at[..., diagonal, :].add(outer)
            )
        return DiaMatrix(outer, tuple(map(int, offsets)), shape)
    # A rectangular B spreads each pair of diagonals over several: scatter the product
    # of every pair of slots to its place (the diagonal found by binary search), dropping
    # pairs that involve padding (sent to distinct rows past the last, so that indices
    # stay unique, as transposing the scatter needs).
    index = index_dtype(sum(shape))
    rows_a, cols_a, inside_a = (x[:, :, None, None] for x in slot_indices(A.offsets, A.shape))
    rows_b, cols_b, inside_b = slot_indices(B.offsets, B.shape)
    rows = rows_a.astype(index) * mb + rows_b.astype(index)
    cols = cols_a.astype(index) * nb + cols_b.astype(index)
    found = jnp.searchsorted(offsets.astype(index), cols - rows).astype(index)
    qa, qb = len(A.offsets), len(B.offsets)
    pair = lax.broadcasted_iota(index, (qa, 1, qb, 1), 0) * qb + lax.broadcasted_iota(
        index, (qa, 1, qb, 1), 2
    )
    which = jnp.where(inside_a & inside_b, found, len(offsets) + pair)
    values = a[..., :, :, None, None] * b[..., None, None, :, :]
    data = jnp.zeros((*batch, len(offsets), shape[1]), dtype)
    data = data.at[..., which, cols].set(values, mode="drop", unique_indices=True)
    return DiaMatrix(data, tuple(map(int, offsets)), shape)
