"""Experiment (CPU): build time and registers of the block-scope collectives' objects at 64 and 255 registers,
preserving 2 registers for their callers (NVSHMEM_DSL_ABI_PRESERVE=2, CUDA 13's ptxas: PTXAS, default
/usr/local/bin/ptxas), each from an empty object folder.

Run: python bench/experiments/object_caps_time.py
"""
import os
import tempfile
import time
from pathlib import Path
os.environ["NVSHMEM_DSL_ABI_PRESERVE"] = "2"
from nvshmem_dsl.linker import outline
outline.ptxas = lambda: os.environ.get("PTXAS", "/usr/local/bin/ptxas")
for name in ["nvshmemx_float_sum_reduce_block", "nvshmemx_float_broadcast_block"]:
    for cap in (64, 255):
        d = Path(tempfile.mkdtemp())
        outline._objects_dir = lambda d=d: d
        t = time.perf_counter()
        paths = outline.objects([name], 90, "sm_90a", "+ptx85", cap)
        dt = time.perf_counter() - t
        main = [p for p in paths if p.name.startswith(name + "-")][0]
        regs = outline.cubin_info(main.read_bytes())[1]
        print(f"{name} cap {cap}: {dt:.1f} s for {len(paths)} objects, registers {max(regs.values()) if regs else None}", flush=True)
