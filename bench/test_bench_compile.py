"""CPU checks of the benchmark suite (no GPU needed):

    python -m pytest -q bench/test_bench_compile.py          # all (~2 min: nvcc and CuTe are slow)
    python -m pytest -q bench/test_bench_compile.py -m "not slow"

* the C++ baseline builds with nvcc against the installed NVSHMEM headers (skipped without nvcc);
* every Python file of bench/ byte-compiles;
* every Numba kernel compiles to PTX for sm_90 with NVSHMEM linked and inlined;
* every CuTe launcher compiles to PTX for sm_90a with NVSHMEM inlined (skipped without cutlass-dsl);
* the parameters of bench/_common.py are those of bench/cpp/bench.cu;
* bench/run.py's parsing, averaging and ratios, and bench/check.py's verdicts, on made-up results.
"""

from __future__ import annotations

import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402

CALL = re.compile(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$.]+)")


def _check_inlined(ptx: str, name: str) -> None:
    public = [c for c in CALL.findall(ptx) if re.match(r"nvshmemx?_", c)]
    assert not public, f"{name}: NVSHMEM API calls not inlined: {public}"
    assert not re.search(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?%rd\d+", ptx), f"{name}: indirect call"


# ------------------------------------------------------------------ files


def test_python_files_compile(tmp_path):
    files = sorted(HERE.glob("*.py")) + sorted(HERE.glob("cpp/*.py"))
    assert len(files) >= 8
    for f in files:
        py_compile.compile(str(f), cfile=str(tmp_path / (f.name + "c")), doraise=True)


def _nvcc() -> str | None:
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.exists(cand):
            return cand
    return None


@pytest.mark.slow
def test_cpp_builds(tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no nvcc")
    try:
        from nvshmem_dsl._libs import installation

        inc = installation().include_dir
    except Exception as exc:  # pragma: no cover
        pytest.skip(f"no NVSHMEM installation: {exc}")
    if inc is None or not (Path(inc) / "nvshmem.h").is_file():
        pytest.skip("the NVSHMEM installation has no headers")
    out = tmp_path / "bench_cpp"
    env = dict(os.environ, NVCC=nvcc, PYTHON=sys.executable, BENCH_CPP_OUT=str(out))
    proc = subprocess.run(["bash", str(HERE / "cpp" / "build.sh")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert out.is_file() and os.access(out, os.X_OK)
    assert out.read_bytes()[:4] == b"\x7fELF"


# ------------------------------------------------------------------ Numba


@pytest.fixture(scope="module")
def numba_bench():
    pytest.importorskip("numba.cuda")
    try:
        from nvshmem_dsl._libs import bitcode_path

        bitcode_path("sm_90")
    except Exception as exc:  # pragma: no cover
        pytest.skip(f"no NVSHMEM device bitcode: {exc}")
    import numba_bench as nb

    return nb


def test_numba_kernel_table(numba_bench):
    assert set(numba_bench.KERNELS) == set(numba_bench.SIGNATURES)
    assert {f"{op}_{s}" for op in ("put", "get") for s in C.SCOPES} <= set(numba_bench.KERNELS)


@pytest.mark.parametrize("name", ["put_thread", "put_warp", "put_block", "get_thread", "get_warp", "get_block",
                                  "p_lat", "g_lat", "p_lat_peer_ptr", "g_lat_peer_ptr", "amo_lat", "pingpong", "barrier_lat", "empty_kernel", "spin"])
def test_numba_kernel_compiles(numba_bench, name):
    from numba import cuda

    ptx, _ = cuda.compile_ptx(numba_bench.KERNELS[name], numba_bench.SIGNATURES[name], cc=(9, 0))
    assert re.search(r"^\.target sm_90\b", ptx, re.M)
    assert re.search(r"\.entry\s", ptx), f"{name}: no kernel entry"
    _check_inlined(ptx, name)
    if name not in ("spin",):
        assert "nvshmemi_device_state_d" in ptx, f"{name}: no NVSHMEM device state referenced"


# ------------------------------------------------------------------ CuTe


@pytest.fixture(scope="module")
def cute_compiled():
    pytest.importorskip("cutlass.cute")
    try:
        from nvshmem_dsl._libs import bitcode_path

        bitcode_path("sm_90a")
    except Exception as exc:  # pragma: no cover
        pytest.skip(f"no NVSHMEM device bitcode: {exc}")
    import cute_bench as cb

    return cb.compile_all(cb.fake_tensors(256 << 20), arch="sm_90a", keep_ptx=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["put_thread", "put_warp", "put_block", "get_thread", "get_warp", "get_block",
                                  "p_lat", "g_lat", "amo_lat", "pingpong", "barrier_lat", "empty_kernel", "spin"])
def test_cute_kernel_compiles(cute_compiled, name):
    ck = cute_compiled[name]
    assert ck.arch == "sm_90a"
    ptx = ck.__ptx__
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)
    _check_inlined(ptx, name)
    if name not in ("spin",):
        assert "nvshmemi_device_state_d" in ptx
    if name.startswith(("put_", "get_")):  # block size given at launch, as in C++ and Numba
        assert ".reqntid" not in ptx and ".maxntid" not in ptx
    elif name in ("p_lat", "g_lat", "amo_lat", "pingpong"):  # one thread, as C++ and Numba declare
        assert re.search(r"^\.reqntid 1, 1, 1$", ptx, re.M)


def test_cute_api_resolves():
    pytest.importorskip("cutlass.cute")
    import _cute_api

    api = _cute_api.api()
    for n in _cute_api.NAMES:
        assert callable(getattr(api, n))
    assert _cute_api.SOURCE != "unresolved"


# ------------------------------------------------------------------ parameters = bench.cu


def _cpp_source() -> str:
    return (HERE / "cpp" / "bench.cu").read_text()


def test_constants_match_cpp():
    src = _cpp_source()
    for name in ("BW_GRID", "BW_BLOCK", "THREAD_SCOPE_BLOCK", "ALIGN_ELEMS", "LAT_SLOTS", "BARRIER_BLOCK",
                 "SPIN_US_BEFORE_TIMED", "SPIN_US_BEFORE_LAUNCHES"):
        m = re.search(rf"static const int {name} = (\d+);", src)
        assert m, name
        assert int(m.group(1)) == getattr(C, name), name
    assert re.search(r"ALLOC_BYTES = 1 << 20;", src) and C.ALLOC_BYTES == 1 << 20
    for name in ("U64_COUNTER", "U64_OUT", "U64_DATA", "U64_SRC", "U64_SIGNAL"):
        assert f"[{getattr(C, name)}]" in src.split("uint64_t* u64;")[1].splitlines()[0], name


def _cpp_params(quick: bool) -> dict:
    src = _cpp_source()
    body = src[src.index("if (quick) {"):src.index("if (reps_override > 0)")]
    quick_part, full_part = body.split("} else {")
    part = quick_part if quick else full_part
    values = {}
    for name, expr in re.findall(r"p\.(\w+) = ([^;]+);", part):
        if name == "sizes":
            continue
        values[name] = eval(expr.replace("LL", ""))  # noqa: S307 - our own constant expressions
    return values


@pytest.mark.parametrize("quick", [True, False])
def test_params_match_cpp(quick):
    p = C.make_params(quick)
    cpp = _cpp_params(quick)
    for name, value in cpp.items():
        assert getattr(p, name) == value, name
    if quick:
        m = re.search(r"p\.sizes = \{([^}]*)\};", _cpp_source())
        assert [eval(x) for x in m.group(1).split(",")] == p.sizes  # noqa: S307
    else:
        assert p.sizes == [8] + [1 << (2 * k) for k in range(2, 15)]
        assert p.sizes[-1] == 256 << 20


def test_chunks_cover_every_element():
    for nelems in (1, 2, 31, 32, 33, 1024, 1 << 20, (256 << 20) // 4, 12345):
        for workers in (C.BW_GRID, C.BW_GRID * C.BW_BLOCK // 32):
            covered, prev_end = 0, 0
            for w in range(workers):
                s, n = C.chunk_partition(nelems, workers, w)
                if n:
                    assert s == prev_end and s % C.ALIGN_ELEMS == 0
                    prev_end = s + n
                    covered += n
            assert covered == nelems


def test_bw_iters():
    p = C.make_params(True)
    assert C.bw_iters(p, 8) == p.max_iters
    assert C.bw_iters(p, 256 << 20) == max(p.min_iters, (1 << 30) // (256 << 20))


# ------------------------------------------------------------------ run.py / check.py


def _rec(impl, bench, scope, nbytes, value, unit, pe=0, iters=10):
    return {"impl": impl, "bench": bench, "scope": scope, "bytes": nbytes, "value": value, "best": value,
            "unit": unit, "iters": iters, "reps": 3, "pe": pe, "npes": 2}


def test_run_aggregates_and_ratios():
    import run

    lines = [
        "[rank 0] " + json.dumps(_rec("cpp", "put_bw", "block", 1 << 20, 100.0, "GB/s", 0)),
        "[rank 1] " + json.dumps(_rec("cpp", "put_bw", "block", 1 << 20, 120.0, "GB/s", 1)),
        json.dumps(_rec("numba", "put_bw", "block", 1 << 20, 99.0, "GB/s", 0)),
        json.dumps(_rec("numba", "put_bw", "block", 1 << 20, 121.0, "GB/s", 1)),
        json.dumps(_rec("cpp", "p_lat", "thread", 4, 40.0, "ns/op")),
        json.dumps(_rec("cute", "p_lat", "thread", 4, 50.0, "ns/op")),
        json.dumps({"impl": "cpp", "bench": "meta", "pe": 0, "device": "X"}),
        "garbage { not json",
    ]
    recs = run.parse_records(lines)
    assert len(recs) == 7
    agg = run.aggregate(recs)
    assert agg["cpp"][("put_bw", "block", 1 << 20)]["value"] == pytest.approx(110.0)
    assert agg["numba"][("put_bw", "block", 1 << 20)]["per_pe"] == {"0": 99.0, "1": 121.0}
    rats = {(r["impl"], r["key"]): r for r in run.ratios(agg)}
    assert rats[("numba", "put_bw|block|1048576")]["ratio"] == pytest.approx(1.0)
    assert rats[("numba", "put_bw|block|1048576")]["higher_is_better"]
    assert rats[("cute", "p_lat|thread|4")]["ratio"] == pytest.approx(1.25)
    assert not rats[("cute", "p_lat|thread|4")]["higher_is_better"]
    text = run.table(agg)
    assert "put_bw" in text and "1 MiB" in text and "1.25" in text


def test_compile_time_reports_first_and_later_kernel():
    """bench/compile_time.py: the first NVSHMEM kernel, then a later one in the same process."""
    pytest.importorskip("numba.cuda")
    out = subprocess.run([sys.executable, str(HERE / "compile_time.py"), "--impl", "numba", "--label", "warm"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["scope"] for r in recs] == ["warm", "warm-later"]
    assert all(r["bench"] == "compile_time" and r["unit"] == "s" and r["value"] > 0 for r in recs)


def test_implausible_bandwidth_is_flagged():
    """More GB/s than any interconnect gives means the kernel skipped its work (the CuTe warp
    kernel of 2026-11-22 reported 130 000 GB/s): bench/run.py names it and fails."""
    import run

    agg = run.aggregate([_rec("cpp", "put_bw", "warp", 1 << 28, 365.0, "GB/s"),
                         _rec("cute", "put_bw", "warp", 1 << 28, 132370.0, "GB/s"),
                         _rec("cute", "p_lat", "thread", 4, 5000.0, "ns/op")])
    assert run.implausible(agg) == ["cute put_bw|warp|268435456 (132370 GB/s)"]
    recs = [dict(_rec("numba", "p_lat", "thread", 4, 47.0, "ns/op", pe=pe), checked=pe == 0) for pe in (0, 1)]
    assert run.aggregate(recs)["numba"][("p_lat", "thread", 4)]["checked"] is False
    assert run.implausible(run.aggregate(recs)) == ["numba p_lat|thread|4 (wrong data after the kernel)"]


def test_p_pattern():
    """What a p_lat loop of `iters` leaves in the peer's LAT_SLOTS floats."""
    import numpy as np

    for iters in (10, 1024, 5000):
        lat = np.full(C.LAT_SLOTS, -1, np.float32)
        for i in range(iters):
            lat[i & (C.LAT_SLOTS - 1)] = i
        assert C.p_pattern_ok(lat, iters)
        lat[3] += 1
        assert not C.p_pattern_ok(lat, iters)


def _results_file(path, ratios):
    path.write_text(json.dumps({"meta": {}, "ratios": [
        {"impl": impl, "key": key, "ratio": r, "higher_is_better": hib, "unit": "GB/s" if hib else "us"}
        for impl, key, r, hib in ratios]}))


def test_check_pass_and_fail(tmp_path):
    import check

    res, base = tmp_path / "latest.json", tmp_path / "baseline.json"
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 2  # no results
    _results_file(res, [("numba", "put_bw|block|1048576", 1.00, True), ("cute", "p_lat|thread|4", 1.20, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 2  # no baseline
    assert check.main(["--results", str(res), "--baseline", str(base), "--update"]) == 0
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 0
    # 4% less bandwidth, 4% more time: within 5%
    _results_file(res, [("numba", "put_bw|block|1048576", 0.96, True), ("cute", "p_lat|thread|4", 1.248, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 0
    # 6% less bandwidth: regression
    _results_file(res, [("numba", "put_bw|block|1048576", 0.94, True), ("cute", "p_lat|thread|4", 1.20, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 1
    # 6% more time relative to C++: regression
    _results_file(res, [("numba", "put_bw|block|1048576", 1.0, True), ("cute", "p_lat|thread|4", 1.28, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 1
    # faster than the baseline is fine; a point of a benchmark that ran but vanished is not
    _results_file(res, [("numba", "put_bw|block|4096", 1.0, True), ("cute", "p_lat|thread|4", 1.0, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 1
    # a benchmark not run at all is only listed
    _results_file(res, [("cute", "p_lat|thread|4", 1.0, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 0


def test_amo_count():
    """The peer's amo_lat launches leave launches * iters in this PE's counter, nothing else."""
    import numpy as np

    u64 = np.zeros(C.U64_LEN, np.uint64)
    u64[C.U64_COUNTER] = 4 * 20000
    u64[C.U64_OUT] = 7
    assert C.amo_count_ok(u64, 4, 20000)
    assert not C.amo_count_ok(u64, 4, 10000)  # half the fetch-adds: a loop that skipped work


def test_lands_on_peer():
    """PE 0 launches alone: PE 1 must see the write, PE 0 must not (a local write fails)."""
    class FakeHost:
        def sync(self):
            pass

        def barrier_all(self):
            pass

    launched = []
    for me, seen, want in [(0, False, True), (1, True, True), (0, True, False), (1, False, False), (2, False, True)]:
        ok = C.lands_on_peer(FakeHost(), me, lambda: None, lambda: launched.append(me), lambda: seen)
        assert ok is want, (me, seen)
    assert launched == [0, 0]
