"""NVSHMEM4Py's private ``nvshmem.core._internal_tracking``, as far as its own tests read it.

NVSHMEM4Py keeps, per device, the memory resource its buffers come from in ``_mr_references``
(device id -> resource) and in each resource ``_mem_references``: address -> ``{"ref_count",
"freed", "buffer", "parent", "type", ...}``.  Its memory_test.py reads them ("HACK! Do not do
this!") to check reference counts, and writes ``freed`` / ``ref_count`` so that finalize does not
report buffers it dropped on purpose.  Here both are live views of :mod:`._tracking`'s entries:

* ``ref_count``: handles given out and not freed; ``freed``: :func:`free` was called on one;
  ``buffer``: the ``cuda.core.Buffer``; ``parent``: the allocation's address for a peer or
  multicast view (else None); ``type``: its :class:`BufferTypes`; ``size``: bytes.
* writing ``freed = True`` keeps finalize from logging the allocation as leaked; writing
  ``ref_count = 0`` leaves it to NVSHMEM's own teardown (finalize frees only what has handles
  left).  Other keys are read-only.

Not a public API (in NVSHMEM4Py neither); nothing in nvshmem_dsl uses it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from ..host import _state
from . import _tracking

__all__ = ["_mr_references", "MemReferences", "EntryRecord"]

_WRITABLE = ("ref_count", "freed")


class EntryRecord(MutableMapping):
    """One address's record: a view of its :class:`._tracking.Entry`."""

    _KEYS = ("ref_count", "freed", "buffer", "parent", "type", "size")

    def __init__(self, entry: _tracking.Entry) -> None:
        self._entry = entry

    def __getitem__(self, key: str) -> Any:
        e = self._entry
        if key == "ref_count":
            return e.refs
        if key == "freed":
            return e.free_called
        if key == "buffer":
            return _tracking.core_buffer(e)
        if key == "parent":
            return e.parent.ptr if e.parent is not None else None
        if key == "type":
            return e.kind
        if key == "size":
            return e.nbytes
        raise KeyError(key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key == "ref_count":
            self._entry.refs = int(value)
        elif key == "freed":
            self._entry.free_called = bool(value)
        else:
            raise KeyError(f"_mem_references records can be given {' and '.join(map(repr, _WRITABLE))}, not {key!r}")

    def __delitem__(self, key: str) -> None:
        raise KeyError(f"_mem_references records keep their keys (tried to delete {key!r})")

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def __len__(self) -> int:
        return len(self._KEYS)

    def __repr__(self) -> str:
        e = self._entry
        return (f"{{'ref_count': {e.refs}, 'freed': {e.free_called}, 'type': {e.kind.name}, "
                f"'size': {e.nbytes}, 'parent': {self['parent']}}}")


class MemReferences(Mapping):
    """address -> :class:`EntryRecord` for everything live that nvshmem_dsl.core handed out."""

    def _live(self) -> dict[int, _tracking.Entry]:
        with _tracking._lock:
            entries = dict(_tracking.ENTRIES)
        return {ptr: e for ptr, e in entries.items() if e.generation == _state.STATE.generation}

    def __getitem__(self, ptr: Any) -> EntryRecord:
        entry = _tracking.lookup(int(ptr))
        if entry is None:
            raise KeyError(ptr)
        return EntryRecord(entry)

    def __iter__(self) -> Iterator[int]:
        return iter(self._live())

    def __len__(self) -> int:
        return len(self._live())

    def __repr__(self) -> str:
        return "{" + ", ".join(f"0x{ptr:x}: {EntryRecord(e)!r}" for ptr, e in self._live().items()) + "}"


class _ResourcesByDevice(Mapping):
    """device id -> the memory resource of this PE's device (one device per PE, once initialized)."""

    def __init__(self) -> None:
        self._made: dict[int, Any] = {}

    def _device(self) -> int | None:
        return _state.STATE.device_id if _state.STATE.initialized else None

    def __getitem__(self, device_id: Any) -> Any:
        device = self._device()
        key = int(getattr(device_id, "device_id", device_id))
        if device is None or key != device:
            raise KeyError(device_id)
        if key not in self._made:
            from ._resource import NvshmemResource

            self._made[key] = NvshmemResource(key)
        return self._made[key]

    def __iter__(self) -> Iterator[int]:
        device = self._device()
        return iter(() if device is None else (device,))

    def __len__(self) -> int:
        return 0 if self._device() is None else 1

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{d}: {self[d]!r}" for d in self) + "}"


#: device id -> memory resource (``._mem_references``: address -> record), as NVSHMEM4Py's
_mr_references = _ResourcesByDevice()
