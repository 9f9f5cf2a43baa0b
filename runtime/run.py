"""Start an NVSHMEM job on this machine: one process per GPU.

    python -m nvshmem_dsl.run -n 2 script.py args...
    python -m nvshmem_dsl.run --gpus 0,1 -m package.module args...

Each rank gets ``NVSHMEM_DSL_RANK``, ``NVSHMEM_DSL_NRANKS``, ``NVSHMEM_DSL_LOCAL_RANK``,
``NVSHMEM_DSL_STORE_HOST``/``NVSHMEM_DSL_STORE_PORT`` (a free port on 127.0.0.1 where
rank 0 serves the unique id), a fresh random ``NVSHMEM_DSL_SECRET`` and
``NVSHMEM_DSL_BOOTSTRAP=launcher``.  With ``--gpus`` rank i sees only GPU
``gpus[i]`` (``CUDA_VISIBLE_DEVICES``); without it ``LOCAL_RANK=i`` and init picks
device ``i % device_count``.  Variables of an outer MPI or torchrun launch are
removed from the ranks' environment.

With ``--as-nvshmem4py`` every rank runs the program through :mod:`nvshmem_dsl.core.alias`, so
that ``import nvshmem.core`` (NVSHMEM4Py) imports ``nvshmem_dsl.core``; it refuses when a real
``nvshmem`` package is importable, unless given as ``--as-nvshmem4py=force``.

Output is forwarded line by line with a ``[rank i] `` prefix (rank i is PE i).  When a PE fails,
the launcher says which (``PE 1 exited with status 3``) and the others get SIGTERM, then SIGKILL
after ``--grace`` seconds: every PE has ended within ``--grace`` seconds (default 5) and a polling
interval (0.02 s) of the first failure. The exit status is the first failing PE's (128 + N for a PE
killed by signal N). A PE fails when it exits with a status other than 0, is killed, or exits with
status 0 after ``nvshmem_dsl.init()`` without finalizing (its peers would wait for it forever; the
job's status is then 1): each PE tells the launcher when it has initialised and finalized, on a pipe
whose descriptor it gets in ``NVSHMEM_DSL_LAUNCHER_FD``. Ctrl-C is passed on to the PEs the same way
(a second Ctrl-C kills them at once).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import BinaryIO

from .host._launch_env import (
    ENV_LAUNCHER_FD, ENV_LOCAL_RANK, ENV_MODE, ENV_NRANKS, ENV_RANK, ENV_SECRET, ENV_STORE_HOST, ENV_STORE_PORT,
    ENV_TIMEOUT, MPI_ENV_VARS, TORCHRUN_ENV_VARS,
)

__all__ = ["main", "launch", "rank_environment", "free_port", "RANK_VARS"]

DEFAULT_GRACE = 5.0
POLL_S = 0.02  #: how often the launcher looks at its PEs
_STORE_HOST = "127.0.0.1"
# Left over from an outer launch, these would make a rank believe it is part of that job.
_OUTER_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "MV2_", "MPI_LOCAL", "HYDRA_", "TORCHELASTIC_")
#: What each rank gets from this launcher (besides CUDA_VISIBLE_DEVICES or LOCAL_RANK): a process
#: with these in its environment takes itself for one of our ranks.
RANK_VARS = (ENV_MODE, ENV_RANK, ENV_NRANKS, ENV_LOCAL_RANK, ENV_STORE_HOST, ENV_STORE_PORT, ENV_SECRET, ENV_TIMEOUT,
             ENV_LAUNCHER_FD)
_OUTER_NAMES = set(MPI_ENV_VARS) | set(TORCHRUN_ENV_VARS) | {"LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK"}


def free_port(host: str = _STORE_HOST) -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def rank_environment(
    base: Mapping[str, str],
    *,
    rank: int,
    nranks: int,
    secret: str,
    port: int,
    gpus: Sequence[str] | None = None,
    timeout: float | None = None,
) -> dict[str, str]:
    """The environment of rank ``rank``, built from ``base``."""
    env = {k: v for k, v in base.items() if k not in _OUTER_NAMES and not k.startswith(_OUTER_PREFIXES)}
    env.update(
        {
            ENV_MODE: "launcher",
            ENV_RANK: str(rank),
            ENV_NRANKS: str(nranks),
            ENV_LOCAL_RANK: str(rank),
            ENV_STORE_HOST: _STORE_HOST,
            ENV_STORE_PORT: str(port),
            ENV_SECRET: secret,
            "PYTHONUNBUFFERED": "1",
        }
    )
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus[rank]
    else:
        env["LOCAL_RANK"] = str(rank)
    if timeout is not None:
        env[ENV_TIMEOUT] = repr(float(timeout))
    return env


# --------------------------------------------------------------------------- output


class _Forwarder(threading.Thread):
    """Copies one pipe to ``sink`` line by line, each line prefixed."""

    def __init__(self, pipe: BinaryIO, sink: BinaryIO, prefix: bytes, lock: threading.Lock) -> None:
        super().__init__(daemon=True)
        self.pipe, self.sink, self.prefix, self.lock = pipe, sink, prefix, lock

    def run(self) -> None:
        try:
            for line in iter(self.pipe.readline, b""):
                if not line.endswith(b"\n"):
                    line += b"\n"
                with self.lock:
                    try:
                        self.sink.write(self.prefix + line)
                        self.sink.flush()
                    except (OSError, ValueError):  # our own stdout went away
                        pass
        finally:
            self.pipe.close()


def _binary(stream) -> BinaryIO:
    return getattr(stream, "buffer", stream)


# --------------------------------------------------------------------------- processes


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)  # each rank leads its own process group
    except (ProcessLookupError, PermissionError):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code


class _Pe:
    """One PE's process, and what it said on its pipe to the launcher (``initialized``, ``finalized``)."""

    def __init__(self, rank: int, proc: subprocess.Popen, pipe: int) -> None:
        self.rank, self.proc, self._pipe = rank, proc, pipe
        self.state = ""  #: the last word: "", "initialized" or "finalized"
        self._partial = b""

    def read(self) -> None:
        """Take what the PE wrote (never blocks; all of it once the process has ended)."""
        while self._pipe is not None:
            try:
                chunk = os.read(self._pipe, 4096)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.close()
                return
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for line in lines:
                if line.strip() in (b"initialized", b"finalized"):
                    self.state = line.strip().decode()

    def close(self) -> None:
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None

    def failure(self) -> tuple[int, str] | None:
        """(job status, what happened) when this PE has ended as a failure, else None."""
        code = self.proc.returncode
        if code is None:
            return None
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return _exit_status(code), f"PE {self.rank} was killed by {name} (status {_exit_status(code)})"
        if code > 0:
            return code, f"PE {self.rank} exited with status {code}"
        self.read()
        if self.state == "initialized":
            return 1, (f"PE {self.rank} exited with status 0 without finalizing NVSHMEM (the other PEs would wait "
                       "for it forever)")
        return None


def _pe_names(pes: Sequence[_Pe]) -> str:
    return ("PE " if len(pes) == 1 else "PEs ") + ", ".join(str(p.rank) for p in pes)


def launch(
    command: Sequence[str],
    nranks: int,
    *,
    gpus: Sequence[str] | None = None,
    timeout: float | None = None,
    grace: float = DEFAULT_GRACE,
    env: Mapping[str, str] | None = None,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
) -> int:
    """Run ``command`` (argv, e.g. ``[sys.executable, "x.py"]``) as ``nranks`` ranks.

    Returns 0 when every rank succeeded, otherwise the first failing rank's status.
    """
    if nranks < 1:
        raise ValueError(f"need at least one rank, got {nranks}")
    if gpus is not None and len(gpus) < nranks:
        raise ValueError(f"{nranks} ranks need {nranks} GPUs, --gpus lists {len(gpus)}")
    base = os.environ if env is None else env
    secret, port = secrets.token_hex(32), free_port()
    out, err = _binary(stdout or sys.stdout), _binary(stderr or sys.stderr)
    lock = threading.Lock()

    pes: list[_Pe] = []
    forwarders: list[_Forwarder] = []
    interrupted: list[int] = []

    def on_signal(signum, frame):  # noqa: ARG001
        interrupted.append(signum)

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main_thread:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        for rank in range(nranks):
            renv = rank_environment(base, rank=rank, nranks=nranks, secret=secret, port=port, gpus=gpus, timeout=timeout)
            pipe, pipe_w = os.pipe()
            renv[ENV_LAUNCHER_FD] = str(pipe_w)
            try:
                proc = subprocess.Popen(
                    list(command),
                    env=renv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                    pass_fds=(pipe_w,),
                )
            except BaseException:
                os.close(pipe)
                raise
            finally:
                os.close(pipe_w)
            os.set_blocking(pipe, False)
            pes.append(_Pe(rank, proc, pipe))
            prefix = f"[rank {rank}] ".encode()
            for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
                forwarder = _Forwarder(stream, sink, prefix, lock)
                forwarder.start()
                forwarders.append(forwarder)
        status = _supervise(pes, interrupted, grace, err, lock)
    finally:
        for pe in pes:  # never leave a rank behind, whatever happened above
            _signal_group(pe.proc, signal.SIGKILL)
            pe.proc.wait()
            pe.close()
        for forwarder in forwarders:
            forwarder.join(timeout=2.0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status


def _supervise(pes: list[_Pe], interrupted: list[int], grace: float, err: BinaryIO, lock: threading.Lock) -> int:
    """Wait for the PEs; on the first failure or signal stop the others."""
    first_failure: int | None = None
    stop_signal: int | None = None
    failed_at = 0.0
    while True:
        for pe in pes:
            pe.read()
        running = [pe for pe in pes if pe.proc.poll() is None]
        if first_failure is None:
            for pe in pes:
                failure = pe.failure()
                if failure is not None:
                    first_failure, what = failure
                    failed_at = time.monotonic()
                    others = [p for p in running if p is not pe]
                    if others:
                        what += (f"; stopping {_pe_names(others)} (SIGTERM, then SIGKILL after {grace:g} s)")
                    _note(err, lock, what)
                    stop_signal = signal.SIGTERM
                    break
        if interrupted and stop_signal is None:
            stop_signal = interrupted[0]
        if not running:
            break
        if stop_signal is not None:
            killed = _stop(running, stop_signal, grace, interrupted)
            if killed:
                _note(err, lock, f"{_pe_names(killed)} did not end within {grace:g} s of SIGTERM: SIGKILL")
            break
        time.sleep(POLL_S)
    if first_failure is not None:
        for pe in pes:
            pe.proc.wait()
        _note(err, lock, f"every PE has ended, {time.monotonic() - failed_at:.1f} s after the first failure; "
                         f"exit status {first_failure}")
        return first_failure
    if interrupted:
        return 128 + int(interrupted[0])
    for pe in pes:
        if pe.proc.returncode:
            return _exit_status(pe.proc.returncode)
    return 0


def _stop(running: list[_Pe], sig: int, grace: float, interrupted: list[int]) -> list[_Pe]:
    """``sig`` to every running PE, then SIGKILL after ``grace`` s (or a second signal); the PEs that
    needed the SIGKILL."""
    for pe in running:
        _signal_group(pe.proc, sig)
    seen = len(interrupted)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and len(interrupted) <= seen:
        if all(pe.proc.poll() is not None for pe in running):
            return []
        time.sleep(POLL_S)
    stubborn = [pe for pe in running if pe.proc.poll() is None]
    for pe in stubborn:
        _signal_group(pe.proc, signal.SIGKILL)
    return stubborn


def _note(err: BinaryIO, lock: threading.Lock, text: str) -> None:
    with lock:
        try:
            err.write(f"[nvshmem_dsl.run] {text}\n".encode())
            err.flush()
        except (OSError, ValueError):
            pass


# --------------------------------------------------------------------------- command line

_USAGE = ("python -m nvshmem_dsl.run [-n N] [--gpus 0,1] [--timeout S] [--grace S] [--as-nvshmem4py[=force]] "
          "(script.py | -m module) [args...]")
_VALUE_OPTIONS = {"-n", "--nproc", "--gpus", "--timeout", "--grace"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nvshmem_dsl.run", usage=_USAGE, description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--nproc", type=int, help="number of ranks (default: the number of --gpus)")
    parser.add_argument("--gpus", help="comma-separated GPU ids; rank i gets CUDA_VISIBLE_DEVICES=<i-th id>")
    parser.add_argument("--timeout", type=float, help=f"seconds init waits for the other ranks ({ENV_TIMEOUT})")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--as-nvshmem4py", nargs="?", const="yes", choices=("yes", "force"), default=None,
                        help="run the program with `import nvshmem.core` resolving to nvshmem_dsl.core (refused "
                             "when NVSHMEM4Py is installed, unless =force)")
    return parser


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """(launcher options, the ranks' python arguments) — these start at the script or -m."""
    argv = list(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv[:i], argv[i + 1 :]
        if arg == "-m":
            return argv[:i], argv[i:]
        if arg.startswith("-m") and not arg.startswith("--"):
            return argv[:i], ["-m", arg[2:]] + argv[i + 1 :]
        if not arg.startswith("-"):
            return argv[:i], argv[i:]
        i += 2 if arg in _VALUE_OPTIONS else 1
    return argv, None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options, target = _split_argv(argv)
    parser = _parser()
    args = parser.parse_args(options)
    if not target or target == ["-m"]:
        parser.error("give a script to run, or -m module")
    gpus = None
    if args.gpus is not None:
        gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
        if not gpus:
            parser.error("--gpus lists no GPU")
    nranks = args.nproc if args.nproc is not None else (len(gpus) if gpus else None)
    if nranks is None:
        parser.error("say how many ranks: -n N (or --gpus)")
    if nranks < 1:
        parser.error("-n must be at least 1")
    if gpus is not None and len(gpus) < nranks:
        parser.error(f"-n {nranks} needs {nranks} GPUs but --gpus lists {len(gpus)}")
    if args.timeout is not None and not args.timeout > 0:
        parser.error("--timeout must be positive")
    command = [sys.executable, *target]
    if args.as_nvshmem4py is not None:
        from .core import alias

        force = args.as_nvshmem4py == "force"
        found = alias.real_nvshmem()
        if found is not None and not force:
            parser.error(f"--as-nvshmem4py: a real 'nvshmem' package (NVSHMEM4Py) is importable from {found}; "
                         "use --as-nvshmem4py=force to shadow it anyway")
        command = [sys.executable, "-m", "nvshmem_dsl.core.alias", *(["--force"] if force else []), *target]
    return launch(command, nranks, gpus=gpus, timeout=args.timeout, grace=args.grace)


if __name__ == "__main__":
    sys.exit(main())
