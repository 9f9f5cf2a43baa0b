"""The functions a DSL front-end calls with each module it loads that holds NVSHMEM code.

The host runtime registers :func:`nvshmem_dsl.linker.module_init.library_init` (or
``module_init``) and its finalize here when it starts (:func:`~nvshmem_dsl.linker.module_init.
install_dsl_hooks`), and takes them out when it stops; the front-end calls :meth:`ModuleHooks.
run_init` when it loads such a module, before its first launch, and :meth:`ModuleHooks.
run_finalize` when it unloads it.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

__all__ = ["ModuleHooks"]

Hook = Callable[[int], Any]


class ModuleHooks:
    """Init and finalize hooks of one front-end; ``handle`` says what it loads (``"CUlibrary"``,
    ``"CUmodule"``), for the messages."""

    def __init__(self, handle: str) -> None:
        self.handle = handle
        self.init: list[Hook] = []
        self.finalize: list[Hook] = []
        self.warned = False  # the no-hook warning is given once

    def add_init(self, fn: Hook) -> Hook:
        """Call ``fn(handle: int)`` for every loaded module that contains NVSHMEM device code,
        before its first launch.  Returns ``fn``."""
        if fn not in self.init:
            self.init.append(fn)
        return fn

    def remove_init(self, fn: Hook) -> None:
        if fn in self.init:
            self.init.remove(fn)

    def set_init(self, fn: Hook | None) -> None:
        """Make ``fn`` the only init hook (``None``: no hook)."""
        self.init[:] = [] if fn is None else [fn]

    def add_finalize(self, fn: Hook) -> Hook:
        """Call ``fn(handle: int)`` when such a module is unloaded.  Returns ``fn``."""
        if fn not in self.finalize:
            self.finalize.append(fn)
        return fn

    def remove_finalize(self, fn: Hook) -> None:
        if fn in self.finalize:
            self.finalize.remove(fn)

    def run_init(self, handle: int, kernel: str = "") -> None:
        """The init hooks on ``handle``; with none registered, a warning (once): the module's
        NVSHMEM device state stays uninitialised."""
        if not self.init and not self.warned:
            self.warned = True
            what = f"the kernel {kernel}" if kernel else "a kernel"
            warnings.warn(
                f"{what} uses NVSHMEM and was loaded ({self.handle} {handle:#x}), but no module init hook "
                "is registered, so its NVSHMEM device state is not initialised; call "
                "nvshmem_dsl.init() before launching kernels",
                RuntimeWarning, stacklevel=3)
        for fn in list(self.init):
            fn(handle)

    def run_finalize(self, handle: int) -> None:
        for fn in list(self.finalize):
            fn(handle)
