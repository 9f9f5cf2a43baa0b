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
import bench_shapes as shapes  # noqa: E402

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
    (``window``: how the arrays are cut; other cuts measured against it:
    tests/gpu/records/2026-11-22/put-shapes.txt.)"""
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


_WORKERS = {"block": block_worker, "warp": warp_worker}
BW_KERNELS = {s.kernel: rma_bw(s.kernel, getattr(nv, s.call), _WORKERS[s.workers]) for s in shapes.BW}


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


def amo_lat_peer_ptr(u64, iters, peer):
    """The hardware floor of amo_lat: atomics through the peer view, no NVSHMEM call."""
    q = nv.peer(u64, peer)
    acc = uint64(0)
    for i in range(iters):
        acc += cuda.atomic.add(q, U64_COUNTER, uint64(1))
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


COLL_KERNELS = {s.kernel: coll(s.kernel, getattr(nv, s.call), C.coll_shape(s.scope.rsplit("_", 1)[0]))
                for s in shapes.COLL}


def empty_kernel(flag, v):
    if v < 0:
        flag[0] = nv.my_pe()


def plain_kernel(flag, v):
    """``empty_kernel`` without NVSHMEM (``launch_overhead_plain``: Numba's own launch, the yardstick of
    issue 41's "a launch with NVSHMEM <= 1.1x the same DSL's plain launch"); not in KERNELS (no C++ twin)."""
    if v < 0:
        flag[0] = 0


def spin(us):
    for i in range(us):
        cuda.nanosleep(1000)


#: Numba types of the parameter types of bench/bench_shapes.py
NUMBA_TYPES = {"float32[]": "float32[::1]", "uint64[]": "uint64[::1]", "int32[]": "int32[::1]",
               "int32": "int32", "int64": "int64"}
KERNELS = {
    **BW_KERNELS, "p_lat": p_lat, "g_lat": g_lat, "p_lat_peer_ptr": p_lat_peer_ptr, "g_lat_peer_ptr": g_lat_peer_ptr,
    "amo_lat": amo_lat, "amo_lat_peer_ptr": amo_lat_peer_ptr, "pingpong": pingpong, "barrier_lat": barrier_lat,
    **COLL_KERNELS, "empty_kernel": empty_kernel, "spin": spin,
}
# name -> Numba signature, from the parameters of bench/bench_shapes.py (those the host code launches with)
SIGNATURES = {name: f"void({', '.join(NUMBA_TYPES[shapes.arg_type(a)] for a in shapes.SHAPES[name].args)})"
              for name in KERNELS}

#: The one-thread latency kernels declare their launch shape, as bench.cu's do (ONE_THREAD) and
#: CuTe's static launches do (.reqntid 1): with it ptxas does not aggregate a warp's atomics.
ONE_THREAD = shapes.ONE_THREAD


def jit_options(name: str) -> dict:
    """The ``cuda.jit`` options of kernel ``name``.  The bandwidth and collective kernels declare
    their block size, as Triton's (``num_warps``) and CuTe's (static launches) do: with NVSHMEM 3.8 a
    bandwidth kernel compiled for any block size takes 66-72 registers, more than a block of 1024
    threads leaves a thread (64; with the declaration 64, no spills:
    bench/test_bench_compile.py::test_numba_bandwidth_kernel_fits_its_block), and the objects of the thread- and warp-scope
    collectives may use more registers (nvshmem_dsl.linker.outline.register_cap)."""
    if name in ONE_THREAD:
        return {"launch_bounds": (1,)}
    s = shapes.SHAPES.get(name)
    if s is not None and (s.bench == "coll" or s.bench.endswith("_bw")):
        return {"launch_bounds": (s.block,)}
    return {}


def jit_kernels() -> dict:
    """Lazily compiled dispatchers (compiled at the first launch, i.e. in the warm-up)."""
    return {name: cuda.jit(fn, **jit_options(name)) for name, fn in KERNELS.items()}


# ------------------------------------------------------------------ host side


def main(argv=None) -> int:
    args, p, out, host, arrays = shapes.start("numba", ["nvshmem_dsl.numba"], argv)
    import numba_cuda

    shapes.meta(out, host, p, api=nv.__name__, numba_cuda=getattr(numba_cuda, "__version__", "?"))

    K = jit_kernels()
    stream = cuda.legacy_default_stream()
    bufs = {name: cuda.as_cuda_array(x) for name, x in arrays.items()}

    def launch(s, args):
        K[s.kernel][s.grid, s.block, stream](*args)

    def launch_rows() -> None:
        """cupy arrays straight in (Numba converts and stream-synchronises them at every launch); and
        the same launch of a kernel without NVSHMEM, queued behind the same spin as launch_overhead."""
        if p.enabled("launch"):
            kern, flag = K["empty_kernel"], arrays["flag"]
            vals = C.launch_overhead(host, lambda us: None, lambda: kern[1, 1, stream](flag, 1), p.launches, p.reps)
            out.emit("launch_overhead_cupy_args", "", 0, vals, "us", False, p.launches)
            plain, flag = cuda.jit(plain_kernel), bufs["flag"]
            run = lambda: plain[1, 1, stream](flag, 1)  # noqa: E731
            run()  # compile
            vals = C.launch_overhead(host, lambda us: launch(shapes.SHAPES["spin"], (us,)), run, p.launches, p.reps)
            out.emit("launch_overhead_plain", "", 0, vals, "us", False, p.launches)

    shapes.run_rows(out, host, p, arrays, bufs, launch, list(K), extra=launch_rows)
    del bufs
    host.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
