"""`make bench`: NVSHMEM benchmarks in CUDA C++, Numba, CuTe and Triton, side by side, in one run.

    python bench/run.py [--quick] [--impls cpp,numba,cute,triton,nv4py,nv4py_cute] [--only put_bw,p_lat] [--nproc 2]
    python bench/run.py --compile-families [--families reduce,...] [--scopes ...] [--outline auto,none]

Steps (each in its own processes, each with a timeout):

1. build the C++ baseline (bench/cpp/build.sh, nvcc), timed;
2. first-kernel compile time of each DSL (bench/compile_time.py), "cold" with empty
   NVSHMEM_DSL_CACHE / CUTE_DSL_CACHE_DIR directories, then "warm" with the same directories;
3. the C++ benchmark, one process per PE, started by our launcher
   (``python -m nvshmem_dsl.run -n 2 bench/cpp/exec.py bench/cpp/build/bench_cpp ...``; NVSHMEM's
   unique-id bootstrap, the id handed over in a file of a private temporary directory), or by
   ``mpirun -n 2`` with ``--cpp-launcher mpirun``;
4. bench/numba_bench.py, bench/cute_bench.py and bench/triton_bench.py under ``python -m
   nvshmem_dsl.run -n 2``, with the (now warm) cache of step 2; the kernels of the three are those
   of bench/bench_shapes.py.  Triton runs where ``--python`` can import triton and nvshmem_dsl.triton;
   elsewhere its steps are skipped with a one-line reason (not a failure);
5. bench/nv4py_bench.py and bench/nv4py_cute_bench.py the same way (``--impls ...,nv4py,nv4py_cute``):
   the same kernels with NVSHMEM4Py's (NVIDIA's ``nvshmem`` package's) Numba / CuTe device API and its
   host API, on the same NVSHMEM (bench/_nv4py.py); skipped, with the reason, where ``--python`` cannot
   import ``nvshmem.core`` (and cutlass).  Numba's compile times (step 2) have no cache of their own:
   "warm" is a second process.

Every process prints one JSON line per result; this script collects them, averages each result
over the PEs, writes bench/results/latest.json, prints a table of absolute numbers with ratios
to C++ (bandwidth: dsl / cpp, times: dsl / cpp) and plots bench/results/bandwidth.png when
matplotlib is importable.  NVSHMEM_DISABLE_NVLS=1 is forced for every process (no multicast).
Exit status: 0 when every step succeeded, 1 otherwise (the results of the others are kept).

The collectives (coll_lat, coll_bw: bench/cpp/coll.cuh and the coll_* kernels of the DSLs) are
rows ``coll_lat | <family>_<scope> | 8 B`` (microseconds per collective) and ``coll_bw |
<family>_<scope> | 1 MiB`` (bytes per PE / time per collective).

``--compile-families`` runs nothing else and needs no GPU: bench/compile_families.py, the
compile time of one collective kernel per family and scope by Numba, CuTe and Triton (cold and warm
cache) beside nvcc's; its records go to the results file (default
bench/results/compile-families.json), its table and the ratios to nvcc are printed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402

RESULTS = HERE / "results"
CPP_BINARY = HERE / "cpp" / "build" / "bench_cpp"
IMPLS = ("cpp", "numba", "cute", "triton", "nv4py", "nv4py_cute")
#: what is compared with C++: our three DSLs, and NVSHMEM4Py (NVIDIA's package) with its Numba device API (nv4py)
#: and its CuTe one (nv4py_cute)
DSLS = ("numba", "cute", "triton", "nv4py", "nv4py_cute")

# Forced / defaulted for every benchmark process.
FORCED_ENV = {"NVSHMEM_DISABLE_NVLS": "1"}  # multicast (NVLS) must stay off on shared hosts
DEFAULT_ENV = {
    "NVSHMEM_SYMMETRIC_SIZE": "2G",  # 2 x 256 MiB buffers + scratch, same for every implementation
    "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo",  # every PE is on this host
    "PYTHONUNBUFFERED": "1",
    # objects built as they are after the first process (a value set: no light first form of the O3 ones,
    # nvshmem_dsl.linker.outline.opt_tiered), so that a cold cache's run measures the code later runs link
    "NVSHMEM_DSL_OUTLINE_OPT": "auto",
}

#: Seconds a benchmark step may take beyond --timeout when it runs the collectives, per collective
#: kernel it compiles: NVSHMEM's collectives cost CuTe 5-80 s each (2 CPUs, NVSHMEM 3.8), Numba
#: up to 20 s where they are inlined (NVSHMEM_DSL_OUTLINE=none) or their objects not cached yet;
#: Triton links them out of line as Numba does.
COLL_COMPILE_ALLOWANCE = {"cpp": 0.0, "numba": 20.0, "cute": 60.0, "triton": 20.0, "nv4py": 20.0, "nv4py_cute": 60.0}

#: What a DSL's benchmark imports; an implementation whose modules --python cannot import is skipped.
REQUIRES = {"triton": "triton, nvshmem_dsl.triton", "nv4py": "nvshmem.core", "nv4py_cute": "nvshmem.core, cutlass"}


def unavailable(impl: str, python: str) -> str | None:
    """Why ``impl`` cannot run under ``python`` (one line), None when it can (or needs no check)."""
    mods = REQUIRES.get(impl)
    if not mods:
        return None
    try:
        proc = subprocess.run([python, "-c", f"import {mods}"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot import {mods}: {exc}"
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return f"cannot import {mods} ({last[:200]})"


def nproc_env(nproc: int) -> dict:
    """Defaults that depend on the number of PEs: NVSHMEM's reduce scratch, which a reducescatter
    of COLL_BW_BYTES per PE needs 2 x COLL_BW_BYTES x PEs of (NVSHMEM asserts otherwise)."""
    scratch = max(C.DEFAULT_REDUCE_SCRATCH, C.coll_scratch_needed(C.COLL_BW_BYTES, nproc))
    return {"NVSHMEM_REDUCE_SCRATCH_SIZE": str(scratch)}


# ------------------------------------------------------------------ processes


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def run_step(name: str, argv: list[str], env: dict, timeout: float, log_dir: Path,
             echo: bool = True) -> tuple[int, list[str], float]:
    """Run ``argv`` in its own process group; returns (status, output lines, seconds).

    Output (stdout and stderr together) is echoed with a prefix and kept in log_dir/<name>.log.
    Status 124 means the step ran past ``timeout`` and was killed.
    """
    _log(f"{name}: {' '.join(argv)}")
    log_dir.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    t0 = time.monotonic()
    with open(log_dir / f"{name}.log", "w") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, text=True, errors="replace")

        def pump() -> None:
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                log.write(line)
                if echo:
                    sys.stderr.write(f"  {name}| {line}")
                    sys.stderr.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _log(f"{name}: timed out after {timeout:.0f} s; stopping it")
            _kill_group(proc)
            status = 124
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
        reader.join(timeout=5)
    secs = time.monotonic() - t0
    _log(f"{name}: {'ok' if status == 0 else f'FAILED (status {status})'} in {secs:.1f} s")
    return status, lines, secs


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def parse_records(lines: list[str]) -> list[dict]:
    """JSON objects with an "impl" and a "bench" in the output (launcher prefixes are skipped)."""
    out = []
    for line in lines:
        i = line.find("{")
        if i < 0:
            continue
        try:
            rec = json.loads(line[i:])
        except ValueError:
            continue
        if isinstance(rec, dict) and "impl" in rec and "bench" in rec:
            out.append(rec)
    return out


# ------------------------------------------------------------------ aggregation


def key_of(rec: dict) -> tuple:
    return (rec["bench"], rec.get("scope", ""), int(rec.get("bytes", 0)))


def key_text(key: tuple) -> str:
    return f"{key[0]}|{key[1]}|{key[2]}"


def aggregate(records: list[dict]) -> dict:
    """{impl: {key: result}}: each result averaged over the PEs that reported it."""
    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        if rec["bench"] == "meta":
            continue
        groups.setdefault((rec["impl"],) + key_of(rec), []).append(rec)
    out: dict[str, dict] = {}
    for (impl, *key), recs in groups.items():
        first = recs[0]
        res = {
            "impl": impl, "bench": key[0], "scope": key[1], "bytes": key[2], "unit": first.get("unit", ""),
            "value": statistics.fmean(r["value"] for r in recs),
            "best": statistics.fmean(r.get("best", r["value"]) for r in recs),
            "iters": first.get("iters"), "reps": first.get("reps"),
            "per_pe": {str(r.get("pe", 0)): r["value"] for r in recs},
        }
        for extra in ("stage", "import_s", "concurrent"):
            if extra in first:
                res[extra] = first[extra]
        if any("checked" in r for r in recs):  # the kernel's result was verified on every PE
            res["checked"] = all(r.get("checked", True) for r in recs)
        out.setdefault(impl, {})[tuple(key)] = res
    return out


#: A put or get between two PEs cannot move more than this (GB/s per PE): NVLink 5 gives 900 GB/s
#: per direction, local HBM about 5 TB/s.  More means the kernel skipped its work (as the CuTe
#: warp kernel of 2026-11-22 did: 130 000 GB/s), so the run fails instead of reporting it.
MAX_PLAUSIBLE_GBPS = 1000.0


def implausible(agg: dict) -> list[str]:
    """Results not to be believed: more bandwidth than any interconnect gives, or a kernel whose
    output failed its check ('impl bench|scope|bytes (why)')."""
    out = []
    for impl, results in sorted(agg.items()):
        for key, res in sorted(results.items()):
            if higher_is_better(res["unit"]) and res["value"] > MAX_PLAUSIBLE_GBPS:
                out.append(f"{impl} {key_text(key)} ({res['value']:.0f} GB/s)")
            elif res.get("checked") is False:
                out.append(f"{impl} {key_text(key)} (wrong data after the kernel)")
    return out


def higher_is_better(unit: str) -> bool:
    return unit.lower().startswith("gb/s")


def ratios(agg: dict) -> list[dict]:
    """DSL / C++ (and NVSHMEM4Py / C++) for every result both have: bandwidth dsl/cpp (>1 is faster), times
    dsl/cpp (>1 is slower)."""
    cpp = agg.get("cpp", {})
    out = []
    for impl in DSLS:
        for key, res in sorted(agg.get(impl, {}).items()):
            base = cpp.get(key)
            if base is None or not base["value"]:
                continue
            out.append({
                "impl": impl, "key": key_text(key), "bench": key[0], "scope": key[1], "bytes": key[2],
                "unit": res["unit"], "ratio": res["value"] / base["value"],
                "higher_is_better": higher_is_better(res["unit"]),
                "iters_match": res.get("iters") == base.get("iters"),
            })
    return out


# ------------------------------------------------------------------ output


def human_bytes(n: int) -> str:
    if n <= 0:
        return ""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _num(x) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def sort_key(key: tuple) -> tuple:
    """Rows by bench, then collective family (in COLL_FAMILIES order), scope (thread, warp, block),
    size; other scopes by name."""
    bench, scope, nbytes = key
    family, _, sc = scope.rpartition("_")
    if sc not in C.SCOPES:
        family, sc = scope, ""
    frank = C.COLL_FAMILIES.index(family) if family in C.COLL_FAMILIES else len(C.COLL_FAMILIES)
    srank = C.SCOPES.index(sc) if sc in C.SCOPES else len(C.SCOPES)
    return (bench, frank, family, srank, nbytes)


def table(agg: dict) -> str:
    """One row per result: each implementation's value, then each DSL's ratio to C++ (columns of the
    implementations cpp, numba and cute always, of the others where they have results)."""
    keys = sorted({k for impl in agg.values() for k in impl}, key=sort_key)
    impls = [i for i in IMPLS if i in ("cpp", "numba", "cute") or agg.get(i)]
    dsls = [i for i in impls if i in DSLS]
    head = ["bench", "scope", "size", "unit", *impls, *(f"{i}/cpp" for i in dsls)]
    rows = [head]
    for key in keys:
        vals = {impl: agg.get(impl, {}).get(key) for impl in impls}
        unit = next(v["unit"] for v in vals.values() if v)
        row = [key[0], key[1], human_bytes(key[2]), unit]
        row += [_num(vals[i]["value"]) if vals[i] else "-" for i in impls]
        for impl in dsls:
            if vals[impl] and vals["cpp"] and vals["cpp"]["value"]:
                row.append(f"{vals[impl]['value'] / vals['cpp']['value']:.2f}")
            else:
                row.append("-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("ratios: bandwidth dsl/cpp (above 1: faster than C++); times dsl/cpp (above 1: slower)")
    return "\n".join(lines)


def plot(agg: dict, path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # noqa: BLE001
        return f"no plot: matplotlib is not importable ({type(exc).__name__}: {exc})"
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    colors = {"thread": "tab:blue", "warp": "tab:orange", "block": "tab:green"}
    styles = {"cpp": ("-", "o"), "numba": ("--", "s"), "cute": (":", "^"), "triton": ("-.", "D"),
              "nv4py": ((0, (1, 3)), "x"), "nv4py_cute": ((0, (3, 1, 1, 1)), "+")}
    drawn = 0
    for ax, bench in zip(axes, ("put_bw", "get_bw")):
        for impl in IMPLS:
            for scope in ("thread", "warp", "block"):
                pts = sorted((k[2], v["value"]) for k, v in agg.get(impl, {}).items()
                             if k[0] == bench and k[1] == scope and v["value"] > 0)
                if not pts:
                    continue
                ls, marker = styles[impl]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, marker=marker, color=colors[scope],
                        label=f"{impl} {scope}", markersize=4)
                drawn += 1
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_title(f"{bench.split('_')[0]} bandwidth per PE, 2 PEs at once")
        ax.grid(True, which="both", alpha=0.3)
    if not drawn:
        plt.close(fig)
        return "no plot: no bandwidth results"
    axes[0].set_ylabel("GB/s")
    for ax in axes:
        if ax.get_lines():
            ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


# ------------------------------------------------------------------ steps


def bench_env(cache_dir: str | None, nproc: int = 2) -> dict:
    env = dict(os.environ)
    for k, v in {**DEFAULT_ENV, **nproc_env(nproc)}.items():
        if not env.get(k):  # unset or empty
            env[k] = v
    env.update(FORCED_ENV)
    if cache_dir:
        env["NVSHMEM_DSL_CACHE"] = cache_dir
    # the C++ binary finds libnvshmem_host.so.3 through its rpath; nothing else is needed here
    return env


def launcher_cmd(python: str, nproc: int, init_timeout: float) -> list[str]:
    return [python, "-m", "nvshmem_dsl.run", "-n", str(nproc), "--timeout", str(init_timeout)]


def mpirun_cmd(nproc: int) -> list[str]:
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None:
        raise FileNotFoundError("no mpirun/mpiexec on PATH (use --cpp-launcher launcher)")
    cmd = [mpirun, "-n", str(nproc)]
    try:
        version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    except Exception:  # noqa: BLE001
        version = ""
    if "Open MPI" in version or "OpenRTE" in version:
        cmd += ["--bind-to", "none"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        for var in (*FORCED_ENV, *DEFAULT_ENV, *nproc_env(nproc), "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES"):
            if var in os.environ or var in FORCED_ENV or var in DEFAULT_ENV or var in nproc_env(nproc):
                cmd += ["-x", var]
    return cmd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repetitions (whole run < 4 min)")
    ap.add_argument("--impls", default=",".join(IMPLS),
                    help=f"comma-separated subset of {','.join(IMPLS)} (default all; triton is skipped, with "
                         "the reason, where --python cannot import it)")
    ap.add_argument("--only", default="", help="benchmarks to run (see bench/_common.py BENCHES); default all")
    ap.add_argument("--reps", type=int, default=0, help="timed repetitions per point (default 10, quick 3)")
    ap.add_argument("--sizes", default="", help="put/get sizes instead of the default ones: bytes, K, M or G, "
                                                "comma-separated (e.g. 1M,4M,16M)")
    ap.add_argument("--nproc", type=int, default=2, help="PEs (processes, one GPU each)")
    ap.add_argument("--cpp-launcher", choices=("launcher", "mpirun"), default="launcher",
                    help="start the C++ PEs with python -m nvshmem_dsl.run (default) or mpirun")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per step (default 900, quick 300)")
    ap.add_argument("--init-timeout", type=float, default=120, help="seconds the PEs wait for each other at init")
    ap.add_argument("--no-build", action="store_true", help="use the existing bench/cpp/build/bench_cpp")
    ap.add_argument("--no-compile-time", action="store_true", help="skip the cold/warm compile-time runs")
    ap.add_argument("--arch", default="sm_90a", help="arch for the compile-time runs (default sm_90a)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the DSL benchmarks")
    ap.add_argument("--out", default=str(RESULTS / "latest.json"))
    ap.add_argument("--quiet", action="store_true", help="do not echo the steps' output")
    cf = ap.add_argument_group("compile time of the collectives (no GPU needed)")
    cf.add_argument("--compile-families", action="store_true",
                    help="only bench/compile_families.py: one collective kernel per family and scope compiled by "
                         "Numba, CuTe and Triton (cold, warm) and nvcc (--impls cpp)")
    cf.add_argument("--families", default="", help="comma-separated collective families (default all)")
    cf.add_argument("--scopes", default="", help="comma-separated scopes (default thread,warp,block)")
    cf.add_argument("--outline", default="", help="NVSHMEM_DSL_OUTLINE modes to compile the DSLs under, e.g. "
                                                  "auto,none (default: the environment's)")
    args = ap.parse_args(argv)
    try:
        sizes = C.parse_sizes(args.sizes)
    except ValueError as e:
        ap.error(str(e))

    impls = [i for i in args.impls.split(",") if i]
    bad = set(impls) - set(IMPLS)
    if bad:
        ap.error(f"unknown implementation(s): {', '.join(sorted(bad))}")
    skipped = {}
    if not args.compile_families:
        for impl in impls:
            why = unavailable(impl, args.python)
            if why:
                _log(f"{impl}: skipped: {why}")
                skipped[impl] = why
        impls = [i for i in impls if i not in skipped]
    timeout = args.timeout or (300.0 if args.quick else 900.0)
    only = [x for x in args.only.split(",") if x]
    ncoll = len(C.COLL_FAMILIES) * len(C.SCOPES) if not only or {"coll_lat", "coll_bw"} & set(only) else 0
    if args.compile_families:
        timeout = args.timeout or 4 * 3600.0
        if args.out == str(RESULTS / "latest.json"):
            args.out = str(RESULTS / "compile-families.json")
    out_path = Path(args.out)
    log_dir = out_path.parent / "logs"
    common = (["--quick"] if args.quick else []) + (["--only", args.only] if args.only else []) + \
             (["--reps", str(args.reps)] if args.reps else []) + \
             (["--sizes", ",".join(map(str, sizes))] if sizes else [])
    echo = not args.quiet

    started = time.time()
    records: list[dict] = []
    steps: dict[str, dict] = {}
    work = Path(tempfile.mkdtemp(prefix="nvshmem_bench_"))
    os.chmod(work, 0o700)
    cache_dir: str | None = None

    def step(name: str, argv: list[str], env: dict, t: float | None = None) -> list[dict]:
        t = (t or timeout) + ncoll * COLL_COMPILE_ALLOWANCE.get(name, 0.0)
        status, lines, secs = run_step(name, argv, env, t, log_dir, echo=echo)
        recs = parse_records(lines)
        steps[name] = {"status": status, "seconds": round(secs, 1), "records": len(recs),
                       "command": " ".join(argv)}
        if status != 0:
            steps[name]["tail"] = lines[-15:]
        records.extend(recs)
        return recs

    try:
        # the compile time of the collectives, and nothing else
        if args.compile_families:
            cf_args = ["--impls", ",".join(impls), "--arch", args.arch, "--python", args.python]
            for opt in ("families", "scopes", "outline"):
                if getattr(args, opt):
                    cf_args += [f"--{opt}", getattr(args, opt)]
            step("compile_families", [args.python, str(HERE / "compile_families.py"), *cf_args], bench_env(None))
        benchmarks = not args.compile_families
        # 1. C++ build
        if benchmarks and "cpp" in impls and not args.no_build:
            env = dict(os.environ, PYTHON=args.python)
            t0 = time.monotonic()
            # bench_cpp only (the communication kernels' comm_cpp is bench/comm_run.py's): its build time is nvcc's figure
            step("cpp_build", ["bash", str(HERE / "cpp" / "build.sh")], dict(env, BENCH_CPP_TARGETS="bench"))
            if steps["cpp_build"]["status"] == 0:
                records.append({"impl": "cpp", "bench": "build_time", "scope": "nvcc", "bytes": 0,
                                "value": round(time.monotonic() - t0, 2), "unit": "s", "iters": 1, "reps": 1,
                                "pe": 0, "npes": 1})

        # 2. compile time, cold then warm, in fresh processes; each DSL gets its own, initially
        #    missing cache directories, reused by its warm run
        if benchmarks and not args.no_compile_time and any(i in impls for i in DSLS):
            cache_root = work / "cache"
            for impl in (i for i in DSLS if i in impls):
                for label in ("cold", "warm"):
                    env = bench_env(str(cache_root / f"{impl}-nvshmem_dsl"))
                    env["CUTE_DSL_CACHE_DIR"] = str(cache_root / f"{impl}-cute")
                    env["TRITON_CACHE_DIR"] = str(cache_root / f"{impl}-triton")
                    step(f"compile_{impl}_{label}", [args.python, str(HERE / "compile_time.py"), "--impl", impl,
                                                     "--label", label, "--arch", args.arch], env)
            # the benchmarks below start with the bitcode cache that the numba runs just filled
            if (cache_root / "numba-nvshmem_dsl").is_dir():
                cache_dir = str(cache_root / "numba-nvshmem_dsl")

        # 3. C++
        if benchmarks and "cpp" in impls:
            if not CPP_BINARY.exists():
                _log(f"cpp: {CPP_BINARY} does not exist (build failed or --no-build); skipping")
                steps["cpp"] = {"status": 127, "seconds": 0, "records": 0, "command": "(no binary)"}
            else:
                uid_file = str(work / "nvshmem_uid")
                cpp_args = [str(CPP_BINARY), "--uid-file", uid_file, *common]
                if args.cpp_launcher == "mpirun":
                    argv_cpp = mpirun_cmd(args.nproc) + cpp_args
                else:
                    argv_cpp = launcher_cmd(args.python, args.nproc, args.init_timeout) + \
                        [str(HERE / "cpp" / "exec.py"), *cpp_args]
                env = bench_env(None, args.nproc)
                env["NVSHMEM_DSL_INIT_TIMEOUT"] = str(args.init_timeout)
                step("cpp", argv_cpp, env)

        # 4. DSLs
        for impl in (i for i in DSLS if benchmarks and i in impls):
            script = HERE / f"{impl}_bench.py"
            argv_dsl = launcher_cmd(args.python, args.nproc, args.init_timeout) + [str(script), *common]
            step(impl, argv_dsl, bench_env(cache_dir, args.nproc))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    agg = aggregate(records)
    rats = ratios(agg)
    mismatched = sorted({r["key"] for r in rats if not r["iters_match"]})
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "command": " ".join([Path(sys.argv[0]).name if argv is None else "run.py", *(sys.argv[1:] if argv is None
                                                                                      else argv)]),
        "quick": args.quick, "nproc": args.nproc, "cpp_launcher": args.cpp_launcher,
        "env": {k: bench_env(None, args.nproc).get(k) for k in (*FORCED_ENV, *DEFAULT_ENV, *nproc_env(args.nproc))},
        "impl_meta": {r["impl"]: r for r in records if r["bench"] == "meta" and r.get("pe", 0) == 0},
        "steps": steps,
        "seconds": round(time.time() - started, 1),
        "iters_mismatch": mismatched,
        "skipped": skipped,
    }
    doc = {
        "meta": meta,
        "results": [dict(v, key=key_text(k)) for impl in IMPLS for k, v in sorted(agg.get(impl, {}).items())],
        "ratios": rats,
        "raw": records,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(doc, indent=1) + "\n")

    print(table(agg))
    if args.compile_families:
        import compile_families

        print(compile_families.table(records))
    else:
        print(plot(agg, out_path.parent / "bandwidth.png"))
    print(f"results: {out_path} ({len(records)} records, {meta['seconds']} s)")
    if mismatched:
        print(f"WARNING: iteration counts differ from C++ for: {', '.join(mismatched)}")
    for impl, why in skipped.items():
        print(f"{impl}: skipped: {why}")
    failed = [name for name, s in steps.items() if s["status"] != 0]
    if failed:
        print(f"FAILED steps: {', '.join(failed)} (logs in {log_dir})")
    suspect = implausible(agg) if args.nproc > 1 else []  # one PE puts to itself at HBM speed
    if suspect:
        print("IMPLAUSIBLE results (the kernel did not do its work): " + ", ".join(suspect))
    return 1 if failed or suspect else 0


if __name__ == "__main__":
    sys.exit(main())
