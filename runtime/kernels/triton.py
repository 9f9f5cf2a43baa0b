"""The communication kernels in Triton (protocol: :mod:`nvshmem_dsl.kernels._plan`).

A port of :mod:`nvshmem_dsl.kernels.numba`: one program is one block of the protocol
(``program_id(0)``), of ``_plan.THREADS`` threads (``num_warps=16``).  Puts are
``put_signal_nbi_block`` (made by the whole program); a wait is one thread-scope
``wait_until`` per peer, each followed by the call's program barrier; an empty range still signals
(``signal_op`` alone).  Every kernel ends with a barrier and ``quiet``.  Elements are float32 or
bfloat16 (Triton's own); sums run in float32 in PE order.  Index arithmetic is int64 (staging of
8 PEs x 64 MiB passes 2**31 elements); within a vector step offsets are relative to int64 bases.

Two compile-time constants shape a launch (:func:`block`, :func:`launch`): ``BLOCK``, the elements of one
step of the program (16 bytes a thread; one element a thread where a block's range fits in
``_plan.THREADS`` elements, as the C++ twin's loop takes them: every thread runs a step, masked or not,
so a step 4-8 times larger than the range is that many more instructions in every warp), and ``NPES``,
the PE count of the sums and copies (the launch's ``npes``, fixed for a job): their loops over the PEs
unrolled at compile time, where a loop of a run-time count is unrolled by LLVM with its address set-up
hoisted before its guard, run by every thread at any PE count.  The loops that call NVSHMEM (sends,
waits) keep the run-time ``npes``: unrolled, 8 PEs would inline NVSHMEM's put 7 times.
"""
from __future__ import annotations

import threading

import triton
import triton.language as tl

from .. import triton as nv
from . import _plan
from ._views import torch_stream

#: Warps of a program: one block of the protocol.
NUM_WARPS = _plan.THREADS // 32
#: The arrays launch() takes: torch tensors (the host calls pass torch and cupy arrays as they are).
ARRAYS = "torch"
#: Elements of one vector step: 16 bytes a thread.
BLOCK = {dtype: 16 * _plan.THREADS // size for dtype, size in _plan.ITEMSIZE.items()}
#: LL words of one vector step of the LL kernel: 16 bytes a thread.
LL_BLOCK = 16 * _plan.THREADS // _plan.LL_WORD_BYTES
#: Elements of one step where a block's range fits in it: one a thread.
SMALL_BLOCK = _plan.THREADS
#: Triton's name of each element type.
TRITON_DTYPE = {"float32": "fp32", "bfloat16": "bf16"}
#: Scalar arguments whose value changes from call to call, or from PE to PE (no specialisation).
_VARYING = ("epoch", "me")


# ----------------------------------------------------------------------------- helpers


@triton.jit
def _i64(v):
    return tl.cast(v, tl.int64)


@triton.jit
def _send(dst, src, cnt, word, epoch, pe):
    """put_signal_nbi_block of cnt elements (none: the signal alone) to dst on pe."""
    if cnt > 0:
        nv.put_signal_nbi_block(dst, src, cnt, word, epoch, nv.SIGNAL_SET, pe)
    else:
        nv.signal_op(word, epoch, nv.SIGNAL_SET, pe)


@triton.jit
def _wait_peers(sig, b, phase, epoch, me, npes):
    """Wait (one thread, peer after peer) for every peer's word of block b and phase; the program
    syncs after each wait (the thread-scope call's barrier), so after the last one.

    ``wait_until`` (uint64), not ``signal_wait_until``: the same wait in NVSHMEM (poll, then
    ``syncapi_update_mem``) without the word's value, which a Triton program hands from its leader to
    every thread through shared memory and a second barrier; a ``tl.debug_barrier`` after the loop
    would be a third (3 barriers a peer -> 1, as the C++ twin's one ``__syncthreads`` at 2 PEs).  With
    no peer (1 PE) nothing is read that another thread wrote, so no barrier is needed."""
    words = sig + (b * 2 + phase) * npes
    for p in range(0, npes):
        if p != me:
            nv.wait_until(words + p, nv.CMP_GE, epoch.to(tl.uint64))


@triton.jit
def _copy(dst, src, cnt, BLOCK: tl.constexpr):
    """dst[j] = src[j] for j in [0, cnt)."""
    for s in range(0, cnt, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        m = offs < cnt
        tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


@triton.jit
def _sum(out, also, mine, slots, stride, cnt, me, NPES: tl.constexpr, ALSO: tl.constexpr, BLOCK: tl.constexpr):
    """out[j] (and also[j] when ALSO) = sum over p = 0..NPES-1 in order of (mine[j] if p == me
    else slots[p * stride + j]), in float32, for j in [0, cnt)."""
    for s in range(0, cnt, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        m = offs < cnt
        acc = tl.zeros([BLOCK], tl.float32)
        for p in tl.static_range(NPES):
            if p == me:
                src = mine
            else:
                src = slots + p * stride
            acc += tl.load(src + offs, mask=m).to(tl.float32)
        r = acc.to(out.dtype.element_ty)
        tl.store(out + offs, r, mask=m)
        if ALSO:
            tl.store(also + offs, r, mask=m)


@triton.jit
def _on_peer(ptr, at):
    """The uint64 pointer ``ptr`` moved to ``at`` (its address on a peer, nv.peer's) by an offset Triton
    knows to be a multiple of 16 bytes (a peer's mapping of the symmetric heap lies a multiple of its
    granularity from ours), so that the LL words' stores are vectors."""
    return ptr + tl.multiple_of((at.to(tl.int64) - ptr.to(tl.int64)) >> 3, 2)


#: The LL poll of one word, in each thread alone: $1 the word loaded, $2 its address, $3 the call's tag;
#: while the word's epoch half is not the tag's, it is loaded again (volatile); $0 the word.  The labels
#: and registers are local to the braces (one copy a word of the thread); $0 is written last (it may
#: share a register with an input).
_LL_POLL = tl.constexpr("""{
\t.reg .pred %ll_p;
\t.reg .b64 %ll_w, %ll_t;
\tmov.b64 %ll_w, $1;
LL_POLL:
\txor.b64 %ll_t, %ll_w, $3;
\tshr.b64 %ll_t, %ll_t, 32;
\tsetp.eq.s64 %ll_p, %ll_t, 0;
\t@%ll_p bra LL_DONE;
\tld.volatile.global.b64 %ll_w, [$2];
\tbra LL_POLL;
LL_DONE:
\tmov.b64 $0, %ll_w;
\t}""")


@triton.jit
def _ll_poll(w, at, tag):
    """The words ``w`` loaded from ``at`` (masked-off ones: ``tag``), each polled by its own thread until
    its epoch half is ``tag``'s, as the C++ twin's ``nvshmem_signal_fetch`` loop: no barrier, no
    block-wide reduction (``tl.max`` of the mismatches, what a Triton loop's condition would need, is a
    shared-memory reduction with two barriers a poll, and keeps every thread until the last word
    arrives)."""
    return tl.inline_asm_elementwise(_LL_POLL, "=l,l,l,l", [w, at.to(tl.uint64, bitcast=True), tag],
                                     dtype=tl.uint64, is_pure=False, pack=1)


@triton.jit
def _finish():
    tl.debug_barrier()
    nv.quiet()


# ----------------------------------------------------------------------------- kernels


@triton.jit(do_not_specialize=_VARYING)
def one_shot(out, x, stage, sig, epoch, n, span, chunk, me, npes, BLOCK: tl.constexpr, NPES: tl.constexpr):
    epoch, n, span, chunk, me, npes = _i64(epoch), _i64(n), _i64(span), _i64(chunk), _i64(me), _i64(npes)
    b = _i64(tl.program_id(0))
    lo = b * chunk
    hi = tl.minimum(lo + chunk, span)
    par = epoch & 1
    d = (par * npes + me) * span
    for k in range(1, npes):
        p = (me + k) % npes
        _send(stage + d + lo, x + lo, hi - lo, sig + (b * 2) * npes + me, epoch, p)
    _wait_peers(sig, b, 0, epoch, me, npes)
    _sum(out + lo, out, x + lo, stage + par * npes * span + lo, span, hi - lo, me, NPES, False, BLOCK)
    _finish()


@triton.jit(do_not_specialize=_VARYING)
def one_shot_ll(out, x, stage, sig, epoch, n, span, chunk, me, npes, BLOCK: tl.constexpr, NPES: tl.constexpr):
    """The LL protocol (``stage``: the LL words); an element's word holds its float32 bits shifted right
    by 32 - its width (bfloat16: its own bits; the float32 of a bfloat16 is exact)."""
    epoch, n, span, chunk, me, npes = _i64(epoch), _i64(n), _i64(span), _i64(chunk), _i64(me), _i64(npes)
    SHIFT: tl.constexpr = 32 - x.dtype.element_ty.primitive_bitwidth
    b = _i64(tl.program_id(0))
    lo = b * chunk
    hi = tl.minimum(lo + chunk, span)
    cnt = hi - lo
    par = epoch & 1
    tag = epoch.to(tl.uint64) << 32
    d = (par * npes + me) * span + lo
    for k in range(1, npes):  # my words into every peer's slot of me, through its address
        to = _on_peer(stage, nv.peer(stage, (me + k) % npes)) + d
        for s in range(0, cnt, BLOCK):
            offs = s + tl.arange(0, BLOCK)
            m = offs < cnt
            v = tl.load(x + lo + offs, mask=m).to(tl.float32).to(tl.uint32, bitcast=True) >> SHIFT
            tl.store(to + offs, tag | v.to(tl.uint64), mask=m)
    slots = stage + par * npes * span + lo
    for s in range(0, cnt, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        m = offs < cnt
        acc = tl.zeros([BLOCK], tl.float32)
        for p in tl.static_range(NPES):
            if p == me:
                acc += tl.load(x + lo + offs, mask=m).to(tl.float32)
            else:
                at = slots + p * span + offs
                w = _ll_poll(tl.load(at, mask=m, other=tag, volatile=True), at, tag)
                acc += (w.to(tl.uint32) << SHIFT).to(tl.float32, bitcast=True)
        tl.store(out + lo + offs, acc.to(out.dtype.element_ty), mask=m)


@triton.jit(do_not_specialize=_VARYING)
def two_shot(out, x, stage, sig, epoch, n, span, chunk, me, npes, BLOCK: tl.constexpr, NPES: tl.constexpr):
    epoch, n, span, chunk, me, npes = _i64(epoch), _i64(n), _i64(span), _i64(chunk), _i64(me), _i64(npes)
    b = _i64(tl.program_id(0))
    lo = b * chunk
    hi = tl.minimum(lo + chunk, span)
    par = epoch & 1
    d = ((par * 2) * npes + me) * span
    for k in range(1, npes):  # phase 0: shard p of x to PE p
        p = (me + k) % npes
        g0 = tl.minimum(p * span + lo, n)
        g1 = tl.minimum(p * span + hi, n)
        _send(stage + d + lo, x + g0, g1 - g0, sig + (b * 2) * npes + me, epoch, p)
    _wait_peers(sig, b, 0, epoch, me, npes)
    # reduce my shard into slot(1, me) and out
    mine = ((par * 2 + 1) * npes + me) * span
    g0 = tl.minimum(me * span + lo, n)
    cnt = tl.minimum(me * span + hi, n) - g0
    _sum(out + g0, stage + mine + lo, x + g0, stage + (par * 2) * npes * span + lo, span, cnt, me, NPES,
         True, BLOCK)
    tl.debug_barrier()
    for k in range(1, npes):  # phase 1: my reduced shard to every PE
        p = (me + k) % npes
        _send(stage + mine + lo, stage + mine + lo, cnt, sig + (b * 2 + 1) * npes + me, epoch, p)
    _wait_peers(sig, b, 1, epoch, me, npes)
    for q in tl.static_range(NPES):
        if q != me:
            g0 = tl.minimum(q * span + lo, n)
            src = ((par * 2 + 1) * npes + q) * span
            _copy(out + g0, stage + src + lo, tl.minimum(q * span + hi, n) - g0, BLOCK)
    _finish()


@triton.jit(do_not_specialize=_VARYING)
def all_gather(out, x, stage, sig, epoch, n, span, chunk, me, npes, BLOCK: tl.constexpr, NPES: tl.constexpr):
    epoch, n, span, chunk, me, npes = _i64(epoch), _i64(n), _i64(span), _i64(chunk), _i64(me), _i64(npes)
    b = _i64(tl.program_id(0))
    lo = b * chunk
    hi = tl.minimum(lo + chunk, span)
    par = epoch & 1
    d = (par * npes + me) * span
    for k in range(1, npes):
        p = (me + k) % npes
        _send(stage + d + lo, x + lo, hi - lo, sig + (b * 2) * npes + me, epoch, p)
    _copy(out + me * n + lo, x + lo, hi - lo, BLOCK)
    _wait_peers(sig, b, 0, epoch, me, npes)
    for q in tl.static_range(NPES):
        if q != me:
            _copy(out + q * n + lo, stage + (par * npes + q) * span + lo, hi - lo, BLOCK)
    _finish()


@triton.jit(do_not_specialize=_VARYING)
def reduce_scatter(out, x, stage, sig, epoch, n, span, chunk, me, npes, BLOCK: tl.constexpr, NPES: tl.constexpr):
    epoch, n, span, chunk, me, npes = _i64(epoch), _i64(n), _i64(span), _i64(chunk), _i64(me), _i64(npes)
    b = _i64(tl.program_id(0))
    lo = b * chunk
    hi = tl.minimum(lo + chunk, span)
    par = epoch & 1
    d = (par * npes + me) * span
    for k in range(1, npes):
        p = (me + k) % npes
        _send(stage + d + lo, x + p * n + lo, hi - lo, sig + (b * 2) * npes + me, epoch, p)
    _wait_peers(sig, b, 0, epoch, me, npes)
    _sum(out + lo, out, x + me * n + lo, stage + par * npes * span + lo, span, hi - lo, me, NPES, False, BLOCK)
    _finish()


KERNELS = {"one_shot": one_shot, _plan.LL_KERNEL: one_shot_ll, "two_shot": two_shot, "all_gather": all_gather,
           "reduce_scatter": reduce_scatter}


# ----------------------------------------------------------------------------- host


def signature(dtype: str, kernel: str = "one_shot") -> dict:
    """The Triton signature of ``kernel`` for ``dtype`` (all take the same; scalars as int64; the LL
    kernel's stage: uint64)."""
    e = "*" + TRITON_DTYPE[dtype]
    return {"out": e, "x": e, "stage": "*u64" if kernel == _plan.LL_KERNEL else e, "sig": "*u64", "epoch": "i64", "n": "i64", "span": "i64",
            "chunk": "i64", "me": "i64", "npes": "i64", "BLOCK": "constexpr", "NPES": "constexpr"}


def compile(kind: str, dtype: str, target=None, aligned: bool = False, npes: int = 2, chunk: int | None = None):
    """``kind`` for ``dtype`` compiled for ``target`` (default: sm_90; no GPU needed).  ``aligned``:
    as launched with 16-byte aligned arrays and n, span, chunk multiples of 16 (Triton's
    specialisation; vector loads), else for any arguments; ``npes`` PEs; ``chunk``: a block's range
    (:func:`block`; None: the vector step)."""
    from triton.compiler import ASTSource

    names = list(signature(dtype, kind))
    attrs = {(names.index(a),): [["tt.divisibility", 16]]
             for a in ("out", "x", "stage", "sig", "n", "span", "chunk")} if aligned else None
    src = ASTSource(fn=KERNELS[kind], signature=signature(dtype, kind), constexprs=constexprs(kind, dtype, npes, chunk),
                    attrs=attrs)
    return compile_source(src, {"num_warps": NUM_WARPS}, target)


_ptx_only_lock = threading.Lock()


def _ptx_only_hook(ours):
    """Our stages inspection hook, with Triton's cubin stage left out (and said so in the key)."""

    def hook(*args, **kwargs):
        if not args and not kwargs:
            key, hsh = ours()
            return key + "-ptx-only", hsh + "-ptx-only"
        ours(*args, **kwargs)
        args[1]["cubin"] = lambda src, metadata: b""

    return hook


def compile_source(src, options: dict, target=None, ptx_only: bool = False):
    """``triton.compile`` of ``src`` (an ASTSource) with ``options`` for ``target`` (default: sm_90;
    no GPU needed). ``ptx_only``: Triton's cubin stage left out (ptxas of a kernel with NVSHMEM's
    code inlined may take minutes), the cubin empty and the cache key marked so."""
    from triton.backends.compiler import GPUTarget

    args = dict(target=target or GPUTarget("cuda", 90, 32), options=options)
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


def block(kind: str, dtype: str, chunk: int | None = None) -> int:
    """The BLOCK of ``kind`` (a kernel) for ``dtype`` where a block's range holds ``chunk`` elements (LL
    words): :data:`SMALL_BLOCK` (one a thread) where they fit in it, else the 16-byte vector step (None:
    the vector step)."""
    if chunk is not None and chunk <= SMALL_BLOCK:
        return SMALL_BLOCK
    return LL_BLOCK if kind == _plan.LL_KERNEL else BLOCK[dtype]


def constexprs(kind: str, dtype: str, npes: int, chunk: int | None = None) -> dict:
    """The compile-time constants of ``kind`` for ``dtype`` at ``npes`` PEs and ranges of ``chunk``."""
    return {"BLOCK": block(kind, dtype, chunk), "NPES": npes}


def launch(kind: str, plan: _plan.Plan, out, x, stage, sig, epoch: int, me: int, stream: int) -> None:
    """Launch ``kind`` (a kind or _plan.LL_KERNEL) on ``stream`` (an int handle, 0: the legacy default
    stream); arrays are 1-D contiguous torch tensors (stage of x's dtype, the LL kernel's: the LL words,
    torch.uint64; sig torch.uint64)."""
    import torch

    with torch.cuda.stream(torch_stream(stream)):
        KERNELS[kind][(plan.grid,)](out, x, stage, sig, *plan.args(epoch, me),
                                    **constexprs(kind, plan.dtype, plan.npes, plan.chunk), num_warps=NUM_WARPS)
