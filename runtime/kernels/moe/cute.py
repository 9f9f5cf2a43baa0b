"""MoE dispatch and combine in the CuTe DSL (protocol: :mod:`nvshmem_dsl.kernels.moe._layout`).

A port of :mod:`nvshmem_dsl.kernels.moe.numba` on the same buffers, statement for statement (the
algorithm of the Triton kernels and of the C++ twin bench/cpp/moe.cu): one CuTe block is one block
of the protocol (``_layout.THREADS`` threads); dispatch counts the matches of ``THREADS`` entries of
``topk`` by a ballot a warp and the warps' totals in shared memory (``SmemAllocator``), each match's
running count its slot; rows to a PE reached by load/store (``peer_tensor`` not null) go by 16-byte
vector stores through the peer's address, a warp a row (``WARPS`` rows at once; NVSHMEM put's P2P
path), the ``t * K + j`` stored on the peer too, then a barrier, ``fence`` and the signal word; to
any other PE ``put_nbi_block`` a row and ``p``.  Combine sends the rows back alike, polls the ``E``
combine words with the block's threads at once (``ld.relaxed.sys``), then thread 0's ``wait_until``
of the last, and sums ``out[t]`` over j in order in float32, a row of up to ``BLOCK_H`` elements in
one step (two 16-byte vectors a thread, the slot loop unrolled by 4; four elements a thread where
``H`` is not a multiple of 8 or an array is not 16-byte aligned), rounded to bfloat16 to nearest
even (CuTe's ``cvt.rn``). Nothing of the kernels needs hand-written PTX (``vote_ballot_sync``,
``popc`` and ``load`` of ``cute.arch``; vectors are CuTe tensors of 8 at 16-byte aligned pointers); the
NVSHMEM calls are the device API of :mod:`nvshmem_dsl.cute`. Two things the DSL does its own way:

* CuTe's ``*`` and ``+`` on Float32 may be contracted to an ``fma`` (the DSL has no switch for
  it), so the combine's products and sums are NVVM's rounded operations (:func:`_mul_rn`,
  :func:`_add_rn`: ``mul.rn.f32`` and ``add.rn.f32``, as Numba's combine compiles): the same bits
  as the Numba and Triton kernels.
* A ``range`` with a runtime step and Int64 bounds does not trace (nvidia-cutlass-dsl 4.8.1: the
  rewrite for a possibly negative step yields Int64 or the Int32 ``0``), so the block-strided
  loops (``b, b + grid, ...`` over experts, words and tokens, all < 2**31) count in Int32 and
  index in Int64.

Tensors are 1-D with a dynamic size and the scalars runtime ``Int64`` arguments (the Numba
kernels' int64 scalars; index arithmetic in 64 bits), so one compile per (kind, arch) serves every
size, epoch and PE (:func:`launch_dispatch` / :func:`launch_combine`; :func:`compile_ptx` for CPU
checks). CuTe's ``from_dlpack`` sizes are 32-bit: an array holds < 2**31 elements.
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
from cuda.bindings import driver as cuda
from cutlass import BFloat16, Float32, Int32, Int64, Uint32, Uint64
from cutlass._mlir.dialects import llvm, nvvm
from cutlass.memory import SmemAllocator

from ... import cute as nv
from ..cute import _finish, _tensor
from . import _layout

THREADS = _layout.THREADS
MAX_TOPK = _layout.MAX_TOPK
#: The arrays the launches take: flat 1-D torch (or cupy) device arrays, through DLPack.
ARRAYS = "torch"
#: Warps of a block.
WARPS = THREADS // 32
#: bfloat16 elements of a 16-byte vector.
VEC = 8
#: Elements of one step of combine's sum: two vectors a thread.
BLOCK_H = 2 * VEC * THREADS
SET = nv.SignalOp.SIGNAL_SET
GE = nv.Cmp.CMP_GE


def _mul_rn(a: Float32, b: Float32) -> Float32:
    """a * b rounded to nearest even, never contracted into an fma (NVVM's mul.rn intrinsic)."""
    return Float32(llvm.call_intrinsic(Float32.mlir_type, "llvm.nvvm.mul.rn.f", [a.ir_value(), b.ir_value()], [], []))


def _add_rn(a: Float32, b: Float32) -> Float32:
    """a + b rounded to nearest even, never contracted (NVVM's addf with rnd = rn)."""
    return Float32(nvvm.addf(a.ir_value(), b.ir_value(), rnd=nvvm.FPRoundingMode.RN))


def _vec(addr: Int64):
    """The 16-byte vector of bfloat16 at address ``addr`` (a multiple of 16) as a tensor of VEC."""
    return cute.make_tensor(cute.make_ptr(BFloat16, addr, cute.AddressSpace.gmem, assumed_align=16),
                            cute.make_layout(VEC))


@cute.jit
def _copy_row(to: cute.Tensor, d: Int64, src: cute.Tensor, s: Int64, H: Int64, lane: Int64, vectors: Int64):
    """to[d + h] = src[s + h], h < H, by the lanes of a warp: 16-byte vectors (four a lane in flight)
    where ``vectors`` is 1, else elements (``to``: a peer's tensor, ``peer_tensor``: stores through it
    are NVSHMEM put's P2P path)."""
    if vectors == 1:
        to_at = to.iterator.toint()
        src_at = src.iterator.toint()
        v = lane * VEC
        while v + 3 * 32 * VEC < H:  # four vectors loaded, then stored (the stores may alias the loads)
            q0 = _vec(src_at + (s + v) * 2).load()
            q1 = _vec(src_at + (s + v + 32 * VEC) * 2).load()
            q2 = _vec(src_at + (s + v + 64 * VEC) * 2).load()
            q3 = _vec(src_at + (s + v + 96 * VEC) * 2).load()
            _vec(to_at + (d + v) * 2).store(q0)
            _vec(to_at + (d + v + 32 * VEC) * 2).store(q1)
            _vec(to_at + (d + v + 64 * VEC) * 2).store(q2)
            _vec(to_at + (d + v + 96 * VEC) * 2).store(q3)
            v += 128 * VEC
        while v < H:
            _vec(to_at + (d + v) * 2).store(_vec(src_at + (s + v) * 2).load())
            v += 32 * VEC
    else:
        for h in range(lane, H, 32):
            to[d + h] = src[s + h]


@cute.jit
def _vectors_fit(H: Int64, a: cute.Tensor, b: cute.Tensor) -> Int64:
    """1 where rows of H bfloat16 of a and b move in 16-byte vectors (H % 8 == 0, both aligned), else 0."""
    ok = Int64(0)
    if ((H & 7) | ((a.iterator.toint() | b.iterator.toint()) & 15)) == 0:
        ok = Int64(1)
    return ok


@cute.kernel
def dispatch(x: cute.Tensor, topk: cute.Tensor, recv_x: cute.Tensor, recv_src: cute.Tensor, sig: cute.Tensor,
             recv_count: cute.Tensor, epoch: Int64, T: Int64, K: Int64, H: Int64, L: Int64, me: Int64, npes: Int64,
             T_max: Int64):
    t32, _, _ = cute.arch.thread_idx()
    b32, _, _ = cute.arch.block_idx()
    g32, _, _ = cute.arch.grid_dim()
    tid = Int64(t32)
    lane = tid & 31
    w = tid >> 5
    E = L * npes
    TK = T * K
    par = epoch & 1
    smem = SmemAllocator()
    order = smem.allocate_tensor(Int32, cute.make_layout(THREADS), 16)  # this scan vector's matches, in order
    warp_hits = smem.allocate_tensor(Int32, cute.make_layout(WARPS), 16)  # matches a warp
    below = (Uint32(2) << Uint32(lane)) - Uint32(1)  # lanes up to this one
    for e32 in range(b32, Int32(E), g32):
        e = Int64(e32)
        dst = e // L
        row0 = ((par * L + e % L) * npes + me) * T_max  # row s of [par][e % L][me]
        to_x = nv.peer_tensor(recv_x, Int32(dst))
        to_src = nv.peer_tensor(recv_src, Int32(dst))
        p2p = to_x.iterator.toint() != 0
        vectors = _vectors_fit(H, x, to_x)
        count = Int64(0)  # rows sent
        for base in range(0, TK, THREADS):  # topk == e, in token order
            idx = base + tid
            hit = Int32(0)
            if idx < TK:
                if topk[idx] == e:
                    hit = Int32(1)
                    for jj in range(idx - idx % K, idx):  # a token's repeated expert: sent once (its first slot)
                        if topk[jj] == e:
                            hit = Int32(0)
            # the matches' running count (inclusive): a ballot a warp, the warps' totals in order
            bal = Uint32(cute.arch.vote_ballot_sync(hit == 1))
            if lane == 0:
                warp_hits[Int32(w)] = Int32(cute.arch.popc(bal))
            cute.arch.sync_threads()
            rank = Int64(cute.arch.popc(bal & below))
            n = Int64(0)
            for i in cutlass.range_constexpr(WARPS):
                c = Int64(warp_hits[i])
                if w > i:
                    rank += c
                n += c
            if hit == 1:
                order[Int32(rank - 1)] = Int32(idx)
                if p2p:  # p's P2P path: a store
                    to_src[row0 + count + rank - 1] = Int32(idx)
            cute.arch.sync_threads()
            if p2p:  # dst reached by load/store: a warp a row, WARPS rows at once
                for s in range(w, n, WARPS):
                    t = Int64(order[Int32(s)]) // K
                    _copy_row(to_x, (row0 + count + s) * H, x, t * H, H, lane, vectors)
            else:
                for s in range(0, n, 1):
                    i = Int64(order[Int32(s)])
                    r = row0 + count + s
                    nv.put_nbi_block(recv_x.iterator + r * H, x.iterator + (i // K) * H, H, dst)
                    if tid == 0:
                        nv.p(recv_src, r, Int32(i), dst)
            count += n
            cute.arch.sync_threads()  # order and warp_hits free again; every thread's stores before the fence
        if tid == 0:
            nv.fence()
            nv.signal_op(sig, (e % L) * npes + me, Uint64((epoch << 32) | count), SET, dst)
    if tid == 0:
        for w32 in range(b32, Int32(E), g32):
            word = Int64(w32)
            got = nv.signal_wait_until(sig, word, GE, Uint64(epoch << 32))
            recv_count[word] = Int32(got & 0xFFFFFFFF)
    _finish()


@cute.jit
def _sum_token(out: cute.Tensor, comb_x: cute.Tensor, weights: cute.Tensor, slot: cute.Tensor, t: Int64, K: Int64,
               H: Int64, tid: Int64):
    """out[t] = sum over j in order of weights[t][j] * comb_x[t * K + slot[j]] (slot[j] < 0: left out),
    BLOCK_H elements a step: two 16-byte vectors a thread, the loads unconditional (a vector past H
    reads the row's last one, its sum not stored), the slot loop unrolled by 4."""
    comb_at = comb_x.iterator.toint()
    out_at = out.iterator.toint()
    for h in range(0, H, BLOCK_H):  # one step where H <= BLOCK_H
        h0 = h + tid * VEC
        h1 = h0 + THREADS * VEC
        l0 = cutlass.min(h0, H - VEC)
        l1 = cutlass.min(h1, H - VEC)
        acc = cute.make_rmem_tensor(2 * VEC, Float32)
        for i in cutlass.range_constexpr(2 * VEC):
            acc[i] = Float32(0.0)
        v0 = cute.make_rmem_tensor(VEC, BFloat16)
        v1 = cute.make_rmem_tensor(VEC, BFloat16)
        for j in cutlass.range(K, unroll=4):  # the rows loaded before the select (no branch around them)
            r = Int64(slot[Int32(j)])
            wj = weights[t * K + j]
            row = comb_at + (t * K + cutlass.max(r, Int64(0))) * H * 2
            lo = _vec(row + l0 * 2).load()
            hi = _vec(row + l1 * 2).load()
            for i in cutlass.range_constexpr(VEC):
                p0 = _mul_rn(wj, lo[i].to(Float32))
                p1 = _mul_rn(wj, hi[i].to(Float32))
                if r >= 0:
                    acc[i] = _add_rn(acc[i], p0)
                    acc[VEC + i] = _add_rn(acc[VEC + i], p1)
        for i in cutlass.range_constexpr(VEC):
            v0[i] = acc[i].to(BFloat16)
            v1[i] = acc[VEC + i].to(BFloat16)
        if h0 < H:
            _vec(out_at + (t * H + h0) * 2).store(v0.load())
        if h1 < H:
            _vec(out_at + (t * H + h1) * 2).store(v1.load())


@cute.jit
def _sum_elements(out: cute.Tensor, comb_x: cute.Tensor, weights: cute.Tensor, slot: cute.Tensor, t: Int64,
                  K: Int64, H: Int64, tid: Int64):
    """As _sum_token, four elements a thread (h0 + i * THREADS), for rows not in vectors."""
    for h0 in range(tid, H, 4 * THREADS):  # four elements a thread (h0 + i * THREADS): 4 K loads in flight
        h1 = cutlass.min(h0 + THREADS, H - 1)
        h2 = cutlass.min(h0 + 2 * THREADS, H - 1)
        h3 = cutlass.min(h0 + 3 * THREADS, H - 1)
        a0, a1, a2, a3 = Float32(0.0), Float32(0.0), Float32(0.0), Float32(0.0)
        for j in range(K):  # loads not behind the mask's branch (a select after them)
            r = Int64(slot[Int32(j)])
            wj = weights[t * K + j]
            row = (t * K + cutlass.max(r, Int64(0))) * H
            v0 = _mul_rn(wj, comb_x[row + h0].to(Float32))
            v1 = _mul_rn(wj, comb_x[row + h1].to(Float32))
            v2 = _mul_rn(wj, comb_x[row + h2].to(Float32))
            v3 = _mul_rn(wj, comb_x[row + h3].to(Float32))
            if r >= 0:
                a0 = _add_rn(a0, v0)
                a1 = _add_rn(a1, v1)
                a2 = _add_rn(a2, v2)
                a3 = _add_rn(a3, v3)
        out[t * H + h0] = a0.to(BFloat16)
        if h0 + THREADS < H:
            out[t * H + h1] = a1.to(BFloat16)
        if h0 + 2 * THREADS < H:
            out[t * H + h2] = a2.to(BFloat16)
        if h0 + 3 * THREADS < H:
            out[t * H + h3] = a3.to(BFloat16)


@cute.kernel
def combine(y: cute.Tensor, topk: cute.Tensor, weights: cute.Tensor, recv_src: cute.Tensor, comb_x: cute.Tensor,
            sig: cute.Tensor, recv_count: cute.Tensor, out: cute.Tensor, epoch: Int64, T: Int64, K: Int64, H: Int64,
            L: Int64, me: Int64, npes: Int64, T_max: Int64):
    t32, _, _ = cute.arch.thread_idx()
    b32, _, _ = cute.arch.block_idx()
    g32, _, _ = cute.arch.grid_dim()
    tid = Int64(t32)
    lane = tid & 31
    w = tid >> 5
    E = L * npes
    par = epoch & 1
    for w32 in range(b32, Int32(E), g32):  # word = l * npes + src: results back to src
        word = Int64(w32)
        l = word // npes
        src = word % npes
        count = Int64(recv_count[word])
        to = nv.peer_tensor(comb_x, Int32(src))
        if to.iterator.toint() != 0:  # src reached by load/store: a warp a row, WARPS rows at once
            vectors = _vectors_fit(H, y, to)
            for s in range(w, count, WARPS):
                r = word * T_max + s
                i = Int64(recv_src[par * E * T_max + r])
                _copy_row(to, i * H, y, r * H, H, lane, vectors)
        else:
            for s in range(0, count, 1):
                r = word * T_max + s
                i = Int64(recv_src[par * E * T_max + r])
                nv.put_nbi_block(comb_x.iterator + i * H, y.iterator + r * H, H, src)
        cute.arch.sync_threads()  # every thread's stores before thread 0's fence
        if tid == 0:
            nv.fence()
            nv.signal_op(sig, E + me * L + l, Uint64(epoch), SET, src)
    # every combine word: polled by the block's threads at once (a word a thread), then thread 0's
    # wait_until of the last one, already set (NVSHMEM's step after a wait)
    for e in range(tid, E, THREADS):
        got = cute.arch.load(sig.iterator + (E + e), Uint64, sem="relaxed", scope="sys")
        while got < Uint64(epoch):
            got = cute.arch.load(sig.iterator + (E + e), Uint64, sem="relaxed", scope="sys")
    cute.arch.sync_threads()
    if tid == 0:
        nv.wait_until(sig, E + E - 1, GE, Uint64(epoch))
    vectors = _vectors_fit(H, comb_x, out)
    smem = SmemAllocator()
    # slot j's row: that of its expert's first slot; -1: none
    slot = smem.allocate_tensor(Int32, cute.make_layout(MAX_TOPK), 16)
    for t32_ in range(b32, Int32(T), g32):
        t = Int64(t32_)
        cute.arch.sync_threads()
        if tid < K:
            e = topk[t * K + tid]
            first = tid
            for jj in range(0, tid):
                if topk[t * K + jj] == e:
                    first = cutlass.min(first, jj)
            if e < 0:
                first = Int64(-1)
            slot[t32] = Int32(first)
        cute.arch.sync_threads()
        if vectors == 1:
            _sum_token(out, comb_x, weights, slot, t, K, H, tid)
        else:
            _sum_elements(out, comb_x, weights, slot, t, K, H, tid)
    _finish()


KERNELS = {"dispatch": dispatch, "combine": combine}


@cute.jit
def _launch_dispatch(x: cute.Tensor, topk: cute.Tensor, recv_x: cute.Tensor, recv_src: cute.Tensor,
                     sig: cute.Tensor, recv_count: cute.Tensor, epoch: Int64, T: Int64, K: Int64, H: Int64, L: Int64,
                     me: Int64, npes: Int64, T_max: Int64, grid: Int32, stream: cuda.CUstream):
    dispatch(x, topk, recv_x, recv_src, sig, recv_count, epoch, T, K, H, L, me, npes, T_max).launch(
        grid=[grid, 1, 1], block=[THREADS, 1, 1], stream=stream)  # smem: as allocated


@cute.jit
def _launch_combine(y: cute.Tensor, topk: cute.Tensor, weights: cute.Tensor, recv_src: cute.Tensor,
                    comb_x: cute.Tensor, sig: cute.Tensor, recv_count: cute.Tensor, out: cute.Tensor, epoch: Int64,
                    T: Int64, K: Int64, H: Int64, L: Int64, me: Int64, npes: Int64, T_max: Int64, grid: Int32,
                    stream: cuda.CUstream):
    combine(y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, K, H, L, me, npes, T_max).launch(
        grid=[grid, 1, 1], block=[THREADS, 1, 1], stream=stream)


_LAUNCHERS = {"dispatch": _launch_dispatch, "combine": _launch_combine}
#: Each kernel's arrays (element types, in argument order), then eight Int64 scalars.
_ARRAY_TYPES = {"dispatch": (BFloat16, Int64, BFloat16, Int32, Uint64, Int32),
                "combine": (BFloat16, Int64, Float32, Int32, BFloat16, Uint64, Int32, BFloat16)}
_DTYPE_NAMES = {BFloat16: "bfloat16", Int64: "int64", Float32: "float32", Int32: "int32", Uint64: "uint64"}


def _example_args(kind: str) -> tuple:
    """Compile-time arguments: tensors of a dynamic size, runtime scalars, grid, a stream."""
    if kind not in KERNELS:
        raise ValueError(f"no MoE kernel {kind!r} (dispatch, combine)")
    F = cute.runtime.make_fake_compact_tensor
    arrays = [F(t, (cute.sym_int32(),)) for t in _ARRAY_TYPES[kind]]
    return (*arrays, *(Int64(1) for _ in range(8)), Int32(1), cute.runtime.make_fake_stream())


@functools.lru_cache(maxsize=None)
def _compiled(kind: str, arch: str) -> nv.CompiledKernel:
    return nv.compile(_LAUNCHERS[kind], *_example_args(kind), arch=arch)


def compile_ptx(kind: str, arch="sm_90a", options: str | None = None) -> str:
    """PTX of ``kind`` ("dispatch" or "combine"; CPU: no GPU needed)."""
    if kind not in KERNELS:
        raise ValueError(f"no MoE kernel {kind!r} (dispatch, combine)")
    return nv.compile_to_ptx(_LAUNCHERS[kind], *_example_args(kind), arch=arch, options=options)


def _run(kind: str, layout, arrays: tuple, epoch: int, T: int, me: int, stream: int) -> None:
    from ...cute._compile import resolve_arch

    ts = [_tensor(a, _DTYPE_NAMES[t]) for a, t in zip(arrays, _ARRAY_TYPES[kind])]
    k = _compiled(kind, resolve_arch(None))
    k(*ts, epoch, T, layout.topk, layout.hidden, layout.local_experts, me, layout.npes, layout.max_tokens,
      layout.grid, cuda.CUstream(stream))


def launch_dispatch(layout, x, topk, recv_x, recv_src, sig, recv_count, epoch, T, me, stream):
    """Dispatch on ``stream`` (an int handle, 0: the legacy default stream); arrays: flat 1-D contiguous
    torch tensors (x, recv_x bfloat16; topk int64; recv_src, recv_count int32; sig uint64)."""
    _run("dispatch", layout, (x, topk, recv_x, recv_src, sig, recv_count), epoch, T, me, stream)


def launch_combine(layout, y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, me, stream):
    """Combine on ``stream``; arrays as :func:`launch_dispatch`'s (y, comb_x, out bfloat16; weights float32)."""
    _run("combine", layout, (y, topk, weights, recv_src, comb_x, sig, recv_count, out), epoch, T, me, stream)
