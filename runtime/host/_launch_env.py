"""What launchers put in a process's environment, as the bootstrap reads it: the variables'
names (NVSHMEM's, MPI launchers', torchrun's, ``python -m nvshmem_dsl.run``'s) and the timeout.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import NvshmemInitError

#: NVSHMEM's own bootstrap selector; any value but UID (ours) hands the bootstrap to NVSHMEM.
ENV_NVSHMEM_BOOTSTRAP = "NVSHMEM_BOOTSTRAP"
#: Where launchers put the rank's index on its node, first found wins.
LOCAL_RANK_VARS = ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                   "PMIX_LOCAL_RANK", "PALS_LOCAL_RANKID", "LOCAL_RANK")

ENV_MODE = "NVSHMEM_DSL_BOOTSTRAP"
ENV_TIMEOUT = "NVSHMEM_DSL_INIT_TIMEOUT"
ENV_SECRET = "NVSHMEM_DSL_SECRET"
ENV_RANK = "NVSHMEM_DSL_RANK"
ENV_NRANKS = "NVSHMEM_DSL_NRANKS"
ENV_LOCAL_RANK = "NVSHMEM_DSL_LOCAL_RANK"
ENV_STORE_HOST = "NVSHMEM_DSL_STORE_HOST"
ENV_STORE_PORT = "NVSHMEM_DSL_STORE_PORT"
#: The write end of a pipe on which a PE tells ``python -m nvshmem_dsl.run`` it has initialised and
#: finalized (:func:`nvshmem_dsl.host._exit.tell_launcher`).
ENV_LAUNCHER_FD = "NVSHMEM_DSL_LAUNCHER_FD"
DEFAULT_TIMEOUT = 60.0

#: Variables set by MPI launchers (Open MPI, MPICH/Hydra, Intel MPI, MVAPICH, PMIx/srun).
MPI_ENV_VARS = (
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "PMI_SIZE",
    "PMI_RANK",
    "PMIX_RANK",
    "PMIX_NAMESPACE",
    "MV2_COMM_WORLD_SIZE",
    "MPI_LOCALNRANKS",
)
_MPI_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")
#: Variables set by torchrun (and other torch.distributed launchers).
TORCHRUN_ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def seconds_setting(env: Mapping[str, str], name: str, default: float, *, zero: bool = False) -> float:
    """The number of seconds in ``env[name]`` (``default`` when unset or empty); ValueError naming the
    variable unless it is a number > 0 (>= 0 with ``zero``)."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 if zero else value > 0):
        raise ValueError(f"{name}={text!r} is not a {'number of seconds >= 0' if zero else 'positive number of seconds'}")
    return value


def init_timeout(env: Mapping[str, str] | None = None) -> float:
    """Seconds to wait for the other ranks: ``$NVSHMEM_DSL_INIT_TIMEOUT`` or 60."""
    try:
        return seconds_setting(os.environ if env is None else env, ENV_TIMEOUT, DEFAULT_TIMEOUT)
    except ValueError as exc:
        raise NvshmemInitError(str(exc)) from None
