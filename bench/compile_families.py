"""Compile time of one collective kernel per family and scope: Numba and CuTe, cold and warm, beside nvcc.

    python bench/compile_families.py [--families broadcast,reduce] [--scopes thread,block]
                                     [--impls cpp,numba,cute] [--outline auto,none]
    python bench/run.py --compile-families [the same options]    # results file and ratio table too

The kernel is that of the collective benchmarks (coll_lat / coll_bw): ``coll_<family>_<scope>`` of
bench/numba_bench.py and bench/cute_bench.py, ``coll<FAMILY, SCOPE>`` of bench/cpp/coll.cuh, a loop
of one collective over TEAM_WORLD.  For each family x scope:

* numba, cute, triton: bench/compile_time.py --kernel in a fresh process, twice with the same, initially
  missing cache directories (NVSHMEM_DSL_CACHE, CUTE_DSL_CACHE_DIR, TRITON_CACHE_DIR), one pair per kernel: "cold",
  then "warm".  The value is compile_time.py's: from the compile request to a cubin (Numba without
  a GPU: linked by nvJitLink; ``stage`` says what was reached), ``import_s`` the imports before it,
  ``process_s`` the whole process;
* cpp: nvcc compiling bench/cpp/coll.cu with -DCOLL_FAMILY=... -DCOLL_SCOPE=... (that kernel
  alone) to an object, with build.sh's flags (-O3 -rdc=true -arch=sm_90 ...), the whole process.

One compile at a time.  Prints one JSON line per result (impl numba / cute / cpp, bench
``coll_compile_cold`` or ``coll_compile_warm``, scope ``<family>_<scope>``, seconds; the nvcc time
is the cpp result of both benches, so that bench/run.py gives each DSL figure its ratio to nvcc),
then the table family x scope x (numba cold, numba warm, cute cold, cute warm, nvcc).
``--outline auto,none``: the DSL runs once per NVSHMEM_DSL_OUTLINE mode (how Numba links NVSHMEM's
large routines: nvshmem_dsl.linker.outline), the bench names suffixed ``_outline_<mode>``.
Exit status 1 when a compile failed (the others are reported).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402

IMPLS = ("cpp", "numba", "cute", "triton")
DSLS = ("numba", "cute", "triton")
LABELS = ("cold", "warm")
COLUMNS = (("numba", "cold"), ("numba", "warm"), ("cute", "cold"), ("cute", "warm"), ("triton", "cold"),
           ("triton", "warm"), ("cpp", "nvcc"))


def bench_name(label: str, outline: str = "") -> str:
    return f"coll_compile_{label}" + (f"_outline_{outline}" if outline else "")


def _csv(text: str, choices, what: str) -> list[str]:
    items = [x for x in text.split(",") if x]
    bad = set(items) - set(choices)
    if bad:
        raise SystemExit(f"compile_families: unknown {what} {', '.join(sorted(bad))}; choose from {', '.join(choices)}")
    return items


def _log(msg: str) -> None:
    print(f"[compile_families] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ nvcc


def nvcc_command(python: str = sys.executable) -> list[str]:
    """nvcc and its compile flags, as bench/cpp/build.sh compiles (BENCH_CPP_PRINT_FLAGS=1)."""
    env = dict(os.environ, BENCH_CPP_PRINT_FLAGS="1", PYTHON=python)
    out = subprocess.run(["bash", str(HERE / "cpp" / "build.sh")], env=env, capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"bench/cpp/build.sh found no nvcc / NVSHMEM:\n{out.stderr[-2000:]}")
    return [line for line in out.stdout.splitlines() if line]


def nvcc_single(nvcc: list[str], family: str, scope: str, obj: Path) -> list[str]:
    """The nvcc command compiling coll<FAMILY, SCOPE> alone (bench/cpp/coll.cu) to ``obj``."""
    return [*nvcc, f"-DCOLL_FAMILY=COLL_{family.upper()}", f"-DCOLL_SCOPE={scope.upper()}", "-c",
            str(HERE / "cpp" / "coll.cu"), "-o", str(obj)]


def _nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except Exception:  # noqa: BLE001 - informational
        return "?"
    return next((line.strip() for line in out.splitlines() if "release" in line), "?")


# ------------------------------------------------------------------ records


def _record(impl: str, bench: str, scope: str, secs: float, **extra) -> dict:
    return {"impl": impl, "bench": bench, "scope": scope, "bytes": 0, "value": round(secs, 3),
            "best": round(secs, 3), "unit": "s", "iters": 1, "reps": 1, "pe": 0, "npes": 1, **extra}


def _load() -> float | None:
    """The 1-minute load average (other work on the machine slows the compiles down)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _emit(rec: dict) -> None:
    print(json.dumps(rec, separators=(",", ":")), flush=True)


def _run(argv: list[str], env: dict, timeout: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, env=env, cwd=HERE.parent, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return 124, exc.stdout if isinstance(exc.stdout, str) else "", timeout
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def _dsl(impl: str, family: str, scope: str, outline: str, args, work: Path) -> list[dict]:
    """Cold then warm compile of one kernel by one DSL, each in a fresh process."""
    cache = work / f"{impl}-{family}_{scope}-{outline or 'env'}"
    env = dict(os.environ, NVSHMEM_DSL_CACHE=str(cache / "nvshmem_dsl"), CUTE_DSL_CACHE_DIR=str(cache / "cute"),
               TRITON_CACHE_DIR=str(cache / "triton"), CUTE_DSL_ARCH=args.arch, NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="0")
    if outline:
        env["NVSHMEM_DSL_OUTLINE"] = outline
    out = []
    for label in LABELS:
        argv = [args.python, str(HERE / "compile_time.py"), "--impl", impl, "--label", label, "--arch", args.arch,
                "--kernel", f"coll_{family}_{scope}"]
        load = _load()
        status, text, secs = _run(argv, env, args.timeout)
        recs = [json.loads(line[line.index("{"):]) for line in text.splitlines() if line.startswith("{")]
        if status != 0 or not recs:
            _log(f"{impl} {family}_{scope} {label}: FAILED (status {status}):\n" + "\n".join(text.splitlines()[-15:]))
            return out
        r = recs[0]
        rec = _record(impl, bench_name(label, outline), f"{family}_{scope}", r["value"], label=label,
                      stage=r.get("stage"), import_s=r.get("import_s"), process_s=round(secs, 3),
                      outline=r.get("outline"), kernel=r.get("kernel"), load=load)
        _log(f"{impl} {family}_{scope} {label}: {rec['value']:.2f} s ({rec['stage']}; process {secs:.1f} s, "
             f"outline {rec['outline']})")
        _emit(rec)
        out.append(rec)
    return out


def _nvcc(nvcc: list[str], family: str, scope: str, outlines: list[str], args, work: Path) -> list[dict]:
    obj = work / f"coll_{family}_{scope}.o"
    load = _load()
    status, text, secs = _run(nvcc_single(nvcc, family, scope, obj), dict(os.environ), args.timeout)
    if status != 0 or not obj.exists():
        _log(f"nvcc {family}_{scope}: FAILED (status {status}):\n" + "\n".join(text.splitlines()[-15:]))
        return []
    _log(f"nvcc {family}_{scope}: {secs:.2f} s")
    out = []
    for outline in outlines:  # the one measurement, the reference of every DSL row
        for label in LABELS:
            rec = _record("cpp", bench_name(label, outline), f"{family}_{scope}", secs, label="nvcc",
                          stage=f"object {args.nvcc_arch}", process_s=round(secs, 3), load=load)
            _emit(rec)
            out.append(rec)
    return out


# ------------------------------------------------------------------ table


def table(records: list[dict]) -> str:
    """family x scope (x outline mode) x (numba cold, numba warm, cute cold, cute warm[, triton cold, triton
    warm: where Triton has results], nvcc), seconds."""
    cells: dict[tuple, dict] = {}
    modes: list[str] = []
    for r in records:
        bench = r.get("bench", "")
        if not bench.startswith("coll_compile_") or "_" not in r.get("scope", ""):
            continue
        rest = bench[len("coll_compile_"):]
        label, _, outline = rest.partition("_outline_")
        if outline not in modes:
            modes.append(outline)
        family, scope = r["scope"].rsplit("_", 1)
        col = (r["impl"], "nvcc" if r["impl"] == "cpp" else label)
        cells.setdefault((family, scope, outline), {})[col] = r["value"]
    if not cells:
        return "(no compile-family results)"
    order = {f: i for i, f in enumerate(C.COLL_FAMILIES)}
    sorder = {s: i for i, s in enumerate(C.SCOPES)}
    show_mode = any(modes)
    have = {c for vals in cells.values() for c in vals}
    columns = [c for c in COLUMNS if c[0] != "triton" or c in have]
    head = ["family", "scope"] + (["outline"] if show_mode else []) + [f"{i} {l}" if i != "cpp" else "nvcc"
                                                                        for i, l in columns]
    rows = [head]
    for (family, scope, outline), vals in sorted(cells.items(), key=lambda kv: (
            order.get(kv[0][0], 99), sorder.get(kv[0][1], 9), modes.index(kv[0][2]))):
        row = [family, scope] + ([outline or "(env)"] if show_mode else [])
        row += [f"{vals[c]:.2f}" if c in vals else "-" for c in columns]
        rows.append(row)
    nfixed = 3 if show_mode else 2
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for n, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i < nfixed else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("seconds: DSLs from the compile request to a cubin in a fresh process (cold: empty caches; warm: "
                 "the same caches again); nvcc: the whole nvcc -rdc -c of the kernel")
    return "\n".join(lines)


# ------------------------------------------------------------------ main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(C.COLL_FAMILIES), help="comma-separated collective families")
    ap.add_argument("--scopes", default=",".join(C.SCOPES), help="comma-separated scopes")
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset of cpp (nvcc),numba,cute,triton")
    ap.add_argument("--outline", default="",
                    help="comma-separated NVSHMEM_DSL_OUTLINE modes (auto,none,all) to run the DSLs under "
                         "(default: as the environment says)")
    ap.add_argument("--arch", default="sm_90a", help="DSL arch (Numba: its compute capability)")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the DSL compiles")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per compile")
    args = ap.parse_args(argv)
    families = _csv(args.families, C.COLL_FAMILIES, "family")
    scopes = _csv(args.scopes, C.SCOPES, "scope")
    impls = _csv(args.impls, IMPLS, "implementation")
    outlines = [x for x in args.outline.split(",") if x] or [""]
    if "cute" in impls:
        try:
            import cutlass  # noqa: F401
        except ImportError:
            _log("cute: cutlass-dsl is not importable; skipping CuTe")
            impls.remove("cute")
    if "triton" in impls:
        try:
            import triton  # noqa: F401
        except ImportError:
            _log("triton: triton is not importable; skipping Triton")
            impls.remove("triton")

    nvcc = None
    if "cpp" in impls:
        try:
            nvcc = nvcc_command(args.python)
        except Exception as exc:  # noqa: BLE001
            _log(f"nvcc: {exc}; skipping C++")
    args.nvcc_arch = next((f[len("-arch="):] for f in nvcc or () if f.startswith("-arch=")), "?")
    meta = {"impl": "compile_families", "bench": "meta", "pe": 0, "npes": 1, "host": platform.node(),
            "cpus": os.cpu_count(), "families": families, "scopes": scopes, "impls": impls,
            "outline": [m or os.environ.get("NVSHMEM_DSL_OUTLINE", "(default)") for m in outlines], "arch": args.arch, "nvcc": _nvcc_version(nvcc[0]) if nvcc else None,
            "nvcc_flags": nvcc[1:] if nvcc else None, "load": _load()}
    for dist in ("numba-cuda", "nvidia-cutlass-dsl", "triton"):
        try:
            from importlib.metadata import version

            meta[dist] = version(dist)
        except Exception:  # noqa: BLE001 - informational
            pass
    try:
        from nvshmem_dsl._libs import installation

        inst = installation()
        meta["nvshmem"] = ".".join(map(str, inst.version)) if inst.version else "?"
        meta["nvshmem_source"] = inst.source
    except Exception:  # noqa: BLE001 - informational
        pass
    _emit(meta)

    records: list[dict] = []
    failed = 0
    work = Path(tempfile.mkdtemp(prefix="nvshmem_compile_families_"))
    try:
        for family in families:
            for scope in scopes:
                for outline in outlines:
                    for impl in (i for i in DSLS if i in impls):
                        got = _dsl(impl, family, scope, outline, args, work)
                        records += got
                        failed += len(got) < len(LABELS)
                if nvcc is not None:
                    got = _nvcc(nvcc, family, scope, outlines, args, work)
                    records += got
                    failed += not got
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table(records), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
