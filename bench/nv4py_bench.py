"""NVSHMEM benchmarks with NVSHMEM4Py (NVIDIA's ``nvshmem`` package), the package nvshmem-dsl is
measured against: the kernels of bench/bench_shapes.py written with its Numba device API
(``nvshmem.core.device.numba``, and ``nvshmem.bindings.device.numba.quiet``, which its device API
lacks), its host API (``nvshmem.core``) for everything on the host.

Run one process per PE, as the other benchmarks:

    python -m nvshmem_dsl.run -n 2 bench/nv4py_bench.py [--quick] [--only put_bw,p_lat]

Prints one JSON line per result (impl "nv4py"); bench/run.py collects them (``--impls ...,nv4py``).
NVSHMEM4Py runs on the NVSHMEM nvshmem_dsl uses (bench/_nv4py.py: its start-up, before ``nvshmem``
is imported).

NVSHMEM4Py's device API, as these kernels call it: ``put*(dst, src, pe)`` / ``get*(dst, src, pe)``
move ``min(dst.size, src.size)`` elements (its docstrings say ``(src, dst, pe)``; its code takes
``(dst, src, pe)``), so each worker passes its chunk as two slices; ``p(dst, value, pe)``,
``g(src, pe)`` and ``atomic_fetch_add(dst, value, pe)`` act on the first element of their array (a
one-element slice); ``put_signal(dst, src, sig, value, sig_op, pe)``, ``signal_wait(sig, cmp,
value)``; the collectives take the team and arrays and count from the arrays' sizes (reduce and
reducescatter: the destination's; fcollect: the source's; alltoall: the source's / PEs; broadcast:
the smaller), the reduction's operator as a string.  What it lacks of the table: the ``*_peer_ptr``
kernels (the hardware floor; its ``get_peer_array`` needs numba-cuda's NRT) are not written here.
Its CuTe device API: bench/nv4py_cute_bench.py.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# 1-thread and 1-block kernels are the point of the latency benchmarks: no occupancy warnings
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import _nv4py  # noqa: E402

_nv4py.use_our_nvshmem()  # before nvshmem is imported

import nvshmem.core as core  # noqa: E402
import nvshmem.core.device.numba as nv  # noqa: E402
from numba import cuda, float32, int32, uint64  # noqa: E402
from nvshmem.bindings.device import numba as raw  # noqa: E402

import _common as C  # noqa: E402
import _numba_common as N  # noqa: E402
import bench_shapes as shapes  # noqa: E402

SIG_SET, CMP_GE = int(core.SignalOp.SIGNAL_SET), int(core.ComparisonType.CMP_GE)
TEAM_WORLD, COLL_ROOT = int(core.Teams.TEAM_WORLD), C.COLL_ROOT
SLOT_MASK = C.LAT_SLOTS - 1
U64_COUNTER, U64_OUT, U64_DATA, U64_SRC, U64_SIGNAL = C.U64_COUNTER, C.U64_OUT, C.U64_DATA, C.U64_SRC, C.U64_SIGNAL
quiet = raw.quiet


# ------------------------------------------------------------------ kernels (= bench.cu)


@cuda.jit(device=True, inline="always")
def window(a, off, n):
    """Elements [off, off + n) of ``a``: what NVSHMEM4Py's put / get move."""
    return a[off:off + n]


def _rma(op):
    """bench_shapes' bandwidth call ``op(dst, src, n, peer)`` as NVSHMEM4Py takes it (the count from the slices)."""
    @cuda.jit(device=True, inline="always")
    def call(dst, src, n, peer):
        op(dst, src, peer)
    return call


BW_KERNELS = {s.kernel: N.rma_bw(s.kernel, _rma(getattr(nv, s.call)), N.WORKERS[s.workers], window, quiet)
              for s in shapes.BW}


def p_lat(dst, iters, peer):
    # float32(int32(i)): as numba_bench's (a 64-bit counter's I2F.U64 costs ~25 ns a call)
    for i in range(iters):
        j = i & SLOT_MASK
        nv.p(dst[j:j + 1], float32(int32(i)), peer)
    quiet()


def g_lat(src, out, iters, peer):
    acc = float32(0.0)
    for i in range(iters):
        j = i & SLOT_MASK
        acc += nv.g(src[j:j + 1], peer)
    out[0] = acc


def amo_lat(u64, iters, peer):
    counter = u64[U64_COUNTER:U64_COUNTER + 1]
    acc = uint64(0)
    for i in range(iters):
        acc += nv.atomic_fetch_add(counter, uint64(1), peer)
    u64[U64_OUT] = acc


def pingpong(u64, iters, me, peer):
    if me > 1:
        return
    data = u64[U64_DATA:U64_DATA + 1]
    src = u64[U64_SRC:U64_SRC + 1]
    sig = u64[U64_SIGNAL:U64_SIGNAL + 1]
    for i in range(1, iters + 1):
        if me == 0:
            nv.put_signal(data, src, sig, uint64(i), SIG_SET, peer)
            nv.signal_wait(sig, CMP_GE, uint64(i))
        else:
            nv.signal_wait(sig, CMP_GE, uint64(i))
            nv.put_signal(data, src, sig, uint64(i), SIG_SET, peer)
    quiet()


def barrier_lat(iters):
    for i in range(iters):
        nv.barrier_all_block()


def coll_call(family: str, scope: str) -> str:
    """NVSHMEM4Py's device function of collective ``family`` at ``scope`` (``reduce_block``)."""
    return family if scope == "thread" else f"{family}_{scope}"


def coll(name, op, family):
    """Kernel ``name``, bench.cu's coll<FAMILY, SCOPE>: ``iters`` calls of NVSHMEM4Py's collective ``op``
    of ``family`` over TEAM_WORLD by every thread of the (one) block, on ``nelems`` elements a PE
    (the arrays cut so that NVSHMEM4Py counts those, see the module's doc)."""
    if family == "broadcast":
        def kernel(dst, src, nelems, iters):
            for _ in range(iters):
                op(TEAM_WORLD, dst[:nelems], src[:nelems], COLL_ROOT)
    elif family == "reduce":
        def kernel(dst, src, nelems, iters):
            for _ in range(iters):
                op(TEAM_WORLD, dst[:nelems], src[:nelems], "sum")
    elif family == "reducescatter":
        def kernel(dst, src, nelems, iters):
            for _ in range(iters):
                op(TEAM_WORLD, dst[:nelems], src, "sum")
    elif family == "fcollect":
        def kernel(dst, src, nelems, iters):
            for _ in range(iters):
                op(TEAM_WORLD, dst, src[:nelems])
    elif family == "alltoall":
        def kernel(dst, src, nelems, iters):
            for _ in range(iters):
                op(TEAM_WORLD, dst, src[:nelems * nv.n_pes()])
    else:
        def kernel(dst, src, nelems, iters):
            for _ in range(iters):
                op(TEAM_WORLD)
    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def _coll_kernel(s: shapes.Shape):
    family, scope = s.scope.rsplit("_", 1)
    return coll(s.kernel, getattr(nv, coll_call(family, scope)), family)


COLL_KERNELS = {s.kernel: _coll_kernel(s) for s in shapes.COLL}


def empty_kernel(flag, v):
    if v < 0:
        flag[0] = nv.my_pe()


#: The kernels, by their names in bench/bench_shapes.py (no *_peer_ptr ones, see the module's doc)
KERNELS = {
    **BW_KERNELS, "p_lat": p_lat, "g_lat": g_lat, "amo_lat": amo_lat, "pingpong": pingpong,
    "barrier_lat": barrier_lat, **COLL_KERNELS, "empty_kernel": empty_kernel, "spin": N.spin,
}
SIGNATURES = N.signatures(KERNELS)
jit_options = N.jit_options


def jit_kernels() -> dict:
    """Lazily compiled dispatchers (compiled at the first launch, i.e. in the warm-up)."""
    return N.jit_kernels(KERNELS)


# ------------------------------------------------------------------ host side


def main(argv=None) -> int:
    return N.main("nv4py", ("nvshmem.core.device.numba",), nv.__name__, KERNELS, argv, _nv4py.Host)


if __name__ == "__main__":
    sys.exit(main())
