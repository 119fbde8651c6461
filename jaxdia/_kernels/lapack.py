"""LAPACK's banded factorizations on CPU, called from XLA programs through XLA's FFI.

The routines (``?gbtrf/?gbtrs``: banded LU with partial pivoting; ``?pbtrf/?pbtrs``:
banded Cholesky; ``?gttrf/?gttrs``, ``?pttrf/?pttrs``: their tridiagonal forms) are
SciPy's, reached through the function pointers that ``scipy.linalg.cython_lapack`` and
``cython_blas`` export (jaxlib's own CPU linear algebra finds LAPACK the same way). Each
operation is an XLA FFI custom call whose handler is a ``ctypes`` callback: XLA hands it
pointers to its own buffers, and the handler calls LAPACK on them in place.

Why not ``jax.pure_callback``: a Python callback receives *copies* of its operands
(``pure_callback`` even ``device_put``s them once more), so every solve would copy the
whole factor, many times the work of the solve itself for a wide band
(``benchmarks/README.md``). Through the FFI the factor is read where it lies, and the
right-hand side is solved in place in the output buffer (aliased to the operand).

Layouts (the leading dimensions of every operand are a batch, the same for all operands,
or absent (size 1) for the factor of a solve: one factor for a batch of right-hand sides):

* a band ``(..., n, ldab)``: each system's LAPACK band array in column-major order
  (``ab[j, r]`` is LAPACK's ``AB(r + 1, j + 1)``), so a C-contiguous JAX array is what
  LAPACK reads, with no transpose;
* right-hand sides ``(..., k, n)``: the ``k`` columns of ``B`` one after the other
  (column-major ``B``), so ``k`` systems of a batch that share a factor are one call with
  ``k * batch`` columns;
* pivots ``(..., n)`` int32, 0-based like SciPy's (LAPACK's are 1-based);
* ``info`` ``(...,)`` int32: LAPACK's ``info`` (0, or the 1-based index of the first zero
  pivot / non-positive leading minor).

The handlers' C side (XLA's call frame, errors) is :mod:`jaxdia._kernels.ffi`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import importlib
import math
import mmap
from ctypes import c_char_p, c_int, c_size_t, c_void_p
from typing import Any

import jax
import numpy as np

from .._geometry import diagonal_bounds
from .ffi import HostBuffer, make_handler

# -- LAPACK and BLAS through SciPy's Cython exports ----------------------------------------

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, c_char_p]

_PREFIX = {
    np.dtype(np.float32): "s",
    np.dtype(np.float64): "d",
    np.dtype(np.complex64): "c",
    np.dtype(np.complex128): "z",
}


@functools.cache
def _routine(name: str) -> Any:
    """LAPACK/BLAS routine ``name`` (e.g. ``"dgbtrf"``) as a ctypes function of pointers."""
    capi = {
        **importlib.import_module("scipy.linalg.cython_blas").__pyx_capi__,
        **importlib.import_module("scipy.linalg.cython_lapack").__pyx_capi__,
    }
    capsule = capi[name]
    address = _capsule_pointer(capsule, _capsule_name(capsule))
    # Every Fortran argument is a pointer; the count is the signature's. PYFUNCTYPE keeps
    # the GIL during the call: the handler runs on an XLA thread, and taking the GIL back
    # after releasing it can wait behind other threads longer than a whole tridiagonal
    # solve takes (benchmarks/README.md).
    arguments = _capsule_name(capsule).decode().count("*")
    return ctypes.cast(c_void_p(address), ctypes.PYFUNCTYPE(None, *[c_void_p] * arguments))


def _int(value: int) -> Any:
    return ctypes.byref(c_int(value))


def _char(value: str) -> bytes:
    return value.encode()


class _Status:
    """LAPACK's ``info`` argument, checked for illegal arguments (a bug here, not bad
    input: bad values give ``info > 0``, which the callers report)."""

    __slots__ = ("pointer", "value")

    def __init__(self):
        self.value = c_int(0)
        self.pointer = ctypes.byref(self.value)

    def check(self, routine: str) -> int:
        if self.value.value < 0:
            raise RuntimeError(f"{routine}: argument {-self.value.value} had an illegal value")
        return self.value.value


def _systems(buffer: HostBuffer, core: int) -> int:
    """The number of systems in the leading dims of ``buffer``."""
    return math.prod(buffer.shape[: len(buffer.shape) - core])


def _shared(factor: HostBuffer, core: int) -> bool:
    """Whether one factor serves every system of a solve (no batch dims, or size 1)."""
    return _systems(factor, core) <= 1


def _into(source: HostBuffer, target: HostBuffer) -> None:
    """Copies ``source`` into ``target`` unless XLA already aliased them."""
    size = math.prod(target.shape) * target.dtype.itemsize
    if source.address != target.address and size:
        ctypes.memmove(target.address, source.address, size)


def _solve_plan(factor: HostBuffer, core: int, x: HostBuffer) -> tuple[int, int]:
    """``(systems, columns)`` of a solve: a shared factor solves the whole batch of
    right-hand sides as the columns of one system (they lie one after the other)."""
    k = x.shape[-2]
    if _shared(factor, core):
        return 1, k * _systems(x, 2)
    return _systems(x, 2), k


# -- the handlers: banded LU ---------------------------------------------------------------


#: Linux's ``MADV_HUGEPAGE`` (None elsewhere), and the size from which it is asked for.
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)
_HUGE_PAGE = 2 << 20


@functools.cache
def _madvise() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [c_void_p, c_size_t, c_int]
    return libc.madvise


def _huge_pages(buffer: HostBuffer) -> None:
    """Asks the kernel to back the fresh buffer with transparent huge pages before it is
    first written. XLA's buffers sit on 4 KiB pages, and the first write of a factor's
    band then spends most of its time in page faults (NumPy asks the same for its large
    arrays); the hint changes nothing else. Where it is unavailable, nothing is done."""
    size = math.prod(buffer.shape) * buffer.dtype.itemsize
    if _MADV_HUGEPAGE is None or size < 2 * _HUGE_PAGE:
        return
    start = -(-buffer.address // _HUGE_PAGE) * _HUGE_PAGE
    stop = (buffer.address + size) // _HUGE_PAGE * _HUGE_PAGE
    with contextlib.suppress(OSError, AttributeError):  # no libc madvise: a hint lost
        _madvise()(start, stop - start, _MADV_HUGEPAGE)


def _fill_bands(data: HostBuffer, layout: HostBuffer, bands: HostBuffer) -> None:
    """LAPACK's band array of each system in ``bands`` ``(..., n, ldab)`` from DIA
    ``data`` ``(..., n_diags, n)``: diagonal ``k`` of offset ``layout[k, 0]`` fills column
    ``layout[k, 1]`` (none if negative) over the rows inside the matrix; the rest is 0.

    Filling the output buffer here, rather than in XLA, writes each system's
    ``n * ldab`` elements once: XLA assembles the band from ``ldab`` column pieces, one
    pass each, slower than LAPACK then factors it (benchmarks/README.md)."""
    *_, n, ldab = bands.shape
    _huge_pages(bands)
    target = bands.array.reshape(-1, n, ldab)
    target[...] = 0
    source = data.array.reshape(-1, *data.shape[-2:])
    for index, (offset, column) in enumerate(layout.array.tolist()):
        if column >= 0:
            start, stop = diagonal_bounds(offset, (n, n))
            target[:, start:stop, column] = source[:, index, start:stop]


def _gbtrf(args, rets, *, kl: int, ku: int) -> None:
    data, layout = args
    lu, pivots, info = rets
    _fill_bands(data, layout, lu)
    *_, n, ldab = lu.shape
    info_view = info.array.reshape(-1)
    if n == 0:
        info_view[...] = 0
        return
    routine = _routine(_PREFIX[lu.dtype] + "gbtrf")
    step = n * ldab * lu.dtype.itemsize
    status, n_, kl_, ku_, ldab_ = _Status(), _int(n), _int(kl), _int(ku), _int(ldab)
    for system in range(_systems(lu, 2)):
        address, pivot_address = lu.address + system * step, pivots.address + system * n * 4
        routine(n_, n_, kl_, ku_, address, ldab_, pivot_address, status.pointer)
        info_view[system] = status.check("gbtrf")
    pivots.array[...] -= 1  # SciPy's 0-based pivots


#: From this many rows on, an LU factor computed without row interchanges is solved by
#: two ``?tbsv`` over the bands ``L`` and ``U`` really have (see :func:`_gbtrs`); for
#: fewer, the calls per right-hand side cost more than ``?gbtrs`` saves.
_NARROW_FROM = 256


def _gbtrs(args, rets, *, kl: int, ku: int, trans: int) -> None:
    """``?gbtrs``. A factor computed without row interchanges (a diagonally dominant
    matrix, say) has a ``U`` of bandwidth ``ku``, not the ``kl + ku`` that ``?gbtrs``
    sweeps: then ``?tbsv`` over ``L``'s and ``U``'s own bands does the work instead."""
    lu, pivots, b = args
    (x,) = rets
    _into(b, x)
    *_, n, ldab = lu.shape
    if n == 0 or x.shape[-2] == 0:
        return
    prefix = _PREFIX[lu.dtype]
    itemsize = lu.dtype.itemsize
    systems, columns = _solve_plan(lu, 2, x)
    lu_step = 0 if _shared(lu, 2) else n * ldab * itemsize
    x_step = columns * n * itemsize
    pivot_rows = pivots.array.reshape(-1, n)
    one_based = pivot_rows + 1
    pivot_address = one_based.ctypes.data
    narrow = (pivot_rows == np.arange(n, dtype=np.int32)).all(axis=-1) & (n >= _NARROW_FROM)
    routine = _routine(prefix + "gbtrs")
    letter = _char("NTC"[trans])
    status, n_, kl_, ku_, ldab_, columns_ = (
        _Status(),
        _int(n),
        _int(kl),
        _int(ku),
        _int(ldab),
        _int(columns),
    )
    for system in range(systems):
        lu_address = lu.address + system * lu_step
        x_address = x.address + system * x_step
        factor = system if lu_step else 0
        if narrow[factor]:
            _tbsv_lu(prefix, trans, n, kl, ku, ldab, lu_address, x_address, columns, itemsize)
            continue
        routine(
            letter,
            n_,
            kl_,
            ku_,
            columns_,
            lu_address,
            ldab_,
            pivot_address + factor * n * 4,
            x_address,
            n_,
            status.pointer,
        )
        status.check("gbtrs")


def _tbsv_lu(prefix, trans, n, kl, ku, ldab, lu_address, x_address, columns, itemsize):
    """``A x = b`` (or the transposed systems) for an LU factor without interchanges:
    ``L`` is unit lower with ``kl`` subdiagonals (rows ``kl + ku`` on), ``U`` upper with
    ``ku`` superdiagonals (rows ``kl`` to ``kl + ku``)."""
    tbsv = _routine(prefix + "tbsv")
    letter, n_, ldab_, one = _char("NTC"[trans]), _int(n), _int(ldab), _int(1)
    steps = [
        (_char("L"), _int(kl), lu_address + (kl + ku) * itemsize, _char("U")),
        (_char("U"), _int(ku), lu_address + kl * itemsize, _char("N")),
    ]
    if trans:
        steps.reverse()  # A^T = U^T L^T: U^T first
    for column in range(columns):
        address = x_address + column * n * itemsize
        for uplo, width, band, diagonal in steps:
            tbsv(uplo, letter, diagonal, n_, width, band, ldab_, address, one)


# -- banded Cholesky -----------------------------------------------------------------------


def _pbtrf(args, rets, *, kd: int, lower: int) -> None:
    data, layout = args
    c, info = rets
    _fill_bands(data, layout, c)
    *_, n, ldab = c.shape
    info_view = info.array.reshape(-1)
    if n == 0:
        info_view[...] = 0
        return
    routine = _routine(_PREFIX[c.dtype] + "pbtrf")
    step = n * ldab * c.dtype.itemsize
    status, uplo, n_, kd_, ldab_ = (
        _Status(),
        _char("L" if lower else "U"),
        _int(n),
        _int(kd),
        _int(ldab),
    )
    for system in range(_systems(c, 2)):
        routine(uplo, n_, kd_, c.address + system * step, ldab_, status.pointer)
        info_view[system] = status.check("pbtrf")


def _pbtrs(args, rets, *, kd: int, lower: int) -> None:
    c, b = args
    (x,) = rets
    _into(b, x)
    *_, n, ldab = c.shape
    if n == 0 or x.shape[-2] == 0:
        return
    routine = _routine(_PREFIX[c.dtype] + "pbtrs")
    systems, columns = _solve_plan(c, 2, x)
    c_step = 0 if _shared(c, 2) else n * ldab * c.dtype.itemsize
    x_step = columns * n * x.dtype.itemsize
    status, uplo = _Status(), _char("L" if lower else "U")
    n_, kd_, columns_, ldab_ = _int(n), _int(kd), _int(columns), _int(ldab)
    for system in range(systems):
        address, x_address = c.address + system * c_step, x.address + system * x_step
        routine(uplo, n_, kd_, columns_, address, ldab_, x_address, n_, status.pointer)
        status.check("pbtrs")


# -- tridiagonal LU: rows dl, d, du, du2 of a (..., 4, n) array ----------------------------


def _gttrf(args, rets) -> None:
    (bands,) = args
    lu, pivots, info = rets
    _into(bands, lu)
    n = lu.shape[-1]
    info_view = info.array.reshape(-1)
    if n == 0:
        info_view[...] = 0
        return
    routine = _routine(_PREFIX[lu.dtype] + "gttrf")
    row = n * lu.dtype.itemsize
    status, n_ = _Status(), _int(n)
    for system in range(_systems(lu, 2)):
        base = lu.address + system * 4 * row
        routine(
            n_,
            base,
            base + row,
            base + 2 * row,
            base + 3 * row,
            pivots.address + system * n * 4,
            status.pointer,
        )
        info_view[system] = status.check("gttrf")
    pivots.array[...] -= 1


def _gttrs(args, rets, *, trans: int) -> None:
    lu, pivots, b = args
    (x,) = rets
    _into(b, x)
    n = lu.shape[-1]
    if n == 0 or x.shape[-2] == 0:
        return
    routine = _routine(_PREFIX[lu.dtype] + "gttrs")
    row = n * lu.dtype.itemsize
    systems, columns = _solve_plan(lu, 2, x)
    lu_step = 0 if _shared(lu, 2) else 4 * row
    x_step = columns * n * x.dtype.itemsize
    one_based = pivots.array.reshape(-1, n) + 1
    pivot_address, pivot_step = one_based.ctypes.data, (n * 4 if lu_step else 0)
    status, letter, n_, columns_ = _Status(), _char("NTC"[trans]), _int(n), _int(columns)
    for system in range(systems):
        base = lu.address + system * lu_step
        routine(
            letter,
            n_,
            columns_,
            base,
            base + row,
            base + 2 * row,
            base + 3 * row,
            pivot_address + system * pivot_step,
            x.address + system * x_step,
            n_,
            status.pointer,
        )
        status.check("gttrs")


# -- tridiagonal L D L^H: d (real) and e ---------------------------------------------------


def _pttrf(args, rets) -> None:
    d_in, e_in = args
    d, e, info = rets
    _into(d_in, d)
    _into(e_in, e)
    n = d.shape[-1]
    info_view = info.array.reshape(-1)
    if n == 0:
        info_view[...] = 0
        return
    routine = _routine(_PREFIX[e.dtype] + "pttrf")
    d_row, e_row = n * d.dtype.itemsize, n * e.dtype.itemsize
    status, n_ = _Status(), _int(n)
    for system in range(_systems(d, 1)):
        routine(n_, d.address + system * d_row, e.address + system * e_row, status.pointer)
        info_view[system] = status.check("pttrf")


def _pttrs(args, rets) -> None:
    d, e, b = args
    (x,) = rets
    _into(b, x)
    n = d.shape[-1]
    if n == 0 or x.shape[-2] == 0:
        return
    routine = _routine(_PREFIX[x.dtype] + "pttrs")
    systems, columns = _solve_plan(d, 1, x)
    shared = _shared(d, 1)
    d_row = 0 if shared else n * d.dtype.itemsize
    e_row = 0 if shared else n * e.dtype.itemsize
    x_step = columns * n * x.dtype.itemsize
    status, n_, columns_ = _Status(), _int(n), _int(columns)
    # e holds the subdiagonal of L (A = L D L^H): uplo "L" for the complex routine.
    uplo = [_char("L")] if x.dtype.kind == "c" else []
    for system in range(systems):
        routine(
            *uplo,
            n_,
            columns_,
            d.address + system * d_row,
            e.address + system * e_row,
            x.address + system * x_step,
            n_,
            status.pointer,
        )
        status.check("pttrs")


# -- registration and the calls ------------------------------------------------------------

_HANDLERS = {
    "gbtrf": _gbtrf,
    "gbtrs": _gbtrs,
    "pbtrf": _pbtrf,
    "pbtrs": _pbtrs,
    "gttrf": _gttrf,
    "gttrs": _gttrs,
    "pttrf": _pttrf,
    "pttrs": _pttrs,
}
_KEEP_ALIVE: dict[str, Any] = {}  # the C function pointers XLA holds


def _keep_cpu_client_past_exit() -> None:
    """Keeps XLA's CPU client alive past the interpreter's finalization (an ``atexit``
    hook; the process exits anyway). Destroyed there, after these ``ctypes`` handlers
    ran on its worker threads, the client could hang joining its thread pool: with JAX
    0.10.2 a script still holding a banded solution or factor at its end never exited
    (3 runs in 5). A reference that is never released keeps the destructor from
    running."""
    with contextlib.suppress(Exception):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(jax.devices("cpu")[0].client))


def _target(name: str) -> str:
    """The FFI target of routine ``name``, registered with XLA on first use."""
    target = f"jaxdia_lapack_{name}"
    if not _KEEP_ALIVE:
        atexit.register(_keep_cpu_client_past_exit)
    if target not in _KEEP_ALIVE:
        handler = make_handler(_HANDLERS[name])
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
        _KEEP_ALIVE[target] = handler
    return target


def _call(name: str, results, *operands, aliases: dict[int, int], **attributes):
    return jax.ffi.ffi_call(_target(name), results, input_output_aliases=aliases)(
        *operands, **{key: np.int64(value) for key, value in attributes.items()}
    )


def _int_results(batch: tuple[int, ...], n: int) -> list[jax.ShapeDtypeStruct]:
    return [
        jax.ShapeDtypeStruct((*batch, n), np.int32),
        jax.ShapeDtypeStruct(batch, np.int32),
    ]


def _layout(placement) -> np.ndarray:
    return np.asarray(placement, np.int64).reshape(-1, 2)


def gbtrf(data, *, placement, kl: int, ku: int):
    """``(lu, pivots, info)``: the LU factors of the matrices of DIA ``data``
    ``(..., n_diags, n)``, whose diagonal ``k`` of offset ``placement[k][0]`` is column
    ``placement[k][1]`` of LAPACK's bands (``2 kl + ku + 1`` columns)."""
    *batch, _, n = data.shape
    lu = jax.ShapeDtypeStruct((*batch, n, 2 * kl + ku + 1), data.dtype)
    results = [lu, *_int_results(tuple(batch), n)]
    return _call("gbtrf", results, data, _layout(placement), aliases={}, kl=kl, ku=ku)


def gbtrs(lu, pivots, b, *, kl: int, ku: int, trans: int):
    """``x`` ``(..., k, n)`` solving ``op(A) x = b`` with ``gbtrf``'s factor."""
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    return _call("gbtrs", [result], lu, pivots, b, aliases={2: 0}, kl=kl, ku=ku, trans=trans)[0]


def pbtrf(data, *, placement, kd: int, lower: bool):
    """``(c, info)``: the Cholesky factors of the matrices of DIA ``data`` placed in
    LAPACK's bands (``kd + 1`` columns) as for :func:`gbtrf`."""
    *batch, _, n = data.shape
    c = jax.ShapeDtypeStruct((*batch, n, kd + 1), data.dtype)
    results = [c, jax.ShapeDtypeStruct(tuple(batch), np.int32)]
    return _call("pbtrf", results, data, _layout(placement), aliases={}, kd=kd, lower=int(lower))


def pbtrs(c, b, *, kd: int, lower: bool):
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    return _call("pbtrs", [result], c, b, aliases={1: 0}, kd=kd, lower=int(lower))[0]


def gttrf(bands):
    """``(lu, pivots, info)`` of a tridiagonal matrix given as rows ``dl, d, du, 0`` of
    ``bands`` ``(..., 4, n)`` (``dl[i] = A[i + 1, i]``, ``du[i] = A[i, i + 1]``)."""
    batch, n = bands.shape[:-2], bands.shape[-1]
    results = [jax.ShapeDtypeStruct(bands.shape, bands.dtype), *_int_results(batch, n)]
    return _call("gttrf", results, bands, aliases={0: 0})


def gttrs(lu, pivots, b, *, trans: int):
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    return _call("gttrs", [result], lu, pivots, b, aliases={2: 0}, trans=trans)[0]


def pttrf(d, e):
    """``(d, e, info)``: ``A = L D L^H`` of a Hermitian positive definite tridiagonal
    matrix with real diagonal ``d`` and subdiagonal ``e`` (``e[i] = A[i + 1, i]``)."""
    batch = d.shape[:-1]
    results = [
        jax.ShapeDtypeStruct(d.shape, d.dtype),
        jax.ShapeDtypeStruct(e.shape, e.dtype),
        jax.ShapeDtypeStruct(batch, np.int32),
    ]
    return _call("pttrf", results, d, e, aliases={0: 0, 1: 1})


def pttrs(d, e, b):
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    return _call("pttrs", [result], d, e, b, aliases={2: 0})[0]
