"""The construction operations on the host, for concrete matrices: NumPy instead of a
compiled program per structure.

Every structure (offsets, shape) of an intermediate is a new XLA program for the jitted
operations of :mod:`jaxdia._ops` and :mod:`jaxdia._products`, so building an operator
eagerly from ``kron``, sums and products (a spin chain's Hamiltonian) compiled once per
intermediate. When every operand is concrete, unbatched, of a 32- or 64-bit float or
complex dtype and (for JAX arrays) on one CPU device, the same formulas run here in NumPy
and the result is transferred once; tracers (``jit``, ``vmap``, ``grad``), batches,
16-bit floats and accelerator arrays take the compiled path as before.

Each function mirrors its compiled counterpart formula for formula, so the offsets,
dtype and in-bounds values are the same; the exceptions are the rounding of products
that XLA CPU contracts into fused multiply-adds (the sums of products of ``A @ B``, and
complex products), which agree to rounding, and subnormal numbers, which XLA CPU flushes
to zero in arithmetic and NumPy keeps (``tests/test_host.py``).
"""

from __future__ import annotations

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ._geometry import diagonal_bounds, in_bounds, slot_indices
from ._parts import DiaParts
from ._typing import ArrayLike

#: The dtypes computed on the host (16-bit floats compile: XLA's rounding of their
#: arithmetic need not be NumPy's).
HOST_DTYPES = frozenset(map(np.dtype, (np.float32, np.float64, np.complex64, np.complex128)))


def _on_host(value: object) -> bool:
    """Whether ``value`` (an operand's data, a scalar or a dense array) can be read on the
    host as it is: NumPy values and Python numbers, or a concrete JAX array on one CPU
    device."""
    if isinstance(value, (int, float, complex, np.ndarray, np.generic)):
        return True
    if isinstance(value, jax.core.Tracer) or not isinstance(value, jax.Array):
        return False
    if not value.is_fully_addressable or len(value.devices()) != 1:
        return False
    return next(iter(value.devices())).platform == "cpu"


def concrete(*operands: object) -> bool:
    """Whether an operation on ``operands`` (``DiaParts``, scalars, dense arrays) runs
    here: every one on the host (see the module's docstring), matrices unbatched and of a
    dtype in ``HOST_DTYPES``."""
    for operand in operands:
        if isinstance(operand, DiaParts):
            if operand.batch_shape or operand.dtype not in HOST_DTYPES:
                return False
            operand = operand.data
        if not _on_host(operand):
            return False
    return True


def _device(like: tuple[DiaParts, ...], data: np.ndarray) -> jax.Array:
    """``data`` transferred to the device of the first committed operand (where JAX
    would have computed the result), else to the default device."""
    for parts in like:
        if isinstance(parts.data, jax.Array) and parts.data.committed:
            return jax.device_put(data, parts.data.sharding)
    return jax.device_put(data)


def _result(like: tuple[DiaParts, ...], data: np.ndarray, offsets, shape) -> DiaParts:
    return DiaParts(_device(like, data), tuple(int(k) for k in offsets), shape)


def _filled(A: DiaParts) -> np.ndarray:
    """A's data with zeros in its padding slots (``_ops._filled``)."""
    return np.where(in_bounds(A.offsets, A.shape, host=True), np.asarray(A.data), 0)


def _rows_on(data: np.ndarray, offsets: tuple[int, ...], wanted: tuple[int, ...]) -> np.ndarray:
    """``data``'s rows for the offsets ``wanted``, zero rows for offsets not stored
    (``_ops._data_on``)."""
    if offsets == wanted:
        return data
    row = {k: i for i, k in enumerate(offsets)}
    out = np.zeros((len(wanted), data.shape[-1]), data.dtype)
    for i, k in enumerate(wanted):
        if k in row:
            out[i] = data[row[k]]
    return out


def _promoted(A: DiaParts, B: DiaParts) -> np.dtype:
    """``jnp.result_type`` of two matrices of the host's dtypes (NumPy's promotion is the
    same among them, and cheaper)."""
    return np.result_type(A.dtype, B.dtype)


def host_add(A: DiaParts, B: DiaParts, sign_a: int, sign_b: int) -> DiaParts:
    """``sign_a * A + sign_b * B`` (``_ops._add_dia``)."""
    offsets = tuple(sorted(set(A.offsets) | set(B.offsets)))
    dtype = _promoted(A, B)
    a = _rows_on(np.asarray(A.data), A.offsets, offsets).astype(dtype)
    b = _rows_on(np.asarray(B.data), B.offsets, offsets).astype(dtype)
    with np.errstate(all="ignore"):  # padding may hold anything
        data = sign_a * a + sign_b * b
    return _result((A, B), data, offsets, A.shape)


def host_negative(A: DiaParts) -> DiaParts:
    return _result((A,), -np.asarray(A.data), A.offsets, A.shape)


def host_scaled(A: DiaParts, s: ArrayLike) -> DiaParts:
    """``s * A`` for a scalar ``s`` (``_ops._with_scalar``; division is left to XLA, whose
    quotients need not be NumPy's correctly rounded ones)."""
    dtype = jnp.result_type(A.dtype, s)
    with np.errstate(all="ignore"):  # as XLA: inf and NaN results, no warnings
        data = _filled(A).astype(dtype) * np.asarray(s).astype(dtype)
    return _result((A,), data, A.offsets, A.shape)


def host_multiply(A: DiaParts, B: DiaParts) -> DiaParts:
    """The elementwise product on the diagonals both store (``_ops._multiply_dia``)."""
    offsets = tuple(k for k in A.offsets if k in set(B.offsets))
    dtype = _promoted(A, B)
    a = _rows_on(_filled(A), A.offsets, offsets).astype(dtype)
    b = _rows_on(_filled(B), B.offsets, offsets).astype(dtype)
    with np.errstate(all="ignore"):
        data = a * b
    return _result((A, B), data, offsets, A.shape)


def host_transpose(A: DiaParts) -> DiaParts:
    """``A.T`` (``_ops.transpose``): offsets negate, each diagonal's slots shift."""
    m, n = A.shape
    offsets = tuple(-k for k in reversed(A.offsets))
    data = np.asarray(A.data)
    out = np.zeros((len(offsets), m), A.dtype)
    for row, k in enumerate(reversed(range(A.n_diags))):
        start, stop = diagonal_bounds(A.offsets[k], A.shape)
        if stop > start:
            shift = start - A.offsets[k]
            out[row, shift : shift + stop - start] = data[k, start:stop]
    return _result((A,), out, offsets, (n, m))


def kron_offsets(A: DiaParts, B: DiaParts) -> np.ndarray:
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


def host_kron(A: DiaParts, B: DiaParts) -> DiaParts:
    """``A ⊗ B`` (``_ops.kronecker``)."""
    (ma, na), (mb, nb) = A.shape, B.shape
    shape = (ma * mb, na * nb)
    dtype = _promoted(A, B)
    offsets = kron_offsets(A, B)
    a, b = _filled(A).astype(dtype), _filled(B).astype(dtype)
    inside_a = in_bounds(A.offsets, A.shape, host=True)
    inside_b = in_bounds(B.offsets, B.shape, host=True)
    data = np.zeros((len(offsets), shape[1]), dtype)
    if mb == nb:
        pairs = sorted(
            (offset_a * nb + offset_b, i, k)
            for i, offset_a in enumerate(A.offsets)
            for k, offset_b in enumerate(B.offsets)
        )
        pick_a, pick_b = (np.array([p[side] for p in pairs], np.intp) for side in (1, 2))
        inside = inside_a[pick_a, :, None] & inside_b[pick_b, None, :]
        with np.errstate(all="ignore"):
            outer = np.where(inside, a[pick_a, :, None] * b[pick_b, None, :], 0)
        outer = outer.reshape(len(pairs), na * nb)
        if len(offsets) == len(pairs):
            return _result((A, B), outer, offsets, shape)
        np.add.at(data, np.searchsorted(offsets, [p[0] for p in pairs]), outer)
        return _result((A, B), data, offsets, shape)
    slots_a = slot_indices(A.offsets, A.shape, host=True)
    rows_a, cols_a, inside_a = (x[:, :, None, None] for x in slots_a)
    rows_b, cols_b, inside_b = slot_indices(B.offsets, B.shape, host=True)
    rows = rows_a.astype(np.int64) * mb + rows_b
    cols = cols_a.astype(np.int64) * nb + cols_b
    valid = np.broadcast_to(inside_a & inside_b, rows.shape)
    which = np.searchsorted(offsets, (cols - rows)[valid])
    with np.errstate(all="ignore"):
        values = a[:, :, None, None] * b[None, None, :, :]
    data[which, np.broadcast_to(cols, rows.shape)[valid]] = values[valid]
    return _result((A, B), data, offsets, shape)


def host_matmul(A: DiaParts, B: DiaParts) -> DiaParts:
    """``A @ B`` of two DIA matrices (``_products.dia_dia_product``): diagonal ``a`` of A
    times diagonal ``b`` of B lands on ``c = a + b``, each diagonal's terms added in
    the compiled path's order."""
    (m, n), p = A.shape, B.shape[1]
    dtype = _promoted(A, B)
    a, b = np.asarray(A.data).astype(dtype), np.asarray(B.data).astype(dtype)
    terms: dict[int, list[np.ndarray]] = {}
    with np.errstate(all="ignore"):
        for ib, offset_b in enumerate(B.offsets):
            for ia, offset_a in enumerate(A.offsets):
                c = offset_a + offset_b
                low, high = max(0, c, offset_b), min(p, m + c, n + offset_b)
                if low < high:
                    row = np.zeros(p, dtype)
                    row[low:high] = a[ia, low - offset_b : high - offset_b] * b[ib, low:high]
                    terms.setdefault(c, []).append(row)
        offsets = tuple(sorted(terms))
        rows = [sum(terms[c][1:], terms[c][0]) for c in offsets]
    data = np.stack(rows) if rows else np.zeros((0, p), dtype)
    return _result((A, B), data, offsets, (m, p))


def host_dense_to_dia(
    dense: np.ndarray, offsets: tuple[int, ...], shape: tuple[int, int]
) -> np.ndarray:
    """DIA ``data`` holding the diagonals ``offsets`` of a dense ``(m, n)`` array
    (``_convert.dense_to_dia``), on the host."""
    rows, cols, inside = slot_indices(offsets, shape, host=True)
    rows = np.clip(rows, 0, max(shape[0] - 1, 0))
    if not dense.size:
        return np.zeros((len(offsets), shape[1]), dense.dtype)
    return np.where(inside, dense[rows, cols], 0).astype(dense.dtype)
