"""Experiment: what a known block size (one thread) does to Numba's p, g and atomic loops.

CuTe kernels get ``.reqntid`` from their static launch shape; Numba and C++ kernels get nothing
unless asked (``launch_bounds=(1,)``: ``.maxntid 1``).  With it ptxas drops the warp-aggregation
of the atomic (VOTE/FLO/POPC/SHFL around every fetch-add; seen in the SASS on the CPU machine).

Run on 2 GPUs:  python -m nvshmem_dsl.run -n 2 bench/experiments/launch_bounds.py
Prints ns per operation (one thread, device events, median of 5) for the bench kernels
(bench/numba_bench.py) compiled as they are and with launch_bounds=(1,).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import _common as C  # noqa: E402
import numba_bench as nb  # noqa: E402
import nvshmem_dsl as nvshmem  # noqa: E402


def main():
    nvshmem.init()
    import cupy as cp

    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    peer = (me + 1) % npes
    lat = nvshmem.zeros((C.LAT_SLOTS,), np.float32, like="cupy")
    res = nvshmem.zeros((16,), np.float32, like="cupy")
    u64 = nvshmem.zeros((C.U64_LEN,), np.uint64, like="cupy")
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    runs = {"p_lat": (lambda k: k[1, 1](lat, 100_000, peer), 100_000),
            "g_lat": (lambda k: k[1, 1](lat, res, 100_000, peer), 100_000),
            "amo_lat": (lambda k: k[1, 1](u64, 20_000, peer), 20_000)}
    for name, (launch, iters) in runs.items():
        for bounds in (None, (1,)):
            kw = {"launch_bounds": bounds} if bounds else {}
            k = cuda.jit(nb.SIGNATURES[name], **kw)(nb.KERNELS[name])
            times = []
            for r in range(6):
                cp.cuda.Stream.null.synchronize()
                nvshmem.barrier_all()
                e0.record()
                launch(k)
                e1.record()
                e1.synchronize()
                if r:
                    times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e6 / iters)
            if me == 0:
                label = "launch_bounds=(1,)" if bounds else "as in the bench"
                print(f"{name:>8} {label:>20}: {sorted(times)[len(times) // 2]:8.2f} ns per op", flush=True)
    nvshmem.barrier_all()
    for a in (lat, res, u64):
        nvshmem.free(a)
    nvshmem.finalize()


if __name__ == "__main__":
    main()
