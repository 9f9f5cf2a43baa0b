"""The fused all-gather + GEMM in the CuTe DSL (protocol: :mod:`nvshmem_dsl.kernels.ag_gemm._plan`).

A first, simple version: the kernels of :mod:`.triton` (the same arguments, staging, signal words
and tile order) with a CuTe tensor-core mainloop of its own: ``BM x BN`` tiles, K in ``BK`` steps,
each step's A and B tiles copied to shared memory by ``cp.async.cg`` (16 bytes a thread), then
multiplied by warp MMAs (``mma.sync`` m16n8k16, bfloat16 into float32: 4 warps in 2 x 2), one
stage, no swizzle. Before the first step of a tile of a remote shard, thread 0 waits
(``signal_wait_until``) for the signal words of the parts the tile reads and the block syncs: the
per-chunk wait in the mainloop. Not tuned (no multi-stage pipeline, no wgmma/TMA: the CUTLASS
Hopper GEMM is not shipped in the nvidia-cutlass-dsl wheel), so it shows the protocol in CuTe
rather than the speed. Shapes: ``m`` a multiple of ``BM``, ``N`` of ``BN``, ``K`` of ``BK``
(:func:`check_shape`). Tensors are 1-D of a dynamic size (viewed 2-D inside) and the scalars are
runtime arguments: one compile per (kernel, arch) serves every size, epoch and PE.
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
from cuda.bindings import driver as cuda
from cutlass import BFloat16, Float32, Int32, Int64, Uint64
from cutlass.cute.nvgpu import cpasync, warp
from cutlass.memory import SmemAllocator

from ... import cute as nv
from ..cute import _finish, _send, _tensor
from . import _plan

BM, BN, BK = 128, 128, 32
THREADS = 128
#: Threads of a program of the put kernel (the collectives' block).
SEND_THREADS = 512
ARRAYS = "torch"


def check_shape(m: int, N: int, K: int, npes: int, b_row_major: bool) -> str | None:
    """Why the CuTe kernel does not take these sizes (None: it does)."""
    for name, value, tile in (("m (a's rows)", m, BM), ("N (b's columns)", N, BN), ("K", K, BK)):
        if value % tile:
            return f"dsl='cute' needs {name} a multiple of {tile}, got {value}"
    if not b_row_major:
        return "dsl='cute' needs a row-major (contiguous) b"
    if 2 * npes * m * K >= 1 << 31 or npes * m * N >= 1 << 31:
        return "dsl='cute' indexes the staging and out in 32 bits: 2 * n_pes * m * K and n_pes * m * N must be < 2**31"
    return None


@cute.kernel
def ag_send(a: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor, epoch: Int64, m: Int64, K: Int64,
            me: Int32, npes: Int32, part_rows: Int64):
    """Block c: rows [c * part_rows, ...) of a to every peer, peers me - 1, me - 2, ..., each part
    with its signal word (an empty part: the signal alone); then quiet."""
    b, _, _ = cute.arch.block_idx()
    c = Int64(b)
    lo = cutlass.min(c * part_rows, m)
    hi = cutlass.min(lo + part_rows, m)
    mine = ((epoch & 1) * npes + me) * m * K
    for k in range(1, npes):
        _send(stage, mine + lo * K, a, lo * K, (hi - lo) * K, sig, Int32(c) * npes + me, epoch,
              (me - k + npes) % npes)
    _finish()


@cute.kernel
def ag_gemm(tiled_mma: cute.TiledMma, copy_a: cute.TiledCopy, copy_b: cute.TiledCopy, out: cute.Tensor,
            a: cute.Tensor, b: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor, epoch: Int64, m: Int32,
            N: Int32, K: Int32, me: Int32, npes: Int32, part_rows: Int32):
    tid, _, _ = cute.arch.thread_idx()
    g, _, _ = cute.arch.block_idx()
    G, _, _ = cute.arch.grid_dim()
    m, N, K = cute.assume(m, divby=BM), cute.assume(N, divby=BN), cute.assume(K, divby=BK)
    smem = SmemAllocator()
    sA = smem.allocate_tensor(BFloat16, cute.make_layout((BM, BK), stride=(BK, 1)), 16)
    sB = smem.allocate_tensor(BFloat16, cute.make_layout((BN, BK), stride=(1, BN)), 16)
    thr_mma = tiled_mma.get_slice(tid)
    thr_a, thr_b = copy_a.get_slice(tid), copy_b.get_slice(tid)
    tCsA, tCsB = thr_mma.partition_A(sA), thr_mma.partition_B(sB)
    tCrA, tCrB = tiled_mma.make_fragment_A(tCsA), tiled_mma.make_fragment_B(tCsB)
    tAsA, tBsB = thr_a.partition_D(sA), thr_b.partition_D(sB)
    # 2-D views: this PE's shard, the staging (both halves, every source), b [K, N] row-major seen
    # as (N, K) (the MMA's B operand), out
    gA = cute.make_tensor(a.iterator, cute.make_layout((m, K), stride=(K, 1)))
    gS = cute.make_tensor(stage.iterator, cute.make_layout((2 * npes * m, K), stride=(K, 1)))
    gB = cute.make_tensor(b.iterator, cute.make_layout((N, K), stride=(1, N)))
    gC = cute.make_tensor(out.iterator, cute.make_layout((npes * m, N), stride=(N, 1)))
    tiles_m, tiles_n = m // BM, N // BN
    per_chunk = tiles_m * tiles_n
    par = Int32(epoch & 1)
    for t in range(Int32(g), npes * per_chunk, Int32(G)):
        s = (me + t // per_chunk) % npes  # chunks: me, me + 1, ...
        r = t % per_chunk
        pm, pn = r // tiles_n, r % tiles_n
        if s != me:
            if tid == 0:
                for c in range(pm * BM // part_rows, (pm * BM + BM - 1) // part_rows + 1):
                    nv.signal_wait_until(sig, c * npes + s, nv.Cmp.CMP_GE, Uint64(epoch))
            cute.arch.sync_threads()
        tCgC = thr_mma.partition_C(cute.local_tile(gC, (BM, BN), (s * tiles_m + pm, pn)))
        acc = tiled_mma.make_fragment_C(tCgC)
        acc.fill(0.0)
        for kt in range(K // BK):  # the mainloop
            if s == me:
                cute.copy(copy_a, thr_a.partition_S(cute.local_tile(gA, (BM, BK), (pm, kt))), tAsA)
            else:
                cute.copy(copy_a, thr_a.partition_S(cute.local_tile(gS, (BM, BK), ((par * npes + s) * tiles_m + pm,
                                                                                   kt))), tAsA)
            cute.copy(copy_b, thr_b.partition_S(cute.local_tile(gB, (BN, BK), (pn, kt))), tBsB)
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()
            cute.autovec_copy(tCsA, tCrA)
            cute.autovec_copy(tCsB, tCrB)
            cute.gemm(tiled_mma, acc, tCrA, tCrB, acc)
            cute.arch.sync_threads()
        res = cute.make_fragment_like(acc, BFloat16)
        res.store(acc.load().to(BFloat16))
        cute.autovec_copy(res, tCgC)


@cute.jit
def _launch_gemm(out: cute.Tensor, a: cute.Tensor, b: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor,
                 epoch: Int64, m: Int32, N: Int32, K: Int32, me: Int32, npes: Int32, part_rows: Int32,
                 grid: Int32, stream: cuda.CUstream):
    tiled_mma = cute.make_tiled_mma(warp.MmaF16BF16Op(BFloat16, Float32, (16, 8, 16)), (2, 2, 1))
    # .cg: through L2 only (the staging's rows arrive from peers during the kernel)
    atom = cute.make_copy_atom(cpasync.CopyG2SOp(cpasync.LoadCacheMode.GLOBAL), BFloat16, num_bits_per_copy=128)
    copy_a = cute.make_tiled_copy_tv(atom, cute.make_layout((32, 4), stride=(4, 1)), cute.make_layout((1, 8)))
    copy_b = cute.make_tiled_copy_tv(atom, cute.make_layout((16, 8), stride=(1, 16)), cute.make_layout((8, 1)))
    ag_gemm(tiled_mma, copy_a, copy_b, out, a, b, stage, sig, epoch, m, N, K, me, npes, part_rows).launch(
        grid=[grid, 1, 1], block=[THREADS, 1, 1], smem=(BM + BN) * BK * 2 + 256, stream=stream)


@cute.jit
def _launch_send(a: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor, epoch: Int64, m: Int64, K: Int64,
                 me: Int32, npes: Int32, part_rows: Int64, parts: Int32, stream: cuda.CUstream):
    ag_send(a, stage, sig, epoch, m, K, me, npes, part_rows).launch(
        grid=[parts, 1, 1], block=[SEND_THREADS, 1, 1], stream=stream)


def _example_args(kind: str) -> tuple:
    """Compile-time arguments: tensors of a dynamic size, runtime scalars, a stream."""
    F = cute.runtime.make_fake_compact_tensor
    e = [F(BFloat16, (cute.sym_int32(),), assumed_align=16) for _ in range(4)]
    u = F(Uint64, (cute.sym_int32(),))
    stream = cute.runtime.make_fake_stream()
    if kind == "ag_gemm":
        return (*e, u, Int64(1), *(Int32(1) for _ in range(7)), stream)
    if kind == "ag_send":
        return (e[0], e[1], u, Int64(1), Int64(1), Int64(1), Int32(0), Int32(1), Int64(1), Int32(1), stream)
    raise ValueError(f"no kernel {kind!r} (ag_gemm, ag_send)")


_LAUNCHERS = {"ag_gemm": _launch_gemm, "ag_send": _launch_send}


@functools.lru_cache(maxsize=None)
def _compiled(kind: str, arch: str) -> nv.CompiledKernel:
    return nv.compile(_LAUNCHERS[kind], *_example_args(kind), arch=arch)


def compile_ptx(kind: str, arch="sm_90a", options: str | None = None) -> str:
    """PTX of ``kind`` ("ag_gemm" or "ag_send"; CPU: no GPU needed)."""
    return nv.compile_to_ptx(_LAUNCHERS[kind], *_example_args(kind), arch=arch, options=options)


def grid(plan: _plan.Plan, N: int, sms: int) -> int:
    """Programs of the GEMM: one a tile, at most the SMs left beside the put kernel, at least one."""
    return max(1, min(plan.npes * (plan.m // BM) * (N // BN), sms - plan.put_ctas))


def _flat(x):
    """A contiguous torch array as a 1-D CuTe tensor of a dynamic size, 16-byte aligned (as compiled)."""
    return cute.runtime.from_dlpack(x.reshape(-1), assumed_align=16).mark_layout_dynamic()


def launch_send(plan: _plan.Plan, a, stage, sig, epoch: int, me: int, stream) -> None:
    """The put kernel on ``stream`` (a torch stream)."""
    from ...cute._compile import resolve_arch

    k = _compiled("ag_send", resolve_arch(None))
    k(_flat(a), _flat(stage), _tensor(sig, "uint64"), epoch, plan.m, plan.K, me, plan.npes, plan.part_rows,
      plan.parts, cuda.CUstream(stream.cuda_stream))


def launch(plan: _plan.Plan, out, a, b, stage, sig, epoch: int, me: int, sms: int, fetch_wait: bool,
           stream: int) -> None:
    """The GEMM on ``stream`` (an int handle); b row-major (:func:`check_shape`). ``fetch_wait`` is
    Triton's (its wgmma); this kernel waits by signal_wait_until."""
    from ...cute._compile import resolve_arch

    N = b.shape[1]
    k = _compiled("ag_gemm", resolve_arch(None))
    k(_flat(out), _flat(a), _flat(b), _flat(stage), _tensor(sig, "uint64"), epoch, plan.m, N, plan.K, me, plan.npes,
      plan.part_rows, grid(plan, N, sms), cuda.CUstream(stream))
