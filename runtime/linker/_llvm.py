"""LLVM helpers shared by the Numba linker (:mod:`nvshmem_dsl.numba._linker`) and the out-of-line
objects (:mod:`nvshmem_dsl.linker.outline`)."""

from __future__ import annotations

import contextlib
import functools

import llvmlite.binding as llvm

TRIPLE = "nvptx64-nvidia-cuda"


@functools.lru_cache(maxsize=None)
def target_machine(cpu: str, features: str, opt: int):
    """The NVPTX target machine for ``cpu`` (``sm_90a`` ...) and ``features`` (``+ptx85`` ...)."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=cpu, features=features, opt=opt)


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
