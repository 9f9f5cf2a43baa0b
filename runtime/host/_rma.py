"""Remote memory access from the host: put/get (blocking, non-blocking, on a stream), p/g,
strided iput/iget (re-exported by :mod:`nvshmem_dsl.host.operations`).
"""

from __future__ import annotations

from typing import Any

from . import _state
from ._arrays import ArrayInfo
from ..errors import NvshmemArgumentError
from .symmetric import check_symmetric, check_valid_local
from ._op_args import (
    _api_for, _count, _count_in, _describe, _int, _invoke, _pair, _pe, _resolve, _result, _same_dtype, _scalar,
    _single,
)

__all__ = ["put", "get", "put_nbi", "get_nbi", "p", "g", "iput", "iget"]


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
