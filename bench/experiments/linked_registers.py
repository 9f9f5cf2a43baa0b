"""Registers of the Numba bandwidth kernels once linked (CPU, nvJitLink), and how Triton hands a
scalar atomic's result over: facts docs/troubleshooting.rst and BENCHMARKS.md state.

    python bench/experiments/linked_registers.py

1. For put_block, put_warp and get_block (bench/numba_bench.py): the registers of the linked
   kernel entry (callees included) with NVSHMEM's transport helpers in their objects (default),
   with everything inlined (NVSHMEM_DSL_OUTLINE=none), and with launch_bounds=(1024,).
2. Triton's own scalar ``tl.atomic_add`` in a loop (no NVSHMEM): CTA barriers, shuffles and
   shared-memory stores in its PTX for 1 and 4 warps.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

KERNELS = ("put_block", "put_warp", "get_block")


def registers(mode: str, bounds: bool) -> None:
    """Runs in a process of its own (the outline mode is read when a kernel links)."""
    import numba_bench as nb
    from numba.cuda.compiler import _compile_pyfunc_with_fixup

    from nvshmem_dsl.linker import link

    for name in KERNELS:
        extra = {"launch_bounds": (1024,)} if bounds else {}
        lib, _ = _compile_pyfunc_with_fixup(nb.KERNELS[name], nb.SIGNATURES[name], device=False, abi="numba",
                                            cc=(9, 0), **extra)
        cubin = lib.get_cubin(cc=(9, 0))
        _, regs = link.cubin_info(bytes(getattr(cubin, "code", cubin)))
        print(f"{name:>10}  outline={mode:<4}  launch_bounds={'1024' if bounds else '-':<4}  "
              f"{regs[lib._entry_name]} registers", flush=True)


def triton_atomic() -> None:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def loop(ctr, out, iters):
        acc = tl.cast(0, tl.int32)
        for _ in range(iters):
            acc += tl.atomic_add(ctr, 1)
        tl.store(out, acc)

    for warps in (1, 4):
        ck = triton.compile(ASTSource(fn=loop, signature={"ctr": "*i32", "out": "*i32", "iters": "i32"}, constexprs={}),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        entry = ck.asm["ptx"][ck.asm["ptx"].index(".entry"):]
        print(f"triton {triton.__version__} tl.atomic_add, {warps} warp(s): "
              f"{len(re.findall(r'bar(?:rier)?[.]sync', entry))} CTA barriers, {entry.count('shfl.sync')} shuffles, "
              f"{len(re.findall(r'st[.]shared', entry))} shared-memory stores, {len(re.findall(r'atom[.]', entry))} atomic")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--registers":
        registers(sys.argv[2], sys.argv[3] == "1")
        return
    for mode, bounds in (("auto", "0"), ("none", "0"), ("auto", "1")):
        env = dict(os.environ, NVSHMEM_DSL_OUTLINE=mode)
        subprocess.run([sys.executable, __file__, "--registers", mode, bounds], env=env, check=True)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    triton_atomic()


if __name__ == "__main__":
    main()
