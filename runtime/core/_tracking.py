"""What ``nvshmem_dsl.core`` remembers about the memory it handed out, and small shared helpers.

NVSHMEM4Py hands out ``cuda.core.Buffer`` objects and finds the buffer behind a CuPy array or
torch tensor by its address.  Here every allocation is nvshmem_dsl's own (``nvshmem_dsl.buffer``
/ ``nvshmem_dsl.array``, which also keep the symmetric-memory registry the host operations
check); this module only maps addresses to those allocations, counts the handles given out for
one allocation (an allocation and the view ``get_peer_*(x, my_pe)`` returned for it are the same
memory, freed when the last of them is freed, as in NVSHMEM4Py), and remembers peer and
multicast views, which ``free`` leaves alone.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Callable

from ..host import _arrays, _state
from .. import errors as _errors
from ._types import BufferTypes, NvshmemError, NvshmemInvalid, translate

__all__ = ["Entry", "ENTRIES", "translated", "core_buffer", "entry_of", "CAIView", "EntryRecord", "MemReferences"]

_lock = threading.RLock()


class Entry:
    """One address handed out: an allocation (NORMAL, EXTERNAL) or a view of one (PEER, MULTIMEM)."""

    __slots__ = ("ptr", "nbytes", "native", "kind", "refs", "free_called", "buffer", "parent", "source",
                 "generation")

    def __init__(self, ptr: int, nbytes: int, native: Any, kind: BufferTypes, parent: "Entry | None" = None,
                 source: int = 0) -> None:
        self.ptr = int(ptr)
        self.nbytes = int(nbytes)
        self.native = native  #: the nvshmem_dsl object behind it (Buffer, array) - what native calls take
        self.kind = kind
        self.refs = 1  #: handles given out and not freed yet
        self.free_called = False  #: free() was called on one of its handles
        self.buffer = None  #: the cuda.core Buffer, made on first need
        self.parent = parent  #: for PEER/MULTIMEM views: the allocation
        self.source = int(source)  #: for EXTERNAL: the registered memory's own address
        self.generation = _state.STATE.generation

    def __repr__(self) -> str:
        return f"<Entry {self.kind.name} 0x{self.ptr:x} {self.nbytes} B refs={self.refs}>"


#: address -> Entry, for everything live that this layer handed out
ENTRIES: dict[int, Entry] = {}
#: id(CuTe tensor) -> (tensor, Entry, the array it was made from): CuTe tensors carry no
#: reference back to their memory
TENSORS: dict[int, tuple[Any, Entry, Any]] = {}
#: address -> the last Entry freed there (until the address is handed out again, or finalize):
#: NVSHMEM4Py's ``_mem_references`` keeps a freed allocation's record, and its tests write to it
#: after ``free_array`` (memory_test.py test_buffer_scope_release_gc_free). Bounded by the heap's
#: addresses, which allocations reuse.
FREED: dict[int, Entry] = {}


def add(entry: Entry) -> Entry:
    with _lock:
        ENTRIES[entry.ptr] = entry
        FREED.pop(entry.ptr, None)
    return entry


def drop(entry: Entry) -> None:
    with _lock:
        if ENTRIES.get(entry.ptr) is entry:
            del ENTRIES[entry.ptr]
            FREED[entry.ptr] = entry
        for key, hit in list(TENSORS.items()):
            if hit[1] is entry:
                del TENSORS[key]


def clear() -> list[Entry]:
    with _lock:
        entries = list(ENTRIES.values())
        ENTRIES.clear()
        TENSORS.clear()
        FREED.clear()
    return entries


def lookup(ptr: int, freed: bool = False) -> Entry | None:
    """The live entry at ``ptr``; ``freed``: or else the last one freed there (:data:`FREED`)."""
    with _lock:
        entry = ENTRIES.get(int(ptr)) or (FREED.get(int(ptr)) if freed else None)
    if entry is not None and entry.generation != _state.STATE.generation:
        return None  # from a finalized runtime
    return entry


def find_external(ptr: int) -> Entry | None:
    """The EXTERNAL entry registered at ``ptr`` or registered *from* memory at ``ptr``."""
    entry = lookup(ptr)
    if entry is not None and entry.kind == BufferTypes.EXTERNAL:
        return entry
    with _lock:
        for e in ENTRIES.values():
            if e.kind == BufferTypes.EXTERNAL and e.source == int(ptr):
                return e
    return None


def track_tensor(tensor: Any, entry: Entry, keep: Any) -> Any:
    with _lock:
        TENSORS[id(tensor)] = (tensor, entry, keep)
    return tensor


def core_buffer(entry: Entry):
    """The ``cuda.core.Buffer`` of an entry (made once; it keeps the native object alive)."""
    if entry.buffer is None or entry.buffer.is_closed:
        from cuda.core import Buffer

        entry.buffer = Buffer.from_handle(entry.ptr, entry.nbytes, owner=entry.native)
    return entry.buffer


def entry_of(obj: Any, function: str, argument: str = "x") -> Entry:
    """The entry of a cuda.core Buffer, CuPy array, torch tensor or CuTe tensor this layer made."""
    if obj is None:
        raise NvshmemInvalid(f"{function}(): argument '{argument}' is None")
    hit = TENSORS.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    if is_core_buffer(obj):
        ptr = int(obj.handle)
        what = "Buffer"
    else:
        try:
            ptr = _arrays.describe(obj, function=function, argument=argument).ptr
        except _errors.NvshmemError as exc:
            raise translate(exc) from None
        what = type(obj).__name__
    entry = lookup(ptr)
    if entry is None:
        raise NvshmemInvalid(
            f"{function}(): argument '{argument}' ({what} at 0x{ptr:x}) is not tracked by nvshmem_dsl.core: "
            "pass the object that nvshmem_dsl.core allocated (buffer, array, tensor), or one of its peer / "
            "multicast views"
        )
    return entry


def is_core_buffer(obj: Any) -> bool:
    mod = type(obj).__module__ or ""
    return type(obj).__name__ == "Buffer" and mod.startswith("cuda.core") and hasattr(obj, "handle")


def translated(fn: Callable) -> Callable:
    """Raise NVSHMEM4Py's exception classes for native nvshmem_dsl errors."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (NvshmemInvalid, NvshmemError):
            raise
        except _errors.NvshmemError as exc:
            raise translate(exc) from exc

    return wrapper


def require_initialized(function: str) -> None:
    if not _state.STATE.initialized:
        raise NvshmemInvalid(f"{function}(): NVSHMEM Library is not initialized (call nvshmem_dsl.core.init())")


def require_stream(stream: Any, function: str) -> Any:
    """NVSHMEM4Py has only stream-ordered forms of these operations."""
    if stream is None:
        raise NotImplementedError(
            f"{function}(): stream=None: NVSHMEM4Py implements only the on-stream form; pass stream= "
            "(a cuda.core Stream, a torch stream or a handle). nvshmem_dsl's native API (import nvshmem_dsl) "
            "also has the blocking host forms (stream=None)"
        )
    return stream


class CAIView:
    """A ``__cuda_array_interface__`` over raw device memory (what native calls are given for
    ``cuda.core`` buffers and for byte-wise transfers)."""

    __slots__ = ("__cuda_array_interface__", "owner", "_nvshmem_dtype")

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str = "|u1", owner: Any = None,
                 dtype: str | None = None) -> None:
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (int(ptr), False), "strides": None,
            "version": 3, "stream": None,
        }
        self.owner = owner
        self._nvshmem_dtype = dtype


def bytes_of(obj: Any, function: str, argument: str) -> tuple[int, int]:
    """(address, size in bytes) of a cuda.core Buffer, CuPy array, torch tensor (contiguous)."""
    if is_core_buffer(obj):
        return int(obj.handle), int(obj.size)
    hit = TENSORS.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1].ptr, hit[1].nbytes
    try:
        info = _arrays.describe(obj, function=function, argument=argument)
    except _errors.NvshmemTypeError:
        raise NvshmemInvalid(
            f"{function}(): argument '{argument}' must be a cuda.core Buffer, a CuPy array or a torch tensor "
            f"(Invalid memory objects passed to NVSHMEM operation), not {type(obj).__name__}"
        ) from None
    if not info.contiguous:
        raise NvshmemInvalid(f"{function}(): argument '{argument}' is not contiguous")
    return info.ptr, info.nbytes


def byte_view(obj: Any, function: str, argument: str) -> CAIView:
    ptr, nbytes = bytes_of(obj, function, argument)
    return CAIView(ptr, (nbytes,), "|u1", owner=obj)


# NVSHMEM4Py's private table of what it handed out (``_mem_references``), as its own tests read it
# (:mod:`._internal_tracking`): a live view of the entries above
_WRITABLE = ("ref_count", "freed")


class EntryRecord(MutableMapping):
    """One address's record: a view of its :class:`.Entry`."""

    _KEYS = ("ref_count", "freed", "buffer", "parent", "type", "size")

    def __init__(self, entry: Entry) -> None:
        self._entry = entry

    def __getitem__(self, key: str) -> Any:
        e = self._entry
        if key == "ref_count":
            return e.refs
        if key == "freed":
            return e.free_called
        if key == "buffer":
            return core_buffer(e)
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

    def _live(self) -> dict[int, Entry]:
        """Live entries and, as NVSHMEM4Py keeps them, those freed since (:data:`FREED`)."""
        with _lock:
            entries = {**FREED, **ENTRIES}
        return {ptr: e for ptr, e in entries.items() if e.generation == _state.STATE.generation}

    def __getitem__(self, ptr: Any) -> EntryRecord:
        entry = lookup(int(ptr), freed=True)
        if entry is None:
            raise KeyError(ptr)
        return EntryRecord(entry)

    def __iter__(self) -> Iterator[int]:
        return iter(self._live())

    def __len__(self) -> int:
        return len(self._live())

    def __repr__(self) -> str:
        return "{" + ", ".join(f"0x{ptr:x}: {EntryRecord(e)!r}" for ptr, e in self._live().items()) + "}"
