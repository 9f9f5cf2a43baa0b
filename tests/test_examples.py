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
    """NVSHMEM's code inlined, but for the large routines (collectives, barriers) that
    nvshmem_dsl.linker.outline calls in their objects: no NVSHMEM function is defined in the PTX, and
    the only ones called are those."""
    import re

    pytest.importorskip("numba.cuda")
    from nvshmem_dsl.linker import calls as linker_calls, plan

    example = runpy.run_path(str(EXAMPLES / f"{name}.py"))
    for ptx in example["compile_check"]():
        assert "nvshmemi_device_state_d" in ptx
        assert not re.search(r"^(?:\.visible |\.weak )?\.func\s+(?:\([^)]*\)\s*)?nvshmem", ptx, re.M)
        outlined = linker_calls.extern_calls(ptx) - linker_calls.helper_calls(ptx)  # NVSHMEM's transport helpers aside
        calls = set(re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(nvshmem\w+)", ptx))
        assert calls <= outlined == plan.split(outlined, 90)[1], (calls, outlined)


@pytest.mark.parametrize("name", ["cute_put_signal_pipeline", "cute_allreduce", "cute_halo_exchange"])
def test_cute_examples_compile_with_nvshmem_inlined(name):
    """Every NVSHMEM function inlined but the large ones hybrid linking calls in their objects
    (declared .extern in the PTX; the kernel still defines the device state)."""
    pytest.importorskip("cutlass.cute")
    import re

    from nvshmem_dsl.linker import calls as linker_calls, plan

    example = runpy.run_path(str(EXAMPLES / f"{name}.py"))
    for ptx in example["compile_check"]():
        assert "nvshmemi_device_state_d" in ptx
        defined = set(re.findall(r"^\.(?:visible |weak )?\.func\s+(?:\([^)]*\)\s*)?(nvshmem\w*)", ptx, re.M))
        externs = linker_calls.extern_calls(ptx) - linker_calls.helper_calls(ptx)  # NVSHMEM's transport helpers aside
        assert not defined, defined  # no NVSHMEM function left a call into the kernel's own code
        assert externs == plan.split(externs, 90)[1], externs  # only large ones out of line


@pytest.mark.parametrize("name", ["triton_ring_put_get", "triton_put_signal_pipeline", "triton_allreduce",
                                  "triton_halo_exchange"])
def test_triton_examples_compile_with_nvshmem_inlined(name, tmp_path, monkeypatch):
    """To PTX (Triton's cubin stage left out); the collective of the all-reduce is the one
    NVSHMEM function left a call (to its object, linked with the cubin)."""
    import re

    triton = pytest.importorskip("triton")
    import nvshmem_dsl.triton  # noqa: F401  (installs the compile hooks)

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    ours = triton.knobs.runtime.add_stages_inspection_hook

    def ptx_only(*args):
        if not args:
            key, hsh = ours()
            return key + "-ptx-only", hsh + "-ptx-only"
        ours(*args)
        args[1]["cubin"] = lambda src, metadata: b""

    monkeypatch.setattr(triton.knobs.runtime, "add_stages_inspection_hook", ptx_only)
    example = runpy.run_path(str(EXAMPLES / f"{name}.py"))
    for kernel in example["compile_check"]():
        ptx = kernel.asm["ptx"]
        assert "nvshmemi_device_state_d" in ptx
        externs = set(re.findall(r"^\.extern \.func\s+(?:\([^)]*\)\s*)?(nvshmem\w*)", ptx, re.M))
        calls = set(re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(nvshmem\w+)", ptx))
        assert calls <= externs <= {"nvshmemx_float_sum_reduce_block", "nvshmemx_sync_all_block"}, (calls, externs)
