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

from numba import cuda, float32, int32, uint64  # noqa: E402

import _common as C  # noqa: E402
import _numba_common as N  # noqa: E402
import bench_shapes as shapes  # noqa: E402

nv = C.numba_api()
SIG_SET, CMP_GE = C.signal_constants()
SLOT_MASK = C.LAT_SLOTS - 1
U64_COUNTER, U64_OUT, U64_DATA, U64_SRC, U64_SIGNAL = C.U64_COUNTER, C.U64_OUT, C.U64_DATA, C.U64_SRC, C.U64_SIGNAL
TEAM_WORLD, COLL_ROOT = C.team_world(), C.COLL_ROOT


# ------------------------------------------------------------------ kernels (= bench.cu)

BW_KERNELS = {s.kernel: N.rma_bw(s.kernel, getattr(nv, s.call), N.WORKERS[s.workers], nv.window, nv.quiet)
              for s in shapes.BW}


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


#: The kernels, by their names in bench/bench_shapes.py
KERNELS = {
    **BW_KERNELS, "p_lat": p_lat, "g_lat": g_lat, "p_lat_peer_ptr": p_lat_peer_ptr, "g_lat_peer_ptr": g_lat_peer_ptr,
    "amo_lat": amo_lat, "amo_lat_peer_ptr": amo_lat_peer_ptr, "pingpong": pingpong, "barrier_lat": barrier_lat,
    **COLL_KERNELS, "empty_kernel": empty_kernel, "spin": N.spin,
}
SIGNATURES = N.signatures(KERNELS)
jit_options = N.jit_options


def jit_kernels() -> dict:
    """Lazily compiled dispatchers (compiled at the first launch, i.e. in the warm-up)."""
    return N.jit_kernels(KERNELS)


# ------------------------------------------------------------------ host side


def main(argv=None) -> int:
    return N.main("numba", ("nvshmem_dsl.numba",), nv.__name__, KERNELS, argv)


if __name__ == "__main__":
    sys.exit(main())
