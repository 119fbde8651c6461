"""``save_npz`` / ``load_npz``: SciPy's ``.npz`` layout for DIA matrices.

The file holds the arrays ``format`` (``b"dia"``), ``shape``, ``data``, ``offsets`` and
``_is_array``, exactly as ``scipy.sparse.save_npz`` writes a ``dia_array``, so files
move both ways between jaxdia and SciPy. Nothing is pickled.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from typing import IO, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from ._checks import as_shape, check_dtype, is_int, narrow, warn_if_unavailable
from ._geometry import holds_entries
from ._matrix import DiaMatrix, as_matrix, host_arrays

_KEYS = ("format", "shape", "data", "offsets")
_CORRUPT = (ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def save_npz(
    file: str | os.PathLike[str] | IO[bytes], matrix: DiaMatrix, compressed: bool = True
) -> None:
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
    data, offsets = host_arrays(as_matrix(matrix, "save_npz: matrix"), "save_npz")
    arrays: dict[str, Any] = {
        "offsets": offsets,
        "format": np.array(b"dia"),
        "shape": np.array(matrix.shape),
        "data": data,
        "_is_array": np.array(True),
    }
    (np.savez_compressed if compressed else np.savez)(file, **arrays)


#: ``load_npz``'s default bound on the memory one matrix (and each array read from the
#: file) may take.
DEFAULT_MAX_BYTES = 1 << 30


def load_npz(
    file: str | os.PathLike[str] | IO[bytes],
    dtype: DTypeLike | None = None,
    *,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
) -> DiaMatrix:
    """Loads a DIA matrix saved by :func:`save_npz` or ``scipy.sparse.save_npz``.

    Files of ``dia_array`` and ``dia_matrix`` both load. Files of other formats (CSR,
    COO, ...) are refused rather than converted, since their DIA form may hold up to
    ``m + n - 1`` diagonals; convert such a file explicitly with
    ``DiaMatrix.from_scipy(scipy.sparse.load_npz(file))``.

    A file is untrusted input: nothing in it is unpickled, every array is checked, and
    the memory it may make jaxdia allocate is bounded by ``max_bytes``, checked from the
    arrays' headers before any is read. The bound matters because a ``DiaMatrix`` stores
    every diagonal at full width ``n`` where SciPy may store narrow data: a file of a few
    hundred bytes can declare a matrix of gigabytes.

    Args:
      file: a file name or an open binary file.
      dtype: the dtype of the result. If None, the file's dtype, except that integer
        and bool data become JAX's default float dtype (a DiaMatrix holds floating or
        complex values only), and float64 becomes float32 unless x64 is on (with a
        warning).
      max_bytes: the most bytes the loaded matrix, and each array in the file, may take
        (1 GiB by default); None for no bound.

    Returns:
      The DiaMatrix (canonical: offsets sorted, offsets outside the matrix dropped).

    Raises:
      ValueError: if the file is not an ``.npz`` archive, lacks a key, holds another
        sparse format, holds malformed arrays (including pickled objects, which are
        never loaded), or would take more than ``max_bytes``.
      TypeError: if ``file`` is bytes (wrap them in ``io.BytesIO``), the data or
        ``dtype`` is not a type a DiaMatrix can hold, or ``dtype`` is real and the file's
        data complex.
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
    if max_bytes is not None and (not is_int(max_bytes) or max_bytes < 0):
        raise ValueError(
            f"load_npz: max_bytes must be a non-negative int or None, got {max_bytes!r}"
        )
    if isinstance(file, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"load_npz: file must be a file name or an open binary file, got {_describe(file)}; "
            "for the contents of a file in memory, pass io.BytesIO(contents)"
        )
    name = _describe(file)
    try:
        archive = np.load(file, allow_pickle=False)
    except _CORRUPT as error:  # ValueError: np.load's "Cannot load ... pickled data"
        raise ValueError(f"load_npz: {name} is not a valid .npz file ({error})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"load_npz: {name} holds a single .npy array, not an .npz archive")
    with archive:
        missing = [key for key in _KEYS if key not in archive.files]
        if "format" in missing:
            raise ValueError(
                f"load_npz: {name} does not hold a sparse matrix (no 'format' key; it has "
                f"{sorted(archive.files)})"
            )
        arrays = {key: _read(archive, key, name, max_bytes) for key in _KEYS if key not in missing}
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
            f"load_npz: {name} holds a {sparse_format!r} matrix, not 'dia'. Convert it "
            "explicitly: jaxdia.DiaMatrix.from_scipy(scipy.sparse.load_npz(file))"
        )
    if missing:
        raise ValueError(f"load_npz: {name} lacks the DIA key(s) {missing}")
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
    if dtype is not None and data.dtype.kind == "c" and np.dtype(dtype).kind != "c":
        raise TypeError(
            f"load_npz: the file holds complex data ({data.dtype}); dtype={dtype} would "
            "discard the imaginary part. Load it as complex and take A.real or A.imag."
        )
    shape = as_shape(tuple(int(s) for s in shape))
    stored = [int(k) for k in offsets if holds_entries(int(k), shape)]
    itemsize = (data.dtype if dtype is None else np.dtype(dtype)).itemsize
    _check_size(
        len(stored) * shape[1] * itemsize,
        max_bytes,
        name,
        f"a {shape[0]} x {shape[1]} matrix of {len(stored)} diagonals of {itemsize} "
        "bytes per entry, stored at full width",
    )
    if dtype is None:
        data = narrow(data, "load_npz")
    else:  # an unavailable dtype was warned about above
        data = data.astype(jax.dtypes.canonicalize_dtype(dtype))
    return DiaMatrix(data, offsets, shape)


def _describe(file: object) -> str:
    """``file`` for an error message, short whatever it is (bytes are not repeated)."""
    if isinstance(file, (bytes, bytearray, memoryview)):
        return f"a {type(file).__name__} object of {len(file)} bytes"
    text = repr(file)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_size(size: int, max_bytes: int | None, name: str, what: str) -> None:
    if max_bytes is not None and size > max_bytes:
        raise ValueError(
            f"load_npz: {name} would need {size:,} bytes ({what}), more than "
            f"max_bytes={max_bytes:,}; pass a larger max_bytes, or max_bytes=None, to load it"
        )


def _read(archive: Any, key: str, name: str, max_bytes: int | None) -> np.ndarray:
    """Array ``key`` of the archive, after checking its header's size against the bound."""
    try:
        with archive.zip.open(f"{key}.npy") as member:
            version = np.lib.format.read_magic(member)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read_header(member)
    except (*_CORRUPT, KeyError) as error:
        raise ValueError(f"load_npz: {name} holds a malformed array, {key!r} ({error})") from None
    size = math.prod(shape) * dtype.itemsize
    _check_size(size, max_bytes, name, f"its {key!r} array of shape {shape} and {dtype}")
    try:
        return archive[key]
    except (*_CORRUPT, MemoryError) as error:  # ValueError: object arrays need pickle
        raise ValueError(f"load_npz: {name} holds a malformed array, {key!r} ({error})") from None
