"""Host-initiated and stream-ordered NVSHMEM operations on arrays.

Every function here picks its C function from the generated op table by the
arrays' dtype (numpy dtype -> NVSHMEM TYPENAME through ``ops.json``'s dtypes,
preferring the fixed-width names: int32, uint64, float, double, half, bfloat16);
there is no per-dtype code.  Pure data movement (put/get/iput/iget/put_signal,
broadcast/fcollect/alltoall) also takes dtypes without a typed C function
(bool, complex64 ...) through the sized (``put64``) or byte (``putmem``) forms.

Conventions:

* arrays are anything with ``__cuda_array_interface__`` or ``__dlpack__`` (cupy,
  numba, nvshmem_dsl buffers) and torch CUDA tensors;
* argument order: destination, source, counts, pe; the team first for
  collectives (as in C): ``put(dst, src, pe)``, ``reduce(team, dst, src, "sum")``;
* counts default to the arrays' sizes and are checked against both arrays;
* single-element targets (p/g, atomics, signal words, wait variables) are the
  first element of the array given (slice it to pick another);
* ``stream``: None runs the blocking host form where one exists (otherwise the
  operation goes on the legacy default stream); a cuda.core / cupy / torch /
  numba stream or an int handle selects the ``*_on_stream`` form;
* everything is validated before the C call: dtypes, sizes, symmetric memory
  (freed or foreign memory is refused), PE and root ranges.

Ordering: NVSHMEM's blocking host forms run on its own internal streams, which
do not wait for the streams your array library writes on (the
``__cuda_array_interface__`` ``stream`` field is not consulted).  Finish such
writes first (``cupy.cuda.runtime.deviceSynchronize()``,
``torch.cuda.synchronize()``), or pass that library's stream as ``stream=``.
"""

from __future__ import annotations

import inspect
from typing import Any

from . import _arrays, _lib, _table, _state
from ._teamref import team_id
from ._arrays import ArrayInfo
from .._generated.constants import Cmp, SignalOp, Team
from .._generated.host_api import AMO
from ..errors import NvshmemArgumentError, NvshmemTypeError, NvshmemUnsupportedError, int_argument
from .symmetric import check_symmetric, check_valid_local

__all__ = [
    "put", "get", "put_nbi", "get_nbi", "p", "g", "iput", "iget",
    "put_signal", "put_signal_nbi", "signal_op", "signal_fetch", "signal_wait_until", "signal_counted_reset",
    "wait_until", "wait_until_all", "wait_until_all_vector",
    "quiet", "flush", "fence", "barrier", "barrier_all", "sync", "sync_all",
    "broadcast", "fcollect", "alltoall", "reduce", "reducescatter", "REDUCE_OPS",
    *AMO,  # the host atomics of the spec, built below
    "COVERAGE", "NOT_WRAPPED",
]

#: Reduction operators, as spelled in the op table's api names (``sum_reduce`` ...).
REDUCE_OPS = ("sum", "prod", "min", "max", "and", "or", "xor")


# --------------------------------------------------------------------------- validation helpers


def _describe(x: Any, fn: str, arg: str) -> ArrayInfo:
    return _arrays.describe(x, function=fn, argument=arg)


def _contiguous(info: ArrayInfo, fn: str, arg: str) -> None:
    if not info.contiguous:
        raise NvshmemArgumentError(
            f"{fn}(): argument '{arg}' is not contiguous (strides {info.strides}); pass a contiguous array"
            + (" or use iput/iget for strided transfers" if fn in ("put", "get", "put_nbi", "get_nbi") else "")
        )


def _same_dtype(fn: str, a: ArrayInfo, an: str, b: ArrayInfo, bn: str) -> None:
    if a.dtype != b.dtype:
        raise NvshmemTypeError(f"{fn}(): dtype mismatch: '{an}' is {a.dtype} but '{bn}' is {b.dtype}")


def _int(value: Any, fn: str, arg: str) -> int:
    return int_argument(value, fn, arg)


def _count(value: Any, default: int, fn: str, arg: str = "nelems") -> int:
    return default if value is None else int_argument(value, fn, arg, least=0)


def _pair(fn: str, first: Any, first_name: str, second: Any, second_name: str) -> tuple[ArrayInfo, ArrayInfo]:
    """Two contiguous arrays of one element type (``dst`` and ``src``, ``ivars`` and ``values``)."""
    a = _describe(first, fn, first_name)
    b = _describe(second, fn, second_name)
    _contiguous(a, fn, first_name)
    _contiguous(b, fn, second_name)
    _same_dtype(fn, a, first_name, b, second_name)
    return a, b


def _count_in(fn: str, value: Any, default: int, *arrays: tuple[ArrayInfo, str], arg: str = "nelems") -> int:
    """The element count ``value`` (``default`` when None), which each of ``arrays`` (``(info, name)``) holds."""
    n = _count(value, default, fn, arg)
    for info, name in arrays:
        _fits(fn, n, f"{arg}={n}", info, name)
    return n


def _fits(fn: str, n: int, what: str, info: ArrayInfo, arg: str, need: int | None = None) -> None:
    need = n if need is None else need
    if need > info.size:
        raise NvshmemArgumentError(
            f"{fn}(): {what} needs {need} elements of '{arg}', which has only {info.size}"
        )


def _pe(pe: Any, fn: str, arg: str = "pe") -> int:
    value = _int(pe, fn, arg)
    n = _state.STATE.n_pes
    if not 0 <= value < n:
        raise NvshmemArgumentError(f"{fn}(): {arg} {value} is out of range 0..{n - 1} ({n} PEs)")
    return value


def _stream(stream: Any) -> int:
    from ._cuda import stream_handle

    return stream_handle(stream)


def _team(team: Any, fn: str) -> int:
    return team_id(team, fn)


def _team_size(team: int) -> int:
    if team == int(Team.TEAM_WORLD):
        return _state.STATE.n_pes
    n = _lib.call("nvshmem_team_n_pes", team)
    if n <= 0:
        raise NvshmemArgumentError(f"team {team} is not a valid team on this PE")
    return n


def _api_for(base: str, stream: Any) -> tuple[str, int | None]:
    """(api name, stream handle or None): the host form when stream is None and it exists."""
    if stream is None and (base in _table._host_index()):
        return base, None
    return base + "_on_stream", _stream(stream)


def _resolve(fn: str, api: str, info: ArrayInfo, arg: str, *, untyped: bool) -> _table.Resolved:
    r = _table.resolve(api, info.dtype, info.itemsize, untyped=untyped)
    if r is None:
        accepted = _table.accepted_numpy_names(api)
        raise NvshmemTypeError(
            f"{fn}(): argument '{arg}' has dtype {info.dtype}, which nvshmem {api} does not support; "
            f"accepted dtypes: {', '.join(accepted)}"
        )
    return r


def _invoke(resolved_or_entry: Any, values: dict[str, Any], context: str = "") -> Any:
    """Call the C function of an op-table entry with arguments given by role (or, failing that, name)."""
    entry = resolved_or_entry.entry if isinstance(resolved_or_entry, _table.Resolved) else resolved_or_entry
    args = []
    for p in entry["params"]:
        key = p["role"] if p["role"] in values else p["name"]
        if key not in values:
            raise KeyError(f"internal: no value for {entry['symbol']} parameter {p['name']} ({p['role']})")
        args.append(values[key])
    return _lib.call(entry["symbol"], *args, context=context)


def _entry(api: str) -> dict:
    return _table.entry_for(api)


def _scalar(value: Any, typename: str, fn: str, arg: str) -> Any:
    """``value`` converted for a C parameter of NVSHMEM dtype ``typename`` (range-checked)."""
    info = _table.dtype_info(typename)
    kind, bits = info["kind"], info["bits"]
    if kind in ("signed", "unsigned"):
        if isinstance(value, float):
            if not value.is_integer():
                raise NvshmemTypeError(f"{fn}(): {arg}={value!r} is not an integer ({info['numpy']})")
            value = int(value)
        v = _int(value, fn, arg)
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind == "signed" else (0, (1 << bits) - 1)
        if not lo <= v <= hi:
            raise NvshmemArgumentError(f"{fn}(): {arg}={v} does not fit {info['numpy']} ({lo}..{hi})")
        if info["ctype"] == "char":
            return bytes([v & 0xFF])
        return v
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise NvshmemTypeError(f"{fn}(): {arg} must be a number, not {type(value).__name__}") from None
    raise NvshmemTypeError(f"{fn}(): {arg}: dtype {typename} has no scalar form")


def _result(value: Any, typename: str) -> Any:
    if isinstance(value, bytes):  # C char
        return int.from_bytes(value, "little", signed=True)
    return value


def _cmp(value: Any, fn: str) -> int:
    if isinstance(value, str):
        key = value.strip().lower()
        aliases = {"==": "eq", "!=": "ne", ">": "gt", "<=": "le", "<": "lt", ">=": "ge"}
        key = aliases.get(key, key).removeprefix("cmp_")
        try:
            return int(Cmp["CMP_" + key.upper()])
        except KeyError:
            raise NvshmemArgumentError(
                f"{fn}(): unknown comparison {value!r}; use a Cmp value or one of eq ne gt le lt ge == != > <= < >="
            ) from None
    v = _int(value, fn, "cmp")
    if v not in {int(c) for c in Cmp}:
        raise NvshmemArgumentError(f"{fn}(): cmp={v} is not a Cmp value ({', '.join(c.name for c in Cmp)})")
    return v


def _signal_op(value: Any, fn: str) -> int:
    if isinstance(value, str):
        key = value.strip().lower().removeprefix("signal_")
        try:
            return int(SignalOp["SIGNAL_" + key.upper()])
        except KeyError:
            raise NvshmemArgumentError(f"{fn}(): unknown signal op {value!r}; use SignalOp.SIGNAL_SET/ADD, 'set' or 'add'") from None
    v = _int(value, fn, "op")
    if v not in {int(c) for c in SignalOp}:
        raise NvshmemArgumentError(f"{fn}(): op={v} is not a SignalOp ({', '.join(c.name for c in SignalOp)})")
    return v


def _signal_word(x: Any, fn: str, arg: str = "signal") -> ArrayInfo:
    info = _describe(x, fn, arg)
    if info.itemsize != 8 or info.dtype not in ("uint64", "int64"):
        raise NvshmemTypeError(f"{fn}(): argument '{arg}' must be a uint64 (or int64) array, not {info.dtype}")
    if info.size < 1:
        raise NvshmemArgumentError(f"{fn}(): argument '{arg}' is empty")
    check_symmetric(info, fn, arg, nbytes=8)
    return info


def _single(x: Any, fn: str, arg: str) -> ArrayInfo:
    info = _describe(x, fn, arg)
    if info.size < 1:
        raise NvshmemArgumentError(f"{fn}(): argument '{arg}' is empty")
    check_symmetric(info, fn, arg, nbytes=info.itemsize)
    return info


# --------------------------------------------------------------------------- RMA


def _rma(base: str, dst: Any, src: Any, pe: Any, nelems: Any, stream: Any) -> None:
    fn = base
    _state.require(f"{fn}()")
    d, s = _pair(fn, dst, "dst", src, "src")
    n = _count_in(fn, nelems, s.size, (s, "src"), (d, "dst"))
    target = _pe(pe, fn)
    if base.startswith("put"):
        check_symmetric(d, fn, "dst", nbytes=n * d.itemsize)
        check_valid_local(s, fn, "src")
    else:
        check_symmetric(s, fn, "src", nbytes=n * s.itemsize)
        check_valid_local(d, fn, "dst")
    api, handle = _api_for(base, stream)
    r = _resolve(fn, api, d, "dst", untyped=True)
    values = {"dst": d.ptr, "src": s.ptr, "count": n * r.count_scale, "pe": target, "stream": handle}
    _invoke(r, values)


def put(dst: Any, src: Any, pe: int, *, nelems: int | None = None, stream: Any = None, nbi: bool = False) -> None:
    """Copy ``src`` (local) into symmetric ``dst`` on PE ``pe`` (``nvshmem_<T>_put[_nbi][_on_stream]``).

    Without a stream the call blocks until ``src`` may be reused; ``quiet()``
    makes the data visible at the target.  ``nbi=True``: non-blocking.
    """
    _rma("put_nbi" if nbi else "put", dst, src, pe, nelems, stream)


def get(dst: Any, src: Any, pe: int, *, nelems: int | None = None, stream: Any = None, nbi: bool = False) -> None:
    """Copy symmetric ``src`` of PE ``pe`` into local ``dst`` (``nvshmem_<T>_get[_nbi][_on_stream]``)."""
    _rma("get_nbi" if nbi else "get", dst, src, pe, nelems, stream)


def put_nbi(dst: Any, src: Any, pe: int, *, nelems: int | None = None, stream: Any = None) -> None:
    """``put(..., nbi=True)``: returns at once; ``quiet()`` completes it."""
    _rma("put_nbi", dst, src, pe, nelems, stream)


def get_nbi(dst: Any, src: Any, pe: int, *, nelems: int | None = None, stream: Any = None) -> None:
    """``get(..., nbi=True)``: returns at once; ``quiet()`` completes it."""
    _rma("get_nbi", dst, src, pe, nelems, stream)


def p(dst: Any, value: Any, pe: int, *, stream: Any = None) -> None:
    """Store scalar ``value`` into the first element of symmetric ``dst`` on PE ``pe``."""
    fn = "p"
    _state.require("p()")
    d = _single(dst, fn, "dst")
    target = _pe(pe, fn)
    api, handle = _api_for("p", stream)
    r = _resolve(fn, api, d, "dst", untyped=False)
    _invoke(r, {"dst": d.ptr, "value": _scalar(value, r.typename, fn, "value"), "pe": target, "stream": handle})


def g(src: Any, pe: int, *, stream: Any = None) -> Any:
    """The first element of symmetric ``src`` on PE ``pe``, as a Python number."""
    fn = "g"
    _state.require("g()")
    s = _single(src, fn, "src")
    target = _pe(pe, fn)
    api, handle = _api_for("g", stream)
    r = _resolve(fn, api, s, "src", untyped=False)
    return _result(_invoke(r, {"src": s.ptr, "pe": target, "stream": handle}), r.typename)


def _strided(info: ArrayInfo, stride: Any, fn: str, arg: str) -> tuple[int, int]:
    """(element stride, elements available) of a strided operand."""
    if stride is None:
        es = info.element_stride()
        if es is None:
            if not info.contiguous:
                raise NvshmemArgumentError(
                    f"{fn}(): argument '{arg}' must be 1-D (strided or not) or contiguous; got strides {info.strides}"
                )
            es = 1
        return es, info.size
    es = _int(stride, fn, f"{arg}_stride")
    if es < 1:
        raise NvshmemArgumentError(f"{fn}(): {arg}_stride must be positive, got {es}")
    if not info.contiguous:
        raise NvshmemArgumentError(
            f"{fn}(): pass {arg}_stride only with a contiguous '{arg}' (a strided view carries its own stride)"
        )
    return es, (info.size - 1) // es + 1 if info.size else 0


def _irma(base: str, dst: Any, src: Any, pe: Any, nelems: Any, dst_stride: Any, src_stride: Any, stream: Any) -> None:
    fn = base
    _state.require(f"{fn}()")
    d = _describe(dst, fn, "dst")
    s = _describe(src, fn, "src")
    _same_dtype(fn, d, "dst", s, "src")
    ds, d_avail = _strided(d, dst_stride, fn, "dst")
    ss, s_avail = _strided(s, src_stride, fn, "src")
    n = _count(nelems, s_avail, fn)
    if n > s_avail:
        raise NvshmemArgumentError(f"{fn}(): nelems={n} with src stride {ss} needs more than 'src' holds ({s_avail})")
    if n > d_avail:
        raise NvshmemArgumentError(f"{fn}(): nelems={n} with dst stride {ds} needs more than 'dst' holds ({d_avail})")
    target = _pe(pe, fn)
    d_bytes = ((n - 1) * ds + 1) * d.itemsize if n else 0
    s_bytes = ((n - 1) * ss + 1) * s.itemsize if n else 0
    if base == "iput":
        check_symmetric(d, fn, "dst", nbytes=d_bytes)
        check_valid_local(s, fn, "src")
    else:
        check_symmetric(s, fn, "src", nbytes=s_bytes)
        check_valid_local(d, fn, "dst")
    api, handle = _api_for(base, stream)
    r = _resolve(fn, api, d, "dst", untyped=True)
    values = {"dst": d.ptr, "src": s.ptr, "dst_stride": ds, "src_stride": ss, "count": n, "pe": target, "stream": handle}
    _invoke(r, values)


def iput(dst: Any, src: Any, pe: int, *, nelems: int | None = None, dst_stride: int | None = None,
         src_stride: int | None = None, stream: Any = None) -> None:
    """Strided put: ``dst[i*dst_stride] = src[i*src_stride]`` on PE ``pe`` for i < nelems.

    Strides are in elements; by default they are the arrays' own (a 1-D strided
    view such as ``x[::2]`` carries stride 2), or 1.
    """
    _irma("iput", dst, src, pe, nelems, dst_stride, src_stride, stream)


def iget(dst: Any, src: Any, pe: int, *, nelems: int | None = None, dst_stride: int | None = None,
         src_stride: int | None = None, stream: Any = None) -> None:
    """Strided get from PE ``pe`` (see :func:`iput`)."""
    _irma("iget", dst, src, pe, nelems, dst_stride, src_stride, stream)


# --------------------------------------------------------------------------- signals


def put_signal(dst: Any, src: Any, signal: Any, value: int, pe: int, *, op: Any = SignalOp.SIGNAL_SET,
               nelems: int | None = None, stream: Any = None, nbi: bool = False) -> None:
    """Put ``src`` into ``dst`` on PE ``pe``, then update its ``signal`` word (``op``: set or add ``value``).

    Stream-ordered (``nvshmemx_<T>_put_signal[_nbi]_on_stream``); ``stream=None``
    is the legacy default stream.
    """
    fn = "put_signal_nbi" if nbi else "put_signal"
    _state.require(f"{fn}()")
    d, s = _pair(fn, dst, "dst", src, "src")
    n = _count_in(fn, nelems, s.size, (s, "src"), (d, "dst"))
    check_symmetric(d, fn, "dst", nbytes=n * d.itemsize)
    check_valid_local(s, fn, "src")
    sig = _signal_word(signal, fn)
    sig_value = _scalar(value, "uint64", fn, "value")
    sig_op = _signal_op(op, fn)
    target = _pe(pe, fn)
    api = fn + "_on_stream"
    r = _resolve(fn, api, d, "dst", untyped=True)
    _invoke(r, {"dst": d.ptr, "src": s.ptr, "count": n * r.count_scale, "signal": sig.ptr,
                "signal_value": sig_value, "signal_op": sig_op, "pe": target, "stream": _stream(stream)})


def put_signal_nbi(dst: Any, src: Any, signal: Any, value: int, pe: int, *, op: Any = SignalOp.SIGNAL_SET,
                   nelems: int | None = None, stream: Any = None) -> None:
    """``put_signal(..., nbi=True)``."""
    put_signal(dst, src, signal, value, pe, op=op, nelems=nelems, stream=stream, nbi=True)


def signal_op(signal: Any, value: int, pe: int, *, op: Any = SignalOp.SIGNAL_SET, stream: Any = None) -> None:
    """Set or add ``value`` to the signal word ``signal`` on PE ``pe``, in stream order."""
    fn = "signal_op"
    _state.require("signal_op()")
    sig = _signal_word(signal, fn)
    values = {"signal": sig.ptr, "signal_value": _scalar(value, "uint64", fn, "value"),
              "signal_op": _signal_op(op, fn), "pe": _pe(pe, fn), "stream": _stream(stream)}
    _invoke(_entry("signal_op_on_stream"), values)


def signal_fetch(signal: Any) -> int:
    """The value of this PE's signal word ``signal`` (``nvshmem_signal_fetch``)."""
    _state.require("signal_fetch()")
    sig = _signal_word(signal, "signal_fetch")
    return _invoke(_entry("signal_fetch"), {"signal": sig.ptr})


def signal_wait_until(signal: Any, cmp: Any, value: int, *, stream: Any = None) -> None:
    """Make ``stream`` wait until this PE's ``signal`` word compares true with ``value``."""
    fn = "signal_wait_until"
    _state.require("signal_wait_until()")
    sig = _signal_word(signal, fn)
    values = {"signal": sig.ptr, "cmp": _cmp(cmp, fn), "cmp_value": _scalar(value, "uint64", fn, "value"),
              "stream": _stream(stream)}
    _invoke(_entry("signal_wait_until_on_stream"), values)


def signal_counted_reset(signal: Any) -> None:
    """``nvshmemx_signal_counted_reset`` on this PE's signal word."""
    _state.require("signal_counted_reset()")
    sig = _signal_word(signal, "signal_counted_reset")
    _invoke(_entry("signal_counted_reset"), {"signal": sig.ptr})


# --------------------------------------------------------------------------- waits


def wait_until(ivar: Any, cmp: Any, value: Any, *, stream: Any = None) -> None:
    """Make ``stream`` wait until the first element of symmetric ``ivar`` compares true with ``value``."""
    fn = "wait_until"
    _state.require("wait_until()")
    v = _single(ivar, fn, "ivar")
    r = _resolve(fn, "wait_until_on_stream", v, "ivar", untyped=False)
    _invoke(r, {"ivar": v.ptr, "cmp": _cmp(cmp, fn), "cmp_value": _scalar(value, r.typename, fn, "value"),
                "stream": _stream(stream)})


def _status_arg(status: Any, n: int, fn: str) -> int:
    if status is None:
        return 0
    st = _describe(status, fn, "status")
    if st.dtype != "int32":
        raise NvshmemTypeError(f"{fn}(): argument 'status' must be an int32 array, not {st.dtype}")
    _contiguous(st, fn, "status")
    _fits(fn, n, f"nelems={n}", st, "status")
    check_valid_local(st, fn, "status")
    return st.ptr


def wait_until_all(ivars: Any, cmp: Any, value: Any, *, status: Any = None, nelems: int | None = None,
                   stream: Any = None) -> None:
    """Make ``stream`` wait until every element of ``ivars`` (not masked by nonzero ``status``)
    compares true with ``value``."""
    fn = "wait_until_all"
    _state.require("wait_until_all()")
    v = _describe(ivars, fn, "ivars")
    _contiguous(v, fn, "ivars")
    n = _count_in(fn, nelems, v.size, (v, "ivars"))
    check_symmetric(v, fn, "ivars", nbytes=n * v.itemsize)
    r = _resolve(fn, "wait_until_all_on_stream", v, "ivars", untyped=False)
    _invoke(r, {"ivars": v.ptr, "count": n, "status": _status_arg(status, n, fn), "cmp": _cmp(cmp, fn),
                "cmp_value": _scalar(value, r.typename, fn, "value"), "stream": _stream(stream)})


def wait_until_all_vector(ivars: Any, cmp: Any, values: Any, *, status: Any = None, nelems: int | None = None,
                          stream: Any = None) -> None:
    """Like :func:`wait_until_all` with one comparison value per element (device array ``values``)."""
    fn = "wait_until_all_vector"
    _state.require("wait_until_all_vector()")
    v, c = _pair(fn, ivars, "ivars", values, "values")
    n = _count_in(fn, nelems, v.size, (v, "ivars"), (c, "values"))
    check_symmetric(v, fn, "ivars", nbytes=n * v.itemsize)
    check_valid_local(c, fn, "values")
    r = _resolve(fn, "wait_until_all_vector_on_stream", v, "ivars", untyped=False)
    _invoke(r, {"ivars": v.ptr, "count": n, "status": _status_arg(status, n, fn), "cmp": _cmp(cmp, fn),
                "cmp_values": c.ptr, "stream": _stream(stream)})


# --------------------------------------------------------------------------- ordering and sync


def _plain(base: str, stream: Any, what: str, team: Any = None, with_team: bool = False) -> None:
    _state.require(f"{what}()")
    api, handle = _api_for(base, stream)
    values: dict[str, Any] = {"stream": handle}
    if with_team:
        values["team"] = _team(team, what)
    _invoke(_entry(api), values)


def quiet(stream: Any = None) -> None:
    """Complete all outstanding puts/gets of this PE (``nvshmem_quiet`` / ``nvshmemx_quiet_on_stream``)."""
    _plain("quiet", stream, "quiet")


def flush(stream: Any = None) -> None:
    """``nvshmemx_flush`` / ``nvshmemx_flush_on_stream``.

    NVSHMEM releases without them (3.4) get :func:`quiet`, which guarantees more.
    """
    _state.require("flush()")
    api, _ = _api_for("flush", stream)
    if not _lib.has_symbol(_entry(api)["symbol"]):
        quiet(stream)
        return
    _plain("flush", stream, "flush")


def fence() -> None:
    """Order this PE's puts to each PE (``nvshmem_fence``)."""
    _plain("fence", None, "fence")


def barrier(team: Any = Team.TEAM_WORLD, *, stream: Any = None) -> None:
    """Barrier over ``team`` with completion of this PE's operations (``nvshmem_barrier``)."""
    _plain("barrier", stream, "barrier", team, with_team=True)


def barrier_all(stream: Any = None) -> None:
    """``nvshmem_barrier_all`` / ``nvshmemx_barrier_all_on_stream``."""
    _plain("barrier_all", stream, "barrier_all")


def sync(team: Any = Team.TEAM_WORLD, *, stream: Any = None) -> None:
    """Synchronize ``team`` without completing operations (``nvshmem_team_sync``)."""
    _plain("team_sync", stream, "sync", team, with_team=True)


def sync_all(stream: Any = None) -> None:
    """``nvshmem_sync_all`` / ``nvshmemx_sync_all_on_stream``."""
    _plain("sync_all", stream, "sync_all")


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


# --------------------------------------------------------------------------- atomics
#
# Host-initiated atomics work only where NVSHMEM reaches the target PE through a
# network transport; to a PE reachable by load/store they raise
# NvshmemUnsupportedError (see _amo).


def _amo(api: str, target: Any, pe: Any, value: Any = None, compare: Any = None) -> Any:
    fn = api
    _state.require(f"{fn}()")
    t = _single(target, fn, "target")
    r = _resolve(fn, api, t, "target", untyped=False)
    target_pe = _pe(pe, fn)
    if _lib.call("nvshmem_ptr", t.ptr, target_pe):
        # NVSHMEM's host library implements AMOs only through network transports; over
        # P2P it prints "not implemented" and returns garbage (seen with 3.4.5).
        raise NvshmemUnsupportedError(
            f"{fn}(): PE {target_pe} is reached by load/store (NVLink/PCIe P2P), and NVSHMEM implements "
            "host-initiated atomics only over network transports (it would print 'not implemented' and "
            "return garbage). Do the atomic on the GPU (nvshmem_dsl.numba / nvshmem_dsl.cute device "
            "atomics), or through peer(x, pe) with an atomic kernel of your array library."
        )
    values: dict[str, Any] = {"sym_target": t.ptr, "pe": target_pe}
    roles = {p["role"] for p in r.entry["params"]}
    if "value" in roles:
        values["value"] = _scalar(value, r.typename, fn, "value")
    if "compare" in roles:
        values["compare"] = _scalar(compare, r.typename, fn, "cond")
    result = _invoke(r, values)
    return None if r.entry["ret"]["ctype"] == "void" else _result(result, r.typename)


def _amo_function(api: str, spec: dict):
    """The host function for atomic ``api`` from its row of generated/host_api.py: the spec's
    parameters (names and order as in C and in the device APIs: target, cond, value, pe) and
    its summary as docstring."""
    names = spec["params"]  # C order: target, [cond,] [value,] pe

    def amo(*args: Any, **kwargs: Any) -> Any:
        try:
            a = amo.__signature__.bind(*args, **kwargs).arguments
        except TypeError as exc:
            raise NvshmemTypeError(f"{api}(): {exc}") from None
        target, *middle, pe = (a[n] for n in names)
        value = middle[-1] if middle else None
        cond = middle[0] if len(middle) == 2 else None
        return _amo(api, target, pe, value, cond)

    amo.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Any) for n in names],
        return_annotation=Any if spec["fetching"] else None)
    amo.__name__ = amo.__qualname__ = api
    amo.__module__ = __name__
    amo.__doc__ = (f"{spec['summary']}\n\n{spec['semantics']} The target is the first element of the "
                   f"symmetric array ``target`` (slice it to pick another); blocking host call.\n\n"
                   f"Element dtypes: {', '.join(spec['dtypes'])}. C functions: ``nvshmem_<TYPE>_{api}``.")
    return amo


_AMO_APIS = tuple(AMO)
for _api, _row in AMO.items():
    globals()[_api] = _amo_function(_api, _row)
del _api, _row


# --------------------------------------------------------------------------- coverage of the op table

#: Every host family of ops.json -> the Python function(s) that reach it ("module.function").
COVERAGE: dict[str, str] = {
    # RMA
    "put": "host.operations.put", "get": "host.operations.get", "p": "host.operations.p", "g": "host.operations.g",
    "iput": "host.operations.iput", "iget": "host.operations.iget",
    # signals and waits
    "put_signal": "host.operations.put_signal", "signal_op": "host.operations.signal_op",
    "signal_fetch": "host.operations.signal_fetch", "signal_wait_until_on_stream": "host.operations.signal_wait_until",
    "signal_counted_reset": "host.operations.signal_counted_reset",
    "wait_until": "host.operations.wait_until", "wait_until_all": "host.operations.wait_until_all",
    "wait_until_all_vector": "host.operations.wait_until_all_vector",
    # ordering and sync
    "quiet": "host.operations.quiet", "flush": "host.operations.flush", "fence": "host.operations.fence",
    "barrier": "host.operations.barrier", "barrier_all": "host.operations.barrier_all",
    "team_sync": "host.operations.sync", "sync_all": "host.operations.sync_all",
    # collectives
    "broadcast": "host.operations.broadcast", "fcollect": "host.operations.fcollect", "alltoall": "host.operations.alltoall",
    "reduce": "host.operations.reduce", "reducescatter": "host.operations.reducescatter",
    # atomics: every family's apis are built from the spec (below)
    **{row["family"]: f"host.operations.{api}" for api, row in AMO.items()},
    # memory
    "malloc": "host.memory.buffer", "calloc": "host.memory.zeros", "align": "host.memory.buffer", "free": "host.memory.free",
    "ptr": "host.views.peer", "mc_ptr": "host.views.multicast",
    "buffer_register": "host.views.register_buffer", "buffer_unregister": "host.views.unregister_buffer",
    "buffer_unregister_all": "host.views.unregister_all_buffers",
    "buffer_register_symmetric": "host.views.register_external",
    "buffer_unregister_symmetric": "host.views.unregister_external",
    # teams
    "team_my_pe": "host.teams.my_pe", "team_n_pes": "host.teams.n_pes", "team_translate_pe": "host.teams.translate_pe",
    "team_split_strided": "host.teams.split_strided", "team_split_2d": "host.teams.split_2d",
    "team_init": "host.teams.team_init", "team_get_uniqueid": "host.teams.team_init",
    "team_get_config": "host.teams.config", "team_destroy": "host.teams.destroy",
    # init, queries
    "hostlib_init_attr": "host._init.init", "hostlib_finalize": "host._init.finalize", "get_uniqueid": "host._init.get_uniqueid",
    "set_attr_uniqueid_args": "host._init.init", "init_status": "host._init.init_status", "query_thread": "host._init.query_thread",
    "my_pe": "host._init.my_pe", "n_pes": "host._init.n_pes",
    "info_get_version": "host._init.versions", "info_get_name": "host._init.versions",
    "vendor_get_version_info": "host._init.versions", "global_exit": "host._init.global_exit",
    # kernels
    "module_init": "linker.module_init.library_init", "module_finalize": "linker.module_init.library_finalize",
}

#: Host families deliberately not wrapped, with the reason; all stay reachable as
#: ``nvshmem_dsl.lib().<symbol>`` (raw cffi) or ``nvshmem_dsl.host._lib.call(symbol, ...)``.
NOT_WRAPPED: dict[str, str] = {
    "buffer_register_symmetric_at_preferred_address": "register_external() lets NVSHMEM choose the address",
    "set_attr_mpi_comm_args": "init() bootstraps MPI jobs through the unique id over mpi4py (portable across MPIs)",
    "collective_launch": "takes a CUDA runtime function pointer, which JIT-compiled Python kernels do not have",
    "collective_launch_query_gridsize": "takes a CUDA runtime function pointer (see collective_launch)",
    "qp_create": "IBGDA queue pairs for device-side QP APIs; not needed by host code",
    "region_host": "experimental region API (nvshmemx_region_start); raw access only",
    "region_stop_host": "experimental region API (nvshmemx_region_stop); raw access only",
    "region_is_active": "experimental region API; raw access only",
}
