"""Collectives from the host over a team: broadcast, fcollect, alltoall, reduce, reducescatter
(blocking or on a stream; re-exported by :mod:`nvshmem_dsl.host.operations`).
"""

from __future__ import annotations

from typing import Any

from . import _arrays, _state, _table
from ..errors import NvshmemArgumentError
from .symmetric import check_symmetric
from ._op_args import _api_for, _count, _count_in, _fits, _int, _invoke, _pair, _resolve, _team, _team_size

__all__ = ["broadcast", "fcollect", "alltoall", "reduce", "reducescatter", "REDUCE_OPS"]

#: Reduction operators, as spelled in the op table's api names (``sum_reduce`` ...).
REDUCE_OPS = ("sum", "prod", "min", "max", "and", "or", "xor")


# --------------------------------------------------------------------------- collectives


def broadcast(team: Any, dst: Any, src: Any, root: int, *, nelems: int | None = None, stream: Any = None) -> None:
    """Copy ``src`` of the team's PE ``root`` into ``dst`` on every PE of ``team`` (collective)."""
    fn = "broadcast"
    _state.require("broadcast()")
    t = _team(team, fn)
    d, s = _pair(fn, dst, "dst", src, "src")
    n = _count_in(fn, nelems, s.size, (s, "src"), (d, "dst"))
    size = _team_size(t)
    r_ = _int(root, fn, "root")
    if not 0 <= r_ < size:
        raise NvshmemArgumentError(f"{fn}(): root {r_} is out of range 0..{size - 1} (team of {size} PEs)")
    check_symmetric(d, fn, "dst", nbytes=n * d.itemsize)
    check_symmetric(s, fn, "src", nbytes=n * s.itemsize)
    api, handle = _api_for("broadcast", stream)
    r = _resolve(fn, api, d, "dst", untyped=True)
    _invoke(r, {"team": t, "dst": d.ptr, "src": s.ptr, "count": n * r.count_scale, "root": r_, "stream": handle})


def fcollect(team: Any, dst: Any, src: Any, *, nelems: int | None = None, stream: Any = None) -> None:
    """Concatenate every PE's ``src`` (``nelems`` each) into ``dst`` on all PEs of ``team`` (allgather)."""
    fn = "fcollect"
    _state.require("fcollect()")
    t = _team(team, fn)
    d, s = _pair(fn, dst, "dst", src, "src")
    n = _count_in(fn, nelems, s.size, (s, "src"))
    size = _team_size(t)
    _fits(fn, n, f"nelems={n} from each of {size} PEs", d, "dst", need=n * size)
    check_symmetric(d, fn, "dst", nbytes=n * size * d.itemsize)
    check_symmetric(s, fn, "src", nbytes=n * s.itemsize)
    api, handle = _api_for("fcollect", stream)
    r = _resolve(fn, api, d, "dst", untyped=True)
    _invoke(r, {"team": t, "dst": d.ptr, "src": s.ptr, "count": n * r.count_scale, "stream": handle})


def alltoall(team: Any, dst: Any, src: Any, *, nelems: int | None = None, stream: Any = None) -> None:
    """Block ``j`` (``nelems`` elements) of each PE's ``src`` goes to block ``i`` of PE ``j``'s ``dst``.

    ``nelems`` defaults to ``src.size // team size``.
    """
    fn = "alltoall"
    _state.require("alltoall()")
    t = _team(team, fn)
    d, s = _pair(fn, dst, "dst", src, "src")
    size = _team_size(t)
    if nelems is None:
        if s.size % size:
            raise NvshmemArgumentError(
                f"{fn}(): 'src' has {s.size} elements, not a multiple of the team size {size}; pass nelems="
            )
        n = s.size // size
    else:
        n = _count(nelems, 0, fn)
    _fits(fn, n, f"nelems={n} for each of {size} PEs", s, "src", need=n * size)
    _fits(fn, n, f"nelems={n} from each of {size} PEs", d, "dst", need=n * size)
    check_symmetric(d, fn, "dst", nbytes=n * size * d.itemsize)
    check_symmetric(s, fn, "src", nbytes=n * size * s.itemsize)
    api, handle = _api_for("alltoall", stream)
    r = _resolve(fn, api, d, "dst", untyped=True)
    _invoke(r, {"team": t, "dst": d.ptr, "src": s.ptr, "count": n * r.count_scale, "stream": handle})


def _reduce_op(op: Any, fn: str) -> str:
    key = str(getattr(op, "value", op)).strip().lower()
    if key not in REDUCE_OPS:
        raise NvshmemArgumentError(f"{fn}(): unknown op {op!r}; expected one of {', '.join(REDUCE_OPS)}")
    return key


def reduce(team: Any, dst: Any, src: Any, op: str = "sum", *, nreduce: int | None = None, stream: Any = None) -> None:
    """All-reduce: ``dst[i] = op over the team's PEs of src[i]`` for i < nreduce, on every PE (collective).

    ``op``: "sum", "prod", "min", "max" (numeric dtypes) or "and", "or", "xor" (integers).
    """
    fn = "reduce"
    _state.require("reduce()")
    name = _reduce_op(op, fn)
    t = _team(team, fn)
    d, s = _pair(fn, dst, "dst", src, "src")
    n = _count_in(fn, nreduce, s.size, (s, "src"), (d, "dst"), arg="nreduce")
    check_symmetric(d, fn, "dst", nbytes=n * d.itemsize)
    check_symmetric(s, fn, "src", nbytes=n * s.itemsize)
    api, handle = _api_for(f"{name}_reduce", stream)
    r = _resolve(fn, api, d, "dst", untyped=False)
    _invoke(r, {"team": t, "dst": d.ptr, "src": s.ptr, "count": n, "stream": handle})


def reducescatter(team: Any, dst: Any, src: Any, op: str = "sum", *, nreduce: int | None = None,
                  stream: Any = None) -> None:
    """Reduce ``src`` (team size x nreduce elements) over the team; PE i gets block i in ``dst``.

    ``nreduce`` (elements per PE) defaults to ``dst.size``.
    """
    fn = "reducescatter"
    _state.require("reducescatter()")
    name = _reduce_op(op, fn)
    t = _team(team, fn)
    d, s = _pair(fn, dst, "dst", src, "src")
    size = _team_size(t)
    n = _count_in(fn, nreduce, d.size, (d, "dst"), arg="nreduce")
    _fits(fn, n, f"nreduce={n} for each of {size} PEs", s, "src", need=n * size)
    check_symmetric(d, fn, "dst", nbytes=n * d.itemsize)
    check_symmetric(s, fn, "src", nbytes=n * size * s.itemsize)
    api, handle = _api_for(f"{name}_reducescatter", stream)
    r = _resolve(fn, api, d, "dst", untyped=False)
    _invoke(r, {"team": t, "dst": d.ptr, "src": s.ptr, "count": n, "stream": handle})


def on_pointers(coll: str, team: int, dst: int, src: int, dtype: str, count: int, op: str | None = None,
                root: int = 0, stream: Any = None) -> None:
    """Collective ``coll`` ("reduce", "reducescatter", "broadcast", "fcollect", "alltoall") of ``count``
    elements of numpy type ``dtype`` on device addresses, on ``stream``: the C call alone, no check of
    the memory (NVSHMEM4Py's raw-buffer collectives; the caller checks the bounds)."""
    fn = "collective_on_buffer"
    base = f"{_reduce_op(op, fn)}_{coll}" if coll in ("reduce", "reducescatter") else coll
    api, handle = _api_for(base, stream)
    r = _table.resolve(api, dtype, _arrays.itemsize_of(dtype), untyped=coll not in ("reduce", "reducescatter"))
    if r is None:
        raise NvshmemArgumentError(f"{fn}(): no {coll} of {dtype} elements in NVSHMEM")
    _invoke(r, {"team": team, "dst": dst, "src": src, "count": count * r.count_scale, "root": root, "stream": handle})
