"""Experiment: Numba's first NVSHMEM kernel in a fresh process with a cold bitcode cache.

Runs bench/compile_time.py --phases (the bandwidth benchmark's put_block kernel, then the p
latency kernel in the same process), each time with an empty NVSHMEM_DSL_CACHE, alternating:
  default      a cold first kernel as nvshmem_dsl links it: a closure of the NVSHMEM functions it
               calls, from a parse of just their bodies, while the store's build processes run
  init         (GPU) the same with NVSHMEM initialised first (one PE, --init), as a program does
               (nvshmem_dsl.init() starts the store's build)
  prefetch     (no GPU needed) what init() starts for the device code, then 1.5 s (an init's time on
               a GPU host) before the compile: the store's build and the helpers' closure
  jobsN        default with N build processes (NVSHMEM_DSL_BUILD_JOBS=N; the default is one per
               CPU, at most 8), e.g. jobs4
then one warm run (the last cold run's cache).  Prints each JSON line of compile_time.py, then a
table: the first kernel's seconds, the later kernel's, and the phases of the first (seconds from
its compile request: the prefetch (init only), the closure, within it the parse and the
GlobalDCE, the link).  Before the closures parsed only the bodies they need (before 2026-11-22,
commit 510b5aa and earlier), the variants at-once and after-parse compared when the build starts.

    python bench/experiments/cold_start.py [--reps 3] [--variants default,init,jobs2] [--impl cute]

CPU machine without a GPU: the kernels go to PTX only (compile_time.py's "stage").
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COMPILE_TIME = os.path.join(HERE, "..", "compile_time.py")
VARIANTS = {"default": [], "init": ["--init"], "prefetch": ["--prefetch", "1.5"]}


def variant(name: str) -> tuple[list, dict]:
    """compile_time.py's extra arguments and environment for a variant."""
    if name.startswith("jobs") and name[4:].isdigit():
        return [], {"NVSHMEM_DSL_BUILD_JOBS": name[4:]}
    if name not in VARIANTS:
        raise SystemExit(f"unknown variant {name!r}: {', '.join(VARIANTS)} or jobsN")
    return VARIANTS[name], {}


def run(cache: str, label: str, extra: list, env_extra: dict | None = None, impl: str = "numba") -> list[dict]:
    # the DSL's own caches (CuTe's, Triton's) beside NVSHMEM's: empty with it
    env = dict(os.environ, NVSHMEM_DSL_CACHE=cache, CUTE_DSL_CACHE_DIR=cache + "-cute",
               TRITON_CACHE_DIR=cache + "-triton", **(env_extra or {}))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, COMPILE_TIME, "--impl", impl, "--label", label, "--phases", *extra],
                         env=env, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0  # with the wait for the store's build at exit
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode or len(lines) != 2:
        raise SystemExit(f"compile_time.py failed ({out.returncode}):\n{out.stdout}\n{out.stderr[-3000:]}")
    for rec in lines:
        rec["process_s"] = round(wall, 2)
        print(json.dumps(rec, separators=(",", ":")), flush=True)
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", default="default", help=f"of {', '.join(VARIANTS)}, jobsN")
    ap.add_argument("--impl", default="numba", choices=("numba", "cute", "triton"),
                    help="the DSL (phases: Numba's only)")
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    for name in variants:
        variant(name)  # unknown names fail before anything runs
    rows = []
    root = tempfile.mkdtemp(prefix="cold-start-")
    try:
        cache = None
        for rep in range(args.reps):
            for name in variants:
                cache = os.path.join(root, f"{name}-{rep}")
                first, later = run(cache, f"cold-{name}", *variant(name), impl=args.impl)
                rows.append((first["scope"], first["value"], later["value"], first.get("phases", {}),
                             first.get("init_s")))
        first, later = run(cache, "warm", [], impl=args.impl)
        rows.append(("warm", first["value"], later["value"], first.get("phases", {}), None))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'run':18} {'first s':>8} {'later s':>8}  phases of the first (s from its compile request)")
    for scope, a, b, phases, init_s in rows:
        text = "  ".join(f"{k} {v[0]:.2f}-{v[1]:.2f}" for k, v in phases.items())
        if init_s is not None:
            text += f"  (after init(): {init_s:.2f} s)"
        print(f"{scope:18} {a:8.2f} {b:8.2f}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
