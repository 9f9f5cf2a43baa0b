"""How a process learns its rank and gets the NVSHMEM unique id from rank 0.

This module never calls the NVSHMEM C library: the caller hands in ``make_uid``,
a function returning the unique-id bytes (``nvshmemx_get_uniqueid``), which only
rank 0 calls.  The modes, tried in this order:

``explicit``  the caller passes ``rank``, ``nranks`` (and ``uid`` when nranks > 1).
``nvshmem``   ``NVSHMEM_BOOTSTRAP`` names one of NVSHMEM's own bootstraps (``PMI``,
              ``PMI2``, ``PMIX``, ``MPI``, ``SHMEM``, ``plugin``): NVSHMEM itself finds the
              ranks (e.g. ``srun --mpi=pmix`` with ``NVSHMEM_BOOTSTRAP=PMIX``); no id is
              exchanged here, and the GPU comes from the launcher's local rank
              (``SLURM_LOCALID``, ``OMPI_COMM_WORLD_LOCAL_RANK``, ``MPI_LOCALRANKID``,
              ``LOCAL_RANK`` ...).
``mpi``       a communicator is passed, or the process was started by mpirun /
              mpiexec / srun --mpi (``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``,
              ``PMIX_RANK``, ``MV2_COMM_WORLD_SIZE``...) and mpi4py is installed.
              mpi4py is imported only then.  Rank 0 sends the id to the others
              with non-blocking point-to-point messages, so a missing rank gives
              a timeout naming it rather than a hang.
``torchrun``  ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``.
``launcher``  ``NVSHMEM_DSL_RANK``, ``NVSHMEM_DSL_NRANKS``, ``NVSHMEM_DSL_LOCAL_RANK``
              set by ``python -m nvshmem_dsl.run``.
``single``    none of the above: rank 0 of 1.

``NVSHMEM_DSL_BOOTSTRAP=<mode>`` forces a mode (arguments to ``bootstrap`` still win).

In the ``torchrun`` and ``launcher`` modes, rank 0 serves the id over a small TCP store
(:mod:`nvshmem_dsl.host._uid_store`: its address, its secret, its checks of the other end).
The environment variables of every mode are named in :mod:`nvshmem_dsl.host._launch_env`.

Every wait is bounded by ``NVSHMEM_DSL_INIT_TIMEOUT`` seconds (default 60).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import NvshmemInitError
from ._launch_env import (
    _MPI_SIZE_VARS, ENV_LOCAL_RANK, ENV_MODE, ENV_NRANKS, ENV_NVSHMEM_BOOTSTRAP, ENV_RANK, ENV_STORE_HOST,
    ENV_STORE_PORT, ENV_TIMEOUT, LOCAL_RANK_VARS, MPI_ENV_VARS, init_timeout,
)
from ._uid_store import _MAX_UID, _secret, fetch_uid, serve_uid

__all__ = [
    "Bootstrap",
    "bootstrap",
    "detect_mode",
    "select_device",
    "init_timeout",
    "serve_uid",
    "fetch_uid",
    "MODES",
]

MODES = ("explicit", "nvshmem", "mpi", "torchrun", "launcher", "single")


@dataclass(frozen=True)
class Bootstrap:
    """What init needs to know about this process's place in the job."""

    mode: str
    rank: int
    nranks: int
    local_rank: int
    uid: bytes | None = field(default=None, repr=False)  #: None when not exchanged (MPI native bootstrap)
    mpi_comm: Any = None  #: the mpi4py communicator in mpi mode

    def device(self, device_count: int) -> int:
        """The CUDA device this rank should use: ``local_rank % device_count``."""
        return select_device(self.local_rank, device_count)


# --------------------------------------------------------------------------- small helpers


def select_device(local_rank: int, device_count: int) -> int:
    """``local_rank % device_count``; NvshmemInitError when there is no device."""
    if device_count < 1:
        raise NvshmemInitError("no CUDA device is visible to this process (check CUDA_VISIBLE_DEVICES)")
    if local_rank < 0:
        raise NvshmemInitError(f"invalid local rank {local_rank}")
    return local_rank % device_count


def _int_env(env: Mapping[str, str], name: str, mode: str) -> int:
    text = env.get(name)
    if text is None:
        raise NvshmemInitError(f"{mode} mode: environment variable {name} is not set")
    try:
        return int(text)
    except ValueError:
        raise NvshmemInitError(f"{mode} mode: {name}={text!r} is not an integer") from None


def _check_rank(mode: str, rank: int, nranks: int) -> None:
    if nranks < 1 or not 0 <= rank < nranks:
        raise NvshmemInitError(f"{mode} mode: rank {rank} is not within 0..{nranks - 1} (nranks={nranks})")


def _mpi_env_size(env: Mapping[str, str]) -> int | None:
    for name in _MPI_SIZE_VARS:
        if env.get(name, "").isdigit():
            return int(env[name])
    return None


def _mpi4py_available() -> bool:
    try:
        return importlib.util.find_spec("mpi4py") is not None
    except (ImportError, ValueError):
        return False


# --------------------------------------------------------------------------- mode detection


def detect_mode(
    env: Mapping[str, str] | None = None,
    *,
    explicit: bool = False,
    comm: Any = None,
) -> str:
    """The bootstrap mode for this process; imports nothing (mpi4py is only looked up).

    ``explicit``: the caller passed rank/nranks/uid; ``comm``: an mpi4py communicator.
    """
    env = os.environ if env is None else env
    if explicit:
        return "explicit"
    if comm is not None:
        return "mpi"
    forced = env.get(ENV_MODE, "").strip().lower()
    if forced:
        if forced not in MODES:
            raise NvshmemInitError(f"{ENV_MODE}={forced!r}; expected one of {', '.join(MODES)}")
        return forced
    if env.get(ENV_NVSHMEM_BOOTSTRAP, "").strip().upper() not in ("", "UID"):
        return "nvshmem"
    under_mpi = any(name in env for name in MPI_ENV_VARS)
    if under_mpi and _mpi4py_available():
        return "mpi"
    if "RANK" in env and "WORLD_SIZE" in env:
        return "torchrun"
    if ENV_RANK in env and ENV_NRANKS in env:
        return "launcher"
    size = _mpi_env_size(env) if under_mpi else None
    if size is not None and size > 1:
        raise NvshmemInitError(
            f"this process was started by an MPI launcher with {size} ranks, but mpi4py is not "
            "installed, so the ranks cannot exchange the NVSHMEM unique id. "
            "Install it (`pip install nvshmem-dsl[mpi]`) or launch with `python -m nvshmem_dsl.run`."
        )
    return "single"


# --------------------------------------------------------------------------- entry point


def bootstrap(
    make_uid: Callable[[], bytes] | None = None,
    *,
    uid: bytes | None = None,
    rank: int | None = None,
    nranks: int | None = None,
    local_rank: int | None = None,
    comm: Any = None,
    mode: str | None = None,
    timeout: float | None = None,
    exchange_uid: bool = True,
    env: Mapping[str, str] | None = None,
) -> Bootstrap:
    """Find this process's rank, and the unique id made by rank 0's ``make_uid``.

    ``uid``/``rank``/``nranks``/``local_rank`` select explicit mode; ``comm``
    (an mpi4py communicator) selects MPI mode; ``mode`` forces a mode.  With
    ``exchange_uid=False`` (or no ``make_uid``) in MPI mode no id is exchanged and
    ``Bootstrap.uid`` is None: the caller can then use NVSHMEM's MPI bootstrap
    with ``Bootstrap.mpi_comm``.  Raises NvshmemInitError on every failure.
    """
    env = os.environ if env is None else env
    explicit = uid is not None or rank is not None or nranks is not None
    if mode is None:
        mode = detect_mode(env, explicit=explicit, comm=comm)
    elif mode not in MODES:
        raise NvshmemInitError(f"unknown bootstrap mode {mode!r}; expected one of {', '.join(MODES)}")
    if timeout is None:
        timeout = init_timeout(env)

    if mode == "explicit":
        return _explicit(make_uid, uid, rank, nranks, local_rank)
    if mode == "mpi":
        return _mpi(make_uid if exchange_uid else None, comm, timeout, env)
    if mode == "single":
        return Bootstrap("single", 0, 1, 0, _call_make_uid(make_uid, "single") if make_uid else None)
    if mode == "nvshmem":
        # rank and size are NVSHMEM's to find (-1 until init); only the GPU is chosen here
        return Bootstrap("nvshmem", -1, -1, _launcher_local_rank(env, local_rank), None)

    if mode == "torchrun":
        r = _int_env(env, "RANK", mode)
        n = _int_env(env, "WORLD_SIZE", mode)
        lr = _int_env(env, "LOCAL_RANK", mode) if "LOCAL_RANK" in env else r
        host_var, port_var = "MASTER_ADDR", "MASTER_PORT"
    else:  # launcher
        r = _int_env(env, ENV_RANK, mode)
        n = _int_env(env, ENV_NRANKS, mode)
        lr = _int_env(env, ENV_LOCAL_RANK, mode) if ENV_LOCAL_RANK in env else r
        host_var, port_var = ENV_STORE_HOST, ENV_STORE_PORT
    _check_rank(mode, r, n)
    if n == 1:
        return Bootstrap(mode, r, n, lr, _call_make_uid(make_uid, mode) if make_uid else None)
    if make_uid is None and r == 0:
        raise NvshmemInitError(f"{mode} mode: rank 0 needs make_uid to create the unique id")

    host = env.get(ENV_STORE_HOST)
    if not host:  # torchrun with every rank on this node: out of other hosts' reach
        host = _LOOPBACK if mode == "torchrun" and _one_node(env, n) else env.get(host_var)
    if not host:
        raise NvshmemInitError(f"{mode} mode: {host_var} is not set, so rank {r} cannot find rank 0")
    port = _store_port(env, mode, port_var)
    key = _secret(env, mode, host, port)
    if r == 0:
        the_uid = _call_make_uid(make_uid, mode)
        serve_uid(the_uid, host, port, nranks=n, key=key, timeout=timeout, mode=mode)
    else:
        the_uid = fetch_uid(host, port, rank=r, nranks=n, key=key, timeout=timeout, mode=mode)
    return Bootstrap(mode, r, n, lr, the_uid)


#: Where rank 0 serves the id under torchrun when all ranks are on its node: out of other hosts' reach.
_LOOPBACK = "127.0.0.1"


def _one_node(env: Mapping[str, str], nranks: int) -> bool:
    """Whether torchrun put all ``nranks`` ranks on this node (its ``LOCAL_WORLD_SIZE``)."""
    return env.get("LOCAL_WORLD_SIZE", "").strip() == str(nranks)


def _launcher_local_rank(env: Mapping[str, str], given: int | None) -> int:
    if given is not None:
        return int(given)
    for name in LOCAL_RANK_VARS:
        if name in env:
            return _int_env(env, name, "nvshmem")
    return 0


def _call_make_uid(make_uid: Callable[[], bytes] | None, mode: str) -> bytes:
    if make_uid is None:
        raise NvshmemInitError(f"{mode} mode: no make_uid given to create the unique id")
    value = make_uid()
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise NvshmemInitError(f"make_uid returned {type(value).__name__}, expected bytes")
    return bytes(value)


def _explicit(make_uid, uid, rank, nranks, local_rank) -> Bootstrap:
    if rank is None or nranks is None:
        raise NvshmemInitError("explicit mode: pass both rank= and nranks= (and uid= when nranks > 1)")
    _check_rank("explicit", rank, nranks)
    if uid is None:
        if nranks > 1:
            raise NvshmemInitError(
                "explicit mode: with nranks > 1 every rank needs uid= (the bytes rank 0 got from "
                "nvshmemx_get_uniqueid, shared by your own means)"
            )
        uid = _call_make_uid(make_uid, "explicit") if make_uid else None
    elif not isinstance(uid, (bytes, bytearray, memoryview)):
        raise NvshmemInitError(f"explicit mode: uid must be bytes, not {type(uid).__name__}")
    return Bootstrap(
        "explicit", rank, nranks, rank if local_rank is None else local_rank, None if uid is None else bytes(uid)
    )


def _store_port(env: Mapping[str, str], mode: str, port_var: str) -> int:
    if env.get(ENV_STORE_PORT):
        name, offset = ENV_STORE_PORT, 0
    else:
        name, offset = port_var, (1 if mode == "torchrun" else 0)
    port = _int_env(env, name, mode) + offset
    if not 0 < port < 65536:
        raise NvshmemInitError(f"{mode} mode: store port {port} (from {name}) is out of range")
    return port


# --------------------------------------------------------------------------- MPI

_TAG_HELLO = 0x4E56  # rank r -> 0: hostname
_TAG_REPLY = 0x4E57  # 0 -> rank r: local rank + uid
_HOST_BYTES = 256


def _mpi(make_uid, comm, timeout: float, env: Mapping[str, str]) -> Bootstrap:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise NvshmemInitError(
            f"mpi mode: mpi4py cannot be imported ({exc}); `pip install nvshmem-dsl[mpi]`"
        ) from exc
    if comm is None:
        comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size == 1:
        uid = _call_make_uid(make_uid, "mpi") if make_uid else None
        return Bootstrap("mpi", 0, 1, 0, uid, comm)

    deadline = time.monotonic() + timeout
    host = socket.gethostname().encode()[: _HOST_BYTES - 1].ljust(_HOST_BYTES, b"\0")
    if rank == 0:
        hosts = [host] + [bytearray(_HOST_BYTES) for _ in range(1, size)]
        reqs = [comm.Irecv([hosts[r], MPI.BYTE], source=r, tag=_TAG_HELLO) for r in range(1, size)]
        _mpi_wait(reqs, deadline, lambda pending: (
            f"mpi mode: rank 0 waited {timeout:g} s for rank(s) "
            f"{', '.join(str(i + 1) for i in pending)} of {size}; they never reached nvshmem_dsl init "
            f"(raise {ENV_TIMEOUT} if they are just slow)"
        ))
        uid = _call_make_uid(make_uid, "mpi") if make_uid else b""
        if len(uid) > _MAX_UID:
            raise NvshmemInitError(f"mpi mode: unique id of {len(uid)} bytes is too long")
        seen: dict[bytes, int] = {}
        local_ranks = []
        for h in hosts:
            h = bytes(h)
            local_ranks.append(seen.get(h, 0))
            seen[h] = seen.get(h, 0) + 1
        replies = [struct.pack("!II", local_ranks[r], len(uid)) + uid for r in range(size)]
        reqs = [comm.Isend([replies[r], MPI.BYTE], dest=r, tag=_TAG_REPLY) for r in range(1, size)]
        _mpi_wait(reqs, deadline, lambda pending: (
            f"mpi mode: rank 0 could not deliver the unique id to rank(s) "
            f"{', '.join(str(i + 1) for i in pending)} within {timeout:g} s"
        ))
        return Bootstrap("mpi", 0, size, 0, uid if make_uid else None, comm)

    reply = bytearray(8 + _MAX_UID)
    reqs = [
        comm.Isend([host, MPI.BYTE], dest=0, tag=_TAG_HELLO),
        comm.Irecv([reply, MPI.BYTE], source=0, tag=_TAG_REPLY),
    ]
    _mpi_wait(reqs, deadline, lambda pending: (
        f"mpi mode: rank {rank} of {size} got no unique id from rank 0 within {timeout:g} s; "
        f"rank 0 never reached nvshmem_dsl init (raise {ENV_TIMEOUT} if it is just slow)"
    ))
    local_rank, length = struct.unpack_from("!II", reply)
    uid = bytes(reply[8 : 8 + length]) if length else None  # length 0: rank 0 exchanged no id
    return Bootstrap("mpi", rank, size, local_rank, uid, comm)


def _mpi_wait(reqs: list, deadline: float, message: Callable[[list[int]], str]) -> None:
    """Poll non-blocking requests until all complete; NvshmemInitError at the deadline."""
    done = [False] * len(reqs)
    pause = 0.0005
    while True:
        for i, req in enumerate(reqs):
            if not done[i] and req.Test():
                done[i] = True
        if all(done):
            return
        if time.monotonic() > deadline:
            pending = [i for i, d in enumerate(done) if not d]
            for i in pending:
                try:
                    reqs[i].Cancel()
                except Exception:
                    pass
            raise NvshmemInitError(message(pending))
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
