"""Bootstrap (nvshmem_dsl.host._bootstrap): mode detection, TCP store (host._uid_store, host._peer_user),
MPI exchange."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nvshmem_dsl.host import _bootstrap as bs
from nvshmem_dsl.host import _peer_user as peers
from nvshmem_dsl.host import _uid_store as store
from nvshmem_dsl.host._bootstrap import Bootstrap, bootstrap, detect_mode, fetch_uid, select_device, serve_uid
from nvshmem_dsl.errors import NvshmemInitError

UID = bytes(range(128))
SECRET = "s3cret-for-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_env(rank, nranks, port, secret=SECRET, **extra):
    env = {
        "NVSHMEM_DSL_RANK": str(rank),
        "NVSHMEM_DSL_NRANKS": str(nranks),
        "NVSHMEM_DSL_LOCAL_RANK": str(rank),
        "NVSHMEM_DSL_STORE_HOST": "127.0.0.1",
        "NVSHMEM_DSL_STORE_PORT": str(port),
    }
    if secret is not None:
        env["NVSHMEM_DSL_SECRET"] = secret
    env.update(extra)
    return env


class Counter:
    def __init__(self, value=UID):
        self.calls, self.value = 0, value

    def __call__(self):
        self.calls += 1
        return self.value


def run_ranks(envs, make_uid, timeout=10.0):
    """bootstrap() in one thread per env; returns (results, errors) indexed like envs."""
    results, errors = [None] * len(envs), [None] * len(envs)

    def one(i):
        try:
            results[i] = bootstrap(make_uid, env=envs[i], timeout=timeout)
        except Exception as exc:  # noqa: BLE001
            errors[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(envs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    return results, errors


# --------------------------------------------------------------------------- mode detection


@pytest.mark.parametrize(
    "env, mode",
    [
        ({}, "single"),
        ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}, "mpi"),
        ({"PMI_SIZE": "2", "PMI_RANK": "1"}, "mpi"),
        ({"PMIX_RANK": "0"}, "mpi"),
        ({"MV2_COMM_WORLD_SIZE": "4"}, "mpi"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "torchrun"),
        ({"NVSHMEM_DSL_RANK": "0", "NVSHMEM_DSL_NRANKS": "2"}, "launcher"),
        # the documented order: mpi > torchrun > launcher
        ({"PMI_SIZE": "2", "RANK": "0", "WORLD_SIZE": "2"}, "mpi"),
        ({"RANK": "0", "WORLD_SIZE": "2", "NVSHMEM_DSL_RANK": "0", "NVSHMEM_DSL_NRANKS": "2"}, "torchrun"),
        # forcing
        ({"PMI_SIZE": "2", "NVSHMEM_DSL_BOOTSTRAP": "launcher"}, "launcher"),
        ({"RANK": "0", "WORLD_SIZE": "2", "NVSHMEM_DSL_BOOTSTRAP": "single"}, "single"),
        # LOCAL_RANK alone (our launcher without NVSHMEM_DSL_*) is not torchrun
        ({"LOCAL_RANK": "1"}, "single"),
        # NVSHMEM's own bootstrap (srun --mpi=pmix with NVSHMEM_BOOTSTRAP=PMIX ...) wins over MPI
        ({"NVSHMEM_BOOTSTRAP": "PMIX", "PMIX_RANK": "0", "SLURM_LOCALID": "0"}, "nvshmem"),
        ({"NVSHMEM_BOOTSTRAP": "pmi", "PMI_SIZE": "2"}, "nvshmem"),
        ({"NVSHMEM_BOOTSTRAP": "MPI", "OMPI_COMM_WORLD_SIZE": "2"}, "nvshmem"),
        # UID is the unique-id bootstrap we drive ourselves
        ({"NVSHMEM_BOOTSTRAP": "UID", "OMPI_COMM_WORLD_SIZE": "2"}, "mpi"),
        ({"NVSHMEM_BOOTSTRAP": "PMI", "NVSHMEM_DSL_BOOTSTRAP": "single"}, "single"),
    ],
)
def test_detect_mode(env, mode, monkeypatch):
    monkeypatch.setattr(bs, "_mpi4py_available", lambda: True)
    assert detect_mode(env) == mode


@pytest.mark.parametrize("env, local_rank", [
    ({"NVSHMEM_BOOTSTRAP": "PMIX", "SLURM_LOCALID": "3", "LOCAL_RANK": "1"}, 3),
    ({"NVSHMEM_BOOTSTRAP": "MPI", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, 1),
    ({"NVSHMEM_BOOTSTRAP": "PMI2", "LOCAL_RANK": "2"}, 2),
    ({"NVSHMEM_BOOTSTRAP": "PMI"}, 0),
])
def test_nvshmem_mode_leaves_ranks_to_nvshmem(env, local_rank):
    b = bootstrap(lambda: pytest.fail("no unique id in nvshmem mode"), env=env)
    assert (b.mode, b.rank, b.nranks, b.uid, b.local_rank) == ("nvshmem", -1, -1, None, local_rank)
    assert b.device(2) == local_rank % 2
    with pytest.raises(NvshmemInitError, match="SLURM_LOCALID"):
        bootstrap(env={"NVSHMEM_BOOTSTRAP": "PMIX", "SLURM_LOCALID": "x"})


def test_detect_explicit_and_comm_win_over_env():
    env = {"PMI_SIZE": "2", "NVSHMEM_DSL_BOOTSTRAP": "single"}
    assert detect_mode(env, explicit=True) == "explicit"
    assert detect_mode({"RANK": "0", "WORLD_SIZE": "2"}, comm=object()) == "mpi"


def test_detect_does_not_import_mpi4py(monkeypatch):
    monkeypatch.delitem(sys.modules, "mpi4py", raising=False)
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    detect_mode({"PMI_SIZE": "2"})
    detect_mode({})
    assert "mpi4py.MPI" not in sys.modules


def test_mpi_launch_without_mpi4py(monkeypatch):
    monkeypatch.setattr(bs, "_mpi4py_available", lambda: False)
    with pytest.raises(NvshmemInitError, match="mpi4py is not installed"):
        detect_mode({"OMPI_COMM_WORLD_SIZE": "4"})
    assert detect_mode({"OMPI_COMM_WORLD_SIZE": "1"}) == "single"
    # torchrun env still usable when mpi4py is absent
    assert detect_mode({"PMI_SIZE": "2", "RANK": "1", "WORLD_SIZE": "2"}) == "torchrun"


def test_bad_forced_mode():
    with pytest.raises(NvshmemInitError, match="NVSHMEM_DSL_BOOTSTRAP"):
        detect_mode({"NVSHMEM_DSL_BOOTSTRAP": "carrier-pigeon"})
    with pytest.raises(NvshmemInitError, match="unknown bootstrap mode"):
        bootstrap(mode="nope", env={})


# --------------------------------------------------------------------------- simple modes


def test_single_mode():
    make = Counter()
    b = bootstrap(make, env={})
    assert b == Bootstrap("single", 0, 1, 0, UID, None)
    assert make.calls == 1
    assert bootstrap(env={}).uid is None
    assert UID.hex() not in repr(b)  # the id stays out of logs


def test_explicit_mode():
    b = bootstrap(uid=UID, rank=1, nranks=4, env={"PMI_SIZE": "9"})
    assert (b.mode, b.rank, b.nranks, b.local_rank, b.uid) == ("explicit", 1, 4, 1, UID)
    assert bootstrap(uid=bytearray(UID), rank=3, nranks=4, local_rank=0, env={}).local_rank == 0
    make = Counter()
    assert bootstrap(make, rank=0, nranks=1, env={}).uid == UID and make.calls == 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rank=0, nranks=2), "needs uid"),
        (dict(uid=UID), "both rank= and nranks="),
        (dict(uid=UID, rank=2, nranks=2), "not within"),
        (dict(uid="abc", rank=0, nranks=2), "must be bytes"),
    ],
)
def test_explicit_errors(kwargs, match):
    with pytest.raises(NvshmemInitError, match=match):
        bootstrap(env={}, **kwargs)


def test_torchrun_single_rank_needs_no_network():
    b = bootstrap(Counter(), env={"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    assert (b.mode, b.rank, b.nranks, b.uid) == ("torchrun", 0, 1, UID)


@pytest.mark.parametrize(
    "env, match",
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "not within"),
        ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "1234"}, "MASTER_ADDR is not set"),
        ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "MASTER_PORT is not set"),
        ({"NVSHMEM_DSL_RANK": "0", "NVSHMEM_DSL_NRANKS": "2", "NVSHMEM_DSL_STORE_HOST": "h"}, "STORE_PORT"),
        ({"NVSHMEM_DSL_INIT_TIMEOUT": "soon"}, "INIT_TIMEOUT"),
    ],
)
def test_env_errors(env, match):
    with pytest.raises(NvshmemInitError, match=match):
        bootstrap(Counter(), env=env)


def test_init_timeout():
    assert bs.init_timeout({}) == 60.0
    assert bs.init_timeout({"NVSHMEM_DSL_INIT_TIMEOUT": "2.5"}) == 2.5
    for bad in ("0", "-3", "nan", "x"):
        with pytest.raises(NvshmemInitError):
            bs.init_timeout({"NVSHMEM_DSL_INIT_TIMEOUT": bad})


def test_select_device():
    assert select_device(0, 8) == 0
    assert select_device(5, 4) == 1
    assert select_device(3, 1) == 0
    assert Bootstrap("single", 0, 1, 6, None).device(4) == 2
    with pytest.raises(NvshmemInitError, match="no CUDA device"):
        select_device(0, 0)


# --------------------------------------------------------------------------- TCP store


@pytest.mark.parametrize("nranks", [2, 4])
def test_launcher_store_threads(nranks):
    port = free_port()
    make = Counter()
    results, errors = run_ranks([launcher_env(r, nranks, port) for r in range(nranks)], make)
    assert errors == [None] * nranks
    assert [b.rank for b in results] == list(range(nranks))
    assert all(b.uid == UID and b.mode == "launcher" and b.nranks == nranks for b in results)
    assert make.calls == 1  # only rank 0 makes the id


def busy_port_with_free_successor() -> tuple[socket.socket, int]:
    for _ in range(50):
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port + 1))
            return busy, port
        except OSError:
            busy.close()
    pytest.skip("no port pair found")


def test_torchrun_store_uses_master_port_plus_one():
    busy, master_port = busy_port_with_free_successor()  # torchrun's agent store holds MASTER_PORT
    envs = [
        {"RANK": str(r), "WORLD_SIZE": "3", "LOCAL_RANK": str(r), "MASTER_ADDR": "127.0.0.1",
         "MASTER_PORT": str(master_port), "NVSHMEM_DSL_SECRET": SECRET}
        for r in range(3)
    ]
    with busy:
        results, errors = run_ranks(envs, Counter())
    assert errors == [None] * 3
    assert [b.local_rank for b in results] == [0, 1, 2]
    assert {b.uid for b in results} == {UID}


def test_store_port_override():
    port = free_port()
    envs = [
        {"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "1",
         "NVSHMEM_DSL_STORE_PORT": str(port), "NVSHMEM_DSL_STORE_HOST": "127.0.0.1",
         "NVSHMEM_DSL_SECRET": SECRET}
        for r in range(2)
    ]
    results, errors = run_ranks(envs, Counter())
    assert errors == [None, None] and results[1].uid == UID and results[1].local_rank == 1


def test_store_real_processes(tmp_path):
    """3 processes (not threads) exchange the id; only the uid hex comes out."""
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent("""
        import os
        from nvshmem_dsl.host._bootstrap import bootstrap
        b = bootstrap(lambda: os.urandom(128))
        print("RESULT", b.mode, b.rank, b.nranks, b.uid.hex(), flush=True)
    """))
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("NVSHMEM_DSL_")}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script)],
            env={**base, **launcher_env(r, 3, port), "NVSHMEM_DSL_INIT_TIMEOUT": "20"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (2, 1, 0)  # clients first: they must retry until rank 0 listens
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    results = [line.split() for out, _ in outs for line in out.splitlines() if line.startswith("RESULT")]
    assert sorted(int(r[2]) for r in results) == [0, 1, 2]
    assert len({r[4] for r in results}) == 1 and len(results[0][4]) == 256


def test_wrong_secret_rejected_and_legit_rank_still_served():
    port = free_port()
    done = {}

    def server():
        try:
            serve_uid(UID, "127.0.0.1", port, nranks=2, key=b"right", timeout=10)
            done["ok"] = True
        except Exception as exc:  # noqa: BLE001
            done["error"] = exc

    t = threading.Thread(target=server)
    t.start()
    start = time.monotonic()
    with pytest.raises(NvshmemInitError, match="NVSHMEM_DSL_SECRET differs") as info:
        fetch_uid("127.0.0.1", port, rank=1, nranks=2, key=b"wrong", timeout=10)
    assert time.monotonic() - start < 5  # rejected at once, no retrying
    assert UID.hex() not in str(info.value)
    assert fetch_uid("127.0.0.1", port, rank=1, nranks=2, key=b"right", timeout=10) == UID
    t.join(10)
    assert done == {"ok": True}


def test_client_rejects_impostor_store():
    """A store that does not know the secret cannot feed a rank a forged id."""
    port = free_port()
    t = threading.Thread(
        target=lambda: pytest.raises(NvshmemInitError, serve_uid, b"forged", "127.0.0.1", port,
                                     nranks=2, key=b"impostor", timeout=1)
    )
    t.start()
    with pytest.raises(NvshmemInitError):
        fetch_uid("127.0.0.1", port, rank=1, nranks=2, key=b"right", timeout=3)
    t.join(10)


def test_client_rejects_store_without_proof():
    """A fake store that skips the checks and sends its own id is caught by the server proof."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def fake_store():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(store._MAGIC + b"n" * store._NONCE)
            store._recv_exact(conn, store._NONCE + 8 + store._MAC)
            conn.sendall(b"\0" + (6).to_bytes(4, "big") + b"forged" + b"m" * store._MAC)

    t = threading.Thread(target=fake_store)
    t.start()
    with listener, pytest.raises(NvshmemInitError, match="could not prove"):
        fetch_uid("127.0.0.1", port, rank=1, nranks=2, key=b"right", timeout=3)
    t.join(10)


def test_id_not_sent_in_clear():
    """With a secret, the id bytes never appear on the wire."""
    port = free_port()
    t = threading.Thread(target=serve_uid, args=(UID, "127.0.0.1", port),
                         kwargs=dict(nranks=2, key=b"k", timeout=10))
    t.start()
    wire = bytearray()
    real_recv = store._recv_exact

    def spy(sock, n):
        data = real_recv(sock, n)
        wire.extend(data)
        return data

    store._recv_exact = spy
    try:
        assert fetch_uid("127.0.0.1", port, rank=1, nranks=2, key=b"k", timeout=10) == UID
    finally:
        store._recv_exact = real_recv
        t.join(10)
    assert UID[:32] not in bytes(wire)


def test_nranks_mismatch_rejected():
    port = free_port()
    t = threading.Thread(target=lambda: pytest.raises(NvshmemInitError, serve_uid, UID, "127.0.0.1", port,
                                                      nranks=3, key=b"k", timeout=1))
    t.start()
    with pytest.raises(NvshmemInitError, match="different number of ranks"):
        fetch_uid("127.0.0.1", port, rank=1, nranks=2, key=b"k", timeout=3)
    t.join(10)


def test_missing_peer_times_out_naming_it():
    port = free_port()
    envs = [launcher_env(r, 3, port) for r in range(2)]  # rank 2 never starts
    start = time.monotonic()
    results, errors = run_ranks(envs, Counter(), timeout=1.0)
    elapsed = time.monotonic() - start
    assert elapsed < 6
    assert results[1] is not None and results[1].uid == UID  # rank 1 got it all the same
    assert isinstance(errors[0], NvshmemInitError)
    text = str(errors[0])
    assert "launcher mode" in text and "rank(s) 2 of 3" in text and "never arrived" in text


def test_rank0_never_arrives():
    port = free_port()
    start = time.monotonic()
    with pytest.raises(NvshmemInitError) as info:
        bootstrap(Counter(), env=launcher_env(1, 2, port, NVSHMEM_DSL_INIT_TIMEOUT="0.5"))
    assert time.monotonic() - start < 5
    text = str(info.value)
    assert "launcher mode" in text and "rank 1 of 2" in text and f"127.0.0.1:{port}" in text
    assert "rank 0 never arrived" in text


def test_store_binds_only_the_given_address():
    port = free_port()
    t = threading.Thread(target=lambda: pytest.raises(NvshmemInitError, serve_uid, UID, "127.0.0.1", port,
                                                      nranks=2, key=b"k", timeout=1.5))
    t.start()
    time.sleep(0.3)
    try:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.2", port), timeout=1).close()
    finally:
        t.join(10)


def test_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(NvshmemInitError, match="cannot listen on 127.0.0.1"):
            serve_uid(UID, "127.0.0.1", port, nranks=2, key=b"", timeout=1)


def test_no_secret_warns_once_where_other_hosts_reach_the_store(caplog, monkeypatch):
    """Without a secret the exchange works; where a process that is not the job's could reach the
    store (another host: a store host that is not a loopback address), a warning says so, once a
    process."""
    monkeypatch.setattr(store, "_warned_unauthenticated", False)
    monkeypatch.setattr(store, "_exposure", lambda host: f"{host} can be reached from other hosts")
    for _ in range(2):
        port = free_port()
        results, errors = run_ranks([launcher_env(r, 2, port, secret=None) for r in range(2)], Counter())
        assert errors == [None, None] and results[1].uid == UID
    assert caplog.text.count("NVSHMEM_DSL_SECRET is not set, and 127.0.0.1 can be reached from other hosts") == 1
    assert "export NVSHMEM_DSL_SECRET=" in caplog.text


@pytest.mark.skipif(not peers._peers_checked(), reason="needs /proc/net/tcp (Linux)")
def test_no_secret_on_loopback_needs_no_warning(caplog, monkeypatch):
    """A store on a loopback address, whose clients are checked to be this user's processes, is
    out of every other user's reach: no warning."""
    monkeypatch.setattr(store, "_warned_unauthenticated", False)
    port = free_port()
    results, errors = run_ranks([launcher_env(r, 2, port, secret=None) for r in range(2)], Counter())
    assert errors == [None, None] and results[1].uid == UID
    assert "NVSHMEM_DSL_SECRET" not in caplog.text


def test_exposure():
    assert store._exposure("192.0.2.7") == "192.0.2.7 can be reached from other hosts"
    assert store._exposure("no-such-host.invalid") == "no-such-host.invalid can be reached from other hosts"
    if peers._peers_checked():
        assert store._exposure("127.0.0.1") is None and store._exposure("::1") is None


def test_torchrun_on_one_node_serves_on_loopback():
    """torchrun with every rank on this node (LOCAL_WORLD_SIZE == WORLD_SIZE): rank 0 serves the id
    on 127.0.0.1 whatever MASTER_ADDR says (here an address of no host), out of other hosts' reach."""
    port = free_port()
    envs = [{"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
             "MASTER_ADDR": "192.0.2.7", "MASTER_PORT": str(port - 1), "NVSHMEM_DSL_SECRET": SECRET}
            for r in range(2)]
    results, errors = run_ranks(envs, Counter())
    assert errors == [None, None] and results[1].uid == UID


def test_socket_owner_sees_this_users_processes_and_not_other_hosts():
    if not peers._peers_checked():
        pytest.skip("needs /proc/net/tcp (Linux)")
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            listener = socket.socket(family)
            listener.bind((host, 0))
        except OSError:
            continue
        with listener:
            listener.listen(1)
            with socket.create_connection(listener.getsockname()[:2]) as client:
                served, _ = listener.accept()
                with served:
                    assert peers._socket_owner(served.getsockname(), served.getpeername()) == os.getuid()
                    assert peers._socket_owner(client.getsockname(), client.getpeername()) == os.getuid()
    assert peers._socket_owner(("127.0.0.1", 1), ("192.0.2.7", 5)) is None


# Another user's process, in Python alone (run as user nobody by a root test run): a client that
# answers rank 0's challenge keyed by an empty secret (what a job without NVSHMEM_DSL_SECRET takes),
# and a server that hands out a forged id the same way.
STRANGER_CLIENT = r"""
import hashlib, hmac, os, socket, struct, sys
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
def recv(n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise SystemExit("closed")
        data += chunk
    return data
snonce = recv(8 + 32)[8:]
cnonce, ranks = os.urandom(32), struct.pack("!II", 1, 2)
sock.sendall(cnonce + ranks + hmac.new(b"", b"C" + snonce + cnonce + ranks, hashlib.sha256).digest())
status = recv(1)[0]
print("STATUS", status, flush=True)
if status == 0:
    n, = struct.unpack("!I", recv(4))
    recv(n + 32)
    sock.sendall(b"\x06")
"""

STRANGER_SERVER = r"""
import hashlib, hmac, os, socket, struct, sys
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen(4)
print(listener.getsockname()[1], flush=True)
listener.settimeout(30)
while True:
    conn, _ = listener.accept()
    conn.settimeout(10)
    try:
        snonce = os.urandom(32)
        conn.sendall(b"NVDSLid1" + snonce)
        hello = b""
        while len(hello) < 72:
            chunk = conn.recv(72 - len(hello))
            if not chunk:
                break
            hello += chunk
        if len(hello) < 72:
            continue
        cnonce, ranks = hello[:32], hello[32:40]
        nonces, forged = snonce + cnonce, b"F" * 128
        stream = b"".join(hmac.new(b"", b"K" + nonces + struct.pack("!I", i), hashlib.sha256).digest()
                          for i in range(4))
        body = struct.pack("!I", len(forged)) + bytes(a ^ b for a, b in zip(forged, stream))
        conn.sendall(b"\0" + body + hmac.new(b"", b"S" + nonces + ranks + body, hashlib.sha256).digest())
        conn.recv(1)
    except OSError:
        pass
    finally:
        conn.close()
"""


def _as_user(uid: int | None):
    """Popen arguments running system Python as ``uid`` (None: as this process's user)."""
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    return {"args": [python, "-c"], "user": uid, "group": uid} if uid is not None else {"args": [python, "-c"]}


def _other_user() -> int:
    if not peers._peers_checked():
        pytest.skip("needs /proc/net/tcp (Linux)")
    if os.geteuid() != 0:
        pytest.skip("needs root, to run a process as another user")
    nobody = 65534
    done = subprocess.run(_as_user(nobody)["args"] + ["print(1)"], user=nobody, group=nobody, capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot run Python as user {nobody}: {done.stderr.strip()[-200:]}")
    return nobody


@pytest.mark.parametrize("who", ["other", "same"])
def test_no_secret_another_users_process_cannot_fetch_the_id(who):
    """Without a secret, rank 0 refuses a client that is another user's process on its host (and
    serves the job's ranks all the same); the same client run as the job's user gets the id."""
    uid = _other_user() if who == "other" else None
    port = free_port()
    served = threading.Thread(target=serve_uid, args=(UID, "127.0.0.1", port),
                              kwargs={"nranks": 2, "key": b"", "timeout": 20}, daemon=True)
    served.start()
    time.sleep(0.2)
    kw = _as_user(uid)
    done = subprocess.run(kw.pop("args") + [STRANGER_CLIENT, str(port)], capture_output=True, text=True,
                          timeout=30, **kw)
    if who == "other":
        assert done.stdout.split() == ["STATUS", str(store._OTHER_USER)], done.stderr
        assert fetch_uid("127.0.0.1", port, rank=1, nranks=2, key=b"", timeout=10) == UID
    else:
        assert done.stdout.split() == ["STATUS", "0"], done.stderr
    served.join(20)
    assert not served.is_alive()


@pytest.mark.parametrize("who", ["other", "same"])
def test_no_secret_another_users_store_cannot_feed_a_forged_id(who):
    """Without a secret, a rank refuses a store on its host that is another user's process (one
    that took the port before rank 0, to hand out a forged id); one of the job's user it takes."""
    uid = _other_user() if who == "other" else None
    kw = _as_user(uid)
    server = subprocess.Popen(kw.pop("args") + [STRANGER_SERVER], stdout=subprocess.PIPE, text=True, **kw)
    try:
        port = int(server.stdout.readline())
        if who == "other":
            with pytest.raises(NvshmemInitError, match=r"is a process of user id 65534, not of this job's user"):
                fetch_uid("127.0.0.1", port, rank=1, nranks=2, key=b"", timeout=10)
        else:
            assert fetch_uid("127.0.0.1", port, rank=1, nranks=2, key=b"", timeout=10) == b"F" * 128
    finally:
        server.kill()
        server.wait()


# --------------------------------------------------------------------------- MPI


def _mpiexec() -> str | None:
    for candidate in (Path(sys.executable).parent / "mpiexec", Path(sys.executable).parent / "mpirun"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("mpiexec")


MPI_SCRIPT = """
import os, sys, time
from nvshmem_dsl.host._bootstrap import bootstrap
from nvshmem_dsl.errors import NvshmemInitError
calls = []
def make_uid():
    calls.append(1)
    return os.urandom(128)
what, outdir = sys.argv[1], sys.argv[2]
def report(*words):  # one file per rank: mpiexec may interleave the ranks' stdout
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "x"
    with open(os.path.join(outdir, what + "." + rank), "w") as f:
        f.write(" ".join(map(str, words)))
if what == "exchange":
    b = bootstrap(make_uid)
    report("RESULT", b.mode, b.rank, b.nranks, b.local_rank, b.uid.hex(), len(calls), b.mpi_comm is not None)
elif what == "native":
    b = bootstrap(make_uid, exchange_uid=False)
    report("RESULT", b.mode, b.rank, b.nranks, b.uid, len(calls), b.mpi_comm.Get_size())
elif what == "missing":
    from mpi4py import MPI
    if MPI.COMM_WORLD.Get_rank() == 1:
        time.sleep(3)  # never calls bootstrap
    else:
        t = time.monotonic()
        try:
            bootstrap(make_uid, timeout=1.0)
        except NvshmemInitError as exc:
            report("ERROR", round(time.monotonic() - t, 1), exc)
"""


@pytest.fixture(scope="module")
def mpi_run(tmp_path_factory):
    mpiexec = _mpiexec()
    if mpiexec is None:
        pytest.skip("mpiexec not found")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py not installed")
    script = tmp_path_factory.mktemp("mpi") / "mpi_rank.py"
    script.write_text(MPI_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVSHMEM_DSL_")}

    def run(what: str, n: int = 2):
        try:
            proc = subprocess.run(
                [mpiexec, "-n", str(n), sys.executable, str(script), what, str(script.parent)],
                env=env, capture_output=True, text=True, timeout=90,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.fail(f"mpiexec failed to run: {exc}")
        lines = [p.read_text().split(" ", 1) for p in sorted(script.parent.glob(what + ".*"))]
        if not lines and proc.returncode != 0:
            pytest.skip(f"mpiexec does not work here: {proc.stderr[-500:]}")
        return lines, proc

    return run


def test_mpi_exchange(mpi_run):
    lines, proc = mpi_run("exchange")
    assert proc.returncode == 0, proc.stderr
    rows = sorted(line[1].split() for line in lines)
    assert len(rows) == 2, proc.stdout + proc.stderr
    (m0, r0, n0, l0, uid0, c0, comm0), (m1, r1, n1, l1, uid1, c1, comm1) = rows
    assert (m0, r0, n0, l0, c0, comm0) == ("mpi", "0", "2", "0", "1", "True")
    assert (m1, r1, n1, l1, c1, comm1) == ("mpi", "1", "2", "1", "0", "True")
    assert uid0 == uid1 and len(uid0) == 256


def test_mpi_native_bootstrap_gets_comm_only(mpi_run):
    lines, proc = mpi_run("native")
    assert proc.returncode == 0, proc.stderr
    rows = sorted(line[1].split() for line in lines)
    assert rows == [["mpi", "0", "2", "None", "0", "2"], ["mpi", "1", "2", "None", "0", "2"]]


def test_mpi_missing_peer_times_out(mpi_run):
    lines, proc = mpi_run("missing")
    errors = [line[1] for line in lines if line[0] == "ERROR"]
    assert len(errors) == 1, proc.stdout + proc.stderr
    elapsed, message = errors[0].split(" ", 1)
    assert float(elapsed) < 3
    assert "mpi mode" in message and "rank(s) 1 of 2" in message
