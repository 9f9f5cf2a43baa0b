"""The clear error for an NVSHMEM kernel launched with more threads than its registers allow
(nvshmem_dsl.numba._launch), without a GPU: a fake kernel whose launch fails as CUDA does."""
import types

import pytest

pytest.importorskip("numba.cuda")
from numba.cuda import dispatcher  # noqa: E402

from nvshmem_dsl.numba import _launch  # noqa: E402


def test_message_names_kernel_registers_block_and_remedies():
    err = _launch.too_many_threads("allreduce", 120, 512, (1024, 1, 1))
    text = str(err)
    for part in ("allreduce", "1024 threads", "120 registers", "at most 512", "launch_bounds=1024",
                 "max_registers=64", "NVSHMEM_DSL_OUTLINE"):
        assert part in text, (part, text)
    assert _launch.too_many_threads("k", 32, 1024, 256) is None
    assert _launch.too_many_threads("k", 32, 1024, (32, 32)) is None
    assert "max_registers=32" in str(_launch.too_many_threads("k", 200, 256, (16, 8, 16)))
    # a block that is not a whole number of warps: registers go to whole warps, in granules of 8
    assert "max_registers=64" in str(_launch.too_many_threads("k", 200, 512, 1000))
    assert "max_registers=96" in str(_launch.too_many_threads("k", 200, 512, 640))


class _OutOfResources(Exception):
    pass


def _kernel(uses_nvshmem, regs=120, maxthreads=512):
    attrs = types.SimpleNamespace(regs=regs, maxthreads=maxthreads)
    lib = types.SimpleNamespace(uses_nvshmem=uses_nvshmem, get_cufunc=lambda: types.SimpleNamespace(attrs=attrs))
    return types.SimpleNamespace(_codelibrary=lib, py_func=types.SimpleNamespace(__qualname__="my_kernel"),
                                 entry_name="_Z9my_kernel")


@pytest.fixture
def wrapped(monkeypatch):
    def failing_launch(self, args, griddim, blockdim, stream=0, sharedmem=0):
        raise _OutOfResources("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")

    monkeypatch.setattr(dispatcher._Kernel, "launch", failing_launch)
    monkeypatch.setattr(_launch, "_installed", False)
    _launch.install()
    yield dispatcher._Kernel.launch
    monkeypatch.setattr(_launch, "_installed", True)


def test_failed_launch_of_an_nvshmem_kernel_explains_itself(wrapped):
    with pytest.raises(_launch.NvshmemLaunchError, match="my_kernel.*1024 threads.*120 registers") as err:
        wrapped(_kernel(True), [], (1, 1, 1), (1024, 1, 1))
    assert isinstance(err.value.__cause__, _OutOfResources)


def test_other_failures_keep_their_error(wrapped):
    with pytest.raises(_OutOfResources):  # not an NVSHMEM kernel
        wrapped(_kernel(False), [], (1, 1, 1), (1024, 1, 1))
    with pytest.raises(_OutOfResources):  # the block fits: something else failed
        wrapped(_kernel(True), [], (1, 1, 1), (256, 1, 1))
