"""Stream-ordered host collectives as NVSHMEM4Py has them (``nvshmem.core.collective``).

Each is the nvshmem_dsl host collective of the same name, on CuPy arrays or torch tensors, with
NVSHMEM4Py's element counts: ``reduce`` / ``reducescatter`` / ``broadcast`` count the
destination's elements, ``fcollect`` the source's, ``alltoall`` the source's divided by the team
size.  ``stream`` is required, as in NVSHMEM4Py.  Bool arrays travel as uint8 ones (NVSHMEM4Py's
mapping), so every collective takes them.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import errors as _errors
from ..host import _arrays, _collectives
from ..host import operations as _ops
from ..host import symmetric as _symmetric
from ..host._op_args import _team_size
from . import _tracking
from ._tracking import CAIView, translated
from ._types import NvshmemInvalid, translate
from .teams import team_value

__all__ = ["reduce", "reducescatter", "alltoall", "fcollect", "broadcast", "barrier", "sync", "barrier_all",
           "sync_all", "collective_on_buffer"]


def _arrays_of(function: str, dst: Any, src: Any) -> tuple[_arrays.ArrayInfo, _arrays.ArrayInfo]:
    infos = []
    for obj, name in ((dst, "dst_array"), (src, "src_array")):
        if _tracking.is_core_buffer(obj):
            raise NvshmemInvalid(f"{function}(): argument '{name}' is a Buffer: collectives take CuPy arrays or "
                                 "torch tensors (collective_on_buffer takes Buffers with a dtype)")
        try:
            infos.append(_arrays.describe(obj, function=function, argument=name))
        except _errors.NvshmemError as exc:
            raise translate(exc) from None
    if infos[0].dtype != infos[1].dtype:
        raise NvshmemInvalid(f"{function}(): Non-matching data types for src and dest arrays "
                             f"({infos[1].dtype} and {infos[0].dtype})")
    return infos[0], infos[1]


def _as_bytes_if_bool(obj: Any, info: _arrays.ArrayInfo, function: str, name: str) -> Any:
    """NVSHMEM4Py runs the collectives of bool arrays as uint8 ones (its dtype table maps
    ``bool`` / ``torch.bool`` to NVSHMEM's uint8): the same bytes, seen as uint8."""
    if info.dtype != "bool":
        return obj
    if not info.contiguous:
        raise NvshmemInvalid(f"{function}(): argument '{name}' is not contiguous")
    return CAIView(info.ptr, (info.size,), "|u1", owner=obj)


def _operands(function: str, dst: Any, src: Any) -> tuple[_arrays.ArrayInfo, _arrays.ArrayInfo, Any, Any]:
    """The two arrays' descriptions and what the native collective is given for them."""
    d, s = _arrays_of(function, dst, src)
    return d, s, _as_bytes_if_bool(dst, d, function, "dst_array"), _as_bytes_if_bool(src, s, function, "src_array")


def _start(function: str, stream: Any) -> None:
    _tracking.require_initialized(function)
    _tracking.require_stream(stream, function)


@translated
def reduce(team: Any, dst_array: Any, src_array: Any, op: str, stream: Any = None) -> None:
    """All-reduce ``src_array`` into ``dst_array`` over ``team`` with ``op`` ("sum", "min", "max";
    also "prod", "and", "or", "xor" here) on ``stream``; ``dst_array.size`` elements.  Bool
    arrays are reduced as uint8, as NVSHMEM4Py does ("sum" of True and True is 2 in the bytes)."""
    _start("reduce", stream)
    d, _, dst, src = _operands("reduce", dst_array, src_array)
    _ops.reduce(team_value(team, "reduce"), dst, src, op, nreduce=d.size, stream=stream)


@translated
def reducescatter(team: Any, dst_array: Any, src_array: Any, op: str, stream: Any = None) -> None:
    """Reduce-scatter: PE i of ``team`` gets block i (``dst_array.size`` elements) of the reduction."""
    _start("reducescatter", stream)
    d, _, dst, src = _operands("reducescatter", dst_array, src_array)
    _ops.reducescatter(team_value(team, "reducescatter"), dst, src, op, nreduce=d.size, stream=stream)


@translated
def alltoall(team: Any, dst_array: Any, src_array: Any, stream: Any = None) -> None:
    """All-to-all: ``src_array.size / team size`` elements from each PE to each PE."""
    _start("alltoall", stream)
    _, _, dst, src = _operands("alltoall", dst_array, src_array)
    _ops.alltoall(team_value(team, "alltoall"), dst, src, stream=stream)


@translated
def fcollect(team: Any, dst_array: Any, src_array: Any, stream: Any = None) -> None:
    """All-gather: every PE's ``src_array`` concatenated into ``dst_array`` on every PE."""
    _start("fcollect", stream)
    _, s, dst, src = _operands("fcollect", dst_array, src_array)
    _ops.fcollect(team_value(team, "fcollect"), dst, src, nelems=s.size, stream=stream)


@translated
def broadcast(team: Any, dst_array: Any, src_array: Any, root: int = 0, stream: Any = None) -> None:
    """Copy ``src_array`` of the team's PE ``root`` into ``dst_array`` on every PE of ``team``."""
    _start("broadcast", stream)
    d, _, dst, src = _operands("broadcast", dst_array, src_array)
    _ops.broadcast(team_value(team, "broadcast"), dst, src, root, nelems=d.size, stream=stream)


@translated
def barrier(team: Any, stream: Any = None) -> None:
    """Barrier over ``team`` on ``stream`` (``nvshmemx_barrier_on_stream``)."""
    _start("barrier", stream)
    _ops.barrier(team_value(team, "barrier"), stream=stream)


@translated
def sync(team: Any, stream: Any = None) -> None:
    """Synchronize ``team`` on ``stream`` (``nvshmemx_team_sync_on_stream``)."""
    _start("sync", stream)
    _ops.sync(team_value(team, "sync"), stream=stream)


@translated
def barrier_all(stream: Any = None) -> None:
    """Barrier over all PEs on ``stream`` (``nvshmemx_barrier_all_on_stream``)."""
    _start("barrier_all", stream)
    _ops.barrier_all(stream=stream)


@translated
def sync_all(stream: Any = None) -> None:
    """Synchronize all PEs on ``stream`` (``nvshmemx_sync_all_on_stream``)."""
    _start("sync_all", stream)
    _ops.sync_all(stream=stream)


#: NVSHMEM type names (as NVSHMEM4Py's collective_on_buffer takes them) -> numpy names
_NVSHMEM_DTYPES = {
    "half": "float16", "fp16": "float16", "bfloat16": "bfloat16", "float": "float32", "double": "float64",
    "char": "int8", "schar": "int8", "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16",
    "int": "int32", "int32": "int32", "int32_t": "int32", "uint32": "uint32", "uint32_t": "uint32",
    "long": "int64", "longlong": "int64", "int64": "int64", "int64_t": "int64", "ptrdiff": "int64",
    "ulonglong": "uint64", "uint64": "uint64", "uint64_t": "uint64", "size": "uint64",
}
_COLLECTIVES = ("reduce", "reducescatter", "alltoall", "fcollect", "broadcast")


@translated
def collective_on_buffer(coll: str, team: Any, dest: Any, src: Any, dtype: str | None = None, op: str | None = None,
                         root: int = 0, stream: Any = None, enable_timing: bool = False) -> float:
    """A collective on raw ``cuda.core`` buffers of NVSHMEM type ``dtype`` ("float", "int32", ...).

    Element counts as NVSHMEM4Py's: the destination's size for reduce/reducescatter/broadcast,
    the source's for fcollect, the source's over the team size for alltoall.  Returns the time it
    took in ms with ``enable_timing`` (cuda.core streams), else 0.
    """
    _start("collective_on_buffer", stream)
    if coll not in _COLLECTIVES:
        raise NvshmemInvalid(f"collective_on_buffer(): argument 'coll'={coll!r}; expected one of {', '.join(_COLLECTIVES)}")
    name = _NVSHMEM_DTYPES.get(str(dtype))
    if name is None:
        raise NvshmemInvalid(f"collective_on_buffer(): argument 'dtype'={dtype!r} is not an NVSHMEM type name "
                             f"({', '.join(sorted(_NVSHMEM_DTYPES))})")
    for obj, arg in ((dest, "dest"), (src, "src")):
        if not _tracking.is_core_buffer(obj):
            raise NvshmemInvalid(f"collective_on_buffer(): argument '{arg}' must be a cuda.core Buffer")
        if _tracking.lookup(int(obj.handle)) is None:
            raise NvshmemInvalid("Tried to perform a collective on a buffer not allocated by nvshmem_dsl.core")
    itemsize = _arrays.itemsize_of(name)
    typestr = "<u2" if name == "bfloat16" else _typestr(name)
    t = team_value(team, "collective_on_buffer")

    def view(buf: Any) -> CAIView:
        return CAIView(int(buf.handle), (int(buf.size) // itemsize,), typestr, owner=buf, dtype=name)

    d, s = view(dest), view(src)
    if coll == "alltoall":
        count = max(1, int(src.size) // (_team_size(t) * itemsize))
    else:
        count = max(1, int(dest.size if coll in ("reduce", "reducescatter", "broadcast") else src.size) // itemsize)
    past = _read_past_source(coll, t, int(src.handle), int(src.size), int(dest.size), count, itemsize)
    timing = None
    if enable_timing:
        from cuda.core import Device, EventOptions

        device = Device()
        timing = (device.create_event(EventOptions(enable_timing=True)),
                  device.create_event(EventOptions(enable_timing=True)))
        stream.record(timing[0])
    if past:  # NVSHMEM4Py's count reads past the source: its C call, the bounds checked above
        _collectives.on_pointers(coll, t, int(dest.handle), int(src.handle), name, count, op, root, stream)
    elif coll == "reduce":
        _ops.reduce(t, d, s, op, nreduce=count, stream=stream)
    elif coll == "reducescatter":
        _ops.reducescatter(t, d, s, op, nreduce=count, stream=stream)
    elif coll == "broadcast":
        _ops.broadcast(t, d, s, root, nelems=count, stream=stream)
    elif coll == "fcollect":
        _ops.fcollect(t, d, s, nelems=count, stream=stream)
    else:
        _ops.alltoall(t, d, s, nelems=count, stream=stream)
    if timing is None:
        return 0
    stream.record(timing[1])
    timing[1].sync()
    return timing[1] - timing[0]


def _read_past_source(coll: str, team: int, src: int, src_bytes: int, dest_bytes: int, count: int,
                      itemsize: int) -> bool:
    """Whether ``coll`` of ``count`` elements (NVSHMEM4Py's count) reads past the source buffer.

    NVSHMEM4Py calls NVSHMEM with that count unchecked, and its own tests read past the source
    (a reduction the destination's size over a smaller source). The same here where the bytes read
    stay in the symmetric heap (warned: they take part); past the heap, or writing past the
    destination, is refused."""
    size = _team_size(team) if coll in ("reducescatter", "fcollect", "alltoall") else 1
    read = count * (size if coll in ("reducescatter", "alltoall") else 1) * itemsize
    written = count * (size if coll in ("fcollect", "alltoall") else 1) * itemsize
    if written > dest_bytes:
        raise NvshmemInvalid(f"collective_on_buffer(): {coll} of {count} elements writes {written} bytes of "
                             f"'dest', which holds {dest_bytes}")
    if read <= src_bytes:
        return False
    heap = [a for a in _symmetric.REGISTRY.live() if a.kind in ("heap", "internal")]
    if not heap or src + read > max(a.end for a in heap):
        raise NvshmemInvalid(f"collective_on_buffer(): {coll} of {count} elements reads {read} bytes of 'src', "
                             f"which holds {src_bytes}, past the end of the symmetric heap's allocations")
    warnings.warn(f"collective_on_buffer(): {coll} of {count} elements (NVSHMEM4Py's count, from "
                  f"{'dest' if coll in ('reduce', 'reducescatter', 'broadcast') else 'src'}'s size) reads {read} "
                  f"bytes of 'src', which holds {src_bytes}: the symmetric memory after it takes part",
                  RuntimeWarning, stacklevel=4)
    return True


def _typestr(name: str) -> str:
    import numpy

    return numpy.dtype(name).str
