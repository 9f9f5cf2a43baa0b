"""Whose process is at the other end of a TCP connection between two processes of this host
(:func:`_socket_owner`), for the unique-id store without a secret (:mod:`._uid_store`)."""

from __future__ import annotations

import os
import socket
import struct


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
