"""The front tables of BENCHMARKS.md, printed from a results file of bench/run.py.

    python bench/summary.py bench/results/<run>.json [--sizes 8,4096,1048576,16777216,268435456]
    python bench/summary.py bench/results/<run>.json --impl numba [--sizes ...]

A headline row per DSL (latency ratios, the range of bandwidth ratios, compile times), then one
Markdown table of every latency and time row and the bandwidth rows at a few sizes, with C++'s
figure, each DSL's and their ratio (bandwidth dsl/cpp: above 1 is better; times
dsl/cpp: below 1 is better), then one line naming the run (device, date, NVSHMEM, command).  With
``--impl DSL``: that DSL's table only, every latency/time row (C++, DSL, ratio), then its bandwidth
ratios as one row per operation and scope, a column per size.  The numbers in BENCHMARKS.md are
pasted from this output, never typed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_SIZES = (8, 4096, 1 << 20, 16 << 20, 256 << 20)


def _size(n: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B" if n else ""


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def _rows(results: list[dict], sizes: set[int]) -> dict[tuple, dict]:
    """(bench, scope, bytes) -> {impl: value, 'unit': ...}, bandwidth only at ``sizes``."""
    out: dict[tuple, dict] = {}
    for r in results:
        if r["unit"] == "GB/s" and r["bytes"] not in sizes:
            continue
        row = out.setdefault((r["bench"], r["scope"], r["bytes"]), {"unit": r["unit"]})
        row[r["impl"]] = r["value"]
    return out


def _ratio(row: dict, dsl: str) -> str:
    cpp, mine = row.get("cpp"), row.get(dsl)
    return f"{mine / cpp:.2f}x" if cpp and mine is not None else "-"


def table(run: dict, dsls: list[str], sizes=DEFAULT_SIZES) -> str:
    """Every latency/time row and the bandwidth rows at ``sizes``: C++, then each DSL and its ratio."""
    rows = _rows(run["results"], set(sizes))
    head = "| benchmark | scope | size | unit | C++ | " + " | ".join(f"{d} | {d}/C++" for d in dsls) + " |"
    lines = [head, "| --- | --- | --- | --- | ---: |" + " ---: | ---: |" * len(dsls)]
    for (bench, scope, nbytes), row in sorted(rows.items(), key=lambda kv: (kv[1]["unit"] == "GB/s", kv[0])):
        cells = " | ".join(f"{_fmt(row.get(d))} | {_ratio(row, d)}" for d in dsls)
        lines.append(f"| {bench} | {scope} | {_size(nbytes)} | {row['unit']} | {_fmt(row.get('cpp'))} | {cells} |")
    return "\n".join(lines)


#: The headline of a run for one DSL: (column, bench, scope) of a time or ratio.
HEADLINE = (("p", "p_lat", "thread"), ("g", "g_lat", "thread"), ("fetch-add", "atomic_fetch_add_lat", "thread"),
            ("put_signal ping-pong", "put_signal_pingpong", "thread"), ("barrier_all_block", "barrier_all_block_lat", "block"))


def headline(run: dict, dsl: str) -> dict[str, str]:
    """Ratios of the latency rows, the range of put/get bandwidth ratios, the compile times."""
    by = {(r["impl"], r["bench"], r["scope"], r["bytes"]): r["value"] for r in run["results"]}
    out = {}
    for col, bench, scope in HEADLINE:
        vals = [(v, by.get(("cpp", b, sc, n))) for (i, b, sc, n), v in by.items() if i == dsl and b == bench and sc == scope]
        out[col] = f"{vals[0][0] / vals[0][1]:.2f}x" if vals and vals[0][1] else "-"
    bw = [v / by[("cpp", b, sc, n)] for (i, b, sc, n), v in by.items()
          if i == dsl and b in ("put_bw", "get_bw") and by.get(("cpp", b, sc, n))]
    out["put/get bandwidth"] = f"{min(bw):.2f}-{max(bw):.2f}x" if bw else "-"
    for label in ("warm", "warm-later", "cold"):
        v = by.get((dsl, "compile_time", label, 0))
        out[f"compile {label}"] = "-" if v is None else f"{v:.2f} s"
    return out


def impl_tables(run: dict, dsl: str, sizes=DEFAULT_SIZES) -> str:
    """One DSL: its latency/time rows beside C++'s, then its bandwidth ratios (operation x scope by size);
    ``cpp``: C++'s absolute bandwidth instead of ratios."""
    rows = _rows(run["results"], set(sizes))
    cpp = dsl == "cpp"
    lines = ["| benchmark | scope | size | unit | C++ |" + ("" if cpp else f" {dsl} | {dsl}/C++ |"),
             "| --- | --- | --- | --- | ---: |" + ("" if cpp else " ---: | ---: |")]
    for (bench, scope, nbytes), row in sorted(rows.items()):
        if row["unit"] != "GB/s" and dsl in row:
            lines.append(f"| {bench} | {scope} | {_size(nbytes)} | {row['unit']} | {_fmt(row.get('cpp'))} |"
                         + ("" if cpp else f" {_fmt(row.get(dsl))} | {_ratio(row, dsl)} |"))
    title = "C++ bandwidth, GB/s" if cpp else f"{dsl}/C++ bandwidth"
    lines += ["", f"| {title} | " + " | ".join(_size(n) for n in sizes) + " |",
              "| --- |" + " ---: |" * len(sizes)]
    for bench in ("put_bw", "get_bw"):
        for scope in ("thread", "warp", "block"):
            cells = [_fmt(rows.get((bench, scope, n), {}).get("cpp")) if cpp
                     else _ratio(rows.get((bench, scope, n), {}), dsl) for n in sizes]
            if any(c != "-" for c in cells):
                lines.append(f"| {bench} {scope} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe(run: dict, path: str) -> str:
    meta = run["meta"]
    cpp = meta.get("impl_meta", {}).get("cpp", {})
    nv = cpp.get("nvshmem") or next((m.get("nvshmem") for m in meta.get("impl_meta", {}).values() if m.get("nvshmem")), "?")
    return (f"{meta.get('nproc', '?')} PEs, {cpp.get('device', '?')}, NVSHMEM {nv}, {meta['date'][:16].replace('T', ' ')} UTC, "
            f"`bench/{meta.get('command', 'run.py')}`, results `{path}`")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--impl", help="one DSL's tables only (latency/time rows, then bandwidth ratios by size)")
    args = ap.parse_args(argv)
    run = json.loads(args.results.read_text())
    sizes = tuple(int(s) for s in args.sizes.split(","))
    if args.impl:
        print(describe(run, str(args.results)))
        print()
        print(impl_tables(run, args.impl, sizes))
        return 0
    dsls = sorted({r["impl"] for r in run["results"]} - {"cpp"})
    print(describe(run, str(args.results)))
    cols = list(headline(run, dsls[0]))
    print("\n| DSL | " + " | ".join(cols) + " |\n| --- |" + " --- |" * len(cols))
    for dsl in dsls:
        print(f"| {dsl} | " + " | ".join(headline(run, dsl).values()) + " |")
    print()
    print(table(run, dsls, sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
