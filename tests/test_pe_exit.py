"""How a PE ends (runtime/host/_exit.py), on CPU: a child process (tests/fake_pe.py) initialises
nvshmem_dsl as PE 1 of 2 with NVSHMEM's C calls intercepted, then ends in one of the ways a program
ends; the test checks its exit status, what it wrote, and whether it called NVSHMEM's collective
finalize."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvshmem_dsl.host import _exit
from nvshmem_dsl.run import RANK_VARS

FAKE_PE = Path(__file__).resolve().parent / "fake_pe.py"


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}  # not a rank of an outer launch
    env.update(NVSHMEM_DSL_CHECK_SYMMETRY="0", PYTHONPATH=os.environ.get("PYTHONPATH", ""), **extra)
    return env


def run_child(ending, *, module=False, timeout=60, **extra):
    env = _env(**extra)
    if module:
        env["PYTHONPATH"] = os.pathsep.join([str(FAKE_PE.parent), env["PYTHONPATH"]])
        cmd = [sys.executable, "-m", FAKE_PE.stem, ending]
    else:
        cmd = [sys.executable, str(FAKE_PE), ending]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    proc.seconds = time.monotonic() - t0
    return proc


FINALIZED = "C call: nvshmemx_hostlib_finalize"
SKIPPED = "skipping the collective NVSHMEM finalize"


@pytest.mark.parametrize("ending, status, words", [
    ("raise", 1, "(an uncaught RuntimeError)"),
    ("with_raise", 1, "(an uncaught RuntimeError)"),
    ("sys_exit", 3, "(SystemExit(3))"),
    ("with_sys_exit", 3, "(SystemExit(3))"),
    ("sys_exit_text", 1, "(SystemExit('bad input, giving up'))"),
])
def test_early_end_leaves_with_pythons_status_without_the_collective_finalize(ending, status, words):
    proc = run_child(ending)
    assert proc.returncode == status, proc.stderr
    assert "initialized PE 1 of 2" in proc.stdout
    assert FINALIZED not in proc.stdout and "main program done" not in proc.stdout
    assert f"nvshmem_dsl: PE 1 of 2 is exiting with status {status} {words} without finalize(): {SKIPPED}" \
        in proc.stderr
    if ending.endswith("raise"):
        assert "RuntimeError: injected failure" in proc.stderr  # Python's traceback came first
    if ending == "sys_exit_text":
        assert proc.stderr.startswith("bad input, giving up\n")  # as Python writes it, once
        assert proc.stderr.count("bad input") == 2  # and in our line's SystemExit(...)


def test_early_end_under_dash_m():
    """Under ``python -m`` the outermost frame is runpy's: the exit is seen there as well."""
    proc = run_child("sys_exit", module=True)
    assert proc.returncode == 3, proc.stderr
    assert SKIPPED in proc.stderr and FINALIZED not in proc.stdout


def test_a_single_pe_finalizes_at_exit_whatever_ends_it():
    """With one PE there is nobody to wait for: finalize at exit, and Python's own status."""
    proc = run_child("raise", FAKE_PE_NRANKS="1")
    assert proc.returncode == 1, proc.stderr
    assert "RuntimeError: injected failure" in proc.stderr and SKIPPED not in proc.stderr
    assert FINALIZED in proc.stdout and "PE 0: finalize() was not called; finalized at exit" in proc.stderr


def test_os_exit_ends_at_once_with_its_status():
    proc = run_child("os_exit")
    assert proc.returncode == 4, proc.stderr
    assert FINALIZED not in proc.stdout and SKIPPED not in proc.stderr


def test_keyboard_interrupt_ends_by_sigint_as_python_does():
    proc = run_child("keyboard")
    assert proc.returncode == -signal.SIGINT, proc.stderr
    assert "exiting with status SIGINT" in proc.stderr and FINALIZED not in proc.stdout


@pytest.mark.parametrize("ending", ["normal", "sys_exit_0", "with_sys_exit_0", "caught_exit"])
def test_normal_end_finalizes_collectively_at_exit(ending):
    """Status 0 (and a SystemExit that a frame caught: the program went on) is a normal end."""
    proc = run_child(ending)
    assert proc.returncode == 0, proc.stderr
    assert FINALIZED in proc.stdout, proc.stdout
    assert SKIPPED not in proc.stderr
    assert "nvshmem_dsl: PE 1: finalize() was not called; finalized at exit" in proc.stderr
    if ending == "caught_exit":
        assert "caught SystemExit" in proc.stdout and "main program done" in proc.stdout


def test_explicit_finalize_then_exit():
    proc = run_child("finalize")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(FINALIZED) == 1 and proc.stderr == ""


@pytest.mark.parametrize("ending", ["finalize", "normal"])
def test_finalize_waits_for_the_peers_within_the_bound(ending):
    """A finalize whose peers never arrive: the PE says so and leaves with 124 after the timeout."""
    proc = run_child(ending, HANG_FINALIZE="1", NVSHMEM_DSL_FINALIZE_TIMEOUT="1.5")
    assert proc.returncode == _exit.STALLED_STATUS, proc.stderr
    assert 1.5 <= proc.seconds < 30
    assert FINALIZED in proc.stdout
    assert ("nvshmem_dsl: PE 1 of 2: the collective NVSHMEM finalize did not complete within 1.5 s "
            "(NVSHMEM_DSL_FINALIZE_TIMEOUT): another PE never reached it") in proc.stderr


def test_finalize_at_exit_is_bounded_where_no_thread_can_start_at_exit():
    """Python 3.12+ starts no thread at exit, where the finalize of a program that did not call it runs:
    the watchdog's thread was made at init."""
    proc = run_child("normal", HANG_FINALIZE="1", NVSHMEM_DSL_FINALIZE_TIMEOUT="1.5", FAKE_PE_NO_THREADS_AT_EXIT="1")
    assert proc.returncode == _exit.STALLED_STATUS, proc.stderr
    assert "the collective NVSHMEM finalize did not complete within 1.5 s" in proc.stderr


def test_malformed_finalize_timeout_fails_init():
    proc = run_child("normal", NVSHMEM_DSL_FINALIZE_TIMEOUT="soon")
    assert proc.returncode == 1
    assert "NvshmemInitError: init(): NVSHMEM_DSL_FINALIZE_TIMEOUT='soon' is not a number of seconds >= 0" \
        in proc.stderr


def test_launcher_is_told_init_and_finalize():
    """The pipe of python -m nvshmem_dsl.run gets "initialized", then "finalized"."""
    read, write = os.pipe()
    env = _env(NVSHMEM_DSL_LAUNCHER_FD=str(write))
    with subprocess.Popen([sys.executable, str(FAKE_PE), "finalize"], env=env, pass_fds=(write,),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            words = pipe.read().decode().split()
        proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert words == ["initialized", "finalized"]


# --------------------------------------------------------------------------- units


def test_python_status():
    assert _exit.python_status(SystemExit()) == 0
    assert _exit.python_status(SystemExit(None)) == 0
    assert _exit.python_status(SystemExit(5)) == 5
    assert _exit.python_status(SystemExit(True)) == 1
    assert _exit.python_status(SystemExit("no")) == 1
    assert _exit.python_status(ValueError()) == 1
    assert _exit.python_status(KeyboardInterrupt()) is None


def test_finalize_timeout_setting():
    assert _exit.finalize_timeout({}) == _exit.DEFAULT_FINALIZE_TIMEOUT
    assert _exit.finalize_timeout({_exit.ENV_FINALIZE_TIMEOUT: "2.5"}) == 2.5
    assert _exit.finalize_timeout({_exit.ENV_FINALIZE_TIMEOUT: "0"}) is None
    for bad in ("-1", "x", "nan"):
        with pytest.raises(ValueError, match=_exit.ENV_FINALIZE_TIMEOUT):
            _exit.finalize_timeout({_exit.ENV_FINALIZE_TIMEOUT: bad})


def _mpirun():
    """An MPI launcher beside this Python (the venv's MPICH) or on PATH, with mpi4py; else skip."""
    pytest.importorskip("mpi4py")
    here = Path(sys.executable).parent / "mpirun"
    exe = str(here) if here.exists() else shutil.which("mpirun")
    if exe is None:
        pytest.skip("no mpirun")
    return exe


@pytest.mark.parametrize("ending, status", [("sys_exit", 3), ("raise", 1)])
def test_leaving_under_mpirun_aborts_the_mpi_job(ending, status, tmp_path):
    """Under mpirun (mpi mode) a PE leaves by MPI_Abort: mpirun ends the other rank (waiting in a
    barrier for ever) at once with the status, and names the rank (MPICH's hydra would wait for the
    others after a plain exit)."""
    env = _env(FAKE_PE_OUT=str(tmp_path))
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    t0 = time.monotonic()
    proc = subprocess.run([_mpirun(), "-n", "2", sys.executable, str(FAKE_PE), f"1:{ending},0:barrier"],
                          capture_output=True, text=True, timeout=120, env=env)
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == status, out
    pe0, pe1 = ((tmp_path / f"rank{k}.txt").read_text() for k in (0, 1))
    assert "waiting in barrier_all" in pe0 and SKIPPED in pe1, pe0 + pe1
    assert re.search(rf"MPI_Abort\(MPI_COMM_WORLD, {status}\)|MPI_ABORT was invoked on rank 1", pe1 + out), pe1 + out
    assert seconds < 60
