"""Shared test helpers: tolerances per dtype and oracle comparisons."""

import numpy as np
import scipy.sparse as sp

import jaxdia

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
