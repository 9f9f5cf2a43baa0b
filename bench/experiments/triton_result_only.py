"""Experiment (GPU, 2 PEs): Triton's fetching atomics in a program of one warp, with or without the CTA
barrier before the shuffle that hands lane 0's result to the other lanes.

Lane 0 makes the call; the other lanes met it at ``bar.sync 0`` and then took its value by two shuffles
(``barrier``, as before); a fetching atomic's only effect in the program is its value, so the shuffles
alone are where the lanes meet (``shuffle``: ``nvshmem_dsl.triton._compile.result_only``).  Runs
bench/triton_bench.py's latency rows in this process (each variant a process of its own, with a Triton cache
of its own: the variant is not in Triton's cache key):

    python tests/gpu/mps.py --pes-per-gpu 2 -- python -m nvshmem_dsl.run -n 2 \\
        bench/experiments/triton_result_only.py barrier|shuffle [--only amo_lat,p_lat,g_lat]

Prints bench/triton_bench.py's JSON lines (PE 0's and PE 1's, prefixed by the launcher).
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("variant", choices=("barrier", "shuffle"))
    ap.add_argument("--only", default="amo_lat,p_lat,g_lat")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    os.environ["TRITON_CACHE_DIR"] = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"triton-result-only-{args.variant}")

    from nvshmem_dsl.triton import _compile

    if args.variant == "barrier":
        _compile.result_only = lambda op: False
    import triton_bench

    return triton_bench.main(["--quick", "--only", args.only, "--reps", str(args.reps)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
