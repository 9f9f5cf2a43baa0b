"""What memory is symmetric: the registry of this process's live symmetric allocations.

Every allocation, registration and free goes through :data:`REGISTRY` (address ranges), so that
every host operation can refuse memory that is not symmetric, was freed, or lies outside its
allocation (:func:`check_symmetric`, :func:`check_valid_local`), and finalize can name what was
never freed (:func:`leak_report`).
"""

from __future__ import annotations

import bisect
import collections
import os
import sys
import threading

from . import _arrays, _state
from ..errors import NvshmemMemoryError

__all__ = ["Allocation", "REGISTRY", "check_symmetric", "check_valid_local", "leak_report", "live_allocations"]


class Allocation:
    """One symmetric allocation known to the registry."""

    __slots__ = ("ptr", "nbytes", "kind", "freed", "where", "source", "generation", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, kind: str, where: str = "", source: int = 0) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.kind = kind  #: "heap", "external", "internal" or "fake" (tests)
        self.freed: str | None = None  #: why it is no longer valid
        self.where = where  #: file:line of the allocating call
        self.source = source  #: for "external": the registered buffer's own address
        self.generation = _state.STATE.generation

    @property
    def end(self) -> int:
        return self.ptr + self.nbytes

    def __repr__(self) -> str:
        state = f", freed ({self.freed})" if self.freed else ""
        return f"<Allocation {self.kind} 0x{self.ptr:x} {self.nbytes} B{state}>"


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starts: list[int] = []
        self._allocs: dict[int, Allocation] = {}
        self._freed: collections.deque[tuple[int, int, str]] = collections.deque(maxlen=1024)

    def add(self, alloc: Allocation) -> None:
        with self._lock:
            old = self._allocs.get(alloc.ptr)
            if old is not None:
                raise NvshmemMemoryError(f"internal: address 0x{alloc.ptr:x} is already registered ({old})")
            i = bisect.bisect_left(self._starts, alloc.ptr)
            if i < len(self._starts):
                nxt = self._allocs[self._starts[i]]
                if alloc.end > nxt.ptr:
                    raise NvshmemMemoryError(f"internal: {alloc} overlaps {nxt}")
            if i > 0:
                prv = self._allocs[self._starts[i - 1]]
                if prv.end > alloc.ptr:
                    raise NvshmemMemoryError(f"internal: {alloc} overlaps {prv}")
            self._starts.insert(i, alloc.ptr)
            self._allocs[alloc.ptr] = alloc

    def remove(self, alloc: Allocation, reason: str) -> None:
        with self._lock:
            if self._allocs.get(alloc.ptr) is alloc:
                del self._allocs[alloc.ptr]
                self._starts.pop(bisect.bisect_left(self._starts, alloc.ptr))
            alloc.freed = reason
            self._freed.append((alloc.ptr, alloc.end, reason))

    def containing(self, address: int) -> Allocation | None:
        with self._lock:
            i = bisect.bisect_right(self._starts, address) - 1
            if i < 0:
                return None
            alloc = self._allocs[self._starts[i]]
            return alloc if address < alloc.end else None

    def at(self, ptr: int) -> Allocation | None:
        with self._lock:
            return self._allocs.get(ptr)

    def freed_reason(self, address: int) -> str | None:
        with self._lock:
            for lo, hi, reason in reversed(self._freed):
                if lo <= address < hi:
                    return reason
        return None

    def live(self) -> list[Allocation]:
        with self._lock:
            return [self._allocs[p] for p in self._starts]

    def clear(self, reason: str) -> list[Allocation]:
        with self._lock:
            allocs = [self._allocs[p] for p in self._starts]
            self._allocs.clear()
            self._starts.clear()
            for a in allocs:
                a.freed = reason
                self._freed.append((a.ptr, a.end, reason))
            return allocs


REGISTRY = _Registry()


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the package, not host/
_INSIDE: dict[str, bool] = {}  #: code file name -> whether it is the package's (decided once per file)


def _caller() -> str:
    """file:line of the first frame outside nvshmem_dsl."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        inside = _INSIDE.get(path)
        if inside is None:
            inside = _INSIDE[path] = os.path.abspath(path).startswith(_PACKAGE)
        if not inside:
            return f"{path}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return "?"


def check_symmetric(info: _arrays.ArrayInfo, function: str, argument: str, nbytes: int | None = None) -> Allocation:
    """The live allocation holding ``info``'s bytes (or its first ``nbytes``), else NvshmemMemoryError."""
    lo, hi = info.span
    if nbytes is not None:
        hi = lo + nbytes
    alloc = REGISTRY.containing(lo)
    if alloc is not None and hi <= alloc.end:
        return alloc
    where = f"{function}(): argument '{argument}'"
    if alloc is None:
        reason = REGISTRY.freed_reason(lo)
        if reason is not None:
            raise NvshmemMemoryError(
                f"{where} points at symmetric memory that is no longer valid: {reason} (0x{lo:x})"
            )
        raise NvshmemMemoryError(
            f"{where} is not symmetric memory (0x{lo:x}); allocate it with nvshmem_dsl.array()/buffer() "
            "or register it with nvshmem_dsl.register_external()"
        )
    if hi > alloc.end:
        raise NvshmemMemoryError(
            f"{where} needs bytes 0x{lo:x}..0x{hi:x}, past the end of its symmetric allocation "
            f"(0x{alloc.ptr:x}, {alloc.nbytes} bytes)"
        )
    return alloc


def check_valid_local(info: _arrays.ArrayInfo, function: str, argument: str) -> None:
    """A local (non-symmetric) array must at least not be freed symmetric memory."""
    alloc = REGISTRY.containing(info.ptr)
    if alloc is None:
        reason = REGISTRY.freed_reason(info.ptr)
        if reason is not None:
            raise NvshmemMemoryError(
                f"{function}(): argument '{argument}' points at symmetric memory that is no longer valid: {reason}"
            )


# test hooks --------------------------------------------------------------------


def _testing_register(ptr: int, nbytes: int, kind: str = "fake") -> Allocation:
    """Tests only: enter a made-up address range in the registry (never dereferenced)."""
    alloc = Allocation(ptr, nbytes, kind, _caller())
    REGISTRY.add(alloc)
    return alloc


def _testing_unregister(alloc: Allocation, reason: str = "freed by nvshmem_dsl.free()") -> None:
    REGISTRY.remove(alloc, reason)


# --------------------------------------------------------------------------- reports


def live_allocations(*, include_internal: bool = False) -> list[dict]:
    """The live symmetric allocations: ptr, nbytes, kind and where each was made."""
    return [
        {"ptr": a.ptr, "nbytes": a.nbytes, "kind": a.kind, "where": a.where}
        for a in REGISTRY.live()
        if include_internal or a.kind != "internal"
    ]


def leak_report() -> str | None:
    """A text listing the live user allocations, or None when there are none."""
    live = live_allocations()
    if not live:
        return None
    total = sum(a["nbytes"] for a in live)
    lines = [f"{len(live)} symmetric allocation(s), {total} bytes, were never freed:"]
    for a in live[:20]:
        lines.append(f"  0x{a['ptr']:x} {a['nbytes']} B ({a['kind']}) allocated at {a['where']}")
    if len(live) > 20:
        lines.append(f"  ... and {len(live) - 20} more")
    return "\n".join(lines)
