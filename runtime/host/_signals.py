"""Signals and waits from the host: put with signal, signal updates and fetches, waits on a stream
(re-exported by :mod:`nvshmem_dsl.host.operations`).
"""

from __future__ import annotations

from typing import Any

from . import _state
from .._generated.constants import SignalOp
from ..errors import NvshmemTypeError
from .symmetric import check_symmetric, check_valid_local
from ._op_args import (
    _cmp, _contiguous, _count_in, _describe, _entry, _fits, _invoke, _pair, _pe, _resolve, _scalar, _signal_op,
    _signal_word, _single, _stream,
)

__all__ = [
    "put_signal", "put_signal_nbi", "signal_op", "signal_fetch", "signal_wait_until", "signal_counted_reset",
    "wait_until", "wait_until_all", "wait_until_all_vector",
]


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
