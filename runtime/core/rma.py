"""Stream-ordered host RMA and signals as NVSHMEM4Py has them (``nvshmem.core.rma``).

``put(dst, src, remote_pe=, stream=)`` is :func:`nvshmem_dsl.put` of
``min(dst bytes, src bytes)`` bytes, destination first; ``dst``/``src`` may be ``cuda.core``
buffers, CuPy arrays or torch tensors.  As in NVSHMEM4Py there is no ``nelems`` argument and
``stream`` is required: the tutorial's ``nvshmem.put(dst, src, size, pe, stream=s)`` is rejected
by NVSHMEM4Py (``stream`` given twice) and here too.
"""

from __future__ import annotations

from typing import Any

from ..host import _arrays
from ..host import operations as _ops
from . import _tracking
from ._tracking import CAIView, byte_view, translated
from .direct import ComparisonType, SignalOp
from ._types import NvshmemInvalid

__all__ = ["put_signal", "put_signal_nbi", "signal_op", "signal_wait", "put", "put_nbi", "get", "get_nbi", "quiet",
           "flush", "signal_fetch", "SignalOp"]


def _transfer(op: str, dst: Any, src: Any, remote_pe: Any, stream: Any):
    _tracking.require_initialized(op)
    _tracking.require_stream(stream, op)
    d = byte_view(dst, op, "dst")
    s = byte_view(src, op, "src")
    n = min(d.__cuda_array_interface__["shape"][0], s.__cuda_array_interface__["shape"][0])
    return d, s, n


def _signal(signal_var: Any, function: str) -> CAIView:
    """The signal word: the first 8 bytes of a Buffer (>= 8 bytes), or of a 64-bit array."""
    if _tracking.is_core_buffer(signal_var):
        if int(signal_var.size) < 8:
            raise NvshmemInvalid(f"{function}(): Signal must be a Buffer >= 8 bytes allocated by nvshmem_dsl.core")
        return CAIView(int(signal_var.handle), (1,), "<u8", owner=signal_var)
    try:
        info = _arrays.describe(signal_var, function=function, argument="signal_var")
    except Exception:
        raise NvshmemInvalid(f"{function}(): Signal must be a Buffer >= 8 bytes allocated by nvshmem_dsl.core "
                             f"(or a uint64/int64 array), not {type(signal_var).__name__}") from None
    if info.itemsize != 8 or info.dtype not in ("uint64", "int64"):
        raise NvshmemInvalid(f"{function}(): the signal array must be uint64 or int64, not {info.dtype}")
    return CAIView(info.ptr, (1,), "<u8", owner=signal_var)


@translated
def put(dst: Any, src: Any, remote_pe: int = -1, stream: Any = None) -> None:
    """Put ``src`` into symmetric ``dst`` on PE ``remote_pe``, ordered on ``stream``
    (``min(size)`` bytes; ``nvshmemx_*_put_on_stream``)."""
    d, s, n = _transfer("put", dst, src, remote_pe, stream)
    _ops.put(d, s, remote_pe, nelems=n, stream=stream)


@translated
def get(dst: Any, src: Any, remote_pe: int = -1, stream: Any = None) -> None:
    """Get symmetric ``src`` of PE ``remote_pe`` into ``dst``, ordered on ``stream``."""
    d, s, n = _transfer("get", dst, src, remote_pe, stream)
    _ops.get(d, s, remote_pe, nelems=n, stream=stream)


@translated
def put_nbi(dst: Any, src: Any, remote_pe: int = -1, stream: Any = None) -> None:
    """Non-blocking :func:`put` (``nvshmemx_putmem_nbi_on_stream``): ``src`` may be reused after
    ``flush(stream)`` or ``quiet(stream)``; the data is visible at the target after ``quiet``."""
    d, s, n = _transfer("put_nbi", dst, src, remote_pe, stream)
    _ops.put(d, s, remote_pe, nelems=n, stream=stream, nbi=True)


@translated
def get_nbi(dst: Any, src: Any, remote_pe: int = -1, stream: Any = None) -> None:
    """Non-blocking :func:`get` (``nvshmemx_getmem_nbi_on_stream``): ``dst`` is complete after
    ``quiet(stream)``."""
    d, s, n = _transfer("get_nbi", dst, src, remote_pe, stream)
    _ops.get(d, s, remote_pe, nelems=n, stream=stream, nbi=True)


@translated
def put_signal(dst: Any, src: Any, signal_var: Any, signal_val: int, signal_op: Any, remote_pe: int = -1,
               stream: Any = None) -> None:
    """Put ``src`` into ``dst`` on ``remote_pe``, then update its ``signal_var`` with ``signal_op``
    (``SignalOp.SIGNAL_SET`` / ``SIGNAL_ADD``) and ``signal_val``, ordered on ``stream``."""
    d, s, n = _transfer("put_signal", dst, src, remote_pe, stream)
    sig = _signal(signal_var, "put_signal")
    _ops.put_signal(d, s, sig, signal_val, remote_pe, op=signal_op, nelems=n, stream=stream)


@translated
def put_signal_nbi(dst: Any, src: Any, signal_var: Any, signal_val: int, signal_op: Any, remote_pe: int = -1,
                   stream: Any = None) -> None:
    """Non-blocking :func:`put_signal` (``nvshmemx_putmem_signal_nbi_on_stream``): ``src`` must stay
    valid until a later ``quiet(stream)``."""
    d, s, n = _transfer("put_signal_nbi", dst, src, remote_pe, stream)
    sig = _signal(signal_var, "put_signal_nbi")
    _ops.put_signal(d, s, sig, signal_val, remote_pe, op=signal_op, nelems=n, stream=stream, nbi=True)


@translated
def signal_op(signal_var: Any, signal_val: int, signal_op: Any, remote_pe: int = -1, stream: Any = None) -> None:
    """Update ``signal_var`` on ``remote_pe`` (``signal_op`` with ``signal_val``), no data, on ``stream``."""
    _tracking.require_initialized("signal_op")
    _tracking.require_stream(stream, "signal_op")
    _ops.signal_op(_signal(signal_var, "signal_op"), signal_val, remote_pe, op=signal_op, stream=stream)


@translated
def signal_wait(signal_var: Any, signal_val: int, signal_op: ComparisonType, stream: Any = None) -> None:
    """Make ``stream`` wait until this PE's ``signal_var`` compares true (``signal_op``, a
    ``ComparisonType``) with ``signal_val`` (``nvshmemx_signal_wait_until_on_stream``)."""
    _tracking.require_initialized("signal_wait")
    _tracking.require_stream(stream, "signal_wait")
    _ops.signal_wait_until(_signal(signal_var, "signal_wait"), signal_op, signal_val, stream=stream)


@translated
def quiet(stream: Any = None) -> None:
    """Complete this PE's outstanding operations, ordered on ``stream``."""
    _tracking.require_initialized("quiet")
    _tracking.require_stream(stream, "quiet")
    _ops.quiet(stream=stream)


@translated
def flush(stream: Any = None) -> None:
    """Make the sources of the ``put_nbi`` calls before it on ``stream`` safe to reuse
    (``nvshmemx_flush_on_stream``); no remote visibility: :func:`quiet` gives that."""
    _tracking.require_initialized("flush")
    _tracking.require_stream(stream, "flush")
    _ops.flush(stream=stream)


@translated
def signal_fetch(signal_var: Any) -> int:
    """This PE's value of the signal word ``signal_var`` (``nvshmem_signal_fetch``: a synchronous
    device-to-host read, no stream: order the producers' streams before calling it)."""
    _tracking.require_initialized("signal_fetch")
    return int(_ops.signal_fetch(_signal(signal_var, "signal_fetch")))
