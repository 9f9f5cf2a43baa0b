"""Experiment: does a thread-scope collective cost more when one lane of a full warp calls it?

Triton's thread-scope collectives run 1.05-1.21x of C++ at 8 B where Numba's, calling the same objects, run
1.02-1.05x (BENCHMARKS.md). A Triton program is at least one warp: lane 0 calls, lanes 1-31 wait at the
reconvergence barrier, while the object polls the other PE's flags in loops with YIELD
(bench/results/thread-scope-call-sass-cpu-2026-11-25.txt). This times, in Numba, 2000 calls in a kernel of
  one-thread    a block of one thread calling (as the bench's Numba kernels),
  lane0-of-32   a block of one warp whose lane 0 calls, then ``syncwarp``,
  lane0-bar     the same with ``syncthreads`` (``bar.sync 0``, what Triton's shim waits with),
  lane0-exit    lanes 1-31 end at once (the cost of a warp's other lanes being there at all),
  lane0-sleep   lanes 1-31 wait in a nanosleep loop on a shared flag lane 0 sets after each call,
  warp-scope    a block of one warp calling the warp-scope form together,
for ``broadcast`` (float, 8 B) and ``barrier`` over TEAM_WORLD, both PEs at once, median of 5 launches. If
``lane0-of-32`` is as slow as Triton's, the structure is the cost (then: a leader whose warp does not wait
inside the call, or the warp-scope form for one-warp programs); if as fast as ``one-thread``, it is Triton's.

Run (2 PEs): python -m nvshmem_dsl.run -n 2 bench/experiments/one_warp_leader.py
"""
from numba import cuda, float32, int32

import nvshmem_dsl.numba as nv

from _timing import collective_session, median_seconds

W = nv.Team.TEAM_WORLD
SIG = (float32[:], float32[:], int32)


def kernels():
    def broadcast_one(dst, src, iters):
        for _ in range(iters):
            nv.broadcast(W, dst, src, 2, 0)

    def broadcast_lane0(dst, src, iters):
        for _ in range(iters):
            if cuda.threadIdx.x == 0:
                nv.broadcast(W, dst, src, 2, 0)
            cuda.syncwarp()

    def broadcast_lane0_bar(dst, src, iters):
        for _ in range(iters):
            if cuda.threadIdx.x == 0:
                nv.broadcast(W, dst, src, 2, 0)
            cuda.syncthreads()

    def broadcast_lane0_exit(dst, src, iters):
        if cuda.threadIdx.x != 0:
            return
        for _ in range(iters):
            nv.broadcast(W, dst, src, 2, 0)

    def broadcast_lane0_sleep(dst, src, iters):
        flag = cuda.shared.array(1, int32)
        if cuda.threadIdx.x == 0:
            flag[0] = 0
        cuda.syncthreads()
        for i in range(iters):
            if cuda.threadIdx.x == 0:
                nv.broadcast(W, dst, src, 2, 0)
                cuda.atomic.exch(flag, 0, i + 1)
            else:
                while cuda.atomic.add(flag, 0, 0) <= i:
                    cuda.nanosleep(200)

    def broadcast_warp(dst, src, iters):
        for _ in range(iters):
            nv.broadcast_warp(W, dst, src, 2, 0)

    def barrier_one(dst, src, iters):
        for _ in range(iters):
            nv.barrier(W)

    def barrier_lane0(dst, src, iters):
        for _ in range(iters):
            if cuda.threadIdx.x == 0:
                nv.barrier(W)
            cuda.syncwarp()

    def barrier_lane0_bar(dst, src, iters):
        for _ in range(iters):
            if cuda.threadIdx.x == 0:
                nv.barrier(W)
            cuda.syncthreads()

    def barrier_warp(dst, src, iters):
        for _ in range(iters):
            nv.barrier_warp(W)

    return [("broadcast", "one-thread", broadcast_one, 1), ("broadcast", "lane0-of-32", broadcast_lane0, 32),
            ("broadcast", "lane0-bar", broadcast_lane0_bar, 32), ("broadcast", "lane0-exit", broadcast_lane0_exit, 32),
            ("broadcast", "lane0-sleep", broadcast_lane0_sleep, 32),
            ("broadcast", "warp-scope", broadcast_warp, 32), ("barrier", "one-thread", barrier_one, 1),
            ("barrier", "lane0-of-32", barrier_lane0, 32), ("barrier", "lane0-bar", barrier_lane0_bar, 32), ("barrier", "warp-scope", barrier_warp, 32)]


def main():
    iters = 2000
    with collective_session() as (me, dst, src):
        for coll, name, fn, threads in kernels():
            k = cuda.jit(SIG, launch_bounds=(threads,))(fn)
            us = median_seconds(lambda: k[1, threads](dst, src, iters)) / iters * 1e6
            if me == 0:
                print(f"{coll:>10} {name:>12}: {us:7.3f} us per call", flush=True)


if __name__ == "__main__":
    main()
