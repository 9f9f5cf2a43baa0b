"""The fused all-gather + GEMM in the CuTe DSL (protocol: :mod:`nvshmem_dsl.kernels.ag_gemm._plan`).

The kernels of :mod:`.triton` (the same arguments, staging, signal words and tile order) with a
Hopper GEMM of their own, after the shape of CUTLASS's CuTe DSL Hopper dense GEMM examples
(``examples/python/CuTeDSL/hopper/dense_gemm*.py``; their code is not in the wheel): persistent
programs of ``THREADS`` threads, warp-specialised, one a streaming multiprocessor. A producer
warp loads each ``BM x BK`` tile of A and ``BN x BK`` tile of B by TMA (one descriptor for this
PE's shard ``a``, one for the whole staging, one for ``b``) into ``STAGES`` stages of 128-byte
swizzled shared memory, ring-buffered by mbarriers (``PipelineTmaAsync``: full when the stage's
bytes have landed, empty when every consumer warp has released it); two consumer warpgroups
multiply them with ``wgmma`` (64 x BN x 16, bfloat16 into float32, B N-major from ``b``
row-major), one k-tile of wgmma in flight, and store their 64 rows of the tile straight from the
registers as bfloat16 while the producer already loads the next tile.

The per-chunk wait: before the first load of a tile of a remote shard, the producer warp waits for
the signal words of the parts the tile's rows lie in, then fences the async proxy
(``fence.proxy.async.global``: the rows were written by peers and observed through the generic
proxy; TMA reads through the async one), so no byte of the tile is loaded before its signal and
none from before it. As in :mod:`.triton`, how it waits depends on the peers: where every peer is
reachable by load/store (``launch(fetch_wait=True)``, kernel ``"ag_gemm"``) it polls with
``signal_fetch`` and fences (``fence.acq_rel.sys``), which makes no call; otherwise
(``"ag_gemm_wait_until"``) it calls ``signal_wait_until``, whose out-of-line helper makes ptxas
serialise every wgmma of the kernel (C7509: slower, still correct).

Built for speed: TMA, 6 stages (193 KiB of shared memory: one program a multiprocessor), wgmma,
warp specialisation, persistence; measured against Triton's fused kernel on one H200 (BENCHMARKS.md),
not tuned. Left out: a search of the tile
shape (128 x 128 x 64, Triton's is 128 x 256 x 64), cluster multicast, register reallocation
(``setmaxnreg``), an L2-grouped tile order (Triton's ``GROUP_M``), and an epilogue through shared
memory and TMA stores (it stores 4 bytes a thread at a time, between a tile's last wgmma and the
next tile's first). Shapes: ``m`` a multiple of ``BM``, ``N`` of ``BN``, ``K`` of 8 (TMA's 16-byte row
pitch; the k-tile past K is filled with zeros by TMA) (:func:`check_shape`). Tensors are 1-D of a
dynamic size (viewed 2-D inside) and the scalars are runtime arguments: one compile per (kernel,
arch) serves every size, epoch and PE (the TMA descriptors are made on the host at each launch).
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90
from cuda.bindings import driver as cuda
from cutlass import BFloat16, Float32, Int32, Int64, Uint64
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.memory import SmemAllocator
from cutlass.tensor_utils import LayoutEnum

from ... import cute as nv
from ..cute import _finish, _send, _tensor
from . import _plan

#: The tile of out a program computes, and the K step of its mainloop (one pipeline stage).
BM, BN, BK = 128, 128, 64
#: Stages of the TMA -> wgmma pipeline (each (BM + BN) * BK bfloat16: 32 KiB).
STAGES = 6
STAGE_BYTES = (BM + BN) * BK * 2
#: Consumer warpgroups (wgmma, 64 rows of the tile each), then one producer warp (TMA and the waits).
MMA_WARPGROUPS = BM // 64
PRODUCER_WARP = 4 * MMA_WARPGROUPS
THREADS = 32 * (PRODUCER_WARP + 1)
#: K in elements of 16 bytes (TMA's row pitch); K need not be a multiple of BK.
K_ALIGN = 8
#: Threads of a program of the put kernel (the collectives' block).
SEND_THREADS = 512
ARRAYS = "torch"


def check_shape(m: int, N: int, K: int, npes: int, b_row_major: bool) -> str | None:
    """Why the CuTe kernel does not take these sizes (None: it does)."""
    for name, value, tile in (("m (a's rows)", m, BM), ("N (b's columns)", N, BN), ("K", K, K_ALIGN)):
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
def ag_gemm(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_s: cute.CopyAtom, mS: cute.Tensor,
            tma_b: cute.CopyAtom, mB: cute.Tensor, a_layout: cute.ComposedLayout, b_layout: cute.ComposedLayout,
            out: cute.Tensor, sig: cute.Tensor, epoch: Int64, m: Int32, N: Int32, K: Int32, me: Int32, npes: Int32,
            part_rows: Int32, fetch_wait: cutlass.Constexpr):
    tid, _, _ = cute.arch.thread_idx()
    g, _, _ = cute.arch.block_idx()
    G, _, _ = cute.arch.grid_dim()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    m, N = cute.assume(m, divby=BM), cute.assume(N, divby=BN)

    # Shared memory: the pipeline's mbarriers (a full and an empty one a stage), then STAGES tiles of A
    # and of B, swizzled (128-byte swizzle: 1024-byte aligned)
    smem = SmemAllocator()
    bars = smem.allocate_array(Int64, 2 * STAGES, byte_alignment=8)
    sA = smem.allocate_tensor(BFloat16, a_layout.outer, 1024, a_layout.inner)  # (BM, BK, STAGES), K-major
    sB = smem.allocate_tensor(BFloat16, b_layout.outer, 1024, b_layout.inner)  # (BN, BK, STAGES), N-major
    # Stage i is full when the producer's arrive (with the stage's bytes expected) and the TMA bytes
    # have landed; empty when every consumer warp has released it (lane 0 of each: 4 * MMA_WARPGROUPS)
    pipe = pipeline.PipelineTmaAsync.create(
        barrier_storage=bars, num_stages=STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 4 * MMA_WARPGROUPS),
        tx_count=STAGE_BYTES, cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)))  # inits, fences, syncs the block

    tiles_m, tiles_n = m // BM, N // BN
    per_chunk = tiles_m * tiles_n
    k_tiles = (K + BK - 1) // BK  # the last one may run past K: TMA fills zeros there (in A and in B)
    par = Int32(epoch & 1)
    if warp == PRODUCER_WARP:
        # The producer: TMA loads of each tile's A and B k-tiles into the ring of stages
        cpasync.prefetch_descriptor(tma_a)
        cpasync.prefetch_descriptor(tma_s)
        cpasync.prefetch_descriptor(tma_b)
        # (TMA, k tiles) views of A (this PE's shard, the staging) and B, (TMA, STAGES) of sA, sB
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                           cute.group_modes(cute.local_tile(mA, (BM, BK), (None, None)), 0, 2))
        _, tSgS = cpasync.tma_partition(tma_s, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                        cute.group_modes(cute.local_tile(mS, (BM, BK), (None, None)), 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                           cute.group_modes(cute.local_tile(mB, (BN, BK), (None, None)), 0, 2))
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, STAGES)
        for t in range(Int32(g), npes * per_chunk, Int32(G)):
            s = (me + t // per_chunk) % npes  # chunks: me, me + 1, ...
            r = t % per_chunk
            pm, pn = r // tiles_n, r % tiles_n
            if s != me:
                # The per-chunk wait, before any load of the tile: the words of the parts its rows lie
                # in (every lane waits, so each lane's later proxy fence follows its own wait)
                for c in range(pm * BM // part_rows, (pm * BM + BM - 1) // part_rows + 1):
                    if cutlass.const_expr(fetch_wait):  # polled, then acquired: no call (module doc)
                        while Uint64(nv.signal_fetch(sig, c * npes + s)) < Uint64(epoch):
                            pass
                        cute.arch.fence_acq_rel_sys()
                    else:
                        nv.signal_wait_until(sig, c * npes + s, nv.Cmp.CMP_GE, Uint64(epoch))
                # The rows were written by peers (generic proxy) and the wait has acquired them; TMA
                # reads through the async proxy, which this fence orders after that (no stale read)
                cute.arch.fence_proxy("async.global")
            for kt in range(k_tiles):
                pipe.producer_acquire(state)  # the stage is empty; expect its bytes
                full = pipe.producer_get_barrier(state)
                if s == me:
                    cute.copy(tma_a, tAgA[(None, pm, kt)], tAsA[(None, state.index)], tma_bar_ptr=full)
                else:
                    cute.copy(tma_s, tSgS[(None, (par * npes + s) * tiles_m + pm, kt)], tAsA[(None, state.index)],
                              tma_bar_ptr=full)
                cute.copy(tma_b, tBgB[(None, pn, kt)], tBsB[(None, state.index)], tma_bar_ptr=full)
                pipe.producer_commit(state)  # a no-op: the TMA completes the stage's transaction
                state.advance()
        pipe.producer_tail(state)  # the consumers' last releases land before the block exits
    elif warp < PRODUCER_WARP:
        # The consumers: MMA_WARPGROUPS warpgroups, each 64 rows x BN of the tile by wgmma from
        # shared memory, into float32 registers
        thr_mma = tiled_mma.get_slice(tid)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))  # smem descriptors, (MMA, M, K, STAGES)
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(thr_mma.partition_shape_C((BM, BN)), Float32)
        gC = cute.make_tensor(out.iterator, cute.make_layout((npes * m, N), stride=(N, 1)))
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, STAGES)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, STAGES)
        for t in range(Int32(g), npes * per_chunk, Int32(G)):
            s = (me + t // per_chunk) % npes
            r = t % per_chunk
            pm, pn = r // tiles_n, r % tiles_n
            # The tile's first k-tile: its first wgmma overwrites acc (no zero fill), the rest add
            pipe.consumer_wait(read)  # the stage's bytes have landed
            warpgroup.fence()
            tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
            for kb in cutlass.range_constexpr(BK // 16):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)], acc)
                tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.commit_group()
            read.advance()
            for kt in range(1, k_tiles):  # the mainloop
                pipe.consumer_wait(read)
                warpgroup.fence()
                for kb in cutlass.range_constexpr(BK // 16):
                    cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)],
                              acc)
                warpgroup.commit_group()
                read.advance()
                # One k-tile of wgmma in flight: once the one before is done, its stage goes back
                warpgroup.wait_group(1)
                pipe.consumer_release(release)
                release.advance()
            warpgroup.wait_group(0)
            pipe.consumer_release(release)  # the last k-tile's stage
            release.advance()
            # Epilogue: float32 -> bfloat16 in registers, stored straight to out
            tCgC = thr_mma.partition_C(cute.local_tile(gC, (BM, BN), (s * tiles_m + pm, pn)))
            res = cute.make_rmem_tensor_like(acc, BFloat16)
            res.store(acc.load().to(BFloat16))
            cute.autovec_copy(res, tCgC)


def _gemm(out: cute.Tensor, a: cute.Tensor, b: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor, epoch: Int64,
          m: Int32, N: Int32, K: Int32, me: Int32, npes: Int32, part_rows: Int32, grid: Int32, stream: cuda.CUstream,
          fetch_wait: bool):
    """The GEMM's launch (traced inside the launchers below)."""
    m, N, K = cute.assume(m, divby=BM), cute.assume(N, divby=BN), cute.assume(K, divby=K_ALIGN)
    # 2-D views: this PE's shard (m, K), the staging (both halves, every source) (2 npes m, K), both
    # K-major; b [K, N] row-major seen as (N, K), N-major (wgmma's transposed B)
    mA = cute.make_tensor(a.iterator, cute.make_layout((m, K), stride=(K, 1)))
    mS = cute.make_tensor(stage.iterator, cute.make_layout((2 * npes * m, K), stride=(K, 1)))
    mB = cute.make_tensor(b.iterator, cute.make_layout((N, K), stride=(1, N)))
    tile = (BM, BN, BK)
    a_layout = sm90.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile, BFloat16, STAGES)
    b_layout = sm90.make_smem_layout_b(LayoutEnum.COL_MAJOR, tile, BFloat16, STAGES)
    # TMA descriptors (built on the host at each launch: the shapes are runtime values)
    op = cpasync.CopyBulkTensorTileG2SOp()
    tma_a, tA = cpasync.make_tiled_tma_atom(op, mA, cute.slice_(a_layout, (None, None, 0)), (BM, BK))
    tma_s, tS = cpasync.make_tiled_tma_atom(op, mS, cute.slice_(a_layout, (None, None, 0)), (BM, BK))
    tma_b, tB = cpasync.make_tiled_tma_atom(op, mB, cute.slice_(b_layout, (None, None, 0)), (BN, BK))
    tiled_mma = sm90.make_trivial_tiled_mma(BFloat16, BFloat16, OperandMajorMode.K, OperandMajorMode.MN, Float32,
                                            (MMA_WARPGROUPS, 1, 1), tiler_mn=(64, BN))
    ag_gemm(tiled_mma, tma_a, tA, tma_s, tS, tma_b, tB, a_layout, b_layout, out, sig, epoch, m, N, K, me, npes,
            part_rows, fetch_wait).launch(grid=[grid, 1, 1], block=[THREADS, 1, 1], stream=stream)


@cute.jit
def _launch_gemm(out: cute.Tensor, a: cute.Tensor, b: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor,
                 epoch: Int64, m: Int32, N: Int32, K: Int32, me: Int32, npes: Int32, part_rows: Int32,
                 grid: Int32, stream: cuda.CUstream):
    _gemm(out, a, b, stage, sig, epoch, m, N, K, me, npes, part_rows, grid, stream, True)


@cute.jit
def _launch_gemm_wait_until(out: cute.Tensor, a: cute.Tensor, b: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor,
                            epoch: Int64, m: Int32, N: Int32, K: Int32, me: Int32, npes: Int32, part_rows: Int32,
                            grid: Int32, stream: cuda.CUstream):
    _gemm(out, a, b, stage, sig, epoch, m, N, K, me, npes, part_rows, grid, stream, False)


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
    if kind in ("ag_gemm", "ag_gemm_wait_until"):
        return (*e, u, Int64(1), *(Int32(1) for _ in range(7)), stream)
    if kind == "ag_send":
        return (e[0], e[1], u, Int64(1), Int64(1), Int64(1), Int32(0), Int32(1), Int64(1), Int32(1), stream)
    raise ValueError(f"no kernel {kind!r} (ag_gemm, ag_gemm_wait_until, ag_send)")


_LAUNCHERS = {"ag_gemm": _launch_gemm, "ag_gemm_wait_until": _launch_gemm_wait_until, "ag_send": _launch_send}


@functools.lru_cache(maxsize=None)
def _compiled(kind: str, arch: str) -> nv.CompiledKernel:
    return nv.compile(_LAUNCHERS[kind], *_example_args(kind), arch=arch)


def compile_ptx(kind: str, arch="sm_90a", options: str | None = None) -> str:
    """PTX of ``kind`` ("ag_gemm", "ag_gemm_wait_until" or "ag_send"; CPU: no GPU needed)."""
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
    """The GEMM on ``stream`` (an int handle); b row-major (:func:`check_shape`). ``fetch_wait``
    (every peer reachable by load/store): the kernel that polls with signal_fetch, else the one
    that calls signal_wait_until."""
    from ...cute._compile import resolve_arch

    N = b.shape[1]
    k = _compiled("ag_gemm" if fetch_wait else "ag_gemm_wait_until", resolve_arch(None))
    k(_flat(out), _flat(a), _flat(b), _flat(stage), _tensor(sig, "uint64"), epoch, plan.m, N, plan.K, me, plan.npes,
      plan.part_rows, grid(plan, N, sms), cuda.CUstream(stream))
