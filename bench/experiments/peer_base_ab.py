"""Experiment (GPU): is the block-scope put's loss at 4 MiB (0.84-0.90x of C++ at one PE, all three DSLs;
1.00x at 1 and 16 MiB) the peer-base load hoisted above the entry barrier (rewrites.peer_base_before_sync)?

bench/experiments/block_put_sass.py (CPU) found the DSLs' copy loop the same as C++'s after ptxas; what differs
is that C++ loads the peer's heap base after each call's entry BAR.SYNC (the copy waits for it) while the DSLs
load it once before the loop, so every warp issues its loads the moment the barrier opens.  Hypothesis: at 4 MiB
(two 16-byte vectors a thread a call) those loads queue behind the previous call's stores.

Runs bench/numba_bench.py's put_bw rows in this process at a few sizes, with the linker as it is (``hoisted``)
or with the block-scope barrier left out of peer_base_before_sync (``after-sync``: the load after the barrier,
as C++ has it; warp scope unchanged), one variant a process:

    python -m nvshmem_dsl.run -n 1 bench/experiments/peer_base_ab.py hoisted|after-sync [--sizes 1,4,16] [--reps 5]

(--sizes in MiB.)  Prints bench/numba_bench.py's JSON lines; ``peer_base_ab.py --table DIR`` prints the
put_bw medians of the ``<variant>-<n>.jsonl`` files in DIR side by side (GB/s; the launcher's output of
the runs, ``[rank 0]`` prefixes and all).
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def table(folder: str) -> None:
    import collections
    import glob
    import json

    rows = collections.defaultdict(dict)
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))):
        run = os.path.basename(path)[:-len(".jsonl")]
        with open(path) as f:
            lines = (x.split("] ", 1)[-1] if x.startswith("[rank") else x for x in f)  # the launcher's prefix
            for rec in (json.loads(x) for x in lines if x.startswith("{")):
                if rec.get("bench") == "put_bw":
                    rows[rec["scope"], rec["bytes"]][run] = rec["value"]
    runs = sorted({r for v in rows.values() for r in v})
    print(f"{'scope':8} {'MiB':>5} " + " ".join(f"{r:>14}" for r in runs))
    for scope, size in sorted(rows):
        print(f"{scope:8} {size / (1 << 20):5g} " + " ".join(f"{rows[scope, size].get(r, '-'):>14}" for r in runs))


def main(argv: list[str]) -> int:
    import argparse

    if argv[:1] == ["--table"]:
        table(argv[1])
        return 0

    ap = argparse.ArgumentParser()
    ap.add_argument("variant", choices=("hoisted", "after-sync"))
    ap.add_argument("--sizes", default="1,2,4,8,16", help="MiB, comma-separated")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)

    from nvshmem_dsl.linker import rewrites

    if args.variant == "after-sync":
        rewrites._GROUP_SYNCS = tuple(s for s in rewrites._GROUP_SYNCS if "barrier.cta" not in s)
        assert len(rewrites._GROUP_SYNCS) == 1

    import numba_bench

    sizes = ",".join(f"{float(x):g}M" for x in args.sizes.split(","))
    return numba_bench.main(["--quick", "--only", "put_bw", "--reps", str(args.reps), "--sizes", sizes])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
