"""NVSHMEM's per-module device state: ``nvshmemx_cumodule_init`` / ``nvshmemx_culibrary_init``.

Every loaded CUDA module or library that contains NVSHMEM device code has its
own copy of NVSHMEM's device state, which the host fills in once, after
:func:`nvshmem_dsl.init` and before the first launch.  These wrappers are
reference-counted per handle: a handle initialised twice is finalized once, when
its count drops to zero.  :func:`install_dsl_hooks` registers them with the
Numba and CuTe layers of nvshmem_dsl (which call them with ``CUlibrary``
handles as they load kernels) and the Triton layer (``CUmodule`` handles);
:func:`nvshmem_dsl.init` does so automatically.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any

from ..host import _cuda, _lib, _state
from ..errors import NvshmemArgumentError, NvshmemStateError, NvshmemStatusError

__all__ = [
    "module_init",
    "module_finalize",
    "library_init",
    "library_finalize",
    "refcount",
    "install_dsl_hooks",
    "uninstall_dsl_hooks",
    "installed_hooks",
    "on_finalize",
    "wire_if_running",
]

_lock = threading.Lock()
_refs: dict[tuple[str, int], int] = {}
_installed: dict[str, bool] = {}

_SYMBOLS = {
    "cumodule": ("nvshmemx_cumodule_init", "nvshmemx_cumodule_finalize"),
    "culibrary": ("nvshmemx_culibrary_init", "nvshmemx_culibrary_finalize"),
}


def _handle(handle: Any) -> int:
    """An int from a CUmodule/CUlibrary: int, cuda.bindings object, ctypes pointer, ``.handle``."""
    if isinstance(handle, bool):
        raise TypeError("a module handle is not a bool")
    if isinstance(handle, int):
        value = handle
    else:
        inner = getattr(handle, "handle", None)
        if inner is not None and not isinstance(handle, int):
            handle = inner
        value = getattr(handle, "value", handle)  # ctypes c_void_p
        try:
            value = int(value)
        except (TypeError, ValueError):
            raise TypeError(f"cannot use {type(handle).__name__} as a CUmodule/CUlibrary handle") from None
    if value == 0:
        raise ValueError("null module handle")
    return value


def _lacks_nvshmem(handle: int) -> bool:
    """True only when the driver says the library has no NVSHMEM device state."""
    try:
        return not _cuda.library_uses_nvshmem(handle)
    except Exception:  # no driver, foreign handle: keep NVSHMEM's own error
        return False


def _in_context():
    """NVSHMEM's device's context current for a call on a module (:func:`nvshmem_dsl.host._cuda.device_context`)."""
    device_id = _state.STATE.device_id
    return _cuda.device_context(device_id) if device_id >= 0 else contextlib.nullcontext()


def _init(kind: str, handle: Any) -> int:
    h = _handle(handle)
    _state.require(f"{kind}_init()")
    with _lock:
        count = _refs.get((kind, h), 0)
        if count == 0:
            try:
                with _in_context():
                    _lib.call(_SYMBOLS[kind][0], h, context=f"{kind} 0x{h:x}")
            except NvshmemStatusError:
                if kind == "culibrary" and _lacks_nvshmem(h):
                    from .store import DEVICE_STATE  # here: importing bitcode costs ~25 ms

                    raise NvshmemArgumentError(
                        f"library_init(): CUlibrary 0x{h:x} holds no NVSHMEM device state "
                        f"({DEVICE_STATE}): none of its kernels calls NVSHMEM, "
                        "so it needs no NVSHMEM init") from None
                raise
        _refs[(kind, h)] = count + 1
        return count + 1


def _finalize(kind: str, handle: Any) -> int:
    h = _handle(handle)
    with _lock:
        return _finalize_locked(kind, h)


def _finalize_locked(kind: str, h: int) -> int:
    count = _refs.get((kind, h), 0)
    if count == 0:
        raise NvshmemStateError(f"{kind}_finalize(): {kind} 0x{h:x} is not initialised")
    if count == 1:
        del _refs[(kind, h)]
        if _state.STATE.initialized:
            with _in_context():
                _lib.call(_SYMBOLS[kind][1], h, context=f"{kind} 0x{h:x}")
    else:
        _refs[(kind, h)] = count - 1
    return count - 1


def module_init(handle: Any) -> int:
    """``nvshmemx_cumodule_init`` for a ``CUmodule`` (once per handle); returns its new reference count."""
    return _init("cumodule", handle)


def module_finalize(handle: Any) -> int:
    """Drop one reference; ``nvshmemx_cumodule_finalize`` when none is left.  Returns the count left."""
    return _finalize("cumodule", handle)


def library_init(handle: Any) -> int:
    """``nvshmemx_culibrary_init`` for a ``CUlibrary`` (once per handle); returns its reference count."""
    return _init("culibrary", handle)


def library_finalize(handle: Any) -> int:
    """Drop one reference; ``nvshmemx_culibrary_finalize`` when none is left.  Returns the count left."""
    return _finalize("culibrary", handle)


def refcount(handle: Any, kind: str = "culibrary") -> int:
    """The current reference count of a handle."""
    return _refs.get((kind, _handle(handle)), 0)


def _unloading(kind: str, handle: Any) -> None:
    """The DSL unloads ``handle`` now: finalize it if it is initialised, every reference at once (its
    own and any a program added by library_init: NVSHMEM must not keep a library the driver frees;
    a later finalize of the handle finds none and is a no-op in :mod:`nvshmem_dsl.core`). Tolerates
    handles never initialised and a finalized runtime."""
    try:
        h = _handle(handle)
    except (TypeError, ValueError):
        return
    with _lock:
        if (kind, h) in _refs:
            _refs[kind, h] = 1
            _finalize_locked(kind, h)


def _dsl_library_finalize(handle: Any) -> None:
    """Finalize hook for the layers that load CUlibraries (Numba, CuTe): :func:`_unloading`."""
    _unloading("culibrary", handle)


def _dsl_module_finalize(handle: Any) -> None:
    """Finalize hook for the layers that load CUmodules (Triton): :func:`_unloading`."""
    _unloading("cumodule", handle)


#: The DSL layers: (name, module holding its hooks, init and finalize hook functions). Numba and
#: CuTe load their kernels as CUlibrary handles, Triton as CUmodule handles.
_LAYERS = (
    ("numba", "nvshmem_dsl.numba._linker", "library"),
    ("cute", "nvshmem_dsl.cute._compile", "library"),
    ("triton", "nvshmem_dsl.triton._compile", "module"),
)


def _layer_hooks(kind: str):
    if kind == "module":
        return module_init, _dsl_module_finalize
    return library_init, _dsl_library_finalize


def install_dsl_hooks(*, import_layers: bool = False) -> dict[str, bool]:
    """Register :func:`library_init` / finalize (:func:`module_init` for Triton, whose kernels
    are CUmodules) with the DSL layers that are loaded.

    By default only layers already imported are wired (importing Numba, the CuTe DSL or
    Triton just for this would make ``init()`` slow); pass ``import_layers=True``
    to import them.  Missing layers or hook functions are skipped.  Returns
    {layer: wired}.
    """
    result = {}
    for layer, module_name, kind in _LAYERS:
        init_fn, finalize_fn = _layer_hooks(kind)
        module = sys.modules.get(module_name)
        if module is None and import_layers:
            try:
                import importlib

                module = importlib.import_module(module_name)
            except Exception:
                module = None
        wired = False
        hooks = getattr(module, "hooks", None)  # a linker.hooks.ModuleHooks (Numba, Triton)
        if hooks is not None:
            hooks.add_init(init_fn)
            hooks.add_finalize(finalize_fn)
            wired = True
        elif module is not None:  # CuTe: one hook each, set
            set_init = getattr(module, "set_module_init_hook", None)
            set_fin = getattr(module, "set_module_finalize_hook", None)
            if set_init is not None:
                set_init(init_fn)
                wired = True
            if set_fin is not None:
                set_fin(finalize_fn)
        _installed[layer] = wired
        result[layer] = wired
    return result


def installed_hooks() -> dict[str, bool]:
    return dict(_installed)


def wire_if_running() -> None:
    """Called by each DSL package when it is imported: a layer imported after init()
    is wired to the running session at once (init() wires the ones loaded before)."""
    if _state.STATE.initialized:
        install_dsl_hooks()


def uninstall_dsl_hooks() -> None:
    """Take our hooks out of the DSL layers again (done by finalize: modules loaded while
    the runtime is down must not call into it)."""
    for _, module_name, kind in _LAYERS:
        init_fn, finalize_fn = _layer_hooks(kind)
        module = sys.modules.get(module_name)
        if module is None:
            continue
        hooks = getattr(module, "hooks", None)
        if hooks is not None:
            hooks.remove_init(init_fn)
            hooks.remove_finalize(finalize_fn)
            continue
        if getattr(module, "_init_hook", None) is init_fn and hasattr(module, "set_module_init_hook"):
            module.set_module_init_hook(None)
        if getattr(module, "_finalize_hook", None) is finalize_fn and hasattr(module, "set_module_finalize_hook"):
            module.set_module_finalize_hook(None)
    for layer in list(_installed):
        _installed[layer] = False


def on_finalize() -> None:
    """At runtime finalize: forget every handle (NVSHMEM's finalize releases their state)
    and unhook the DSL layers."""
    with _lock:
        _refs.clear()
    try:
        uninstall_dsl_hooks()
    except Exception:  # a broken DSL layer must not stop finalize
        pass
