"""Symmetric buffers as NVSHMEM4Py hands them out (``nvshmem.core.memory``).

``buffer(n)`` is :func:`nvshmem_dsl.buffer` returned as a ``cuda.core.Buffer``; ``free`` is
:func:`nvshmem_dsl.free`; ``get_peer_buffer`` / ``get_multicast_buffer`` are
:func:`nvshmem_dsl.peer_ptr` / :func:`nvshmem_dsl.mc_ptr`; the external registrations are
:func:`nvshmem_dsl.register_external` / :func:`nvshmem_dsl.unregister_external`.  All of them
are collective where NVSHMEM4Py's are.
"""

from __future__ import annotations

import logging
from typing import Any

from ..host import _state
from ..host import memory as _native
from ..host import views as _views
from . import _tracking
from ._tracking import CAIView, Entry, translated
from ._types import BufferTypes, NvshmemError, NvshmemInvalid

__all__ = [
    "buffer", "free", "get_peer_buffer", "get_multicast_buffer", "register_external_buffer",
    "unregister_external_buffer",
]

logger = logging.getLogger("nvshmem")


@translated
def buffer(size: int, release: bool = False, except_on_del: bool = True):
    """Allocate ``size`` bytes of symmetric memory (collective): a ``cuda.core.Buffer``.

    ``release`` and ``except_on_del`` are accepted for compatibility: buffers here are never
    freed by the garbage collector (only by :func:`free` or at finalize).
    """
    _tracking.require_initialized("buffer")
    native = _native.buffer(size)
    entry = _tracking.add(Entry(native.ptr, native.nbytes, native, BufferTypes.NORMAL))
    return _tracking.core_buffer(entry)


def _release(entry: Entry) -> None:
    """The last handle of an allocation was freed: free it (collective) and forget its views."""
    _tracking.drop(entry)
    for other in list(_tracking.ENTRIES.values()):
        if other.parent is entry:
            _tracking.drop(other)
    if entry.kind == BufferTypes.NORMAL:
        _native.free(entry.native)
    if entry.buffer is not None and not entry.buffer.is_closed:
        entry.buffer.close()


@translated
def free(buffer: Any) -> None:
    """Free a buffer that :func:`buffer` returned (collective).

    Freeing a peer or multicast buffer is a no-op (it only forgets it), as in NVSHMEM4Py.  An
    allocation for which ``get_peer_*(x, my_pe)`` handed out a second handle is freed when the
    last of its handles is freed.
    """
    if not _state.STATE.initialized:
        logger.warning("NVSHMEM Library is not initialized. Cannot free buffer")
        return
    if not _tracking.is_core_buffer(buffer):
        raise NvshmemInvalid(f"free(): expected a cuda.core Buffer from nvshmem_dsl.core, got {type(buffer).__name__}"
                             " (use free_array / free_tensor for arrays and tensors)")
    entry = _tracking.lookup(int(buffer.handle))
    if entry is None:
        raise NvshmemError("Freed a buffer that is not tracked (already freed, or not from nvshmem_dsl.core)")
    free_entry(entry)


def free_entry(entry: Entry) -> None:
    if entry.kind in (BufferTypes.PEER, BufferTypes.MULTIMEM):
        entry.refs -= 1
        if entry.refs <= 0:
            _tracking.drop(entry)
        return
    if entry.kind == BufferTypes.EXTERNAL:
        raise NvshmemError("free(): this buffer was registered with register_external_*(); unregister it instead")
    entry.free_called = True
    entry.refs -= 1
    if entry.refs <= 0:
        _release(entry)


def peer_entry(entry: Entry, pe: Any, function: str) -> Entry:
    """The entry of PE ``pe``'s copy of ``entry``'s allocation (``nvshmem_ptr``)."""
    if pe is None:
        raise NvshmemInvalid(f"{function}(): the peer PE is required")
    if entry.kind in (BufferTypes.PEER, BufferTypes.MULTIMEM):
        raise NvshmemInvalid(f"{function}(): pass the allocation itself, not a {entry.kind.name.lower()} view of it")
    address = _views.peer_ptr(entry.native, pe)
    if not address:
        raise NvshmemError(
            f"Failed to retrieve peer buffer: PE {pe} is not reachable by load/store from PE "
            f"{_state.STATE.my_pe} (no NVLink/PCIe peer mapping); use put()/get()"
        )
    if address == entry.ptr:  # this PE: a second handle of the same allocation
        entry.refs += 1
        return entry
    view = _tracking.lookup(address)
    if view is not None and view.parent is entry:
        view.refs += 1
        return view
    return _tracking.add(Entry(address, entry.nbytes, entry.native, BufferTypes.PEER, parent=entry))


def multicast_entry(team: Any, entry: Entry, function: str) -> Entry:
    """The entry of ``entry``'s allocation at its multicast address for ``team``."""
    if entry.kind in (BufferTypes.PEER, BufferTypes.MULTIMEM):
        raise NvshmemInvalid(f"{function}(): pass the allocation itself, not a {entry.kind.name.lower()} view of it")
    from .teams import team_value

    address = _views.mc_ptr(entry.native, team_value(team, function))
    if not address:
        raise NvshmemError(
            "Failed to retrieve multicast buffer: NVSHMEM has no multicast address for this memory and team "
            "(needs NVLink SHARP, NVSHMEM_DISABLE_NVLS unset, and a team within one NVLink domain)"
        )
    view = _tracking.lookup(address)
    if view is not None and view.parent is entry:
        view.refs += 1
        return view
    return _tracking.add(Entry(address, entry.nbytes, entry.native, BufferTypes.MULTIMEM, parent=entry))


@translated
def get_peer_buffer(buffer: Any, pe: int):
    """PE ``pe``'s copy of ``buffer`` for loads and stores (``nvshmem_ptr``), as a ``cuda.core.Buffer``.

    Freeing it is a no-op.  Raises :class:`NvshmemError` when ``pe`` is not reachable by load/store.
    """
    _tracking.require_initialized("get_peer_buffer")
    entry = _tracking.entry_of(buffer, "get_peer_buffer", "buffer")
    return _tracking.core_buffer(peer_entry(entry, pe, "get_peer_buffer"))


@translated
def get_multicast_buffer(team: Any, buffer: Any):
    """``buffer`` at its multicast address for ``team`` (``nvshmemx_mc_ptr``); kernels only."""
    _tracking.require_initialized("get_multicast_buffer")
    entry = _tracking.entry_of(buffer, "get_multicast_buffer", "buffer")
    return _tracking.core_buffer(multicast_entry(team, entry, "get_multicast_buffer"))


def register_entry(native_obj: Any, source_ptr: int, function: str, preferred_address: Any = None) -> Entry:
    """Register memory with NVSHMEM (collective) and track the symmetric view that comes back."""
    if preferred_address is not None:  # an address, or a cuda.core Buffer at it (as NVSHMEM4Py takes it)
        preferred_address = int(getattr(preferred_address, "handle", preferred_address))
    view = _views.register_external(native_obj, preferred_address=preferred_address)
    from ..host import _arrays

    info = _arrays.describe(view, function=function, argument="x")
    return _tracking.add(Entry(info.ptr, info.nbytes, view, BufferTypes.EXTERNAL, source=source_ptr))


@translated
def register_external_buffer(buffer: Any, preferred_address: Any = None):
    """Register a ``cuda.core.Buffer`` allocated outside NVSHMEM (CUDA VMM memory; collective).

    Returns the buffer to use from now on (at the symmetric address NVSHMEM maps it to;
    ``preferred_address``, an int or a Buffer, the same on every PE, asks for that address).
    """
    _tracking.require_initialized("register_external_buffer")
    if not _tracking.is_core_buffer(buffer):
        raise NvshmemInvalid(f"register_external_buffer(): expected a cuda.core Buffer, got {type(buffer).__name__}")
    existing = _tracking.find_external(int(buffer.handle))
    if existing is not None:
        existing.refs += 1
        return _tracking.core_buffer(existing)
    raw = CAIView(int(buffer.handle), (int(buffer.size),), "|u1", owner=buffer)
    return _tracking.core_buffer(register_entry(raw, int(buffer.handle), "register_external_buffer",
                                                preferred_address))


def unregister_entry(entry: Entry) -> None:
    _views.unregister_external(entry.native)
    _tracking.drop(entry)


@translated
def unregister_external_buffer(buffer: Any) -> None:
    """Undo :func:`register_external_buffer` (collective); pass the buffer it returned."""
    _tracking.require_initialized("unregister_external_buffer")
    if not _tracking.is_core_buffer(buffer):
        raise NvshmemInvalid(f"unregister_external_buffer(): expected a cuda.core Buffer, got {type(buffer).__name__}")
    entry = _tracking.find_external(int(buffer.handle))
    if entry is None:
        raise NvshmemError("Tried to unregister an external buffer that is not tracked")
    unregister_entry(entry)


def _free_pending() -> None:
    """At finalize, as NVSHMEM4Py's: free what is still allocated, in allocation order (every PE
    made the same allocations and frees, so every PE frees the same here).  Allocations free()
    was called on, but whose second handle (``get_peer_*(x, my_pe)``) was not freed, go silently;
    allocations never freed are logged as an error, as NVSHMEM4Py does."""
    leaked = []
    for entry in list(_tracking.ENTRIES.values()):
        if entry.kind != BufferTypes.NORMAL or entry.refs <= 0:
            continue
        if not entry.free_called:
            leaked.append(entry)
        entry.refs = 0
        _release(entry)
    if leaked:
        logger.error(
            "Some NVSHMEM Symmetric memory was not freed explicitly (you may have forgotten to clean up before "
            "finalizing, or an unrelated exception crashed the program before it was freed): "
            + ", ".join(f"0x{e.ptr:x} ({e.nbytes} B)" for e in leaked)
        )
