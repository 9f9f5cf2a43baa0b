"""The GPU suite in one command (`make gpu-test`): every GPU test file on 2 PEs under our
launcher, then under mpirun (and under torchrun with `--launchers ...,torchrun`); one line per
test file x DSL x launcher; non-zero exit on any failure or hang (each test is bounded by
NVSHMEM_DSL_TEST_TIMEOUT, each run by --timeout).

`--pes 1,2,4,8` runs every suite at each PE count in turn (results in <out>/pes1, pes2, ...).
With more PEs than GPUs (`--pes-per-gpu auto` = ceil(PEs / visible GPUs), or N) the suite runs
its own CUDA MPS control daemon around each count (tests/gpu/mps.py; `--no-mps`: none). A table
of PE count x DSL x launcher ends the output and goes to <out>/summary.json.

`--together N` runs up to N of one PE count's suites (DSL x launcher) at once, as clients of the same
MPS daemon where there is one: compiling is most of a suite's time, and the GPU host's cores are
many (four suites of 2 PEs on one H200, at once: all done in 82 s, where their own times add up to
240 s, tests/gpu/records/2026-12-03/h200-suites-session21.txt). Each suite keeps its own logs and JUnit files.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # imported by path (tests/test_run_suite.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from mps import MpsDaemon, MpsError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SUITES = {  # DSL -> test files
    "host": ["tests/test_host_gpu.py"],
    "numba": ["tests/gpu/test_numba_gpu.py"],
    "cute": ["tests/gpu/test_cute_gpu.py"],
    "triton": ["tests/gpu/test_triton_gpu.py"],
    "limited": ["tests/gpu/test_limited_mpg.py"],  # run with --no-mps and several PEs per GPU
    "kernels": ["tests/gpu/test_kernels_gpu.py", "tests/gpu/test_moe_gpu.py",  # nvshmem_dsl.kernels, every DSL
                "tests/gpu/test_ag_gemm_gpu.py"],
}
#: Environment a suite needs beyond the others' (the kernels' staging at 64 MiB x 8 PEs).
SUITE_ENV = {"kernels": {"NVSHMEM_SYMMETRIC_SIZE": "4G"}}
LAUNCHERS = ("launcher", "mpirun", "torchrun")
MPS_VARS = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")


def gpu_count() -> int:
    """The GPUs the PEs see: CUDA_VISIBLE_DEVICES when set, else the lines of `nvidia-smi -L`."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listing.splitlines())


def pes_per_gpu(pes: int, setting: str) -> int:
    """`auto`: ceil(pes / gpu_count()) (1 when no GPU is found); N: N, at most pes."""
    if setting != "auto":
        return min(int(setting), pes)
    gpus = gpu_count()
    return -(-pes // gpus) if gpus else 1


def _run(launcher: str, dsl: str, files: list[str], nproc: int, timeout: float, out: Path,
         extra_env: dict[str, str]) -> dict:
    xml = out / f"{launcher}-{dsl}-rank%r.xml"
    pytest_args = ["-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *files]
    env = dict(os.environ, NVSHMEM_DISABLE_NVLS="1", PYTHONUNBUFFERED="1", **extra_env)
    for key, value in SUITE_ENV.get(dsl, {}).items():
        env.setdefault(key, value)
    if launcher == "launcher":
        cmd = [sys.executable, "-m", "nvshmem_dsl.run", "-n", str(nproc), "--timeout", "120",
               "-m", "pytest", *pytest_args[2:], f"--junitxml={xml}"]
    elif launcher == "torchrun":
        # torch's launcher sets RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT; nvshmem_dsl.init()
        # then exchanges the unique id over its own TCP store at MASTER_PORT + 1 (no torch import).
        try:
            import torch.distributed.run  # noqa: F401
        except ImportError:
            return {"status": "skipped (no torch)", "tests": {}}
        env.setdefault("NVSHMEM_DSL_SECRET", os.urandom(16).hex())
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "pytest", *pytest_args[2:], f"--junitxml={xml}"]
    elif launcher == "mpirun":
        from jobs import MPIRUN_ROOT_ENV, mpirun as mpirun_command

        mpirun = mpirun_command()  # ranks unbound (Open MPI): suites side by side would share cores 0, 1
        if mpirun is None:
            return {"status": "skipped (no mpirun)", "tests": {}}

        env.update(MPIRUN_ROOT_ENV)
        exports = [a for v in ("PYTHONPATH", "NVSHMEM_DISABLE_NVLS", "LD_LIBRARY_PATH", *MPS_VARS,
                                                 *SUITE_ENV.get(dsl, {})) if v in env
                   for a in ("-x", v)]
        cmd = [*mpirun, "-n", str(nproc), *exports, sys.executable, "-m", "pytest", *pytest_args[2:],
               f"--junitxml={xml}"]
    else:
        raise SystemExit(f"run_suite.py: unknown launcher {launcher!r} (choose from {', '.join(LAUNCHERS)})")
    t0 = time.time()
    status, log = _call(cmd, env, timeout)
    (out / f"{launcher}-{dsl}.log").write_text(log)
    return {"status": status, "seconds": time.time() - t0, "tests": _results(out, f"{launcher}-{dsl}-rank")}


def _each(fn, items: list, together: int):
    """(item, fn(item)) for each of ``items``, in their order; with ``together`` > 1 up to that many
    calls at once (threads: each waits on its own subprocess), each yielded once it and those before
    it have ended. An exception (Ctrl-C, SIGTERM) stops the suites still running (:func:`_call`)."""
    _stopping.clear()
    if together <= 1:
        for item in items:
            yield item, fn(item)
        return
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=together)
    try:
        futures = [pool.submit(fn, item) for item in items]
        for item, future in zip(items, futures):
            yield item, future.result()
    except BaseException:
        _stopping.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


#: Set when the suites running at once must stop (their _call terminates them).
_stopping = threading.Event()


def _call(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[str, str]:
    """(status, output) of cmd. On a timeout or an exception here (Ctrl-C, SIGTERM) it gets SIGTERM,
    which the launchers pass on to their PEs, then SIGKILL 15 s later: no PE outlives the run."""
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace") as proc:
        try:
            deadline = time.monotonic() + timeout
            while True:  # in slices, to see _stopping when run beside other suites
                try:
                    log = proc.communicate(timeout=min(1.0, max(0.0, deadline - time.monotonic())))[0]
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        raise
                    if _stopping.is_set():
                        raise KeyboardInterrupt from None
            return ("ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"), log
        except BaseException as exc:
            proc.terminate()
            try:
                log = proc.communicate(timeout=15)[0]
            except subprocess.TimeoutExpired:
                proc.kill()
                log = proc.communicate()[0]
            if isinstance(exc, subprocess.TimeoutExpired):
                return f"HANG (killed after {timeout:.0f} s)", log
            raise


def _results(out: Path, prefix: str) -> dict[str, str]:
    """test name -> worst outcome over the ranks' JUnit files."""
    results: dict[str, str] = {}
    rank_files = sorted(out.glob(prefix + "*.xml"))
    for path in rank_files:
        for case in ET.parse(path).iter("testcase"):
            name = case.get("name")
            outcome = "fail" if case.find("failure") is not None or case.find("error") is not None \
                else "skip" if case.find("skipped") is not None else "pass"
            order = {"fail": 2, "pass": 1, "skip": 0}
            if name not in results or order[outcome] > order[results[name]]:
                results[name] = outcome
    return results


def _int_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise ValueError(text)
    return values


def _table(rows: list[dict]) -> str:
    head = f"{'PEs':>4} {'/GPU':>4}  {'MPS':<12} {'DSL':<6} {'launcher':<9} {'pass':>5} {'fail':>5} {'skip':>5} {'s':>7}  status"
    return "\n".join([head] + [
        f"{r['pes']:>4} {r['pes_per_gpu']:>4}  {r['mps'] or '-':<12} {r['dsl']:<6} {r['launcher']:<9} "
        f"{r['pass']:>5} {r['fail']:>5} {r['skip']:>5} {r['seconds']:>7.1f}  {r['status']}" for r in rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pes", "--nproc", default="2",
                    help="PE count, or a comma list (1,2,4,8) run in turn (--nproc: deprecated name)")
    ap.add_argument("--pes-per-gpu", default="auto",
                    help="auto (ceil(PEs / visible GPUs)) or N; above 1 the suite starts an MPS daemon")
    ap.add_argument("--no-mps", action="store_true", help="start no MPS daemon, whatever the PEs per GPU")
    ap.add_argument("--dsl", default="host,numba,cute,triton")
    ap.add_argument("--launchers", default="launcher,mpirun")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "gpu" / "results")
    ap.add_argument("--together", type=int, default=1, metavar="N",
                    help="run up to N suites of a PE count at once (default 1: one after another)")
    args = ap.parse_args(argv)
    try:
        pe_counts = _int_list(args.pes)
        if args.pes_per_gpu != "auto":
            _int_list(args.pes_per_gpu)
    except ValueError:
        ap.error("--pes takes positive integers separated by commas, --pes-per-gpu auto or a positive integer")
    if args.together < 1:
        ap.error(f"--together takes a positive integer, got {args.together}")
    dsls, launchers = args.dsl.split(","), args.launchers.split(",")
    for name, given, known in (("DSL", dsls, SUITES), ("launcher", launchers, LAUNCHERS)):
        if set(given) - set(known):
            ap.error(f"unknown {name} {', '.join(sorted(set(given) - set(known)))} (choose from {', '.join(known)})")
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    failed = False
    try:
        for pes in pe_counts:
            per_gpu = pes_per_gpu(pes, args.pes_per_gpu)
            out = args.out / f"pes{pes}" if len(pe_counts) > 1 else args.out
            out.mkdir(parents=True, exist_ok=True)
            with MpsDaemon(per_gpu, enabled=not args.no_mps, keep_log=out / "mps-log") as mps:
                where = f"{pes} PEs ({per_gpu}/GPU{', ' + mps.mode if mps.mode else ''})"
                runs = [(launcher, dsl) for launcher in launchers for dsl in dsls]

                def one(run, out=out, pes=pes, env=mps.env):
                    return _run(run[0], run[1], SUITES[run[1]], pes, args.timeout, out, env)

                for (launcher, dsl), r in _each(one, runs, args.together):
                    counts = {k: sum(1 for v in r["tests"].values() if v == k) for k in ("pass", "fail", "skip")}
                    print(f"{launcher:>8} {dsl:>5} {where}: {r['status']}  {counts['pass']} passed, "
                          f"{counts['fail']} failed, {counts['skip']} skipped", flush=True)
                    for name, outcome in sorted(r["tests"].items()):
                        print(f"{'':>15}{outcome.upper():>5}  {name}")
                    failed |= r["status"] != "ok" and not r["status"].startswith("skipped")
                    rows.append({"pes": pes, "pes_per_gpu": per_gpu, "mps": mps.mode, "dsl": dsl,
                                 "launcher": launcher, "status": r["status"], **counts,
                                 "seconds": round(r.get("seconds", 0.0), 1)})
                    (args.out / "summary.json").write_text(json.dumps({"runs": rows}, indent=1) + "\n")
    except MpsError as exc:
        print(f"run_suite.py: {exc}", file=sys.stderr)
        failed = True
    print(_table(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
