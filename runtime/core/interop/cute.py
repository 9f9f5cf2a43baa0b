"""Symmetric CuTe DSL tensors as NVSHMEM4Py makes them (``nvshmem.core.interop.cute``).

``tensor(shape, dtype=cute.Int32)`` allocates with :func:`nvshmem_dsl.array` (through CuPy, or
torch when CuPy is absent) and returns ``cute.runtime.from_dlpack`` of it.
``cute_compile_helper(fn, *args)`` is :func:`nvshmem_dsl.cute.compile` (the GPU arch and the
NVSHMEM module init done for you) and returns ``(compiled, kernel object)`` as NVSHMEM4Py's
does; pass the kernel object to ``library_finalize`` when done, or leave it to ``finalize``.
As in NVSHMEM4Py this module is not imported by ``nvshmem_dsl.core`` itself (its names would
shadow the torch ones): ``import nvshmem_dsl.core.interop.cute``.
"""

from __future__ import annotations

import math
from typing import Any

from ...host import _arrays
from ...host import memory as _native
from .. import _tracking
from .. import memory as _memory
from .._tracking import CAIView, translated
from .._types import NvshmemInvalid, NvshmemKernelObject
from . import _common

__all__ = ["bytetensor", "tensor", "free_tensor", "tensor_get_buffer", "get_peer_tensor", "get_multicast_tensor",
           "register_external_tensor", "unregister_external_tensor", "cleanup_cute", "cute_compile_helper"]

_CUTE_NAMES = {"Float16": "float16", "BFloat16": "bfloat16", "Float32": "float32", "Float64": "float64",
               "Int8": "int8", "Int16": "int16", "Int32": "int32", "Int64": "int64", "Uint8": "uint8",
               "Uint16": "uint16", "Uint32": "uint32", "Uint64": "uint64", "Boolean": "bool"}


def _dtype_name(dtype: Any) -> str:
    if dtype is None:
        return "float32"
    name = getattr(dtype, "__name__", None)
    if name in _CUTE_NAMES:
        return _CUTE_NAMES[name]
    return _arrays.dtype_name(dtype)


def _library(function: str) -> str:
    import importlib.util
    import sys

    for name in ("cupy", "torch"):
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            return name
    raise ModuleNotFoundError(f"{function}(): CuTe tensors are made through DLPack from CuPy or torch; "
                              "install one of them", name="cupy")


def _from_array(array: Any, entry: _tracking.Entry) -> Any:
    from cutlass.cute.runtime import from_dlpack

    return _tracking.track_tensor(from_dlpack(array), entry, array)


def _backing(tensor: Any, function: str) -> tuple[_tracking.Entry, Any]:
    hit = _tracking.TENSORS.get(id(tensor))
    if hit is None or hit[0] is not tensor:
        raise NvshmemInvalid(f"{function}(): Tried to retrieve buffer from Tensor not tracked by nvshmem_dsl.core")
    return hit[1], hit[2]


@translated
def tensor(shape: Any, dtype: Any = None, release: bool = False, morder: str = "C", except_on_del: bool = True):
    """A symmetric CuTe tensor (collective; uninitialised) of a CuTe dtype (default ``Float32``)."""
    array, entry = _common.new_array(shape, _dtype_name(dtype), _library("tensor"), morder, "tensor")
    return _from_array(array, entry)


@translated
def bytetensor(shape: Any, dtype: Any = None, release: bool = False, morder: str = "C", except_on_del: bool = True):
    """A symmetric Int8 CuTe tensor of ``shape`` (``dtype`` is ignored, as in NVSHMEM4Py)."""
    array, entry = _common.new_array(shape, "int8", _library("bytetensor"), morder, "bytetensor")
    return _from_array(array, entry)


@translated
def tensor_get_buffer(tensor: Any):
    """``(cuda.core Buffer, size in bytes, CuTe dtype)`` of a tensor from :func:`tensor`."""
    entry, array = _backing(tensor, "tensor_get_buffer")
    info = _arrays.describe(array)
    return _tracking.core_buffer(entry), info.nbytes, getattr(tensor, "element_type", None)


@translated
def get_peer_tensor(tensor: Any, peer_pe: int | None = None):
    """PE ``peer_pe``'s copy of ``tensor`` for loads and stores (``nvshmem_ptr``); freeing it is a no-op."""
    entry, array = _backing(tensor, "get_peer_tensor")
    view = _memory.peer_entry(entry, peer_pe, "get_peer_tensor")
    if view is entry:
        return tensor
    return _from_array(_common.view_of(array, view), view)


@translated
def get_multicast_tensor(team: Any, tensor: Any):
    """``tensor`` at its multicast address for ``team`` (``nvshmemx_mc_ptr``), for kernels."""
    entry, array = _backing(tensor, "get_multicast_tensor")
    view = _memory.multicast_entry(team, entry, "get_multicast_tensor")
    return _from_array(_common.view_of(array, view), view)


@translated
def free_tensor(tensor: Any) -> None:
    """Free a tensor from :func:`tensor` (collective); a peer/multicast view: no-op."""
    from ...host import _state

    if not _state.STATE.initialized:
        return
    entry, _ = _backing(tensor, "free_tensor")
    _memory.free_entry(entry)


@translated
def register_external_tensor(tensor: Any):
    """Register a CuTe tensor over CUDA VMM memory with NVSHMEM (collective); returns the tensor to use."""
    _tracking.require_initialized("register_external_tensor")
    name = _dtype_name(getattr(tensor, "element_type", None))
    shape = tuple(int(s) for s in tensor.shape)
    ptr = int(tensor.iterator)
    nbytes = math.prod(shape) * (_arrays.itemsize_of(name) or 1)
    entry = _memory.register_entry(CAIView(ptr, (nbytes,), "|u1", owner=tensor), ptr, "register_external_tensor")
    array = _native._wrap(entry.ptr, shape, None, name, _library("register_external_tensor"), owner=entry.native)
    return _from_array(array, entry)


@translated
def unregister_external_tensor(tensor: Any) -> None:
    """Undo :func:`register_external_tensor` (collective); the tensor it returned."""
    entry, _ = _backing(tensor, "unregister_external_tensor")
    _memory.unregister_entry(entry)


def cleanup_cute() -> None:
    """Nothing to release here (NVSHMEM4Py drops its MLIR context); kept for compatibility."""


class _CompiledKernelObject(NvshmemKernelObject):
    """The CUDA library of a kernel compiled by :func:`cute_compile_helper`: known once it is loaded
    (on the first launch)."""

    @classmethod
    def _for(cls, compiled: Any) -> "_CompiledKernelObject":
        self = object.__new__(cls)
        self._compiled = compiled
        return self

    @property
    def handle(self) -> int:
        libraries = self._compiled.libraries
        if not libraries:
            raise NvshmemInvalid("the compiled kernel's CUDA library is not loaded yet (launch it first)")
        return int(libraries[0])

    @property
    def finalize_handle(self) -> int:
        return self.handle

    def __repr__(self) -> str:
        libraries = self._compiled.libraries
        return f"<NvshmemKernelObject {'0x%x' % libraries[0] if libraries else '(not loaded yet)'}>"


@translated
def cute_compile_helper(kernel_fn: Any, *args: Any, **kwargs: Any):
    """Compile a ``@cute.jit`` launcher with NVSHMEM: ``(compiled function, kernel object)``.

    :func:`nvshmem_dsl.cute.compile`: the NVSHMEM device code is linked in, the GPU arch is the
    current device's (or ``arch=`` / ``$CUTE_DSL_ARCH``), and the loaded library is initialised
    for NVSHMEM before its first launch.  The kernel object is for ``library_finalize``.
    """
    from ... import cute as _cute

    compiled = _cute.compile(kernel_fn, *args, **kwargs)
    return compiled, _CompiledKernelObject._for(compiled)
