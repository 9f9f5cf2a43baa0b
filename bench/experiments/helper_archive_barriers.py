"""Experiment: the Numba GPU suite's barrier kernels (tests/gpu/numba_kernels.py: k_fence_order, then
k_barriers at thread, warp and block scope) with NVSHMEM's transport helpers from NVIDIA's
libnvshmem_device.a (NVSHMEM_DSL_HELPERS=archive) or built from the bitcode (build): each launch
printed as it ends, a stack dump if one does not within 60 s.

Run (2 PEs): NVSHMEM_DSL_HELPERS=archive python -m nvshmem_dsl.run -n 2 bench/experiments/helper_archive_barriers.py
"""
import faulthandler
import os
import sys
import time

import numpy as np
from numba import cuda

import nvshmem_dsl as nvshmem

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "gpu"))
import numba_kernels as K  # noqa: E402


def main():
    faulthandler.dump_traceback_later(60, exit=True)
    with nvshmem.init():
        me, n = nvshmem.my_pe(), nvshmem.n_pes()
        peer = (me + 1) % n
        x = nvshmem.zeros((4,), np.int32, like="cupy")
        out = nvshmem.zeros((8,), np.int32, like="cupy")
        mode = os.environ.get("NVSHMEM_DSL_HELPERS", "archive")
        steps = [("fence_order", lambda: K.k_fence_order[1, 1](x, peer))]
        steps += [(f"barriers scope {s}", lambda s=s: K.k_barriers[1, (1, 32, 128)[s]](out, s)) for s in range(3)]
        for what, go in steps:
            t0 = time.perf_counter()
            go()
            cuda.synchronize()
            nvshmem.barrier_all()
            print(f"[{me}] {mode}: {what} done in {time.perf_counter() - t0:.2f} s; out {out.get().tolist()}", flush=True)
        nvshmem.free(x)
        nvshmem.free(out)
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
