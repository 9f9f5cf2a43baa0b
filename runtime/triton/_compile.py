"""NVSHMEM device code in Triton kernels: linked, inlined, and initialised at load.

The route
=========

Triton lowers a kernel to LLVM IR with its own LLVM (stage ``llir``), then to PTX (``ptx``) and
a cubin (``cubin``, ptxas).  Triton's LLVM cannot be given NVSHMEM's bitcode (written by clang
22; Triton 3.6's LLVM may not read it, and linking the whole 54 MB library into every kernel is
what hand-written bindings do).  So NVSHMEM never reaches Triton's LLVM:

1. In the kernel, :mod:`nvshmem_dsl.triton._calls` calls an extern ``__nvshmem_dsl_tt_<C
   symbol>`` through ``core.extern_elementwise`` (no library: ``lib_path`` empty), with
   addresses as int64 and every other argument of the C parameter's type.  Triton's ``llir``
   stage leaves it a declaration.
2. :func:`install` hooks Triton's pipeline (``knobs.runtime.add_stages_inspection_hook``, in
   Triton 3.6 and 3.9).  For a kernel whose LLVM IR declares such externs, the ``ptx`` stage is
   ours (:func:`compile_ptx`): the IR is parsed with llvmlite (LLVM 22), each extern is defined
   as a small ``alwaysinline`` function around the C function (:func:`shim_module`: the address
   back to a pointer, half/bfloat16 by value; who calls, see below), the NVSHMEM functions they
   call are linked from the cached piece store (:mod:`nvshmem_dsl.linker.store`, the one the Numba
   path builds), everything from NVSHMEM is internalized but the device-state globals, NVSHMEM's
   API is inlined, and the module optimised once more at O3 (with the same non-trivial loop
   unswitching as Numba kernels).  LLVM's NVPTX backend then emits the
   PTX, for the kernel's SM and Triton's PTX ISA, with NVSHMEM's (LLVM's default) data layout,
   or with Triton's 32-bit shared pointers where its inline assembly needs them
   (:func:`_needs_short_pointers`); Triton's own post-processing of PTX is repeated (kernel name
   into the metadata, ``.version``, ``.target``).  Kernels without NVSHMEM externs take Triton's
   stages unchanged.
3. NVSHMEM's large routines (collectives, barriers: :func:`nvshmem_dsl.linker.plan.split`) stay
   calls into relocatable objects compiled once (:mod:`nvshmem_dsl.linker.outline`, the Numba path's
   cache); when the PTX calls one, the ``cubin`` stage is ours too: nvJitLink links the PTX with
   those objects (:func:`link_cubin`).  Without nvJitLink they are inlined instead.
4. When Triton loads a kernel's cubin (``knobs.runtime.kernel_load_end_hook``), a module that
   holds NVSHMEM's device state gets ``nvshmemx_cumodule_init`` (through the hooks
   :func:`nvshmem_dsl.linker.module_init.install_dsl_hooks` registers, at :func:`nvshmem_dsl.init`)
   before its first launch; ``kernel_unload_hook`` (Triton 3.9) finalizes it.  This covers
   ``triton.jit`` launches, autotuning and kernels from Triton's cache alike.

Who calls: see :mod:`nvshmem_dsl.triton._shims` (thread-, warp- and warpgroup-scope calls by
leaders with a CTA barrier after; a program's NVSHMEM calls must be reached by all its threads together).

Triton's cache: the compile key of each kernel includes :func:`identity` (this package's
linker sources, the op table, llvmlite, the NVSHMEM bitcode files and the environment variables
that change the code): with Triton 3.9 through the inspection hook's key (``(key, hash)`` when
the hook is called without arguments); Triton 3.6 has no such key, so there the NVIDIA backend's
``hash()`` is extended with it.  Either way every kernel's key, NVSHMEM or not, differs from
what it is without nvshmem_dsl.triton imported (a kernel compiled before is compiled once more).
A kernel linked with split objects whose whole form was still being built
(:func:`nvshmem_dsl.linker.outline.provisional`) serves the process that compiled it and leaves
Triton's cache at its exit (:func:`_forget_provisional`): the next process compiles it again.

Limits: FP contraction follows LLVM's defaults in NVSHMEM kernels (Triton's
``enable_fp_fusion`` is not passed to llvmlite's target machine); kernels with ``num_ctas > 1``
(a cluster per program) are refused; the broadcast slot is 1 KB of static shared memory beside
Triton's dynamic shared memory (:mod:`nvshmem_dsl.triton._shared`: Triton's swizzled tiles need
their dynamic shared memory 1024-byte aligned, and more than 48 KB of shared memory in all needs
an opt-in).

Public: :func:`install`, :func:`uninstall`, :func:`compile_ptx`, :func:`shim_module`,
:func:`link_cubin`, :func:`identity`, :func:`nvshmem_externs`, the module hooks
(:func:`add_module_init_hook` ...), :class:`NvshmemLinkError`; counters :data:`stats`.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import re
import threading
from pathlib import Path

from ..linker.hooks import ModuleHooks
from ..linker.pipeline import CODE_ENV, NvshmemLinkError
from ._calls import SHIM_PREFIX
from ._shared import align_dynamic_shared, opt_in_shared, static_shared_bytes
from ._shims import DECLARATION, TRIPLE, check_externs, nvshmem_externs, shim_module

__all__ = [
    "NvshmemLinkError",
    "add_module_finalize_hook",
    "add_module_init_hook",
    "compile_ptx",
    "hooks",
    "identity",
    "install",
    "link_cubin",
    "nvshmem_externs",
    "remove_module_finalize_hook",
    "remove_module_init_hook",
    "set_module_init_hook",
    "shim_module",
    "stats",
    "uninstall",
]

#: Bump when the shims or the way kernels are linked change (part of :func:`identity`).
SHIM_VERSION = 4

_DATA_LAYOUT = re.compile(r'^target datalayout = "([^"]*)"', re.M)

#: Counters for tests and diagnostics.
stats = {"kernels": 0, "cubins_linked": 0, "modules_initialised": 0}


# --------------------------------------------------------------------------
# Module hooks (run on CUmodule handles: Triton loads modules)

hooks = ModuleHooks("CUmodule")
add_module_init_hook = hooks.add_init
remove_module_init_hook = hooks.remove_init
set_module_init_hook = hooks.set_init
add_module_finalize_hook = hooks.add_finalize
remove_module_finalize_hook = hooks.remove_finalize


_nvshmem_modules: set = set()


def _uses_nvshmem(module, metadata_group) -> bool:
    """Whether the loaded module holds NVSHMEM's device state: asked of the driver, else read
    from the kernel's PTX in Triton's cache."""
    from ..host import _cuda

    try:
        return _cuda.module_uses_nvshmem(int(module))
    except Exception:  # noqa: BLE001 - no driver binding: the PTX says it too
        from ..linker.pipeline import DEVICE_STATE

        for name, path in (metadata_group or {}).items():
            if str(name).endswith(".ptx"):
                try:
                    return DEVICE_STATE in Path(path).read_text(errors="replace")
                except OSError:
                    return False
        return False


def _on_load(module, function, name, metadata_group, hash) -> None:
    """``kernel_load_end_hook``: NVSHMEM init of a freshly loaded module that needs it."""
    if module is None or not _uses_nvshmem(module, metadata_group):
        return
    handle = int(module)
    _nvshmem_modules.add(handle)
    hooks.run_init(handle, name)
    stats["modules_initialised"] += 1


def _on_unload(module, function, name, metadata_group, hash) -> None:
    if module is None:
        return
    handle = int(module)
    if handle not in _nvshmem_modules:
        return
    _nvshmem_modules.discard(handle)
    hooks.run_finalize(handle)


# --------------------------------------------------------------------------
# Linking and PTX


def _llvm():
    import llvmlite.binding as llvm

    return llvm


def _triton_target(options, capability: int) -> tuple[str, str, int]:
    """(cpu, LLVM features, PTX ISA x10) Triton uses for ``capability``."""
    from triton.backends.nvidia import compiler as nvc

    cap_llvm = 100 if capability == 107 else capability
    cpu = nvc.sm_arch_from_capability(cap_llvm)
    ptx = nvc.get_ptx_version_from_options(options, capability)
    try:
        features = nvc.get_features(options, cap_llvm)
    except TypeError:  # older signature
        features = f"+ptx{ptx}"  # (lowered to what llvmlite's LLVM writes where the machine is made)
    return cpu, features, ptx


#: Inline assembly that takes a shared- or local-memory pointer as an operand.
_ASM_SHORT_POINTER = re.compile(r"\basm\b[^\n]*\(.*\bptr addrspace\([35]\)")


def _needs_short_pointers(llir: str) -> bool:
    """Whether Triton's IR must keep 32-bit shared/local pointers (``nvptx-short-ptr``): when
    inline assembly takes such a pointer as a 32-bit register operand.  Otherwise the kernel is
    linked with LLVM's default NVPTX layout (64-bit pointers), NVSHMEM's own: Triton's IR reads
    the same under it (a shared address fits either), and LLVM 22's NVPTX backend fails on
    NVSHMEM's by-value half/bfloat16 parameters with 32-bit local pointers."""
    if "p3:32" not in (_DATA_LAYOUT.search(llir) or [None, ""])[1]:
        return False
    return any(_ASM_SHORT_POINTER.search(line) for line in llir.splitlines() if " asm " in line)


def _sm(capability: int) -> int:
    """The SM whose NVSHMEM bitcode a kernel for ``capability`` links."""
    return 100 if capability == 107 else capability


def link(llir: str, capability: int, cpu: str, features: str, num_warps: int | None = None,
         outline_objects: bool = True, max_registers: int | None = None, prefetch: bool = False):
    """Triton's LLVM IR ``llir`` with NVSHMEM linked in and inlined: ``(module, target machine,
    outlined)``, the llvmlite module ready for the NVPTX backend and the NVSHMEM functions it
    calls out of line (whose objects the cubin needs; with ``prefetch`` started meanwhile, at the
    register cap of ``num_warps`` and ``max_registers``, Triton's ``maxnreg``: the PTX's ``.maxntid``
    and ``.maxnreg``, which :func:`link_cubin` reads)."""
    from ..linker.pipeline import link_nvshmem, mark_declarations, target_machine

    llvm = _llvm()
    externs = nvshmem_externs(llir)
    check_externs(externs, num_warps)
    tm = target_machine(cpu, features, 3, short_pointers=_needs_short_pointers(llir))

    main = llvm.parse_assembly(llir)
    main.triple = TRIPLE
    main.data_layout = str(tm.target_data)
    keep = {v.name for v in (*main.functions, *main.global_variables)
            if not v.is_declaration and v.linkage not in (llvm.Linkage.internal, llvm.Linkage.private)}
    keep -= {SHIM_PREFIX + s for s in externs}

    shims = llvm.parse_assembly(mark_declarations(shim_module(externs, num_warps)))
    shims.data_layout = main.data_layout
    main.link_in(shims)
    outlined = link_nvshmem(main, frozenset(externs), _sm(capability), tm, cpu, features, keep,
                            outline_objects=outline_objects, prefetch=prefetch,
                            blocks=[num_warps * 32 if num_warps else None], max_registers=max_registers)
    return main, tm, outlined


def _postprocess(ptx: str, metadata: dict, ptx_version: int | None, capability: int) -> str:
    """What Triton's ``make_ptx`` does to the PTX it emits; and Triton's dynamic shared memory
    aligned and opted in beside the static (:mod:`nvshmem_dsl.triton._shared`)."""
    from triton import knobs

    names = re.findall(r"\.visible \.entry ([a-zA-Z_][a-zA-Z0-9_]*)", ptx)
    if len(names) != 1:
        raise NvshmemLinkError(f"expected one kernel in the PTX, found {names}")
    metadata["name"] = names[0]
    ptx = align_dynamic_shared(ptx)
    static = static_shared_bytes(ptx)
    if isinstance(metadata.get("shared"), int):
        metadata["shared"] = opt_in_shared(metadata["shared"], static)
    if ptx_version is not None:
        ptx = re.sub(r"\.version \d+\.\d+", f".version {ptx_version // 10}.{ptx_version % 10}", ptx,
                     flags=re.M)
    ptx = re.sub(r"\.target sm_\d+", f".target sm_{capability}", ptx, flags=re.M)
    if not getattr(knobs.compilation, "dump_ir_extract_di_local_variables", False):
        ptx = re.sub(r",\s*debug|debug,\s*", "", ptx)
    if getattr(knobs.nvidia, "dump_nvptx", False):
        print("// -----// NVPTX Dump (nvshmem_dsl) //----- //")
        print(ptx)
    return ptx


def compile_ptx(llir: str, metadata: dict, options, capability: int, prefetch: bool = False) -> str:
    """The ``ptx`` stage for a kernel whose LLVM IR calls NVSHMEM (see the module docstring);
    ``prefetch``: our cubin stage follows, so the objects of what it calls out of line start
    building meanwhile."""
    from ..linker.pipeline import objects_ptx_isa, prepare_calls

    if getattr(options, "num_ctas", 1) > 1:
        raise NvshmemLinkError(
            f"kernel {metadata.get('name') or ''}: NVSHMEM calls in a kernel with num_ctas="
            f"{options.num_ctas} (a cluster per program) are not supported; use num_ctas=1")
    cpu, features, ptx_version = _triton_target(options, capability)
    link_ptx = objects_ptx_isa()  # the highest PTX ISA nvJitLink reads, None: everything inlined
    objects = link_ptx is not None
    if objects:
        # the PTX may be linked with objects by nvJitLink: a PTX ISA both it and the objects'
        # ptxas read
        ptx_version = min(ptx_version, link_ptx)
        features = f"+ptx{ptx_version}"
    module, tm, outlined = link(llir, capability, cpu, features, getattr(options, "num_warps", None), objects,
                                getattr(options, "maxnreg", None), prefetch)
    # the calls' convention after Triton's .version: a kernel that calls objects may need PTX 9.0
    # (nvJitLink links it), one that calls none keeps Triton's (Triton's ptxas compiles it)
    ptx = prepare_calls(_postprocess(tm.emit_assembly(module), metadata, ptx_version, capability))
    stats["kernels"] += 1
    return ptx


def link_cubin(ptx: str, capability: int, options=None, metadata=None) -> bytes:
    """A cubin of ``ptx`` linked by nvJitLink with the objects of the NVSHMEM functions it calls
    out of line (:func:`nvshmem_dsl.linker.pipeline.link_cubin`, the objects for the PTX's target).
    ``metadata``: the compile's (Triton's stages pass it), whose ``hash`` names the kernel in
    Triton's cache, for :func:`_forget_provisional`."""
    from triton import knobs

    from ..linker.pipeline import link_cubin as nvjitlink_cubin

    opts = ["-O3"]
    if not getattr(knobs.compilation, "disable_line_info", False):
        opts.append("-lineinfo")
    if options is not None and not getattr(options, "enable_fp_fusion", True):
        opts.append("-Xptxas=--fmad=false")
    # Triton's ptx_options go to its ptxas: to the one inside nvJitLink here (maxnreg is a .maxnreg
    # in the PTX, which outline.register_cap reads for the objects)
    opts += [f"-Xptxas={o}" for o in (getattr(options, "ptx_options", None) or "").split()]
    cubin, provisional = nvjitlink_cubin(ptx, _sm(capability), opts, what="a Triton kernel")
    stats["cubins_linked"] += 1
    if metadata is not None and metadata.get("hash") and provisional:
        _keep_from_cache(metadata["hash"])
    return cubin


_provisional_hashes: set = set()  # Triton cache hashes of kernels linked with provisional objects


def _keep_from_cache(hsh: str) -> None:
    import atexit

    with _lock:
        if not _provisional_hashes:
            atexit.register(_forget_provisional)
        _provisional_hashes.add(hsh)


def _forget_provisional() -> None:
    """Remove from Triton's cache the kernels this process linked with provisional objects (their
    cache groups: Triton then compiles them again, with the whole objects once built).  The group
    files are removed, not the files they name: another process that has read a group still finds
    those.  A cache other than Triton's files is left as it is."""
    from triton.runtime.cache import get_cache_manager

    with _lock:
        hashes = sorted(_provisional_hashes)
        _provisional_hashes.clear()
    for hsh in hashes:
        try:
            folder = getattr(get_cache_manager(hsh), "cache_dir", None)
            for group in Path(folder).glob("__grp__*") if folder else ():
                group.unlink(missing_ok=True)
        except Exception:  # noqa: BLE001 - at exit: the kernel stays cached, split
            pass


# --------------------------------------------------------------------------
# Identity (Triton's cache key)

#: The sources whose code decides what an NVSHMEM kernel becomes (relative to the package), and
#: the generated op table.
_SOURCES = ("triton/_compile.py", "triton/_shims.py", "triton/_calls.py", "triton/_shared.py", "linker/pipeline.py", "linker/plan.py",
            "linker/link.py", "linker/store.py", "linker/pieces.py", "linker/rewrites.py", "linker/calls.py", "linker/outline.py",
            "linker/loop_split.py", "linker/_llvm.py", "linker/object_llvm.py", "linker/abi.py")


@functools.lru_cache(maxsize=None)
def _static_identity() -> str:
    """Read from files, importing nothing (a warm Triton cache must stay fast: no Numba)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(str(SHIM_VERSION).encode())
    for rel in _SOURCES:
        try:
            h.update((root / rel).read_bytes())
        except OSError:  # a module that is not there changes nothing
            h.update(rel.encode())
    try:
        from .. import _generated

        h.update((Path(_generated.__file__).resolve().parent / "ops.json").read_bytes())
    except OSError:
        pass
    try:
        from importlib.metadata import version

        h.update(version("llvmlite").encode())
    except Exception:  # noqa: BLE001
        pass
    try:
        from .._libs import installation

        for path in installation().bitcode_files:
            st = Path(path).stat()
            h.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode())
    except Exception:  # noqa: BLE001 - no NVSHMEM: nothing can be compiled either
        h.update(b"no-nvshmem")
    return h.hexdigest()[:24]


@functools.lru_cache(maxsize=16)
def _identity(env: tuple) -> str:
    return hashlib.sha256(json.dumps([_static_identity(), env]).encode()).hexdigest()[:24]


def identity() -> str:
    """What the code of an NVSHMEM kernel depends on besides Triton's own key: this package's
    linker sources and generated op table, llvmlite, the NVSHMEM bitcode files and the
    environment variables that change the linked code."""
    return _identity(tuple(os.environ.get(v, "") for v in CODE_ENV))


# --------------------------------------------------------------------------
# Installing the hooks

_lock = threading.Lock()
_previous_hook = None
_installed = False
_patched_hash = None


def _wrap_stages(backend, stages, options, language, capability) -> None:
    if "ptx" not in stages or "llir" not in stages:
        return
    triton_ptx = stages["ptx"]
    triton_cubin = stages.get("cubin")
    cap = capability if capability is not None else getattr(getattr(backend, "target", None), "arch", 90)

    ours = None  # our cubin stage, when Triton has one
    if triton_cubin is not None:
        from ..linker.pipeline import extern_calls

        def cubin_stage(src, metadata):
            if isinstance(src, str) and extern_calls(src):
                return link_cubin(src, cap, options, metadata)
            return triton_cubin(src, metadata)

        stages["cubin"] = ours = cubin_stage

    _without_nvshmem_bitcode(stages, options)

    def ptx_stage(src, metadata):
        if isinstance(src, str) and SHIM_PREFIX in src and DECLARATION.search(src):
            # the objects are wanted when our cubin stage is to link them (not when PTX is all)
            return compile_ptx(src, metadata, options, cap,
                               prefetch=ours is not None and stages.get("cubin") is ours)
        return triton_ptx(src, metadata)

    stages["ptx"] = ptx_stage


def _without_nvshmem_bitcode(stages, options) -> None:
    """A program that gives NVSHMEM's bitcode in ``extern_libs`` itself (as hand-written externs
    need): Triton's ``llir`` stage would link all of it into a kernel that calls nvshmem_dsl.triton,
    whose NVSHMEM code our ``ptx`` stage links (a duplicate definition, once LLVM's error
    "symbol multiply defined"). Such a kernel runs Triton's ``llir`` stage (and whatever wraps it)
    with the other libraries only; a kernel that does not call nvshmem_dsl.triton keeps them all."""
    from .._libs import is_nvshmem_bitcode

    libs = getattr(options, "extern_libs", None)
    kept = tuple((name, path) for name, path in libs or () if not is_nvshmem_bitcode(path))
    if libs is None or len(kept) == len(libs):
        return
    triton_llir = stages["llir"]

    def llir_stage(src, metadata):
        if SHIM_PREFIX not in str(src):  # the kernel does not call nvshmem_dsl.triton
            return triton_llir(src, metadata)
        # the stage reads the options it was made with: theirs for the call (frozen: as Triton
        # itself sets extern_libs in CUDAOptions.__post_init__)
        object.__setattr__(options, "extern_libs", kept)
        try:
            return triton_llir(src, metadata)
        finally:
            object.__setattr__(options, "extern_libs", libs)

    stages["llir"] = llir_stage


def _stages_hook(*args, **kwargs):
    """``knobs.runtime.add_stages_inspection_hook``: with no arguments, (key, hash) for Triton's
    cache; with (backend, stages, options, language, capability), our stages for NVIDIA."""
    prev = _previous_hook
    if not args and not kwargs:
        ours = identity()
        key, hsh = f"-nvshmem_dsl-{ours}", ours
        if prev is not None:
            pkey, phash = prev()
            key, hsh = pkey + key, f"{phash}-{hsh}"
        return key, hsh
    if prev is not None:
        prev(*args, **kwargs)
    backend = args[0] if args else kwargs.get("backend")
    stages = args[1] if len(args) > 1 else kwargs["stages"]
    options = args[2] if len(args) > 2 else kwargs["options"]
    language = args[3] if len(args) > 3 else kwargs.get("language")
    capability = args[4] if len(args) > 4 else kwargs.get("capability")
    if type(backend).__module__.startswith("triton.backends.nvidia"):
        _wrap_stages(backend, stages, options, language, capability)


def _hook_keys_cache() -> bool:
    """Whether this Triton puts the inspection hook's key in its compile cache key (3.7+)."""
    try:
        from triton.compiler import compiler

        return "add_stages_inspection_hook()" in inspect.getsource(compiler.compile)
    except Exception:  # noqa: BLE001
        return False


def _patch_backend_hash() -> None:
    """Triton without the hook's cache key: the NVIDIA backend's hash() carries our identity."""
    global _patched_hash
    from triton.backends.nvidia.compiler import CUDABackend

    if _patched_hash is not None:
        return
    original = CUDABackend.hash

    def hash(self):
        return f"{original(self)}-nvshmem_dsl-{identity()}"

    hash.__wrapped__ = original
    CUDABackend.hash = hash
    _patched_hash = original


def install() -> None:
    """Hook Triton's NVIDIA pipeline, loader and cache key (idempotent; done on import of
    nvshmem_dsl.triton).  Another inspection hook already set is kept and called first."""
    global _previous_hook, _installed
    from triton import knobs

    with _lock:
        if _installed:
            return
        current = knobs.runtime.add_stages_inspection_hook
        if current is not _stages_hook:
            _previous_hook = current
        knobs.runtime.add_stages_inspection_hook = _stages_hook
        knobs.runtime.kernel_load_end_hook.add(_on_load)
        unload = getattr(knobs.runtime, "kernel_unload_hook", None)
        if unload is not None:
            unload.add(_on_unload)
        if not _hook_keys_cache():
            _patch_backend_hash()
        _installed = True


def uninstall() -> None:
    """Undo :func:`install` (restores a previous inspection hook)."""
    global _previous_hook, _installed, _patched_hash
    from triton import knobs

    with _lock:
        if not _installed:
            return
        if knobs.runtime.add_stages_inspection_hook is _stages_hook:
            knobs.runtime.add_stages_inspection_hook = _previous_hook
        _previous_hook = None
        knobs.runtime.kernel_load_end_hook.remove(_on_load)
        unload = getattr(knobs.runtime, "kernel_unload_hook", None)
        if unload is not None:
            unload.remove(_on_unload)
        if _patched_hash is not None:
            from triton.backends.nvidia.compiler import CUDABackend

            CUDABackend.hash = _patched_hash
            _patched_hash = None
        _installed = False
