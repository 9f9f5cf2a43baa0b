"""Experiment: why is a loop of nvshmem p 7x slower than a loop of plain peer stores?

Run on 2 GPUs:  python -m nvshmem_dsl.run -n 2 bench/experiments/p_loop_shapes.py
Times (ns per p, one thread, device events, median of 5) of the same 100 000 stores written as:
  p            nv.p(dst, i & 1023, float32(i), peer) in a loop (as bench p_lat)
  p_unroll4    the same, four calls per trip (i, i+1, i+2, i+3)
  peer_store   q = nv.peer(dst, peer); q[i & 1023] = float32(i)
  peer_unroll4 the plain stores, four per trip
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
from numba import cuda, float32  # noqa: E402

import _common as C  # noqa: E402
import nvshmem_dsl as nvshmem  # noqa: E402
import nvshmem_dsl.numba as nv  # noqa: E402

M = 1023


@cuda.jit
def p(dst, iters, peer):
    for i in range(iters):
        nv.p(dst, i & M, float32(i), peer)
    nv.quiet()


@cuda.jit
def p_unroll4(dst, iters, peer):
    for j in range(iters // 4):
        i = 4 * j
        nv.p(dst, i & M, float32(i), peer)
        nv.p(dst, (i + 1) & M, float32(i + 1), peer)
        nv.p(dst, (i + 2) & M, float32(i + 2), peer)
        nv.p(dst, (i + 3) & M, float32(i + 3), peer)
    nv.quiet()


@cuda.jit
def peer_store(dst, iters, peer):
    q = nv.peer(dst, peer)
    for i in range(iters):
        q[i & M] = float32(i)
    nv.quiet()


@cuda.jit
def peer_unroll4(dst, iters, peer):
    q = nv.peer(dst, peer)
    for j in range(iters // 4):
        i = 4 * j
        q[i & M] = float32(i)
        q[(i + 1) & M] = float32(i + 1)
        q[(i + 2) & M] = float32(i + 2)
        q[(i + 3) & M] = float32(i + 3)
    nv.quiet()


def main():
    nvshmem.init()
    import cupy as cp

    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    peer = (me + 1) % npes
    dst = nvshmem.zeros((1024,), np.float32, like="cupy")
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    iters = 100_000
    for name, k in [("p", p), ("p_unroll4", p_unroll4), ("peer_store", peer_store), ("peer_unroll4", peer_unroll4)]:
        times = []
        for r in range(6):
            cp.cuda.Stream.null.synchronize()
            nvshmem.barrier_all()
            e0.record()
            k[1, 1](dst, iters, peer)
            e1.record()
            e1.synchronize()
            if r:
                times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e6 / iters)
        if me == 0:
            print(f"{name:>14}: {sorted(times)[len(times) // 2]:7.2f} ns per store", flush=True)
    nvshmem.barrier_all()
    nvshmem.free(dst)
    nvshmem.finalize()


if __name__ == "__main__":
    main()
