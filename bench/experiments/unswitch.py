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
Found on 2026-11-22 (CPU machine, 3.4.5 wheel; tests/gpu/records/2026-11-22/unswitch.txt):
"opt" is enough with 3.4.5 (a first run that linked 3.8's bitcode by mistake needed both), and
only in the module pipeline: the function pipeline Numba's linker runs after inlining does not
unswitch even with the option.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import llvmlite.binding as llvm  # noqa: E402

import numba_bench as nb  # noqa: E402
from numba.cuda import compiler  # noqa: E402,F401  (numba-cuda loaded before the linker)
from nvshmem_dsl.numba import _linker  # noqa: E402

_ATTR = re.compile(r'^attributes #(\d+) = \{([^\n]*)\}$', re.M)
_GROUP_SCOPE = re.compile(r'threadgroup_t[123]')  # warp, warpgroup, block instances stay convergent


def drop_helper_convergence(text: str) -> str:
    """``text`` (a module) with thread-level `_Z*` functions and calls to them not convergent."""
    groups = {int(m.group(1)): m.group(2) for m in _ATTR.finditer(text)}
    plain = {g: re.sub(r'\bconvergent ?', '', b) for g, b in groups.items() if 'convergent' in b}
    new = {g: max(groups) + 1 + k for k, g in enumerate(plain)}
    helpers = {m.group(1) for m in re.finditer(r'^define [^\n]*@"?(_Z[\w.$]+)"?\(', text, re.M)
               if not _GROUP_SCOPE.search(m.group(1))}

    def swap(m):
        g = int(m.group(3))
        return f"{m.group(1)}#{new[g]}{m.group(4)}" if m.group(2) in helpers and g in new else m.group(0)
    text = re.sub(r'^(define [^\n]*@"?([\w.$]+)"?\([^\n]*\)[^\n]*?)#(\d+)( \{)$', swap, text, flags=re.M)
    text = re.sub(r'(call [^\n]*@"?([\w.$]+)"?\([^\n]*\) )#(\d+)()$', swap, text, flags=re.M)
    return text + "\n" + "\n".join(f"attributes #{new[g]} = {{{b}}}" for g, b in plain.items()) + "\n"


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


def unswitched(text: str) -> bool:
    tm = _linker._target_machine("sm_90", "+ptx85", 3)
    mod = llvm.parse_assembly(text)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3))
    pb.getModulePassManager().run(mod, pb)
    kernel = str(mod)
    kernel = kernel[kernel.index("define ptx_kernel"):]
    return ".us" in kernel[:kernel.index("\n}\n")]


def main():
    text = inlined_module("amo_lat")
    free = drop_helper_convergence(text)
    print(f"{'as is':>12}: unswitched={unswitched(text)}")
    print(f"{'helpers':>12}: unswitched={unswitched(free)}")
    llvm.set_option("", "-enable-nontrivial-unswitch")  # process-wide: hence last
    print(f"{'opt':>12}: unswitched={unswitched(text)}")
    print(f"{'helpers+opt':>12}: unswitched={unswitched(free)}")


if __name__ == "__main__":
    main()
