"""What NVSHMEM4Py's own tests (nvshmem4py/test, run by tests/gpu/nvshmem4py_tests.py) need of us, on a CPU.

* ``nvshmem.core._internal_tracking._mr_references``: memory_test.py reads and writes it;
* the runner: its table, the merge of the per-rank case logs, its JUnit files, its skip without
  the tests; and the pytest plugin the ranks load (``--with-mpi`` without pytest-mpi, the case log).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import nvshmem_dsl.core as nvshmem
from nvshmem_dsl.core._types import BufferTypes
from nvshmem_dsl.errors import NvshmemLeakWarning

from nvshmem4py_world import FakeDevice, FakeStream, World, close

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
import nvshmem4py_tests as runner  # noqa: E402


@pytest.fixture
def up(monkeypatch):
    monkeypatch.setenv("NVSHMEM_DSL_CHECK_SYMMETRY", "0")
    world = World(monkeypatch)
    nvshmem.init(device=FakeDevice(0), uid=nvshmem.get_unique_id(), rank=0, nranks=2, initializer_method="uid")
    world.stream = FakeStream()
    world.calls.clear()
    yield world
    close(world)


# --------------------------------------------------------------------------- _internal_tracking


def test_internal_tracking_before_init_is_empty():
    from nvshmem_dsl.core._internal_tracking import _mr_references

    assert len(_mr_references) == 0 and list(_mr_references) == []
    with pytest.raises(KeyError):
        _mr_references[0]


def test_internal_tracking_is_a_live_view_of_the_allocations(up, caplog):
    """memory_test.py's use: read ref_count after ``del buf``, then write freed / ref_count."""
    from nvshmem_dsl.core._internal_tracking import _mr_references

    buf = nvshmem.buffer(1024)
    ptr = int(buf.handle)
    assert list(_mr_references) == [0]
    with pytest.raises(KeyError):
        _mr_references[1]  # another device: not this PE's
    mr = _mr_references[0]
    assert mr is _mr_references[0] and mr.device_id == 0
    refs = mr._mem_references
    rec = refs[ptr]
    assert (rec["ref_count"], rec["freed"], rec["size"], rec["type"], rec["parent"]) == (
        1, False, 1024, BufferTypes.NORMAL, None)
    assert rec["buffer"] is buf and set(rec) == {"ref_count", "freed", "buffer", "parent", "type", "size"}
    peer = nvshmem.get_peer_buffer(buf, 1)
    peer_rec = refs[int(peer.handle)]
    assert peer_rec["parent"] == ptr and peer_rec["type"].name == "PEER"
    assert [p for p, r in refs.items() if r.get("parent") == ptr] == [int(peer.handle)]

    del buf  # test_del_buffer: the allocation outlives the name
    assert refs[ptr]["ref_count"] > 0
    refs[ptr]["freed"] = True  # what the test writes: finalize then logs no leak for it
    assert refs[ptr]["freed"] is True
    with pytest.raises(KeyError, match="ref_count"):
        refs[ptr]["size"] = 8
    with pytest.raises(KeyError):
        refs[12345]

    other = nvshmem.buffer(64)
    optr = int(other.handle)
    refs[optr]["freed"] = True
    refs[optr]["ref_count"] = 0  # test_release_del_buffer: left to NVSHMEM's teardown
    with caplog.at_level(logging.ERROR, logger="nvshmem"), pytest.warns(NvshmemLeakWarning, match="1 symmetric"):
        nvshmem.finalize()  # nvshmem_dsl's own report: the one given ref_count 0 is still allocated
    assert "not freed explicitly" not in caplog.text
    assert ("nvshmem_free", (ptr,)) in up.calls and ("nvshmem_free", (optr,)) not in up.calls
    assert len(_mr_references) == 0 and ptr not in refs


def test_internal_tracking_keeps_a_freed_allocations_record(up):
    """memory_test.py test_buffer_scope_release_gc_free: free_array, del, gc, then write the record's
    "freed" (NVSHMEM4Py keeps it; ours raised KeyError on the H200, 2026-12-03 session 23)."""
    from nvshmem_dsl.core._internal_tracking import _mr_references

    buf = nvshmem.buffer(8)
    ptr = int(buf.handle)
    nvshmem.free(buf)
    del buf
    refs = _mr_references[0]._mem_references
    assert ptr in refs and refs[ptr]["freed"] is True and ptr in list(refs)
    refs[ptr]["freed"] = True
    from nvshmem_dsl.core import _tracking

    again = _tracking.add(_tracking.Entry(ptr, 16, None, BufferTypes.NORMAL))  # NVSHMEM hands the address out again
    assert refs[ptr]["size"] == 16 and refs[ptr]["freed"] is False and list(refs).count(ptr) == 1
    _tracking.drop(again)
    nvshmem.finalize()
    assert ptr not in refs and len(refs) == 0


def test_internal_tracking_imports_through_the_alias():
    code = ("import nvshmem_dsl.core.alias as a; a.enable(); "
            "from nvshmem.core._internal_tracking import _mr_references; "
            "import nvshmem_dsl.core._internal_tracking as m; print(_mr_references is m._mr_references)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


# --------------------------------------------------------------------------- the runner


def test_runner_table_mirrors_run_tests_sh():
    """RUNS: run_tests.sh's invocations at its commit 9e47d67, in its order (suite "all")."""
    names = [r.name for r in runner.RUNS]
    assert len(names) == len(set(names))
    assert runner.SUITES == ("core", "numba", "numba_high_level_1", "numba_high_level_2", "numba_cuda_mlir",
                             "numba_cuda_mlir_high_level_1", "numba_cuda_mlir_high_level_2", "cutedsl",
                             "cutedsl_high_level_1", "cutedsl_high_level_2", "nvls", "numba_cuda_mlir_nvls")
    assert {s for r in runner.RUNS for s in r.suites} == set(runner.SUITES)
    primary = [r.suite for r in runner.RUNS]
    assert primary == sorted(primary, key=runner.SUITES.index)  # grouped, in run_tests.sh's order
    by = {r.name: r for r in runner.RUNS}
    assert by["wheel_sanity"].nproc == 1 and all(r.nproc == 2 for r in runner.RUNS if r.name != "wheel_sanity")
    assert by["numba_coll_reduce"].argv == ("-m", "pytest", "test_device_coll.py::test_device_reduce")
    assert by["numba_coll_reduce"].file == "device/numba/test_device_coll.py"
    assert by["rma_skip_signalop"].file == "rma_test.py"
    cmd = runner.command(by["numba_sync"])
    assert cmd[1:6] == ["-m", "nvshmem_dsl.run", "--as-nvshmem4py", "-n", "2"]
    assert cmd[6:9] == ["-m", "pytest", "test_device_sync.py"]
    assert "--with-mpi" in cmd and cmd[cmd.index("--init-type") + 1] == "mpi"
    assert runner.command(by["init_uid"])[6:] == ["init_test.py", "-i", "uid"]
    # the files each suite runs, as run_tests.sh's functions name them
    files = {s: sorted({r.file for r in runner.RUNS if s in r.suites}) for s in runner.SUITES}
    assert files["cutedsl"] == ["device/cute/test_device_coll.py", "device/cute/test_device_rma.py"]
    assert files["cutedsl_high_level_1"] == ["device/cute/test_device_coll.py", "device/cute/test_device_sync.py"]
    assert files["cutedsl_high_level_2"] == ["device/cute/test_device_rma.py"]
    assert files["numba_cuda_mlir"] == ["numba_cuda_mlir/test_get_version.py", "numba_cuda_mlir/test_npe.py"]
    mlir_dev = "numba_cuda_mlir/device/numba_cuda_mlir/"
    assert files["numba_cuda_mlir_high_level_1"] == [mlir_dev + f for f in
                                                     ("test_device_barrier.py", "test_device_coll.py",
                                                      "test_device_sync.py")]
    assert files["numba_cuda_mlir_high_level_2"] == [mlir_dev + "test_device_rma.py"]
    assert files["numba_cuda_mlir_nvls"] == [mlir_dev + "test_device_amo.py", mlir_dev + "test_device_mem.py",
                                             "numba_cuda_mlir/test_ring_allreduce.py"]
    assert "device/cute/test_device_rma_tma.py" in files["nvls"] and len(files["nvls"]) == 9
    assert [r.name for r in runner.RUNS if r.file == "device/cute/test_device_rma.py"] == ["cute_rma"]  # once
    assert by["mlir_ring_allreduce"].argv == ("test_ring_allreduce.py",)  # run_tests.sh passes no -i there
    assert {r.needs for r in runner.RUNS if r.folder.startswith("numba_cuda_mlir")} == {("numba_cuda_mlir",)}
    assert {r.needs for r in runner.RUNS if not r.folder.startswith(("numba_cuda_mlir", "device/cute"))} == {()}
    assert all(r.timeout >= 120 for r in runner.RUNS if r.folder == "device/cute")  # a compile per case


def test_runner_environment_is_run_tests_shs():
    by = {r.name: r for r in runner.RUNS}
    assert dict(by["numba_mem"].env) == {"NUMBA_CUDA_ENABLE_NRT": "1", "NVSHMEM_MAX_TEAMS": "1024"}
    # NVSHMEM reads the TMA policy once per process: run_tests.sh gives the TMA file its own launch with it
    assert dict(by["cute_rma_tma"].env) == {"NVSHMEM_TMA_POLICY": "ENABLE", "NVSHMEM_MAX_TEAMS": "1024"}
    assert not any(dict(r.env).get("NVSHMEM_TMA_POLICY") for r in runner.RUNS if r.name != "cute_rma_tma")
    for r in runner.RUNS:
        nvls = {"nvls", "numba_cuda_mlir_nvls"} & set(r.suites)
        assert (dict(r.env).get("NVSHMEM_MAX_TEAMS") == "1024") == bool(nvls), r.name
        assert r.env_default == ((("NVSHMEM_DISABLE_NCCL", "1"),) if nvls else ()), r.name
    # --skip-amo: both RMA runs, always (run_tests.sh 9e47d67: "Host AMOs are not implemented.")
    assert runner.command(by["rma_skip_signalop"])[6:] == ["rma_test.py", "-i", "mpi", "--skip-signalop", "--skip-amo"]
    assert runner.command(by["rma_full"])[6:] == ["rma_test.py", "-i", "mpi", "--skip-amo"]
    assert [r.name for r in runner.RUNS if "--skip-amo" in r.argv] == ["rma_skip_signalop", "rma_full"]


def _env_script(tmp_path, monkeypatch, body: str) -> Path:
    """A folder ``t`` holding ``env_test.py`` (``body``), which the runner runs as a plain Python script."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "env_test.py").write_text(body)
    monkeypatch.setattr(runner, "command", lambda run, mpirun=None, package="alias": [sys.executable, *run.argv])
    return tmp_path / "t"


def test_runner_gives_a_run_its_environment(tmp_path, monkeypatch):
    """env overrides the environment; env_default only where it has no value (run_tests.sh's ${NAME:-1})."""
    _env_script(tmp_path, monkeypatch,
                "import os\nfor k in ('NVSHMEM_TMA_POLICY', 'NVSHMEM_MAX_TEAMS', 'NVSHMEM_DISABLE_NCCL'):\n"
                "    print(k, os.environ.get(k))\n")
    tma = {r.name: r for r in runner.RUNS}["cute_rma_tma"]
    run = runner.Run("nvls", "envtma", ".", ("env_test.py",), env=tma.env, env_default=tma.env_default)
    monkeypatch.setenv("NVSHMEM_MAX_TEAMS", "128")  # CI configs pre-export 128: run_tests.sh overrides it
    for preset, nccl in ((None, "1"), ("0", "0")):
        if preset is None:
            monkeypatch.delenv("NVSHMEM_DISABLE_NCCL", raising=False)
        else:
            monkeypatch.setenv("NVSHMEM_DISABLE_NCCL", preset)
        res = runner.execute(run, tmp_path / "t", tmp_path / "out", deadline=runner.time.monotonic() + 60)
        log = (tmp_path / "out" / "envtma.log").read_text()
        assert res.status == "passed", log
        assert "NVSHMEM_TMA_POLICY ENABLE" in log and "NVSHMEM_MAX_TEAMS 1024" in log, log
        assert f"NVSHMEM_DISABLE_NCCL {nccl}" in log, log


def test_runner_skips_collectives_where_run_tests_sh_does(tmp_path, monkeypatch):
    by = {r.name: r for r in runner.RUNS}
    assert {r.name for r in runner.RUNS if r.skip_if == ("NVSHMEM4PY_SKIP_NUMBA_COLLECTIVES",)} == {
        f"numba_coll_{f[12:]}" for f in runner._COLL}
    assert {r.name for r in runner.RUNS if r.skip_if == ("NVSHMEM4PY_SKIP_CUTEDSL_COLLECTIVES",)} == {
        f"cute_coll_{f[12:]}" for f in runner._COLL}
    assert not any(r.skip_if for r in runner.RUNS if r.name.startswith("mlir_"))  # no knob there
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "ok_test.py").write_text("pass\n")
    monkeypatch.setattr(runner, "command", lambda run, mpirun=None, package="alias": [sys.executable, *run.argv])
    run = runner.Run("cutedsl_high_level_1", "coll", ".", ("ok_test.py",), skip_if=by["cute_coll_reduce"].skip_if)
    monkeypatch.setenv("NVSHMEM4PY_SKIP_CUTEDSL_COLLECTIVES", "1")
    res = runner.execute(run, tmp_path / "t", tmp_path / "out", deadline=runner.time.monotonic() + 60)
    assert res.status == "skipped" and res.counts()["skipped"] == 1 and res.rc is None
    monkeypatch.setattr(runner, "RUNS", (run,))
    assert runner.main(["--tests", str(tmp_path / "t"), "--out", str(tmp_path / "o")]) == 0
    monkeypatch.setenv("NVSHMEM4PY_SKIP_CUTEDSL_COLLECTIVES", "0")
    res = runner.execute(run, tmp_path / "t", tmp_path / "out", deadline=runner.time.monotonic() + 60)
    assert res.status == "passed"


def test_runner_select_refuses_unknown_names():
    assert {r.suite for r in runner.select("core,nvls", None)} == {"core", "nvls"}
    assert [r.name for r in runner.select(None, "teams,npe")] == ["npe", "teams"]
    # a run two suites share is selected by either, and runs once
    assert [r.name for r in runner.select("cutedsl_high_level_2", None)] == ["cute_rma"]
    cute = ["cute_rma", *(f"cute_coll_{f[12:]}" for f in runner._COLL)]  # its whole-file collectives: these
    assert [r.name for r in runner.select("cutedsl", None)] == cute
    assert [r.name for r in runner.select("cutedsl,cutedsl_high_level_2", None)].count("cute_rma") == 1
    assert [r.name for r in runner.select("numba_cuda_mlir_nvls", None)] == ["mlir_mem", "mlir_amo",
                                                                            "mlir_ring_allreduce"]
    assert len(runner.select(None, None)) == len(runner.RUNS)
    with pytest.raises(SystemExit, match="unknown bogus"):
        runner.select("core,bogus", None)
    with pytest.raises(SystemExit, match="unknown fmt"):  # run_tests.sh's yapf check of its own sources: no test
        runner.select("fmt", None)
    with pytest.raises(SystemExit, match="unknown run nope"):
        runner.select(None, "nope")


def _lines(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_merge_case_logs_counts_each_case_once_at_its_worst_rank(tmp_path):
    r0 = _lines(tmp_path / "x.rank0", [
        {"case": "a", "phase": "start"}, {"case": "a", "phase": "call", "outcome": "passed"},
        {"case": "b", "phase": "start"}, {"case": "b", "phase": "call", "outcome": "passed"},
        {"case": "c", "phase": "start"}, {"case": "c", "phase": "setup", "outcome": "skipped", "message": "mc"},
        {"case": "d", "phase": "start"}, {"case": "d", "phase": "setup", "outcome": "failed", "message": "fx"},
        {"case": "e", "phase": "start"},
    ])
    r1 = _lines(tmp_path / "x.rank1", [
        {"case": "a", "phase": "start"}, {"case": "a", "phase": "call", "outcome": "passed"},
        {"case": "b", "phase": "start"}, {"case": "b", "phase": "call", "outcome": "failed", "message": "boom"},
        "not json",
    ])
    cases = runner.merge_case_logs([r0, r1])
    assert {k: v[0] for k, v in cases.items()} == {
        "a": "passed", "b": "failed", "c": "skipped", "d": "error", "e": "hung"}
    assert cases["b"][1] == "boom"
    result = runner.Result(runner.RUNS[0], status="timeout", cases=cases)
    assert result.counts() == {"passed": 1, "failed": 1, "skipped": 1, "error": 1, "hung": 1}


def test_write_junit(tmp_path):
    result = runner.Result(runner.RUNS[0], status="failed", seconds=3.0, cases={
        "ok": ("passed", ""), "bad": ("failed", "x < y"), "gone": ("hung", "t"), "sk": ("skipped", "why")})
    path = tmp_path / "j" / "r.xml"
    runner.write_junit(result, path)
    suite = ET.parse(path).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("4", "2", "0", "1")
    cases = {c.get("name"): [e.tag for e in c] for c in suite}
    assert cases == {"bad": ["failure"], "gone": ["failure"], "ok": [], "sk": ["skipped"]}
    assert suite.find("testcase[@name='bad']/failure").text == "x < y"


def test_runner_skips_cleanly_without_the_tests(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "tests/gpu/nvshmem4py_tests.py"), "--tests", str(tmp_path / "no"),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "skipped: no" in out.stdout and not (tmp_path / "out").exists()


def test_runner_xfail_runs_as_run_tests_sh(tmp_path, monkeypatch):
    """test_collective.py / test_highlevel_bindings.py failing is XFAIL there: status xfail, exit status 0."""
    by = {r.name: r for r in runner.RUNS}
    assert by["collective_numba"].xfail and by["highlevel_bindings"].xfail and not by["ring"].xfail
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "bad_test.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setattr(runner, "command", lambda run, mpirun=None, package="alias": [sys.executable, *run.argv])
    bad = runner.Run("numba", "bad", ".", ("bad_test.py",), xfail=True)
    res = runner.execute(bad, tmp_path / "t", tmp_path / "out", deadline=runner.time.monotonic() + 60)
    assert (res.status, res.rc, res.counts()["failed"]) == ("xfail", 3, 1)
    monkeypatch.setattr(runner, "RUNS", (bad,))
    assert runner.main(["--tests", str(tmp_path / "t"), "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())[0]["status"] == "xfail"


def test_runner_runs_again_what_an_mps_fault_failed(tmp_path, monkeypatch):
    """A run whose job met the MPS server recovering from another job's fault runs once more, alone, after
    the others; its first log is kept; a run that failed on its own is not run again."""
    t = _env_script(tmp_path, monkeypatch, "")
    (t / "faulted_test.py").write_text(
        "import pathlib, sys\nflag = pathlib.Path(sys.argv[1])\nif not flag.exists():\n"
        f"    flag.touch(); print('CUDA_ERROR_MPS_SERVER_NOT_READY: recovering'); sys.exit(1)\n")
    (t / "broken_test.py").write_text("raise SystemExit(2)\n")
    faulted = runner.Run("core", "faulted", ".", ("faulted_test.py", str(tmp_path / "flag")))
    broken = runner.Run("core", "broken", ".", ("broken_test.py",))
    monkeypatch.setattr(runner, "RUNS", (faulted, broken))
    assert runner.main(["--tests", str(t), "--out", str(tmp_path / "o"), "--together", "2"]) == 1  # broken failed
    summary = {r["run"]: r for r in json.loads((tmp_path / "o" / "summary.json").read_text())}
    assert summary["faulted"]["status"] == "passed" and summary["faulted"]["again_after_mps_fault"]
    assert summary["broken"]["status"] == "failed" and not summary["broken"]["again_after_mps_fault"]
    assert runner.MPS_FAULT in (tmp_path / "o" / "faulted.mps-fault.log").read_text()
    assert runner.MPS_FAULT not in (tmp_path / "o" / "faulted.log").read_text()


def test_runner_missing_file_and_timeout(tmp_path, monkeypatch):
    """A file not in the tests folder is 'missing'; a run past its timeout is ended and its started case is hung."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "slow_test.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    slow = runner.Run("core", "slow", ".", ("slow_test.py",), timeout=20, nproc=1)
    monkeypatch.setattr(runner, "command", lambda run, mpirun=None, package="alias": [sys.executable, *run.argv])
    res = runner.execute(slow, tmp_path / "t", tmp_path / "out", deadline=runner.time.monotonic() + 17)
    assert res.status == "timeout" and res.cases == {"slow_test.py": ("hung", "see slow.log")}
    assert 14 < res.seconds < 40 and "timeout after" in (tmp_path / "out" / "slow.log").read_text()
    nocute = runner.Run("cutedsl", "nocute", ".", ("slow_test.py",), needs=("no_such_module_here",))
    assert runner.execute(nocute, tmp_path / "t", tmp_path / "out", deadline=runner.time.monotonic() + 100).status \
        == "no no_such_module_here"
    assert {r.needs for r in runner.RUNS if r.folder == "device/cute"} == {("cutlass",)}
    assert runner.execute({r.name: r for r in runner.RUNS}["mlir_npe"], tmp_path / "t", tmp_path / "out",
                          deadline=runner.time.monotonic() + 100).status in ("missing", "no numba_cuda_mlir")
    gone = runner.Run("core", "gone", ".", ("absent_test.py",))
    assert runner.execute(gone, tmp_path / "t", tmp_path / "out", deadline=runner.time.monotonic() + 100).status == "missing"
    late = runner.execute(slow, tmp_path / "t", tmp_path / "out", deadline=runner.time.monotonic() + 5)
    assert late.status == "not run" and late.cases == {}


def test_plugin_accepts_with_mpi_and_logs_cases_per_rank(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.mpi\ndef test_ok():\n    pass\n\n"
        "def test_bad():\n    assert 1 == 2\n\ndef test_skip():\n    pytest.skip('no mc')\n")
    env = {"PYTHONPATH": f"{ROOT / 'tests' / 'gpu'}", "NV4PY_CASE_LOG": str(tmp_path / "log"), "NVSHMEM_DSL_RANK": "1",
           "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "nv4py_pytest_plugin", "-p", "no:cacheprovider",
                          "-q", "--with-mpi", "-W", "error::pytest.PytestUnknownMarkWarning", "test_x.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 failed, 1 passed, 1 skipped" in out.stdout
    cases = runner.merge_case_logs([tmp_path / "log.rank1"])
    assert {k.split("::")[1]: v[0] for k, v in cases.items()} == {"test_ok": "passed", "test_bad": "failed",
                                                                  "test_skip": "skipped"}
    assert "assert 1 == 2" in cases["test_x.py::test_bad"][1] and cases["test_x.py::test_skip"][1].endswith("no mc")


# --------------------------------------------------------------------------- init_test.py's nested init


def test_init_twice_then_finalize_twice_as_nvshmem4py(up):
    """init_test.py test_multi_init: a second init while initialised counts; the second finalize ends NVSHMEM."""
    buf = nvshmem.buffer(64)
    nvshmem.init(device=FakeDevice(0), uid=nvshmem.get_unique_id(), rank=0, nranks=2, initializer_method="uid")
    assert not up.calls_of("nvshmemx_hostlib_init_attr") and not up.calls_of("nvshmemx_init_attr")
    nvshmem.free(buf)
    nvshmem.finalize()
    assert nvshmem.my_pe() == 0 and "nvshmemx_hostlib_finalize" not in up.symbols()  # still up
    nvshmem.finalize()
    assert "nvshmemx_hostlib_finalize" in up.symbols()
    with pytest.raises(nvshmem.NvshmemInvalid, match="not init"):
        nvshmem.my_pe()
    # and up again afterwards (init_test.py's next test), with a count of one
    nvshmem.init(device=FakeDevice(0), uid=nvshmem.get_unique_id(), rank=0, nranks=2, initializer_method="uid")
    nvshmem.finalize()
    assert up.symbols().count("nvshmemx_hostlib_finalize") == 2


def test_second_init_on_another_device_is_refused(up):
    with pytest.raises(nvshmem.NvshmemInvalid, match="already initialised on device 0"):
        nvshmem.init(device=FakeDevice(1), uid=nvshmem.get_unique_id(), rank=0, nranks=2, initializer_method="uid")
    assert nvshmem.my_pe() == 0


# --------------------------------------------------------------------------- init_test.py's bitcode lookup


def test_find_device_bitcode_library_without_a_driver_is_the_installations_default(monkeypatch):
    """init_test.py calls it before init: with no CUDA driver (a CPU machine) there is no current device."""
    from nvshmem_dsl import _libs
    from nvshmem_dsl.host import _cuda

    def no_driver():
        raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search')

    monkeypatch.setattr(_cuda, "current_device_id", no_driver)
    files = _libs.installation().bitcode_files
    if not files:
        pytest.skip("no NVSHMEM device bitcode installed here")
    assert nvshmem.find_device_bitcode_library() == str(files[-1])
    assert nvshmem.find_device_bitcode_library(90) == str(_libs.bitcode_path(90))


def test_find_device_bitcode_library_of_an_arch_is_that_archs_file(monkeypatch):
    """An explicit arch names its own per-arch file, as NVSHMEM4Py's lookup (its init_test.py expects
    arch="999" to raise), not the nearest older one nvshmem_dsl's linker takes; a single-layout
    installation's one file serves the archs NVSHMEM builds for."""
    from nvshmem_dsl import _libs

    inst = _libs.installation()
    if not inst.bitcode_files:
        pytest.skip("no NVSHMEM device bitcode installed here")
    for bad in ("999", "sm_999", "not an arch"):
        with pytest.raises(nvshmem.NvshmemInvalid, match="not found|not a GPU architecture"):
            nvshmem.find_device_bitcode_library(arch=bad)
    if inst.layout == "per-arch":
        shipped = sorted(inst.bitcode_archs)
        assert nvshmem.find_device_bitcode_library(arch=f"sm_{shipped[-1]}") == str(inst.bitcode_archs[shipped[-1]])
        missing = next(a for a in range(shipped[0], 200) if a not in inst.bitcode_archs)
        with pytest.raises(nvshmem.NvshmemInvalid, match=f"no libnvshmem_device_sm_{missing}.bc"):
            nvshmem.find_device_bitcode_library(arch=missing)
        assert _libs.bitcode_path(missing).exists()  # what the linker takes for it: the nearest older file
    monkeypatch.setattr(type(inst), "layout", property(lambda self: "single"))
    assert nvshmem.find_device_bitcode_library(arch=90) == str(inst.bitcode_files[0])
    with pytest.raises(nvshmem.NvshmemInvalid, match="not found for sm_999"):
        nvshmem.find_device_bitcode_library(arch=999)


def test_ranks_under_mpirun_run_through_the_alias(monkeypatch):
    # Open MPI without ssh/rsh cannot start MPI singletons: the files then run under mpirun, as run_tests.sh
    npe = {r.name: r for r in runner.RUNS}["npe"]
    cmd = runner.command(npe, ["/x/mpirun", "--oversubscribe"])
    assert cmd == ["/x/mpirun", "--oversubscribe", "-n", "2", sys.executable, "-m", "nvshmem_dsl.core.alias",
                   "test_npe.py", "-i", "mpi"]
    assert runner.command(npe)[1:6] == ["-m", "nvshmem_dsl.run", "--as-nvshmem4py", "-n", "2"]
    import jobs
    monkeypatch.setattr(jobs, "mpirun", lambda: ["/x/mpirun"])
    assert runner.find_mpirun("auto") == ["/x/mpirun"] and runner.find_mpirun("nvshmem_dsl") is None
    monkeypatch.setattr(jobs, "mpirun", lambda: None)
    assert runner.find_mpirun("auto") is None
    with pytest.raises(SystemExit, match="no mpirun"):
        runner.find_mpirun("mpirun")


def test_open_mpi_ranks_are_not_bound_to_cores(monkeypatch):
    # Open MPI binds each rank to a core from core 0 in every job: jobs side by side shared 2 cores
    import types

    import jobs
    monkeypatch.setattr(jobs.shutil, "which", lambda name: f"/x/{name}" if name == "mpirun" else None)
    for version, flags in (("mpirun (Open MPI) 4.1.6", ["--oversubscribe", "--bind-to", "none"]),
                           ("HYDRA build details: MPICH", [])):
        monkeypatch.setattr(jobs.subprocess, "run", lambda *a, v=version, **k: types.SimpleNamespace(stdout=v))
        assert jobs.mpirun() == ["/x/mpirun", *flags]


def test_nvshmem4py_itself_runs_its_tests_plainly_under_mpirun(tmp_path, monkeypatch, capsys):
    # --package nvshmem4py: where NVSHMEM4Py passes is what the alias is held to
    npe = {r.name: r for r in runner.RUNS}["npe"]
    assert runner.command(npe, ["/x/mpirun"], "nvshmem4py") == ["/x/mpirun", "-n", "2", sys.executable,
                                                                "test_npe.py", "-i", "mpi"]
    with pytest.raises(ValueError, match="mpirun"):
        runner.command(npe, None, "nvshmem4py")
    import jobs
    monkeypatch.setattr(jobs, "mpirun", lambda: None)
    with pytest.raises(SystemExit):
        runner.main(["--package", "nvshmem4py", "--tests", str(tmp_path), "--list"])
    assert "--package nvshmem4py" in capsys.readouterr().err


def test_ranks_site_shares_the_gpus_and_answers_num_devices(tmp_path):
    # NVSHMEM4Py's tests give each rank Device(node-local rank) and read cuda.core.system.num_devices
    site = ROOT / "tests" / "gpu" / "nv4py_site"
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("print('CHAINED')\n")
    code = ("import cuda.core, sitecustomize as s\n"
            "from cuda.core import system\n"
            "print(cuda.core.Device.__name__, cuda.core.Device.__module__)\n"
            "print(s.shared_device_id(1, 1), s.shared_device_id(3, 2), s.shared_device_id(0, 0))\n"
            "print(callable(getattr(system, '__getattr__', None)))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(other)]), NV4PY_SHARE_GPU="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == ["CHAINED", "Device sitecustomize", "0 1 0", "True"], out.stdout
    env.pop("NV4PY_SHARE_GPU")
    out = subprocess.run([sys.executable, "-c", "import cuda.core; print(cuda.core.Device.__module__)"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.split() == ["CHAINED", "cuda.core._device"], out.stdout + out.stderr


def test_runner_shares_the_gpus_where_the_ranks_outnumber_them(tmp_path, monkeypatch):
    _env_script(tmp_path, monkeypatch,
                "import os, sys\nprint('SHARE', os.environ.get('NV4PY_SHARE_GPU'))\n"
                "print('SITE', os.environ['PYTHONPATH'].split(os.pathsep)[0].endswith('nv4py_site'))\n"
                "print('OURS', os.environ.get('NV4PY_USE_OUR_NVSHMEM'))\n")
    run = runner.Run("core", "envcheck", ".", ("env_test.py",))
    for gpus, share, package, ours in ((1, "1", "alias", "None"), (2, "None", "nvshmem4py", "1")):
        res = runner.execute(run, tmp_path / "t", tmp_path / f"out{gpus}", deadline=runner.time.monotonic() + 60,
                             gpus=gpus, package=package)
        log = (tmp_path / f"out{gpus}" / "envcheck.log").read_text()
        assert res.status == "passed" and f"SHARE {share}" in log and "SITE True" in log, log
        assert f"OURS {ours}" in log, log


def test_ranks_site_hands_nvshmem4py_our_nvshmem():
    # NV4PY_USE_OUR_NVSHMEM=1: cuda.pathfinder answers nvshmem_dsl's NVSHMEM headers (bench/_nv4py.py)
    from nvshmem_dsl._libs import installation

    inst = installation()
    if inst.include_dir is None or not (inst.include_dir / "nvshmem.h").is_file():
        pytest.skip(f"NVSHMEM at {inst.root} has no headers")
    site = ROOT / "tests" / "gpu" / "nv4py_site"
    code = ("import cuda.pathfinder as p\n"
            "print(p.find_nvidia_header_directory('nvshmem'))\n")
    env = dict(os.environ, PYTHONPATH=str(site), NV4PY_USE_OUR_NVSHMEM="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(inst.include_dir)], out.stdout + out.stderr
