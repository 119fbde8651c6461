"""Constructors with SciPy's semantics: :func:`diags`, :func:`eye` and :func:`kron`."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, TypeGuard, cast

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import Array

from . import _host, _ops
from ._checks import (
    as_array,
    as_offsets,
    as_shape,
    check_distinct,
    check_dtype,
    is_scipy_sparse,
    narrow,
    static_int,
    warn_if_unavailable,
)
from ._geometry import placed_rows
from ._matrix import DiaMatrix, as_matrix
from ._typing import ArrayLike, DTypeLike, Offsets, Shape, Values

if TYPE_CHECKING:
    import scipy.sparse as sp


def _default_dtype(dtype: DTypeLike) -> np.dtype:
    """Integer/bool inputs become JAX's default float dtype (a DiaMatrix is inexact)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_ or np.issubdtype(dtype, np.integer):
        return np.dtype(jnp.result_type(float))
    return dtype


def diags(
    diagonals: Sequence[ArrayLike] | ArrayLike,
    offsets: Offsets = 0,
    shape: Shape | None = None,
    dtype: DTypeLike | None = None,
    *,
    format: str | None = None,
) -> DiaMatrix:
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
      format: None or ``"dia"``, accepted so that SciPy calls port unchanged; other
        formats raise ValueError.

    Raises:
      ValueError: as SciPy does: different numbers of diagonals and offsets, an offset
        out of bounds, a diagonal shorter than its place (and not of length 1), or
        duplicate offsets; a diagonal that is not 1-D.
      TypeError: a diagonal that is not numeric.

    Example:
      >>> import jaxdia
      >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
      >>> A.todense()
      Array([[-2.,  1.,  0.],
             [ 1., -2.,  1.],
             [ 0.,  1., -2.]], dtype=float32)
    """
    _check_format(format, "diags")
    scalar_offset = not isinstance(offsets, (list, tuple)) and np.ndim(offsets) == 0
    listed = cast(Sequence[ArrayLike], diagonals)
    if scalar_offset:  # one diagonal, or a sequence holding one
        if len(listed) == 0 or np.ndim(listed[0]) == 0:
            listed = [cast(ArrayLike, diagonals)]
        else:
            raise ValueError("Different number of diagonals and offsets.")
    offsets = as_offsets(offsets)
    # Python scalars are weakly typed, as in JAX: [2.0] next to a float16 diagonal stays
    # float16.
    weak = [d if isinstance(d, (int, float, complex)) else None for d in listed]
    # NumPy input keeps its precision as far as JAX allows (Python values take JAX's default)
    given_arrays = [d for d in listed if isinstance(d, (np.ndarray, np.generic))]
    diagonals = [_as_diagonal(d, i) for i, d in enumerate(listed)]
    if len(diagonals) != len(offsets):
        raise ValueError("Different number of diagonals and offsets.")
    check_distinct(offsets)
    if shape is None:
        size = diagonals[0].shape[0] + abs(offsets[0])
        shape = (size, size)
    m, n = as_shape(shape)
    if dtype is not None:
        warn_if_unavailable(check_dtype(dtype, "dtype"), "diags")
    elif diagonals:
        if given_arrays:  # NumPy float64 diagonals become float32 without x64: say so, once
            narrow(np.empty(0, np.result_type(*given_arrays)), "diags")
        dtype = _default_dtype(
            jnp.result_type(*(w if w is not None else d for w, d in zip(weak, diagonals)))
        )
    else:
        dtype = jnp.result_type(float)
    dtype = check_dtype(dtype, "dtype")
    layout = []  # (offset, index into diagonals, first column, length) of stored diagonals
    for index, (diagonal, offset) in enumerate(zip(diagonals, offsets)):
        length = min(m + offset, n - offset, min(m, n))
        if length < 0:
            raise ValueError(f"Offset {offset} (index {index}) out of bounds")
        size = diagonal.shape[0]
        if size < length and size != 1:
            raise ValueError(
                f"Diagonal length (index {index}: {size} at offset {offset}) does not agree "
                f"with array size ({m}, {n})."
            )
        if length:
            layout.append((offset, index, max(0, offset), length))
    layout.sort()
    kept = tuple(offset for offset, *_ in layout)
    places = tuple((index, start, length) for _, index, start, length in layout)
    if _host.concrete(*diagonals):  # built on the host and transferred once, as SciPy does
        host = [np.asarray(diagonal) for diagonal in diagonals]
        data = jax.device_put(_laid_out(host, places, n, dtype, xp=np))
    else:  # traced, or on an accelerator
        data = _device_data(diagonals, places, n, dtype)
    return DiaMatrix(data, kept, (m, n))


def _as_diagonal(diagonal: ArrayLike, index: int) -> Array | np.ndarray:
    """A 1-D diagonal: a JAX array as given, anything else as a NumPy array."""
    array = as_array(diagonal, f"diagonals[{index}]", expected="numeric")
    if array.ndim == 0:  # jnp.atleast_1d would compile a program even for 1-D arrays
        array = jnp.atleast_1d(array) if isinstance(array, jax.Array) else np.atleast_1d(array)
    if array.ndim != 1:
        raise ValueError(f"diagonals[{index}] must be 1-D, got shape {array.shape}")
    return array


def _laid_out(
    diagonals: Sequence[Values],
    places: tuple[tuple[int, int, int], ...],
    n: int,
    dtype: np.dtype,
    *,
    xp: ModuleType = jnp,
) -> Values:
    """``data`` from the diagonals: ``places`` lists ``(index, start, length)`` of each
    stored diagonal in offset order."""
    if not places:
        return xp.zeros((0, n), dtype)
    pieces = []
    for index, start, length in places:
        values = xp.broadcast_to(diagonals[index][:length], (length,))
        pieces.append((values.astype(dtype, copy=False)[None], start))
    return placed_rows(pieces, n)


#: JAX diagonals laid out by one compiled program per structure.
_device_data = jax.jit(_laid_out, static_argnums=(1, 2, 3))


def _check_format(format: str | None, function: str) -> None:
    if format not in (None, "dia"):
        raise ValueError(
            f"{function}: format={format!r}, but jaxdia builds DIA matrices only; drop "
            f"format= (a SciPy matrix in that format: A.to_scipy().asformat({format!r}))"
        )


def eye(
    m: int,
    n: int | None = None,
    k: int = 0,
    dtype: DTypeLike | None = None,
    *,
    format: str | None = None,
) -> DiaMatrix:
    """The ``(m, n)`` matrix with ones on diagonal ``k``, like ``scipy.sparse.eye_array``.

    As in SciPy, ``k`` may lie just outside the matrix (``k == n`` or ``k == -m``: no
    stored diagonal), and farther out raises ValueError. ``dtype`` defaults to JAX's
    default float dtype (float32 unless x64 is on; SciPy's default is float64).
    ``format`` may be None or ``"dia"`` (so that SciPy calls port unchanged).

    Example:
      >>> import jaxdia
      >>> jaxdia.eye(2, 3, k=1).todense()
      Array([[0., 1., 0.],
             [0., 0., 1.]], dtype=float32)
    """
    _check_format(format, "eye")
    k = static_int(k, "k")
    if dtype is None:
        dtype = jnp.result_type(float)
    else:
        dtype = check_dtype(dtype, "dtype")
        warn_if_unavailable(dtype, "eye")
    ones = np.ones(1, jax.dtypes.canonicalize_dtype(dtype))  # warned about above
    return diags([ones], [k], (m, m if n is None else n))


def kron(
    A: DiaMatrix | ArrayLike | sp.sparray | sp.spmatrix,
    B: DiaMatrix | ArrayLike | sp.sparray | sp.spmatrix,
) -> DiaMatrix:
    """The Kronecker product ``A ⊗ B`` as a DiaMatrix, like ``scipy.sparse.kron``.

    Entry ``A[i1, j1] * B[i2, j2]`` sits at row ``i1 * mB + i2`` and column
    ``j1 * nB + j2``. For a square ``B`` of size ``s`` the result offsets are
    ``a * s + b`` for the offsets ``a`` of A and ``b`` of B; a rectangular ``B`` spreads
    each pair over ``a * nB + b + i1 * (nB - mB)`` for every row ``i1`` of diagonal ``a``.
    Every stored in-bounds entry of A and B contributes (explicit zeros too), so the
    offsets are static; SciPy's result (BSR or COO) drops explicit zeros. Batch
    dimensions broadcast.

    As in SciPy, either factor may also be a scalar (``kron(2, B)`` is ``2 * B``), a 2-D
    dense array (:meth:`DiaMatrix.from_dense`: integers become JAX's default float) or a
    ``scipy.sparse`` matrix (:meth:`DiaMatrix.from_scipy`). Concrete factors are
    multiplied on the host (NumPy; see ``docs/design.md``), so that building an operator
    from a chain of products compiles nothing.

    Args:
      A: the left factor, shape ``(mA, nA)``.
      B: the right factor, shape ``(mB, nB)``.

    Returns:
      The DiaMatrix of shape ``(mA * mB, nA * nB)``.

    Raises:
      TypeError: if A or B is not a DiaMatrix, a scalar, a 2-D array or a SciPy sparse
        matrix.
      ValueError: if the batch shapes do not broadcast.

    Example:
      >>> import jaxdia
      >>> T = jaxdia.diags([1.0, 2.0, 1.0], offsets=[-1, 0, 1], shape=(3, 3))
      >>> K = jaxdia.kron(jaxdia.eye(2), T)
      >>> K.shape, K.offsets
      ((6, 6), (-1, 0, 1))
      >>> float(K.todense()[3, 2])
      0.0
      >>> jaxdia.kron(2, T).todense()[0].tolist()
      [4.0, 2.0, 0.0]
    """
    if _is_scalar(A) and not _is_scalar(B):
        return _kron_factor(B, "kron: B") * A
    if _is_scalar(B):
        return _kron_factor(A, "kron: A") * B
    left, right = _kron_factor(A, "kron: A")._parts, _kron_factor(B, "kron: B")._parts
    return DiaMatrix._wrap(_ops.kronecker(left, right))


def _is_scalar(value: object) -> TypeGuard[ArrayLike]:
    if isinstance(value, (numbers.Number, np.generic)):
        return True
    return isinstance(value, (np.ndarray, jax.Array)) and value.ndim == 0


def _kron_factor(value: DiaMatrix | ArrayLike | sp.sparray | sp.spmatrix, name: str) -> DiaMatrix:
    """A factor of :func:`kron` as a DiaMatrix: as it is, from SciPy, or from a dense 2-D
    array (a scalar is a 1 x 1 matrix)."""
    if isinstance(value, DiaMatrix):
        return as_matrix(value, name)
    if is_scipy_sparse(value):
        return DiaMatrix.from_scipy(cast("sp.sparray | sp.spmatrix", value))
    array = as_array(value, name, expected="a DiaMatrix, a scalar or a 2-D array")
    if array.ndim > 2:
        raise TypeError(
            f"{name} must be a DiaMatrix, a scalar or a 2-D array, got an array of shape "
            f"{array.shape}"
        )
    return DiaMatrix.from_dense(array.reshape((1,) * (2 - array.ndim) + array.shape))
