"""The cache directory under concurrency and crashes (issue 43, item 3), on the CPU.

Several processes starting at once on an empty ``NVSHMEM_DSL_CACHE`` build each entry once (the
piece store, NVSHMEM's out-of-line objects, the CuTe kernels' bitcode and libNVVM copies) and all
get the same valid files; a process killed (SIGKILL) while it holds an entry's lock, half way
through writing its temporary file or just before renaming it into place leaves nothing that the
next process loads: that process, waiting on the lock meanwhile, takes it at once and builds the
entry, and no temporary file is left behind.  A process forked while a lock is held does not keep
it, and the part processes of a store build end with their builder.

The faults are made in a child process (:data:`CHILD`) that pauses at the point (printing
``PAUSED``) and is then killed from here: where it pauses is found by the name of the file it
locks, writes or renames (a regex on the basename), with no hook in the package.  The store's
tests use a tiny bitcode file; the objects' tests NVSHMEM's sm_90 bitcode, with the piece store
taken from the default cache (a link to it: built there once, as for tests/test_outline.py) and
an empty cache for the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

llvm = pytest.importorskip("llvmlite.binding")

from bitcode_available import HAVE_BITCODE  # noqa: E402
from nvshmem_dsl.linker import cache, link, outline, store, store_file  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/fd").is_dir(),
                                reason="POSIX with /proc only")

#: Processes started at once in the concurrency tests.
N = 6
#: Seconds any one child may take (a child waiting on a dead process's lock would hit it).
LIMIT = 90

TINY_IR = r"""
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@nvshmemi_device_state_d = addrspace(4) externally_initialized constant i32 0, align 4
@.str = private unnamed_addr constant [3 x i8] c"hi\00", align 1
@table = internal constant ptr @.str, align 8

define internal i32 @helper(i32 %x) #0 {
  %s = load i32, ptr addrspace(4) @nvshmemi_device_state_d, align 4, !tbaa !0
  %r = add i32 %s, %x
  ret i32 %r
}

define i32 @nvshmem_foo(i32 %x) #1 section ".text.compute" {
  %r = call i32 @helper(i32 %x)
  ret i32 %r
}

define ptr @nvshmem_bar() #1 {
  %p = load ptr, ptr @table, align 8
  ret ptr %p
}

attributes #0 = { noinline nounwind "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
attributes #1 = { alwaysinline nounwind "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }

!0 = !{!1, !1, i64 0}
!1 = !{!"int", !2, i64 0}
!2 = !{!"omnipotent char", !3, i64 0}
!3 = !{!"Simple C++ TBAA"}
"""

#: A child process: ``python -c CHILD <point> <regex> <task as JSON>``.  ``point``: where it pauses
#: (prints PAUSED and sleeps until killed): ``lock`` once it holds an exclusive flock on a file whose
#: name matches, ``write`` half way through the first write to a temporary file whose name matches
#: (the half flushed), ``rename`` before renaming a whole temporary file onto a name that matches,
#: ``none`` nowhere; ``kill-builder``: no pause, but every store builder process it starts is
#: killed (SIGKILL) as soon as it is started, holding the store's lock.  The task runs the package's own code and prints ``RESULT <JSON>`` last.
CHILD = r'''
import hashlib, json, os, re, sys, time
point, pattern, task = sys.argv[1], re.compile(sys.argv[2]), json.loads(sys.argv[3])
killed = []  # builder processes killed here

def pause():
    print("PAUSED", flush=True)
    time.sleep(600)
    os._exit(3)

def fd_name(fd):
    try:
        return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return ""

if point == "lock":
    import fcntl
    real_flock = fcntl.flock
    def flock(fd, op):
        real_flock(fd, op)
        fd = fd if isinstance(fd, int) else fd.fileno()
        if op & fcntl.LOCK_EX and pattern.search(fd_name(fd)):
            pause()
    fcntl.flock = flock
elif point == "write":
    real_fdopen = os.fdopen
    class Torn:
        def __init__(self, fh):
            self.fh = fh
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            return self.fh.__exit__(*exc)
        def write(self, data):
            data = bytes(data)
            self.fh.write(data[:max(1, len(data) // 2)])
            self.fh.flush()
            pause()
        def __getattr__(self, name):
            return getattr(self.fh, name)
    def fdopen(fd, *args, **kw):
        fh = real_fdopen(fd, *args, **kw)
        name = fd_name(fd)
        return Torn(fh) if name.endswith(".tmp") and pattern.search(name) else fh
    os.fdopen = fdopen
elif point == "kill-builder":  # each store builder process started here dies at once (SIGKILL)
    from nvshmem_dsl.linker import store_build
    real_spawn = store_build._spawn
    def spawn(args, **kw):
        proc = real_spawn(args, **kw)
        if args[0] == "build":
            proc.kill()
            proc.wait()
            killed.append(proc.pid)
        return proc
    store_build._spawn = spawn
elif point == "rename":
    real_replace = os.replace
    def replace(src, dst, *args, **kw):
        if pattern.search(os.path.basename(str(dst))):
            pause()
        return real_replace(src, dst, *args, **kw)
    os.replace = replace

def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()

kind = task["kind"]
if kind == "store":
    from nvshmem_dsl.linker import store
    text = str(store.api_module(task["names"], 90, bc_path=task["bc"]))
    api = sorted(store.api_names(90, bc_path=task["bc"]))
    result = {"text": hashlib.sha256(text.encode()).hexdigest(), "api": api,
              "parses": store.stats["bitcode_parses"]}
elif kind == "objects":
    from nvshmem_dsl.linker import outline
    paths = outline.objects(task["names"], 90, "sm_90", "+ptx85")
    result = {"paths": [str(p) for p in paths], "built": outline.stats["builds"],
              "digests": {p.name: digest(p) for p in paths}}
elif kind == "nvvm":
    from nvshmem_dsl.linker import nvvm
    copy = nvvm.nvvm_bitcode(task["bc"])
    kernel = nvvm.kernel_bitcode(task["names"], 90, task["bc"], helpers_out=False)
    result = {"copy": str(copy), "kernel": str(kernel), "digests": [digest(copy), digest(kernel)],
              "calls": sorted(map(sorted, nvvm.kernel_bitcode_calls(kernel)))}
else:
    raise SystemExit(f"unknown task {kind}")
result["killed"] = len(killed)
print("RESULT " + json.dumps(result), flush=True)
'''


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    """An empty private cache directory, set for this process and the children."""
    root = tmp_path / "cache"
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(root))
    monkeypatch.setenv(cache.DAYS_ENV, "never")
    return root


@pytest.fixture
def tiny(tmp_path):
    bc = tmp_path / "libnvshmem_device_sm_90.bc"
    bc.write_bytes(llvm.parse_assembly(TINY_IR).as_bitcode())
    return bc


_shared_store: list = []


@pytest.fixture
def seeded(cache_root):
    """``cache_root`` holding only a link to the default cache's sm_90 piece store (built there on
    first use): the objects' tests build objects, not stores."""
    if not HAVE_BITCODE or link.ptxas() is None:
        pytest.skip("no NVSHMEM device bitcode or no ptxas")
    if not _shared_store:
        env = {k: v for k, v in os.environ.items() if k != "NVSHMEM_DSL_CACHE"}
        done = subprocess.run([sys.executable, "-c", "from nvshmem_dsl.linker import store; "
                               "store.api_names(90); print(store.store_path(arch=90))"],
                              env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        _shared_store.append(Path(done.stdout.split()[-1]))
    shared = _shared_store[0]
    cache_root.mkdir(mode=0o700)
    (cache_root / shared.name).symlink_to(shared)
    return cache_root


def _start(task: dict, point: str = "none", pattern: str = "^$", env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, point, pattern, json.dumps(task)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _result(proc: subprocess.Popen, timeout: float = LIMIT) -> tuple[dict, str]:
    """The child's RESULT and its stderr; fails if it did not end well within ``timeout``."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"a child took more than {timeout} s (waiting on a dead process?):\n{err[-3000:]}")
    assert proc.returncode == 0, err[-3000:]
    line = [x for x in out.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), err


def _paused(proc: subprocess.Popen, timeout: float = LIMIT) -> None:
    """Wait until ``proc`` prints PAUSED (it reached its fault's point)."""
    found = threading.Event()

    def read():
        for line in proc.stdout:
            if line.strip() == "PAUSED":
                found.set()
                return

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(timeout):
        proc.kill()
        pytest.fail(f"the child never reached its fault's point:\n{proc.stderr.read()[-3000:]}")


def _waits_on_a_lock(pid: int, timeout: float = LIMIT) -> None:
    """Wait until process ``pid`` is blocked on a flock (a ``->`` line of /proc/locks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "->" and fields[2] == "FLOCK" and fields[5] == str(pid):
                return
        time.sleep(0.02)
    pytest.fail(f"process {pid} never waited on the lock")


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for fh in (proc.stdout, proc.stderr):
        fh.close()


def _leftovers(root: Path) -> list:
    """Temporary files and build folders under the cache ``root``."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.name.endswith(".tmp") or ".build-" in p.name)


def _kill_at_then_next(task, point, pattern, check, env=None):
    """A child paused at ``point`` (holding the entry's lock), a second one started meanwhile and
    waiting on that lock; the first SIGKILLed: the second goes on at once and ``check``s its
    RESULT; then a third finds the entry there."""
    victim = _start(task, point, pattern, env)
    _paused(victim)
    waiter = _start(task, env=env)
    try:
        _waits_on_a_lock(waiter.pid)
    finally:
        _kill(victim)
    t0 = time.monotonic()
    result, err = _result(waiter)
    check(result, err, time.monotonic() - t0)
    return result


# --------------------------------------------------------------------------- many processes at once


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_cold_store_built_once_by_processes_starting_together(cache_root, tiny, jobs):
    """N processes on an empty cache: one builds the store (in the calling process, or in a builder
    process of its own with its part processes), the others wait for it or link closures; all get
    the same module; the store is valid and nothing of the build is left."""
    task = {"kind": "store", "bc": str(tiny), "names": ["nvshmem_foo", "nvshmem_bar"]}
    procs = [_start(task, env={"NVSHMEM_DSL_BUILD_JOBS": jobs}) for _ in range(N)]
    results = [_result(p) for p in procs]
    assert len({r["text"] for r, _ in results}) == 1
    assert all(r["api"] == ["nvshmem_bar", "nvshmem_foo"] for r, _ in results)
    builds = sum(err.count("preparing NVSHMEM bitcode for sm_90 (once)") for _, err in results)
    assert builds == 1, [err for _, err in results]
    store_file._Store(store.store_path(tiny), store_file._cache_key(tiny))  # valid
    assert not _leftovers(cache_root)
    assert [e.kind for e in cache.entries(cache_root)] == ["piece stores"]


def test_cold_objects_built_once_by_processes_starting_together(seeded):
    """N processes on an empty cache (but the store) ask for the same objects: each object is built
    once, by one of them; all get the same paths, whole ELF files, and nothing is left over."""
    task = {"kind": "objects", "names": ["nvshmemx_barrier_all_block", "nvshmem_int_p"]}
    procs = [_start(task) for _ in range(N)]
    results = [_result(p)[0] for p in procs]
    assert len({json.dumps(r["paths"]) for r in results}) == 1
    assert len({json.dumps(r["digests"], sort_keys=True) for r in results}) == 1
    cubins = sorted((seeded / store_file.OBJECTS_FOLDER).glob("*.cubin"))
    assert cubins and sum(r["built"] for r in results) == len(cubins)
    for path in cubins:
        assert store_file.whole_elf(path)
        name = path.name.split("-sm_90")[0]
        assert (name, True) in link.elf_symbols(path.read_bytes()), name
        assert path.with_suffix(".calls").exists()
    assert not _leftovers(seeded)


def test_cold_dsl_caches_built_once_by_processes_starting_together(cache_root, tiny):
    """The CuTe side of the cache (a libNVVM copy of the bitcode, a kernel's bitcode and its calls):
    N processes at once make each once and all get the same files."""
    task = {"kind": "nvvm", "bc": str(tiny), "names": ["nvshmem_foo"]}
    procs = [_start(task, env={"NVSHMEM_DSL_BUILD_JOBS": "1"}) for _ in range(N)]
    results = [_result(p) for p in procs]
    assert len({json.dumps(r) for r, _ in results}) == 1
    assert sum(err.count("for NVVM (once)") for _, err in results) == 1
    first = results[0][0]
    for path in (first["copy"], first["kernel"]):
        mod = llvm.parse_bitcode(Path(path).read_bytes())
        assert "nvshmem_foo" in {f.name for f in mod.functions} and ".text.compute" not in str(mod)
    assert not _leftovers(cache_root)


# --------------------------------------------------------------------------- a builder killed


STORE_POINTS = {
    "lock": r"\.lock$",  # holding the store's lock, before any of the build
    "write": r"\.pieces\..*\.tmp$",  # half of the store's temporary file written
    "rename": r"\.pieces$",  # the whole temporary file written, not renamed
}


@pytest.mark.parametrize("point", sorted(STORE_POINTS))
def test_store_builder_killed(cache_root, tiny, point):
    """A process building the store SIGKILLed at ``point``: a process waiting on its lock builds the
    store at once, the dead one's temporary file is removed, and the next one loads the store."""
    task = {"kind": "store", "bc": str(tiny), "names": ["nvshmem_foo"]}
    env = {"NVSHMEM_DSL_BUILD_JOBS": "1"}  # built in the process that is killed

    def check(result, err, seconds):
        assert result["parses"] == 1 and "waiting for another process" in err
        assert seconds < LIMIT / 2

    first = _kill_at_then_next(task, point, STORE_POINTS[point], check, env)
    assert not _leftovers(cache_root)
    again, _ = _result(_start(task, env=env))
    assert again["parses"] == 0 and again["text"] == first["text"]


def test_store_builder_processes_killed(cache_root, tiny):
    """Processes whose store builder processes (each holding the store's lock, and the store's build
    in processes of its own) die at once: none waits for a dead builder, one builds the store
    itself, the others wait for that and load it."""
    task = {"kind": "store", "bc": str(tiny), "names": ["nvshmem_foo", "nvshmem_bar"]}
    env = {"NVSHMEM_DSL_BUILD_JOBS": "2"}
    procs = [_start(task, "kill-builder", "^$", env) for _ in range(3)]
    results = [_result(p) for p in procs]
    assert sum(r["killed"] for r, _ in results) >= 1
    assert len({r["text"] for r, _ in results}) == 1
    assert sum(err.count("preparing NVSHMEM bitcode for sm_90 (once)") for _, err in results) == 1
    store_file._Store(store.store_path(tiny), store_file._cache_key(tiny))
    assert not _leftovers(cache_root)


#: Where a process building the barrier's object is killed: holding its lock (before its build), half
#: of its calls list or of the cubin written, and with its calls list in place but the cubin not.
OBJECT_POINTS = {
    "lock": r"^nvshmemx_barrier_all_block-.*\.lock$",
    "write-calls": r"^nvshmemx_barrier_all_block-.*\.calls\..*\.tmp$",
    "write": r"^nvshmemx_barrier_all_block-.*\.cubin\..*\.tmp$",
    "rename": r"^nvshmemx_barrier_all_block-.*\.cubin$",
}


@pytest.mark.parametrize("where", sorted(OBJECT_POINTS))
def test_object_builder_killed(seeded, where):
    """A process building an object SIGKILLed at ``where``: a process waiting on the object's lock
    builds it at once, the dead one's temporary files are removed, and the next one finds the same
    object."""
    task = {"kind": "objects", "names": ["nvshmemx_barrier_all_block"]}

    def check(result, err, seconds):
        assert result["built"] >= 1 and seconds < LIMIT / 2

    first = _kill_at_then_next(task, where.split("-")[0], OBJECT_POINTS[where], check)
    assert not _leftovers(seeded)
    for path in map(Path, first["paths"]):
        if path.suffix == ".cubin":
            assert store_file.whole_elf(path)
    again, _ = _result(_start(task))
    assert again["built"] == 0 and again["digests"] == first["digests"]


NVVM_POINTS = {
    "lock": r"\.nvvm\.lock$",
    "write": r"\.nvvm\.bc\..*\.tmp$",
    "rename": r"\.nvvm\.bc$",
}


@pytest.mark.parametrize("point", sorted(NVVM_POINTS))
def test_dsl_cache_builder_killed(cache_root, tiny, point):
    """As :func:`test_store_builder_killed`, for the libNVVM copy of the bitcode (the first of the CuTe
    side's entries a process makes)."""
    task = {"kind": "nvvm", "bc": str(tiny), "names": ["nvshmem_foo"]}
    env = {"NVSHMEM_DSL_BUILD_JOBS": "1"}
    pattern = NVVM_POINTS[point]

    def check(result, err, seconds):
        assert "for NVVM (once)" in err and seconds < LIMIT / 2

    first = _kill_at_then_next(task, point, pattern, check, env)
    assert not _leftovers(cache_root)
    again, err = _result(_start(task, env=env))
    assert again == first and "for NVVM" not in err


def test_kernel_bitcode_builder_killed_between_its_files(cache_root, tiny):
    """A CuTe kernel's bitcode is two files (its calls, then the bitcode): killed between them, the
    next process makes both again."""
    task = {"kind": "nvvm", "bc": str(tiny), "names": ["nvshmem_foo"]}
    env = {"NVSHMEM_DSL_BUILD_JOBS": "1"}

    def check(result, err, seconds):
        assert seconds < LIMIT / 2

    first = _kill_at_then_next(task, "rename", r"^libnvshmem_device_sm_90-[0-9a-f]{24}\.nvvm\.bc$", check, env)
    kernels = cache_root / store_file.KERNELS_FOLDER
    assert not _leftovers(cache_root) and len(list(kernels.glob("*.nvvm.bc"))) == 1
    assert _result(_start(task, env=env))[0] == first


# --------------------------------------------------------------------------- torn files on disk


def test_a_torn_object_is_rebuilt_not_linked(seeded):
    """An object file cut short or emptied on disk (what a crash of the machine can leave where the
    data never reached it) is built again, not given to the linker."""
    task = {"kind": "objects", "names": ["nvshmemx_barrier_all_block"]}
    first, _ = _result(_start(task))
    obj = next(Path(p) for p in first["paths"] if "nvshmemx_barrier_all_block" in p)
    whole = obj.read_bytes()
    for torn in (whole[: len(whole) // 2], b"", b"\0" * len(whole)):
        obj.write_bytes(torn)
        again, _ = _result(_start(task))
        assert again["built"] == 1 and again["digests"] == first["digests"]
        assert obj.read_bytes() == whole


def test_a_torn_kernel_bitcode_is_made_again(cache_root, tiny):
    task = {"kind": "nvvm", "bc": str(tiny), "names": ["nvshmem_foo"]}
    env = {"NVSHMEM_DSL_BUILD_JOBS": "1"}
    first, _ = _result(_start(task, env=env))
    for path in map(Path, (first["kernel"], first["copy"])):
        whole = path.read_bytes()
        for torn in (whole[: len(whole) // 2], b"", b"\0" * len(whole)):
            path.write_bytes(torn)
            assert _result(_start(task, env=env))[0] == first
            assert path.read_bytes() == whole


# --------------------------------------------------------------------------- locks and processes


FORK_HOLDER = r'''
import os, sys, threading, time
from pathlib import Path
from nvshmem_dsl.linker import store_file

held, release = threading.Event(), threading.Event()
def hold():
    with store_file._file_lock(Path(sys.argv[1])):
        held.set()
        release.wait()
thread = threading.Thread(target=hold)
thread.start()
held.wait()
child = os.fork()  # as a DataLoader's worker, forked while a compile thread holds a lock
if child == 0:
    time.sleep(60)
    os._exit(0)
if sys.argv[2] == "release":
    release.set()
    thread.join()
print(child, flush=True)
time.sleep(60)
'''


@pytest.mark.parametrize("how", ["release", "killed"])
def test_a_forked_child_does_not_keep_a_lock(tmp_path, how):
    """A process forked while a thread holds an entry's lock gets no share of it: once the thread
    releases it (or its process is killed), another process takes the lock, though the child
    lives on."""
    lock = tmp_path / "x-0123456789abcdef0123.lock"
    holder = subprocess.Popen([sys.executable, "-c", FORK_HOLDER, str(lock), how], stdout=subprocess.PIPE, text=True)
    child = int(holder.stdout.readline())
    try:
        if how == "killed":
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
        deadline = time.monotonic() + 10
        fd = None
        while fd is None and time.monotonic() < deadline:
            fd = store_file.try_lock(lock)
            time.sleep(0.05)
        assert fd is not None, "the forked child holds the lock"
        os.close(fd)
        assert Path(f"/proc/{child}").exists()  # still alive
    finally:
        for pid in (child, holder.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        holder.wait()


def _children(pid: int) -> set:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


BUILDER = r'''
import sys
from pathlib import Path
from nvshmem_dsl.linker import store_build, store_file
bc = store_file._default_bitcode(90)
out = store_file._store_file(bc, store_file._cache_key(bc))
with store_file._file_lock(out.with_suffix(".lock")):
    store_build._build(bc, 90, out, store_file._cache_key(bc))
'''


@pytest.mark.skipif(not HAVE_BITCODE, reason="no NVSHMEM device bitcode")
def test_part_processes_end_with_their_builder(cache_root):
    """A store build killed while its part processes parse NVSHMEM's bitcode leaves none of them
    running (each holds 1-2 GB for a minute): they end with it."""
    builder = subprocess.Popen([sys.executable, "-c", BUILDER], stderr=subprocess.PIPE,
                               env={**os.environ, "NVSHMEM_DSL_BUILD_JOBS": "2"})
    try:
        deadline = time.monotonic() + 60
        parts: set = set()
        while len(parts) < 2 and time.monotonic() < deadline:
            parts = _children(builder.pid)
            time.sleep(0.05)
        assert len(parts) == 2, "the builder started no part processes"
        time.sleep(0.5)  # into their parse
    finally:
        os.kill(builder.pid, signal.SIGKILL)
        builder.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in parts):
        time.sleep(0.05)
    alive = [p for p in parts if Path(f"/proc/{p}").exists()
             and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive, "part processes outlived their builder"


# --------------------------------------------------------------------------- the whole path, cold


NUMBA_KERNEL = r'''
import hashlib, json
from numba import types
from numba.cuda.compiler import _compile_pyfunc_with_fixup
import nvshmem_dsl.numba as nv

def k(dst, src):
    dst[0] = nv.my_pe()
    nv.p(dst, 1, 7, 0)
    nv.sum_reducescatter(nv.Team.TEAM_WORLD, dst, src, 1)
    nv.sync_all()

lib, _ = _compile_pyfunc_with_fixup(k, (types.int32[::1], types.int32[::1]), device=False, abi="numba", cc=(9, 0))
cubin = lib.get_cubin(cc=(9, 0))
print("RESULT " + json.dumps({"cubin": len(bytes(getattr(cubin, "code", cubin)))}), flush=True)
'''


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_BITCODE or link.ptxas() is None, reason="no NVSHMEM device bitcode or no ptxas")
def test_cold_numba_kernels_of_processes_starting_together(cache_root):
    """Four processes compile a Numba kernel with NVSHMEM calls (inlined and out of line) to a cubin
    with nvJitLink, at once, on an empty cache: the store is built once (the others link closures
    meanwhile), every object once, and all end; the second round finds everything."""
    pytest.importorskip("numba.cuda")
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", NUMBA_KERNEL], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    results = [_result(p, timeout=1200) for p in procs]
    cold = time.monotonic() - t0
    assert all(r["cubin"] > 0 for r, _ in results)
    assert sum(err.count("preparing NVSHMEM bitcode for sm_90 (once)") for _, err in results) == 1
    bc = store_file._default_bitcode(90)
    store_file._Store(store.store_path(bc), store_file._cache_key(bc))
    for path in (cache_root / store_file.OBJECTS_FOLDER).glob("*.cubin"):
        assert store_file.whole_elf(path)
    assert not _leftovers(cache_root)
    t0 = time.monotonic()
    _result(subprocess.Popen([sys.executable, "-c", NUMBA_KERNEL], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True))
    print(f"4 processes cold: {cold:.1f} s; one warm: {time.monotonic() - t0:.1f} s")
