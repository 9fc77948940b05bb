"""Tensors of other libraries as wsync_tensor: a pointer, a dtype, a shape and a device, never a copy.

Understood, in this order: torch.Tensor (only when torch is already imported: ``sys.modules``), numpy.ndarray
(likewise), any object with ``__dlpack__`` (its capsule read with ctypes), objects with ``__array_interface__``
and writable Python buffers (bytearray, array.array, memoryview, ctypes arrays). Nothing here imports torch or
numpy.
"""

from __future__ import annotations

import ctypes
import sys
from ctypes import POINTER, Structure, c_int32, c_int64, c_uint8, c_uint16, c_uint64, c_void_p
from typing import Any

from . import _native as N
from .errors import InvalidArgumentError, UnsupportedError

HOST = ("cpu", -1)
Device = tuple[str, int]  # ("cpu", -1) or ("cuda", index)


class TensorInfo:
    """One tensor as wsync sees it; `keep` holds what must stay alive while the C side may touch the memory."""

    __slots__ = ("name", "dtype", "shape", "data", "nbytes", "device", "keep", "obj")

    def __init__(
        self, name: str, dtype: int, shape: tuple[int, ...], data: int, nbytes: int, device: Device, keep: Any, obj: Any
    ):
        self.name, self.dtype, self.shape, self.data, self.nbytes = name, dtype, shape, data, nbytes
        self.device, self.keep, self.obj = device, keep, obj


def device_text(device: Device) -> str:
    return "cpu" if device[0] == "cpu" else f"{device[0]}:{device[1]}"


# ---------------------------------------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------------------------------------
# Names as torch, numpy and ml_dtypes spell them -> wsync_dtype.
_BY_NAME = {
    "bool": N.DTYPE_BOOL,
    "uint8": N.DTYPE_U8,
    "int8": N.DTYPE_I8,
    "int16": N.DTYPE_I16,
    "int32": N.DTYPE_I32,
    "int64": N.DTYPE_I64,
    "float16": N.DTYPE_F16,
    "bfloat16": N.DTYPE_BF16,
    "float32": N.DTYPE_F32,
    "float64": N.DTYPE_F64,
    "float8_e4m3fn": N.DTYPE_F8_E4M3,
    "float8_e5m2": N.DTYPE_F8_E5M2,
    "uint16": N.DTYPE_U16,
    "uint32": N.DTYPE_U32,
    "uint64": N.DTYPE_U64,
}
_torch_dtypes: dict[Any, int] | None = None


def _torch_dtype_map(torch) -> dict[Any, int]:
    global _torch_dtypes
    if _torch_dtypes is None:
        table = {}
        for name, code in _BY_NAME.items():
            dtype = getattr(torch, name, None)  # uint16/32/64 and float8 only in newer torch
            if dtype is not None:
                table[dtype] = code
        _torch_dtypes = table
    return _torch_dtypes


# DLPack (code, bits) -> wsync_dtype (dlpack.h's DLDataTypeCode).
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL, _DL_F8_E4M3FN, _DL_F8_E5M2 = 0, 1, 2, 4, 6, 10, 12
_BY_DLPACK = {
    (_DL_BOOL, 8): N.DTYPE_BOOL,
    (_DL_UINT, 8): N.DTYPE_U8,
    (_DL_INT, 8): N.DTYPE_I8,
    (_DL_INT, 16): N.DTYPE_I16,
    (_DL_INT, 32): N.DTYPE_I32,
    (_DL_INT, 64): N.DTYPE_I64,
    (_DL_FLOAT, 16): N.DTYPE_F16,
    (_DL_BFLOAT, 16): N.DTYPE_BF16,
    (_DL_FLOAT, 32): N.DTYPE_F32,
    (_DL_FLOAT, 64): N.DTYPE_F64,
    (_DL_F8_E4M3FN, 8): N.DTYPE_F8_E4M3,
    (_DL_F8_E5M2, 8): N.DTYPE_F8_E5M2,
    (_DL_UINT, 16): N.DTYPE_U16,
    (_DL_UINT, 32): N.DTYPE_U32,
    (_DL_UINT, 64): N.DTYPE_U64,
}

# struct module / __array_interface__ letters -> (kind, signed)
_BUFFER_FORMATS = {
    "?": ("bool", 1),
    "b": ("int", 1),
    "B": ("uint", 1),
    "h": ("int", 2),
    "H": ("uint", 2),
    "i": ("int", 4),
    "I": ("uint", 4),
    "l": ("int", 8),
    "L": ("uint", 8),
    "q": ("int", 8),
    "Q": ("uint", 8),
    "e": ("float", 2),
    "f": ("float", 4),
    "d": ("float", 8),
}


def _dtype_from_kind(kind: str, size: int) -> int | None:
    if kind == "bool":
        return N.DTYPE_BOOL if size == 1 else None
    return _BY_NAME.get(f"{kind}{size * 8}")


def _unsupported_dtype(name: str, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"tensor '{name}': dtype {what} is not one wsync carries (bool, uint8..uint64, "
        f"int8..int64, float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2)"
    )


# ---------------------------------------------------------------------------------------------------------------
# DLPack capsules
# ---------------------------------------------------------------------------------------------------------------
class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", _DLDevice),
        ("ndim", c_int32),
        ("dtype", _DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class _DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13

_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(name: str, obj: Any, writable: bool) -> TensorInfo:
    try:
        capsule = obj.__dlpack__()
    except TypeError:
        capsule = obj.__dlpack__(stream=None)
    if not _capsule_is_valid(capsule, b"dltensor"):
        raise UnsupportedError(f"tensor '{name}': __dlpack__() gave no 'dltensor' capsule")
    # The capsule stays unconsumed and is kept alive with the tensor: its destructor calls the producer's deleter
    # once nothing here can touch the memory any more.
    managed = _DLManagedTensor.from_address(_capsule_get_pointer(capsule, b"dltensor"))
    tensor = managed.dl_tensor
    if tensor.dtype.lanes != 1:
        raise _unsupported_dtype(name, f"with {tensor.dtype.lanes} lanes")
    dtype = _BY_DLPACK.get((tensor.dtype.code, tensor.dtype.bits))
    if dtype is None:
        raise _unsupported_dtype(name, f"(DLPack code {tensor.dtype.code}, {tensor.dtype.bits} bits)")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(tensor.ndim))
        if not _row_major(shape, strides, 1):
            raise InvalidArgumentError(
                f"tensor '{name}' is not contiguous (strides {strides} for shape {shape}): pass a contiguous copy"
            )
    kind = tensor.device.device_type
    if kind in (_DL_CPU, _DL_CUDA_HOST):
        device = HOST
    elif kind in (_DL_CUDA, _DL_CUDA_MANAGED):
        device = ("cuda", tensor.device.device_id)
    else:
        raise UnsupportedError(f"tensor '{name}': DLPack device type {kind} is neither the host nor CUDA")
    data = (tensor.data or 0) + tensor.byte_offset
    count = 1
    for extent in shape:
        count *= extent
    return TensorInfo(name, dtype, shape, data, count * N.DTYPE_SIZES[dtype], device, (obj, capsule), obj)


def _row_major(shape, strides, element) -> bool:
    """Whether strides (in elements when element == 1, else bytes) describe a dense row-major layout."""
    expected = element
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


# ---------------------------------------------------------------------------------------------------------------
# One tensor
# ---------------------------------------------------------------------------------------------------------------
def describe(name: str, obj: Any, writable: bool = False) -> TensorInfo:
    """`obj` as a TensorInfo, or InvalidArgumentError / UnsupportedError naming `name`."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"tensor names are strings, not {type(name).__name__} ({name!r})")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(torch, name, obj)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        return _from_numpy(name, obj, writable)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(name, obj, writable)
    if hasattr(obj, "__array_interface__"):
        return _from_array_interface(name, obj, writable)
    try:
        view = memoryview(obj)
    except TypeError:
        raise InvalidArgumentError(
            f"tensor '{name}': a {type(obj).__module__}.{type(obj).__qualname__} is not a "
            f"tensor wsync understands (torch.Tensor, numpy.ndarray, a __dlpack__ producer, "
            f"or a writable buffer)"
        ) from None
    return _from_buffer(name, obj, view)


def _from_torch(torch, name: str, tensor) -> TensorInfo:
    dtype = _torch_dtype_map(torch).get(tensor.dtype)
    if dtype is None:
        raise _unsupported_dtype(name, str(tensor.dtype).replace("torch.", ""))
    if tensor.layout != torch.strided:
        raise InvalidArgumentError(f"tensor '{name}' has layout {tensor.layout}: only dense (strided) tensors")
    if not tensor.is_contiguous():
        raise InvalidArgumentError(
            f"tensor '{name}' is not contiguous (shape {tuple(tensor.shape)}, strides "
            f"{tuple(tensor.stride())}): pass a contiguous copy"
        )
    if tensor.is_conj() if hasattr(tensor, "is_conj") else False:
        raise InvalidArgumentError(f"tensor '{name}' is a lazy conjugate view: resolve it first")
    kind = tensor.device.type
    if kind == "cpu":
        device = HOST
    elif kind == "cuda":
        device = ("cuda", tensor.device.index if tensor.device.index is not None else torch.cuda.current_device())
    else:
        raise InvalidArgumentError(f"tensor '{name}' is on device {tensor.device}: wsync takes CPU or CUDA tensors")
    return TensorInfo(
        name,
        dtype,
        tuple(tensor.shape),
        tensor.data_ptr(),
        tensor.numel() * tensor.element_size(),
        device,
        tensor,
        tensor,
    )


def _from_numpy(name: str, array, writable: bool) -> TensorInfo:
    dtype = _BY_NAME.get(array.dtype.name)
    if dtype is None or array.dtype.byteorder == ">" or array.dtype.itemsize != N.DTYPE_SIZES[dtype]:
        raise _unsupported_dtype(name, str(array.dtype))
    if not array.flags["C_CONTIGUOUS"]:
        raise InvalidArgumentError(
            f"tensor '{name}' is not C-contiguous (shape {array.shape}, strides "
            f"{array.strides}): pass numpy.ascontiguousarray(...)"
        )
    if writable and not array.flags["WRITEABLE"]:
        raise InvalidArgumentError(f"tensor '{name}' is read-only: a worker writes its bound tensors")
    return TensorInfo(name, dtype, tuple(array.shape), array.ctypes.data, array.nbytes, HOST, array, array)


def _from_array_interface(name: str, obj, writable: bool) -> TensorInfo:
    interface = obj.__array_interface__
    typestr = interface["typestr"]
    byteorder, letter, size = typestr[0], typestr[1], int(typestr[2:])
    kinds = {"b": "bool", "i": "int", "u": "uint", "f": "float"}
    dtype = _dtype_from_kind(kinds.get(letter, "?"), size) if byteorder in "<|=" else None
    if dtype is None:
        raise _unsupported_dtype(name, typestr)
    shape = tuple(interface["shape"])
    strides = interface.get("strides")
    if strides is not None and not _row_major(shape, strides, size):
        raise InvalidArgumentError(f"tensor '{name}' is not C-contiguous (strides {strides} for shape {shape})")
    data, read_only = interface["data"]
    if writable and read_only:
        raise InvalidArgumentError(f"tensor '{name}' is read-only: a worker writes its bound tensors")
    count = 1
    for extent in shape:
        count *= extent
    return TensorInfo(name, dtype, shape, data, count * size, HOST, obj, obj)


def _from_buffer(name: str, obj, view: memoryview) -> TensorInfo:
    letter = view.format.lstrip("@=<")
    kind = _BUFFER_FORMATS.get(letter)
    dtype = _dtype_from_kind(kind[0], view.itemsize) if kind and kind[1] == view.itemsize else None
    if dtype is None:
        raise _unsupported_dtype(name, f"of buffer format '{view.format}'")
    if not view.c_contiguous:
        raise InvalidArgumentError(f"tensor '{name}' is not a C-contiguous buffer")
    if view.readonly:
        raise InvalidArgumentError(
            f"tensor '{name}' is a read-only buffer ({type(obj).__name__}): wsync takes "
            f"writable buffers only (bytearray, array.array, numpy arrays, tensors)"
        )
    anchor = (ctypes.c_char * view.nbytes).from_buffer(view) if view.nbytes else None
    data = ctypes.addressof(anchor) if anchor is not None else 0
    return TensorInfo(name, dtype, tuple(view.shape or ()), data, view.nbytes, HOST, (obj, view, anchor), obj)


# ---------------------------------------------------------------------------------------------------------------
# Many tensors
# ---------------------------------------------------------------------------------------------------------------
def named_items(tensors: Any, what: str) -> list[tuple[str, Any]]:
    """A Mapping's items or an iterable of (name, tensor) pairs, as a list."""
    if tensors is None:
        raise InvalidArgumentError(f"{what}: no tensors given")
    items = tensors.items() if hasattr(tensors, "items") else tensors
    try:
        pairs = list(items)
    except TypeError:
        raise InvalidArgumentError(
            f"{what}: expected a mapping of name -> tensor or an iterable of (name, tensor) "
            f"pairs, not {type(tensors).__name__}"
        ) from None
    for index, pair in enumerate(pairs):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise InvalidArgumentError(f"{what}: item {index} is {type(pair).__name__}, not a (name, tensor) pair")
    return pairs


class TensorArray:
    """A wsync_tensor[] and everything its pointers lead to (names, shapes, the tensors themselves)."""

    def __init__(self, infos: list[TensorInfo]):
        self.infos = infos
        self.count = len(infos)
        self.array = (N.Tensor * max(self.count, 1))()
        self._names = [info.name.encode() for info in infos]
        self._shapes = [(c_int64 * len(info.shape))(*info.shape) if info.shape else None for info in infos]
        for index, info in enumerate(infos):
            entry = self.array[index]
            entry.name = self._names[index]
            entry.dtype = info.dtype
            entry.ndim = len(info.shape)
            if self._shapes[index] is not None:
                entry.shape = self._shapes[index]
            entry.data = info.data or None
            entry.bytes = info.nbytes

    def pointer(self):
        return self.array if self.count else None

    def devices(self) -> list[Device]:
        return sorted({info.device for info in self.infos})
