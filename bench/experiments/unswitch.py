"""Experiment (CPU only): why CuTe's p and atomics loops are 5x / 2x faster than Numba's.

With NVSHMEM 3.4.5's bitcode, libNVVM (CuTe) *unswitches* a loop of `p` or `atomic_fetch_add`
on NVSHMEM's loop-invariant P2P test and unrolls the P2P-only copy by 8-16: the hot loop is
plain stores / atomics, no branch, no call.  Numba's pipeline (LLVM 22) keeps the test and the
never-taken transport call in every unrolled copy.  This shows what LLVM needs to do the same
to the kernel's IR after NVSHMEM is inlined:

  as is         full O3 on the inlined kernel module
  helpers       + NVSHMEM's thread-level transport helpers not `convergent` (clang marks every
                  CUDA function so; convergent calls forbid non-trivial unswitching)
  opt           LLVM's -enable-nontrivial-unswitch (off in this pipeline for NVPTX)
  helpers+opt   both

Run:  NVSHMEM_HOME=<nvshmem 3.4.5> python bench/experiments/unswitch.py
Found on 2026-11-22 (CPU machine, 3.4.5 wheel; tests/gpu/records/2026-11-22/unswitch.txt): none
of these splits the main loop, because the first O3 (before NVSHMEM is linked) has already
unrolled it by eight: unswitching then only reaches the remainder loop.  What works is what
the linker does since (by default; ``NVSHMEM_DSL_UNSWITCH=0`` turns it off): declarations convergent in the first O3 (no
unrolling yet), then the module O3 with the option after inlining (3.8's bitcode also needs
the helpers not convergent).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import llvmlite.binding as llvm  # noqa: E402

import numba_bench as nb  # noqa: E402
from numba.cuda import compiler  # noqa: E402,F401  (numba-cuda loaded before the linker)
from nvshmem_dsl.linker import rewrites  # noqa: E402
from nvshmem_dsl.numba import _linker  # noqa: E402

def drop_helper_convergence(text: str) -> str:
    """``text`` (a module) with NVSHMEM's thread-level helpers and calls to them not convergent."""
    return rewrites.thread_helpers_not_convergent(text)[0]


def inlined_module(name: str) -> str:
    """The kernel's LLVM module right after NVSHMEM is linked and inlined (as text)."""
    from numba import cuda

    seen = {}
    real_run = _linker._run

    def run(mod, pb, *passes):
        real_run(mod, pb, *passes)
        if passes == ("always_inliner", "global_dead_code_eliminate") and "text" not in seen:
            seen["text"] = str(mod)
    _linker._run = run
    try:
        cuda.compile_ptx(nb.KERNELS[name], nb.SIGNATURES[name], cc=(9, 0))
    finally:
        _linker._run = real_run
    return seen["text"]


def longest_run(lines, is_op, breaks) -> int:
    """The most consecutive ``lines`` for which ``is_op`` holds with no ``breaks`` line between."""
    run = best = 0
    for line in lines:
        if is_op(line):
            run += 1
            best = max(best, run)
        elif breaks(line):
            run = 0
    return best


def hot_run(text: str) -> int:
    """After O3: the longest run of atomics in the kernel with no branch or call between them
    (8 or more: the loop was unswitched before it was unrolled; 1: a test per atomic)."""
    tm = _linker._target_machine("sm_90", "+ptx85", 3)
    mod = llvm.parse_assembly(text)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3))
    pb.getModulePassManager().run(mod, pb)
    kernel = str(mod)
    kernel = kernel[kernel.index("define ptx_kernel"):]
    return longest_run(kernel[:kernel.index("\n}\n")].splitlines(), lambda s: "@llvm.nvvm.atomic" in s,
                       lambda s: " br " in s or "call " in s or s.endswith(":") or "; preds" in s)


def main():
    os.environ[_linker.UNSWITCH_ENV] = "0"  # the kernel as the linker compiled it before unswitching
    text = inlined_module("amo_lat")
    free = drop_helper_convergence(text)
    print(f"{'as is':>12}: longest run of atomics {hot_run(text)}")
    print(f"{'helpers':>12}: longest run of atomics {hot_run(free)}")
    llvm.set_option("", "-enable-nontrivial-unswitch")  # process-wide: hence last
    print(f"{'opt':>12}: longest run of atomics {hot_run(text)}")
    print(f"{'helpers+opt':>12}: longest run of atomics {hot_run(free)}")
    os.environ[_linker.UNSWITCH_ENV] = "1"
    from numba import cuda
    ptx, _ = cuda.compile_ptx(nb.KERNELS["amo_lat"], nb.SIGNATURES["amo_lat"], cc=(9, 0))
    entry = ptx[ptx.index(".entry"):]
    best = longest_run(entry[:entry.index("\n}")].splitlines(), lambda s: "atom." in s,
                       lambda s: "bra" in s or "call" in s or s.startswith("$L"))
    print(f"{'linker, NVSHMEM_DSL_UNSWITCH=1':>12}: longest run of atomics {best} (PTX)")


if __name__ == "__main__":
    main()
