"""What a kernel launch takes from the caller: its arrays (without a copy) and its streams."""
from __future__ import annotations

import functools
from typing import Any

from ..host import _arrays, memory

#: Numba views of the arrays of recent calls, by (address, elements, element type): they own nothing
#: (the caller's array is alive during the call), so a view serves any array of that memory and shape.
_numba_views: dict = {}


def kernel_array(a: Any, info: _arrays.ArrayInfo, like: str) -> Any:
    """``a`` as the DSL's arrays (``like``), 1-D, no copy; Numba's hold bfloat16 as int16."""
    if like == "numba":
        elem = "int16" if info.dtype == "bfloat16" else info.dtype
        key = (info.ptr, info.size, elem)
        view = _numba_views.get(key)
        if view is None:
            if len(_numba_views) >= 64:
                _numba_views.clear()
            view = _numba_views[key] = memory._wrap(info.ptr, (info.size,), None, elem, "numba", owner=None)
        return view
    if info.library == like:
        return a.reshape(-1)
    return memory._wrap(info.ptr, (info.size,), None, info.dtype, like, owner=a)


def default_stream(info: _arrays.ArrayInfo) -> int:
    """The array library's current stream (torch, cupy), else the legacy default stream."""
    if info.library == "torch":
        import torch
        return torch.cuda.current_stream().cuda_stream
    if info.library == "cupy":
        import cupy
        return cupy.cuda.get_current_stream().ptr
    return 0


@functools.lru_cache(maxsize=None)
def _external_stream(handle: int):
    import torch

    return torch.cuda.ExternalStream(handle)


def torch_stream(handle: int):
    """The torch stream of an int handle (0: torch's default stream); one ExternalStream a handle."""
    import torch

    return _external_stream(handle) if handle else torch.cuda.default_stream()
