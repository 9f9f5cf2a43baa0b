"""NVSHMEM device code in Numba-CUDA kernels, linked and inlined.

The route
=========

Numba-CUDA normally hands a kernel's LLVM IR to NVVM, which emits PTX.  NVVM
reads LLVM 7-era IR and cannot read NVSHMEM's device bitcode (clang 22), and
linking NVSHMEM as a separate object leaves every API call a real call (no
inlining, no LTO-IR available).  So kernels that call NVSHMEM take another
path to PTX, inside Numba's own code library:

1. :func:`nvshmem_dsl.numba._intrinsics.declare_device_function` declares the C
   function (e.g. ``nvshmem_int_p``) in the kernel's LLVM module.  Nothing else
   marks the kernel: a library "uses NVSHMEM" when its IR declares an
   ``nvshmem*`` function.
2. :class:`NvshmemCodeLibrary` (installed as the class of every code library
   numba-cuda creates, see :func:`install`) notices the declarations in
   ``get_asm_strs`` and, instead of calling NVVM:

   * parses the kernel's IR modules with llvmlite (LLVM 22 upgrades NVVM IR:
     typed pointers, ``nvvm.annotations`` -> ``ptx_kernel``/launch bounds),
     links libdevice if ``__nv_*`` math functions are used, and runs O3 on
     that (NVSHMEM calls are still declarations, marked ``convergent`` so that loops around
     them reach the second O3 whole);
   * links in the NVSHMEM functions it calls, taken from a cached, pre-split
     copy of NVSHMEM's bitcode (:mod:`nvshmem_dsl.linker.store`, a few ms) -- but for the large
     ones (collectives, barriers: :func:`nvshmem_dsl.linker.plan.split`), which stay
     declarations: the kernel calls them in relocatable objects built once and cached
     (:mod:`nvshmem_dsl.linker.outline`), which :meth:`NvshmemCodeLibrary._link_all` adds to the
     link (it reads which from the PTX's ``.extern .func`` declarations);
   * internalizes everything that came from NVSHMEM except the device state
     globals the host library looks up (``nvshmemi_device_state_d`` ...),
     inlines NVSHMEM's API (all ``alwaysinline``), runs O3 on the module once more
     with LLVM's non-trivial loop unswitching (see :func:`nvshmem_dsl.linker.pipeline.inline_nvshmem`;
     it unrolls the copy loops the copy rewrite marks, every other NVSHMEM loop is frozen as
     clang built it, see :mod:`nvshmem_dsl.linker.rewrites`) and drops what is
     unused (GlobalDCE);
   * emits PTX with the LLVM NVPTX backend for the kernel's compute
     capability (``sm_90a`` etc.), PTX ISA 8.5 or the minimum the SM needs
     (8.6 for sm_100).

   The PTX goes to Numba's usual link step (nvJitLink or the driver), with the objects of
   the functions it calls out of line, to give the cubin; ``kernel.inspect_asm()`` and
   ``cuda.compile_ptx`` show it (a PTX that calls functions out of line needs their objects,
   :func:`nvshmem_dsl.linker.outline.objects`, to be linked).
   Libraries without NVSHMEM declarations go through ``CUDACodeLibrary``
   unchanged (NVVM).
3. When numba-cuda loads the cubin (a ``CUlibrary``), the library's setup
   callbacks run; ours calls every function registered with
   :func:`add_module_init_hook` with the ``CUlibrary`` handle (an int), which
   is where the host runtime calls ``nvshmemx_culibrary_init``.  That happens
   once per loaded module (per context), in that context, before the first
   launch; finalize hooks run when Numba unloads the module.  The hooks are
   re-attached when a kernel comes back from Numba's on-disk cache.

Limits: LTO-IR output (``cuda.compile(..., output="ltoir")``) is not possible
for NVSHMEM kernels (with ``lto=True`` such a kernel is added to the link as
PTX; its other link inputs still get LTO); ``fastmath`` only has its
per-instruction effects (no FTZ mode).

Public: :class:`NvshmemCodeLibrary`, :func:`install`,
:func:`add_module_init_hook`, :func:`remove_module_init_hook`,
:func:`set_module_init_hook`, :func:`add_module_finalize_hook`,
:func:`remove_module_finalize_hook`, :func:`nvshmem_functions`,
:func:`compile_ptx`.
"""

from __future__ import annotations

import contextvars
import functools
import os
import re
import threading
import warnings

import llvmlite.binding as llvm
from numba.cuda import codegen as _codegen
from numba.cuda.codegen import CUDACodeLibrary
from numba.cuda.core import config

from .._libs import is_nvshmem_bitcode
from ..linker.hooks import ModuleHooks
from ..linker.pipeline import (NvshmemLinkError, default_features, link_nvshmem, mark_declarations, nvjitlink_reads,
                               nvshmem_functions, objects, prepare_calls, ptxas_object, target_machine)

__all__ = [
    "NvshmemCodeLibrary",
    "NvshmemLinkError",
    "add_module_finalize_hook",
    "add_module_init_hook",
    "compile_ptx",
    "install",
    "nvshmem_functions",
    "remove_module_finalize_hook",
    "remove_module_init_hook",
    "set_module_init_hook",
]

#: A kernel's launch bounds in Numba's IR (``launch_bounds=``: ``!"maxntidx", i32 256``), which
#: become its PTX's ``.maxntid``.
_MAX_THREADS = re.compile(r'!"maxntidx", i32 (\d+)')
_DECLARED_LIBDEVICE = re.compile(r'^declare [^\n]*?@"?(__nv_[A-Za-z0-9_]*)"?\(', re.M)


# --------------------------------------------------------------------------
# Module hooks

#: The init / finalize hooks run on every loaded CUlibrary with NVSHMEM code (the host runtime
#: registers its own when it starts).
hooks = ModuleHooks("CUlibrary")
add_module_init_hook = hooks.add_init
remove_module_init_hook = hooks.remove_init
set_module_init_hook = hooks.set_init
add_module_finalize_hook = hooks.add_finalize
remove_module_finalize_hook = hooks.remove_finalize


def _module_setup(object_code) -> None:
    hooks.run_init(int(object_code.handle))


def _module_teardown(object_code) -> None:
    hooks.run_finalize(int(object_code.handle))


# --------------------------------------------------------------------------
# LLVM side


def _target(cc) -> tuple[str, str]:
    """(cpu, features) for a Numba cc tuple, e.g. ("sm_90a", "+ptx85")."""
    from numba.cuda.cudadrv import nvrtc

    cpu = nvrtc.get_arch_option(*cc).replace("compute_", "sm_")
    return cpu, default_features(cpu)


@functools.lru_cache(maxsize=None)
def _sm(cc) -> int:
    """The SM whose NVSHMEM bitcode a kernel for Numba cc tuple ``cc`` links (90 for sm_90a)."""
    return int(re.match(r"sm_(\d+)", _target(cc)[0]).group(1))


_libdevice_lock = threading.Lock()
_libdevice = None


def _libdevice_module():
    global _libdevice
    with _libdevice_lock:
        if _libdevice is None:
            from numba.cuda.cudadrv.nvvm import LibDevice

            _libdevice = llvm.parse_bitcode(LibDevice().get())
        return _libdevice.clone()


#: Set while a code library links its cubin (``_link_all``): only then are the objects of what the
#: PTX calls out of line wanted, and started before the PTX is emitted (not for ``cuda.compile_ptx``).
_linking: contextvars.ContextVar = contextvars.ContextVar("nvshmem_dsl_numba_linking", default=False)


def compile_ptx(llvm_strs, cc, opt: int = 3, max_registers=None, prefetch: bool = False) -> str:
    """PTX for Numba IR modules ``llvm_strs`` with the NVSHMEM functions they
    declare linked in and inlined, for compute capability ``cc`` (see :func:`link`); the calls
    into NVSHMEM's objects prepared (:func:`nvshmem_dsl.linker.pipeline.prepare_calls`).
    ``prefetch``: the PTX is to be linked: its objects start building meanwhile."""
    module, tm = link(llvm_strs, cc, opt, max_registers, prefetch)
    return prepare_calls(tm.emit_assembly(module))


def link(llvm_strs, cc, opt: int = 3, max_registers=None, prefetch: bool = False):
    """The Numba IR modules ``llvm_strs`` linked with the NVSHMEM functions they
    declare, inlined, as an llvmlite module ready for the NVPTX backend; and the
    target machine for ``cc``: :func:`nvshmem_dsl.linker.pipeline.link_nvshmem`.  The functions
    called out of line stay declarations (the module still defines the device state); with
    ``prefetch``, their objects start building meanwhile, at the register cap of the kernels'
    launch bounds and ``max_registers``.

    Externally visible definitions of the Numba modules keep their linkage;
    everything else ends up internal, except
    :data:`nvshmem_dsl.linker.store.EXPORTED_GLOBALS`.  Numba's code (with
    libdevice) is optimised at O3 first; then NVSHMEM is linked, its
    ``alwaysinline`` API inlined and the Numba functions simplified again.
    NVSHMEM's own out-of-line helpers, already optimised by clang, are not
    run through the optimiser a second time (that would cost ~0.3 s a kernel).
    """
    cpu, features = _target(cc)
    level = 3 if opt else 0
    tm = target_machine(cpu, features, level)
    mods = [llvm.parse_assembly(mark_declarations(s)) for s in llvm_strs]
    main = mods[0]
    for m in mods[1:]:
        main.link_in(m)
    main.triple = _codegen.CUDA_TRIPLE
    main.data_layout = str(tm.target_data)
    keep = {v.name for v in (*main.functions, *main.global_variables)
            if not v.is_declaration}
    libraries = [_libdevice_module()] if any(_DECLARED_LIBDEVICE.search(s) for s in llvm_strs) else []
    # the large NVSHMEM functions stay declarations, called in their objects (added at the link:
    # see NvshmemCodeLibrary._link_all); the module still defines the device state they read
    blocks = [int(n) for s in llvm_strs for n in _MAX_THREADS.findall(s)] or [None]
    link_nvshmem(main, nvshmem_functions(llvm_strs), _sm(tuple(cc)), tm, cpu, features, keep, opt=level,
                 optimise_first=True, libraries=libraries, prefetch=prefetch, blocks=blocks,
                 max_registers=max_registers)
    return main, tm


# --------------------------------------------------------------------------
# Numba side


class _PtxLinker:
    """``linker`` (numba-cuda's) as :meth:`CUDACodeLibrary._link_all` is to see it for an NVSHMEM
    library: not LTO (NVVM cannot read NVSHMEM's code, so the library gives PTX), and PTX that the
    installed nvJitLink does not read (:func:`~nvshmem_dsl.linker.pipeline.nvjitlink_reads`) added as
    ptxas's object of it; CUDA C++ of the link (numba-cuda's NRT) compiled to PTX too, under LTO;
    NVSHMEM's own bitcode in ``link=`` left out (the PTX holds the NVSHMEM code it calls)."""

    lto = False

    def __init__(self, linker, name: str):
        self._linker, self._name = linker, name

    def __getattr__(self, attr):
        return getattr(self._linker, attr)

    def add_ptx(self, ptx: bytes, name: str = "<cudapy-ptx>"):
        if nvjitlink_reads(ptx.decode()):
            return self._linker.add_ptx(ptx, name)
        linker = self._linker
        options = ["-O3", *(["-lineinfo"] if linker.lineinfo else []),
                   *([f"-maxrregcount={linker.max_registers}"] if linker.max_registers else [])]
        return linker.add_cubin(ptxas_object(ptx, linker.arch, options, f"kernel {self._name}"))

    def add_file_guess_ext(self, path_or_code, ignore_nonlto=False):
        # NVSHMEM's own bitcode given to link= (numba-cuda cannot link a .bc): its code is in the PTX
        if isinstance(path_or_code, (str, os.PathLike)) and is_nvshmem_bitcode(path_or_code):
            return None
        # CUDA C++ given to the link (numba-cuda's NRT, nrt.cu, with NUMBA_CUDA_ENABLE_NRT=1; a
        # CUSource or .cu file of link=) becomes PTX, as the kernel does: under LTO nvJitLink keeps
        # of LTO-IR only what other LTO-IR calls, so the functions our PTX calls in it (NRT_incref)
        # would be undefined. Without LTO, or when only LTO inputs are wanted, numba-cuda decides.
        if self._linker.lto and not ignore_nonlto:
            if isinstance(path_or_code, str) and path_or_code.endswith(".cu"):
                with open(path_or_code, "rb") as f:
                    return self._add_cu_as_ptx(f.read(), os.path.basename(path_or_code))
            if getattr(path_or_code, "kind", None) == "cu":
                return self._add_cu_as_ptx(path_or_code.data, path_or_code.name)
        return self._linker.add_file_guess_ext(path_or_code, ignore_nonlto)

    def _add_cu_as_ptx(self, source, name: str):
        from numba.cuda.cudadrv import nvrtc

        linker = self._linker
        ptx, _log = nvrtc.compile(source, name, linker.cc, ltoir=False, lineinfo=linker.lineinfo)
        return self.add_ptx(bytes(ptx.code), name)


class NvshmemCodeLibrary(CUDACodeLibrary):
    """A ``CUDACodeLibrary`` that links NVSHMEM device code into its PTX when
    its IR declares NVSHMEM functions, and behaves exactly like its base
    class otherwise."""

    _hooks_attached = False  #: get_cufunc attached the module hooks (a library from the disk cache too)

    @property
    def nvshmem_functions(self) -> frozenset:
        """The NVSHMEM functions this library (with the libraries linked into
        it) calls.  Read from ``llvm_strs``, which Numba also computes once."""
        names = self.__dict__.get("_nvshmem_functions")
        if names is None:
            names = self.__dict__["_nvshmem_functions"] = nvshmem_functions(self.llvm_strs)
        return names

    @property
    def uses_nvshmem(self) -> bool:
        return bool(self.nvshmem_functions)

    def get_asm_strs(self, cc=None):
        if not self.uses_nvshmem:
            return super().get_asm_strs(cc=cc)
        cc = self._ensure_cc(cc)
        ptxes = self._ptx_cache.get(cc)
        if ptxes:
            return ptxes
        ptx = compile_ptx(
            self.llvm_strs,
            cc,
            opt=self._nvvm_options.get("opt", 3),
            max_registers=self._max_registers,
            prefetch=_linking.get(),
        )
        if config.DUMP_ASSEMBLY:
            print(("ASSEMBLY %s" % self._name).center(80, "-"))
            print(ptx)
            print("=" * 80)
        self._ptx_cache[cc] = [ptx]
        return self._ptx_cache[cc]

    def get_ltoir(self, cc=None):
        if self.uses_nvshmem:
            raise NvshmemLinkError(
                "kernels and device functions that call NVSHMEM cannot be "
                "emitted as LTO-IR (NVVM cannot read NVSHMEM's bitcode); "
                "compile them to PTX or cubin"
            )
        return super().get_ltoir(cc=cc)

    def _link_all(self, linker, cc, ignore_nonlto=False):
        if not self.uses_nvshmem:
            return super()._link_all(linker, cc, ignore_nonlto=ignore_nonlto)
        token = _linking.set(True)
        try:
            self._link_nvshmem(linker, cc, ignore_nonlto)
        finally:
            _linking.reset(token)

    def _link_nvshmem(self, linker, cc, ignore_nonlto):
        # the base class's link, our part always PTX (with lto=True the other inputs still get LTO),
        # and PTX that nvJitLink does not read (NVSHMEM's objects' convention, 9.0, with CUDA 12's)
        # compiled by the objects' ptxas first
        super()._link_all(_PtxLinker(linker, self._name), cc, ignore_nonlto=ignore_nonlto)
        # the NVSHMEM functions the PTX calls out of line (read from the PTX, which may come from
        # Numba's cache): their objects
        paths, provisional = objects(self.get_asm_strs(cc=cc), _sm(tuple(cc)), _target(cc),
                                     max_registers=self._max_registers)
        for path in paths:
            linker.add_file_guess_ext(str(path), ignore_nonlto)
        if provisional:
            self.__dict__.setdefault("_provisional_ccs", set()).add(cc)

    def _reduce_states(self):
        # Numba's disk cache (cache=True) keeps the PTX but not a cubin linked with split objects
        # whose whole form was still being built: a later process links it with the whole one
        state = super()._reduce_states()
        provisional = self.__dict__.get("_provisional_ccs")
        if provisional:
            state["cubin_cache"] = {cc: c for cc, c in state["cubin_cache"].items() if cc not in provisional}
        return state

    def get_cufunc(self):
        # Attached here rather than at creation so that kernels loaded from
        # Numba's disk cache (which drops callbacks) get them too; once per library (numba-cuda
        # asks for the function at every launch)
        if not self._hooks_attached:
            if self.uses_nvshmem:
                if _module_setup not in self._setup_functions:
                    self._setup_functions.append(_module_setup)
                if _module_teardown not in self._teardown_functions:
                    self._teardown_functions.append(_module_teardown)
            self._hooks_attached = True
        return super().get_cufunc()


def install() -> None:
    """Make numba-cuda create :class:`NvshmemCodeLibrary` code libraries.
    Idempotent; done on import of this module."""
    cls = _codegen.JITCUDACodegen._library_class
    if cls is NvshmemCodeLibrary:
        return
    if cls is not CUDACodeLibrary:
        warnings.warn(
            f"numba-cuda's code library class is already replaced by {cls!r}; "
            "nvshmem_dsl replaces it again",
            RuntimeWarning,
            stacklevel=2,
        )
    _codegen.JITCUDACodegen._library_class = NvshmemCodeLibrary


install()

from . import _launch  # noqa: E402

_launch.install()  # a launch with more threads than the registers allow names the kernel and the remedies
