"""The fused all-gather + GEMM in Triton (protocol: :mod:`nvshmem_dsl.kernels.ag_gemm._plan`).

One persistent kernel: programs ``0 .. COMM_CTAS - 1`` (``comm="ctas"``; none with the copy
engine) put their part of this PE's shard ``a`` to every peer's staging with
``put_signal_nbi_block`` and end with ``quiet``; the others walk the output tiles in the plan's
order, and before a tile of a remote shard wait (``signal_wait_until``: thread 0, then a program
barrier) for the signal words of the parts its rows lie in, then run a ``tl.dot`` GEMM of
``BM x BN`` tiles over K in ``BK`` steps (float32 accumulator, software-pipelined by Triton:
wgmma on Hopper). Row offsets of a shard, of ``out`` and of the staging are int64 (the staging
of 8 PEs passes 2**31 elements); offsets inside a tile are relative to them.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ... import triton as nv
from ..triton import _external_stream, _i64
from . import _plan

#: Tile shape and launch options (Hopper bf16: 128 x 256 tiles, 64-deep K steps, 3 stages).
BM, BN, BK, GROUP_M = 128, 256, 64, 8
NUM_WARPS, NUM_STAGES = 8, 3
#: The arrays launch() takes: torch tensors.
ARRAYS = "torch"
TRITON_DTYPE = {"bfloat16": "bf16"}
#: Scalar arguments whose value changes from call to call, or from PE to PE (no specialisation).
_VARYING = ("epoch", "me")


@triton.jit
def _send(dst, src, cnt, word, epoch, pe):
    """put_signal_nbi_block of cnt elements (none: the signal alone) to dst on pe."""
    if cnt > 0:
        nv.put_signal_nbi_block(dst, src, cnt, word, epoch, nv.SIGNAL_SET, pe)
    else:
        nv.signal_op(word, epoch, nv.SIGNAL_SET, pe)


@triton.jit
def _communicate(a, stage, sig, epoch, m, K, me, npes, part_rows, c):
    """Program c of the communication: rows [c * part_rows, ...) of a to every peer, peers in the
    order me - 1, me - 2, ..., each part with its signal word; then quiet."""
    lo = tl.minimum(c * part_rows, m)
    hi = tl.minimum(lo + part_rows, m)
    mine = ((epoch & 1) * npes + me) * m * K  # this PE's slot on every peer
    for k in range(1, npes):
        p = (me - k + npes) % npes
        _send(stage + mine + lo * K, a + lo * K, (hi - lo) * K, sig + c * npes + me, epoch, p)
    tl.debug_barrier()
    nv.quiet()


@triton.jit
def _tiles(out, a, b, stage, sig, epoch, m, N, K, stride_bk, stride_bn, me, npes, part_rows, g, G,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    """Tiles g, g + G, ... of the plan's order: wait for a remote chunk's parts, then the tile's GEMM."""
    tiles_m = (m + BM - 1) // BM
    tiles_n = (N + BN - 1) // BN
    per_chunk = tiles_m * tiles_n
    in_group = GROUP_M * tiles_n
    par = epoch & 1
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    for t in range(g, npes * per_chunk, G):
        s = (me + t // per_chunk) % npes  # chunks: me, me + 1, ...
        r = t % per_chunk
        first_m = (r // in_group) * GROUP_M
        group_m = tl.minimum(tiles_m - first_m, GROUP_M)
        pm = first_m + (r % in_group) % group_m
        pn = (r % in_group) // group_m
        r0 = pm * BM  # the tile's rows [r0, r0 + rows) of chunk s
        rows = tl.minimum(m - r0, BM)
        if s == me:
            src = a + r0 * K
        else:
            for c in range(r0 // part_rows, (r0 + rows - 1) // part_rows + 1):
                nv.signal_wait_until(sig + c * npes + s, nv.CMP_GE, epoch)
            src = stage + ((par * npes + s) * m + r0) * K
        a_ptrs = src + rm[:, None] * K + rk[None, :]
        b_ptrs = b + pn * BN * stride_bn + rk[:, None] * stride_bk + rn[None, :] * stride_bn
        row_ok = rm[:, None] < rows
        col_ok = rn[None, :] < N - pn * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            k_ok = rk < K - k0
            x = tl.load(a_ptrs, mask=row_ok & k_ok[None, :], other=0.0)
            w = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok, other=0.0)
            acc = tl.dot(x, w, acc)
            a_ptrs += BK
            b_ptrs += BK * stride_bk
        dst = out + (s * m + r0) * N + pn * BN
        tl.store(dst + rm[:, None] * N + rn[None, :], acc.to(out.dtype.element_ty), mask=row_ok & col_ok)


@triton.jit(do_not_specialize=_VARYING)
def ag_gemm(out, a, b, stage, sig, epoch, m, N, K, stride_bk, stride_bn, me, npes, part_rows,
            COMM_CTAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            GROUP_M: tl.constexpr):
    epoch, m, N, K, me, npes, part_rows = _i64(epoch), _i64(m), _i64(N), _i64(K), _i64(me), _i64(npes), \
        _i64(part_rows)
    stride_bk, stride_bn = _i64(stride_bk), _i64(stride_bn)
    pid = _i64(tl.program_id(0))
    G = _i64(tl.num_programs(0)) - COMM_CTAS
    if COMM_CTAS > 0:  # compile time: the copy engine's kernel has no communication programs
        if pid < COMM_CTAS:
            _communicate(a, stage, sig, epoch, m, K, me, npes, part_rows, pid)
        else:
            _tiles(out, a, b, stage, sig, epoch, m, N, K, stride_bk, stride_bn, me, npes, part_rows,
                   pid - COMM_CTAS, G, BM, BN, BK, GROUP_M)
    else:
        _tiles(out, a, b, stage, sig, epoch, m, N, K, stride_bk, stride_bn, me, npes, part_rows, pid, G,
               BM, BN, BK, GROUP_M)


# ----------------------------------------------------------------------------- host


def signature(dtype: str) -> dict:
    """The kernel's Triton signature for ``dtype`` (scalars as int64)."""
    e = "*" + TRITON_DTYPE[dtype]
    ints = {name: "i64" for name in ("epoch", "m", "N", "K", "stride_bk", "stride_bn", "me", "npes",
                                     "part_rows")}
    return {"out": e, "a": e, "b": e, "stage": e, "sig": "*u64", **ints, "COMM_CTAS": "constexpr",
            "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "GROUP_M": "constexpr"}


def constexprs(comm_ctas: int) -> dict:
    return {"COMM_CTAS": comm_ctas, "BM": BM, "BN": BN, "BK": BK, "GROUP_M": GROUP_M}


def compile(dtype: str = "bfloat16", comm_ctas: int = _plan.COMM_CTAS, target=None, aligned: bool = True,
            ptx_only: bool = False):
    """The kernel for ``dtype`` with ``comm_ctas`` communication programs (0: the copy engine's
    kernel), compiled for ``target`` (default: sm_90; no GPU needed). ``aligned``: as launched with
    16-byte aligned arrays, N, K, stride_bk multiples of 16 and a row-major b (Triton's
    specialisation, as most launches are). ``ptx_only``: Triton's cubin stage left out (see kernels.moe.triton.compile)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ..moe.triton import _ptx_only_hook, _ptx_only_lock

    sig, consts = signature(dtype), constexprs(comm_ctas)
    names = list(sig)
    attrs = None
    if aligned:  # and b row-major: stride_bn == 1, which Triton's launcher specialises as a constant
        attrs = {(names.index(x),): [["tt.divisibility", 16]] for x in ("out", "a", "b", "stage", "sig", "N", "K",
                                                                        "stride_bk")}
        sig["stride_bn"], consts["stride_bn"] = "constexpr", 1
    src = ASTSource(fn=ag_gemm, signature=sig, constexprs=consts, attrs=attrs)
    args = dict(target=target or GPUTarget("cuda", 90, 32), options={"num_warps": NUM_WARPS,
                                                                      "num_stages": NUM_STAGES})
    if not ptx_only:
        return triton.compile(src, **args)
    runtime = triton.knobs.runtime
    with _ptx_only_lock:
        hook = runtime.add_stages_inspection_hook
        runtime.add_stages_inspection_hook = _ptx_only_hook(hook)
        try:
            return triton.compile(src, **args)
        finally:
            runtime.add_stages_inspection_hook = hook


def grid(plan: _plan.Plan, N: int, sms: int) -> int:
    """Programs of a launch: the communication programs, and tile programs for the other ``sms``
    (the SMs this PE may use), at most one a tile."""
    comm = plan.parts if plan.comm == "ctas" else 0
    tiles = plan.npes * triton.cdiv(plan.m, BM) * triton.cdiv(N, BN)
    return comm + max(1, min(tiles, sms - comm))


def launch(plan: _plan.Plan, out, a, b, stage, sig, epoch: int, me: int, sms: int, stream: int) -> None:
    """Launch on ``stream`` (an int handle, 0: the legacy default stream); out [npes * m, N], a
    [m, K] contiguous, b [K, N] any strides, stage / sig the workspace's 1-D torch views."""
    import torch

    N = b.shape[1]
    comm = plan.parts if plan.comm == "ctas" else 0
    s = _external_stream(stream) if stream else torch.cuda.default_stream()
    with torch.cuda.stream(s):
        ag_gemm[(grid(plan, N, sms),)](out, a, b, stage, sig, epoch, plan.m, N, plan.K, b.stride(0), b.stride(1),
                                       me, plan.npes, plan.part_rows, COMM_CTAS=comm, BM=BM, BN=BN, BK=BK,
                                       GROUP_M=GROUP_M, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
