"""How a PE leaves the job: the exit status it ends with, and leaving without the collective finalize.

NVSHMEM's finalize is collective: a PE that calls it waits for every other PE. A PE that ends early
(an uncaught exception, ``sys.exit(n)`` with n != 0) must not call it, since the others may never
get there; and it must not let the interpreter tear down either, with NVSHMEM still initialised:
Python's module teardown, mpi4py's ``MPI_Finalize`` (which waits for the other ranks under Open
MPI) and the C library's exit handlers (NVSHMEM's and CUDA's static destructors, with NVSHMEM's
proxy thread still running) then run against a library that was never finalized. That is where
a PE died by signal 11 after "skipping the collective NVSHMEM finalize" (issue 43).

So such a PE *leaves* (:func:`leave`): nvshmem_dsl forgets the runtime (every symmetric
allocation becomes invalid, nothing calls NVSHMEM again), says why, flushes Python's and C's output
and ``logging``, and ends with ``os._exit(status)`` (under MPI with ``MPI_Abort(MPI_COMM_WORLD,
status)``, so that mpirun ends the other ranks too: MPICH's waits for them otherwise), the status
Python would have given: 1 after an uncaught exception, ``n`` for ``sys.exit(n)`` (1 for
``sys.exit("text")``); an uncaught ``KeyboardInterrupt`` ends by SIGINT, as Python does. The
operating system and the CUDA driver (or the MPS server) release the GPU context, the symmetric
heap and the sockets. Handlers registered with :mod:`atexit` before ``init()`` do not run then.

How the status is known at exit (Python hands it to no atexit handler): an uncaught exception
reaches ``sys.excepthook`` (ours notes it); ``sys.exit`` is wrapped (:func:`install`) to note the
``SystemExit`` it raises in the main thread, and ``with nvshmem_dsl.init():`` notes an exception
leaving the block. At exit the latest noted exception counts if it ended the program: if none of
the frames it left (from where it was raised out to the main thread's first) has returned, i.e.
no frame caught it and went on (:func:`_ended_program`). ``raise SystemExit(n)`` outside a ``with``
block is not seen: it is taken for a normal end. ``os._exit(n)`` needs nothing: it ends the
process at once with ``n``.

A normal end (status 0) finalizes collectively at exit, as before. Every collective finalize
waits at most ``NVSHMEM_DSL_FINALIZE_TIMEOUT`` seconds (default 300; 0: no limit) for the other
PEs (:class:`FinalizeWatchdog`): a PE whose peers never arrive (one skipped a collective, or
hung) says so and leaves with status 124, as ``timeout(1)`` does, and its launcher ends the rest.

Under ``python -m nvshmem_dsl.run`` a PE tells the launcher when it has initialised and when it has
finalized (:func:`tell_launcher`, a pipe the launcher passes in ``NVSHMEM_DSL_LAUNCHER_FD``), so that
the launcher can tell a PE that ended without finalizing, even with status 0, from one that finished.
"""

from __future__ import annotations

import ctypes
import dis
import os
import signal
import stat
import sys
import threading
import time
from typing import Any, NoReturn

from . import _state
from ._launch_env import ENV_LAUNCHER_FD, seconds_setting

__all__ = [
    "ENV_FINALIZE_TIMEOUT",
    "ENV_LAUNCHER_FD",
    "STALLED_STATUS",
    "FinalizeWatchdog",
    "finalize_timeout",
    "install",
    "leave",
    "note_leaving",
    "note_uncaught",
    "pending_exit",
    "python_status",
    "tell_launcher",
]

ENV_FINALIZE_TIMEOUT = "NVSHMEM_DSL_FINALIZE_TIMEOUT"
DEFAULT_FINALIZE_TIMEOUT = 300.0
#: The status of a PE that gave up waiting for the others in finalize (timeout(1)'s).
STALLED_STATUS = 124

#: (exception, the frame it left) that may end the program: uncaught, raised by sys.exit, or
#: leaving a `with init()` block; the latest few
_noted: list[tuple[BaseException, Any]] = []
#: the instructions that end a frame normally (3.12 added RETURN_CONST)
_RETURNS = frozenset(dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap)
_sys_exit = sys.exit


# --------------------------------------------------------------------------- the status Python would give


def python_status(exc: BaseException) -> int | None:
    """The status Python ends with when ``exc`` ends the program; None: by SIGINT (an uncaught
    KeyboardInterrupt). As CPython's ``_Py_HandleSystemExit`` (which has already written the text of
    ``SystemExit("text")`` when atexit handlers run): ``SystemExit(None)`` 0, ``SystemExit(int)``
    that int, any other ``SystemExit`` 1; any other exception 1."""
    if isinstance(exc, KeyboardInterrupt):
        return None
    if not isinstance(exc, SystemExit):
        return 1
    code = exc.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def note_uncaught(exc: BaseException) -> None:
    """``exc`` reached sys.excepthook (in the main thread; its traceback starts at the first frame)."""
    tb = exc.__traceback__
    _note(exc, tb.tb_frame if tb is not None else None)


def note_leaving(exc: BaseException, frame) -> None:
    """``exc`` is leaving ``frame`` (the caller of sys.exit, or the frame of a `with init()` block)."""
    if threading.current_thread() is threading.main_thread():
        _note(exc, frame)


def _note(exc: BaseException, frame) -> None:
    del _noted[:-3]  # the latest few are enough; each holds its frames
    _noted.append((exc, frame))


def _ended_program(frame) -> bool:
    """Whether an exception leaving ``frame`` ended the program: no frame from ``frame`` out to the
    main thread's first has returned (one that caught the exception and went on would have). Read at
    exit, when every frame of the main thread has ended, by its instruction: a return or not. (Since
    Python 3.11 the exception's own traceback stops at the last frame that handled it, a ``with`` or a
    ``finally`` too, so it cannot tell.)"""
    while frame is not None:
        code = frame.f_code.co_code
        if 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in _RETURNS:
            return False
        frame = frame.f_back
    return True


def pending_exit() -> tuple[BaseException, int | None] | None:
    """(exception, status) of the exception ending the program, or None for a normal end."""
    if _noted:
        exc, frame = _noted[-1]
        if _ended_program(frame):
            return exc, python_status(exc)
    return None


def _noting_exit(status=None, /) -> NoReturn:
    """``sys.exit`` while nvshmem_dsl is initialised: notes the SystemExit for :func:`pending_exit`."""
    try:
        _sys_exit(status)
    except SystemExit as exc:
        if _state.STATE.initialized:
            note_leaving(exc, sys._getframe(1))
        raise


def install() -> None:
    """Wrap ``sys.exit`` (once; it behaves as before)."""
    if sys.exit is _sys_exit:
        sys.exit = _noting_exit


# --------------------------------------------------------------------------- leaving


def _flush_all() -> None:
    """Python's streams, logging's handlers and C's stdio buffers (NVSHMEM writes there)."""
    if "logging" in sys.modules:
        try:
            sys.modules["logging"].shutdown()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001
            pass
    try:
        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001
        pass


def _forget_runtime(reason: str) -> None:
    """Non-collective teardown: nvshmem_dsl no longer calls NVSHMEM; every allocation is invalid."""
    # no _state.lock: the finalize watchdog calls this while the main thread holds it inside NVSHMEM
    from .symmetric import REGISTRY

    s = _state.STATE
    REGISTRY.clear(reason)
    s.initialized = False
    s.extra["left"] = reason


def _abort_mpi_job(status: int) -> None:
    """Under MPI (mpi4py initialised MPI and has not finalized it): ``MPI_Abort(MPI_COMM_WORLD,
    status)``, which has the MPI launcher end every rank of the job with that status and name this one
    (mpirun would otherwise wait for the others: MPICH's does, for a rank that exits without
    MPI_Finalize). Returns only where there is no MPI to abort."""
    mpi_module = sys.modules.get("mpi4py.MPI")
    if mpi_module is None:
        return
    try:
        if not mpi_module.Is_initialized() or mpi_module.Is_finalized():
            return
        time.sleep(0.5)  # for mpirun to forward what this rank wrote: the abort ends its forwarding too
        if signal.getsignal(signal.SIGALRM) == signal.SIG_DFL:
            signal.alarm(10)  # if the abort itself hangs, SIGALRM ends the process (no thread: at exit
            # Python 3.12 refuses to start one)
        mpi_module.COMM_WORLD.Abort(status & 0xFF)
    except Exception:  # noqa: BLE001 - os._exit follows
        pass


def leave(status: int | None, message: str) -> NoReturn:
    """Write ``message``, tear down without NVSHMEM's collective finalize, and end the process with
    ``status`` (None: by SIGINT) at once: no atexit handler, module teardown, MPI_Finalize or C
    library destructor runs after this (see the module doc)."""
    _forget_runtime(message.strip().splitlines()[0] if message.strip() else "this PE left the job")
    try:
        if message and sys.stderr is not None:
            sys.stderr.write(message)
    except Exception:  # noqa: BLE001
        pass
    _flush_all()
    _abort_mpi_job(128 + signal.SIGINT if status is None else status)
    if status is None:  # an uncaught KeyboardInterrupt: Python ends by SIGINT
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except Exception:  # noqa: BLE001
            pass
        status = 128 + signal.SIGINT
    os._exit(status & 0xFF)


# --------------------------------------------------------------------------- bounded finalize


def finalize_timeout(env=None) -> float | None:
    """Seconds a collective finalize waits for the other PEs: ``$NVSHMEM_DSL_FINALIZE_TIMEOUT`` or
    300; None (no limit) for 0. A malformed value raises ValueError naming the variable."""
    value = seconds_setting(os.environ if env is None else env, ENV_FINALIZE_TIMEOUT, DEFAULT_FINALIZE_TIMEOUT,
                            zero=True)
    return value or None


class FinalizeWatchdog:
    """``with FinalizeWatchdog(pe, n_pes, timeout):`` around a collective finalize: if the block has not
    ended after ``timeout`` seconds (None: no limit), a thread writes why and :func:`leave` s with
    :data:`STALLED_STATUS` (the main thread stays blocked in NVSHMEM until the process ends).

    The thread is made once, by :func:`start_watchdog` at init, and waits for the blocks: at exit,
    where the finalize of a program that did not call it runs, Python 3.12 refuses to start threads."""

    _cond = threading.Condition()
    _armed: tuple[float, str] | None = None  #: (deadline on time.monotonic(), the message)
    _thread: threading.Thread | None = None

    def __init__(self, my_pe: int, n_pes: int, timeout: float | None) -> None:
        self.my_pe, self.n_pes, self.timeout = my_pe, n_pes, timeout

    @classmethod
    def start(cls) -> None:
        """Make the watching thread, if not yet made (quietly none where Python refuses one)."""
        with cls._cond:
            if cls._thread is None:
                thread = threading.Thread(target=cls._watch, name="nvshmem_dsl finalize watchdog", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # at interpreter shutdown
                    return
                cls._thread = thread

    @classmethod
    def _watch(cls) -> None:
        with cls._cond:
            while True:
                if cls._armed is None:
                    cls._cond.wait()
                    continue
                deadline, message = cls._armed
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    cls._cond.wait(remaining)
                    continue
                break
        leave(STALLED_STATUS, message)

    def __enter__(self) -> "FinalizeWatchdog":
        if self.timeout is not None and self.n_pes > 1:
            self.start()
            message = (
                f"nvshmem_dsl: PE {self.my_pe} of {self.n_pes}: the collective NVSHMEM finalize did not complete "
                f"within {self.timeout:g} s ({ENV_FINALIZE_TIMEOUT}): another PE never reached it (it is still "
                f"in a collective or a wait that this PE skipped, or hung, or left). Ending PE {self.my_pe} with "
                f"status {STALLED_STATUS} without finalizing.\n")
            with self._cond:
                type(self)._armed = (time.monotonic() + self.timeout, message)
                self._cond.notify_all()
        return self

    def __exit__(self, *exc) -> None:
        with self._cond:
            type(self)._armed = None
            self._cond.notify_all()


# --------------------------------------------------------------------------- telling the launcher

_launcher_fd: int | None = None
_launcher_fd_read = False


def _launcher_channel() -> int | None:
    """Our own copy of the pipe ``python -m nvshmem_dsl.run`` passed (None elsewhere). Taken once:
    the inherited descriptor is checked to be a pipe, duplicated (not inherited by programs this
    PE starts) and closed, so that a later file that reuses its number is never written to."""
    global _launcher_fd, _launcher_fd_read
    if not _launcher_fd_read:
        _launcher_fd_read = True
        text = os.environ.get(ENV_LAUNCHER_FD, "")
        if text.isdigit():
            fd = int(text)
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    _launcher_fd = os.dup(fd)
                    os.close(fd)
            except OSError:
                _launcher_fd = None
    return _launcher_fd


def tell_launcher(word: str) -> None:
    """Write ``word`` ("initialized", "finalized") to our launcher, when there is one; never raises."""
    fd = _launcher_channel()
    if fd is not None:
        try:
            os.write(fd, word.encode() + b"\n")
        except OSError:
            pass
