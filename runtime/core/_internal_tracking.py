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

from collections.abc import Iterator, Mapping
from typing import Any

from ..host import _state
from ._resource import NvshmemResource
from ._tracking import EntryRecord, MemReferences

__all__ = ["_mr_references", "MemReferences", "EntryRecord"]


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
