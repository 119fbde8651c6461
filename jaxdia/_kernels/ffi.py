r"""XLA's FFI, seen from Python: a ``ctypes`` callback as the handler of a custom call.

XLA calls an FFI handler with a pointer to a call frame (``xla/ffi/api/c_api.h``, API
version 0.1): the operand and result buffers, the attributes, and the API's function
table. :func:`make_handler` turns a Python function of :class:`HostBuffer`\ s (address,
shape, dtype; ``array`` views one without a copy) and integer attributes into such a
handler; :mod:`jaxdia._kernels.lapack` registers its LAPACK calls with it. This is the
only module that knows XLA's C structures: a change of XLA's FFI changes this file alone.

A handler never raises into XLA: an exception becomes an XLA error with its message
(``XlaRuntimeError`` in Python), and the handler answers XLA's metadata query (which API
version it was written against) itself.
"""

from __future__ import annotations

import ctypes
import math
import traceback
from collections.abc import Callable
from ctypes import POINTER, Structure, c_char_p, c_int, c_int64, c_size_t, c_uint32, c_void_p
from typing import Any

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


def make_handler(body: Callable[..., None]) -> Any:
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
