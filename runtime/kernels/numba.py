"""The communication kernels in Numba-CUDA (protocol: :mod:`nvshmem_dsl.kernels._plan`).

bfloat16 travels as its bits (int16 arrays: Numba arrays cannot hold bfloat16) and is summed in
float32 through :func:`_bf16_load` / :func:`_bf16_store`.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, int32, uint32
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
def _wait_peers(sig, b, phase, epoch, me, npes):
    """One thread per peer waits for its word of block b and phase; then the block syncs."""
    t = cuda.threadIdx.x
    if t < npes and t != me:
        w = (b * 2 + phase) * npes + t
        nv.signal_wait_until(sig[w:w + 1], nv.Cmp.CMP_GE, epoch)
    cuda.syncthreads()


@cuda.jit(device=True, inline=True)
def _send(dst, src, sig, w, epoch, pe):
    """put_signal_nbi_block of src (may be empty: then the signal alone) to dst on pe."""
    if src.size > 0:
        nv.put_signal_nbi_block(dst, src, sig[w:w + 1], epoch, nv.SignalOp.SIGNAL_SET, pe)
    elif cuda.threadIdx.x == 0:
        nv.signal_op(sig[w:w + 1], epoch, nv.SignalOp.SIGNAL_SET, pe)


@cuda.jit(device=True, inline=True)
def _finish():
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        nv.quiet()


@functools.lru_cache(maxsize=None)
def kernels(dtype: str) -> dict:
    """The four kernels for ``dtype`` ("float32" or "bfloat16")."""
    load, store = (_bf16_load, _bf16_store) if dtype == "bfloat16" else (_f32_load, _f32_store)

    @cuda.jit(device=True, inline=True)
    def pe_sum(x, xi, stage, slots, j, span, npes, me):
        """Sum over p = 0..npes-1 in order of x[xi] (p == me) or stage[slots + p * span + j], in float32."""
        acc = float32(0)
        for p in range(npes):
            if p == me:
                acc += load(x[xi])
            else:
                acc += load(stage[slots + p * span + j])
        return acc

    @cuda.jit(launch_bounds=(THREADS,))
    def one_shot(out, x, stage, sig, epoch, n, span, chunk, me, npes):
        b = cuda.blockIdx.x
        lo = b * chunk
        hi = min(lo + chunk, span)
        par = epoch & 1
        for k in range(1, npes):
            p = (me + k) % npes
            d = (par * npes + me) * span
            _send(stage[d + lo:d + hi], x[lo:hi], sig, (b * 2) * npes + me, epoch, p)
        _wait_peers(sig, b, 0, epoch, me, npes)
        for i in range(lo + cuda.threadIdx.x, hi, cuda.blockDim.x):
            out[i] = store(pe_sum(x, i, stage, par * npes * span, i, span, npes, me))
        _finish()

    @cuda.jit(launch_bounds=(THREADS,))
    def two_shot(out, x, stage, sig, epoch, n, span, chunk, me, npes):
        b = cuda.blockIdx.x
        lo = b * chunk
        hi = min(lo + chunk, span)
        par = epoch & 1
        for k in range(1, npes):  # phase 0: shard p of x to PE p
            p = (me + k) % npes
            g0 = min(p * span + lo, n)
            g1 = min(p * span + hi, n)
            d = ((par * 2) * npes + me) * span
            _send(stage[d + lo:d + lo + (g1 - g0)], x[g0:g1], sig, (b * 2) * npes + me, epoch, p)
        _wait_peers(sig, b, 0, epoch, me, npes)
        mine = ((par * 2 + 1) * npes + me) * span
        for j in range(lo + cuda.threadIdx.x, hi, cuda.blockDim.x):
            i = me * span + j
            if i < n:
                r = store(pe_sum(x, i, stage, par * 2 * npes * span, j, span, npes, me))
                stage[mine + j] = r
                out[i] = r
        cuda.syncthreads()
        cnt = max(min(me * span + hi, n) - min(me * span + lo, n), 0)
        for k in range(1, npes):  # phase 1: my reduced shard to every PE
            p = (me + k) % npes
            _send(stage[mine + lo:mine + lo + cnt], stage[mine + lo:mine + lo + cnt], sig,
                  (b * 2 + 1) * npes + me, epoch, p)
        _wait_peers(sig, b, 1, epoch, me, npes)
        for q in range(npes):
            if q != me:
                src = ((par * 2 + 1) * npes + q) * span
                for j in range(lo + cuda.threadIdx.x, hi, cuda.blockDim.x):
                    i = q * span + j
                    if i < n:
                        out[i] = stage[src + j]
        _finish()

    @cuda.jit(launch_bounds=(THREADS,))
    def all_gather(out, x, stage, sig, epoch, n, span, chunk, me, npes):
        b = cuda.blockIdx.x
        lo = b * chunk
        hi = min(lo + chunk, span)
        par = epoch & 1
        d = (par * npes + me) * span
        for k in range(1, npes):
            p = (me + k) % npes
            _send(stage[d + lo:d + hi], x[lo:hi], sig, (b * 2) * npes + me, epoch, p)
        for i in range(lo + cuda.threadIdx.x, hi, cuda.blockDim.x):
            out[me * n + i] = x[i]
        _wait_peers(sig, b, 0, epoch, me, npes)
        for q in range(npes):
            if q != me:
                src = (par * npes + q) * span
                for i in range(lo + cuda.threadIdx.x, hi, cuda.blockDim.x):
                    out[q * n + i] = stage[src + i]
        _finish()

    @cuda.jit(launch_bounds=(THREADS,))
    def reduce_scatter(out, x, stage, sig, epoch, n, span, chunk, me, npes):
        b = cuda.blockIdx.x
        lo = b * chunk
        hi = min(lo + chunk, span)
        par = epoch & 1
        d = (par * npes + me) * span
        for k in range(1, npes):
            p = (me + k) % npes
            _send(stage[d + lo:d + hi], x[p * n + lo:p * n + hi], sig, (b * 2) * npes + me, epoch, p)
        _wait_peers(sig, b, 0, epoch, me, npes)
        for i in range(lo + cuda.threadIdx.x, hi, cuda.blockDim.x):
            out[i] = store(pe_sum(x, me * n + i, stage, par * npes * span, i, span, npes, me))
        _finish()

    return {"one_shot": one_shot, "two_shot": two_shot, "all_gather": all_gather,
            "reduce_scatter": reduce_scatter}


def signature(dtype: str):
    """The kernels' Numba signature for ``dtype`` (all four take the same)."""
    from numba import types
    e = types.float32 if dtype == "float32" else types.int16
    a, u = e[::1], types.uint64[::1]
    i = types.int64
    return (a, a, a, u, i, i, i, i, i, i)


def compile_ptx(kind: str, dtype: str, cc=(9, 0)) -> str:
    """PTX of one kernel (CPU: no GPU needed)."""
    return cuda.compile_ptx(kernels(dtype)[kind].py_func, signature(dtype), cc=cc, launch_bounds=(THREADS,))[0]


_streams: dict = {}


def _stream(handle: int):
    s = _streams.get(handle)
    if s is None:
        s = _streams[handle] = cuda.external_stream(handle) if handle else cuda.default_stream()
    return s


def launch(kind: str, plan: _plan.Plan, out, x, stage, sig, epoch: int, me: int, stream: int) -> None:
    """Launch ``kind`` on ``stream`` (an int handle); arrays are Numba device arrays (bfloat16 as int16)."""
    kernels(plan.dtype)[kind][plan.grid, THREADS, _stream(stream)](out, x, stage, sig, *plan.args(epoch, me))
