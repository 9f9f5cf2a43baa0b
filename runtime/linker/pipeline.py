"""What a DSL front-end calls to link NVSHMEM into its kernel: the linker's stages, in order.

A front-end (:mod:`nvshmem_dsl.numba._linker`, :mod:`nvshmem_dsl.triton._compile`) brings its
kernel as an llvmlite module whose NVSHMEM functions are declarations (marked by
:func:`mark_declaration`); :func:`inline_nvshmem` runs the stages on it:

1. plan (:mod:`.plan`): which of the NVSHMEM functions it calls are inlined, which called out of
   line (:func:`nvshmem_dsl.linker.plan.split`);
2. bodies (:mod:`.store`): the inlined ones' definitions, and everything they call, from the piece
   store of NVSHMEM's bitcode (:func:`nvshmem_dsl.linker.store.api_module`), with
3. rewrites (:mod:`.rewrites`) applied, checked against the kernel's declarations
   (:func:`check_declarations`), linked in, internalized, inlined and optimised once more;
4. objects (:mod:`.outline`): the out-of-line ones' cached relocatable objects, started here
   (:func:`nvshmem_dsl.linker.outline.prefetch`) and added to the link by the front-end
   (:func:`nvshmem_dsl.linker.outline.objects`) once its PTX is emitted;
5. link (:mod:`.link`): ptxas and nvJitLink make the cubin (:func:`nvshmem_dsl.linker.link.nvjitlink_cubin`,
   with :func:`ptx_for_nvjitlink`).
"""

from __future__ import annotations

import functools
import os
import re

import llvmlite.binding as llvm

from . import abi, calls, code_env, link, outline, plan, store
from ._llvm import function_shape, internalize, nontrivial_unswitching, run
from .link import NvshmemLinkError

__all__ = ["DECLARATION", "NvshmemLinkError", "UNSWITCH_ENV", "check_declarations", "inline_nvshmem",
           "mark_declaration", "nvshmem_functions", "ptx_for_nvjitlink", "unswitching"]


#: A whole declaration line of an nvshmem* function; group 1 is its name.
DECLARATION = re.compile(r'^declare [^\n]*?@"?(nvshmem\w*)"?\([^\n]*', re.M)


def nvshmem_functions(llvm_strs) -> frozenset:
    """Names of the ``nvshmem*`` functions declared in the given LLVM IR."""
    return frozenset(n for s in llvm_strs for n in DECLARATION.findall(s))


def ptx_for_nvjitlink(ptx: str) -> str:
    """``ptx`` with its ``.version`` lowered to what the installed nvJitLink compiles, where it says
    more (a DSL's bundled compiler may be newer than the toolkit: CuTe's cu13 build writes 9.4,
    CUDA 13.0's nvJitLink reads up to 9.0); kernels that use no newer instruction compile the same.
    PTX that calls NVSHMEM's objects under ``.abi_preserve`` (9.0) is not lowered below it: where
    nvJitLink reads less, the objects' ptxas compiles it (:func:`nvshmem_dsl.linker.link.nvjitlink_cubin`), lowered to what
    that reads."""
    have, version = link.nvjitlink_ptx_isa(), link.ptx_isa(ptx)
    if have is None or version is None:
        return ptx
    if have < abi.MIN_PTX and abi.marked(ptx):
        have = link.ptxas_ptx_isa() or have
    return ptx if version <= have else link.with_ptx_isa(ptx, have)


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
    inline, outlined = plan.split(names, sm) if outline_objects else (frozenset(names), frozenset())
    if outlined and objects_target is not None:
        outline.prefetch(outlined, sm, *objects_target)
    try:
        api = store.api_module(inline, sm, unswitch=unswitch,
                               helpers_out=outline_objects and plan.helpers_out())
    except KeyError as e:
        raise NvshmemLinkError(f"{e.args[0]} (NVSHMEM bitcode for sm_{sm})") from None
    check_declarations(main, api, inline, outlined)
    if objects_target is not None:  # the kernel's PTX will ask NVIDIA's compiled helpers about these: now
        calls.ask_archive_ahead(api, *objects_target[:2])
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
