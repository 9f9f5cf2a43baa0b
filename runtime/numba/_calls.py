"""Typing and code generation for calls of NVSHMEM device functions from Numba kernels.

The generated dispatch table (`nvshmem_dsl._dispatch.table("numba")`) describes each DSL-level
function (`put`, `put_nbi_block`, `atomic_fetch_add`, ...) as a dispatch table from an
element dtype to a C symbol; `make_api` turns such a table into a Numba intrinsic.
`c_function(symbol)` makes the raw, C-named intrinsic. Everything about a symbol's
parameters comes from the op table (generated/ops.json), never from here.

Argument conventions (one for every DSL):
  * canonical order: destination, source, counts, pe (then the team for collectives first,
    as in C);
  * arrays stand for pointers: a symmetric or local array (any layout Numba gives a data
    pointer for); the element count defaults to min(dst.size, src.size) when omitted;
  * a single-element target (p/g dst/src, atomics, signal words, wait variables) is an
    array and an optional index right after it (element 0 otherwise);
  * integers are converted to the C parameter's type, values of the element type too; a float is
    an error, naming the argument, where the parameter takes integers only
    (:func:`nvshmem_dsl._optable.integer_only`).
"""
from __future__ import annotations

import functools

from llvmlite import ir
from numba.core import cgutils, errors
from numba.core.typing import signature
from numba.cuda import types
from numba.cuda.extending import intrinsic

from .. import _optable
from ._intrinsics import declare_device_function

# Roles whose argument is one element, addressed by an array and an optional index.
SINGLE_ELEMENT_ROLES = {"sym_target", "signal", "ivar"}
# Roles of pointer parameters that may be passed as None (a null pointer).
NULLABLE_ROLES = {"status"}


def _numba_scalar(llvm: str, ctype: str, dtype: str | None = None):
    """The Numba type of a C scalar parameter or return value; `dtype` is the element
    dtype when the value has the element type T of a typed function."""
    if dtype is not None:
        return _numba_dtype(_optable.dtypes()[dtype]["numba"])
    if llvm == "ptr":
        return types.uintp
    if llvm == "float":
        return types.float32
    if llvm == "double":
        return types.float64
    if llvm.startswith("i"):
        bits = int(llvm[1:])
        unsigned = _optable.scalar_kind(ctype) == "unsigned"
        return getattr(types, f"{'u' if unsigned else ''}int{bits}")
    raise NotImplementedError(f"no Numba type for LLVM type {llvm!r}")


def _numba_dtype(name: str):
    return getattr(types, name)


def _key(dtype) -> str:
    """The dispatch key of a Numba dtype (the spec's `numba` column)."""
    return "bfloat16" if dtype == types.bfloat16 else str(dtype)


def _llvm_type(text: str, module: ir.Module) -> ir.Type:
    if text == "void":
        return ir.VoidType()
    if text == "ptr":
        return cgutils.voidptr_t
    if text == "float":
        return ir.FloatType()
    if text == "double":
        return ir.DoubleType()
    if text.startswith("%struct."):
        # half/bfloat16 aggregates: an identified struct of one i16, as in the bitcode.
        ty = module.context.get_identified_type(text[1:])
        if ty.is_opaque:
            ty.set_body(ir.IntType(16))
        return ty
    if text.startswith("i"):
        return ir.IntType(int(text[1:]))
    raise NotImplementedError(text)


def _function_type(op: dict, module: ir.Module) -> ir.FunctionType:
    return ir.FunctionType(_llvm_type(op["ret"]["llvm"], module),
                           [_llvm_type(p["llvm"], module) for p in op["params"]])


class _Arg:
    """How one user argument feeds one C parameter."""

    def __init__(self, param: dict, index_arg: int | None = None):
        self.param = param
        self.index_arg = index_arg  # position of an optional element index, if given


def _fail(api: str, msg: str):
    raise errors.TypingError(f"nvshmem_dsl.numba.{api}: {msg}")


def _is_array(t) -> bool:
    return isinstance(t, types.Array)


def _is_int(t) -> bool:
    return isinstance(t, (types.Integer, types.IntegerLiteral, types.Boolean, types.BooleanLiteral,
                          types.IntEnumMember))


def _is_scalar(t) -> bool:
    """Numbers, booleans, IntEnum members (Cmp.CMP_EQ, Team.TEAM_WORLD, ...) and bfloat16."""
    return isinstance(t, (types.Number, types.IntegerLiteral, types.BooleanLiteral, types.Boolean,
                          types.IntEnumMember)) or t == types.bfloat16


def _dtype_name(t) -> str:
    return str(t.dtype) if _is_array(t) else str(t)


def _plan(api: str, op: dict, argtys: tuple, default_count: bool, allow_index: bool, allow_pointer: bool = False):
    """Match user argument types to the C parameters of `op`.

    Returns a list with, per C parameter, either ('arg', i[, index_i]) or ('count',
    array positions) for a defaulted element count.  With `allow_pointer` (the raw C-named
    functions), a pointer parameter also takes a pointer value (``ffi.from_buffer(a)``, a
    ``CPointer`` / ``voidptr``), as NVSHMEM4Py's raw device bindings do.
    """
    params = op["params"]
    plan, i = [], 0
    arrays_for_count = [k for k, p in enumerate(params)
                        if p["role"] in ("sym_dest", "local_dest", "sym_src", "local_src", "ivars")]
    for p in params:
        if p["role"] == "count" and default_count and not p.get("required"):
            plan.append(("count", None))
            continue
        if i >= len(argtys):
            _fail(api, f"missing argument '{p['name']}' ({_optable.role_text(p)})")
        t = argtys[i]
        if p["llvm"] == "ptr" and not p.get("byval"):
            if p["role"] in NULLABLE_ROLES and isinstance(t, (types.NoneType, types.Omitted)):
                plan.append(("null", i))
                i += 1
                continue
            if allow_pointer and isinstance(t, (types.CPointer, types.RawPointer)):
                plan.append(("arg", i, None))
                i += 1
                continue
            if not _is_array(t):
                _fail(api, f"argument '{p['name']}' must be an array ({_optable.role_text(p)}), got {t}")
            idx = None
            if allow_index and p["role"] in SINGLE_ELEMENT_ROLES | {"sym_dest", "sym_src"} \
                    and i + 1 < len(argtys) and _is_int(argtys[i + 1]) \
                    and len(argtys) > _expected_args(op, default_count):
                idx = i + 1
            plan.append(("arg", i, idx))
            i += 2 if idx is not None else 1
            continue
        if not _is_scalar(t):
            _fail(api, f"argument '{p['name']}' must be a scalar ({_optable.role_text(p)}), got {t}")
        if _optable.integer_only(p) and not _is_int(t):
            _fail(api, f"argument '{p['name']}' must be an integer ({_optable.role_text(p)}), got {t}")
        plan.append(("arg", i, None))
        i += 1
    if i != len(argtys):
        _fail(api, f"takes {_signature_text(op, default_count)}; got {len(argtys)} arguments")
    if default_count and not arrays_for_count:
        _fail(api, "internal: no array to take the element count from")
    return plan


def _expected_args(op: dict, default_count: bool) -> int:
    return sum(1 for p in op["params"] if not (p["role"] == "count" and default_count and not p.get("required")))



def _signature_text(op: dict, default_count: bool) -> str:
    names = [p["name"] for p in op["params"] if not (p["role"] == "count" and default_count)]
    return f"({', '.join(names)})"


def _check_elem(api: str, op: dict, plan, argtys) -> None:
    """Every typed pointer argument must have the element type of the chosen C function."""
    want = op["dtype"]
    for p, step in zip(op["params"], plan):
        if step[0] != "arg" or p["llvm"] != "ptr" or p.get("byval"):
            continue
        t = argtys[step[1]]
        if p.get("elem") and want is not None and _optable.dtypes()[want]["kind"] not in ("sized", "mem"):
            numba_name = _optable.dtypes()[want]["numba"]
            if _key(t.dtype) != numba_name:
                _fail(api, f"argument '{p['name']}' has dtype {t.dtype}, but the other arguments "
                           f"select {numba_name}: all data arguments must share one dtype")
        elif p["role"] == "signal" and str(t.dtype) not in ("uint64", "int64"):
            _fail(api, f"argument '{p['name']}' must be a uint64 (or int64) array, got {t.dtype}")


def _codegen(op: dict, plan, argtys):
    def codegen(context, builder, sig, llargs):
        module = builder.module
        fn = declare_device_function(builder, op["symbol"], _function_type(op, module))
        values = []
        arrays = {}
        for k, (p, step) in enumerate(zip(op["params"], plan)):
            kind = step[0]
            if kind == "null":
                values.append(cgutils.voidptr_t(None))
                continue
            if kind == "count":
                values.append(None)  # filled below, once array sizes are known
                continue
            i, idx = step[1], step[2]
            t, v = argtys[i], llargs[i]
            if p["llvm"] == "ptr" and not p.get("byval") and not _is_array(t):  # a raw pointer value
                values.append(builder.bitcast(v, cgutils.voidptr_t))
            elif p["llvm"] == "ptr" and not p.get("byval"):
                ary = context.make_array(t)(context, builder, v)
                arrays[k] = ary
                ptr = ary.data
                if idx is not None:
                    index = context.cast(builder, llargs[idx], argtys[idx], types.intp)
                    ptr = builder.gep(ptr, [index])
                values.append(builder.bitcast(ptr, cgutils.voidptr_t))
            elif p.get("byval"):
                elem_ty = _numba_scalar("", "", op["dtype"])  # half / bfloat16
                val = context.cast(builder, v, t, elem_ty)
                slot = cgutils.alloca_once(builder, val.type)
                builder.store(val, slot)
                values.append(builder.bitcast(slot, cgutils.voidptr_t))
            else:
                target = _numba_scalar(p["llvm"], p["ctype"], op["dtype"] if p.get("elem") else None)
                values.append(context.cast(builder, v, t, target))
        for k, (p, step) in enumerate(zip(op["params"], plan)):
            if step[0] == "count":
                values[k] = _default_count(builder, op, arrays)
        result = builder.call(fn, values)
        ret = op["ret"]["llvm"]
        if ret == "void":
            return context.get_dummy_value()
        if ret.startswith("%struct"):
            # half / bfloat16 come back as { i16 }: reinterpret as the Numba scalar
            bits = builder.extract_value(result, 0)
            return builder.bitcast(bits, context.get_value_type(sig.return_type))
        if ret == "ptr":
            return builder.ptrtoint(result, context.get_value_type(types.uintp))
        return result
    return codegen


def _default_count(builder, op: dict, arrays: dict):
    """min(size of every data array) as i64, for a count the caller left out."""
    sizes = [arrays[k].nitems for k, p in enumerate(op["params"])
             if k in arrays and p["role"] in ("sym_dest", "local_dest", "sym_src", "local_src", "ivars")]
    count = sizes[0]
    for s in sizes[1:]:
        count = builder.select(builder.icmp_signed("<", s, count), s, count)
    return count


def _return_type(op: dict):
    ret = op["ret"]
    if ret["llvm"] == "void":
        return types.void
    is_elem = op["dtype"] is not None and ret["ctype"] == _optable.dtypes()[op["dtype"]]["ctype"]
    return _numba_scalar(ret["llvm"], ret["ctype"], op["dtype"] if is_elem else None)


def _select(api: str, dispatch: dict, argtys: tuple) -> dict:
    """Pick the C function from the dtype of the first data array."""
    ops = _optable.device_ops()
    if None in dispatch:  # dtype-free function
        return ops[dispatch[None]]
    first_array = next((t for t in argtys if _is_array(t)), None)
    if first_array is None:
        _fail(api, "needs at least one array argument to select the element type")
    name = _key(first_array.dtype)
    if name in dispatch:
        return ops[dispatch[name]]
    bits = first_array.dtype.bitwidth if hasattr(first_array.dtype, "bitwidth") else None
    if bits is not None and f"bits{bits}" in dispatch:
        return ops[dispatch[f"bits{bits}"]]
    accepted = sorted(k for k in dispatch if not k.startswith("bits"))
    _fail(api, f"dtype {name} is not supported; accepted dtypes: {', '.join(accepted)}")


def make_api(api: str, dispatch: dict, doc: str = ""):
    """The Numba intrinsic for one DSL-level function.

    `dispatch` maps a Numba dtype name (or 'bits32' for untyped sized forms, or None for
    dtype-free functions) to a C symbol.
    """
    any_op = _optable.device_ops()[next(iter(dispatch.values()))]
    has_count = any(p["role"] == "count" and not p.get("required") for p in any_op["params"])

    def typer(typingctx, *args):
        argtys = args[0].types if len(args) == 1 and isinstance(args[0], types.StarArgTuple) else args
        op = _select(api, dispatch, argtys)
        n_params = len(op["params"])
        default_count = has_count and len(argtys) < n_params and not _index_given(op, argtys, n_params)
        plan = _plan(api, op, argtys, default_count, allow_index=True)
        _check_elem(api, op, plan, argtys)
        sig = signature(_return_type(op), types.StarArgTuple.from_types(argtys))
        return sig, _star_codegen(op, plan, argtys)

    typer.__name__ = api
    typer.__qualname__ = api
    typer.__doc__ = doc
    fn = intrinsic(typer)
    fn.__doc__ = doc
    return fn


def _index_given(op, argtys, n_params) -> bool:
    return len(argtys) > n_params


def _star_codegen(op, plan, argtys):
    inner = _codegen(op, plan, argtys)

    def codegen(context, builder, sig, llargs):
        values = cgutils.unpack_tuple(builder, llargs[0]) if len(llargs) == 1 else llargs
        return inner(context, builder, sig, values)
    return codegen


@functools.lru_cache(maxsize=None)
def c_function(symbol: str):
    """The raw C-named intrinsic: arguments exactly as the C function takes them."""
    op = _optable.device_ops().get(symbol)
    if op is None:
        raise AttributeError(f"nvshmem_dsl.numba.c has no device function {symbol!r}")

    def typer(typingctx, *args):
        argtys = args[0].types if len(args) == 1 and isinstance(args[0], types.StarArgTuple) else args
        plan = _plan(symbol, op, argtys, default_count=False, allow_index=False, allow_pointer=True)
        sig = signature(_return_type(op), types.StarArgTuple.from_types(argtys))
        return sig, _star_codegen(op, plan, argtys)

    typer.__name__ = symbol
    typer.__qualname__ = symbol
    typer.__doc__ = _optable.c_signature(symbol)
    fn = intrinsic(typer)
    fn.__doc__ = typer.__doc__
    return fn
