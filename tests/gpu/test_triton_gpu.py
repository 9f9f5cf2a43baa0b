"""Triton device API on GPUs, any number of PEs: the kernel shapes of tests/gpu/shapes.py that
Triton runs (the families of test_numba_gpu.py at every scope), checked element by element
against a host reference on random data, outputs poisoned before each run; and the Triton
examples. The kernels are in tests/gpu/triton_gpu_kernels.py ("every thread calls once" shapes
are a grid of programs there, one call each).

Run on every PE at once: `python -m nvshmem_dsl.run -n 2 -m pytest -m gpu tests/gpu` (or under
mpirun). Needs torch (Triton launches on torch's current stream; Triton 3.6 finds the GPU
through torch) and Triton 3.6 or later.
"""
import numpy as np
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


# --- autotuning and Triton's cache: every module loaded gets NVSHMEM's init ---------------

def _sym(values):
    import nvshmem_dsl
    x = nvshmem_dsl.array(values.shape, values.dtype, like="torch")
    x.copy_(torch.from_numpy(values))
    return x


def _free(*xs):
    import nvshmem_dsl
    for x in xs:
        nvshmem_dsl.free(x)


def test_autotuned_put_initialises_every_config():
    """Triton's own autotuner (its do_bench) on a one-sided kernel: each config is compiled,
    loaded and initialised for NVSHMEM, and the kernel moves the data."""
    from nvshmem_dsl.triton import _compile

    n = 3 * 2048 + 100
    src, dst = _sym(S.data(S.me(), n)), _sym(S.poison(n))
    inits = _compile.stats["modules_initialised"]
    try:
        ARRAYS.sync()
        K.k_put_tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](dst, src, n, S.peer())
        ARRAYS.sync()
        S._eq(ARRAYS.host(dst), S.data(S.left(), n), "autotuned put_block", S.me())
        assert _compile.stats["modules_initialised"] - inits >= len(K.TUNE_CONFIGS)
        assert K.k_put_tuned.best_config.kwargs["BLOCK"] in [b for b, _ in K.TUNE_CONFIGS]
    finally:
        _free(src, dst)


def test_autotuned_collective_keeps_one_config_on_every_pe():
    """A collective autotuned with nv.do_bench: every PE launches every config as often (no
    hang), all keep the same config, and the all-gather is right."""
    import nvshmem_dsl

    n, npes = 64, S.npes()
    src, dst = _sym(S.data(S.me(), n)), _sym(S.poison(n * npes))
    tag = _sym(np.zeros(1, np.int32))
    tags = _sym(np.zeros(npes, np.int32))
    try:
        ARRAYS.sync()
        K.k_fcollect_tuned[(1,)](dst, src, n, tag)
        ARRAYS.sync()
        want = np.concatenate([S.data(pe, n) for pe in range(npes)])
        S._eq(ARRAYS.host(dst), want, "autotuned fcollect_block", S.me())
        nvshmem_dsl.fcollect(nvshmem_dsl.Team.TEAM_WORLD, tags, tag)
        ARRAYS.sync()
        best = K.k_fcollect_tuned.best_config.kwargs["BLOCK"]
        assert ARRAYS.host(tags).tolist() == [best] * npes
    finally:
        _free(src, dst, tag, tags)


def test_a_kernel_from_tritons_disk_cache_is_initialised():
    """The kernel compiled once, then taken from Triton's on-disk cache as a new process would
    (its in-memory cache emptied): not compiled again, its module initialised, the data moved."""
    from nvshmem_dsl.triton import _compile

    if not hasattr(K.k_put_from_cache, "device_caches"):
        pytest.skip(f"Triton {triton.__version__}: no JITFunction.device_caches to empty")
    n = 1000
    src, dst = _sym(S.data(S.me(), n)), _sym(S.poison(n))
    try:
        ARRAYS.sync()
        K.k_put_from_cache[(1,)](dst, src, n, S.peer(), num_warps=4)
        ARRAYS.sync()
        K.k_put_from_cache.device_caches.clear()
        compiled, inits = _compile.stats["kernels"], _compile.stats["modules_initialised"]
        dst.copy_(torch.from_numpy(S.poison(n)))
        ARRAYS.sync()
        K.k_put_from_cache[(1,)](dst, src, n, S.peer(), num_warps=4)
        ARRAYS.sync()
        S._eq(ARRAYS.host(dst), S.data(S.left(), n), "put_block from Triton's cache", S.me())
        assert _compile.stats["kernels"] == compiled, "compiled again: Triton's cache was not used"
        assert _compile.stats["modules_initialised"] == inits + 1
    finally:
        _free(src, dst)


def _compilable():
    try:
        import torch._higher_order_ops.triton_kernel_wrap  # noqa: F401 - torch.compile of Triton kernels
    except ImportError as e:
        pytest.skip(f"torch {torch.__version__} does not compile Triton kernels: {e}")


def test_torch_compile_launches_a_kernel_whose_only_writes_are_nvshmem_calls():
    """Inductor keeps a launch only where it sees the kernel write a tensor, and copies the kernel's
    source into a module of its own (nvshmem_dsl.triton._inductor): the put arrives, and a get's
    result is read after the get by the compiled function."""
    _compilable()
    n = 1000
    src, dst = _sym(S.data(S.me(), n)), _sym(S.poison(n))

    def put(dst, src, pe):
        K.k_put_compiled[(1,)](dst, src, n, pe, num_warps=4)

    def get_twice(dst, src, pe):
        K.k_get_compiled[(1,)](dst, src, n, pe, num_warps=4)
        return dst * 2

    try:
        ARRAYS.sync()
        torch.compile(put, fullgraph=True)(dst, src, S.peer())
        ARRAYS.sync()
        S._eq(ARRAYS.host(dst), S.data(S.left(), n), "put_block under torch.compile", S.me())
        dst.copy_(torch.from_numpy(S.poison(n)))
        ARRAYS.sync()
        twice = torch.compile(get_twice, fullgraph=True)(dst, src, S.peer())
        ARRAYS.sync()
        S._eq(ARRAYS.host(dst), S.data(S.peer(), n), "get_block under torch.compile", S.me())
        S._eq(twice.cpu().numpy(), 2 * S.data(S.peer(), n), "what the compiled function read after the get",
              S.me())
    finally:
        _free(src, dst)


def test_no_leaks_after_the_triton_suite():
    S.assert_no_leaks(ARRAYS)


@pytest.mark.parametrize("name", S.EXAMPLES)
def test_examples(name):
    """The Triton examples; each asserts its own result."""
    S.run_example("triton", name)
