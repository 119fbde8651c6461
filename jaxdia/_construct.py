"""Constructors with SciPy's semantics: :func:`diags` and :func:`eye`."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from ._dtypes import check_dtype, is_int, native
from ._matrix import DiaMatrix, as_offsets, as_shape


def _default_dtype(dtype: Any) -> np.dtype:
    """Integer/bool inputs become JAX's default float dtype (a DiaMatrix is inexact)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_ or np.issubdtype(dtype, np.integer):
        return np.dtype(jnp.result_type(float))
    return dtype


def diags(diagonals: Any, offsets: Any = 0, shape: Any = None, dtype: Any = None) -> DiaMatrix:
    """A DiaMatrix from unpadded diagonals, like ``scipy.sparse.diags_array``.

    Each ``diagonals[i]`` holds the elements of diagonal ``offsets[i]`` from its first
    element on (no padding); a length-1 diagonal is broadcast along the whole diagonal,
    and longer ones are truncated. Diagonals may be JAX arrays (under ``jit`` too: the
    offsets and shape must be static).

    Args:
      diagonals: a sequence of 1-D array-likes, or a single one when ``offsets`` is an int.
      offsets: an int or a sequence of distinct ints.
      shape: ``(m, n)``; if None, the square matrix just large enough for the first
        diagonal (``len(diagonals[0]) + abs(offsets[0])``).
      dtype: the result's dtype. If None, the diagonals' result type, except that integer
        and bool inputs give JAX's default float dtype (SciPy would keep the integer type;
        a DiaMatrix holds floating or complex values only).

    Raises:
      ValueError: as SciPy does: different numbers of diagonals and offsets, an offset
        out of bounds, a diagonal shorter than its place (and not of length 1), or
        duplicate offsets.

    Example:
      >>> import jaxdia
      >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
      >>> A.todense()
      Array([[-2.,  1.,  0.],
             [ 1., -2.,  1.],
             [ 0.,  1., -2.]], dtype=float32)
    """
    scalar_offset = np.ndim(offsets) == 0 and not isinstance(offsets, (list, tuple))
    if scalar_offset:
        if len(diagonals) == 0 or np.ndim(diagonals[0]) == 0:
            diagonals = [diagonals]
        else:
            raise ValueError("Different number of diagonals and offsets.")
    offsets = as_offsets(offsets)
    diagonals = [
        jnp.atleast_1d(jnp.asarray(native(d) if isinstance(d, np.ndarray) else d))
        for d in diagonals
    ]
    if len(diagonals) != len(offsets):
        raise ValueError("Different number of diagonals and offsets.")
    if any(d.ndim != 1 for d in diagonals):
        raise ValueError(f"each diagonal must be 1-D, got shapes {[d.shape for d in diagonals]}")
    if shape is None:
        size = diagonals[0].shape[0] + abs(offsets[0])
        shape = (size, size)
    m, n = as_shape(shape)
    if dtype is None:
        dtype = _default_dtype(jnp.result_type(*diagonals)) if diagonals else jnp.result_type(float)
    dtype = check_dtype(dtype, "dtype")
    rows = []
    for index, (diagonal, offset) in enumerate(zip(diagonals, offsets)):
        start = max(0, offset)
        length = min(m + offset, n - offset, min(m, n))
        if length < 0:
            raise ValueError(f"Offset {offset} (index {index}) out of bounds")
        size = diagonal.shape[0]
        if size < length and size != 1:
            raise ValueError(
                f"Diagonal length (index {index}: {size} at offset {offset}) does not agree "
                f"with array size ({m}, {n})."
            )
        values = jnp.broadcast_to(diagonal[:length], (length,)).astype(dtype)
        rows.append(jnp.pad(values, (start, n - start - length)))
    data = jnp.stack(rows) if rows else jnp.zeros((0, n), dtype)
    return DiaMatrix(data, offsets, (m, n))


def eye(m: int, n: int | None = None, k: int = 0, dtype: Any = None) -> DiaMatrix:
    """The ``(m, n)`` matrix with ones on diagonal ``k``, like ``scipy.sparse.eye_array``.

    As in SciPy, ``k`` may lie just outside the matrix (``k == n`` or ``k == -m``: no
    stored diagonal), and farther out raises ValueError. ``dtype`` defaults to JAX's
    default float dtype (float32 unless x64 is on; SciPy's default is float64).

    Example:
      >>> import jaxdia
      >>> jaxdia.eye(2, 3, k=1).todense()
      Array([[0., 1., 0.],
             [0., 0., 1.]], dtype=float32)
    """
    if not is_int(k):
        raise TypeError(f"k must be an int, got {type(k).__name__}: {k!r}")
    dtype = jnp.result_type(float) if dtype is None else dtype
    return diags([jnp.ones(1, check_dtype(dtype, "dtype"))], [k], (m, m if n is None else n))
