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
import bench_shapes as shapes  # noqa: E402

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


_view = _cute_api.view


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


_WORKERS = {"block": _block_worker, "warp": _warp_worker}


def _rma_bw_kernel(op, worker):
    """bench.cu's rma_bw for NVSHMEM call ``op`` (put or get at some scope) and ``worker`` (who
    moves which chunk): ``iters`` calls, each moving this worker's chunk of window ``i % nwin``."""
    @cute.kernel
    def rma_bw_k(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32, nwin: Int32):
        s, n = worker(nelems)
        if n > 0:
            off = s
            end = Int64(nwin) * nelems + s
            for _ in range(iters):
                op(_view(dst, off, n), _view(src, off, n), n, peer)
                off = off + nelems
                if off == end:
                    off = s
        nvc.quiet()
    return rma_bw_k


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
# The warp- and block-scope bandwidth launchers take the block size as an argument (block_of): with a
# static one CuTe declares `.reqntid` on the kernel, and with `.reqntid 1024` libNVVM recomputes
# loop-invariant values inside NVSHMEM's copy loops (tests/gpu/records/2026-11-22/cute-warp-loop-ptx.txt;
# the copy loop 15 SASS instructions with it, 10 without: loop-sass-cute-reqntid.txt, loop-sass.txt);
# they stay within 64 registers without it.  The one-thread launchers (latency, and the thread-scope
# bandwidth kernels: a block of one thread) keep their static shape, `.reqntid 1`, as Numba's kernels
# declare it (launch_bounds) and C++'s latency kernels: given at run time, a thread-scope put kernel got
# 54 registers where Numba's gets 189, and ran 0.93-0.96x of C++ from 64 KiB to 4 MiB at one PE with
# NVSHMEM 3.8 (1.02-1.35x static: tests/gpu/records/2026-11-25/h200-1pe-put-get-local-nv38.txt).


def block_at_launch(name: str) -> bool:
    """Whether launcher ``name`` takes its block size as an argument (warp- and block-scope bandwidth
    kernels, see above); the others, the collectives' included, launch a static shape."""
    s = shapes.SHAPES[name]
    return s.workers in ("block", "warp") and s.block > 1 and s.bench != "coll"


def _launch_bw(shape):
    """The launcher of bandwidth shape ``shape`` (bench/bench_shapes.py), its block size given at launch
    (a block of one thread: its static shape, see above)."""
    kernel = _rma_bw_kernel(getattr(nvc, shape.call), _WORKERS[shape.workers])
    if not block_at_launch(shape.kernel):
        @cute.jit
        def launch_bw_one(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32, nwin: Int32,
                          stream: cudrv.CUstream):
            kernel(dst, src, nelems, iters, peer, nwin).launch(grid=[BW_GRID, 1, 1], block=[1, 1, 1], stream=stream)
        return launch_bw_one

    @cute.jit
    def launch_bw(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, peer: Int32, nwin: Int32,
                  block: Int32, stream: cudrv.CUstream):
        kernel(dst, src, nelems, iters, peer, nwin).launch(grid=[BW_GRID, 1, 1], block=[block, 1, 1], stream=stream)
    return launch_bw


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


def _launch_coll(shape):
    """The launcher of collective shape ``shape`` (bench/bench_shapes.py): one block of its threads, a
    static shape (``.reqntid``), as Numba's collective kernels declare theirs (launch_bounds): the objects
    of the collectives then take what that block leaves a thread (nvshmem_dsl.linker.outline.register_cap;
    given at launch, 64: broadcast thread 1.17x of C++ where Numba's was 1.03x,
    tests/gpu/records/2026-11-25/h200-abi-cute.txt)."""
    kernel = _coll_kernel(getattr(nvc, shape.call), C.coll_shape(shape.scope.rsplit("_", 1)[0]))
    threads = shape.block

    @cute.jit
    def launch_coll(dst: cute.Tensor, src: cute.Tensor, nelems: Int64, iters: Int32, stream: cudrv.CUstream):
        kernel(dst, src, nelems, iters).launch(grid=[1, 1, 1], block=[threads, 1, 1], stream=stream)
    return launch_coll


@cute.jit
def launch_empty(flag: cute.Tensor, v: Int32, stream: cudrv.CUstream):
    empty_k(flag, v).launch(grid=[1, 1, 1], block=[1, 1, 1], stream=stream)


@cute.jit
def launch_spin(us: Int32, stream: cudrv.CUstream):
    spin_k(us).launch(grid=[1, 1, 1], block=[1, 1, 1], stream=stream)


LAUNCHERS = {
    **{s.kernel: _launch_bw(s) for s in shapes.BW},
    "p_lat": launch_p_lat, "g_lat": launch_g_lat, "amo_lat": launch_amo_lat, "pingpong": launch_pingpong,
    "barrier_lat": launch_barrier_lat, "empty_kernel": launch_empty, "spin": launch_spin,
    **{s.kernel: _launch_coll(s) for s in shapes.COLL},
}


def block_of(name: str) -> int:
    """Threads a block of kernel ``name`` (the launchers' ``block`` argument)."""
    return shapes.SHAPES[name].block


def launch_args(name: str, args: tuple, stream, block_type=int) -> tuple:
    """The launcher's arguments: the kernel's (bench/bench_shapes.py order), the block size where it is
    given at launch, the stream."""
    return (*args, *((block_type(block_of(name)),) if block_at_launch(name) else ()), stream)


def example_args(name: str, t: dict, stream) -> tuple:
    """Arguments of launcher ``name`` given tensors ``t`` (bench/bench_shapes.py BUFFERS), scalars 1."""
    one = {"int32": Int32(1), "int64": Int64(1)}
    args = tuple(t[a] if a in t else one[shapes.SCALARS[a]] for a in shapes.SHAPES[name].args)
    return launch_args(name, args, stream, Int32)


_CUTE_TYPES = {"float32": Float32, "uint64": Uint64, "int32": Int32}


def fake_tensors(max_bytes: int, npes: int = 2) -> dict:
    """Tensors with no memory behind them, for compiling without a GPU."""
    T = cute.runtime.make_fake_compact_tensor
    return {name: T(_CUTE_TYPES[shapes.BUFFERS[name]], (n,), assumed_align=16)
            for name, n in shapes.buffer_elems(max_bytes, npes).items()}


def needed(p: C.Params, coll: list) -> list:
    """The launchers a run of ``p`` uses (the collectives': those of the points ``coll``); each
    collective costs CuTe 5-80 s to compile (NVSHMEM's routine inlined), so only those are compiled."""
    return shapes.needed(p, coll, LAUNCHERS)


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


def main(argv=None, impl: str = "cute", layers=("nvshmem_dsl.cute._compile",), host_class: type = C.Host) -> int:
    """The benchmark of ``impl`` (``nv4py_cute``: these kernels with NVSHMEM4Py's CuTe API and host,
    bench/nv4py_cute_bench.py), its host ``host_class`` initialised after importing ``layers``."""
    import time

    args, p, out, host, arrays = shapes.start(impl, list(layers), argv, host_class)
    from cutlass.cute.runtime import from_dlpack

    coll = C.coll_points(p, out.npes, impl)
    t = {k: from_dlpack(v, assumed_align=16) for k, v in arrays.items()}

    t0 = time.perf_counter()
    K = compile_all(t, arch=args.arch, names=needed(p, coll))
    compile_s = time.perf_counter() - t0
    arch = next(iter(K.values())).arch
    shapes.meta(out, host, p, api=_cute_api.SOURCE, arch=arch, compile_all_s=round(compile_s, 2),
                cutlass_dsl=getattr(cutlass, "__version__", "?"))
    stream = cudrv.CUstream(0)

    def launch(s, args):
        K[s.kernel](*launch_args(s.kernel, args, stream))

    shapes.run_rows(out, host, p, arrays, t, launch, list(K))
    host.sync()
    del t
    host.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
