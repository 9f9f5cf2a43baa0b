"""NVSHMEM benchmarks in Triton: the kernels of bench/cpp/bench.cu, written with nvshmem_dsl.triton.

Run one process per PE:

    python -m nvshmem_dsl.run -n 2 bench/triton_bench.py [--quick] [--only put_bw,p_lat]
    mpirun -n 2 python bench/triton_bench.py

Prints one JSON line per result (impl "triton"); bench/run.py collects them.  What each kernel
is (parameters, geometry, rows) is bench/bench_shapes.py's; ``compile_kernel`` compiles one for a
``GPUTarget`` without a GPU (bench/test_bench_compile.py).

Triton specifics (nvshmem_dsl.triton): a program is one CTA of ``num_warps`` warps whose scalar
code every thread runs; a thread-scope NVSHMEM call is made by its thread 0, a warp-scope one by
warp 0, a block-scope one by all threads (docs/api/triton.rst says which wait).  So the thread-scope
bandwidth kernels are BW_GRID programs of one warp (C++: blocks of one thread), the warp-scope
ones BW_GRID x BW_BLOCK / 32 programs of one warp, one worker each, the same chunks as C++'s warps
(shapes.triton_geometry); the latency kernels are one program of one warp (C++: one thread).
Arrays are passed as Triton pointers (nvshmem_dsl.triton.pointer of the cupy arrays); launches go
to the legacy default stream (Triton without torch launches on the device's default stream, where
the timer's cupy events are recorded; with torch imported, on torch's current stream, the same
stream 0 unless changed).  The scalar parameters are not specialised (``do_not_specialize``), so
one compile serves every size; ``nelems`` is widened to 64 bits in the kernel.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# silence Triton 3.9's warning about its FP fusion default: keep 3.9's default (nothing here to fuse)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import nvshmem_dsl.triton as nv  # noqa: E402

import _common as C  # noqa: E402
import bench_shapes as shapes  # noqa: E402

ALIGN = tl.constexpr(C.ALIGN_ELEMS)
SLOT_MASK = tl.constexpr(C.LAT_SLOTS - 1)
U64_COUNTER = tl.constexpr(C.U64_COUNTER)
U64_OUT = tl.constexpr(C.U64_OUT)
U64_DATA = tl.constexpr(C.U64_DATA)
U64_SRC = tl.constexpr(C.U64_SRC)
U64_SIGNAL = tl.constexpr(C.U64_SIGNAL)
COLL_ROOT = tl.constexpr(C.COLL_ROOT)


def _jit(fn):
    """triton.jit without specialisation of the scalar parameters (one compile for every size)."""
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    return triton.jit(fn, do_not_specialize=[n for n in names if n in shapes.SCALARS])


# ------------------------------------------------------------------ kernels (= bench.cu)


@triton.jit
def _chunk(nelems, workers, w):
    """This worker's (start, n): chunks of ceil(nelems / workers) rounded up to ALIGN elements."""
    chunk = (nelems + workers - 1) // workers
    chunk = (chunk + ALIGN - 1) // ALIGN * ALIGN
    s = w * chunk
    n = tl.maximum(tl.minimum(nelems - s, chunk), 0)
    return s, n


@triton.jit
def _rma(dst, src, n, peer, CALL: tl.constexpr):
    if CALL == "put":
        nv.put(dst, src, n, peer)
    elif CALL == "put_warp":
        nv.put_warp(dst, src, n, peer)
    elif CALL == "put_block":
        nv.put_block(dst, src, n, peer)
    elif CALL == "get":
        nv.get(dst, src, n, peer)
    elif CALL == "get_warp":
        nv.get_warp(dst, src, n, peer)
    else:
        tl.static_assert(CALL == "get_block")
        nv.get_block(dst, src, n, peer)


def rma_bw(dst, src, nelems, iters, peer, nwin, CALL: tl.constexpr):
    """bench.cu's rma_bw for NVSHMEM call CALL: one worker per program (shapes.triton_geometry),
    ``iters`` calls, each moving this worker's chunk of window ``i % nwin``."""
    nelems = nelems.to(tl.int64)
    s, n = _chunk(nelems, tl.num_programs(0).to(tl.int64), tl.program_id(0).to(tl.int64))
    if n > 0:
        off = s
        end = nwin.to(tl.int64) * nelems + s
        for _ in range(iters):
            _rma(dst + off, src + off, n, peer, CALL)
            off += nelems
            if off == end:
                off = s
    nv.quiet()


def p_lat(dst, iters, peer):
    for i in range(iters):
        nv.p(dst + (i & SLOT_MASK), i.to(tl.float32), peer)
    nv.quiet()


def p_lat_peer_ptr(dst, iters, peer):
    """The hardware floor of p_lat: plain stores through the peer's address, no NVSHMEM call."""
    q = nv.peer(dst, peer)
    for i in range(iters):
        tl.store(q + (i & SLOT_MASK), i.to(tl.float32))
    nv.quiet()


def g_lat(src, out, iters, peer):
    acc = 0.0
    for i in range(iters):
        acc += nv.g(src + (i & SLOT_MASK), peer)
    tl.store(out, acc)


def g_lat_peer_ptr(src, out, iters, peer):
    """The hardware floor of g_lat: plain loads through the peer's address."""
    q = nv.peer(src, peer)
    acc = 0.0
    for i in range(iters):
        acc += tl.load(q + (i & SLOT_MASK))
    tl.store(out, acc)


def amo_lat(u64, iters, peer):
    acc = tl.cast(0, tl.uint64)
    for i in range(iters):
        acc += nv.atomic_fetch_add(u64 + U64_COUNTER, 1, peer)
    tl.store(u64 + U64_OUT, acc)


def amo_lat_peer_ptr(u64, iters, peer):
    """The hardware floor of amo_lat in Triton: its own scalar atomic through the peer's address
    (system scope and relaxed, as NVSHMEM's), no NVSHMEM call."""
    q = nv.peer(u64, peer)
    acc = tl.cast(0, tl.uint64)
    for i in range(iters):
        acc += tl.atomic_add(q + U64_COUNTER, tl.cast(1, tl.uint64), sem="relaxed", scope="sys")
    tl.store(u64 + U64_OUT, acc)


def pingpong(u64, iters, me, peer):
    if me < 2:
        for j in range(iters):
            i = (j + 1).to(tl.uint64)
            if me == 0:
                nv.put_signal(u64 + U64_DATA, u64 + U64_SRC, 1, u64 + U64_SIGNAL, i, nv.SIGNAL_SET, peer)
                nv.signal_wait_until(u64 + U64_SIGNAL, nv.CMP_GE, i)
            else:
                nv.signal_wait_until(u64 + U64_SIGNAL, nv.CMP_GE, i)
                nv.put_signal(u64 + U64_DATA, u64 + U64_SRC, 1, u64 + U64_SIGNAL, i, nv.SIGNAL_SET, peer)
    nv.quiet()


def barrier_lat(iters):
    for i in range(iters):
        nv.barrier_all_block()


@triton.jit
def _coll(dst, src, nelems, CALL: tl.constexpr):
    if CALL == "broadcast":
        nv.broadcast(nv.TEAM_WORLD, dst, src, nelems, COLL_ROOT)
    elif CALL == "broadcast_warp":
        nv.broadcast_warp(nv.TEAM_WORLD, dst, src, nelems, COLL_ROOT)
    elif CALL == "broadcast_block":
        nv.broadcast_block(nv.TEAM_WORLD, dst, src, nelems, COLL_ROOT)
    elif CALL == "fcollect":
        nv.fcollect(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "fcollect_warp":
        nv.fcollect_warp(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "fcollect_block":
        nv.fcollect_block(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "alltoall":
        nv.alltoall(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "alltoall_warp":
        nv.alltoall_warp(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "alltoall_block":
        nv.alltoall_block(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "sum_reduce":
        nv.sum_reduce(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "sum_reduce_warp":
        nv.sum_reduce_warp(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "sum_reduce_block":
        nv.sum_reduce_block(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "sum_reducescatter":
        nv.sum_reducescatter(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "sum_reducescatter_warp":
        nv.sum_reducescatter_warp(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "sum_reducescatter_block":
        nv.sum_reducescatter_block(nv.TEAM_WORLD, dst, src, nelems)
    elif CALL == "barrier":
        nv.barrier(nv.TEAM_WORLD)
    elif CALL == "barrier_warp":
        nv.barrier_warp(nv.TEAM_WORLD)
    else:
        tl.static_assert(CALL == "barrier_block")
        nv.barrier_block(nv.TEAM_WORLD)


def coll(dst, src, nelems, iters, CALL: tl.constexpr):
    """bench.cu's coll<FAMILY, SCOPE>: ``iters`` calls of collective CALL over TEAM_WORLD by the
    threads of the one program its scope names."""
    for _ in range(iters):
        _coll(dst, src, nelems, CALL)


def empty_kernel(flag, v):
    if v < 0:
        tl.store(flag, nv.my_pe())


def spin(us):
    for _ in range(us):
        tl.inline_asm_elementwise("nanosleep.u32 1000;\n\tmov.u32 $0, $1;", "=r,r", [us], dtype=tl.int32,
                                  is_pure=False, pack=1)


rma_bw, p_lat, p_lat_peer_ptr, g_lat, g_lat_peer_ptr, amo_lat, amo_lat_peer_ptr, pingpong, barrier_lat, coll, \
    empty_kernel, spin = (
    _jit(f) for f in (rma_bw, p_lat, p_lat_peer_ptr, g_lat, g_lat_peer_ptr, amo_lat, amo_lat_peer_ptr, pingpong,
                      barrier_lat, coll,
                      empty_kernel, spin))

#: name (bench/bench_shapes.py) -> (triton.jit function, its constexpr arguments): the bandwidth and
#: collective shapes are one kernel each, instantiated with the NVSHMEM function they call.
KERNELS = {
    **{s.kernel: (rma_bw, {"CALL": s.call}) for s in shapes.BW},
    **{name: (fn, {}) for name, fn in (("p_lat", p_lat), ("p_lat_peer_ptr", p_lat_peer_ptr), ("g_lat", g_lat),
                                       ("g_lat_peer_ptr", g_lat_peer_ptr), ("amo_lat", amo_lat),
                                       ("amo_lat_peer_ptr", amo_lat_peer_ptr),
                                       ("pingpong", pingpong), ("barrier_lat", barrier_lat),
                                       ("empty_kernel", empty_kernel), ("spin", spin))},
    **{s.kernel: (coll, {"CALL": s.call}) for s in shapes.COLL},
}

#: Triton signature types of the parameter types of bench/bench_shapes.py
TRITON_TYPES = {"float32[]": "*fp32", "uint64[]": "*u64", "int32[]": "*i32", "int32": "i32", "int64": "i64"}


def signature(name: str) -> dict:
    """Kernel ``name``'s Triton signature (shapes.py parameter types, then its constexprs)."""
    fn, consts = KERNELS[name]
    sig = dict(zip(fn.arg_names, (TRITON_TYPES[shapes.arg_type(a)] for a in shapes.SHAPES[name].args)))
    return {**sig, **{k: "constexpr" for k in consts}}


def compile_kernel(name: str, target=None, **options):
    """Kernel ``name`` compiled for ``target`` (default sm_90: ``GPUTarget("cuda", 90, 32)``), no GPU
    needed, with the ``num_warps`` of its launches; ``options`` go to triton.compile."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, consts = KERNELS[name]
    return triton.compile(ASTSource(fn=fn, signature=signature(name), constexprs=dict(consts)),
                          target=target or GPUTarget("cuda", 90, 32),
                          options={**shapes.triton_options(shapes.SHAPES[name]), **options})


# ------------------------------------------------------------------ host side


def main(argv=None) -> int:
    import time

    _, p, out, host, arrays = shapes.start("triton", ["nvshmem_dsl.triton"], argv)
    bufs = {name: nv.pointer(x) for name, x in arrays.items()}
    coll = C.coll_points(p, out.npes, "triton")

    def launch(s, args_):
        fn, consts = KERNELS[s.kernel]
        fn[(shapes.triton_geometry(s)[0],)](*args_, **shapes.triton_options(s), **consts)

    # compile every kernel the run launches before timing anything (as the CuTe benchmark does)
    names = shapes.needed(p, coll, KERNELS)
    t0 = time.perf_counter()
    for name in names:
        fn, consts = KERNELS[name]
        s = shapes.SHAPES[name]
        example = tuple(bufs[a] if a in bufs else 1 for a in s.args)
        fn.warmup(*example, grid=(shapes.triton_geometry(s)[0],), **shapes.triton_options(s), **consts)
    compile_s = time.perf_counter() - t0
    shapes.meta(out, host, p, api=nv.__name__, compile_all_s=round(compile_s, 2), kernels=len(names),
                triton=triton.__version__)

    shapes.run_rows(out, host, p, arrays, bufs, launch, names)
    host.sync()
    del bufs
    host.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
