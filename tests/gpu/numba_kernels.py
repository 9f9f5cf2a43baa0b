"""The Numba kernels of tests/gpu/test_numba_gpu.py, importable without a GPU or cupy.

:func:`launch` maps a shape of tests/gpu/shapes.py and its arrays to ``(kernel, grid, block,
args)``; the GPU test launches that, tests/test_gpu_shapes.py compiles every one to PTX on a
CPU (numpy arrays stand in for the device ones: the same Numba types).

One compile per kernel: a runtime argument (``scope``, ``nbi``, ``kind``) selects between
forms inside one kernel, except for the put/get forms and the reductions (one kernel each:
a block-scope reduction is large, and several in one kernel take minutes to compile).
"""
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32, int64, uint64

import nvshmem_dsl.numba as nv
from nvshmem_dsl import Cmp, SignalOp, Team

from shapes import N, SCOPES, coll_count

SCOPE = {s: i for i, s in enumerate(SCOPES)}


@lru_cache(maxsize=None)
def one_call(function: str):
    """A kernel calling nv.<function>(dst, src, pe) (put_warp, get_nbi_block ...) at its scope;
    the nbi forms are followed by quiet (by the calling threads; by thread 0 at block scope)."""
    fn = getattr(nv, function)
    threads = 32 if function.endswith("_warp") else 1 << 30 if function.endswith("_block") else 1

    def call(dst, src, pe):
        if cuda.threadIdx.x < threads:
            fn(dst, src, pe)

    def call_quiet(dst, src, pe):
        if cuda.threadIdx.x < threads:
            fn(dst, src, pe)
            if threads == 32 or cuda.threadIdx.x == 0:
                nv.quiet()

    kernel = call_quiet if "_nbi" in function else call
    kernel.__name__ = f"k_{function}"
    return cuda.jit(kernel)


@cuda.jit
def k_put_count(dst, src, n, pe):
    nv.put_block(dst, src, n, pe)


@cuda.jit
def k_put_window(dst, src, start, n, pe):
    """put_block of window [start, start + n) of both arrays."""
    nv.put_block(nv.window(dst, start, n), nv.window(src, start, n), pe)


@cuda.jit
def k_window_sizes(sizes, x, start, n):
    if cuda.threadIdx.x == 0:
        sizes[0] = nv.window(x, start, n).size
        sizes[1] = nv.window(x, -5, 10).size  # negative start: empty
        sizes[2] = nv.window(x, N - 3, 10).size  # n clamped to what is left
        sizes[3] = nv.window(x, N + 8, 1).size  # start past the end: empty


@cuda.jit
def k_put_block(dst, src, pe):
    nv.put_block(dst, src, pe)


@cuda.jit
def k_p(dst, src, pe):
    i = cuda.grid(1)
    if i < dst.size:
        nv.p(dst, i, src[i], pe)


@cuda.jit
def k_g(dst, src, pe):
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = nv.g(src, i, pe)


@cuda.jit
def k_iput(dst, src, n, pe, scope):
    if scope == 0:
        if cuda.threadIdx.x == 0:
            nv.iput(dst, src, 2, 3, n, pe)
    elif scope == 1:
        if cuda.threadIdx.x < 32:
            nv.iput_warp(dst, src, 2, 3, n, pe)
    else:
        nv.iput_block(dst, src, 2, 3, n, pe)


@cuda.jit
def k_iget(dst, src, n, pe, scope):
    if scope == 0:
        if cuda.threadIdx.x == 0:
            nv.iget(dst, src, 2, 3, n, pe)
    elif scope == 1:
        if cuda.threadIdx.x < 32:
            nv.iget_warp(dst, src, 2, 3, n, pe)
    else:
        nv.iget_block(dst, src, 2, 3, n, pe)


@cuda.jit
def k_put_signal(dst, src, sig, pe, scope, nbi):
    active = (scope == 0 and cuda.threadIdx.x == 0) or (scope == 1 and cuda.threadIdx.x < 32) or scope == 2
    if active:
        if scope == 0:
            if nbi:
                nv.put_signal_nbi(dst, src, sig, 7, SignalOp.SIGNAL_SET, pe)
            else:
                nv.put_signal(dst, src, sig, 7, SignalOp.SIGNAL_SET, pe)
        elif scope == 1:
            if nbi:
                nv.put_signal_nbi_warp(dst, src, sig, 7, SignalOp.SIGNAL_SET, pe)
            else:
                nv.put_signal_warp(dst, src, sig, 7, SignalOp.SIGNAL_SET, pe)
        else:
            if nbi:
                nv.put_signal_nbi_block(dst, src, sig, 7, SignalOp.SIGNAL_SET, pe)
            else:
                nv.put_signal_block(dst, src, sig, 7, SignalOp.SIGNAL_SET, pe)
    if cuda.threadIdx.x == 0:
        got = nv.signal_wait_until(sig, Cmp.CMP_EQ, 7)
        sig[1] = got
        sig[2] = nv.signal_fetch(sig)


@cuda.jit
def k_signal_add(sig, pe):
    nv.signal_op(sig, 1, SignalOp.SIGNAL_ADD, pe)


@cuda.jit
def k_amo(counter, out, pe):
    i = cuda.grid(1)
    out[i] = nv.atomic_fetch_add(counter, 0, 1, pe)
    nv.atomic_add(counter, 1, 2, pe)
    nv.atomic_inc(counter, 2, pe)
    nv.atomic_fetch_inc(counter, 3, pe)
    nv.atomic_or(counter, 4, uint64(1) << uint64(i % 64), pe)
    nv.atomic_xor(counter, 5, uint64(1) << uint64(i % 64), pe)


@cuda.jit
def k_amo_scalar(x, out, pe):
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


@cuda.jit
def k_float_add(x, pe):
    nv.atomic_add(x, float32(0.5), pe)


@cuda.jit
def k_wait(ivars, out, idx, pe):
    if cuda.threadIdx.x == 0:
        for i in range(ivars.size):
            nv.p(ivars, i, int32(i + 1), pe)
        nv.quiet()
        nv.wait_until_all(ivars, None, Cmp.CMP_GT, 0)
        out[0] = nv.test_all(ivars, None, Cmp.CMP_GT, 0)
        out[1] = nv.test(ivars, 3, Cmp.CMP_EQ, 4)
        out[2] = nv.test_any(ivars, None, Cmp.CMP_EQ, 3)
        nv.wait_until(ivars, 0, Cmp.CMP_EQ, 1)
        out[3] = nv.wait_until_any(ivars, None, Cmp.CMP_GE, 8)
        out[4] = nv.wait_until_some(ivars, idx, None, Cmp.CMP_LE, 2)
        out[5] = idx[0] + 10 * idx[1]


@cuda.jit
def k_wait_vector(ivars, cmp_values, out, idx, idx2, pe):
    if cuda.threadIdx.x == 0:
        for i in range(ivars.size):
            nv.p(ivars, i, int32(2 * i), pe)
        nv.quiet()
        nv.wait_until_all_vector(ivars, None, Cmp.CMP_GE, cmp_values)
        out[0] = nv.test_all_vector(ivars, None, Cmp.CMP_GE, cmp_values)
        out[1] = nv.wait_until_any_vector(ivars, None, Cmp.CMP_GT, cmp_values)
        out[2] = nv.test_some_vector(ivars, idx, None, Cmp.CMP_GT, cmp_values)
        out[3] = nv.test_any_vector(ivars, None, Cmp.CMP_EQ, cmp_values)
        out[4] = nv.wait_until_some_vector(ivars, idx2, None, Cmp.CMP_GE, cmp_values)
        out[5] = nv.test_some(ivars, idx2, None, Cmp.CMP_GE, 0)


@cuda.jit
def k_fence_order(x, pe):
    if cuda.threadIdx.x == 0:
        nv.p(x, 0, int32(1), pe)
        nv.fence()
        nv.p(x, 1, int32(2), pe)
        nv.quiet()


@cuda.jit
def k_barriers(out, scope):
    t = cuda.threadIdx.x
    if scope == 0:
        if t == 0:
            nv.barrier_all()
            nv.sync_all()
            out[0] = nv.barrier(Team.TEAM_WORLD)
            out[1] = nv.team_sync(Team.TEAM_WORLD)
    elif scope == 1:
        if t < 32:
            nv.barrier_all_warp()
            nv.sync_all_warp()
            r = nv.barrier_warp(Team.TEAM_WORLD)
            s = nv.team_sync_warp(Team.TEAM_WORLD)
            if t == 0:
                out[0] = r
                out[1] = s
    else:
        nv.barrier_all_block()
        nv.sync_all_block()
        r = nv.barrier_block(Team.TEAM_WORLD)
        s = nv.team_sync_block(Team.TEAM_WORLD)
        if t == 0:
            out[0] = r
            out[1] = s
    if t == 0:
        out[2] = nv.my_pe()
        out[3] = nv.n_pes()
        out[4] = nv.team_my_pe(Team.TEAM_WORLD)
        out[5] = nv.team_n_pes(Team.TEAM_WORLD)
        out[6] = nv.team_translate_pe(Team.TEAM_WORLD, nv.n_pes() - 1, Team.TEAM_WORLD)


@cuda.jit
def k_flush(x, pe):
    t = cuda.threadIdx.x
    if t == 0:
        nv.p(x, 0, int32(5), pe)
        nv.flush()
    if t < 32:
        nv.flush_warp()
    nv.flush_block()
    if t == 0:
        nv.quiet()


@cuda.jit
def k_warpgroup_barrier(out):
    if cuda.threadIdx.x < 128:
        r = nv.barrier_warpgroup(Team.TEAM_WORLD)
        if cuda.threadIdx.x == 0:
            out[0] = r


@cuda.jit
def k_ptr(x, out, pe):
    out[0] = nv.ptr(x, pe) != 0
    view = nv.peer(x, pe)
    view[0] = 123.0
    view[1] = float32(nv.my_pe())
    out[1] = int64(view[3])


@cuda.jit
def k_coll(kind, scope, dst, src, n):
    t = cuda.threadIdx.x
    if scope == 0 and t != 0:
        return
    if scope == 1 and t >= 32:
        return
    if kind == 0:
        if scope == 0:
            nv.broadcast(Team.TEAM_WORLD, dst, src, n, 0)
        elif scope == 1:
            nv.broadcast_warp(Team.TEAM_WORLD, dst, src, n, 0)
        else:
            nv.broadcast_block(Team.TEAM_WORLD, dst, src, n, 0)
    elif kind == 1:
        if scope == 0:
            nv.fcollect(Team.TEAM_WORLD, dst, src, n)
        elif scope == 1:
            nv.fcollect_warp(Team.TEAM_WORLD, dst, src, n)
        else:
            nv.fcollect_block(Team.TEAM_WORLD, dst, src, n)
    elif kind == 2:
        if scope == 0:
            nv.alltoall(Team.TEAM_WORLD, dst, src, n)
        elif scope == 1:
            nv.alltoall_warp(Team.TEAM_WORLD, dst, src, n)
        else:
            nv.alltoall_block(Team.TEAM_WORLD, dst, src, n)


COLL_KINDS = ("broadcast", "fcollect", "alltoall")


@lru_cache(maxsize=None)
def reduce_kernel(function: str):
    """A kernel calling nv.<function> (sum_reduce_warp ...): one C function per kernel."""
    fn = getattr(nv, function)
    threads = 32 if function.endswith("_warp") else 64 if function.endswith("_block") else 1

    def kernel(dst, src):
        if cuda.threadIdx.x < threads:
            fn(Team.TEAM_WORLD, dst, src, dst.size)
    kernel.__name__ = f"k_{function}"
    return cuda.jit(kernel)


@cuda.jit
def k_reducescatter(scope, dst, src):
    t = cuda.threadIdx.x
    if scope == 0 and t != 0:
        return
    if scope == 1 and t >= 32:
        return
    if scope == 0:
        nv.sum_reducescatter(Team.TEAM_WORLD, dst, src, dst.size)
    elif scope == 1:
        nv.sum_reducescatter_warp(Team.TEAM_WORLD, dst, src, dst.size)
    else:
        nv.sum_reducescatter_block(Team.TEAM_WORLD, dst, src, dst.size)


@cuda.jit
def k_all_to_all_signals(dst, src, sig, n):
    """Thread t sends this PE's block to PE t (slot my_pe) with signal word my_pe set to my_pe+1
    there; then thread 0 waits until every PE's signal arrived here."""
    t = cuda.threadIdx.x
    me = nv.my_pe()
    if t < nv.n_pes():
        nv.put_signal_nbi(nv.window(dst, me * n, n), nv.window(src, 0, n), nv.window(sig, me, 1),
                          uint64(me + 1), SignalOp.SIGNAL_SET, t)
        nv.quiet()
    if t == 0:
        nv.wait_until_all(nv.window(sig, 0, nv.n_pes()), None, Cmp.CMP_NE, uint64(0))


@cuda.jit
def k_team_ops(team, dst, src, gathered, out):
    """On a team made on the host: queries, an all-reduce and an all-gather (thread scope)."""
    if cuda.threadIdx.x == 0:
        out[0] = nv.team_my_pe(team)
        out[1] = nv.team_n_pes(team)
        out[2] = nv.team_translate_pe(team, 0, Team.TEAM_WORLD)
        out[3] = nv.sum_reduce(team, dst, src, src.size)
        out[4] = nv.fcollect(team, gathered, src, src.size)
        out[5] = nv.team_sync(team)


def launch(shape, b, pe, npes, team=0):
    """(kernel, grid, block, args) of `shape` on arrays `b` (shapes.Bufs) towards PE `pe`."""
    k, s = shape.kind, SCOPE[shape.scope]
    g, t = shape.grid, shape.block
    if k in ("put_get",):
        return one_call(shape.function), g, t, (b.dst, b.src, pe)
    if k == "put_count":
        return k_put_count, g, t, (b.dst, b.src, shape.count, pe)
    if k == "window":
        return k_put_window, g, t, (b.dst, b.src, 300, shape.count, pe)
    if k == "window_sizes":
        return k_window_sizes, g, t, (b.sizes, b.x, 300, shape.count)
    if k == "put_width":
        return k_put_block, g, t, (b.dst, b.src, pe)
    if k == "p_g":
        return (k_p if shape.op == "p" else k_g), g, t, (b.dst, b.src, pe)
    if k == "strided":
        return (k_iput if shape.op == "iput" else k_iget), g, t, (b.dst, b.src, shape.count, pe, s)
    if k == "put_signal":
        return k_put_signal, g, t, (b.dst, b.src, b.sig, pe, s, shape.nbi)
    if k == "signal_add":
        return k_signal_add, g, t, (b.sig, pe)
    if k == "atomics":
        return k_amo, g, t, (b.counter, b.out, pe)
    if k == "atomics_scalar":
        return k_amo_scalar, g, t, (b.x, b.out, pe)
    if k == "float_atomic_add":
        return k_float_add, g, t, (b.x, pe)
    if k == "wait":
        return k_wait, g, t, (b.ivars, b.out, b.idx, pe)
    if k == "wait_vector":
        return k_wait_vector, g, t, (b.ivars, b.cmp_values, b.out, b.idx, b.idx2, pe)
    if k == "barriers":  # after k_fence_order[1, 1](b.x, pe): see fence_launch
        return k_barriers, g, t, (b.out, s)
    if k == "flush":
        return k_flush, g, t, (b.x, pe)
    if k == "barrier_warpgroup":
        return k_warpgroup_barrier, g, t, (b.out,)
    if k == "ptr_peer":
        return k_ptr, g, t, (b.x, b.out, pe)
    if k == "coll":
        return k_coll, g, t, (COLL_KINDS.index(shape.op), s, b.dst, b.src, coll_count(shape, npes))
    if k == "reduce":
        return reduce_kernel(shape.function), g, t, (b.dst, b.src)
    if k == "reducescatter":
        return k_reducescatter, g, t, (s, b.dst, b.src)
    if k == "all_to_all_signals":
        return k_all_to_all_signals, g, max(32, npes), (b.dst, b.src, b.sig, b.src.size)
    if k == "team":
        return k_team_ops, g, t, (np.int32(team), b.dst, b.src, b.gathered, b.out)
    raise KeyError(k)


def fence_launch(b, pe):
    """The kernel before k_barriers: fence-ordered p's to the peer."""
    return k_fence_order, 1, 1, (b.x, pe)

