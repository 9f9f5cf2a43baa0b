"""Experiment: an object's LLVM step at LLVM's code generation levels 2 and 3 (CPU only).

For a thread-scope broadcast, a thread-scope reduction and a block-scope broadcast (the default sm_90
bitcode, NVSHMEM 3.8 on the CPU machine): the seconds of nvshmem_dsl.linker.object_llvm.emit (parse,
light optimisation, NVPTX code generation) at each level, best of three, the PTX's KiB, and ptxas's
seconds on it (-O3, 64 registers, as objects are built).

    python bench/experiments/object_codegen.py
"""
from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from nvshmem_dsl.linker import _llvm, object_llvm, outline

CPU, FEATURES = "sm_90", "+ptx85"
OBJECTS = ("nvshmem_float_broadcast", "nvshmem_int_sum_reduce", "nvshmemx_float_broadcast_block")


def emit(text: str, name: str, level: int) -> tuple[float, str]:
    """Best-of-three seconds of the LLVM step at code generation ``level``, and its PTX."""
    original = _llvm.target_machine
    _llvm.target_machine = lambda cpu, features, opt: original(cpu, features, level)
    try:
        best, ptx = None, ""
        for _ in range(3):
            t0 = time.perf_counter()
            ptx = object_llvm.emit(text, [name], CPU, FEATURES)
            best = min(best or 1e9, time.perf_counter() - t0)
        return best, ptx
    finally:
        _llvm.target_machine = original


def ptxas_seconds(ptx: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "o.ptx")
        src.write_text(outline.specialise_helper_calls(ptx))
        t0 = time.perf_counter()
        subprocess.run([outline.ptxas(), "-c", f"-arch={CPU}", "-O3", "-maxrregcount=64", *outline._ptxas_options(),
                        str(src), "-o", str(Path(tmp, "o.cubin"))], check=True)
        return time.perf_counter() - t0


def main() -> None:
    for name in OBJECTS:
        text = outline.object_ir([name], 90)
        for level in (3, 2):
            seconds, ptx = emit(text, name, level)
            print(f"{name:32} codegen {level}: LLVM {seconds:.2f} s, PTX {len(ptx) >> 10} KiB, "
                  f"ptxas {ptxas_seconds(ptx):.2f} s", flush=True)


if __name__ == "__main__":
    main()
