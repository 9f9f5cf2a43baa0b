"""Numba device API on GPUs, any number of PEs (1, 2, 4, 8, ...; tests that need more say so and
skip): every family at least once per scope, checked element by
element against a host reference on random data, outputs poisoned before each run.

Run on every PE at once: `python -m nvshmem_dsl.run -n 2 -m pytest -m gpu tests/gpu`
(or under mpirun). Every PE runs the same tests in the same order (allocations and
barriers are collective) and checks its own results.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
from numba import cuda, float32, int32, uint64  # noqa: E402

import nvshmem_dsl as nvshmem  # noqa: E402
import nvshmem_dsl.numba as nv  # noqa: E402
from nvshmem_dsl import Cmp, SignalOp, Team  # noqa: E402

POISON = -7777.0
N = 1024


@pytest.fixture(scope="module", autouse=True)
def session():
    if not nvshmem.is_initialized():
        nvshmem.init()
    if nvshmem.info()["limited_mpg"]:
        pytest.skip("limited MPG run (several PEs per GPU without MPS): no collectives; "
                    "tests/gpu/test_limited_mpg.py covers this mode")
    yield
    nvshmem.barrier_all()


def requires(*symbols):
    """Skip when the installed NVSHMEM's device library lacks one of `symbols` (NVSHMEM 3.4
    has no float/double/half atomic_add and no flush, for example)."""
    from nvshmem_dsl import bitcode
    dev = cuda.get_current_device()
    have = bitcode.api_names(dev.compute_capability[0] * 10 + dev.compute_capability[1])
    missing = [s for s in symbols if s not in have]
    if missing:
        pytest.skip(f"not in this NVSHMEM's device library: {', '.join(missing)}")


def me():
    return nvshmem.my_pe()


def npes():
    return nvshmem.n_pes()


def peer():
    return (me() + 1) % npes()


def left():
    return (me() - 1) % npes()


def data(pe, n=N, dtype=np.float32, salt=0):
    """The random data PE `pe` contributes: every PE can compute every other PE's."""
    rng = np.random.default_rng(1000 * pe + salt)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(1, 100, n).astype(dtype)
    return rng.integers(1, 100, n).astype(dtype)


def sym(values):
    x = nvshmem.array(values.shape, values.dtype, like="cupy")
    x[...] = cp.asarray(values)
    return x


def poisoned(n=N, dtype=np.float32):
    x = nvshmem.array((n,), dtype, like="cupy")
    x[...] = POISON if np.dtype(dtype).kind == "f" else 0x5A
    return x


def sync():
    cuda.synchronize()
    cp.cuda.runtime.deviceSynchronize()
    nvshmem.barrier_all()


def check(x, expected, what):
    got = cp.asnumpy(x)
    np.testing.assert_array_equal(got, expected, err_msg=f"{what} on PE {me()}")


# --- RMA ------------------------------------------------------------------------------

@cuda.jit
def k_put_thread(dst, src, pe):
    if cuda.threadIdx.x == 0:
        nv.put(dst, src, pe)


@cuda.jit
def k_put_nbi_thread(dst, src, pe):
    if cuda.threadIdx.x == 0:
        nv.put_nbi(dst, src, pe)
        nv.quiet()


@cuda.jit
def k_put_warp(dst, src, pe):
    if cuda.threadIdx.x < 32:
        nv.put_warp(dst, src, pe)


@cuda.jit
def k_put_nbi_warp(dst, src, pe):
    if cuda.threadIdx.x < 32:
        nv.put_nbi_warp(dst, src, pe)
        nv.quiet()


@cuda.jit
def k_put_block(dst, src, pe):
    nv.put_block(dst, src, pe)


@cuda.jit
def k_put_nbi_block(dst, src, pe):
    nv.put_nbi_block(dst, src, pe)
    if cuda.threadIdx.x == 0:
        nv.quiet()


@cuda.jit
def k_get_thread(dst, src, pe):
    if cuda.threadIdx.x == 0:
        nv.get(dst, src, pe)


@cuda.jit
def k_get_nbi_thread(dst, src, pe):
    if cuda.threadIdx.x == 0:
        nv.get_nbi(dst, src, pe)
        nv.quiet()


@cuda.jit
def k_get_warp(dst, src, pe):
    if cuda.threadIdx.x < 32:
        nv.get_warp(dst, src, pe)


@cuda.jit
def k_get_nbi_warp(dst, src, pe):
    if cuda.threadIdx.x < 32:
        nv.get_nbi_warp(dst, src, pe)
        nv.quiet()


@cuda.jit
def k_get_block(dst, src, pe):
    nv.get_block(dst, src, pe)


@cuda.jit
def k_get_nbi_block(dst, src, pe):
    nv.get_nbi_block(dst, src, pe)
    if cuda.threadIdx.x == 0:
        nv.quiet()


@pytest.mark.parametrize("kernel", [k_put_thread, k_put_nbi_thread, k_put_warp, k_put_nbi_warp,
                                    k_put_block, k_put_nbi_block], ids=lambda k: k.__name__)
def test_put(kernel):
    src, dst = sym(data(me())), poisoned()
    sync()
    kernel[1, 128](dst, src, peer())
    sync()
    check(dst, data(left()), kernel.__name__)
    nvshmem.free(src), nvshmem.free(dst)


@pytest.mark.parametrize("kernel", [k_get_thread, k_get_nbi_thread, k_get_warp, k_get_nbi_warp,
                                    k_get_block, k_get_nbi_block], ids=lambda k: k.__name__)
def test_get(kernel):
    src, dst = sym(data(me())), poisoned()
    sync()
    kernel[1, 128](dst, src, peer())
    sync()
    check(dst, data(peer()), kernel.__name__)
    nvshmem.free(src), nvshmem.free(dst)


@cuda.jit
def k_put_count(dst, src, n, pe):
    nv.put_block(dst, src, n, pe)


def test_put_explicit_count_leaves_the_rest():
    src, dst = sym(data(me())), poisoned()
    sync()
    k_put_count[1, 64](dst, src, 100, peer())
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[:100] = data(left())[:100]
    check(dst, expected, "put_block with nelems=100")
    nvshmem.free(src), nvshmem.free(dst)


@cuda.jit
def k_put_windows(dst, src, start, n, sizes, pe):
    """put_block of window [start, start + n) of both arrays; the windows' sizes to `sizes`."""
    d, s = nv.window(dst, start, n), nv.window(src, start, n)
    nv.put_block(d, s, pe)
    if cuda.threadIdx.x == 0:
        sizes[0] = d.size
        sizes[1] = nv.window(src, -5, 10).size  # negative start: empty
        sizes[2] = nv.window(src, N - 3, 10).size  # n clamped to what is left
        sizes[3] = nv.window(src, N + 8, 1).size  # start past the end: empty


def test_window_put_and_clamping():
    src, dst = sym(data(me())), poisoned()
    sizes = cp.zeros(4, np.int64)
    sync()
    k_put_windows[1, 64](dst, src, 300, 200, sizes, peer())
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[300:500] = data(left())[300:500]
    check(dst, expected, "put_block of nv.window(x, 300, 200)")
    assert sizes.get().tolist() == [200, 0, 3, 0]
    nvshmem.free(src), nvshmem.free(dst)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint64, np.float16, np.float64,
                                   np.complex64])
def test_put_every_width(dtype):
    src, dst = sym(data(me(), dtype=dtype)), poisoned(dtype=dtype)
    sync()
    k_put_block[1, 64](dst, src, peer())
    sync()
    check(dst, data(left(), dtype=dtype), f"put_block {np.dtype(dtype).name}")
    nvshmem.free(src), nvshmem.free(dst)


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


def test_p_from_every_thread():
    src, dst = sym(data(me())), poisoned()
    sync()
    k_p[N // 128, 128](dst, src, peer())
    sync()
    check(dst, data(left()), "p")
    nvshmem.free(src), nvshmem.free(dst)


def test_g_from_every_thread():
    src, dst = sym(data(me())), poisoned()
    sync()
    k_g[N // 128, 128](dst, src, peer())
    sync()
    check(dst, data(peer()), "g")
    nvshmem.free(src), nvshmem.free(dst)


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


@pytest.mark.parametrize("scope", [0, 1, 2], ids=["thread", "warp", "block"])
def test_iput_iget(scope):
    n = 100
    src, dst = sym(data(me())), poisoned()
    sync()
    k_iput[1, 64](dst, src, n, peer(), scope)
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[0:2 * n:2] = data(left())[0:3 * n:3]
    check(dst, expected, "iput")
    dst[...] = POISON
    sync()
    k_iget[1, 64](dst, src, n, peer(), scope)
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[0:2 * n:2] = data(peer())[0:3 * n:3]
    check(dst, expected, "iget")
    nvshmem.free(src), nvshmem.free(dst)


# --- signals ----------------------------------------------------------------------------

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


@pytest.mark.parametrize("nbi", [False, True], ids=["blocking", "nbi"])
@pytest.mark.parametrize("scope", [0, 1, 2], ids=["thread", "warp", "block"])
def test_put_signal_then_wait(scope, nbi):
    src, dst = sym(data(me())), poisoned()
    sig = nvshmem.zeros((4,), np.uint64, like="cupy")
    sync()
    k_put_signal[1, 64](dst, src, sig, peer(), scope, nbi)
    sync()
    check(dst, data(left()), "put_signal data")
    check(sig[:3], np.array([7, 7, 7], np.uint64), "signal word, wait_until result, signal_fetch")
    for x in (src, dst, sig):
        nvshmem.free(x)


@cuda.jit
def k_signal_add(sig, pe):
    nv.signal_op(sig, 1, SignalOp.SIGNAL_ADD, pe)


def test_signal_op_add_from_many_threads():
    sig = nvshmem.zeros((1,), np.uint64, like="cupy")
    sync()
    k_signal_add[4, 128](sig, peer())
    sync()
    check(sig, np.array([512], np.uint64), "signal_op ADD x512")
    nvshmem.free(sig)


# --- atomics ---------------------------------------------------------------------------

@cuda.jit
def k_amo(counter, out, pe):
    i = cuda.grid(1)
    out[i] = nv.atomic_fetch_add(counter, 0, 1, pe)
    nv.atomic_add(counter, 1, 2, pe)
    nv.atomic_inc(counter, 2, pe)
    nv.atomic_fetch_inc(counter, 3, pe)
    nv.atomic_or(counter, 4, uint64(1) << uint64(i % 64), pe)
    nv.atomic_xor(counter, 5, uint64(1) << uint64(i % 64), pe)


def test_atomics_from_many_threads():
    nthreads = 4 * 128
    counter = nvshmem.zeros((8,), np.uint64, like="cupy")
    out = cp.zeros(nthreads, np.uint64)
    sync()
    k_amo[4, 128](counter, out, peer())
    sync()
    # each of the 512 threads adds 1 / 2 / 1 / 1; 512 xors of each bit pair cancel (8 each)
    check(counter[:6], np.array([nthreads, 2 * nthreads, nthreads, nthreads, 2 ** 64 - 1, 0], np.uint64),
          "atomic counters")
    fetched = np.sort(cp.asnumpy(out))
    np.testing.assert_array_equal(fetched, np.arange(nthreads, dtype=np.uint64))  # each old value once
    nvshmem.free(counter)


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


def test_atomic_swap_cswap_fetch_set_bitwise():
    x = sym(np.array([5, 0], np.int64))
    out = cp.zeros(8, np.int64)
    sync()
    k_amo_scalar[1, 1](x, out, peer())
    sync()
    # 42 & 0b111000 = 40; 40 | 1 = 41; 41 ^ 3 = 42; 42 & 2 = 2
    np.testing.assert_array_equal(cp.asnumpy(out), [5, 11, 12, 12, 42, 40, 41, 2])
    nvshmem.free(x)


@cuda.jit
def k_float_add(x, pe):
    nv.atomic_add(x, float32(0.5), pe)


def test_float_atomic_add():
    requires("nvshmemx_float_atomic_add")
    x = nvshmem.zeros((1,), np.float32, like="cupy")
    sync()
    k_float_add[2, 128](x, peer())
    sync()
    check(x, np.array([128.0], np.float32), "float atomic_add")
    nvshmem.free(x)


# --- wait / test ------------------------------------------------------------------------

@cuda.jit
def k_wait_all(ivars, out, pe):
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
        idx = cuda.local.array(8, uint64)
        out[4] = nv.wait_until_some(ivars, idx, None, Cmp.CMP_LE, 2)
        out[5] = idx[0] + 10 * idx[1]


def test_wait_until_and_test():
    ivars = nvshmem.zeros((8,), np.int32, like="cupy")
    out = cp.full(8, -1, np.int64)
    sync()
    k_wait_all[1, 32](ivars, out, peer())
    sync()
    np.testing.assert_array_equal(cp.asnumpy(out)[:6], [1, 1, 2, 7, 2, 10])
    nvshmem.free(ivars)


@cuda.jit
def k_wait_vector(ivars, cmp_values, out, pe):
    if cuda.threadIdx.x == 0:
        for i in range(ivars.size):
            nv.p(ivars, i, int32(2 * i), pe)
        nv.quiet()
        nv.wait_until_all_vector(ivars, None, Cmp.CMP_GE, cmp_values)
        out[0] = nv.test_all_vector(ivars, None, Cmp.CMP_GE, cmp_values)
        out[1] = nv.wait_until_any_vector(ivars, None, Cmp.CMP_GT, cmp_values)
        idx = cuda.local.array(8, uint64)
        out[2] = nv.test_some_vector(ivars, idx, None, Cmp.CMP_GT, cmp_values)
        out[3] = nv.test_any_vector(ivars, None, Cmp.CMP_EQ, cmp_values)
        out[4] = nv.wait_until_some_vector(ivars, idx, None, Cmp.CMP_GE, cmp_values)
        out[5] = nv.test_some(ivars, idx, None, Cmp.CMP_GE, 0)


def test_wait_until_vector_forms():
    ivars = nvshmem.zeros((8,), np.int32, like="cupy")
    cmp_values = cp.asarray(np.arange(8, dtype=np.int32))  # ivars[i] = 2i >= i; > i for i >= 1
    out = cp.full(8, -1, np.int64)
    sync()
    k_wait_vector[1, 32](ivars, cmp_values, out, peer())
    sync()
    o = cp.asnumpy(out)
    assert o[0] == 1 and o[1] >= 1 and o[2] == 7 and o[3] == 0 and o[4] == 8 and o[5] == 8, o
    nvshmem.free(ivars)


# --- ordering, barriers, queries --------------------------------------------------------

@cuda.jit
def k_fence_order(x, pe):
    if cuda.threadIdx.x == 0:
        nv.p(x, 0, int32(1), pe)
        nv.fence()
        nv.p(x, 1, int32(2), pe)
        nv.quiet()


@cuda.jit
def k_barriers(x, out, scope):
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


@pytest.mark.parametrize("scope", [0, 1, 2], ids=["thread", "warp", "block"])
def test_barriers_syncs_and_queries(scope):
    x = nvshmem.zeros((2,), np.int32, like="cupy")
    out = cp.full(8, -9, np.int32)
    sync()
    k_fence_order[1, 1](x, peer())
    k_barriers[1, 128](x, out, scope)
    sync()
    check(x, np.array([1, 2], np.int32), "fence-ordered puts")
    np.testing.assert_array_equal(cp.asnumpy(out)[:7], [0, 0, me(), npes(), me(), npes(), npes() - 1])
    nvshmem.free(x)


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


def test_flush_at_every_scope():
    requires("nvshmemx_flush", "nvshmemx_flush_warp", "nvshmemx_flush_block")
    x = nvshmem.zeros((1,), np.int32, like="cupy")
    sync()
    k_flush[1, 64](x, peer())
    sync()
    check(x, np.array([5], np.int32), "p then flush")
    nvshmem.free(x)


@cuda.jit
def k_warpgroup_barrier(out):
    if cuda.threadIdx.x < 128:
        r = nv.barrier_warpgroup(Team.TEAM_WORLD)
        if cuda.threadIdx.x == 0:
            out[0] = r


def test_barrier_warpgroup():
    out = cp.full(1, -9, np.int32)
    sync()
    k_warpgroup_barrier[1, 128](out)
    sync()
    assert int(out[0]) == 0


@cuda.jit
def k_ptr(x, out, pe):
    out[0] = nv.ptr(x, pe) != 0
    view = nv.peer(x, pe)
    view[0] = 123.0


def test_ptr_and_peer_view():
    x = poisoned(4)
    out = cp.zeros(1, np.int64)
    sync()
    k_ptr[1, 1](x, out, peer())
    sync()
    assert int(out[0]) == 1
    check(x[:1], np.array([123.0], np.float32), "store through a peer view")
    nvshmem.free(x)


# --- collectives -------------------------------------------------------------------------

@cuda.jit
def k_coll(kind, scope, dst, src):
    t = cuda.threadIdx.x
    if scope == 0 and t != 0:
        return
    if scope == 1 and t >= 32:
        return
    if kind == 0:
        if scope == 0:
            nv.broadcast(Team.TEAM_WORLD, dst, src, src.size, 0)
        elif scope == 1:
            nv.broadcast_warp(Team.TEAM_WORLD, dst, src, src.size, 0)
        else:
            nv.broadcast_block(Team.TEAM_WORLD, dst, src, src.size, 0)
    elif kind == 1:
        if scope == 0:
            nv.fcollect(Team.TEAM_WORLD, dst, src, src.size)
        elif scope == 1:
            nv.fcollect_warp(Team.TEAM_WORLD, dst, src, src.size)
        else:
            nv.fcollect_block(Team.TEAM_WORLD, dst, src, src.size)
    elif kind == 2:
        n = src.size // nv.n_pes()
        if scope == 0:
            nv.alltoall(Team.TEAM_WORLD, dst, src, n)
        elif scope == 1:
            nv.alltoall_warp(Team.TEAM_WORLD, dst, src, n)
        else:
            nv.alltoall_block(Team.TEAM_WORLD, dst, src, n)


@pytest.mark.parametrize("scope", [0, 1, 2], ids=["thread", "warp", "block"])
@pytest.mark.parametrize("kind", ["broadcast", "fcollect", "alltoall"])
def test_broadcast_fcollect_alltoall(kind, scope):
    n = 64
    src = sym(data(me(), n * npes(), np.int32))
    dst = poisoned(n * npes() * npes(), np.int32)
    sync()
    k_coll[1, 64](["broadcast", "fcollect", "alltoall"].index(kind), scope, dst, src)
    sync()
    got = cp.asnumpy(dst)
    if kind == "broadcast":
        np.testing.assert_array_equal(got[:n * npes()], data(0, n * npes(), np.int32))
    elif kind == "fcollect":
        want = np.concatenate([data(pe, n * npes(), np.int32) for pe in range(npes())])
        np.testing.assert_array_equal(got[:want.size], want)
    else:
        want = np.concatenate([data(pe, n * npes(), np.int32)[me() * n:(me() + 1) * n]
                               for pe in range(npes())])
        np.testing.assert_array_equal(got[:want.size], want)
    nvshmem.free(src), nvshmem.free(dst)


def _reduce_kernel(op, scope):
    """A kernel calling <op>_reduce at `scope` (one C function per kernel: block-scope
    reductions are large, and compiling all of them into one kernel takes minutes)."""
    fn = getattr(nv, f"{op}_reduce" + {"thread": "", "warp": "_warp", "block": "_block"}[scope])
    threads = {"thread": 1, "warp": 32, "block": 64}[scope]

    @cuda.jit
    def kernel(dst, src):
        if cuda.threadIdx.x < threads:
            fn(Team.TEAM_WORLD, dst, src, dst.size)
    return kernel


REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply,
            "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


# Every op at thread scope, and every scope for sum and xor (each kernel is compiled anew).
REDUCE_CASES = [(op, "thread") for op in ("sum", "max", "min", "prod", "and", "or", "xor")] + \
    [("sum", "warp"), ("sum", "block"), ("xor", "block")]


@pytest.mark.parametrize("op,scope", REDUCE_CASES)
def test_reduce(op, scope):
    n = 256
    values = [data(pe, n, np.uint32, salt=7) % 8 + 1 for pe in range(npes())]
    src, dst = sym(values[me()]), poisoned(n, np.uint32)
    sync()
    _reduce_kernel(op, scope)[1, 64](dst, src)
    sync()
    want = values[0]
    for v in values[1:]:
        want = REDUCERS[op](want, v).astype(np.uint32)
    check(dst, want, f"{op}_reduce")
    nvshmem.free(src), nvshmem.free(dst)


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


@pytest.mark.parametrize("scope", [0, 1, 2], ids=["thread", "warp", "block"])
def test_reducescatter(scope):
    n = 64
    values = [data(pe, n * npes(), np.float32) for pe in range(npes())]
    src, dst = sym(values[me()]), poisoned(n)
    sync()
    k_reducescatter[1, 64](scope, dst, src)
    sync()
    want = sum(values)[me() * n:(me() + 1) * n]
    np.testing.assert_allclose(cp.asnumpy(dst), want, rtol=1e-6)
    nvshmem.free(src), nvshmem.free(dst)


# --- every PE with every PE, teams made on the host and used on the device --------------

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


def test_signals_and_waits_every_pe_to_every_pe():
    n = 16
    src = sym(data(me(), n, np.int32))
    dst = poisoned(n * npes(), np.int32)
    sig = nvshmem.zeros((npes() + 1,), np.uint64, like="cupy")  # the last word: nobody writes it
    sync()
    k_all_to_all_signals[1, max(32, npes())](dst, src, sig, n)
    sync()
    check(dst, np.concatenate([data(pe, n, np.int32) for pe in range(npes())]), "put_signal from every PE")
    check(sig, np.array(list(range(1, npes() + 1)) + [0], np.uint64), "signal words")
    for x in (src, dst, sig):
        nvshmem.free(x)


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


def _team_members(start, stride, size):
    return [start + i * stride for i in range(size)]


def _check_team_kernel(team, members, what):
    """Run k_team_ops on `team` (None off the team) and check it against `members` (world PEs)."""
    n = 8
    values = {pe: data(pe, n, np.int32, salt=3) for pe in members}
    src = sym(data(me(), n, np.int32, salt=3))
    dst, gathered = poisoned(n, np.int32), poisoned(n * len(members), np.int32)
    out = cp.full(8, -9, np.int32)
    sync()
    if team is not None:
        k_team_ops[1, 32](np.int32(int(team)), dst, src, gathered, out)
    sync()
    if team is not None:
        np.testing.assert_array_equal(cp.asnumpy(out)[:6], [members.index(me()), len(members), members[0], 0, 0, 0],
                                      err_msg=f"{what}: team queries and return codes on PE {me()}")
        check(dst, sum(values.values()).astype(np.int32), f"{what}: sum_reduce")
        check(gathered, np.concatenate([values[pe] for pe in members]), f"{what}: fcollect")
    for x in (src, dst, gathered):
        nvshmem.free(x)


def test_strided_team_on_the_device():
    """Every second PE (all PEs with 1 PE): a split_strided team used by device collectives."""
    stride = 2 if npes() >= 2 else 1
    size = (npes() + stride - 1) // stride
    team = nvshmem.split_strided(Team.TEAM_WORLD, 0, stride, size)
    _check_team_kernel(team, _team_members(0, stride, size), f"split_strided(0, {stride}, {size})")
    if team is not None:
        team.destroy()


def test_split_2d_teams_on_the_device():
    """Rows of 2 PEs (x teams) and columns (y teams); needs >= 4 PEs to be a real grid."""
    if npes() < 4:
        pytest.skip("needs >= 4 PEs (a 2-D grid of at least 2 x 2)")
    xrange = 2
    x, y = nvshmem.split_2d(Team.TEAM_WORLD, xrange)
    row, col = me() // xrange, me() % xrange
    row_members = [pe for pe in range(npes()) if pe // xrange == row]
    col_members = [pe for pe in range(npes()) if pe % xrange == col]
    assert x is not None and y is not None
    assert (x.n_pes(), x.my_pe(), y.n_pes(), y.my_pe()) == (len(row_members), col, len(col_members), row)
    _check_team_kernel(x, row_members, "split_2d x team")
    _check_team_kernel(y, col_members, "split_2d y team")
    x.destroy()
    y.destroy()


def test_no_leaks_after_the_numba_suite():
    sync()
    assert nvshmem.live_allocations() == [] or all(
        "session" in repr(a) for a in nvshmem.live_allocations())


@pytest.mark.parametrize("name", ["numba_ring_put_get", "numba_put_signal_pipeline", "numba_allreduce",
                                  "numba_halo_exchange"])
def test_examples(name):
    """The Numba examples (the seed's ring, ported, and ours); each asserts its own result."""
    import runpy
    from pathlib import Path
    example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"))
    example["run"]()  # the session is already initialised
