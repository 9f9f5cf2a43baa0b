"""NVSHMEM benchmarks in Numba-CUDA: the kernels of bench/cpp/bench.cu, written with nvshmem_dsl.numba.

Run one process per PE:

    python -m nvshmem_dsl.run -n 2 bench/numba_bench.py [--quick] [--only put_bw,p_lat]
    mpirun -n 2 python bench/numba_bench.py

Prints one JSON line per result (impl "numba"); bench/run.py collects them.  The kernels are
plain Python functions here (``KERNELS``) so that tests can compile them to PTX without a GPU
(bench/test_bench_compile.py); ``jit_kernels()`` makes the ``cuda.jit`` dispatchers.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# 1-thread and 1-block kernels are the point of the latency benchmarks: no occupancy warnings
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

from numba import cuda, float32, int32, int64, uint64  # noqa: E402

import _common as C  # noqa: E402

nv = C.numba_api()
SIG_SET, CMP_GE = C.signal_constants()
ALIGN = C.ALIGN_ELEMS
SLOT_MASK = C.LAT_SLOTS - 1
U64_COUNTER, U64_OUT, U64_DATA, U64_SRC, U64_SIGNAL = C.U64_COUNTER, C.U64_OUT, C.U64_DATA, C.U64_SRC, C.U64_SIGNAL
TEAM_WORLD, COLL_ROOT = C.team_world(), C.COLL_ROOT


# ------------------------------------------------------------------ kernels (= bench.cu)


@cuda.jit(device=True, inline="always")
def chunk_of(nelems, workers, w):
    """This worker's (start, n): chunks of ceil(nelems / workers) rounded up to ALIGN elements."""
    chunk = (nelems + workers - 1) // workers
    chunk = (chunk + ALIGN - 1) // ALIGN * ALIGN
    s = w * chunk
    left = nelems - s
    n = left if left < chunk else chunk
    if n < 0:
        n = int64(0)
    return s, n


@cuda.jit(device=True, inline="always")
def block_worker(nelems):
    """(start, n) of this block (thread- and block-scope kernels: one worker a block)."""
    return chunk_of(nelems, int64(cuda.gridDim.x), int64(cuda.blockIdx.x))


@cuda.jit(device=True, inline="always")
def warp_worker(nelems):
    """(start, n) of this warp (warp-scope kernels: one worker a warp)."""
    wpb = int64(cuda.blockDim.x // 32)
    return chunk_of(nelems, int64(cuda.gridDim.x) * wpb, int64(cuda.blockIdx.x) * wpb + cuda.threadIdx.x // 32)


def rma_bw(name, op, worker, window=nv.window):
    """Kernel ``name``, bench.cu's rma_bw for NVSHMEM call ``op`` (put or get at some scope) and
    ``worker`` (who moves which chunk): ``iters`` calls, each moving this worker's chunk of
    window ``i % nwin``, the window's offset carried from one iteration to the next.
    (``window``: how the arrays are cut; bench/experiments/put_shapes.py tries another.)"""
    def kernel(dst, src, nelems, iters, peer, nwin):
        s, n = worker(nelems)
        if n > 0:
            off = s
            end = nwin * nelems + s
            for _ in range(iters):
                op(window(dst, off, n), window(src, off, n), n, peer)
                off += nelems
                if off == end:
                    off = s
        nv.quiet()
    kernel.__name__ = kernel.__qualname__ = name
    return kernel


put_thread = rma_bw("put_thread", nv.put, block_worker)
put_warp = rma_bw("put_warp", nv.put_warp, warp_worker)
put_block = rma_bw("put_block", nv.put_block, block_worker)
get_thread = rma_bw("get_thread", nv.get, block_worker)
get_warp = rma_bw("get_warp", nv.get_warp, warp_worker)
get_block = rma_bw("get_block", nv.get_block, block_worker)


def p_lat(dst, iters, peer):
    # float32(int32(i)): the value converted from a 32-bit counter, as C++ does ((float)i, int i);
    # Numba's loop counter is 64-bit and I2F.U64 alone costs ~25 ns a call in this loop.
    for i in range(iters):
        nv.p(dst, i & SLOT_MASK, float32(int32(i)), peer)
    nv.quiet()


def g_lat(src, out, iters, peer):
    acc = float32(0.0)
    for i in range(iters):
        acc += nv.g(src, i & SLOT_MASK, peer)
    out[0] = acc


def p_lat_peer_ptr(dst, iters, peer):
    """The hardware floor of p_lat: plain stores through the peer view, no NVSHMEM call."""
    q = nv.peer(dst, peer)
    for i in range(iters):
        q[i & SLOT_MASK] = float32(int32(i))
    nv.quiet()


def g_lat_peer_ptr(src, out, iters, peer):
    """The hardware floor of g_lat: plain loads through the peer view."""
    q = nv.peer(src, peer)
    acc = float32(0.0)
    for i in range(iters):
        acc += q[i & SLOT_MASK]
    out[0] = acc


def amo_lat(u64, iters, peer):
    acc = uint64(0)
    for i in range(iters):
        acc += nv.atomic_fetch_add(u64, U64_COUNTER, uint64(1), peer)
    u64[U64_OUT] = acc


def pingpong(u64, iters, me, peer):
    if me > 1:
        return
    data = u64[U64_DATA:U64_DATA + 1]
    src = u64[U64_SRC:U64_SRC + 1]
    sig = u64[U64_SIGNAL:U64_SIGNAL + 1]
    for i in range(1, iters + 1):
        if me == 0:
            nv.put_signal(data, src, 1, sig, uint64(i), SIG_SET, peer)
            nv.signal_wait_until(sig, CMP_GE, uint64(i))
        else:
            nv.signal_wait_until(sig, CMP_GE, uint64(i))
            nv.put_signal(data, src, 1, sig, uint64(i), SIG_SET, peer)
    nv.quiet()


def barrier_lat(iters):
    for i in range(iters):
        nv.barrier_all_block()


def coll(name, op, shape):
    """Kernel ``name``, bench.cu's coll<FAMILY, SCOPE>: ``iters`` calls of collective ``op`` over
    TEAM_WORLD by every thread of the (one) block; ``shape``: its arguments (_common.coll_shape)."""
    if shape == "root":
        def kernel(dst, src, nelems, iters):
            for _ in range(iters):
                op(TEAM_WORLD, dst, src, nelems, COLL_ROOT)
    elif shape == "data":
        def kernel(dst, src, nelems, iters):
            for _ in range(iters):
                op(TEAM_WORLD, dst, src, nelems)
    else:
        def kernel(dst, src, nelems, iters):
            for _ in range(iters):
                op(TEAM_WORLD)
    kernel.__name__ = kernel.__qualname__ = name
    return kernel


COLL_KERNELS = {f"coll_{f}_{s}": coll(f"coll_{f}_{s}", getattr(nv, C.coll_api(f, s)), C.coll_shape(f))
                for f in C.COLL_FAMILIES for s in C.SCOPES}


def empty_kernel(flag, v):
    if v < 0:
        flag[0] = nv.my_pe()


def spin(us):
    for i in range(us):
        cuda.nanosleep(1000)


BW_KERNELS = {
    ("put", "thread"): put_thread, ("put", "warp"): put_warp, ("put", "block"): put_block,
    ("get", "thread"): get_thread, ("get", "warp"): get_warp, ("get", "block"): get_block,
}

# name -> (python function, Numba signature); the signatures are those the host code launches.
_F32, _U64, _I32 = "float32[::1]", "uint64[::1]", "int32"
SIGNATURES = {
    **{f"{op}_{scope}": f"void({_F32}, {_F32}, int64, {_I32}, {_I32}, {_I32})" for op, scope in BW_KERNELS},
    "p_lat": f"void({_F32}, {_I32}, {_I32})",
    "g_lat": f"void({_F32}, {_F32}, {_I32}, {_I32})",
    "p_lat_peer_ptr": f"void({_F32}, {_I32}, {_I32})",
    "g_lat_peer_ptr": f"void({_F32}, {_F32}, {_I32}, {_I32})",
    "amo_lat": f"void({_U64}, {_I32}, {_I32})",
    "pingpong": f"void({_U64}, {_I32}, {_I32}, {_I32})",
    "barrier_lat": f"void({_I32})",
    **{name: f"void({_F32}, {_F32}, int64, {_I32})" for name in COLL_KERNELS},
    "empty_kernel": f"void(int32[::1], {_I32})",
    "spin": f"void({_I32})",
}
KERNELS = {
    **{f"{op}_{scope}": fn for (op, scope), fn in BW_KERNELS.items()},
    "p_lat": p_lat, "g_lat": g_lat, "p_lat_peer_ptr": p_lat_peer_ptr, "g_lat_peer_ptr": g_lat_peer_ptr, "amo_lat": amo_lat, "pingpong": pingpong,
    "barrier_lat": barrier_lat, **COLL_KERNELS, "empty_kernel": empty_kernel, "spin": spin,
}


#: The one-thread latency kernels declare their launch shape, as bench.cu's do (ONE_THREAD) and
#: CuTe's static launches do (.reqntid 1): with it ptxas does not aggregate a warp's atomics.
#: BENCH_ONE_THREAD_BOUNDS=0 leaves it out (bench/experiments/one_thread_bounds.sh).
ONE_THREAD = ("p_lat", "p_lat_peer_ptr", "g_lat", "g_lat_peer_ptr", "amo_lat", "pingpong")


def jit_options(name: str) -> dict:
    """The ``cuda.jit`` options of kernel ``name``."""
    if name in ONE_THREAD and os.environ.get("BENCH_ONE_THREAD_BOUNDS", "1") != "0":
        return {"launch_bounds": (1,)}
    return {}


def jit_kernels() -> dict:
    """Lazily compiled dispatchers (compiled at the first launch, i.e. in the warm-up)."""
    return {name: cuda.jit(fn, **jit_options(name)) for name, fn in KERNELS.items()}


# ------------------------------------------------------------------ host side


def main(argv=None) -> int:
    args = C.parse_args("numba", argv)
    p = C.make_params(args.quick, args.reps, args.only)
    out = C.Output("numba")
    host = C.Host()
    host.init(["nvshmem_dsl.numba"])
    me, npes = host.my_pe(), host.n_pes()
    out.pe, out.npes = me, npes
    peer = (me + 1) % npes
    import numba_cuda

    out.line(bench="meta", quick=p.quick, init_s=round(host.init_s, 3), api=nv.__name__,
             numba_cuda=getattr(numba_cuda, "__version__", "?"), **host.device_info(), **host.versions(),
             env=C.env_summary())

    K = jit_kernels()
    stream = cuda.legacy_default_stream()
    max_bytes = max(p.sizes)
    a_cp = host.array(max_bytes // 4, "float32")
    b_cp = host.array(max_bytes // 4, "float32")
    lat_cp = host.array(C.LAT_SLOTS, "float32")
    res_cp = host.array(16, "float32")
    u64_cp = host.array(C.U64_LEN, "uint64")
    flag_cp = host.array(16, "int32")
    csrc_cp = host.array(C.coll_buffer_elems(npes), "float32")
    cdst_cp = host.array(C.coll_buffer_elems(npes), "float32")
    csrc_cp.set(C.coll_src_values(me, csrc_cp.size))
    a, b, lat, res, u64, flag, csrc, cdst = (cuda.as_cuda_array(x) for x in (
        a_cp, b_cp, lat_cp, res_cp, u64_cp, flag_cp, csrc_cp, cdst_cp))
    host.sync()
    host.barrier_all()

    def spin_launch(us: int) -> None:
        K["spin"][1, 1, stream](us)

    timer = C.Timer(host, spin_launch)

    for op in ("put", "get"):
        if not p.enabled(f"{op}_bw"):
            continue
        for scope in C.SCOPES:
            kern = K[f"{op}_{scope}"]
            block = C.THREAD_SCOPE_BLOCK if scope == "thread" else C.BW_BLOCK
            for nbytes in p.sizes:
                nelems = max(1, nbytes // 4)
                iters = C.bw_iters(p, nbytes)
                nwin = C.bw_windows(p, op, nelems)
                secs = timer.run(p.reps, lambda: kern[C.BW_GRID, block, stream](a, b, nelems, iters, peer, nwin))
                out.emit(f"{op}_bw", scope, nbytes, [nbytes * iters / s / 1e9 for s in secs], "GB/s", True, iters)

    if p.enabled("p_lat"):
        it = p.lat_iters
        lat_cp.fill(-1)
        secs = timer.run(p.reps, lambda: K["p_lat"][1, 1, stream](lat, it, peer))
        ok = C.p_pattern_ok(lat_cp, it) and C.lands_on_peer(
            host, me, lambda: lat_cp.fill(-1), lambda: K["p_lat"][1, 1, stream](lat, it, peer),
            lambda: C.p_pattern_ok(lat_cp, it))
        out.emit("p_lat", "thread", 4, C.per_op(secs, it, 1e9), "ns/op", False, it, checked=ok)
        lat_cp.fill(-1)
        secs = timer.run(p.reps, lambda: K["p_lat_peer_ptr"][1, 1, stream](lat, it, peer))
        out.emit("p_lat", "peer_ptr", 4, C.per_op(secs, it, 1e9), "ns/op", False, it,
                 checked=C.p_pattern_ok(lat_cp, it))
    if p.enabled("g_lat"):
        it = p.lat_iters
        secs = timer.run(p.reps, lambda: K["g_lat"][1, 1, stream](lat, res, it, peer))
        out.emit("g_lat", "thread", 4, C.per_op(secs, it, 1e9), "ns/op", False, it)
        secs = timer.run(p.reps, lambda: K["g_lat_peer_ptr"][1, 1, stream](lat, res, it, peer))
        out.emit("g_lat", "peer_ptr", 4, C.per_op(secs, it, 1e9), "ns/op", False, it)
    if p.enabled("amo_lat"):
        it = p.amo_iters
        u64_cp[C.U64_COUNTER] = 0
        secs = timer.run(p.reps, lambda: K["amo_lat"][1, 1, stream](u64, it, peer))
        ok = C.amo_count_ok(u64_cp, p.reps + 1, it) and C.lands_on_peer(
            host, me, lambda: u64_cp.__setitem__(C.U64_COUNTER, 0),
            lambda: K["amo_lat"][1, 1, stream](u64, it, peer), lambda: C.amo_count_ok(u64_cp, 1, it))
        out.emit("atomic_fetch_add_lat", "thread", 8, C.per_op(secs, it, 1e9), "ns/op", False, it, checked=ok)
    if p.enabled("pingpong") and npes >= 2:
        it = p.pingpong_iters
        sig = u64_cp[C.U64_SIGNAL:C.U64_SIGNAL + 1]
        secs = timer.run(p.reps, lambda: K["pingpong"][1, 1, stream](u64, it, me, peer),
                         before=lambda: sig.fill(0))
        out.emit("put_signal_pingpong", "thread", 8, C.per_op(secs, 2 * it, 1e6), "us", False, it)
    if p.enabled("barrier"):
        it = p.barrier_iters
        secs = timer.run(p.reps, lambda: K["barrier_lat"][1, C.BARRIER_BLOCK, stream](it))
        out.emit("barrier_all_block_lat", "block", 0, C.per_op(secs, it, 1e6), "us", False, it)
    for pt in C.coll_points(p, npes, "numba"):
        kern = K[f"coll_{pt.name}"]
        cdst_cp.fill(-1)
        secs = timer.run(p.reps, lambda: kern[1, pt.threads, stream](cdst, csrc, pt.nelems, pt.iters))
        C.emit_coll(out, pt, secs, **C.coll_check(pt, me, npes, cdst_cp))
    if p.enabled("launch"):
        kern = K["empty_kernel"]
        kern[1, 1, stream](flag, 1)  # compile
        vals = C.launch_overhead(host, spin_launch, lambda: kern[1, 1, stream](flag, 1), p.launches, p.reps)
        out.emit("launch_overhead", "", 0, vals, "us", False, p.launches)
        # cupy arrays straight in: Numba converts (and stream-synchronises) them at every launch
        vals = C.launch_overhead(host, lambda us: None, lambda: kern[1, 1, stream](flag_cp, 1),
                                 p.launches, p.reps)
        out.emit("launch_overhead_cupy_args", "", 0, vals, "us", False, p.launches)
    if p.enabled("host"):
        C.host_benchmarks(out, host, p)

    del a, b, lat, res, u64, flag, csrc, cdst
    host.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
