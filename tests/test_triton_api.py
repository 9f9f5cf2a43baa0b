"""The generated Triton API (nvshmem_dsl.triton), on CPU.

* Every generated function, for every element type of its dispatch table (scope and nbi forms
  are functions of their own: 1411 forms), and every ``mem`` form through ``nv.c`` (27), is
  compiled to PTX for sm_90 (``GPUTarget("cuda", 90, 32)``, no GPU needed): one kernel per DSL
  function (every form of it, batched), kernels compiled in parallel processes, Triton's
  ``cubin`` stage left out (ptxas of ~1 MB of inlined NVSHMEM per kernel would add minutes).
  Each kernel's LLVM IR must declare exactly the C functions of the dispatch table (through
  their ``__nvshmem_dsl_tt_`` externs), and its PTX must call no NVSHMEM API function but the
  large ones linked out of line (:func:`nvshmem_dsl.linker.plan.split`, declared ``.extern``): the
  fine-grained ones are inlined.
* The externs' definitions (shims) of all 2731 device C functions are valid LLVM IR.
* One kernel to a cubin (Triton's ptxas) and one with a collective to a cubin linked by
  nvJitLink with its object.
* Clear errors: unsupported or mismatched element types, wrong number of arguments, a scalar
  where a pointer is required, blocks, warpgroup calls with too few warps.
* The hooks: Triton's cache key, chaining another inspection hook, NVSHMEM module init at load.

``NVSHMEM_DSL_TEST_JOBS`` sets the number of compile processes (default: the CPUs, at most 4).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

try:
    from nvshmem_dsl._libs import bitcode_path

    bitcode_path(90)
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.compiler.errors import CompilationError  # noqa: E402

import nvshmem_dsl.triton as nv  # noqa: E402
from nvshmem_dsl import _optable
from nvshmem_dsl.linker import calls, link, outline  # noqa: E402
from nvshmem_dsl.errors import NvshmemTypeError  # noqa: E402
from nvshmem_dsl.triton import _calls, _compile, _shims  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_kernels as tk  # noqa: E402
from compile_jobs import compile_jobs  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
OPS = _optable.device_ops()
_CALL = re.compile(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(nvshmem\w+)")
# The one device function NVSHMEM does not mark alwaysinline (as in tests/test_numba_api.py).
NOT_INLINED = {"nvshmem_global_exit"}
_EXTERN_FUNC = re.compile(r"^\.extern \.func\s+(?:\([^)]*\)\s*)?(nvshmem\w+)", re.M)


# ------------------------------------------------------------------ helpers


def _ptx_only_hook(ours):
    """An inspection hook over ours that leaves Triton's cubin stage out (the kernels' own)."""
    from nvshmem_dsl.kernels.triton import _ptx_only_hook as hook

    return hook(ours)


def _build(fn, signature, ptx_only=True, **options):
    hook = triton.knobs.runtime.add_stages_inspection_hook
    if ptx_only:
        triton.knobs.runtime.add_stages_inspection_hook = _ptx_only_hook(hook)
    try:
        return triton.compile(ASTSource(fn=fn, signature=signature, constexprs={}), target=TARGET,
                              options=options or None)
    finally:
        triton.knobs.runtime.add_stages_inspection_hook = hook


_worker_module = {}


def _worker_init(cache_dir: str, env: dict) -> None:
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ.update(env)


def _compile_one(path: str, name: str) -> tuple:
    """In a worker process: compile kernel ``name`` of the generated file to PTX; returns (name,
    declared C functions, PTX calls of nvshmem*, .extern funcs, references the device state,
    seconds)."""
    import importlib.util

    mod = _worker_module.get(path)
    if mod is None:
        spec = importlib.util.spec_from_file_location(f"nvshmem_dsl_triton_forms_{len(_worker_module)}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _worker_module[path] = mod
    t0 = time.perf_counter()
    ck = _build(getattr(mod, name), tk.SIGNATURE)
    ptx = ck.asm["ptx"]
    declared = sorted(_compile.nvshmem_externs(ck.asm["llir"]))
    return (name, declared, sorted(set(_CALL.findall(ptx))), sorted(set(_EXTERN_FUNC.findall(ptx))),
            "nvshmemi_device_state_d" in ptx, time.perf_counter() - t0)


def _compile_all(path: Path, kernels: dict, cache_dir: Path, env: dict) -> tuple[list, float]:
    """Compile every kernel of ``kernels`` (written to ``path``) in worker processes, the
    biggest first; returns the results and the wall time."""
    names = sorted(kernels, key=lambda n: -len(kernels[n]))
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(_jobs(), initializer=_worker_init,
                                                initargs=(str(cache_dir), env)) as ex:
        results = list(ex.map(_compile_one, [str(path)] * len(names), names))
    return results, time.perf_counter() - t0


def _check_results(kernels: dict, results: list) -> list:
    problems = []
    for name, declared, calls, externs, state, _secs in results:
        items = kernels[name]
        want = sorted({key if api == "__mem__" else tk.symbol(api, key) for api, key in items})
        if declared != want:
            problems.append(f"{name}: declares {declared}, expected {want}")
        outlined = set(externs)
        if not set(calls) <= outlined | NOT_INLINED:
            problems.append(f"{name}: calls {sorted(set(calls) - outlined - NOT_INLINED)} (not inlined)")
        if not outlined <= set(want):
            problems.append(f"{name}: extern {sorted(outlined - set(want))}")
        if not state and not all(OPS[s]["family"] in _calls.PURE_FAMILIES for s in want):
            problems.append(f"{name}: no nvshmemi_device_state_d")
    return problems


def _jobs() -> int:
    return compile_jobs(min(4, os.cpu_count() or 1))


# --------------------------------------------------------------- the API


def test_every_dsl_function_is_a_triton_builtin():
    assert set(nv.DISPATCH) == set(tk.DISPATCH)
    assert len(nv.DISPATCH) == 172
    for name, table in nv.DISPATCH.items():
        fn = getattr(nv, name)
        assert getattr(fn, "__triton_builtin__", False), name
        assert dict(fn.dispatch) == dict(table)
        assert "C function per element dtype:" in fn.__doc__
        assert "# count = min of the" not in fn.__doc__  # Triton pointers carry no size


def test_dispatch_keys_are_triton_dtype_names():
    names = {getattr(tl, n).name for n in ("float16", "bfloat16", "float32", "float64", "int8", "int16",
                                            "int32", "int64", "uint8", "uint16", "uint32", "uint64")}
    keys = {k for table in nv.DISPATCH.values() for k in table if k is not None}
    assert keys - names - {"double2"} == {f"bits{b}" for b in (8, 16, 32, 64, 128)}
    assert nv.DISPATCH["put"]["fp32"] == "nvshmem_float_put"
    assert nv.DISPATCH["put_signal_nbi_block"]["uint64"] == "nvshmemx_uint64_put_signal_nbi_block"
    assert nv.DISPATCH["my_pe"] == {None: "nvshmem_my_pe"}


def test_c_layer_has_every_device_function():
    assert set(dir(nv.c)) >= set(OPS)
    assert nv.c.nvshmem_putmem.__doc__ == "void nvshmem_putmem(void * dst, const void * src, size_t nelems, int pe)"
    assert getattr(nv.c.nvshmemx_putmem_signal_nbi_block, "__triton_builtin__", False)
    with pytest.raises(AttributeError, match="no device function 'nvshmem_nope'"):
        nv.c.nvshmem_nope


def test_constants_are_constexprs():
    assert isinstance(nv.CMP_GE, tl.constexpr) and nv.CMP_GE.value == int(nv.Cmp.CMP_GE)
    assert nv.SIGNAL_ADD.value == 10 and nv.TEAM_WORLD.value == 0


def test_boundary_types():
    f = _calls.form("nvshmem_half_p")
    assert f.arg_types == ("int64", "fp16", "int32") and f.ret_type == "int32" and f.void
    f = _calls.form("nvshmem_uint64_atomic_fetch_add")
    assert f.arg_types == ("int64", "uint64", "int32") and f.ret_type == "uint64"
    assert _calls.form("nvshmem_bfloat16_g").ret_type == "bf16"
    assert _calls.form("nvshmem_ptr").ret_ptr and _calls.form("nvshmem_ptr").pure


def test_shims_of_every_device_function_are_valid_llvm():
    llvm = pytest.importorskip("llvmlite.binding")
    text = _compile.shim_module(OPS)
    mod = llvm.parse_assembly(text)
    mod.verify()
    defined = {f.name for f in mod.functions if not f.is_declaration}
    assert defined == {_calls.SHIM_PREFIX + s for s in OPS}
    # thread scope: thread 0 calls (the CTA synchronises after a put: its source is local);
    # block scope: every thread calls
    put = text[text.index("@__nvshmem_dsl_tt_nvshmem_int_put("):]
    put = put[:put.index("\n}")]
    assert "icmp ult i32 %tid, 1" in put and "barrier.cta.sync.aligned.all" in put
    blk = text[text.index("@__nvshmem_dsl_tt_nvshmemx_int_put_block("):]
    blk = blk[:blk.index("\n}")]
    assert "%tid" not in blk and "barrier" not in blk
    pe = text[text.index("@__nvshmem_dsl_tt_nvshmem_my_pe("):]
    assert "%tid" not in pe[:pe.index("\n}")]


# ------------------------------------------------------- everything to PTX


def _all_kernels() -> dict:
    """One kernel per DSL function (all its forms), and one per family of the mem forms."""
    kernels = {f"k_{api}": tk.forms([api]) for api in tk.DISPATCH}
    for sym in sorted(s for s, op in OPS.items() if op["dtype"] == "mem"):
        kernels.setdefault(f"k_mem_{OPS[sym]['family']}", []).append(("__mem__", sym))
    return kernels


def _representative_kernels() -> dict:
    """One form of every family and scope (the first dtype of the first DSL function there),
    a kernel per group of the spec."""
    kernels, seen = {}, set()
    for api, table in tk.DISPATCH.items():
        op = OPS[next(iter(table.values()))]
        if (op["family"], op["scope"]) in seen:
            continue
        seen.add((op["family"], op["scope"]))
        kernels.setdefault(f"k_rep_{op['family']}", []).append((api, next(iter(table))))
    return kernels


def _mem_call(sym: str, k: int) -> str:
    args = []
    for p in OPS[sym]["params"]:
        if p["llvm"] == "ptr":
            args.append(f"p_int8 + {k}" if p["role"] != "signal" else f"p_uint64 + {k}")
        else:
            args.append(tk.SCALARS.get(p["role"], "0"))
    return f"nv.c.{sym}({', '.join(args)})"


def _write(path: Path, kernels: dict) -> Path:
    src = ["import triton", "import triton.language as tl", "import nvshmem_dsl.triton as nv", ""]
    for name, items in kernels.items():
        if items[0][0] == "__mem__":
            lines = ["@triton.jit", f"def {name}({tk.PARAMS}):"]
            lines += [f"    {_mem_call(sym, k)}" for k, (_, sym) in enumerate(items)]
            src.append("\n".join(lines) + "\n")
        else:
            src.append(tk.kernel_source(name, items))
    path.write_text("\n".join(src))
    return path


def _report(what: str, kernels: dict, results: list, wall: float) -> None:
    slowest = sorted(results, key=lambda r: -r[-1])[:3]
    print(f"{what}: {sum(len(v) for v in kernels.values())} forms in {len(kernels)} kernels to PTX, "
          f"{wall:.1f} s on {_jobs()} processes ({sum(r[-1] for r in results):.0f} s of compiles); "
          "slowest: " + ", ".join(f"{r[0]} {r[-1]:.1f} s" for r in slowest))


def test_every_form_compiles_to_ptx_with_nvshmem_inlined(tmp_path):
    """Every form, without line info: the same link and inlining, less compile time."""
    kernels = _all_kernels()
    path = _write(tmp_path / "all_forms.py", kernels)
    results, wall = _compile_all(path, kernels, tmp_path / "cache",
                                 {"TRITON_DISABLE_LINE_INFO": "1"})
    _report("every form", kernels, results, wall)
    assert len(results) == len(kernels)
    problems = _check_results(kernels, results)
    assert not problems, "\n".join(problems[:20])
    assert sum(len(v) for v in kernels.values()) == 1411 + 27


def test_every_family_and_scope_compiles_with_the_default_pipeline(tmp_path):
    """One form of every family and scope through the default pipeline (line info)."""
    kernels = _representative_kernels()
    path = _write(tmp_path / "representative.py", kernels)
    env = {"TRITON_DISABLE_LINE_INFO": os.environ.get("TRITON_DISABLE_LINE_INFO", "")}
    results, wall = _compile_all(path, kernels, tmp_path / "cache", env)
    _report("every family and scope", kernels, results, wall)
    problems = _check_results(kernels, results)
    assert not problems, "\n".join(problems[:20])
    families = {(OPS[tk.symbol(a, k)]["family"], OPS[tk.symbol(a, k)]["scope"]) for v in kernels.values()
                for a, k in v}
    assert len(families) == sum(len(v) for v in kernels.values()) > 80


# ------------------------------------------------------------ to a cubin


@triton.jit
def _ring(dst, src, n, flag):
    me = nv.my_pe()
    pe = (me + 1) % nv.n_pes()
    nv.put_block(dst, src, n, pe)
    nv.fence()
    nv.atomic_add(flag, 1, pe)
    nv.signal_wait_until(flag.to(tl.pointer_type(tl.uint64), bitcast=True), nv.CMP_GE, 1)
    v = nv.g(dst, pe)
    tl.store(src, v)


def test_a_kernel_to_a_cubin(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    t0 = time.perf_counter()
    ck = _build(_ring, {"dst": "*fp32", "src": "*fp32", "n": "i64", "flag": "*i32"}, ptx_only=False)
    secs = time.perf_counter() - t0
    ptx, cubin = ck.asm["ptx"], ck.asm["cubin"]
    assert not _CALL.findall(ptx)
    assert cubin[:4] == b"\x7fELF"
    from nvshmem_dsl.linker.link import cubin_info

    defined, _ = cubin_info(cubin)
    assert defined["nvshmemi_device_state_d"] == 1
    print(f"kernel to cubin: {secs:.1f} s, PTX {len(ptx) >> 10} KiB, cubin {len(cubin) >> 10} KiB")
    # Triton's cache: the same kernel again is a cache hit (no compile of ours)
    before = _compile.stats["kernels"]
    t0 = time.perf_counter()
    again = _build(_ring, {"dst": "*fp32", "src": "*fp32", "n": "i64", "flag": "*i32"}, ptx_only=False)
    assert _compile.stats["kernels"] == before
    assert again.asm["cubin"] == cubin
    print(f"from Triton's cache: {time.perf_counter() - t0:.2f} s")


@triton.jit
def _collective(dst, src, n):
    nv.barrier_all()
    r = nv.sum_reduce_block(nv.TEAM_WORLD, dst, src, n)
    tl.store(dst, r)


def test_ptx_alone_builds_no_objects(tmp_path, monkeypatch):
    """A compile whose cubin stage is not ours (PTX only) starts no object builds."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    started = []
    monkeypatch.setattr(outline, "prefetch", lambda names, *a, **k: started.append(sorted(names)))
    ck = _build(_collective, {"dst": "*i32", "src": "*i32", "n": "i64"})
    assert "nvshmemx_int32_sum_reduce_block" in set(_EXTERN_FUNC.findall(ck.asm["ptx"])) and started == []


@pytest.mark.slow
def test_a_collective_to_a_cubin_linked_with_its_object(tmp_path, monkeypatch):
    if link.ptxas() is None or link.nvjitlink_ptx_isa() is None:
        pytest.skip("needs ptxas and nvJitLink")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    before = _compile.stats["cubins_linked"]
    asked, prefetched = [], []
    objects, prefetch = outline.objects, outline.prefetch

    def spy(record, fn):
        def call(names, arch, cpu, features, max_registers=None, bc_path=None):
            record.append((sorted(names), cpu, features, max_registers))
            return fn(names, arch, cpu, features, max_registers, bc_path)
        return call

    monkeypatch.setattr(outline, "objects", spy(asked, objects))
    monkeypatch.setattr(outline, "prefetch", spy(prefetched, prefetch))
    ck = _build(_collective, {"dst": "*i32", "src": "*i32", "n": "i64"}, ptx_only=False, num_warps=8)
    assert set(_EXTERN_FUNC.findall(ck.asm["ptx"])) == {"nvshmem_barrier_all", "nvshmemx_int32_sum_reduce_block"}
    assert _compile.stats["cubins_linked"] == before + 1
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    # the link started building the collectives' objects before the PTX was emitted, for the
    # target and register cap (8 warps: 255) the cubin's link then asked for
    assert prefetched and prefetched[0] == (sorted({"nvshmem_barrier_all", "nvshmemx_int32_sum_reduce_block"}),
                                            *asked[-1][1:])
    assert prefetched[0][3] == 255


@triton.jit
def _barrier(dst):
    nv.barrier_all()
    tl.store(dst, 1)


@pytest.mark.parametrize("provisional", [True, False])
def test_a_kernel_linked_with_provisional_objects_leaves_tritons_cache_at_exit(tmp_path, monkeypatch, provisional):
    """A kernel linked with split objects whose whole form is still being built serves this
    process; at its exit its cache group goes, so that the next process compiles it again."""
    if link.ptxas() is None or link.nvjitlink_ptx_isa() is None:
        pytest.skip("needs ptxas and nvJitLink")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(outline, "provisional", lambda paths: provisional and bool(paths))
    monkeypatch.setattr(_compile, "_provisional_hashes", set())
    registered = []
    monkeypatch.setattr("atexit.register", registered.append)
    ck = _build(_barrier, {"dst": "*i32"}, ptx_only=False)
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    groups = sorted(tmp_path.rglob("__grp__*"))
    assert len(groups) == 1
    assert (_compile._forget_provisional in registered) is provisional
    _compile._forget_provisional()  # as at exit
    assert groups[0].exists() is not provisional
    before = _compile.stats["kernels"]
    _build(_barrier, {"dst": "*i32"}, ptx_only=False)  # as in the next process
    assert _compile.stats["kernels"] == before + provisional


# ------------------------------------------------------------------ errors


def _error(fn, signature=None, **options) -> str:
    with pytest.raises((CompilationError, NvshmemTypeError, _compile.NvshmemLinkError)) as err:
        _build(fn, signature or {"x": "*fp32", "y": "*i32", "h": "*fp16", "pe": "i32", "n": "i64"},
                 **options)
    e = err.value
    return " ".join(str(e).split()) + " " + " ".join(str(e.__cause__ or "").split())


@triton.jit
def _e_dtype(x, y, h, pe, n):
    nv.atomic_swap(h, 1, pe)


@triton.jit
def _e_mismatch(x, y, h, pe, n):
    nv.put(x, y, n, pe)


@triton.jit
def _e_count(x, y, h, pe, n):
    nv.put(x, x, pe)


@triton.jit
def _e_scalar_for_pointer(x, y, h, pe, n):
    nv.p(pe, 1, pe)


@triton.jit
def _e_block_of_pointers(x, y, h, pe, n):
    nv.p(x + tl.arange(0, 4), 1.0, pe)


@triton.jit
def _e_block_value(x, y, h, pe, n):
    nv.p(x, tl.zeros((4,), tl.float32), pe)


@triton.jit
def _e_no_pointer(x, y, h, pe, n):
    nv.atomic_inc(n, pe)


@triton.jit
def _e_signal_type(x, y, h, pe, n):
    nv.signal_fetch(y)


@triton.jit
def _e_raw_count(x, y, h, pe, n):
    nv.c.nvshmem_putmem(x, y, n)


@triton.jit
def _e_float_pe(x, y, h, pe, n):
    nv.put(x, x, 4, 1.5)


@triton.jit
def _e_float_count(x, y, h, pe, n):
    nv.put(x, x, n.to(tl.float32), pe)


@triton.jit
def _e_warpgroup(x, y, h, pe, n):
    nv.barrier_warpgroup(nv.TEAM_WORLD)


@pytest.mark.parametrize("fn,needles", [
    (_e_dtype, ["nvshmem_dsl.triton.atomic_swap", "element type fp16 is not supported",
                "accepted element types: fp32, fp64, int32, int64, uint32, uint64"]),
    (_e_mismatch, ["nvshmem_dsl.triton.put", "argument 'src' has element type int32",
                   "select fp32 (nvshmem_float_put)"]),
    (_e_count, ["nvshmem_dsl.triton.put", "takes put(dst, src, nelems, pe); got 3 arguments"]),
    (_e_scalar_for_pointer, ["nvshmem_dsl.triton.p", "argument 'dst' must be a pointer",
                             "got a scalar int32"]),
    (_e_block_of_pointers, ["argument 'dst' must be a pointer", "a block of 4 pointers to fp32",
                            "not a block of them"]),
    (_e_block_value, ["argument 'value' must be a scalar", "a block of 4 fp32"]),
    (_e_no_pointer, ["nvshmem_dsl.triton.atomic_inc", "argument 'target' must be a pointer", "got a scalar int64"]),
    (_e_signal_type, ["nvshmem_dsl.triton.signal_fetch", "argument 'sig_addr' (uint64_t *) "
                      "must have a 64-bit integer element type, got a pointer to int32"]),
    (_e_raw_count, ["nvshmem_dsl.triton.c.nvshmem_putmem", "takes c.nvshmem_putmem(dst, src, nelems, pe); "
                    "got 3 arguments"]),
    (_e_float_pe, ["nvshmem_dsl.triton.put", "argument 'pe' must be an integer (PE number), got the Python float 1.5"]),
    (_e_float_count, ["nvshmem_dsl.triton.put", "argument 'nelems' must be an integer", "got a scalar fp32"]),
], ids=lambda x: getattr(x, "__name__", "")[3:] if callable(x) else "")
def test_errors_name_the_function_and_the_argument(fn, needles):
    msg = _error(fn)
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_warpgroup_needs_four_warps():
    msg = _error(_e_warpgroup, num_warps=2)
    assert "nvshmemx_barrier_warpgroup (warpgroup scope) needs 4 warps" in msg, msg


def test_clusters_are_refused():
    msg = _error(_raw_address, {"x": "*fp32", "pe": "i32"}, num_ctas=2)
    assert "num_ctas=2" in msg, msg


@triton.jit
def _raw_address(x, pe):
    nv.c.nvshmem_float_p(x.to(tl.int64), 1.5, pe)    # an integer address
    nv.c.nvshmem_int_p(x, 2, pe)                     # any pointer type: no dtype checks
    tl.store(x, nv.c.nvshmem_float_g(x + 1, pe))


def test_raw_c_calls_take_addresses_and_any_pointer():
    ck = _build(_raw_address, {"x": "*fp32", "pe": "i32"})
    assert sorted(_compile.nvshmem_externs(ck.asm["llir"])) == ["nvshmem_float_g", "nvshmem_float_p",
                                                                "nvshmem_int_p"]
    assert not _CALL.findall(ck.asm["ptx"])


@triton.jit
def _libdevice_only(x):
    tl.store(x, tl.extra.cuda.libdevice.sqrt(tl.load(x)))


def test_nvshmems_bitcode_in_extern_libs_is_left_to_our_link(tmp_path, monkeypatch):
    """A program that still gives NVSHMEM's bitcode in ``extern_libs`` (as hand-written externs need):
    a kernel calling nvshmem_dsl.triton compiles as without it (Triton's llir stage linked all of it,
    then our link failed: "symbol multiply defined"); a kernel that does not keeps Triton's stage."""
    from nvshmem_dsl._libs import bitcode_path

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compiled here, not found in a cache
    libs = {"libnvshmem_device": str(bitcode_path(90))}
    sig = {"x": "*fp32", "pe": "i32"}
    def ptx(**options):  # LLVM numbers its call sequences per process: not the code
        return re.sub(r"callseq \d+", "callseq", _build(_raw_address, sig, **options).asm["ptx"])

    assert ptx(extern_libs=libs) == ptx()
    seen = []
    real = triton.knobs.runtime.add_stages_inspection_hook

    def spy(*args, **kwargs):
        real(*args, **kwargs)
        if args or kwargs:
            seen.append((args[2], args[1]["llir"]))  # (options, the llir stage after our hook)
        return None if args or kwargs else real()

    triton.knobs.runtime.add_stages_inspection_hook = spy
    try:
        ptx = _build(_libdevice_only, {"x": "*fp32"}, ptx_only=False, extern_libs=libs).asm["ptx"]
    finally:
        triton.knobs.runtime.add_stages_inspection_hook = real
    assert "sqrt" in ptx and "nvshmemi_device_state_d" in ptx  # Triton linked what it was given
    (options, llir_stage), = seen
    assert dict(options.extern_libs)["libnvshmem_device"] == libs["libnvshmem_device"]
    assert llir_stage.__name__ == "llir_stage"  # ours, which hands this kernel to Triton's own stage


def test_outside_a_kernel():
    with pytest.raises(ValueError, match="triton.jit"):
        nv.put(1, 2, 3, 4)


# ------------------------------------------------------------------ hooks


def test_hook_is_installed_and_keys_triton_cache():
    hook = triton.knobs.runtime.add_stages_inspection_hook
    assert hook is _compile._stages_hook
    key, hsh = hook()
    assert _compile.identity() in key and _compile.identity() in hsh
    if not _compile._hook_keys_cache():  # Triton 3.6: the backend hash carries it
        from triton.backends.nvidia.compiler import CUDABackend

        assert _compile.identity() in CUDABackend(TARGET).hash()


def test_identity_follows_the_environment(monkeypatch):
    a = _compile.identity()
    monkeypatch.setenv("NVSHMEM_DSL_OUTLINE", "none")
    assert _compile.identity() != a


def test_another_inspection_hook_is_chained():
    calls = []

    def other(*args):
        if not args:
            return "other-key", "other-hash"
        calls.append(args[1])

    knobs = triton.knobs.runtime
    _compile.uninstall()
    try:
        knobs.add_stages_inspection_hook = other
        _compile.install()
        key, hsh = knobs.add_stages_inspection_hook()
        assert key.startswith("other-key-nvshmem_dsl-") and hsh.startswith("other-hash-")
        stages = {"llir": None, "ptx": lambda s, m: "triton-ptx", "cubin": lambda s, m: b"triton"}
        from triton.backends.nvidia.compiler import CUDABackend

        knobs.add_stages_inspection_hook(CUDABackend(TARGET), stages, None, None, 90)
        assert calls == [stages]
        assert stages["ptx"]("no nvshmem here", {}) == "triton-ptx"  # other kernels: Triton's
        assert stages["cubin"]("no extern calls", {}) == b"triton"
        _compile.uninstall()
        assert knobs.add_stages_inspection_hook is other
    finally:
        _compile.uninstall()
        knobs.add_stages_inspection_hook = None
        _compile.install()
    assert knobs.add_stages_inspection_hook is _compile._stages_hook


def test_module_init_at_load(monkeypatch):
    from nvshmem_dsl.host import _cuda

    seen, done = [], []
    monkeypatch.setattr(_cuda, "module_uses_nvshmem", lambda h: h == 0x1234)
    monkeypatch.setattr(_compile.hooks, "init", [seen.append])
    monkeypatch.setattr(_compile.hooks, "finalize", [done.append])
    load = triton.knobs.runtime.kernel_load_end_hook
    assert _compile._on_load in load.calls
    load(0x9999, 1, "plain", {}, "h")  # no NVSHMEM device state: left alone
    load(0x1234, 1, "k", {}, "h")
    assert seen == [0x1234]
    unload = getattr(triton.knobs.runtime, "kernel_unload_hook", None)
    if unload is not None:  # Triton 3.7+
        unload(0x1234, 1, "k", {}, "h")
        unload(0x9999, 1, "plain", {}, "h")
        assert done == [0x1234]


def test_install_dsl_hooks_wires_triton_with_cumodule_init(monkeypatch):
    from nvshmem_dsl.linker import module_init

    monkeypatch.setattr(_compile.hooks, "init", [])
    monkeypatch.setattr(_compile.hooks, "finalize", [])
    wired = module_init.install_dsl_hooks()
    assert wired["triton"] is True
    assert _compile.hooks.init == [module_init.module_init]
    assert _compile.hooks.finalize == [module_init._dsl_module_finalize]
    module_init.uninstall_dsl_hooks()
    assert _compile.hooks.init == [] and _compile.hooks.finalize == []


def test_pointer_wraps_arrays_for_triton():
    from nvshmem_dsl.host.memory import _CAIHolder

    holder = _CAIHolder(0x10000, (8,), None, "<f4", owner=None)
    p = nv.pointer(holder, 2)
    assert p.data_ptr() == 0x10000 + 8 and p.dtype == "float32"
    from triton.runtime.jit import mangle_type

    assert mangle_type(p) == "*fp32"


@pytest.mark.skipif(not os.environ.get("NVSHMEM_DSL_TEST_OTHER_TRITON"),
                    reason="set NVSHMEM_DSL_TEST_OTHER_TRITON to a folder holding another triton (e.g. 3.6)")
def test_another_triton_version(tmp_path):
    """A kernel to a cubin with another Triton (installed with pip --target)."""
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import triton, triton.language as tl\n"
        "from triton.backends.compiler import GPUTarget\n"
        "from triton.compiler import ASTSource\n"
        "import nvshmem_dsl.triton as nv\n"
        "@triton.jit\n"
        "def k(x, n):\n"
        "    pe = (nv.my_pe() + 1) %% nv.n_pes()\n"
        "    nv.put_block(x, x + 8, n, pe)\n"
        "    tl.store(x, nv.atomic_fetch_add(x + 1, 1, pe))\n"
        "ck = triton.compile(ASTSource(fn=k, signature={'x': '*i32', 'n': 'i64'}, constexprs={}),"
        " target=GPUTarget('cuda', 90, 32))\n"
        "assert ck.asm['cubin'][:4] == b'\\x7fELF'\n"
        "print(triton.__version__)\n"
    ) % os.environ["NVSHMEM_DSL_TEST_OTHER_TRITON"]
    script = tmp_path / "k.py"
    script.write_text(code)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"), TRITON_DEFAULT_FP_FUSION="1")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    print("compiled with triton", done.stdout.strip())


def test_only_calls_with_local_effects_make_the_program_wait():
    """The leader's p / non-fetching atomic / signal_op: no barrier after it (a loop of them is
    then unswitched like Numba's); put (local source), get (local destination), quiet and waits
    keep it; g has no leader: every thread reads."""
    barrier = "@llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)\n"
    for sym in ("nvshmem_int_p", "nvshmem_int_atomic_add", "nvshmemx_signal_op"):
        assert "call void " + barrier not in _shims._shim(sym)[0], sym
    for sym in ("nvshmem_int_put", "nvshmem_int_get", "nvshmem_quiet", "nvshmem_int_wait_until"):
        assert "call void " + barrier in _shims._shim(sym)[0], sym
    for sym in ("nvshmem_int_g", "nvshmem_half_g", "nvshmem_double_g"):
        shim = _shims._shim(sym)[0]
        assert "%tid" not in shim and "barrier" not in shim and "shfl" not in shim, sym
    # what decides: the roles (a remote source and a PE, a result), not a list of names
    assert {o["family"] for o in OPS.values() if _shims.every_thread_reads(o)} == {"g"}


@pytest.mark.parametrize("sym", ["nvshmem_uint64_atomic_fetch_add", "nvshmem_int_atomic_compare_swap",
                                 "nvshmem_double_atomic_swap", "nvshmem_float_atomic_fetch",
                                 "nvshmemx_qp_char_g", "nvshmemx_qp_half_g"])
def test_a_one_warp_program_gets_the_leaders_result_by_a_shuffle(sym):
    """In a program of one warp, thread 0's result reaches the other lanes by shuffles after they
    meet at the (aligned) CTA barrier, no shared memory; with more warps, or an unknown number,
    through shared memory between two barriers."""
    if sym not in OPS:
        pytest.skip(f"{sym}: not in this NVSHMEM")
    llvm = pytest.importorskip("llvmlite.binding")
    one = _shims._shim(sym, 1)[0]
    assert "shfl.sync.idx" in one and "slot" not in one, one
    assert one.count("barrier.cta.sync.aligned.all") == 1 and one.index("barrier") < one.index("shfl"), one
    wide = re.search(r"define (i64|double) ", one) is not None
    assert one.count("call i32 @llvm.nvvm.shfl.sync.idx.i32") == (2 if wide else 1), one
    for n in (None, 2, 4):
        more = _shims._shim(sym, n)[0]
        assert "shfl" not in more and more.count("barrier.cta.sync.aligned.all") == 2, (n, more)
    for n in (None, 1, 4):
        llvm.parse_assembly(_compile.shim_module([sym], n)).verify()


#: LLVM IR turning the low bits of an i64 into a value of each type and back.
_TO_TYPE = {"i8": "trunc i64 %in to i8", "i16": "trunc i64 %in to i16", "i32": "trunc i64 %in to i32",
            "i64": "add i64 %in, 0", "double": "bitcast i64 %in to double"}
_NARROW = {"float": "i32", "half": "i16", "bfloat": "i16"}


@pytest.mark.parametrize("ty", ["i8", "i16", "i32", "i64", "half", "bfloat", "float", "double"])
def test_the_shuffled_bits_are_the_value(ty):
    """The shuffle's split and reassembly of each result type, run on this CPU with the shuffle
    replaced by the identity (what lane 0 sends is what every lane gets): every bit survives."""
    import ctypes

    llvm = pytest.importorskip("llvmlite.binding")
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    width = {"i8": 8, "i16": 16, "half": 16, "bfloat": 16, "i32": 32, "float": 32}.get(ty, 64)
    if ty in _NARROW:
        into = [f"  %nb = trunc i64 %in to {_NARROW[ty]}", f"  %a = bitcast {_NARROW[ty]} %nb to {ty}"]
        back = [f"  %ob = bitcast {ty} %w to {_NARROW[ty]}", f"  %o = zext {_NARROW[ty]} %ob to i64"]
    else:
        into = [f"  %a = {_TO_TYPE[ty]}"]
        back = ["  %o = bitcast double %w to i64" if ty == "double" else
                ("  %o = add i64 %w, 0" if ty == "i64" else f"  %o = zext {ty} %w to i64")]
    ir = "\n".join([
        "define i32 @llvm.nvvm.shfl.sync.idx.i32(i32 %m, i32 %v, i32 %l, i32 %c) {", "  ret i32 %v", "}",
        "define i64 @roundtrip(i64 %in) {", "entry:", *into, *_shims._from_lane0(ty, "%a"), *back,
        "  ret i64 %o", "}"]).replace("@llvm.nvvm.shfl.sync.idx.i32", "@shfl")
    mod = llvm.parse_assembly(ir)
    mod.verify()
    target = llvm.Target.from_default_triple().create_target_machine()
    with llvm.create_mcjit_compiler(mod, target) as engine:
        engine.finalize_object()
        roundtrip = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(engine.get_function_address("roundtrip"))
        mask = (1 << width) - 1
        for x in (0, 1, 0x80, 0x7FFF, 0x8001, 0xDEADBEEF, 0x0123456789ABCDEF, (1 << 64) - 1, 1 << 63):
            assert roundtrip(x & mask) == x & mask, (ty, hex(x & mask), hex(roundtrip(x & mask)))


@triton.jit
def _g_loop(src, out, iters, peer):
    acc = 0.0
    for i in range(iters):
        acc += nv.g(src + (i & 7), peer)
    tl.store(out, acc)


@triton.jit
def _fetch_add_loop(ctr, out, iters, peer):
    acc = tl.cast(0, tl.uint64)
    for i in range(iters):
        acc += nv.atomic_fetch_add(ctr, 1, peer)
    tl.store(out, acc)


def test_g_has_no_barrier_and_one_warp_fetching_atomics_one():
    """A loop of g: no barrier, no shuffle, unswitched on NVSHMEM's P2P test and unrolled (several
    loads back to back, as in Numba); fetch-add in a program of one warp: the lanes meet at one
    aligned barrier, then two shuffles of the leader's 64-bit result; with 4 warps, through shared
    memory between two barriers."""
    sig = {"src": "*fp32", "out": "*fp32", "iters": "i32", "peer": "i32"}
    g = _build(_g_loop, sig, num_warps=1).asm["ptx"]
    entry = g[g.index(".entry"):]
    entry = entry[:entry.index("\n}\n")]
    assert "bar.sync" not in entry and "barrier.sync" not in entry and "shfl" not in entry
    assert len(re.findall(r"\bld(?:\.volatile)?(?:\.global)?\.[bfu]32\s", entry)) >= 4, entry
    sig = {"ctr": "*u64", "out": "*u64", "iters": "i32", "peer": "i32"}
    one = _build(_fetch_add_loop, sig, num_warps=1).asm["ptx"]
    entry = one[one.index(".entry"):]
    entry = entry[:entry.index("\n}\n")]
    assert entry.count("shfl.sync.idx.b32") == 2 and entry.count("bar.sync") == 1 and "barrier.sync" not in entry
    assert entry.index("bar.sync") < entry.index("shfl.sync.idx.b32")
    four = _build(_fetch_add_loop, sig, num_warps=4).asm["ptx"]
    entry = four[four.index(".entry"):]
    entry = entry[:entry.index("\n}\n")]
    assert "shfl" not in entry and entry.count("bar.sync") >= 2 and "barrier.sync" not in entry


@pytest.mark.slow
def test_maxnreg_holds_for_the_kernel_and_its_objects(tmp_path, monkeypatch):
    """A fine-grained kernel calls NVSHMEM's transport helpers in their objects (nvJitLink links
    them): Triton's maxnreg (a .maxnreg in the PTX) caps the objects too, and ptx_options reach
    the ptxas inside nvJitLink."""
    if link.ptxas() is None or link.nvjitlink_ptx_isa() is None:
        pytest.skip("needs ptxas and nvJitLink")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    sig = {"ctr": "*u64", "out": "*u64", "iters": "i32", "peer": "i32"}
    ck = _build(_fetch_add_loop, sig, ptx_only=False, num_warps=1, maxnreg=40)
    assert calls.helper_calls(ck.asm["ptx"]) and ".maxnreg 40" in ck.asm["ptx"]
    _, registers = link.cubin_info(ck.asm["cubin"])
    assert registers and max(registers.values()) <= 40, registers
    with pytest.raises(Exception, match="no-such-option|Unknown option|unrecognized"):
        _build(_fetch_add_loop, sig, ptx_only=False, num_warps=1, ptx_options="--no-such-option")


def test_a_group_that_is_the_whole_program_calls_without_leader_or_barrier():
    """A warp-scope call in a one-warp program (a warpgroup-scope one in a four-warp program) is made
    by every thread, as a block-scope one: no leader test, no CTA barrier after it (a one-warp put_warp
    program paid a bar.sync a call); in a wider program warp 0 leads and the CTA waits."""
    for sym, warps in (("nvshmemx_int_put_warp", 1), ("nvshmemx_int32_sum_reduce_warp", 1),
                       ("nvshmemx_barrier_warp", 1)):
        if sym not in OPS:
            continue
        one = _shims._shim(sym, warps)[0]
        assert "%tid" not in one and "barrier.cta" not in one and "slot" not in one, (sym, one)
        wide = _shims._shim(sym, 2)[0]
        assert "icmp ult i32 %tid, 32" in wide and "barrier.cta.sync.aligned.all" in wide, (sym, wide)
    unknown = _shims._shim("nvshmemx_int_put_warp", None)[0]
    assert "icmp ult i32 %tid, 32" in unknown

