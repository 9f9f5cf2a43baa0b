"""Triton kernels that call NVSHMEM, launched from code compiled by ``torch.compile``.

PyTorch's Inductor compiles a user-defined Triton kernel on its own terms, and two of them miss
NVSHMEM calls (measured with torch 2.11 / Triton 3.6, ``tests/gpu/records/2026-11-25/
h100-torch-compile-triton.txt``):

* it decides which tensor arguments a kernel writes by reading the kernel's TTIR for Triton's own
  stores and atomics (``torch._higher_order_ops.triton_kernel_wrap.identify_mutated_tensors``). An
  NVSHMEM call is an extern call there, so a kernel whose only writes are NVSHMEM calls writes
  nothing as Inductor sees it, and Inductor dropped the launch: a ``put_block`` under
  ``torch.compile`` moved no data, with no error;
* it copies the kernel's source into a module of its own, with the Triton functions and
  constants it uses, but not other modules: ``nv.put_block`` there ended in
  ``NameError: nv is not defined``.

So, while Inductor's analysis runs the kernel through Triton's front end (:func:`analysing`),
every pointer an NVSHMEM call takes, but those of the pure queries, is also stored to in the TTIR
it reads (:func:`declare_writes`): Inductor then treats those tensors as written, keeps the launch
and orders it with the graph's other uses of them. That TTIR is only read, never compiled: the
kernel itself is compiled without these stores. And the source Inductor copies gets the imports of
the ``nvshmem_dsl`` modules and functions the kernel and its helpers name
(:func:`source_imports`, added by wrapping Inductor's
``user_defined_triton_kernel_transitive_closure_source_code``, :func:`install`); importing
``nvshmem_dsl.triton`` in the process that compiles the copy installs the compile hooks there.

Inductor works on the tensors it is given only where it can write them in place: where it gives a
kernel a copy instead, the copy is not symmetric memory, and an NVSHMEM call on it is wrong. See
docs/troubleshooting.rst, "Triton kernels under torch.compile".
"""

from __future__ import annotations

import dis
import sys
import threading
import types
import warnings

__all__ = ["ANALYSIS_MODULE", "WRAPPER_MODULE", "analysing", "declare_writes", "install", "source_imports"]

#: Inductor's module whose ``generate_ttir`` runs a kernel through Triton's front end for its analysis.
ANALYSIS_MODULE = "torch._higher_order_ops.triton_kernel_wrap"
#: Inductor's module that copies a user-defined kernel's source into its generated code.
WRAPPER_MODULE = "torch._inductor.codegen.wrapper"
_CLOSURE = "user_defined_triton_kernel_transitive_closure_source_code"
_PACKAGE = "nvshmem_dsl"

_lock = threading.Lock()


def analysing() -> bool:
    """Whether the Triton front end is running for Inductor's analysis of which tensors a kernel
    writes (``generate_ttir`` of :data:`ANALYSIS_MODULE` is a caller); then installs
    :func:`install` as well, since Inductor will copy the kernel's source next, and warns about
    a kernel autotuned with :func:`nvshmem_dsl.triton.do_bench` (:func:`_warn_team_autotune`)."""
    if ANALYSIS_MODULE not in sys.modules:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "generate_ttir" and frame.f_globals.get("__name__") == ANALYSIS_MODULE:
            install()
            _warn_team_autotune(frame.f_back)
            return True
        frame = frame.f_back
    return False


_warned: set = set()


def _warn_team_autotune(frame) -> None:
    """Warn (once a kernel) where the kernel Inductor analyses (the ``kernel`` of a caller of
    ``generate_ttir``: ``triton.autotune``'s Autotuner) tunes with :func:`nvshmem_dsl.triton.do_bench`:
    Inductor tunes user kernels with its own timing, which launches each config as often as fits
    its time budget on each PE, so a kernel that synchronises PEs may hang there."""
    while frame is not None and frame.f_globals.get("__name__") == ANALYSIS_MODULE:
        kernel = frame.f_locals.get("kernel")
        bench = getattr(kernel, "_do_bench", None)
        if bench is not None and _ours(bench) and hasattr(bench, "team"):
            name = getattr(getattr(kernel, "fn", None), "__name__", repr(kernel))
            if name not in _warned:
                _warned.add(name)
                warnings.warn(
                    f"nvshmem_dsl.triton: torch.compile autotunes the kernel {name} with Inductor's own "
                    "timing, not its do_bench=nv.do_bench(): each PE launches each config as often as fits "
                    "its time budget, so a kernel that synchronises PEs (collectives, barriers, waits) may "
                    "hang; launch it from a function decorated with torch.compiler.disable",
                    RuntimeWarning, stacklevel=2)
            return
        frame = frame.f_back


def declare_writes(pointers, sem) -> None:
    """Store to each of ``pointers`` (Triton pointers) what it holds: in the TTIR of Inductor's
    analysis only (:func:`analysing`), so that it counts them as written."""
    from triton.language import core

    for ptr in pointers:
        core.store(ptr, core.load(ptr, _semantic=sem), _semantic=sem)


def install() -> bool:
    """Wrap Inductor's copying of a user-defined kernel's source (where Inductor is loaded) so that
    the copy imports what :func:`source_imports` finds; True when the wrap is in place."""
    wrapper = sys.modules.get(WRAPPER_MODULE)
    if wrapper is None:
        try:
            import importlib

            wrapper = importlib.import_module(WRAPPER_MODULE)
        except Exception:  # noqa: BLE001 - another torch: nothing to wrap
            return False
    with _lock:
        original = getattr(wrapper, _CLOSURE, None)
        if original is None:
            return False
        if getattr(original, "_nvshmem_dsl", False):
            return True

        def closure_source(kernel):
            src = original(kernel)
            lines = source_imports(kernel)
            return src + "".join(f"\n{line}" for line in lines) + ("\n" if lines else "")

        closure_source._nvshmem_dsl = True
        closure_source.__wrapped__ = original
        setattr(wrapper, _CLOSURE, closure_source)
    return True


def _ours(obj) -> bool:
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    return isinstance(name, str) and (name == _PACKAGE or name.startswith(_PACKAGE + "."))


def source_imports(kernel) -> list[str]:
    """The import lines the source Inductor copies of ``kernel`` (a ``triton.jit`` function) needs
    for the ``nvshmem_dsl`` names it and the Triton functions it calls use as globals (``import
    nvshmem_dsl.triton as nv``, ``from nvshmem_dsl.triton import put_block as put_block``), led by
    ``import nvshmem_dsl.triton`` (the compile hooks); none when it uses none."""
    from triton.runtime.jit import JITFunction

    lines, seen, todo = [], set(), [kernel]
    while todo:
        fn = getattr(todo.pop(), "fn", None)
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        loaded = {i.argval for i in dis.Bytecode(fn) if i.opname == "LOAD_GLOBAL"}  # not attributes
        for name in fn.__code__.co_names:  # Inductor copies the Triton functions of these
            if name not in fn.__globals__:
                continue
            obj = fn.__globals__[name]
            if isinstance(obj, JITFunction):
                todo.append(obj)
            elif name not in loaded:
                continue
            elif isinstance(obj, types.ModuleType) and _ours(obj):
                lines.append(f"import {obj.__name__} as {name}")
            elif callable(obj) and _ours(obj):
                owner = sys.modules.get(obj.__module__)
                attr = getattr(obj, "__name__", None)
                if owner is not None and attr and getattr(owner, attr, None) is obj:
                    lines.append(f"from {obj.__module__} import {attr} as {name}")
    lines = list(dict.fromkeys(lines))
    return [f"import {_PACKAGE}.triton"] + lines if lines else []
