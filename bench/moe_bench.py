"""Time MoE dispatch and combine (nvshmem_dsl.kernels.moe) of each DSL, one PE of
``python -m nvshmem_dsl.run -n N bench/moe_bench.py ...`` (bench/comm_run.py --moe starts it beside
the C++ twin bench/cpp/moe.cu).

Rounds of dispatch then combine (the experts' results are last round's: combine only moves and sums
rows) on one stream held by a spin kernel while ``--iters`` rounds are enqueued: reps of rounds alone
give "round", reps with events after each call give "dispatch" and "combine" (GPU time per call,
without the host's launch cost), as bench/cpp/moe.cu measures them. Routing:
``topk`` distinct experts per token, uniformly at random (seeded by PE), weights 1/topk. One JSON
line per (impl, op): op "dispatch", "combine" or "round".
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from comm_bench import _spin_cycles_per_us, add_timing_args, agreed_spin_us  # noqa: E402


_M64 = (1 << 64) - 1


def _mix64(z):
    """splitmix64's finalizer, as bench/cpp/moe.cu's mix64."""
    z = (z + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def route(pe, t, E, K):
    """PE pe's routing of token t, as bench/cpp/moe.cu's route(): K distinct experts by a hash of
    (pe, t, n), repeats rejected; a slot -1 where a hash of (pe, t, j) is 7 mod 8."""
    seed = _mix64(((pe << 40) ^ t) & _M64)
    out, n = [], 0
    while len(out) < K:
        e = _mix64((seed + n) & _M64) % E
        n += 1
        if e not in out:
            out.append(e)
    return [-1 if _mix64(seed ^ ((0xD1B54A32D192ED03 * (j + 1)) & _M64)) % 8 == 7 else e for j, e in enumerate(out)]


def inputs(me, T, H, E, K):
    """x, topk, weights as bench/cpp/moe.cu makes them (the same rows move in both)."""
    import torch
    t = torch.arange(T, device="cuda").view(-1, 1)
    h = torch.arange(H, device="cuda").view(1, -1)
    x = (((t * 5 + h * 3 + me * 7) % 17) - 8).to(torch.bfloat16)
    topk = torch.tensor([route(me, i, E, K) for i in range(T)], dtype=torch.int64, device="cuda")
    w = (1.0 / 2 ** (torch.arange(K, device="cuda") % 4)).to(torch.float32).expand(T, K).contiguous()
    return x, topk, w


def measure(impl, args, me, npes, cycles_per_us):
    import torch
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.moe import MoEBuffer
    T, H, E, K = args.tokens, args.hidden, args.experts, args.topk
    buf = MoEBuffer(T, H, E, K)
    x = nvshmem.array((T, H), "bfloat16", like="torch")
    x0, topk, w = inputs(me, T, H, E, K)
    x.copy_(x0)
    y = buf.expert_output()
    out = torch.empty_like(x)
    stream = torch.cuda.Stream()

    def one_round(ev=None):
        buf.dispatch(x, topk, dsl=impl, stream=stream)
        if ev is not None:
            ev.record(stream)
        buf.combine(y, topk, w, out, dsl=impl, stream=stream)

    torch.cuda.synchronize()
    nvshmem.barrier_all()
    for _ in range(args.warmup):
        one_round()
    stream.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        one_round()
    host_us = (time.perf_counter() - t0) / max(args.warmup, 1) * 1e6
    stream.synchronize()
    spin_us = agreed_spin_us(host_us, args)
    rounds, dispatches, combines, short = [], [], [], 0
    for split in (False, True):  # as bench/cpp/moe.cu: rounds alone, then events after each call
        for _ in range(args.reps):
            nvshmem.barrier_all()
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(2 * args.iters + 1)]
            with torch.cuda.stream(stream):
                torch.cuda._sleep(int(spin_us * cycles_per_us))
                one_round()  # untimed: it waits out the PEs' start skew (as bench/cpp/moe.cu)
                marks[0].record(stream)
                for i in range(args.iters):
                    buf.dispatch(x, topk, dsl=impl, stream=stream)
                    if split:
                        marks[2 * i + 1].record(stream)
                    buf.combine(y, topk, w, out, dsl=impl, stream=stream)
                    if split:
                        marks[2 * i + 2].record(stream)
                if not split:
                    marks[-1].record(stream)
                short += marks[0].query()
            marks[-1].synchronize()
            if split:
                dispatches.append(sum(marks[2 * i].elapsed_time(marks[2 * i + 1])
                                      for i in range(args.iters)) * 1000 / args.iters)
                combines.append(sum(marks[2 * i + 1].elapsed_time(marks[2 * i + 2])
                                    for i in range(args.iters)) * 1000 / args.iters)
            else:
                rounds.append(marks[0].elapsed_time(marks[-1]) * 1000 / args.iters)
    nvshmem.barrier_all()
    sent = int((topk >= 0).sum()) * H * 2
    base = {"impl": impl, "bench": "moe", "tokens": T, "hidden": H, "experts": E, "topk": K, "npes": npes,
            "pe": me, "bytes": sent, "iters": args.iters, "reps": args.reps, "host_us": host_us,
            "host_paced_reps": short, "ok": True}
    rows = [dict(base, op=op, us=statistics.median(v), us_min=min(v))
            for op, v in (("dispatch", dispatches), ("combine", combines), ("round", rounds))]
    buf.free()
    nvshmem.free(x)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impls", default=None, help="DSLs, comma-separated (default: all of kernels.moe.DSLS)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--topk", type=int, default=8)
    add_timing_args(ap, iters=50, warmup=5)
    args = ap.parse_args(argv)
    import nvshmem_dsl as nvshmem

    with nvshmem.init():
        me, npes = nvshmem.my_pe(), nvshmem.n_pes()
        cycles_per_us = _spin_cycles_per_us()
        from nvshmem_dsl.kernels.moe import DSLS
        for impl in args.impls.split(",") if args.impls else DSLS:
            try:
                __import__(f"nvshmem_dsl.kernels.moe.{impl}")
            except Exception as exc:  # noqa: BLE001
                print(json.dumps({"impl": impl, "bench": "moe", "skipped": str(exc)[:300], "pe": me}), flush=True)
                continue
            for row in measure(impl, args, me, npes, cycles_per_us):
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
