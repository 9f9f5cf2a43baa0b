"""Experiment (CPU): NVSHMEM's out-of-line objects built light or at O3 (``NVSHMEM_DSL_OUTLINE_OPT``):
each object's LLVM step (PTX, KiB and seconds), ptxas's seconds and the registers of the function.

    NVSHMEM_DSL_OBJECT_WORKERS=0 python bench/experiments/object_opt.py nvshmem_float_broadcast ...

Result: bench/results/object-opt-cpu-2026-11-25.txt (why ``auto`` builds the thread-scope objects but
the reductions at O3: nvshmem_dsl.linker.outline.O3_SCOPES).
"""
from __future__ import annotations

import os
import sys
import time

from nvshmem_dsl.linker import outline

CPU, FEATURES = "sm_90a", "+ptx85"


def main(names) -> None:
    features = outline.object_features(FEATURES)
    for opt in ("light", "o3"):
        os.environ[outline.OPT_ENV] = opt
        for name in names:
            t = time.perf_counter()
            ptx = outline.prepare_calls(outline.object_ptx([name], 90, CPU, features))
            llvm_s = time.perf_counter() - t
            t = time.perf_counter()
            cubin = outline.assemble(ptx, CPU, ("-O3", "-maxrregcount=255", *outline._ptxas_options()))
            ptxas_s = time.perf_counter() - t
            regs = outline.cubin_info(cubin)[1].get(name)
            print(f"{opt:5} {name}: PTX {len(ptx) // 1024} KiB, LLVM {llvm_s:.2f} s, ptxas {ptxas_s:.2f} s, regs {regs}",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["nvshmem_float_broadcast", "nvshmem_float_sum_reduce", "nvshmem_barrier_all"])
