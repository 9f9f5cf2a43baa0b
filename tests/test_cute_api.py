"""The generated CuTe DSL API (nvshmem_dsl.cute), on CPU.

* Every generated function, for every element type of its dispatch table (scope
  and nbi forms are functions of their own; 1400+ calls), is traced into kernels;
  the module must call exactly the C function of the dispatch table, directly,
  with the LLVM types of the op table (which test_conformance checks against the
  bitcode). Tracing stops before the compiler pipeline (``to_precompiled_mlir``):
  about 2 s for all of them.
* A representative subset is compiled to PTX for sm_90a: one function per family
  and scope (collectives: see ``_representative``), every element type of put, p,
  g and atomic_fetch_add, the C layer, peer_tensor and mc_tensor; one compile per
  group, one kernel per call, compiles spread over the CPUs. The PTX must call no
  public ``nvshmem*`` function but those hybrid linking calls out of line
  (collectives, barriers: ``.extern .func``, as ``plan.split`` says) and make no
  indirect call (NVSHMEM's internal ``nvshmemi_*`` helpers are noinline, as in CUDA
  C++), and must reference ``nvshmemi_device_state_d``.
* Everything to PTX (``-m slow``): NVSHMEM's collectives inline 0.4-1.8 MB of PTX
  per call and take 3-35 s of CPU each to compile, so the ~1400 forms take hours.
* A cubin (ptxas -O3), and samples for sm_80 and sm_100a.
* Clear errors: unsupported or mismatched element types, wrong number of
  arguments, a scalar where a tensor is required, ...

Where the time goes (measured, 2 CPUs): the whole cost is CuTe's CudaToBinary pass
(libNVVM at -O3 on the inlined NVSHMEM code, then ptxas); tracing and the bitcode
link are cheap. Hence: PTX-only compiles pass ``--ptxas-options=-O0`` (same PTX;
ptxas -O3 was more than half of the time), and each call gets a kernel of its own
(NVVM/ptxas time grows superlinearly with function size: 24 qp calls took 210 s of
CPU in one kernel, 25 s in 24 kernels). The default run of this file: about 170 s
of CPU, 2.5 min on 2 CPUs.
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

cute = pytest.importorskip("cutlass.cute")
import cutlass  # noqa: E402

import nvshmem_dsl.cute as nv  # noqa: E402
from nvshmem_dsl import _optable  # noqa: E402
import nvshmem_dsl.cute as cute_api  # noqa: E402  (the generated API, built)
from nvshmem_dsl.cute import _compile  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_jobs import compile_jobs  # noqa: E402
from nvshmem_dsl.errors import NvshmemTypeError  # noqa: E402

try:
    from nvshmem_dsl._libs import bitcode_path

    bitcode_path("sm_90a")
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
PTX_OPTIONS = "--ptxas-options=-O0"
T = cute.runtime.make_fake_compact_tensor

# --------------------------------------------------------------- the forms

API = {name: getattr(cute_api, name) for name in cute_api.DISPATCH}
OPS = _optable.device_ops()
# CuTe element types that reach the untyped sized forms (no typed form of that width);
# every 16- and 64-bit CuTe type has a typed form, so put16/put64 ... are called by C name.
SIZED_TYPES = ("Float8E4M3FN", "Float8E5M2", "TFloat32", "Int128", "Uint128")
# Element types for dtype-free pointer parameters, by C type (tests may know C types).
POINTEE = {
    "uint64_t": "Uint64", "size_t": "Uint64", "int": "Int32", "char": "Int8",
    "nvshmemx_qp_handle_t": "Int32", "nvshmemx_region_handle_t": "Uint64",
}
SINGLE_ROLES = {"sym_target", "signal", "ivar"}


def _elem_for(api: str, key):
    """The CuTe element type name for dispatch key ``key`` of ``api``, or None when
    no CuTe type selects it (then the test calls the C function by name)."""
    if key is None:
        return None
    if not key.startswith("bits"):  # double2 (maxloc): no CuTe type; by C name
        return key if isinstance(getattr(cutlass, key, None), type) else None
    bits = int(key[4:])
    for name in SIZED_TYPES:
        cls = getattr(cutlass, name)
        if cls.width == bits and name not in API[api].dispatch:
            return name
    return None


def _forms(apis=None):
    """(api, key) for every dispatch entry of the given (default: all) functions."""
    return [(name, key) for name in (apis or API) for key in API[name].dispatch]


# Kernel parameters, one tensor per element type. (Tensors made in the kernel with
# make_tensor lose the signedness of their element type: CuTe keeps it only on
# tensors it is given.)
PARAM_TYPES = ("BFloat16", "Float16", "Float32", "Float64", "Int8", "Int16", "Int32", "Int64",
               "Uint8", "Uint16", "Uint32", "Uint64", "Float8E4M3FN", "Float8E5M2", "TFloat32")


def _params():
    return tuple(T(getattr(cutlass, n), (16,), assumed_align=16) for n in PARAM_TYPES)


def _view(env, name: str):
    """The tensor of element type ``name``: a kernel parameter, or (Int128 ..., which
    cannot be a parameter) a view of the same memory."""
    if name in env:
        return env[name]
    cls = getattr(cutlass, name)
    ptr = cute.make_ptr(cls, env["Uint8"].iterator.toint(), cute.AddressSpace.gmem,
                        assumed_align=16)
    return cute.make_tensor(ptr, cute.make_layout(16))


def _pointee(ctype: str) -> str:
    text = " ".join(ctype.replace("const", " ").replace("*", " ").split())
    return POINTEE.get(text, "Uint8")


def _args(api: str, key, variant: int, env, pe):
    """Arguments for one call of ``api`` selecting ``key``; ``variant`` alternates the
    optional forms (element count given or left out, index given or not, status
    tensor or None, Python or CuTe scalars). Returns (callable, args, symbol)."""
    symbol = API[api].dispatch[key]
    op = OPS[symbol]
    elem = _elem_for(api, key)
    raw = key is not None and elem is None
    fn = getattr(nv.c, symbol) if raw else API[api]
    has_count = any(p["role"] == "count" for p in op["params"])
    args = []
    for p in op["params"]:
        role = p["role"]
        if p["llvm"] == "ptr" and not p.get("byval"):
            if role == "status" and (variant % 2 == 0 or raw):
                args.append(None)
                continue
            name = elem if (p.get("elem") and elem) else (
                "Uint8" if p.get("elem") else _pointee(p["ctype"]))
            args.append(_view(env, name))
            single = role in SINGLE_ROLES or (role in ("sym_dest", "sym_src") and not has_count)
            if single and variant % 3 == 1 and not raw:
                args.append(variant % 16)
            continue
        if role == "count":
            if variant % 2 == 1 or raw or p.get("required"):
                args.append(8 if variant % 4 == 1 else cutlass.Int32(8))
            continue
        if role == "pe":
            args.append(pe)
        elif role == "team":
            args.append(nv.Team.TEAM_WORLD)
        elif role == "cmp":
            args.append(nv.Cmp.CMP_GE)
        elif role == "signal_op":
            args.append(nv.SignalOp.SIGNAL_ADD)
        elif p.get("elem") and variant % 2:
            args.append(cutlass.Int32(pe) + 1)   # a dynamic value, converted
        else:
            args.append(1)
    return fn, args, symbol


def _keep(env, result):
    """Store a result so that nothing is dead code."""
    if result is None:
        return
    if isinstance(result, cute.Pointer):
        result = result.toint()
    assert isinstance(result, cutlass.Numeric), type(result)
    _view(env, type(result).__name__)[0] = result


def _emit(ts, calls):
    """``calls``: (api, key, variant) triples."""
    env = dict(zip(PARAM_TYPES, ts))
    pe = nv.my_pe()
    for api, key, variant in calls:
        fn, args, _ = _args(api, key, variant, env, pe)
        _keep(env, fn(*args))


def _emit_extras(ts):
    """The C layer, peer_tensor and mc_tensor."""
    env = dict(zip(PARAM_TYPES, ts))
    pe = nv.my_pe()
    f32, u32 = env["Float32"], env["Uint32"]
    nv.c.nvshmem_putmem(f32, env["Uint8"], 64, pe)
    nv.c.nvshmem_int_p(env["Int32"].iterator + 2, pe, pe)
    nv.c.nvshmemx_putmem_signal_nbi_block(f32, f32, 16, env["Uint64"], 1, 9, pe)
    peer = nv.peer_tensor(u32, pe)
    assert peer.element_type is cutlass.Uint32
    peer[3] = cutlass.Uint32(2)
    mc = nv.mc_tensor(nv.Team.TEAM_WORLD, f32)
    mc[1] = f32[0]
    p = nv.ptr(f32, pe)
    assert p.dtype is cutlass.Float32
    env["Int64"][0] = p.toint()


@cute.kernel
def _kernel(ts: tuple, calls: cutlass.Constexpr, extras: cutlass.Constexpr):
    _emit(ts, calls)
    if cutlass.const_expr(extras):
        _emit_extras(ts)


def _launch(ts, calls, extras, per_kernel):
    """One kernel per ``per_kernel`` calls: NVVM and ptxas take superlinear time in the
    size of a function (24 qp calls in one kernel: 210 s; in 24 kernels: 25 s)."""
    chunks = [tuple(calls[i:i + per_kernel]) for i in range(0, len(calls), per_kernel)] or [()]
    for i, chunk in enumerate(chunks):
        _kernel(ts, chunk, extras and i == 0).launch(grid=[1, 1, 1], block=[128, 1, 1])


@cute.jit
def _host(ts: tuple, calls: cutlass.Constexpr, extras: cutlass.Constexpr = False,
          per_kernel: cutlass.Constexpr = 1 << 30):
    _launch(ts, calls, extras, per_kernel)


def _base():
    return _params()


def _variants(calls) -> tuple:
    """(api, key) pairs -> (api, key, variant): the variant alternates the optional forms."""
    return tuple((api, key, i) for i, (api, key) in enumerate(calls))


def _trace(calls, extras=False) -> str:
    """The kernel module before the compiler pipeline (no LLVM, no ptxas)."""
    token = _compile._compile_arch.set("sm_90a")
    try:
        art = cute.compile.to_precompiled_mlir(_host, _base(), _variants(calls), extras,
                                               options="--gpu-arch sm_90a")
    finally:
        _compile._compile_arch.reset(token)
    return str(art)


def _ptx(calls, arch="sm_90a", extras=False, per_kernel=1, **kw) -> str:
    return nv.compile_to_ptx(_host, _base(), _variants(calls), extras, per_kernel, arch=arch,
                             options=PTX_OPTIONS, **kw)


# ----------------------------------------------------------------- checks


def _mlir_type(t: str) -> str:
    t = t.strip()
    if t.startswith("%struct."):
        return f'!llvm.struct<"{t[1:]}", (i16)>'
    return {"ptr": "!llvm.ptr", "float": "f32", "double": "f64"}.get(t, t)


def _mlir_signature(llvm_type: str) -> str:
    ret, params = re.fullmatch(r"(.*?) \((.*)\)", llvm_type).groups()
    ps = ", ".join(_mlir_type(p) for p in params.split(",") if p.strip())
    return f"({ps}) -> {'()' if ret == 'void' else _mlir_type(ret)}"


def _called(module_text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    # `{no_inline}`: a call hybrid linking makes out of line
    for sym, sig in re.findall(r"func\.call @(\w+)\(.*?\)(?: \{[^}]*\})? : (\(.*)$", module_text, re.M):
        out.setdefault(sym, set()).add(sig.strip())
    return out


def _check_ptx(ptx: str) -> None:
    """NVSHMEM's API is inlined, except the functions hybrid linking calls out of line
    (nvshmem_dsl.linker.plan.split: collectives, barriers), which are declared
    ``.extern .func`` and called directly, as NVSHMEM's transport helpers are; no indirect call;
    the device state is defined."""
    from nvshmem_dsl.linker import calls, plan

    indirect = re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?%rd\d+", ptx)
    assert not indirect, f"indirect calls: {indirect[:5]}"
    assert not re.findall(r"mov\.b64\s+%rd\d+,\s+nvshmemx?_\w+", ptx), "function address taken"
    outlined = calls.extern_calls(ptx) - calls.helper_calls(ptx)
    if outlined:
        sm = int(re.search(r"^\.target sm_(\d+)", ptx, re.M).group(1))
        assert plan.split(outlined, sm)[1] == outlined, "outlined what split inlines"
    callees = re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$.]+)", ptx)
    public = sorted({c for c in callees if re.match(r"nvshmemx?_", c)} - outlined)
    assert not public, f"NVSHMEM API calls not inlined: {public}"
    # no definition of an API function (the outlined ones come from their objects)
    assert not re.search(r"^(?:\.visible\s+|\.weak\s+)?\.func\s+(?:\([^)]*\)\s*)?nvshmemx?_", ptx, re.M)
    assert "nvshmemi_device_state_d" in ptx


# ------------------------------------------------------ API surface, docs


def test_same_functions_as_numba(spec):
    from codegen.emit.views import api_functions

    numba_names = [a.name for a in api_functions(spec, "numba")]
    assert list(cute_api.DISPATCH) == numba_names
    for name in cute_api.DISPATCH:
        fn = getattr(nv, name)
        assert fn.__name__ == name and fn.__doc__ and "C function per element dtype" in fn.__doc__
        assert "(array)" not in fn.__doc__
    assert "Float32: nvshmem_float_put" in nv.put.__doc__
    assert "put(dst, src, pe)  # count = min of the tensor sizes" in nv.put.__doc__
    assert nv.peer is nv.peer_tensor and nv.multicast is nv.mc_tensor


def test_dispatch_keys_are_cute_types():
    for name, fn in API.items():
        for key, sym in fn.dispatch.items():
            assert sym in OPS
            assert key is None or key.startswith("bits") or key == "double2" \
                or isinstance(getattr(cutlass, key, None), type), (name, key)


def test_import_needs_no_gpu_and_no_cutlass():
    code = ("import sys, nvshmem_dsl.cute as nv; assert 'cutlass' not in sys.modules; "
            "print(len(nv.__all__), nv.c.__name__, nv.Team.TEAM_WORLD.value)")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1:] == ["nvshmem_dsl.cute.c", "0"]


def test_host_call_is_a_clear_error():
    import numpy as np

    with pytest.raises(NvshmemTypeError, match=r"nvshmem_dsl\.cute\.put: is a device function"):
        nv.put(np.zeros(4), np.zeros(4), 1)
    with pytest.raises(NvshmemTypeError, match=r"cute\.c\.nvshmem_quiet: is a device function"):
        nv.c.nvshmem_quiet()


def test_c_namespace():
    assert nv.c.nvshmem_int_p is nv.c.nvshmem_int_p
    assert "nvshmem_putmem" in dir(nv.c) and "nvshmemx_float_put_nbi_block" in dir(nv.c)
    assert nv.c.nvshmem_putmem.__doc__ == "void nvshmem_putmem(void * dst, const void * src, size_t nelems, int pe)"
    with pytest.raises(AttributeError, match="no device function 'nvshmem_nope'"):
        nv.c.nvshmem_nope  # noqa: B018


# ------------------------------------------------ every form, traced


def _trace_batches():
    """All forms in batches of about 200 calls."""
    forms = _forms()
    return [forms[i:i + 200] for i in range(0, len(forms), 200)]


@pytest.mark.parametrize("batch", range(len(_trace_batches())))
def test_every_form_calls_its_c_function_directly(batch):
    calls = _trace_batches()[batch]
    text = _trace(calls)
    called = _called(text)
    for i, (api, key) in enumerate(calls):
        sym = API[api].dispatch[key]
        want = _mlir_signature(OPS[sym]["llvm_type"])
        assert called.get(sym) == {want}, (api, key, sym, called.get(sym), want)
    # nothing but the intended C functions (and my_pe)
    expected = {API[a].dispatch[k] for a, k in calls} | {"nvshmem_my_pe"}
    assert set(called) == expected


def test_every_form_is_covered():
    n = sum(len(b) for b in _trace_batches())
    assert n == sum(len(fn.dispatch) for fn in API.values())
    assert n > 1000


# ------------------------------------------------ representative PTX


COLLECTIVES = {"broadcast", "fcollect", "alltoall", "reduce", "reducescatter", "maxloc_reduce"}


def _representative():
    """Batches (name, calls): one function per family and scope (its first element
    type; the _nbi forms are in the traced and slow tests), a batch per group; every
    element type of put, p, g and atomic_fetch_add; the C layer, peer_tensor, mc_tensor.

    Collectives are the exception: one call inlines 0.5-1.8 MB of PTX and costs 4-35 s
    of CPU (broadcast_warp/_block about 33 s each), so the default run has every
    collective family at thread scope and the warp and block scopes through fcollect;
    the rest are in the slow test."""
    seen, groups = set(), {}
    for name, fn in API.items():
        op = OPS[next(iter(fn.dispatch.values()))]
        k = (op["family"], op["scope"])
        if k in seen or op["family"] == "maxloc_reduce":
            continue
        if op["family"] in COLLECTIVES and op["scope"] != "thread" and op["family"] != "fcollect":
            continue
        seen.add(k)
        key = next(iter(fn.dispatch))
        group = op["family"] if op["family"] in COLLECTIVES else op["group"]
        groups.setdefault(group, []).append((name, key))
    batches = sorted(groups.items())
    batches.append(("all_dtypes", _forms(["put", "p", "g", "atomic_fetch_add"])))
    return batches


REPRESENTATIVE = _representative()


def _compile_batch(name_calls):
    name, calls = name_calls
    t0 = time.perf_counter()
    ptx = _ptx(calls, extras=(name == "all_dtypes"))
    return name, ptx, time.perf_counter() - t0


def _compile_all(batches):
    """Compile the batches, in worker processes when there are several CPUs (each
    compile is CPU-bound and single-threaded); the costliest first."""
    order = sorted(batches, key=lambda b: -_cost(b[1]))
    workers = min(len(batches), compile_jobs(min(os.cpu_count() or 1, 4)))
    if workers == 1:
        return [_compile_batch(b) for b in order]
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(_compile_batch, order))


def _cost(calls) -> float:
    return sum(10.0 if OPS[API[a].dispatch[k]]["family"] in COLLECTIVES else 1.0
               for a, k in calls)


@pytest.fixture(scope="module")
def representative_ptx():
    t0 = time.perf_counter()
    results = _compile_all(REPRESENTATIVE)
    for name, _, secs in sorted(results, key=lambda r: -r[2]):
        print(f"  {name}: {secs:.1f} s")
    print(f"representative PTX: {len(results)} kernels in {time.perf_counter() - t0:.1f} s")
    return {name: ptx for name, ptx, _ in results}


@pytest.mark.parametrize("name", [n for n, _ in REPRESENTATIVE])
def test_representative_ptx_sm90a(representative_ptx, name):
    ptx = representative_ptx[name]
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)
    _check_ptx(ptx)


def test_representative_covers_every_family_and_scope():
    covered = {(OPS[API[a].dispatch[k]]["family"], OPS[API[a].dispatch[k]]["scope"])
               for _, calls in REPRESENTATIVE for a, k in calls}
    every = {(op["family"], op["scope"]) for op in OPS.values()
             if op["dtype"] != "mem" and op["family"] not in COLLECTIVES}
    assert every <= covered, sorted(every - covered)
    fams = {f for f, _ in covered}
    assert COLLECTIVES - {"maxloc_reduce"} <= fams
    assert {s for f, s in covered if f in COLLECTIVES} == {"thread", "warp", "block"}


def test_cubin():
    """ptxas at its default -O3 on a small batch."""
    calls = [("p", "Float32"), ("g", "Uint8"), ("atomic_fetch_add", "Uint64"),
             ("put_nbi_block", "Float16"), ("signal_wait_until", None)]
    k = nv.compile(_host, _base(), _variants(calls), False, 1, arch="sm_90a", keep_ptx=True,
                   keep_cubin=True)
    assert k.__cubin__[:4] == b"\x7fELF"
    assert k.__ptx__.count(".entry") == len(calls)
    _check_ptx(k.__ptx__)


SAMPLE = [("p", "Float16"), ("g", "BFloat16"), ("atomic_fetch_add", "Uint64"),
          ("put_nbi_block", "Float32"), ("put_signal_nbi", "Int8"), ("signal_wait_until", None),
          ("wait_until_any", "Int32"), ("quiet", None)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_100a"])
def test_other_archs(arch):
    ptx = _ptx(SAMPLE, arch=arch)
    assert re.search(rf"^\.target {arch}\b", ptx, re.M)
    _check_ptx(ptx)


# ---------------------------------------------------- everything to PTX


def _slow_batches():
    """One kernel per function: every element type."""
    return [(name, _forms([name])) for name in API]


def _slow_requested(config) -> bool:
    """Hours of CPU: only with ``-m slow`` (or NVSHMEM_DSL_TEST_SLOW=1), not in a plain run
    or ``-m "not gpu"``."""
    expr = (config.getoption("markexpr") or "").replace("not slow", "")
    return "slow" in expr or bool(os.environ.get("NVSHMEM_DSL_TEST_SLOW"))


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, _ in _slow_batches()])
def test_every_form_ptx_sm90a(name, request):
    if not _slow_requested(request.config):
        pytest.skip("every form to PTX takes hours of CPU: run with -m slow")
    calls = dict(_slow_batches())[name]
    ptx = _ptx(calls)
    _check_ptx(ptx)


# ---------------------------------------------------------------- errors


@cute.kernel
def _err_kernel(f32: cute.Tensor, i32: cute.Tensor, case: cutlass.Constexpr):
    _err_case(case, f32, i32)


def _err_case(case, f32, i32):
    pe = nv.my_pe()
    i8 = cute.make_tensor(cute.make_ptr(cutlass.Int8, f32.iterator.toint(), cute.AddressSpace.gmem),
                          cute.make_layout(4))
    if case == "dtype":
        nv.atomic_fetch_add(i8, 1, pe)
    elif case == "mismatch":
        nv.put(f32, i32, pe)
    elif case == "too_few":
        nv.put(f32, pe)
    elif case == "too_many":
        nv.p(f32, 0, 1.0, pe, 7, 8)
    elif case == "scalar_for_tensor":
        nv.put(f32, 5, 16, pe)
    elif case == "tensor_for_scalar":
        nv.p(f32, f32, pe)
    elif case == "no_tensor":
        nv.atomic_add(1, 2, pe)
    elif case == "signal_dtype":
        nv.signal_op(f32, 1, nv.SignalOp.SIGNAL_SET, pe)
    elif case == "c_arity":
        nv.c.nvshmem_int_p(i32, 1)
    elif case == "float_pe":
        nv.put(f32, f32, 1.5)
    elif case == "no_count_from_pointer":
        nv.put(f32.iterator, f32, pe)
    elif case == "maxloc":
        f64 = cute.make_tensor(cute.make_ptr(cutlass.Float64, f32.iterator.toint(),
                                             cute.AddressSpace.gmem), cute.make_layout(4))
        nv.maxloc_reduce_block(nv.Team.TEAM_WORLD, f64, f64)


@cute.jit
def _err_host(f32: cute.Tensor, i32: cute.Tensor, case: cutlass.Constexpr):
    _err_kernel(f32, i32, case).launch(grid=[1, 1, 1], block=[32, 1, 1])


ERRORS = {
    "dtype": r"nvshmem_dsl\.cute\.atomic_fetch_add: element type Int8 is not supported; "
             r"accepted element types: Float16, Float32, Float64, Int32, Int64, Uint32, Uint64",
    "mismatch": r"nvshmem_dsl\.cute\.put: argument 'src' has element type Int32, but the other "
                r"arguments select Float32",
    "too_few": r"nvshmem_dsl\.cute\.put: takes put\(dst, src, \[nelems\], pe\); got 2 arguments",
    "too_many": r"nvshmem_dsl\.cute\.p: takes p\(dst, \[index\], value, pe\); got 6 arguments",
    "scalar_for_tensor": r"nvshmem_dsl\.cute\.put: argument 'src' must be a tensor \(local source\), "
                         r"got the Python int 5",
    "tensor_for_scalar": r"nvshmem_dsl\.cute\.p: argument 'value' must be a scalar",
    "no_tensor": r"nvshmem_dsl\.cute\.atomic_add: needs a tensor argument to select the element type",
    "signal_dtype": r"nvshmem_dsl\.cute\.signal_op: argument 'sig_addr' \(uint64_t \*\) must have a "
                    r"64-bit integer element type, got Float32",
    "c_arity": r"nvshmem_dsl\.cute\.c\.nvshmem_int_p: takes c\.nvshmem_int_p\(dst, value, pe\); "
               r"got 2",
    "maxloc": r"nvshmem_dsl\.cute\.maxloc_reduce_block: element type Float64 is not supported; "
              r"accepted element types: double2 \(double2 has no CuTe element type: call "
              r"nvshmem_dsl\.cute\.c\.nvshmemx_double2_maxloc_reduce_block",
    "float_pe": r"nvshmem_dsl\.cute\.put: argument 'pe' must be an integer \(PE number\), got the Python float 1\.5",
    "no_count_from_pointer": r"nvshmem_dsl\.cute\.put: argument 'dst' is a pointer: pass the "
                             r"element count explicitly",
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors(case):
    token = _compile._compile_arch.set("sm_90a")
    try:
        with pytest.raises(Exception) as info:
            cute.compile.to_precompiled_mlir(_err_host, T(cutlass.Float32, (16,)),
                                             T(cutlass.Int32, (16,)), case,
                                             options="--gpu-arch sm_90a")
    finally:
        _compile._compile_arch.reset(token)
    err = info.value
    chain = []
    while err is not None and len(chain) < 10:
        chain.append(err)
        err = err.__cause__ or err.__context__
    assert any(isinstance(e, NvshmemTypeError) for e in chain), repr(info.value)
    text = "\n".join(str(e) for e in chain)
    assert re.search(ERRORS[case], text), text[:2000]


# ---------------------------------------------------- conventions in IR


@cute.kernel
def _conv_kernel(a: cute.Tensor, b: cute.Tensor, s: cute.Tensor, h: cute.Tensor):
    _conv_body(a, b, s, h)


def _conv_body(a, b, s, h):
    pe = nv.my_pe()
    nv.put(a, b, pe)                     # count = min(size(a), size(b)), dynamic
    nv.p(s, 3, 7, pe)                    # index 3 -> element address
    nv.p(h, 1.5, pe)                     # half by value
    h[0] = nv.g(h, 2, pe)
    r = nv.atomic_fetch_add(s, 1, 5, pe)
    s[0] = r
    nv.wait_until_all(s, None, nv.Cmp.CMP_EQ, 0)


@cute.jit
def _conv_host(a: cute.Tensor, b: cute.Tensor, s: cute.Tensor, h: cute.Tensor):
    _conv_kernel(a, b, s, h).launch(grid=[1, 1, 1], block=[32, 1, 1])


def test_conventions_dynamic_sizes_and_ptx():
    n = cute.sym_int()
    a = T(cutlass.Float32, (n,))
    b = T(cutlass.Float32, (cute.sym_int(),))
    args = (a, b, T(cutlass.Uint64, (8,)), T(cutlass.Float16, (8,)))
    ptx = nv.compile_to_ptx(_conv_host, *args, arch="sm_90a", options=PTX_OPTIONS)
    _check_ptx(ptx)
    token = _compile._compile_arch.set("sm_90a")
    try:
        text = str(cute.compile.to_precompiled_mlir(_conv_host, *args, options="--gpu-arch sm_90a"))
    finally:
        _compile._compile_arch.reset(token)
    called = _called(text)
    assert set(called) == {"nvshmem_my_pe", "nvshmem_float_put", "nvshmem_uint64_p",
                           "nvshmem_half_p", "nvshmem_half_g", "nvshmem_uint64_atomic_fetch_add",
                           "nvshmem_uint64_wait_until_all"}
    assert "arith.minsi" in text or "arith.select" in text  # min of two dynamic sizes
