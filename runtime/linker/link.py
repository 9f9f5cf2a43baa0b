"""The half of a kernel's link that every front-end shares: NVSHMEM linked in and inlined.

A front-end (:mod:`nvshmem_dsl.numba._linker`, :mod:`nvshmem_dsl.triton._compile`) brings its
kernel as an llvmlite module whose NVSHMEM functions are declarations (marked by
:func:`mark_declaration`); :func:`inline_nvshmem` links the small ones from the piece store
(:func:`nvshmem_dsl.linker.store.api_module`), checks the kernel's declarations against
NVSHMEM's definitions (:func:`check_declarations`), internalizes, inlines NVSHMEM's API and
optimises the kernel once more, and leaves the large ones (:func:`nvshmem_dsl.linker.outline.
split`) declarations, called in their cached objects.  The front-end then emits PTX and adds
those objects to its link.
"""

from __future__ import annotations

import functools
import os
import re

import llvmlite.binding as llvm

from . import abi, code_env, outline, store
from ._llvm import function_shape, internalize, nontrivial_unswitching, run

__all__ = ["DECLARATION", "NvshmemLinkError", "UNSWITCH_ENV", "check_declarations", "inline_nvshmem",
           "mark_declaration", "min_ptx", "nontrivial_unswitching", "nvjitlink_cubin", "nvjitlink_ptx_isa",
           "nvjitlink_reads", "nvshmem_functions", "ptx_for_nvjitlink", "ptxas_object", "ptxas_ptx_isa", "unswitching"]

#: A whole declaration line of an nvshmem* function; group 1 is its name.
DECLARATION = re.compile(r'^declare [^\n]*?@"?(nvshmem\w*)"?\([^\n]*', re.M)


class NvshmemLinkError(RuntimeError):
    """Linking NVSHMEM device code into a kernel failed."""


def nvshmem_functions(llvm_strs) -> frozenset:
    """Names of the ``nvshmem*`` functions declared in the given LLVM IR."""
    return frozenset(n for s in llvm_strs for n in DECLARATION.findall(s))


def min_ptx(sm: int) -> int:
    """The PTX ISA (x10) needed to target the SM at all: sm_90a 8.0, sm_100 8.6 ..."""
    table = {100: 86, 101: 86, 103: 88, 110: 90, 120: 87, 121: 88}
    return table.get(sm, 80 if sm >= 90 else 70)


def default_ptx(sm: int) -> int:
    """The PTX ISA (x10) kernels' NVSHMEM code and NVSHMEM's objects are emitted for by default:
    8.5, or what the SM needs (:func:`min_ptx`)."""
    return max(85, min_ptx(sm))


def _isa(major: int, minor: int) -> int | None:
    """The highest PTX ISA (x10) CUDA ``major.minor``'s compilers read (12.x: 8.0 ... 8.8, 13.x: 9.x)."""
    if major == 12:
        return 80 + minor if minor < 6 else 79 + minor
    return 90 + minor if major == 13 else None


def nvjitlink_ptx_isa() -> int | None:
    """The highest PTX ISA (x10) the installed nvJitLink compiles (CUDA 12.x: 8.0 ... 8.8, 13.x:
    9.x), None without nvJitLink."""
    try:
        from cuda.bindings import nvjitlink

        major, minor = nvjitlink.version()
    except Exception:  # noqa: BLE001 - no cuda.bindings, no libnvJitLink
        return None
    return _isa(major, minor)


def ptxas_ptx_isa() -> int | None:
    """The highest PTX ISA (x10) the objects' ptxas (:func:`nvshmem_dsl.linker.outline.ptxas`) reads."""
    path = outline.ptxas()
    version = abi._ptxas_version(path) if path else None
    return _isa(*version) if version else None


def ptx_for_nvjitlink(ptx: str) -> str:
    """``ptx`` with its ``.version`` lowered to what the installed nvJitLink compiles, where it says
    more (a DSL's bundled compiler may be newer than the toolkit: CuTe's cu13 build writes 9.4,
    CUDA 13.0's nvJitLink reads up to 9.0); kernels that use no newer instruction compile the same.
    PTX that calls NVSHMEM's objects under ``.abi_preserve`` (9.0) is not lowered below it: where
    nvJitLink reads less, the objects' ptxas compiles it (:func:`nvjitlink_cubin`), lowered to what
    that reads."""
    have, version = nvjitlink_ptx_isa(), outline.ptx_isa(ptx)
    if have is None or version is None:
        return ptx
    if have < abi.MIN_PTX and abi.marked(ptx):
        have = ptxas_ptx_isa() or have
    return ptx if version <= have else outline.with_ptx_isa(ptx, have)


def nvjitlink_reads(ptx: str) -> bool:
    """Whether nvJitLink (where there is one) compiles ``ptx`` itself: its ``.version`` is one it
    reads.  PTX that it does not (NVSHMEM's objects' calling convention, PTX 9.0, with the nvJitLink
    of CUDA 12) is compiled by the objects' ptxas first (:func:`ptxas_object`)."""
    have, version = nvjitlink_ptx_isa(), outline.ptx_isa(ptx)
    return have is None or version is None or version <= have


#: nvJitLink options that ptxas takes as they are (the others: ``-Xptxas=<option>``).
_PTXAS_OPTIONS = re.compile(r"^-(?:O\d|lineinfo|maxrregcount=\d+)$")


def ptxas_object(ptx: bytes, arch: str, options=(), what: str = "a kernel") -> bytes:
    """A relocatable cubin of PTX ``ptx`` for ``arch``, by the objects' ptxas, with the ptxas part of
    the nvJitLink ``options`` (``-O3``, ``-lineinfo``, ``-maxrregcount=N``, ``-Xptxas=...``), for an
    nvJitLink that does not read its PTX ISA (:func:`nvjitlink_reads`): nvJitLink of CUDA 12 links
    CUDA 13 ptxas's objects (checked: tests/test_link_ptxas.py)."""
    if outline.ptxas() is None:
        raise NvshmemLinkError(f"{what}: its PTX ISA is newer than nvJitLink reads and no ptxas was found to "
                               "compile it (install a CUDA toolkit, or nvshmem-dsl[cu13])")
    args = []
    for opt in options:
        if opt.startswith("-Xptxas="):
            args.append(opt[len("-Xptxas="):])
        elif _PTXAS_OPTIONS.match(opt):
            args.append(opt)
    try:
        return outline.assemble(ptx, arch, args)
    except outline.PtxasError as e:
        raise NvshmemLinkError(f"ptxas ({outline.ptxas()}) failed to compile {what} for {arch}:\n{e}") from None


def nvjitlink_cubin(arch: str, inputs, options=(), what: str = "a kernel", hint: str = "") -> bytes:
    """An executable cubin for ``arch`` linked by nvJitLink from ``inputs``, ``(name, bytes)``: PTX
    where the name ends in ``.ptx`` (compiled by nvJitLink's ptxas with ``options``), host objects
    with device code where it ends in ``.o`` (NVIDIA's compiled helpers), cubins otherwise (the
    objects of :func:`nvshmem_dsl.linker.outline.objects`).  A failure raises
    :class:`NvshmemLinkError` with nvJitLink's log and ``hint``."""
    from cuda.bindings import nvjitlink

    opts = [f"-arch={arch}", *options]
    handle = nvjitlink.create(len(opts), opts)
    try:
        try:
            for name, data in inputs:
                if name.endswith(".ptx") and not nvjitlink_reads(data.decode(errors="replace")):
                    name, data = name[:-len(".ptx")] + ".cubin", ptxas_object(data, arch, options, what)
                kind = (nvjitlink.InputType.PTX if name.endswith(".ptx") else
                        nvjitlink.InputType.OBJECT if name.endswith(".o") else nvjitlink.InputType.CUBIN)
                nvjitlink.add_data(handle, kind, data, len(data), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            log = bytes(log).decode(errors="replace").rstrip("\0").strip()
            raise NvshmemLinkError(f"nvJitLink failed to link {what} for {arch} with NVSHMEM's objects "
                                   f"({exc}):\n{log}" + (f"\n{hint}" if hint else "")) from None
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


def check_declarations(main, api, names, outlined=frozenset()) -> None:
    """The kernel's declarations of the NVSHMEM functions ``names`` against their definitions in
    ``api``; of those called out of line (``outlined``), against the op table (which their
    objects' definitions are checked against: :func:`nvshmem_dsl.linker.outline.object_ptx`)."""
    from .. import _optable

    bad = []
    for name in sorted(names | outlined):
        if name in outlined:
            want = _optable.device_ops()[name]["llvm_type"]
        else:
            want = function_shape(api.get_function(name).global_value_type)
        have = function_shape(main.get_function(name).global_value_type)
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


def mark_declaration(m, all_convergent: bool = False) -> str:
    """For ``DECLARATION.sub``: declarations of NVSHMEM functions get ``nounwind``; those of
    warp/block scope (and any function the op table does not know) ``convergent`` too, so that
    O3 keeps every thread of the group on the same call.  Loops around thread-scope calls may be
    unrolled with a remainder, unless ``all_convergent``."""
    if not all_convergent and m.group(1) in _unconstrained():
        return m.group(0) + " nounwind"
    return m.group(0) + " convergent nounwind"


#: Loop unswitching (on unless ``NVSHMEM_DSL_UNSWITCH=0``): after NVSHMEM is inlined, the whole
#: O3 pipeline runs once more with LLVM's non-trivial loop unswitching, so that a loop of
#: ``p``/``g``/atomics splits on NVSHMEM's loop-invariant P2P test into a loop of plain stores /
#: loads / atomics and one with the transport calls, as libNVVM does for CuTe kernels
#: (bench/experiments/unswitch.py; what it gains and costs: BENCHMARKS.md).  See
#: :func:`nontrivial_unswitching`.
UNSWITCH_ENV = code_env.UNSWITCH


def unswitching() -> bool:
    """Whether NVSHMEM kernels are compiled with loop unswitching (``$NVSHMEM_DSL_UNSWITCH``,
    on unless it says 0/off/no/false)."""
    return os.environ.get(UNSWITCH_ENV, "").strip().lower() not in ("0", "off", "no", "false")


def inline_nvshmem(main, names, sm: int, keep, pb, kernel_fns, *, unswitch: bool, opt: bool = True,
                   outline_objects: bool = True, before_simplify=(), objects_target=None) -> frozenset:
    """Link the NVSHMEM functions ``names`` that ``main`` declares into it and inline them; returns
    those left out of line (their objects go into the link).

    ``keep``: what stays externally visible (the kernel's own definitions; the device state
    :data:`nvshmem_dsl.linker.store.EXPORTED_GLOBALS` is added); ``pb``: the pass builder for the
    kernel's target; ``kernel_fns``: the front-end's own functions, which the lighter second pass
    (``unswitch`` off) simplifies and unrolls; ``before_simplify``: passes (names for
    :func:`nvshmem_dsl.linker._llvm.run`) run before that lighter pass; ``outline_objects``
    False: everything inlined; ``objects_target``: ``(cpu, features, register cap)`` of the
    kernel, to start building the objects of what it calls out of line meanwhile
    (:func:`nvshmem_dsl.linker.outline.prefetch`).  NVSHMEM's own out-of-line helpers, already
    optimised by clang, are not run through the optimiser a second time unless ``unswitch`` (that
    would cost ~0.3 s a kernel)."""
    inline, outlined = outline.split(names, sm) if outline_objects else (frozenset(names), frozenset())
    if outlined and objects_target is not None:
        outline.prefetch(outlined, sm, *objects_target)
    try:
        api = store.api_module(inline, sm, unswitch=unswitch,
                               helpers_out=outline_objects and outline.helpers_out())
    except KeyError as e:
        raise NvshmemLinkError(f"{e.args[0]} (NVSHMEM bitcode for sm_{sm})") from None
    check_declarations(main, api, inline, outlined)
    if objects_target is not None:  # the kernel's PTX will ask NVIDIA's compiled helpers about these: now
        outline.ask_archive_ahead(api, *objects_target[:2])
    main.link_in(api)
    internalize(main, set(keep) | set(store.EXPORTED_GLOBALS))
    run(main, pb, "always_inliner", "global_dead_code_eliminate")
    if opt and unswitch:
        with nontrivial_unswitching():
            pb.getModulePassManager().run(main, pb)
    elif opt:
        if before_simplify:
            run(main, pb, *before_simplify)
        fpm = pb.getFunctionPassManager()
        # the simplification pipeline has no runtime unrolling: NVSHMEM's copy loops, now in the
        # kernel (and freed of their unroll.disable by the copy rewrite), get it here
        unroll = llvm.create_new_function_pass_manager()
        unroll.add_loop_unroll_pass()
        unroll.add_simplify_cfg_pass()
        for fn in main.functions:
            if fn.name in kernel_fns and not fn.is_declaration:
                fpm.run(fn, pb)
                unroll.run(fn, pb)
    run(main, pb, "global_dead_code_eliminate")
    return outlined
