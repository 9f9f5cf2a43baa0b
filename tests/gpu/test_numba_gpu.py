"""Numba device API on GPUs, any number of PEs (1, 2, 4, 8, ...; shapes that need more say so and
skip): the kernel shapes of tests/gpu/shapes.py that Numba runs (every family at least once per
scope), checked element by element against a host reference on random data, outputs poisoned
before each run. The kernels are in tests/gpu/numba_kernels.py.

Run on every PE at once: `python -m nvshmem_dsl.run -n 2 -m pytest -m gpu tests/gpu`
(or under mpirun). Every PE runs the same tests in the same order (allocations and
barriers are collective) and checks its own results.
"""
import pytest

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
from numba import cuda  # noqa: E402

import numba_kernels as K  # noqa: E402
import shapes as S  # noqa: E402
from shapes import cases  # noqa: E402

session = S.session_fixture()
ARRAYS = S.Cupy(extra_sync=cuda.synchronize)


def launch(shape, b, team=0):
    kernel, grid, block, args = K.launch(shape, b, S.peer(), S.npes(), team)
    kernel[grid, block](*args)


def run(shape):
    S.run(shape, ARRAYS, lambda b: launch(shape, b))


# --- RMA ------------------------------------------------------------------------------

@cases("numba", "put_get")
def test_put_get(shape):
    run(shape)


@cases("numba", "put_count")
def test_put_count(shape):
    run(shape)


@cases("numba", "window")
def test_window(shape):
    run(shape)


@cases("numba", "window_sizes")
def test_window_sizes(shape):
    run(shape)


@cases("numba", "put_width")
def test_put_width(shape):
    run(shape)


@cases("numba", "p_g")
def test_p_g(shape):
    run(shape)


@cases("numba", "strided")
def test_strided(shape):
    run(shape)


# --- signals ----------------------------------------------------------------------------

@cases("numba", "put_signal")
def test_put_signal(shape):
    run(shape)


@cases("numba", "signal_add")
def test_signal_add(shape):
    run(shape)


# --- atomics ---------------------------------------------------------------------------

@cases("numba", "atomics")
def test_atomics(shape):
    run(shape)


@cases("numba", "atomics_scalar")
def test_atomics_scalar(shape):
    run(shape)


@cases("numba", "float_atomic_add")
def test_float_atomic_add(shape):
    run(shape)


# --- wait / test ------------------------------------------------------------------------

@cases("numba", "wait")
def test_wait(shape):
    run(shape)


@cases("numba", "wait_vector")
def test_wait_vector(shape):
    run(shape)


# --- ordering, barriers, queries --------------------------------------------------------

@cases("numba", "barriers")
def test_barriers(shape):
    def go(b):
        kernel, grid, block, args = K.fence_launch(b, S.peer())
        kernel[grid, block](*args)
        launch(shape, b)
    S.run(shape, ARRAYS, go)


@cases("numba", "flush")
def test_flush(shape):
    run(shape)


@cases("numba", "barrier_warpgroup")
def test_barrier_warpgroup(shape):
    run(shape)


@cases("numba", "ptr_peer")
def test_ptr_peer(shape):
    run(shape)


def test_get_peer_array_with_nrt(monkeypatch):
    """With numba-cuda's NRT on (NUMBA_CUDA_ENABLE_NRT=1, how NVIDIA runs NVSHMEM4Py's device memory
    tests) a kernel using get_peer_array links (numba-cuda's nrt.cu as PTX, beside the kernel's) and
    its stores reach the peer."""
    import nvshmem_dsl as nv
    from numba.cuda.core import config
    from nvshmem_dsl.core.device.numba import get_peer_array

    monkeypatch.setattr(config, "CUDA_ENABLE_NRT", True)

    @cuda.jit
    def store_to_peer(a, pe, value):
        get_peer_array(a, pe)[0] = value

    me, npes, peer = S.me(), S.npes(), S.peer()
    x = nv.zeros(4, "float32", like="cupy")
    nv.barrier_all()
    store_to_peer[1, 1](x, peer, float(me + 1))
    cuda.synchronize()
    nv.barrier_all()
    senders = [pe for pe in range(npes) if S._peer(pe, npes) == me]
    assert float(x[0]) == (float(senders[0] + 1) if senders else 0.0)
    nv.barrier_all()
    nv.free(x)


# --- collectives -------------------------------------------------------------------------

@cases("numba", "coll")
def test_coll(shape):
    run(shape)


@cases("numba", "reduce")
def test_reduce(shape):
    run(shape)


@cases("numba", "reducescatter")
def test_reducescatter(shape):
    run(shape)


# --- every PE with every PE, teams made on the host and used on the device --------------

@cases("numba", "all_to_all_signals")
def test_all_to_all_signals(shape):
    run(shape)


@cases("numba", "team")
def test_team(shape):
    S.run_team(shape, ARRAYS, lambda team, b: launch(shape, b, int(team)))


def test_no_leaks_after_the_numba_suite():
    S.assert_no_leaks(ARRAYS)


@pytest.mark.parametrize("name", S.EXAMPLES)
def test_examples(name):
    """The Numba examples (the seed's ring, ported, and ours); each asserts its own result."""
    S.run_example("numba", name)
