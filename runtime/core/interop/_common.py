"""What the CuPy, torch and CuTe helpers share: allocation in a memory order, views, frees."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from ...host import _arrays, _state
from ...host import memory as _native
from .. import _tracking
from .. import memory as _memory
from .._tracking import Entry
from .._types import BufferTypes, NvshmemInvalid


def require_library(name: str, function: str) -> None:
    if name not in sys.modules and importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(f"{function}(): {name} is not installed", name=name)


def new_array(shape: Any, dtype: Any, like: str, morder: str, function: str) -> tuple[Any, Entry]:
    """A symmetric array of ``like`` in memory order ``morder`` (collective), tracked."""
    _tracking.require_initialized(function)
    if morder not in ("C", "F"):
        raise NvshmemInvalid(f"{function}(): Requested array with invalid memory order morder={morder!r} ('C' or 'F')")
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    if morder == "C" or len(shape) < 2:
        base = _native.array(shape, dtype, like=like)
        out = base
    else:
        base = _native.array(tuple(reversed(shape)), dtype, like=like)
        out = base.T if like == "cupy" else base.permute(*reversed(range(len(shape))))
    info = _arrays.describe(base)
    entry = _tracking.add(Entry(info.ptr, info.nbytes, base, BufferTypes.NORMAL))
    return out, entry


def view_of(x: Any, entry: Entry) -> Any:
    """An array like ``x`` (library, shape, strides, dtype) at ``entry``'s address."""
    info = _arrays.describe(x)
    if entry.ptr == info.ptr:
        return x
    if info.library == "torch":
        # through DLPack, on this PE's device (as NVSHMEM4Py's): torch would place a tensor made from
        # __cuda_array_interface__ on the GPU that owns the memory, and run its kernels there
        import torch

        from ._dlpack import DLPackView

        strides = None if info.strides is None else tuple(s // info.itemsize for s in info.strides)
        return torch.utils.dlpack.from_dlpack(DLPackView(entry.ptr, info.shape, strides, info.dtype,
                                                         x.device.index, owner=x))
    return _native._view_like(x, info, entry.ptr)


def get_buffer(x: Any, function: str) -> tuple[Any, int, str]:
    entry = _tracking.entry_of(x, function, "array")
    info = _arrays.describe(x)
    if info.ptr != entry.ptr:
        raise NvshmemInvalid(f"{function}(): Tried to retrieve buffer from an array that does not start its allocation")
    return _tracking.core_buffer(entry), info.nbytes, str(getattr(x, "dtype", info.dtype))


def peer(x: Any, pe: Any, function: str) -> Any:
    entry = _tracking.entry_of(x, function, "array")
    return view_of(x, _memory.peer_entry(entry, pe, function))


def multicast(team: Any, x: Any, function: str) -> Any:
    entry = _tracking.entry_of(x, function, "array")
    return view_of(x, _memory.multicast_entry(team, entry, function))


def free(x: Any, function: str) -> None:
    if not _state.STATE.initialized:
        return
    _memory.free_entry(_tracking.entry_of(x, function, "array"))


def register(x: Any, function: str) -> Any:
    _tracking.require_initialized(function)
    info = _arrays.describe(x, function=function, argument="x")
    existing = _tracking.find_external(info.ptr)
    if existing is not None:
        existing.refs += 1
        return existing.native
    return _memory.register_entry(x, info.ptr, function).native


def unregister(x: Any, function: str) -> None:
    _tracking.require_initialized(function)
    info = _arrays.describe(x, function=function, argument="x")
    entry = _tracking.find_external(info.ptr)
    if entry is None:
        raise NvshmemInvalid(f"{function}(): this array was not registered with register_external_*()")
    _memory.unregister_entry(entry)
