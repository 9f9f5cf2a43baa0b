"""A launch of an NVSHMEM kernel with more threads than its registers allow: a clear error.

CUDA answers such a launch with ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`` and nothing else.  NVSHMEM
code inlined into a kernel can need many registers (NVSHMEM 3.8's put loops take 117-120), so
:func:`install` wraps numba-cuda's kernel launch: when a launch of a kernel that calls NVSHMEM
fails and its block is larger than the kernel's registers allow, :class:`NvshmemLaunchError` names
the kernel, its registers per thread, the block size asked and the remedies.  Nothing is checked
before a launch, so a launch that succeeds costs nothing more.
"""

from __future__ import annotations

import math

from ..errors import NvshmemError
from ..linker.pipeline import registers_a_thread

__all__ = ["NvshmemLaunchError", "install", "too_many_threads"]



class NvshmemLaunchError(NvshmemError, RuntimeError):
    """A kernel was launched with more threads a block than its registers allow."""


def _threads(blockdim) -> int:
    if isinstance(blockdim, int):
        return blockdim
    return math.prod(int(d) for d in blockdim)


def too_many_threads(name: str, regs: int, max_threads: int, blockdim) -> NvshmemLaunchError | None:
    """The error for launching ``name`` with ``blockdim`` when it allows ``max_threads``; None if it fits."""
    threads = _threads(blockdim)
    if threads <= max_threads:
        return None
    cap = registers_a_thread(threads)
    return NvshmemLaunchError(
        f"{name}: launched with {threads} threads a block ({blockdim}), but it uses {regs} registers a thread, "
        f"so at most {max_threads} threads a block fit. Remedies: launch at most {max_threads} threads a block; "
        f"or compile it for this block size: @cuda.jit(launch_bounds={threads}) or @cuda.jit(max_registers={cap}) "
        "(registers beyond that spill to local memory). NVSHMEM's large routines (collectives, barriers) are "
        "linked out of line with a register cap unless NVSHMEM_DSL_OUTLINE=none."
    )


def _uses_nvshmem(kernel) -> bool:
    return bool(getattr(getattr(kernel, "_codelibrary", None), "uses_nvshmem", False))


_installed = False


def install() -> None:
    """Wrap ``numba.cuda.dispatcher._Kernel.launch`` once (idempotent)."""
    global _installed
    if _installed:
        return
    from numba.cuda import dispatcher

    original = dispatcher._Kernel.launch

    def launch(self, args, griddim, blockdim, stream=0, sharedmem=0):
        try:
            return original(self, args, griddim, blockdim, stream, sharedmem)
        except Exception as exc:
            if not _uses_nvshmem(self):
                raise
            try:
                attrs = self._codelibrary.get_cufunc().attrs
                name = getattr(self.py_func, "__qualname__", self.entry_name)
                err = too_many_threads(name, attrs.regs, attrs.maxthreads, blockdim)
            except Exception:  # noqa: BLE001 - the original error stands
                err = None
            if err is None:
                raise
            raise err from exc

    launch.__wrapped__ = original
    dispatcher._Kernel.launch = launch
    _installed = True
