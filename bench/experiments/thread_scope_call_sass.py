"""Experiment (CPU): the SASS of a loop of thread-scope broadcasts, Numba (a kernel of one thread, launch_bounds)
against Triton (a program of one warp whose lane 0 calls), NVSHMEM's objects under .abi_preserve 2 (CUDA 13's
ptxas and nvlink: PTXAS/NVLINK, default /usr/local/bin's), to see why Triton's thread-scope collectives take
0.1-0.45 us a call more than Numba's calling the same objects (BENCHMARKS.md, misses).
Prints each kernel's SASS up to its first NOP and the synchronisation instructions of the broadcast's objects.

Run: python bench/experiments/thread_scope_call_sass.py   (numba-cuda, triton, NVSHMEM's bitcode; no GPU)
"""
import os
import re
import subprocess
import tempfile
os.environ["NVSHMEM_DSL_ABI_PRESERVE"] = "2"
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp())
from nvshmem_dsl.linker import outline
PTXAS = os.environ.get("PTXAS", "/usr/local/bin/ptxas")
NVLINK = os.environ.get("NVLINK", "/usr/local/bin/nvlink")
outline.ptxas = lambda: PTXAS
NVD = ".venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/nvdisasm"
tmp = tempfile.mkdtemp()

def sass_of(ptx, tag):
    ptx = ptx.replace(".target sm_90a", ".target sm_90")
    src, obj, out = f"{tmp}/{tag}.ptx", f"{tmp}/{tag}.o", f"{tmp}/{tag}.cubin"
    open(src, "w").write(ptx)
    subprocess.run([PTXAS, "-c", "-arch=sm_90", "-O3", src, "-o", obj], check=True)
    objs = [str(p) for p in outline.objects_for(ptx, 90)]
    subprocess.run([NVLINK, "-arch=sm_90", obj, *objs, "-o", out], check=True)
    entry = re.search(r"\.entry (\w+)", ptx).group(1)
    s = subprocess.run([NVD, "-c", out], capture_output=True, text=True).stdout
    part = s.split(f".text.{entry}:", 1)[-1].split(".section", 1)[0]
    return part

from numba import cuda, float32, int32, int64
import nvshmem_dsl.numba as nvn
@cuda.jit(launch_bounds=(1,))
def k(dst, src, nelems, iters):
    for _ in range(iters):
        nvn.broadcast(nvn.Team.TEAM_WORLD, dst, src, nelems, 0)
ptx, _ = cuda.compile_ptx(k.py_func, (float32[:], float32[:], int64, int32), cc=(9, 0))
ptx = ptx.replace(".target sm_90a", ".target sm_90")
def show(tag, sass):
    print(f"=== {tag}")
    for line in sass.splitlines():
        if re.search(r"/\*[0-9a-f]{4}\*/", line):
            if "NOP" in line:
                break
            print(line.strip()[:100])


show("numba", sass_of(ptx, "numba"))

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import nvshmem_dsl.triton as nv
from nvshmem_dsl.triton import _compile as _tc
_tc.link_cubin = lambda ptx, cap, options=None: b'\0' * 16
@triton.jit
def coll(dst, src, nelems, iters):
    for i in range(iters):
        nv.broadcast(nv.TEAM_WORLD, dst, src, nelems, 0)
ck = triton.compile(ASTSource(fn=coll, signature={"dst": "*fp32", "src": "*fp32", "nelems": "i64", "iters": "i32"}, constexprs={}),
                    target=GPUTarget("cuda", 90, 32), options={"num_warps": 1})
show("triton", sass_of(ck.asm["ptx"], "triton"))

import collections  # noqa: E402
counts = collections.Counter()
for path in outline.objects(["nvshmem_float_broadcast"], 90, "sm_90", "+ptx85", 255):
    if path.name.startswith("nvshmem_float_broadcast-"):
        text = subprocess.run([NVD, "-c", str(path)], capture_output=True, text=True).stdout
        for op in ("YIELD", "NANOSLEEP", "WARPSYNC", "BSSY", "MEMBAR"):
            counts[op] += len(re.findall(r"\b" + op + r"\b", text))
print("=== the broadcast's object:", dict(counts))
