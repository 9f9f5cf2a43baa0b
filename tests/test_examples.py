"""Every example compiles on CPU (the GPU suite runs them on 2 PEs)."""
import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_numba_ring_example_compiles_with_nvshmem_inlined():
    pytest.importorskip("numba.cuda")
    from numba.cuda import compile_ptx, types
    example = runpy.run_path(str(EXAMPLES / "numba_ring_put_get.py"))
    arr = types.int32[::1]
    ptx, _ = compile_ptx(example["rma_kernel"].py_func, (arr, arr, arr, types.int64), cc=(9, 0))
    assert "nvshmemi_device_state_d" in ptx
    assert "call.uni nvshmem_int32_put" not in ptx and ".func nvshmem" not in ptx


def test_cute_ring_example_compiles_with_nvshmem_inlined():
    cute = pytest.importorskip("cutlass.cute")
    import cutlass

    import nvshmem_dsl.cute as nv
    example = runpy.run_path(str(EXAMPLES / "cute_ring_put_get.py"))
    t = cute.runtime.make_fake_compact_tensor(cutlass.Int32, (1,), assumed_align=16)
    ptx = nv.compile_to_ptx(example["rma_launcher"], t, t, t, cutlass.Int32(1), arch="sm_90a")
    assert "nvshmemi_device_state_d" in ptx and ".func nvshmem" not in ptx


@pytest.mark.parametrize("name", ["numba_put_signal_pipeline", "numba_allreduce", "numba_halo_exchange"])
def test_numba_examples_compile_with_nvshmem_inlined(name):
    pytest.importorskip("numba.cuda")
    example = runpy.run_path(str(EXAMPLES / f"{name}.py"))
    for ptx in example["compile_check"]():
        assert "nvshmemi_device_state_d" in ptx
        assert ".func nvshmem" not in ptx and "call.uni nvshmem_" not in ptx


@pytest.mark.parametrize("name", ["cute_put_signal_pipeline", "cute_allreduce", "cute_halo_exchange"])
def test_cute_examples_compile_with_nvshmem_inlined(name):
    pytest.importorskip("cutlass.cute")
    example = runpy.run_path(str(EXAMPLES / f"{name}.py"))
    for ptx in example["compile_check"]():
        assert "nvshmemi_device_state_d" in ptx and ".func nvshmem" not in ptx
