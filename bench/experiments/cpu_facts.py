"""Facts measured on a machine without a GPU that BENCHMARKS.md relies on.

    python bench/experiments/cpu_facts.py            # with the NVSHMEM that nvshmem_dsl finds
    NVSHMEM_HOME=<3.4.5> python bench/experiments/cpu_facts.py

Prints, for the Numba bench kernels and the numba_allreduce example kernel, the seconds to PTX
(sm_90, warm bitcode cache) and the registers ptxas gives the kernel entry, once without loop
unswitching (NVSHMEM_DSL_UNSWITCH=0) and once with it (=1, the default since 2026-11-22;
each in a fresh process); then the time of the
copy-loop rewrite over a whole library.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

KERNELS = ("p_lat", "g_lat", "amo_lat", "put_thread", "put_warp", "put_block", "get_thread", "pingpong")


def _entry_registers(ptx: str) -> str:
    if not shutil.which("ptxas"):
        return "?"
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        err = subprocess.run(["ptxas", "-arch=sm_90", "-O3", "-v", src, "-o", os.path.join(d, "k.cubin")],
                             capture_output=True, text=True).stderr
    m = re.search(r"Compiling entry function[^\n]*\n(?:[^\n]*\n)*?[^\n]*Used (\d+) registers", err)
    return m.group(1) if m else "?"


def kernels() -> None:
    from numba import cuda, types

    import numba_bench as nb
    import nvshmem_dsl.numba as nv

    def allreduce(dst, src):  # examples/numba_allreduce.py, launched with 512 threads
        nv.sum_reduce_block(nv.Team.TEAM_WORLD, dst, src, dst.size)

    todo = [(n, nb.KERNELS[n], nb.SIGNATURES[n]) for n in KERNELS]
    todo.append(("allreduce", allreduce, (types.float32[::1], types.float32[::1])))
    mode = f"NVSHMEM_DSL_UNSWITCH={os.environ['NVSHMEM_DSL_UNSWITCH']}"
    for name, fn, sig in todo:
        t = time.perf_counter()
        ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
        dt = time.perf_counter() - t
        print(f"{mode:>22} {name:>11}: {dt:5.2f} s to PTX, {_entry_registers(ptx):>3} registers", flush=True)


def rewrite_time() -> None:
    import llvmlite.binding as llvm

    from nvshmem_dsl.linker import store, rewrites

    path = store._default_bitcode(90)
    text = str(llvm.parse_bitcode(path.read_bytes(), context=llvm.create_context()))
    t = time.perf_counter()
    _, n = rewrites.rewrite(text, "vector")
    print(f"copy-loop rewrite of {path.name} ({len(text) >> 20} MiB of IR): "
          f"{time.perf_counter() - t:.1f} s, {n} copies", flush=True)


def main() -> None:
    if sys.argv[1:] == ["--kernels"]:
        kernels()
        return
    for env in ({"NVSHMEM_DSL_UNSWITCH": "0"}, {"NVSHMEM_DSL_UNSWITCH": "1"}):
        subprocess.run([sys.executable, __file__, "--kernels"], env=dict(os.environ, **env), check=True)
    rewrite_time()


if __name__ == "__main__":
    main()
