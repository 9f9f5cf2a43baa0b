"""Experiment (CPU only): the block-scope put's copy path in SASS, C++ (nvcc, NVSHMEM's headers inline)
against the three DSLs (NVSHMEM's bitcode through runtime/linker, copy rewrite on), NVSHMEM 3.8.

Question: on one H200, 1 PE, ``put_bw`` block scope reaches 0.84-0.90x of C++ at 4 MiB in all three
DSLs but 1.00-1.01x at 16 MiB and 1.19-1.34x at <= 1 MiB.  What differs in the generated code?

    NVSHMEM_HOME=$PWD/.venv/lib/python3.11/site-packages/nvidia/nvshmem \\
        .venv/bin/python bench/experiments/block_put_sass.py [--no-triton] [--no-cute] [--no-off]

Needs nvcc (NVCC=, default /usr/local/bin/nvcc, CUDA 13.0) and ptxas (PTXAS=, default /usr/local/bin/ptxas);
nvdisasm / cuobjdump are Triton's (``triton/backends/nvidia/bin``), as in amo_overlap_sass.py.  No GPU.

It builds / prints, for ``rma_bw<BLOCK, false>`` (bench/cpp/bench.cu) and its DSL equivalents:

  * C++: bench.cu compiled as build.sh does it (``-O3 -std=c++17 -rdc=true -arch=sm_90``), ``-cubin``;
  * Numba: bench/numba_bench.py's ``put_block`` (``launch_bounds=(1024,)`` as the benchmark), PTX from
    ``cuda.compile_ptx``, assembled with ptxas -O3 -c for sm_90 (``-v``: registers);
  * CuTe: bench/cute_bench.py's launcher (loop_sass.cute_ptx), ptxas for sm_90a;
  * Triton: bench/triton_bench.py's kernel, its own cubin (Triton's ptxas);
  * Numba with ``NVSHMEM_DSL_COPY_REWRITE=off`` (NVSHMEM's bitcode loop as clang left it), and Numba's PTX
    with the copy's ``st.global.v4`` made a generic ``st.v4`` (what C++ has), both for reference.

and for each: registers; the 128-bit copy loop (body, instructions, 128-bit loads in it = unroll factor,
loads before the first store, store kind); where the peer-heap-base load (LDG.E.64.CONSTANT) sits
against the put's entry BAR.SYNC and the outer (iters) loop; the BAR.SYNCs; the instructions along
the P2P hot path of one call for a thread that moves two 16-byte vectors (4 MiB: 1992 vectors a block
of 1024 threads), counted over the address ranges the path runs through (found from the listing:
see ``hot_path``); and, from the stored results, the time per call of each size.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..")
ROOT = os.path.join(BENCH, "..")
sys.path.insert(0, BENCH)
sys.path.insert(0, HERE)

NVCC = os.environ.get("NVCC", "/usr/local/bin/nvcc")
PTXAS = os.environ.get("PTXAS", "/usr/local/bin/ptxas")
CPP_KERNEL = "_Z6rma_bwILi2ELb0EEvPfS0_miii"  # rma_bw<BLOCK, false>
CPP_WARP = "_Z6rma_bwILi1ELb0EEvPfS0_miii"  # rma_bw<WARP, false>
INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
RESULTS = os.path.join(BENCH, "results", "2026-11-25-h200x1-1pe-nvshmem3.8.0-full-put-get-local.json")


def _tool(name: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def nvshmem_root() -> str:
    import nvidia.nvshmem

    return os.environ.get("NVSHMEM_HOME") or list(nvidia.nvshmem.__path__)[0]


# ------------------------------------------------------------------ building


def cpp_cubin(d: str) -> str:
    out = os.path.join(d, "bench.cubin")
    inc = os.path.join(nvshmem_root(), "include")
    cmd = [NVCC, "-O3", "-std=c++17", "-rdc=true", "-arch=sm_90", f"-I{inc}",
           f"-I{os.path.join(BENCH, 'stub_include')}", "-cubin", os.path.join(BENCH, "cpp", "bench.cu"), "-o", out]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def ptxas(ptx: str, arch: str, d: str, tag: str) -> tuple[str, str]:
    """(cubin path, registers line of ptxas -v) of ``ptx`` (relocatable: -c, NVSHMEM's helpers extern)."""
    src, cubin = os.path.join(d, f"{tag}.ptx"), os.path.join(d, f"{tag}.cubin")
    with open(src, "w") as f:
        f.write(ptx)
    r = subprocess.run([PTXAS, f"-arch={arch}", "-O3", "-v", "-c", src, "-o", cubin], check=True,
                       capture_output=True, text=True)
    regs = [ln.split("info    : ")[-1] for ln in r.stderr.splitlines() if "registers" in ln]
    return cubin, regs[-1] if regs else "?"


def sass(cubin: str, function_prefix: str) -> list:
    """[(address, instruction)] of the first function of ``cubin`` whose name starts with the prefix;
    a label's line (``.L_x_12:``) comes as ``(address of the next instruction, ".L_x_12:")``."""
    out = subprocess.run([_tool("nvdisasm"), "-c", cubin], capture_output=True, text=True, check=True).stdout
    parts = re.split(r"^\s*\.text\.", out, flags=re.M)
    part = next(p for p in parts if p.startswith(function_prefix))
    rows, pending = [], []
    for line in part.splitlines():
        m = INSN.search(line)
        if m:
            a = int(m.group(1), 16)
            rows += [(a, lab) for lab in pending] + [(a, m.group(2))]
            pending = []
        elif re.match(r"^\.L_x_\d+:", line.strip()):
            pending.append(line.strip())
    return rows


def insns(sass_: list) -> list:
    return [(a, i) for a, i in sass_ if not i.endswith(":")]


def res_usage(cubin: str, function: str) -> str:
    out = subprocess.run([_tool("cuobjdump"), "-res-usage", cubin], capture_output=True, text=True).stdout
    m = re.search(r"Function " + re.escape(function) + r":\s*\n\s*(REG:\d+[^\n]*)", out)
    return m.group(1).split(" TEXTURE")[0] if m else "?"


def numba_ptx(env: dict | None = None, kernel: str = "put_block") -> str:
    """``kernel``'s PTX as the benchmark compiles it (in a fresh process: ``env`` may change the linker)."""
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import numba_bench as nb\nfrom numba import cuda\n"
            "k = %r\nptx, _ = cuda.compile_ptx(nb.KERNELS[k], nb.SIGNATURES[k], cc=(9, 0),"
            " **nb.jit_options(k))\nsys.stdout.write(ptx)\n") % (BENCH, kernel)
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}).stdout


def cute_ptx() -> str:
    import loop_sass

    return loop_sass.cute_ptx("put_block")


def triton_cubin(d: str, kernel: str = "put_block") -> str:
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(d, "triton_cache"))
    import triton
    import triton_bench as tb
    from nvshmem_dsl.triton import _compile

    triton.knobs.runtime.add_stages_inspection_hook = _compile._stages_hook
    ck = tb.compile_kernel(kernel)
    path = os.path.join(d, f"triton_{kernel}.cubin")
    with open(path, "wb") as f:
        f.write(ck.asm["cubin"])
    return path


# ------------------------------------------------------------------ reading the SASS

STORE128 = re.compile(r"^(STG|ST)\.E\.128\b")
LOAD128 = re.compile(r"^(LDG|LD)\.E\.128\b")
BRANCH = re.compile(r"^@!?U?P\d BRA|^BRA")


def _target(insn: str) -> str | None:
    m = re.search(r"\.L_x_\d+", insn)
    return m.group(0) if m else None


def copy_loop(sass_: list) -> dict:
    """The loop around the first 128-bit load that a 128-bit store follows (NVSHMEM's v4 copy loop):
    from its back branch's target label to the back branch."""
    code = insns(sass_)
    k = next(k for k, (_, i) in enumerate(code) if LOAD128.match(i)
             and any(STORE128.match(j) for _, j in code[k:k + 20]))
    back = next(j for j in range(k, len(code)) if re.match(r"^@!?P\d BRA", code[j][1]))
    head_label = _target(code[back][1]) + ":"
    head = next(a for a, i in sass_ if i == head_label)
    body = [(a, i) for a, i in code if head <= a <= code[back][0]]
    loads = [i for _, i in body if LOAD128.match(i)]
    stores = [i for _, i in body if STORE128.match(i)]
    first_store = next(n for n, (_, i) in enumerate(body) if STORE128.match(i))
    before = sum(1 for _, i in body[:first_store] if LOAD128.match(i))
    return {"body": body, "n": len(body), "loads": len(loads), "stores": len(stores), "before_store": before,
            "load_kind": loads[0].split()[0], "store_kind": stores[0].split()[0],
            "predicated_mem": sum(1 for _, i in body if re.match(r"^@!?P\d (LDG|LD|STG|ST)\.", i))}


def peer_base(sass_: list) -> str:
    """Where the peer-heap-base load (``__ldg(peer_heap_base_p2p + pe)``: LDG.E.64.CONSTANT) is, against
    the put's entry BAR.SYNC and the outer loop (the loop's back branch: the last backward branch
    before the function's quiet)."""
    sass_ = insns(sass_)
    ldg = next((k for k, (_, i) in enumerate(sass_) if "LDG.E.64.CONSTANT" in i), None)
    bars = [k for k, (_, i) in enumerate(sass_) if i.startswith("BAR.SYNC")]
    if ldg is None:
        return "no LDG.E.64.CONSTANT"
    if not bars:
        return f"LDG.E.64.CONSTANT at {sass_[ldg][0]:#06x}; no BAR.SYNC (warp scope: WARPSYNC)"
    entry = bars[0]
    where = "before" if ldg < entry else "after"
    gap = abs(sass_[ldg][0] - sass_[entry][0]) // 16
    return (f"LDG.E.64.CONSTANT at {sass_[ldg][0]:#06x}, {where} the entry BAR.SYNC at {sass_[entry][0]:#06x} "
            f"({gap} instructions {'after' if where == 'after' else 'before'} it)")


def hot_path(sass_: list, ranges: list) -> int:
    """Instructions in the address ranges ``[(first, last, times)]`` (inclusive; ``times`` for loops)."""
    return sum(t * sum(1 for a, _ in insns(sass_) if lo <= a <= hi) for lo, hi, t in ranges)


def show(sass_: list, lo: int, hi: int) -> str:
    return "\n".join(f"      {i}" if i.endswith(":") else f"      {a:#06x}  {i}" for a, i in sass_ if lo <= a <= hi)


# Hot path of one call, P2P, NVSHMEM_TMA_POLICY unset (TMA off: NVSHMEM 3.8's default), 16-byte aligned
# chunk with no tail, a thread with two vectors: the address ranges it runs through, read off the listings
# this script prints (ptxas 13.0 / Triton's ptxas, NVSHMEM 3.8.0, this checkout).  Printed next to the
# listing so that a different toolchain shows at once when they no longer fit.
HOT = {
    "C++": [(0x0700, 0x08f0, 1), (0x0b90, 0x0bd0, 1), (0x19a0, 0x1af0, 1), (0x1b00, 0x1be0, 2),
            (0x1bf0, 0x1c40, 1), (0x26d0, 0x26e0, 1), (0x2770, 0x2820, 1)],
    "Numba": [(0x0860, 0x09b0, 1), (0x0bf0, 0x0c40, 1), (0x1a20, 0x1b20, 1), (0x1b30, 0x1be0, 2),
              (0x1bf0, 0x1c10, 1), (0x2590, 0x25a0, 1), (0x2630, 0x26f0, 1)],
}


# ------------------------------------------------------------------ results


def per_call(path: str = RESULTS) -> str:
    """ns per put_block call (bytes / GB/s) of each size >= 64 KiB, per implementation."""
    with open(path) as f:
        d = json.load(f)
    rows: dict = {}
    for r in d["results"]:
        if r["bench"] == "put_bw" and r["scope"] == "block" and r["bytes"] >= 1 << 16:
            rows.setdefault(r["bytes"], {})[r["impl"]] = r["bytes"] / r["value"]  # ns (GB/s = B/ns)
    impls = ["cpp", "numba", "cute", "triton"]
    lines = [f"    {'bytes':>10} " + " ".join(f"{i:>8}" for i in impls) + "   (ns per call; DSL - C++)"]
    for b in sorted(rows):
        v = rows[b]
        c = v.get("cpp")
        lines.append(f"    {b:>10} " + " ".join(f"{v.get(i, float('nan')):8.0f}" for i in impls) + "   "
                     + " ".join(f"{v[i] - c:+5.0f}" for i in impls[1:] if i in v))
    return "\n".join(lines)


# ------------------------------------------------------------------ main


def report(name: str, sass_: list, regs: str) -> dict:
    loop = copy_loop(sass_)
    bars = [f"{a:#06x}" for a, i in insns(sass_) if i.startswith("BAR.SYNC")]
    print(f"\n=== {name}: {regs}")
    print(f"  copy loop: {loop['n']} instructions, {loop['loads']} x {loop['load_kind']} + {loop['stores']} x "
          f"{loop['store_kind']} (unroll {loop['loads']}), {loop['before_store']} load(s) issued before the first "
          f"store, {loop['predicated_mem']} predicated memory ops")
    lo, hi = loop["body"][0][0], loop["body"][-1][0]
    print(show(sass_, lo, hi))
    print(f"  peer base: {peer_base(sass_)}")
    print(f"  BAR.SYNC at {', '.join(bars)}")
    print(f"  LD/LDG/ST/STG in the function: " + ", ".join(
        f"{op} {sum(1 for _, i in insns(sass_) if i.startswith(op + '.'))}" for op in ("LDG", "LD", "STG", "ST")))
    return loop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--no-cute", action="store_true")
    ap.add_argument("--no-off", action="store_true", help="skip the NVSHMEM_DSL_COPY_REWRITE=off reference")
    args = ap.parse_args()
    os.environ.setdefault("NVSHMEM_HOME", nvshmem_root())
    print(f"NVSHMEM {nvshmem_root()}\nnvcc {NVCC}, ptxas {PTXAS}; nvdisasm/cuobjdump {_tool('nvdisasm')}")
    with tempfile.TemporaryDirectory() as d:
        cpp_cub = cpp_cubin(d)
        cpp = sass(cpp_cub, CPP_KERNEL + ":")
        report("C++ rma_bw<BLOCK,false> (nvcc -O3 -rdc, sm_90)", cpp, res_usage(cpp_cub, CPP_KERNEL))

        ptx = numba_ptx()
        m = re.search(r"^\.(maxntid|reqntid) [^\n]*", ptx, re.M)
        cub, regs = ptxas(ptx, "sm_90", d, "numba")
        numba = sass(cub, "_ZN11numba_bench9put_block")
        report(f"Numba put_block (ptxas -O3 sm_90, {m.group(0) if m else 'no bounds'})", numba, regs)
        ptx_loop = re.search(r"\n(\$L__BB\d+_\d+):\n\t\.pragma \"nounroll\";\n(?:[^\n]*\n){0,4}?"
                             r"\tld\.global\.v4\.b32[^\n]*\n(?:[^\n]*\n)*?\t@%p\d+ bra \t\1;", ptx)
        if ptx_loop:
            print("  its PTX loop:\n" + "\n".join("      " + ln.strip() for ln in ptx_loop.group(0).strip().splitlines()))

        generic = re.sub(r"\tcvta\.to\.global\.u64 \t(%rd\d+), (%rd\d+);\n\tst\.global\.v4\.b32 \t\[\1\]",
                         r"\tst.v4.b32 \t[\2]", ptx, count=1)
        if generic != ptx:
            cub, regs = ptxas(generic, "sm_90", d, "numba_generic")
            report("Numba, the copy's st.global.v4 made a generic st.v4 (PTX edit; what C++ stores with)",
                   sass(cub, "_ZN11numba_bench9put_block"), regs)

        if not args.no_off:
            off = numba_ptx({"NVSHMEM_DSL_COPY_REWRITE": "off"})
            cub, regs = ptxas(off, "sm_90", d, "numba_off")
            s = sass(cub, "_ZN11numba_bench9put_block")
            print(f"\n=== Numba, NVSHMEM_DSL_COPY_REWRITE=off (NVSHMEM's bitcode loop): {regs}")
            s = insns(s)
            k = next(k for k, (_, i) in enumerate(s) if re.match(r"^STG?\.E\.128", i))
            print(show(s, s[max(0, k - 14)][0], s[min(len(s) - 1, k + 2)][0]))

        if not args.no_cute:
            cub, regs = ptxas(cute_ptx(), "sm_90a", d, "cute")
            report("CuTe put_block launcher (ptxas -O3 sm_90a)", sass(cub, "kernel_cutlass_rma_bw"), regs)
        if not args.no_triton:
            cub = triton_cubin(d)
            report("Triton put_block (its cubin)", sass(cub, "rma_bw:"), res_usage(cub, "rma_bw"))

        # control: warp scope, also two 16-byte vectors a thread at 4 MiB (4224 warps, 1024 B each), where
        # the DSLs are at 0.99-1.00x of C++: the same store kinds (STG against ST) and hoisted peer base
        report("control: C++ rma_bw<WARP,false>", sass(cpp_cub, CPP_WARP + ":"), res_usage(cpp_cub, CPP_WARP))
        wptx = numba_ptx(kernel="put_warp")
        cub, regs = ptxas(wptx, "sm_90", d, "numba_warp")
        report("control: Numba put_warp", sass(cub, "_ZN11numba_bench8put_warp"), regs)
        if not args.no_triton:  # one-warp programs (4224), at 0.93-0.94x of C++ at 1 and 16 MiB; get_warp 1.00-1.06x
            for kernel in ("put_warp", "get_warp"):
                cub = triton_cubin(d, kernel)
                report(f"control: Triton {kernel} (its cubin)", sass(cub, "rma_bw:"), res_usage(cub, "rma_bw"))

        print("\n=== hot path of one call (P2P, TMA off, a thread moving two 16-byte vectors), instructions issued:")
        for name, s in (("C++", cpp), ("Numba", numba)):
            print(f"  {name:>6}: {hot_path(s, HOT[name])}  over {', '.join(f'{a:#x}-{b:#x}' + (f' x{t}' if t > 1 else '') for a, b, t in HOT[name])}")

    print(f"\n=== ns per put_block call, {os.path.basename(RESULTS)} (bytes / GB/s):")
    print(per_call())
    return 0


if __name__ == "__main__":
    sys.exit(main())
