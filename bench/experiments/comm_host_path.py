"""Why a host call of nvshmem_dsl.kernels measures slow: per-call GPU time behind a spin (as
bench/comm_bench.py measures), the host's enqueue time against the spin's length, and one call's
GPU time alone. Run: python tests/gpu/mps.py --pes-per-gpu 2 -- python -m nvshmem_dsl.run -n 2 THIS"""
import sys
import time

import torch

import nvshmem_dsl as nvshmem
from nvshmem_dsl import kernels

with nvshmem.init():
    me = nvshmem.my_pe()
    for dsl in sys.argv[1:] or ["numba", "triton"]:
        for n in (2, 1 << 18):
            x = nvshmem.full((n,), 1.0, "float32", like="torch")
            out = torch.empty_like(x)
            s = torch.cuda.Stream()
            call = lambda: kernels.all_reduce(x, out, dsl=dsl, stream=s)  # noqa: E731
            for _ in range(20):
                call()
            torch.cuda.synchronize()
            nvshmem.barrier_all()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            singles = []
            for _ in range(5):
                nvshmem.barrier_all()
                a.record(s); call(); b.record(s); b.synchronize()
                singles.append(a.elapsed_time(b) * 1000)
            nvshmem.barrier_all()
            sp = torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(s):
                sp.record(s)
                torch.cuda._sleep(200_000_000)  # ~100 ms
                a.record(s)
            t0 = time.perf_counter()
            for _ in range(100):
                call()
            enq = (time.perf_counter() - t0) * 1e3
            b.record(s)
            b.synchronize()
            print(f"PE {me} {dsl} n={n}: single call {min(singles):.1f}-{max(singles):.1f} us; spin {sp.elapsed_time(a):.1f} ms, "
                  f"enqueue of 100 {enq:.1f} ms; behind the spin {a.elapsed_time(b) * 10:.1f} us/call", flush=True)
            nvshmem.free(x)
