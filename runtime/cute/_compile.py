"""``cute.compile`` with an explicit GPU arch and NVSHMEM module-init hooks.

CuTe DSL silently targets ``sm_100a`` when neither ``--gpu-arch`` nor
``CUTE_DSL_ARCH`` is given and no GPU is visible, which would also pick the
wrong NVSHMEM bitcode.  :func:`compile` therefore always passes the arch.

NVSHMEM needs ``nvshmemx_culibrary_init(CUlibrary)`` on every CUDA library that
contains NVSHMEM device code, before the first launch, and
``nvshmemx_culibrary_finalize`` before the library is unloaded.  CuTe loads its
cubins as ``CUlibrary`` handles lazily, on the first call / ``.to(device)``:
``CudaDialectJitCompiledFunction.jit_module.cuda_library`` (the older
``JitModule`` keeps them in ``.cuda_modules[i].cuda_module``).  The wrapper
returned here makes sure each loaded library is passed to the registered init
hook before the first launch; finalization goes through CuTe's own
``cutlass.register_library_unload_callback``, which fires while the handle is
still valid (explicit ``release()``, or the DSL unloading on garbage collection).

Kernels that call NVSHMEM's large routines (collectives, barriers) are linked with their
cached objects after CuTe's own compile (hybrid linking, :mod:`nvshmem_dsl.cute._link`): the
library CuTe loads, and the hooks see, is the linked cubin.  ``with
nvshmem_dsl.cute.outline("none"):`` around :func:`compile` inlines everything for that kernel.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shlex
import tempfile
import threading
from typing import Any, Callable, Optional

from ..host._cuda import library_uses_nvshmem

__all__ = [
    "compile",
    "compile_to_ptx",
    "resolve_arch",
    "current_arch",
    "loaded_libraries",
    "set_module_init_hook",
    "set_module_finalize_hook",
    "CompiledKernel",
    "ArchNotSetError",
]


class ArchNotSetError(RuntimeError):
    """No GPU architecture could be determined for a CuTe compile."""


_ARCH_ENV = "CUTE_DSL_ARCH"
# The arch of the compile in progress (set by compile(); read by the externs).
_compile_arch: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "nvshmem_dsl_cute_arch", default=None
)
#: Set by :func:`compile`: a list the link of a kernel (:mod:`nvshmem_dsl.cute._link`) appends
#: ``(outlined names, linked cubin)`` to, one per binary linked.
linked_binaries: contextvars.ContextVar = contextvars.ContextVar("nvshmem_dsl_cute_linked", default=None)


def _normalize_arch(arch: Any) -> str:
    """``"sm_90a"``, ``"90a"``, ``90``, ``(9, 0)`` -> CuTe's arch name."""
    if isinstance(arch, tuple):
        major, minor = arch
        arch = f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    arch = str(arch).strip().lower()
    if not arch.startswith("sm_"):
        arch = "sm_" + arch.removeprefix("sm")
    from cutlass.base_dsl.enums import Arch

    try:
        return Arch.from_string(arch).name
    except KeyError:
        known = ", ".join(a.name for a in Arch)
        raise ValueError(f"unknown GPU arch {arch!r} for CuTe DSL (known: {known})") from None


def _device_arch() -> Optional[str]:
    """Compute capability of the current CUDA device, or None without a GPU."""
    try:
        from cuda.bindings import runtime as cudart

        err, dev = cudart.cudaGetDevice()
        if err != cudart.cudaError_t.cudaSuccess:
            return None
        attr = cudart.cudaDeviceAttr
        err, major = cudart.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMajor, dev)
        err2, minor = cudart.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMinor, dev)
        if err != cudart.cudaError_t.cudaSuccess or err2 != cudart.cudaError_t.cudaSuccess:
            return None
        return _normalize_arch((major, minor))
    except Exception:
        return None


def resolve_arch(arch: Any = None) -> str:
    """Explicit ``arch``, else ``$CUTE_DSL_ARCH``, else the current GPU, else error."""
    if arch is not None and arch != "":
        return _normalize_arch(arch)
    env = os.environ.get(_ARCH_ENV, "").strip()
    if env:
        return _normalize_arch(env)
    dev = _device_arch()
    if dev is not None:
        return dev
    raise ArchNotSetError(
        "nvshmem_dsl.cute: no GPU architecture given. Pass arch='sm_90a' (or sm_80, "
        f"sm_100a, ...), or set {_ARCH_ENV}; no CUDA device was found to detect it from. "
        "(Without it CuTe DSL would silently build for sm_100a.)"
    )


def current_arch() -> str:
    """The arch being compiled for, as seen while tracing a kernel.

    Order: :func:`compile`'s arch, the arch in the running ``cute.compile``'s
    options (``--gpu-arch``), then :func:`resolve_arch` (env, current GPU).
    """
    arch = _compile_arch.get()
    if arch:
        return arch
    try:
        from cutlass.cutlass_dsl import BaseDSL

        opt = BaseDSL._get_dsl().compile_options.gpu_arch
        if opt:
            return _normalize_arch(opt)
    except Exception:
        pass
    return resolve_arch(None)


# ---------------------------------------------------------------- init hooks

_lock = threading.RLock()
_init_hook: Optional[Callable[[int], Any]] = None
_finalize_hook: Optional[Callable[[int], Any]] = None
_hook_generation = 0
_initialized: set[int] = set()  # library handles passed to the init hook
_without_nvshmem: set[int] = set()  # loaded library handles that hold no NVSHMEM code
_unload_cb_registered = False


def set_module_init_hook(fn: Optional[Callable[[int], Any]]) -> None:
    """``fn(handle: int)`` runs once per loaded CUlibrary before its first launch."""
    global _init_hook, _hook_generation
    with _lock:
        _init_hook = fn
        _hook_generation += 1
        _register_unload_callback()


def set_module_finalize_hook(fn: Optional[Callable[[int], Any]]) -> None:
    """``fn(handle: int)`` runs before CuTe unloads a library the init hook saw."""
    global _finalize_hook
    with _lock:
        _finalize_hook = fn
        _register_unload_callback()


def _on_library_unload(handle: int) -> None:
    # every handle but those known to hold no NVSHMEM code (no init can have taken them), not just
    # those of this module's init hook: a program may have passed a library of cute.compile's own to
    # library_init (NVSHMEM4Py's tests do); the hook ignores handles nobody initialised
    with _lock:
        if handle in _without_nvshmem:
            _without_nvshmem.discard(handle)
            return
        _initialized.discard(handle)
        hook = _finalize_hook
    if hook is not None:
        hook(handle)


def _register_unload_callback() -> None:
    global _unload_cb_registered
    if not _unload_cb_registered:
        from cutlass.base_dsl.jit_executor import register_library_unload_callback

        register_library_unload_callback(_on_library_unload)
        _unload_cb_registered = True


def loaded_libraries(compiled: Any) -> list[int]:
    """CUlibrary handles (as ints) a CuTe compiled function has loaded, if any."""
    fn = getattr(compiled, "_fn", compiled)
    jm = getattr(fn, "jit_module", None)
    if jm is None:
        return []
    libs = getattr(jm, "cuda_library", None)
    if libs is None:  # base JitModule: list of CudaModuleAndKernel
        libs = list(dict.fromkeys(m.cuda_module for m in getattr(jm, "cuda_modules", [])))
    return [int(h) for h in libs]


def _is_unloaded(jm: Any) -> bool:
    f = getattr(jm, "is_unloaded", None)
    return bool(f()) if f is not None else bool(getattr(jm, "_unloaded", False))


class CompiledKernel:
    """A CuTe compiled function that runs the NVSHMEM init hook before launching.

    Calls, ``.to(device)`` and attributes (``__ptx__``, ``__cubin__``,
    ``export_to_c`` ...) go to the wrapped ``cute.compile`` result.
    """

    def __init__(self, fn: Any, arch: str, linked: Optional[list] = None) -> None:
        self._fn = fn
        self.arch = arch
        self._ready: Any = None  # (jit_module, hook generation) once prepared
        linked = linked or []
        #: The NVSHMEM functions the kernels call out of line (hybrid linking).
        self.outlined = frozenset().union(*(names for names, _ in linked))
        #: The executable cubin CuTe loads when hybrid linking linked one (``None`` otherwise:
        #: then ``keep_cubin=True`` gives CuTe's own in ``__cubin__``).
        self.linked_cubin: Optional[bytes] = linked[-1][1] if linked else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)

    def _prepare(self) -> None:
        fn = self._fn
        with _lock:
            jm = getattr(fn, "jit_module", None)
            if jm is None or _is_unloaded(jm):
                fn.to()  # loads the CUDA libraries (no launch)
                jm = fn.jit_module
            hook = _init_hook
            if hook is not None:
                for handle in loaded_libraries(fn):
                    if handle in _initialized or handle in _without_nvshmem:
                        continue
                    # a library with no NVSHMEM code (a kernel that calls none) is left alone:
                    # NVSHMEM's init fails on it (status 7)
                    if library_uses_nvshmem(handle):
                        hook(handle)
                        _initialized.add(handle)
                    else:
                        _without_nvshmem.add(handle)
            self._ready = (jm, _hook_generation)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        ready = self._ready
        if (
            ready is None
            or ready[0] is not getattr(self._fn, "jit_module", None)
            or ready[1] != _hook_generation
            or _is_unloaded(ready[0])
        ):
            self._prepare()
        return self._fn(*args, **kwargs)

    def to(self, device: Any = None) -> Any:
        executor = self._fn.to(device)
        self._prepare()
        return executor

    @property
    def libraries(self) -> list[int]:
        return loaded_libraries(self._fn)

    def release(self) -> None:
        """Unload the CUDA libraries now (the finalize hook runs first)."""
        jm = getattr(self._fn, "jit_module", None)
        if jm is not None:
            jm.unload()
        # CuTe keeps a default executor bound to the unloaded libraries; drop
        # it so that a later call loads (and initializes) them again.
        if getattr(self._fn, "_default_executor", None) is not None:
            self._fn._default_executor = None
        self._ready = None


# ------------------------------------------------------------------ compile


def _with_arch(options: Optional[str], arch: Any) -> tuple[str, str]:
    """Options with ``--gpu-arch`` for ``arch`` (or the one they name) -> (options, arch)."""
    options = options or ""
    toks = shlex.split(options)
    if "--gpu-arch" in toks:
        given = _normalize_arch(toks[toks.index("--gpu-arch") + 1])
        if arch and _normalize_arch(arch) != given:
            raise ValueError(f"options say --gpu-arch {given} but arch={arch!r}")
        return options, given
    arch = resolve_arch(arch)
    return f"{options} --gpu-arch {arch}".strip(), arch


def compile(
    fn: Any,
    *args: Any,
    arch: Any = None,
    options: Optional[str] = None,
    keep_ptx: bool = False,
    keep_cubin: bool = False,
    **kwargs: Any,
) -> CompiledKernel:
    """``cute.compile(fn, *args, options=...)`` for an explicit GPU arch.

    ``arch``: ``"sm_90a"`` etc.; default ``--gpu-arch`` in ``options``, else
    ``$CUTE_DSL_ARCH``, else the current device, else :class:`ArchNotSetError`.  ``keep_ptx`` / ``keep_cubin`` keep the PTX text / cubin bytes on the
    result (``.__ptx__`` / ``.__cubin__``; with hybrid linking ``__cubin__`` is the linked
    cubin and ``__ptx__`` the kernel's own, which declares the outlined functions
    ``.extern .func``).  ``with nvshmem_dsl.cute.outline("none"):`` around it inlines every
    NVSHMEM function into this kernel.
    """
    import cutlass.cute as cute

    options, arch = _with_arch(options, arch)
    with contextlib.ExitStack() as stack:
        if keep_ptx or keep_cubin:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="nvshmem_dsl_cute_"))
            options += " --keep-ptx" * keep_ptx + " --keep-cubin" * keep_cubin
            options += f" --dump-dir {shlex.quote(tmp)}"
        linked: list = []
        token = _compile_arch.set(arch)
        sink = linked_binaries.set(linked)
        try:
            # the artifacts are read into memory before the temp dir goes away
            compiled = cute.compile(fn, *args, options=options, **kwargs)
        finally:
            linked_binaries.reset(sink)
            _compile_arch.reset(token)
    return CompiledKernel(compiled, arch, linked)


def compile_to_ptx(fn: Any, *args: Any, arch: Any = None, **kwargs: Any) -> str:
    """The PTX that :func:`compile` produces for ``fn(*args)`` (works without a GPU)."""
    return compile(fn, *args, arch=arch, keep_ptx=True, **kwargs).__ptx__
