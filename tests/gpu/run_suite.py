"""The GPU suite in one command (`make gpu-test`): every GPU test file on 2 PEs under our
launcher, then under mpirun (and under torchrun with `--launchers ...,torchrun`); one line per
test file x DSL x launcher; non-zero exit on any failure or hang (each test is bounded by
NVSHMEM_DSL_TEST_TIMEOUT, each run by --timeout).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITES = {  # DSL -> test files
    "host": ["tests/test_host_gpu.py"],
    "numba": ["tests/gpu/test_numba_gpu.py"],
    "cute": ["tests/gpu/test_cute_gpu.py"],
}
LAUNCHERS = ("launcher", "mpirun", "torchrun")


def _run(launcher: str, dsl: str, files: list[str], nproc: int, timeout: float, out: Path) -> dict:
    xml = out / f"{launcher}-{dsl}-rank%r.xml"
    pytest_args = ["-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *files]
    env = dict(os.environ, NVSHMEM_DISABLE_NVLS="1", PYTHONUNBUFFERED="1")
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
        mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
        if mpirun is None:
            return {"status": "skipped (no mpirun)", "tests": {}}
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        exports = [a for v in ("PYTHONPATH", "NVSHMEM_DISABLE_NVLS", "LD_LIBRARY_PATH") if v in env
                   for a in ("-x", v)]
        cmd = [mpirun, "-n", str(nproc), *exports, sys.executable, "-m", "pytest", *pytest_args[2:],
               f"--junitxml={xml}"]
    else:
        raise SystemExit(f"run_suite.py: unknown launcher {launcher!r} (choose from {', '.join(LAUNCHERS)})")
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, capture_output=True, text=True)
        status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
        log = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        status, log = f"HANG (killed after {timeout:.0f} s)", (exc.stdout or b"").decode(errors="replace")
    (out / f"{launcher}-{dsl}.log").write_text(log)
    return {"status": status, "seconds": time.time() - t0, "tests": _results(out, f"{launcher}-{dsl}-rank")}


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--dsl", default="host,numba,cute")
    ap.add_argument("--launchers", default="launcher,mpirun")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "gpu" / "results")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    for launcher in args.launchers.split(","):
        for dsl in args.dsl.split(","):
            r = _run(launcher, dsl, SUITES[dsl], args.nproc, args.timeout, args.out)
            counts = {k: sum(1 for v in r["tests"].values() if v == k) for k in ("pass", "fail", "skip")}
            print(f"{launcher:>8} {dsl:>5}: {r['status']}  {counts['pass']} passed, {counts['fail']} failed, "
                  f"{counts['skip']} skipped")
            for name, outcome in sorted(r["tests"].items()):
                print(f"{'':>15}{outcome.upper():>5}  {name}")
            failed |= r["status"] != "ok" and not r["status"].startswith("skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
