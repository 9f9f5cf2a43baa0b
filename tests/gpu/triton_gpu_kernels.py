"""The Triton kernels of tests/gpu/test_triton_gpu.py, importable without a GPU or torch.

(Not ``triton_kernels.py``: tests/triton_kernels.py has that name, and tests/gpu comes first on
sys.path when both directories are collected.)

:func:`launch` maps a shape of tests/gpu/shapes.py and its arrays to ``(kernel, grid,
num_warps, args)`` (constexpr arguments among ``args``, by position); the GPU test launches
that, tests/test_gpu_shapes.py compiles every one to PTX on a CPU.

Triton programs: a thread-scope call is made by thread 0 of the program, a warp-scope one by
warp 0, a block-scope one by every thread (see nvshmem_dsl.triton); a shape's block of B
threads is a program of max(1, B // 32) warps, and "every thread calls once" shapes are a grid
of programs, one call each.
"""
import triton
import triton.language as tl

import nvshmem_dsl.triton as nv

from shapes import N, REDUCERS, SCOPES, coll_count

SCOPE = {s: i for i, s in enumerate(SCOPES)}


@triton.jit
def k_put(dst, src, n, pe, SCOPE: tl.constexpr, NBI: tl.constexpr):
    if SCOPE == 0:
        if NBI:
            nv.put_nbi(dst, src, n, pe)
        else:
            nv.put(dst, src, n, pe)
    elif SCOPE == 1:
        if NBI:
            nv.put_nbi_warp(dst, src, n, pe)
        else:
            nv.put_warp(dst, src, n, pe)
    else:
        if NBI:
            nv.put_nbi_block(dst, src, n, pe)
        else:
            nv.put_block(dst, src, n, pe)
    if NBI:
        nv.quiet()


@triton.jit
def k_get(dst, src, n, pe, SCOPE: tl.constexpr, NBI: tl.constexpr):
    if SCOPE == 0:
        if NBI:
            nv.get_nbi(dst, src, n, pe)
        else:
            nv.get(dst, src, n, pe)
    elif SCOPE == 1:
        if NBI:
            nv.get_nbi_warp(dst, src, n, pe)
        else:
            nv.get_warp(dst, src, n, pe)
    else:
        if NBI:
            nv.get_nbi_block(dst, src, n, pe)
        else:
            nv.get_block(dst, src, n, pe)
    if NBI:
        nv.quiet()


@triton.jit
def k_put_offset(dst, src, start, n, pe):
    nv.put_block(dst + start, src + start, n, pe)


@triton.jit
def k_p(dst, src, pe):
    i = tl.program_id(0)
    nv.p(dst + i, tl.load(src + i), pe)


@triton.jit
def k_g(dst, src, pe):
    i = tl.program_id(0)
    tl.store(dst + i, nv.g(src + i, pe))


@triton.jit
def k_iput(dst, src, n, pe, SCOPE: tl.constexpr):
    if SCOPE == 0:
        nv.iput(dst, src, 2, 3, n, pe)
    elif SCOPE == 1:
        nv.iput_warp(dst, src, 2, 3, n, pe)
    else:
        nv.iput_block(dst, src, 2, 3, n, pe)


@triton.jit
def k_iget(dst, src, n, pe, SCOPE: tl.constexpr):
    if SCOPE == 0:
        nv.iget(dst, src, 2, 3, n, pe)
    elif SCOPE == 1:
        nv.iget_warp(dst, src, 2, 3, n, pe)
    else:
        nv.iget_block(dst, src, 2, 3, n, pe)


@triton.jit
def k_put_signal(dst, src, n, sig, pe, SCOPE: tl.constexpr, NBI: tl.constexpr):
    if SCOPE == 0:
        if NBI:
            nv.put_signal_nbi(dst, src, n, sig, 7, nv.SIGNAL_SET, pe)
        else:
            nv.put_signal(dst, src, n, sig, 7, nv.SIGNAL_SET, pe)
    elif SCOPE == 1:
        if NBI:
            nv.put_signal_nbi_warp(dst, src, n, sig, 7, nv.SIGNAL_SET, pe)
        else:
            nv.put_signal_warp(dst, src, n, sig, 7, nv.SIGNAL_SET, pe)
    else:
        if NBI:
            nv.put_signal_nbi_block(dst, src, n, sig, 7, nv.SIGNAL_SET, pe)
        else:
            nv.put_signal_block(dst, src, n, sig, 7, nv.SIGNAL_SET, pe)
    got = nv.signal_wait_until(sig, nv.CMP_EQ, 7)
    tl.store(sig + 1, got)
    tl.store(sig + 2, nv.signal_fetch(sig))


@triton.jit
def k_signal_add(sig, pe):
    nv.signal_op(sig, 1, nv.SIGNAL_ADD, pe)


@triton.jit
def k_amo(counter, out, pe):
    i = tl.program_id(0)
    tl.store(out + i, nv.atomic_fetch_add(counter, 1, pe))
    nv.atomic_add(counter + 1, 2, pe)
    nv.atomic_inc(counter + 2, pe)
    nv.atomic_fetch_inc(counter + 3, pe)
    bit = (i * 0 + 1).to(tl.uint64) << (i % 64).to(tl.uint64)
    nv.atomic_or(counter + 4, bit, pe)
    nv.atomic_xor(counter + 5, bit, pe)


@triton.jit
def k_amo_scalar(x, out, pe):
    tl.store(out + 0, nv.atomic_swap(x, 11, pe))
    tl.store(out + 1, nv.atomic_compare_swap(x, 11, 12, pe))
    tl.store(out + 2, nv.atomic_compare_swap(x, 99, 13, pe))  # no match: stays 12
    tl.store(out + 3, nv.atomic_fetch(x, pe))
    nv.atomic_set(x + 1, 42, pe)
    tl.store(out + 4, nv.atomic_fetch_and(x + 1, 0b111000, pe))
    tl.store(out + 5, nv.atomic_fetch_or(x + 1, 0b1, pe))
    tl.store(out + 6, nv.atomic_fetch_xor(x + 1, 0b11, pe))
    nv.atomic_and(x + 1, 0b10, pe)
    nv.quiet()
    tl.store(out + 7, nv.atomic_fetch(x + 1, pe))


@triton.jit
def k_float_add(x, pe):
    nv.atomic_add(x, 0.5, pe)


@triton.jit
def k_wait_all(ivars, idx, out, pe):
    for i in range(8):
        nv.p(ivars + i, i + 1, pe)
    nv.quiet()
    nv.wait_until_all(ivars, 8, None, nv.CMP_GT, 0)
    tl.store(out + 0, nv.test_all(ivars, 8, None, nv.CMP_GT, 0))
    tl.store(out + 1, nv.test(ivars + 3, nv.CMP_EQ, 4))
    tl.store(out + 2, nv.test_any(ivars, 8, None, nv.CMP_EQ, 3))
    nv.wait_until(ivars, nv.CMP_EQ, 1)
    tl.store(out + 3, nv.wait_until_any(ivars, 8, None, nv.CMP_GE, 8))
    tl.store(out + 4, nv.wait_until_some(ivars, 8, idx, None, nv.CMP_LE, 2))
    tl.store(out + 5, tl.load(idx) + 10 * tl.load(idx + 1))


@triton.jit
def k_wait_vector(ivars, cmp_values, idx, idx2, out, pe):
    for i in range(8):
        nv.p(ivars + i, 2 * i, pe)
    nv.quiet()
    nv.wait_until_all_vector(ivars, 8, None, nv.CMP_GE, cmp_values)
    tl.store(out + 0, nv.test_all_vector(ivars, 8, None, nv.CMP_GE, cmp_values))
    tl.store(out + 1, nv.wait_until_any_vector(ivars, 8, None, nv.CMP_GT, cmp_values))
    tl.store(out + 2, nv.test_some_vector(ivars, 8, idx, None, nv.CMP_GT, cmp_values))
    tl.store(out + 3, nv.test_any_vector(ivars, 8, None, nv.CMP_EQ, cmp_values))
    tl.store(out + 4, nv.wait_until_some_vector(ivars, 8, idx2, None, nv.CMP_GE, cmp_values))
    tl.store(out + 5, nv.test_some(ivars, 8, idx2, None, nv.CMP_GE, 0))


@triton.jit
def k_fence_order(x, pe):
    nv.p(x, 1, pe)
    nv.fence()
    nv.p(x + 1, 2, pe)
    nv.quiet()


@triton.jit
def k_barriers(out, SCOPE: tl.constexpr):
    if SCOPE == 0:
        nv.barrier_all()
        nv.sync_all()
        tl.store(out + 0, nv.barrier(nv.TEAM_WORLD))
        tl.store(out + 1, nv.team_sync(nv.TEAM_WORLD))
    elif SCOPE == 1:
        nv.barrier_all_warp()
        nv.sync_all_warp()
        tl.store(out + 0, nv.barrier_warp(nv.TEAM_WORLD))
        tl.store(out + 1, nv.team_sync_warp(nv.TEAM_WORLD))
    else:
        nv.barrier_all_block()
        nv.sync_all_block()
        tl.store(out + 0, nv.barrier_block(nv.TEAM_WORLD))
        tl.store(out + 1, nv.team_sync_block(nv.TEAM_WORLD))
    tl.store(out + 2, nv.my_pe())
    tl.store(out + 3, nv.n_pes())
    tl.store(out + 4, nv.team_my_pe(nv.TEAM_WORLD))
    tl.store(out + 5, nv.team_n_pes(nv.TEAM_WORLD))
    tl.store(out + 6, nv.team_translate_pe(nv.TEAM_WORLD, nv.n_pes() - 1, nv.TEAM_WORLD))


@triton.jit
def k_flush(x, pe):
    nv.p(x, 5, pe)
    nv.flush()
    nv.flush_warp()
    nv.flush_block()
    nv.quiet()


@triton.jit
def k_warpgroup_barrier(out):
    tl.store(out, nv.barrier_warpgroup(nv.TEAM_WORLD))


@triton.jit
def k_ptr(x, out, pe):
    view = nv.peer(x, pe)
    tl.store(out, (view.to(tl.int64) != 0).to(tl.int64))
    tl.store(view, 123.0)
    tl.store(view + 1, nv.my_pe().to(tl.float32))
    tl.store(out + 1, tl.load(view + 3).to(tl.int64))


@triton.jit
def k_coll(dst, src, n, KIND: tl.constexpr, SCOPE: tl.constexpr):
    if KIND == 0:
        if SCOPE == 0:
            nv.broadcast(nv.TEAM_WORLD, dst, src, n, 0)
        elif SCOPE == 1:
            nv.broadcast_warp(nv.TEAM_WORLD, dst, src, n, 0)
        else:
            nv.broadcast_block(nv.TEAM_WORLD, dst, src, n, 0)
    elif KIND == 1:
        if SCOPE == 0:
            nv.fcollect(nv.TEAM_WORLD, dst, src, n)
        elif SCOPE == 1:
            nv.fcollect_warp(nv.TEAM_WORLD, dst, src, n)
        else:
            nv.fcollect_block(nv.TEAM_WORLD, dst, src, n)
    else:
        if SCOPE == 0:
            nv.alltoall(nv.TEAM_WORLD, dst, src, n)
        elif SCOPE == 1:
            nv.alltoall_warp(nv.TEAM_WORLD, dst, src, n)
        else:
            nv.alltoall_block(nv.TEAM_WORLD, dst, src, n)


COLL_KINDS = ("broadcast", "fcollect", "alltoall")


@triton.jit
def k_reduce(dst, src, n, OP: tl.constexpr, SCOPE: tl.constexpr):
    """<op>_reduce at SCOPE (OP: the index in shapes.REDUCERS); the table's: every op at thread
    scope, sum at warp and block, xor at block."""
    if SCOPE == 0:
        if OP == 0:
            nv.sum_reduce(nv.TEAM_WORLD, dst, src, n)
        elif OP == 1:
            nv.max_reduce(nv.TEAM_WORLD, dst, src, n)
        elif OP == 2:
            nv.min_reduce(nv.TEAM_WORLD, dst, src, n)
        elif OP == 3:
            nv.prod_reduce(nv.TEAM_WORLD, dst, src, n)
        elif OP == 4:
            nv.and_reduce(nv.TEAM_WORLD, dst, src, n)
        elif OP == 5:
            nv.or_reduce(nv.TEAM_WORLD, dst, src, n)
        else:
            nv.xor_reduce(nv.TEAM_WORLD, dst, src, n)
    elif SCOPE == 1:
        nv.sum_reduce_warp(nv.TEAM_WORLD, dst, src, n)
    else:
        if OP == 0:
            nv.sum_reduce_block(nv.TEAM_WORLD, dst, src, n)
        else:
            nv.xor_reduce_block(nv.TEAM_WORLD, dst, src, n)


@triton.jit
def k_reducescatter(dst, src, n, SCOPE: tl.constexpr):
    if SCOPE == 0:
        nv.sum_reducescatter(nv.TEAM_WORLD, dst, src, n)
    elif SCOPE == 1:
        nv.sum_reducescatter_warp(nv.TEAM_WORLD, dst, src, n)
    else:
        nv.sum_reducescatter_block(nv.TEAM_WORLD, dst, src, n)


@triton.jit
def k_all_to_all_signals(dst, src, sig, n):
    """This PE's block to every PE (slot my_pe there) with signal word my_pe set to my_pe+1;
    then wait until every PE's signal arrived here."""
    me = nv.my_pe()
    npes = nv.n_pes()
    for t in range(npes):
        nv.put_signal_nbi(dst + me * n, src, n, sig + me, (me + 1).to(tl.uint64), nv.SIGNAL_SET, t)
    nv.quiet()
    nv.wait_until_all(sig, npes, None, nv.CMP_NE, 0)


@triton.jit
def k_team_ops(team, dst, src, gathered, n, out):
    """On a team made on the host: queries, an all-reduce and an all-gather (thread scope)."""
    tl.store(out + 0, nv.team_my_pe(team))
    tl.store(out + 1, nv.team_n_pes(team))
    tl.store(out + 2, nv.team_translate_pe(team, 0, nv.TEAM_WORLD))
    tl.store(out + 3, nv.sum_reduce(team, dst, src, n))
    tl.store(out + 4, nv.fcollect(team, gathered, src, n))
    tl.store(out + 5, nv.team_sync(team))


# --- autotuning and Triton's cache (tests/gpu/test_triton_gpu.py::test_autotuned_*, ::test_*_cache_*)

#: The configs both autotuned kernels try: (BLOCK, num_warps).
TUNE_CONFIGS = ((256, 1), (1024, 4), (2048, 8))


def tune_configs():
    return [triton.Config({"BLOCK": b}, num_warps=w) for b, w in TUNE_CONFIGS]


@triton.autotune(configs=tune_configs(), key=["n"])
@triton.jit
def k_put_tuned(dst, src, n, pe, BLOCK: tl.constexpr):
    """One-sided only (each PE may keep its own config): Triton's own timing will do."""
    start = tl.program_id(0) * BLOCK
    nv.put_block(dst + start, src + start, tl.minimum(n - start, BLOCK), pe)


@triton.autotune(configs=tune_configs(), key=["n"], do_bench=nv.do_bench(warmup=2, reps=5))
@triton.jit
def k_fcollect_tuned(dst, src, n, tag, BLOCK: tl.constexpr):
    """A collective: every PE must launch each config as often as the others and keep the same
    one (nv.do_bench); ``tag`` says which config ran."""
    nv.fcollect_block(nv.TEAM_WORLD, dst, src, n)
    tl.store(tag, BLOCK)


@triton.jit
def k_put_from_cache(dst, src, n, pe):
    """Launched, then launched again from Triton's on-disk cache (no other test compiles it)."""
    nv.put_block(dst, src, n, pe)


@triton.jit
def k_put_compiled(dst, src, n, pe):
    """Launched from a function torch.compile compiles: its only writes are NVSHMEM calls."""
    nv.put_block(dst, src, n, pe)


@triton.jit
def k_get_compiled(dst, src, n, pe):
    """The same, its result read by the compiled function after it."""
    nv.get_block(dst, src, n, pe)


def launch(shape, b, pe, npes, team=0):
    """(kernel, grid, num_warps, args) of `shape` on arrays `b` (shapes.Bufs) towards PE `pe`."""
    k, s = shape.kind, SCOPE[shape.scope]
    grid = shape.calls if shape.per_thread else shape.grid
    warps = 1 if shape.per_thread else max(1, shape.block // 32)

    def go(kernel, *args):
        return kernel, grid, warps, args

    if k == "put_get":
        return go(k_put if shape.op.startswith("put") else k_get, b.dst, b.src, N, pe, s, shape.nbi)
    if k in ("put_count", "put_width"):
        return go(k_put, b.dst, b.src, shape.count or N, pe, s, False)
    if k == "window":
        return go(k_put_offset, b.dst, b.src, 300, shape.count, pe)
    if k == "p_g":
        return go(k_p if shape.op == "p" else k_g, b.dst, b.src, pe)
    if k == "strided":
        return go(k_iput if shape.op == "iput" else k_iget, b.dst, b.src, shape.count, pe, s)
    if k == "put_signal":
        return go(k_put_signal, b.dst, b.src, N, b.sig, pe, s, shape.nbi)
    if k == "signal_add":
        return go(k_signal_add, b.sig, pe)
    if k == "atomics":
        return go(k_amo, b.counter, b.out, pe)
    if k == "atomics_scalar":
        return go(k_amo_scalar, b.x, b.out, pe)
    if k == "float_atomic_add":
        return go(k_float_add, b.x, pe)
    if k == "wait":
        return go(k_wait_all, b.ivars, b.idx, b.out, pe)
    if k == "wait_vector":
        return go(k_wait_vector, b.ivars, b.cmp_values, b.idx, b.idx2, b.out, pe)
    if k == "barriers":  # after fence_launch
        return go(k_barriers, b.out, s)
    if k == "flush":
        return go(k_flush, b.x, pe)
    if k == "barrier_warpgroup":
        return go(k_warpgroup_barrier, b.out)
    if k == "ptr_peer":
        return go(k_ptr, b.x, b.out, pe)
    if k == "coll":
        return go(k_coll, b.dst, b.src, coll_count(shape, npes), COLL_KINDS.index(shape.op), s)
    if k == "reduce":
        return go(k_reduce, b.dst, b.src, b.dst.shape[0], list(REDUCERS).index(shape.op[:-len("_reduce")]), s)
    if k == "reducescatter":
        return go(k_reducescatter, b.dst, b.src, b.dst.shape[0], s)
    if k == "all_to_all_signals":
        return go(k_all_to_all_signals, b.dst, b.src, b.sig, b.src.shape[0])
    if k == "team":
        return go(k_team_ops, team, b.dst, b.src, b.gathered, b.src.shape[0], b.out)
    raise KeyError(k)


def fence_launch(b, pe):
    """The kernel before k_barriers: fence-ordered p's to the peer."""
    return k_fence_order, 1, 1, (b.x, pe)
