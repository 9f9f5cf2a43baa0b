"""NVSHMEM4Py's own tests (its repository's nvshmem4py/test) run as its run_tests.sh runs them, through our alias.

    python3 tests/gpu/nvshmem4py_tests.py [--tests .dw/nv4py-tests] [--out DIR] [--suites core,numba,...]
        [--budget 480] [--together 3] [--only NAME,...] [--launcher auto|mpirun|nvshmem_dsl] [--list]
        [--package alias|nvshmem4py]

The tests are NVIDIA's code: they are never in git.  A maintainer places them, byte for byte, in
``.dw/nv4py-tests`` (the layout of ``nvshmem4py/test``; ``SOURCES.txt`` there names the commit of
each file) and carries that folder to the GPU host; without it this prints why and exits 0.

What runs is the table RUNS below: every test invocation of run_tests.sh's suites (its commit
9e47d67: core, numba, numba_high_level_1/2, numba_cuda_mlir, numba_cuda_mlir_high_level_1/2,
cutedsl, cutedsl_high_level_1/2, nvls, numba_cuda_mlir_nvls), each once: the CuTe RMA file, which
suites cutedsl and cutedsl_high_level_2 both run, and the CuTe collectives, which cutedsl runs as
one file and cutedsl_high_level_1 one function at a time (as here), belong to both suites
(``also``).  Each run has run_tests.sh's arguments (``-i mpi`` / ``--init-type mpi --with-mpi``;
``--skip-amo`` for both RMA runs) and environment: ``NUMBA_CUDA_ENABLE_NRT=1`` for the Numba
memory test, ``NVSHMEM_TMA_POLICY=ENABLE`` for the CuTe TMA RMA test, and for the nvls suites
``NVSHMEM_MAX_TEAMS=1024`` and ``NVSHMEM_DISABLE_NCCL=1`` where not set (not their cluster's
``NVSHMEM_HCA_LIST`` / ``NVSHMEM_ENABLE_NIC_PE_MAPPING`` and library path); the collective runs are
not started where run_tests.sh's ``NVSHMEM4PY_SKIP_NUMBA_COLLECTIVES`` /
``NVSHMEM4PY_SKIP_CUTEDSL_COLLECTIVES`` is 1 (status ``skipped``).  Not here: the numba_cuda_mlir
suite's ``python3 -c`` import check (the alias runs files and modules), and the copy's files that
run_tests.sh does not run (test_ptr.py, test_cute_interop.py, test_cute_library_lifetime.py,
device/cute/test_cute_bindings.py, numba_cuda_mlir's test_ring/test_collective/...).  The
numba_cuda_mlir runs need the numba-cuda-mlir package (``no numba_cuda_mlir`` without it); NVSHMEM4Py
0.4.1 has its experimental ``numba_cuda_mlir`` device modules, which nvshmem_dsl.core does not
provide (docs/migrating.rst), so through the alias they fail at import and only
``--package nvshmem4py`` tests them.

Every rank runs through our alias (``import nvshmem`` is nvshmem_dsl.core): under mpirun as there,
each rank ``python -m nvshmem_dsl.core.alias`` (``--launcher auto``, where mpirun is installed), or started
by ``python -m nvshmem_dsl.run --as-nvshmem4py -n 2`` (``--launcher nvshmem_dsl``: each rank an MPI
singleton, and ``init(mpi_comm=MPI.COMM_WORLD, initializer_method="mpi")`` takes the launcher's
ranks; Open MPI without ssh/rsh cannot start singletons).  NVSHMEM_BOOTSTRAP=MPI is not set: init
bootstraps NVSHMEM by unique id.  wheel_sanity_test.py runs as one process.  ``--package nvshmem4py``
runs NVSHMEM4Py itself instead (installed, e.g. by the prelude from ``.dw/nv4py``; each rank a plain
``python`` under mpirun, on nvshmem_dsl's NVSHMEM): where it passes is what the alias is held to.  The ranks load
``nv4py_site/sitecustomize.py``: ``cuda.core.system.num_devices`` where the cuda.core installed has
only ``get_num_devices()``, and, where the ranks outnumber the GPUs (one GPU under MPS),
``Device(i)`` as ``Device(i % GPUs)`` (the tests give a rank the GPU of its node-local rank).

The CuTe runs need the CuTe DSL (``cutlass``) on the host: without it they are ``no cutlass``, not
run and not failed (place it first: device step ``cute-part1``, then carry ``.dw/cute2`` too).

Time is bounded twice: each run has its own timeout (the ``timeout`` column; the launcher's process
group is ended at it, SIGTERM then SIGKILL), and no run starts, or runs, past ``--budget`` seconds
from the start (its timeout is cut to what is left; a run that cannot start is ``not run``).
``--together N`` runs N jobs at once (2 PEs each; under one MPS daemon when the GPU is shared).  A
fatal fault of one job's PE reaches every job on the GPU (MPS then answers CUDA_ERROR_MPS_SERVER_NOT_READY
until its clients are gone): each run that failed so runs once more, alone, after all others, within
the budget (its first log kept as ``<name>.mps-fault.log``; "again: MPS fault" in the table).

Output (in ``--out``): per run ``<name>.log`` (both ranks' output), ``junit/<name>.xml`` (one
testcase per pytest case, or one per script run), ``summary.json``; printed: per-file pass / fail /
skip / error counts and a summary table.  A pytest case counts once: failed if it failed on any
rank, ``hung`` if a rank began it and the run's timeout came first.  A script run counts as one case.
The exit status is 1 when a run did not pass, except the two run_tests.sh treats as XFAIL
(test_collective.py, test_highlevel_bindings.py: status ``xfail``, their case still counted failed)
and runs not run for a reason given (``missing``, ``no <module>``, ``skipped``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: sitecustomize for the ranks: what NVSHMEM4Py's tests assume of cuda.core and of a GPU a rank
SITE = HERE / "nv4py_site"
DEFAULT_TESTS = ROOT / ".dw" / "nv4py-tests"
PYTEST_ARGS = ("-p", "nv4py_pytest_plugin", "-p", "no:cacheprovider", "-q", "-rfEs", "--tb=short",
               "--init-type", "mpi", "--with-mpi")


@dataclass(frozen=True)
class Run:
    suite: str       # run_tests.sh's suite
    name: str        # unique; names the log and JUnit files
    folder: str      # relative to the tests root (run_tests.sh's pushd)
    argv: tuple      # a script and its arguments, or ("-m", "pytest", target)
    timeout: int = 90
    nproc: int = 2
    env: tuple = ()  # (NAME, value) pairs: run_tests.sh's export / mpirun -x NAME=value
    env_default: tuple = ()  # (NAME, value) pairs set where the environment has no NAME: its ${NAME:-value}
    skip_if: tuple = ()  # NAMEs: not started where $NAME is 1 (run_tests.sh's NVSHMEM4PY_SKIP_*_COLLECTIVES)
    also: tuple = ()  # other suites of run_tests.sh that run the same invocation (each run once here)
    xfail: bool = False  # run_tests.sh does not count its failure ("XFAIL: ... proxy timeout on PCIe multi-node")
    needs: tuple = ()  # modules the GPU host may lack that this project places by a separate step (the CuTe DSL)

    @property
    def is_pytest(self) -> bool:
        return self.argv[:2] == ("-m", "pytest")

    @property
    def file(self) -> str:
        return str(Path(self.folder) / (self.argv[2] if self.is_pytest else self.argv[0]).split("::")[0])

    @property
    def suites(self) -> tuple:
        return (self.suite, *self.also)


#: modules a folder's files import that the GPU host may lack: reported ``no <module>``, not run
_NEEDS = {"device/cute": ("cutlass",), "numba_cuda_mlir": ("numba_cuda_mlir",),
          "numba_cuda_mlir/device/numba_cuda_mlir": ("numba_cuda_mlir",)}


def _pytest(suite, name, folder, target, timeout=90, **kw):
    return Run(suite, name, folder, ("-m", "pytest", target), timeout, 2, needs=_NEEDS.get(folder, ()), **kw)


def _script(suite, name, folder, argv, timeout=90, **kw):
    return Run(suite, name, folder, argv, timeout, 2, needs=_NEEDS.get(folder, ()), **kw)


_COLL = ("test_device_reduce", "test_device_reducescatter", "test_device_fcollect", "test_device_alltoall",
         "test_device_broadcast")
#: run_tests.sh's run_nvls_tests / run_numba_cuda_mlir_nvls_tests export these (NVSHMEM_DISABLE_NCCL as ${...:-1})
_NVLS_ENV = (("NVSHMEM_MAX_TEAMS", "1024"),)
_NVLS_DEFAULT = (("NVSHMEM_DISABLE_NCCL", "1"),)
_MLIR = "numba_cuda_mlir"
_MLIR_DEV = "numba_cuda_mlir/device/numba_cuda_mlir"
# in run_tests.sh's order (its suite "all")
RUNS = (
    Run("core", "wheel_sanity", ".", ("wheel_sanity_test.py",), 60, nproc=1),
    Run("core", "init_mpi", ".", ("init_test.py", "-i", "mpi")),
    Run("core", "init_uid", ".", ("init_test.py", "-i", "uid")),
    Run("core", "init_emulated_mpi", ".", ("init_test.py", "-i", "emulated_mpi")),
    Run("core", "collective", ".", ("collective_test.py", "-i", "mpi"), 120),
    Run("core", "rma_skip_signalop", ".", ("rma_test.py", "-i", "mpi", "--skip-signalop", "--skip-amo")),
    Run("numba", "get_version", ".", ("test_get_version.py", "-i", "mpi")),
    Run("numba", "npe", ".", ("test_npe.py", "-i", "mpi")),
    Run("numba", "ring", ".", ("test_ring.py", "-i", "mpi")),
    Run("numba", "collective_numba", ".", ("test_collective.py", "-i", "mpi"), xfail=True),
    Run("numba", "highlevel_bindings", ".", ("test_highlevel_bindings.py", "-i", "mpi"), xfail=True),
    *(_pytest("numba_high_level_1", f"numba_coll_{f[12:]}", "device/numba", f"test_device_coll.py::{f}", 150,
              skip_if=("NVSHMEM4PY_SKIP_NUMBA_COLLECTIVES",)) for f in _COLL),
    _pytest("numba_high_level_1", "numba_sync", "device/numba", "test_device_sync.py"),
    _pytest("numba_high_level_1", "numba_barrier", "device/numba", "test_device_barrier.py"),
    _pytest("numba_high_level_2", "numba_rma", "device/numba", "test_device_rma.py", 150),
    _script("numba_cuda_mlir", "mlir_get_version", _MLIR, ("test_get_version.py", "-i", "mpi")),
    _script("numba_cuda_mlir", "mlir_npe", _MLIR, ("test_npe.py", "-i", "mpi")),
    *(_pytest("numba_cuda_mlir_high_level_1", f"mlir_coll_{f[12:]}", _MLIR_DEV, f"test_device_coll.py::{f}", 150)
      for f in _COLL),
    _pytest("numba_cuda_mlir_high_level_1", "mlir_sync", _MLIR_DEV, "test_device_sync.py"),
    _pytest("numba_cuda_mlir_high_level_1", "mlir_barrier", _MLIR_DEV, "test_device_barrier.py"),
    _pytest("numba_cuda_mlir_high_level_2", "mlir_rma", _MLIR_DEV, "test_device_rma.py", 150),
    # CuTe compiles each case's kernel, 10-30 cases a file (7-20 s each with 4 jobs side by side on
    # 2026-12-03, NVSHMEM's whole bitcode linked; since 390449a not measured on a GPU)
    _pytest("cutedsl", "cute_rma", "device/cute", "test_device_rma.py", 300, also=("cutedsl_high_level_2",)),
    *(_pytest("cutedsl_high_level_1", f"cute_coll_{f[12:]}", "device/cute", f"test_device_coll.py::{f}", 300,
              also=("cutedsl",), skip_if=("NVSHMEM4PY_SKIP_CUTEDSL_COLLECTIVES",)) for f in _COLL),
    _pytest("cutedsl_high_level_1", "cute_sync", "device/cute", "test_device_sync.py", 150),
    Run("nvls", "memory", ".", ("memory_test.py", "-i", "mpi"), env=_NVLS_ENV, env_default=_NVLS_DEFAULT),
    _pytest("nvls", "numba_mem", "device/numba", "test_device_mem.py",
            env=(*_NVLS_ENV, ("NUMBA_CUDA_ENABLE_NRT", "1")), env_default=_NVLS_DEFAULT),
    _pytest("nvls", "cute_mem", "device/cute", "test_device_mem.py", 120, env=_NVLS_ENV, env_default=_NVLS_DEFAULT),
    # 72 cases (put/get x scope x gmem/smem x 2 dtypes), a CuTe compile each: more than 300 s at the times above
    _pytest("nvls", "cute_rma_tma", "device/cute", "test_device_rma_tma.py", 300,
            env=(*_NVLS_ENV, ("NVSHMEM_TMA_POLICY", "ENABLE")), env_default=_NVLS_DEFAULT),
    _pytest("nvls", "numba_amo", "device/numba", "test_device_amo.py", env=_NVLS_ENV, env_default=_NVLS_DEFAULT),
    _pytest("nvls", "cute_amo", "device/cute", "test_device_amo.py", 120, env=_NVLS_ENV, env_default=_NVLS_DEFAULT),
    Run("nvls", "rma_full", ".", ("rma_test.py", "-i", "mpi", "--skip-amo"), env=_NVLS_ENV, env_default=_NVLS_DEFAULT),
    Run("nvls", "ring_allreduce", ".", ("test_ring_allreduce.py", "-i", "mpi"), env=_NVLS_ENV,
        env_default=_NVLS_DEFAULT),
    # run_tests.sh's NP_TEAM: min(NP, 8), 2 by default
    Run("nvls", "teams", ".", ("teams_test.py", "-i", "mpi"), env=_NVLS_ENV, env_default=_NVLS_DEFAULT),
    _pytest("numba_cuda_mlir_nvls", "mlir_mem", _MLIR_DEV, "test_device_mem.py", env=_NVLS_ENV,
            env_default=_NVLS_DEFAULT),
    _pytest("numba_cuda_mlir_nvls", "mlir_amo", _MLIR_DEV, "test_device_amo.py", env=_NVLS_ENV,
            env_default=_NVLS_DEFAULT),
    _script("numba_cuda_mlir_nvls", "mlir_ring_allreduce", _MLIR, ("test_ring_allreduce.py",),  # no -i there
            env=_NVLS_ENV, env_default=_NVLS_DEFAULT),
)
#: run_tests.sh's suites (but fmt, a yapf check of NVSHMEM4Py's sources, and all), in its order
SUITES = ("core", "numba", "numba_high_level_1", "numba_high_level_2", "numba_cuda_mlir",
          "numba_cuda_mlir_high_level_1", "numba_cuda_mlir_high_level_2", "cutedsl", "cutedsl_high_level_1",
          "cutedsl_high_level_2", "nvls", "numba_cuda_mlir_nvls")


@dataclass
class Result:
    run: Run
    status: str = "not run"   # passed | failed | xfail (failed, not counted) | timeout | not run | missing | no <module>
    #                           | skipped (a skip_if variable is 1)
    rc: int | None = None
    seconds: float = 0.0
    cases: dict = field(default_factory=dict)  # case -> (outcome, message)
    again: bool = False  # run a second time, alone, after an MPS fault of another job (mps_faulted)

    def counts(self) -> dict:
        out = {"passed": 0, "failed": 0, "skipped": 0, "error": 0, "hung": 0}
        for outcome, _ in self.cases.values():
            out[outcome] += 1
        return out


def command(run: Run, mpirun: list[str] | None = None, package: str = "alias") -> list[str]:
    """The run's ranks under our launcher (``python -m nvshmem_dsl.run --as-nvshmem4py``), or under
    ``mpirun`` (its command and flags; each rank ``python -m nvshmem_dsl.core.alias``), as run_tests.sh.
    ``package="nvshmem4py"``: NVSHMEM4Py itself, each rank a plain ``python`` under mpirun."""
    if package == "nvshmem4py":
        if mpirun is None:
            raise ValueError("NVSHMEM4Py's own ranks start under mpirun (our launcher runs them through the alias)")
        ranks = [*mpirun, "-n", str(run.nproc), sys.executable]
    elif mpirun is None:
        ranks = [sys.executable, "-m", "nvshmem_dsl.run", "--as-nvshmem4py", "-n", str(run.nproc)]
    else:
        ranks = [*mpirun, "-n", str(run.nproc), sys.executable, "-m", "nvshmem_dsl.core.alias"]
    return [*ranks, *run.argv, *(PYTEST_ARGS if run.is_pytest else ())]


def find_mpirun(choice: str) -> list[str] | None:
    """``--launcher``: "mpirun" (its command, flags included), "nvshmem_dsl" (None), or "auto": mpirun
    where one is installed. Each rank of our launcher is an MPI singleton, which Open MPI builds without
    ssh/rsh cannot start (its singleton's daemon refuses the rsh launcher: every file that starts MPI
    failed so on the GPU machine); mpirun starts ranks there, as run_tests.sh does."""
    if choice == "nvshmem_dsl":
        return None
    from jobs import mpirun

    found = mpirun()
    if found is None and choice == "mpirun":
        raise SystemExit("--launcher mpirun: no mpirun or mpiexec on PATH")
    return found


_RANK_ORDER = {"passed": 0, "skipped": 1, "error": 2, "failed": 3, "hung": 4}


def merge_case_logs(paths) -> dict:
    """{case: (outcome, message)} from the plugin's per-rank JSON lines: a case counts once, its worst rank."""
    cases: dict = {}
    for path in paths:
        seen: dict = {}
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or "case" not in rec or "phase" not in rec:
                continue
            case, phase = rec["case"], rec["phase"]
            if phase == "start":
                seen.setdefault(case, ("hung", "began and did not end before the run's timeout"))
                continue
            outcome = rec["outcome"]
            if outcome == "failed" and phase != "call":
                outcome = "error"
            old = seen.get(case)
            if old is None or old[0] == "hung" or _RANK_ORDER[outcome] > _RANK_ORDER[old[0]]:
                seen[case] = (outcome, rec.get("message", ""))
        for case, (outcome, message) in seen.items():
            old = cases.get(case)
            if old is None or _RANK_ORDER[outcome] > _RANK_ORDER[old[0]]:
                cases[case] = (outcome, message)
    return cases


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def execute(run: Run, tests: Path, out: Path, deadline: float, launcher: list[str] | None = None,
            gpus: int | None = None, package: str = "alias") -> Result:
    result = Result(run)
    if not (tests / run.file).is_file():
        result.status = "missing"
        return result
    off = [name for name in run.skip_if if os.environ.get(name) == "1"]
    if off:
        result.status = "skipped"  # as run_tests.sh: "Skipping ... collective tests on this target"
        result.cases = {f"{run.file}::<job>": ("skipped", f"{off[0]}=1")}
        return result
    absent = [m for m in run.needs if importlib.util.find_spec(m) is None]
    if absent:
        result.status = f"no {absent[0]}"  # e.g. the CuTe DSL not placed (device step cute-part1 + carry .dw/cute2)
        return result
    limit = min(run.timeout, deadline - time.monotonic())
    if limit < 15:
        return result
    case_log = out / "cases" / run.name
    case_log.parent.mkdir(parents=True, exist_ok=True)
    for old in case_log.parent.glob(f"{run.name}.rank*"):
        old.unlink()
    env = {**dict(run.env_default), **os.environ, **dict(run.env), "NV4PY_CASE_LOG": str(case_log)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), str(HERE), env.get("PYTHONPATH", "")) if p)
    if gpus is not None and gpus < run.nproc:
        env["NV4PY_SHARE_GPU"] = "1"  # their utils give a rank the GPU of its node-local rank: share them
    env.pop("NVSHMEM_BOOTSTRAP", None)
    if package == "nvshmem4py":
        env["NV4PY_USE_OUR_NVSHMEM"] = "1"  # the site hands it nvshmem_dsl's NVSHMEM (bench/_nv4py.py)
    if launcher is not None:  # mpirun
        from jobs import MPIRUN_ROOT_ENV

        env = {**MPIRUN_ROOT_ENV, **env}
    start = time.monotonic()
    with open(out / f"{run.name}.log", "w") as log:
        log.write(f"$ (cd {run.folder} && {' '.join(command(run, launcher, package))})  # timeout {limit:.0f} s\n")
        log.flush()
        proc = subprocess.Popen(command(run, launcher, package), cwd=tests / run.folder, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            result.rc = proc.wait(limit)
            result.status = "passed" if result.rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            _stop(proc)
            result.status = "timeout"
            log.write(f"\n[nvshmem4py_tests] timeout after {limit:.0f} s: process group ended\n")
    result.seconds = time.monotonic() - start
    if run.xfail and result.status == "failed":
        result.status = "xfail"
    if run.is_pytest:
        result.cases = merge_case_logs(sorted(case_log.parent.glob(f"{run.name}.rank*")))
        if result.status == "failed" and not any(o in ("failed", "error", "hung") for o, _ in result.cases.values()):
            result.cases[f"{run.file}::<job>"] = ("error", f"exit status {result.rc} with no failed case")
    else:
        outcome = {"passed": "passed", "failed": "failed", "xfail": "failed", "timeout": "hung"}[result.status]
        result.cases = {" ".join(run.argv): (outcome, "" if outcome == "passed" else f"see {run.name}.log")}
    return result


#: What a CUDA call answers while the MPS server recovers from a client's fatal fault: every job sharing the
#: GPU then fails, whatever it runs (a hung job ended at its timeout did that on 2026-12-04).
MPS_FAULT = "CUDA_ERROR_MPS_SERVER_NOT_READY"


def mps_faulted(result: Result, out: Path) -> bool:
    """Whether ``result`` did not pass because the MPS server was recovering (its log says so)."""
    log = out / f"{result.run.name}.log"
    return (result.status not in ("passed", "xfail") and log.is_file()
            and MPS_FAULT in log.read_text(errors="replace"))


def run_again_after_mps_faults(results: list[Result], tests: Path, out: Path, deadline: float, **kw) -> None:
    """Each run an MPS fault failed, once more, one at a time, once every other job has ended (the server
    recovers when its clients are gone), within the budget; the first log kept as ``<name>.mps-fault.log``."""
    for i, r in enumerate(results):
        if mps_faulted(r, out):
            (out / f"{r.run.name}.log").replace(out / f"{r.run.name}.mps-fault.log")
            results[i] = execute(r.run, tests, out, deadline, **kw)
            results[i].again = True
            c = results[i].counts()
            print(f"{r.run.name} (again, after an MPS fault): {results[i].status} ({results[i].seconds:.0f} s) "
                  f"pass {c['passed']} fail {c['failed']} skip {c['skipped']} error {c['error']} hung {c['hung']}",
                  flush=True)


def write_junit(result: Result, path: Path) -> None:
    counts = result.counts()
    lines = [f'<testsuite name={quoteattr(result.run.name)} tests="{len(result.cases)}" '
             f'failures="{counts["failed"] + counts["hung"]}" errors="{counts["error"]}" '
             f'skipped="{counts["skipped"]}" time="{result.seconds:.1f}">']
    for case, (outcome, message) in sorted(result.cases.items()):
        lines.append(f'  <testcase classname={quoteattr(result.run.file)} name={quoteattr(case)}>')
        tag = {"failed": "failure", "hung": "failure", "error": "error", "skipped": "skipped"}.get(outcome)
        if tag:
            lines.append(f'    <{tag} message={quoteattr(outcome)}>{escape(message)}</{tag}>')
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def table(results) -> str:
    sw = max([21, *(len(r.run.suite) for r in results)])  # columns as wide as the longest suite / file
    fw = max([34, *(len(r.run.file) for r in results)])
    head = (f"{'suite':<{sw}} {'run':<24} {'file':<{fw}} {'pass':>4} {'fail':>4} {'skip':>4} {'err':>4} {'hung':>4}"
            "  status     secs")
    rows = [head, "-" * len(head)]
    total = dict.fromkeys(("passed", "failed", "skipped", "error", "hung"), 0)
    for r in results:
        c = r.counts()
        for k in total:
            total[k] += c[k]
        rows.append(f"{r.run.suite:<{sw}} {r.run.name:<24} {r.run.file:<{fw}} {c['passed']:>4} {c['failed']:>4} "
                    f"{c['skipped']:>4} {c['error']:>4} {c['hung']:>4}  {r.status:<9} {r.seconds:5.0f}"
                    + ("  (again: MPS fault)" if r.again else ""))
    rows.append("-" * len(head))
    rows.append(f"{'total':<{sw + fw + 26}} {total['passed']:>4} {total['failed']:>4} {total['skipped']:>4} "
                f"{total['error']:>4} {total['hung']:>4}  cases {sum(total.values())}")
    return "\n".join(rows)


def select(suites: str | None, only: str | None) -> list[Run]:
    runs = list(RUNS)
    if suites:
        wanted = [s.strip() for s in suites.split(",") if s.strip()]
        unknown = sorted(set(wanted) - set(SUITES))
        if unknown:
            raise SystemExit(f"--suites: unknown {', '.join(unknown)} (known: {', '.join(SUITES)})")
        runs = [r for r in runs if set(r.suites) & set(wanted)]
    if only:
        names = [s.strip() for s in only.split(",") if s.strip()]
        unknown = sorted(set(names) - {r.name for r in RUNS})
        if unknown:
            raise SystemExit(f"--only: unknown run {', '.join(unknown)} (see --list)")
        runs = [r for r in runs if r.name in names]
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=Path, default=DEFAULT_TESTS, help="NVSHMEM4Py's nvshmem4py/test (default .dw/nv4py-tests)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/nv4py-tests-out"))
    ap.add_argument("--suites", help=f"comma-separated, of {', '.join(SUITES)} (default all)")
    ap.add_argument("--only", help="comma-separated run names (--list shows them)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run (default 480)")
    ap.add_argument("--together", type=int, default=1, help="jobs at once (default 1)")
    ap.add_argument("--list", action="store_true", help="print the runs and their commands, run nothing")
    ap.add_argument("--launcher", choices=("auto", "mpirun", "nvshmem_dsl"), default="auto",
                    help="what starts the ranks: mpirun, our launcher, or auto: mpirun where installed")
    ap.add_argument("--package", choices=("alias", "nvshmem4py"), default="alias",
                    help="what `import nvshmem` gives the ranks: nvshmem_dsl.core through the alias (default), or "
                         "NVSHMEM4Py itself (installed; on nvshmem_dsl's NVSHMEM), for the cases it passes here")
    args = ap.parse_args(argv)
    if args.budget <= 0:
        ap.error("--budget must be positive")
    if args.together < 1:
        ap.error("--together must be at least 1")
    runs = select(args.suites, args.only)
    launcher = find_mpirun(args.launcher)
    if args.package == "nvshmem4py" and launcher is None:
        ap.error("--package nvshmem4py: its ranks start under mpirun (none found, or --launcher nvshmem_dsl)")
    if args.list:
        for r in runs:
            print(f"{r.suite:<28} {r.name:<24} timeout {r.timeout:>3}  (cd {r.folder} && {' '.join(command(r, launcher, args.package))})")
        return 0
    if not args.tests.is_dir():
        print(f"nvshmem4py_tests: skipped: no {args.tests} (NVSHMEM4Py's nvshmem4py/test, placed by hand, "
              "never in git; carry .dw/nv4py-tests)")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget
    with concurrent.futures.ThreadPoolExecutor(args.together) as pool:
        from jobs import gpu_count

        gpus = gpu_count()
        futures = [pool.submit(execute, r, args.tests, args.out, deadline, launcher, gpus, args.package) for r in runs]
        results = []
        for f in futures:
            results.append(f.result())
            r = results[-1]
            c = r.counts()
            print(f"{r.run.name}: {r.status} ({r.seconds:.0f} s) pass {c['passed']} fail {c['failed']} "
                  f"skip {c['skipped']} error {c['error']} hung {c['hung']}", flush=True)
        run_again_after_mps_faults(results, args.tests, args.out, deadline, launcher=launcher, gpus=gpus,
                                   package=args.package)
    for r in results:
        write_junit(r, args.out / "junit" / f"{r.run.name}.xml")
    (args.out / "summary.json").write_text(json.dumps([
        {"suite": r.run.suite, "run": r.run.name, "file": r.run.file, "status": r.status, "rc": r.rc,
         "seconds": round(r.seconds, 1), "again_after_mps_fault": r.again, **r.counts(),
         "not_passed": {k: v[0] for k, v in sorted(r.cases.items()) if v[0] != "passed"}} for r in results], indent=1))
    print(table(results))
    bad = [r for r in results if r.status not in ("passed", "xfail", "missing", "skipped")
           and not r.status.startswith("no ")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
