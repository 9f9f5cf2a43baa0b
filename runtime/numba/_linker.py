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
     them reach the second O3 whole; with ``NVSHMEM_DSL_UNSWITCH=0`` only those of warp or
     block scope are, so loops around thread-scope calls unroll as in C++);
   * links in the NVSHMEM functions it calls, taken from a cached, pre-split
     copy of NVSHMEM's bitcode (:mod:`nvshmem_dsl.bitcode`, a few ms) -- but for the large
     ones (collectives, barriers: :func:`nvshmem_dsl.outline.split`), which stay
     declarations: the kernel calls them in relocatable objects built once and cached
     (:mod:`nvshmem_dsl.outline`), which :meth:`NvshmemCodeLibrary._link_all` adds to the
     link (it reads which from the PTX's ``.extern .func`` declarations);
   * internalizes everything that came from NVSHMEM except the device state
     globals the host library looks up (``nvshmemi_device_state_d`` ...),
     inlines NVSHMEM's API (all ``alwaysinline``), runs O3 on the module once more
     with LLVM's non-trivial loop unswitching (see :func:`unswitching`; it unrolls
     the copy loops the copy rewrite marks, every other NVSHMEM loop is frozen as
     clang built it, see :mod:`nvshmem_dsl.bitcode_rewrites`) and drops what is
     unused (GlobalDCE).  With ``NVSHMEM_DSL_UNSWITCH=0`` the second pass is
     lighter: the function simplification pipeline and LLVM's unroll pass on the
     Numba functions only, NVSHMEM's out-of-line helpers (``noinline`` transport
     paths, already optimised by clang) left as they are;
   * emits PTX with the LLVM NVPTX backend for the kernel's compute
     capability (``sm_90a`` etc.), PTX ISA 8.5 or the minimum the SM needs
     (8.6 for sm_100); ``$NVSHMEM_DSL_PTX_VERSION`` overrides it.

   The PTX goes to Numba's usual link step (nvJitLink or the driver), with the objects of
   the functions it calls out of line, to give the cubin; ``kernel.inspect_asm()`` and
   ``cuda.compile_ptx`` show it (a PTX that calls functions out of line needs their objects,
   :func:`nvshmem_dsl.outline.objects`, to be linked).
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

import contextlib
import functools
import os
import re
import threading
import warnings

import llvmlite.binding as llvm
from numba.cuda import codegen as _codegen
from numba.cuda.codegen import CUDACodeLibrary
from numba.cuda.core import config

from .. import bitcode, outline
from .._llvm import function_shape as _fn_shape
from .._llvm import internalize as _internalize
from .._llvm import run as _run
from .._llvm import target_machine as _target_machine

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

# A whole declaration line of an nvshmem* function; group 1 is its name.
_DECLARATION = re.compile(r'^declare [^\n]*?@"?(nvshmem\w*)"?\([^\n]*', re.M)
_DECLARED_LIBDEVICE = re.compile(r'^declare [^\n]*?@"?(__nv_[A-Za-z0-9_]*)"?\(', re.M)


class NvshmemLinkError(RuntimeError):
    """Linking NVSHMEM device code into a kernel failed."""


# --------------------------------------------------------------------------
# Module hooks


_init_hooks: list = []
_finalize_hooks: list = []
_warned_no_hook = False


def add_module_init_hook(fn):
    """Call ``fn(culibrary: int)`` for every loaded module (``CUlibrary``) that
    contains NVSHMEM device code, before its first launch.  Returns ``fn``."""
    if fn not in _init_hooks:
        _init_hooks.append(fn)
    return fn


def remove_module_init_hook(fn) -> None:
    if fn in _init_hooks:
        _init_hooks.remove(fn)


def set_module_init_hook(fn) -> None:
    """Make ``fn`` the only init hook (``None``: no hook)."""
    _init_hooks.clear()
    if fn is not None:
        _init_hooks.append(fn)


def add_module_finalize_hook(fn):
    """Call ``fn(culibrary: int)`` when such a module is unloaded."""
    if fn not in _finalize_hooks:
        _finalize_hooks.append(fn)
    return fn


def remove_module_finalize_hook(fn) -> None:
    if fn in _finalize_hooks:
        _finalize_hooks.remove(fn)


def _module_setup(object_code) -> None:
    global _warned_no_hook
    if not _init_hooks and not _warned_no_hook:
        _warned_no_hook = True
        warnings.warn(
            "a kernel using NVSHMEM was loaded but no module init hook is "
            "registered, so its NVSHMEM device state is not initialised; "
            "initialise the nvshmem_dsl runtime before launching kernels",
            RuntimeWarning,
            stacklevel=2,
        )
    handle = int(object_code.handle)
    for fn in list(_init_hooks):
        fn(handle)


def _module_teardown(object_code) -> None:
    handle = int(object_code.handle)
    for fn in list(_finalize_hooks):
        fn(handle)


# --------------------------------------------------------------------------
# LLVM side


def nvshmem_functions(llvm_strs) -> frozenset:
    """Names of the ``nvshmem*`` functions declared in the given LLVM IR."""
    return frozenset(n for s in llvm_strs for n in _DECLARATION.findall(s))


def _min_ptx(sm: int) -> int:
    # PTX ISA needed to target the SM at all (x10): sm_90a 8.0, sm_100 8.6 ...
    table = {100: 86, 101: 86, 103: 88, 110: 90, 120: 87, 121: 88}
    return table.get(sm, 80 if sm >= 90 else 70)


def _target(cc) -> tuple[str, str]:
    """(cpu, features) for a Numba cc tuple, e.g. ("sm_90a", "+ptx85")."""
    from numba.cuda.cudadrv import nvrtc

    cpu = nvrtc.get_arch_option(*cc).replace("compute_", "sm_")
    sm = int(re.match(r"sm_(\d+)", cpu).group(1))
    ptx = os.environ.get("NVSHMEM_DSL_PTX_VERSION")
    ptx = int(ptx.replace(".", "")) if ptx else max(85, _min_ptx(sm))
    return cpu, f"+ptx{ptx}"


@functools.lru_cache(maxsize=None)
def _sm(cc) -> int:
    """The SM whose NVSHMEM bitcode a kernel for Numba cc tuple ``cc`` links (90 for sm_90a)."""
    return int(re.match(r"sm_(\d+)", _target(cc)[0]).group(1))


def prefetch_bitcode(cc) -> None:
    """Say that kernels for compute capability ``cc`` will call NVSHMEM: with no cached NVSHMEM
    bitcode store for it yet, :func:`nvshmem_dsl.bitcode.prefetch` starts building it.
    :func:`nvshmem_dsl.init` calls it with its device's, so that the store is built while NVSHMEM
    initialises (a kernel linked before it is there links a closure, which is slower)."""
    bitcode.prefetch(_sm(tuple(cc)))


_libdevice_lock = threading.Lock()
_libdevice = None


def _libdevice_module():
    global _libdevice
    with _libdevice_lock:
        if _libdevice is None:
            from numba.cuda.cudadrv.nvvm import LibDevice

            _libdevice = llvm.parse_bitcode(LibDevice().get())
        return _libdevice.clone()


def _check_declarations(main, api, names, outlined=frozenset()) -> None:
    """The kernel's declarations of the NVSHMEM functions ``names`` against their definitions in
    ``api``; of those called out of line (``outlined``), against the op table (which their
    objects' definitions are checked against: :func:`nvshmem_dsl.outline.object_ptx`)."""
    from .. import _optable

    bad = []
    for name in sorted(names | outlined):
        if name in outlined:
            want = _optable.device_ops()[name]["llvm_type"]
        else:
            want = _fn_shape(api.get_function(name).global_value_type)
        have = _fn_shape(main.get_function(name).global_value_type)
        if want != have:
            bad.append(f"{name}: declared {have}, NVSHMEM defines {want}")
    if bad:
        raise NvshmemLinkError(
            "NVSHMEM functions declared with the wrong type:\n  " + "\n  ".join(bad)
        )


@functools.lru_cache(maxsize=None)
def _unconstrained() -> frozenset:
    """The NVSHMEM functions any subset of a warp's threads may call: those of scopes that the
    spec does not mark ``convergent`` (thread scope)."""
    from .. import _optable

    scopes = _optable.table()["scopes"]
    return frozenset(sym for sym, op in _optable.device_ops().items()
                     if not scopes[op["scope"]]["convergent"])


def _mark_declaration(m, all_convergent: bool = False) -> str:
    """Declarations of NVSHMEM functions get ``nounwind``; those of warp/block scope (and any
    function the op table does not know) ``convergent`` too, so that O3 keeps every thread of the
    group on the same call.  Loops around thread-scope calls may be unrolled with a remainder,
    unless ``all_convergent``."""
    if not all_convergent and m.group(1) in _unconstrained():
        return m.group(0) + " nounwind"
    return m.group(0) + " convergent nounwind"


#: Loop unswitching (on unless ``NVSHMEM_DSL_UNSWITCH=0``): after NVSHMEM is inlined, the whole
#: O3 pipeline runs once more with LLVM's non-trivial loop unswitching, so that a loop of
#: ``p``/``g``/atomics splits on NVSHMEM's loop-invariant P2P test into a loop of plain stores /
#: loads / atomics and one with the transport calls, as libNVVM does for CuTe kernels
#: (bench/experiments/unswitch.py; what it gains on the GPU and costs in compile time:
#: BENCHMARKS.md, fourth session).  See :func:`_nontrivial_unswitching`.
UNSWITCH_ENV = "NVSHMEM_DSL_UNSWITCH"


def unswitching() -> bool:
    """Whether NVSHMEM kernels are compiled with loop unswitching (``$NVSHMEM_DSL_UNSWITCH``,
    on unless it says 0/off/no/false)."""
    return os.environ.get(UNSWITCH_ENV, "").strip().lower() not in ("0", "off", "no", "false")


@contextlib.contextmanager
def _nontrivial_unswitching():
    """LLVM's non-trivial loop unswitching for the passes run inside, which LLVM's O3 leaves off
    for GPUs unless the branch is provably uniform.  llvmlite has no per-pipeline way to ask for
    it, only LLVM's process-wide command-line option ``-enable-nontrivial-unswitch``: it is on
    for the duration only, under llvmlite's lock (which every call into LLVM takes: no other
    thread's optimisation runs meanwhile), and off again after, as LLVM has it, so that nothing
    else compiled with llvmlite in the process is changed (GPU code's other passes, the first O3
    of a later NVSHMEM kernel included; CPU code optimised below O3)."""
    with getattr(llvm.ffi.lib, "_lock", None) or contextlib.nullcontext():
        llvm.set_option("nvshmem-dsl", "-enable-nontrivial-unswitch=true")
        try:
            yield
        finally:
            llvm.set_option("nvshmem-dsl", "-enable-nontrivial-unswitch=false")


def compile_ptx(llvm_strs, cc, opt: int = 3) -> str:
    """PTX for Numba IR modules ``llvm_strs`` with the NVSHMEM functions they
    declare linked in and inlined, for compute capability ``cc`` (see :func:`link`)."""
    module, tm = link(llvm_strs, cc, opt)
    return tm.emit_assembly(module)


def link(llvm_strs, cc, opt: int = 3):
    """The Numba IR modules ``llvm_strs`` linked with the NVSHMEM functions they
    declare, inlined, as an llvmlite module ready for the NVPTX backend; and the
    target machine for ``cc``.  The functions :func:`nvshmem_dsl.outline.split` says to call
    out of line stay declarations (the module still defines the device state).

    Externally visible definitions of the Numba modules keep their linkage;
    everything else ends up internal, except
    :data:`nvshmem_dsl.bitcode.EXPORTED_GLOBALS`.  Numba's code (with
    libdevice) is optimised at O3 first; then NVSHMEM is linked, its
    ``alwaysinline`` API inlined and the Numba functions simplified again.
    NVSHMEM's own out-of-line helpers, already optimised by clang, are not
    run through the optimiser a second time (that would cost ~0.3 s a kernel).
    """
    cpu, features = _target(cc)
    tm = _target_machine(cpu, features, 3 if opt else 0)
    sm = _sm(tuple(cc))
    names = nvshmem_functions(llvm_strs)

    # Calls to warp/block-scope NVSHMEM functions synchronise threads: keep them convergent
    # while only their declarations are visible.  With unswitching, all of them: a loop around
    # a thread-scope call must reach the second O3 whole, to be unswitched before it is unrolled.
    unswitch = unswitching()
    mark = functools.partial(_mark_declaration, all_convergent=unswitch)
    mods = [llvm.parse_assembly(_DECLARATION.sub(mark, s)) for s in llvm_strs]
    main = mods[0]
    for m in mods[1:]:
        main.link_in(m)
    main.triple = _codegen.CUDA_TRIPLE
    main.data_layout = str(tm.target_data)
    numba_fns = {f.name for f in main.functions if not f.is_declaration}
    keep = {v.name for v in (*main.functions, *main.global_variables)
            if not v.is_declaration}
    keep.update(bitcode.EXPORTED_GLOBALS)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3 if opt else 0))

    if any(_DECLARED_LIBDEVICE.search(s) for s in llvm_strs):
        main.link_in(_libdevice_module())
        _internalize(main, keep)
        _run(main, pb, "global_dead_code_eliminate")
    if opt:
        pb.getModulePassManager().run(main, pb)

    if names:
        # the large ones stay declarations, called in their objects (added at the link: see
        # NvshmemCodeLibrary._link_all); the module still defines the device state they read
        inline, outlined = outline.split(names, sm)
        try:
            api = bitcode.api_module(inline, sm, unswitch=unswitch)
        except KeyError as e:
            raise NvshmemLinkError(f"{e.args[0]} (NVSHMEM bitcode for sm_{sm})") from None
        _check_declarations(main, api, inline, outlined)
        main.link_in(api)
        _internalize(main, keep)
        _run(main, pb, "always_inliner", "global_dead_code_eliminate")
        if opt and unswitch:
            with _nontrivial_unswitching():
                pb.getModulePassManager().run(main, pb)
            _run(main, pb, "global_dead_code_eliminate")
        elif opt:
            fpm = pb.getFunctionPassManager()
            # the simplification pipeline has no runtime unrolling: NVSHMEM's copy loops, now
            # in the kernel (and freed of their unroll.disable by the copy rewrite), get it here
            unroll = llvm.create_new_function_pass_manager()
            unroll.add_loop_unroll_pass()
            unroll.add_simplify_cfg_pass()
            for fn in main.functions:
                if fn.name in numba_fns and not fn.is_declaration:
                    fpm.run(fn, pb)
                    unroll.run(fn, pb)
            _run(main, pb, "global_dead_code_eliminate")
    return main, tm


# --------------------------------------------------------------------------
# Numba side


class NvshmemCodeLibrary(CUDACodeLibrary):
    """A ``CUDACodeLibrary`` that links NVSHMEM device code into its PTX when
    its IR declares NVSHMEM functions, and behaves exactly like its base
    class otherwise."""

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
        if not linker.lto:
            super()._link_all(linker, cc, ignore_nonlto=ignore_nonlto)
        else:  # lto=True: our part can only be PTX; the other inputs still get LTO.
            for ptx in self.get_asm_strs(cc=cc):
                linker.add_ptx(ptx.encode())
            for path in self._linking_files:
                linker.add_file_guess_ext(path, ignore_nonlto)
            if self.needs_cudadevrt:
                from numba.cuda.cudadrv.libs import get_cudalib

                linker.add_file_guess_ext(
                    get_cudalib("cudadevrt", static=True), ignore_nonlto
                )
        # the NVSHMEM functions the PTX calls out of line (read from the PTX, which may come from
        # Numba's cache): their objects
        outlined = outline.extern_calls(self.get_asm_strs(cc=cc))
        if outlined:
            cpu, features = _target(cc)
            for path in outline.objects(outlined, _sm(tuple(cc)), cpu, features, self._max_registers):
                linker.add_file_guess_ext(str(path), ignore_nonlto)

    def get_cufunc(self):
        # Attached here rather than at creation so that kernels loaded from
        # Numba's disk cache (which drops callbacks) get them too.
        if self.uses_nvshmem:
            if _module_setup not in self._setup_functions:
                self._setup_functions.append(_module_setup)
            if _module_teardown not in self._teardown_functions:
                self._teardown_functions.append(_module_teardown)
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
