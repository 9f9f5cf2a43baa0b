"""`python -m codegen generate [--out DIR]` writes generated/; `check` compares without writing."""
from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
import time
from pathlib import Path

from .emit import cffi, constants, docs, dsl, hostapi, nvshmem4py, optable
from .expand import expand
from .load import SPEC_DIR, load
from .schema import SpecError

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "generated"
EMITTERS = [cffi, optable, constants, dsl, hostapi, nvshmem4py, docs]
# Hand-written files that live in generated/ (the package's __init__).
KEEP = {"__init__.py"}


def build(spec_dir: Path = SPEC_DIR) -> dict[str, str]:
    spec = expand(load(spec_dir))
    files: dict[str, str] = {}
    for emitter in EMITTERS:
        for name, text in emitter.emit(spec).items():
            if name in files:
                raise RuntimeError(f"two emitters write {name}")
            files[name] = text
    return files


def write(files: dict[str, str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.rglob("*"):
        rel = stale.relative_to(out).as_posix()
        if stale.is_file() and rel not in files and rel not in KEEP and "__pycache__" not in rel:
            stale.unlink()
    for name, text in sorted(files.items()):
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def check(files: dict[str, str], out: Path) -> list[str]:
    """Differences between what the spec generates and what is checked in."""
    problems = []
    present = {p.relative_to(out).as_posix() for p in out.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    for name in sorted(present - set(files) - KEEP):
        problems.append(f"generated/{name}: not produced by the generator (stale or hand-made)")
    for name, text in sorted(files.items()):
        path = out / name
        if not path.exists():
            problems.append(f"generated/{name}: missing")
            continue
        have = path.read_text()
        if have != text:
            diff = difflib.unified_diff(have.splitlines(), text.splitlines(),
                                        f"generated/{name} (checked in)", f"generated/{name} (from spec)",
                                        lineterm="", n=1)
            problems.append("\n".join(list(diff)[:20]))
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codegen")
    ap.add_argument("command", choices=["generate", "check"])
    ap.add_argument("--spec", type=Path, default=SPEC_DIR)
    ap.add_argument("--out", type=Path, default=GENERATED)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        files = build(args.spec)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.command == "generate":
        write(files, args.out)
        print(f"generated {len(files)} files into {args.out} in {time.perf_counter() - t0:.2f} s")
        return 0
    # check: regenerate into a temporary folder, then compare with what is checked in
    with tempfile.TemporaryDirectory() as tmp:
        write(files, Path(tmp))
        problems = check({p.relative_to(tmp).as_posix(): p.read_text()
                          for p in Path(tmp).rglob("*") if p.is_file()}, args.out)
    if problems:
        print("generated/ differs from what the spec produces; run `make generate`:", file=sys.stderr)
        for p in problems:
            print(p, file=sys.stderr)
        return 1
    print(f"generated/ is up to date ({len(files)} files)")
    return 0
