"""Experiment: an object's LLVM step at each of its optimisation levels (CPU only).

For a thread-scope broadcast, a thread-scope reduction, a block-scope broadcast and the block reduction
(split, as its first form is: nvshmem_dsl.linker.loop_split) of the default sm_90 bitcode (NVSHMEM 3.8 on
the CPU machine): the seconds of nvshmem_dsl.linker.object_llvm.emit (parse, optimisation, NVPTX code
generation at object_llvm.CODEGEN_LEVELS) at each level of ``--opts``, best of three, the PTX's KiB, and
ptxas's seconds on it (-O3, 64 registers, as objects are built; best of ``--ptxas-runs``).

    python bench/experiments/object_codegen.py [--opts quick,light,o3]
"""
from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from nvshmem_dsl.linker import object_llvm, outline

CPU, FEATURES = "sm_90", "+ptx85"
#: name -> whether its loops are split (as its object's first form has them)
OBJECTS = {"nvshmem_float_broadcast": False, "nvshmem_int_sum_reduce": False,
           "nvshmemx_float_broadcast_block": False, "nvshmemx_float_sum_reduce_block": True}


def emit(text: str, name: str, opt: str, split: bool) -> tuple[float, str]:
    """Best-of-three seconds of the LLVM step at ``opt``, and its PTX."""
    best, ptx = None, ""
    for _ in range(3):
        t0 = time.perf_counter()
        ptx = object_llvm.emit(text, [name], CPU, FEATURES, opt=opt, split_loops=split)
        best = min(best or 1e9, time.perf_counter() - t0)
    return best, ptx


def ptxas_seconds(ptx: str, runs: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "o.ptx")
        src.write_text(outline.specialise_helper_calls(ptx))
        best = None
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([outline.ptxas(), "-c", f"-arch={CPU}", "-O3", "-maxrregcount=64", *outline._ptxas_options(),
                            str(src), "-o", str(Path(tmp, "o.cubin"))], check=True)
            best = min(best or 1e9, time.perf_counter() - t0)
        return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opts", default=",".join(object_llvm.OPT_LEVELS))
    ap.add_argument("--ptxas-runs", type=int, default=2)
    args = ap.parse_args()
    for name, split in OBJECTS.items():
        text = outline.object_ir([name], 90)
        for opt in args.opts.split(","):
            seconds, ptx = emit(text, name, opt, split)
            print(f"{name:32} {'split ' if split else ''}{opt} (codegen {object_llvm.CODEGEN_LEVELS[opt]}): "
                  f"LLVM {seconds:.2f} s, PTX {len(ptx) >> 10} KiB, ptxas {ptxas_seconds(ptx, args.ptxas_runs):.2f} s",
                  flush=True)


if __name__ == "__main__":
    main()
