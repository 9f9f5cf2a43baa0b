"""The small TCP store over which rank 0 hands the NVSHMEM unique id to the other ranks
(the ``torchrun`` and ``launcher`` modes of :mod:`nvshmem_dsl.host._bootstrap`).

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
its own user (:func:`nvshmem_dsl.host._peer_user._socket_owner`: the kernel's table of TCP
sockets), so that another user's process on the node can neither fetch the id nor serve a
forged one; **a process on another host (or in another network namespace) that reaches the
port while rank 0 waits can still read the id**, and a warning says so once
(:func:`_secret`).  The id is never written to a file.

Every wait is bounded by the ``timeout`` given (``NVSHMEM_DSL_INIT_TIMEOUT`` seconds).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
import socket
import struct
import threading
import time
from collections.abc import Mapping

from ..errors import NvshmemInitError
from ._launch_env import ENV_SECRET, ENV_STORE_PORT, ENV_TIMEOUT
from ._peer_user import _peers_checked, _socket_owner, _uid

__all__ = ["serve_uid", "fetch_uid"]

_log = logging.getLogger(__name__)

#: The longest unique id either exchange (this store, the MPI one) carries.
_MAX_UID = 4096

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
