"""MoE dispatch and combine in the CuTe DSL (protocol: :mod:`nvshmem_dsl.kernels.moe._layout`).

A port of the earlier Numba kernels (before their rework on the Triton kernels' algorithm: rows
through ``nv.peer`` in 16-byte vectors, a ballot scan, one poll of the combine words; not ported
here yet) on the same buffers, line for line: one CuTe block
is one block of the protocol (``_layout.THREADS`` threads), the dispatch's list of the (t, j)
routed to an expert is a Hillis-Steele block scan in shared memory (``SmemAllocator``: the list
of ``MAX_TOKENS`` entries and a word a thread), rows go out a warp a row (``put_nbi_warp``), the
``t * K + j`` by ``p``, then ``fence`` and the signal word; combine puts the rows back, then sums
``out[t]`` over j in order in float32 (four elements a thread a step, loads before the mask's
select), rounded to bfloat16 to nearest even (CuTe's ``cvt.rn``). Nothing of the kernels needs
hand-written PTX: the scan is shared memory and ``sync_threads`` (no ballot, as in Numba), the
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
from cutlass import BFloat16, Float32, Int32, Int64, Uint64
from cutlass._mlir.dialects import llvm, nvvm
from cutlass.memory import SmemAllocator

from ... import cute as nv
from ..cute import _finish, _tensor
from . import _layout

THREADS = _layout.THREADS
MAX_TOKENS = _layout.MAX_TOKENS
MAX_TOPK = _layout.MAX_TOPK
#: The arrays the launches take: flat 1-D torch (or cupy) device arrays, through DLPack.
ARRAYS = "torch"
#: Warps of a block.
WARPS = THREADS // 32
#: Steps of the block scan (THREADS is a power of two).
SCAN_STEPS = THREADS.bit_length() - 1
SET = nv.SignalOp.SIGNAL_SET
GE = nv.Cmp.CMP_GE


def _mul_rn(a: Float32, b: Float32) -> Float32:
    """a * b rounded to nearest even, never contracted into an fma (NVVM's mul.rn intrinsic)."""
    return Float32(llvm.call_intrinsic(Float32.mlir_type, "llvm.nvvm.mul.rn.f", [a.ir_value(), b.ir_value()], [], []))


def _add_rn(a: Float32, b: Float32) -> Float32:
    """a + b rounded to nearest even, never contracted (NVVM's addf with rnd = rn)."""
    return Float32(nvvm.addf(a.ir_value(), b.ir_value(), rnd=nvvm.FPRoundingMode.RN))


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
    order = smem.allocate_tensor(Int32, cute.make_layout(MAX_TOKENS), 16)  # the (t * K + j) routed to e
    scan = smem.allocate_tensor(Int32, cute.make_layout(THREADS), 16)
    for e32 in range(b32, Int32(E), g32):
        e = Int64(e32)
        dst = e // L
        count = Int64(0)
        for base in range(0, TK, THREADS):  # block scan (Hillis-Steele) of topk == e, in order
            idx = base + tid
            hit = Int32(0)
            if idx < TK:
                if topk[idx] == e:
                    hit = Int32(1)
                    for jj in range(idx - idx % K, idx):  # a token's repeated expert: sent once (its first slot)
                        if topk[jj] == e:
                            hit = Int32(0)
            scan[t32] = hit
            cute.arch.sync_threads()
            for i in cutlass.range_constexpr(SCAN_STEPS):
                v = Int32(0)
                if t32 >= (1 << i):
                    v = scan[t32 - (1 << i)]
                cute.arch.sync_threads()
                scan[t32] = scan[t32] + v
                cute.arch.sync_threads()
            if hit == 1:
                order[Int32(count) + scan[t32] - 1] = Int32(idx)
            count += Int64(scan[THREADS - 1])
            cute.arch.sync_threads()
        row0 = ((par * L + e % L) * npes + me) * T_max
        for s in range(w, count, WARPS):  # a warp a row
            i = Int64(order[Int32(s)])
            r = row0 + s
            nv.put_nbi_warp(recv_x.iterator + r * H, x.iterator + (i // K) * H, H, dst)
            if lane == 0:
                nv.p(recv_src, r, Int32(i), dst)
        cute.arch.sync_threads()
        if tid == 0:
            nv.fence()
            nv.signal_op(sig, (e % L) * npes + me, Uint64((epoch << 32) | count), SET, dst)
        cute.arch.sync_threads()
    if tid == 0:
        for w32 in range(b32, Int32(E), g32):
            word = Int64(w32)
            got = nv.signal_wait_until(sig, word, GE, Uint64(epoch << 32))
            recv_count[word] = Int32(got & 0xFFFFFFFF)
    _finish()


@cute.kernel
def combine(y: cute.Tensor, topk: cute.Tensor, weights: cute.Tensor, recv_src: cute.Tensor, comb_x: cute.Tensor,
            sig: cute.Tensor, recv_count: cute.Tensor, out: cute.Tensor, epoch: Int64, T: Int64, K: Int64, H: Int64,
            L: Int64, me: Int64, npes: Int64, T_max: Int64):
    t32, _, _ = cute.arch.thread_idx()
    b32, _, _ = cute.arch.block_idx()
    g32, _, _ = cute.arch.grid_dim()
    tid = Int64(t32)
    w = tid >> 5
    E = L * npes
    par = epoch & 1
    for w32 in range(b32, Int32(E), g32):  # word = l * npes + src: results back to src
        word = Int64(w32)
        l = word // npes
        src = word % npes
        count = Int64(recv_count[word])
        for s in range(w, count, WARPS):
            r = word * T_max + s
            i = Int64(recv_src[par * E * T_max + r])
            nv.put_nbi_warp(comb_x.iterator + i * H, y.iterator + r * H, H, src)
        cute.arch.sync_threads()
        if tid == 0:
            nv.fence()
            nv.signal_op(sig, E + me * L + l, Uint64(epoch), SET, src)
        cute.arch.sync_threads()
    for e in range(tid, E, THREADS):
        nv.signal_wait_until(sig, E + e, GE, Uint64(epoch))
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
