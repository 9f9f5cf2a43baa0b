"""LLVM helpers shared by the Numba linker (:mod:`nvshmem_dsl.numba._linker`) and the out-of-line
objects (:mod:`nvshmem_dsl.linker.outline`)."""

from __future__ import annotations

import contextlib
import functools
import re

import llvmlite.binding as llvm

TRIPLE = "nvptx64-nvidia-cuda"

#: The highest PTX ISA (x10) LLVM's NVPTX backend writes, by LLVM major version (llvmlite >= 0.50:
#: LLVM 22, PTX 9.0); a newer LLVM is asked (:func:`max_ptx_isa`).
_MAX_PTX = {22: 90}


@functools.lru_cache(maxsize=None)
def target_machine(cpu: str, features: str, opt: int):
    """The NVPTX target machine for ``cpu`` (``sm_90a`` ...) and ``features`` (``+ptx85`` ...),
    cached (:func:`new_target_machine`)."""
    return new_target_machine(cpu, features, opt)


def new_target_machine(cpu: str, features: str, opt: int):
    """A new NVPTX target machine for ``cpu`` and ``features``, its PTX ISA at most what this LLVM
    writes (:func:`ptx_features`); for a caller that sets LLVM options around its making (Triton's
    short pointers)."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=cpu, features=ptx_features(features), opt=opt)


def ptx_features(features: str) -> str:
    """LLVM ``features`` (``+ptx94`` ...) with the PTX ISA lowered to what this LLVM writes
    (:func:`max_ptx_isa`).  One it does not know it ignores, with a warning on stderr, and writes the
    SM's default instead (8.0 for sm_90), below what NVSHMEM's code needs (``fence.acquire``: 8.6);
    Triton 3.9 with CUDA 13 and CuTe's cu13 build ask for 9.4.  Code for the lower ISA is valid under
    the higher one, which a front-end may write in its ``.version`` after."""
    return re.sub(r"\+ptx(\d+)", lambda m: f"+ptx{max_ptx_isa(int(m.group(1)))}", features)


@functools.lru_cache(maxsize=None)
def max_ptx_isa(wanted: int) -> int:
    """``wanted`` (a PTX ISA x10), or the highest below it that this LLVM writes."""
    known = _MAX_PTX.get(llvm.llvm_version_info[0])
    if known is not None:
        return min(wanted, known)
    for isa in range(wanted, 60, -1):  # a newer LLVM: the first ISA it writes as asked
        if _writes(isa):
            return isa
    return wanted


def _writes(isa: int) -> bool:
    """Whether this LLVM's NVPTX backend writes ``.version`` ``isa`` when asked for it."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu="sm_90", features=f"+ptx{isa}")
    asm = tm.emit_assembly(llvm.parse_assembly(f'target triple = "{TRIPLE}"\ndefine void @f() {{ ret void }}'))
    return f".version {isa // 10}.{isa % 10}\n" in asm


def shape(t) -> str:
    """A type's structure, identified structs spelt out (the IR linker maps
    identified structs of the same body onto each other)."""
    if t.is_struct:
        return "{" + ",".join(shape(e) for e in t.elements) + "}"
    return str(t)


def function_shape(t) -> str:
    """A function type as :func:`shape` spells it, e.g. ``i32 (i32, ptr, ptr, i64)`` (as the op
    table's ``llvm_type``)."""
    ret = shape(t.get_function_return())
    params = ", ".join(shape(p) for p in t.get_function_parameters())
    return f"{ret} ({params}{', ...' if t.is_function_vararg else ''})"


def internalize(mod, keep) -> None:
    """Give every definition of ``mod`` but those named in ``keep`` internal linkage."""
    for v in (*mod.functions, *mod.global_variables):
        if v.is_declaration or v.name in keep or v.name.startswith("llvm."):
            continue
        if v.linkage not in (llvm.Linkage.internal, llvm.Linkage.private):
            v.linkage = "internal"


def run(mod, pb, *passes) -> None:
    """Run the module passes ``passes`` (names of llvmlite's ``add_<name>_pass``) on ``mod``."""
    mpm = llvm.create_new_module_pass_manager()
    for p in passes:
        getattr(mpm, f"add_{p}_pass")()
    mpm.run(mod, pb)


@contextlib.contextmanager
def nontrivial_unswitching():
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
