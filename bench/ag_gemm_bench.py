"""Time the fused all-gather + GEMM (nvshmem_dsl.kernels.ag_gemm) beside the unfused sequence, one PE
of ``python -m nvshmem_dsl.run -n N bench/ag_gemm_bench.py ...`` (bench/comm_run.py --ag-gemm
starts it and prints the table).

Sizes are the whole problem, ``C[M, N] = A[M, K] @ B[K, N]``: each PE holds A's rows
``M / n_pes`` (symmetric) and B's columns ``N / n_pes`` and computes its ``C[:, N / n_pes]``.
Implementations (``--impls``):

* ``fused_ctas:<c>``: all_gather_matmul(comm="ctas", comm_ctas=c), one row per ``--comm-ctas`` value;
* ``fused_ce``: all_gather_matmul(comm="copy_engine");
* ``fused_cute_ctas:<c>``, ``fused_cute_ce``: the same with dsl="cute";
* ``unfused_ours``: nvshmem_dsl.kernels.all_gather (Triton) then torch.matmul;
* ``unfused_nvshmem``: NVSHMEM's fcollect on the stream then torch.matmul;
* ``unfused_nccl``: torch.distributed's all_gather_into_tensor then torch.matmul (one PE a GPU only);
* ``gemm``: torch.matmul alone on the gathered A (what the fused kernel hides the gather behind);
* ``ag_ours`` / ``ag_nvshmem``: the all-gathers alone.

Timing as bench/comm_bench.py: a spin kernel holds the stream while ``--iters`` calls are enqueued,
then events around them give the GPU time per call. Integer-valued data make every sum exact, so each
fused result must equal the unfused one bit for bit (checked once before timing: "ok"). One JSON line
per (impl, size).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from comm_bench import _spin_cycles_per_us, _torch_group, add_timing_args, time_calls  # noqa: E402

IMPLS = ("fused_ctas", "fused_ce", "fused_cute_ctas", "fused_cute_ce", "unfused_ours", "unfused_nvshmem", "unfused_nccl", "gemm", "ag_ours",
         "ag_nvshmem")
#: The issue's size first (M = N = K = 8192), then smaller ones.
SIZES = ((8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048))


def _ints(rows, cols, salt):
    import torch
    i = torch.arange(rows, device="cuda", dtype=torch.int64).view(-1, 1)
    j = torch.arange(cols, device="cuda", dtype=torch.int64).view(1, -1)
    return (((i * 7 + j * 3 + salt * 5) % 9) - 4).to(torch.bfloat16)


class Case:
    """One size's arrays on this PE: a (symmetric shard), b, outputs, the gather buffers."""

    def __init__(self, M, N, K, me, npes):
        import torch
        import nvshmem_dsl as nvshmem
        if M % npes or N % npes:
            raise ValueError(f"M ({M}) and N ({N}) must be multiples of the {npes} PEs")
        self.m, self.n, self.K = M // npes, N // npes, K
        self.a = nvshmem.array((self.m, K), "bfloat16", like="torch")
        self.a.copy_(_ints(self.m, K, me))
        self.b = _ints(K, self.n, 100 + me)
        self.out = torch.empty((M, self.n), dtype=torch.bfloat16, device="cuda")
        self.gathered = torch.empty((M, K), dtype=torch.bfloat16, device="cuda")
        self.gathered_sym = nvshmem.array((M, K), "bfloat16", like="torch")  # fcollect's destination

    def free(self):
        import nvshmem_dsl as nvshmem
        nvshmem.free(self.a)
        nvshmem.free(self.gathered_sym)


def caller(impl, case, stream, me, npes):
    """(function making one call on ``stream``, None) or (None, why not)."""
    import torch
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl import kernels
    from nvshmem_dsl.kernels.ag_gemm import all_gather_matmul
    c = case
    name, _, arg = impl.partition(":")
    if name.startswith("fused"):
        dsl = "cute" if name.startswith("fused_cute") else "triton"
        if name.endswith("_ctas"):
            return (lambda: all_gather_matmul(c.a, c.b, c.out, dsl=dsl, comm="ctas", comm_ctas=int(arg),
                                              stream=stream)), None
        return (lambda: all_gather_matmul(c.a, c.b, c.out, dsl=dsl, comm="copy_engine", stream=stream)), None
    flat_a, flat_g = c.a.view(-1), c.gathered.view(-1)

    def ours():
        kernels.all_gather(flat_a, flat_g, dsl="triton", stream=stream)

    def fcollect():
        nvshmem.fcollect(nvshmem.Team.TEAM_WORLD, c.gathered_sym, c.a, stream=stream)

    def matmul(src):
        with torch.cuda.stream(stream):
            torch.matmul(src, c.b, out=c.out)

    if name == "unfused_ours":
        return (lambda: (ours(), matmul(c.gathered))), None
    if name == "unfused_nvshmem":
        return (lambda: (fcollect(), matmul(c.gathered_sym))), None
    if name == "gemm":
        return (lambda: matmul(c.gathered)), None
    if name == "ag_ours":
        return ours, None
    if name == "ag_nvshmem":
        return fcollect, None
    if name == "unfused_nccl":
        group, why = _torch_group(me, npes)
        if group is None:
            return None, why
        import torch.distributed as dist

        def nccl():
            with torch.cuda.stream(stream):
                dist.all_gather_into_tensor(c.gathered, c.a, group=group)
            matmul(c.gathered)
        return nccl, None
    raise ValueError(f"unknown implementation {impl!r} (choose from {', '.join(IMPLS)})")


def measure(impl, M, N, K, case, args, me, npes, cycles_per_us, reference):
    import torch
    import nvshmem_dsl as nvshmem
    stream = torch.cuda.Stream()
    call, why = caller(impl, case, stream, me, npes)
    row = {"bench": "ag_gemm", "impl": impl, "M": M, "N": N, "K": K, "npes": npes, "pe": me,
           "pes_per_gpu": nvshmem.info().get("pes_per_gpu", 1)}
    if call is None:
        return {**row, "skipped": why}
    torch.cuda.synchronize()
    nvshmem.barrier_all()
    case.out.fill_(float("nan"))
    call()
    stream.synchronize()
    if impl.startswith(("fused", "unfused")):
        row["ok"] = bool(torch.equal(case.out, reference))
    timing = time_calls(call, stream, args, cycles_per_us)
    return {**row, **timing, "tflops": 2 * M * (N // npes) * K / (timing["us"] * 1e6)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--comm-ctas", default="4,8,16", help="comm_ctas values of the fused_ctas rows")
    ap.add_argument("--sizes", default=";".join(",".join(map(str, s)) for s in SIZES),
                    help="M,N,K;M,N,K... of the whole problem")
    add_timing_args(ap, iters=20, warmup=5, spin_us=20000.0)
    args = ap.parse_args(argv)
    import torch
    import nvshmem_dsl as nvshmem

    impls = []
    for impl in args.impls.split(","):
        impls += [f"{impl}:{c}" for c in args.comm_ctas.split(",")] if impl.endswith("_ctas") else [impl]
    with nvshmem.init():
        me, npes = nvshmem.my_pe(), nvshmem.n_pes()
        cycles_per_us = _spin_cycles_per_us()
        for size in args.sizes.split(";"):
            M, N, K = (int(v) for v in size.split(","))
            case = Case(M, N, K, me, npes)
            full = torch.cat([_ints(M // npes, K, p) for p in range(npes)])
            reference = torch.matmul(full, case.b)  # exact: integer data, float32 sums
            del full
            for impl in impls:
                print(json.dumps(measure(impl, M, N, K, case, args, me, npes, cycles_per_us, reference)),
                      flush=True)
            case.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
