"""Experiment: NVSHMEM's objects with and without their loops extracted (CPU only).

For each object (default: one per collective family and scope that hybrid linking puts out of line,
the largest first), built by nvshmem_dsl.linker.outline.object_ptx for sm_90 with the default bitcode
(NVSHMEM 3.8 on the CPU machine), with ``NVSHMEM_DSL_OUTLINE_SPLIT=none`` (loops inline) and ``0``
(every object's loops extracted): the API function's own instructions, PTX KiB, functions, the
largest function's KiB, LLVM seconds, ptxas seconds as objects are built (-O3, -maxrregcount=64,
--split-compile=0) and in one thread, and the bytes of spill stores ptxas reports over all functions.

    python bench/experiments/loop_split.py [name,name,...]
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

from nvshmem_dsl.linker import loop_split, outline, store

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from object_sizes import CPU, FEATURES, largest_function_kib, ptxas_seconds  # noqa: E402

OBJECTS = ("nvshmemx_int_sum_reduce_block", "nvshmemx_int_broadcast_block", "nvshmem_int_broadcast",
           "nvshmemx_int_sum_reduce_warp", "nvshmemx_int_fcollect_block", "nvshmem_int_sum_reduce",
           "nvshmemx_int_sum_reducescatter_block")
PTXAS = ("-O3", "-maxrregcount=64")


def spill_stores(ptx: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "o.ptx")
        with open(src, "w") as fh:
            fh.write(ptx)
        out = subprocess.run([outline.ptxas(), "-c", f"-arch={CPU}", "-v", *PTXAS, src, "-o", os.path.join(tmp, "o.cubin")],
                             check=True, capture_output=True, text=True)
        return sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", out.stdout + out.stderr))


def measure(name: str, split: str) -> str:
    os.environ[loop_split.ENV] = split
    t0 = time.perf_counter()
    ptx = outline.specialise_helper_calls(outline.object_ptx([name], 90, CPU, FEATURES))
    llvm_s = time.perf_counter() - t0
    functions = len(re.findall(r"^(?:\.visible |\.weak )?\.func\s[^;]*?\{", ptx, re.M | re.S))
    return (f"split={split}: {len(ptx) // 1024} KiB of PTX, {functions} functions, largest {largest_function_kib(ptx)} KiB, "
            f"LLVM {llvm_s:.2f} s, ptxas {ptxas_seconds(ptx, *PTXAS, *outline._ptxas_options()):.2f} s "
            f"(one thread {ptxas_seconds(ptx, *PTXAS):.2f} s), spill stores {spill_stores(ptx)} B")


def main(argv) -> int:
    names = argv[0].split(",") if argv else list(OBJECTS)
    sizes = store.body_sizes(names, 90)
    print(f"ptxas {outline.ptxas()} {' '.join(outline._ptxas_options())}; {os.cpu_count()} CPUs", flush=True)
    for name in names:
        for split in ("none", "0"):
            print(f"{name} ({sizes.get(name)} instructions) {measure(name, split)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
