"""Experiment (CPU only): the Triton communication kernels against their C++ twins in SASS, compiled as
they are launched at the small sizes of the comm benchmark (issue 39).

    .venv/bin/python bench/experiments/comm_triton_small_sass.py OUTDIR [--kinds one_shot,two_shot,reduce_scatter]
        [--dtypes float32,bfloat16] [--bytes 8,512,4096] [--npes 2]

For each kind, dtype and size: the plan (_plan.plan, every peer reached by load/store: the one-shot's LL
kernel up to 64 KiB), the Triton kernel specialised as Triton's JIT specialises it at that launch (pointers
16-byte aligned; n, span, chunk as Triton's launcher types them: int32, divisible by 16 or not, 1 a
constant; epoch and me not specialised; BLOCK and NPES as kernels.triton.launch gives them), compiled to PTX (Triton's cubin stage left out), assembled by
ptxas -O3 for sm_90a and listed by cuobjdump (Triton's).  The C++ twins: bench/cpp/comm.cu with
build.sh's flags, -ptx, ptxas -O3 for sm_90.  Writes OUTDIR/<kernel>_<dtype>_<bytes>.{ptx,sass} and
OUTDIR/comm.sass, and prints a table of static counts (instructions, BAR.SYNC, MEMBAR, REDUX, SHFL,
STS / LDS, kernel parameters, shared memory).  The executed path of one thread is walked by
bench/experiments/sass_walk.py over these listings (branch outcomes decided by hand;
bench/results/comm-triton-small-sass-cpu-2026-12-03.txt lists them).  No GPU.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The SASS operations counted (prefixes).
OPS = ("BAR.SYNC", "MEMBAR", "REDUX", "SHFL", "STS", "LDS", "CALL")
#: The C++ twin of each Triton kernel, by the start of its mangled name.
CPP_NAME = {"one_shot": "_Z8one_shot", "one_shot_ll": "_Z11one_shot_ll", "two_shot": "_Z8two_shot",
            "all_gather": "_Z10all_gather", "reduce_scatter": "_Z14reduce_scatter"}
CPP_TYPE = {"float32": "If", "bfloat16": "I13__nv_bfloat16"}


def triton_source(kind: str, dtype: str, nbytes: int, npes: int):
    """(plan, ASTSource) of ``kind`` at ``nbytes`` as Triton's JIT specialises its launch."""
    import triton.runtime.jit as jit
    from triton.backends.compiler import BaseBackend
    from triton.compiler import ASTSource

    from nvshmem_dsl.kernels import _plan
    from nvshmem_dsl.kernels import triton as kt

    n = nbytes // _plan.ITEMSIZE[dtype]
    if kind in ("all_gather", "reduce_scatter"):
        n //= npes  # the benchmark's bytes: npes * n elements
    plan = _plan.plan(kind, dtype, n, npes, load_store=True)
    sig = kt.signature(dtype, plan.kernel)
    names = list(sig)
    values = dict(zip(names[4:10], plan.args(3, 0)))
    constexprs = kt.constexprs(plan.kernel, dtype, plan.npes, plan.chunk)
    attrs = {}
    for k, name in enumerate(names):
        if name in constexprs:
            continue
        if sig[name].startswith("*"):
            attrs[(k,)] = [["tt.divisibility", 16]]
            continue
        ty, spec = jit.native_specialize_impl(BaseBackend, values[name], False, name not in kt._VARYING, True)
        if ty == "constexpr":
            constexprs[name], sig[name] = values[name], "constexpr"
        else:
            sig[name] = ty
            if spec == "D":
                attrs[(k,)] = [["tt.divisibility", 16]]
    return plan, ASTSource(fn=kt.KERNELS[plan.kernel], signature=sig, constexprs=constexprs, attrs=attrs)


def tool(name: str) -> str:
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    return path if os.path.exists(path) else name


def sass(ptx_path: str, arch: str) -> str:
    cubin = ptx_path[:-4] + ".cubin"
    subprocess.run([os.environ.get("PTXAS", "ptxas"), f"-arch={arch}", "-O3", "-c", ptx_path, "-o", cubin], check=True)
    out = subprocess.run([tool("cuobjdump"), "-sass", cubin], check=True, capture_output=True, text=True).stdout
    with open(ptx_path[:-4] + ".sass", "w") as f:
        f.write(out)
    return out


def functions(listing: str) -> dict:
    """{name: [instruction, ...]} of a cuobjdump listing."""
    out = {}
    for part in re.split(r"^\s+Function : ", listing, flags=re.M)[1:]:
        out[part.split("\n", 1)[0].strip()] = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", part)
    return out


def counts(code: list) -> Counter:
    ops = [i.split()[1] if i.startswith("@") else i.split()[0] for i in code]
    c = Counter({op: sum(o.startswith(op) for o in ops) for op in OPS})
    c["insns"] = len(code)
    return c


def ptx_params(ptx: str, entry: str) -> int:
    m = re.search(r"\.entry " + re.escape(entry) + r"\((.*?)\)", ptx, re.S)
    return len(re.findall(r"\.param\b", m.group(1))) if m else -1


def cpp_listing(outdir: str) -> tuple[str, str]:
    """(PTX, SASS listing) of bench/cpp/comm.cu, compiled with build.sh's flags."""
    flags = subprocess.run(["bash", "bench/cpp/build.sh"], env={**os.environ, "BENCH_CPP_PRINT_FLAGS": "1"},
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    ptx = os.path.join(outdir, "comm.ptx")
    subprocess.run([*flags, "-Ibench/cpp", "-Ibench/stub_include", "-ptx", "bench/cpp/comm.cu", "-o", ptx],
                   cwd=ROOT, check=True)
    with open(ptx) as f:
        return f.read(), sass(ptx, "sm_90")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--kinds", default="one_shot,two_shot,reduce_scatter")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--bytes", default="8,512,4096")
    ap.add_argument("--npes", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    from nvshmem_dsl.kernels import triton as kt

    cpp_ptx, cpp_sass = cpp_listing(args.outdir)
    cpp = functions(cpp_sass)
    print(f"{'kernel':15s} {'dtype':9s} {'bytes':>6s} {'impl':6s} {'insns':>6s} " + " ".join(f"{o:>8s}" for o in OPS)
          + "  params shared")
    for kind in args.kinds.split(","):
        for dtype in args.dtypes.split(","):
            for nbytes in map(int, args.bytes.split(",")):
                plan, src = triton_source(kind, dtype, nbytes, args.npes)
                ck = kt.compile_source(src, {"num_warps": kt.NUM_WARPS}, ptx_only=True)
                path = os.path.join(args.outdir, f"{plan.kernel}_{dtype}_{nbytes}.ptx")
                with open(path, "w") as f:
                    f.write(ck.asm["ptx"])
                tri = functions(sass(path, "sm_90a"))[plan.kernel]
                twin = next(name for name in cpp if name.startswith(CPP_NAME[plan.kernel] + CPP_TYPE[dtype]))
                for impl, code, params, shared in (
                        ("triton", tri, ptx_params(ck.asm["ptx"], plan.kernel), ck.metadata.shared),
                        ("cpp", cpp[twin], ptx_params(cpp_ptx, twin), "-")):
                    c = counts(code)
                    print(f"{plan.kernel:15s} {dtype:9s} {nbytes:6d} {impl:6s} {c['insns']:6d} "
                          + " ".join(f"{c[o]:8d}" for o in OPS) + f"  {params:6d} {shared:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
