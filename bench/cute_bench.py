"""NVSHMEM benchmarks in the CuTe DSL: the kernels of bench/cpp/bench.cu, written with nvshmem_dsl.cute.

Run one process per PE:

    python -m nvshmem_dsl.run -n 2 bench/cute_bench.py [--quick] [--only put_bw,p_lat] [--arch sm_90a]
    mpirun -n 2 python bench/cute_bench.py

Prints one JSON line per result (impl "cute"); bench/run.py collects them.  ``compile_all``
compiles every launcher for an arch; with fake tensors it needs no GPU
(bench/test_bench_compile.py).  Element offsets are taken by building a sub-tensor
(``cute.make_tensor(t.iterator + offset, layout)``), so single-element targets (p, g, atomics,
signal words) are passed as one-element tensors, which every calling convention accepts.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import warnings  # noqa: E402

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cuda.bindings import driver as cudrv  # noqa: E402
from cutlass import Float32, Int32, Int64, Uint64  # noqa: E402

import _common as C  # noqa: E402
import _cute_api  # noqa: E402

# the bandwidth launchers' block size is a runtime value on purpose (see the launchers)
warnings.filterwarnings("ignore", message="Dynamic variable in block size")

nvc = _cute_api.api()
SIG_SET, CMP_GE = C.signal_constants()
ALIGN = C.ALIGN_ELEMS
SLOT_MASK = C.LAT_SLOTS - 1
BW_GRID, BW_BLOCK, BARRIER_BLOCK = C.BW_GRID, C.BW_BLOCK, C.BARRIER_BLOCK
U64_COUNTER, U64_DATA, U64_SRC, U64_SIGNAL = C.U64_COUNTER, C.U64_DATA, C.U64_SRC, C.U64_SIGNAL
U64_OUT = C.U64_OUT
TEAM_WORLD, COLL_ROOT = C.team_world(), C.COLL_ROOT


# ------------------------------------------------------------------ kernels (= bench.cu)


def _chunk(nelems, workers, w):
    """This worker's (start, n): chunks of ceil(nelems / workers) rounded up to ALIGN elements."""
    chunk = (nelems + workers - 1) // workers
    chunk = (chunk + ALIGN - 1) // ALIGN * ALIGN
    s = w * chunk
    n = cutlass.max(cutlass.min(nelems - s, chunk), Int64(0))
    return s, n


def _view(t, offset, n):
    return cute.make_tensor(t.iterator + offset, cute.make_layout(n))


def _block_worker(nelems):
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    return _chunk(nelems, Int64(gdim), Int64(bidx))


def _warp_worker(nelems):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    # warps per block as a Python constant (the launchers are given BW_BLOCK threads): derived from
    # cute.arch.block_dim()[0] // 32 it came out as -1 in the PTX (cutlass-dsl 4.8.1 folds it
    # wrongly when the launch shape is static; docs/troubleshooting.rst), so every warp
    # got an empty chunk and the 2026-11-22 CuTe warp figures were void
    wpb = BW_BLOCK // 32
    return _chunk(nelems, Int64(gdim) * wpb, Int64(bidx) * wpb + Int64(tidx) // 32)


@cute.kernel
def put_thread_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32, nwin: Int32):
    s, n = _block_worker(nelems)
    if n > 0:
        off = s
        end = Int64(nwin) * nelems + s
        for _ in range(iters):
            nvc.put(_view(dst, off, n), _view(src, off, n), n, peer)
            off = off + nelems
            if off == end:
                off = s
    nvc.quiet()


@cute.kernel
def put_warp_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32, nwin: Int32):
    s, n = _warp_worker(nelems)
    if n > 0:
        off = s
        end = Int64(nwin) * nelems + s
        for _ in range(iters):
            nvc.put_warp(_view(dst, off, n), _view(src, off, n), n, peer)
            off = off + nelems
            if off == end:
                off = s
    nvc.quiet()


@cute.kernel
def put_block_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32, nwin: Int32):
    s, n = _block_worker(nelems)
    if n > 0:
        off = s
        end = Int64(nwin) * nelems + s
        for _ in range(iters):
            nvc.put_block(_view(dst, off, n), _view(src, off, n), n, peer)
            off = off + nelems
            if off == end:
                off = s
    nvc.quiet()


@cute.kernel
def get_thread_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32, nwin: Int32):
    s, n = _block_worker(nelems)
    if n > 0:
        off = s
        end = Int64(nwin) * nelems + s
        for _ in range(iters):
            nvc.get(_view(dst, off, n), _view(src, off, n), n, peer)
            off = off + nelems
            if off == end:
                off = s
    nvc.quiet()


@cute.kernel
def get_warp_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32, nwin: Int32):
    s, n = _warp_worker(nelems)
    if n > 0:
        off = s
        end = Int64(nwin) * nelems + s
        for _ in range(iters):
            nvc.get_warp(_view(dst, off, n), _view(src, off, n), n, peer)
            off = off + nelems
            if off == end:
                off = s
    nvc.quiet()


@cute.kernel
def get_block_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32, nwin: Int32):
    s, n = _block_worker(nelems)
    if n > 0:
        off = s
        end = Int64(nwin) * nelems + s
        for _ in range(iters):
            nvc.get_block(_view(dst, off, n), _view(src, off, n), n, peer)
            off = off + nelems
            if off == end:
                off = s
    nvc.quiet()


@cute.kernel
def p_lat_k(dst: cute.Tensor, iters: Int32, peer: Int32):
    for i in range(iters):
        nvc.p(_view(dst, i & SLOT_MASK, 1), Float32(i), peer)
    nvc.quiet()


@cute.kernel
def g_lat_k(src: cute.Tensor, out: cute.Tensor, iters: Int32, peer: Int32):
    acc = Float32(0.0)
    for i in range(iters):
        acc = acc + Float32(nvc.g(_view(src, i & SLOT_MASK, 1), peer))
    out[0] = acc


@cute.kernel
def amo_lat_k(u64: cute.Tensor, iters: Int32, peer: Int32):
    acc = Int64(0)
    counter = _view(u64, U64_COUNTER, 1)
    for i in range(iters):
        acc = acc + Int64(nvc.atomic_fetch_add(counter, Uint64(1), peer))
    u64[U64_OUT] = Uint64(acc)


@cute.kernel
def pingpong_k(u64: cute.Tensor, iters: Int32, me: Int32, peer: Int32):
    data = _view(u64, U64_DATA, 1)
    src = _view(u64, U64_SRC, 1)
    sig = _view(u64, U64_SIGNAL, 1)
    if me < 2:
        for j in range(iters):
            i = Uint64(j) + Uint64(1)
            if me == 0:
                nvc.put_signal(data, src, 1, sig, i, SIG_SET, peer)
                nvc.signal_wait_until(sig, CMP_GE, i)
            else:
                nvc.signal_wait_until(sig, CMP_GE, i)
                nvc.put_signal(data, src, 1, sig, i, SIG_SET, peer)
    nvc.quiet()


@cute.kernel
def barrier_lat_k(iters: Int32):
    for i in range(iters):
        nvc.barrier_all_block()


def _coll_kernel(op, shape):
    """bench.cu's coll<FAMILY, SCOPE>: ``iters`` calls of collective ``op`` over TEAM_WORLD by every
    thread of the (one) block; ``shape``: its arguments (_common.coll_shape)."""
    if shape == "root":
        @cute.kernel
        def coll_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32):
            for _ in range(iters):
                op(TEAM_WORLD, dst, src, nelems, COLL_ROOT)
    elif shape == "data":
        @cute.kernel
        def coll_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32):
            for _ in range(iters):
                op(TEAM_WORLD, dst, src, nelems)
    else:
        @cute.kernel
        def coll_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32):
            for _ in range(iters):
                op(TEAM_WORLD)
    return coll_k


@cute.kernel
def empty_k(flag: cute.Tensor, v: Int32):
    if v < 0:
        flag[0] = Int32(nvc.my_pe())


@cute.kernel
def spin_k(us: Int32):
    t0 = cute.arch.globaltimer()
    limit = Int64(us) * 1000
    while Int64(cute.arch.globaltimer() - t0) < limit:
        pass


# ------------------------------------------------------------------ launchers (host side of the DSL)
#
# The bandwidth launchers take the block size as an argument (block_of): with a static one
# CuTe declares `.reqntid` on the kernel, which C++'s and Numba's bandwidth kernels do not
# declare, and with `.reqntid 1024` libNVVM recomputes loop-invariant values inside NVSHMEM's
# copy loops (tests/gpu/records/2026-11-22/cute-warp-loop-ptx.txt; the copy loop 15 SASS
# instructions with it, 10 without: loop-sass-cute-reqntid.txt, loop-sass.txt).
# The one-thread latency launchers keep their static shape: `.reqntid 1`, as C++'s and
# Numba's declare it.


@cute.jit
def launch_put_thread(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32,
                      nwin: Int32, block: Int32, stream: cudrv.CUstream):
    put_thread_k(dst, src, nelems, iters, peer, nwin).launch(grid=[BW_GRID, 1, 1], block=[block, 1, 1], stream=stream)


@cute.jit
def launch_put_warp(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32,
                    nwin: Int32, block: Int32, stream: cudrv.CUstream):
    put_warp_k(dst, src, nelems, iters, peer, nwin).launch(grid=[BW_GRID, 1, 1], block=[block, 1, 1], stream=stream)


@cute.jit
def launch_put_block(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32,
                     nwin: Int32, block: Int32, stream: cudrv.CUstream):
    put_block_k(dst, src, nelems, iters, peer, nwin).launch(grid=[BW_GRID, 1, 1], block=[block, 1, 1], stream=stream)


@cute.jit
def launch_get_thread(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32,
                      nwin: Int32, block: Int32, stream: cudrv.CUstream):
    get_thread_k(dst, src, nelems, iters, peer, nwin).launch(grid=[BW_GRID, 1, 1], block=[block, 1, 1], stream=stream)


@cute.jit
def launch_get_warp(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32,
                    nwin: Int32, block: Int32, stream: cudrv.CUstream):
    get_warp_k(dst, src, nelems, iters, peer, nwin).launch(grid=[BW_GRID, 1, 1], block=[block, 1, 1], stream=stream)


@cute.jit
def launch_get_block(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32,
                     nwin: Int32, block: Int32, stream: cudrv.CUstream):
    get_block_k(dst, src, nelems, iters, peer, nwin).launch(grid=[BW_GRID, 1, 1], block=[block, 1, 1], stream=stream)


@cute.jit
def launch_p_lat(dst: cute.Tensor, iters: Int32, peer: Int32, stream: cudrv.CUstream):
    p_lat_k(dst, iters, peer).launch(grid=[1, 1, 1], block=[1, 1, 1], stream=stream)


@cute.jit
def launch_g_lat(src: cute.Tensor, out: cute.Tensor, iters: Int32, peer: Int32, stream: cudrv.CUstream):
    g_lat_k(src, out, iters, peer).launch(grid=[1, 1, 1], block=[1, 1, 1], stream=stream)


@cute.jit
def launch_amo_lat(u64: cute.Tensor, iters: Int32, peer: Int32, stream: cudrv.CUstream):
    amo_lat_k(u64, iters, peer).launch(grid=[1, 1, 1], block=[1, 1, 1], stream=stream)


@cute.jit
def launch_pingpong(u64: cute.Tensor, iters: Int32, me: Int32, peer: Int32, stream: cudrv.CUstream):
    pingpong_k(u64, iters, me, peer).launch(grid=[1, 1, 1], block=[1, 1, 1], stream=stream)


@cute.jit
def launch_barrier_lat(iters: Int32, stream: cudrv.CUstream):
    barrier_lat_k(iters).launch(grid=[1, 1, 1], block=[BARRIER_BLOCK, 1, 1], stream=stream)


def _launch_coll(family: str, scope: str):
    """The launcher of collective ``family`` at ``scope``: one block of ``block`` threads (given at
    launch, as C++ and Numba do: no ``.reqntid``)."""
    kernel = _coll_kernel(getattr(nvc, C.coll_api(family, scope)), C.coll_shape(family))

    @cute.jit
    def launch_coll(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, block: Int32,
                    stream: cudrv.CUstream):
        kernel(dst, src, nelems, iters).launch(grid=[1, 1, 1], block=[block, 1, 1], stream=stream)
    return launch_coll


@cute.jit
def launch_empty(flag: cute.Tensor, v: Int32, stream: cudrv.CUstream):
    empty_k(flag, v).launch(grid=[1, 1, 1], block=[1, 1, 1], stream=stream)


@cute.jit
def launch_spin(us: Int32, stream: cudrv.CUstream):
    spin_k(us).launch(grid=[1, 1, 1], block=[1, 1, 1], stream=stream)


LAUNCHERS = {
    "put_thread": launch_put_thread, "put_warp": launch_put_warp, "put_block": launch_put_block,
    "get_thread": launch_get_thread, "get_warp": launch_get_warp, "get_block": launch_get_block,
    "p_lat": launch_p_lat, "g_lat": launch_g_lat, "amo_lat": launch_amo_lat, "pingpong": launch_pingpong,
    "barrier_lat": launch_barrier_lat, "empty_kernel": launch_empty, "spin": launch_spin,
    **{f"coll_{f}_{s}": _launch_coll(f, s) for f in C.COLL_FAMILIES for s in C.SCOPES},
}


def block_of(name: str) -> int:
    """Threads a block of bandwidth kernel ``name`` (the launchers' ``block`` argument)."""
    return C.THREAD_SCOPE_BLOCK if name.endswith("_thread") else BW_BLOCK


def example_args(name: str, t: dict, stream) -> tuple:
    """Arguments of launcher ``name`` given tensors t["a"], t["b"], t["lat"], t["res"], t["u64"], t["flag"],
    t["csrc"], t["cdst"]."""
    i32, i64 = Int32(1), Int64(1)
    if name.startswith(("put_", "get_")):
        return (t["a"], t["b"], i64, i32, i32, i32, Int32(block_of(name)), stream)
    if name.startswith("coll_"):
        return (t["cdst"], t["csrc"], i64, i32, Int32(C.coll_threads(name.rsplit("_", 1)[1])), stream)
    return {
        "p_lat": (t["lat"], i32, i32, stream),
        "g_lat": (t["lat"], t["res"], i32, i32, stream),
        "amo_lat": (t["u64"], i32, i32, stream),
        "pingpong": (t["u64"], i32, i32, i32, stream),
        "barrier_lat": (i32, stream),
        "empty_kernel": (t["flag"], i32, stream),
        "spin": (i32, stream),
    }[name]


def fake_tensors(max_bytes: int, npes: int = 2) -> dict:
    """Tensors with no memory behind them, for compiling without a GPU."""
    T = cute.runtime.make_fake_compact_tensor
    coll = C.coll_buffer_elems(npes)
    return {"a": T(Float32, (max_bytes // 4,), assumed_align=16), "b": T(Float32, (max_bytes // 4,), assumed_align=16),
            "lat": T(Float32, (C.LAT_SLOTS,), assumed_align=16), "res": T(Float32, (16,), assumed_align=16),
            "u64": T(Uint64, (C.U64_LEN,), assumed_align=16), "flag": T(Int32, (16,), assumed_align=16),
            "csrc": T(Float32, (coll,), assumed_align=16), "cdst": T(Float32, (coll,), assumed_align=16)}


#: The launchers each benchmark of --only needs (spin: always)
NEEDS = {"put_bw": [f"put_{s}" for s in C.SCOPES], "get_bw": [f"get_{s}" for s in C.SCOPES],
         "p_lat": ["p_lat"], "g_lat": ["g_lat"], "amo_lat": ["amo_lat"], "pingpong": ["pingpong"],
         "barrier": ["barrier_lat"], "launch": ["empty_kernel"]}


def needed(p: C.Params, coll: list) -> list:
    """The launchers a run of ``p`` uses (the collectives': those of the points ``coll``); each
    collective costs CuTe 5-80 s to compile (NVSHMEM's routine inlined), so only those are compiled."""
    names = ["spin"] + [n for bench, ns in NEEDS.items() if p.enabled(bench) for n in ns]
    return names + sorted({f"coll_{pt.name}" for pt in coll})


def compile_all(tensors: dict, arch=None, names=None, keep_ptx: bool = False) -> dict:
    """name -> compiled launcher (nvshmem_dsl.cute.compile: explicit arch, NVSHMEM module hooks)."""
    compile_ = _cute_api.compile_fn()
    stream = cudrv.CUstream(0)
    out = {}
    for name in names or LAUNCHERS:
        kwargs = {"keep_ptx": True} if keep_ptx else {}
        out[name] = compile_(LAUNCHERS[name], *example_args(name, tensors, stream), arch=arch, **kwargs)
    return out


# ------------------------------------------------------------------ host side


def main(argv=None) -> int:
    import time

    args = C.parse_args("cute", argv)
    p = C.make_params(args.quick, args.reps, args.only)
    out = C.Output("cute")
    host = C.Host()
    host.init(["nvshmem_dsl.cute._compile"])
    me, npes = host.my_pe(), host.n_pes()
    out.pe, out.npes = me, npes
    peer = (me + 1) % npes

    from cutlass.cute.runtime import from_dlpack

    max_bytes = max(p.sizes)
    arrays = {
        "a": host.array(max_bytes // 4, "float32"), "b": host.array(max_bytes // 4, "float32"),
        "lat": host.array(C.LAT_SLOTS, "float32"), "res": host.array(16, "float32"),
        "u64": host.array(C.U64_LEN, "uint64"), "flag": host.array(16, "int32"),
        "csrc": host.array(C.coll_buffer_elems(npes), "float32"), "cdst": host.array(C.coll_buffer_elems(npes), "float32"),
    }
    arrays["csrc"].set(C.coll_src_values(me, arrays["csrc"].size))
    coll = C.coll_points(p, npes, "cute")
    t = {k: from_dlpack(v, assumed_align=16) for k, v in arrays.items()}
    host.sync()
    host.barrier_all()

    t0 = time.perf_counter()
    K = compile_all(t, arch=args.arch, names=needed(p, coll))
    compile_s = time.perf_counter() - t0
    arch = next(iter(K.values())).arch
    out.line(bench="meta", quick=p.quick, init_s=round(host.init_s, 3), api=_cute_api.SOURCE, arch=arch,
             compile_all_s=round(compile_s, 2), cutlass_dsl=getattr(cutlass, "__version__", "?"),
             **host.device_info(), **host.versions(), env=C.env_summary())
    stream = cudrv.CUstream(0)

    def spin_launch(us: int) -> None:
        K["spin"](us, stream)

    timer = C.Timer(host, spin_launch)
    a, b = t["a"], t["b"]
    for op in ("put", "get"):
        if not p.enabled(f"{op}_bw"):
            continue
        for scope in C.SCOPES:
            kern = K[f"{op}_{scope}"]
            block = block_of(f"{op}_{scope}")
            for nbytes in p.sizes:
                nelems = max(1, nbytes // 4)
                iters = C.bw_iters(p, nbytes)
                nwin = C.bw_windows(p, op, nelems)
                secs = timer.run(p.reps, lambda: kern(a, b, nelems, iters, peer, nwin, block, stream))
                out.emit(f"{op}_bw", scope, nbytes, [nbytes * iters / s / 1e9 for s in secs], "GB/s", True, iters)

    if p.enabled("p_lat"):
        it = p.lat_iters
        arrays["lat"].fill(-1)
        secs = timer.run(p.reps, lambda: K["p_lat"](t["lat"], it, peer, stream))
        ok = C.p_pattern_ok(arrays["lat"], it) and C.lands_on_peer(
            host, me, lambda: arrays["lat"].fill(-1), lambda: K["p_lat"](t["lat"], it, peer, stream),
            lambda: C.p_pattern_ok(arrays["lat"], it))
        out.emit("p_lat", "thread", 4, C.per_op(secs, it, 1e9), "ns/op", False, it, checked=ok)
    if p.enabled("g_lat"):
        it = p.lat_iters
        secs = timer.run(p.reps, lambda: K["g_lat"](t["lat"], t["res"], it, peer, stream))
        out.emit("g_lat", "thread", 4, C.per_op(secs, it, 1e9), "ns/op", False, it)
    if p.enabled("amo_lat"):
        it = p.amo_iters
        arrays["u64"][C.U64_COUNTER] = 0
        secs = timer.run(p.reps, lambda: K["amo_lat"](t["u64"], it, peer, stream))
        ok = C.amo_count_ok(arrays["u64"], p.reps + 1, it) and C.lands_on_peer(
            host, me, lambda: arrays["u64"].__setitem__(C.U64_COUNTER, 0),
            lambda: K["amo_lat"](t["u64"], it, peer, stream), lambda: C.amo_count_ok(arrays["u64"], 1, it))
        out.emit("atomic_fetch_add_lat", "thread", 8, C.per_op(secs, it, 1e9), "ns/op", False, it, checked=ok)
    if p.enabled("pingpong") and npes >= 2:
        it = p.pingpong_iters
        sig = arrays["u64"][C.U64_SIGNAL:C.U64_SIGNAL + 1]
        secs = timer.run(p.reps, lambda: K["pingpong"](t["u64"], it, me, peer, stream), before=lambda: sig.fill(0))
        out.emit("put_signal_pingpong", "thread", 8, C.per_op(secs, 2 * it, 1e6), "us", False, it)
    if p.enabled("barrier"):
        it = p.barrier_iters
        secs = timer.run(p.reps, lambda: K["barrier_lat"](it, stream))
        out.emit("barrier_all_block_lat", "block", 0, C.per_op(secs, it, 1e6), "us", False, it)
    for pt in coll:
        kern = K[f"coll_{pt.name}"]
        arrays["cdst"].fill(-1)
        secs = timer.run(p.reps, lambda: kern(t["cdst"], t["csrc"], pt.nelems, pt.iters, pt.threads, stream))
        C.emit_coll(out, pt, secs, **C.coll_check(pt, me, npes, arrays["cdst"]))
    if p.enabled("launch"):
        kern, flag = K["empty_kernel"], t["flag"]
        kern(flag, 1, stream)
        vals = C.launch_overhead(host, spin_launch, lambda: kern(flag, 1, stream), p.launches, p.reps)
        out.emit("launch_overhead", "", 0, vals, "us", False, p.launches)
    if p.enabled("host"):
        C.host_benchmarks(out, host, p)

    host.sync()
    del t
    host.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
