"""The linker's interface to the DSL front-ends: each function does one whole step of a kernel's link.

The front-ends (:mod:`nvshmem_dsl.numba._linker`, :mod:`nvshmem_dsl.triton._compile`,
:mod:`nvshmem_dsl.cute._link`) import from the linker only this module, :mod:`.nvvm` (CuTe's
bitcode for libNVVM), :mod:`.module_init` and :mod:`.hooks` (NVSHMEM's initialisation of every
loaded module) and :mod:`.info` (what ``python -m nvshmem_dsl`` shows), and of each only the
names of its ``__all__`` (``tests/test_linker_layers.py`` checks it).  A kernel's link, in the
order the steps come:

1. plan (:mod:`.plan`): which of the NVSHMEM functions it calls are inlined, which called out of
   line: the mode (:func:`outline_mode`, :func:`override`), :func:`calls_out_of_line`;
2. Numba and Triton: :func:`link_nvshmem` takes the kernel as an llvmlite module whose NVSHMEM
   functions are declarations (marked by :func:`mark_declarations`), for a
   :func:`target_machine`: the inlined ones' definitions, and everything they call, from the piece
   store of NVSHMEM's bitcode (:func:`nvshmem_dsl.linker.store.api_module`), with the rewrites
   (:mod:`.rewrites`) applied, checked against the kernel's declarations
   (:func:`check_declarations`), linked in, internalized, inlined and optimised once more; the
   out-of-line ones' objects started meanwhile (:func:`prefetch_objects`).  (CuTe: libNVVM links
   the bitcode of :func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_for`.)
3. the kernel's PTX made ready to call the objects (:func:`prepare_calls`);
4. objects (:mod:`.outline`): the out-of-line calls' cached relocatable objects
   (:func:`objects`, for a front-end's own link: Numba's);
5. link (:mod:`.link`): nvJitLink makes the cubin of the PTX and those objects
   (:func:`link_cubin`; PTX it does not read, :func:`nvjitlink_reads`, compiled by ptxas first,
   :func:`ptxas_object`).

Besides: the name of NVSHMEM's device state in a loaded module (:data:`DEVICE_STATE`, the host's
test for a module to initialise), the bitcode prepared while NVSHMEM initialises
(:func:`prefetch_device_code`), the registers a thread of a block may have
(:func:`registers_a_thread`, Numba's launch error).
"""

from __future__ import annotations

# (llvmlite's LLVM, :mod:`._llvm`, is imported by the functions that use it: importing a front-end
# loads none; a warm Triton cache needs none)

import contextlib
import functools
import re

from . import abi, calls, code_env, link, outline, plan, store
from .calls import prepare_calls
from .link import NvshmemLinkError, nvjitlink_reads, ptxas_object
from .outline import registers_a_thread
from .plan import override
from .store import DEVICE_STATE
from .store_file import _arch_number

__all__ = [
    # the plan
    "OUTLINE_ENV", "CODE_ENV", "calls_out_of_line", "outline_mode", "override",
    # the kernel's LLVM module (Numba, Triton)
    "default_features", "link_nvshmem", "mark_declarations", "nvshmem_functions", "target_machine",
    # its PTX, objects and link
    "NvshmemLinkError", "extern_calls", "link_cubin", "nvjitlink_reads", "objects", "objects_ptx_isa",
    "prefetch_objects", "prepare_calls", "ptxas_object",
    # for the host and the launch
    "DEVICE_STATE", "prefetch_device_code", "registers_a_thread",
]

#: The variable that sets the outlining mode (:func:`outline_mode`).
OUTLINE_ENV = plan.ENV

#: The environment variables that change the code a kernel is linked with (a DSL's cache key).
CODE_ENV = code_env.ALL


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
    from . import _llvm

    bad = []
    for name in sorted(names | outlined):
        if name in outlined:
            want = _optable.device_ops()[name]["llvm_type"]
        else:
            want = _llvm.function_shape(api.get_function(name).global_value_type)
        have = _llvm.function_shape(main.get_function(name).global_value_type)
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
    from . import _llvm

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
    _llvm.internalize(main, set(keep) | set(store.EXPORTED_GLOBALS))
    _llvm.run(main, pb, "always_inliner", "global_dead_code_eliminate")
    if opt:
        with _llvm.nontrivial_unswitching():
            pb.getModulePassManager().run(main, pb)
    _llvm.run(main, pb, "global_dead_code_eliminate")
    return outlined


# --------------------------------------------------------------------------
# The plan


def outline_mode() -> str:
    """``auto``, ``none`` or ``all``: how NVSHMEM functions are split between inlined and called out
    of line, as :func:`override` or ``$NVSHMEM_DSL_OUTLINE`` (:data:`OUTLINE_ENV`) says
    (:func:`nvshmem_dsl.linker.plan.mode`)."""
    return plan.mode()


def calls_out_of_line(names, arch, bc_path=None, how=None) -> frozenset:
    """Of the NVSHMEM functions ``names``, those a kernel for ``arch`` (``sm_90a``, 90, ...) linking
    the bitcode ``bc_path`` (default: the host library's) calls in their objects, in outlining mode
    ``how`` (default: :func:`outline_mode`): :func:`nvshmem_dsl.linker.plan.split`."""
    with plan.override(how) if how is not None else contextlib.nullcontext():
        return plan.split(names, _arch_number(arch), bc_path)[1]


def objects_ptx_isa() -> int | None:
    """The highest PTX ISA (x10) of a kernel that may call NVSHMEM's objects: what the installed
    nvJitLink, which links it with them, reads; None where kernels call no objects (mode ``none``,
    no ptxas to build them or no nvJitLink to link them: everything is inlined)."""
    return link.nvjitlink_ptx_isa() if plan.helpers_out() else None


def default_features(arch) -> str:
    """The LLVM features of a kernel for ``arch`` and of the objects it calls: the SM's default PTX
    ISA (:func:`nvshmem_dsl.linker.link.default_ptx`), e.g. ``+ptx85``."""
    return link.default_features(_arch_number(arch))


def prefetch_device_code(arch) -> None:
    """Start preparing what the first kernels for ``arch`` need of NVSHMEM's device bitcode, if it
    is not cached yet (:func:`nvshmem_dsl.linker.store.prefetch`)."""
    store.prefetch(_arch_number(arch))


# --------------------------------------------------------------------------
# The kernel's LLVM module (Numba, Triton)


def mark_declarations(llvm_ir: str) -> str:
    """``llvm_ir`` with its declarations of NVSHMEM functions marked (:func:`mark_declaration`), as
    :func:`link_nvshmem` wants them before the front-end's first optimisation."""
    return DECLARATION.sub(mark_declaration, llvm_ir)


@functools.lru_cache(maxsize=None)
def target_machine(cpu: str, features: str, opt: int = 3, short_pointers: bool = False):
    """The NVPTX target machine for ``cpu`` (``sm_90a`` ...) and ``features`` (``+ptx85`` ...),
    its PTX ISA at most what llvmlite's LLVM writes (:func:`nvshmem_dsl.linker._llvm.ptx_features`);
    ``short_pointers``: 32-bit shared/local pointers, as Triton's ``nvptx-short-ptr`` (LLVM reads
    that option when the machine is made; it is set for the moment, under llvmlite's lock, so that
    nothing else in the process sees it).  Cached."""
    from . import _llvm

    import llvmlite.binding as llvm

    if not short_pointers:
        return _llvm.new_target_machine(cpu, features, opt)
    with getattr(llvm.ffi.lib, "_lock", None) or contextlib.nullcontext():
        llvm.set_option("nvshmem-dsl", "-nvptx-short-ptr=true")
        try:
            return _llvm.new_target_machine(cpu, features, opt)
        finally:
            llvm.set_option("nvshmem-dsl", "-nvptx-short-ptr=false")


def link_nvshmem(main, names, arch, tm, cpu: str, features: str, keep, *, opt: int = 3,
                 optimise_first: bool = False, libraries=(), outline_objects: bool = True,
                 prefetch: bool = False, blocks=(None,), max_registers=None) -> frozenset:
    """Link the NVSHMEM functions ``names`` that the kernel's llvmlite module ``main`` declares
    (marked: :func:`mark_declarations`) into it for SM ``arch``, inlined but for those called out of
    line, which it returns (their objects go into the link: :func:`objects`, :func:`link_cubin`).

    ``tm``: the :func:`target_machine` for ``cpu`` and ``features``, whose pass builder runs at
    ``opt``; ``keep``: the kernel's definitions that stay externally visible (with the device state,
    :data:`nvshmem_dsl.linker.store.EXPORTED_GLOBALS`).  Before NVSHMEM: each of ``libraries``
    (llvmlite modules: Numba's libdevice) linked in and what of it is unused dropped, then, with
    ``optimise_first``, O3 (at ``opt``) on the kernel while NVSHMEM's functions are still
    declarations.  ``outline_objects`` False: everything inlined; ``prefetch``: the objects of what
    is called out of line start building meanwhile (:func:`prefetch_objects`), at the register cap
    of the kernels' block sizes ``blocks`` and ``max_registers`` (:func:`nvshmem_dsl.linker.outline.block_cap`).
    Then :func:`inline_nvshmem`."""
    from . import _llvm

    import llvmlite.binding as llvm

    keep = set(keep) | set(store.EXPORTED_GLOBALS)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(opt))
    for library in libraries:
        main.link_in(library)
        _llvm.internalize(main, keep)
        _llvm.run(main, pb, "global_dead_code_eliminate")
    if optimise_first and opt:
        pb.getModulePassManager().run(main, pb)
    if not names:
        return frozenset()
    cap = outline.block_cap(blocks, [max_registers])
    return inline_nvshmem(main, names, _arch_number(arch), keep, pb, opt=bool(opt), outline_objects=outline_objects,
                          objects_target=(cpu, features, cap) if prefetch else None)


# --------------------------------------------------------------------------
# The objects and the link


def extern_calls(ptx, of=None) -> frozenset:
    """The NVSHMEM functions (and helpers) that PTX ``ptx`` (a text or a list of them) calls out of
    line (:func:`nvshmem_dsl.linker.calls.extern_calls`); with ``of``, those of them that are functions
    of ``of`` or their specialisations (:func:`nvshmem_dsl.linker.outline.split_specialised`)."""
    names = calls.extern_calls(ptx)
    return names if of is None else frozenset(n for n in names if outline.split_specialised(n)[0] in of)


def prefetch_objects(names, arch, cpu: str, features: str, blocks=(None,), max_registers=None, bc_path=None):
    """Start building the objects of the NVSHMEM functions ``names`` for a kernel of SM ``arch``
    compiled for ``cpu`` and ``features``, at the register cap of its block sizes ``blocks`` and
    ``max_registers``, while the kernel compiles (:func:`nvshmem_dsl.linker.outline.prefetch`)."""
    return outline.prefetch(names, _arch_number(arch), cpu, features, outline.block_cap(blocks, [max_registers]),
                            bc_path)


def objects(ptx, arch, target=None, *, names=None, max_registers=None, bc_path=None) -> tuple[list, bool]:
    """``(paths, provisional)``: the objects a kernel's PTX ``ptx`` (a text or a list of them), for
    SM ``arch``'s bitcode, is to be linked with, those of the NVSHMEM functions ``names`` (default:
    those it calls out of line, :func:`extern_calls`; none: no objects), at the register cap its
    declared block sizes and ``max_registers`` leave (:func:`nvshmem_dsl.linker.outline.register_cap`);
    and whether any of them is provisional (:func:`nvshmem_dsl.linker.outline.provisional`: a DSL's
    disk cache is not to keep the kernel linked with it).

    ``target``: ``(cpu, features)`` the kernel was compiled for; None: read from the PTX's
    ``.target`` and ``.version``, with NVIDIA's compiled helpers asked about the helpers it calls
    (:func:`nvshmem_dsl.linker.outline.objects_for`, for PTX linked by hand; ``names`` then ignored)."""
    texts = [ptx] if isinstance(ptx, (str, bytes)) else list(ptx)
    sm = _arch_number(arch)
    if target is None:
        paths = outline.objects_for(texts[0], sm, max_registers, bc_path)
    else:
        names = extern_calls(texts) if names is None else frozenset(names)
        paths = (outline.objects(names, sm, *target, outline.register_cap(texts, max_registers), bc_path)
                 if names else [])
    return paths, outline.provisional(paths)


def link_cubin(ptx: str, arch, options=(), *, target=None, names=None, max_registers=None, bc_path=None,
               what: str = "a kernel", hint: str = "") -> tuple[bytes, bool]:
    """``(cubin, provisional)``: the executable cubin nvJitLink links of the kernel's PTX ``ptx``
    (:func:`ptx_for_nvjitlink`; ptxas options ``options``) and the objects of the NVSHMEM functions it
    calls out of line (:func:`objects`, its arguments ``target``, ``names``, ``max_registers``,
    ``bc_path``), for the PTX's target; and whether an object was provisional.  A failure, or a cubin
    that still lacks an NVSHMEM function or helper, raises :class:`NvshmemLinkError` naming ``what``,
    with ``hint``."""
    paths, provisional = objects(ptx, arch, target, names=names, max_registers=max_registers, bc_path=bc_path)
    cpu = target[0] if target is not None else link.ptx_target(ptx)[0]
    inputs = [("kernel.ptx", ptx_for_nvjitlink(ptx).encode())] + [(p.name, p.read_bytes()) for p in paths]
    cubin = link.nvjitlink_cubin(cpu, inputs, options, what=what, hint=hint)
    missing = sorted(n for n in undefined_symbols(cubin) if n.startswith("nvshmem") or calls.is_helper(n))
    if missing:
        raise NvshmemLinkError(f"the cubin linked of {what} still lacks {missing}" + (f"; {hint}" if hint else ""))
    return cubin, provisional


def undefined_symbols(cubin: bytes) -> frozenset:
    """The symbols an ELF cubin references but does not define."""
    return frozenset(n for n, defined in link.elf_symbols(cubin) if n and not defined)
