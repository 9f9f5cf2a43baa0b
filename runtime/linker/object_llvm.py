"""The LLVM part of building an out-of-line object: its IR text to PTX.

:func:`nvshmem_dsl.linker.outline.object_ptx` assembles an object's IR (:func:`.store.api_text`,
no LLVM) and hands it to :func:`emit`, in the calling process or in one of the object workers
(:mod:`.object_workers`), which load this folder on its own: so this module imports nothing of
the package but the linker's own LLVM helpers and text tools.

Also the names of specialised helpers (:func:`specialised_name`, :func:`split_specialised`),
which both sides read.
"""

from __future__ import annotations

import re

from . import loop_split, pieces

#: ``<helper>$p<position>_<value>...``: NVSHMEM's helper ``<helper>`` with the 32-bit parameters at
#: those positions fixed (``m`` for a minus sign), an object of its own
#: (:func:`nvshmem_dsl.linker.calls.specialise_helper_calls`); ``<helper>$p``: the helper, fixing
#: none, under a name of its own.
SPECIALISED = "$p"

#: How the objects' code may be optimised (:data:`nvshmem_dsl.linker.outline.OPT_ENV`), least first.
OPT_LEVELS = ("quick", "light", "o3")

#: LLVM's code generation level for each (NVPTX's code generation is most of an object's LLVM
#: time; ptxas optimises what it emits): a broadcast's object 0.41 s at 2, 0.62 s at 3, its PTX
#: within 1 KiB and ptxas as fast (bench/results/object-codegen-cpu-2026-11-24.txt); ``quick``, the
#: split first forms' (:func:`nvshmem_dsl.linker.outline._first_form`), at 0: the light passes, then
#: the split block reduction's LLVM step 1.28 s instead of 2.33 s, ptxas up to 0.35 s longer (CPU:
#: bench/results/object-codegen-quick-cpu-2026-12-02.txt), its cold kernel 4.8-6.2 s instead of 6.5-6.6 s
#: and the reduction 0.62x of C++ instead of 0.54x; every collective quick ran 1.05-1.27x as long as
#: light at 8 B, so the O3 tier's first forms stay light (1 x H200, NVSHMEM 3.8,
#: tests/gpu/records/2026-12-02/h200-quick-first-forms.txt).
CODEGEN_LEVELS = {"quick": 0, "light": 2, "o3": 3}


def specialised_name(helper: str, constants: dict) -> str:
    """The name of ``helper`` specialised on ``constants`` (position -> value)."""
    return helper + "".join(f"{SPECIALISED}{pos}_{str(val).replace('-', 'm')}" for pos, val in sorted(constants.items()))


def split_specialised(name: str) -> tuple[str, dict]:
    """``(helper, {position: value})`` of a :func:`specialised_name` (``(name, {})`` for others)."""
    base, *parts = name.split(SPECIALISED)
    constants = {}
    for part in parts:
        if not part:  # ``<helper>$p``: the helper under a name of its own
            continue
        pos, _, val = part.partition("_")
        constants[int(pos)] = int(val.replace("m", "-"))
    return base, constants


def emit(text: str, names, cpu: str, features: str, opt: str = "light", split_loops: bool = False,
         types=None) -> str:
    """PTX for ``cpu``/``features`` defining the functions ``names`` (``.visible``; a
    :func:`specialised_name` is defined here from its helper) from the IR ``text`` that holds
    them and everything they call (internal in the PTX), optimised as ``opt`` says (``light``:
    interprocedural constant propagation, instcombine, unrolling of the rewritten copy loops;
    ``quick``: the same, emitted at code generation level 0 (:data:`CODEGEN_LEVELS`);
    ``o3``: LLVM's O3 with non-trivial loop unswitching), their loops made functions of their own
    with ``split_loops`` (:mod:`.loop_split`).  ``types``: ``{name: type}`` each function must
    have (as :func:`._llvm.function_shape` spells it), else :class:`RuntimeError`."""
    import llvmlite.binding as llvm

    from ._llvm import TRIPLE, function_shape, internalize, nontrivial_unswitching, run, target_machine

    if opt not in OPT_LEVELS:
        raise ValueError(f"opt={opt!r}: choose one of {', '.join(OPT_LEVELS)}")
    mod = llvm.parse_assembly(text)
    for name, want in (types or {}).items():  # the kernel's declarations are checked against the op table
        have = function_shape(mod.get_function(name).global_value_type)
        if have != want:
            raise RuntimeError(f"NVSHMEM's {name} is {have}, the op table says {want}")
    tm = target_machine(cpu, features, CODEGEN_LEVELS[opt])
    mod.triple, mod.data_layout = TRIPLE, str(tm.target_data)
    for name in names:
        if SPECIALISED in name:
            _define_specialised(mod, name)
    internalize(mod, set(names))  # a specialised helper's own is internal now: IPSCCP folds the constants
    for name in names:  # NVSHMEM's helpers are internal in its bitcode
        mod.get_function(name).linkage = llvm.Linkage.external
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3))
    if opt == "o3":
        with nontrivial_unswitching():
            pb.getModulePassManager().run(mod, pb)
    else:
        run(mod, pb, "ipsccp", "global_opt", "dead_arg_elimination")
        fpm = llvm.create_new_function_pass_manager()
        for p in ("instruction_combine", "simplify_cfg", "loop_unroll", "simplify_cfg"):
            getattr(fpm, f"add_{p}_pass")()  # loop_unroll: the copy loops the copy rewrite marks
        for fn in mod.functions:
            if not fn.is_declaration:
                fpm.run(fn, pb)
    run(mod, pb, "global_dead_code_eliminate")
    if split_loops:
        loop_split.extract_loops(mod, pb)  # ptxas's time grows faster than a function's size
    return tm.emit_assembly(mod)


def _define_specialised(mod, name: str) -> None:
    """Define the :func:`specialised_name` ``name`` in ``mod`` (which defines its helper): a
    function of the helper's type that calls it with the constants in their places; without
    constants, the helper renamed."""
    import llvmlite.binding as llvm

    base, constants = split_specialised(name)
    fn = mod.get_function(base)
    if not constants:  # ``<helper>$p``: the helper itself, renamed
        fn.name = name
        return
    fn.linkage = llvm.Linkage.external  # for the definition below to link to it
    printed = str(fn)
    define = next(line for line in printed.splitlines() if line.startswith("define "))
    cc = "fastcc " if re.search(r"^define [^@]*\bfastcc\b", define) else ""
    ret = str(fn.global_value_type.get_function_return())
    params = [str(p) for p in fn.global_value_type.get_function_parameters()]
    args = []
    for i, ty in enumerate(params):
        if i not in constants:
            args.append(f"{ty} %a{i}")
        elif ty == "i1":
            args.append(f"i1 {'true' if constants[i] else 'false'}")
        elif ty in ("i8", "i16", "i32"):
            args.append(f"{ty} {constants[i]}")
        else:
            raise ValueError(f"{name}: parameter {i} of {base} is {ty}, not a 32-bit constant")
    call = f'call {cc}{ret} @"{base}"({", ".join(args)})'
    body = f"  {call}\n  ret void" if ret == "void" else f"  %r = {call}\n  ret {ret} %r"
    text = (pieces.function_declaration(define.encode()).decode().rsplit(" #", 1)[0] + "\n\n"
            f'define {cc}{ret} @"{name}"({", ".join(f"{t} %a{i}" for i, t in enumerate(params))}) {{\n{body}\n}}\n')
    wrapper = llvm.parse_assembly(text)
    wrapper.triple, wrapper.data_layout = mod.triple, mod.data_layout
    mod.link_in(wrapper)
