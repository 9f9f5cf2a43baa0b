"""Experiment: where Numba's small-message put_block/put_warp loses against C++ and CuTe.

The bench kernels (bench/numba_bench.py) compute each iteration's window with a 64-bit Python
``%`` and slice both arrays per call; C++ and CuTe use a 32-bit ``%`` and pointer arithmetic.
This times the same put at 4 KiB and 64 KiB (132 blocks x 1024 threads, 1000 iterations in the
kernel, both PEs at once, device events, median of 5), written as:
  bench      the bench kernel as it is
  hoisted    no window arithmetic: the slices taken once before the loop (puts use one window)
  bounds     the bench kernel with launch_bounds=(1024,)
(A 32-bit remainder changes nothing: LLVM already divides in 32 bits when the values fit.)
Result of 2026-11-22: tests/gpu/records/2026-11-22/put_shapes.txt.

Run on 2 GPUs:  python -m nvshmem_dsl.run -n 2 bench/experiments/put_shapes.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
from numba import cuda, int64  # noqa: E402

import _common as C  # noqa: E402
import numba_bench as nb  # noqa: E402
import nvshmem_dsl as nvshmem  # noqa: E402
import nvshmem_dsl.numba as nv  # noqa: E402

chunk_of = nb.chunk_of


def block_hoisted(dst, src, nelems, iters, peer, nwin):
    s, n = chunk_of(nelems, int64(cuda.gridDim.x), int64(cuda.blockIdx.x))
    if n > 0:
        d = dst[s:s + n]
        v = src[s:s + n]
        for i in range(iters):
            nv.put_block(d, v, n, peer)
    nv.quiet()


def warp_hoisted(dst, src, nelems, iters, peer, nwin):
    wpb = int64(cuda.blockDim.x // 32)
    s, n = chunk_of(nelems, int64(cuda.gridDim.x) * wpb, int64(cuda.blockIdx.x) * wpb + cuda.threadIdx.x // 32)
    if n > 0:
        d = dst[s:s + n]
        v = src[s:s + n]
        for i in range(iters):
            nv.put_warp(d, v, n, peer)
    nv.quiet()


def main():
    nvshmem.init()
    import cupy as cp

    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    peer = (me + 1) % npes
    nfl = (64 << 10) // 4
    a = nvshmem.zeros((nfl,), np.float32, like="cupy")
    b = nvshmem.zeros((nfl,), np.float32, like="cupy")
    b[:] = 1
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    sig = nb.SIGNATURES["put_block"]
    variants = {
        "block": [("bench", nb.KERNELS["put_block"], {}), ("hoisted", block_hoisted, {}), ("bounds", nb.KERNELS["put_block"], {"launch_bounds": (1024,)})],
        "warp": [("bench", nb.KERNELS["put_warp"], {}), ("hoisted", warp_hoisted, {}), ("bounds", nb.KERNELS["put_warp"], {"launch_bounds": (1024,)})],
    }
    iters = 1000
    for scope, ks in variants.items():
        for name, fn, kw in ks:
            k = cuda.jit(sig, **kw)(fn)
            for nbytes in (4 << 10, 64 << 10):
                nelems = nbytes // 4
                times = []
                for r in range(6):
                    cp.cuda.Stream.null.synchronize()
                    nvshmem.barrier_all()
                    e0.record()
                    k[C.BW_GRID, C.BW_BLOCK](a, b, nelems, iters, peer, 1)
                    e1.record()
                    e1.synchronize()
                    if r:
                        times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
                gbs = nbytes * iters / sorted(times)[len(times) // 2] / 1e9
                if me == 0:
                    print(f"{scope:>5} {name:>8} {nbytes >> 10:>3} KiB: {gbs:8.2f} GB/s", flush=True)
    nvshmem.barrier_all()
    nvshmem.free(a)
    nvshmem.free(b)
    nvshmem.finalize()


if __name__ == "__main__":
    main()
