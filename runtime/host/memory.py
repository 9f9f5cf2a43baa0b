"""Symmetric memory: allocation and free, as buffers or arrays of any array library.

**Allocation and free are collective.**  Every PE must call :func:`buffer`,
:func:`array`, :func:`zeros`, :func:`full`, :func:`empty_like`, :func:`free`,
:func:`register_external` and :func:`unregister_external` in the same order with
the same sizes, or the program hangs or corrupts memory (NVSHMEM's rule; the
symmetric heap has the same layout on every PE).  To catch the commonest
mistake, each allocation first checks that all PEs ask for the same number of
bytes (one max-reduction over ``TEAM_WORLD`` before the allocation; its cost is in
BENCHMARKS.md, host side); set ``NVSHMEM_DSL_CHECK_SYMMETRY=0`` or pass ``check=False`` to skip it.

Symmetric memory is never freed by the garbage collector (that would be a
collective call at a random moment on each PE): call :func:`free`, use the
buffer as a context manager, or let :func:`nvshmem_dsl.finalize` report what
is left (an :class:`~nvshmem_dsl.errors.NvshmemLeakWarning`).

Every allocation is entered in :data:`nvshmem_dsl.host.symmetric.REGISTRY`; peer and multicast
views and registration of external memory are :mod:`nvshmem_dsl.host.views`.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys
import warnings
from typing import Any, Iterable, Sequence

from . import _arrays, _cuda, _lib, _table, _state
from .symmetric import REGISTRY, Allocation, _caller, leak_report
from .._generated.constants import Team
from ..errors import NvshmemArgumentError, NvshmemMemoryError, NvshmemOutOfMemoryError, NvshmemTypeError

__all__ = [
    "Buffer",
    "buffer",
    "array",
    "empty",
    "zeros",
    "full",
    "empty_like",
    "zeros_like",
    "free",
    "ENV_CHECK_SYMMETRY",
]

ENV_CHECK_SYMMETRY = "NVSHMEM_DSL_CHECK_SYMMETRY"
#: The array libraries, each with the module its arrays come from (what ``like=`` imports)
_MODULES = {"cupy": "cupy", "torch": "torch", "numba": "numba.cuda"}
LIBRARIES = tuple(_MODULES)
_SCRATCH_BYTES = 256  # internal symmetric scratch: value_ranges (in 0..63, out 128..191), team uid (64..71)
_SCRATCH_UID = 64
_VALUES = 4  #: value_ranges takes at most this many int64



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
    module = sys.modules.get(_MODULES[name])
    if module is not None:  # imported already (every call after the first): no import machinery
        return module
    try:
        return importlib.import_module(_MODULES[name])
    except ImportError as exc:
        raise NvshmemArgumentError(f"{function}(): like={name!r} but {name} cannot be imported: {exc}") from None


def _current_device() -> int:
    s = _state.STATE
    if s.device_id >= 0:
        return s.device_id
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


_max_reduce_int64: str | None = None  #: the C function of the reduction, looked up once
_TEAM_WORLD = int(Team.TEAM_WORLD)
_reached: bool | None = None  #: reached_by_load_store's answer this session (None: not asked yet)


def reached_by_load_store() -> bool:
    """Whether every PE reaches every other by load/store (``nvshmem_ptr`` of the symmetric heap not
    null: NVLink, or one GPU under MPS), agreed over all PEs: one max-reduction at the first call of
    a session (collective then: a PE alone on the load/store protocol would never join the others' collectives).
    In NVSHMEM's limited MPG mode (no collectives) and at one PE: this PE's own answer."""
    global _reached
    if _reached is None:
        s = _state.STATE
        scratch = _scratch_alloc().ptr
        mine = all(_lib.call("nvshmem_ptr", scratch, pe) for pe in range(s.n_pes) if pe != s.my_pe)
        if s.n_pes > 1 and not s.limited_mpg:
            mine = _ranges_by_reduction([int(mine)])[0][0] == 1
        _reached = mine
    return _reached


def value_ranges(values: Sequence[int]) -> list[tuple[int, int]] | None:
    """(smallest, largest) of each of ``values`` (at most 4 int64) over all PEs (collective: every PE
    calls it with as many values): one max-reduction over TEAM_WORLD.  None where it cannot be asked:
    one PE, or NVSHMEM's limited MPG mode (no collectives there; warns once)."""
    s = _state.STATE
    if s.n_pes <= 1:
        return None
    if s.limited_mpg:  # NVSHMEM has no collective there; the check would end the process
        _warn_symmetry_check_off(s.pes_per_gpu)
        return None
    if not 1 <= len(values) <= _VALUES:
        raise ValueError(f"value_ranges() takes 1 to {_VALUES} values, got {len(values)}")
    return _ranges_by_reduction(values)


def _ranges_by_reduction(values: Sequence[int]) -> list[tuple[int, int]]:
    """value_ranges by one max-reduction of (values, -values) over TEAM_WORLD, queued on the runtime's
    stream between the copies there and back (one wait: the copy back)."""
    global _max_reduce_int64
    k = len(values)
    scratch = _scratch_alloc()
    if _max_reduce_int64 is None:
        _max_reduce_int64 = _table.resolve("max_reduce_on_stream", "int64", 8, untyped=False).symbol
    stream = _cuda.runtime_stream()
    _cuda.memcpy_htod(scratch.ptr, struct.pack(f"<{2 * k}q", *values, *(-v for v in values)), stream)
    _lib.call(_max_reduce_int64, _TEAM_WORLD, scratch.ptr + 128, scratch.ptr, 2 * k, stream)
    got = struct.unpack(f"<{2 * k}q", _cuda.memcpy_dtoh(scratch.ptr + 128, 16 * k, stream))
    return [(-got[k + i], got[i]) for i in range(k)]


def _same_size_everywhere(nbytes: int, function: str) -> None:
    """Raise when the PEs asked for different sizes (collective over TEAM_WORLD), before anything is
    allocated."""
    ranges = value_ranges([nbytes])
    if ranges and ranges[0][0] != ranges[0][1]:
        smallest, largest = ranges[0]
        raise NvshmemArgumentError(
            f"{function}(): the PEs asked for different sizes (this PE: {nbytes} bytes; smallest "
            f"{smallest}, largest {largest}). Symmetric allocation is collective: every PE must ask "
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


def internal_buffer(nbytes: int, what: str) -> Buffer:
    """A zeroed symmetric buffer of the runtime's own (collective; e.g. a kernels' workspace): left out
    of leak reports, freed by :func:`free_internal` or at finalize."""
    _state.require(what)
    alloc = _allocate(_arrays.check_positive_int(nbytes, f"{what}: nbytes"), None, True, None, what)
    alloc.kind, alloc.where = "internal", what
    return Buffer(alloc)


def free_internal(buf: Buffer) -> None:
    """Free a buffer of :func:`internal_buffer` (collective)."""
    alloc = buf.allocation
    if alloc.freed:
        return
    if not _state.STATE.fake:
        _lib.call("nvshmem_free", alloc.ptr)
    REGISTRY.remove(alloc, "freed by nvshmem_dsl")


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


def _forget_scratch() -> None:
    """The scratch and what reached_by_load_store agreed on belong to one session (finalize)."""
    global _scratch, _reached
    _scratch, _reached = None, None


def _on_finalize(free_internal: bool) -> str | None:
    """Called by finalize(): report leaks, free the scratch, invalidate everything."""
    report = leak_report()
    if free_internal:  # the scratch and every other internal buffer (the kernels' workspaces)
        for alloc in REGISTRY.live():
            if alloc.kind == "internal":
                try:
                    _lib.call("nvshmem_free", alloc.ptr)
                finally:
                    REGISTRY.remove(alloc, "nvshmem_dsl was finalized")
    _forget_scratch()
    if free_internal:
        _cuda.release_runtime_stream()
    REGISTRY.clear("nvshmem_dsl was finalized (nvshmem_dsl.finalize())")
    return report
