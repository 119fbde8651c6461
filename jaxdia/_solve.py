"""Linear solves at the array level: the Jacobi preconditioner and banded direct solves.

:func:`solve_banded` uses ``jax.lax.linalg.tridiagonal_solve`` for tridiagonal matrices;
otherwise, on CPU from :data:`_LAPACK_FROM` rows on, LAPACK's banded LU (``gbsv``, reached
through SciPy in a host callback), and elsewhere a banded LU with partial pivoting in
``lax.scan``.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from scipy.linalg import get_lapack_funcs

from ._checks import as_array, broadcast_batch, integers_as
from ._geometry import diagonal_bounds, in_bounds
from ._ops import transpose
from ._parts import DiaParts
from ._primitives import spmm
from ._sharding import on_auto_axes


def _main_diagonal(A: DiaParts) -> Array:
    """The main diagonal of a square ``A``, shape ``(*batch_shape, n)`` (zeros if unstored)."""
    if 0 not in A.offsets:
        return jnp.zeros((*A.batch_shape, A.shape[1]), A.dtype)
    return A.data[..., A.offsets.index(0), :]


def _scale(inverse_diagonal: Array, v: Array) -> Array:
    return inverse_diagonal * v


def jacobi_preconditioner(A: DiaParts) -> jax.tree_util.Partial:
    """``M(v) = v / diag(A)`` for a square ``A`` (see :func:`jaxdia.jacobi`).

    Raises a ValueError naming the zeros of a concrete diagonal.
    """
    stored = "" if 0 in A.offsets else " (A stores no main diagonal)"
    return inverse_diagonal_preconditioner(_main_diagonal(A), stored)


def inverse_diagonal_preconditioner(diagonal: Array, hint: str = "") -> jax.tree_util.Partial:
    """``M(v) = v / diagonal``, laid out (and sharded) as ``diagonal`` is.

    Raises a ValueError naming the zeros of a concrete ``diagonal`` (``hint`` follows the
    message).
    """
    if not isinstance(diagonal, jax.core.Tracer):
        host = np.asarray(diagonal)
        zeros = np.argwhere(host == 0)
        if zeros.size:
            where = ", ".join(
                str(int(z[0]) if len(z) == 1 else tuple(int(i) for i in z)) for z in zeros[:5]
            )
            more = f" and {len(zeros) - 5} more" if len(zeros) > 5 else ""
            raise ValueError(
                f"jacobi: A's diagonal must be nonzero, but it is 0 at index {where}{more}"
                f"{hint}; the Jacobi preconditioner 1/diag(A) does not exist."
            )
    return jax.tree_util.Partial(_scale, 1 / diagonal)


# -- banded direct solves ------------------------------------------------------------------


def _pad_last(x: Array, before: int, after: int) -> Array:
    return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(before, after)])


def _transposed(data: Array, offsets: tuple[int, ...], n: int):
    """``(data, offsets)`` of ``A^T`` for a square ``A``; its padding slots hold zeros."""
    transposed = transpose(DiaParts(data, offsets, (n, n)))
    return transposed.data, transposed.offsets


def _row_band(data: Array, offsets: tuple[int, ...], n: int, lower: int, upper: int) -> Array:
    """``R[r, c] = A[r, r - lower + c]`` for ``c`` in ``[0, lower + upper]``, shape
    ``(n, lower + upper + 1)``; entries outside the matrix are zero (padding is not read)."""
    columns = [jnp.zeros((n,), data.dtype)] * (lower + upper + 1)
    transposed, transposed_offsets = _transposed(data, offsets, n)
    # The row of A^T's diagonal t, read at column r, is A^T[r - t, r] == A[r, r - t].
    for index, offset in enumerate(transposed_offsets):
        columns[lower - offset] = transposed[index]
    return jnp.stack(columns, axis=-1)


def _banded_lu_solve(
    data: Array, b: Array, offsets: tuple[int, ...], n: int, lower: int, upper: int
) -> Array:
    """Solves ``A x = b`` (``b`` of shape ``(n, k)``) by banded LU with partial pivoting.

    A window of the ``lower + 1`` rows that can hold the pivot of column ``i``, over
    columns ``[i, i + lower + upper]`` (row swaps widen the upper band to
    ``lower + upper``), slides down the matrix in ``lax.scan``; the right-hand side is
    eliminated alongside, then a reverse scan back-substitutes. An exactly zero pivot
    (a singular matrix) makes the whole solution NaN.
    """
    width = lower + upper + 1
    band = _row_band(data, offsets, n, lower, upper)
    incoming = jnp.concatenate([band[lower + 1 :], jnp.zeros((lower + 1, width), band.dtype)])
    # The first window: rows 0..lower over columns 0..lower+upper, W0[r, c] = R[r, c - r + lower].
    rows, cols = np.meshgrid(np.arange(lower + 1), np.arange(width), indexing="ij")
    source = cols - rows + lower
    inside = (source < width) & (rows < n)
    padded = jnp.concatenate([band, jnp.zeros((lower + 1, width), band.dtype)])
    window = jnp.where(inside, padded[rows, np.minimum(source, width - 1)], 0)
    rhs = jnp.concatenate([b, jnp.zeros((lower + 1, b.shape[1]), b.dtype)])
    rhs_window, rhs_rest = rhs[: lower + 1], rhs[lower + 1 :]
    positions = np.arange(lower + 1)

    def eliminate(carry, incoming_row):
        window, rhs_window, singular = carry
        pivot = jnp.argmax(jnp.abs(window[:, 0]))
        swap = jnp.where(positions == 0, pivot, jnp.where(positions == pivot, 0, positions))
        window, rhs_window = window[swap], rhs_window[swap]
        singular = singular | (window[0, 0] == 0)
        factors = window[1:, 0] / window[0, 0]
        rest = window[1:] - factors[:, None] * window[0]
        rest_rhs = rhs_window[1:] - factors[:, None] * rhs_window[0]
        shifted = jnp.concatenate([rest[:, 1:], jnp.zeros((lower, 1), rest.dtype)], axis=1)
        new_window = jnp.concatenate([shifted, incoming_row[0][None]])
        new_rhs = jnp.concatenate([rest_rhs, incoming_row[1][None]])
        return (new_window, new_rhs, singular), (window[0], rhs_window[0])

    (_, _, singular), (u_rows, y) = lax.scan(
        eliminate,
        (window, rhs_window, jnp.zeros((), bool)),
        (incoming[:n], rhs_rest[:n]),
    )

    def substitute(solved, step):
        u_row, y_row = step
        x = (y_row - u_row[1:] @ solved) / u_row[0]
        return jnp.concatenate([x[None], solved[:-1]]), x

    _, x = lax.scan(
        substitute, jnp.zeros((width - 1, b.shape[1]), b.dtype), (u_rows, y), reverse=True
    )
    return jnp.where(singular, jnp.nan, x)


#: Systems of this many rows or more are solved by LAPACK on CPU. Below it the callback's
#: fixed cost exceeds the whole scan, and a vmapped scan shares its per-row overhead
#: among the systems of a batch (the crossover is measured in benchmarks/README.md).
_LAPACK_FROM = 512


def _lapack_solve(
    data: Array, b: Array, offsets: tuple[int, ...], n: int, lower: int, upper: int
) -> Array:
    """Solves ``A x = b`` (``b`` of shape ``(n, k)``) with LAPACK's ``gbsv`` on the host.

    The ``lax.scan`` LU pays XLA CPU's loop overhead on every row, several times the
    arithmetic of a narrow band; ``gbsv`` is the same algorithm, in one call. JAX copies
    a callback's operands, so the callback gets ``data`` as it is and lays out LAPACK's
    band storage itself; ``b`` goes transposed, so that LAPACK's column-major operand is a
    view of it.
    """
    x = jax.pure_callback(
        partial(_gbsv_on_host, offsets=offsets, lower=lower, upper=upper),
        jax.ShapeDtypeStruct(b.shape[::-1], b.dtype),
        data,
        b.T,
        vmap_method="broadcast_all",
    )
    return jnp.swapaxes(x, -1, -2)


def _gbsv_on_host(
    data: Any, rhs: Any, *, offsets: tuple[int, ...], lower: int, upper: int
) -> np.ndarray:
    """``x.T`` for each system of a batch: ``data`` ``(..., n_diags, n)`` and ``rhs``
    ``(..., k, n)``, the right-hand sides transposed. A singular system's solution is NaN."""
    data = np.asarray(data)
    x = np.array(rhs)  # solved in place: x[index].T is the column-major (n, k) operand
    n = x.shape[-1]
    (gbsv,) = get_lapack_funcs(("gbsv",), (data, x))
    rows = np.array([lower + upper - offset for offset in offsets])
    # gbsv's band storage: ab[lower + upper + i - j, j] = A[i, j], so diagonal k sits in
    # row lower + upper - k; the first ``lower`` rows are room for the fill-in. Built
    # transposed (rows of a column-major ab are strided), for the whole batch at once.
    bands = np.zeros((*x.shape[:-2], n, 2 * lower + upper + 1), data.dtype)
    inside = in_bounds(offsets, (n, n), host=True)  # padding slots hold anything
    bands[..., rows] = np.swapaxes(np.where(inside, data, 0), -1, -2)
    for index in np.ndindex(*x.shape[:-2]):
        *_, info = gbsv(
            lower, upper, bands[index].T, x[index].T, overwrite_ab=True, overwrite_b=True
        )
        if info > 0:
            x[index] = np.nan
    return x


def _tridiagonal_solve(data: Array, b: Array, offsets: tuple[int, ...], n: int) -> Array:
    def diagonal(offset):
        if offset not in offsets:
            return jnp.zeros((n,), data.dtype)
        values = data[offsets.index(offset)]
        start, stop = diagonal_bounds(offset, (n, n))
        # lax's layout: dl[i] = A[i, i - 1] (dl[0] = 0), du[i] = A[i, i + 1] (du[-1] = 0).
        return _pad_last(values[start:stop], start - offset, n - (stop - offset))

    return lax.linalg.tridiagonal_solve(diagonal(-1), diagonal(0), diagonal(1), b)


def _solve_one(data: Array, b: Array, offsets: tuple[int, ...], n: int, lapack: bool) -> Array:
    """One system: ``data`` ``(n_diags, n)``, ``b`` ``(n, k)``; ``lapack``: solve with
    LAPACK on CPU."""
    if set(offsets) <= {-1, 0, 1}:
        # tridiagonal_solve has its own JVP, transpose and batching rules.
        return _tridiagonal_solve(data, b, offsets, n)
    lower, upper = max(0, -offsets[0]), max(0, offsets[-1])
    transposed, transposed_offsets = _transposed(data, offsets, n)

    def matvec(x):
        return spmm(data, x, offsets=offsets, shape=(n, n))

    def banded_solve(data, offsets, lower, upper, rhs):
        def scan(rhs):
            return _banded_lu_solve(data, rhs, offsets, n, lower, upper)

        if not lapack:
            return scan(rhs)

        def lapack_solve(rhs):
            return _lapack_solve(data, rhs, offsets, n, lower, upper)

        return lax.platform_dependent(rhs, cpu=lapack_solve, default=scan)

    def solve(_, rhs):
        return banded_solve(data, offsets, lower, upper, rhs)

    def transpose_solve(_, rhs):
        return banded_solve(transposed, transposed_offsets, upper, lower, rhs)

    # Implicit differentiation: gradients come from A's products, not through the LU.
    return lax.custom_linear_solve(matvec, b, solve, transpose_solve)


def solve_banded(A: DiaParts, b: Any) -> Array:
    """Solves ``A @ x == b`` for a square ``A`` (see :func:`jaxdia.solve_banded`)."""
    n = A.shape[0]
    b = integers_as(as_array(b, "solve_banded: b"), A.dtype)
    if b.ndim == 0 or b.shape[-2 if b.ndim > 1 else 0] != n:
        raise ValueError(
            f"solve_banded: b must have shape ({n},) or (..., {n}, k) for A of shape "
            f"{A.shape}, got shape {b.shape}"
        )
    batch = broadcast_batch("solve_banded: A and b", A.batch_shape, b.shape[:-2])
    dtype = jnp.result_type(A.data, b)  # arrays: a NumPy float64 b is no explicit request
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = jnp.result_type(float)
    return _solve(
        A.data, b, offsets=A.offsets, batch=batch, dtype=np.dtype(dtype), lapack=n >= _LAPACK_FROM
    )


@partial(jax.jit, static_argnames=("offsets", "batch", "dtype", "lapack"))
@on_auto_axes(last=False)
def _solve(
    data: Array,
    b: Array,
    *,
    offsets: tuple[int, ...],
    batch: tuple[int, ...],
    dtype: np.dtype,
    lapack: bool,
) -> Array:
    """:func:`solve_banded` for checked operands, as one compiled call.

    Eagerly, the casts and reshapes around the solve would run op by op, and
    ``lax.scan`` and ``custom_linear_solve`` would be traced again on every call. Systems
    are stacked on one batch axis for the solve.
    """
    n = data.shape[-1]
    work = np.dtype(np.float32) if dtype.itemsize == 2 else dtype
    vector = b.ndim == 1
    data, b = data.astype(work), b.astype(work)
    if vector:
        b = b[:, None]
    size = math.prod(batch)
    data = jnp.broadcast_to(data, (*batch, *data.shape[-2:])).reshape(size, *data.shape[-2:])
    b = jnp.broadcast_to(b, (*batch, *b.shape[-2:])).reshape(size, *b.shape[-2:])
    if n == 0 or not offsets:
        # Empty systems are solved; a matrix with no stored diagonal is singular.
        x = jnp.full(b.shape, jnp.nan if n else 0, work)
    else:
        x = jax.vmap(lambda d, rhs: _solve_one(d, rhs, offsets, n, lapack))(data, b)
    x = x.reshape(*batch, *x.shape[-2:]).astype(dtype)
    return x[..., 0] if vector else x
