"""Triton device API on GPUs, any number of PEs: the families of tests/gpu/test_numba_gpu.py at
every scope, checked element by element against a host reference on random data, outputs
poisoned before each run; and the Triton examples.

Triton programs: a thread-scope call is made by thread 0 of the program, a warp-scope one by
warp 0, a block-scope one by every thread (see nvshmem_dsl.triton._calls); "from every thread"
tests of the Numba suite become "from every program" here (a grid of programs, one call each).

Run on every PE at once: `python -m nvshmem_dsl.run -n 2 -m pytest -m gpu tests/gpu` (or under
mpirun). Needs torch (Triton launches on torch's current stream; Triton 3.6 finds the GPU
through torch) and Triton 3.6 or later.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import nvshmem_dsl as nvshmem  # noqa: E402
import nvshmem_dsl.triton as nv  # noqa: E402

POISON = -7777.0
N = 1024
SCOPES = {"thread": 0, "warp": 1, "block": 2}


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
    """Skip when the installed NVSHMEM's device library lacks one of `symbols`."""
    from nvshmem_dsl import bitcode
    major, minor = torch.cuda.get_device_capability()
    have = bitcode.api_names(major * 10 + minor)
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
    x = nvshmem.array(values.shape, values.dtype, like="torch")
    x.copy_(torch.from_numpy(np.ascontiguousarray(values)))
    return x


def zeros(n, dtype):
    return nvshmem.zeros((n,), dtype, like="torch")


def poisoned(n=N, dtype=np.float32):
    return sym(np.full(n, POISON if np.dtype(dtype).kind == "f" else 0x5A, dtype))


def local(values):
    """A (non-symmetric) device tensor; unsigned ones too (made by copy: torch has few
    operations on uint32/uint64)."""
    return torch.from_numpy(np.ascontiguousarray(values)).cuda()


def sync():
    torch.cuda.synchronize()
    nvshmem.barrier_all()


def check(x, expected, what):
    np.testing.assert_array_equal(x.cpu().numpy(), expected, err_msg=f"{what} on PE {me()}")


def free(*xs):
    for x in xs:
        nvshmem.free(x)


# --- RMA ------------------------------------------------------------------------------

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


@pytest.mark.parametrize("nbi", [False, True], ids=["blocking", "nbi"])
@pytest.mark.parametrize("scope", list(SCOPES))
def test_put(scope, nbi):
    src, dst = sym(data(me())), poisoned()
    sync()
    k_put[(1,)](dst, src, N, peer(), SCOPES[scope], nbi)
    sync()
    check(dst, data(left()), f"put {scope} nbi={nbi}")
    free(src, dst)


@pytest.mark.parametrize("nbi", [False, True], ids=["blocking", "nbi"])
@pytest.mark.parametrize("scope", list(SCOPES))
def test_get(scope, nbi):
    src, dst = sym(data(me())), poisoned()
    sync()
    k_get[(1,)](dst, src, N, peer(), SCOPES[scope], nbi)
    sync()
    check(dst, data(peer()), f"get {scope} nbi={nbi}")
    free(src, dst)


def test_put_explicit_count_leaves_the_rest():
    src, dst = sym(data(me())), poisoned()
    sync()
    k_put[(1,)](dst, src, 100, peer(), 2, False)
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[:100] = data(left())[:100]
    check(dst, expected, "put_block with nelems=100")
    free(src, dst)


@triton.jit
def k_put_offset(dst, src, start, n, pe):
    nv.put_block(dst + start, src + start, n, pe)


def test_put_of_a_window():
    src, dst = sym(data(me())), poisoned()
    sync()
    k_put_offset[(1,)](dst, src, 300, 200, peer())
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[300:500] = data(left())[300:500]
    check(dst, expected, "put_block of [300, 500)")
    free(src, dst)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint64, np.float16, np.float64])
def test_put_every_width(dtype):
    src, dst = sym(data(me(), dtype=dtype)), poisoned(dtype=dtype)
    sync()
    k_put[(1,)](dst, src, N, peer(), 2, False)
    sync()
    check(dst, data(left(), dtype=dtype), f"put_block {np.dtype(dtype).name}")
    free(src, dst)


@triton.jit
def k_p(dst, src, pe):
    i = tl.program_id(0)
    nv.p(dst + i, tl.load(src + i), pe)


@triton.jit
def k_g(dst, src, pe):
    i = tl.program_id(0)
    tl.store(dst + i, nv.g(src + i, pe))


def test_p_from_every_program():
    src, dst = sym(data(me())), poisoned()
    sync()
    k_p[(N,)](dst, src, peer())
    sync()
    check(dst, data(left()), "p")
    free(src, dst)


def test_g_from_every_program():
    src, dst = sym(data(me())), poisoned()
    sync()
    k_g[(N,)](dst, src, peer())
    sync()
    check(dst, data(peer()), "g")
    free(src, dst)


@triton.jit
def k_p_half(dst, src, pe):
    i = tl.program_id(0)
    nv.p(dst + i, tl.load(src + i), pe)
    tl.store(src + i, nv.g(dst + i, pe))


def test_p_g_half_and_bfloat16():
    for dtype in (torch.float16, torch.bfloat16):
        src = nvshmem.array((64,), "float16" if dtype == torch.float16 else "bfloat16", like="torch")
        src.copy_(torch.arange(64, dtype=dtype) + me())
        dst = nvshmem.zeros((64,), "float16" if dtype == torch.float16 else "bfloat16", like="torch")
        sync()
        k_p_half[(64,)](dst, src, peer())
        sync()
        assert torch.equal(src.cpu(), (torch.arange(64, dtype=dtype) + me())), dtype
        assert torch.equal(dst.cpu(), (torch.arange(64, dtype=dtype) + left())), dtype
        free(src, dst)


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


@pytest.mark.parametrize("scope", list(SCOPES))
def test_iput_iget(scope):
    n = 100
    src, dst = sym(data(me())), poisoned()
    sync()
    k_iput[(1,)](dst, src, n, peer(), SCOPES[scope])
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[0:2 * n:2] = data(left())[0:3 * n:3]
    check(dst, expected, "iput")
    dst.copy_(torch.from_numpy(np.full(N, POISON, np.float32)))
    sync()
    k_iget[(1,)](dst, src, n, peer(), SCOPES[scope])
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[0:2 * n:2] = data(peer())[0:3 * n:3]
    check(dst, expected, "iget")
    free(src, dst)


# --- signals ----------------------------------------------------------------------------

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


@pytest.mark.parametrize("nbi", [False, True], ids=["blocking", "nbi"])
@pytest.mark.parametrize("scope", list(SCOPES))
def test_put_signal_then_wait(scope, nbi):
    src, dst = sym(data(me())), poisoned()
    sig = zeros(4, np.uint64)
    sync()
    k_put_signal[(1,)](dst, src, N, sig, peer(), SCOPES[scope], nbi)
    sync()
    check(dst, data(left()), "put_signal data")
    check(sig[:3], np.array([7, 7, 7], np.uint64), "signal word, wait_until result, signal_fetch")
    free(src, dst, sig)


@triton.jit
def k_signal_add(sig, pe):
    nv.signal_op(sig, 1, nv.SIGNAL_ADD, pe)


def test_signal_op_add_from_many_programs():
    sig = zeros(1, np.uint64)
    sync()
    k_signal_add[(512,)](sig, peer())
    sync()
    check(sig, np.array([512], np.uint64), "signal_op ADD x512")
    free(sig)


# --- atomics ---------------------------------------------------------------------------

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


def test_atomics_from_many_programs():
    nprog = 512
    counter = zeros(8, np.uint64)
    out = local(np.zeros(nprog, np.uint64))
    sync()
    k_amo[(nprog,)](counter, out, peer())
    sync()
    check(counter[:6], np.array([nprog, 2 * nprog, nprog, nprog, 2 ** 64 - 1, 0], np.uint64), "atomic counters")
    fetched = np.sort(out.cpu().numpy())
    np.testing.assert_array_equal(fetched, np.arange(nprog, dtype=np.uint64))  # each old value once
    free(counter)


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


def test_atomic_swap_cswap_fetch_set_bitwise():
    x = sym(np.array([5, 0], np.int64))
    out = torch.zeros(8, dtype=torch.int64, device="cuda")
    sync()
    k_amo_scalar[(1,)](x, out, peer())
    sync()
    np.testing.assert_array_equal(out.cpu().numpy(), [5, 11, 12, 12, 42, 40, 41, 2])
    free(x)


@triton.jit
def k_float_add(x, pe):
    nv.atomic_add(x, 0.5, pe)


def test_float_atomic_add():
    requires("nvshmemx_float_atomic_add")
    x = zeros(1, np.float32)
    sync()
    k_float_add[(256,)](x, peer())
    sync()
    check(x, np.array([128.0], np.float32), "float atomic_add")
    free(x)


# --- wait / test ------------------------------------------------------------------------

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


def test_wait_until_and_test():
    ivars = zeros(8, np.int32)
    idx = local(np.zeros(8, np.uint64))
    out = torch.full((8,), -1, dtype=torch.int64, device="cuda")
    sync()
    k_wait_all[(1,)](ivars, idx, out, peer())
    sync()
    np.testing.assert_array_equal(out.cpu().numpy()[:6], [1, 1, 2, 7, 2, 10])
    free(ivars)


@triton.jit
def k_wait_vector(ivars, cmp_values, idx, out, pe):
    for i in range(8):
        nv.p(ivars + i, 2 * i, pe)
    nv.quiet()
    nv.wait_until_all_vector(ivars, 8, None, nv.CMP_GE, cmp_values)
    tl.store(out + 0, nv.test_all_vector(ivars, 8, None, nv.CMP_GE, cmp_values))
    tl.store(out + 1, nv.wait_until_any_vector(ivars, 8, None, nv.CMP_GT, cmp_values))
    tl.store(out + 2, nv.test_some_vector(ivars, 8, idx, None, nv.CMP_GT, cmp_values))
    tl.store(out + 3, nv.test_any_vector(ivars, 8, None, nv.CMP_EQ, cmp_values))
    tl.store(out + 4, nv.wait_until_some_vector(ivars, 8, idx, None, nv.CMP_GE, cmp_values))
    tl.store(out + 5, nv.test_some(ivars, 8, idx, None, nv.CMP_GE, 0))


def test_wait_until_vector_forms():
    ivars = zeros(8, np.int32)
    cmp_values = local(np.arange(8, dtype=np.int32))  # ivars[i] = 2i >= i; > i for i >= 1
    idx = local(np.zeros(8, np.uint64))
    out = torch.full((8,), -1, dtype=torch.int64, device="cuda")
    sync()
    k_wait_vector[(1,)](ivars, cmp_values, idx, out, peer())
    sync()
    o = out.cpu().numpy()
    assert o[0] == 1 and o[1] >= 1 and o[2] == 7 and o[3] == 0 and o[4] == 8 and o[5] == 8, o
    free(ivars)


# --- ordering, barriers, queries --------------------------------------------------------

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


@pytest.mark.parametrize("scope", list(SCOPES))
def test_barriers_syncs_and_queries(scope):
    x = zeros(2, np.int32)
    out = torch.full((8,), -9, dtype=torch.int32, device="cuda")
    sync()
    k_fence_order[(1,)](x, peer())
    k_barriers[(1,)](out, SCOPES[scope])
    sync()
    check(x, np.array([1, 2], np.int32), "fence-ordered puts")
    np.testing.assert_array_equal(out.cpu().numpy()[:7], [0, 0, me(), npes(), me(), npes(), npes() - 1])
    free(x)


@triton.jit
def k_flush(x, pe):
    nv.p(x, 5, pe)
    nv.flush()
    nv.flush_warp()
    nv.flush_block()
    nv.quiet()


def test_flush_at_every_scope():
    requires("nvshmemx_flush", "nvshmemx_flush_warp", "nvshmemx_flush_block")
    x = zeros(1, np.int32)
    sync()
    k_flush[(1,)](x, peer())
    sync()
    check(x, np.array([5], np.int32), "p then flush")
    free(x)


@triton.jit
def k_warpgroup_barrier(out):
    tl.store(out, nv.barrier_warpgroup(nv.TEAM_WORLD))


def test_barrier_warpgroup():
    out = torch.full((1,), -9, dtype=torch.int32, device="cuda")
    sync()
    k_warpgroup_barrier[(1,)](out, num_warps=4)
    sync()
    assert int(out[0]) == 0


@triton.jit
def k_ptr(x, out, pe):
    view = nv.peer(x, pe)
    tl.store(out, (view.to(tl.int64) != 0).to(tl.int64))
    tl.store(view, 123.0)


def test_ptr_and_peer_view():
    x = poisoned(4)
    out = torch.zeros(1, dtype=torch.int64, device="cuda")
    sync()
    k_ptr[(1,)](x, out, peer())
    sync()
    assert int(out[0]) == 1
    check(x[:1], np.array([123.0], np.float32), "store through a peer pointer")
    free(x)


# --- collectives -------------------------------------------------------------------------

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


@pytest.mark.parametrize("scope", list(SCOPES))
@pytest.mark.parametrize("kind", ["broadcast", "fcollect", "alltoall"])
def test_broadcast_fcollect_alltoall(kind, scope):
    n = 64
    src = sym(data(me(), n * npes(), np.int32))
    dst = poisoned(n * npes() * npes(), np.int32)
    sync()
    count = n if kind == "alltoall" else n * npes()
    k_coll[(1,)](dst, src, count, ["broadcast", "fcollect", "alltoall"].index(kind), SCOPES[scope])
    sync()
    got = dst.cpu().numpy()
    if kind == "broadcast":
        np.testing.assert_array_equal(got[:n * npes()], data(0, n * npes(), np.int32))
    elif kind == "fcollect":
        want = np.concatenate([data(pe, n * npes(), np.int32) for pe in range(npes())])
        np.testing.assert_array_equal(got[:want.size], want)
    else:
        want = np.concatenate([data(pe, n * npes(), np.int32)[me() * n:(me() + 1) * n]
                               for pe in range(npes())])
        np.testing.assert_array_equal(got[:want.size], want)
    free(src, dst)


@triton.jit
def k_reduce(dst, src, n, OP: tl.constexpr, SCOPE: tl.constexpr):
    """<op>_reduce at SCOPE: every op at thread scope, sum at warp and block, xor at block."""
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


REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply,
            "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
REDUCE_CASES = [(op, "thread") for op in REDUCERS] + [("sum", "warp"), ("sum", "block"), ("xor", "block")]


@pytest.mark.parametrize("op,scope", REDUCE_CASES)
def test_reduce(op, scope):
    n = 256
    values = [data(pe, n, np.uint32, salt=7) % 8 + 1 for pe in range(npes())]
    src, dst = sym(values[me()]), poisoned(n, np.uint32)
    sync()
    k_reduce[(1,)](dst, src, n, list(REDUCERS).index(op), SCOPES[scope])
    sync()
    want = values[0]
    for v in values[1:]:
        want = REDUCERS[op](want, v).astype(np.uint32)
    check(dst, want, f"{op}_reduce {scope}")
    free(src, dst)


@triton.jit
def k_reducescatter(dst, src, n, SCOPE: tl.constexpr):
    if SCOPE == 0:
        nv.sum_reducescatter(nv.TEAM_WORLD, dst, src, n)
    elif SCOPE == 1:
        nv.sum_reducescatter_warp(nv.TEAM_WORLD, dst, src, n)
    else:
        nv.sum_reducescatter_block(nv.TEAM_WORLD, dst, src, n)


@pytest.mark.parametrize("scope", list(SCOPES))
def test_reducescatter(scope):
    n = 64
    values = [data(pe, n * npes(), np.float32) for pe in range(npes())]
    src, dst = sym(values[me()]), poisoned(n)
    sync()
    k_reducescatter[(1,)](dst, src, n, SCOPES[scope])
    sync()
    want = sum(values)[me() * n:(me() + 1) * n]
    np.testing.assert_allclose(dst.cpu().numpy(), want, rtol=1e-6)
    free(src, dst)


# --- every PE with every PE, teams made on the host and used on the device --------------

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


def test_signals_and_waits_every_pe_to_every_pe():
    n = 16
    src = sym(data(me(), n, np.int32))
    dst = poisoned(n * npes(), np.int32)
    sig = zeros(npes() + 1, np.uint64)  # the last word: nobody writes it
    sync()
    k_all_to_all_signals[(1,)](dst, src, sig, n)
    sync()
    check(dst, np.concatenate([data(pe, n, np.int32) for pe in range(npes())]), "put_signal from every PE")
    check(sig, np.array(list(range(1, npes() + 1)) + [0], np.uint64), "signal words")
    free(src, dst, sig)


@triton.jit
def k_team_ops(team, dst, src, gathered, n, out):
    """On a team made on the host: queries, an all-reduce and an all-gather (thread scope)."""
    tl.store(out + 0, nv.team_my_pe(team))
    tl.store(out + 1, nv.team_n_pes(team))
    tl.store(out + 2, nv.team_translate_pe(team, 0, nv.TEAM_WORLD))
    tl.store(out + 3, nv.sum_reduce(team, dst, src, n))
    tl.store(out + 4, nv.fcollect(team, gathered, src, n))
    tl.store(out + 5, nv.team_sync(team))


def _check_team_kernel(team, members, what):
    n = 8
    values = {pe: data(pe, n, np.int32, salt=3) for pe in members}
    src = sym(data(me(), n, np.int32, salt=3))
    dst, gathered = poisoned(n, np.int32), poisoned(n * len(members), np.int32)
    out = torch.full((8,), -9, dtype=torch.int32, device="cuda")
    sync()
    if team is not None:
        k_team_ops[(1,)](int(team), dst, src, gathered, n, out)
    sync()
    if team is not None:
        np.testing.assert_array_equal(out.cpu().numpy()[:6], [members.index(me()), len(members), members[0], 0, 0, 0],
                                      err_msg=f"{what}: team queries and return codes on PE {me()}")
        check(dst, sum(values.values()).astype(np.int32), f"{what}: sum_reduce")
        check(gathered, np.concatenate([values[pe] for pe in members]), f"{what}: fcollect")
    free(src, dst, gathered)


def test_strided_team_on_the_device():
    stride = 2 if npes() >= 2 else 1
    size = (npes() + stride - 1) // stride
    team = nvshmem.split_strided(nvshmem.Team.TEAM_WORLD, 0, stride, size)
    _check_team_kernel(team, [i * stride for i in range(size)], f"split_strided(0, {stride}, {size})")
    if team is not None:
        team.destroy()


def test_no_leaks_after_the_triton_suite():
    sync()
    assert nvshmem.live_allocations() == [] or all(
        "session" in repr(a) for a in nvshmem.live_allocations())


@pytest.mark.parametrize("name", ["triton_ring_put_get", "triton_put_signal_pipeline", "triton_allreduce",
                                  "triton_halo_exchange"])
def test_examples(name):
    """The Triton examples; each asserts its own result."""
    import runpy
    from pathlib import Path
    example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"))
    example["run"]()  # the session is already initialised
