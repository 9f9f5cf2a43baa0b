"""The CuTe DSL kernels of tests/gpu/test_cute_gpu.py, importable without a GPU or cupy.

The shapes they run are those of tests/gpu/shapes.py that CuTe runs; :func:`call` maps a shape
and its arrays to the case that runs it and the case's runtime arguments.

Every launcher the GPU test runs is a :class:`Case` of :data:`CASES`: the ``@cute.jit``
launcher, the kinds of its arguments (tensors with element type and size, runtime scalars,
``cutlass.Constexpr`` values) and the NVSHMEM device functions it needs beyond those of
NVSHMEM 3.4. The GPU test compiles a case with its real arrays
(:meth:`Case.cute_args`, which checks them against the spec); tests/test_cute_gpu_kernels.py
compiles every case to PTX on a CPU with fake tensors of the same types and sizes
(:meth:`Case.example_args`), so that what the GPU machine compiles is known to compile.

One compile per case (a Constexpr value makes a compile of its own; runtime scalars
such as ``op`` below select between forms inside one compiled kernel).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Union

import numpy as np

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint64

import nvshmem_dsl.cute as nv

from shapes import COLL_N, N, REDUCE_N, SCOPES, THREADS, coll_count, shapes  # noqa: F401

# --------------------------------------------------------------- argument specs


@dataclass(frozen=True)
class Tensor:
    """A 1-D tensor argument: numpy dtype name ("bfloat16": uint16 storage on the host)
    and size (an int, or a function of the number of PEs)."""
    dtype: str
    n: Union[int, Callable[[int], int]]

    def size(self, npes: int) -> int:
        return self.n(npes) if callable(self.n) else self.n

    @property
    def cute_type(self):
        return cutlass.BFloat16 if self.dtype == "bfloat16" else _CUTE_TYPES[np.dtype(self.dtype)]

    @property
    def storage(self) -> np.dtype:
        """The dtype of the host array that holds the tensor."""
        return np.dtype(np.uint16) if self.dtype == "bfloat16" else np.dtype(self.dtype)


@dataclass(frozen=True)
class Scalar:
    """A runtime scalar argument of CuTe type ``cls``."""
    cls: Any


@dataclass(frozen=True)
class Const:
    """A ``cutlass.Constexpr`` argument: fixed by the case, not passed by the test."""
    value: Any


_CUTE_TYPES = {np.dtype(k): v for k, v in {
    "int8": cutlass.Int8, "int16": cutlass.Int16, "int32": cutlass.Int32, "int64": cutlass.Int64,
    "uint8": cutlass.Uint8, "uint16": cutlass.Uint16, "uint32": cutlass.Uint32,
    "uint64": cutlass.Uint64, "float16": cutlass.Float16, "float32": cutlass.Float32,
    "float64": cutlass.Float64}.items()}


@dataclass(frozen=True)
class Case:
    name: str
    launcher: Any
    params: tuple
    requires: tuple = ()      # device functions that NVSHMEM 3.4 lacks
    collective: bool = False  # inlines a collective: 5-40 s of CPU to compile

    def runtime_params(self) -> list:
        return [p for p in self.params if not isinstance(p, Const)]

    def example_args(self, npes: int = 2) -> tuple:
        """Compile-time arguments without a GPU: fake tensors of the spec's types and sizes."""
        out = []
        for p in self.params:
            if isinstance(p, Tensor):
                out.append(cute.runtime.make_fake_compact_tensor(p.cute_type, (p.size(npes),),
                                                                 assumed_align=16))
            elif isinstance(p, Scalar):
                out.append(p.cls(1))
            else:
                out.append(p.value)
        return tuple(out)

    def cute_args(self, values, npes: int) -> tuple[tuple, tuple]:
        """Real arrays and numbers, one per runtime parameter -> (compile args, call args).

        Arrays (cupy, or numpy on a CPU) become ``from_dlpack`` tensors (16-byte aligned,
        bfloat16 for "bfloat16"); each must have the spec's dtype and size."""
        from cutlass.cute.runtime import from_dlpack

        rt = self.runtime_params()
        if len(values) != len(rt):
            raise TypeError(f"{self.name}: {len(rt)} runtime arguments expected, got {len(values)}")
        it = iter(values)
        compile_args, call_args = [], []
        for p in self.params:
            if isinstance(p, Const):
                compile_args.append(p.value)
                continue
            v = next(it)
            if isinstance(p, Tensor):
                if np.dtype(v.dtype) != p.storage or v.ndim != 1 or v.size != p.size(npes):
                    raise TypeError(f"{self.name}: array of {v.dtype} {v.shape} where the spec "
                                    f"says {p.dtype} ({p.size(npes)},)")
                v = from_dlpack(v, assumed_align=16)
                if p.dtype == "bfloat16":
                    v.element_type = cutlass.BFloat16
            else:
                v = p.cls(v)
            compile_args.append(v)
            call_args.append(v)
        return tuple(compile_args), tuple(call_args)


CASES: dict[str, Case] = {}


def case(name, launcher, *params, requires=(), collective=False) -> Case:
    c = Case(name, launcher, tuple(params), tuple(requires), collective)
    assert name not in CASES, name
    CASES[name] = c
    return c


def _tid():
    tidx, _, _ = cute.arch.thread_idx()
    return tidx


def _gid():
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    return bidx * bdim + tidx


# --- RMA ---------------------------------------------------------------------------------
# op (runtime): 0 put, 1 put_nbi, 2 get, 3 get_nbi; the nbi forms are followed by quiet.

@cute.kernel
def k_rma(dst: cute.Tensor, src: cute.Tensor, pe: Int32, op: Int32, scope: cutlass.Constexpr):
    t = _tid()
    if cutlass.const_expr(scope == "thread"):
        if t == 0:
            if op == 0:
                nv.put(dst, src, pe)
            elif op == 1:
                nv.put_nbi(dst, src, pe)
                nv.quiet()
            elif op == 2:
                nv.get(dst, src, pe)
            else:
                nv.get_nbi(dst, src, pe)
                nv.quiet()
    elif cutlass.const_expr(scope == "warp"):
        if t < 32:
            if op == 0:
                nv.put_warp(dst, src, pe)
            elif op == 1:
                nv.put_nbi_warp(dst, src, pe)
                nv.quiet()
            elif op == 2:
                nv.get_warp(dst, src, pe)
            else:
                nv.get_nbi_warp(dst, src, pe)
                nv.quiet()
    else:
        if op == 0:
            nv.put_block(dst, src, pe)
        elif op == 1:
            nv.put_nbi_block(dst, src, pe)
            if t == 0:
                nv.quiet()
        elif op == 2:
            nv.get_block(dst, src, pe)
        else:
            nv.get_nbi_block(dst, src, pe)
            if t == 0:
                nv.quiet()


@cute.jit
def rma(dst: cute.Tensor, src: cute.Tensor, pe: Int32, op: Int32, scope: cutlass.Constexpr):
    k_rma(dst, src, pe, op, scope).launch(grid=[1, 1, 1], block=[128, 1, 1])


RMA_OPS = ("put", "put_nbi", "get", "get_nbi")
for _s in SCOPES:
    case(f"rma_{_s}", rma, Tensor("float32", N), Tensor("float32", N), Scalar(Int32), Scalar(Int32),
         Const(_s))


@cute.kernel
def k_put_count(dst: cute.Tensor, src: cute.Tensor, n: Int32, pe: Int32):
    nv.put_block(dst, src, n, pe)


@cute.jit
def put_count(dst: cute.Tensor, src: cute.Tensor, n: Int32, pe: Int32):
    k_put_count(dst, src, n, pe).launch(grid=[1, 1, 1], block=[THREADS, 1, 1])


case("put_count", put_count, Tensor("float32", N), Tensor("float32", N), Scalar(Int32), Scalar(Int32))


@cute.kernel
def k_put_block(dst: cute.Tensor, src: cute.Tensor, pe: Int32):
    nv.put_block(dst, src, pe)


@cute.jit
def put_block(dst: cute.Tensor, src: cute.Tensor, pe: Int32):
    k_put_block(dst, src, pe).launch(grid=[1, 1, 1], block=[THREADS, 1, 1])


WIDTHS = tuple(s.dtype for s in shapes("cute", "put_width"))
for _d in WIDTHS:
    case(f"put_block_{_d}", put_block, Tensor(_d, N), Tensor(_d, N), Scalar(Int32))


# op (runtime): 0 p, 1 g; one element per thread, N // 128 blocks of 128.

@cute.kernel
def k_p_g(dst: cute.Tensor, src: cute.Tensor, pe: Int32, op: Int32):
    i = _gid()
    if i < cute.size(dst):
        if op == 0:
            nv.p(dst, i, src[i], pe)
        else:
            dst[i] = nv.g(src, i, pe)


@cute.jit
def p_g(dst: cute.Tensor, src: cute.Tensor, pe: Int32, op: Int32):
    k_p_g(dst, src, pe, op).launch(grid=[N // 128, 1, 1], block=[128, 1, 1])


for _d in sorted({s.dtype for s in shapes("cute", "p_g")}):
    case("p_g" if _d == "float32" else f"p_g_{_d}", p_g, Tensor(_d, N), Tensor(_d, N), Scalar(Int32),
         Scalar(Int32))


# op (runtime): 0 iput, 1 iget; dst stride 2, src stride 3.

@cute.kernel
def k_strided(dst: cute.Tensor, src: cute.Tensor, n: Int32, pe: Int32, op: Int32,
              scope: cutlass.Constexpr):
    t = _tid()
    if cutlass.const_expr(scope == "thread"):
        if t == 0:
            if op == 0:
                nv.iput(dst, src, 2, 3, n, pe)
            else:
                nv.iget(dst, src, 2, 3, n, pe)
    elif cutlass.const_expr(scope == "warp"):
        if t < 32:
            if op == 0:
                nv.iput_warp(dst, src, 2, 3, n, pe)
            else:
                nv.iget_warp(dst, src, 2, 3, n, pe)
    else:
        if op == 0:
            nv.iput_block(dst, src, 2, 3, n, pe)
        else:
            nv.iget_block(dst, src, 2, 3, n, pe)


@cute.jit
def strided(dst: cute.Tensor, src: cute.Tensor, n: Int32, pe: Int32, op: Int32,
            scope: cutlass.Constexpr):
    k_strided(dst, src, n, pe, op, scope).launch(grid=[1, 1, 1], block=[THREADS, 1, 1])


for _s in SCOPES:
    case(f"iput_iget_{_s}", strided, Tensor("float32", N), Tensor("float32", N), Scalar(Int32),
         Scalar(Int32), Scalar(Int32), Const(_s))


# --- signals -------------------------------------------------------------------------------
# nbi (runtime): 0 blocking, 1 nbi. Thread 0 then waits for its own signal word (set by the
# left PE) and stores what wait_until and signal_fetch return in sig[1] and sig[2].

@cute.kernel
def k_put_signal(dst: cute.Tensor, src: cute.Tensor, sig: cute.Tensor, pe: Int32, nbi: Int32,
                 scope: cutlass.Constexpr):
    t = _tid()
    SET = nv.SignalOp.SIGNAL_SET
    if cutlass.const_expr(scope == "thread"):
        if t == 0:
            if nbi == 0:
                nv.put_signal(dst, src, sig, Uint64(7), SET, pe)
            else:
                nv.put_signal_nbi(dst, src, sig, Uint64(7), SET, pe)
    elif cutlass.const_expr(scope == "warp"):
        if t < 32:
            if nbi == 0:
                nv.put_signal_warp(dst, src, sig, Uint64(7), SET, pe)
            else:
                nv.put_signal_nbi_warp(dst, src, sig, Uint64(7), SET, pe)
    else:
        if nbi == 0:
            nv.put_signal_block(dst, src, sig, Uint64(7), SET, pe)
        else:
            nv.put_signal_nbi_block(dst, src, sig, Uint64(7), SET, pe)
    if t == 0:
        sig[1] = nv.signal_wait_until(sig, nv.Cmp.CMP_EQ, Uint64(7))
        sig[2] = nv.signal_fetch(sig)


@cute.jit
def put_signal(dst: cute.Tensor, src: cute.Tensor, sig: cute.Tensor, pe: Int32, nbi: Int32,
               scope: cutlass.Constexpr):
    k_put_signal(dst, src, sig, pe, nbi, scope).launch(grid=[1, 1, 1], block=[THREADS, 1, 1])


for _s in SCOPES:
    case(f"put_signal_{_s}", put_signal, Tensor("float32", N), Tensor("float32", N),
         Tensor("uint64", 4), Scalar(Int32), Scalar(Int32), Const(_s))


@cute.kernel
def k_signal_add(sig: cute.Tensor, pe: Int32):
    nv.signal_op(sig, Uint64(1), nv.SignalOp.SIGNAL_ADD, pe)


@cute.jit
def signal_add(sig: cute.Tensor, pe: Int32):
    k_signal_add(sig, pe).launch(grid=[4, 1, 1], block=[128, 1, 1])


case("signal_add", signal_add, Tensor("uint64", 1), Scalar(Int32))


# --- atomics -------------------------------------------------------------------------------

AMO_THREADS = 4 * 128


@cute.kernel
def k_amo(counter: cute.Tensor, out: cute.Tensor, pe: Int32):
    i = _gid()
    bit = Uint64(1) << Uint64(i % 64)
    out[i] = nv.atomic_fetch_add(counter, 0, Uint64(1), pe)
    nv.atomic_add(counter, 1, Uint64(2), pe)
    nv.atomic_inc(counter, 2, pe)
    nv.atomic_fetch_inc(counter, 3, pe)
    nv.atomic_or(counter, 4, bit, pe)
    nv.atomic_xor(counter, 5, bit, pe)


@cute.jit
def amo(counter: cute.Tensor, out: cute.Tensor, pe: Int32):
    k_amo(counter, out, pe).launch(grid=[AMO_THREADS // 128, 1, 1], block=[128, 1, 1])


case("atomics", amo, Tensor("uint64", 8), Tensor("uint64", AMO_THREADS), Scalar(Int32))


@cute.kernel
def k_amo_scalar(x: cute.Tensor, out: cute.Tensor, pe: Int32):
    out[0] = nv.atomic_swap(x, 0, 11, pe)
    out[1] = nv.atomic_compare_swap(x, 0, 11, 12, pe)
    out[2] = nv.atomic_compare_swap(x, 0, 99, 13, pe)  # no match: stays 12
    out[3] = nv.atomic_fetch(x, 0, pe)
    nv.atomic_set(x, 1, 42, pe)
    out[4] = nv.atomic_fetch_and(x, 1, 0b111000, pe)
    out[5] = nv.atomic_fetch_or(x, 1, 0b1, pe)
    out[6] = nv.atomic_fetch_xor(x, 1, 0b11, pe)
    nv.atomic_and(x, 1, 0b10, pe)
    nv.quiet()
    out[7] = nv.atomic_fetch(x, 1, pe)


@cute.jit
def amo_scalar(x: cute.Tensor, out: cute.Tensor, pe: Int32):
    k_amo_scalar(x, out, pe).launch(grid=[1, 1, 1], block=[1, 1, 1])


case("atomics_scalar", amo_scalar, Tensor("int64", 2), Tensor("int64", 8), Scalar(Int32))


@cute.kernel
def k_float_add(x: cute.Tensor, pe: Int32):
    nv.atomic_add(x, Float32(0.5), pe)


@cute.jit
def float_add(x: cute.Tensor, pe: Int32):
    k_float_add(x, pe).launch(grid=[2, 1, 1], block=[128, 1, 1])


case("float_atomic_add", float_add, Tensor("float32", 1), Scalar(Int32),
     requires=("nvshmemx_float_atomic_add",))


# --- wait / test ---------------------------------------------------------------------------
# Thread 0 writes the peer's ivars with p (ivars[i] = i + 1), then waits on and tests its
# own (written by the left PE). idx receives the indices of wait_until_some.

@cute.kernel
def k_wait(ivars: cute.Tensor, out: cute.Tensor, idx: cute.Tensor, pe: Int32):
    if _tid() == 0:
        for i in cutlass.range_constexpr(8):
            nv.p(ivars, i, Int32(i + 1), pe)
        nv.quiet()
        GT, EQ, GE, LE = nv.Cmp.CMP_GT, nv.Cmp.CMP_EQ, nv.Cmp.CMP_GE, nv.Cmp.CMP_LE
        nv.wait_until_all(ivars, None, GT, 0)
        out[0] = Int64(nv.test_all(ivars, None, GT, 0))
        out[1] = Int64(nv.test(ivars, 3, EQ, 4))
        out[2] = Int64(nv.test_any(ivars, None, EQ, 3))
        nv.wait_until(ivars, 0, EQ, 1)
        out[3] = Int64(nv.wait_until_any(ivars, None, GE, 8))
        out[4] = Int64(nv.wait_until_some(ivars, idx, None, LE, 2))
        out[5] = Int64(idx[0] + 10 * idx[1])


@cute.jit
def wait(ivars: cute.Tensor, out: cute.Tensor, idx: cute.Tensor, pe: Int32):
    k_wait(ivars, out, idx, pe).launch(grid=[1, 1, 1], block=[32, 1, 1])


case("wait_test", wait, Tensor("int32", 8), Tensor("int64", 8), Tensor("uint64", 8), Scalar(Int32))


# ivars[i] = 2i written by the left PE; cmp_values[i] = i (local).

@cute.kernel
def k_wait_vector(ivars: cute.Tensor, cmp_values: cute.Tensor, out: cute.Tensor, idx: cute.Tensor,
                  idx2: cute.Tensor, pe: Int32):
    if _tid() == 0:
        for i in cutlass.range_constexpr(8):
            nv.p(ivars, i, Int32(2 * i), pe)
        nv.quiet()
        GT, EQ, GE = nv.Cmp.CMP_GT, nv.Cmp.CMP_EQ, nv.Cmp.CMP_GE
        nv.wait_until_all_vector(ivars, None, GE, cmp_values)
        out[0] = Int64(nv.test_all_vector(ivars, None, GE, cmp_values))
        out[1] = Int64(nv.wait_until_any_vector(ivars, None, GT, cmp_values))
        out[2] = Int64(nv.test_some_vector(ivars, idx, None, GT, cmp_values))
        out[3] = Int64(nv.test_any_vector(ivars, None, EQ, cmp_values))
        out[4] = Int64(nv.wait_until_some_vector(ivars, idx2, None, GE, cmp_values))
        out[5] = Int64(nv.test_some(ivars, idx2, None, GE, 0))


@cute.jit
def wait_vector(ivars: cute.Tensor, cmp_values: cute.Tensor, out: cute.Tensor, idx: cute.Tensor,
                idx2: cute.Tensor, pe: Int32):
    k_wait_vector(ivars, cmp_values, out, idx, idx2, pe).launch(grid=[1, 1, 1], block=[32, 1, 1])


case("wait_test_vector", wait_vector, Tensor("int32", 8), Tensor("int32", 8), Tensor("int64", 8),
     Tensor("uint64", 8), Tensor("uint64", 8), Scalar(Int32))


# --- ordering, barriers, queries ------------------------------------------------------------
# One launcher, two kernels: fence-ordered p's to the peer, then the barriers of one scope and
# the queries (out: barrier, team_sync, my_pe, n_pes, team_my_pe, team_n_pes, translate_pe).

@cute.kernel
def k_fence_order(x: cute.Tensor, pe: Int32):
    if _tid() == 0:
        nv.p(x, 0, Int32(1), pe)
        nv.fence()
        nv.p(x, 1, Int32(2), pe)
        nv.quiet()


@cute.kernel
def k_barriers(out: cute.Tensor, scope: cutlass.Constexpr):
    t = _tid()
    W = nv.Team.TEAM_WORLD
    if cutlass.const_expr(scope == "thread"):
        if t == 0:
            nv.barrier_all()
            nv.sync_all()
            out[0] = nv.barrier(W)
            out[1] = nv.team_sync(W)
    elif cutlass.const_expr(scope == "warp"):
        if t < 32:
            nv.barrier_all_warp()
            nv.sync_all_warp()
            r = nv.barrier_warp(W)
            s = nv.team_sync_warp(W)
            if t == 0:
                out[0] = r
                out[1] = s
    else:
        nv.barrier_all_block()
        nv.sync_all_block()
        r = nv.barrier_block(W)
        s = nv.team_sync_block(W)
        if t == 0:
            out[0] = r
            out[1] = s
    if t == 0:
        out[2] = nv.my_pe()
        out[3] = nv.n_pes()
        out[4] = nv.team_my_pe(W)
        out[5] = nv.team_n_pes(W)
        out[6] = nv.team_translate_pe(W, nv.n_pes() - 1, W)


@cute.jit
def barriers(x: cute.Tensor, out: cute.Tensor, pe: Int32, scope: cutlass.Constexpr):
    k_fence_order(x, pe).launch(grid=[1, 1, 1], block=[1, 1, 1])
    k_barriers(out, scope).launch(grid=[1, 1, 1], block=[128, 1, 1])


for _s in SCOPES:
    case(f"barriers_{_s}", barriers, Tensor("int32", 2), Tensor("int32", 8), Scalar(Int32),
         Const(_s))


@cute.kernel
def k_flush(x: cute.Tensor, pe: Int32):
    t = _tid()
    if t == 0:
        nv.p(x, 0, Int32(5), pe)
        nv.flush()
    if t < 32:
        nv.flush_warp()
    nv.flush_block()
    if t == 0:
        nv.quiet()


@cute.jit
def flush(x: cute.Tensor, pe: Int32):
    k_flush(x, pe).launch(grid=[1, 1, 1], block=[THREADS, 1, 1])


case("flush", flush, Tensor("int32", 1), Scalar(Int32),
     requires=("nvshmemx_flush", "nvshmemx_flush_warp", "nvshmemx_flush_block"))


@cute.kernel
def k_warpgroup_barrier(out: cute.Tensor):
    t = _tid()
    if t < 128:
        r = nv.barrier_warpgroup(nv.Team.TEAM_WORLD)
        if t == 0:
            out[0] = r


@cute.jit
def warpgroup_barrier(out: cute.Tensor):
    k_warpgroup_barrier(out).launch(grid=[1, 1, 1], block=[128, 1, 1])


case("barrier_warpgroup", warpgroup_barrier, Tensor("int32", 1))


# ptr's address in out[0]; through the peer view: x[0] = 123, x[1] = my PE, and out[1] = the
# peer's x[3] as loaded through the view.

@cute.kernel
def k_ptr(x: cute.Tensor, out: cute.Tensor, pe: Int32):
    out[0] = nv.ptr(x, pe).toint()
    view = nv.peer_tensor(x, pe)
    view[0] = Float32(123.0)
    view[1] = Float32(nv.my_pe())
    out[1] = Int64(view[3])


@cute.jit
def ptr(x: cute.Tensor, out: cute.Tensor, pe: Int32):
    k_ptr(x, out, pe).launch(grid=[1, 1, 1], block=[1, 1, 1])


case("ptr_peer", ptr, Tensor("float32", 4), Tensor("int64", 2), Scalar(Int32))


# --- collectives ----------------------------------------------------------------------------

COLL_KINDS = tuple(dict.fromkeys(s.op for s in shapes("cute", "coll")))


@cute.kernel
def k_coll(dst: cute.Tensor, src: cute.Tensor, kind: cutlass.Constexpr, scope: cutlass.Constexpr):
    t = _tid()
    W = nv.Team.TEAM_WORLD
    active = {"thread": 1, "warp": 32, "block": THREADS}[scope]
    sfx = {"thread": "", "warp": "_warp", "block": "_block"}[scope]
    fn = getattr(nv, kind + sfx)
    if t < active:
        if cutlass.const_expr(kind == "broadcast"):
            fn(W, dst, src, cute.size(src), 0)
        elif cutlass.const_expr(kind == "fcollect"):
            fn(W, dst, src, cute.size(src))
        else:
            fn(W, dst, src, cute.size(src) // nv.n_pes())


@cute.jit
def coll(dst: cute.Tensor, src: cute.Tensor, kind: cutlass.Constexpr, scope: cutlass.Constexpr):
    k_coll(dst, src, kind, scope).launch(grid=[1, 1, 1], block=[THREADS, 1, 1])


for _k in COLL_KINDS:
    for _s in SCOPES:
        case(f"{_k}_{_s}", coll, Tensor("int32", lambda p: COLL_N * p * p),
             Tensor("int32", lambda p: COLL_N * p), Const(_k), Const(_s), collective=True)


# One <op>_reduce per kernel: block-scope reductions are large, and several in one kernel
# take minutes to compile.

REDUCE_CASES = [(s.op[:-len("_reduce")], s.scope) for s in shapes("cute", "reduce")]


@cute.kernel
def k_reduce(dst: cute.Tensor, src: cute.Tensor, op: cutlass.Constexpr, scope: cutlass.Constexpr):
    active = {"thread": 1, "warp": 32, "block": THREADS}[scope]
    fn = getattr(nv, f"{op}_reduce" + {"thread": "", "warp": "_warp", "block": "_block"}[scope])
    if _tid() < active:
        fn(nv.Team.TEAM_WORLD, dst, src, cute.size(dst))


@cute.jit
def reduce(dst: cute.Tensor, src: cute.Tensor, op: cutlass.Constexpr, scope: cutlass.Constexpr):
    k_reduce(dst, src, op, scope).launch(grid=[1, 1, 1], block=[THREADS, 1, 1])


for _o, _s in REDUCE_CASES:
    case(f"{_o}_reduce_{_s}", reduce, Tensor("uint32", REDUCE_N), Tensor("uint32", REDUCE_N),
         Const(_o), Const(_s), collective=True)


@cute.kernel
def k_reducescatter(dst: cute.Tensor, src: cute.Tensor, scope: cutlass.Constexpr):
    active = {"thread": 1, "warp": 32, "block": THREADS}[scope]
    fn = getattr(nv, "sum_reducescatter" + {"thread": "", "warp": "_warp", "block": "_block"}[scope])
    if _tid() < active:
        fn(nv.Team.TEAM_WORLD, dst, src, cute.size(dst))


@cute.jit
def reducescatter(dst: cute.Tensor, src: cute.Tensor, scope: cutlass.Constexpr):
    k_reducescatter(dst, src, scope).launch(grid=[1, 1, 1], block=[THREADS, 1, 1])


for _s in SCOPES:
    case(f"sum_reducescatter_{_s}", reducescatter, Tensor("float32", COLL_N),
         Tensor("float32", lambda p: COLL_N * p), Const(_s), collective=True)


# --- the shapes of tests/gpu/shapes.py -> cases ---------------------------------------------


def call(shape, b, pe: int) -> tuple[str, list]:
    """(case name, runtime arguments) that run `shape` on arrays `b` (shapes.Bufs) towards `pe`."""
    k, s = shape.kind, shape.scope
    if k == "put_get":
        return f"rma_{s}", [b.dst, b.src, pe, RMA_OPS.index(shape.op)]
    if k == "put_count":
        return "put_count", [b.dst, b.src, shape.count, pe]
    if k == "put_width":
        return f"put_block_{shape.dtype}", [b.dst, b.src, pe]
    if k == "p_g":
        name = "p_g" if shape.dtype == "float32" else f"p_g_{shape.dtype}"
        return name, [b.dst, b.src, pe, ("p", "g").index(shape.op)]
    if k == "strided":
        return f"iput_iget_{s}", [b.dst, b.src, shape.count, pe, ("iput", "iget").index(shape.op)]
    if k == "put_signal":
        return f"put_signal_{s}", [b.dst, b.src, b.sig, pe, int(shape.nbi)]
    if k == "signal_add":
        return "signal_add", [b.sig, pe]
    if k == "atomics":
        return "atomics", [b.counter, b.out, pe]
    if k == "atomics_scalar":
        return "atomics_scalar", [b.x, b.out, pe]
    if k == "float_atomic_add":
        return "float_atomic_add", [b.x, pe]
    if k == "wait":
        return "wait_test", [b.ivars, b.out, b.idx, pe]
    if k == "wait_vector":
        return "wait_test_vector", [b.ivars, b.cmp_values, b.out, b.idx, b.idx2, pe]
    if k == "barriers":
        return f"barriers_{s}", [b.x, b.out, pe]
    if k == "flush":
        return "flush", [b.x, pe]
    if k == "barrier_warpgroup":
        return "barrier_warpgroup", [b.out]
    if k == "ptr_peer":
        return "ptr_peer", [b.x, b.out, pe]
    if k in ("coll", "reduce", "reducescatter"):
        return f"{shape.op}_{s}", [b.dst, b.src]
    raise KeyError(f"no CuTe case for {k}")
