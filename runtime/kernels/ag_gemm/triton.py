"""The fused all-gather + GEMM in Triton (protocol: :mod:`nvshmem_dsl.kernels.ag_gemm._plan`).

Two kernels. :func:`ag_gemm`, persistent: its programs walk the output tiles in the plan's order,
and before a tile of a remote shard wait (thread 0, then a program barrier) for the signal words of
the parts its rows lie in, then run a ``tl.dot`` GEMM of ``BM x BN`` tiles over K in ``BK`` steps
(float32 accumulator, software-pipelined by Triton: wgmma on Hopper). :func:`ag_send`
(``comm="ctas"``), launched beside it on a second stream with one program a part: its part of this
PE's shard ``a`` to every peer's staging with ``put_signal_nbi_block``, then ``quiet``.

Why two kernels and how the GEMM waits: a kernel that calls any function gets all its wgmma
serialised by ptxas (C7509: "wgmma.mma_async instructions are serialized due to the presence of
Extern calls"), and NVSHMEM's put, quiet and signal_wait_until keep calls of NVSHMEM's out-of-line
transport helpers (signal_wait_until: ``nvshmemi_transfer_syncapi_update_mem`` after its poll).
So the puts live in their own kernel, and where every peer is reached by load/store
(``FETCH_WAIT``) the GEMM polls with ``signal_fetch`` (inlined: a volatile load) and then fences
(``fence.acq_rel.sys``), which makes no call; otherwise it calls ``signal_wait_until``.

Row offsets of a shard, of ``out`` and of the staging are int64 (the staging of 8 PEs passes 2**31
elements); offsets inside a tile are relative to them.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ... import triton as nv
from .. import _plan as _comm_plan
from .._views import torch_stream
from ..triton import _finish, _i64, _send, compile_source
from . import _plan

#: Tile shape and launch options of the GEMM (Hopper bf16: 128 x 256 tiles, 64-deep K steps, 3 stages).
BM, BN, BK, GROUP_M = 128, 256, 64, 8
NUM_WARPS, NUM_STAGES = 8, 3
#: Warps of a program of ag_send (the collectives' block).
SEND_WARPS = _comm_plan.THREADS // 32
#: The arrays the launches take: torch tensors.
ARRAYS = "torch"
TRITON_DTYPE = {"bfloat16": "bf16"}
#: Scalar arguments whose value changes from call to call, or from PE to PE (no specialisation).
_VARYING = ("epoch", "me")


@triton.jit
def _acquire(v):
    """``fence.acq_rel.sys`` in every thread, after ``v`` (a value just polled) is known."""
    return tl.inline_asm_elementwise("fence.acq_rel.sys;\n\tmov.b64 $0, $1;", "=l,l", [v], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def _wait(word, epoch, FETCH_WAIT: tl.constexpr):
    """Until the signal word reaches epoch: polled by signal_fetch then fenced (no call), or
    NVSHMEM's signal_wait_until."""
    if FETCH_WAIT:
        v = nv.signal_fetch(word).to(tl.int64)
        while v < epoch:
            v = nv.signal_fetch(word).to(tl.int64)
        _acquire(v)
    else:
        nv.signal_wait_until(word, nv.CMP_GE, epoch)


@triton.jit(do_not_specialize=_VARYING)
def ag_send(a, stage, sig, epoch, m, K, me, npes, part_rows):
    """Program c: rows [c * part_rows, ...) of a to every peer, peers in the order me - 1, me - 2,
    ..., each part with its signal word (an empty part: the signal alone); then quiet."""
    epoch, m, K, me, npes, part_rows = _i64(epoch), _i64(m), _i64(K), _i64(me), _i64(npes), _i64(part_rows)
    c = _i64(tl.program_id(0))
    lo = tl.minimum(c * part_rows, m)
    hi = tl.minimum(lo + part_rows, m)
    mine = ((epoch & 1) * npes + me) * m * K  # this PE's slot on every peer
    for k in range(1, npes):
        p = (me - k + npes) % npes
        _send(stage + mine + lo * K, a + lo * K, (hi - lo) * K, sig + c * npes + me, epoch, p)
    _finish()


@triton.jit(do_not_specialize=_VARYING)
def ag_gemm(out, a, b, stage, sig, epoch, m, N, K, stride_bk, stride_bn, me, npes, part_rows,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
            FETCH_WAIT: tl.constexpr):
    """Tiles g, g + G, ... of the plan's order (g: the program, G: the grid): wait for a remote
    chunk's parts, then the tile's GEMM."""
    epoch, m, N, K, me, npes, part_rows = _i64(epoch), _i64(m), _i64(N), _i64(K), _i64(me), _i64(npes), \
        _i64(part_rows)
    stride_bk, stride_bn = _i64(stride_bk), _i64(stride_bn)
    g = _i64(tl.program_id(0))
    G = _i64(tl.num_programs(0))
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
                _wait(sig + c * npes + s, epoch, FETCH_WAIT)
            tl.debug_barrier()
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


# ----------------------------------------------------------------------------- host


def signature(kind: str, dtype: str = "bfloat16") -> dict:
    """The Triton signature of ``kind`` ("ag_gemm" or "ag_send") for ``dtype`` (scalars as int64)."""
    e = "*" + TRITON_DTYPE[dtype]
    if kind == "ag_send":
        return {"a": e, "stage": e, "sig": "*u64", **{n: "i64" for n in ("epoch", "m", "K", "me", "npes", "part_rows")}}
    if kind == "ag_gemm":
        ints = {n: "i64" for n in ("epoch", "m", "N", "K", "stride_bk", "stride_bn", "me", "npes", "part_rows")}
        return {"out": e, "a": e, "b": e, "stage": e, "sig": "*u64", **ints,
                **{n: "constexpr" for n in ("BM", "BN", "BK", "GROUP_M", "FETCH_WAIT")}}
    raise ValueError(f"no kernel {kind!r} (ag_gemm, ag_send)")


def constexprs(fetch_wait: bool) -> dict:
    """The GEMM's compile-time arguments."""
    return {"BM": BM, "BN": BN, "BK": BK, "GROUP_M": GROUP_M, "FETCH_WAIT": fetch_wait}


def compile(kind: str = "ag_gemm", dtype: str = "bfloat16", fetch_wait: bool = True, target=None,
            aligned: bool = True, ptx_only: bool = False):
    """``kind`` for ``dtype`` compiled for ``target`` (default: sm_90; no GPU needed); the GEMM
    waiting by ``signal_fetch`` or (``fetch_wait=False``) by ``signal_wait_until``. ``aligned``: as
    launched with 16-byte aligned arrays, N, K, stride_bk multiples of 16 and a row-major b
    (Triton's specialisation, as most launches are). ``ptx_only``: Triton's cubin stage left out."""
    from triton.compiler import ASTSource

    sig = signature(kind, dtype)
    consts = constexprs(fetch_wait) if kind == "ag_gemm" else {}
    names = list(sig)
    attrs = None
    if aligned:
        attrs = {(names.index(x),): [["tt.divisibility", 16]]
                 for x in ("out", "a", "b", "stage", "sig", "N", "K", "stride_bk") if x in sig}
        if kind == "ag_gemm":  # stride_bn == 1, which Triton's launcher specialises as a constant
            sig["stride_bn"], consts["stride_bn"] = "constexpr", 1
    fn, warps = (ag_gemm, NUM_WARPS) if kind == "ag_gemm" else (ag_send, SEND_WARPS)
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return compile_source(src, {"num_warps": warps, "num_stages": NUM_STAGES}, target, ptx_only)


def grid(plan: _plan.Plan, N: int, sms: int) -> int:
    """Programs of the GEMM: one a tile, at most the ``sms`` this PE may fill less those ag_send
    takes beside it (comm="ctas"), at least one."""
    tiles = plan.npes * triton.cdiv(plan.m, BM) * triton.cdiv(N, BN)
    return max(1, min(tiles, sms - plan.put_ctas))


def launch_send(plan: _plan.Plan, a, stage, sig, epoch: int, me: int, stream) -> None:
    """ag_send on ``stream`` (a torch stream): a [m, K] contiguous, stage / sig the workspace's
    1-D torch views."""
    import torch

    with torch.cuda.stream(stream):
        ag_send[(plan.parts,)](a, stage, sig, epoch, plan.m, plan.K, me, plan.npes, plan.part_rows,
                               num_warps=SEND_WARPS)


def launch(plan: _plan.Plan, out, a, b, stage, sig, epoch: int, me: int, sms: int, fetch_wait: bool,
           stream: int) -> None:
    """The GEMM on ``stream`` (an int handle, 0: the legacy default stream); out [npes * m, N], a
    [m, K] contiguous, b [K, N] any strides."""
    import torch

    N = b.shape[1]
    with torch.cuda.stream(torch_stream(stream)):
        ag_gemm[(grid(plan, N, sms),)](out, a, b, stage, sig, epoch, plan.m, N, plan.K, b.stride(0), b.stride(1),
                                       me, plan.npes, plan.part_rows, BM=BM, BN=BN, BK=BK, GROUP_M=GROUP_M,
                                       FETCH_WAIT=fetch_wait, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
