"""Every launcher of the CuTe GPU test (tests/gpu/test_cute_gpu.py) compiles on a CPU.

The GPU machine has little time, so what it compiles must be known to compile first. The
launchers are the cases of tests/gpu/cute_kernels.py (``CASES``); each is compiled here to
PTX for sm_90a with fake tensors of the element types and sizes its GPU test uses (2 PEs),
and the PTX must call no public ``nvshmem*`` function and make no indirect call (NVSHMEM
inlined, as in tests/test_cute_api.py).

* Default run: the 30 launchers without collectives (85-110 s on 2 CPUs; spread over worker
  processes where there are 4 CPUs or more).
* ``-m slow`` (or NVSHMEM_DSL_TEST_SLOW=1): also the 22 with a collective (broadcast,
  fcollect, alltoall, reductions, reducescatter at every scope: 3-30 s each, about 4 min in
  all on 2 CPUs). With NVSHMEM 3.4.5's bitcode (the GPU machine's) all 50 that it can
  build compile in under a minute: its collectives call noinline helpers.
* Cheap checks of every case: the C functions it calls (traced, no compile) are in this
  NVSHMEM's device library, its ``requires`` (what the GPU test skips on when NVSHMEM lacks
  it) are among them, and -- with NVSHMEM_DSL_TEST_OLD_BITCODE=<an older
  libnvshmem_device.bc>, e.g. NVSHMEM 3.4.5's, the GPU machine's -- every other function it
  calls is in that library too. The GPU test's argument conversion (real arrays ->
  ``from_dlpack`` tensors) gives the element types and shapes that are compiled here.
"""
from __future__ import annotations

import concurrent.futures
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

cute = pytest.importorskip("cutlass.cute")
import cutlass  # noqa: E402

import nvshmem_dsl.cute as nv  # noqa: E402
from nvshmem_dsl.cute import _compile  # noqa: E402

try:
    from nvshmem_dsl._libs import bitcode_path

    bitcode_path("sm_90a")
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

from compile_jobs import compile_jobs  # noqa: E402
from test_cute_api import PTX_OPTIONS, _called, _check_ptx, _slow_requested  # noqa: E402

GPU_TESTS = Path(__file__).resolve().parent / "gpu"
if str(GPU_TESTS) not in sys.path:
    sys.path.insert(0, str(GPU_TESTS))
import cute_kernels as K  # noqa: E402

NPES = 2  # the GPU test runs on 2 PEs; the collectives' sizes depend on it
FAST = [name for name, c in K.CASES.items() if not c.collective]
SLOW = [name for name, c in K.CASES.items() if c.collective]


def _compile_case(name: str):
    """(name, PTX, seconds) of one case (in a worker process)."""
    case = K.CASES[name]
    t0 = time.perf_counter()
    ptx = nv.compile_to_ptx(case.launcher, *case.example_args(NPES), arch="sm_90a",
                            options=PTX_OPTIONS)
    return name, ptx, time.perf_counter() - t0


def _compile_all(names):
    """Compile the cases, in worker processes when there are 4 CPUs or more (each compile is
    single-threaded, but on 2 CPUs two workers took longer than one process: 112 s vs 97 s)."""
    workers = min(len(names), compile_jobs(min((os.cpu_count() or 1) // 2, 4)))
    if workers == 1:
        results = [_compile_case(n) for n in names]
    else:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            results = list(pool.map(_compile_case, names))
    for name, _, secs in sorted(results, key=lambda r: -r[2]):
        print(f"  {name}: {secs:.1f} s")
    return {name: ptx for name, ptx, _ in results}


@pytest.fixture(scope="module")
def fast_ptx():
    t0 = time.perf_counter()
    out = _compile_all(FAST)
    print(f"{len(out)} launchers without collectives in {time.perf_counter() - t0:.1f} s")
    return out


@pytest.fixture(scope="module")
def slow_ptx(request):
    if not _slow_requested(request.config):
        pytest.skip("the collective launchers take about 4 min of CPU: run with -m slow")
    # the costliest first, so that the workers finish together
    order = sorted(SLOW, key=lambda n: ("block" not in n, "broadcast" not in n))
    t0 = time.perf_counter()
    out = _compile_all(order)
    print(f"{len(out)} collective launchers in {time.perf_counter() - t0:.1f} s")
    return out


def _check(ptx: str) -> None:
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)
    _check_ptx(ptx)  # no public nvshmem* call, no indirect call, the device state is there
    assert re.search(r"^\.visible \.entry ", ptx, re.M)


@pytest.mark.parametrize("name", FAST)
def test_launcher_ptx_sm90a(fast_ptx, name):
    _check(fast_ptx[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_collective_launcher_ptx_sm90a(slow_ptx, name):
    _check(slow_ptx[name])


# --------------------------------------------------------------- cheap checks


def _trace(case, args=None) -> dict:
    """The NVSHMEM C functions the case's kernels call, traced with ``args`` (default: its
    example arguments) -> {symbol: signatures}."""
    token = _compile._compile_arch.set("sm_90a")
    try:
        args = case.example_args(NPES) if args is None else args
        text = str(cute.compile.to_precompiled_mlir(case.launcher, *args,
                                                    options="--gpu-arch sm_90a"))
    finally:
        _compile._compile_arch.reset(token)
    return _called(text)


@pytest.fixture(scope="module")
def called():
    """Case name -> the NVSHMEM C functions its kernels call (traced, not compiled)."""
    return {name: set(_trace(case)) for name, case in K.CASES.items()}


def test_cases():
    assert 40 <= len(K.CASES) <= 60, len(K.CASES)  # compiles on the GPU machine
    assert len(FAST) + len(SLOW) == len(K.CASES)
    for name, case in K.CASES.items():
        assert case.name == name


def test_called_functions_exist_and_requires_are_called(called):
    from nvshmem_dsl.linker import store

    have = store.api_names(90)
    for name, case in K.CASES.items():
        syms = called[name]
        assert syms, name
        assert syms <= have, (name, sorted(syms - have))
        assert set(case.requires) <= syms, (name, sorted(set(case.requires) - syms))
    every = set().union(*called.values())
    # the families of test_numba_gpu.py, every scope
    for sym in ("nvshmem_float_put", "nvshmemx_float_put_nbi_warp", "nvshmemx_float_get_nbi_block",
                "nvshmem_float_p", "nvshmem_float_g", "nvshmemx_float_iget_warp",
                "nvshmemx_float_put_signal_nbi_block", "nvshmemx_signal_op",
                "nvshmem_signal_fetch", "nvshmem_uint64_atomic_fetch_inc",
                "nvshmem_int64_atomic_compare_swap", "nvshmem_int32_test_some_vector",
                "nvshmemx_barrier_warpgroup", "nvshmemx_team_sync_block", "nvshmem_team_translate_pe",
                "nvshmem_ptr", "nvshmemx_int32_alltoall_warp", "nvshmemx_uint32_xor_reduce_block",
                "nvshmemx_float_sum_reducescatter_block", "nvshmemx_bfloat16_put_block"):
        assert sym in every, sym


def test_only_the_required_functions_are_missing_from_the_old_bitcode(called):
    """With NVSHMEM_DSL_TEST_OLD_BITCODE=<libnvshmem_device.bc of an older NVSHMEM> (3.4.5 on
    the GPU machine): a case calls nothing that library lacks, but for its ``requires``
    (which its GPU test checks first, and skips on)."""
    path = os.environ.get("NVSHMEM_DSL_TEST_OLD_BITCODE")
    if not path:
        pytest.skip("set NVSHMEM_DSL_TEST_OLD_BITCODE to an older libnvshmem_device.bc")
    from nvshmem_dsl.linker import store

    have = store.api_names(90, bc_path=path)
    for name, case in K.CASES.items():
        missing = called[name] - have
        assert missing <= set(case.requires), (name, sorted(missing - set(case.requires)))


def test_gpu_arguments_are_the_compiled_ones(called):
    """Case.cute_args (what the GPU test compiles and calls with, here from numpy arrays) gives
    the element types and shapes of Case.example_args (what is compiled here), and kernels
    that call the same C functions (bfloat16 included: uint16 arrays, the element type set);
    it rejects arrays of another dtype or size."""
    from cutlass.cute.runtime import _FakeTensor

    for name, case in K.CASES.items():
        values = [np.zeros(p.size(NPES), p.storage) if isinstance(p, K.Tensor) else 1
                  for p in case.runtime_params()]
        compile_args, call_args = case.cute_args(values, NPES)
        example = case.example_args(NPES)
        assert len(compile_args) == len(example) == len(case.params)
        assert len(call_args) == len(case.runtime_params())
        for got, want, p in zip(compile_args, example, case.params):
            if isinstance(p, K.Tensor):
                assert isinstance(want, _FakeTensor)
                assert got.element_type is want.element_type is p.cute_type, (name, p)
                assert tuple(got.shape) == tuple(want.shape) == (p.size(NPES),), (name, p)
            elif isinstance(p, K.Scalar):
                assert type(got) is type(want) is p.cls
            else:
                assert got == want == p.value
        assert set(_trace(case, compile_args)) == called[name], name
        tensors = [i for i, p in enumerate(case.runtime_params()) if isinstance(p, K.Tensor)]
        bad = list(values)
        bad[tensors[0]] = np.zeros(3, np.int8)
        with pytest.raises(TypeError, match=name):
            case.cute_args(bad, NPES)
    bf16 = K.CASES["put_block_bfloat16"].cute_args(
        [np.zeros(K.N, np.uint16), np.zeros(K.N, np.uint16), 1], NPES)[0]
    assert bf16[0].element_type is cutlass.BFloat16
