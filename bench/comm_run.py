"""The communication kernels beside their C++ twins and NVSHMEM's collectives, in one run:

    python bench/comm_run.py [--nproc 2] [--impls cpp,numba,triton,cute,nvshmem] [--bw] [--out F]
    python bench/comm_run.py --moe [--tokens 128] [--experts 64]     # MoE dispatch / combine instead
    python bench/comm_run.py --ag-gemm [--ag-sizes 8192,8192,8192]    # fused all-gather + GEMM instead

1. the C++ twins (bench/cpp/build/comm_cpp, built by bench/cpp/build.sh unless --no-build) on every
   PE, with the plans of nvshmem_dsl.kernels._plan (the C++ has no launch arithmetic of its own);
2. bench/comm_bench.py: the Numba, Triton and CuTe kernels through nvshmem_dsl.kernels, and
   NVSHMEM's on-stream reduce / fcollect / reducescatter through nvshmem_dsl's host API.

3. with ``--moe``, instead: MoE dispatch and combine (nvshmem_dsl.kernels.moe) of the C++ twin
   (bench/cpp/build/moe_cpp) and of bench/moe_bench.py's DSLs, at ``--tokens`` per PE.

4. with ``--ag-gemm``, instead: bench/ag_gemm_bench.py: the fused all-gather + GEMM
   (nvshmem_dsl.kernels.ag_gemm, each communication) beside the all-gather followed by torch.matmul
   (ours, NVSHMEM's fcollect, NCCL), at ``--ag-sizes`` (M,N,K of the whole problem; default 8192^3,
   4096^3, 2048^3); the ratio fused / unfused and the overlap efficiency unfused / fused per row.

Latency rows at bench/comm_shapes.LAT_BYTES; ``--bw`` adds BW_BYTES (only meaningful with one PE
per GPU). Results: microseconds per call averaged over the PEs, every DSL's time ratio to its C++
twin and the one-shot's to NVSHMEM's reduce; the JSON file keeps every record.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import comm_shapes as CS  # noqa: E402
import run as R  # noqa: E402

COMM_BINARY = HERE / "cpp" / "build" / "comm_cpp"
MOE_BINARY = HERE / "cpp" / "build" / "moe_cpp"
BASE = {"one_shot": "nvshmem:one_shot", "two_shot": "nvshmem:one_shot", "all_gather": "nvshmem:all_gather",
        "reduce_scatter": "nvshmem:reduce_scatter"}


def plans(kinds, dtypes, sizes, npes) -> str:
    """The C++ driver's --plans: kernel:dtype:n:span:chunk:grid of every row, with the PEs reached by
    load/store (the one-shot's LL protocol up to _plan.LL_MAX_BYTES, as the DSLs' calls take it on one
    node; comm_cpp refuses an LL plan whose peers are not)."""
    from nvshmem_dsl.kernels import _plan
    out = []
    for dtype in dtypes:
        for kind in kinds:
            for nbytes in sizes:
                p = _plan.plan(kind, dtype, CS.elements(kind, nbytes, _plan.ITEMSIZE[dtype], npes), npes, True)
                out.append(f"{p.kernel}:{dtype}:{p.n}:{p.span}:{p.chunk}:{p.grid}")
    return ",".join(out)


def aggregate(records):
    """(impl, kind, dtype, bytes) -> mean over PEs of the median us, and whether every PE checked ok."""
    groups = {}
    for r in records:
        if r.get("bench") != "comm" or "us" not in r:
            continue
        groups.setdefault((r["impl"], r["kind"], r["dtype"], r["bytes"]), []).append(r)
    return {k: {"us": statistics.mean(r["us"] for r in rs), "ok": all(r.get("ok", False) for r in rs),
                "pes": len(rs), "host_us": statistics.mean(r.get("host_us", 0.0) for r in rs)}
            for k, rs in groups.items()}


def table(agg, impls) -> str:
    dsls = [i for i in impls if i in ("numba", "triton", "cute")]
    others = [i for i in impls if i in ("nccl", "torch_symm")]
    head = f"{'kind':<15}{'dtype':<10}{'bytes':>10}{'cpp us':>9}" + "".join(f"{d + ' us':>11}{'/cpp':>6}" for d in dsls) \
        + f"{'nvshmem us':>11}{'best/nv':>8}" + "".join(f"{o + ' us':>14}{'best/it':>8}" for o in others)
    lines = [head]
    keys = sorted({k[1:] for k in agg}, key=lambda k: (CS.KINDS.index(k[0]), k[1], k[2]))
    for kind, dtype, nbytes in keys:
        cpp = agg.get(("cpp", kind, dtype, nbytes))
        row = f"{kind:<15}{dtype:<10}{nbytes:>10}{(cpp['us'] if cpp else float('nan')):>9.2f}"
        best = float("inf")
        for d in dsls:
            r = agg.get((d, kind, dtype, nbytes))
            us = r["us"] if r else float("nan")
            best = min(best, us) if r else best
            ratio = us / cpp["us"] if (r and cpp) else float("nan")
            row += f"{us:>10.2f}{'' if (not r or r['ok']) else '!'}{ratio:>6.2f}".replace("  nan", "    -")
        nv = agg.get(("nvshmem", "one_shot" if kind == "two_shot" else kind, dtype, nbytes))
        row += f"{(nv['us'] if nv else float('nan')):>11.2f}{(best / nv['us'] if nv and best < float('inf') else float('nan')):>8.2f}"
        for o in others:
            r = agg.get((o, "one_shot" if (kind == "two_shot" and o == "nccl") else kind, dtype, nbytes))
            row += f"{(r['us'] if r else float('nan')):>14.2f}" + \
                f"{(best / r['us'] if r and best < float('inf') else float('nan')):>8.2f}"
        lines.append(row)
    lines.append("us: GPU time per call (spin-held stream, mean over PEs of the median of reps); /cpp: time ratio "
                 "to the C++ twin; best/nv: the fastest DSL's time over NVSHMEM's collective (reduce for both "
                 "all-reduces); best/it: over NCCL's or torch symmetric memory's (one PE a GPU only); '!': a PE's result "
                 "was wrong")
    return "\n".join(lines)


def moe_table(records) -> str:
    """MoE rows: (impl, op) -> mean over PEs of the median us, with ratios to C++."""
    groups = {}
    for r in records:
        if r.get("bench") == "moe" and "us" in r:
            groups.setdefault((r["impl"], r["op"]), []).append(r["us"])
    agg = {k: statistics.mean(v) for k, v in groups.items()}
    impls = sorted({k[0] for k in agg}, key=lambda i: (i != "cpp", i))
    lines = [f"{'op':<10}" + "".join(f"{i + ' us':>12}{'/cpp':>6}" for i in impls)]
    for op in ("dispatch", "combine", "round"):
        row = f"{op:<10}"
        for i in impls:
            us, cpp = agg.get((i, op)), agg.get(("cpp", op))
            row += f"{us if us is not None else float('nan'):>12.2f}" + \
                f"{(us / cpp) if (us is not None and cpp) else float('nan'):>6.2f}"
        lines.append(row)
    return "\n".join(lines)


def ag_gemm_table(records) -> str:
    """Fused all-gather + GEMM rows: (size, impl) -> mean over PEs of the median us; each fused
    row's time over the best unfused sequence's, and the overlap efficiency (the inverse)."""
    groups, oks, shared = {}, {}, False
    for r in records:
        if r.get("bench") == "ag_gemm" and "us" in r:
            key = ((r["M"], r["N"], r["K"]), r["impl"])
            groups.setdefault(key, []).append(r["us"])
            oks[key] = oks.get(key, True) and r.get("ok", True)
            shared |= r.get("pes_per_gpu", 1) > 1
    agg = {k: statistics.mean(v) for k, v in groups.items()}
    lines = [f"{'M,N,K':<16}{'impl':<20}{'us':>10}{'/unfused':>10}{'unfused/':>10}"]
    for size in sorted({k[0] for k in agg}, reverse=True):
        unfused = {i: us for (sz, i), us in agg.items() if sz == size and i.startswith("unfused")}
        best = min(unfused.values()) if unfused else None
        for (sz, impl), us in sorted(agg.items(), key=lambda kv: (not kv[0][1].startswith("fused"), kv[0][1])):
            if sz != size:
                continue
            fused = impl.startswith("fused") and best
            row = f"{','.join(map(str, size)):<16}{impl + ('' if oks[(sz, impl)] else '!'):<20}{us:>10.1f}"
            row += f"{us / best:>10.2f}{best / us:>10.2f}" if fused else f"{'-':>10}{'-':>10}"
            lines.append(row)
    lines.append("us: GPU time per call (spin-held stream, mean over PEs of the median of reps); /unfused: time "
                 "over the fastest unfused row (all-gather then torch.matmul; target <= 0.8); unfused/: overlap "
                 "efficiency; '!': a PE's result differed from torch's")
    if shared:
        lines.append("PEs share a GPU here: these times check that the calls run, they measure no overlap")
    return "\n".join(lines)


def _build_cpp(target: str, env, args) -> None:
    """bench/cpp/build.sh for one C++ program (comm, moe) unless --no-build."""
    if not args.no_build:
        subprocess.run(["bash", str(HERE / "cpp" / "build.sh")], cwd=ROOT, check=False,
                       env=dict(env, BENCH_CPP_TARGETS=target))


def _step(name: str, argv, env, args, logs, steps: dict, key: str) -> list:
    """One program at args.nproc PEs under our launcher: its status and time in ``steps[key]``, its records."""
    status, lines, secs = R.run_step(name, R.launcher_cmd(args.python, args.nproc, 120) + argv, env,
                                     args.timeout, logs)
    steps[key] = {"status": status, "seconds": round(secs, 1)}
    return R.parse_records(lines)


def _write(args, default_name: str, meta: dict, records, text: str) -> None:
    """The results file (--out, or bench/results/<default_name>)."""
    out = Path(args.out) if args.out else HERE / "results" / default_name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "records": records, "table": text}, indent=1))
    print(f"results: {out}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--impls", default="cpp,numba,triton,cute,nvshmem,nccl,torch_symm")
    ap.add_argument("--kinds", default=",".join(CS.KINDS))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--bytes", default=",".join(str(b) for b in CS.LAT_BYTES))
    ap.add_argument("--bw", action="store_true", help="add the bandwidth sizes (one PE per GPU only)")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", default=None)
    ap.add_argument("--moe", action="store_true", help="MoE dispatch / combine instead of the collectives")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--ag-gemm", action="store_true", help="the fused all-gather + GEMM instead of the collectives")
    ap.add_argument("--ag-sizes", default=None, help="M,N,K;M,N,K... (default: ag_gemm_bench.py's)")
    ap.add_argument("--ag-impls", default=None, help="ag_gemm_bench.py's --impls (default: all)")
    ap.add_argument("--comm-ctas", default="4,8,16", help="comm_ctas values of the fused_ctas rows")
    args = ap.parse_args(argv)
    if args.moe:
        return main_moe(args)
    if args.ag_gemm:
        return main_ag_gemm(args)
    impls = args.impls.split(",")
    sizes = [int(b) for b in args.bytes.split(",")] + (list(CS.BW_BYTES) if args.bw else [])
    kinds, dtypes = args.kinds.split(","), args.dtypes.split(",")
    common = ["--iters", str(args.iters), "--reps", str(args.reps)]
    records, steps = [], {}
    env = R.bench_env(None, args.nproc)
    env.setdefault("NVSHMEM_SYMMETRIC_SIZE", "4G")
    with tempfile.TemporaryDirectory(prefix="comm-bench-") as work:
        logs = Path(work) / "logs"
        if "cpp" in impls:
            _build_cpp("comm", env, args)
            cpp = [str(HERE / "cpp" / "exec.py"), str(COMM_BINARY), "--uid-file", str(Path(work) / "uid"),
                   "--plans", plans(kinds, dtypes, sizes, args.nproc), *common]
            records += _step("comm_cpp", cpp, env, args, logs, steps, "cpp")
        py = [i for i in impls if i != "cpp"]
        if py:
            argv_py = [str(HERE / "comm_bench.py"), "--impls", ",".join(py), "--kinds", ",".join(kinds),
                       "--dtypes", ",".join(dtypes), "--bytes", ",".join(map(str, sizes)), *common]
            records += _step("comm_py", argv_py, env, args, logs, steps, "py")
    agg = aggregate(records)
    text = table(agg, impls)
    print(text)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "nproc": args.nproc, "command": " ".join(["comm_run.py", *(argv or sys.argv[1:])]),
            "steps": steps, "env": {k: env.get(k) for k in ("NVSHMEM_SYMMETRIC_SIZE", "NVSHMEM_DISABLE_NVLS",
                                                              "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}}
    _write(args, "comm-latest.json", meta, records, text)
    return 0 if all(s["status"] == 0 for s in steps.values()) and all(v["ok"] for v in agg.values()) else 1



def main_moe(args) -> int:
    from nvshmem_dsl.kernels.moe import DSLS
    impls = [i for i in args.impls.split(",") if i == "cpp" or i in DSLS]
    shape = ["--tokens", str(args.tokens), "--hidden", str(args.hidden), "--experts", str(args.experts),
             "--topk", str(args.topk), "--reps", str(args.reps)]
    env = R.bench_env(None, args.nproc)
    env.setdefault("NVSHMEM_SYMMETRIC_SIZE", "16G")
    records, steps = [], {}
    with tempfile.TemporaryDirectory(prefix="moe-bench-") as work:
        logs = Path(work) / "logs"
        if "cpp" in impls:
            _build_cpp("moe", env, args)
            cpp = [str(HERE / "cpp" / "exec.py"), str(MOE_BINARY), "--uid-file", str(Path(work) / "uid"), *shape]
            records += _step("moe_cpp", cpp, env, args, logs, steps, "cpp")
        py = [i for i in impls if i != "cpp"]
        if py:
            records += _step("moe_py", [str(HERE / "moe_bench.py"), "--impls", ",".join(py), *shape], env, args,
                             logs, steps, "py")
    text = moe_table(records)
    print(text)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "nproc": args.nproc, "tokens": args.tokens, "hidden": args.hidden,
            "experts": args.experts, "topk": args.topk, "steps": steps}
    _write(args, "moe-latest.json", meta, records, text)
    checks = [r for r in records if r.get("bench") in ("moe", "moe_check")]
    return 0 if all(s["status"] == 0 for s in steps.values()) and all(r.get("ok", True) for r in checks) else 1


def main_ag_gemm(args) -> int:
    env = R.bench_env(None, args.nproc)
    env.setdefault("NVSHMEM_SYMMETRIC_SIZE", "4G")
    argv = [str(HERE / "ag_gemm_bench.py"), "--comm-ctas", args.comm_ctas, "--reps", str(args.reps)]
    argv += ["--sizes", args.ag_sizes] if args.ag_sizes else []
    argv += ["--impls", args.ag_impls] if args.ag_impls else []
    steps = {}
    with tempfile.TemporaryDirectory(prefix="ag-gemm-bench-") as work:
        records = _step("ag_gemm_py", argv, env, args, Path(work) / "logs", steps, "py")
    text = ag_gemm_table(records)
    print(text)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "nproc": args.nproc, "steps": steps,
            "env": {k: env.get(k) for k in ("NVSHMEM_SYMMETRIC_SIZE", "NVSHMEM_DISABLE_NVLS",
                                            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}}
    _write(args, "ag-gemm-latest.json", meta, records, text)
    rows = [r for r in records if r.get("bench") == "ag_gemm"]
    return 0 if steps["py"]["status"] == 0 and rows and all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
