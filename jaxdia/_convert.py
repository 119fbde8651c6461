"""Array-level conversions between DIA ``data`` and canonical, dense, COO, BCOO or SciPy
form: the bodies of :class:`jaxdia.DiaMatrix`'s constructor and its ``from_*``/``to_*``
methods, which never see the class (they return :class:`jaxdia._parts.DiaParts`).

The compiled ones work on ``(data, offsets, shape)`` (see :mod:`jaxdia._parts`) with static
slices and indices computed in the program from an iota: index tables built on the host
would be program constants of the size of the matrix, and one gather or scatter over the
whole ``(n_diags, n)`` grid of slots compiles faster than one piece per diagonal. They
trace under ``jit`` and ``vmap`` and are differentiable.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import TYPE_CHECKING, Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax import Array, lax

from . import _host
from ._checks import (
    as_array,
    as_offsets,
    as_shape,
    check_array_size,
    check_distinct,
    check_dtype,
    is_scipy_sparse,
    narrow,
)
from ._geometry import diagonal_bounds, holds_entries, in_bounds, index_dtype, slot_indices
from ._parts import DiaParts
from ._sharding import on_auto_axes
from ._typing import Offsets, Shape, Values

if TYPE_CHECKING:
    import scipy.sparse as sp
    from jax.experimental import sparse as jsparse


def checked_data(data: npt.ArrayLike, function: str) -> Array | np.ndarray:
    """``data`` checked: a JAX array as given, anything else as a NumPy array (which
    :func:`canonical` canonicalizes on the host and transfers once) in the precision JAX
    has (see :func:`jaxdia._checks.narrow`); integer and bool data in JAX's default
    float dtype, as SciPy's solvers upcast them (float64 with x64 on, else float32)."""
    array = as_array(
        narrow(data, function, stacklevel=5),  # 5: the caller of DiaMatrix(...)
        "data",
        expected="a numeric array of shape (..., n_diags, width)",
    )
    if array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer):
        array = array.astype(jnp.result_type(float))
    check_dtype(array.dtype)
    if array.ndim < 2:
        raise ValueError(
            f"data must have shape (..., n_diags, width) (rank >= 2), got shape {array.shape}"
        )
    return array


def checked(data: npt.ArrayLike, offsets: Offsets, shape: Shape, function: str) -> DiaParts:
    """The canonical parts of the constructor's arguments, checked (``function`` names
    the constructor in the warning about narrowed input)."""
    shape = as_shape(shape)
    offsets = as_offsets(offsets)
    array = checked_data(data, function)
    if array.shape[-2] != len(offsets):
        raise ValueError(
            f"data has {array.shape[-2]} diagonals (shape {array.shape}) but "
            f"{len(offsets)} offsets were given: {offsets}"
        )
    return canonical(array, check_distinct(offsets), shape)


def canonical(
    data: Array | np.ndarray, offsets: tuple[int, ...], shape: tuple[int, int]
) -> DiaParts:
    """The canonical parts of a checked matrix: offsets sorted ascending (``data`` rows
    permuted to match), diagonals with no slot inside the matrix dropped, and ``data``
    zero-padded or truncated to width ``n`` (as SciPy reads it).

    ``data`` is a JAX array or tracer, or a NumPy array, which is canonicalized on the
    host and transferred once.
    """
    order = sorted(range(len(offsets)), key=offsets.__getitem__)
    kept = [i for i in order if holds_entries(offsets[i], shape)]
    if kept != list(range(len(offsets))):
        data = data[..., np.asarray(kept, dtype=np.int64), :]
    width, n = data.shape[-1], shape[1]
    if width < n:
        pad = [(0, 0)] * (data.ndim - 1) + [(0, n - width)]
        data = np.pad(data, pad) if isinstance(data, np.ndarray) else jnp.pad(data, pad)
    elif width > n:
        data = data[..., :n]
    if isinstance(data, np.ndarray):
        # A private host copy, transferred as it is: on CPU device_put may alias a
        # NumPy buffer (which the caller could still change), and jnp.asarray, like
        # row selection or padding on the device, costs one more pass over data.
        data = jax.device_put(np.array(data, copy=True))
    return DiaParts(data, tuple(offsets[i] for i in kept), shape)


@functools.partial(jax.jit, static_argnums=(1, 2))
@on_auto_axes(last=False)
def dia_to_coo(
    data: Array, offsets: tuple[int, ...], shape: tuple[int, int]
) -> tuple[Array, Array]:
    """``(values, indices)`` of every in-bounds slot, diagonal by diagonal: ``values``
    ``(..., nse)`` and ``indices`` ``(..., nse, 2)`` of ``(row, col)`` pairs.

    Static slices of ``data`` and indices from an iota: no gather.
    """
    index = index_dtype(sum(shape))
    values, rows, cols = [], [], []
    for k, offset in enumerate(offsets):
        start, stop = diagonal_bounds(offset, shape)
        stop = max(start, stop)
        col = lax.iota(index, stop - start) + index(start)
        values.append(data[..., k, start:stop])
        rows.append(col - index(offset))
        cols.append(col)
    if not offsets:
        return jnp.zeros((*data.shape[:-2], 0), data.dtype), jnp.zeros(
            (*data.shape[:-2], 0, 2), index
        )
    indices = jnp.stack([jnp.concatenate(rows), jnp.concatenate(cols)], axis=1)
    values = jnp.concatenate(values, axis=-1)
    return values, jnp.broadcast_to(indices, (*data.shape[:-2], *indices.shape))


def to_dense(A: DiaParts, order: str | None = None, out: None = None) -> Array:
    """The dense ``(..., m, n)`` array of ``A``, or a ValueError if it cannot exist.

    ``order`` and ``out`` are SciPy's arguments: ``order`` may be None or ``"C"`` and
    ``out`` only None.
    """
    if order not in (None, "C"):
        raise ValueError(f"order must be None or 'C' (JAX arrays are row-major), got {order!r}")
    if out is not None:
        raise ValueError(
            "out must be None (JAX arrays are immutable; use the returned array), "
            f"got {type(out).__name__}"
        )
    check_array_size((*A.batch_shape, *A.shape), A.dtype, "A.todense()")
    return dia_to_dense(A.data, A.offsets, A.shape)


@functools.partial(jax.jit, static_argnums=(1, 2))
@on_auto_axes()
def dia_to_dense(data: Array, offsets: tuple[int, ...], shape: tuple[int, int]) -> Array:
    """The dense ``(..., m, n)`` array of a DIA matrix (padding slots ignored)."""
    rows, cols, inside = slot_indices(offsets, shape)
    # Padding slot (k, j) lands on row m + k, past the last row: dropped. The indices stay
    # unique, which JAX needs to transpose the scatter (jax.linear_transpose).
    rows = jnp.where(inside, rows, shape[0] + lax.broadcasted_iota(rows.dtype, rows.shape, 0))
    dense = jnp.zeros((*data.shape[:-2], *shape), data.dtype)
    return dense.at[..., rows, cols].set(data, mode="drop", unique_indices=True)


def _dense_to_dia(
    dense: Values, offsets: tuple[int, ...], shape: tuple[int, int], *, xp: ModuleType = jnp
) -> Values:
    """DIA ``data`` ``(..., len(offsets), n)`` holding the given diagonals of ``dense``.

    ``dense`` is ``(..., m, n)``, or ``(..., m, 1)``: a column, standing for the matrix
    that repeats it in every column. Padding slots are zero; elements on other diagonals
    are not read.
    """
    rows, cols, inside = slot_indices(offsets, shape, host=xp is np)
    rows = xp.clip(rows, 0, max(shape[0] - 1, 0))
    if dense.shape[-1] != shape[1]:
        cols = xp.zeros_like(cols)
    if isinstance(dense, np.ndarray):
        values = dense[..., rows, cols]
    else:
        values = dense.at[..., rows, cols].get(mode="promise_in_bounds")
    return xp.where(inside, values, 0)


dense_to_dia = jax.jit(on_auto_axes()(_dense_to_dia), static_argnums=(1, 2))


def to_host(A: DiaParts, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(data, offsets)`` of a concrete, unbatched matrix as NumPy arrays for SciPy;
    ``what`` names the caller in the ValueError for a batched or traced matrix.

    ``data`` is a writable copy (SciPy's conversions return writable arrays; NumPy views
    of JAX arrays are read-only) with its padding slots zeroed: SciPy's ``dia_array``
    reads some of them (``sum(axis=0)`` does), and they may hold anything. SciPy has no
    16-bit float types, so those become float32. ``offsets`` are int32 where they fit,
    else int64 (a tall matrix may hold an offset below ``-2**31``).
    """
    if A.batch_shape:
        raise ValueError(
            f"{what} takes one matrix; this one has batch shape {A.batch_shape}. Take each "
            "matrix, e.g. DiaMatrix(A.data[i], A.offsets, A.shape)."
        )
    if isinstance(A.data, jax.core.Tracer):
        raise ValueError(
            f"{what} needs concrete data (it works on the host); under jit, vmap or grad "
            f"the data is traced: return the DiaMatrix from the transformation and call "
            f"{what} outside"
        )
    dtype = np.dtype(A.data.dtype)
    wide = np.float32 if dtype.itemsize == 2 and dtype.kind != "c" else dtype
    data = np.asarray(A.data).astype(wide)
    data[~in_bounds(A.offsets, A.shape, host=True)] = 0
    offsets = np.asarray(A.offsets, dtype=index_dtype(max(map(abs, A.offsets), default=0)))
    return data, offsets


def nonzero_offsets(dense: np.ndarray) -> tuple[int, ...]:
    """Offsets of the diagonals holding a nonzero in a concrete ``(..., m, n)`` array."""
    mask = np.asarray(dense != 0)
    rows, cols = np.nonzero(mask.any(axis=tuple(range(mask.ndim - 2))))
    return tuple(int(k) for k in np.unique(cols - rows))


def coo_offsets(indices: np.ndarray, shape: tuple[int, int]) -> set[int]:
    """The diagonals that concrete COO ``indices`` ``(nse, 2)`` (signed) have entries on;
    indices outside ``shape`` (BCOO's padding) are ignored."""
    m, n = shape
    valid = (indices[:, 0] < m) & (indices[:, 1] < n)
    return set((indices[valid, 1] - indices[valid, 0]).tolist())


def coo_to_dia(
    values: Array, indices: Array, offsets: tuple[int, ...], shape: tuple[int, int]
) -> Array:
    """DIA ``data`` of the COO entries (duplicates summed) on the sorted ``offsets``;
    entries on other diagonals or outside ``shape`` are dropped.

    ``indices`` ``(nse, 2)`` must be of a signed dtype (``cols - rows`` must not wrap).
    """
    m, n = shape
    if not offsets:
        return jnp.zeros((0, n), values.dtype)
    rows, cols = indices[:, 0], indices[:, 1]
    table = jnp.asarray(offsets, dtype=indices.dtype)
    slot = jnp.searchsorted(table, cols - rows)
    on_diagonal = (
        (rows < m) & (cols < n) & (table[jnp.minimum(slot, len(offsets) - 1)] == cols - rows)
    )
    values = jnp.where(on_diagonal, values, 0)
    data = jnp.zeros((len(offsets), n), values.dtype)
    return data.at[jnp.where(on_diagonal, slot, 0), jnp.where(on_diagonal, cols, 0)].add(values)


def from_scipy(matrix: sp.sparray | sp.spmatrix) -> DiaParts:
    """The parts of any ``scipy.sparse`` matrix or array (``DiaMatrix.from_scipy``)."""
    if not is_scipy_sparse(matrix):
        raise TypeError(
            f"from_scipy expects a scipy.sparse matrix or array, got {type(matrix).__name__}"
        )
    S: Any = matrix  # SciPy's stubs give sparray and spmatrix none of these attributes
    if S.ndim != 2:
        raise ValueError(f"from_scipy expects a 2-D sparse matrix, got shape {S.shape}")
    if S.dtype == np.bool_ or np.issubdtype(S.dtype, np.integer):
        S = S.astype(jax.dtypes.canonicalize_dtype(float))  # as from_dense and diags do
    check_dtype(S.dtype, "the scipy matrix")
    dia = S if S.format == "dia" else S.todia()
    return checked(
        narrow(dia.data, "from_scipy", stacklevel=4), dia.offsets, dia.shape, "DiaMatrix"
    )


def to_scipy(A: DiaParts) -> sp.dia_array:
    """A ``scipy.sparse.dia_array`` of a concrete, unbatched matrix (see :func:`to_host`)."""
    import scipy.sparse  # loaded on first use: importing jaxdia does not load SciPy

    return scipy.sparse.dia_array(to_host(A, "to_scipy"), shape=A.shape)


def from_dense(dense: npt.ArrayLike, offsets: Offsets | None) -> DiaParts:
    """The parts holding the diagonals ``offsets`` of a dense ``(..., m, n)`` array, or
    (``offsets=None``) every diagonal holding a nonzero (``DiaMatrix.from_dense``)."""
    if is_scipy_sparse(dense):
        raise TypeError(
            f"from_dense expects a dense array, got scipy.sparse.{type(dense).__name__}; "
            "convert it with DiaMatrix.from_scipy"
        )
    if offsets is None:
        if isinstance(dense, jax.core.Tracer):
            raise ValueError(
                "from_dense(M) finds the nonzero diagonals of a concrete M; under jit/vmap "
                "M is traced, so pass the offsets explicitly: from_dense(M, offsets=...)."
            )
        host = np.asarray(dense)
        if host.ndim < 2:
            raise ValueError(f"dense must have shape (..., m, n), got shape {host.shape}")
        offsets = nonzero_offsets(host)
    else:
        offsets = as_offsets(offsets)
    array = as_array(
        narrow(dense, "from_dense", stacklevel=4),
        "dense",
        expected="a numeric array of shape (..., m, n)",
    )
    if array.ndim < 2:
        raise ValueError(f"dense must have shape (..., m, n), got shape {array.shape}")
    if array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer):
        array = array.astype(jax.dtypes.canonicalize_dtype(float))  # as diags does
    check_dtype(array.dtype, "dense")
    m, n = array.shape[-2:]
    offsets = tuple(sorted(k for k in check_distinct(offsets) if holds_entries(k, (m, n))))
    if array.ndim == 2 and _host.concrete(array) and array.dtype in _host.HOST_DTYPES:
        data = _dense_to_dia(np.asarray(array), offsets, (m, n), xp=np)
    else:
        data = dense_to_dia(array, offsets, (m, n))
    return checked(data, offsets, (m, n), "DiaMatrix")


def to_bcoo(A: DiaParts) -> jsparse.BCOO:
    """A ``BCOO`` holding every in-bounds slot of ``A`` (``n_batch = len(batch_shape)``)."""
    from jax.experimental import sparse as jsparse  # on first use: it slows the import

    values, indices = dia_to_coo(A.data, A.offsets, A.shape)
    return jsparse.BCOO((values, indices), shape=(*A.batch_shape, *A.shape))


def from_bcoo(matrix: jsparse.BCOO, offsets: Offsets | None) -> DiaParts:
    """The parts of an unbatched 2-D ``BCOO`` on ``offsets``, or (``offsets=None``) on the
    diagonals its concrete indices hold (``DiaMatrix.from_bcoo``)."""
    from jax.experimental import sparse as jsparse

    if not isinstance(matrix, jsparse.BCOO):
        raise TypeError(f"from_bcoo expects a BCOO, got {type(matrix).__name__}")
    if matrix.n_batch or matrix.n_dense or matrix.ndim != 2:
        raise ValueError(
            "from_bcoo supports unbatched 2-D BCOO matrices (n_batch == n_dense == 0), "
            f"got shape {matrix.shape}, n_batch={matrix.n_batch}, n_dense={matrix.n_dense}"
        )
    m, n = matrix.shape
    # Signed indices: with BCOO's unsigned index dtypes, cols - rows would wrap around.
    indices = matrix.indices.astype(index_dtype(max(m, n) + 1))
    concrete = not isinstance(indices, jax.core.Tracer)
    found: set[int] = set()
    if concrete:
        found = coo_offsets(np.asarray(indices), (m, n))
    if offsets is None:
        if not concrete:
            raise ValueError(
                "from_bcoo needs concrete indices to find the offsets; under jit pass "
                "offsets=... explicitly."
            )
        offsets = tuple(sorted(found))
    else:
        offsets = tuple(sorted(as_offsets(offsets)))
        if concrete and not found <= set(offsets):
            raise ValueError(
                f"the BCOO matrix has entries on diagonals {sorted(found - set(offsets))} "
                f"that are not among offsets={offsets}"
            )
    offsets = tuple(k for k in offsets if holds_entries(k, (m, n)))
    data = coo_to_dia(matrix.data, indices, offsets, (m, n))
    return checked(data, offsets, (m, n), "DiaMatrix")
