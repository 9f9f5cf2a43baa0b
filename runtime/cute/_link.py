"""Hybrid linking for CuTe DSL kernels: NVSHMEM's large routines called in cached objects.

CuTe compiles a kernel in one step inside its own library (libNVVM, then ptxas, then a fatbin
embedded in the host module as ``llvm.mlir.global @kernels_binary``, which ``cuda_init`` loads
with ``cudaLibraryLoadData``); it has no device linker.  Hybrid linking
(:mod:`nvshmem_dsl.linker.outline`, as for Numba and Triton) is added around that step:

1. While a kernel is traced, each NVSHMEM call that :func:`nvshmem_dsl.linker.plan.split`
   says to outline is declared ``ffi(inline=False)`` (``func.func private @f {no_inline}``:
   ``.extern .func f`` in the PTX); the small ones stay ``inline=True``.  Both name a placeholder
   for the kernel's bitcode (:func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_placeholder`).
2. :func:`install` wraps CuTe's ``compiler_provider.compile`` (the step that runs the
   ``cute-to-nvvm`` pipeline; a module that declares no NVSHMEM function is left to it as it
   was).  Before the pipeline, the wrapper makes the kernel's bitcode: the
   NVSHMEM functions it inlines and what they call, *without* the outlined ones (so that libNVVM
   cannot inline them), with the device state kept (:func:`resolve_kernel_bitcode`,
   :func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_for`: from a closure of the piece store, so that a
   first kernel need not wait for the whole store), and starts building the outlined functions'
   objects at the register cap of the kernel's declared block size (``nvvm.reqntid``), while CuTe
   compiles.  NVSHMEM's out-of-line helpers (its ``noinline`` transport functions, most of a
   fine-grained kernel's code otherwise) are declarations in that bitcode too, their objects
   shared with Numba and Triton kernels (:func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_calls`
   says which; those its calls are predicted to need start building with the others).  When the
   module declares outlined NVSHMEM functions, or its bitcode helpers, the wrapper
   adds ``-c`` to the pipeline's ``ptx-options`` (CuTe's own ptxas then accepts the unresolved
   calls) and asks for the kernel's PTX (``dump-ptx-path``); after the pipeline
   :func:`link_module` links that PTX with the functions' objects (capped at what the kernel's
   block size leaves a thread) with nvJitLink (:func:`nvshmem_dsl.linker.pipeline.link_cubin`) and
   puts the executable cubin in place of the fatbin.  The
   PTX, not CuTe's relocatable cubin, goes to nvJitLink: CuTe's bundled ptxas may be newer than
   the nvJitLink installed (CUDA 13.0's rejects a cubin of CuTe's ``cu13`` build as "bad input"),
   and the objects come from the installed ptxas, so the installed toolkit compiles both.  What
   CuTe loads, caches and (``--keep-cubin``) dumps is the linked cubin; one linked with provisional
   objects (split, their whole form still being built: :func:`nvshmem_dsl.linker.outline.provisional`)
   is kept from CuTe's file cache (:func:`_hold_provisional_from_file_cache`).

A kernel whose NVSHMEM code calls nothing out of line compiles exactly as before (the smaller
bitcode aside).

Private CuTe surfaces used (nvidia-cutlass-dsl 4.8): ``CuTeDSL._get_dsl().compiler_provider``
and its ``compile(module, pipeline, ...)``, ``cutlass.base_dsl.compile_backend.dump_cache_to_path``,
the pipeline option spelling ``ptx-options='...'``, the ``@kernels_binary`` global,
``compile_options.full_cubin_path``.  If the hook cannot be
installed (CuTe changed), :func:`effective_mode` is ``none`` with one warning: every NVSHMEM
function is inlined, as before hybrid linking.  If CuTe's output is not what the link step
expects, the compile fails with :class:`~nvshmem_dsl.linker.link.NvshmemLinkError` naming the
installed nvidia-cutlass-dsl and the way out, ``NVSHMEM_DSL_OUTLINE=none``.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import math
import os
import re
import tempfile
import threading
import warnings
from typing import Optional

from ..linker.pipeline import (OUTLINE_ENV, NvshmemLinkError, default_features, extern_calls, link_cubin,
                               outline_mode, prefetch_objects, prepare_calls)
from ._compile import current_arch, linked_binaries

__all__ = ["effective_mode", "inlined_declarations", "install", "link_module", "outlined_declarations",
           "ptx_dump_pipeline", "relocatable_pipeline", "resolve_kernel_bitcode", "stats"]

#: Counters for tests and diagnostics: kernels linked by nvJitLink.
stats = {"linked": 0}

_lock = threading.Lock()
_installed: Optional[bool] = None
_HINT = f"{OUTLINE_ENV}=none (or `with nvshmem_dsl.cute.outline('none'):`) inlines everything instead"


def _cute_version() -> str:
    try:
        from importlib.metadata import version

        return version("nvidia-cutlass-dsl")
    except Exception:  # noqa: BLE001
        return "(version unknown)"


# --------------------------------------------------------------------------
# The hook


def install() -> bool:
    """Wrap CuTe's ``compiler_provider.compile`` (once).  False, with one warning, when that is
    not possible with the installed nvidia-cutlass-dsl or there is no nvJitLink."""
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        try:
            from cuda.bindings import nvjitlink  # noqa: F401
            from cutlass.cutlass_dsl import CuTeDSL

            dsl = CuTeDSL._get_dsl()
            provider = dsl.compiler_provider
            orig = provider.compile
            if not callable(orig):
                raise TypeError("compiler_provider.compile is not callable")
            if not getattr(orig, "_nvshmem_dsl_hybrid", False):
                provider.compile = _wrap(orig, dsl)
            _hold_provisional_from_file_cache()
            _installed = True
        except Exception as exc:  # noqa: BLE001 - any change in CuTe's internals
            _installed = False
            warnings.warn(
                f"nvshmem_dsl.cute: hybrid linking cannot hook into nvidia-cutlass-dsl "
                f"{_cute_version()} ({type(exc).__name__}: {exc}); NVSHMEM's collectives and "
                "barriers are inlined into CuTe kernels (as with NVSHMEM_DSL_OUTLINE=none), "
                "which is slow to compile", RuntimeWarning, stacklevel=3)
        return _installed


#: sha256 of the cubins :func:`link_module` linked with provisional objects
#: (:func:`nvshmem_dsl.linker.outline.provisional`).
_provisional_cubins: set = set()


def _hold_provisional_from_file_cache() -> None:
    """Keep CuTe's file cache from storing a module whose kernel was linked with provisional objects
    (split, their whole form still being built): it serves this process, and the next one compiles
    it again, with the whole objects once built.  Wraps ``cutlass.base_dsl.compile_backend``'s
    ``dump_cache_to_path``; where CuTe has no such function, such kernels stay cached as linked."""
    try:
        from cutlass.base_dsl import compile_backend
    except Exception:  # noqa: BLE001 - another CuTe: its cache keeps them
        return
    orig = getattr(compile_backend, "dump_cache_to_path", None)
    if orig is None or getattr(orig, "_nvshmem_dsl_hybrid", False):
        return

    @functools.wraps(orig)
    def dump_cache_to_path(dsl_name, jit_function, *args, **kwargs):
        if _provisional_cubins and _holds_provisional(getattr(jit_function, "ir_module", None)):
            return None
        return orig(dsl_name, jit_function, *args, **kwargs)

    dump_cache_to_path._nvshmem_dsl_hybrid = True
    compile_backend.dump_cache_to_path = dump_cache_to_path


def _holds_provisional(module) -> bool:
    """Whether ``module`` embeds a cubin linked with provisional objects (False where it cannot be
    read as such: CuTe then caches it, as it would)."""
    if module is None:
        return False
    try:
        return any(hashlib.sha256(data).digest() in _provisional_cubins for _, data in _binaries(module))
    except Exception:  # noqa: BLE001 - not a module of the shape this CuTe writes: leave the cache to it
        return False


def effective_mode() -> str:
    """:func:`nvshmem_dsl.linker.pipeline.outline_mode` for CuTe kernels: ``none`` when the link step
    cannot be installed (:func:`install`)."""
    how = outline_mode()
    if how != "none" and not install():
        return "none"
    return how


def _wrap(orig, dsl):
    @functools.wraps(orig)
    def compile(module, pipeline, *args, **kwargs):
        names = outlined_declarations(module) if "cute-to-nvvm" in pipeline else frozenset()
        if not names and not ("cute-to-nvvm" in pipeline and inlined_declarations(module)):
            return orig(module, pipeline, *args, **kwargs)  # no NVSHMEM here: CuTe's compile as it was
        pipeline, helpers, predicted = resolve_kernel_bitcode(module, pipeline)
        if not names and not helpers:
            return orig(module, pipeline, *args, **kwargs)
        pipeline, cap = relocatable_pipeline(pipeline)
        arch = _pipeline_arch(pipeline)
        _prefetch_objects(module, arch, names | predicted, cap)  # built while CuTe compiles the kernel
        names |= helpers
        with tempfile.TemporaryDirectory(prefix="nvshmem-dsl-cute-") as tmp:
            pipeline, prefix = ptx_dump_pipeline(pipeline, os.path.join(tmp, "kernel"))
            result = orig(module, pipeline, *args, **kwargs)
            ptx = _read_dumped_ptx(prefix)
        compiled = result if result is not None and hasattr(result, "operation") else module
        linked = link_module(compiled, arch, names, ptx, cap)
        _replace_kept_cubin(dsl, linked[-1][1])
        sink = linked_binaries.get()
        if sink is not None:
            sink.extend(linked)
        return result

    compile._nvshmem_dsl_hybrid = True
    return compile


def _gpu_modules(module):
    return [op for op in module.body.operations if op.operation.name == "gpu.module"]


def _declarations(module, outlined: bool) -> frozenset:
    names = set()
    for op in _gpu_modules(module):
        for f in op.regions[0].blocks[0].operations:
            if f.operation.name == "func.func" and ("no_inline" in f.attributes) == outlined:
                name = f.attributes["sym_name"].value
                if name.startswith("nvshmem"):
                    names.add(name)
    return frozenset(names)


def outlined_declarations(module) -> frozenset:
    """The NVSHMEM functions a traced module declares ``no_inline`` (those called out of line),
    read from its ``gpu.module`` before the pipeline runs."""
    return _declarations(module, outlined=True)


def inlined_declarations(module) -> frozenset:
    """The NVSHMEM functions a traced module declares to be inlined (from its bitcode)."""
    return _declarations(module, outlined=False)


def resolve_kernel_bitcode(module, pipeline: str) -> tuple[str, frozenset, frozenset]:
    """Make the bitcode of the NVSHMEM functions a traced module inlines
    (:func:`nvshmem_dsl.linker.nvvm.kernel_bitcode`) and put its path in place of the placeholder
    its calls named (:func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_placeholder`), in the module's
    ``link-libraries`` and in ``pipeline`` (which CuTe made of them); NVIDIA's compiled helpers are
    asked about the helpers it declares meanwhile (:func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_for`).
    Returns the pipeline, the NVSHMEM helpers that bitcode declares (called in their objects) and the
    names their calls are predicted to have (:func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_calls`).
    A module whose calls named no placeholder (mode ``none``) is left as it is."""
    from cutlass._mlir import ir

    from .. import _optable
    from .._libs import bitcode_path, is_nvshmem_bitcode
    from ..linker.nvvm import kernel_bitcode_for, kernel_bitcode_placeholder

    arch = _pipeline_arch(pipeline)
    placeholder = kernel_bitcode_placeholder(bitcode_path(arch))
    modules = [op for op in _gpu_modules(module) if "link-libraries" in op.attributes
               and placeholder in [x.value for x in op.attributes["link-libraries"]]]
    if not modules and placeholder not in pipeline:
        return pipeline, frozenset(), frozenset()
    # NVSHMEM's functions (the op table's); another ``nvshmem*`` declaration is not ours to define
    declared = inlined_declarations(module)
    names = declared & _optable.device_ops().keys()
    path, helpers, predicted = kernel_bitcode_for(names, arch, bitcode_path(arch))
    path = str(path)
    # NVIDIA's whole bitcode, where the program links it too (NVSHMEM4Py's way: cute.compile(...,
    # options="--link-libraries=" + find_device_bitcode_library())), adds nothing when the kernel
    # declares only the op table's functions: libNVVM would read all of it at every compile
    drop = is_nvshmem_bitcode if declared == names else (lambda _: False)
    for op in modules:
        paths = sorted({path if x.value == placeholder else x.value for x in op.attributes["link-libraries"]}
                       - {x.value for x in op.attributes["link-libraries"] if drop(x.value)})
        op.attributes["link-libraries"] = ir.ArrayAttr.get([ir.StringAttr.get(x) for x in paths])
    pipeline = _LINK_LIBRARIES.sub(lambda m: "link-libraries='{}'".format(
        ",".join(x for x in m.group(1).split(",") if x and not drop(x))), pipeline)
    return pipeline.replace(placeholder, path), helpers, predicted


_LINK_LIBRARIES = re.compile(r"link-libraries='([^']*)'")


_INTS = re.compile(r"\d+")


def _prefetch_objects(module, arch: str, names, max_registers: Optional[int]) -> None:
    """Start building the objects of the outlined ``names`` (:func:`nvshmem_dsl.linker.pipeline.prefetch_objects`)
    at the register cap :func:`link_module` will ask for: the kernels' declared block sizes
    (``nvvm.reqntid``/``nvvm.maxntid``, the PTX's ``.reqntid``/``.maxntid``) and ``max_registers``."""
    from .._libs import bitcode_path

    blocks = []
    for op in _gpu_modules(module):
        for f in op.regions[0].blocks[0].operations:
            if "gpu.kernel" not in f.attributes and "nvvm.kernel" not in f.attributes:
                continue
            dims = next((f.attributes[a] for a in ("nvvm.reqntid", "nvvm.maxntid") if a in f.attributes), None)
            # `array<i32: 64, 1, 1>`: the numbers after the element type
            blocks.append(math.prod(int(d) for d in _INTS.findall(str(dims).rpartition(":")[2]))
                          if dims is not None else None)
    prefetch_objects(names, arch, arch, default_features(arch), blocks, max_registers, bitcode_path(arch))


_PTX_OPTIONS = re.compile(r"ptx-options='([^']*)'")
_MAXRREG = re.compile(r"(?:^|\s)--?maxrregcount[= ]?(\d+)")


def relocatable_pipeline(pipeline: str) -> tuple[str, Optional[int]]:
    """``pipeline`` with ``-c`` in its ptxas options, and the ``-maxrregcount`` they give."""
    m = _PTX_OPTIONS.search(pipeline)
    if m:
        opts = m.group(1)
        cap = _MAXRREG.search(opts)
        if "-c" not in opts.split():
            pipeline = f"{pipeline[:m.start()]}ptx-options='-c {opts}'{pipeline[m.end():]}"
        return pipeline, int(cap.group(1)) if cap else None
    if "cute-to-nvvm{" not in pipeline:
        raise NvshmemLinkError(
            f"nvshmem_dsl.cute: cannot make CuTe's ptxas step relocatable: no cute-to-nvvm{{...}} "
            f"in the pipeline of nvidia-cutlass-dsl {_cute_version()}; {_HINT}")
    return pipeline.replace("cute-to-nvvm{", "cute-to-nvvm{ptx-options='-c' ", 1), None


_DUMP_PTX = re.compile(r"dump-ptx-path='([^']*)'")


def ptx_dump_pipeline(pipeline: str, prefix: str) -> tuple[str, str]:
    """``pipeline`` with CuTe's PTX written to a file (``dump-ptx-path``, a path prefix: CuTe
    writes ``<prefix>.<arch>.ptx``), and that prefix: the user's, when ``--keep-ptx`` asked for
    one already, else ``prefix``."""
    m = _DUMP_PTX.search(pipeline)
    if m:
        return pipeline, m.group(1)
    if "cute-to-nvvm{" not in pipeline:
        raise NvshmemLinkError(
            f"nvshmem_dsl.cute: cannot ask for the PTX: no cute-to-nvvm{{...}} in the pipeline of "
            f"nvidia-cutlass-dsl {_cute_version()}; {_HINT}")
    return pipeline.replace("cute-to-nvvm{", f"cute-to-nvvm{{dump-ptx-path='{prefix}' ", 1), prefix


def _read_dumped_ptx(prefix: str) -> str:
    """The PTX CuTe wrote for dump path ``prefix`` (the newest ``<prefix>.*ptx``)."""
    found = sorted(glob.glob(glob.escape(prefix) + ".*ptx") + glob.glob(glob.escape(prefix)),
                   key=lambda p: os.stat(p).st_mtime_ns)
    found = [p for p in found if os.path.isfile(p)]
    if not found:
        raise NvshmemLinkError(
            f"nvshmem_dsl.cute: nvidia-cutlass-dsl {_cute_version()} wrote no PTX at {prefix}.*; {_HINT}")
    with open(found[-1]) as f:
        return f.read()


def _pipeline_arch(pipeline: str) -> str:
    m = re.search(r"cubin-chip='?(sm_\w+)", pipeline)
    if m:
        return m.group(1)
    return current_arch()


def _replace_kept_cubin(dsl, cubin: bytes) -> None:
    """``--keep-cubin``: the dumped cubin (``__cubin__``) is the linked one."""
    try:
        path = dsl.compile_options.full_cubin_path
    except Exception:  # noqa: BLE001
        return
    if path:
        with open(path, "wb") as f:
            f.write(cubin)


# --------------------------------------------------------------------------
# The link


_FATBIN_MAGIC = b"\x50\xed\x55\xba"
_ELF_MAGIC = b"\x7fELF"


def _binaries(module):
    """``(op, bytes)`` of each global of ``module`` that holds a fatbin or a cubin."""
    from cutlass._mlir import ir

    for op in module.body.operations:
        if op.operation.name != "llvm.mlir.global" or "value" not in op.attributes:
            continue
        value = op.attributes["value"]
        if not isinstance(value, ir.StringAttr):
            if not ir.StringAttr.isinstance(value):
                continue
            value = ir.StringAttr(value)
        data = value.value_bytes
        if data[:4] in (_FATBIN_MAGIC, _ELF_MAGIC):
            yield op, data


def link_module(module, arch: str, declared, ptx: str, max_registers: Optional[int] = None) -> list:
    """Replace the binary CuTe embedded in ``module`` (compiled with ``ptxas -c``) by the executable
    cubin nvJitLink makes of the module's ``ptx`` and the objects of the outlined NVSHMEM functions
    and helpers it calls (of ``declared``; a helper also specialised on the modes the PTX passes it,
    :func:`nvshmem_dsl.linker.pipeline.prepare_calls`): :func:`nvshmem_dsl.linker.pipeline.link_cubin`,
    at most ``max_registers`` registers; returns ``[(names, cubin)]``."""
    from cutlass._mlir import ir

    from .._libs import bitcode_path

    bc_path = bitcode_path(arch)
    done = []
    binaries = list(_binaries(module))
    if len(binaries) > 1:
        raise NvshmemLinkError(
            f"nvshmem_dsl.cute: {len(binaries)} kernel binaries in one module of nvidia-cutlass-dsl "
            f"{_cute_version()}, one PTX; {_HINT}")
    # NVSHMEM's helpers, called with constant modes, called in objects specialised on them
    ptx = prepare_calls(ptx)
    for op, _ in binaries:
        names = extern_calls(ptx, of=declared)
        linked, provisional = link_cubin(ptx, arch, [f"-maxrregcount={max_registers}"] if max_registers else [],
                                         target=(arch, default_features(arch)), names=names,
                                         max_registers=max_registers, bc_path=bc_path, what="a CuTe kernel",
                                         hint=f"nvshmem_dsl.cute: {_HINT}")
        if provisional:
            _provisional_cubins.add(hashlib.sha256(linked).digest())
        op.attributes["value"] = ir.StringAttr.get(linked)
        op.attributes["global_type"] = ir.TypeAttr.get(ir.Type.parse(f"!llvm.array<{len(linked)} x i8>"))
        stats["linked"] += 1
        done.append((names, linked))
    if not done:
        raise NvshmemLinkError(
            f"nvshmem_dsl.cute: found no kernel binary in the module nvidia-cutlass-dsl "
            f"{_cute_version()} compiled; {_HINT}")
    return done
