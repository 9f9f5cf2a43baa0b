"""Time the communication kernels (nvshmem_dsl.kernels) of each DSL, NVSHMEM's own collectives on
a stream, and (one PE a GPU) NCCL through torch.distributed and torch symmetric memory's all-reduces, one PE of ``python -m nvshmem_dsl.run -n N bench/comm_bench.py ...`` (bench/comm_run.py
starts it beside the C++ twins of bench/cpp/comm.cu).

Timing, as bench/cpp/comm.cu does it: a spin kernel holds the stream while ``--iters`` calls are
enqueued behind it, then events around the calls give the GPU time per call, without the host's
launch cost (printed apart as host_us); one untimed call between the spin and the first event waits
out the PEs' start skew (each PE's spin ends at its own time; the call waits for its peers). Each
(impl, kind, dtype, bytes) is checked against a torch reference once before it is timed. One JSON
line per result.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import comm_shapes as CS  # noqa: E402


def _values(count, pe, dtype):
    import torch
    i = torch.arange(count, device="cuda", dtype=torch.int64)
    return (((i * 7 + pe * 3) % 17) - 8).to(dtype)


def _reference(kind, n, me, npes, dtype):
    import torch
    if kind in ("one_shot", "two_shot"):
        return sum(_values(n, p, torch.float32) for p in range(npes)).to(dtype)
    if kind == "all_gather":
        return torch.cat([_values(n, p, dtype) for p in range(npes)])
    return sum(_values(n * npes, p, torch.float32) for p in range(npes))[me * n:(me + 1) * n].to(dtype)


#: What the PEs would use instead of NVSHMEM: NCCL through torch.distributed, torch symmetric memory.
TORCH_IMPLS = ("nccl", "torch_symm")


def _torch_group(me, npes):
    """torch.distributed's NCCL group over the launcher's PEs (made once), or why there is none."""
    import os
    import torch.distributed as dist
    import nvshmem_dsl as nvshmem
    if nvshmem.info().get("pes_per_gpu", 1) > 1:
        return None, "PEs share a GPU (NCCL takes one rank a GPU)"
    if not dist.is_initialized():
        host = os.environ.get("MASTER_ADDR") or os.environ.get("NVSHMEM_DSL_STORE_HOST", "127.0.0.1")
        port = int(os.environ.get("MASTER_PORT") or int(os.environ.get("NVSHMEM_DSL_STORE_PORT", "29400")) + 7)
        dist.init_process_group("nccl", init_method=f"tcp://{host}:{port}", rank=me, world_size=npes)
    return dist.group.WORLD, None


def _torch_caller(impl, kind, x, out, stream, me, npes):
    """One call of ``kind`` by NCCL or torch symmetric memory on ``stream``, or (None, why not)."""
    import torch
    import torch.distributed as dist
    group, why = _torch_group(me, npes)
    if group is None:
        return None, why
    if impl == "nccl":
        def call():
            with torch.cuda.stream(stream):
                if kind in ("one_shot", "two_shot"):
                    out.copy_(x)
                    dist.all_reduce(out, group=group)
                elif kind == "all_gather":
                    dist.all_gather_into_tensor(out, x, group=group)
                else:
                    dist.reduce_scatter_tensor(out, x, group=group)
        return call, None
    if kind not in ("one_shot", "two_shot"):
        return None, "torch symmetric memory has no all-gather / reduce-scatter op to compare"
    try:
        import torch.distributed._symmetric_memory as symm_mem
        buf = symm_mem.empty(x.shape, dtype=x.dtype, device=x.device)
        symm_mem.rendezvous(buf, group.group_name)
        op = torch.ops.symm_mem
    except Exception as exc:  # noqa: BLE001 - reported as the row's reason
        return None, f"torch symmetric memory unavailable: {exc}"[:200]
    buf.copy_(x)

    def call():
        with torch.cuda.stream(stream):
            if kind == "one_shot":
                out.copy_(op.one_shot_all_reduce(buf, "sum", group.group_name))
            else:
                buf.copy_(x)
                op.two_shot_all_reduce_(buf, "sum", group.group_name)
                out.copy_(buf)
    return call, None


def _caller(impl, kind, x, out, stream):
    """A function making one call of ``kind`` by ``impl`` on ``stream``."""
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl import kernels
    if impl == "nvshmem":  # NVSHMEM's own collective, *_on_stream through the host API
        team = nvshmem.Team.TEAM_WORLD
        if kind in ("one_shot", "two_shot"):
            return lambda: nvshmem.reduce(team, out, x, "sum", stream=stream)
        if kind == "all_gather":
            return lambda: nvshmem.fcollect(team, out, x, stream=stream)
        return lambda: nvshmem.reducescatter(team, out, x, "sum", stream=stream)
    if kind in ("one_shot", "two_shot"):
        return lambda: kernels.all_reduce(x, out, algorithm=kind, dsl=impl, stream=stream)
    return lambda: getattr(kernels, kind)(x, out, dsl=impl, stream=stream)


def _spin_cycles_per_us():
    """The spin kernel's clock: the fastest of three timed sleeps after a first one (whose launch
    loads the kernel while the events run: it would make the clock look slow and the spins short)."""
    import torch
    torch.cuda._sleep(1000)
    best = 0.0
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(10_000_000)
        b.record()
        b.synchronize()
        best = max(best, 10_000_000 / (a.elapsed_time(b) * 1000))
    return best


def agreed_spin_us(host_us, args):
    """A spin long enough for ``args.iters`` calls of ``host_us`` each to be enqueued behind it, the
    same on every PE (the slowest host's; one host collective)."""
    from nvshmem_dsl.host import memory
    spin_us = max(args.spin_us, 2 * host_us * args.iters)
    ranges = memory.value_ranges([int(spin_us)])
    return ranges[0][1] if ranges else spin_us


def measure(impl, kind, dtype, nbytes, args, me, npes, cycles_per_us):
    import torch
    import nvshmem_dsl as nvshmem
    tdtype = getattr(torch, dtype)
    n = CS.elements(kind, nbytes, tdtype.itemsize, npes)
    xn = n * npes if kind == "reduce_scatter" else n
    x = nvshmem.array((xn,), dtype, like="torch")
    x.copy_(_values(xn, me, tdtype))
    # NVSHMEM's on-stream collectives want a symmetric destination
    want = _reference(kind, n, me, npes, tdtype)
    out = nvshmem.array(want.shape, dtype, like="torch") if impl == "nvshmem" else torch.empty_like(want)
    out.fill_(float("nan"))
    stream = torch.cuda.Stream()
    if impl in TORCH_IMPLS:
        call, why = _torch_caller(impl, kind, x, out, stream, me, npes)
        if call is None:
            nvshmem.free(x)
            return {"impl": impl, "bench": "comm", "kind": kind, "dtype": dtype, "bytes": nbytes, "pe": me,
                    "skipped": why}
    else:
        call = _caller(impl, kind, x, out, stream)
    torch.cuda.synchronize()
    nvshmem.barrier_all()
    call()
    stream.synchronize()
    ok = bool(torch.equal(out, want))
    timing = time_calls(call, stream, args, cycles_per_us)
    nvshmem.free(x)
    if impl == "nvshmem":
        nvshmem.free(out)
    return {"impl": impl, "bench": "comm", "kind": kind, "dtype": dtype, "n": n, "bytes": nbytes,
            "npes": npes, "pe": me, **timing, "ok": ok}


def add_timing_args(ap, *, iters=100, warmup=10, spin_us=2000.0) -> None:
    """The options :func:`time_calls` reads (``args.iters``, ``reps``, ``warmup``, ``spin_us``), with a
    bench's own defaults."""
    ap.add_argument("--iters", type=int, default=iters, help="calls timed behind one spin")
    ap.add_argument("--reps", type=int, default=5, help="spins (the median is reported)")
    ap.add_argument("--warmup", type=int, default=warmup, help="calls before timing (their host time: host_us)")
    ap.add_argument("--spin-us", type=float, default=spin_us, help="the shortest spin holding the stream")


def time_calls(call, stream, args, cycles_per_us) -> dict:
    """GPU time per call of ``call`` (which enqueues on ``stream``): ``args.warmup`` calls (their
    host time: host_us), then ``args.reps`` times ``args.iters`` calls behind a spin long enough
    for all of them to be enqueued, the same on every PE, and one untimed call (it waits out the PEs'
    start skew), events around the calls (collective: barriers between reps). The median and least
    us per call and how they were taken."""
    import torch
    import nvshmem_dsl as nvshmem
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        call()
    host_us = (time.perf_counter() - t0) / max(args.warmup, 1) * 1e6
    stream.synchronize()
    spin_us = agreed_spin_us(host_us, args)
    times, short = [], 0
    for _ in range(args.reps):
        nvshmem.barrier_all()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            torch.cuda._sleep(int(spin_us * cycles_per_us))
            call()  # untimed: it waits out the PEs' start skew (their spins end apart)
            a.record(stream)
            for _ in range(args.iters):
                call()
            short += a.query()  # the spin ended before the last call was enqueued: host-paced
            b.record(stream)
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / args.iters)
    nvshmem.barrier_all()
    return {"us": statistics.median(times), "us_min": min(times), "host_us": host_us, "spin_us": spin_us,
            "host_paced_reps": short, "iters": args.iters, "reps": args.reps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impls", default="numba,triton,cute,nvshmem,nccl,torch_symm")
    ap.add_argument("--kinds", default=",".join(CS.KINDS))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--bytes", default=",".join(str(b) for b in CS.LAT_BYTES))
    add_timing_args(ap)
    args = ap.parse_args(argv)
    import nvshmem_dsl as nvshmem

    with nvshmem.init():
        me, npes = nvshmem.my_pe(), nvshmem.n_pes()
        cycles_per_us = _spin_cycles_per_us()
        for impl in args.impls.split(","):
            if impl not in ("nvshmem", *TORCH_IMPLS):
                try:
                    __import__(f"nvshmem_dsl.kernels.{impl}")
                except Exception as exc:  # noqa: BLE001 - reported, the others go on
                    print(json.dumps({"impl": impl, "bench": "comm", "skipped": str(exc)[:300], "pe": me}), flush=True)
                    continue
            for dtype in args.dtypes.split(","):
                for kind in args.kinds.split(","):
                    if impl in ("nvshmem", "nccl") and kind == "two_shot":
                        continue  # one reduce / all_reduce row serves both all-reduce kernels
                    for nbytes in (int(b) for b in args.bytes.split(",")):
                        row = measure(impl, kind, dtype, nbytes, args, me, npes, cycles_per_us)
                        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
