"""What the Numba and CuTe benchmarks share: parameters, host side, timing, JSON output.

Everything that touches the nvshmem_dsl *host* API is in this one module (init, symmetric
allocation, barrier, finalize), so that a change of that API means a change here only.
The measurement parameters mirror ``make_params`` in ``bench/cpp/bench.cu``: keep both in
sync (bench/run.py checks that the ``iters`` of every result agree across implementations).

Timing (the same as the C++ ``Timer``): before each timed launch the stream is synchronised,
all PEs meet in ``barrier_all``, a 1-thread ``spin`` kernel (~200 us of ``nanosleep``) is
queued so that the host-side launch cost of the timed kernel is hidden, then a CUDA event
pair brackets the timed kernel.  One warm-up launch (which also compiles the kernel on first
use) precedes the ``reps`` timed ones; ``value`` is the median, ``best`` the best rep.
All launches go to the legacy default stream (cupy's null stream, Numba's default stream,
``CUstream(0)`` for CuTe), where the cupy events are recorded too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

# ------------------------------------------------------------------ parameters (= bench.cu)

BW_GRID = 132            # blocks of every bandwidth kernel
BW_BLOCK = 1024          # threads per block at warp and block scope
THREAD_SCOPE_BLOCK = 1   # thread scope: one thread per block, each putting its chunk
ALIGN_ELEMS = 32         # chunks are rounded up to 32 floats (128 B)
LAT_SLOTS = 1024         # p / g cycle over this many elements (a power of two)
BARRIER_BLOCK = 128      # barrier_all_block: one block of 128 threads
SPIN_US_BEFORE_TIMED = 200
SPIN_US_BEFORE_LAUNCHES = 100_000
#: On-stream host calls (put, reduce, barrier_all) queued behind one spin at most: an NVSHMEM on-stream call
#: may queue several launches, and a stream's queue (about 1024 launches) must not fill, or the host would
#: wait for the spin and the figure count it
ON_STREAM_CALLS = 256
ALLOC_BYTES = 1 << 20
SCOPES = ("thread", "warp", "block")

# u64 scratch layout (as in bench.cu): [0] counter, [1] out, [8] data, [9] src, [16] signal
U64_COUNTER, U64_OUT, U64_DATA, U64_SRC, U64_SIGNAL, U64_LEN = 0, 1, 8, 9, 16, 32

# Device-side collectives over TEAM_WORLD (bench.cu's coll.cuh): one block calls `iters` of them in a
# loop, every thread of it taking part: one thread at thread scope, a warp, or COLL_BLOCK threads.
COLL_FAMILIES = ("broadcast", "fcollect", "alltoall", "reduce", "reducescatter", "barrier")
COLL_BLOCK = 256         # threads of the block-scope collective kernels, in every implementation (C++'s
                         # block-scope reduce and fcollect take 196 registers a thread: 1024 would not launch)
COLL_LAT_BYTES = 8       # coll_lat: 8 bytes (2 floats) per PE
COLL_BW_BYTES = 1 << 20  # coll_bw: 1 MiB per PE
COLL_ROOT = 0            # broadcast root
#: The NVSHMEM device function of each family at thread scope (``<name>_warp``, ``<name>_block``
#: at the others), called with the team first: (team, dst, src, nelems[, root]) or (team).
COLL_API = {"broadcast": "broadcast", "fcollect": "fcollect", "alltoall": "alltoall",
            "reduce": "sum_reduce", "reducescatter": "sum_reducescatter", "barrier": "barrier"}
#: NVSHMEM's default NVSHMEM_REDUCE_SCRATCH_SIZE: reducescatter needs 2 * bytes * npes of it.
DEFAULT_REDUCE_SCRATCH = 512 << 10

BENCHES = ("put_bw", "get_bw", "p_lat", "g_lat", "amo_lat", "pingpong", "barrier", "coll_lat", "coll_bw", "launch",
           "host")


@dataclass
class Params:
    quick: bool
    sizes: list[int]
    target_bytes: int
    min_iters: int
    max_iters: int
    reps: int
    lat_iters: int
    amo_iters: int
    pingpong_iters: int
    barrier_iters: int
    launches: int
    host_calls: int
    alloc_reps: int
    coll_lat_iters: int = 0   # collectives a coll_lat launch calls (8 bytes)
    coll_bw_iters: int = 0    # collectives a coll_bw launch calls (1 MiB)
    only: set[str] = field(default_factory=set)

    def enabled(self, name: str) -> bool:
        return not self.only or name in self.only


def make_params(quick: bool, reps: int = 0, only: Sequence[str] = (), sizes: Sequence[int] = ()) -> Params:
    if quick:
        p = Params(True, [8, 4096, 1 << 20, 16 << 20, 256 << 20], 1 << 30, 2, 100, 3,
                   10_000, 5_000, 2_000, 2_000, 500, 100_000, 20, coll_lat_iters=200, coll_bw_iters=2)
    else:
        p = Params(False, [8] + [1 << (2 * k) for k in range(2, 15)], 4 << 30, 4, 1000, 10,
                   100_000, 20_000, 10_000, 10_000, 1000, 1_000_000, 100, coll_lat_iters=2000, coll_bw_iters=10)
    if reps > 0:
        p.reps = reps
    if sizes:
        p.sizes = list(sizes)
    p.only = set(only)
    return p


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_sizes(text: str) -> list[int]:
    """``--sizes``: comma-separated sizes in bytes, each maybe with K, M or G (binary units), e.g.
    ``1M,4M,16M``; the put/get sizes instead of the default ones."""
    sizes = []
    for item in (x.strip().upper() for x in text.split(",") if x.strip()):
        unit = item[-1] if item[-1] in _UNITS else ""
        try:
            n = float(item[:-1] if unit else item) * _UNITS[unit]
        except ValueError:
            n = 0
        if n < 4 or n != int(n) or int(n) % 4:
            raise ValueError(f"--sizes: {item!r} is not a whole number of 4-byte elements (e.g. 4096, 64K, 1M)")
        sizes.append(int(n))
    return sizes


def bw_iters(p: Params, nbytes: int) -> int:
    return max(p.min_iters, min(p.max_iters, p.target_bytes // nbytes))


def bw_windows(p: Params, op: str, nelems: int) -> int:
    """Iteration i moves window i % nwin (windows of ``nelems`` floats) of the buffers; the
    kernels carry the window's offset from one iteration to the next (no division in the loop).

    Gets rotate through the whole (max size) buffers, so that repeated gets of a message
    smaller than L2 are not served from the local L2; puts repeat one window (nwin = 1).
    """
    if op != "get":
        return 1
    return max(1, (max(p.sizes) // 4) // nelems)


# ------------------------------------------------------------------ collectives (= bench.cu, coll.cuh)


def coll_api(family: str, scope: str) -> str:
    """The DSL name of the NVSHMEM collective of ``family`` at ``scope`` (``sum_reduce_block``)."""
    base = COLL_API[family]
    return base if scope == "thread" else f"{base}_{scope}"


def coll_shape(family: str) -> str:
    """How the kernels call the collective: ``root`` (team, dst, src, nelems, root), ``data``
    (team, dst, src, nelems) or ``team`` (team)."""
    return {"broadcast": "root", "barrier": "team"}.get(family, "data")


def coll_threads(scope: str) -> int:
    """Threads of the one block of a collective kernel: all of them take part."""
    return {"thread": THREAD_SCOPE_BLOCK, "warp": 32, "block": COLL_BLOCK}[scope]


def coll_buffer_elems(npes: int) -> int:
    """Floats of each of the two symmetric buffers of the collectives: fcollect's destination,
    alltoall's and reducescatter's source (and alltoall's destination) hold nelems * npes."""
    return COLL_BW_BYTES // 4 * npes


@dataclass(frozen=True)
class CollPoint:
    """One collective result: ``bench`` coll_lat or coll_bw, the collective, bytes per PE (the
    count argument x 4; 0 for barrier) and the collectives one launch calls."""
    bench: str
    family: str
    scope: str
    nbytes: int
    iters: int

    @property
    def name(self) -> str:
        """The result's scope and the kernel's name (``coll_<name>``): ``reduce_block``."""
        return f"{self.family}_{self.scope}"

    @property
    def nelems(self) -> int:
        return self.nbytes // 4

    @property
    def threads(self) -> int:
        return coll_threads(self.scope)


def reduce_scratch_bytes(env: dict | None = None) -> int:
    """NVSHMEM_REDUCE_SCRATCH_SIZE (bytes; k/m/g/t suffixes as NVSHMEM reads them), else NVSHMEM's default."""
    text = (os.environ if env is None else env).get("NVSHMEM_REDUCE_SCRATCH_SIZE", "").strip().lower()
    m = re.match(r"(\d+(?:\.\d*)?|\.\d+)([kmgt]?)", text)
    if not m:
        return DEFAULT_REDUCE_SCRATCH
    return int(float(m[1]) * (1 << (10 * " kmgt".index(m[2] or " "))))


def coll_scratch_needed(nbytes: int, npes: int) -> int:
    """The NVSHMEM_REDUCE_SCRATCH_SIZE a reducescatter of ``nbytes`` per PE needs (NVSHMEM asserts
    nbytes * npes <= scratch / 2; bench/run.py sets it for COLL_BW_BYTES)."""
    return 2 * nbytes * npes


def coll_points(p: Params, npes: int, impl: str = "") -> list[CollPoint]:
    """The enabled collective results, in the order every implementation runs them (a
    reducescatter that NVSHMEM's reduce scratch cannot hold is left out, with a note)."""
    out = []
    for family in COLL_FAMILIES:
        for scope in SCOPES:
            for bench, nbytes, iters in (("coll_lat", COLL_LAT_BYTES, p.coll_lat_iters),
                                         ("coll_bw", COLL_BW_BYTES, p.coll_bw_iters)):
                if not p.enabled(bench) or (family == "barrier" and bench == "coll_bw"):
                    continue
                if family == "barrier":
                    nbytes = 0
                if family == "reducescatter" and coll_scratch_needed(nbytes, npes) > reduce_scratch_bytes():
                    print(f"{impl}: {bench} {family}_{scope} skipped: needs NVSHMEM_REDUCE_SCRATCH_SIZE >= "
                          f"{coll_scratch_needed(nbytes, npes)}", file=sys.stderr)
                    continue
                out.append(CollPoint(bench, family, scope, nbytes, iters))
    return out


def coll_src_values(pe: int, n: int):
    """What PE ``pe``'s source holds (float32): pe * 1024 + i % 1021, integers whose sums over up
    to 64 PEs stay exact, so that every collective's result is known exactly."""
    import numpy as np

    return (pe * 1024 + np.arange(n) % 1021).astype(np.float32)


def coll_expected(pt: CollPoint, me: int, npes: int):
    """What collective ``pt`` leaves at the start of PE ``me``'s destination (numpy), every PE's
    source holding coll_src_values; None for barrier."""
    import numpy as np

    n = pt.nelems
    if pt.family == "barrier" or n == 0:
        return None
    src = [coll_src_values(pe, n * npes) for pe in range(npes)]
    mine = slice(me * n, (me + 1) * n)
    if pt.family == "broadcast":  # the root's destination too (NVSHMEM copies it there)
        return src[COLL_ROOT][:n]
    if pt.family == "fcollect":
        return np.concatenate([s[:n] for s in src])
    if pt.family == "alltoall":
        return np.concatenate([s[mine] for s in src])
    if pt.family == "reduce":
        return np.sum([s[:n] for s in src], axis=0, dtype=np.float32)
    if pt.family == "reducescatter":
        return np.sum([s[mine] for s in src], axis=0, dtype=np.float32)
    raise ValueError(pt.family)


def coll_check(pt: CollPoint, me: int, npes: int, dst: Any) -> dict:
    """``{"checked": ok}`` for the result line: whether this PE's destination (cupy or numpy, filled
    with -1 before the timed launches) holds what the collective leaves there.  Call after the
    timer's closing barrier.  ``{}`` for barrier."""
    import numpy as np

    want = coll_expected(pt, me, npes)
    if want is None:
        return {}
    got = dst[:want.size]
    got = got.get() if hasattr(got, "get") else np.asarray(got)
    return {"checked": bool(np.array_equal(got, want))}


def emit_coll(out: "Output", pt: CollPoint, secs: Sequence[float], **extra: Any) -> None:
    """coll_lat: microseconds per collective; coll_bw: bytes per PE / time per collective."""
    if pt.bench == "coll_lat":
        out.emit(pt.bench, pt.name, pt.nbytes, per_op(secs, pt.iters, 1e6), "us", False, pt.iters, **extra)
    else:
        out.emit(pt.bench, pt.name, pt.nbytes, [pt.nbytes * pt.iters / s / 1e9 for s in secs], "GB/s", True,
                 pt.iters, **extra)


def parse_args(impl: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=f"{impl}_bench", description=f"NVSHMEM {impl} benchmarks (one PE per process)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    ap.add_argument("--reps", type=int, default=0, help="timed repetitions per point (default 10, quick 3)")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(BENCHES)}")
    ap.add_argument("--arch", default=None, help="GPU arch for CuTe (default: the current device)")
    ap.add_argument("--sizes", default="", help="put/get sizes in bytes (K, M, G allowed), e.g. 1M,4M,16M")
    args = ap.parse_args(argv)
    try:
        args.sizes = parse_sizes(args.sizes)
    except ValueError as e:
        ap.error(str(e))
    args.only = [x for x in args.only.split(",") if x]
    unknown = set(args.only) - set(BENCHES)
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; choose from {', '.join(BENCHES)}")
    return args


# ------------------------------------------------------------------ output


class Output:
    """One JSON object per line on stdout (the format bench/run.py collects)."""

    def __init__(self, impl: str) -> None:
        self.impl = impl
        self.pe = 0
        self.npes = 1

    def line(self, **fields: Any) -> None:
        rec = {"impl": self.impl, **fields}
        rec.setdefault("pe", self.pe)
        rec.setdefault("npes", self.npes)
        sys.stdout.write(json.dumps(rec, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def emit(self, bench: str, scope: str, nbytes: int, values: Sequence[float], unit: str,
             higher_better: bool, iters: int, **extra: Any) -> None:
        best = max(values) if higher_better else min(values)
        self.line(bench=bench, scope=scope, bytes=int(nbytes), value=_g(statistics.median(values)),
                  best=_g(best), unit=unit, iters=int(iters), reps=len(values), **extra)


def _g(x: float) -> float:
    return float(f"{x:.6g}")


# ------------------------------------------------------------------ device API modules


def numba_api():
    """The Numba device API module (``nvshmem_dsl.numba``: put, put_block, p, g, ...)."""
    import nvshmem_dsl.numba as nv

    return nv


def team_world() -> int:
    """NVSHMEM_TEAM_WORLD as a plain int (the team of the collective benchmarks)."""
    from nvshmem_dsl._generated.constants import Team

    return int(Team.TEAM_WORLD)


def signal_constants() -> tuple[int, int]:
    """(SIGNAL_SET, CMP_GE) as plain ints (usable as constants in any kernel)."""
    from nvshmem_dsl._generated.constants import Cmp, SignalOp

    return int(SignalOp.SIGNAL_SET), int(Cmp.CMP_GE)


# ------------------------------------------------------------------ host side (nvshmem_dsl)


class Host:
    """nvshmem_dsl host runtime: init, symmetric cupy arrays, barrier, finalize."""

    def __init__(self) -> None:
        import cupy  # noqa: F401  (fail early: the benchmarks use cupy arrays and events)

        import nvshmem_dsl as nvshmem

        self.nvshmem = nvshmem
        self.cupy = cupy
        self._live: list[Any] = []
        self.init_s = 0.0

    def init(self, layers: Sequence[str]) -> None:
        """Import the DSL layers first: init wires its module hooks into the layers imported."""
        for mod in layers:
            __import__(mod)
        t0 = time.perf_counter()
        self.nvshmem.init()
        self.init_s = time.perf_counter() - t0
        install = getattr(self.nvshmem, "install_dsl_hooks", None)
        if install is not None:
            install()

    def my_pe(self) -> int:
        return int(self.nvshmem.my_pe())

    def n_pes(self) -> int:
        return int(self.nvshmem.n_pes())

    def array(self, n: int, dtype: str, *, zero: bool = True, keep: bool = True):
        """A symmetric 1-D cupy array (collective)."""
        fn = self.nvshmem.zeros if zero else self.nvshmem.array
        x = fn((n,), dtype, like="cupy")
        if keep:
            self._live.append(x)
        return x

    def free(self, x) -> None:
        self.nvshmem.free(x)

    # the package's own calls that host_benchmarks times

    def api_my_pe(self) -> Callable[[], int]:
        return self.nvshmem.my_pe

    def allocators(self) -> tuple:
        """(row, allocate(n floats)) of each way of allocating 1-D symmetric memory that is timed."""
        nv = self.nvshmem
        return (("host_alloc_free", lambda n: nv.array((n,), "float32", like="cupy")),
                ("host_alloc_free_nocheck", lambda n: nv.array((n,), "float32", like="cupy", check=False)))

    def on_stream_calls(self, peer: int) -> tuple:
        """(name, bytes, call) of each on-stream operation that is timed, on the legacy default stream:
        a put of 8 bytes to ``peer``, a sum reduce of 8 bytes over TEAM_WORLD, a barrier_all (collective:
        allocates their symmetric arrays)."""
        nv, stream = self.nvshmem, self.cupy.cuda.Stream.null
        dst, src = self.array(2, "float32"), self.array(2, "float32")
        return (("put", 8, lambda: nv.put(dst, src, peer, stream=stream)),
                ("reduce", 8, lambda: nv.reduce(nv.Team.TEAM_WORLD, dst, src, "sum", stream=stream)),
                ("barrier_all", 0, lambda: nv.barrier_all(stream=stream)))

    def barrier_all(self) -> None:
        self.nvshmem.barrier_all()

    def sync(self) -> None:
        self.cupy.cuda.Stream.null.synchronize()

    def device_info(self) -> dict:
        dev = self.cupy.cuda.Device()
        props = self.cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        return {
            "device": name.decode() if isinstance(name, bytes) else str(name),
            "cc": f"{props['major']}.{props['minor']}",
            "cuda_runtime": self.cupy.cuda.runtime.runtimeGetVersion(),
            "cuda_driver": self.cupy.cuda.runtime.driverGetVersion(),
        }

    def versions(self) -> dict:
        out = {}
        try:
            v = self.nvshmem.versions()
            out.update({k: str(x) for k, x in dict(v).items()})
        except Exception as exc:  # noqa: BLE001 - informational only
            out["versions_error"] = str(exc)[:200]
        return out

    def finalize(self) -> None:
        self.sync()
        self.barrier_all()
        for x in reversed(self._live):
            self.free(x)
        self._live.clear()
        self.nvshmem.finalize()


# ------------------------------------------------------------------ timing


class Timer:
    """Device time of one launch, bracketed by cupy events on the null stream (see module doc)."""

    def __init__(self, host: Host, spin: Callable[[int], None]) -> None:
        self.host = host
        self.spin = spin  # spin(us): queue a 1-thread nanosleep kernel on the null stream
        cp = host.cupy
        self.e0 = cp.cuda.Event()
        self.e1 = cp.cuda.Event()
        self.stream = cp.cuda.Stream.null

    def run(self, reps: int, launch: Callable[[], None], before: Callable[[], None] | None = None) -> list[float]:
        """Seconds of each of ``reps`` launches (after one warm-up)."""
        cp = self.host.cupy
        out = []
        for r in range(-1, reps):
            if before is not None:
                before()
            self.stream.synchronize()
            self.host.barrier_all()
            self.spin(SPIN_US_BEFORE_TIMED)
            self.e0.record(self.stream)
            launch()
            self.e1.record(self.stream)
            self.e1.synchronize()
            if r >= 0:
                out.append(cp.cuda.get_elapsed_time(self.e0, self.e1) * 1e-3)
        self.stream.synchronize()
        self.host.barrier_all()
        return out


def p_pattern_ok(lat: Any, iters: int) -> bool:
    """Whether this PE's ``lat`` (cupy, LAT_SLOTS floats) holds what the peer's ``p_lat`` loop
    leaves there: slot j = float(last i < iters with i % LAT_SLOTS == j).  Call after the
    timer's closing barrier.  Guards the latency figures against a kernel that skipped work."""
    import numpy as np

    j = np.arange(LAT_SLOTS)
    last = j + LAT_SLOTS * ((iters - 1 - j) // LAT_SLOTS)
    got = lat.get() if hasattr(lat, "get") else np.asarray(lat)
    return bool(np.array_equal(got[: min(iters, LAT_SLOTS)], last[: min(iters, LAT_SLOTS)].astype(np.float32)))


def amo_count_ok(u64: Any, launches: int, iters: int) -> bool:
    """Whether this PE's counter (``u64[U64_COUNTER]``, zeroed before the timer ran) holds what
    the peer's ``amo_lat`` launches add to it: one per fetch-add, ``launches * iters`` in all
    (the timer launches ``reps + 1`` times).  Call after the timer's closing barrier."""
    got = u64[U64_COUNTER:U64_COUNTER + 1]
    got = got.get() if hasattr(got, "get") else got
    return int(got[0]) == launches * iters


def lands_on_peer(host: Host, me: int, reset: Callable[[], None], launch: Callable[[], None],
                  written: Callable[[], bool]) -> bool:
    """One launch on PE 0 alone, after ``reset`` on every PE: whether this PE sees what it
    should, ``written()`` on PE 1 (the peer of PE 0) and not on PE 0.  The timed runs cannot
    tell a remote write from a local one (every PE runs the same loop), this can.  Other PEs: True."""
    reset()
    host.sync()
    host.barrier_all()
    if me == 0:
        launch()
        host.sync()
    host.barrier_all()
    if me > 1:
        return True
    return written() == (me == 1)


def per_op(secs: Sequence[float], ops: float, scale: float) -> list[float]:
    return [s / ops * scale for s in secs]


def launch_overhead(host: Host, spin: Callable[[int], None], launch: Callable[[], None],
                    launches: int, reps: int) -> list[float]:
    """Host microseconds per launch: ``launches`` back-to-back launches queued behind a long spin."""
    out = []
    for r in range(-1, reps):
        host.sync()
        spin(SPIN_US_BEFORE_LAUNCHES)
        t0 = time.perf_counter()
        for _ in range(launches):
            launch()
        t1 = time.perf_counter()
        host.sync()
        if r >= 0:
            out.append((t1 - t0) / launches * 1e6)
    return out


def host_benchmarks(out: Output, host: Host, p: Params, spin: Callable[[int], None] | None = None,
                    peer: int = 0) -> None:
    """The host API's rows, each through the package's own calls (``host``: :class:`Host` or another
    package's host with the same methods): ``my_pe()`` (ns a call); allocating and freeing 1 MiB (us,
    each way of ``host.allocators()``); given ``spin``, the host time to enqueue each call of
    ``host.on_stream_calls(peer)`` on the legacy default stream (us a call, ``p.launches`` of them but at
    most ON_STREAM_CALLS, queued behind a spin as :func:`launch_overhead` queues launches):
    ``host_<name>_on_stream``."""
    my_pe = host.api_my_pe()
    vals = []
    for _ in range(p.reps):
        t0 = time.perf_counter()
        for _ in range(p.host_calls):
            my_pe()
        vals.append((time.perf_counter() - t0) / p.host_calls * 1e9)
    out.emit("host_my_pe", "", 0, vals, "ns", False, p.host_calls)

    n = ALLOC_BYTES // 4
    for bench, alloc in host.allocators():
        try:
            host.barrier_all()
            vals = []
            for _ in range(p.reps):
                t0 = time.perf_counter()
                for _ in range(p.alloc_reps):
                    host.free(alloc(n))
                vals.append((time.perf_counter() - t0) / p.alloc_reps * 1e6)
            out.emit(bench, "", ALLOC_BYTES, vals, "us", False, p.alloc_reps)
        except TypeError as exc:  # e.g. no check= keyword in this version of the host API
            print(f"{out.impl}: {bench} skipped: {exc}", file=sys.stderr)

    if spin is None:
        return
    calls = min(p.launches, ON_STREAM_CALLS)
    for name, nbytes, call in host.on_stream_calls(peer):
        host.barrier_all()
        vals = launch_overhead(host, spin, call, calls, p.reps)
        out.emit(f"host_{name}_on_stream", "", nbytes, vals, "us", False, calls)


def chunk_partition(nelems: int, workers: int, w: int) -> tuple[int, int]:
    """(start, n) of worker ``w`` (the same formula the kernels use; for tests)."""
    chunk = (nelems + workers - 1) // workers
    chunk = (chunk + ALIGN_ELEMS - 1) // ALIGN_ELEMS * ALIGN_ELEMS
    s = w * chunk
    left = nelems - s
    return s, (min(left, chunk) if left > 0 else 0)


def env_summary() -> dict:
    keys = ("NVSHMEM_DISABLE_NVLS", "NVSHMEM_SYMMETRIC_SIZE", "NVSHMEM_DSL_CACHE", "CUDA_VISIBLE_DEVICES")
    return {k: os.environ[k] for k in keys if k in os.environ}
