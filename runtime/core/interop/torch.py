"""Symmetric torch tensors as NVSHMEM4Py makes them (``nvshmem.core.interop.torch``).

``tensor(shape, dtype=)`` is :func:`nvshmem_dsl.array` with ``like="torch"``; the rest find the
allocation behind a tensor by its address.  Every allocation, registration and free is
collective.
"""

from __future__ import annotations

from typing import Any

from .. import _tracking
from .._tracking import translated
from . import _common

__all__ = ["bytetensor", "tensor", "free_tensor", "tensor_get_buffer", "get_peer_tensor", "get_multicast_tensor",
           "register_external_tensor", "unregister_external_tensor"]


def _dtype(dtype: Any) -> Any:
    if dtype is None:
        import torch

        return torch.get_default_dtype()
    return dtype


@translated
def tensor(shape: Any, dtype: Any = "float32", release: bool = False, morder: str = "C", except_on_del: bool = True):
    """A symmetric torch tensor (collective; contents uninitialised); ``dtype`` a torch dtype
    (None: torch's default dtype), C or Fortran order (``morder``)."""
    _tracking.require_initialized("tensor")
    _common.require_library("torch", "tensor")
    return _common.new_array(shape, _dtype(dtype), "torch", morder, "tensor")[0]


@translated
def bytetensor(shape: Any, dtype: Any = "float32", release: bool = False, morder: str = "C",
               except_on_del: bool = True):
    """A symmetric uint8 tensor of ``shape`` (``dtype`` is ignored, as in NVSHMEM4Py)."""
    _tracking.require_initialized("bytetensor")
    _common.require_library("torch", "bytetensor")
    return _common.new_array(shape, "uint8", "torch", morder, "bytetensor")[0]


@translated
def tensor_get_buffer(tensor: Any):
    """``(cuda.core Buffer, size in bytes, dtype name)`` of a tensor from :func:`tensor`."""
    return _common.get_buffer(tensor, "tensor_get_buffer")


@translated
def get_peer_tensor(tensor: Any, peer_pe: int | None = None):
    """PE ``peer_pe``'s copy of ``tensor`` for loads and stores (``nvshmem_ptr``); freeing it is a no-op."""
    return _common.peer(tensor, peer_pe, "get_peer_tensor")


@translated
def get_multicast_tensor(team: Any, tensor: Any):
    """``tensor`` at its multicast address for ``team`` (``nvshmemx_mc_ptr``), for multimem
    instructions in kernels; raises :class:`NvshmemError` where NVSHMEM has no multicast object."""
    return _common.multicast(team, tensor, "get_multicast_tensor")


@translated
def free_tensor(tensor: Any) -> None:
    """Free a tensor from :func:`tensor` (collective); a peer/multicast view: no-op."""
    _common.free(tensor, "free_tensor")


@translated
def register_external_tensor(tensor: Any):
    """Register a tensor over CUDA VMM memory with NVSHMEM (collective); returns the tensor to use."""
    return _common.register(tensor, "register_external_tensor")


@translated
def unregister_external_tensor(tensor: Any) -> None:
    """Undo :func:`register_external_tensor` (collective)."""
    _common.unregister(tensor, "unregister_external_tensor")
