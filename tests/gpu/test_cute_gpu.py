"""CuTe DSL device API on GPUs, 2 PEs: every family at least once per scope, checked element by
element against a host reference on random data, outputs poisoned first. The CuTe mirror of
tests/gpu/test_numba_gpu.py (same data helpers: each PE can compute every PE's data).

The kernels and launchers are in tests/gpu/cute_kernels.py (one :class:`cute_kernels.Case`
per compiled launcher), where tests/test_cute_gpu_kernels.py compiles every one of them on a
CPU. Run on every PE at once: `python -m nvshmem_dsl.run -n 2 -m pytest -m gpu tests/gpu`.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
cute = pytest.importorskip("cutlass.cute")

import nvshmem_dsl as nvshmem  # noqa: E402
import nvshmem_dsl.cute as nv  # noqa: E402

from test_numba_gpu import POISON, check, data, left, me, npes, peer, poisoned, sym, sync  # noqa: E402
import cute_kernels as K  # noqa: E402
from cute_kernels import CASES, COLL_N, N, REDUCE_N, SCOPES  # noqa: E402

_compiled = {}


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
    has no float/double/half atomic_add and no flush, for example). Call it before allocating."""
    from nvshmem_dsl import bitcode
    have = bitcode.api_names(int(cp.cuda.Device().compute_capability))
    missing = [s for s in symbols if s not in have]
    if missing:
        pytest.skip(f"not in this NVSHMEM's device library: {', '.join(missing)}")


def run(name, *values):
    """Compile case `name` of cute_kernels.CASES once (nv.compile: arch + NVSHMEM module init)
    with these arrays and numbers (checked against the case's spec), then launch it."""
    case = CASES[name]
    compile_args, call_args = case.cute_args(values, npes())
    if name not in _compiled:
        _compiled[name] = nv.compile(case.launcher, *compile_args)
    _compiled[name](*call_args)
    cp.cuda.runtime.deviceSynchronize()


def free(*arrays):
    for x in arrays:
        nvshmem.free(x)


def host_data(pe, dtype, n=N):
    """data() for every width; bfloat16 as its bits in uint16 (cupy has no bfloat16)."""
    if dtype == "bfloat16":
        return (data(pe, n, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return data(pe, n, np.dtype(dtype))


# --- RMA ------------------------------------------------------------------------------------

@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("op", K.RMA_OPS)
def test_put_get(op, scope):
    """put / put_nbi / get / get_nbi (+ quiet) at thread, warp and block scope."""
    src, dst = sym(data(me())), poisoned()
    sync()
    run(f"rma_{scope}", dst, src, peer(), K.RMA_OPS.index(op))
    sync()
    check(dst, data(left()) if op.startswith("put") else data(peer()), f"cute {op} ({scope})")
    free(src, dst)


def test_put_explicit_count_leaves_the_rest():
    src, dst = sym(data(me())), poisoned()
    sync()
    run("put_count", dst, src, 100, peer())
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[:100] = data(left())[:100]
    check(dst, expected, "cute put_block with nelems=100")
    free(src, dst)


@pytest.mark.parametrize("dtype", K.WIDTHS)
def test_put_every_width(dtype):
    storage = np.dtype(np.uint16 if dtype == "bfloat16" else dtype)
    src, dst = sym(host_data(me(), dtype)), poisoned(dtype=storage)
    sync()
    run(f"put_block_{dtype}", dst, src, peer())
    sync()
    check(dst, host_data(left(), dtype), f"cute put_block {dtype}")
    free(src, dst)


def test_p_from_every_thread():
    src, dst = sym(data(me())), poisoned()
    sync()
    run("p_g", dst, src, peer(), 0)
    sync()
    check(dst, data(left()), "cute p")
    free(src, dst)


def test_g_from_every_thread():
    src, dst = sym(data(me())), poisoned()
    sync()
    run("p_g", dst, src, peer(), 1)
    sync()
    check(dst, data(peer()), "cute g")
    free(src, dst)


@pytest.mark.parametrize("scope", SCOPES)
def test_iput_iget(scope):
    n = 100
    src, dst = sym(data(me())), poisoned()
    sync()
    run(f"iput_iget_{scope}", dst, src, n, peer(), 0)
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[0:2 * n:2] = data(left())[0:3 * n:3]
    check(dst, expected, f"cute iput ({scope})")
    dst[...] = POISON
    sync()
    run(f"iput_iget_{scope}", dst, src, n, peer(), 1)
    sync()
    expected = np.full(N, POISON, np.float32)
    expected[0:2 * n:2] = data(peer())[0:3 * n:3]
    check(dst, expected, f"cute iget ({scope})")
    free(src, dst)


# --- signals --------------------------------------------------------------------------------

@pytest.mark.parametrize("nbi", [False, True], ids=["blocking", "nbi"])
@pytest.mark.parametrize("scope", SCOPES)
def test_put_signal_then_wait(scope, nbi):
    src, dst = sym(data(me())), poisoned()
    sig = nvshmem.zeros((4,), np.uint64, like="cupy")
    sync()
    run(f"put_signal_{scope}", dst, src, sig, peer(), int(nbi))
    sync()
    check(dst, data(left()), "cute put_signal data")
    check(sig, np.array([7, 7, 7, 0], np.uint64), "signal word, wait_until result, signal_fetch")
    free(src, dst, sig)


def test_signal_op_add_from_many_threads():
    sig = nvshmem.zeros((1,), np.uint64, like="cupy")
    sync()
    run("signal_add", sig, peer())
    sync()
    check(sig, np.array([512], np.uint64), "cute signal_op ADD x512")
    free(sig)


# --- atomics --------------------------------------------------------------------------------

def test_atomics_from_many_threads():
    nthreads = K.AMO_THREADS
    counter = nvshmem.zeros((8,), np.uint64, like="cupy")
    out = cp.zeros(nthreads, np.uint64)
    sync()
    run("atomics", counter, out, peer())
    sync()
    # each of the 512 threads adds 1 / 2 / 1 / 1; 512 xors of each bit pair cancel (8 each)
    check(counter, np.array([nthreads, 2 * nthreads, nthreads, nthreads, 2 ** 64 - 1, 0, 0, 0],
                            np.uint64), "cute atomic counters")
    fetched = np.sort(cp.asnumpy(out))
    np.testing.assert_array_equal(fetched, np.arange(nthreads, dtype=np.uint64))  # each old value once
    free(counter)


def test_atomic_swap_cswap_fetch_set_bitwise():
    x = sym(np.array([5, 0], np.int64))
    out = cp.zeros(8, np.int64)
    sync()
    run("atomics_scalar", x, out, peer())
    sync()
    # 42 & 0b111000 = 40; 40 | 1 = 41; 41 ^ 3 = 42; 42 & 2 = 2
    np.testing.assert_array_equal(cp.asnumpy(out), [5, 11, 12, 12, 42, 40, 41, 2])
    check(x, np.array([12, 2], np.int64), "target after the left PE's atomics")
    free(x)


def test_float_atomic_add():
    requires(*CASES["float_atomic_add"].requires)
    x = nvshmem.zeros((1,), np.float32, like="cupy")
    sync()
    run("float_atomic_add", x, peer())
    sync()
    check(x, np.array([128.0], np.float32), "cute float atomic_add")
    free(x)


# --- wait / test ----------------------------------------------------------------------------

def test_wait_until_and_test():
    ivars = nvshmem.zeros((8,), np.int32, like="cupy")
    out = cp.full(8, -1, np.int64)
    idx = cp.full(8, 99, np.uint64)
    sync()
    run("wait_test", ivars, out, idx, peer())
    sync()
    # test_all, test(ivars[3] == 4), test_any(== 3), wait_until_any(>= 8), wait_until_some(<= 2)
    np.testing.assert_array_equal(cp.asnumpy(out), [1, 1, 2, 7, 2, 10, -1, -1])
    np.testing.assert_array_equal(cp.asnumpy(idx), [0, 1, 99, 99, 99, 99, 99, 99])
    check(ivars, np.arange(1, 9, dtype=np.int32), "ivars written by the left PE")
    free(ivars)


def test_wait_until_vector_forms():
    ivars = nvshmem.zeros((8,), np.int32, like="cupy")
    cmp_values = cp.asarray(np.arange(8, dtype=np.int32))  # ivars[i] = 2i >= i; > i for i >= 1
    out = cp.full(8, -1, np.int64)
    idx, idx2 = cp.full(8, 99, np.uint64), cp.full(8, 99, np.uint64)
    sync()
    run("wait_test_vector", ivars, cmp_values, out, idx, idx2, peer())
    sync()
    o = cp.asnumpy(out)
    assert o[0] == 1 and 1 <= o[1] <= 7 and o[2] == 7 and o[3] == 0 and o[4] == 8 and o[5] == 8, o
    assert (o[6:] == -1).all(), o
    got = cp.asnumpy(idx)
    np.testing.assert_array_equal(np.sort(got[:7]), np.arange(1, 8))  # test_some_vector: i > i
    assert got[7] == 99, got
    np.testing.assert_array_equal(np.sort(cp.asnumpy(idx2)), np.arange(8))
    check(ivars, 2 * np.arange(8, dtype=np.int32), "ivars written by the left PE")
    free(ivars)


# --- ordering, barriers, queries ------------------------------------------------------------

@pytest.mark.parametrize("scope", SCOPES)
def test_barriers_syncs_and_queries(scope):
    x = nvshmem.zeros((2,), np.int32, like="cupy")
    out = cp.full(8, -9, np.int32)
    sync()
    run(f"barriers_{scope}", x, out, peer())
    sync()
    check(x, np.array([1, 2], np.int32), "fence-ordered puts")
    np.testing.assert_array_equal(cp.asnumpy(out), [0, 0, me(), npes(), me(), npes(), npes() - 1, -9])
    free(x)


def test_flush_at_every_scope():
    requires(*CASES["flush"].requires)
    x = nvshmem.zeros((1,), np.int32, like="cupy")
    sync()
    run("flush", x, peer())
    sync()
    check(x, np.array([5], np.int32), "cute p then flush")
    free(x)


def test_barrier_warpgroup():
    out = cp.full(1, -9, np.int32)
    sync()
    run("barrier_warpgroup", out)
    sync()
    assert int(out[0]) == 0


def test_ptr_and_peer_view():
    x = poisoned(4)
    out = cp.zeros(2, np.int64)
    sync()
    run("ptr_peer", x, out, peer())
    sync()
    o = cp.asnumpy(out)
    assert o[0] != 0, "nvshmem_ptr to the peer is null"
    assert o[1] == int(POISON), o  # the peer's x[3], loaded through the view
    check(x, np.array([123.0, left(), POISON, POISON], np.float32), "stores through a peer view")
    free(x)


# --- collectives ----------------------------------------------------------------------------

@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("kind", K.COLL_KINDS)
def test_broadcast_fcollect_alltoall(kind, scope):
    n = COLL_N
    src = sym(data(me(), n * npes(), np.int32))
    dst = poisoned(n * npes() * npes(), np.int32)
    sync()
    run(f"{kind}_{scope}", dst, src)
    sync()
    if kind == "broadcast":
        want = data(0, n * npes(), np.int32)
    elif kind == "fcollect":
        want = np.concatenate([data(pe, n * npes(), np.int32) for pe in range(npes())])
    else:
        want = np.concatenate([data(pe, n * npes(), np.int32)[me() * n:(me() + 1) * n]
                               for pe in range(npes())])
    expected = np.full(n * npes() * npes(), 0x5A, np.int32)
    expected[:want.size] = want
    check(dst, expected, f"cute {kind} ({scope})")
    free(src, dst)


REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply,
            "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@pytest.mark.parametrize("op,scope", K.REDUCE_CASES)
def test_reduce(op, scope):
    n = REDUCE_N
    values = [data(pe, n, np.uint32, salt=7) % 8 + 1 for pe in range(npes())]
    src, dst = sym(values[me()]), poisoned(n, np.uint32)
    sync()
    run(f"{op}_reduce_{scope}", dst, src)
    sync()
    want = values[0]
    for v in values[1:]:
        want = REDUCERS[op](want, v).astype(np.uint32)
    check(dst, want, f"cute {op}_reduce ({scope})")
    free(src, dst)


@pytest.mark.parametrize("scope", SCOPES)
def test_reducescatter(scope):
    n = COLL_N
    values = [data(pe, n * npes(), np.float32) for pe in range(npes())]
    src, dst = sym(values[me()]), poisoned(n)
    sync()
    run(f"sum_reducescatter_{scope}", dst, src)
    sync()
    want = sum(values)[me() * n:(me() + 1) * n]
    np.testing.assert_allclose(cp.asnumpy(dst), want, rtol=1e-6)
    free(src, dst)


def test_no_leaks_after_the_cute_suite():
    sync()
    assert nvshmem.live_allocations() == [] or all(
        "session" in repr(a) for a in nvshmem.live_allocations())


# --- the seed example, ported, and ours -----------------------------------------------------

@pytest.mark.parametrize("name", ["cute_ring_put_get", "cute_put_signal_pipeline", "cute_allreduce",
                                  "cute_halo_exchange"])
def test_examples(name):
    """The CuTe examples (the seed's ring, ported, and ours); each asserts its own result."""
    import runpy
    from pathlib import Path
    example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"))
    example["run"]()  # the session is already initialised
