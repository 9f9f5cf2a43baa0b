"""CuTe DSL device API on GPUs, 2 PEs: each family at least once per scope, checked against a
host reference on random data, outputs poisoned first. Run on every PE at once, like
tests/gpu/test_numba_gpu.py (same data helpers: each PE can compute every PE's data).
"""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
cute = pytest.importorskip("cutlass.cute")
import cutlass  # noqa: E402
from cutlass import Float32, Int32, Uint64  # noqa: E402
from cutlass.cute.runtime import from_dlpack  # noqa: E402

import nvshmem_dsl as nvshmem  # noqa: E402
import nvshmem_dsl.cute as nv  # noqa: E402

from test_numba_gpu import POISON, check, data, left, me, npes, peer, poisoned, sym, sync  # noqa: E402

N = 1024
_compiled = {}


@pytest.fixture(scope="module", autouse=True)
def session():
    if not nvshmem.is_initialized():
        nvshmem.init()
    yield
    nvshmem.barrier_all()


def T(x):
    return from_dlpack(x, assumed_align=16)


def run(launcher, *args):
    """Compile once per launcher (nvshmem_dsl.cute.compile: arch + NVSHMEM module init), then run."""
    if launcher not in _compiled:
        _compiled[launcher] = nv.compile(launcher, *args)
    _compiled[launcher](*args)
    cp.cuda.runtime.deviceSynchronize()


# --- RMA at three scopes --------------------------------------------------------------

@cute.kernel
def k_put(dst: cute.Tensor, src: cute.Tensor, pe: Int32, scope: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    if cutlass.const_expr(scope == 0):
        if tidx == 0:
            nv.put(dst, src, pe)
    elif cutlass.const_expr(scope == 1):
        if tidx < 32:
            nv.put_warp(dst, src, pe)
    else:
        nv.put_nbi_block(dst, src, pe)
        nv.quiet()


@cute.kernel
def k_get(dst: cute.Tensor, src: cute.Tensor, pe: Int32, scope: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    if cutlass.const_expr(scope == 0):
        if tidx == 0:
            nv.get_nbi(dst, src, pe)
            nv.quiet()
    elif cutlass.const_expr(scope == 1):
        if tidx < 32:
            nv.get_warp(dst, src, pe)
    else:
        nv.get_block(dst, src, pe)


@cute.jit
def put_thread(dst: cute.Tensor, src: cute.Tensor, pe: Int32):
    k_put(dst, src, pe, 0).launch(grid=[1, 1, 1], block=[64, 1, 1])


@cute.jit
def put_warp(dst: cute.Tensor, src: cute.Tensor, pe: Int32):
    k_put(dst, src, pe, 1).launch(grid=[1, 1, 1], block=[64, 1, 1])


@cute.jit
def put_block(dst: cute.Tensor, src: cute.Tensor, pe: Int32):
    k_put(dst, src, pe, 2).launch(grid=[1, 1, 1], block=[64, 1, 1])


@cute.jit
def get_thread(dst: cute.Tensor, src: cute.Tensor, pe: Int32):
    k_get(dst, src, pe, 0).launch(grid=[1, 1, 1], block=[64, 1, 1])


@cute.jit
def get_warp(dst: cute.Tensor, src: cute.Tensor, pe: Int32):
    k_get(dst, src, pe, 1).launch(grid=[1, 1, 1], block=[64, 1, 1])


@cute.jit
def get_block(dst: cute.Tensor, src: cute.Tensor, pe: Int32):
    k_get(dst, src, pe, 2).launch(grid=[1, 1, 1], block=[64, 1, 1])


@pytest.mark.parametrize("launcher", [put_thread, put_warp, put_block], ids=["thread", "warp", "block"])
def test_put(launcher):
    src, dst = sym(data(me())), poisoned()
    sync()
    run(launcher, T(dst), T(src), Int32(peer()))
    sync()
    check(dst, data(left()), "cute put")
    nvshmem.free(src), nvshmem.free(dst)


@pytest.mark.parametrize("launcher", [get_thread, get_warp, get_block], ids=["thread", "warp", "block"])
def test_get(launcher):
    src, dst = sym(data(me())), poisoned()
    sync()
    run(launcher, T(dst), T(src), Int32(peer()))
    sync()
    check(dst, data(peer()), "cute get")
    nvshmem.free(src), nvshmem.free(dst)


# --- p / g, signals, atomics ------------------------------------------------------------

@cute.kernel
def k_p_g(dst: cute.Tensor, src: cute.Tensor, got: cute.Tensor, pe: Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * 128 + tidx
    nv.p(dst, i, src[i], pe)
    got[i] = nv.g(src, i, pe)


@cute.jit
def p_g(dst: cute.Tensor, src: cute.Tensor, got: cute.Tensor, pe: Int32):
    k_p_g(dst, src, got, pe).launch(grid=[N // 128, 1, 1], block=[128, 1, 1])


def test_p_and_g_from_every_thread():
    src, dst, got = sym(data(me())), poisoned(), poisoned()
    sync()
    run(p_g, T(dst), T(src), T(got), Int32(peer()))
    sync()
    check(dst, data(left()), "cute p")
    check(got, data(peer()), "cute g")
    for x in (src, dst, got):
        nvshmem.free(x)


@cute.kernel
def k_put_signal(dst: cute.Tensor, src: cute.Tensor, sig: cute.Tensor, pe: Int32):
    tidx, _, _ = cute.arch.thread_idx()
    nv.put_signal_block(dst, src, sig, Uint64(7), nv.SignalOp.SIGNAL_SET, pe)
    if tidx == 0:
        sig[1] = nv.signal_wait_until(sig, nv.Cmp.CMP_EQ, Uint64(7))


@cute.jit
def put_signal(dst: cute.Tensor, src: cute.Tensor, sig: cute.Tensor, pe: Int32):
    k_put_signal(dst, src, sig, pe).launch(grid=[1, 1, 1], block=[128, 1, 1])


def test_put_signal_then_wait():
    src, dst = sym(data(me())), poisoned()
    sig = nvshmem.zeros((4,), np.uint64, like="cupy")
    sync()
    run(put_signal, T(dst), T(src), T(sig), Int32(peer()))
    sync()
    check(dst, data(left()), "cute put_signal data")
    check(sig[:2], np.array([7, 7], np.uint64), "cute signal")
    nvshmem.free(src), nvshmem.free(dst), nvshmem.free(sig)


@cute.kernel
def k_atomics(counter: cute.Tensor, pe: Int32):
    nv.atomic_fetch_add(counter, 0, Uint64(1), pe)
    nv.atomic_inc(counter, 1, pe)


@cute.jit
def atomics(counter: cute.Tensor, pe: Int32):
    k_atomics(counter, pe).launch(grid=[4, 1, 1], block=[128, 1, 1])


def test_atomics_from_many_threads():
    counter = nvshmem.zeros((4,), np.uint64, like="cupy")
    sync()
    run(atomics, T(counter), Int32(peer()))
    sync()
    check(counter[:2], np.array([512, 512], np.uint64), "cute atomics")
    nvshmem.free(counter)


# --- barriers and collectives (block scope) ---------------------------------------------

@cute.kernel
def k_collectives(dst: cute.Tensor, src: cute.Tensor, red: cute.Tensor, out: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    nv.barrier_all_block()
    nv.fcollect_block(nv.Team.TEAM_WORLD, dst, src, cute.size(src))
    nv.sum_reduce_block(nv.Team.TEAM_WORLD, red, src, cute.size(red))
    if tidx == 0:
        out[0] = nv.my_pe()
        out[1] = nv.n_pes()


@cute.jit
def collectives(dst: cute.Tensor, src: cute.Tensor, red: cute.Tensor, out: cute.Tensor):
    k_collectives(dst, src, red, out).launch(grid=[1, 1, 1], block=[128, 1, 1])


def test_barrier_fcollect_sum_reduce_and_queries():
    n = 64
    values = [data(pe, n, np.int32) for pe in range(npes())]
    src = sym(values[me()])
    dst, red = poisoned(n * npes(), np.int32), poisoned(n, np.int32)
    out = cp.full(2, -1, np.int32)
    sync()
    run(collectives, T(dst), T(src), T(red), T(out))
    sync()
    check(dst, np.concatenate(values), "cute fcollect_block")
    check(red, sum(values).astype(np.int32), "cute sum_reduce_block")
    np.testing.assert_array_equal(cp.asnumpy(out), [me(), npes()])
    for x in (src, dst, red):
        nvshmem.free(x)


# --- the seed example, ported: put_block then get_block around a ring ------------------

@pytest.mark.parametrize("name", ["cute_ring_put_get", "cute_put_signal_pipeline", "cute_allreduce",
                                  "cute_halo_exchange"])
def test_examples(name):
    """The CuTe examples (the seed's ring, ported, and ours); each asserts its own result."""
    import runpy
    from pathlib import Path
    example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"))
    example["run"]()  # the session is already initialised
