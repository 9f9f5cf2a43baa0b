"""The communication kernels in the CuTe DSL (protocol: :mod:`nvshmem_dsl.kernels._plan`).

A port of :mod:`nvshmem_dsl.kernels.numba`: the same four kernels, arguments, staging slots and
signal words, one element per thread and step. Tensors are 1-D with a dynamic size and the scalars
are runtime arguments, so one compile per (kind, dtype, arch) serves every size, epoch and PE
(:func:`launch`; :func:`compile_ptx` for CPU checks). Offsets are ``Int64`` (the kernels never read
a tensor's size; CuTe's ``from_dlpack`` sizes are 32-bit, so an array holds < 2**31 elements).
Sums run in Float32 in PE order; bfloat16 loads and stores use CuTe's conversions (``cvt.rn``:
round to nearest even, as Numba's; a NaN comes back as the canonical one).
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
from cuda.bindings import driver as cuda
from cutlass import BFloat16, Float32, Int32, Int64, Uint16, Uint32, Uint64

from .. import cute as nv
from . import _plan

THREADS = _plan.THREADS
#: The arrays launch() takes: torch (or cupy) device arrays, through DLPack (the host calls convert).
ARRAYS = "torch"
#: CuTe's element type of each kernel dtype.
ELEMENT = {"float32": Float32, "bfloat16": BFloat16}
SET = nv.SignalOp.SIGNAL_SET
#: The unsigned type of an element's bits (an LL word's data half).
BITS = {Float32: Uint32, BFloat16: Uint16}


@cute.jit
def _tid() -> Int64:
    t, _, _ = cute.arch.thread_idx()
    return Int64(t)


@cute.jit
def _range(span: Int64, chunk: Int64):
    """Block b's range [lo, hi) of every PE's range."""
    b, _, _ = cute.arch.block_idx()
    lo = Int64(b) * chunk
    return Int32(b), lo, cutlass.min(lo + chunk, span)


@cute.jit
def _load(t: cute.Tensor, i: Int64) -> Float32:
    return t[i].to(Float32)


@cute.jit
def _wait_peers(sig: cute.Tensor, b: Int32, phase: int, epoch: Int64, me: Int32, npes: Int32):
    """One thread per peer waits for its word of block b and phase; then the block syncs."""
    t, _, _ = cute.arch.thread_idx()
    if t < npes and t != me:
        nv.signal_wait_until(sig, (b * 2 + phase) * npes + t, nv.Cmp.CMP_GE, Uint64(epoch))
    cute.arch.sync_threads()


@cute.jit
def _send(dst: cute.Tensor, d: Int64, src: cute.Tensor, s: Int64, cnt: Int64, sig: cute.Tensor,
          w: Int32, epoch: Int64, pe: Int32):
    """put_signal_nbi_block of src[s:s + cnt] to dst[d:d + cnt] on pe (cnt may be 0: then the
    signal alone)."""
    if cnt > 0:
        nv.put_signal_nbi_block(dst.iterator + d, src.iterator + s, cnt, sig, w, Uint64(epoch),
                                SET, pe)
    elif _tid() == 0:
        nv.signal_op(sig, w, Uint64(epoch), SET, pe)


@cute.jit
def _finish():
    cute.arch.sync_threads()
    if _tid() == 0:
        nv.quiet()


@cute.kernel
def one_shot(out: cute.Tensor, x: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor, epoch: Int64,
             n: Int64, span: Int64, chunk: Int64, me: Int32, npes: Int32):
    b, lo, hi = _range(span, chunk)
    par = epoch & 1
    d = (par * npes + me) * span
    for k in range(1, npes):
        _send(stage, d + lo, x, lo, hi - lo, sig, b * 2 * npes + me, epoch, (me + k) % npes)
    _wait_peers(sig, b, 0, epoch, me, npes)
    for i in range(lo + _tid(), hi, THREADS):
        acc = Float32(0.0)
        for p in range(npes):
            if p == me:
                acc += _load(x, i)
            else:
                acc += _load(stage, (par * npes + p) * span + i)
        out[i] = acc.to(out.element_type)
    _finish()


@cute.kernel
def one_shot_ll(out: cute.Tensor, x: cute.Tensor, ll: cute.Tensor, sig: cute.Tensor, epoch: Int64,
                n: Int64, span: Int64, chunk: Int64, me: Int32, npes: Int32):
    """The LL protocol (``ll``: the LL words, Uint64)."""
    b, lo, hi = _range(span, chunk)
    par = epoch & 1
    tag = Uint64(epoch) << 32
    shift = 32 - x.element_type.width  # a word's data half << shift: the element's float32 bits
    d = (par * npes + me) * span
    for k in range(1, npes):  # my words into every peer's slot of me, through its address
        to = nv.peer(ll, (me + k) % npes)
        for i in range(lo + _tid(), hi, THREADS):
            to[d + i] = tag | Uint64(x[i].bitcast(BITS[x.element_type]))
    slots = par * npes * span
    for i in range(lo + _tid(), hi, THREADS):
        acc = Float32(0.0)
        for p in range(npes):
            if p == me:
                acc += _load(x, i)
            else:
                at = slots + p * span + i
                w = Uint64(nv.signal_fetch(ll, at))
                while ((w ^ tag) >> 32) != 0:
                    w = Uint64(nv.signal_fetch(ll, at))
                acc += (Uint32(w) << shift).bitcast(Float32)
        out[i] = acc.to(out.element_type)


@cute.kernel
def two_shot(out: cute.Tensor, x: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor, epoch: Int64,
             n: Int64, span: Int64, chunk: Int64, me: Int32, npes: Int32):
    b, lo, hi = _range(span, chunk)
    par = epoch & 1
    d = (par * 2 * npes + me) * span
    for k in range(1, npes):  # phase 0: shard p of x to PE p
        p = (me + k) % npes
        g0 = cutlass.min(p * span + lo, n)
        g1 = cutlass.min(p * span + hi, n)
        _send(stage, d + lo, x, g0, g1 - g0, sig, b * 2 * npes + me, epoch, p)
    _wait_peers(sig, b, 0, epoch, me, npes)
    mine = ((par * 2 + 1) * npes + me) * span
    for j in range(lo + _tid(), hi, THREADS):
        i = me * span + j
        if i < n:
            acc = Float32(0.0)
            for p in range(npes):
                if p == me:
                    acc += _load(x, i)
                else:
                    acc += _load(stage, (par * 2 * npes + p) * span + j)
            r = acc.to(out.element_type)
            stage[mine + j] = r
            out[i] = r
    cute.arch.sync_threads()
    cnt = cutlass.max(cutlass.min(me * span + hi, n) - cutlass.min(me * span + lo, n), 0)
    for k in range(1, npes):  # phase 1: my reduced shard to every PE
        _send(stage, mine + lo, stage, mine + lo, cnt, sig, (b * 2 + 1) * npes + me, epoch,
              (me + k) % npes)
    _wait_peers(sig, b, 1, epoch, me, npes)
    for q in range(npes):
        if q != me:
            src = ((par * 2 + 1) * npes + q) * span
            for j in range(lo + _tid(), hi, THREADS):
                i = q * span + j
                if i < n:
                    out[i] = stage[src + j]
    _finish()


@cute.kernel
def all_gather(out: cute.Tensor, x: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor,
               epoch: Int64, n: Int64, span: Int64, chunk: Int64, me: Int32, npes: Int32):
    b, lo, hi = _range(span, chunk)
    par = epoch & 1
    d = (par * npes + me) * span
    for k in range(1, npes):
        _send(stage, d + lo, x, lo, hi - lo, sig, b * 2 * npes + me, epoch, (me + k) % npes)
    for i in range(lo + _tid(), hi, THREADS):
        out[me * n + i] = x[i]
    _wait_peers(sig, b, 0, epoch, me, npes)
    for q in range(npes):
        if q != me:
            src = (par * npes + q) * span
            for i in range(lo + _tid(), hi, THREADS):
                out[q * n + i] = stage[src + i]
    _finish()


@cute.kernel
def reduce_scatter(out: cute.Tensor, x: cute.Tensor, stage: cute.Tensor, sig: cute.Tensor,
                   epoch: Int64, n: Int64, span: Int64, chunk: Int64, me: Int32, npes: Int32):
    b, lo, hi = _range(span, chunk)
    par = epoch & 1
    d = (par * npes + me) * span
    for k in range(1, npes):
        p = (me + k) % npes
        _send(stage, d + lo, x, p * n + lo, hi - lo, sig, b * 2 * npes + me, epoch, p)
    _wait_peers(sig, b, 0, epoch, me, npes)
    for i in range(lo + _tid(), hi, THREADS):
        acc = Float32(0.0)
        for p in range(npes):
            if p == me:
                acc += _load(x, me * n + i)
            else:
                acc += _load(stage, (par * npes + p) * span + i)
        out[i] = acc.to(out.element_type)
    _finish()


KERNELS = {"one_shot": one_shot, _plan.LL_KERNEL: one_shot_ll, "two_shot": two_shot, "all_gather": all_gather,
           "reduce_scatter": reduce_scatter}


@cute.jit
def _launch(kind: cutlass.Constexpr, out: cute.Tensor, x: cute.Tensor, stage: cute.Tensor,
            sig: cute.Tensor, epoch: Int64, n: Int64, span: Int64, chunk: Int64, me: Int32,
            npes: Int32, grid: Int32, stream: cuda.CUstream):
    KERNELS[kind](out, x, stage, sig, epoch, n, span, chunk, me, npes).launch(
        grid=[grid, 1, 1], block=[THREADS, 1, 1], stream=stream)


def _example_args(kind: str, dtype: str) -> tuple:
    """Compile-time arguments: tensors of a dynamic size, runtime scalars, a stream."""
    if kind not in KERNELS:
        raise ValueError(f"unknown kernel {kind!r}; expected one of {', '.join(KERNELS)}")
    F = cute.runtime.make_fake_compact_tensor
    e = ELEMENT[dtype]
    a = [F(e, (cute.sym_int32(),)) for _ in range(3)]
    u = F(Uint64, (cute.sym_int32(),))
    if kind == _plan.LL_KERNEL:
        a[2] = F(Uint64, (cute.sym_int32(),))
    return (kind, *a, u, Int64(1), Int64(1), Int64(1), Int64(1), Int32(0), Int32(1), Int32(1),
            cute.runtime.make_fake_stream())


@functools.lru_cache(maxsize=None)
def _compiled(kind: str, dtype: str, arch: str) -> nv.CompiledKernel:
    return nv.compile(_launch, *_example_args(kind, dtype), arch=arch)


def compile_ptx(kind: str, dtype: str, arch="sm_90a", options: str | None = None) -> str:
    """PTX of one kernel (CPU: no GPU needed)."""
    return nv.compile_to_ptx(_launch, *_example_args(kind, dtype), arch=arch, options=options)


def _tensor(a, dtype: str):
    """A 1-D contiguous torch / cupy device array -> a CuTe tensor of a dynamic size (bfloat16 may
    also come as its bits, int16 or uint16)."""
    t = cute.runtime.from_dlpack(a).mark_layout_dynamic()
    if dtype == "bfloat16" and t.element_type in (cutlass.Int16, cutlass.Uint16):
        t.element_type = BFloat16
    return t


def launch(kind: str, plan: _plan.Plan, out, x, stage, sig, epoch: int, me: int, stream: int) -> None:
    """Launch ``kind`` (a kind or _plan.LL_KERNEL) on ``stream`` (an int handle, 0: the legacy default
    stream); arrays are torch or cupy device arrays (1-D, contiguous; bfloat16 from torch, or as its int16
    / uint16 bits; the LL kernel's stage: the LL words, uint64). Compiles once per (kind, dtype, arch of
    the current device)."""
    from ..cute._compile import resolve_arch

    ts = [_tensor(a, plan.dtype) for a in (out, x, stage)]
    e = ELEMENT[plan.dtype]
    if [t.element_type for t in ts] != [e, e, Uint64 if kind == _plan.LL_KERNEL else e]:
        raise TypeError(f"{kind}: arrays of {[t.element_type.__name__ for t in ts]} for a "
                        f"{plan.dtype} plan")
    k = _compiled(kind, plan.dtype, resolve_arch(None))
    k(*ts, _tensor(sig, "uint64"), *plan.args(epoch, me), plan.grid, cuda.CUstream(stream))
