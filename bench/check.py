"""`make bench-check`: fail when a DSL lost more than 5% against C++ since the recorded baseline.

    python bench/check.py [--results bench/results/latest.json] [--baseline bench/results/baseline.json]
                          [--tolerance 0.05]
    python bench/check.py --update      # record the ratios of the results file as the new baseline

What is compared is each DSL's ratio to C++ measured in the same run (bench/run.py): bandwidth
``dsl/cpp`` and times ``dsl/cpp``.  Ratios cancel most of the machine's and the day's variation;
a result fails when its relative performance got worse by more than the tolerance:
bandwidth ratio < baseline x (1 - tol), or time ratio > baseline x (1 + tol).  A baseline entry may
carry its own ``"tolerance"`` (noisy points such as 8-byte bandwidth or host-side timings).  New
results (not in the baseline) and baseline benchmarks that were not run at all are listed, not
failed; a baseline point whose benchmark ran but did not report it fails.
Exit status: 0 pass, 1 regression (or missing results), 2 no baseline / unusable input.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS = HERE / "results" / "latest.json"
DEFAULT_BASELINE = HERE / "results" / "baseline.json"


def _load(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        print(f"check: cannot read {what} {path}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except ValueError as exc:
        print(f"check: {what} {path} is not valid JSON: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def ratio_table(results: dict) -> dict:
    """{"impl|bench|scope|bytes": {"ratio", "higher_is_better"}} from a bench/run.py results file."""
    out = {}
    for r in results.get("ratios", []):
        out[f"{r['impl']}|{r['key']}"] = {"ratio": r["ratio"], "higher_is_better": bool(r["higher_is_better"]),
                                          "unit": r.get("unit", "")}
    return out


def compare(current: dict, baseline: dict, tolerance: float) -> tuple[list[str], list[str], list[str]]:
    """(failures, passes, notes) as printable lines."""
    fails, passes, notes = [], [], []
    for key, base in sorted(baseline.items()):
        tol = float(base.get("tolerance", tolerance))
        cur = current.get(key)
        if cur is None:
            impl_bench = "|".join(key.split("|")[:2])
            if any(k.startswith(impl_bench + "|") for k in current):  # the benchmark ran, this point is gone
                fails.append(f"MISSING  {key}: in the baseline (ratio {base['ratio']:.3f}) but not in the results")
            else:
                notes.append(f"not run  {key}")
            continue
        b, c = float(base["ratio"]), float(cur["ratio"])
        if base.get("higher_is_better", cur["higher_is_better"]):
            bad = c < b * (1.0 - tol)
            change = c / b - 1.0
        else:
            bad = c > b * (1.0 + tol)
            change = b / c - 1.0  # positive: better (less time relative to C++)
        line = f"{key}: ratio {c:.3f} (baseline {b:.3f}, relative performance {change:+.1%}, tolerance {tol:.0%})"
        (fails if bad else passes).append(("REGRESSED " if bad else "ok       ") + line)
    for key in sorted(set(current) - set(baseline)):
        notes.append(f"new      {key}: ratio {current[key]['ratio']:.3f} (not in the baseline)")
    return fails, passes, notes


def update(results_path: Path, baseline_path: Path, results: dict, tolerance: float) -> int:
    old = {}
    if baseline_path.exists():
        old = json.loads(baseline_path.read_text()).get("ratios", {})
    ratios = {}
    for key, cur in ratio_table(results).items():
        entry = {"ratio": round(cur["ratio"], 4), "higher_is_better": cur["higher_is_better"], "unit": cur["unit"]}
        if "tolerance" in old.get(key, {}):  # keep hand-set tolerances
            entry["tolerance"] = old[key]["tolerance"]
        ratios[key] = entry
    meta = results.get("meta", {})
    doc = {
        "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "from": str(results_path),
        "run": {k: meta.get(k) for k in ("date", "host", "command", "quick", "nproc")},
        "devices": {impl: m.get("device") for impl, m in meta.get("impl_meta", {}).items()},
        "default_tolerance": tolerance,
        "ratios": ratios,
    }
    baseline_path.parent.mkdir(parents=True, exist_ok=True)
    baseline_path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"check: recorded {len(ratios)} ratios from {results_path} as the baseline {baseline_path}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(DEFAULT_RESULTS))
    ap.add_argument("--baseline", default=str(DEFAULT_BASELINE))
    ap.add_argument("--tolerance", type=float, default=None, help="allowed loss (default: the baseline's, else 0.05)")
    ap.add_argument("--update", action="store_true", help="write the results' ratios as the baseline")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the passing results too")
    args = ap.parse_args(argv)
    results_path, baseline_path = Path(args.results), Path(args.baseline)

    if not results_path.exists():
        print(f"check: no results file {results_path}: run `make bench` (python bench/run.py) first", file=sys.stderr)
        return 2
    results = _load(results_path, "results file")
    if not results.get("ratios"):
        print(f"check: {results_path} holds no DSL/C++ ratios (did the C++ or the DSL runs fail?)", file=sys.stderr)
        return 2
    if args.update:
        return update(results_path, baseline_path, results, args.tolerance if args.tolerance is not None else 0.05)
    if not baseline_path.exists():
        print(f"check: no baseline {baseline_path} recorded yet; after a good run on the reference machine: "
              f"python bench/check.py --update", file=sys.stderr)
        return 2
    base_doc = _load(baseline_path, "baseline")
    tolerance = args.tolerance if args.tolerance is not None else float(base_doc.get("default_tolerance", 0.05))
    fails, passes, notes = compare(ratio_table(results), base_doc.get("ratios", {}), tolerance)
    for line in (fails + (passes if args.verbose else []) + notes):
        print(line)
    print(f"check: {len(passes)} ok, {len(fails)} failed, {len(notes)} new "
          f"(tolerance {tolerance:.0%}; baseline {baseline_path}, results {results_path})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
