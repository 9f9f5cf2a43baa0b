"""MoE dispatch and combine in Numba-CUDA (protocol: :mod:`nvshmem_dsl.kernels.moe._layout`).
bfloat16 travels as its bits (int16 arrays), as in :mod:`nvshmem_dsl.kernels.numba`."""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32, int64

from ... import numba as nv
from ..numba import _bf16_load, _bf16_store, _finish, _stream
from . import _layout

THREADS = _layout.THREADS
MAX_TOKENS = _layout.MAX_TOKENS  # global constants: Numba's shared arrays need a literal size
MAX_TOPK = _layout.MAX_TOPK
ARRAYS = "numba"


@cuda.jit(launch_bounds=(THREADS,))
def dispatch(x, topk, recv_x, recv_src, sig, recv_count, epoch, T, K, H, L, me, npes, T_max):
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    lane = tid & 31
    w = tid >> 5
    nw = cuda.blockDim.x >> 5
    E = L * npes
    par = epoch & 1
    order = cuda.shared.array(MAX_TOKENS, int32)  # the (t * K + j) routed to this expert
    scan = cuda.shared.array(THREADS, int32)
    nt = cuda.blockDim.x
    for e in range(b, E, cuda.gridDim.x):
        dst = e // L
        count = 0
        for base in range(0, T * K, nt):  # block scan (Hillis-Steele) of topk == e, in order
            idx = base + tid
            hit = idx < T * K and topk[idx] == e
            if hit:  # a token's repeated expert: sent once (its first slot)
                for jj in range(idx - idx % K, idx):
                    if topk[jj] == e:
                        hit = False
            scan[tid] = 1 if hit else 0
            cuda.syncthreads()
            off = 1
            while off < nt:
                v = scan[tid - off] if tid >= off else 0
                cuda.syncthreads()
                scan[tid] += v
                cuda.syncthreads()
                off *= 2
            if hit:
                order[count + scan[tid] - 1] = idx
            count += scan[nt - 1]
            cuda.syncthreads()
        row0 = ((par * L + e % L) * npes + me) * T_max
        for s in range(w, count, nw):  # a warp a row
            idx = order[s]
            t = idx // K
            r = row0 + s
            nv.put_nbi_warp(recv_x[r * H:(r + 1) * H], x[t * H:(t + 1) * H], dst)
            if lane == 0:
                nv.p(recv_src[r:r + 1], int32(idx), dst)
        cuda.syncthreads()
        if tid == 0:
            nv.fence()
            word = (e % L) * npes + me
            nv.signal_op(sig[word:word + 1], (int64(epoch) << 32) | count, nv.SignalOp.SIGNAL_SET, dst)
        cuda.syncthreads()
    if tid == 0:
        for word in range(b, E, cuda.gridDim.x):
            nv.signal_wait_until(sig[word:word + 1], nv.Cmp.CMP_GE, int64(epoch) << 32)
            recv_count[word] = int32(nv.signal_fetch(sig[word:word + 1]) & np.uint64(0xFFFFFFFF))
    _finish()


@cuda.jit(launch_bounds=(THREADS,))
def combine(y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, K, H, L, me, npes, T_max):
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    w = tid >> 5
    nw = cuda.blockDim.x >> 5
    E = L * npes
    par = epoch & 1
    for word in range(b, E, cuda.gridDim.x):  # word = l * npes + src: results back to src
        l = word // npes
        src = word % npes
        count = recv_count[word]
        for s in range(w, count, nw):
            r = (l * npes + src) * T_max + s
            idx = recv_src[par * L * npes * T_max + r]
            nv.put_nbi_warp(comb_x[idx * H:(idx + 1) * H], y[r * H:(r + 1) * H], src)
        cuda.syncthreads()
        if tid == 0:
            nv.fence()
            c = L * npes + me * L + l
            nv.signal_op(sig[c:c + 1], epoch, nv.SignalOp.SIGNAL_SET, src)
        cuda.syncthreads()
    for e in range(tid, E, cuda.blockDim.x):
        c = L * npes + e
        nv.signal_wait_until(sig[c:c + 1], nv.Cmp.CMP_GE, epoch)
    slot = cuda.shared.array(MAX_TOPK, int32)  # slot j's row: that of its expert's first slot; -1: none
    for t in range(b, T, cuda.gridDim.x):
        cuda.syncthreads()
        if tid < K:
            e = topk[t * K + tid]
            first = tid
            for jj in range(tid - 1, -1, -1):
                if topk[t * K + jj] == e:
                    first = jj
            slot[tid] = first if e >= 0 else -1
        cuda.syncthreads()
        nt = cuda.blockDim.x
        for h0 in range(tid, H, 4 * nt):  # four elements a thread (h0 + i * nt): 4 K loads in flight
            h1, h2, h3 = min(h0 + nt, H - 1), min(h0 + 2 * nt, H - 1), min(h0 + 3 * nt, H - 1)
            a0 = a1 = a2 = a3 = float32(0)
            for j in range(K):  # loads not behind the mask's branch (a select after them)
                r = slot[j]
                wj = weights[t * K + j]
                row = (t * K + max(r, 0)) * H
                v0 = wj * _bf16_load(comb_x[row + h0])
                v1 = wj * _bf16_load(comb_x[row + h1])
                v2 = wj * _bf16_load(comb_x[row + h2])
                v3 = wj * _bf16_load(comb_x[row + h3])
                if r >= 0:
                    a0 += v0
                    a1 += v1
                    a2 += v2
                    a3 += v3
            out[t * H + h0] = _bf16_store(a0)
            if h0 + nt < H:
                out[t * H + h1] = _bf16_store(a1)
            if h0 + 2 * nt < H:
                out[t * H + h2] = _bf16_store(a2)
            if h0 + 3 * nt < H:
                out[t * H + h3] = _bf16_store(a3)
    _finish()


def signatures():
    """The kernels' Numba signatures (bfloat16 as int16; topk int64, weights float32)."""
    from numba import types
    a, i64, i32, u64 = types.int16[::1], types.int64[::1], types.int32[::1], types.uint64[::1]
    s = types.int64
    return {"dispatch": (a, i64, a, i32, u64, i32, s, s, s, s, s, s, s, s),
            "combine": (a, i64, types.float32[::1], i32, a, u64, i32, a, s, s, s, s, s, s, s, s)}


def compile_ptx(kind: str, cc=(9, 0)) -> str:
    fn = {"dispatch": dispatch, "combine": combine}[kind]
    return cuda.compile_ptx(fn.py_func, signatures()[kind], cc=cc, launch_bounds=(THREADS,))[0]


def launch_dispatch(layout, x, topk, recv_x, recv_src, sig, recv_count, epoch, T, me, stream):
    dispatch[layout.grid, THREADS, _stream(stream)](
        x, topk, recv_x, recv_src, sig, recv_count, epoch, T, layout.topk, layout.hidden, layout.local_experts,
        me, layout.npes, layout.max_tokens)


def launch_combine(layout, y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, me, stream):
    combine[layout.grid, THREADS, _stream(stream)](
        y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, layout.topk, layout.hidden,
        layout.local_experts, me, layout.npes, layout.max_tokens)
