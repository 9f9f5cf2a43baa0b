"""Building the piece store, in worker processes.

Parsing the bitcode (4-7 s) and printing it as text (5-13 s) are single calls into LLVM; so the
store is built by several processes at once, each printing a part (:func:`.pieces._store_part`),
one per CPU up to :data:`_MAX_JOBS`, fewer when memory is short.  A process that finds no store
starts the build in a process of its own (:func:`_start_builder`; it holds the store's lock)
and waits for it when it exits (:func:`_wait_for_builders`).
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import pieces
from .pieces import _merge, _part
from .store_file import _open_store, _write_store, release, stats, try_lock

# Worker processes run `python -S -c _WORKER_MAIN ...` with the parent's sys.path: this folder
# imported as a package of its own (``_nvshmem_dsl_linker``), so that neither the nvshmem_dsl
# package (an editable install's import hook is not on sys.path) nor the user's __main__ is
# imported.  The command (the first argument after the folder) is this module's
# (:func:`_worker_main`), but ``objects``: an object worker, :mod:`.object_workers`'s.
_WORKER_MAIN = (
    "import importlib, json, sys, types\n"
    "sys.path[:] = json.loads(sys.argv[1])\n"
    "pkg = types.ModuleType('_nvshmem_dsl_linker')\n"
    "pkg.__path__ = [sys.argv[2]]\n"
    "sys.modules[pkg.__name__] = pkg\n"
    "module = 'object_workers' if sys.argv[3] == 'objects' else 'store_build'\n"
    "importlib.import_module('_nvshmem_dsl_linker.' + module)._worker_main(sys.argv[3:])\n"
)

#: Most part processes a build starts, and the smallest bitcode worth them.
_MAX_JOBS = 8
_PARALLEL_MIN_BYTES = 4 << 20
#: Memory a part needs, per byte of bitcode (~1.6 GB for the 54 MB sm_90 file).
_BYTES_PER_BC_BYTE = 40
#: Niceness added to a build that runs beside the compiles of the process that started it.
BACKGROUND_NICENESS = 10


class _WorkerFailed(RuntimeError):
    pass

def _worker_main(argv) -> None:
    what, *args = argv
    if what == "part":  # bc_path part parts threads out builder's pid
        bc_path, part, parts, threads, out, builder = args
        _end_with(int(builder))
        data = pieces._store_part(Path(bc_path), int(part), int(parts), int(threads))
        with open(out + ".tmp", "wb") as fh:
            pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(out + ".tmp", out)
    elif what == "build":  # bc_path arch out key; holds the store's lock (inherited)
        bc_path, arch, out, key = args
        _lower_priority()
        _build(Path(bc_path), int(arch), Path(out), key, side=True)
    elif what == "helpers":  # bc_path: the closure of its functions that are not API functions, to stdout
        answer = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)  # only the pickle on the pipe
        pickle.dump(pieces._helpers_closure(Path(args[0])), answer, protocol=pickle.HIGHEST_PROTOCOL)
        answer.close()
    else:
        raise SystemExit(f"unknown worker command {what!r}")


def _end_with(parent: int) -> None:
    """Have this process killed when ``parent``, which started it, ends (Linux): a store build
    killed midway leaves none of its part processes running on (each holds 1-2 GB for up to a
    minute, beside the next build's)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:  # ended before that
        os._exit(1)


def _lower_priority() -> None:
    """A build beside the kernels being compiled is background work: it (and the part processes
    it starts, which inherit its niceness) yields the CPUs to their compiles (the closures, ptxas
    on the objects of a cold first kernel)."""
    try:
        os.nice(BACKGROUND_NICENESS)
    except OSError:
        pass


def _spawn(args, **kw) -> subprocess.Popen:
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.Popen(
        [sys.executable, "-S", "-c", _WORKER_MAIN, json.dumps(sys.path),
         os.path.dirname(os.path.abspath(__file__)), *map(str, args)], **kw,
    )


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _mem_available():
    """Bytes of memory this process may still use, or None if unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    try:  # cgroup v2 limit
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            free = int(limit) - used
            avail = free if avail is None else min(avail, free)
    except (OSError, ValueError):
        pass
    return avail


def _per_process_bytes(bc_path: Path) -> int:
    return _BYTES_PER_BC_BYTE * bc_path.stat().st_size


def _can_spawn(bc_path: Path) -> bool:
    return (bool(sys.executable) and os.path.isfile(__file__)
            and bc_path.stat().st_size >= _PARALLEL_MIN_BYTES)


def _env_jobs():
    try:
        return max(1, int(os.environ.get("NVSHMEM_DSL_BUILD_JOBS", "").strip()))
    except ValueError:
        return None


def _build_jobs(bc_path: Path, side: bool = False) -> int:
    """How many processes build the store for ``bc_path``:
    ``$NVSHMEM_DSL_BUILD_JOBS``, else one per CPU (at most :data:`_MAX_JOBS`;
    one CPU left for closures when ``side``) as far as the available memory
    allows; 1 (the building process itself) for small files."""
    env = _env_jobs()
    if env is not None:
        return env
    if not _can_spawn(bc_path):
        return 1
    jobs = min(_cpus() - side, _MAX_JOBS)
    avail = _mem_available()
    if avail is not None:
        jobs = min(jobs, avail // _per_process_bytes(bc_path) - side)
    return max(1, int(jobs))


def _side_builds(bc_path: Path) -> bool:
    """Whether a missing store is built by a process of its own while the
    kernels that need it now link closures extracted meanwhile: with
    ``NVSHMEM_DSL_BUILD_JOBS`` > 1, or, by default, for files worth it with
    the memory for two processes (``NVSHMEM_DSL_BUILD_JOBS=1``: never;
    everything in the calling process).  A process bound to one CPU (a rank
    of ``mpirun``, which binds each to a core) builds beside too: the builder
    runs niced, so the kernel's closure goes first, where building here would
    hold the first kernel for the whole build."""
    try:
        import fcntl  # noqa: F401  (the builder holds the store's lock)
    except ImportError:  # pragma: no cover - not POSIX
        return False
    env = _env_jobs()
    if env is not None:
        return env > 1 and bool(sys.executable) and os.path.isfile(__file__)
    if not _can_spawn(bc_path):
        return False
    avail = _mem_available()
    return avail is None or avail >= 2 * _per_process_bytes(bc_path)


def _run_parts(bc_path: Path, tmpdir: Path, parts: int, threads: int) -> list:
    """The ``parts`` parts of the store for ``bc_path``, built by as many
    processes at once (working in ``tmpdir``)."""
    procs = []
    try:
        for i in range(parts):
            with open(tmpdir / f"part{i}.log", "wb") as log:
                procs.append(_spawn(
                    ["part", bc_path, i, parts, threads, tmpdir / f"part{i}", os.getpid()],
                    stdout=log, stderr=subprocess.STDOUT,
                ))
        results = []
        for i, p in enumerate(procs):
            rc = p.wait()
            if rc != 0:
                log = (tmpdir / f"part{i}.log").read_bytes()[-1500:].decode(errors="replace")
                raise _WorkerFailed(f"part {i} exited with status {rc}: {log.strip()}")
            with open(tmpdir / f"part{i}", "rb") as fh:
                results.append(pickle.load(fh))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _remove_leftovers(out: Path) -> None:
    """Temporary files of builds of ``out`` that died (call with the lock held),
    and closure folders older than an hour."""
    for p in out.parent.glob(glob.escape(out.name) + ".build-*"):
        shutil.rmtree(p, ignore_errors=True)
    for p in out.parent.glob(glob.escape(out.name) + "*.tmp"):
        try:
            p.unlink()
        except OSError:
            pass
    for p in out.parent.glob(glob.escape(out.name) + ".closure-*"):
        try:
            if time.time() - p.stat().st_mtime > 3600:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def _build(bc_path: Path, arch: int, out: Path, key: str, side: bool = False) -> None:
    """Build the store ``out`` (the caller holds its lock); ``side``: in a
    process of its own, with closures being extracted beside it."""
    t0 = time.perf_counter()
    _remove_leftovers(out)
    jobs = _build_jobs(bc_path, side)
    how = f" with {jobs} processes" if jobs > 1 else ""
    print(
        f"nvshmem-dsl: preparing NVSHMEM bitcode for sm_{arch} (once){how} ...",
        file=sys.stderr,
        flush=True,
    )
    stats["bitcode_parses"] += 1
    parts = None
    if jobs > 1:
        tmpdir = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".build-"))
        threads = max(1, _cpus() // jobs)
        try:
            parts = _run_parts(bc_path, tmpdir, jobs, threads)
        except (OSError, _WorkerFailed, pickle.UnpicklingError, EOFError) as e:
            print(
                f"nvshmem-dsl: preparing in {jobs} processes failed ({e}); "
                "preparing in this process ...",
                file=sys.stderr,
                flush=True,
            )
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
    if parts is None:
        parts = [_part(bc_path, 0, 1, threads=_cpus())]
    index, blob = _merge(parts, bc_path, arch, key)
    del parts
    _write_store(out, index, blob)
    print(
        f"nvshmem-dsl: NVSHMEM bitcode for sm_{arch} ready "
        f"({time.perf_counter() - t0:.1f} s, {len(index['api'])} API functions)",
        file=sys.stderr,
        flush=True,
    )


_lock = threading.Lock()
_builders: list = []  # build processes this process started (waited for at exit)


def _start_builder(bc_path: Path, arch: int, path: Path, key: str) -> bool:
    """Start a process that builds the store, unless one is at it or the store
    is small enough to build here; True if one was started.  The builder
    inherits the store's lock, taken here, and holds it until it is done."""
    if not _side_builds(bc_path):
        return False
    try:
        fd = try_lock(path.with_suffix(".lock"))
    except OSError:
        return False
    if fd is None:
        return False  # another process is building it
    try:
        if _open_store(path, key) is not None:
            return False
        proc = _spawn(["build", bc_path, arch, path, key], pass_fds=(fd,),
                      stdout=subprocess.DEVNULL)  # stderr: this one's, for its progress
    except OSError:
        return False
    finally:
        release(fd)  # the builder's copy keeps the lock
    with _lock:
        if not _builders:
            atexit.register(_wait_for_builders)
        _builders.append(proc)
    return True


def _wait_for_builders() -> None:
    """At exit: let the store builds this process started finish (they hold
    its stderr and write the cache the next process reads)."""
    for proc in _builders:
        if proc.poll() is None:
            print("nvshmem-dsl: waiting for the NVSHMEM bitcode cache to be written ...",
                  file=sys.stderr, flush=True)
            try:
                proc.wait()
            except KeyboardInterrupt:
                proc.kill()
                raise
