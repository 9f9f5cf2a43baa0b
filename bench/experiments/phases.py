"""Print bench/compile_time.py's JSON lines (given ``--phases``) as a timeline: the value, the stage,
each step of the link (start-end, seconds from the compile request), then the slowest object builds
(``build <name>``: LLVM and ptxas; ``llvm <name>``: LLVM), each with its start-end.

    python bench/compile_time.py --impl numba --label cold --phases --kernel coll_reduce_block | python bench/experiments/phases.py
"""
from __future__ import annotations

import json
import sys


def main(lines, slowest: int = 6) -> int:
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        phases = r.get("phases", {})
        steps = {k: v for k, v in phases.items() if not k.startswith(("llvm ", "build "))}
        builds = sorted(((v[1] - v[0], k, v) for k, v in phases.items() if k.startswith(("llvm ", "build "))), reverse=True)
        print(f"  {r.get('kernel', '')} {r['scope']}: {r['value']} s, {r.get('stage')}; "
              + " ".join(f"{k}={a}-{b}" for k, (a, b) in steps.items()))
        for seconds, what, (a, b) in builds[:slowest]:
            print(f"    {seconds:6.2f} {what} ({a}-{b})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.stdin))
