"""A private CUDA MPS control daemon for runs with several PEs on one GPU (run_suite.py).

    with MpsDaemon(pes_per_gpu=2) as mps:
        subprocess.run(cmd, env=dict(os.environ, **mps.env))

Above one PE per GPU it starts ``nvidia-cuda-mps-control -d`` (or ``$NVSHMEM_DSL_MPS_CONTROL``)
with freshly made private pipe and log directories, and always stops it (``quit``, which waits
for the daemon's end) on the way out: after an exception, Ctrl-C or SIGTERM too. It starts none
when disabled or when a daemon already listens at the caller's CUDA_MPS_PIPE_DIRECTORY. It
never changes a device setting (compute mode, default active thread percentage).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CONTROL_VAR = "NVSHMEM_DSL_MPS_CONTROL"
DEFAULT_PIPE = "/tmp/nvidia-mps"  # where CUDA looks when CUDA_MPS_PIPE_DIRECTORY is unset


class MpsError(RuntimeError):
    """The MPS control daemon could not be started."""


def thread_percentage(pes_per_gpu: int) -> int:
    """CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for each of ``pes_per_gpu`` PEs sharing a GPU."""
    return max(1, 100 // pes_per_gpu)


def _raise_on_sigterm(signum, frame):  # noqa: ARG001
    raise SystemExit(128 + signum)


class MpsDaemon:
    """Context manager; ``env`` holds what the PE processes need, ``mode`` says what runs:
    "" (one PE per GPU), "MPS" (ours), "caller's MPS" or "no MPS" (disabled)."""

    def __init__(self, pes_per_gpu: int, *, enabled: bool = True, keep_log: Path | None = None,
                 start_timeout: float = 5.0) -> None:
        self.pes_per_gpu, self.enabled, self.keep_log = pes_per_gpu, enabled, keep_log
        self.start_timeout = start_timeout
        self.env: dict[str, str] = {}
        self.mode = ""
        self._dir: Path | None = None  # our tempdir (pipe/ and log/) while a daemon may run
        self._sigterm = None  # the SIGTERM handler to restore

    @property
    def control(self) -> str:
        return os.environ.get(CONTROL_VAR, "nvidia-cuda-mps-control")

    def __enter__(self) -> MpsDaemon:
        if self.pes_per_gpu <= 1:
            return self
        caller_pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", DEFAULT_PIPE))
        if not self.enabled:
            self.mode = "no MPS"
            print(f"mps: MPS disabled: {self.pes_per_gpu} PEs per GPU without an MPS daemon", flush=True)
        elif self._answers(caller_pipe):
            self.mode = "caller's MPS"
            print(f"mps: an MPS control daemon listens at {caller_pipe}; not starting another", flush=True)
        else:
            if (caller_pipe / "control").exists():
                print(f"mps: no MPS control daemon answers at {caller_pipe} (a stale socket); starting one",
                      flush=True)
            try:
                self._start()
            except BaseException:
                self._stop(keep_dir=True)  # the error names the log in it
                raise
            self.mode = "MPS"
        return self

    def __exit__(self, *exc) -> None:
        self._stop()

    def _start(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="nvshmem-dsl-mps-"))
        if threading.current_thread() is threading.main_thread():
            self._sigterm = signal.signal(signal.SIGTERM, _raise_on_sigterm)
        pipe, log = self._dir / "pipe", self._dir / "log"
        pipe.mkdir()
        log.mkdir()
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(log),
                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(thread_percentage(self.pes_per_gpu))}
        where = f"MPS log directory: {log}"
        try:
            done = self._control(["-d"])
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MpsError(f"cannot start the MPS control daemon `{self.control} -d` (${CONTROL_VAR}): "
                           f"{exc}; {where}") from exc
        if done.returncode != 0:
            raise MpsError(f"`{self.control} -d` exited with status {done.returncode}: "
                           f"{done.stdout.strip()}; {where}")
        deadline = time.monotonic() + self.start_timeout
        while not (pipe / "control").exists():
            if time.monotonic() > deadline:
                raise MpsError(f"`{self.control} -d` made no control socket in {pipe} within "
                               f"{self.start_timeout:g} s; {where}")
            time.sleep(0.05)
        print(f"mps: started an MPS control daemon at {pipe} (log {log}), "
              f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={self.env['CUDA_MPS_ACTIVE_THREAD_PERCENTAGE']}", flush=True)

    def _answers(self, pipe: Path) -> bool:
        """Whether a daemon answers at ``pipe``: its control socket is there and `get_server_list`
        succeeds (a daemon told to quit can leave the socket behind; PEs started then would share the
        GPU without MPS, time-sliced: every wait on a peer a scheduler slice, milliseconds)."""
        if not (pipe / "control").exists():
            return False
        env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(pipe))
        try:
            done = subprocess.run([self.control], input="get_server_list\n", env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0

    def _control(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
        env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=self.env["CUDA_MPS_PIPE_DIRECTORY"],
                   CUDA_MPS_LOG_DIRECTORY=self.env["CUDA_MPS_LOG_DIRECTORY"])
        return subprocess.run([self.control, *args], input=stdin, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60)

    def clients(self) -> list[int]:
        """The PIDs of the processes attached to our daemon's MPS servers now (`get_server_list`,
        then `get_client_list` of each); [] when we run no daemon."""
        if self._dir is None or "CUDA_MPS_PIPE_DIRECTORY" not in self.env:
            return []
        servers = self._control([], stdin="get_server_list\n").stdout.split()
        pids: list[int] = []
        for server in filter(str.isdigit, servers):
            listing = self._control([], stdin=f"get_client_list {server}\n").stdout
            pids += [int(word) for word in listing.split() if word.isdigit()]
        return pids

    def _stop(self, keep_dir: bool = False) -> None:
        """`echo quit | nvidia-cuda-mps-control`; a second SIGTERM meanwhile is ignored."""
        if self._dir is None:
            return
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if "CUDA_MPS_PIPE_DIRECTORY" in self.env:
                try:
                    done = self._control([], stdin="quit\n")
                    problem = f"exit status {done.returncode}: {done.stdout.strip()}" if done.returncode else ""
                except (OSError, subprocess.TimeoutExpired) as exc:
                    problem = str(exc)
                if problem and not keep_dir:
                    keep_dir = True
                    print(f"mps: `echo quit | {self.control}` at {self.env['CUDA_MPS_PIPE_DIRECTORY']} failed "
                          f"({problem}); the daemon may still run", file=sys.stderr, flush=True)
            if self.keep_log is not None:
                shutil.copytree(self._dir / "log", self.keep_log, dirs_exist_ok=True)
            if not keep_dir:
                shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        finally:
            if self._sigterm is not None:
                signal.signal(signal.SIGTERM, self._sigterm)
                self._sigterm = None


def main(argv=None) -> int:
    """``python tests/gpu/mps.py --pes-per-gpu N -- command ...``: run one command under a daemon of its own."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--pes-per-gpu", type=int, required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given")
    with MpsDaemon(args.pes_per_gpu) as mps:
        return subprocess.run(command, env={**os.environ, **mps.env}).returncode


if __name__ == "__main__":
    sys.exit(main())
