"""The few CUDA driver calls the host runtime needs (through cuda.bindings / cuda.core).

Nothing here runs at import: the driver bindings are loaded on the first call.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from ..errors import NvshmemError, NvshmemInitError

__all__ = [
    "driver",
    "device_count",
    "set_device",
    "current_device_id",
    "device_context",
    "memcpy_htod",
    "memcpy_dtoh",
    "runtime_stream",
    "synchronize",
    "stream_handle",
    "can_access_peer",
    "pointer_device",
]


class CudaError(NvshmemError):
    """A CUDA driver call failed."""


@functools.lru_cache(maxsize=1)
def driver():
    """The ``cuda.bindings.driver`` module (older cuda-python: ``cuda.cuda``)."""
    try:
        from cuda.bindings import driver as drv
    except ImportError:
        from cuda import cuda as drv  # cuda-python < 12.6
    return drv


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        raise CudaError(f"{what} failed: {name}")
    return result[1] if len(result) == 2 else result[1:]


_initialised = False


def init_driver() -> None:
    """cuInit(0), with a clear NvshmemInitError when there is no driver or no GPU."""
    global _initialised
    if _initialised:
        return
    try:
        drv = driver()
        err = drv.cuInit(0)[0]
    except Exception as exc:  # the driver library is absent (no NVIDIA driver installed)
        detail = str(exc).rstrip(".")
        raise NvshmemInitError(
            f"no usable CUDA driver ({detail}); NVSHMEM needs an NVIDIA GPU and its driver "
            "(nvidia-smi should list the GPU)"
        ) from None
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        hint = " (no CUDA-capable device is visible; check CUDA_VISIBLE_DEVICES)" if "NO_DEVICE" in name else ""
        raise NvshmemInitError(f"the CUDA driver failed to initialise: {name}{hint}")
    _initialised = True


def library_uses_nvshmem(handle: int) -> bool:
    """Whether the loaded ``CUlibrary`` ``handle`` holds NVSHMEM's device state
    (:data:`nvshmem_dsl.linker.pipeline.DEVICE_STATE`): it then needs ``nvshmemx_culibrary_init`` before
    its kernels run; without it NVSHMEM's init fails (status 7)."""
    from ..linker.pipeline import DEVICE_STATE

    drv = driver()
    err = drv.cuLibraryGetGlobal(drv.CUlibrary(int(handle)), DEVICE_STATE.encode())[0]
    if int(err) == int(drv.CUresult.CUDA_ERROR_NOT_FOUND):
        return False
    _check((err, None), f"cuLibraryGetGlobal({DEVICE_STATE})")
    return True


def module_uses_nvshmem(handle: int) -> bool:
    """Whether the loaded ``CUmodule`` ``handle`` holds NVSHMEM's device state
    (:data:`nvshmem_dsl.linker.pipeline.DEVICE_STATE`): it then needs ``nvshmemx_cumodule_init`` before
    its kernels run (Triton loads its kernels as modules)."""
    from ..linker.pipeline import DEVICE_STATE

    drv = driver()
    err = drv.cuModuleGetGlobal(drv.CUmodule(int(handle)), DEVICE_STATE.encode())[0]
    if int(err) == int(drv.CUresult.CUDA_ERROR_NOT_FOUND):
        return False
    _check((err, None), f"cuModuleGetGlobal({DEVICE_STATE})")
    return True


def device_count() -> int:
    """Number of visible CUDA devices; NvshmemInitError when there is no driver."""
    init_driver()
    return int(_check(driver().cuDeviceGetCount(), "cuDeviceGetCount"))


def set_device(device_id: int):
    """Make ``device_id`` current on this thread (its primary context); returns the cuda.core Device."""
    from cuda.core import Device

    dev = Device(device_id)
    dev.set_current()
    return dev


def current_device_id() -> int | None:
    drv = driver()
    err, dev = drv.cuCtxGetDevice()
    if int(err) != 0:
        return None
    return int(dev)


@contextlib.contextmanager
def device_context(device_id: int) -> Iterator[None]:
    """``device_id``'s primary context current on this thread for the block where no context is
    (pushed, then popped: the thread is left as it was); a current context is left as it is.
    NVSHMEM fills a loaded module's device state in the current context; a DSL may leave a thread
    without one (CuTe after some kernels: ``nvshmemx_culibrary_init`` then fails with
    CUDA_ERROR_INVALID_CONTEXT and the kernel reads an empty state, an illegal address)."""
    try:
        drv = driver()
        err, ctx = drv.cuCtxGetCurrent()
    except Exception:  # noqa: BLE001 - no driver library (a CPU machine, faked calls): nothing to make current
        err, ctx = 0, 1
    if int(err) != 0 or int(ctx) != 0:  # a context is current, or no driver to ask: NVSHMEM reports its own errors
        yield
        return
    dev = _check(drv.cuDeviceGet(device_id), "cuDeviceGet")
    primary = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    try:
        _check((drv.cuCtxPushCurrent(primary)[0], None), "cuCtxPushCurrent")
        try:
            yield
        finally:
            drv.cuCtxPopCurrent()
    finally:
        drv.cuDevicePrimaryCtxRelease(dev)


def memcpy_htod(dst: int, data: bytes | bytearray | memoryview, stream: int | None = None) -> None:
    """Copy ``data`` to device address ``dst``; with ``stream`` (a handle): queued on it (the data
    is staged by the driver before this returns, so ``data`` may change after)."""
    if stream is None:
        _check(driver().cuMemcpyHtoD(dst, bytes(data), len(data)), "cuMemcpyHtoD")
        return
    drv = driver()
    _check(drv.cuMemcpyHtoDAsync(dst, bytes(data), len(data), drv.CUstream(stream)), "cuMemcpyHtoDAsync")


def memcpy_dtoh(src: int, nbytes: int, stream: int | None = None) -> bytes:
    """``nbytes`` from device address ``src``; with ``stream`` (a handle): after the stream's work
    so far (a copy to pageable memory returns once done: one call, no separate wait)."""
    buf = bytearray(nbytes)
    drv = driver()
    if stream is None:
        _check(drv.cuMemcpyDtoH(buf, src, nbytes), "cuMemcpyDtoH")
    else:
        _check(drv.cuMemcpyDtoHAsync(buf, src, nbytes, drv.CUstream(stream)), "cuMemcpyDtoHAsync")
    return bytes(buf)


_runtime_stream: int | None = None


def runtime_stream() -> int:
    """The runtime's own stream (a handle; non-blocking: it does not wait for the legacy default
    stream), made on first use in the current context; :func:`release_runtime_stream` at finalize."""
    global _runtime_stream
    if _runtime_stream is None:
        drv = driver()
        flags = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        _runtime_stream = int(_check(drv.cuStreamCreate(flags), "cuStreamCreate"))
    return _runtime_stream


def release_runtime_stream() -> None:
    """Destroy :func:`runtime_stream`'s stream if it was made (finalize)."""
    global _runtime_stream
    if _runtime_stream is not None:
        handle, _runtime_stream = _runtime_stream, None
        drv = driver()
        _check(drv.cuStreamDestroy(drv.CUstream(handle)), "cuStreamDestroy")


def synchronize() -> None:
    _check(driver().cuCtxSynchronize(), "cuCtxSynchronize")


def stream_synchronize(handle: int) -> None:
    drv = driver()
    _check(drv.cuStreamSynchronize(drv.CUstream(handle)), "cuStreamSynchronize")


def can_access_peer(dev: int, peer: int) -> bool:
    drv = driver()
    return bool(_check(drv.cuDeviceCanAccessPeer(drv.CUdevice(dev), drv.CUdevice(peer)), "cuDeviceCanAccessPeer"))


def device_name(dev: int) -> str:
    drv = driver()
    raw = _check(drv.cuDeviceGetName(256, drv.CUdevice(dev)), "cuDeviceGetName")
    return bytes(raw).split(b"\0", 1)[0].decode(errors="replace")


def compute_capability(dev: int) -> tuple[int, int]:
    drv = driver()
    attr = drv.CUdevice_attribute
    major = _check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = _check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    return int(major), int(minor)


def mps_enabled(dev: int) -> bool | None:
    """Whether this process's contexts on ``dev`` run under an MPS server (None: the driver
    cannot tell)."""
    drv = driver()
    attr = getattr(drv.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_MPS_ENABLED", None)
    if attr is None:
        return None
    err, value = drv.cuDeviceGetAttribute(attr, dev)
    return bool(value) if int(err) == 0 else None


def pointer_device(ptr: int) -> int | None:
    """The device ordinal owning device pointer ``ptr``; None for host/unknown memory."""
    drv = driver()
    attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, value = drv.cuPointerGetAttribute(attr, ptr)
    if int(err) != 0:
        return None
    return int(value)


# --------------------------------------------------------------------------- streams


def stream_handle(stream: Any) -> int:
    """The ``cudaStream_t`` value of ``stream`` as an int.

    Accepts None or 0 (the legacy default stream), an int handle, a cuda.core
    Stream (``__cuda_stream__`` protocol), a torch stream (``.cuda_stream``), a
    cupy stream (``.ptr``), a numba stream (``.handle``), and a
    ``cuda.bindings`` CUstream.
    """
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise TypeError("stream must be a CUDA stream, an int handle or None, not a bool")
    if isinstance(stream, int):
        if stream < 0:
            raise ValueError(f"invalid stream handle {stream}")
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        return int(value[1])
    for attr in ("cuda_stream", "ptr"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    handle = getattr(stream, "handle", None)
    if handle is not None:
        value = getattr(handle, "value", handle)  # ctypes c_void_p in numba
        if value is None:
            return 0
        try:
            return int(value)
        except (TypeError, ValueError):
            pass
    try:  # cuda.bindings CUstream and friends
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError(
            f"cannot use {type(stream).__module__}.{type(stream).__qualname__} as a CUDA stream; "
            "pass a cuda.core Stream, a cupy/torch/numba stream, an int handle or None"
        ) from None
