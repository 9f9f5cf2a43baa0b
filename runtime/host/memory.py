"""Symmetric memory: allocation, array views, peer and multicast views, registration.

**Allocation and free are collective.**  Every PE must call :func:`buffer`,
:func:`array`, :func:`zeros`, :func:`full`, :func:`empty_like`, :func:`free`,
:func:`register_external` and :func:`unregister_external` in the same order with
the same sizes, or the program hangs or corrupts memory (NVSHMEM's rule; the
symmetric heap has the same layout on every PE).  To catch the commonest
mistake, each allocation first checks that all PEs ask for the same number of
bytes (one 16-byte max-reduction over ``TEAM_WORLD``, a few microseconds); set
``NVSHMEM_DSL_CHECK_SYMMETRY=0`` or pass ``check=False`` to skip it.

Symmetric memory is never freed by the garbage collector (that would be a
collective call at a random moment on each PE): call :func:`free`, use the
buffer as a context manager, or let :func:`nvshmem_dsl.finalize` report what
is left (an :class:`~nvshmem_dsl.errors.NvshmemLeakWarning`).

A registry of live allocations (address ranges) lets every host operation refuse
memory that is not symmetric, was freed, or lies outside its allocation.
"""

from __future__ import annotations

import bisect
import collections
import importlib.util
import os
import struct
import sys
import threading
import warnings
from typing import Any, Iterable, Sequence

from . import _arrays, _lib, _table, _state
from ._teamref import team_id
from ..errors import (
    NvshmemArgumentError, NvshmemError, NvshmemMemoryError, NvshmemOutOfMemoryError,
    NvshmemTypeError,
)

__all__ = [
    "Buffer",
    "Allocation",
    "buffer",
    "array",
    "empty",
    "zeros",
    "full",
    "empty_like",
    "zeros_like",
    "free",
    "peer",
    "peer_ptr",
    "multicast",
    "mc_ptr",
    "is_symmetric",
    "register_external",
    "unregister_external",
    "cumem_granularity",
    "register_buffer",
    "unregister_buffer",
    "unregister_all_buffers",
    "live_allocations",
    "leak_report",
    "ENV_CHECK_SYMMETRY",
]

ENV_CHECK_SYMMETRY = "NVSHMEM_DSL_CHECK_SYMMETRY"
LIBRARIES = ("cupy", "torch", "numba")
_SCRATCH_BYTES = 256  # internal symmetric scratch: size check (0..31), team uid (64..71)
_SCRATCH_UID = 64


# --------------------------------------------------------------------------- registry


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


def _caller() -> str:
    """file:line of the first frame outside nvshmem_dsl."""
    frame = sys._getframe(1)
    here = os.path.dirname(os.path.abspath(__file__))
    while frame is not None:
        path = frame.f_code.co_filename
        if not os.path.abspath(path).startswith(here + os.sep):
            return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


def check_symmetric(info: _arrays.ArrayInfo, function: str, argument: str, nbytes: int | None = None) -> Allocation:
    """The live allocation holding ``info``'s bytes (or its first ``nbytes``), else NvshmemMemoryError."""
    lo, hi = info.span
    if nbytes is not None:
        hi = lo + nbytes
    alloc = REGISTRY.containing(lo)
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


# --------------------------------------------------------------------------- raw buffers


class Buffer:
    """A raw symmetric allocation of ``nbytes`` bytes (collective; see the module doc).

    ``ptr`` is its address (the same offset in every PE's heap), and
    ``__cuda_array_interface__`` shows it as a 1-D uint8 array, so cupy, torch
    and numba can wrap it.  ``buffer.free()`` or ``with nvshmem_dsl.buffer(n) as b``
    release it (collectively).
    """

    __slots__ = ("_alloc", "__weakref__")

    def __init__(self, alloc: Allocation) -> None:
        self._alloc = alloc

    @property
    def ptr(self) -> int:
        alloc = self._alloc
        if alloc.freed:
            raise NvshmemMemoryError(f"this symmetric buffer is no longer valid: {alloc.freed}")
        return alloc.ptr

    @property
    def nbytes(self) -> int:
        return self._alloc.nbytes

    @property
    def freed(self) -> bool:
        return self._alloc.freed is not None

    @property
    def allocation(self) -> Allocation:
        return self._alloc

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": (self._alloc.nbytes,),
            "typestr": "|u1",
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": None,
        }

    def as_array(self, shape: int | Sequence[int], dtype: Any = "uint8", like: str | None = None):
        """A cupy/torch/numba array over (the start of) this buffer; no copy, no allocation."""
        shape = _shape(shape)
        name = _arrays.dtype_name(dtype)
        itemsize = _itemsize(name)
        need = _prod(shape) * itemsize
        if need > self._alloc.nbytes:
            raise NvshmemArgumentError(
                f"as_array(): shape {shape} of {name} needs {need} bytes; the buffer holds {self._alloc.nbytes}"
            )
        return _wrap(self.ptr, shape, None, name, _library(like, "as_array"), owner=self)

    def free(self) -> None:
        free(self)

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc) -> None:
        if not self.freed:
            free(self)

    def __repr__(self) -> str:
        a = self._alloc
        state = f" freed: {a.freed}" if a.freed else ""
        return f"<nvshmem_dsl.Buffer 0x{a.ptr:x} {a.nbytes} B{state}>"


class _CAIHolder:
    """A plain ``__cuda_array_interface__`` carrier that keeps ``owner`` alive."""

    __slots__ = ("__cuda_array_interface__", "owner", "_nvshmem_dtype")

    def __init__(self, ptr: int, shape, strides, typestr: str, owner: Any, dtype: str | None = None) -> None:
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, False),
            "strides": None if strides is None else tuple(strides),
            "version": 3,
            "stream": None,
        }
        self.owner = owner
        self._nvshmem_dtype = dtype


# --------------------------------------------------------------------------- helpers


def _prod(shape: Iterable[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(_arrays.check_positive_int(s, "shape entries", allow_zero=True) for s in shape)
    except TypeError:
        raise NvshmemTypeError(f"shape must be an int or a sequence of ints, not {shape!r}") from None
    return out


def _itemsize(name: str) -> int:
    size = _arrays.itemsize_of(name)
    if size is None:
        import numpy

        size = numpy.dtype(name).itemsize
    return size


def _library(like: str | None, function: str) -> str:
    if like is None:
        for name in LIBRARIES:
            if name in sys.modules or importlib.util.find_spec(name) is not None:
                return name
        raise NvshmemArgumentError(
            f"{function}(): no GPU array library found (cupy, torch or numba-cuda); install one, "
            "or use nvshmem_dsl.buffer() for raw memory"
        )
    if like not in LIBRARIES:
        raise NvshmemArgumentError(f"{function}(): like={like!r}; expected one of {', '.join(LIBRARIES)} or None")
    return like


def _import(name: str, function: str):
    try:
        if name == "numba":
            from numba import cuda

            return cuda
        return importlib.import_module(name)
    except ImportError as exc:
        raise NvshmemArgumentError(f"{function}(): like={name!r} but {name} cannot be imported: {exc}") from None


def _current_device() -> int:
    s = _state.STATE
    if s.device_id >= 0:
        return s.device_id
    from . import _cuda

    dev = _cuda.current_device_id()
    return 0 if dev is None else dev


def _typestr(name: str) -> str:
    import numpy

    return numpy.dtype(name).str


def _wrap(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None, name: str, library: str, owner: Any):
    """An array of ``library`` over device memory at ``ptr`` (no copy), keeping ``owner`` alive."""
    itemsize = _itemsize(name)
    if strides is None:
        span = _prod(shape) * itemsize
    else:
        span = (sum((d - 1) * s for d, s in zip(shape, strides)) + itemsize) if _prod(shape) else 0
    if library == "cupy":
        cupy = _import("cupy", "array")
        if name == "bfloat16":
            try:
                import ml_dtypes

                np_dtype = ml_dtypes.bfloat16
            except ImportError:
                raise NvshmemTypeError("array(): bfloat16 with cupy needs the ml_dtypes package") from None
        else:
            np_dtype = name
        mem = cupy.cuda.UnownedMemory(ptr, span, owner, _current_device())
        memptr = cupy.cuda.MemoryPointer(mem, 0)
        try:
            return cupy.ndarray(shape, dtype=np_dtype, memptr=memptr, strides=strides)
        except (TypeError, ValueError) as exc:
            raise NvshmemTypeError(f"array(): cupy cannot make a {name} array: {exc}") from None
    if library == "torch":
        torch = _import("torch", "array")
        if name == "bfloat16":
            holder = _CAIHolder(ptr, shape, strides, "<u2", owner)
            return torch.as_tensor(holder).view(torch.bfloat16)
        holder = _CAIHolder(ptr, shape, strides, _typestr(name), owner)
        # no device=: torch takes the device from the pointer (asking for another one would copy)
        return torch.as_tensor(holder)
    if library == "numba":
        cuda = _import("numba", "array")
        if name == "bfloat16":
            raise NvshmemTypeError("array(): numba device arrays cannot hold bfloat16; use like='torch'")
        holder = _CAIHolder(ptr, shape, strides, _typestr(name), owner)
        return cuda.from_cuda_array_interface(holder.__cuda_array_interface__, owner=holder, sync=False)
    raise NvshmemArgumentError(f"unknown array library {library!r}")


def _view_like(x: Any, info: _arrays.ArrayInfo, address: int):
    """An array of x's kind, shape, strides and dtype at ``address`` (keeps x alive)."""
    library = info.library
    if library in LIBRARIES:
        return _wrap(address, info.shape, info.strides, info.dtype, library, owner=x)
    return _CAIHolder(address, info.shape, info.strides, _typestr_or_void(info), owner=x, dtype=info.dtype)


def _typestr_or_void(info: _arrays.ArrayInfo) -> str:
    try:
        return _typestr(info.dtype)
    except TypeError:
        return f"|V{info.itemsize}"


def _check_symmetry_enabled(check: bool | None) -> bool:
    if check is not None:
        return bool(check)
    return os.environ.get(ENV_CHECK_SYMMETRY, "1").strip().lower() not in ("0", "false", "no", "off")


# --------------------------------------------------------------------------- internal scratch


_scratch: Allocation | None = None


def _scratch_alloc() -> Allocation:
    """The runtime's own small symmetric buffer (made at init, freed at finalize)."""
    global _scratch
    if _scratch is None or _scratch.freed:
        ptr = _lib.call("nvshmem_calloc", 1, _SCRATCH_BYTES)
        if not ptr:
            raise NvshmemOutOfMemoryError("nvshmem_dsl could not allocate its internal symmetric scratch buffer")
        alloc = Allocation(ptr, _SCRATCH_BYTES, "internal", "nvshmem_dsl internal scratch")
        REGISTRY.add(alloc)
        _scratch = alloc
    return _scratch


_symmetry_check_off_said = False


def _warn_symmetry_check_off(pes_per_gpu: int) -> None:
    global _symmetry_check_off_said
    if not _symmetry_check_off_said:
        _symmetry_check_off_said = True
        warnings.warn(
            f"nvshmem_dsl: {pes_per_gpu} PEs share this GPU without MPS (NVSHMEM's limited MPG mode, which has "
            "no collectives): allocations are not checked for equal sizes on every PE. Start MPS "
            "(nvidia-cuda-mps-control -d) for the check and for collectives.",
            RuntimeWarning,
            stacklevel=4,
        )


def _same_size_everywhere(nbytes: int, function: str) -> None:
    """Raise when the PEs asked for different sizes (collective over TEAM_WORLD)."""
    s = _state.STATE
    if s.n_pes <= 1:
        return
    if s.limited_mpg:  # NVSHMEM has no collective there; the check would end the process
        _warn_symmetry_check_off(s.pes_per_gpu)
        return
    from . import _cuda
    from .._generated.constants import Team

    scratch = _scratch_alloc()
    symbol = _table.resolve("max_reduce", "int64", 8, untyped=False).symbol
    _cuda.memcpy_htod(scratch.ptr, struct.pack("<qq", nbytes, -nbytes))
    _lib.call(symbol, int(Team.TEAM_WORLD), scratch.ptr + 16, scratch.ptr, 2)
    largest, neg_smallest = struct.unpack("<qq", _cuda.memcpy_dtoh(scratch.ptr + 16, 16))
    if largest != -neg_smallest:
        raise NvshmemArgumentError(
            f"{function}(): the PEs asked for different sizes (this PE: {nbytes} bytes; smallest "
            f"{-neg_smallest}, largest {largest}). Symmetric allocation is collective: every PE must ask "
            "for the same size, in the same order."
        )


# --------------------------------------------------------------------------- allocation


def buffer(nbytes: int, *, align: int | None = None, zero: bool = False, check: bool | None = None) -> Buffer:
    """Allocate ``nbytes`` of symmetric memory (collective over all PEs).

    ``align``: alignment in bytes (a power of two; ``nvshmem_align``); ``zero``:
    zero-filled (``nvshmem_calloc``).  ``check``: verify first that every PE asks
    for the same size (default on; ``NVSHMEM_DSL_CHECK_SYMMETRY=0`` turns it off).
    """
    _state.require("buffer()")
    nbytes = _arrays.check_positive_int(nbytes, "buffer(): nbytes")
    if align is not None:
        align = _arrays.check_positive_int(align, "buffer(): align")
        if align & (align - 1):
            raise NvshmemArgumentError(f"buffer(): align must be a power of two, got {align}")
        if zero:
            raise NvshmemArgumentError("buffer(): align= and zero=True cannot be combined")
    return Buffer(_allocate(nbytes, align, zero, check, "buffer"))


def _allocate(nbytes: int, align: int | None, zero: bool, check: bool | None, function: str) -> Allocation:
    where = _caller()
    if _check_symmetry_enabled(check):
        _same_size_everywhere(nbytes, function)
    if align is not None:
        ptr = _lib.call("nvshmem_align", align, nbytes)
    elif zero:
        ptr = _lib.call("nvshmem_calloc", 1, nbytes)
    else:
        ptr = _lib.call("nvshmem_malloc", nbytes)
    if not ptr:
        used = sum(a.nbytes for a in REGISTRY.live())
        raise NvshmemOutOfMemoryError(
            f"{function}(): the symmetric heap cannot hold {nbytes} more bytes ({used} bytes are live in "
            f"{len(REGISTRY.live())} allocations). Raise NVSHMEM_SYMMETRIC_SIZE (e.g. "
            "NVSHMEM_SYMMETRIC_SIZE=8G) before init, or free() what you no longer need."
        )
    alloc = Allocation(ptr, nbytes, "heap", where)
    REGISTRY.add(alloc)
    return alloc


def array(shape: int | Sequence[int], dtype: Any = "float32", like: str | None = None, *, check: bool | None = None):
    """A symmetric array of ``like`` ("cupy", "torch" or "numba"; None: the first installed).

    Uninitialised contents; collective (see the module doc).  The array is a
    plain array of that library (zero-copy over the symmetric heap); free it with
    :func:`free`.
    """
    return _new_array(shape, dtype, like, zero=False, check=check, function="array")


empty = array


def zeros(shape: int | Sequence[int], dtype: Any = "float32", like: str | None = None, *, check: bool | None = None):
    """Like :func:`array`, zero-filled (``nvshmem_calloc``)."""
    return _new_array(shape, dtype, like, zero=True, check=check, function="zeros")


def full(shape: int | Sequence[int], fill_value: Any, dtype: Any = "float32", like: str | None = None, *,
         check: bool | None = None):
    """Like :func:`array`, every element set to ``fill_value`` (finished when this returns)."""
    x = _new_array(shape, dtype, like, zero=False, check=check, function="full")
    library = _arrays.library_of(x)
    if library == "cupy":
        x.fill(fill_value)
    elif library == "torch":
        x.fill_(fill_value)
    else:
        import numpy

        x.copy_to_device(numpy.full(x.shape, fill_value, dtype=x.dtype))
    from . import _cuda

    _cuda.synchronize()
    return x


def empty_like(x: Any, like: str | None = None, *, check: bool | None = None):
    """A symmetric array with ``x``'s shape and dtype (of x's library unless ``like`` says otherwise)."""
    info = _arrays.describe(x, function="empty_like", argument="x")
    library = like or (info.library if info.library in LIBRARIES else None)
    return _new_array(info.shape, info.dtype, library, zero=False, check=check, function="empty_like")


def zeros_like(x: Any, like: str | None = None, *, check: bool | None = None):
    """A zero-filled symmetric array with ``x``'s shape and dtype."""
    info = _arrays.describe(x, function="zeros_like", argument="x")
    library = like or (info.library if info.library in LIBRARIES else None)
    return _new_array(info.shape, info.dtype, library, zero=True, check=check, function="zeros_like")


def _new_array(shape, dtype, like, *, zero: bool, check: bool | None, function: str):
    _state.require(f"{function}()")
    shape = _shape(shape)
    name = _arrays.dtype_name(dtype)
    library = _library(like, function)
    itemsize = _itemsize(name)
    nbytes = _prod(shape) * itemsize
    if nbytes <= 0:
        raise NvshmemArgumentError(f"{function}(): shape {shape} has no elements; symmetric arrays cannot be empty")
    if library == "numba" and name == "bfloat16":
        raise NvshmemTypeError(f"{function}(): numba device arrays cannot hold bfloat16; use like='torch'")
    _import(library, function)  # fail before the (collective) allocation, not after
    alloc = _allocate(nbytes, None, zero, check, function)
    # if wrapping fails now, the allocation stays registered (and reported at finalize):
    # freeing it here would be a collective call that the other PEs may not make
    return _wrap(alloc.ptr, shape, None, name, library, Buffer(alloc))


def _allocation_of(x: Any, function: str) -> tuple[Allocation, _arrays.ArrayInfo | None]:
    if isinstance(x, Buffer):
        return x._alloc, None
    info = _arrays.describe(x, function=function, argument="x")
    alloc = REGISTRY.containing(info.ptr)
    if alloc is None:
        reason = REGISTRY.freed_reason(info.ptr)
        if reason is not None:
            raise NvshmemMemoryError(f"{function}(): this memory is no longer valid: {reason}")
        raise NvshmemMemoryError(f"{function}(): 0x{info.ptr:x} is not a symmetric allocation of nvshmem_dsl")
    if alloc.ptr != info.ptr:
        raise NvshmemMemoryError(
            f"{function}(): the array starts {info.ptr - alloc.ptr} bytes into its allocation; pass the "
            "array that nvshmem_dsl returned, not a view into it"
        )
    return alloc, info


def free(x: Any) -> None:
    """Free a symmetric array or buffer (collective over all PEs, like the allocation).

    Arrays still referring to the memory must not be used afterwards; host
    operations refuse them.
    """
    s = _state.require("free()")
    alloc, _ = _allocation_of(x, "free")
    if alloc.freed:
        raise NvshmemMemoryError(f"free(): already freed: {alloc.freed}")
    if alloc.kind == "external":
        raise NvshmemMemoryError("free(): this memory was registered with register_external(); use unregister_external()")
    if alloc.kind == "internal":
        raise NvshmemMemoryError("free(): this is nvshmem_dsl's internal memory")
    if alloc.kind == "heap" and not s.fake:
        _lib.call("nvshmem_free", alloc.ptr)
    REGISTRY.remove(alloc, "freed by nvshmem_dsl.free()")


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
    lo, hi = info.span
    alloc = REGISTRY.containing(lo)
    return alloc is not None and hi <= alloc.end


# --------------------------------------------------------------------------- registration


def register_external(x: Any):
    """Make an array allocated outside NVSHMEM symmetric (collective; ``nvshmemx_buffer_register_symmetric``).

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
    mapped = _lib.call("nvshmemx_buffer_register_symmetric", info.ptr, info.nbytes, 0)
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


def _on_finalize(free_internal: bool) -> str | None:
    """Called by finalize(): report leaks, free the scratch, invalidate everything."""
    global _scratch
    report = leak_report()
    if free_internal and _scratch is not None and not _scratch.freed:
        try:
            _lib.call("nvshmem_free", _scratch.ptr)
        finally:
            REGISTRY.remove(_scratch, "nvshmem_dsl was finalized")
    _scratch = None
    REGISTRY.clear("nvshmem_dsl was finalized (nvshmem_dsl.finalize())")
    return report
