"""MoE dispatch and combine in Triton (protocol: :mod:`nvshmem_dsl.kernels.moe._layout`).

A port of :mod:`nvshmem_dsl.kernels.moe.numba` on the same buffers:
one program is one block of the protocol (``program_id(0)``), of ``_layout.THREADS`` threads
(``num_warps = THREADS // 32``).  Index arithmetic is int64, as in
:mod:`nvshmem_dsl.kernels.triton`.

Rows move as NVSHMEM moves them: where the row's PE is reached by load/store (``nv.peer`` not
null: NVLink, or the same GPU), as put_nbi's P2P path does, by stores through the peer's address,
``ROWS`` rows at once, a warp a row as the C++ twin's (16-byte vectors, ``ROW_BLOCK`` elements of each
row a step: four vectors a lane in flight), then a program barrier before thread 0's ``fence``; else
by ``put_nbi_block``, a row a call (Triton makes block-scope calls with every thread).

Dispatch: Triton has no shared arrays or ballots, so the list of the (t, j) routed to expert
``e`` is not stored: the program reads ``topk`` in vectors of ``SCAN`` entries (in token order);
a match whose token names the expert in an earlier slot is no match (``K - 1`` masked vector
loads a vector).  P2P: the matches' running count (``tl.cumsum``) is each one's slot ``s`` (the
Numba block scan's order, ``t * K + j`` ascending), its ``t * K + j`` stored to ``recv_src[s]`` on
the peer at once (what ``p`` does there), and match ``i`` is the entry whose count is ``i + 1``,
found by the warp that copies its row (the counts, a warp's 32 entries a row, in every warp's
registers: a sum in each lane, then across the warp's lanes; no block-wide reduction a row),
``ROWS`` rows a copy.  Otherwise the vector's
matches are counted (``tl.sum``) and taken one after the other, each the smallest entry past the
previous one (``tl.min``), its row put and its ``t * K + j`` sent by ``p`` (thread 0, not waited
for).  Then ``fence`` and the word set to ``epoch << 32 | count``.

Combine: the rows of each word go back (``recv_src`` read ``ROWS`` at a time on the P2P path),
then ``fence`` and the combine word; the ``E`` combine words are polled by the program's threads at
once, a word a thread, each thread polling its own in a loop of volatile loads (inline PTX: a Triton
loop is the whole program's), as the C++ twin's threads wait (then a barrier and thread 0's
``wait_until`` of one, already set, for NVSHMEM's step after a wait); then ``out[t]`` is summed over j in order in float32,
product and sum each rounded (``mul.rn``, ``add.rn`` in inline PTX: never contracted to an fma, as
the Numba kernel's ``acc += w * v`` compiles), a slot of no expert left out by a select after its
row's load (as the C++ twin's), and rounded to bfloat16 to nearest even: the Numba combine's bits.
A row of up to ``BLOCK_H`` elements is one step (two 16-byte vectors a thread); a token that names
no expert twice (one check a token) takes each slot's own row, its slot loop unrolled
(``UNROLL_K``: the slots' row loads in flight together), else each slot's row is that of its
expert's first slot.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ... import triton as nv
from .._views import torch_stream
from ..triton import _finish, _i64, compile_source
from . import _layout

THREADS = _layout.THREADS
#: Warps of a program: one block of the protocol.
NUM_WARPS = THREADS // 32
#: The arrays the launches take: flat 1-D contiguous torch tensors.
ARRAYS = "torch"
#: Entries of ``topk`` the dispatch reads a vector step (one int64 a thread: the P2P path's
#: running counts, SCAN // 32 x 32, fit every warp's registers for its row's search).
SCAN = THREADS
#: Elements of one vector step of the combine's sum (two 16-byte vectors of bfloat16 a thread: a row
#: of H <= 8192 in one step, so each slot's first row and weight are found once a token).
BLOCK_H = 16 * THREADS
#: Slots of the combine's sum unrolled (their loads in flight together; the sum stays in slot order).
UNROLL_K = tl.constexpr(4)
#: Slots a token at most (the combine's check for repeated experts, a vector of them).
MAX_TOPK = tl.constexpr(_layout.MAX_TOPK)
#: Signal words the combine's threads poll at once (a word a thread).
WAIT = tl.constexpr(THREADS)
#: Rows a P2P copy step moves (in the combine, and the dispatch's rows of one step).
ROWS = tl.constexpr(16)
#: Elements of a row a P2P copy step moves (ROWS x ROW_BLOCK: four 16-byte vectors a thread).
ROW_BLOCK = tl.constexpr(1024)
#: Elements of a row one warp's lanes cover at once (32 lanes x one 16-byte vector of bfloat16).
WARP_H = tl.constexpr(256)
#: Scalar arguments whose value changes from call to call or from PE to PE (no specialisation).
_VARYING = ("epoch", "T", "me")


# ----------------------------------------------------------------------------- kernels


@triton.jit
def _add_product(acc, w, v):
    """acc + w * v, the product and the sum each rounded (never an fma, whatever the compiler's
    contraction; no flush of subnormals): as the Numba kernels' float32 arithmetic."""
    return tl.inline_asm_elementwise("{ .reg .f32 p; mul.rn.f32 p, $2, $3; add.rn.f32 $0, $1, p; }", "=f,f,f,f",
                                     [acc, w, v], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _on_peer(ptr, at):
    """``ptr`` moved to ``at`` (its address on a peer, nv.peer's, not null) by an offset Triton knows
    to be a multiple of 16 bytes (a peer's mapping of the symmetric heap lies a multiple of its
    granularity from ours), so that stores through it are vectors as the loads are (bfloat16)."""
    return ptr + tl.multiple_of((at - ptr.to(tl.int64)) >> 1, 8)


@triton.jit
def _spin_ge(word, value):
    """Each thread's poll of its own word until it is >= value (uint64; volatile loads, as NVSHMEM's
    wait polls): a PTX loop a thread, as the C++ twin's ``while (words[i] < epoch) {}``."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b64 v; $$W${:uid}: ld.volatile.global.u64 v, [$1]; setp.lt.u64 p, v, $2; "
        "@p bra $$W${:uid}; mov.b64 $0, v; }",
        "=l,l,l", [word.to(tl.int64), value], dtype=tl.uint64, is_pure=False, pack=1)


@triton.jit
def _wait_all(words, n, value, WAIT: tl.constexpr):
    """Wait until words[0:n] >= value (uint64), as the C++ twin's threads wait: a word a thread, each
    polling its own (``_spin_ge``), then a program barrier, and thread 0's ``wait_until`` of the last
    word, already set, makes NVSHMEM's transport step after a wait (``syncapi_update_mem``)."""
    for w0 in range(0, n, WAIT):
        w = w0 + tl.arange(0, WAIT)
        inside = w < n
        _spin_ge(words + tl.where(inside, w, 0), tl.where(inside, value, 0).to(tl.uint64))
    tl.debug_barrier()
    nv.wait_until(words + n - 1, nv.CMP_GE, value)


@triton.jit
def _matches(topk, offs, j, TK, K, e):
    """Which entries ``offs`` of topk (slots ``j = offs % K``) name expert ``e`` (a token's repeated
    expert: at its first slot only, by K - 1 masked vector loads)."""
    inside = offs < TK
    hit = (tl.load(topk + offs, mask=inside, other=-1) == e) & inside
    for jj in range(1, K):
        ahead = tl.load(topk + offs - jj, mask=hit & (j >= jj), other=-1)
        hit = hit & (ahead != e)
    return hit


@triton.jit
def _copy_rows(dst, src, rows, H, ROW_BLOCK: tl.constexpr):
    """dst[i][h] = src[i][h] for the rows i where ``rows``, h < H: ``dst`` and ``src`` the vectors of
    the rows' first elements (a put's P2P path: NVSHMEM's put_nbi to a load/store reachable PE is such
    a copy through the peer's address).  A warp a row, as the C++ twin's copy_row: the step is a
    [ROW_BLOCK // WARP_H, ROWS, WARP_H] tile (Triton puts a warp's 32 lanes along the last axis, 8
    elements a lane, the warps along the rows), so each lane holds ROW_BLOCK // WARP_H vectors of its
    warp's row, their loads in flight together."""
    hh0 = tl.arange(0, ROW_BLOCK // WARP_H)[:, None, None] * WARP_H + tl.arange(0, WARP_H)[None, None, :]
    for h in range(0, H, ROW_BLOCK):
        hh = h + hh0
        m = rows[None, :, None] & (hh < H)
        tl.store(dst[None, :, None] + hh, tl.load(src[None, :, None] + hh, mask=m), mask=m)


@triton.jit
def _entry_of(key, offs, want):
    """offs[entry] of the entry whose key is want[i], for each i (0 where none): key and offs [SCAN //
    32, 32], a warp's 32 entries a row.  The [SCAN // 32, ROWS, 32] tile has a warp a target i (the
    lanes along the entries of a row, the rows in registers): each lane sums its column, then the
    warp its lanes; no block-wide reduction (one match a target: the sum is the match's entry)."""
    sel = key[:, None, :] == want[None, :, None]
    return tl.sum(tl.sum(tl.where(sel, offs[:, None, :], 0), axis=0), axis=1)


@triton.jit
def _add_slot(acc, e, w, v):
    """acc + w * v where slot's expert e >= 0, else acc: a select after the row's load (the row
    t * K + j exists for a slot of no expert too), not a branch around it, as the C++ twin's sum."""
    return tl.where(e >= 0, _add_product(acc, w, v), acc)


@triton.jit(do_not_specialize=_VARYING)
def dispatch(x, topk, recv_x, recv_src, sig, recv_count, epoch, T, K, H, L, me, npes, T_max,
             SCAN: tl.constexpr):
    epoch, T, K, H, L, me, npes, T_max = (_i64(epoch), _i64(T), _i64(K), _i64(H), _i64(L), _i64(me), _i64(npes),
                                          _i64(T_max))
    b = _i64(tl.program_id(0))
    grid = _i64(tl.num_programs(0))
    E = L * npes
    TK = T * K
    par = epoch & 1
    for e in range(b, E, grid):
        dst = e // L
        row0 = ((par * L + e % L) * npes + me) * T_max  # row s of [par][e % L][me]
        count = b * 0  # rows sent (int64)
        at = nv.peer(recv_x, dst).to(tl.int64)
        if at != 0:  # dst reached by load/store: rows and their t * K + j by stores, ROWS rows at once
            to_x = _on_peer(recv_x, at)
            to_src = nv.peer(recv_src, dst)
            for base in range(0, TK, SCAN):  # topk == e, in token order
                offs = base + tl.arange(0, SCAN)
                tok = offs // K  # one division an entry, for its slot j
                hit = _matches(topk, offs, offs - tok * K, TK, K, e)
                rank = tl.cumsum(hit.to(tl.int64), axis=0)  # matches up to each entry
                tl.store(to_src + row0 + count + rank - 1, offs.to(tl.int32), mask=hit)
                n = tl.sum(hit.to(tl.int64), axis=0)
                # a match's running count (0: no match), a warp's 32 entries a row
                key = tl.reshape(tl.where(hit, rank, 0), [SCAN // 32, 32])
                offs_w = base + tl.reshape(tl.arange(0, SCAN), [SCAN // 32, 32])
                for i0 in range(0, n, ROWS):
                    i = i0 + tl.arange(0, ROWS)
                    idx = _entry_of(key, offs_w, i + 1)  # match i: the entry whose running count is i + 1
                    _copy_rows(to_x + (row0 + count + i) * H, x + (idx // K) * H, i < n, H, ROW_BLOCK)
                count += n
            tl.debug_barrier()  # every thread's stores before thread 0's fence
        else:
            for base in range(0, TK, SCAN):  # topk == e, in token order
                offs = base + tl.arange(0, SCAN)
                hit = _matches(topk, offs, offs % K, TK, K, e)
                n = tl.sum(hit.to(tl.int64), axis=0)
                last = base - 1
                for i in range(0, n):
                    idx = tl.min(tl.where(hit & (offs > last), offs, TK), axis=0)  # the next match
                    r = row0 + count + i
                    nv.put_nbi_block(recv_x + r * H, x + (idx // K) * H, H, dst)
                    nv.p(recv_src + r, idx.to(tl.int32), dst)
                    last = idx
                count += n
        nv.fence()
        nv.signal_op(sig + (e % L) * npes + me, (epoch << 32) | count, nv.SIGNAL_SET, dst)
    for word in range(b, E, grid):  # the counts of this PE's words of block b
        got = nv.signal_wait_until(sig + word, nv.CMP_GE, epoch << 32)
        tl.store(recv_count + word, (got & 0xFFFFFFFF).to(tl.int32))
    _finish()


@triton.jit(do_not_specialize=_VARYING)
def combine(y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, K, H, L, me, npes, T_max,
            BLOCK_H: tl.constexpr):
    epoch, T, K, H, L, me, npes, T_max = (_i64(epoch), _i64(T), _i64(K), _i64(H), _i64(L), _i64(me), _i64(npes),
                                          _i64(T_max))
    b = _i64(tl.program_id(0))
    grid = _i64(tl.num_programs(0))
    E = L * npes
    par = epoch & 1
    for word in range(b, E, grid):  # word = l * npes + src: results back to src
        l = word // npes
        src = word % npes
        count = _i64(tl.load(recv_count + word))
        at = nv.peer(comb_x, src).to(tl.int64)
        if at != 0:  # src reached by load/store: the rows by stores, ROWS at once
            to = _on_peer(comb_x, at)
            for s0 in range(0, count, ROWS):
                s = s0 + tl.arange(0, ROWS)
                rows = s < count
                r = word * T_max + s
                idx = tl.load(recv_src + par * E * T_max + r, mask=rows, other=0).to(tl.int64)
                _copy_rows(to + idx * H, y + r * H, rows, H, ROW_BLOCK)
            tl.debug_barrier()  # every thread's stores before thread 0's fence
        else:
            for s in range(0, count):
                r = word * T_max + s
                idx = _i64(tl.load(recv_src + par * E * T_max + r))
                nv.put_nbi_block(comb_x + idx * H, y + r * H, H, src)
        nv.fence()
        nv.signal_op(sig + E + me * L + l, epoch, nv.SIGNAL_SET, src)
    _wait_all(sig + E, E, epoch.to(tl.uint64), WAIT)  # every combine word
    slots = tl.arange(0, MAX_TOPK)
    for t in range(b, T, grid):
        # does the token name an expert in two slots? (once a token, as the C++ twin's slot list)
        ex = tl.load(topk + t * K + slots, mask=slots < K, other=-1)
        again = (ex[:, None] == ex[None, :]) & (slots[:, None] < slots[None, :]) & (ex[:, None] >= 0)
        repeats = tl.max(again.to(tl.int64))
        for h in range(0, H, BLOCK_H):  # one step where H <= BLOCK_H
            offs = h + tl.arange(0, BLOCK_H)
            m = offs < H
            acc = tl.zeros([BLOCK_H], tl.float32)
            if repeats == 0:  # each slot's own row: the slots' loads in flight together
                for j in tl.range(0, K, loop_unroll_factor=UNROLL_K):
                    k = t * K + j
                    v = tl.load(comb_x + k * H + offs, mask=m, other=0.0).to(tl.float32)
                    acc = _add_slot(acc, tl.load(topk + k), tl.load(weights + k), v)
            else:
                for j in range(0, K):
                    k = t * K + j
                    e = tl.load(topk + k)
                    first = k  # the row of the expert's first slot (its result came back once)
                    for jj in range(t * K, k):
                        first = tl.where((tl.load(topk + jj) == e) & (first == k), jj, first)
                    v = tl.load(comb_x + first * H + offs, mask=m, other=0.0).to(tl.float32)
                    acc = _add_slot(acc, e, tl.load(weights + k), v)
            tl.store(out + t * H + offs, acc.to(tl.bfloat16), mask=m)
    _finish()


KERNELS = {"dispatch": dispatch, "combine": combine}


# ----------------------------------------------------------------------------- host


def signature(kind: str) -> dict:
    """The Triton signature of ``kind`` (scalars as int64)."""
    ints = {name: "i64" for name in ("epoch", "T", "K", "H", "L", "me", "npes", "T_max")}
    if kind == "dispatch":
        return {"x": "*bf16", "topk": "*i64", "recv_x": "*bf16", "recv_src": "*i32", "sig": "*u64",
                "recv_count": "*i32", **ints, "SCAN": "constexpr"}
    if kind == "combine":
        return {"y": "*bf16", "topk": "*i64", "weights": "*fp32", "recv_src": "*i32", "comb_x": "*bf16",
                "sig": "*u64", "recv_count": "*i32", "out": "*bf16", **ints, "BLOCK_H": "constexpr"}
    raise ValueError(f"no MoE kernel {kind!r} (dispatch, combine)")


CONSTEXPRS = {"dispatch": {"SCAN": SCAN}, "combine": {"BLOCK_H": BLOCK_H}}

def compile(kind: str, target=None, aligned: bool = False, ptx_only: bool = False):
    """``kind`` compiled for ``target`` (default: sm_90; no GPU needed).  ``aligned``: as launched
    with 16-byte aligned arrays and ``H`` a multiple of 16 (Triton's specialisation; vector loads
    and stores of rows), else for any arguments.  ``ptx_only``: Triton's cubin stage left out
    (ptxas of the inlined NVSHMEM code takes minutes), the cubin empty."""
    from triton.compiler import ASTSource

    sig = signature(kind)
    names = list(sig)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in names
             if sig[a].startswith("*") or a == "H"} if aligned else None
    src = ASTSource(fn=KERNELS[kind], signature=sig, constexprs=CONSTEXPRS[kind], attrs=attrs)
    return compile_source(src, {"num_warps": NUM_WARPS}, target, ptx_only)


def compile_ptx(kind: str, target=None, aligned: bool = False) -> str:
    """The PTX of ``kind`` ("dispatch" or "combine") for ``target`` (default: sm_90), through
    Triton's stages up to PTX (no cubin)."""
    return compile(kind, target, aligned=aligned, ptx_only=True).asm["ptx"]


def launch_dispatch(layout, x, topk, recv_x, recv_src, sig, recv_count, epoch, T, me, stream):
    """Dispatch on ``stream`` (an int handle, 0: the legacy default stream); arrays: flat 1-D
    contiguous torch tensors (x, recv_x bfloat16; topk int64; recv_src, recv_count int32; sig uint64)."""
    import torch

    with torch.cuda.stream(torch_stream(stream)):
        dispatch[(layout.grid,)](x, topk, recv_x, recv_src, sig, recv_count, epoch, T, layout.topk, layout.hidden,
                                 layout.local_experts, me, layout.npes, layout.max_tokens, SCAN=SCAN,
                                 num_warps=NUM_WARPS)


def launch_combine(layout, y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, me, stream):
    """Combine on ``stream``; arrays as :func:`launch_dispatch`'s (y, comb_x, out bfloat16; weights float32)."""
    import torch

    with torch.cuda.stream(torch_stream(stream)):
        combine[(layout.grid,)](y, topk, weights, recv_src, comb_x, sig, recv_count, out, epoch, T, layout.topk,
                                layout.hidden, layout.local_experts, me, layout.npes, layout.max_tokens,
                                BLOCK_H=BLOCK_H, num_warps=NUM_WARPS)
