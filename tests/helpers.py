"""Shared test helpers: tolerances per dtype and oracle comparisons."""

import numpy as np
import scipy.sparse as sp
from hypothesis import settings

import jaxdia

#: The loaded Hypothesis profile's examples against the ``ci`` profile's 20 (``full``: 5x,
#: ``dev``: 7.5x): tests that set their own count scale it with :func:`examples`.
_EXAMPLE_SCALE = settings().max_examples / 20


def examples(count: int) -> int:
    """``count`` examples under the ``ci`` profile, scaled for ``full`` and ``dev``."""
    return max(count, round(count * _EXAMPLE_SCALE))


# Relative tolerances per dtype (scaled by the size of the sums involved).
TOLERANCES = {
    np.dtype(np.float16): 2e-2,
    np.dtype("bfloat16"): 5e-2,
    np.dtype(np.float32): 1e-5,
    np.dtype(np.complex64): 1e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex128): 1e-12,
}


def tolerance(dtype) -> float:
    return TOLERANCES[np.dtype(dtype)]


def to_scipy_f64(A: jaxdia.DiaMatrix) -> sp.dia_array:
    """The SciPy oracle of one matrix in double precision (complex if A is)."""
    wide = np.complex128 if A.dtype.kind == "c" else np.float64
    return sp.dia_array((np.asarray(A.data).astype(wide), A.offsets), shape=A.shape)


def dense_f64(A: jaxdia.DiaMatrix) -> np.ndarray:
    """The dense oracle of a (possibly batched) matrix, built with NumPy only."""
    wide = np.complex128 if A.dtype.kind == "c" else np.float64
    data = np.asarray(A.data).astype(wide)
    m, n = A.shape
    dense = np.zeros((*A.batch_shape, m, n), wide)
    for k, offset in enumerate(A.offsets):
        for j in range(max(0, offset), min(n, m + offset)):
            dense[..., j - offset, j] = data[..., k, j]
    return dense


def assert_close(actual, expected, dtype, scale=1.0):
    """``actual`` ~ ``expected`` within the dtype's tolerance times ``scale``."""
    actual = np.asarray(actual).astype(np.complex128)
    expected = np.asarray(expected).astype(np.complex128)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    tol = tolerance(dtype) * scale
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


def wide(array) -> np.ndarray:
    """``array`` in double precision (complex128 if it is complex)."""
    array = np.asarray(array)
    return array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)


def spmm_oracle(data, x, offsets, shape, transpose):
    """``A @ x`` (or ``A^T @ x``) by SciPy, matrix by matrix over the broadcast batch.

    Works in double precision on a copy of ``data`` whose NaN padding is zeroed. Returns
    the product and the same product of absolute values (the scale of rounding errors).
    """
    data, x = wide(data), wide(x)
    batch = np.broadcast_shapes(data.shape[:-2], x.shape[:-2])
    data = np.broadcast_to(data, (*batch, *data.shape[-2:]))
    x = np.broadcast_to(x, (*batch, *x.shape[-2:]))
    out_rows = shape[1] if transpose else shape[0]
    y = np.zeros((*batch, out_rows, x.shape[-1]), data.dtype)
    scale = np.zeros(y.shape)
    for b in np.ndindex(*batch):
        clean = np.nan_to_num(data[b], nan=0.0)
        A = sp.dia_array((clean, np.array(offsets, dtype=np.int64)), shape=shape).tocsr()
        if transpose:
            A = A.T
        y[b] = A @ x[b]
        scale[b] = abs(A) @ np.abs(x[b])
    return y, scale
