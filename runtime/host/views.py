"""Views of symmetric memory (a peer's or the multicast address of an array) and registration of
memory allocated elsewhere (``register_external``: made symmetric; ``register_buffer``: usable as
a local source or destination)."""

from __future__ import annotations

import os
from typing import Any

from . import _arrays, _lib, _state
from ._teamref import team_id
from .memory import Buffer, _allocation_of, _view_like
from .symmetric import REGISTRY, Allocation, _caller, check_symmetric
from ..errors import NvshmemArgumentError, NvshmemError, NvshmemMemoryError, NvshmemTypeError

__all__ = ["cumem_granularity", "is_symmetric", "mc_ptr", "multicast", "peer", "peer_ptr", "register_buffer",
           "register_external", "unregister_all_buffers", "unregister_buffer", "unregister_external"]


# --------------------------------------------------------------------------- views


def _pe_check(pe: Any, function: str, n_pes: int) -> int:
    if isinstance(pe, bool) or not isinstance(pe, int):
        try:
            import operator

            pe = operator.index(pe)
        except TypeError:
            raise NvshmemTypeError(f"{function}(): pe must be an int, not {type(pe).__name__}") from None
    if not 0 <= pe < n_pes:
        raise NvshmemArgumentError(f"{function}(): pe {pe} is out of range 0..{n_pes - 1}")
    return pe


def peer_ptr(x: Any, pe: int) -> int:
    """Address by which this PE reaches PE ``pe``'s copy of ``x`` by load/store (0 when it cannot)."""
    s = _state.require("peer_ptr()")
    info = _arrays.describe(x, function="peer_ptr", argument="x")
    check_symmetric(info, "peer_ptr", "x")
    pe = _pe_check(pe, "peer_ptr", s.n_pes)
    return _lib.call("nvshmem_ptr", info.ptr, pe)


def peer(x: Any, pe: int):
    """A view of PE ``pe``'s copy of symmetric ``x`` (same library, shape, dtype), via ``nvshmem_ptr``.

    Loads and stores through it go straight to the peer's GPU memory (NVLink/P2P).
    Raises NvshmemMemoryError when the peer is not reachable that way (use
    put/get then).  torch reports such a view on the peer's device.
    """
    s = _state.require("peer()")
    info = _arrays.describe(x, function="peer", argument="x")
    check_symmetric(info, "peer", "x")
    pe = _pe_check(pe, "peer", s.n_pes)
    if pe == s.my_pe:
        return x
    address = _lib.call("nvshmem_ptr", info.ptr, pe)
    if not address:
        raise NvshmemMemoryError(
            f"peer(): PE {pe}'s memory is not reachable by load/store from PE {s.my_pe} "
            "(no NVLink/PCIe peer mapping); use put()/get() instead"
        )
    return _view_like(x, info, address)


def mc_ptr(x: Any, team: Any = None) -> int:
    """The multicast address of symmetric ``x`` for ``team`` (0 when multicast is unavailable)."""
    _state.require("mc_ptr()")
    info = _arrays.describe(x, function="mc_ptr", argument="x")
    check_symmetric(info, "mc_ptr", "x")
    return _lib.call("nvshmemx_mc_ptr", team_id(team, "mc_ptr"), info.ptr)


def multicast(x: Any, team: Any = None):
    """A view of ``x`` at its multicast address for ``team`` (``nvshmemx_mc_ptr``).

    Only multimem instructions in kernels may use it.  Raises NvshmemMemoryError
    when NVSHMEM gives no multicast address (NVLink SHARP absent or disabled,
    e.g. ``NVSHMEM_DISABLE_NVLS=1``).
    """
    address = mc_ptr(x, team)
    if not address:
        raise NvshmemMemoryError(
            "multicast(): NVSHMEM has no multicast address for this memory and team (needs NVLink SHARP "
            "on sm_90+ with NVSHMEM_DISABLE_NVLS unset, and a team whose PEs share an NVLink domain)"
        )
    info = _arrays.describe(x, function="multicast", argument="x")
    return _view_like(x, info, address)


def is_symmetric(x: Any) -> bool:
    """Whether all of ``x`` lies in one live symmetric allocation."""
    if isinstance(x, Buffer):
        return not x.freed and REGISTRY.at(x.allocation.ptr) is x.allocation
    try:
        info = _arrays.describe(x)
    except NvshmemError:  # not an array, or a freed Buffer behind __cuda_array_interface__
        return False
    return span_is_symmetric(info)


def span_is_symmetric(info: _arrays.ArrayInfo) -> bool:
    """Whether the memory an already described array touches lies in one live symmetric allocation."""
    lo, hi = info.span
    alloc = REGISTRY.containing(lo)
    return alloc is not None and hi <= alloc.end

# --------------------------------------------------------------------------- registration


def register_external(x: Any, *, preferred_address: int | None = None):
    """Make an array allocated outside NVSHMEM symmetric (collective; ``nvshmemx_buffer_register_symmetric``,
    or ``..._at_preferred_address`` with ``preferred_address``, the same on every PE).

    The memory must come from the CUDA VMM API, e.g. cuda.core's
    ``VirtualMemoryResource(device).allocate(nbytes)``, with the same size on every
    PE, and that size must be a multiple of NVSHMEM's heap granularity
    (:func:`cumem_granularity`, 512 MiB unless ``NVSHMEM_CUMEM_GRANULARITY`` says
    otherwise).  Returns an array of ``x``'s kind at the symmetric address
    NVSHMEM maps it to: pass that one to NVSHMEM operations and kernels, and to
    :func:`unregister_external` at the end.
    """
    _state.require("register_external()")
    info = _arrays.describe(x, function="register_external", argument="x")
    if not info.contiguous:
        raise NvshmemArgumentError("register_external(): the array must be contiguous")
    granularity = cumem_granularity()
    if info.nbytes == 0 or info.nbytes % granularity:
        # NVSHMEM would round the size up, fail to map it, and then crash in its next barrier
        raise NvshmemArgumentError(
            f"register_external(): the array has {info.nbytes} bytes; NVSHMEM registers whole multiples of its "
            f"heap granularity, {granularity} bytes (NVSHMEM_CUMEM_GRANULARITY). Allocate a multiple of that "
            "(e.g. VirtualMemoryResource(device).allocate(n * granularity)) and register all of it."
        )
    if preferred_address is None:
        mapped = _lib.call("nvshmemx_buffer_register_symmetric", info.ptr, info.nbytes, 0)
    else:
        mapped = _lib.call("nvshmemx_buffer_register_symmetric_at_preferred_address", info.ptr, info.nbytes,
                           int(preferred_address), 0)
    if not mapped:
        raise NvshmemMemoryError(
            "register_external(): NVSHMEM refused the buffer. It must be allocated with the CUDA VMM API "
            "(cuMemCreate/cuMemMap, e.g. cuda.core VirtualMemoryResource), on this PE's device, with the "
            "same size on every PE (this call is collective)"
        )
    alloc = Allocation(mapped, info.nbytes, "external", _caller(), source=info.ptr)
    REGISTRY.add(alloc)
    return _view_like(x, info, mapped)


_DEFAULT_CUMEM_GRANULARITY = 512 << 20


def cumem_granularity() -> int:
    """NVSHMEM's heap granularity in bytes: ``$NVSHMEM_CUMEM_GRANULARITY`` or 512 MiB."""
    text = os.environ.get("NVSHMEM_CUMEM_GRANULARITY", "").strip()
    if not text:
        return _DEFAULT_CUMEM_GRANULARITY
    scale = 1
    suffix = text[-1].lower()
    if suffix in "kmgt" and not suffix.isdigit():
        scale = 1 << (10 * ("kmgt".index(suffix) + 1))
        text = text[:-1]
    if text.lower().endswith("i"):
        text = text[:-1]
    try:
        return int(text) * scale
    except ValueError:
        return _DEFAULT_CUMEM_GRANULARITY


def unregister_external(x: Any) -> None:
    """Undo :func:`register_external` (collective); ``x`` is the array it returned."""
    _state.require("unregister_external()")
    alloc, _ = _allocation_of(x, "unregister_external")
    if alloc.kind != "external":
        raise NvshmemMemoryError("unregister_external(): this memory was not registered with register_external()")
    _lib.call("nvshmemx_buffer_unregister_symmetric", alloc.ptr, alloc.nbytes)
    REGISTRY.remove(alloc, "unregistered by nvshmem_dsl.unregister_external()")


def register_buffer(x: Any) -> None:
    """Register local (non-symmetric) device memory for use as a local buffer over remote transports
    (``nvshmemx_buffer_register``; not needed over NVLink/P2P)."""
    _state.require("register_buffer()")
    info = _arrays.describe(x, function="register_buffer", argument="x")
    lo, hi = info.span
    _lib.call("nvshmemx_buffer_register", lo, hi - lo)


def unregister_buffer(x: Any) -> None:
    """Undo :func:`register_buffer` (``nvshmemx_buffer_unregister``)."""
    _state.require("unregister_buffer()")
    info = _arrays.describe(x, function="unregister_buffer", argument="x")
    _lib.call("nvshmemx_buffer_unregister", info.span[0])


def unregister_all_buffers() -> None:
    """``nvshmemx_buffer_unregister_all``."""
    _state.require("unregister_all_buffers()")
    _lib.call("nvshmemx_buffer_unregister_all")
