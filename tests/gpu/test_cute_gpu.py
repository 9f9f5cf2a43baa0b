"""CuTe DSL device API on GPUs, any number of PEs: the kernel shapes of tests/gpu/shapes.py that
CuTe runs (every family at least once per scope), checked element by element against a host
reference on random data, outputs poisoned first -- the checks of test_numba_gpu.py and
test_triton_gpu.py, from the same table.

The kernels and launchers are in tests/gpu/cute_kernels.py (one :class:`cute_kernels.Case`
per compiled launcher; :func:`cute_kernels.call` maps a shape to its case), where
tests/test_cute_gpu_kernels.py compiles every one of them on a CPU. Run on every PE at once:
`python -m nvshmem_dsl.run -n 2 -m pytest -m gpu tests/gpu`.
"""
import pytest

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
cute = pytest.importorskip("cutlass.cute")

import nvshmem_dsl.cute as nv  # noqa: E402

import cute_kernels as K  # noqa: E402
import shapes as S  # noqa: E402
from shapes import cases  # noqa: E402

session = S.session_fixture()
ARRAYS = S.Cupy()
_compiled = {}


def launch(name, values):
    """Compile case `name` of cute_kernels.CASES once (nv.compile: arch + NVSHMEM module init)
    with these arrays and numbers (checked against the case's spec), then launch it."""
    case = K.CASES[name]
    compile_args, call_args = case.cute_args(values, S.npes())
    if name not in _compiled:
        _compiled[name] = nv.compile(case.launcher, *compile_args)
    _compiled[name](*call_args)


def run(shape):
    S.run(shape, ARRAYS, lambda b: launch(*K.call(shape, b, S.peer())))


# --- RMA ------------------------------------------------------------------------------

@cases("cute", "put_get")
def test_put_get(shape):
    run(shape)


@cases("cute", "put_count")
def test_put_count(shape):
    run(shape)


@cases("cute", "put_width")
def test_put_width(shape):
    run(shape)


@cases("cute", "p_g")
def test_p_g(shape):
    run(shape)


@cases("cute", "strided")
def test_strided(shape):
    run(shape)


# --- signals --------------------------------------------------------------------------

@cases("cute", "put_signal")
def test_put_signal(shape):
    run(shape)


@cases("cute", "signal_add")
def test_signal_add(shape):
    run(shape)


# --- atomics --------------------------------------------------------------------------

@cases("cute", "atomics")
def test_atomics(shape):
    run(shape)


@cases("cute", "atomics_scalar")
def test_atomics_scalar(shape):
    run(shape)


@cases("cute", "float_atomic_add")
def test_float_atomic_add(shape):
    run(shape)


# --- wait / test ----------------------------------------------------------------------

@cases("cute", "wait")
def test_wait(shape):
    run(shape)


@cases("cute", "wait_vector")
def test_wait_vector(shape):
    run(shape)


# --- ordering, barriers, queries ------------------------------------------------------

@cases("cute", "barriers")
def test_barriers(shape):
    run(shape)


@cases("cute", "flush")
def test_flush(shape):
    run(shape)


@cases("cute", "barrier_warpgroup")
def test_barrier_warpgroup(shape):
    run(shape)


@cases("cute", "ptr_peer")
def test_ptr_peer(shape):
    run(shape)


# --- collectives ----------------------------------------------------------------------

@cases("cute", "coll")
def test_coll(shape):
    run(shape)


@cases("cute", "reduce")
def test_reduce(shape):
    run(shape)


@cases("cute", "reducescatter")
def test_reducescatter(shape):
    run(shape)


def test_no_leaks_after_the_cute_suite():
    S.assert_no_leaks(ARRAYS)


@pytest.mark.parametrize("name", S.EXAMPLES)
def test_examples(name):
    """The CuTe examples (the seed's ring, ported, and ours); each asserts its own result."""
    S.run_example("cute", name)
