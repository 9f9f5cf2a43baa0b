"""Experiment (CPU only): the SASS behind BENCHMARKS.md's statements on the
bandwidth and atomic kernels, for C++, Numba and CuTe.

    NVSHMEM_HOME=<nvshmem 3.4.5> python bench/experiments/loop_sass.py
    (needs ptxas and nvdisasm/cuobjdump on PATH, or PTXAS= / NVDISASM= / CUOBJDUMP=; C++ from
    bench/cpp/build/bench_cpp, built by bench/cpp/build.sh against the same NVSHMEM)

Prints, per kernel:
  * put_block: the instructions from the loop's first BAR.SYNC (put_block's entry barrier) to
    NVSHMEM's P2P branch, and whether the peer-base load (LDG.E.64.CONSTANT) comes before the
    barrier; for Numba also with the kernel's two slices instead of nv.window;
  * put_warp: the instructions of the copy loop (the loop around the 128-bit load);
  * amo_lat: the warp-aggregation instructions (VOTEU) around the atomics, and the PTX's
    `.reqntid`/`.maxntid`.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

PTXAS = os.environ.get("PTXAS", "ptxas")
NVDISASM = os.environ.get("NVDISASM", "nvdisasm")
CUOBJDUMP = os.environ.get("CUOBJDUMP", "cuobjdump")
CPP = os.path.join(HERE, "..", "cpp", "build", "bench_cpp")
CPP_KERNELS = {"put_block": "_Z6rma_bwILi2ELb0EEvPfS0_miii", "put_warp": "_Z6rma_bwILi1ELb0EEvPfS0_miii",
               "amo_lat": "_Z7amo_latPmS_ii"}
INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def assemble(ptx: str, arch: str) -> bytes:
    """The cubin ptxas -O3 makes of ``ptx`` for ``arch``."""
    with tempfile.TemporaryDirectory() as d:
        src, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        subprocess.run([PTXAS, f"-arch={arch}", "-O3", src, "-o", cubin], check=True)
        with open(cubin, "rb") as f:
            return f.read()


def sass_of_ptx(ptx: str, arch: str) -> list:
    """``[(address, instruction)]`` of ``ptx`` assembled for ``arch`` (ptxas -O3)."""
    return sass_of_cubin(assemble(ptx, arch))


def sass_of_cubin(cubin: bytes, function: str | None = None) -> list:
    """``[(address, instruction)]`` of the cubin's code (of ``function`` alone when given)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([NVDISASM, "-c", f.name], capture_output=True, text=True, check=True).stdout
    if function is not None:
        out = next(part for part in re.split(r"^\s*\.text\.", out, flags=re.M) if part.startswith(function + ":"))
    return [(int(a, 16), i) for a, i in INSN.findall(out)]


def sass_of_cpp(name: str) -> list:
    out = subprocess.run([CUOBJDUMP, "-sass", "-fun", CPP_KERNELS[name], CPP],
                         capture_output=True, text=True, check=True).stdout
    return [(int(a, 16), i) for a, i in INSN.findall(out)]


def barrier_to_p2p(sass: list) -> str:
    bar = next(k for k, (_, i) in enumerate(sass) if i.startswith("BAR.SYNC"))
    ldg = next(k for k, (_, i) in enumerate(sass) if "LDG.E.64.CONSTANT" in i)
    # the P2P test: the first predicated branch after the barrier that follows the peer-base load
    br = next(k for k in range(max(bar, ldg) + 1, len(sass)) if re.match(r"@!?P\d BRA", sass[k][1]))
    where = "before" if ldg < bar else "after"
    return f"{(sass[br][0] - sass[bar][0]) // 16:3d} instructions barrier -> P2P branch, peer base loaded {where} the barrier"


def copy_loop(sass: list) -> str:
    ld = next(k for k, (_, i) in enumerate(sass) if i.startswith("LDG.E.128"))
    back = next(k for k in range(ld, len(sass)) if re.match(r"@!?P\d BRA", sass[k][1]))
    target = re.search(r"0x([0-9a-f]+)|\.L_x_\d+", sass[back][1]).group(0)
    return f"branch back to {target}, {back - ld + 1} instructions from the 128-bit load to it"


def numba_ptx(name: str, slices: bool = False, **jit) -> str:
    from numba import cuda

    import _numba_common
    import numba_bench as nb
    nv = nb.nv
    fn = nb.KERNELS[name]
    if slices:
        def put_block_slices(dst, src, nelems, iters, peer, nwin):
            s, n = _numba_common.block_worker(nelems)
            if n > 0:
                off = s
                end = nwin * nelems + s
                for _ in range(iters):
                    nv.put_block(dst[off:off + n], src[off:off + n], n, peer)
                    off += nelems
                    if off == end:
                        off = s
            nv.quiet()
        fn = put_block_slices
    ptx, _ = cuda.compile_ptx(fn, nb.SIGNATURES[name], cc=(9, 0), **jit)
    return ptx


def cute_ptx(name: str) -> str:
    import cuda.bindings.driver as cudrv
    import cutlass
    import cutlass.cute as cute

    import cute_bench as cb
    from nvshmem_dsl import cute as nvc
    T = cute.runtime.make_fake_compact_tensor
    if name == "amo_lat":
        args = (T(cutlass.Uint64, (64,)), cutlass.Int32(1), cutlass.Int32(1))
    else:
        f = T(cutlass.Float32, (1 << 20,))
        args = (f, f, cutlass.Int64(1024), cutlass.Int32(1), cutlass.Int32(1), cutlass.Int32(1),
                cutlass.Int32(cb.block_of(name)))
    return nvc.compile_to_ptx(cb.LAUNCHERS[name], *args, cudrv.CUstream(0), arch="sm_90a")


def bounds(ptx: str) -> str:
    m = re.search(r"^\.(reqntid|maxntid) [^\n]*", ptx, re.M)
    return m.group(0) if m else "no .reqntid/.maxntid"


def main() -> None:
    rows = [
        ("put_block", "C++", lambda: sass_of_cpp("put_block"), barrier_to_p2p),
        ("put_block", "Numba (windows)", lambda: sass_of_ptx(numba_ptx("put_block"), "sm_90"), barrier_to_p2p),
        ("put_block", "Numba (slices)", lambda: sass_of_ptx(numba_ptx("put_block", slices=True), "sm_90"),
         barrier_to_p2p),
        ("put_block", "CuTe", lambda: sass_of_ptx(cute_ptx("put_block"), "sm_90a"), barrier_to_p2p),
        ("put_warp", "C++", lambda: sass_of_cpp("put_warp"), copy_loop),
        ("put_warp", "Numba", lambda: sass_of_ptx(numba_ptx("put_warp"), "sm_90"), copy_loop),
        ("put_warp", "CuTe", lambda: sass_of_ptx(cute_ptx("put_warp"), "sm_90a"), copy_loop),
    ]
    for kernel, impl, sass, what in rows:
        print(f"{kernel:>9} {impl:>16}: {what(sass())}", flush=True)
    for impl, ptx, arch in (("Numba", lambda: numba_ptx("amo_lat"), "sm_90"),
                            ("Numba, launch_bounds=(1,)", lambda: numba_ptx("amo_lat", launch_bounds=(1,)), "sm_90"),
                            ("CuTe", lambda: cute_ptx("amo_lat"), "sm_90a")):
        text = ptx()
        sass = sass_of_ptx(text, arch)
        votes = sum(i.startswith("VOTEU") for _, i in sass)
        atoms = sum(i.startswith("ATOM.E.ADD") for _, i in sass)
        print(f"  amo_lat {impl:>26}: {bounds(text)}; {atoms} ATOM.E.ADD, {votes} VOTEU", flush=True)
    print(f"  amo_lat {'C++':>26}: {sum(i.startswith('VOTEU') for _, i in sass_of_cpp('amo_lat'))} VOTEU "
          "(built with ONE_THREAD = __launch_bounds__(1))", flush=True)


if __name__ == "__main__":
    main()
