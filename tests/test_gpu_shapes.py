"""The shared table of the GPU device-API tests (tests/gpu/shapes.py), checked on a CPU.

* The table: ids unique, every DSL left out says why, and each DSL's GPU test file has one
  test function per kind it runs, parametrised from the table (read from the source: those
  files need cupy or torch to import).
* The checks are not vacuous: for every shape, PE and PE count (1, 2, 4, 8), the buffers build
  and the check fails on them as they start (outputs poisoned).
* Every kernel of the table compiles to PTX for sm_90, as the GPU test would launch it: Numba
  (``cuda.compile_ptx``, numpy arrays standing in: the same Numba types) and Triton
  (``triton.compile``, ``GPUTarget("cuda", 90, 32)``). Numba: every kernel (~40 s on 2 CPUs:
  the collectives are outlined). Triton: each kernel without a collective once by default; every
  specialisation the table launches (~60 compiles, 2-3 min) in the ``slow`` test (``-m slow``
  or NVSHMEM_DSL_TEST_SLOW=1). CuTe's kernels are
  compiled by tests/test_cute_gpu_kernels.py (its cases); here every CuTe shape maps to a case
  that accepts the shape's arrays, for every PE count.
"""
from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import numpy as np
import pytest

GPU_TESTS = Path(__file__).resolve().parent / "gpu"
if str(GPU_TESTS) not in sys.path:
    sys.path.insert(0, str(GPU_TESTS))
import shapes as S  # noqa: E402

from test_cute_api import _slow_requested  # noqa: E402

PES = (1, 2, 4, 8)


# --------------------------------------------------------------- the table


def test_ids_unique_and_exclusions_explained():
    for kind in S.KINDS:
        ids = [s.id for s in S.TABLE if s.kind == kind]
        assert len(ids) == len(set(ids)), (kind, ids)
    assert {s.kind for s in S.TABLE} == set(S.KINDS)
    for s in S.TABLE:
        for reason in s.excluded:
            dsl, _, why = reason.partition(":")
            assert dsl in S.DSLS and len(why.strip()) > 10, (s.id, reason)
        assert any(s.applies(d) for d in S.DSLS), s.id
    print("\n" + S.describe())


@pytest.mark.parametrize("dsl", S.DSLS)
def test_each_dsl_file_has_a_test_per_kind(dsl):
    """test_<kind> decorated with cases("<dsl>", "<kind>"), for every kind the DSL runs."""
    tree = ast.parse((GPU_TESTS / f"test_{dsl}_gpu.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "cases":
                    found[node.name] = tuple(a.value for a in d.args)
    want = {f"test_{k}": (dsl, k) for k in dict.fromkeys(s.kind for s in S.shapes(dsl))}
    assert found == want


@pytest.mark.parametrize("npes", PES)
def test_checks_fail_on_the_initial_buffers(npes):
    for s in S.TABLE:
        if s.kind == "team":
            continue
        for me in range(npes):
            bufs = s.buffers(me, npes)
            with pytest.raises(AssertionError):
                s.check({k: b.values.copy() for k, b in bufs.items()}, me, npes)


@pytest.mark.parametrize("npes", PES)
def test_team_check_fails_on_the_initial_buffers(npes):
    members = list(range(0, npes, 2))
    for me in members:
        b = S.team_bufs(members, me)
        with pytest.raises(AssertionError):
            S.check_team(members, {k: x.values for k, x in b.items()}, me, "strided")


def _host_bufs(shape, npes=2, me=0):
    """The shape's arrays on the host, as the GPU test allocates them on the device."""
    return S.Bufs({k: b.values.copy() for k, b in shape.buffers(me, npes).items()})


# --------------------------------------------------------------- CuTe: every shape has its case


def test_every_cute_shape_maps_to_a_case_that_takes_its_arrays():
    pytest.importorskip("cutlass.cute")
    import cute_kernels as K

    used = set()
    for npes in (1, 2, 4):
        for s in S.shapes("cute"):
            name, values = K.call(s, _host_bufs(s, npes), 1)
            case = K.CASES[name]
            case.cute_args(values, npes)  # TypeError where a dtype or size differs from the spec
            assert set(case.requires) == set(s.requires), s.id
            used.add(name)
    assert used == set(K.CASES), sorted(set(K.CASES) - used)


# --------------------------------------------------------------- Numba to PTX


def _numba_units(shape_list):
    """{(kernel name, types): (python function, types)} of the shapes: one compile each."""
    import numba
    import numba_kernels as K

    units = {}
    for s in shape_list:
        b = _host_bufs(s)
        launches = [K.launch(s, b, 1, 2)] + ([K.fence_launch(b, 1)] if s.kind == "barriers" else [])
        for kernel, _, _, args in launches:
            sig = tuple(numba.typeof(a) for a in args)
            units.setdefault((kernel.py_func.__name__, id(kernel), sig), (kernel.py_func, sig, s.id))
    return units


def _compile_numba(shape_list):
    pytest.importorskip("numba.cuda")
    from numba.cuda import compile_ptx

    t0 = time.perf_counter()
    units = _numba_units(shape_list)
    for fn, sig, sid in units.values():
        ptx, _ = compile_ptx(fn, sig, cc=(9, 0))
        assert ".visible .entry" in ptx and ".target sm_90" in ptx, sid
    print(f"{len(units)} Numba kernels of {len(shape_list)} shapes in {time.perf_counter() - t0:.1f} s")


def test_numba_kernels_compile_to_ptx():
    """Every Numba kernel of the table (the collectives are outlined: fast)."""
    _compile_numba(S.shapes("numba"))


# --------------------------------------------------------------- Triton to PTX

_TRITON_TYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
                 "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
                 "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}


def _triton_units(shape_list):
    import triton_gpu_kernels as K

    units = {}
    for s in shape_list:
        b = _host_bufs(s)
        dtypes = {id(v): (S.Buf(v).elem if k not in ("dst", "src") or s.dtype != "bfloat16" else "bfloat16")
                  for k, v in b.items()}
        launches = [K.launch(s, b, 1, 2)] + ([K.fence_launch(b, 1)] if s.kind == "barriers" else [])
        for kernel, _, warps, args in launches:
            sig, consts = {}, {}
            for p, a in zip(kernel.params, args):
                if p.is_constexpr:
                    sig[p.name], consts[p.name] = "constexpr", a
                elif isinstance(a, np.ndarray):
                    sig[p.name] = "*" + _TRITON_TYPES[dtypes[id(a)]]
                else:
                    sig[p.name] = "i32"
            key = (kernel.fn.__name__, tuple(sig.items()), tuple(consts.items()), warps)
            units.setdefault(key, (kernel, sig, consts, warps, s.id))
    return units


def _compile_triton(units, tmp_path, monkeypatch):
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    # as tests/test_triton_api.py: no line info, less compile time
    monkeypatch.setenv("TRITON_DISABLE_LINE_INFO", "1")
    t0 = time.perf_counter()
    for kernel, sig, consts, warps, sid in units:
        ck = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
        assert ".visible .entry" in ck.asm["ptx"], sid
    print(f"{len(units)} Triton kernels in {time.perf_counter() - t0:.1f} s")


TRITON_COLLECTIVES = {"k_coll", "k_reduce", "k_reducescatter", "k_team_ops"}


def test_triton_kernels_compile_to_ptx(tmp_path, monkeypatch):
    """Each Triton kernel of the table without a collective once (its first shape's
    specialisation); the collective ones are in the slow test (4-10 s each)."""
    first = {}
    for unit in _triton_units(S.shapes("triton")).values():
        if unit[0].fn.__name__ not in TRITON_COLLECTIVES:
            first.setdefault(unit[0].fn.__name__, unit)
    _compile_triton(list(first.values()), tmp_path, monkeypatch)


@pytest.mark.slow
def test_every_triton_shape_compiles_to_ptx(request, tmp_path, monkeypatch):
    """Every specialisation the table launches (constexpr scope, nbi, op; element types):
    about 60 Triton compiles, 2-3 min on 2 CPUs."""
    if not _slow_requested(request.config):
        pytest.skip("about 60 Triton compiles (2-3 min of CPU): run with -m slow")
    _compile_triton(list(_triton_units(S.shapes("triton")).values()), tmp_path, monkeypatch)


def _tuned_units(names):
    """The autotuned and cached kernels of tests/gpu/test_triton_gpu.py, each config of each."""
    import triton_gpu_kernels as K

    sigs = {"k_put_tuned": {"dst": "*fp32", "src": "*fp32", "n": "i32", "pe": "i32"},
            "k_fcollect_tuned": {"dst": "*fp32", "src": "*fp32", "n": "i32", "tag": "*i32"}}
    units = []
    for name in names:
        tuner = getattr(K, name)
        for cfg in tuner.configs:
            units.append((tuner.fn, {**sigs[name], "BLOCK": "constexpr"}, dict(cfg.kwargs), cfg.num_warps, name))
    return units



def test_autotuned_and_cached_triton_kernels_compile_to_ptx(tmp_path, monkeypatch):
    """Every config of both autotuned kernels, and the kernel taken from Triton's cache (the
    collective's configs call its object: no slower than the rest)."""
    import triton_gpu_kernels as K

    assert [(c.kwargs["BLOCK"], c.num_warps) for c in K.k_put_tuned.configs] == list(K.TUNE_CONFIGS)
    assert K.k_fcollect_tuned.do_bench.reps == 5, "the collective is not tuned with nv.do_bench"
    cached = (K.k_put_from_cache, {"dst": "*fp32", "src": "*fp32", "n": "i32", "pe": "i32"}, {}, 4,
              "k_put_from_cache")
    _compile_triton(_tuned_units(["k_put_tuned", "k_fcollect_tuned"]) + [cached], tmp_path, monkeypatch)
