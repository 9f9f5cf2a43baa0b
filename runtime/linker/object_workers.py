"""Worker processes for the LLVM part of building objects (:func:`.object_llvm.emit`).

llvmlite takes one process-wide lock for every call into LLVM, so objects built in threads of one
process parse, optimise and emit one after another: on a 16-CPU GPU host a small helper's LLVM
step took 1.6-2.9 s beside a collective's, 0.04-0.2 s alone (tests/gpu/records/2026-11-24/
h200-loop-split.txt).  Here each object's LLVM step runs in a process of its own: up to
:func:`count` persistent workers a process, started when the first object is built (each
``python -S`` loading this folder as a package of its own, as the store's build workers do:
:data:`.store_build._WORKER_MAIN`), ended :data:`IDLE_SECONDS` after the last build or when the
process exits.  ptxas runs in the calling thread as before.

``$NVSHMEM_DSL_OBJECT_WORKERS``: how many (default: the CPUs, at most :data:`DEFAULT_MAX`); ``0``
builds in the calling process.  Where workers cannot start or end before their first answer, the
process builds its objects itself (a warning says so once); a worker that dies building after it
built others raises :class:`WorkerDied` with its last output.
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import threading
import warnings

from . import object_llvm, store_build

ENV = "NVSHMEM_DSL_OBJECT_WORKERS"
#: Most workers a process starts by default (a collective's object and its helpers' build at once).
DEFAULT_MAX = 4
#: Seconds a process keeps its workers once none is building (each held 106-153 MiB after collectives'
#: objects, bench/results/llvm-lock-cpu-2026-11-24.txt): the objects of one kernel, and of the next few,
#: share them; a long job does not keep them.
IDLE_SECONDS = 30.0

_HEADER = struct.Struct("<Q")  # a message: its length, then a pickle

#: The warning a process gives when it builds its objects itself, workers not running here.
FALLBACK_WARNING = "nvshmem-dsl: NVSHMEM's objects are built in this process, without workers"


def count() -> int:
    """How many workers a process may start: ``$NVSHMEM_DSL_OBJECT_WORKERS``, else its CPUs up to
    :data:`DEFAULT_MAX`, none on one CPU."""
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"{ENV}={raw!r}: give a number of processes (0: none)") from None
        if n < 0:
            raise ValueError(f"{ENV}={raw!r}: give a number of processes (0: none)")
        return n
    cpus = store_build._cpus()
    return 0 if cpus < 2 else min(DEFAULT_MAX, cpus)


def emit(**request) -> str:
    """:func:`.object_llvm.emit` with ``request``'s arguments, in a worker where there may be one."""
    if count() == 0:
        return object_llvm.emit(**request)
    worker = _pool.take()
    if worker is None:  # none can start here
        return object_llvm.emit(**request)
    try:
        return worker.call(request)
    except WorkerDied as exc:
        if worker.served:  # it built objects before: this object killed it; not tried here
            raise
        _pool.fail(exc)  # workers do not start here (an interpreter that cannot run them)
        return object_llvm.emit(**request)
    finally:
        _pool.give(worker)


class WorkerDied(RuntimeError):
    """A worker ended while building."""


class _Worker:
    def __init__(self):
        self.log = tempfile.TemporaryFile()
        self.proc = store_build._spawn(["objects"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.served = 0  # requests answered

    def call(self, request: dict) -> str:
        try:
            _send(self.proc.stdin, request)
            ok, value = _receive(self.proc.stdout)
            self.served += 1
        except (OSError, EOFError, pickle.UnpicklingError, struct.error):
            self.close()
            self.log.seek(0)
            tail = self.log.read()[-3000:].decode(errors="replace")
            raise WorkerDied(f"an NVSHMEM object worker (pid {self.proc.pid}) ended (exit status "
                             f"{self.proc.returncode}) building {', '.join(request.get('names', ()))}:\n{tail}"
                             ) from None
        if not ok:
            kind, message = value
            raise (ValueError if kind == "ValueError" else RuntimeError)(message)
        return value

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Pool:
    """Idle workers and how many exist, per process (a fork starts its own)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._idle: list = []
        self._all: list = []
        self._pid = os.getpid()
        self._failed = False
        self._reaper = None  # a timer ending the idle workers

    def take(self):
        """An idle worker, a new one while fewer than :func:`count` exist, else the next one given
        back; None when workers cannot start here."""
        with self._cond:
            if self._pid != os.getpid():  # a forked child: the parent's workers are not ours
                self.__init__()
            while True:
                if self._failed:
                    return None
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        return worker
                    self._all.remove(worker)
                if len(self._all) < count():
                    try:
                        worker = _Worker()
                    except OSError:
                        self._failed = True
                        return None
                    self._all.append(worker)
                    return worker
                self._cond.wait()

    def fail(self, exc) -> None:
        """Workers cannot run here (the first one ended before answering): build in the calling
        process from now on, and say so once."""
        with self._cond:
            if self._failed:
                return
            self._failed = True
            self._cond.notify_all()
        warnings.warn(f"{FALLBACK_WARNING}: {exc}", RuntimeWarning, stacklevel=4)

    def give(self, worker) -> None:
        with self._cond:
            if worker.alive():
                self._idle.append(worker)
            elif worker in self._all:
                self._all.remove(worker)
            self._cond.notify()
            if len(self._idle) == len(self._all):  # none building: end them unless one is taken soon
                if self._reaper is not None:
                    self._reaper.cancel()
                self._reaper = threading.Timer(IDLE_SECONDS, self._reap)
                self._reaper.daemon = True
                self._reaper.start()

    def _reap(self) -> None:
        """End the workers, all idle since the timer started; none if one is building now (the
        :meth:`give` after its build starts another timer)."""
        with self._cond:
            if len(self._idle) != len(self._all) or self._pid != os.getpid():
                return
            workers, self._idle, self._all = self._idle, [], []
        for worker in workers:
            worker.close()

    def close(self) -> None:
        """End every worker (at exit)."""
        with self._cond:
            workers, self._all, self._idle = self._all, [], []
        if self._pid == os.getpid():
            for worker in workers:
                worker.close()


_pool = _Pool()
atexit.register(_pool.close)


def _send(fh, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(_HEADER.pack(len(data)) + data)
    fh.flush()


def _receive(fh):
    head = fh.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError
    size, = _HEADER.unpack(head)
    data = fh.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def _serve() -> None:
    """A worker's loop: a request (:func:`.object_llvm.emit`'s arguments) in, ``(True, PTX)`` or
    ``(False, (exception type's name, message))`` out, until its input ends.  What LLVM prints goes to the worker's log,
    not into the answers."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    while True:
        try:
            request = _receive(requests)
        except EOFError:
            return
        try:
            answer = (True, object_llvm.emit(**request))
        except Exception as exc:  # noqa: BLE001 - told to the process that asked
            answer = (False, (type(exc).__name__, str(exc)))
        _send(answers, answer)


def _worker_main(argv) -> None:
    """A worker process's main (``objects``: :data:`.store_build._WORKER_MAIN`): :func:`_serve`."""
    _serve()
