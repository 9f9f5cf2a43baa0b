"""Experiment (issue 41): a program's start-up to an initialised NVSHMEM, ours against NVSHMEM4Py's,
alternated: ``--reps`` rounds, each a 2-PE job of ours then one of NVSHMEM4Py's (``--order`` swaps
them), both on the NVSHMEM nvshmem_dsl finds (NVSHMEM4Py made to load it: bench/_nv4py.py).

Each PE prints one JSON line: ``import_s`` (importing the package and what its init needs: ours
``import nvshmem_dsl``; NVSHMEM4Py's ``nvshmem.core``, numpy and cuda.core's Device) and ``init_s``
(from there to an initialised NVSHMEM: ours ``nvshmem_dsl.init()``; NVSHMEM4Py's unique id made by
PE 0 and handed over by nvshmem_dsl's launcher store (no NVSHMEM call), the Device made current,
``nvshmem.core.init(..., initializer_method="uid")``), both measured from the script's first line,
then finalize. The table: per package the median over rounds of the slowest PE's
import, init and their sum.

    python bench/experiments/init_vs_nv4py.py [--reps 3] [--order ours,nv4py]
    (device step: NPROC=0 bash tests/gpu/device_steps.sh experiment init_vs_nv4py; needs .dw/nv4py)
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
BENCH = HERE.parents[1]
PACKAGES = ("ours", "nv4py")


def pe_ours() -> dict:
    t0 = time.perf_counter()
    import nvshmem_dsl as nv

    t1 = time.perf_counter()
    nv.init()
    t2 = time.perf_counter()
    me = nv.my_pe()
    nv.finalize()
    return {"pe": me, "import_s": t1 - t0, "init_s": t2 - t1}


def pe_nv4py() -> dict:
    t0 = time.perf_counter()
    sys.path.insert(0, str(BENCH))
    import _nv4py

    _nv4py.use_our_nvshmem()
    import cuda.core  # noqa: F401 - what its init needs, as a program imports it
    import numpy  # noqa: F401
    import nvshmem.core as core
    from cuda.bindings import driver

    from nvshmem_dsl.host import _bootstrap  # noqa: F401

    t1 = time.perf_counter()
    driver.cuInit(0)
    dev = _nv4py.init_by_uid(core, int(driver.cuDeviceGetCount()[1]))
    t2 = time.perf_counter()
    dev.sync()
    me = int(core.my_pe())
    core.finalize()
    return {"pe": me, "import_s": t1 - t0, "init_s": t2 - t1}


def job(package: str, timeout: float) -> list[dict]:
    cmd = [sys.executable, "-m", "nvshmem_dsl.run", "-n", "2", "--timeout", str(timeout), str(HERE), "--pe", package]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)
    rows = []
    for line in out.stdout.splitlines():
        text = line.split("] ", 1)[-1]
        if text.startswith("{"):
            rows.append(json.loads(text))
    if out.returncode != 0 or len(rows) != 2:
        print(f"{package}: exit {out.returncode}, {len(rows)} PE lines\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}",
              file=sys.stderr)
        return []
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pe", choices=PACKAGES, help=argparse.SUPPRESS)  # one PE of a job
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--order", default="ours,nv4py")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    if args.pe:
        print(json.dumps({"package": args.pe, **(pe_ours() if args.pe == "ours" else pe_nv4py())}), flush=True)
        return 0
    order = [p.strip() for p in args.order.split(",")]
    if sorted(order) != sorted(PACKAGES):
        ap.error(f"--order: both of {', '.join(PACKAGES)}")
    slowest: dict[str, list[dict]] = {p: [] for p in order}
    for rep in range(args.reps):
        for package in order:
            rows = job(package, args.timeout)
            for r in rows:
                print(json.dumps({"rep": rep, **r}), flush=True)
            if rows:
                slowest[package].append({k: max(r[k] for r in rows) for k in ("import_s", "init_s")}
                                        | {"total_s": max(r["import_s"] + r["init_s"] for r in rows)})
    print(f"{'package':<8} {'rounds':>6} {'import s':>9} {'init s':>8} {'total s':>8}   (median of the slowest PE)")
    for package, rounds in slowest.items():
        if rounds:
            med = {k: statistics.median(r[k] for r in rounds) for k in ("import_s", "init_s", "total_s")}
            print(f"{package:<8} {len(rounds):>6} {med['import_s']:>9.3f} {med['init_s']:>8.3f} {med['total_s']:>8.3f}")
        else:
            print(f"{package:<8} {0:>6} (no job ended well)")
    return 0 if all(slowest.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
