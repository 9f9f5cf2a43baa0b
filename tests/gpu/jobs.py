"""What the GPU tests that start their own jobs share (tests/gpu/test_core_gpu.py,
tests/gpu/test_faults_gpu.py, tests/gpu/test_cold_pes_gpu.py): whether this process is itself a PE of
a launch, how many GPUs it sees, how to call mpirun, the MPS daemon and the environment of such jobs."""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
from pathlib import Path

#: The checkout, put on the jobs' PYTHONPATH.
ROOT = Path(__file__).resolve().parents[2]

#: Variables a launcher sets to the job's size (ours, torchrun, Open MPI, MPICH).
SIZE_VARS = ("NVSHMEM_DSL_NRANKS", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def launched_as_pe() -> bool:
    """Whether this process is one PE of a multi-PE launch (such tests then skip)."""
    return any(os.environ.get(name, "1") not in ("", "1") for name in SIZE_VARS)


def gpu_count() -> int:
    try:
        from cuda.core import system

        return system.get_num_devices() if hasattr(system, "get_num_devices") else system.num_devices
    except Exception:
        return 0


#: What Open MPI needs to start ranks as root (as in containers); MPICH ignores it.
MPIRUN_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mpirun() -> list[str] | None:
    """``mpirun`` (or ``mpiexec``), with ``--oversubscribe --bind-to none`` for Open MPI; None when there
    is none.  Open MPI binds each rank to a core, counting from core 0 in each job: jobs run side by side
    then share cores 0 and 1 (NVSHMEM4Py's tests, 4 jobs at once on the H200: every rank on 2 cores)."""
    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if exe is None:
        return None
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    open_mpi = "Open MPI" in version or "OpenRTE" in version
    return [exe, *(["--oversubscribe", "--bind-to", "none"] if open_mpi else [])]


@contextlib.contextmanager
def mps_for_jobs(pes: int, test_file: str, *, at_least: int = 1):
    """An MPS daemon (tests/gpu/mps.py) for a test that starts its own jobs of up to ``pes`` PEs: at
    least ``at_least`` PEs to a GPU's share. Skips when this process is a PE of a launch (the test
    must run in one process) or sees no GPU."""
    import pytest
    from mps import MpsDaemon

    if launched_as_pe():
        pytest.skip(f"launches its own jobs: run {test_file} in one process")
    gpus = gpu_count()
    if gpus < 1:
        pytest.skip("needs a GPU")
    with MpsDaemon(max(at_least, math.ceil(pes / gpus))) as daemon:
        yield daemon


def job_env(mps) -> dict[str, str]:
    """The environment of a job such a test starts: this process's without an outer launch's rank
    variables, the MPS daemon's, the checkout on PYTHONPATH, unbuffered output, NVLink multicast off."""
    from nvshmem_dsl.run import RANK_VARS

    env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}  # not a rank of an outer launch
    env.update(mps.env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(PYTHONUNBUFFERED="1", NVSHMEM_DISABLE_NVLS="1")
    return env
