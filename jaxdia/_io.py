"""``save_npz`` / ``load_npz``: SciPy's ``.npz`` layout for DIA matrices.

The file holds the arrays ``format`` (``b"dia"``), ``shape``, ``data``, ``offsets`` and
``_is_array``, exactly as ``scipy.sparse.save_npz`` writes a ``dia_array``, so files
move both ways between jaxdia and SciPy. Nothing is pickled.
"""

from __future__ import annotations

import zipfile
import zlib
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ._checks import check_dtype, warn_if_unavailable
from ._matrix import DiaMatrix, as_matrix

_KEYS = ("format", "shape", "data", "offsets")
_CORRUPT = (ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def save_npz(file: Any, matrix: DiaMatrix, compressed: bool = True) -> None:
    """Saves a DiaMatrix to ``.npz`` as ``scipy.sparse.save_npz`` saves a ``dia_array``.

    ``scipy.sparse.load_npz`` reads the file back as a ``dia_array`` with the same
    offsets and data. SciPy has no 16-bit floats: bfloat16 and float16 matrices are
    saved as float32.

    Args:
      file: a file name (``.npz`` is appended if missing, as NumPy does) or an open
        binary file.
      matrix: the DiaMatrix to save; a single, concrete matrix (no batch dims).
      compressed: whether to compress the file (``np.savez_compressed``).

    Raises:
      TypeError: if ``matrix`` is not a DiaMatrix.
      ValueError: if it is batched or traced.

    Example:
      >>> import io, jaxdia
      >>> buffer = io.BytesIO()
      >>> jaxdia.save_npz(buffer, jaxdia.eye(3, k=1))
      >>> _ = buffer.seek(0)
      >>> jaxdia.load_npz(buffer)
      DiaMatrix(shape=(3, 3), dtype=float32, offsets=(1,))
    """
    as_matrix(matrix, "save_npz: matrix")
    if matrix.batch_shape:
        raise ValueError(
            f"save_npz saves one matrix; this one has batch shape {matrix.batch_shape}. "
            "Save each matrix, e.g. DiaMatrix(A.data[i], A.offsets, A.shape)."
        )
    if isinstance(matrix.data, jax.core.Tracer):
        raise ValueError(
            "save_npz needs concrete data; under jit/vmap/grad the matrix is traced. "
            "Return it from the transformation and save it outside."
        )
    scipy_matrix = matrix.to_scipy()
    arrays = {
        "offsets": scipy_matrix.offsets,
        "format": np.array(b"dia"),
        "shape": np.array(matrix.shape),
        "data": scipy_matrix.data,
        "_is_array": np.array(True),
    }
    (np.savez_compressed if compressed else np.savez)(file, **arrays)


def load_npz(file: Any, dtype: Any = None) -> DiaMatrix:
    """Loads a DIA matrix saved by :func:`save_npz` or ``scipy.sparse.save_npz``.

    Files of ``dia_array`` and ``dia_matrix`` both load. Files of other formats (CSR,
    COO, ...) are refused rather than converted, since their DIA form may hold up to
    ``m + n - 1`` diagonals; convert such a file explicitly with
    ``DiaMatrix.from_scipy(scipy.sparse.load_npz(file))``.

    Args:
      file: a file name or an open binary file.
      dtype: the dtype of the result. If None, the file's dtype, except that integer
        and bool data become JAX's default float dtype (a DiaMatrix holds floating or
        complex values only), and float64 becomes float32 unless x64 is on.

    Returns:
      The DiaMatrix (canonical: offsets sorted, offsets outside the matrix dropped).

    Raises:
      ValueError: if the file is not an ``.npz`` archive, lacks a key, holds another
        sparse format, or holds malformed arrays (including pickled objects, which are
        never loaded).
      TypeError: if the data or ``dtype`` is not a type a DiaMatrix can hold, or
        ``dtype`` is real and the file's data complex.
      OSError: if the file does not exist or cannot be read (from ``np.load``).

    Example:
      >>> import io
      >>> import jaxdia
      >>> buffer = io.BytesIO()
      >>> jaxdia.save_npz(buffer, jaxdia.eye(3, k=1))
      >>> _ = buffer.seek(0)
      >>> A = jaxdia.load_npz(buffer)
      >>> A.shape, A.offsets, A.dtype
      ((3, 3), (1,), dtype('float32'))
    """
    try:
        archive = np.load(file, allow_pickle=False)
    except _CORRUPT as error:  # ValueError: np.load's "Cannot load ... pickled data"
        raise ValueError(f"load_npz: {file!r} is not a valid .npz file ({error})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"load_npz: {file!r} holds a single .npy array, not an .npz archive")
    with archive:
        missing = [key for key in _KEYS if key not in archive.files]
        if "format" in missing:
            raise ValueError(
                f"load_npz: {file!r} does not hold a sparse matrix (no 'format' key; it has "
                f"{sorted(archive.files)})"
            )
        try:
            arrays = {key: archive[key] for key in _KEYS if key not in missing}
        except _CORRUPT as error:  # ValueError: object arrays need pickle, never allowed
            raise ValueError(f"load_npz: {file!r} holds a malformed array ({error})") from None
    sparse_format = arrays["format"]
    if sparse_format.shape != () or sparse_format.dtype.kind not in "SU":
        raise ValueError(
            f"load_npz: the 'format' entry must be a string, got {sparse_format.dtype} "
            f"of shape {sparse_format.shape}"
        )
    sparse_format = sparse_format.item()
    if isinstance(sparse_format, bytes):
        sparse_format = sparse_format.decode("ascii", errors="replace")
    if sparse_format != "dia":
        raise ValueError(
            f"load_npz: {file!r} holds a {sparse_format!r} matrix, not 'dia'. Convert it "
            "explicitly: jaxdia.DiaMatrix.from_scipy(scipy.sparse.load_npz(file))"
        )
    if missing:
        raise ValueError(f"load_npz: {file!r} lacks the DIA key(s) {missing}")
    shape, data, offsets = arrays["shape"], arrays["data"], arrays["offsets"]
    if shape.shape != (2,) or shape.dtype.kind not in "iu" or np.any(shape < 0):
        raise ValueError(f"load_npz: 'shape' must be two non-negative ints, got {shape!r}")
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu":
        raise ValueError(
            f"load_npz: 'offsets' must be a 1-D integer array, got dtype {offsets.dtype} "
            f"and shape {offsets.shape}"
        )
    if data.ndim != 2 or data.shape[0] != offsets.shape[0]:
        raise ValueError(
            f"load_npz: 'data' must have shape (len(offsets), width) = ({offsets.shape[0]}, "
            f"width), got {data.shape}"
        )
    if dtype is None and (data.dtype == np.bool_ or data.dtype.kind in "iu"):
        dtype = jnp.result_type(float)
    elif dtype is not None:
        dtype = check_dtype(dtype, "dtype")
        warn_if_unavailable(dtype, "load_npz")
    if dtype is not None:
        if data.dtype.kind == "c" and dtype.kind != "c":
            raise TypeError(
                f"load_npz: the file holds complex data ({data.dtype}); dtype={dtype} would "
                "discard the imaginary part. Load it as complex and take A.real or A.imag."
            )
        data = data.astype(dtype)
    return DiaMatrix(data, offsets, tuple(int(s) for s in shape))
