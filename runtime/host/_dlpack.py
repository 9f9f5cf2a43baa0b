"""The DLPack ABI (v0.x ``dltensor`` capsules) as ctypes, and its element types as dtype names.

Read by :func:`nvshmem_dsl.host._arrays.describe` (arrays that only speak ``__dlpack__``) and
written by :class:`nvshmem_dsl.core.interop._dlpack.DLPackView` (torch tensors of peer memory).
"""

from __future__ import annotations

import ctypes

__all__ = ["DLDataType", "DLDevice", "Deleter", "DLManagedTensor", "DLTensor", "KDL_CUDA", "CUDA_DEVICE_TYPES",
           "to_dlpack_type", "from_dlpack_type"]

KDL_CUDA = 2  #: kDLCUDA
CUDA_DEVICE_TYPES = (KDL_CUDA, 13)  #: kDLCUDA, kDLCUDAManaged

#: DLPack's type codes (kDLInt ...), by the prefix of the dtype names they make.
_CODES = {"int": 0, "uint": 1, "float": 2, "bfloat": 4, "complex": 5, "bool": 6}
_PREFIXES = {code: prefix for prefix, code in _CODES.items()}
#: dtype names that are not ``<prefix><bits>``.
_WHOLE = {"bool": ("bool", 8), "bfloat16": ("bfloat", 16)}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", Deleter)]


def to_dlpack_type(name: str) -> tuple[int, int]:
    """``(type code, bits)`` of dtype ``name`` (``float32``, ``bfloat16``, ``bool`` ...); TypeError
    for one DLPack has no type for."""
    prefix, bits = _WHOLE.get(name, (None, None))
    if prefix is not None:
        return _CODES[prefix], bits
    for prefix in ("uint", "int", "float", "complex"):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return _CODES[prefix], int(name[len(prefix):])
    raise TypeError(f"no DLPack type for dtype {name!r}")


def from_dlpack_type(code: int, bits: int) -> str | None:
    """The dtype name of DLPack type ``code`` of ``bits`` bits (None: a code this does not know)."""
    prefix = _PREFIXES.get(code)
    if prefix is None:
        return None
    for name, (p, b) in _WHOLE.items():
        if p == prefix and (b == bits or prefix == "bool"):
            return name
    return f"{prefix}{bits}"
