"""CPU conformance of nvshmem_dsl.numba: every generated function, for every element dtype it
dispatches to, types, lowers and links for sm_90 with the NVSHMEM code inlined, but for the
large routines that nvshmem_dsl.linker.outline calls out of line (collectives, barriers: calls to
them, and only to them, are left) (checked on the linked LLVM module: the NVPTX backend is the
slow part, ~10 s for one block-scope reduction inlined, so the whole sweep stops before it); a sample of every family and scope goes all
the way to PTX for sm_90, sm_80 and sm_100 and to a cubin; and wrong calls fail at compile
time with clear errors.

Kernels are built from the op table: one kernel per DSL function holds a call per dtype.
Local arrays stand in for symmetric ones (the code is compiled, never run).
"""
import re

import pytest

numba_cuda = pytest.importorskip("numba.cuda")
from numba import cuda  # noqa: E402
from numba.core import errors  # noqa: E402
from numba.cuda import compile_ptx, types  # noqa: E402

from nvshmem_dsl import _optable
from nvshmem_dsl.linker import calls, plan  # noqa: E402
import nvshmem_dsl.numba as numba_api  # noqa: E402  (the generated API, built)

# Width-only dispatch keys are reached through element types that have no typed form.
SIZED_STANDINS = {"bits64": "complex64", "bits128": "complex128"}
PUBLIC_CALL = re.compile(r"call(?:\.uni)?\s[^;]*?\b(nvshmemx?_\w+)")
PUBLIC_CALL_IR = re.compile(r"call [^@\n]*@(nvshmemx?_\w+)\(")
# The one device function NVSHMEM does not mark alwaysinline.
NOT_INLINED = {"nvshmem_global_exit"}

# Roles of pointer parameters that take something other than the data arrays.
AUX_ARRAYS = {
    "signal": "sig", "status": "st", "indices": "idx", "qp_handles": "qps",
    "out": "out", "attrs": "attrs", "smem": "smem",
}
AUX_DECLS = {
    "sig": "uint64", "st": "int32", "idx": "uint64", "qps": "int32",
    "out": "int64", "attrs": "uint8", "smem": "uint8",
}
SCALARS = {
    "pe": "pe", "team": "0", "count": "4", "signal_value": "1", "signal_op": "9", "cmp": "5",
    "root": "0", "dst_stride": "1", "src_stride": "1", "qp": "0", "smem_amount": "0",
    "nbytes": "8", "hints": "0", "handle": "0", "exit_status": "1",
}
DATA_ROLES = {"sym_dest", "sym_src", "local_dest", "local_src", "sym_target", "ivar", "ivars",
              "cmp_values", "sym_any"}


def _apis():
    return [(name, getattr(numba_api, name)) for name in list(numba_api.DISPATCH)]


def _dispatch(name):
    """The dispatch table of a generated function: key -> C symbol."""
    return numba_api.DISPATCH[name]


def _call(api: str, symbol: str, array: str) -> str:
    op = _optable.device_ops()[symbol]
    args = []
    for p in op["params"]:
        role = p["role"]
        if p["llvm"] == "ptr" and not p.get("byval"):
            args.append(array if role in DATA_ROLES else AUX_ARRAYS[role])
        elif role in ("value", "cmp_value", "compare") and p.get("elem"):
            args.append(f"{array}[1]")
        elif role == "cmp_value":  # a signal's: an integer whatever the array
            args.append("1")
        else:
            args.append(SCALARS[role])
    return f"nv.{api}({', '.join(args)})"


def _kernel_source(calls, arrays):
    lines = ["def kernel(pe):"]
    for name, dtype in sorted(arrays.items()):
        lines.append(f"    {name} = cuda.local.array(8, types.{dtype})")
    lines += [f"    {c}" for c in calls]
    return "\n".join(lines)


def _kernel(source):
    from nvshmem_dsl.numba import c
    ns = {"cuda": cuda, "types": types, "nv": numba_api, "c": c}
    exec(compile(source, "<generated kernel>", "exec"), ns)
    return ns["kernel"]


def _compile(source, cc=(9, 0)):
    ptx, _ = compile_ptx(_kernel(source), (types.int32,), cc=cc)
    return ptx


def _linked_ir(source, cc=(9, 0)):
    """The kernel's LLVM IR after NVSHMEM is linked and inlined (no backend)."""
    from numba.cuda.compiler import compile_cuda

    from nvshmem_dsl.numba import _linker
    library = compile_cuda(_kernel(source), None, (types.int32,), cc=cc).library
    module, _ = _linker.link(library.llvm_strs, cc, opt=0)
    return str(module)


def _kernel_for(api, first_only=False):
    calls, arrays = [], {v: t for v, t in AUX_DECLS.items()}
    for key, symbol in _dispatch(api).items():
        if first_only and calls:
            break
        if key is not None and key.startswith("bits") and key not in SIZED_STANDINS:
            continue  # every 1/2/4-byte dtype has a typed form; see test_raw_c_names
        dtype = SIZED_STANDINS.get(key, key) or "float32"
        if _optable.device_ops()[symbol]["dtype"] == "double2":
            continue  # maxloc takes (value, index) pairs: see test_raw_c_names
        if key == "bfloat16":
            continue  # numba-cuda has no bfloat16 arrays; see test_bfloat16_by_c_name
        arrays[f"a_{dtype}"] = dtype
        calls.append(_call(api, symbol, f"a_{dtype}"))
    return _kernel_source(calls, arrays), calls


def _assert_inlined(ptx, context, pattern=PUBLIC_CALL, arch=90):
    """No call to an NVSHMEM function is left in ``ptx`` (PTX or IR) but to those that
    nvshmem_dsl.linker.outline calls out of line."""
    public = set(pattern.findall(ptx)) - NOT_INLINED
    public -= plan.split(public, arch)[1]
    assert not public, f"{context}: calls left to {sorted(public)[:5]}"
    assert "nvshmemi_device_state_d" in ptx, f"{context}: device state symbol missing"


@pytest.mark.parametrize("api", list(numba_api.DISPATCH))
def test_every_function_and_dtype_links_inlined(api):
    source, calls = _kernel_for(api)
    if not calls:
        pytest.skip("no DSL-typed form")
    _assert_inlined(_linked_ir(source), api, PUBLIC_CALL_IR)


def _family_sample():
    """One DSL function per family and scope (the first in spec order), for the PTX sample."""
    seen, out = set(), []
    for api in list(numba_api.DISPATCH):
        op = _optable.device_ops()[next(iter(_dispatch(api).values()))]
        key = (op["family"], op["scope"])
        if key not in seen:
            seen.add(key)
            out.append(api)
    return out


@pytest.mark.parametrize("api", _family_sample())
def test_every_family_and_scope_compiles_to_ptx_inlined(api):
    source, calls = _kernel_for(api, first_only=True)
    if not calls:
        pytest.skip("no DSL-typed form")
    _assert_inlined(_compile(source), api)


def test_raw_c_names_for_sized_and_mem_forms():
    """Forms no DSL dtype selects (put8, putmem, ...) are reachable by their C names."""
    dispatched = {sym for api in list(numba_api.DISPATCH) for sym in _dispatch(api).values()}
    rest = [sym for sym, op in _optable.device_ops().items()
            if sym not in dispatched and op["dtype"] in ("8", "16", "32", "mem") and op["scope"] == "thread"]
    assert rest, "expected sized/mem forms outside the dispatch tables"
    calls = [_call_raw(sym) for sym in rest]
    arrays = {"a_uint8": "uint8", **AUX_DECLS}
    _assert_inlined(_linked_ir(_kernel_source(calls, arrays).replace("nv.c.", "c.")), "raw C names",
                    PUBLIC_CALL_IR)


def _call_raw(symbol):
    return _call("c." + symbol, symbol, "a_uint8").replace("nv.c.", "c.")


def test_every_c_symbol_is_reachable():
    """Every device C function is the target of a DSL function or reachable by its C name."""
    from nvshmem_dsl.numba import c
    assert set(c.__all__) == set(_optable.device_ops())
    for symbol in _optable.device_ops():
        assert getattr(c, symbol) is not None
    # documented by the C prototype, as CuTe's and Triton's raw forms are (_optable.c_signature)
    assert c.nvshmem_putmem.__doc__ == "void nvshmem_putmem(void * dst, const void * src, size_t nelems, int pe)"
    assert c.nvshmem_int_atomic_fetch_add.__doc__ == "int nvshmem_int_atomic_fetch_add(int * target, int value, int pe)"


def test_bfloat16_by_c_name():
    """bfloat16 travels by value as a struct; numba-cuda has the scalar type, not arrays."""
    source = _kernel_source(
        ["v = c.nvshmem_bfloat16_g(a_uint16, pe)", "c.nvshmem_bfloat16_p(a_uint16, v, pe)",
         "h = c.nvshmem_half_g(a_uint16, pe)", "c.nvshmemx_half_atomic_add(a_uint16, h, pe)"],
        {"a_uint16": "uint16"})
    _assert_inlined(_compile(source), "bfloat16/half by value")


@pytest.mark.parametrize("cc", [(8, 0), (10, 0)])
def test_other_architectures(cc):
    source = _kernel_source(
        ["nv.put_block(a_float32, a_float32, pe)", "nv.p(a_int32, a_int32[1], pe)",
         "a_int64[0] = nv.atomic_fetch_add(a_int64, 1, pe)", "nv.barrier_all()"],
        {"a_float32": "float32", "a_int32": "int32", "a_int64": "int64"})
    _assert_inlined(_compile(source, cc), f"sm_{cc[0]}{cc[1]}", arch=cc[0] * 10 + cc[1])


def test_cubin_for_sm90():
    from test_numba_linker import nvjitlink_cubin
    ptx = _compile(_kernel_source(["nv.put_nbi_warp(a_float32, a_float32, pe)", "nv.quiet()"],
                                  {"a_float32": "float32"}))
    assert nvjitlink_cubin(ptx, "sm_90")[:4] == b"\x7fELF"


def _typing_error(source):
    with pytest.raises(errors.TypingError) as err:
        _compile(source)
    return str(err.value)


def test_error_unsupported_dtype():
    msg = _typing_error(_kernel_source(["nv.atomic_and(a_float32, 1.0, pe)"], {"a_float32": "float32"}))
    assert "nvshmem_dsl.numba.atomic_and: dtype float32 is not supported" in msg
    assert "accepted dtypes:" in msg and "uint32" in msg


def test_error_mismatched_dtypes():
    msg = _typing_error(_kernel_source(["nv.put(a_float32, a_int32, pe)"],
                                       {"a_float32": "float32", "a_int32": "int32"}))
    assert "nvshmem_dsl.numba.put: argument 'src' has dtype int32" in msg


def test_error_wrong_number_of_arguments():
    msg = _typing_error(_kernel_source(["nv.put(a_float32, a_float32, 4, pe, pe)"], {"a_float32": "float32"}))
    assert "nvshmem_dsl.numba.put: takes (dst, src, nelems, pe)" in msg


def test_error_scalar_where_array_required():
    msg = _typing_error(_kernel_source(["nv.p(pe, 1, pe)"], {}))
    assert "argument" in msg and "array" in msg


def test_error_array_where_scalar_required():
    msg = _typing_error(_kernel_source(["nv.put(a_float32, a_float32, a_float32)"], {"a_float32": "float32"}))
    assert "nvshmem_dsl.numba.put: argument 'pe' must be a scalar" in msg


def test_error_float_where_an_integer_is_required():
    """A PE number, a count or a root is an integer: a float there is refused, naming the argument, not
    truncated to the C type; a float element value is taken (converted to the element type, as C does)."""
    msg = _typing_error(_kernel_source(["nv.put(a_float32, a_float32, 1.5)"], {"a_float32": "float32"}))
    assert "nvshmem_dsl.numba.put: argument 'pe' must be an integer (PE number), got float64" in msg
    msg = _typing_error(_kernel_source(["nv.put(a_float32, a_float32, 2.0, pe)"], {"a_float32": "float32"}))
    assert "argument 'nelems' must be an integer" in msg
    _compile(_kernel_source(["nv.p(a_int32, 1.0, pe)", "nv.p(a_int32, True, pe)"], {"a_int32": "int32"}))


def test_constants_are_accepted_as_arguments():
    """IntEnum members (Team, Cmp, SignalOp) work wherever the C function takes an int."""
    import nvshmem_dsl.numba as nvm
    ns = {"cuda": cuda, "types": types, "nv": nvm}
    exec(compile(_kernel_source(
        ["nv.barrier(nv.Team.TEAM_WORLD)", "nv.signal_wait_until(sig, nv.Cmp.CMP_EQ, 1)",
         "nv.signal_op(sig, 1, nv.SignalOp.SIGNAL_ADD, pe)"], {"sig": "uint64"}), "<k>", "exec"), ns)
    ptx, _ = compile_ptx(ns["kernel"], (types.int32,), cc=(9, 0))
    _assert_inlined(ptx, "IntEnum arguments")


def test_error_alltoall_needs_its_count():
    """alltoall's arrays hold a block per PE, so min(sizes) is not the count: it is required."""
    msg = _typing_error(_kernel_source(["nv.alltoall(0, a_float32, a_float32)"], {"a_float32": "float32"}))
    assert "nvshmem_dsl.numba.alltoall: missing argument 'nelems'" in msg


def test_window_compiles_to_a_put_of_the_window():
    """nv.window(x, start, n) is a slice the put takes like any array, NVSHMEM inlined."""
    ptx = _compile(_kernel_source(["nv.put_block(nv.window(a_float32, pe, 4), nv.window(a_float32, 2, 4), pe)"],
                                  {"a_float32": "float32"}))
    _assert_inlined(ptx, "sm_90")


@pytest.mark.parametrize("call,needle", [
    ("nv.window(m, 0, 4)", "argument 'x' must be a 1-D array"),
    ("nv.window(a_float32, 1.5, 4)", "argument 'start' must be an integer"),
    ("nv.window(a_float32, 0, 4.0)", "argument 'n' must be an integer"),
])
def test_window_errors(call, needle):
    source = _kernel_source([f"x = {call}"], {"a_float32": "float32"}).replace(
        "def kernel(pe):", "def kernel(pe):\n    m = cuda.local.array((2, 2), types.float32)")
    msg = _typing_error(source)
    assert "nvshmem_dsl.numba.window" in msg and needle in msg


def test_integer_only_parameters_are_the_non_element_integers():
    """The rule every DSL checks (``_optable.integer_only``): integer C parameters that are not element
    values (PE numbers, counts, strides, roots, teams, operators, signal values) take integers only;
    element values (of any dtype) and pointers are not under it."""
    roles_only, roles_not = set(), set()
    for op in _optable.device_ops().values():
        for p in op["params"]:
            if p["llvm"] == "ptr" or p.get("byval"):
                assert not _optable.integer_only(p)
                continue
            (roles_only if _optable.integer_only(p) else roles_not).add((p["role"], bool(p.get("elem"))))
    assert {"pe", "count", "root", "team", "signal_op", "signal_value", "cmp", "dst_stride"} <= {r for r, _ in roles_only}
    assert all(not elem for _, elem in roles_only) and all(elem for _, elem in roles_not)
    assert ("cmp_value", False) in roles_only and ("cmp_value", True) in roles_not  # a signal's / an element's
