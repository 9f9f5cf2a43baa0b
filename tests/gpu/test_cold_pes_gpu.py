"""Eight PEs starting cold at once (issue 43, item 3, on the GPU): PEs sharing one GPU under MPS start
together on an empty cache directory (NVSHMEM_DSL_CACHE, and TRITON_CACHE_DIR) and compile the same
kernels (tests/gpu/cold_pe.py: Numba inlined calls, a Numba out-of-line collective, a Triton put):
every PE gets right results, no PE waits on another's build past the job's bound, the cache holds no
temporary file or torn object afterwards, and a second job on that cache gets right results from it.
One PE's cold start (its own empty cache) is timed beside, and the times go to stdout (and to
``NVSHMEM_DSL_COLD_TABLE`` as JSON lines when set) for the record. Run this file in ONE process:

    python -m pytest -m gpu -q -s tests/gpu/test_cold_pes_gpu.py

``NVSHMEM_DSL_COLD_PES`` (default 8) sets the PE count. The CPU half of the item (processes killed
while writing the store or an object, builders starting together) is tests/test_cache_faults.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import job_env, mps_for_jobs  # noqa: E402

pytestmark = pytest.mark.gpu

COLD_PE = Path(__file__).resolve().parent / "cold_pe.py"
PES = int(os.environ.get("NVSHMEM_DSL_COLD_PES", "8"))
JOB_TIMEOUT_S = 300.0  #: a whole cold job: imports, init, three first kernels of every PE


@pytest.fixture(scope="module")
def mps():
    with mps_for_jobs(PES, "tests/gpu/test_cold_pes_gpu.py") as daemon:
        yield daemon


def _job(mps, pes: int, cache: Path) -> tuple[float, list[dict]]:
    """Run cold_pe.py on ``pes`` PEs with ``cache``: (seconds, the PEs' RESULT dicts by PE)."""
    env = job_env(mps)
    env.update(NVSHMEM_DSL_CACHE=str(cache), TRITON_CACHE_DIR=str(cache / "triton"))
    env.setdefault("NVSHMEM_DSL_INIT_TIMEOUT", "120")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nvshmem_dsl.run", "-n", str(pes), "--timeout", str(JOB_TIMEOUT_S),
                           str(COLD_PE)], env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S + 30)
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    results = sorted((json.loads(line.split("RESULT ", 1)[1]) for line in out.splitlines() if "RESULT {" in line),
                     key=lambda r: r["pe"])
    assert proc.returncode == 0, f"job of {pes} PEs failed ({proc.returncode}):\n{out[-4000:]}"
    assert [r["pe"] for r in results] == list(range(pes)), out[-4000:]
    return took, results


def _leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith(".tmp") or ".build-" in p.name)


def _record(row: dict) -> None:
    print("COLD " + json.dumps(row), flush=True)
    table = os.environ.get("NVSHMEM_DSL_COLD_TABLE")
    if table:
        with open(table, "a") as f:
            f.write(json.dumps(row) + "\n")


def _summary(kind: str, pes: int, took: float, results: list[dict]) -> dict:
    keys = [k for k in results[0] if k.endswith("_s")]
    return {"kind": kind, "pes": pes, "job_s": round(took, 2),
            **{k: round(max(r[k] for r in results), 2) for k in keys}}


def test_pes_start_cold_together(mps, tmp_path):
    from nvshmem_dsl.linker import store_file

    one_took, one = _job(mps, 1, tmp_path / "one")
    assert all(r["ok"] for r in one), one
    _record(_summary("cold, 1 PE", 1, one_took, one))

    cache = tmp_path / "shared"
    took, results = _job(mps, PES, cache)
    bad = [r for r in results if not r["ok"]]
    assert not bad, f"wrong results on a cold start of {PES} PEs: {bad}"
    _record(_summary(f"cold, {PES} PEs at once", PES, took, results))
    assert not _leftovers(cache), _leftovers(cache)
    objects = list((cache / store_file.OBJECTS_FOLDER).rglob("*.cubin"))
    assert all(store_file.whole_elf(p) for p in objects), [p.name for p in objects if not store_file.whole_elf(p)]

    warm_took, warm = _job(mps, PES, cache)
    assert all(r["ok"] for r in warm), warm
    _record(_summary(f"warm, {PES} PEs", PES, warm_took, warm))
    assert not _leftovers(cache)
