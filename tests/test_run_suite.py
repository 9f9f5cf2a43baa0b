"""tests/gpu/run_suite.py and tests/gpu/mps.py on the CPU: the MPS daemon is a fake control
binary (NVSHMEM_DSL_MPS_CONTROL) that records what it is asked; no suite really runs."""
import importlib.util
import json
import os
import signal
import stat
import sys
import tempfile
import types
from pathlib import Path

import pytest

GPU_DIR = Path(__file__).resolve().parent / "gpu"
_spec = importlib.util.spec_from_file_location("run_suite", GPU_DIR / "run_suite.py")
run_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_suite)
mps = sys.modules[run_suite.MpsDaemon.__module__]

FAKE_CONTROL = f"""#!{sys.executable}
import json, os, sys
pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
control = os.path.join(pipe, "control")
record = {{"argv": sys.argv[1:], "pipe": pipe, "log": os.environ.get("CUDA_MPS_LOG_DIRECTORY")}}
if sys.argv[1:] == ["-d"]:
    status = 3 if os.environ.get("FAKE_MPS_FAIL") else 0
    if status:
        print("fake: cannot start")
    elif not os.environ.get("FAKE_MPS_NO_SOCKET"):
        open(control, "w").close()
        with open(os.path.join(record["log"], "control.log"), "w") as f:
            f.write("fake daemon started\\n")
else:
    record["stdin"] = sys.stdin.read()
    alive = os.path.exists(control) and not os.environ.get("FAKE_MPS_DEAD")
    status = 0 if alive and record["stdin"].strip() in ("quit", "get_server_list") else 1
    if status == 0 and record["stdin"].strip() == "quit":
        os.remove(control)
with open(os.environ["FAKE_MPS_RECORD"], "a") as f:
    f.write(json.dumps(record) + "\\n")
sys.exit(status)
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake control binary; gives a function returning its recorded calls."""
    binary = tmp_path / "fake-mps-control"
    binary.write_text(FAKE_CONTROL)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "calls.jsonl"
    monkeypatch.setenv(mps.CONTROL_VAR, str(binary))
    monkeypatch.setenv("FAKE_MPS_RECORD", str(record))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # the daemons' dirs
    caller_pipe = tmp_path / "caller-pipe"  # no daemon there
    caller_pipe.mkdir()
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(caller_pipe))
    for var in ("FAKE_MPS_FAIL", "FAKE_MPS_NO_SOCKET", "FAKE_MPS_DEAD", "CUDA_MPS_LOG_DIRECTORY", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)

    def calls():
        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    sigterm = signal.getsignal(signal.SIGTERM)
    yield calls
    assert signal.getsignal(signal.SIGTERM) == sigterm  # given back, whatever happened


def _assert_started_and_stopped(calls, daemon_env):
    start, stop = calls()
    assert start["argv"] == ["-d"]
    assert stop["argv"] == [] and stop["stdin"] == "quit\n"
    for call in (start, stop):  # the same private dirs for both
        assert call["pipe"] == daemon_env["CUDA_MPS_PIPE_DIRECTORY"]
        assert call["log"] == daemon_env["CUDA_MPS_LOG_DIRECTORY"]
    assert not Path(start["pipe"]).exists()  # stopped and cleaned up


@pytest.mark.parametrize("per_gpu, percentage", [(2, "50"), (3, "33"), (4, "25"), (8, "12"), (101, "1")])
def test_daemon_started_with_private_dirs_and_env(fake, tmp_path, per_gpu, percentage):
    with run_suite.MpsDaemon(per_gpu, keep_log=tmp_path / "kept") as daemon:
        env = dict(daemon.env)
        assert daemon.mode == "MPS"
        assert set(env) == set(run_suite.MPS_VARS)
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == percentage
        pipe, log = Path(env["CUDA_MPS_PIPE_DIRECTORY"]), Path(env["CUDA_MPS_LOG_DIRECTORY"])
        assert pipe != Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"]) and pipe.parent == log.parent
        assert (pipe / "control").exists() and pipe.parent.parent == tmp_path / "tmp"  # a fresh tempdir
        assert [c["argv"] for c in fake()] == [["-d"]]
    _assert_started_and_stopped(fake, env)
    assert (tmp_path / "kept" / "control.log").read_text() == "fake daemon started\n"


def test_fresh_dirs_each_time(fake):
    pipes = []
    for _ in range(2):
        with run_suite.MpsDaemon(2) as daemon:
            pipes.append(daemon.env["CUDA_MPS_PIPE_DIRECTORY"])
    assert pipes[0] != pipes[1]
    assert [c["argv"] for c in fake()] == [["-d"], [], ["-d"], []]


@pytest.mark.parametrize("exc", [RuntimeError("suite crashed"), KeyboardInterrupt()])
def test_daemon_stopped_when_the_body_raises(fake, exc):
    with pytest.raises(type(exc)):
        with run_suite.MpsDaemon(4) as daemon:
            env = dict(daemon.env)
            raise exc
    _assert_started_and_stopped(fake, env)


def test_daemon_stopped_on_sigterm(fake):
    with pytest.raises(SystemExit) as info:
        with run_suite.MpsDaemon(2) as daemon:
            env = dict(daemon.env)
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()  # not reached: the handler raises
    assert info.value.code == 128 + signal.SIGTERM
    _assert_started_and_stopped(fake, env)


def test_missing_binary(fake, monkeypatch, tmp_path):
    monkeypatch.setenv(mps.CONTROL_VAR, str(tmp_path / "no-such-control"))
    with pytest.raises(run_suite.MpsError, match=r"cannot start .*no-such-control -d.*MPS log directory: /") as info:
        with run_suite.MpsDaemon(2):
            pytest.fail("body ran without a daemon")
    assert Path(str(info.value).rsplit("MPS log directory: ", 1)[1]).is_dir()


@pytest.mark.parametrize("failure, message", [
    ("FAKE_MPS_FAIL", r"-d` exited with status 3: fake: cannot start; MPS log directory: /\S+/log$"),
    ("FAKE_MPS_NO_SOCKET", r"-d` made no control socket in /\S+/pipe within 0.3 s; MPS log directory: /\S+/log$"),
])
def test_start_fails(fake, monkeypatch, failure, message):
    """The error names the log, which stays; a quit is still tried (a daemon may run without its
    socket); the fixture checks that the SIGTERM handler is given back."""
    monkeypatch.setenv(failure, "1")
    with pytest.raises(run_suite.MpsError, match=message) as info:
        with run_suite.MpsDaemon(2, start_timeout=0.3):
            pytest.fail("body ran without a daemon")
    assert Path(str(info.value).rsplit("MPS log directory: ", 1)[1]).is_dir()
    assert [c["argv"] for c in fake()] == [["-d"], []]


@pytest.mark.parametrize("per_gpu, enabled, mode", [(1, True, ""), (4, False, "no MPS")])
def test_no_daemon(fake, capsys, per_gpu, enabled, mode):
    with run_suite.MpsDaemon(per_gpu, enabled=enabled) as daemon:
        assert daemon.env == {} and daemon.mode == mode
    assert fake() == []
    assert ("MPS disabled" in capsys.readouterr().out) == (not enabled)


def test_callers_daemon_is_used(fake, capsys):
    caller_pipe = Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"])
    (caller_pipe / "control").touch()
    with run_suite.MpsDaemon(2) as daemon:
        assert daemon.env == {} and daemon.mode == "caller's MPS"
    assert [(c["argv"], c["pipe"], c["stdin"]) for c in fake()] == [([], str(caller_pipe), "get_server_list\n")]
    assert f"listens at {caller_pipe}; not starting another" in capsys.readouterr().out


def test_callers_stale_socket_gets_a_daemon_of_ours(fake, monkeypatch, capsys):
    # a daemon told to quit can leave its socket: PEs would then share the GPU time-sliced, without MPS
    caller_pipe = Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"])
    (caller_pipe / "control").touch()
    monkeypatch.setenv("FAKE_MPS_DEAD", "1")
    with run_suite.MpsDaemon(2) as daemon:
        assert daemon.mode == "MPS"
        assert daemon.env["CUDA_MPS_PIPE_DIRECTORY"] != str(caller_pipe)
        assert Path(daemon.env["CUDA_MPS_PIPE_DIRECTORY"], "control").exists()
    assert "no MPS control daemon answers at" in capsys.readouterr().out
    assert [c["argv"] for c in fake()][:2] == [[], ["-d"]]


def test_pes_per_gpu(monkeypatch):
    monkeypatch.setattr(run_suite, "gpu_count", lambda: 2)
    assert [run_suite.pes_per_gpu(n, "auto") for n in (1, 2, 3, 4, 8)] == [1, 1, 2, 2, 4]
    assert [run_suite.pes_per_gpu(n, "4") for n in (1, 2, 8)] == [1, 2, 4]
    monkeypatch.setattr(run_suite, "gpu_count", lambda: 0)
    assert run_suite.pes_per_gpu(8, "auto") == 1


def test_gpu_count_from_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3,5")
    assert run_suite.gpu_count() == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert run_suite.gpu_count() == 0


def test_main_end_to_end(fake, monkeypatch, tmp_path, capsys):
    """--pes 1,4 on 2 GPUs: no daemon at 1 PE, a private one at 4 (2 per GPU) that is stopped
    although a suite fails; per-count folders, summary lines, the table and summary.json."""
    monkeypatch.setattr(run_suite, "gpu_count", lambda: 2)
    seen = []

    def fake_run(launcher, dsl, files, nproc, timeout, out, extra_env):
        daemons = [c["argv"] for c in fake()]
        seen.append((nproc, dsl, out.name, dict(extra_env), daemons.count(["-d"]) - daemons.count([])))
        if nproc == 4 and dsl == "numba":
            return {"status": "FAILED (exit 1)", "seconds": 3.0, "tests": {"a": "pass", "b": "fail"}}
        return {"status": "ok", "seconds": 2.0, "tests": {"a": "pass", "b": "pass", "c": "skip"}}
    monkeypatch.setattr(run_suite, "_run", fake_run)

    rc = run_suite.main(["--pes", "1,4", "--dsl", "host,numba", "--launchers", "launcher",
                         "--out", str(tmp_path / "res")])
    assert rc == 1
    assert [s[:3] for s in seen] == [(1, "host", "pes1"), (1, "numba", "pes1"),
                                     (4, "host", "pes4"), (4, "numba", "pes4")]
    assert seen[0][3] == seen[1][3] == {} and seen[0][4] == 0  # no daemon at one PE per GPU
    assert seen[2][3]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50" and seen[2][4] == 1  # one daemon running
    _assert_started_and_stopped(fake, seen[2][3])

    out = capsys.readouterr().out
    assert "launcher  host 1 PEs (1/GPU): ok  2 passed, 0 failed, 1 skipped" in out
    assert "launcher numba 4 PEs (2/GPU, MPS): FAILED (exit 1)  1 passed, 1 failed, 0 skipped" in out
    assert out.rstrip().splitlines()[-1].split() == ["4", "2", "MPS", "numba", "launcher", "1", "1", "0", "3.0",
                                                       "FAILED", "(exit", "1)"]
    runs = json.loads((tmp_path / "res" / "summary.json").read_text())["runs"]
    assert [(r["pes"], r["pes_per_gpu"], r["mps"], r["dsl"], r["pass"], r["fail"], r["skip"], r["seconds"])
            for r in runs] == [(1, 1, "", "host", 2, 0, 1, 2.0), (1, 1, "", "numba", 2, 0, 1, 2.0),
                               (4, 2, "MPS", "host", 2, 0, 1, 2.0), (4, 2, "MPS", "numba", 1, 1, 0, 3.0)]
    assert (tmp_path / "res" / "pes4" / "mps-log" / "control.log").exists()


def test_main_runs_suites_together(fake, monkeypatch, tmp_path, capsys):
    """--together 3: the three suites of a PE count run at once (all three wait for each other here),
    under the one daemon; rows and summary in the order of the arguments, whatever order they end in."""
    import threading
    import time

    monkeypatch.setattr(run_suite, "gpu_count", lambda: 1)
    met = threading.Barrier(3, timeout=20)  # broken (an error) unless three runs are in at once
    ended = []

    def fake_run(launcher, dsl, files, nproc, timeout, out, extra_env):
        met.wait()
        time.sleep({"host": 0.3, "numba": 0.0, "cute": 0.1}[dsl])
        ended.append(dsl)
        return {"status": "ok", "seconds": 1.0, "tests": {dsl: "pass"}}
    monkeypatch.setattr(run_suite, "_run", fake_run)
    assert run_suite.main(["--pes", "2", "--dsl", "host,numba,cute", "--launchers", "launcher", "--together", "3",
                           "--out", str(tmp_path / "res")]) == 0
    assert ended == ["numba", "cute", "host"]
    runs = json.loads((tmp_path / "res" / "summary.json").read_text())["runs"]
    assert [r["dsl"] for r in runs] == ["host", "numba", "cute"] and {r["mps"] for r in runs} == {"MPS"}
    out = capsys.readouterr().out
    assert out.index("launcher  host 2 PEs") < out.index("launcher numba 2 PEs") < out.index("launcher  cute 2 PEs")
    assert [c["argv"] for c in fake()] == [["-d"], []]  # one daemon for the three


def test_together_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        run_suite.main(["--together", "0"])
    assert "--together takes a positive integer" in capsys.readouterr().err


def test_a_suite_beside_others_stops_when_told(tmp_path):
    """A suite run beside others (in a thread) is terminated within a second or two of _stopping."""
    import threading
    import time

    got = {}

    def run():
        try:
            run_suite._call([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), 120)
        except KeyboardInterrupt:
            got["stopped"] = time.monotonic()
    run_suite._stopping.clear()
    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.5)
    told = time.monotonic()
    run_suite._stopping.set()
    worker.join(20)
    run_suite._stopping.clear()
    assert "stopped" in got and got["stopped"] - told < 5


def test_main_stops_daemon_when_a_suite_raises(fake, monkeypatch, tmp_path):
    def crash(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(run_suite, "_run", crash)
    with pytest.raises(KeyboardInterrupt):
        run_suite.main(["--pes", "2", "--pes-per-gpu", "2", "--dsl", "host", "--launchers", "launcher",
                        "--out", str(tmp_path)])
    assert [c["argv"] for c in fake()] == [["-d"], []]
    assert not Path(fake()[0]["pipe"]).exists()


def test_main_no_mps_and_nproc_alias(fake, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(run_suite, "_run", lambda *a: {"status": "ok", "seconds": 1.0, "tests": {"a": "pass"}})
    assert run_suite.main(["--nproc", "3", "--pes-per-gpu", "3", "--no-mps", "--dsl", "numba",
                           "--launchers", "launcher", "--out", str(tmp_path)]) == 0
    assert fake() == []
    assert "launcher numba 3 PEs (3/GPU, no MPS): ok  1 passed" in capsys.readouterr().out
    assert not (tmp_path / "pes3").exists()  # one count: no subfolder


def test_main_reports_mps_failure(fake, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    monkeypatch.setattr(run_suite, "_run", lambda *a: pytest.fail("a suite ran without its daemon"))
    assert run_suite.main(["--pes", "2", "--pes-per-gpu", "2", "--dsl", "host", "--launchers", "launcher",
                           "--out", str(tmp_path)]) == 1
    assert "exited with status 3: fake: cannot start; MPS log directory:" in capsys.readouterr().err


def test_mpirun_exports_mps_vars_and_leaves_ranks_unbound(monkeypatch, tmp_path):
    import jobs
    monkeypatch.setattr(jobs.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(jobs.subprocess, "run", lambda cmd, **kw: types.SimpleNamespace(stdout="mpirun (Open MPI) 4.1.6"))
    calls = []
    monkeypatch.setattr(run_suite, "_call", lambda cmd, env, timeout: calls.append((cmd, env)) or ("ok", ""))
    env = {"CUDA_MPS_PIPE_DIRECTORY": "/p", "CUDA_MPS_LOG_DIRECTORY": "/l", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"}
    run_suite._run("mpirun", "numba", ["t.py"], 8, 10, tmp_path, env)
    cmd, child_env = calls[0]
    assert cmd[:6] == ["/usr/bin/mpirun", "--oversubscribe", "--bind-to", "none", "-n", "8"]
    for var, value in env.items():
        assert child_env[var] == value and cmd[cmd.index(var) - 1] == "-x"
    assert child_env["NVSHMEM_DISABLE_NVLS"] == "1"


def test_call_reports_failure_and_hang():
    """A hung run gets SIGTERM first (our launcher passes it on to its PEs), and its output is kept."""
    assert run_suite._call([sys.executable, "-c", "import sys; print('out'); sys.exit(2)"], dict(os.environ), 30) \
        == ("FAILED (exit 2)", "out\n")
    hang = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM'), sys.exit(1)))\n"
            "print('started', flush=True); time.sleep(60)")
    assert run_suite._call([sys.executable, "-c", hang], dict(os.environ), 1) \
        == ("HANG (killed after 1 s)", "started\ngot SIGTERM\n")


def test_mps_cli_runs_one_command_under_its_daemon(fake, tmp_path):
    out = tmp_path / "env.txt"
    rc = mps.main(["--pes-per-gpu", "4", "--", sys.executable, "-c",
                   f"import os; open({str(out)!r}, 'w').write(os.environ['CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'])"])
    assert rc == 0 and out.read_text() == "25"
    assert [c["argv"] for c in fake()] == [["-d"], []]  # started, then stopped


RANK_OUTPUT = GPU_DIR / "rank_output.py"


def _rank_output(tmp_path, program: str, timeout: str | None = None):
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "RANK_OUTPUT_TIMEOUT"}
    env["PMI_RANK"] = "1"
    if timeout:
        env["RANK_OUTPUT_TIMEOUT"] = timeout
    done = subprocess.run([sys.executable, str(RANK_OUTPUT), str(tmp_path), "--", sys.executable, "-c", program],
                          env=env, timeout=60)
    return done.returncode, (tmp_path / "rank1.out").read_text(), (tmp_path / "rank1.err").read_text()


def test_rank_output_files_and_status(tmp_path):
    rc, out, err = _rank_output(tmp_path, "import sys; print('to out'); print('to err', file=sys.stderr); sys.exit(3)")
    assert (rc, out, err) == (3, "to out\n", "to err\n")


def test_rank_output_hung_command_says_where_and_ends(tmp_path):
    program = "import threading, time\ndef waiting_in_barrier():\n    time.sleep(120)\nwaiting_in_barrier()\n"
    rc, out, err = _rank_output(tmp_path, program, timeout="1.5")
    assert rc == 124
    assert "still running after 1.5 s: SIGABRT" in err
    assert "waiting_in_barrier" in err and "Current thread" in err  # faulthandler's traceback of the hang


def test_rank_output_needs_a_rank(tmp_path):
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                                            "MV2_COMM_WORLD_RANK")}
    done = subprocess.run([sys.executable, str(RANK_OUTPUT), str(tmp_path), "--", "true"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no rank in the environment" in done.stderr
