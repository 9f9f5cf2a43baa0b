"""What the GPU tests that start their own jobs share (tests/gpu/test_core_gpu.py,
tests/gpu/test_faults_gpu.py): whether this process is itself a PE of a launch, how many GPUs it
sees, how to call mpirun."""
from __future__ import annotations

import os
import shutil
import subprocess

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


def mpirun() -> list[str] | None:
    """``mpirun`` (or ``mpiexec``), with ``--oversubscribe`` for Open MPI; None when there is none."""
    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if exe is None:
        return None
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return [exe, *(["--oversubscribe"] if "Open MPI" in version or "OpenRTE" in version else [])]
