"""NVSHMEM's objects started while Numba is still compiling a kernel.

A kernel that calls a large NVSHMEM routine out of line (:mod:`nvshmem_dsl.linker.outline`) is
linked with its object; from an empty cache, building that object is most of the kernel's first
compile.  The link starts the builds as soon as it knows what the kernel calls
(:func:`nvshmem_dsl.linker.outline.prefetch`), after Numba's front end and NVSHMEM's closure.
This module starts them earlier, while Numba types the kernel: :func:`install` wraps numba-cuda's
``_Kernel.__init__`` (the compile of a kernel for a launch, on a machine with a GPU) to note the
kernel's target (compute capability, ``max_registers``, the block size of ``launch_bounds``), and
the typing of each NVSHMEM call (:mod:`nvshmem_dsl.numba._calls`; Numba types a call once per
argument types and process) and its code generation
(:func:`nvshmem_dsl.numba._intrinsics.declare_device_function`, every kernel) hand its C symbol to
:func:`kernel_calls`.  One thread a kernel takes those symbols in batches, keeps the ones
:func:`~nvshmem_dsl.linker.outline.split` calls out of line and starts their objects at the
register cap the link will ask for (:func:`~nvshmem_dsl.linker.outline.block_cap` of the same
block size and limit), so that the link finds them built or under way (their file locks).
Nothing here is needed for correctness: errors are left to the link, which builds what is
missing.  ``cuda.compile_ptx`` and other compiles without a launch start nothing early.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time

from ..linker import outline

__all__ = ["install", "kernel_calls"]

#: How long no new call is typed before the calls so far are taken as one batch.
SETTLE_SECONDS = 0.1


class _Kernel:
    """A kernel being compiled for a launch: its target and the symbols typed so far."""

    def __init__(self, cc, max_registers, threads):
        self.cc, self.max_registers, self.threads = cc, max_registers, threads
        self._lock = threading.Lock()
        self._seen: set = set()
        self._pending: list = []
        self._thread = None

    def add(self, symbol: str) -> None:
        with self._lock:
            if symbol in self._seen:
                return
            self._seen.add(symbol)
            self._pending.append(symbol)
            if self._thread is None:  # the outlining mode in effect now goes with it
                self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                                name="nvshmem-dsl-early-objects")
                self._thread.start()

    def _run(self) -> None:
        from ._linker import _sm, _target

        while True:
            while True:  # the kernel's calls in one batch: one closure of NVSHMEM for all, as the link's
                with self._lock:
                    n = len(self._pending)
                time.sleep(SETTLE_SECONDS)
                with self._lock:
                    if len(self._pending) == n:
                        break
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._thread = None
                    return
            try:
                sm = _sm(self.cc)
                _, outlined = outline.split(batch, sm)
                if outlined:
                    cpu, features = _target(self.cc)
                    outline.prefetch(outlined, sm, cpu, features,
                                     outline.block_cap([self.threads], [self.max_registers]))
            except Exception:  # noqa: BLE001 - the link builds (and reports) what is missing
                pass


_compiling: contextvars.ContextVar = contextvars.ContextVar("nvshmem_dsl_numba_kernel", default=None)


def kernel_calls(symbol: str) -> None:
    """Numba typed a call of NVSHMEM's ``symbol``: in a kernel compiled for a launch, start its
    object now if it is called out of line."""
    kernel = _compiling.get()
    if kernel is not None and outline.mode() != "none":
        kernel.add(symbol)


def _threads(launch_bounds):
    """The block size ``launch_bounds`` declares (``.maxntid``): the number, or a tuple's first."""
    if not launch_bounds:
        return None
    return int(launch_bounds[0] if isinstance(launch_bounds, (tuple, list)) else launch_bounds)


def compiling(init):
    """``_Kernel.__init__`` ``init`` noting the kernel's target for :func:`kernel_calls` (the
    outermost kernel's, where compiles nest)."""

    @functools.wraps(init)
    def __init__(self, py_func, argtypes, *args, **kwargs):
        if _compiling.get() is not None or outline.ptxas() is None:
            return init(self, py_func, argtypes, *args, **kwargs)
        try:
            from numba.cuda.codegen import CUDACodeLibrary

            cc = CUDACodeLibrary._ensure_cc(None, None)  # what the link compiles for
        except Exception:  # noqa: BLE001 - no device: nothing early
            return init(self, py_func, argtypes, *args, **kwargs)
        token = _compiling.set(_Kernel(cc, kwargs.get("max_registers"), _threads(kwargs.get("launch_bounds"))))
        try:
            return init(self, py_func, argtypes, *args, **kwargs)
        finally:
            _compiling.reset(token)

    return __init__


_installed = False


def install() -> None:
    """Wrap ``numba.cuda.dispatcher._Kernel.__init__`` once (idempotent)."""
    global _installed
    if _installed:
        return
    from numba.cuda import dispatcher

    dispatcher._Kernel.__init__ = compiling(dispatcher._Kernel.__init__)
    _installed = True
