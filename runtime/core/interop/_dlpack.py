"""A DLPack exporter for device memory at a given address, on a given device.

torch places a tensor made from ``__cuda_array_interface__`` on the device that owns the memory;
for a peer or multicast address (memory of another GPU, mapped into this GPU's address space by
NVSHMEM) that is the other GPU, and torch would then run its kernels there.  NVSHMEM4Py's peer
tensors are on the calling PE's device (they come through DLPack with that device); so are the
ones made here.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from ...host._dlpack import KDL_CUDA, Deleter, DLDataType, DLDevice, DLManagedTensor, DLTensor, to_dlpack_type

__all__ = ["DLPackView"]

_lock = threading.Lock()
_alive: dict[int, tuple] = {}  # address of a DLManagedTensor -> what it points into (until deleted)


@Deleter
def _delete(managed) -> None:
    if managed:
        with _lock:
            _alive.pop(ctypes.addressof(managed.contents), None)


class DLPackView:
    """``__dlpack__`` / ``__dlpack_device__`` for ``shape`` elements of ``dtype`` at ``ptr`` on CUDA
    device ``device_id``; ``strides`` in elements (None: C order); keeps ``owner`` alive."""

    def __init__(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None, dtype: str,
                 device_id: int, owner: Any = None) -> None:
        self.ptr, self.shape, self.strides, self.dtype = int(ptr), tuple(shape), strides, dtype
        self.device_id, self.owner = int(device_id), owner

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device_id)

    def __dlpack__(self, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None):
        code, bits = to_dlpack_type(self.dtype)
        shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        strides = None if self.strides is None else (ctypes.c_int64 * len(self.strides))(*self.strides)
        managed = DLManagedTensor()
        managed.dl_tensor = DLTensor(
            ctypes.c_void_p(self.ptr), DLDevice(KDL_CUDA, self.device_id), len(self.shape),
            DLDataType(code, bits, 1), ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
            None if strides is None else ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)), 0)
        managed.manager_ctx = None
        managed.deleter = _delete
        with _lock:
            _alive[ctypes.addressof(managed)] = (managed, shape, strides, self.owner)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(managed), b"dltensor", None)
