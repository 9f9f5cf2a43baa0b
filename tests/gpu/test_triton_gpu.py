"""Triton device API on GPUs, any number of PEs: the kernel shapes of tests/gpu/shapes.py that
Triton runs (the families of test_numba_gpu.py at every scope), checked element by element
against a host reference on random data, outputs poisoned before each run; and the Triton
examples. The kernels are in tests/gpu/triton_gpu_kernels.py ("every thread calls once" shapes
are a grid of programs there, one call each).

Run on every PE at once: `python -m nvshmem_dsl.run -n 2 -m pytest -m gpu tests/gpu` (or under
mpirun). Needs torch (Triton launches on torch's current stream; Triton 3.6 finds the GPU
through torch) and Triton 3.6 or later.
"""
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

import shapes as S  # noqa: E402
import triton_gpu_kernels as K  # noqa: E402
from shapes import cases  # noqa: E402

session = S.session_fixture()
ARRAYS = S.Torch()


def launch(shape, b, team=0):
    kernel, grid, num_warps, args = K.launch(shape, b, S.peer(), S.npes(), team)
    kernel[(grid,)](*args, num_warps=num_warps)


def run(shape):
    S.run(shape, ARRAYS, lambda b: launch(shape, b))


# --- RMA ------------------------------------------------------------------------------

@cases("triton", "put_get")
def test_put_get(shape):
    run(shape)


@cases("triton", "put_count")
def test_put_count(shape):
    run(shape)


@cases("triton", "window")
def test_window(shape):
    run(shape)


@cases("triton", "put_width")
def test_put_width(shape):
    run(shape)


@cases("triton", "p_g")
def test_p_g(shape):
    run(shape)


@cases("triton", "strided")
def test_strided(shape):
    run(shape)


# --- signals --------------------------------------------------------------------------

@cases("triton", "put_signal")
def test_put_signal(shape):
    run(shape)


@cases("triton", "signal_add")
def test_signal_add(shape):
    run(shape)


# --- atomics --------------------------------------------------------------------------

@cases("triton", "atomics")
def test_atomics(shape):
    run(shape)


@cases("triton", "atomics_scalar")
def test_atomics_scalar(shape):
    run(shape)


@cases("triton", "float_atomic_add")
def test_float_atomic_add(shape):
    run(shape)


# --- wait / test ----------------------------------------------------------------------

@cases("triton", "wait")
def test_wait(shape):
    run(shape)


@cases("triton", "wait_vector")
def test_wait_vector(shape):
    run(shape)


# --- ordering, barriers, queries ------------------------------------------------------

@cases("triton", "barriers")
def test_barriers(shape):
    def go(b):
        kernel, grid, num_warps, args = K.fence_launch(b, S.peer())
        kernel[(grid,)](*args, num_warps=num_warps)
        launch(shape, b)
    S.run(shape, ARRAYS, go)


@cases("triton", "flush")
def test_flush(shape):
    run(shape)


@cases("triton", "barrier_warpgroup")
def test_barrier_warpgroup(shape):
    run(shape)


@cases("triton", "ptr_peer")
def test_ptr_peer(shape):
    run(shape)


# --- collectives ----------------------------------------------------------------------

@cases("triton", "coll")
def test_coll(shape):
    run(shape)


@cases("triton", "reduce")
def test_reduce(shape):
    run(shape)


@cases("triton", "reducescatter")
def test_reducescatter(shape):
    run(shape)


# --- every PE with every PE, teams made on the host and used on the device ------------

@cases("triton", "all_to_all_signals")
def test_all_to_all_signals(shape):
    run(shape)


@cases("triton", "team")
def test_team(shape):
    S.run_team(shape, ARRAYS, lambda team, b: launch(shape, b, int(team)))


def test_no_leaks_after_the_triton_suite():
    S.assert_no_leaks(ARRAYS)


@pytest.mark.parametrize("name", S.EXAMPLES)
def test_examples(name):
    """The Triton examples; each asserts its own result."""
    S.run_example("triton", name)
