"""Experiment (issue 39: one-shot all-reduce <= 0.7x NVSHMEM's reduce at small sizes, missed by the C++ twin
itself, 0.76x at 8 B bfloat16): would an LL-style one-shot (NCCL's low-latency protocol: each 64-bit word
carries 32 bits of data and the call's epoch, so no signal word, no fence between data and signal, no barrier)
be fast enough? float32 only, one block, PEs reached by load/store (nv.peer), 2 PEs under MPS.

Kernel: every thread stores its elements' words (float bits | epoch << 32) through nv.peer into each peer's
slot of this PE (two halves by epoch parity, as runtime/kernels/_plan.py argues), then polls the peers'
words of its elements with signal_fetch (a volatile 64-bit load) until their epoch is this call's, and sums
in PE order in float32 (the same bits as kernels.all_reduce). Timed as bench/comm_bench.py times (spin-held
stream, GPU time per call) beside kernels.all_reduce(one_shot, numba) and NVSHMEM's reduce on the stream,
each checked against the others' result first.

    python -m nvshmem_dsl.run -n 2 bench/experiments/one_shot_ll.py [--bytes 8,64,512,4096]
    (device step: NPROC=2 bash tests/gpu/device_steps.sh experiment one_shot_ll)
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from numba import cuda, float32, uint32, uint64

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import comm_bench as CB  # noqa: E402

import nvshmem_dsl as nvshmem  # noqa: E402
import nvshmem_dsl.numba as nv  # noqa: E402
from nvshmem_dsl import kernels  # noqa: E402

THREADS = 512


@cuda.jit(device=True, inline=True)
def _bits(v):
    return uint32(cuda.libdevice.float_as_int(v))


@cuda.jit(device=True, inline=True)
def _float(b):
    return cuda.libdevice.int_as_float(b)


@cuda.jit(launch_bounds=(THREADS,))
def one_shot_ll(out, x, ll, epoch, n, me, npes):
    tag = uint64(epoch & 0xFFFFFFFF) << uint64(32)
    nn, mine, np_ = uint64(n), uint64(me), uint64(npes)
    base = uint64(epoch & 1) * np_ * nn
    step = uint64(cuda.blockDim.x)
    i = uint64(cuda.threadIdx.x)
    while i < nn:  # my words into every peer's slot of me
        w = tag | uint64(_bits(x[i]))
        for k in range(1, npes):
            p = (me + k) % npes
            nv.peer(ll, p)[base + mine * nn + i] = w
        i += step
    i = uint64(cuda.threadIdx.x)
    while i < nn:
        acc = float32(0)
        for p in range(npes):
            if p == me:
                acc += x[i]
            else:
                at = base + uint64(p) * nn + i
                w = nv.signal_fetch(ll[at:at + uint64(1)])
                while (w >> uint64(32)) != (tag >> uint64(32)):
                    w = nv.signal_fetch(ll[at:at + uint64(1)])
                acc += _float(uint32(w & uint64(0xFFFFFFFF)))
        out[i] = acc
        i += step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", default="8,64,512,4096")
    CB.add_timing_args(ap)
    args = ap.parse_args(argv)
    with nvshmem.init():
        me, npes = nvshmem.my_pe(), nvshmem.n_pes()
        cycles = CB._spin_cycles_per_us()
        for nbytes in (int(b) for b in args.bytes.split(",")):
            n = max(1, nbytes // 4)
            x = nvshmem.array((n,), "float32", like="torch")
            x.copy_(CB._values(n, me, torch.float32))
            want = CB._reference("one_shot", n, me, npes, torch.float32)
            ll = nvshmem.zeros((2 * npes * n,), np.uint64, like="numba")
            out_ll, out_k = torch.empty_like(want), torch.empty_like(want)
            out_nv = nvshmem.array((n,), "float32", like="torch")
            stream = torch.cuda.Stream()
            nstream = cuda.external_stream(stream.cuda_stream)
            ax, aout, all_ = cuda.as_cuda_array(x), cuda.as_cuda_array(out_ll), ll
            epoch = [0]

            def ll_call():
                epoch[0] += 1
                one_shot_ll[1, THREADS, nstream](aout, ax, all_, epoch[0], n, me, npes)

            calls = {"ll": ll_call,
                     "numba": lambda: kernels.all_reduce(x, out_k, algorithm="one_shot", dsl="numba", stream=stream),
                     "nvshmem": lambda: nvshmem.reduce(nvshmem.Team.TEAM_WORLD, out_nv, x, "sum", stream=stream)}
            nvshmem.barrier_all()
            for name, call in calls.items():
                call()
                stream.synchronize()
                nvshmem.barrier_all()
            ok = {name: bool(torch.equal(o, want)) for name, o in (("ll", out_ll), ("numba", out_k), ("nvshmem", out_nv))}
            for name, call in calls.items():
                t = CB.time_calls(call, stream, args, cycles)
                print(json.dumps({"pe": me, "impl": name, "bytes": nbytes, "n": n, "us": round(t["us"], 3),
                                  "us_min": round(t["us_min"], 3), "ok": ok[name]}), flush=True)
            for t in (x, ll, out_nv):
                nvshmem.free(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
