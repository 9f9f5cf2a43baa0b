"""Experiment: the CuTe suite's intermittent CUDA_ERROR_ILLEGAL_ADDRESS (2026-11-25): its allreduce example fails
at module init (NVSHMEM's init.cu:2412) right after the put_signal_pipeline example, in about half the suites, with
NVSHMEM's objects under either calling convention; alone, the allreduce example passes.  This runs given examples'
``run()`` one after another in one NVSHMEM session, ``--reps`` times, to see whether the pair alone reproduces it.

Run (2 PEs): python -m nvshmem_dsl.run -n 2 bench/experiments/cute_example_pair.py [--reps 3] [names ...]
"""
import runpy
import sys
from pathlib import Path

import nvshmem_dsl as nvshmem

ROOT = Path(__file__).resolve().parents[2]


def main():
    args = sys.argv[1:]
    reps = 3
    if "--reps" in args:
        i = args.index("--reps")
        reps = int(args[i + 1])
        del args[i:i + 2]
    names = args or ["cute_ring_put_get", "cute_put_signal_pipeline", "cute_allreduce"]
    runs = {n: runpy.run_path(str(ROOT / "examples" / f"{n}.py"))["run"] for n in names}
    with nvshmem.init():
        for r in range(reps):
            for n, run in runs.items():
                print(f"rep {r}: {n}", flush=True)
                run()


if __name__ == "__main__":
    main()
