"""The communication kernels in Numba-CUDA (protocol: :mod:`nvshmem_dsl.kernels._plan`).

bfloat16 travels as its bits (int16 arrays: Numba arrays cannot hold bfloat16) and is summed in
float32 through :func:`_bf16_load` / :func:`_bf16_store`.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, int32, int64, uint32, uint64
from numba.cuda import libdevice

from .. import numba as nv
from . import _plan

THREADS = _plan.THREADS  #: every launch's block, declared to ptxas (launch_bounds) as the C++ twins do
#: The arrays launch() takes: Numba device arrays (the host calls convert).
ARRAYS = "numba"


@cuda.jit(device=True, inline=True)
def _f32_load(v):
    return float32(v)


@cuda.jit(device=True, inline=True)
def _f32_store(v):
    return float32(v)


@cuda.jit(device=True, inline=True)
def _bf16_load(v):
    return libdevice.int_as_float(int32((int32(v) & 0xFFFF) << 16))


@cuda.jit(device=True, inline=True)
def _bf16_store(v):
    # round to nearest even (NaN stays NaN: its payload's top bits survive)
    u = uint32(libdevice.float_as_int(v))
    return np.int16((u + uint32(0x7FFF) + ((u >> 16) & uint32(1))) >> 16)


@cuda.jit(device=True, inline=True)
def _f32_bits(v):
    """float32's bits, zero-extended: the data half of an LL word."""
    return uint64(uint32(libdevice.float_as_int(v)))


@cuda.jit(device=True, inline=True)
def _f32_word(w):
    """The float32 of an LL word's data half."""
    return libdevice.int_as_float(int32(w & uint64(0xFFFFFFFF)))


@cuda.jit(device=True, inline=True)
def _bf16_bits(v):
    """bfloat16's bits (int16), zero-extended: the data half of an LL word."""
    return uint64(v) & uint64(0xFFFF)


@cuda.jit(device=True, inline=True)
def _bf16_word(w):
    """The float32 of an LL word's bfloat16 (exact)."""
    return libdevice.int_as_float(int32((w & uint64(0xFFFF)) << uint64(16)))


@cuda.jit(device=True, inline=True)
def _wait_peers(sig, b, phase, epoch, me, npes):
    """One thread per peer waits for its word of block b and phase; then the block syncs."""
    t = cuda.threadIdx.x
    if t < npes and t != me:
        nv.signal_wait_until(sig, uint64((b * 2 + phase) * npes + t), nv.Cmp.CMP_GE, epoch)
    cuda.syncthreads()


@cuda.jit(device=True, inline=True)
def _send(dst, di, src, si, cnt, sig, w, epoch, pe):
    """put_signal_nbi_block of src[si, si + cnt) to dst[di, di + cnt) on pe; cnt <= 0: the signal
    alone, by thread 0.  Indices, not slices: a slice clamps its bounds and wraps negative ones
    around (C++'s pointer arithmetic does neither; the plan keeps every range inside its array)."""
    if cnt > 0:
        nv.put_signal_nbi_block(dst, uint64(di), nv.window(src, si, cnt), cnt, sig, uint64(w), epoch,
                                nv.SignalOp.SIGNAL_SET, pe)
    elif cuda.threadIdx.x == 0:
        nv.signal_op(sig, uint64(w), epoch, nv.SignalOp.SIGNAL_SET, pe)


@cuda.jit(device=True, inline=True)
def _peer(me, k, npes):
    """(me + k) % npes, as C++'s % of non-negative numbers (Python's % adds a sign fix-up)."""
    return int64(uint64(me + k) % uint64(npes))


@cuda.jit(device=True, inline=True)
def _finish():
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        nv.quiet()


@functools.lru_cache(maxsize=None)
def kernels(dtype: str) -> dict:
    """The four kernels for ``dtype`` ("float32" or "bfloat16").

    As their C++ twins: element loops are while loops (``range`` with a run-time step computes a
    trip count, a 64-bit division) and array indices are unsigned (Numba wraps a signed index
    around, a compare and an add for every access); the plan keeps every index non-negative."""
    bf16 = dtype == "bfloat16"
    load, store = (_bf16_load, _bf16_store) if bf16 else (_f32_load, _f32_store)
    bits, word = (_bf16_bits, _bf16_word) if bf16 else (_f32_bits, _f32_word)

    @cuda.jit(device=True, inline=True)
    def pe_sum(x, xi, stage, slots, j, span, npes, me):
        """Sum over p = 0..npes-1 in order of x[xi] (p == me) or stage[slots + p * span + j], in float32."""
        acc = float32(0)
        for p in range(npes):
            if p == me:
                acc += load(x[uint64(xi)])
            else:
                acc += load(stage[uint64(slots + p * span + j)])
        return acc

    @cuda.jit(launch_bounds=(THREADS,))
    def one_shot(out, x, stage, sig, epoch, n, span, chunk, me, npes):
        b = int64(cuda.blockIdx.x)
        lo = b * chunk
        hi = min(lo + chunk, span)
        par = epoch & 1
        d = (par * npes + me) * span
        for k in range(1, npes):
            _send(stage, d + lo, x, lo, hi - lo, sig, (b * 2) * npes + me, epoch, _peer(me, k, npes))
        _wait_peers(sig, b, 0, epoch, me, npes)
        i = lo + cuda.threadIdx.x
        while i < hi:
            out[uint64(i)] = store(pe_sum(x, i, stage, par * npes * span, i, span, npes, me))
            i += cuda.blockDim.x
        _finish()

    @cuda.jit(launch_bounds=(THREADS,))
    def one_shot_ll(out, x, ll, sig, epoch, n, span, chunk, me, npes):
        b = int64(cuda.blockIdx.x)
        lo = b * chunk
        hi = min(lo + chunk, span)
        par = epoch & 1
        tag = uint64(epoch) << uint64(32)
        d = (par * npes + me) * span
        for k in range(1, npes):  # my words into every peer's slot of me, through its address
            to = nv.peer(ll, _peer(me, k, npes))
            i = lo + cuda.threadIdx.x
            while i < hi:
                to[uint64(d + i)] = tag | bits(x[uint64(i)])
                i += cuda.blockDim.x
        slots = par * npes * span
        i = lo + cuda.threadIdx.x
        while i < hi:
            acc = float32(0)
            for p in range(npes):
                if p == me:
                    acc += load(x[uint64(i)])
                else:
                    at = uint64(slots + p * span + i)
                    w = nv.signal_fetch(ll, at)
                    while (w ^ tag) >> uint64(32) != uint64(0):
                        w = nv.signal_fetch(ll, at)
                    acc += word(w)
            out[uint64(i)] = store(acc)
            i += cuda.blockDim.x

    @cuda.jit(launch_bounds=(THREADS,))
    def two_shot(out, x, stage, sig, epoch, n, span, chunk, me, npes):
        b = int64(cuda.blockIdx.x)
        lo = b * chunk
        hi = min(lo + chunk, span)
        par = epoch & 1
        d = ((par * 2) * npes + me) * span
        for k in range(1, npes):  # phase 0: shard p of x to PE p
            p = _peer(me, k, npes)
            g0 = min(p * span + lo, n)
            g1 = min(p * span + hi, n)
            _send(stage, d + lo, x, g0, g1 - g0, sig, (b * 2) * npes + me, epoch, p)
        _wait_peers(sig, b, 0, epoch, me, npes)
        mine = ((par * 2 + 1) * npes + me) * span
        j = lo + cuda.threadIdx.x
        while j < hi:
            i = me * span + j
            if i < n:
                r = store(pe_sum(x, i, stage, par * 2 * npes * span, j, span, npes, me))
                stage[uint64(mine + j)] = r
                out[uint64(i)] = r
            j += cuda.blockDim.x
        cuda.syncthreads()
        cnt = max(min(me * span + hi, n) - min(me * span + lo, n), 0)
        for k in range(1, npes):  # phase 1: my reduced shard to every PE
            _send(stage, mine + lo, stage, mine + lo, cnt, sig, (b * 2 + 1) * npes + me, epoch, _peer(me, k, npes))
        _wait_peers(sig, b, 1, epoch, me, npes)
        for q in range(npes):
            if q != me:
                src = ((par * 2 + 1) * npes + q) * span
                j = lo + cuda.threadIdx.x
                while j < hi:
                    i = q * span + j
                    if i < n:
                        out[uint64(i)] = stage[uint64(src + j)]
                    j += cuda.blockDim.x
        _finish()

    @cuda.jit(launch_bounds=(THREADS,))
    def all_gather(out, x, stage, sig, epoch, n, span, chunk, me, npes):
        b = int64(cuda.blockIdx.x)
        lo = b * chunk
        hi = min(lo + chunk, span)
        par = epoch & 1
        d = (par * npes + me) * span
        for k in range(1, npes):
            _send(stage, d + lo, x, lo, hi - lo, sig, (b * 2) * npes + me, epoch, _peer(me, k, npes))
        i = lo + cuda.threadIdx.x
        while i < hi:
            out[uint64(me * n + i)] = x[uint64(i)]
            i += cuda.blockDim.x
        _wait_peers(sig, b, 0, epoch, me, npes)
        for q in range(npes):
            if q != me:
                src = (par * npes + q) * span
                i = lo + cuda.threadIdx.x
                while i < hi:
                    out[uint64(q * n + i)] = stage[uint64(src + i)]
                    i += cuda.blockDim.x
        _finish()

    @cuda.jit(launch_bounds=(THREADS,))
    def reduce_scatter(out, x, stage, sig, epoch, n, span, chunk, me, npes):
        b = int64(cuda.blockIdx.x)
        lo = b * chunk
        hi = min(lo + chunk, span)
        par = epoch & 1
        d = (par * npes + me) * span
        for k in range(1, npes):
            p = _peer(me, k, npes)
            _send(stage, d + lo, x, p * n + lo, hi - lo, sig, (b * 2) * npes + me, epoch, p)
        _wait_peers(sig, b, 0, epoch, me, npes)
        i = lo + cuda.threadIdx.x
        while i < hi:
            out[uint64(i)] = store(pe_sum(x, me * n + i, stage, par * npes * span, i, span, npes, me))
            i += cuda.blockDim.x
        _finish()

    return {"one_shot": one_shot, _plan.LL_KERNEL: one_shot_ll, "two_shot": two_shot, "all_gather": all_gather,
            "reduce_scatter": reduce_scatter}


def signature(dtype: str, kernel: str = "one_shot"):
    """The Numba signature of ``kernel`` for ``dtype`` (all take the same; the LL one's stage: uint64)."""
    from numba import types
    e = types.float32 if dtype == "float32" else types.int16
    a, u = e[::1], types.uint64[::1]
    i = types.int64
    return (a, a, u if kernel == _plan.LL_KERNEL else a, u, i, i, i, i, i, i)


def compile_ptx(kind: str, dtype: str, cc=(9, 0)) -> str:
    """PTX of one kernel (CPU: no GPU needed)."""
    return cuda.compile_ptx(kernels(dtype)[kind].py_func, signature(dtype, kind), cc=cc,
                            launch_bounds=(THREADS,))[0]


_streams: dict = {}


def _stream(handle: int):
    s = _streams.get(handle)
    if s is None:
        s = _streams[handle] = cuda.external_stream(handle) if handle else cuda.default_stream()
    return s


def launch(kind: str, plan: _plan.Plan, out, x, stage, sig, epoch: int, me: int, stream: int) -> None:
    """Launch ``kind`` (a kernel: a kind or _plan.LL_KERNEL) on ``stream`` (an int handle); arrays are Numba
    device arrays (bfloat16 as int16; the LL kernel's stage: the LL words, uint64)."""
    kernels(plan.dtype)[kind][plan.grid, THREADS, _stream(stream)](out, x, stage, sig, *plan.args(epoch, me))
