"""Experiment (GPU): the block-scope put's loss at 4 MiB (0.84-0.90x of C++ at one PE, all three DSLs;
1.00x at 1 and 16 MiB; warp scope 0.90x at 2 MiB), linker variants side by side.

bench/experiments/block_put_sass.py (CPU) found the DSLs' copy loop the same as C++'s after ptxas but for two
things: C++ loads the peer's heap base after each call's entry BAR.SYNC (the copy waits for it) while the DSLs
load it once before the loop (rewrites.peer_base_before_sync), and C++ stores through a generic pointer
(ST.E.128) where the copy rewrite stores to the global space (STG.E.128).

Runs bench/numba_bench.py's put_bw rows in this process at a few sizes with one variant of the linker a process:
  hoisted        the linker as it is
  after-sync     the block-scope barrier left out of peer_base_before_sync (the load after it, as C++ has it;
                 warp scope unchanged)
  generic-store  the copy rewrite's 128-bit store through the generic pointer, as C++'s

    python -m nvshmem_dsl.run -n 1 bench/experiments/block_put_ab.py VARIANT [--sizes 1,4,16] [--reps 5]

(--sizes in MiB.)  Prints bench/numba_bench.py's JSON lines; ``block_put_ab.py --table DIR`` prints the
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


def apply(variant: str) -> None:
    """Patch the linker (in this process) as ``variant`` says."""
    from nvshmem_dsl.linker import rewrites

    if variant == "after-sync":
        rewrites._GROUP_SYNCS = tuple(s for s in rewrites._GROUP_SYNCS if "barrier.cta" not in s)
        assert len(rewrites._GROUP_SYNCS) == 1
    if variant == "generic-store":
        import re

        rewrite = rewrites.rewrite
        cast_then_store = re.compile(r"(%nvdsl\.cp\d+)\.p = addrspacecast ptr (%[\w.]+) to ptr addrspace\(1\)\n"
                                     r"(\s*)store <4 x i32> (%[\w.]+), ptr addrspace\(1\) \1\.p, align 16")

        def generic(text, how):
            text, n = rewrite(text, how)
            text, m = cast_then_store.subn(r"\3store <4 x i32> \4, ptr \2, align 16", text)
            assert m or not n, "the rewrite's stores changed: this variant needs updating"
            return text, n

        rewrites.rewrite = generic


def main(argv: list[str]) -> int:
    import argparse

    if argv[:1] == ["--table"]:
        table(argv[1])
        return 0

    ap = argparse.ArgumentParser()
    ap.add_argument("variant", choices=("hoisted", "after-sync", "generic-store"))
    ap.add_argument("--sizes", default="1,2,4,8,16", help="MiB, comma-separated")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)

    apply(args.variant)
    import numba_bench

    sizes = ",".join(f"{float(x):g}M" for x in args.sizes.split(","))
    return numba_bench.main(["--quick", "--only", "put_bw", "--reps", str(args.reps), "--sizes", sizes])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
