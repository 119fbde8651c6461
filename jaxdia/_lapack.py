"""LAPACK's banded factorizations on CPU, called from XLA programs through XLA's FFI.

The routines (``?gbtrf/?gbtrs``: banded LU with partial pivoting; ``?pbtrf/?pbtrs``:
banded Cholesky; ``?gttrf/?gttrs``, ``?pttrf/?pttrs``: their tridiagonal forms) are
SciPy's, reached through the function pointers that ``scipy.linalg.cython_lapack`` and
``cython_blas`` export (jaxlib's own CPU linear algebra finds LAPACK the same way). Each
operation is an XLA FFI custom call whose handler is a ``ctypes`` callback: XLA hands it
pointers to its own buffers, and the handler calls LAPACK on them in place.

Why not ``jax.pure_callback``: a Python callback receives *copies* of its operands
(``pure_callback`` even ``device_put``s them once more), so every solve would copy the
whole factor, many times the work of the solve itself for a wide band, and more again for
fresh pages on a virtual machine (``benchmarks/README.md``). Through the FFI the factor is
read where it lies, a solve costs LAPACK's time plus a few microseconds, and the right-hand
side is solved in place in the output buffer (aliased to the operand).

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

A handler never raises into XLA: an exception becomes an XLA error with its message
(``XlaRuntimeError`` in Python).
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import math
import traceback
from collections.abc import Callable
from ctypes import POINTER, Structure, c_char_p, c_int, c_int64, c_size_t, c_uint32, c_void_p
from typing import Any

import jax
import numpy as np

# -- XLA FFI's C structures (xla/ffi/api/c_api.h, API version 0.1) ----------------------------


class _ExtensionBase(Structure):
    _fields_ = [("struct_size", c_size_t), ("type", c_int), ("next", c_void_p)]


class _ApiVersion(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("extension_start", c_void_p),
        ("major_version", c_int),
        ("minor_version", c_int),
    ]


class _Metadata(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("api_version", _ApiVersion),
        ("traits", c_uint32),
        ("state_type_id", c_int64),
    ]


class _MetadataExtension(Structure):
    _fields_ = [("extension_base", _ExtensionBase), ("metadata", POINTER(_Metadata))]


class _Buffer(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("extension_start", c_void_p),
        ("dtype", c_int),
        ("data", c_void_p),
        ("rank", c_int64),
        ("dims", POINTER(c_int64)),
    ]


class _List(Structure):  # XLA_FFI_Args and XLA_FFI_Rets
    _fields_ = [
        ("struct_size", c_size_t),
        ("extension_start", c_void_p),
        ("size", c_int64),
        ("types", POINTER(c_int)),
        ("items", POINTER(c_void_p)),
    ]


class _ByteSpan(Structure):
    _fields_ = [("ptr", c_void_p), ("len", c_size_t)]


class _Scalar(Structure):
    _fields_ = [("dtype", c_int), ("value", c_void_p)]


class _Attributes(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("extension_start", c_void_p),
        ("size", c_int64),
        ("types", POINTER(c_int)),
        ("names", POINTER(POINTER(_ByteSpan))),
        ("attrs", POINTER(c_void_p)),
    ]


class _CallFrame(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("extension_start", POINTER(_ExtensionBase)),
        ("api", c_void_p),
        ("ctx", c_void_p),
        ("stage", c_int),
        ("args", _List),
        ("rets", _List),
        ("attrs", _Attributes),
        ("future", c_void_p),
    ]


class _ErrorCreateArgs(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("extension_start", c_void_p),
        ("message", c_char_p),
        ("errc", c_int),
    ]


_EXTENSION_METADATA = 1
_ATTRIBUTE_SCALAR = 3
_ERROR_INTERNAL = 13
#: XLA_FFI_Api: struct_size, extension_start, api_version (24 bytes), internal_api, then
#: the function pointers, XLA_FFI_Error_Create first.
_ERROR_CREATE_OFFSET = 8 + 8 + ctypes.sizeof(_ApiVersion) + 8
_ERROR_CREATE = ctypes.CFUNCTYPE(c_void_p, POINTER(_ErrorCreateArgs))
_HANDLER = ctypes.CFUNCTYPE(c_void_p, POINTER(_CallFrame))

# XLA_FFI_DataType -> NumPy dtype, for the dtypes the handlers see.
_DTYPES = {
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    11: np.dtype(np.float32),
    12: np.dtype(np.float64),
    15: np.dtype(np.complex64),
    18: np.dtype(np.complex128),
}


class HostBuffer:
    """An XLA buffer as the handler sees it: address, shape and dtype; ``array`` views it."""

    __slots__ = ("address", "dtype", "shape")

    def __init__(self, address: int, shape: tuple[int, ...], dtype: np.dtype):
        self.address = address
        self.shape = shape
        self.dtype = dtype

    @property
    def array(self) -> np.ndarray:
        """A NumPy view of the buffer (no copy)."""
        size = math.prod(self.shape)
        if size == 0:
            return np.empty(self.shape, self.dtype)
        raw = (ctypes.c_char * (size * self.dtype.itemsize)).from_address(self.address)
        return np.frombuffer(memoryview(raw).cast("B"), self.dtype).reshape(self.shape)


def _buffers(items: _List) -> list[HostBuffer]:
    buffers = []
    for index in range(items.size):
        buffer = ctypes.cast(items.items[index], POINTER(_Buffer)).contents
        shape = tuple(buffer.dims[axis] for axis in range(buffer.rank))
        buffers.append(HostBuffer(buffer.data or 0, shape, _DTYPES[buffer.dtype]))
    return buffers


def _attributes(attributes: _Attributes) -> dict[str, int]:
    """The scalar (integer) attributes of a call, by name."""
    found = {}
    for index in range(attributes.size):
        if attributes.types[index] != _ATTRIBUTE_SCALAR:
            raise TypeError("jaxdia's LAPACK handlers take integer scalar attributes only")
        span = attributes.names[index].contents
        name = ctypes.string_at(span.ptr, span.len).decode()
        scalar = ctypes.cast(attributes.attrs[index], POINTER(_Scalar)).contents
        found[name] = int(ctypes.cast(scalar.value, POINTER(c_int64)).contents.value)
    return found


def _error(api: int, message: str) -> int | None:
    create = ctypes.cast(c_void_p.from_address(api + _ERROR_CREATE_OFFSET), _ERROR_CREATE)
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), None, message.encode(), 0)
    args.errc = _ERROR_INTERNAL
    return create(ctypes.byref(args))


def _make_handler(body: Callable[..., None]) -> Any:
    """A C function pointer XLA can call: parses the call frame into ``HostBuffer``s and
    integer attributes and runs ``body(args, rets, **attributes)``."""

    def handler(frame_pointer):
        frame = frame_pointer.contents
        try:
            if frame.extension_start and frame.extension_start.contents.type == (
                _EXTENSION_METADATA
            ):
                # XLA asks which FFI API version the handler was written against.
                extension = ctypes.cast(frame.extension_start, POINTER(_MetadataExtension))
                metadata = extension.contents.metadata.contents
                metadata.api_version = _ApiVersion(ctypes.sizeof(_ApiVersion), None, 0, 1)
                metadata.traits = 0
                return None
            body(_buffers(frame.args), _buffers(frame.rets), **_attributes(frame.attrs))
            return None
        except BaseException as error:  # never let an exception unwind into XLA
            message = "".join(traceback.format_exception_only(type(error), error)).strip()
            return _error(frame.api, f"jaxdia LAPACK call failed: {message}")

    return _HANDLER(handler)


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
    # Every Fortran argument is a pointer; the count is the signature's.
    arguments = _capsule_name(capsule).decode().count("*")
    return ctypes.cast(c_void_p(address), ctypes.CFUNCTYPE(None, *[c_void_p] * arguments))


def _int(value: int) -> Any:
    return ctypes.byref(c_int(value))


def _char(value: str) -> bytes:
    return value.encode()


def _check_info(info: c_int, routine: str) -> None:
    if info.value < 0:  # an argument LAPACK rejected: a bug here, not bad input
        raise RuntimeError(f"{routine}: argument {-info.value} had an illegal value")


def _systems(*buffers: HostBuffer, core: int) -> int:
    """The number of systems in the leading dims of the buffers (the first one's)."""
    return math.prod(buffers[0].shape[: len(buffers[0].shape) - core])


def _stride(buffer: HostBuffer, core: int) -> int:
    """Bytes from one system to the next in ``buffer`` (0 when it has no batch: shared)."""
    batch = math.prod(buffer.shape[: len(buffer.shape) - core])
    if batch <= 1:
        return 0
    return math.prod(buffer.shape[len(buffer.shape) - core :]) * buffer.dtype.itemsize


def _into(source: HostBuffer, target: HostBuffer) -> None:
    """Copies ``source`` into ``target`` unless XLA already aliased them."""
    if source.address != target.address and math.prod(source.shape):
        ctypes.memmove(
            target.address, source.address, target.dtype.itemsize * math.prod(target.shape)
        )


# -- the handlers: banded LU ---------------------------------------------------------------


def _gbtrf(args, rets, *, kl: int, ku: int) -> None:
    (ab,) = args
    lu, pivots, info = rets
    _into(ab, lu)
    *_, n, ldab = lu.shape
    routine = _routine(_PREFIX[lu.dtype] + "gbtrf")
    pivot_view, info_view = pivots.array.reshape(-1, n), info.array.reshape(-1)
    step = n * ldab * lu.dtype.itemsize
    status = c_int(0)
    for system in range(_systems(lu, core=2)):
        if n:
            routine(
                _int(n), _int(n), _int(kl), _int(ku), lu.address + system * step, _int(ldab),
                pivots.address + system * n * 4, ctypes.byref(status),
            )  # fmt: skip
            _check_info(status, "gbtrf")
        info_view[system] = status.value
    pivot_view -= 1  # SciPy's 0-based pivots


@functools.cache
def _identity(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int32)


def _gbtrs(args, rets, *, kl: int, ku: int, trans: int) -> None:
    """``?gbtrs``; a factor computed without row interchanges (a diagonally dominant
    matrix, say) has a ``U`` of bandwidth ``ku``, not ``kl + ku``: then two ``?tbsv``
    triangular solves over the narrower bands do the work instead."""
    lu, pivots, b = args
    (x,) = rets
    _into(b, x)
    *_, n, ldab = lu.shape
    k = x.shape[-2]
    if n == 0 or k == 0:
        return
    prefix = _PREFIX[lu.dtype]
    itemsize = lu.dtype.itemsize
    lu_step, pivot_step = _stride(lu, 2), _stride(pivots, 1)
    shared = lu_step == 0
    # A shared factor solves the whole batch of right-hand sides in one call.
    systems = 1 if shared else _systems(x, core=2)
    columns = k * (_systems(x, core=2) if shared else 1)
    x_step = k * n * itemsize
    pivot_array = pivots.array.reshape(-1, n)
    status = c_int(0)
    letter = "NTC"[trans]
    for system in range(systems):
        lu_address = lu.address + system * lu_step
        x_address = x.address + system * x_step
        piv = pivot_array[(system * pivot_step) // (4 * n)]
        if np.array_equal(piv, _identity(n)):
            _tbsv_lu(prefix, letter, n, kl, ku, ldab, lu_address, x_address, columns, itemsize)
            continue
        one_based = piv + 1
        _routine(prefix + "gbtrs")(
            _char(letter), _int(n), _int(kl), _int(ku), _int(columns), lu_address, _int(ldab),
            one_based.ctypes.data, x_address, _int(n), ctypes.byref(status),
        )  # fmt: skip
        _check_info(status, "gbtrs")


def _tbsv_lu(prefix, letter, n, kl, ku, ldab, lu_address, x_address, columns, itemsize):
    """``A x = b`` (or the transposed systems) for an LU factor without interchanges:
    ``L`` is unit lower with ``kl`` subdiagonals (rows ``kl + ku`` on), ``U`` upper with
    ``ku`` superdiagonals (rows ``kl`` to ``kl + ku``)."""
    tbsv = _routine(prefix + "tbsv")
    lower_address = lu_address + (kl + ku) * itemsize
    upper_address = lu_address + kl * itemsize
    steps = [("L", kl, lower_address, "U"), ("U", ku, upper_address, "N")]
    if letter != "N":
        steps.reverse()  # A^T = U^T L^T: U^T first
    for column in range(columns):
        address = x_address + column * n * itemsize
        for uplo, width, band, diagonal in steps:
            tbsv(
                _char(uplo), _char(letter), _char(diagonal), _int(n), _int(width), band,
                _int(ldab), address, _int(1),
            )  # fmt: skip


# -- banded Cholesky -----------------------------------------------------------------------


def _pbtrf(args, rets, *, kd: int, lower: int) -> None:
    (ab,) = args
    c, info = rets
    _into(ab, c)
    *_, n, ldab = c.shape
    routine = _routine(_PREFIX[c.dtype] + "pbtrf")
    info_view = info.array.reshape(-1)
    step = n * ldab * c.dtype.itemsize
    status = c_int(0)
    for system in range(_systems(c, core=2)):
        if n:
            routine(
                _char("L" if lower else "U"), _int(n), _int(kd), c.address + system * step,
                _int(ldab), ctypes.byref(status),
            )  # fmt: skip
            _check_info(status, "pbtrf")
        info_view[system] = status.value


def _pbtrs(args, rets, *, kd: int, lower: int) -> None:
    c, b = args
    (x,) = rets
    _into(b, x)
    *_, n, ldab = c.shape
    k = x.shape[-2]
    if n == 0 or k == 0:
        return
    routine = _routine(_PREFIX[c.dtype] + "pbtrs")
    c_step = _stride(c, 2)
    systems = 1 if c_step == 0 else _systems(x, core=2)
    columns = k * (_systems(x, core=2) if c_step == 0 else 1)
    x_step = k * n * x.dtype.itemsize
    status = c_int(0)
    for system in range(systems):
        routine(
            _char("L" if lower else "U"), _int(n), _int(kd), _int(columns),
            c.address + system * c_step, _int(ldab), x.address + system * x_step, _int(n),
            ctypes.byref(status),
        )  # fmt: skip
        _check_info(status, "pbtrs")


# -- tridiagonal LU: rows dl, d, du, du2 of a (..., 4, n) array ----------------------------


def _gttrf(args, rets) -> None:
    (bands,) = args
    lu, pivots, info = rets
    _into(bands, lu)
    *_, n = lu.shape
    routine = _routine(_PREFIX[lu.dtype] + "gttrf")
    itemsize = lu.dtype.itemsize
    info_view = info.array.reshape(-1)
    status = c_int(0)
    for system in range(_systems(lu, core=2)):
        base = lu.address + system * 4 * n * itemsize
        if n:
            dl, d, du, du2 = (base + row * n * itemsize for row in range(4))
            routine(_int(n), dl, d, du, du2, pivots.address + system * n * 4, ctypes.byref(status))
            _check_info(status, "gttrf")
        info_view[system] = status.value
    pivots.array[...] -= 1


def _gttrs(args, rets, *, trans: int) -> None:
    lu, pivots, b = args
    (x,) = rets
    _into(b, x)
    *_, n = lu.shape
    k = x.shape[-2]
    if n == 0 or k == 0:
        return
    routine = _routine(_PREFIX[lu.dtype] + "gttrs")
    itemsize = lu.dtype.itemsize
    lu_step = _stride(lu, 2)
    systems = 1 if lu_step == 0 else _systems(x, core=2)
    columns = k * (_systems(x, core=2) if lu_step == 0 else 1)
    pivot_array = pivots.array.reshape(-1, n)
    status = c_int(0)
    for system in range(systems):
        base = lu.address + system * lu_step
        dl, d, du, du2 = (base + row * n * itemsize for row in range(4))
        one_based = pivot_array[system if lu_step else 0] + 1
        routine(
            _char("NTC"[trans]), _int(n), _int(columns), dl, d, du, du2,
            one_based.ctypes.data, x.address + system * k * n * itemsize, _int(n),
            ctypes.byref(status),
        )  # fmt: skip
        _check_info(status, "gttrs")


# -- tridiagonal L D L^H: d (real) and e ---------------------------------------------------


def _pttrf(args, rets) -> None:
    d_in, e_in = args
    d, e, info = rets
    _into(d_in, d)
    _into(e_in, e)
    n = d.shape[-1]
    routine = _routine(_PREFIX[e.dtype] + "pttrf")
    info_view = info.array.reshape(-1)
    status = c_int(0)
    for system in range(_systems(d, core=1)):
        if n:
            routine(
                _int(n), d.address + system * n * d.dtype.itemsize,
                e.address + system * n * e.dtype.itemsize, ctypes.byref(status),
            )  # fmt: skip
            _check_info(status, "pttrf")
        info_view[system] = status.value


def _pttrs(args, rets) -> None:
    d, e, b = args
    (x,) = rets
    _into(b, x)
    n = d.shape[-1]
    k = x.shape[-2]
    if n == 0 or k == 0:
        return
    complex_ = x.dtype.kind == "c"
    routine = _routine(_PREFIX[x.dtype] + "pttrs")
    d_step, e_step = _stride(d, 1), _stride(e, 1)
    systems = 1 if d_step == 0 else _systems(x, core=2)
    columns = k * (_systems(x, core=2) if d_step == 0 else 1)
    status = c_int(0)
    for system in range(systems):
        # e holds the subdiagonal of L (A = L D L^H): uplo "L" for the complex routine.
        arguments = [
            _int(n), _int(columns), d.address + system * d_step, e.address + system * e_step,
            x.address + system * k * n * x.dtype.itemsize, _int(n), ctypes.byref(status),
        ]  # fmt: skip
        routine(*([_char("L")] if complex_ else []), *arguments)
        _check_info(status, "pttrs")


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


def _target(name: str) -> str:
    """The FFI target of routine ``name``, registered with XLA on first use."""
    target = f"jaxdia_lapack_{name}"
    if target not in _KEEP_ALIVE:
        handler = _make_handler(_HANDLERS[name])
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


def gbtrf(ab, *, kl: int, ku: int):
    """``(lu, pivots, info)`` of bands ``ab`` ``(..., n, 2 kl + ku + 1)`` (fill rows zero)."""
    batch, n = ab.shape[:-2], ab.shape[-2]
    results = [jax.ShapeDtypeStruct(ab.shape, ab.dtype), *_int_results(batch, n)]
    return _call("gbtrf", results, ab, aliases={0: 0}, kl=kl, ku=ku)


def gbtrs(lu, pivots, b, *, kl: int, ku: int, trans: int):
    """``x`` ``(..., k, n)`` solving ``op(A) x = b`` with ``gbtrf``'s factor."""
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    return _call("gbtrs", [result], lu, pivots, b, aliases={2: 0}, kl=kl, ku=ku, trans=trans)[0]


def pbtrf(ab, *, kd: int, lower: bool):
    """``(c, info)`` of the Cholesky factor of bands ``ab`` ``(..., n, kd + 1)``."""
    batch = ab.shape[:-2]
    results = [jax.ShapeDtypeStruct(ab.shape, ab.dtype), jax.ShapeDtypeStruct(batch, np.int32)]
    return _call("pbtrf", results, ab, aliases={0: 0}, kd=kd, lower=int(lower))


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
