"""Symmetric CuPy arrays as NVSHMEM4Py makes them (``nvshmem.core.interop.cupy``).

``array(shape, dtype=)`` is :func:`nvshmem_dsl.array` with ``like="cupy"``; the rest find the
allocation behind an array by its address.  Every allocation, registration and free is
collective.
"""

from __future__ import annotations

from typing import Any

from .. import _tracking
from .._tracking import translated
from . import _common

__all__ = ["bytearray", "array", "free_array", "array_get_buffer", "get_peer_array", "get_multicast_array",
           "register_external_array", "unregister_external_array"]


@translated
def array(shape: Any, dtype: Any = "float32", release: bool = False, morder: str = "C", except_on_del: bool = True):
    """A symmetric CuPy array (collective; contents uninitialised), C or Fortran order (``morder``).

    ``release`` and ``except_on_del`` are accepted for compatibility (arrays here are never freed by the
    garbage collector).
    """
    _tracking.require_initialized("array")
    _common.require_library("cupy", "array")
    return _common.new_array(shape, dtype, "cupy", morder, "array")[0]


@translated
def bytearray(shape: Any, dtype: Any = "float32", release: bool = False, device_id: int | None = None,
              morder: str = "C", except_on_del: bool = True):
    """A symmetric int8 CuPy array of ``shape`` (``dtype`` is ignored, as in NVSHMEM4Py)."""
    _tracking.require_initialized("bytearray")
    _common.require_library("cupy", "bytearray")
    return _common.new_array(shape, "int8", "cupy", morder, "bytearray")[0]


@translated
def array_get_buffer(array: Any):
    """``(cuda.core Buffer, size in bytes, dtype name)`` of an array from :func:`array`."""
    return _common.get_buffer(array, "array_get_buffer")


@translated
def get_peer_array(array: Any, peer_pe: int | None = None):
    """PE ``peer_pe``'s copy of ``array`` for loads and stores (``nvshmem_ptr``); freeing it is a no-op."""
    return _common.peer(array, peer_pe, "get_peer_array")


@translated
def get_multicast_array(team: Any, array: Any):
    """``array`` at its multicast address for ``team`` (``nvshmemx_mc_ptr``); kernels only."""
    return _common.multicast(team, array, "get_multicast_array")


@translated
def free_array(array: Any) -> None:
    """Free an array from :func:`array` (collective); a peer/multicast view: no-op."""
    _common.free(array, "free_array")


@translated
def register_external_array(array: Any):
    """Register a CuPy array over CUDA VMM memory with NVSHMEM (collective); returns the array to use."""
    return _common.register(array, "register_external_array")


@translated
def unregister_external_array(array: Any) -> None:
    """Undo :func:`register_external_array` (collective); the registered array or the original."""
    _common.unregister(array, "unregister_external_array")
