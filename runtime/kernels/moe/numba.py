"""MoE dispatch and combine in Numba-CUDA (protocol: :mod:`nvshmem_dsl.kernels.moe._layout`).
bfloat16 travels as its bits (int16 arrays), as in :mod:`nvshmem_dsl.kernels.numba`."""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32, int64, uint64

from ... import numba as nv
from ..numba import _bf16_load, _bf16_store, _finish, _stream
from . import _layout

THREADS = _layout.THREADS
MAX_TOKENS = _layout.MAX_TOKENS  # global constants: Numba's shared arrays need a literal size
MAX_TOPK = _layout.MAX_TOPK
ARRAYS = "numba"


@cuda.jit(launch_bounds=(THREADS,))
def dispatch(x, topk, recv_x, recv_src, sig, recv_count, epoch, T, K, H, L, me, npes, T_max):
    # As in nvshmem_dsl.kernels.numba: while loops for run-time strides (range() would compute a trip
    # count, a division), unsigned indices (a signed one is wrapped around) and unsigned / and % (Python's
    # floor division adds sign fix-ups), indices rather than slices for puts and signals: every number here
    # is non-negative, so results are those of the C++ twin's int64 arithmetic.
    b = int64(cuda.blockIdx.x)
    tid = int64(cuda.threadIdx.x)
    lane = tid & 31
    w = tid >> 5
    nt = int64(cuda.blockDim.x)
    nw = nt >> 5
    E = L * npes
    par = epoch & 1
    order = cuda.shared.array(MAX_TOKENS, int32)  # the (t * K + j) routed to this expert
    scan = cuda.shared.array(THREADS, int32)
    e = b
    while e < E:
        dst = int64(uint64(e) // uint64(L))
        el = int64(uint64(e) % uint64(L))
        count = 0
        base = int64(0)
        while base < T * K:  # block scan (Hillis-Steele) of topk == e, in order
            idx = base + tid
            hit = idx < T * K and topk[uint64(idx)] == e
            if hit:  # a token's repeated expert: sent once (its first slot)
                for jj in range(idx - int64(uint64(idx) % uint64(K)), idx):
                    if topk[uint64(jj)] == e:
                        hit = False
            scan[uint64(tid)] = 1 if hit else 0
            cuda.syncthreads()
            off = 1
            while off < nt:
                v = scan[uint64(tid - off)] if tid >= off else 0
                cuda.syncthreads()
                scan[uint64(tid)] += v
                cuda.syncthreads()
                off *= 2
            if hit:
                order[uint64(count + scan[uint64(tid)] - 1)] = idx
            count += scan[uint64(nt - 1)]
            cuda.syncthreads()
            base += nt
        row0 = ((par * L + el) * npes + me) * T_max
        s = w
        while s < count:  # a warp a row
            idx = int64(order[uint64(s)])
            t = int64(uint64(idx) // uint64(K))
            r = row0 + s
            nv.put_nbi_warp(recv_x, uint64(r * H), nv.window(x, t * H, H), H, dst)
            if lane == 0:
                nv.p(recv_src, uint64(r), int32(idx), dst)
            s += nw
        cuda.syncthreads()
        if tid == 0:
            nv.fence()
            word = el * npes + me
            nv.signal_op(sig, uint64(word), (int64(epoch) << 32) | count, nv.SignalOp.SIGNAL_SET, dst)
        cuda.syncthreads()
        e += int64(cuda.gridDim.x)
    if tid == 0:
        word = b
        while word < E:
            nv.signal_wait_until(sig, uint64(word), nv.Cmp.CMP_GE, int64(epoch) << 32)
            recv_count[uint64(word)] = int32(nv.signal_fetch(sig, uint64(word)) & np.uint64(0xFFFFFFFF))
            word += int64(cuda.gridDim.x)
    _finish()


@cuda.jit(launch_bounds=(THREADS,))
def combine(y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, K, H, L, me, npes, T_max):
    # As dispatch: while loops, unsigned indices, / and %, and puts and signals by index.
    b = int64(cuda.blockIdx.x)
    tid = int64(cuda.threadIdx.x)
    w = tid >> 5
    nt = int64(cuda.blockDim.x)
    nw = nt >> 5
    E = L * npes
    par = epoch & 1
    word = b
    while word < E:  # word = l * npes + src: results back to src
        l = int64(uint64(word) // uint64(npes))
        src = int64(uint64(word) % uint64(npes))
        count = recv_count[uint64(word)]
        s = w
        while s < count:
            r = (l * npes + src) * T_max + s
            idx = int64(recv_src[uint64(par * L * npes * T_max + r)])
            nv.put_nbi_warp(comb_x, uint64(idx * H), nv.window(y, r * H, H), H, src)
            s += nw
        cuda.syncthreads()
        if tid == 0:
            nv.fence()
            c = L * npes + me * L + l
            nv.signal_op(sig, uint64(c), epoch, nv.SignalOp.SIGNAL_SET, src)
        cuda.syncthreads()
        word += int64(cuda.gridDim.x)
    e = tid
    while e < E:
        nv.signal_wait_until(sig, uint64(L * npes + e), nv.Cmp.CMP_GE, epoch)
        e += nt
    slot = cuda.shared.array(MAX_TOPK, int32)  # slot j's row: that of its expert's first slot; -1: none
    t = b
    while t < T:
        cuda.syncthreads()
        if tid < K:
            e = topk[uint64(t * K + tid)]
            first = tid
            for jj in range(tid - 1, -1, -1):
                if topk[uint64(t * K + jj)] == e:
                    first = jj
            slot[uint64(tid)] = first if e >= 0 else -1
        cuda.syncthreads()
        h0 = tid
        while h0 < H:  # four elements a thread (h0 + i * nt): 4 K loads in flight
            h1, h2, h3 = min(h0 + nt, H - 1), min(h0 + 2 * nt, H - 1), min(h0 + 3 * nt, H - 1)
            a0 = a1 = a2 = a3 = float32(0)
            for j in range(K):  # loads not behind the mask's branch (a select after them)
                r = slot[uint64(j)]
                wj = weights[uint64(t * K + j)]
                row = (t * K + max(r, 0)) * H
                v0 = wj * _bf16_load(comb_x[uint64(row + h0)])
                v1 = wj * _bf16_load(comb_x[uint64(row + h1)])
                v2 = wj * _bf16_load(comb_x[uint64(row + h2)])
                v3 = wj * _bf16_load(comb_x[uint64(row + h3)])
                if r >= 0:
                    a0 += v0
                    a1 += v1
                    a2 += v2
                    a3 += v3
            out[uint64(t * H + h0)] = _bf16_store(a0)
            if h0 + nt < H:
                out[uint64(t * H + h1)] = _bf16_store(a1)
            if h0 + 2 * nt < H:
                out[uint64(t * H + h2)] = _bf16_store(a2)
            if h0 + 3 * nt < H:
                out[uint64(t * H + h3)] = _bf16_store(a3)
            h0 += 4 * nt
        t += int64(cuda.gridDim.x)
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
