"""``NvshmemResource``: a ``cuda.core`` memory resource over :func:`nvshmem_dsl.core.buffer`.

NVSHMEM4Py hangs its buffers off such a resource; here the buffers are plain ``cuda.core``
buffers that keep their nvshmem_dsl allocation alive (``Buffer.owner``), and this class is
only a convenience for code that allocates through a memory resource.
"""

from __future__ import annotations

from typing import Any

from cuda.core import MemoryResource

__all__ = ["NvshmemResource"]


class NvshmemResource(MemoryResource):
    """Allocates symmetric memory (collective, like :func:`nvshmem_dsl.core.buffer`)."""

    def __init__(self, device: Any = None) -> None:
        self.device = device

    def allocate(self, size: int, stream: Any = None, release: bool = False, except_on_del: bool = True):
        from .memory import buffer

        return buffer(size, release=release, except_on_del=except_on_del)

    def deallocate(self, ptr: int, size: int, stream: Any = None) -> None:
        from . import _tracking
        from .memory import free

        entry = _tracking.ENTRIES.get(int(ptr))
        if entry is not None:
            free(_tracking.core_buffer(entry))

    @property
    def is_device_accessible(self) -> bool:
        return True

    @property
    def is_host_accessible(self) -> bool:
        return False

    @property
    def device_id(self) -> int:
        from ..host import _state

        if self.device is not None:
            return int(getattr(self.device, "device_id", self.device))
        return _state.STATE.device_id

    @property
    def _mem_references(self):
        """address -> record of what nvshmem_dsl.core handed out (NVSHMEM4Py's private table; see
        :mod:`._internal_tracking`)."""
        from ._tracking import MemReferences

        return MemReferences()

    def __repr__(self) -> str:
        return f"<NvshmemResource device={self.device}>"
