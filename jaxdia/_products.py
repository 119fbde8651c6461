"""The three products of a DIA matrix: with a dense operand on either side, and with
another DIA matrix.

* :func:`dia_dense_product` (``A @ X``) and :func:`dense_dia_product` (``X @ A``) follow
  ``jnp.matmul``: the matrix is an array of shape ``batch_shape + (m, n)``, a 1-D operand
  is a vector, an N-D operand is a stack of matrices whose batch dims broadcast. They
  check the operand and call the ``dia_spmm`` primitive (:mod:`jaxdia._kernels.primitives`).
* :func:`dia_dia_product` (``A @ B``) is a DIA matrix (:func:`matrix_product`: on the
  host for concrete matrices, see :mod:`jaxdia._host`): :func:`pair_products` sums the
  products of pairs of diagonals, unrolled for a few pairs and otherwise as one loop over
  B's diagonals, so that the program does not grow with the pairs (the normal equations
  of :mod:`jaxdia._linalg.lstsq` use it too, over the pairs of their upper triangle).
* :func:`matvec` is ``x -> A @ x`` (or ``A^T @ x``) for the solvers' loops: checked
  operands of the right shape and dtype, straight to the primitive.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from . import _host
from ._checks import (
    as_array,
    broadcast_batch,
    check_array_size,
    check_implementation,
    integers_as,
)
from ._geometry import accumulation_dtype, index_dtype, place_row, slot_indices, stack_rows
from ._kernels import xla
from ._kernels.primitives import spmm
from ._parts import DiaParts
from ._sharded_products import contracted_axes, sharded_spmm
from ._sharding import on_auto_axes
from ._typing import ArrayLike, DTypeLike


def _as_operand(x: ArrayLike, data_dtype: DTypeLike) -> Array | np.ndarray:
    """The dense operand ``X``, checked (NumPy arrays are transferred by the jitted call).

    A NumPy integer or bool ``X`` is converted on the host to the product's dtype (see
    :func:`jaxdia._checks.integers_as`).
    """
    x = as_array(
        x,
        "X",
        hint=" (the product of two DiaMatrix is a DiaMatrix) or pass a dense array",
    )
    if x.ndim == 0:
        raise ValueError("X must be at least 1-D for a matrix product, got a scalar")
    return integers_as(x, data_dtype)


def _promote(data: Array, x: Array) -> tuple[Array, Array]:
    dtype = jnp.result_type(data.dtype, x.dtype)
    return data.astype(dtype), x.astype(dtype)


def _check_shapes(op: str, shape: tuple[int, int], data: Array, x: Array | np.ndarray) -> None:
    """A ``ValueError`` naming both shapes unless ``x`` fits ``A`` in ``op`` (``"A @ X"`` or
    ``"X @ A"``): the contracted length, and batch dims that broadcast."""
    if op == "A @ X":
        need, have, what = shape[1], x.shape[0] if x.ndim == 1 else x.shape[-2], "rows"
    else:
        need, have, what = shape[0], x.shape[-1], "columns"
    problem = None
    if have != need:
        problem = f"X needs {need} {what}, it has {have}"
    elif data.ndim > 2 or x.ndim > 2:
        try:
            jnp.broadcast_shapes(data.shape[:-2], x.shape[:-2])
        except ValueError:
            problem = "batch dims do not broadcast"
    if problem is not None:
        batch = f" with batch shape {data.shape[:-2]}" if data.ndim > 2 else ""
        raise ValueError(f"{op}: A of shape {shape}{batch} and X of shape {x.shape}: {problem}")
    rows = shape[1] if op == "X @ A" else shape[0]
    if x.ndim == 1:
        out_shape = (*data.shape[:-2], rows)
    else:
        columns = x.shape[-1 if op == "A @ X" else -2]
        out_shape = (*jnp.broadcast_shapes(data.shape[:-2], x.shape[:-2]), rows, columns)
    check_array_size(out_shape, data.dtype, op)


def _align_batch(data: Array, x: Array) -> tuple[Array, Array]:
    """Gives ``data`` and ``x`` batch dims of equal rank (leading ones)."""
    rank = max(data.ndim, x.ndim) - 2
    data = data.reshape((1,) * (rank - (data.ndim - 2)) + data.shape)
    x = x.reshape((1,) * (rank - (x.ndim - 2)) + x.shape)
    return data, x


def _spmm(
    data: Array, x: Array, *, transpose: bool = False, rows: bool = False, **params: Any
) -> Array:
    """The ``dia_spmm`` primitive, or, when the matrix's columns (or ``x``'s contracted
    rows) are split over Explicit mesh axes, the halo-exchanging product of
    :mod:`jaxdia._sharded_products`. Which one is a static property of the operands'
    types: unsharded operands are traced exactly as the primitive alone. ``rows``: ``x``
    and the result as rows ``(*B, c, n)`` (the sharded product takes columns)."""
    axes = contracted_axes(data, x, transpose, rows=rows)
    if axes and rows:
        y = sharded_spmm(data, jnp.swapaxes(x, -1, -2), axes=axes, transpose=transpose, **params)
        return jnp.swapaxes(y, -1, -2)
    if axes:
        return sharded_spmm(data, x, axes=axes, transpose=transpose, **params)
    return spmm(data, x, transpose=transpose, rows=rows, **params)


@functools.partial(jax.jit, static_argnames=("offsets", "shape", "transpose", "implementation"))
def _product(data, x, *, offsets, shape, transpose, implementation) -> Array:
    """``A @ x`` (``x @ A`` with ``transpose``) for checked operands, as one jitted call.

    Jitted so that an eager product is one dispatch (run op by op, the promotion, the
    reshapes around a vector and the primitive would each be dispatched, and cost more
    than the product itself at n = 1e4). Under an outer ``jit`` it is inlined.
    """
    data, x = _promote(data, x)
    vector = x.ndim == 1
    if vector:  # a row (1, n): TPU tiles an (n, 1) column one row per element
        x = x[None, :]
    elif transpose:
        x = jnp.swapaxes(x, -1, -2)
    data, x = _align_batch(data, x)
    y = _spmm(
        data,
        x,
        offsets=offsets,
        shape=shape,
        transpose=transpose,
        implementation=implementation,
        rows=vector,
    )
    if vector:
        return y[..., 0, :]
    return jnp.swapaxes(y, -1, -2) if transpose else y


def dia_dense_product(A: DiaParts, x: ArrayLike, *, implementation: str | None = None) -> Array:
    """``A @ x`` for a dense ``x``."""
    return _dense_product(A, x, transpose=False, implementation=implementation)


def dense_dia_product(A: DiaParts, x: ArrayLike, *, implementation: str | None = None) -> Array:
    """``x @ A`` for a dense ``x``, computed as ``(A^T x^T)^T``."""
    return _dense_product(A, x, transpose=True, implementation=implementation)


def _dense_product(
    A: DiaParts, x: ArrayLike, *, transpose: bool, implementation: str | None
) -> Array:
    check_implementation(implementation)
    data, offsets, shape = A
    x = _as_operand(x, data.dtype)
    _check_shapes("X @ A" if transpose else "A @ X", shape, data, x)
    return _product(
        data, x, offsets=offsets, shape=shape, transpose=transpose, implementation=implementation
    )


def matvec(A: DiaParts, transpose: bool = False) -> Callable[[Array], Array]:
    """``x -> A @ x`` (``A^T @ x`` with ``transpose``) for one matrix and ``x`` of shape
    ``(n,)`` or ``(n, c)``, of the matrix's dtype: the ``dia_spmm`` primitive with no
    checks, for the inner loops of the solvers (Lanczos, multigrid, ``expm_multiply``).

    A vector stays 1-D around the product: XLA CPU reduces an ``(n, 1)`` array (the
    loops' norms) several times slower than a vector. It enters the product as a row
    ``(1, n)``, which TPU tiles as one (an ``(n, 1)`` column takes a tile row per element).
    """

    def product(x: Array) -> Array:
        if x.ndim == 1:
            row = x[None, :]
            y = spmm(A.data, row, offsets=A.offsets, shape=A.shape, transpose=transpose, rows=True)
            return y[0]
        return spmm(A.data, x, offsets=A.offsets, shape=A.shape, transpose=transpose)

    return product


def looped_matvec(A: DiaParts) -> Callable[[Array], Array]:
    """``v -> A @ v`` for one matrix and a vector as one loop over its diagonals (see
    :func:`jaxdia._dispatch.loops_level_product`: multigrid's small levels with many
    diagonals on CPU), where :func:`matvec` unrolls one term per diagonal."""
    return lambda v: xla.looped_matvec(A.data, v, A.offsets, A.shape)


def operator_product(A: DiaParts, x: Array | np.ndarray, *, adjoint: bool) -> Array:
    """``A @ x`` or ``A^H @ x`` for SciPy's ``LinearOperator`` protocol (see
    :mod:`jaxdia._scipy_operator`, which checks the operands): ``x`` of shape ``(rows,)``
    or ``(rows, k)``, one compiled call."""
    x = integers_as(x, A.data.dtype)
    return _operator_product(A.data, x, offsets=A.offsets, shape=A.shape, adjoint=adjoint)


@functools.partial(jax.jit, static_argnames=("offsets", "shape", "adjoint"))
def _operator_product(data, x, *, offsets, shape, adjoint) -> Array:
    data, x = _promote(data, x)
    columns = x if x.ndim == 2 else x[:, None]
    if adjoint:  # A^H x = conj(A^T conj(x))
        y = jnp.conj(
            _spmm(
                data,
                jnp.conj(columns),
                offsets=offsets,
                shape=shape,
                transpose=True,
                implementation=None,
            )
        )
    else:
        y = _spmm(data, columns, offsets=offsets, shape=shape, implementation=None)
    return y if x.ndim == 2 else y[:, 0]


#: Products of at most this many pairs of diagonals are unrolled, one static slice per
#: pair (the program grows with the pairs, up to this bound); more run as the loop of
#: :func:`pair_products`, whose program has a constant size. Below the bound the unrolled
#: form is as fast or faster (it writes each result diagonal once; the loop reads and
#: writes a window of the result per diagonal of B): benchmarks/notes/compile.md.
MAX_UNROLLED_PAIRS = 64


class PairTable(NamedTuple):
    """How the diagonal products of ``A @ B`` add up, as host data (static).

    ``offsets``: the result's diagonals; ``used``: booleans ``(len(A.offsets),
    len(B.offsets))``, the pairs of diagonals that reach the result. The loop of
    :func:`pair_products` runs over B's diagonals ``rows_b``; its step ``k`` adds to a
    window of ``width`` consecutive rows of the result, from row ``low[k]`` on: window
    row ``w`` takes A's row ``source[k, w]`` (``len(A.offsets)`` where no pair lands).
    """

    offsets: tuple[int, ...]
    used: np.ndarray
    rows_b: np.ndarray
    low: np.ndarray
    source: np.ndarray
    width: int


def _live(offsets: tuple[int, ...], shape: tuple[int, int]) -> np.ndarray:
    """Whether each diagonal holds a slot inside a ``shape`` matrix (host booleans)."""
    k = np.asarray(offsets, np.int64)
    return np.maximum(0, k) < np.minimum(shape[1], shape[0] + k)


def pair_table(A: DiaParts, B: DiaParts, keep: np.ndarray | None = None) -> PairTable:
    """The :class:`PairTable` of ``A @ B`` over the pairs of diagonals ``keep`` (host
    booleans ``(len(A.offsets), len(B.offsets))``; None: all).

    Diagonal ``a`` of A times diagonal ``b`` of B lands on diagonal ``c = a + b``; for
    diagonals that hold entries it reaches an entry of the result exactly when ``c``
    lies inside it (``-m < c < p``), so the result's offsets are the sums of pairs
    clipped to its shape, as SciPy's ``dia_matmat`` computes them. For each ``b`` the
    sums ``a + b`` keep A's order, so they fill a window of the result's rows (as wide
    as A's diagonals for a contiguous band).
    """
    (m, _), p = A.shape, B.shape[1]
    a, b = np.asarray(A.offsets, np.int64), np.asarray(B.offsets, np.int64)
    sums = a[:, None] + b[None, :]
    used = _live(A.offsets, A.shape)[:, None] & _live(B.offsets, B.shape)[None, :]
    used &= (sums > -m) & (sums < p)
    if keep is not None:
        used &= keep
    offsets = np.unique(sums[used])
    position = np.searchsorted(offsets, sums)
    rows_b = np.flatnonzero(used.any(axis=0))
    looped, position = used[:, rows_b], position[:, rows_b]
    first = np.where(looped, position, len(offsets)).min(axis=0, initial=len(offsets))
    last = np.where(looped, position, -1).max(axis=0, initial=-1)
    width = int(np.max(last - first + 1, initial=0))
    low = np.minimum(first, len(offsets) - width)
    source = np.full((len(rows_b), width), len(A.offsets), np.int64)
    row_a, k = np.nonzero(looped)
    source[k, position[row_a, k] - low[k]] = row_a
    return PairTable(tuple(int(c) for c in offsets), used, rows_b, low, source, width)


def adjoint(A: DiaParts) -> DiaParts:
    """``A^H`` (the conjugate transpose) as one gather, its padding slots zero: a program
    of constant size whatever the number of diagonals (``A.T`` of :mod:`jaxdia._ops`
    slices each diagonal apart, so that a product reads it in place)."""
    m, n = A.shape
    offsets = tuple(-k for k in reversed(A.offsets))
    if A.n_diags == 0 or n == 0:
        return DiaParts(jnp.zeros((*A.batch_shape, A.n_diags, m), A.dtype), offsets, (n, m))
    rows, _, inside = slot_indices(offsets, (n, m))
    index = jnp.clip(rows, 0, n - 1).reshape((1,) * len(A.batch_shape) + rows.shape)
    gathered = jnp.take_along_axis(A.data[..., ::-1, :], index, axis=-1)
    return DiaParts(jnp.where(inside, jnp.conj(gathered), 0), offsets, (n, m))


def pair_products(
    A: DiaParts, B: DiaParts, keep: np.ndarray | None = None, *, xp: ModuleType = jnp
) -> DiaParts:
    """``A @ B`` summed over the pairs of diagonals ``keep`` (:func:`pair_table`; None:
    all): unrolled up to :data:`MAX_UNROLLED_PAIRS` pairs, else one ``fori_loop`` over
    B's diagonals (:func:`_looped_pairs`), a program of constant size doing the work of
    one product per pair. 16-bit floats accumulate in float32; padding slots of the
    operands are never read (nor reach a value or a gradient), the result's are zero.
    Batch dims broadcast. In NumPy (``xp``) always unrolled: the loop is there to bound
    a program's size.
    """
    table = pair_table(A, B, keep)
    batch = broadcast_batch("A @ B", A.batch_shape, B.batch_shape)
    (m, _), p = A.shape, B.shape[1]
    dtype = xp.result_type(A.dtype, B.dtype)
    if not table.offsets:
        return DiaParts(xp.zeros((*batch, 0, p), dtype), (), (m, p))
    if xp is np or np.count_nonzero(table.used) <= MAX_UNROLLED_PAIRS:
        data = _unrolled_pairs(A, B, table, batch, xp)
    else:
        data = _looped_pairs(A, B, table, batch)
    return DiaParts(data.astype(dtype, copy=False), table.offsets, (m, p))


def _unrolled_pairs(
    A: DiaParts, B: DiaParts, table: PairTable, batch: tuple[int, ...], xp: ModuleType
) -> Array:
    """The result's data as one static slice per pair: ``C[c, j] += A[a, j - b] *
    B[b, j]`` for ``max(0, c, b) <= j < min(p, m + c, n + b)``, the columns where both
    slots are inside their matrices (so padding is never read). Each result diagonal
    adds its terms in the loop's order (B's diagonals in turn), and XLA fuses each
    diagonal's sum into one loop."""
    (m, n), p = A.shape, B.shape[1]
    wide = accumulation_dtype(xp.result_type(A.dtype, B.dtype))
    terms: dict[int, list[Array]] = {}
    for ib, ia in zip(*np.nonzero(table.used.T)):
        a, b = A.offsets[ia], B.offsets[ib]
        c = a + b
        low, high = max(0, c, b), min(p, m + c, n + b)
        left = A.data[..., ia, low - b : high - b].astype(wide, copy=False)
        product = left * B.data[..., ib, low:high].astype(wide, copy=False)
        terms.setdefault(c, []).append(place_row(product, low, p, xp))
    rows = [functools.reduce(operator.add, terms[c]) for c in table.offsets]
    return stack_rows(rows, batch, p, wide, xp)


def _looped_pairs(A: DiaParts, B: DiaParts, table: PairTable, batch: tuple[int, ...]) -> Array:
    """The result's data as one ``fori_loop`` over B's diagonals (``table.rows_b``).

    Step ``k`` (diagonal ``b``) adds ``A[a, j - b] * B[b, j]`` to the window of result
    rows ``c = a + b``: one ``dynamic_slice`` of A's data shifted by ``b``, one gather
    of its rows by ``table.source`` (the rows that land in the window), a product with
    B's row and an in-place update of the window. The columns split into an interior,
    where every step's slice lies inside A's data (read where it is, no copy), and the
    edges (``max|b|`` columns or so at each end) read from zero-padded copies of A's
    edge columns: no temporary the size of the operands (at n = 1e6 allocating one
    cost as much as the product). Padding slots are selected away inside the step (a
    select, so NaN there reaches neither values nor gradients). The step is
    rematerialized in reverse mode (``jax.checkpoint``): a gradient keeps the operands,
    not ``pairs x n`` intermediates.
    """
    (m, n), p = A.shape, B.shape[1]
    wide = accumulation_dtype(jnp.result_type(A.dtype, B.dtype))
    qa, rows = len(A.offsets), len(table.offsets)
    shifts = np.asarray(B.offsets, np.int64)[table.rows_b]
    high, low = int(shifts.max()), int(shifts.min())
    index = index_dtype(2 * (m + n + p))
    # Column ranges [start, stop) of the result and, for an edge, the first column of A
    # its zero-padded copy holds (the interior reads A's data: origin None).
    start, stop = max(0, high), min(p, n + low)
    regions: list[tuple[int, int, int | None]]
    if start < stop:
        regions = [(start, stop, None)]
        if start > 0:
            regions.insert(0, (0, start, -high))
        if stop < p:
            regions.append((stop, p, stop - high))
    else:  # a band as wide as the matrix: no column that every step reads in place
        regions = [(0, p, -high)]
    width = table.width

    def edge(first: int, count: int) -> Array:
        """A's data columns ``[first, first + count)``, zero beyond A's columns."""
        inside = A.data[..., max(0, first) : max(0, min(n, first + count))]
        before = min(count, max(0, -first))
        after = count - before - inside.shape[-1]
        return jnp.pad(inside, [(0, 0)] * (A.data.ndim - 1) + [(before, after)])

    sources = [
        A.data if origin is None else edge(origin, (end - begin) + high - low)
        for begin, end, origin in regions
    ]
    shift_of, row_of, low_of, source_of = (
        jnp.asarray(t.astype(index)) for t in (shifts, table.rows_b, table.low, table.source)
    )
    offset_of = jnp.asarray(np.append(np.asarray(A.offsets, index), 0))
    # Where every window starts on the same row (the upper triangle of A^H A), XLA would
    # fold the start into a constant and the window's read into a static slice, which it
    # no longer matches with the update's rows: the update would not be done in place
    # (20x slower). The barrier keeps the start a value read from the table.
    low_of = lax.optimization_barrier(low_of)

    @functools.partial(jax.checkpoint, prevent_cse=False)
    def updates(sources: list[Array], b_data: Array, k: Array) -> list[Array]:
        shift, picks = shift_of[k], source_of[k]
        a = offset_of[picks][:, None]  # the offset of each window row's A diagonal
        real = (picks < qa)[:, None]
        b_row = lax.dynamic_index_in_dim(b_data, row_of[k], axis=-2)  # (..., 1, p)
        out = []
        for (begin, end, origin), data in zip(regions, sources):
            x = lax.iota(index, end - begin) + (begin - shift)  # A's column, per column j
            first = begin - shift - (0 if origin is None else origin)
            shifted = lax.dynamic_slice_in_dim(data, first, end - begin, axis=-1)
            picked = jnp.take(shifted, picks, axis=-2, mode="clip")
            inside = real & (x - a >= 0) & (x - a < m)  # A's slot (row x - a) in bounds
            row = b_row[..., begin:end].astype(wide)
            if origin is not None:  # an edge: A's column x and B's slot may lie outside
                columns = (x >= 0) & (x < n)
                inside = inside & columns
                row = jnp.where(columns, row, 0)
            out.append(jnp.where(inside, picked, 0).astype(wide) * row)
        return out

    def step(k: Array, c: Array) -> Array:
        row = low_of[k]
        for (begin, end, _), update in zip(regions, updates(sources, B.data, k)):
            corner = (index(0),) * len(batch) + (row, index(begin))
            window = lax.dynamic_slice(c, corner, (*batch, width, end - begin))
            c = lax.dynamic_update_slice(c, window + update, corner)
        return c

    # A window as tall as the result would be read as a static slice, whatever its start
    # (see above): one spare row keeps it a dynamic one.
    spare = int(width == rows)
    c = jnp.zeros((*batch, rows + spare, p), wide)
    c = lax.fori_loop(0, len(table.rows_b), step, c)
    return c[..., :rows, :] if spare else c


@jax.jit
@on_auto_axes()
def dia_dia_product(A: DiaParts, B: DiaParts) -> DiaParts:
    """``A @ B`` of two DIA matrices, as a DIA matrix: :func:`pair_products` over all
    pairs of diagonals (the result's offsets are the sums of pairs clipped to its shape,
    as SciPy's ``dia_matmat`` computes them). 16-bit floats accumulate in float32.
    """
    if A.shape[1] != B.shape[0]:
        raise ValueError(
            f"A @ B: dimension mismatch: A has shape {A.shape} and B has shape {B.shape}; "
            "A.shape[1] must equal B.shape[0]"
        )
    return pair_products(A, B)


def matrix_product(A: DiaParts, B: DiaParts) -> DiaParts:
    """``A @ B`` of two DIA matrices: :func:`dia_dia_product`, on the host when both are
    concrete (see :mod:`jaxdia._host`)."""
    if A.shape[1] == B.shape[0] and _host.concrete(A, B):
        return _host.computed(pair_products, A, B)
    return dia_dia_product(A, B)
