"""MoE dispatch and combine in Numba-CUDA (protocol: :mod:`nvshmem_dsl.kernels.moe._layout`).
bfloat16 travels as its bits (int16 arrays), as in :mod:`nvshmem_dsl.kernels.numba`.

The algorithm of :mod:`nvshmem_dsl.kernels.moe.triton` and of its C++ twin (bench/cpp/moe.cu),
statement for statement as the C++: rows to a PE reached by load/store (``nv.peer`` not null) by
16-byte vector stores through its address, a warp a row (``ROWS`` rows at once; NVSHMEM put_nbi's
P2P path), a row's ``t * K + j`` stored to ``recv_src`` on the peer, a barrier before thread 0's
``fence``; ``put_nbi_block`` a row and ``p`` where the PE is not reachable.  Dispatch's slots: the
matches' running count over ``THREADS`` entries of ``topk`` (a ballot a warp, the warps' totals).
Combine: the ``E`` combine words polled by the block's threads at once (volatile loads), then thread
0's ``wait_until`` of the last; a row of ``H <= BLOCK_H`` in one step (two 16-byte vectors a thread),
the slot loop unrolled by 4 by hand, product and sum each rounded (``fmul_rn``, ``fadd_rn``), j in
order.  Vectors where ``H`` is a multiple of 8 and the arrays 16-byte aligned, else elements.

As in :mod:`nvshmem_dsl.kernels.numba` (the pitfalls seen in SASS): while loops for run-time
strides (range() would compute a trip count, a division), unsigned indices (a signed one is wrapped
around) and unsigned / and % (Python's floor division adds sign fix-ups), indices rather than slices
for puts and signals: every number here is non-negative, so results are those of the C++ twin's
int64 arithmetic."""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32, int64, uint32, uint64
from numba.cuda import libdevice

from ... import numba as nv
from .._numba_asm import address, ballot, load16, store16
from ..numba import _bf16_load, _bf16_store, _finish, _stream
from . import _layout

THREADS = _layout.THREADS
MAX_TOPK = _layout.MAX_TOPK  # global constants: Numba's shared arrays need a literal size
ARRAYS = "numba"
#: Rows a P2P copy step moves: a warp a row.
ROWS = THREADS // 32
#: bfloat16 elements of a 16-byte vector.
VEC = 8
#: Elements of one step of combine's sum: two vectors a thread.
BLOCK_H = 2 * VEC * THREADS


@cuda.jit(device=True, inline=True)
def _vectors_fit(H, a, b):
    """Rows of H elements of int16 arrays a and b can move in 16-byte vectors."""
    return (H & 7) == 0 and ((address(a) | address(b)) & uint64(15)) == 0


@cuda.jit(device=True, inline=True)
def _copy_row(dst, d, src, s, H, lane, vectors):
    """dst[d + h] = src[s + h], h < H, by the lanes of a warp: 16-byte vectors (four in flight a lane)
    where ``vectors``, else elements."""
    if vectors:
        v = lane * VEC
        while v + 3 * 32 * VEC < H:
            q0 = load16(src, uint64(s + v))
            q1 = load16(src, uint64(s + v + 32 * VEC))
            q2 = load16(src, uint64(s + v + 64 * VEC))
            q3 = load16(src, uint64(s + v + 96 * VEC))
            store16(dst, uint64(d + v), q0)
            store16(dst, uint64(d + v + 32 * VEC), q1)
            store16(dst, uint64(d + v + 64 * VEC), q2)
            store16(dst, uint64(d + v + 96 * VEC), q3)
            v += 128 * VEC
        while v < H:
            store16(dst, uint64(d + v), load16(src, uint64(s + v)))
            v += 32 * VEC
    else:
        h = lane
        while h < H:
            dst[uint64(d + h)] = src[uint64(s + h)]
            h += 32


@cuda.jit(launch_bounds=(THREADS,))
def dispatch(x, topk, recv_x, recv_src, sig, recv_count, epoch, T, K, H, L, me, npes, T_max):
    b = int64(cuda.blockIdx.x)
    tid = int64(cuda.threadIdx.x)
    lane = tid & 31
    w = tid >> 5
    E = L * npes
    TK = T * K
    par = epoch & 1
    order = cuda.shared.array(THREADS, int32)  # the t * K + j of this scan vector's matches, in order
    warp_hits = cuda.shared.array(ROWS, int32)  # matches a warp
    e = b
    while e < E:
        dst = int64(uint64(e) // uint64(L))
        el = int64(uint64(e) % uint64(L))
        row0 = ((par * L + el) * npes + me) * T_max  # row s of [par][e % L][me]
        to_x = nv.peer(recv_x, dst)
        to_src = nv.peer(recv_src, dst)
        p2p = address(to_x) != 0
        vectors = p2p and _vectors_fit(H, x, to_x)
        count = int64(0)  # rows sent
        base = int64(0)
        while base < TK:  # topk == e, in token order
            idx = base + tid
            hit = idx < TK and topk[uint64(idx)] == e
            if hit:  # a token's repeated expert: sent once (its first slot)
                jj = idx - int64(uint64(idx) % uint64(K))
                while jj < idx:
                    if topk[uint64(jj)] == e:
                        hit = False
                    jj += 1
            # the matches' running count (inclusive): a ballot a warp, the warps' totals in order
            bal = ballot(hit)
            if lane == 0:
                warp_hits[uint64(w)] = cuda.popc(bal)
            cuda.syncthreads()
            rank = int64(cuda.popc(uint32(bal & ((uint32(2) << uint32(lane)) - uint32(1)))))
            n = int64(0)
            for i in range(ROWS):
                c = int64(warp_hits[i])
                if i < w:
                    rank += c
                n += c
            if hit:
                order[uint64(rank - 1)] = int32(idx)
                if p2p:  # p's P2P path: a store
                    to_src[uint64(row0 + count + rank - 1)] = int32(idx)
            cuda.syncthreads()
            if p2p:  # dst reached by load/store: a warp a row, ROWS rows at once
                s = w
                while s < n:
                    t = int64(uint64(order[uint64(s)]) // uint64(K))
                    _copy_row(to_x, (row0 + count + s) * H, x, t * H, H, lane, vectors)
                    s += ROWS
            else:
                s = int64(0)
                while s < n:
                    idx_s = int64(order[uint64(s)])
                    t = int64(uint64(idx_s) // uint64(K))
                    r = row0 + count + s
                    nv.put_nbi_block(recv_x, uint64(r * H), nv.window(x, t * H, H), H, dst)
                    if tid == 0:
                        nv.p(recv_src, uint64(r), int32(idx_s), dst)
                    s += 1
            count += n
            cuda.syncthreads()  # order and warp_hits free again; every thread's stores before the fence
            base += THREADS
        if tid == 0:
            nv.fence()
            word = el * npes + me
            nv.signal_op(sig, uint64(word), (int64(epoch) << 32) | count, nv.SignalOp.SIGNAL_SET, dst)
        e += int64(cuda.gridDim.x)
    if tid == 0:
        word = b
        while word < E:
            got = nv.signal_wait_until(sig, uint64(word), nv.Cmp.CMP_GE, int64(epoch) << 32)
            recv_count[uint64(word)] = int32(uint64(got) & np.uint64(0xFFFFFFFF))
            word += int64(cuda.gridDim.x)
    _finish()


@cuda.jit(device=True, inline=True)
def _add8(acc, w, q, keep):
    """acc + w * v for the 8 bfloat16 of vector q (product and sum each rounded: never an fma), where
    ``keep``, else acc (a select after the row's load)."""
    out = (_add1(acc[0], w, libdevice.int_as_float(int32(q[0] << uint32(16))), keep),
           _add1(acc[1], w, libdevice.int_as_float(int32(q[0] & uint32(0xFFFF0000))), keep),
           _add1(acc[2], w, libdevice.int_as_float(int32(q[1] << uint32(16))), keep),
           _add1(acc[3], w, libdevice.int_as_float(int32(q[1] & uint32(0xFFFF0000))), keep),
           _add1(acc[4], w, libdevice.int_as_float(int32(q[2] << uint32(16))), keep),
           _add1(acc[5], w, libdevice.int_as_float(int32(q[2] & uint32(0xFFFF0000))), keep),
           _add1(acc[6], w, libdevice.int_as_float(int32(q[3] << uint32(16))), keep),
           _add1(acc[7], w, libdevice.int_as_float(int32(q[3] & uint32(0xFFFF0000))), keep))
    return out


@cuda.jit(device=True, inline=True)
def _add1(acc, w, v, keep):
    s = libdevice.fadd_rn(acc, libdevice.fmul_rn(w, v))
    return s if keep else acc


@cuda.jit(device=True, inline=True)
def _pack(lo, hi):
    """Two floats rounded to bfloat16 (nearest even) in one uint32, lo first."""
    return (uint32(_bf16_store(lo)) & uint32(0xFFFF)) | (uint32(_bf16_store(hi)) << uint32(16))


@cuda.jit(device=True, inline=True)
def _store8(out, i, a):
    store16(out, i, (_pack(a[0], a[1]), _pack(a[2], a[3]), _pack(a[4], a[5]), _pack(a[6], a[7])))


@cuda.jit(device=True, inline=True)
def _sum_vectors(out, comb_x, weights, slot, t, K, H, tid):
    """out[t] = sum over j in order of weights[t][j] * comb_x[t * K + slot[j]] (slot[j] < 0: left
    out), BLOCK_H elements a step: two vectors of 8 a thread, the loads unconditional (a vector past H
    reads the row's last one, its sum not stored), the slot loop unrolled by 4 (8 vectors in flight)."""
    h = int64(0)
    while h < H:  # one step where H <= BLOCK_H
        h0 = h + tid * VEC
        h1 = h0 + THREADS * VEC
        l0 = min(h0, H - VEC)
        l1 = min(h1, H - VEC)
        z = float32(0)
        a0 = (z, z, z, z, z, z, z, z)
        a1 = (z, z, z, z, z, z, z, z)
        base = t * K
        j = int64(0)
        while j + 4 <= K:
            r0 = int64(slot[uint64(j)])
            r1 = int64(slot[uint64(j + 1)])
            r2 = int64(slot[uint64(j + 2)])
            r3 = int64(slot[uint64(j + 3)])
            p0 = (base + max(r0, 0)) * H
            p1 = (base + max(r1, 0)) * H
            p2 = (base + max(r2, 0)) * H
            p3 = (base + max(r3, 0)) * H
            q00, q01 = load16(comb_x, uint64(p0 + l0)), load16(comb_x, uint64(p0 + l1))
            q10, q11 = load16(comb_x, uint64(p1 + l0)), load16(comb_x, uint64(p1 + l1))
            q20, q21 = load16(comb_x, uint64(p2 + l0)), load16(comb_x, uint64(p2 + l1))
            q30, q31 = load16(comb_x, uint64(p3 + l0)), load16(comb_x, uint64(p3 + l1))
            w0 = weights[uint64(base + j)]
            w1 = weights[uint64(base + j + 1)]
            w2 = weights[uint64(base + j + 2)]
            w3 = weights[uint64(base + j + 3)]
            a0, a1 = _add8(a0, w0, q00, r0 >= 0), _add8(a1, w0, q01, r0 >= 0)
            a0, a1 = _add8(a0, w1, q10, r1 >= 0), _add8(a1, w1, q11, r1 >= 0)
            a0, a1 = _add8(a0, w2, q20, r2 >= 0), _add8(a1, w2, q21, r2 >= 0)
            a0, a1 = _add8(a0, w3, q30, r3 >= 0), _add8(a1, w3, q31, r3 >= 0)
            j += 4
        while j < K:
            r = int64(slot[uint64(j)])
            p = (base + max(r, 0)) * H
            wj = weights[uint64(base + j)]
            a0 = _add8(a0, wj, load16(comb_x, uint64(p + l0)), r >= 0)
            a1 = _add8(a1, wj, load16(comb_x, uint64(p + l1)), r >= 0)
            j += 1
        if h0 < H:
            _store8(out, uint64(t * H + h0), a0)
        if h1 < H:
            _store8(out, uint64(t * H + h1), a1)
        h += BLOCK_H


@cuda.jit(device=True, inline=True)
def _sum_elements(out, comb_x, weights, slot, t, K, H, tid):
    """As _sum_vectors, four elements a thread (h0 + i * THREADS), for rows not in vectors."""
    nt = int64(THREADS)
    h0 = tid
    while h0 < H:
        h1, h2, h3 = min(h0 + nt, H - 1), min(h0 + 2 * nt, H - 1), min(h0 + 3 * nt, H - 1)
        a0 = a1 = a2 = a3 = float32(0)
        j = int64(0)
        while j < K:  # loads not behind the mask's branch (a select after them)
            r = int64(slot[uint64(j)])
            wj = weights[uint64(t * K + j)]
            row = (t * K + max(r, 0)) * H
            keep = r >= 0
            a0 = _add1(a0, wj, _bf16_load(comb_x[uint64(row + h0)]), keep)
            a1 = _add1(a1, wj, _bf16_load(comb_x[uint64(row + h1)]), keep)
            a2 = _add1(a2, wj, _bf16_load(comb_x[uint64(row + h2)]), keep)
            a3 = _add1(a3, wj, _bf16_load(comb_x[uint64(row + h3)]), keep)
            j += 1
        out[uint64(t * H + h0)] = _bf16_store(a0)
        if h0 + nt < H:
            out[uint64(t * H + h1)] = _bf16_store(a1)
        if h0 + 2 * nt < H:
            out[uint64(t * H + h2)] = _bf16_store(a2)
        if h0 + 3 * nt < H:
            out[uint64(t * H + h3)] = _bf16_store(a3)
        h0 += 4 * nt


@cuda.jit(launch_bounds=(THREADS,))
def combine(y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, K, H, L, me, npes, T_max):
    b = int64(cuda.blockIdx.x)
    tid = int64(cuda.threadIdx.x)
    lane = tid & 31
    w = tid >> 5
    E = L * npes
    par = epoch & 1
    word = b
    while word < E:  # word = l * npes + src: results back to src
        l = int64(uint64(word) // uint64(npes))
        src = int64(uint64(word) % uint64(npes))
        count = int64(recv_count[uint64(word)])
        to = nv.peer(comb_x, src)
        if address(to) != 0:  # src reached by load/store: a warp a row, ROWS rows at once
            vectors = _vectors_fit(H, y, to)
            s = w
            while s < count:
                r = word * T_max + s
                idx = int64(recv_src[uint64(par * E * T_max + r)])
                _copy_row(to, idx * H, y, r * H, H, lane, vectors)
                s += ROWS
        else:
            s = int64(0)
            while s < count:
                r = word * T_max + s
                idx = int64(recv_src[uint64(par * E * T_max + r)])
                nv.put_nbi_block(comb_x, uint64(idx * H), nv.window(y, r * H, H), H, src)
                s += 1
        cuda.syncthreads()  # every thread's stores before thread 0's fence
        if tid == 0:
            nv.fence()
            nv.signal_op(sig, uint64(E + me * L + l), epoch, nv.SignalOp.SIGNAL_SET, src)
        word += int64(cuda.gridDim.x)
    # every combine word: polled by the block's threads at once (a word a thread, volatile loads), then
    # thread 0's wait_until of the last one, already set (NVSHMEM's step after a wait)
    i = tid
    while i < E:
        while nv.signal_fetch(sig, uint64(E + i)) < uint64(epoch):  # a volatile load, inlined
            pass
        i += THREADS
    cuda.syncthreads()
    if tid == 0:
        nv.wait_until(sig, uint64(E + E - 1), nv.Cmp.CMP_GE, uint64(epoch))
    vectors = _vectors_fit(H, comb_x, out)
    slot = cuda.shared.array(MAX_TOPK, int32)  # slot j's row: that of its expert's first slot; -1: none
    t = b
    while t < T:
        cuda.syncthreads()
        if tid < K:
            e = topk[uint64(t * K + tid)]
            first = tid
            jj = tid - 1
            while jj >= 0:
                if topk[uint64(t * K + jj)] == e:
                    first = jj
                jj -= 1
            slot[uint64(tid)] = first if e >= 0 else -1
        cuda.syncthreads()
        if vectors:
            _sum_vectors(out, comb_x, weights, slot, t, K, H, tid)
        else:
            _sum_elements(out, comb_x, weights, slot, t, K, H, tid)
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
