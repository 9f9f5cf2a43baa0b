"""The launcher (python -m nvshmem_dsl.run), on CPU: output, failures, environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nvshmem_dsl import run as launcher

ENV = {k: v for k, v in os.environ.items() if k not in launcher.RANK_VARS}  # not a rank of an outer launch


def write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def nvrun(*args, timeout=60, env=None):
    return subprocess.run(
        [sys.executable, "-m", "nvshmem_dsl.run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV if env is None else env,
    )


def test_two_ranks_print_with_prefixes(tmp_path):
    script = write(tmp_path, "hello.py", """
        import os, sys
        rank = os.environ["NVSHMEM_DSL_RANK"]
        print("hello from", rank)
        print("second line", rank)
        print("to stderr", rank, file=sys.stderr)
        sys.stdout.write("no newline " + rank)
    """)
    proc = nvrun("-n", 2, script)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    for rank in (0, 1):
        mine = [line for line in out if line.startswith(f"[rank {rank}] ")]
        assert mine == [
            f"[rank {rank}] hello from {rank}",
            f"[rank {rank}] second line {rank}",
            f"[rank {rank}] no newline {rank}",
        ]
        assert f"[rank {rank}] to stderr {rank}" in proc.stderr.splitlines()
    assert len(out) == 6


def test_script_arguments_and_module_mode(tmp_path):
    write(tmp_path, "argmod.py", """
        import os, sys
        print(os.environ["NVSHMEM_DSL_RANK"], sys.argv[1:])
    """)
    env = {**ENV, "PYTHONPATH": str(tmp_path)}
    proc = nvrun("-n", 2, "-m", "argmod", "-n", "7", "--gpus", "x", env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [
        "[rank 0] 0 ['-n', '7', '--gpus', 'x']",
        "[rank 1] 1 ['-n', '7', '--gpus', 'x']",
    ]
    script = tmp_path / "argmod.py"
    proc = nvrun("-n", 1, script, "--flag", "value")
    assert proc.stdout.strip() == "[rank 0] 0 ['--flag', 'value']"


def test_environment_passed(tmp_path):
    script = write(tmp_path, "env.py", """
        import json, os
        keys = ["NVSHMEM_DSL_RANK", "NVSHMEM_DSL_NRANKS", "NVSHMEM_DSL_LOCAL_RANK", "NVSHMEM_DSL_SECRET",
                "NVSHMEM_DSL_STORE_HOST", "NVSHMEM_DSL_STORE_PORT", "NVSHMEM_DSL_BOOTSTRAP",
                "NVSHMEM_DSL_INIT_TIMEOUT", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "RANK", "PMI_SIZE",
                "OMPI_COMM_WORLD_SIZE"]
        print(json.dumps({k: os.environ.get(k) for k in keys}))
    """)
    import json

    outer = {**ENV, "RANK": "5", "PMI_SIZE": "8", "OMPI_COMM_WORLD_SIZE": "8"}  # an outer launch
    outer.pop("CUDA_VISIBLE_DEVICES", None)
    proc = nvrun("-n", 3, "--timeout", 7, script, env=outer)
    assert proc.returncode == 0, proc.stderr
    seen = {}
    for line in proc.stdout.splitlines():
        prefix, _, payload = line.partition("] ")
        seen[int(prefix.removeprefix("[rank "))] = json.loads(payload)
    assert sorted(seen) == [0, 1, 2]
    secrets = {e["NVSHMEM_DSL_SECRET"] for e in seen.values()}
    ports = {e["NVSHMEM_DSL_STORE_PORT"] for e in seen.values()}
    assert len(secrets) == 1 and len(secrets.pop()) >= 32
    assert len(ports) == 1 and 0 < int(ports.pop()) < 65536
    for rank, e in seen.items():
        assert e["NVSHMEM_DSL_RANK"] == e["NVSHMEM_DSL_LOCAL_RANK"] == e["LOCAL_RANK"] == str(rank)
        assert e["NVSHMEM_DSL_NRANKS"] == "3"
        assert e["NVSHMEM_DSL_STORE_HOST"] == "127.0.0.1"
        assert e["NVSHMEM_DSL_BOOTSTRAP"] == "launcher"
        assert float(e["NVSHMEM_DSL_INIT_TIMEOUT"]) == 7
        assert e["CUDA_VISIBLE_DEVICES"] is None
        assert e["RANK"] is e["PMI_SIZE"] is e["OMPI_COMM_WORLD_SIZE"] is None

    proc = nvrun("--gpus", "3,1", script)  # -n defaults to the number of GPUs
    assert proc.returncode == 0, proc.stderr
    envs = {line[6]: json.loads(line.partition("] ")[2]) for line in proc.stdout.splitlines()}
    assert envs["0"]["CUDA_VISIBLE_DEVICES"] == "3" and envs["1"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert envs["0"]["LOCAL_RANK"] is None and envs["1"]["NVSHMEM_DSL_LOCAL_RANK"] == "1"


def test_ranks_bootstrap_through_the_launcher(tmp_path):
    script = write(tmp_path, "boot.py", """
        import os
        from nvshmem_dsl.host._bootstrap import bootstrap
        b = bootstrap(lambda: os.urandom(128))
        print(b.mode, b.rank, b.nranks, b.device(2), b.uid.hex())
    """)
    proc = nvrun("-n", 4, "--timeout", 20, script)
    assert proc.returncode == 0, proc.stderr
    rows = sorted(line.split()[2:] for line in proc.stdout.splitlines())
    assert [r[:4] for r in rows] == [["launcher", str(i), "4", str(i % 2)] for i in range(4)]
    assert len({r[4] for r in rows}) == 1


def test_failure_propagates_and_kills_the_others(tmp_path):
    script = write(tmp_path, "fail.py", """
        import os, sys, time
        if os.environ["NVSHMEM_DSL_RANK"] == "1":
            time.sleep(0.3)
            print("rank 1 fails", flush=True)
            sys.exit(3)
        print("rank 0 sleeps", flush=True)
        time.sleep(120)
        print("rank 0 woke up")
    """)
    start = time.monotonic()
    proc = nvrun("-n", 2, "--grace", 2, script)
    elapsed = time.monotonic() - start
    assert proc.returncode == 3, proc.stderr
    assert elapsed < 20
    assert "[rank 1] rank 1 fails" in proc.stdout
    assert "[rank 0] rank 0 sleeps" in proc.stdout
    assert "woke up" not in proc.stdout
    assert "[nvshmem_dsl.run] PE 1 exited with status 3; stopping PE 0 (SIGTERM, then SIGKILL after 2 s)" \
        in proc.stderr
    assert "every PE has ended" in proc.stderr and "exit status 3" in proc.stderr


def test_sigterm_ignored_leads_to_sigkill(tmp_path):
    script = write(tmp_path, "stubborn.py", """
        import os, signal, sys, time
        if os.environ["NVSHMEM_DSL_RANK"] == "0":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("ready", flush=True)
            time.sleep(120)
        time.sleep(0.5)
        sys.exit(1)
    """)
    start = time.monotonic()
    proc = nvrun("-n", 2, "--grace", 1, script)
    assert proc.returncode == 1
    assert time.monotonic() - start < 20
    assert "PE 0 did not end within 1 s of SIGTERM: SIGKILL" in proc.stderr


def test_killed_rank_reports_signal_status(tmp_path):
    script = write(tmp_path, "killed.py", """
        import os, signal
        if os.environ["NVSHMEM_DSL_RANK"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = nvrun("-n", 2, script)
    assert proc.returncode == 128 + signal.SIGKILL
    assert "PE 1 was killed by SIGKILL (status 137)" in proc.stderr


def test_ctrl_c_stops_everything(tmp_path):
    script = write(tmp_path, "sleepy.py", """
        import time
        print("started", flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvshmem_dsl.run", "-n", "2", "--grace", "2", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        started = 0
        while started < 2:  # wait until both ranks run
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            started += "started" in line
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGINT


def test_first_failure_wins_and_success_is_zero(tmp_path):
    script = write(tmp_path, "codes.py", """
        import os, sys, time
        rank = int(os.environ["NVSHMEM_DSL_RANK"])
        time.sleep(0.2 * rank)
        sys.exit({0: 0, 1: 5, 2: 7}[rank])
    """)
    assert nvrun("-n", 3, "--grace", 1, script).returncode == 5
    ok = write(tmp_path, "ok.py", "pass\n")
    assert nvrun("-n", 2, ok).returncode == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "give a script"),
        (["-n", "2"], "give a script"),
        (["x.py"], "-n N"),
        (["-n", "3", "--gpus", "0,1", "x.py"], "needs 3 GPUs"),
        (["-n", "0", "x.py"], "at least 1"),
        (["-n", "1", "--timeout", "0", "x.py"], "positive"),
    ],
)
def test_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        launcher.main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_split_argv():
    split = launcher._split_argv
    assert split(["-n", "2", "s.py", "-n", "3"]) == (["-n", "2"], ["s.py", "-n", "3"])
    assert split(["-n", "2", "-m", "pkg.mod", "-x"]) == (["-n", "2"], ["-m", "pkg.mod", "-x"])
    assert split(["--gpus=0,1", "-mpkg", "a"]) == (["--gpus=0,1"], ["-m", "pkg", "a"])
    assert split(["-n", "2", "--", "-weird.py"]) == (["-n", "2"], ["-weird.py"])
    assert split(["-n", "2"]) == (["-n", "2"], None)


def test_rank_environment_unit():
    base = {"PATH": "/bin", "OMPI_COMM_WORLD_RANK": "3", "MASTER_ADDR": "h", "TORCHELASTIC_RUN_ID": "r"}
    env = launcher.rank_environment(base, rank=1, nranks=2, secret="abc", port=1234, gpus=["4", "5"])
    assert env["PATH"] == "/bin" and env["CUDA_VISIBLE_DEVICES"] == "5"
    assert "LOCAL_RANK" not in env and "NVSHMEM_DSL_INIT_TIMEOUT" not in env
    assert not {"OMPI_COMM_WORLD_RANK", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"} & set(env)
    assert env["NVSHMEM_DSL_STORE_PORT"] == "1234" and env["NVSHMEM_DSL_SECRET"] == "abc"


# --------------------------------------------------------------------------- PEs that leave the job (issue 43)

FAKE_PE = Path(__file__).resolve().parent / "fake_pe.py"  # nvshmem_dsl initialised with NVSHMEM intercepted


def nvrun_timed(*args, **kw):
    start = time.monotonic()
    proc = nvrun(*args, **kw)
    proc.seconds = time.monotonic() - start
    return proc


def fake_env(**extra):
    return {**ENV, "NVSHMEM_DSL_CHECK_SYMMETRY": "0", **extra}


@pytest.mark.parametrize("nranks", [2, 4])
def test_one_pe_exits_the_others_are_ended_within_the_grace(tmp_path, nranks):
    """A child that exits 3 while the others sleep: they are ended within --grace, status 3, naming the PE."""
    script = write(tmp_path, "one_exits.py", """
        import os, sys, time
        if os.environ["NVSHMEM_DSL_RANK"] == "1":
            time.sleep(0.5)
            sys.exit(3)
        time.sleep(120)
    """)
    proc = nvrun_timed("-n", nranks, "--grace", 2, script)
    assert proc.returncode == 3, proc.stderr
    others = "PE 0" if nranks == 2 else "PEs 0, 2, 3"
    assert f"PE 1 exited with status 3; stopping {others} (SIGTERM, then SIGKILL after 2 s)" in proc.stderr
    assert proc.seconds < 0.5 + 2 + 10  # sleeping children end on SIGTERM at once


@pytest.mark.parametrize("ending, status, words", [
    ("raise", 1, "PE 1 exited with status 1"),
    ("sys_exit", 3, "PE 1 exited with status 3"),
    ("os_exit", 4, "PE 1 exited with status 4"),
    ("with_sys_exit", 3, "PE 1 exited with status 3"),
])
def test_pe_leaving_after_init_ends_the_job_with_its_status(ending, status, words):
    """Item 1 on the CPU: PE 1 leaves after init (NVSHMEM intercepted) while PE 0 waits in a barrier
    for ever; the launcher ends PE 0 within the grace and exits with PE 1's status."""
    proc = nvrun_timed("-n", 2, "--grace", 2, "--timeout", 30, FAKE_PE, f"1:{ending},0:barrier", env=fake_env())
    assert proc.returncode == status, proc.stdout + proc.stderr
    assert "[rank 0] waiting in barrier_all" in proc.stdout
    assert f"{words}; stopping PE 0" in proc.stderr
    assert "C call: nvshmemx_hostlib_finalize" not in proc.stdout  # nobody finalized collectively
    assert proc.seconds < 30


def test_pe_exiting_0_without_finalize_is_a_failure():
    """A PE that exits with status 0 after init without finalizing (os._exit(0), or the exit
    finalize turned off) leaves its peers waiting for ever: the launcher ends them, status 1."""
    proc = nvrun_timed("-n", 2, "--grace", 2, "--timeout", 30, FAKE_PE, "1:normal,0:barrier",
                       env=fake_env(NVSHMEM_DSL_ATEXIT_FINALIZE="0"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("PE 1 exited with status 0 without finalizing NVSHMEM (the other PEs would wait for it forever); "
            "stopping PE 0") in proc.stderr
    assert proc.seconds < 30


def test_finalized_pes_exiting_0_is_success():
    proc = nvrun("-n", 2, "--timeout", 30, FAKE_PE, "finalize", env=fake_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("C call: nvshmemx_hostlib_finalize") == 2
    assert "[nvshmem_dsl.run]" not in proc.stderr


def test_pe_skipping_a_collective_ends_the_job_within_the_finalize_bound():
    """PE 1 skips the barrier PE 0 waits in and finalizes: its finalize never completes (no peer),
    so after NVSHMEM_DSL_FINALIZE_TIMEOUT it says so and leaves with 124, and the launcher ends PE 0."""
    proc = nvrun_timed("-n", 2, "--grace", 2, "--timeout", 30, FAKE_PE, "1:skip,0:barrier",
                       env=fake_env(HANG_FINALIZE="1", NVSHMEM_DSL_FINALIZE_TIMEOUT="1.5"))
    assert proc.returncode == 124, proc.stdout + proc.stderr
    assert "[rank 1] nvshmem_dsl: PE 1 of 2: the collective NVSHMEM finalize did not complete within 1.5 s" \
        in proc.stderr
    assert "PE 1 exited with status 124; stopping PE 0" in proc.stderr
    assert 1.5 < proc.seconds < 30
