"""What the host runtime needs to know about an array: pointer, shape, dtype, layout.

Anything with ``__cuda_array_interface__`` (cupy, numba device arrays, our
buffers), torch CUDA tensors (read through their attributes, so bfloat16 works),
and, as a fallback, anything with ``__dlpack__`` on a CUDA device.  No array
library is imported here.
"""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

from ..errors import NvshmemArgumentError, NvshmemTypeError
from . import _dlpack

__all__ = ["ArrayInfo", "describe", "dtype_name", "library_of", "itemsize_of"]

# itemsize of the dtype names we can meet (numpy names, plus bfloat16)
_ITEMSIZE = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2,
    "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
    "complex64": 8, "complex128": 16,
}


class ArrayInfo(NamedTuple):
    """A device array as seen by the host runtime (all sizes in bytes unless noted).  A named tuple:
    every host operation makes two, and a frozen dataclass's construction cost ~1 us of each."""

    ptr: int  #: address of the first element
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  #: byte strides; None when C-contiguous
    dtype: str  #: numpy-style dtype name ("float32", "bfloat16", "V2" when unknown)
    itemsize: int
    library: str  #: "cupy", "torch", "numba", "nvshmem_dsl", "dlpack" or "cai"
    obj: Any = None

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def contiguous(self) -> bool:
        if self.strides is None:
            return True
        expected = self.itemsize
        for dim, stride in zip(reversed(self.shape), reversed(self.strides)):
            if dim != 1 and stride != expected:
                return False
            expected *= dim
        return True

    @property
    def span(self) -> tuple[int, int]:
        """[low, high) byte addresses the array touches."""
        if self.size == 0:
            return self.ptr, self.ptr
        if self.strides is None:
            return self.ptr, self.ptr + self.nbytes
        low = high = self.ptr
        for dim, stride in zip(self.shape, self.strides):
            if stride >= 0:
                high += (dim - 1) * stride
            else:
                low += (dim - 1) * stride
        return low, high + self.itemsize

    def element_stride(self) -> int | None:
        """For a 1-D array: its stride in elements (None when not 1-D or not a multiple)."""
        if len(self.shape) != 1:
            return None
        if self.strides is None:
            return 1
        stride = self.strides[0]
        if stride <= 0 or stride % self.itemsize:
            return None
        return stride // self.itemsize


def library_of(obj: Any) -> str | None:
    """Which array library ``obj`` comes from ("cupy", "torch", "numba", "nvshmem_dsl"), if known."""
    kind = type(obj)
    try:
        return _LIBRARY_OF[kind]
    except KeyError:
        pass
    except TypeError:  # an unhashable class: asked every time
        return _library_of_module(kind)
    found = _LIBRARY_OF[kind] = _library_of_module(kind)
    return found


_LIBRARY_OF: dict[type, str | None] = {}  #: by class: every operation asks, twice


def _library_of_module(kind: type) -> str | None:
    root = (getattr(kind, "__module__", None) or "").split(".", 1)[0]
    return root if root in ("cupy", "torch", "numba", "nvshmem_dsl") else None


def itemsize_of(name: str) -> int | None:
    if name in _ITEMSIZE:
        return _ITEMSIZE[name]
    if name.startswith("V") and name[1:].isdigit():
        return int(name[1:])
    return None


#: dtype_name of the strings seen (numpy's parse costs ~1 us a call)
_NAMES: dict[str, str] = {}


def dtype_name(dtype: Any) -> str:
    """A numpy-style name for a dtype given as a string, numpy/cupy dtype, torch dtype or type.

    Strings are numpy names ("float32", "int64", "bfloat16"); NVSHMEM's C names
    are not accepted where numpy means something else ("float" is numpy's float64).
    """
    if type(dtype) is str:
        name = _NAMES.get(dtype)
        if name is None:
            name = _NAMES[dtype] = _dtype_name(dtype)  # an unknown one raises: not kept
        return name
    return _dtype_name(dtype)


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        text = dtype.strip()
        if text in ("bfloat16", "bf16"):
            return "bfloat16"
        if text.startswith("torch."):
            return _torch_dtype_name(text)
        import numpy

        try:
            return numpy.dtype(text).name
        except TypeError:
            raise NvshmemTypeError(f"unknown dtype {dtype!r}") from None
    module = type(dtype).__module__ or ""
    if module.startswith("torch"):
        return _torch_dtype_name(str(dtype))
    name = getattr(dtype, "__name__", None) or getattr(dtype, "name", None)
    if name == "bfloat16":
        return "bfloat16"
    import numpy

    try:
        np_dtype = numpy.dtype(dtype)
    except TypeError:
        raise NvshmemTypeError(f"unknown dtype {dtype!r}") from None
    if np_dtype.name == "bfloat16":
        return "bfloat16"
    return np_dtype.name


_TORCH_NAMES = {"half": "float16", "float": "float32", "double": "float64", "long": "int64", "int": "int32",
                "short": "int16", "cfloat": "complex64", "cdouble": "complex128"}


def _torch_dtype_name(text: str) -> str:
    name = text.removeprefix("torch.")
    return _TORCH_NAMES.get(name, name)


# --------------------------------------------------------------------------- describe


def describe(obj: Any, *, function: str = "", argument: str = "") -> ArrayInfo:
    """ArrayInfo of a device array; NvshmemTypeError when ``obj`` is not one."""
    lib = library_of(obj)
    if lib == "torch" and hasattr(obj, "data_ptr"):
        return _describe_torch(obj, function, argument)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _describe_cai(cai, obj, lib or "cai", function, argument)
    where = _where(function, argument)
    if hasattr(obj, "__array_interface__") or (type(obj).__module__ or "").startswith("numpy"):
        raise NvshmemTypeError(f"{where}is a host (numpy) array; NVSHMEM host operations need GPU arrays")
    if hasattr(obj, "__dlpack__"):
        return _describe_dlpack(obj, where)
    raise NvshmemTypeError(
        f"{where}must be a GPU array (cupy, torch, numba, an nvshmem_dsl buffer, or anything with "
        f"__cuda_array_interface__ or __dlpack__), not {type(obj).__module__}.{type(obj).__qualname__}"
    )


def _where(function: str, argument: str) -> str:
    """The start of an error message: which function's which argument (made only for an error)."""
    if function and argument:
        return f"{function}(): argument '{argument}' "
    if function:
        return f"{function}(): "
    if argument:
        return f"argument '{argument}' "
    return ""


def _describe_torch(t: Any, function: str, argument: str) -> ArrayInfo:
    if t.device.type != "cuda":
        raise NvshmemTypeError(f"{_where(function, argument)}is a torch tensor on {t.device}; NVSHMEM needs a CUDA tensor")
    itemsize = t.element_size()
    shape = tuple(int(s) for s in t.shape)
    strides = tuple(int(s) * itemsize for s in t.stride())
    info = ArrayInfo(int(t.data_ptr()), shape, strides, _torch_dtype_name(str(t.dtype)), itemsize, "torch", t)
    if info.contiguous:
        info = ArrayInfo(info.ptr, shape, None, info.dtype, itemsize, "torch", t)
    return info


def _describe_cai(cai: dict, obj: Any, lib: str, function: str, argument: str) -> ArrayInfo:
    try:
        ptr = int(cai["data"][0] or 0)
        shape = tuple(map(int, cai["shape"]))
        typestr = cai["typestr"]
        strides = cai.get("strides")
    except (KeyError, TypeError, IndexError, ValueError):
        raise NvshmemTypeError(f"{_where(function, argument)}has a malformed __cuda_array_interface__") from None
    known = _TYPESTRS.get(typestr) if type(typestr) is str else None
    if known is None:
        known = _typestr_name(typestr, _where(function, argument))
    name, itemsize = known
    name = getattr(obj, "_nvshmem_dtype", None) or name
    strides = None if strides is None else tuple(int(s) for s in strides)
    info = ArrayInfo(ptr, shape, strides, name, itemsize, lib, obj)
    if strides is not None and info.contiguous:
        info = ArrayInfo(ptr, shape, None, name, itemsize, lib, obj)
    return info


#: (dtype name, itemsize) of the typestrs seen ("<f4": ("float32", 4))
_TYPESTRS: dict[str, tuple[str, int]] = {}


def _typestr_name(typestr: Any, where: str) -> tuple[str, int]:
    import numpy

    try:
        np_dtype = numpy.dtype(typestr)
    except TypeError:
        raise NvshmemTypeError(f"{where}has an unknown typestr {typestr!r}") from None
    name = np_dtype.name
    if name.startswith("void"):
        name = f"V{np_dtype.itemsize}"
    if type(typestr) is str:
        _TYPESTRS[typestr] = (name, np_dtype.itemsize)
    return name, np_dtype.itemsize


# DLPack (v0.x "dltensor" capsules) -----------------------------------------


def _describe_dlpack(obj: Any, where: str) -> ArrayInfo:
    try:
        capsule = obj.__dlpack__()
    except Exception as exc:
        raise NvshmemTypeError(f"{where}could not be exported through DLPack: {exc}") from None
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    try:
        address = get(capsule, b"dltensor")
    except ValueError:
        raise NvshmemTypeError(f"{where}gave a DLPack capsule of an unsupported version") from None
    t = _dlpack.DLTensor.from_address(address)  # DLManagedTensor starts with its DLTensor
    if t.device.device_type not in _dlpack.CUDA_DEVICE_TYPES:
        raise NvshmemTypeError(f"{where}is not on a CUDA device (DLPack device type {t.device.device_type})")
    bits = t.dtype.bits
    name = _dlpack.from_dlpack_type(t.dtype.code, bits)
    if name is None or t.dtype.lanes != 1:
        raise NvshmemTypeError(f"{where}has an unsupported DLPack dtype (code {t.dtype.code})")
    itemsize = max(1, bits // 8)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None
    if t.strides:
        strides = tuple(t.strides[i] * itemsize for i in range(t.ndim))
    ptr = (t.data or 0) + t.byte_offset
    # keep the capsule (and so the exporter's tensor) alive as long as the info
    info = ArrayInfo(ptr, shape, strides, name, itemsize, "dlpack", (obj, capsule))
    if strides is not None and info.contiguous:
        info = ArrayInfo(ptr, shape, None, name, itemsize, "dlpack", (obj, capsule))
    return info


def check_positive_int(value: Any, what: str, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import operator

            value = operator.index(value)
        except TypeError:
            raise NvshmemTypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise NvshmemArgumentError(f"{what} must be {'non-negative' if allow_zero else 'positive'}, got {value}")
    return value
