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

In the ``torchrun`` and ``launcher`` modes, rank 0 serves the id over a small TCP
store that binds only ``NVSHMEM_DSL_STORE_HOST:NVSHMEM_DSL_STORE_PORT`` (under
torchrun these default to ``MASTER_ADDR`` and ``MASTER_PORT + 1``: torchrun's own
agent store already listens on ``MASTER_PORT``; the host is ``127.0.0.1`` when all
ranks are on this node, ``LOCAL_WORLD_SIZE == WORLD_SIZE``).  A client must answer an HMAC
challenge keyed by ``NVSHMEM_DSL_SECRET`` and rank 0 proves it knows the secret
too; the id travels encrypted with a key stream derived from the secret and both
nonces; nvshmem_dsl.run always sets one.  No secret can be derived from what torchrun
gives its workers (docs/troubleshooting.rst says why).  Without one, each end of a
connection between two processes of this host checks that the other end is a process of
its own user (:func:`_socket_owner`: the kernel's table of TCP sockets), so that another
user's process on the node can neither fetch the id nor serve a forged one; **a process
on another host (or in another network namespace) that reaches the port while rank 0
waits can still read the id**, and a warning says so once (:func:`_secret`).  The id is
never written to a file.

Every wait is bounded by ``NVSHMEM_DSL_INIT_TIMEOUT`` seconds (default 60).
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import ipaddress
import logging
import os
import secrets
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import NvshmemInitError

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

_log = logging.getLogger(__name__)

MODES = ("explicit", "nvshmem", "mpi", "torchrun", "launcher", "single")

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


_warned_unauthenticated = False


def _secret(env: Mapping[str, str], mode: str, host: str, port: int) -> bytes:
    """``$NVSHMEM_DSL_SECRET``, the key of the exchange (empty: none).  Without it, a warning
    (once a process) where a process that is not one of the job's could get the id anyway
    (:func:`_exposure`)."""
    global _warned_unauthenticated
    secret = env.get(ENV_SECRET, "")
    if not secret and not _warned_unauthenticated:
        exposure = _exposure(host)
        if exposure:
            _warned_unauthenticated = True
            _log.warning(
                "%s mode: %s is not set, and %s: a process that is not one of this job's and reaches "
                "%s:%d while rank 0 waits can read the NVSHMEM unique id and join the job, or hand the "
                "ranks a forged one. Give every rank the same random per-job secret (export %s=$(python "
                "-c 'import secrets; print(secrets.token_hex(32))') before starting the job; "
                "python -m nvshmem_dsl.run does this for you; see docs/troubleshooting.rst).",
                mode, ENV_SECRET, exposure, host, port, ENV_SECRET,
            )
    return secret.encode()


def _exposure(host: str) -> str | None:
    """Who, other than processes of this user on this host, could talk to a store on ``host``
    without a secret (a phrase for the warning), or None: nobody, where ``host`` is a loopback
    address (no other host reaches it) and the other end of each connection can be checked
    (:func:`_peers_checked`)."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except (socket.gaierror, UnicodeError):
        addresses = set()

    def loopback(address: str) -> bool:
        try:
            return ipaddress.ip_address(address.split("%")[0]).is_loopback
        except ValueError:
            return False

    if not addresses or not all(loopback(a) for a in addresses):
        return f"{host} can be reached from other hosts"
    if not _peers_checked():
        return "this system does not show whose process is at the other end of a connection"
    return None


# --------------------------------------------------------------------------- MPI

_TAG_HELLO = 0x4E56  # rank r -> 0: hostname
_TAG_REPLY = 0x4E57  # 0 -> rank r: local rank + uid
_HOST_BYTES = 256
_MAX_UID = 4096


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


# --------------------------------------------------------------------------- TCP store
#
# rank 0 -> client : MAGIC, server nonce (32)
# client -> rank 0 : client nonce (32), rank, nranks (2 x u32), HMAC("C" | nonces | rank, nranks)
# rank 0 -> client : status (1); if 0: length (u32), uid XOR keystream, HMAC("S" | nonces | ... | ciphertext)
# client -> rank 0 : ACK
# The key is NVSHMEM_DSL_SECRET (empty when unset: integrity only, no secrecy).

_MAGIC = b"NVDSLid1"
_NONCE = 32
_MAC = 32
_ACK = b"\x06"
_OK, _BAD_AUTH, _BAD_NRANKS, _BAD_RANK, _OTHER_USER = 0, 1, 2, 3, 4
_STATUS_TEXT = {
    _BAD_AUTH: f"rank 0 rejected this rank's credentials: {ENV_SECRET} differs between the ranks",
    _BAD_NRANKS: "rank 0 runs with a different number of ranks",
    _BAD_RANK: "rank 0 says this rank number is out of range",
    _OTHER_USER: (f"rank 0 runs as another user, and without {ENV_SECRET} it serves processes of its own "
                  f"user only; run every rank as one user, or give them all the same {ENV_SECRET}"),
}


class _Rejected(Exception):
    pass


def _mac(key: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, label + b"".join(parts), hashlib.sha256).digest()


def _keystream_xor(key: bytes, nonces: bytes, data: bytes) -> bytes:
    stream = b"".join(
        _mac(key, b"K", nonces, struct.pack("!I", i)) for i in range((len(data) + _MAC - 1) // _MAC)
    )
    return bytes(a ^ b for a, b in zip(data, stream))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        buf += chunk
    return bytes(buf)


def _listen(host: str, port: int, nranks: int, mode: str) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise NvshmemInitError(f"{mode} mode: rank 0 cannot resolve store host {host!r}: {exc}") from None
    last: OSError | None = None
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(max(16, nranks))
            sock.settimeout(0.1)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise NvshmemInitError(
        f"{mode} mode: rank 0 cannot listen on {host}:{port} ({last}); that address must belong to "
        f"rank 0's host and the port must be free (choose one with {ENV_STORE_PORT})"
    )


def serve_uid(
    uid: bytes,
    host: str,
    port: int,
    *,
    nranks: int,
    key: bytes,
    timeout: float,
    mode: str = "launcher",
) -> None:
    """Rank 0: hand ``uid`` to ranks 1..nranks-1 over ``host:port``; return when all have it."""
    deadline = time.monotonic() + timeout
    listener = _listen(host, port, nranks, mode)
    served: set[int] = set()
    lock = threading.Lock()
    workers: list[threading.Thread] = []

    def handle(conn: socket.socket, peer) -> None:
        try:
            conn.settimeout(max(0.1, min(10.0, deadline - time.monotonic())))
            # without a secret: a client that is another user's process on this host is refused
            owner = None if key else _socket_owner(conn.getsockname(), conn.getpeername())
            snonce = secrets.token_bytes(_NONCE)
            conn.sendall(_MAGIC + snonce)
            hello = _recv_exact(conn, _NONCE + 8 + _MAC)
            cnonce, ranks, mac = hello[:_NONCE], hello[_NONCE : _NONCE + 8], hello[_NONCE + 8 :]
            rank, their_nranks = struct.unpack("!II", ranks)
            if owner is not None and owner != _uid():
                _log.warning("%s mode: refused a connection from %s: a process of user id %d, not this "
                             "job's (%d)", mode, peer, owner, _uid())
                conn.sendall(bytes([_OTHER_USER]))
                return
            if not hmac.compare_digest(mac, _mac(key, b"C", snonce, cnonce, ranks)):
                _log.warning("%s mode: rejected a connection from %s: wrong secret", mode, peer)
                conn.sendall(bytes([_BAD_AUTH]))
                return
            if their_nranks != nranks:
                conn.sendall(bytes([_BAD_NRANKS]))
                return
            if not 0 < rank < nranks:
                conn.sendall(bytes([_BAD_RANK]))
                return
            nonces = snonce + cnonce
            body = struct.pack("!I", len(uid)) + _keystream_xor(key, nonces, uid)
            conn.sendall(bytes([_OK]) + body + _mac(key, b"S", nonces, ranks, body))
            if _recv_exact(conn, 1) == _ACK:
                with lock:
                    served.add(rank)
        except (OSError, ConnectionError) as exc:
            _log.debug("%s mode: store connection from %s failed: %s", mode, peer, exc)
        finally:
            conn.close()

    try:
        while True:
            with lock:
                if len(served) == nranks - 1:
                    return
            if time.monotonic() > deadline:
                with lock:
                    missing = [r for r in range(1, nranks) if r not in served]
                raise NvshmemInitError(
                    f"{mode} mode: rank 0 waited {timeout:g} s at {host}:{port} for rank(s) "
                    f"{', '.join(map(str, missing))} of {nranks} to fetch the unique id; they never arrived "
                    f"(did they start? same {ENV_SECRET}? raise {ENV_TIMEOUT} if they are just slow)"
                )
            try:
                conn, peer = listener.accept()
            except (socket.timeout, BlockingIOError):
                continue
            except OSError as exc:  # e.g. ECONNABORTED: keep serving
                _log.debug("%s mode: accept failed: %s", mode, exc)
                continue
            worker = threading.Thread(target=handle, args=(conn, peer), daemon=True)
            worker.start()
            workers.append(worker)
    finally:
        listener.close()
        for worker in workers:
            worker.join(timeout=1.0)


def fetch_uid(
    host: str,
    port: int,
    *,
    rank: int,
    nranks: int,
    key: bytes,
    timeout: float,
    mode: str = "launcher",
) -> bytes:
    """Rank ``rank`` > 0: get the unique id from rank 0's store, retrying until ``timeout``."""
    deadline = time.monotonic() + timeout
    pause, last = 0.02, "no attempt"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise NvshmemInitError(
                f"{mode} mode: rank {rank} of {nranks} could not get the unique id from rank 0 at "
                f"{host}:{port} within {timeout:g} s (last error: {last}); rank 0 never arrived or "
                f"is unreachable (raise {ENV_TIMEOUT} if it is just slow)"
            )
        try:
            with socket.create_connection((host, port), timeout=min(remaining, 5.0)) as sock:
                sock.settimeout(max(0.1, min(remaining, 10.0)))
                return _client_handshake(sock, rank, nranks, key)
        except _Rejected as exc:
            raise NvshmemInitError(f"{mode} mode: rank {rank}: {exc}") from None
        except (OSError, ConnectionError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
        pause = min(pause * 2, 0.5)


def _client_handshake(sock: socket.socket, rank: int, nranks: int, key: bytes) -> bytes:
    greeting = _recv_exact(sock, len(_MAGIC) + _NONCE)
    if greeting[: len(_MAGIC)] != _MAGIC:
        raise ValueError("the port does not speak the nvshmem_dsl store protocol")
    snonce = greeting[len(_MAGIC) :]
    if not key:  # without a secret: rank 0 on this host must be a process of this user
        owner = _socket_owner(sock.getsockname(), sock.getpeername())
        if owner is not None and owner != _uid():
            raise _Rejected(f"the store at this address is a process of user id {owner}, not of this job's "
                            f"user ({_uid()}): not taking a unique id from it (set {ENV_SECRET} to the same "
                            "value on every rank to authenticate rank 0 by a secret instead)")
    cnonce = secrets.token_bytes(_NONCE)
    ranks = struct.pack("!II", rank, nranks)
    sock.sendall(cnonce + ranks + _mac(key, b"C", snonce, cnonce, ranks))
    status = _recv_exact(sock, 1)[0]
    if status != _OK:
        raise _Rejected(_STATUS_TEXT.get(status, f"rank 0 answered with unknown status {status}"))
    head = _recv_exact(sock, 4)
    (length,) = struct.unpack("!I", head)
    if length > _MAX_UID:
        raise ValueError(f"unique id length {length} is implausible")
    cipher = _recv_exact(sock, length)
    proof = _recv_exact(sock, _MAC)
    nonces = snonce + cnonce
    if not hmac.compare_digest(proof, _mac(key, b"S", nonces, ranks, head + cipher)):
        raise _Rejected(f"the store at this address could not prove it knows {ENV_SECRET}")
    sock.sendall(_ACK)
    return _keystream_xor(key, nonces, cipher)


# --------------------------------------------------------------------------- whose process is at the other end
#
# Without a secret, the two ends of a connection between processes of one host check each other's
# user: the kernel lists every TCP socket of a network namespace, with the user that opened it, in
# /proc/net/tcp and tcp6 (readable by every user), and no process can open a socket under another
# user's id.  (A connection from another host is not in that list: it stays unchecked.)

_PROC_NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")
_TIME_WAIT = "06"  # a closed connection's remains, listed as root's
_V4_IN_V6 = b"\0" * 10 + b"\xff\xff"


def _uid() -> int:
    return os.getuid()


def _peers_checked() -> bool:
    """Whether :func:`_socket_owner` can see this host's sockets (Linux, /proc/net readable)."""
    return hasattr(os, "getuid") and os.access(_PROC_NET_TCP[0], os.R_OK)


def _address(host: str, port: int) -> tuple[bytes, int]:
    """(packed IP address, port) of a socket address as ``getsockname`` gives it; an IPv4 address
    mapped into IPv6 as the IPv4 one."""
    if ":" in host:
        packed = socket.inet_pton(socket.AF_INET6, host.split("%")[0])
        return (packed[12:] if packed[:12] == _V4_IN_V6 else packed), port
    return socket.inet_pton(socket.AF_INET, host), port


def _listed_address(text: str) -> tuple[bytes, int]:
    """:func:`_address` of an address as /proc/net/tcp writes it: the IP address in 32-bit words of
    host byte order, in hex, a colon, the port in hex."""
    ip, port = text.split(":")
    packed = b"".join(struct.pack("=I", int(ip[i : i + 8], 16)) for i in range(0, len(ip), 8))
    return (packed[12:] if packed[:12] == _V4_IN_V6 else packed), int(port, 16)


def _socket_owner(local, remote) -> int | None:
    """The user id of the process at the other end of our connection whose own address is ``local``
    and whose peer's is ``remote`` (``getsockname()``, ``getpeername()``): the user of this host's
    socket whose own address is ``remote`` and whose peer's is ``local``; None where that end is not
    on this host (in this network namespace) or the kernel's list of sockets cannot be read."""
    try:
        want = (_address(*remote[:2]), _address(*local[:2]))
    except (OSError, ValueError, TypeError):
        return None
    for table in _PROC_NET_TCP:
        try:
            with open(table) as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 8 or fields[3] == _TIME_WAIT:
                continue
            try:
                if (_listed_address(fields[1]), _listed_address(fields[2])) == want:
                    return int(fields[7])
            except ValueError:
                continue
    return None
