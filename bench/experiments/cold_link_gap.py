"""Experiment: where a cold first Numba kernel's time goes after its objects are found or built.

On the GPU host (NVSHMEM 3.8, 2026-11-24) bench/compile_time.py's cold first put kernel spent
~1.2 s after ``outline.objects`` returned, a warm one 0.09 s; on the CPU machine (nvJitLink)
nothing.  This times, in fresh processes with one cache (cold, then warm), ``cuda.jit(signature)``
(which compiles, links and loads the kernel), then ``get_cubin(cc=compute_capability)`` as
compile_time.py asked for it, with the steps inside: ``_link_all`` (our PTX, the objects), the
linker's ``complete()``; it writes the kernel's PTX and the profiles into DIR (default $OUT or
/tmp).  Found (1 x H200, 3.8.0): the jit binds the kernel for (9, 0, "a"), numba-cuda's default
on sm_90+, and the later ``get_cubin(cc=(9, 0))`` compiled and linked it again for sm_90, objects
included (cold: objects 1.39 s, then 1.44 s again; warm 0.003 s twice): the benchmark counted
two compiles.  compile_time.py now times the one a launch makes.

    python bench/experiments/cold_link_gap.py [DIR]
"""
from __future__ import annotations

import os
import pstats
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], ".."))
sys.argv[0] = 'cold_link_gap_child'
from numba import cuda
from numba.cuda.cudadrv import driver
import numba_bench as nb
from nvshmem_dsl.linker import outline
cuda.current_context()
times = {}
def timed(owner, name, label):
    orig = getattr(owner, name)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            times.setdefault(label, []).append(round(time.perf_counter() - t, 3))
    setattr(owner, name, wrapper)
timed(driver._Linker, "complete", "linker.complete")
timed(outline, "objects", "outline.objects")
from nvshmem_dsl.numba import _linker
timed(_linker.NvshmemCodeLibrary, "_link_all", "_link_all")
timed(_linker.NvshmemCodeLibrary, "get_asm_strs", "get_asm_strs")
t0 = time.perf_counter()
disp = cuda.jit(nb.SIGNATURES["put_block"])(nb.KERNELS["put_block"])
kernel = next(iter(disp.overloads.values()))
t1 = time.perf_counter()
cc = cuda.get_current_device().compute_capability
lib = kernel._codelibrary
ptx = lib.get_asm_strs(cc=cc)[0]
t2 = time.perf_counter()
lib.get_cubin(cc=cc)
t3 = time.perf_counter()
out = sys.argv[2]
with open(os.path.join(out, f"put_block-{sys.argv[3]}.ptx"), "w") as fh:
    fh.write(ptx)
print(json.dumps({"label": sys.argv[3], "jit_s": round(t1 - t0, 3), "ptx_s": round(t2 - t1, 3),
                  "cubin_s": round(t3 - t2, 3), "total_s": round(t3 - t0, 3), "ptx_kib": len(ptx) // 1024,
                  "funcs": ptx.count(".func"), "steps": times,
                  "info": str(lib._linkerinfo_cache.get(cc) or "")[-600:]}))
"""


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp")
    cache = tempfile.mkdtemp(prefix="cold-link-gap-")
    env = dict(os.environ, NVSHMEM_DSL_CACHE=cache)
    child = os.path.join(cache, "child.py")
    with open(child, "w") as fh:
        fh.write(CHILD)
    for label in ("cold", "warm"):
        prof = os.path.join(out, f"put_block-{label}.prof")
        done = subprocess.run([sys.executable, "-m", "cProfile", "-o", prof, child, HERE, out, label], env=env,
                              capture_output=True, text=True, timeout=300)
        lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
        print(lines[-1] if lines else f"{label}: failed ({done.returncode}): {done.stderr[-2000:]}", flush=True)
        if os.path.exists(prof):
            stats = pstats.Stats(prof, stream=sys.stdout)
            stats.sort_stats("cumulative").print_stats(r"linker|numba_cuda|cuda/core|cuda\.core|subprocess", 30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
