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

import re

from . import abi, calls, link, outline, plan, store
from ._llvm import function_shape, internalize, nontrivial_unswitching, run
from .link import NvshmemLinkError

__all__ = ["DECLARATION", "NvshmemLinkError", "check_declarations", "inline_nvshmem", "mark_declaration",
           "nvshmem_functions", "ptx_for_nvjitlink"]


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


def mark_declaration(m) -> str:
    """For ``DECLARATION.sub``: declarations of NVSHMEM functions get ``convergent nounwind``, so that
    O3 keeps every thread of a group on the same call while only their declarations are visible, and
    a loop around a thread-scope call reaches the second O3 (:func:`inline_nvshmem`) whole, to be
    unswitched before it is unrolled."""
    return m.group(0) + " convergent nounwind"


def inline_nvshmem(main, names, sm: int, keep, pb, *, opt: bool = True, outline_objects: bool = True,
                   objects_target=None) -> frozenset:
    """Link the NVSHMEM functions ``names`` that ``main`` declares into it and inline them; returns
    those left out of line (their objects go into the link).

    ``keep``: what stays externally visible (the kernel's own definitions; the device state
    :data:`nvshmem_dsl.linker.store.EXPORTED_GLOBALS` is added); ``pb``: the pass builder for the
    kernel's target; ``outline_objects`` False: everything inlined; ``objects_target``: ``(cpu,
    features, register cap)`` of the kernel, to start building the objects of what it calls out of
    line meanwhile (:func:`nvshmem_dsl.linker.outline.prefetch`).

    After NVSHMEM is inlined the whole O3 pipeline runs once more (``opt``) with LLVM's non-trivial
    loop unswitching (:func:`nvshmem_dsl.linker._llvm.nontrivial_unswitching`), so that a loop of
    ``p``/``g``/atomics splits on NVSHMEM's loop-invariant P2P test into a loop of plain stores /
    loads / atomics and one with the transport calls, as libNVVM does for CuTe kernels (NVSHMEM's
    thread-scope helpers are not ``convergent`` in the bitcode linked: ``unswitch`` of
    :func:`nvshmem_dsl.linker.store.api_module`; what it gains and
    costs: BENCHMARKS.md)."""
    inline, outlined = plan.split(names, sm) if outline_objects else (frozenset(names), frozenset())
    if outlined and objects_target is not None:
        outline.prefetch(outlined, sm, *objects_target)
    try:
        api = store.api_module(inline, sm, unswitch=True,
                               helpers_out=outline_objects and plan.helpers_out())
    except KeyError as e:
        raise NvshmemLinkError(f"{e.args[0]} (NVSHMEM bitcode for sm_{sm})") from None
    check_declarations(main, api, inline, outlined)
    if objects_target is not None:  # the kernel's PTX will ask NVIDIA's compiled helpers about these: now
        calls.ask_archive_ahead(api, *objects_target[:2])
    main.link_in(api)
    internalize(main, set(keep) | set(store.EXPORTED_GLOBALS))
    run(main, pb, "always_inliner", "global_dead_code_eliminate")
    if opt:
        with nontrivial_unswitching():
            pb.getModulePassManager().run(main, pb)
    run(main, pb, "global_dead_code_eliminate")
    return outlined
