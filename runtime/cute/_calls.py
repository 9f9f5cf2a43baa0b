"""Calls of NVSHMEM device functions from CuTe DSL kernels, by DSL name.

The generated dispatch table (``nvshmem_dsl._dispatch.table("cute")``) describes each DSL-level
function (``put``, ``put_nbi_block``, ``atomic_fetch_add``, ...) as a dispatch table
from a CuTe element type name (``Float32``, ``BFloat16``, ``Uint64``, ``bits32`` for
the untyped sized forms, ``None`` for dtype-free functions) to a C symbol;
:func:`make_api` turns such a table into a function that CuTe kernel code calls.
:func:`c_function` makes the raw, C-named function (``nvshmem_dsl.cute.c``).
Everything about a symbol's parameters comes from the op table (generated/ops.json),
never from here; the call itself goes through :func:`nvshmem_dsl.cute._extern.extern`
with the LLVM types of the bitcode definition, so that it is inlined.

Argument conventions (the same as nvshmem_dsl.numba):
  * canonical order: destination, source, counts, pe (the team first for
    collectives, as in C);
  * tensors stand for pointers (``cute.Tensor`` of any memory space and layout,
    or a ``cute.Pointer``); the pointer passed is the tensor's first element,
    in the generic address space;
  * the element count may be left out: it is then the smallest ``cute.size`` of
    the data tensors (destination, source, wait variables, comparison values);
  * a single-element target (an atomic's ``target``, a signal word, a wait
    variable, ``p``'s ``dst``, ``g``'s ``src``) is a tensor and an optional index
    (an int or a coordinate of the tensor's layout) right after it; element 0
    otherwise;
  * a status array may be ``None`` (a null pointer);
  * scalars are converted to the C parameter's type (values of the element type
    to the tensor's element type), but a float is an error, naming the argument, where
    the parameter takes integers only (:func:`nvshmem_dsl._optable.integer_only`);
  * results come back as CuTe scalars (``Int32``, ``Uint64``, ``Float16`` ...);
    ``ptr`` / ``mc_ptr`` return a ``cute.Pointer`` with the element type of
    their argument (null when the peer is not reachable by load/store).

The C function is chosen when the call is traced, from the element type of the
first tensor argument; every error (unsupported or mismatched dtypes, arguments
of the wrong kind or number) is an :class:`nvshmem_dsl.errors.NvshmemTypeError`
naming the function and the argument.
"""

from __future__ import annotations

import functools
import types as _pytypes
from dataclasses import dataclass
from typing import Any, Optional

from .. import _optable
from ..errors import NvshmemTypeError
from . import _extern

__all__ = ["make_api", "c_function", "peer_tensor", "mc_tensor", "NvshmemTypeError"]

# Roles whose argument is one element, addressed by a tensor and an optional index.
SINGLE_ELEMENT_ROLES = frozenset({"sym_target", "signal", "ivar"})
# Roles of pointer parameters that may be passed as None (a null pointer).
NULLABLE_ROLES = frozenset({"status"})
# Roles of the tensors whose sizes give a left-out element count.
COUNT_ROLES = ("sym_dest", "local_dest", "sym_src", "local_src", "ivars", "cmp_values",
               "qp_handles")

# --------------------------------------------------------------------- helpers


def _cutlass():
    import cutlass

    return cutlass


def _cute():
    import cutlass.cute as cute

    return cute


def _fail(api: str, msg: str):
    raise NvshmemTypeError(f"nvshmem_dsl.cute.{api}: {msg}")


def _is_tensor(x: Any) -> bool:
    return isinstance(x, _cute().Tensor)


def _is_pointer(x: Any) -> bool:
    return isinstance(x, _cute().Pointer)


def _is_memory(x: Any) -> bool:
    return _is_tensor(x) or _is_pointer(x)


def _is_scalar(x: Any) -> bool:
    if isinstance(x, (bool, int, float)):
        return True
    if isinstance(x, _cutlass().Numeric):
        return True
    from cutlass._mlir import ir

    if isinstance(x, ir.Value):
        t = x.type
        return ir.IntegerType.isinstance(t) or ir.FloatType.isinstance(t)
    return False


def _is_integer(x: Any) -> bool:
    """An integer or boolean scalar: a Python int (IntEnum members, bools included), a CuTe integer
    or boolean, or an MLIR integer value."""
    if isinstance(x, (bool, int)):
        return True
    if isinstance(x, _cutlass().Integer):  # Boolean too
        return True
    from cutlass._mlir import ir

    return isinstance(x, ir.Value) and ir.IntegerType.isinstance(x.type)


def _is_index(x: Any) -> bool:
    """An element index: an int, a CuTe integer, or a coordinate tuple of them."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int) or isinstance(x, _cutlass().Integer):
        return True
    return isinstance(x, tuple) and len(x) > 0 and all(_is_index(v) for v in x)


def _elem_type(x: Any):
    """The CuTe element type (Numeric class) of a tensor or pointer."""
    return x.element_type if _is_tensor(x) else x.dtype


def _type_name(x: Any) -> str:
    if _is_tensor(x):
        return f"a tensor of {_elem_type(x).__name__}"
    if _is_pointer(x):
        return f"a pointer to {_elem_type(x).__name__}"
    if x is None:
        return "None"
    if isinstance(x, (bool, int, float)):
        return f"the Python {type(x).__name__} {x!r}"
    return type(x).__name__


# ------------------------------------------------------------------- C forms


def _llvm_param(p: dict) -> str:
    """The extern's parameter text for one op-table parameter."""
    if p.get("byval"):
        return f"ptr byval({p['byval']}) align 2"
    llvm = p["llvm"]
    if llvm.startswith("i") and _optable.scalar_kind(p["ctype"]) == "unsigned":
        return f"{llvm} zeroext"
    return llvm


def _llvm_ret(ret: dict) -> str:
    llvm = ret["llvm"]
    if llvm.startswith("i") and _optable.scalar_kind(ret["ctype"]) == "unsigned":
        return f"{llvm} zeroext"
    return llvm


@dataclass(frozen=True)
class _Form:
    """One C function as this layer calls it (built once per symbol)."""

    op: dict
    params: tuple
    has_count: bool
    elem: Optional[str]   # CuTe name of the element type of a typed form
    bits: Optional[int]   # element width of an untyped sized form
    single: frozenset     # indices of the parameters that take an optional index
    ret_ptr: bool

    @property
    def symbol(self) -> str:
        return self.op["symbol"]

    @functools.cached_property
    def extern(self) -> _extern.Extern:
        return _extern.extern(self.symbol, _llvm_ret(self.op["ret"]),
                              [_llvm_param(p) for p in self.params])

    def signature(self, with_index: bool) -> str:
        names = []
        for k, p in enumerate(self.params):
            if p["role"] == "count" and with_index and not p.get("required"):
                names.append(f"[{p['name']}]")
            else:
                names.append(p["name"])
            if with_index and k in self.single:
                names.append("[index]")
        return f"({', '.join(names)})"


@functools.lru_cache(maxsize=None)
def _form(symbol: str) -> _Form:
    op = _optable.device_ops()[symbol]
    params = tuple(op["params"])
    elem, bits = _optable.element_of(op, "cute")
    has_count = any(p["role"] == "count" and not p.get("required") for p in params)
    single = frozenset(
        k for k, p in enumerate(params)
        if p["llvm"] == "ptr" and not p.get("byval") and (
            p["role"] in SINGLE_ELEMENT_ROLES
            or (p["role"] in ("sym_dest", "sym_src") and not has_count)))
    return _Form(op, params, has_count, elem, bits, single, op["ret"]["llvm"] == "ptr")


# ------------------------------------------------------------- arg matching


@dataclass
class _Step:
    kind: str                 # "arg", "null", "count" (defaulted)
    arg: int = -1             # position of the user argument
    index: int = -1           # position of its element index, if any


class _NoMatch(Exception):
    def __init__(self, pos: int, msg: str):
        self.pos, self.msg = pos, msg


def _match(api: str, form: _Form, args: tuple, raw: bool) -> list[_Step]:
    """Match the user's arguments to the C parameters.

    The element count may be left out and single-element targets may be followed by
    an index (not for ``raw`` C-named calls); the first assignment whose argument
    kinds fit is taken (given count before default, no index before index). On
    failure the error names the argument where the attempt that got furthest failed (of
    attempts failing at the same argument, the last: ``put(dst, src, 1.5)`` is read as
    ``pe`` = 1.5 with the count left out, not as a count with ``pe`` missing).
    """
    params = form.params
    best: list[_NoMatch] = []

    def fail(pos: int, msg: str):
        err = _NoMatch(pos, msg)
        if not best or pos >= best[0].pos:
            best[:] = [err]
        raise err

    def walk(k: int, i: int) -> list[_Step]:
        if k == len(params):
            if i != len(args):
                fail(i, "too many arguments")
            return []
        p = params[k]
        if p["role"] == "count" and not raw and not p.get("required"):
            try:
                return given(k, i)
            except _NoMatch:
                return [_Step("count")] + walk(k + 1, i)
        return given(k, i)

    def given(k: int, i: int) -> list[_Step]:
        p = params[k]
        if i >= len(args):
            fail(i, f"missing argument '{p['name']}' ({_optable.role_text(p)})")
        a = args[i]
        if p["llvm"] == "ptr" and not p.get("byval"):
            if a is None and (p["role"] in NULLABLE_ROLES or raw):
                return [_Step("null", i)] + walk(k + 1, i + 1)
            if not (_is_memory(a) or (raw and _is_address(a))):
                what = "a tensor" + (" or None" if p["role"] in NULLABLE_ROLES else "")
                fail(i, f"argument '{p['name']}' must be {what} ({_optable.role_text(p)}), "
                        f"got {_type_name(a)}")
            if k in form.single and not raw and _is_tensor(a):
                try:
                    return [_Step("arg", i)] + walk(k + 1, i + 1)
                except _NoMatch:
                    if i + 1 < len(args) and _is_index(args[i + 1]):
                        return [_Step("arg", i, i + 1)] + walk(k + 1, i + 2)
                    raise
            return [_Step("arg", i)] + walk(k + 1, i + 1)
        if not _is_scalar(a):
            fail(i, f"argument '{p['name']}' must be a scalar ({_optable.role_text(p)}), "
                    f"got {_type_name(a)}")
        if _optable.integer_only(p) and not _is_integer(a):
            fail(i, f"argument '{p['name']}' must be an integer ({_optable.role_text(p)}), "
                    f"got {_type_name(a)}")
        return [_Step("arg", i)] + walk(k + 1, i + 1)

    sig = f"{api}{form.signature(not raw)}"
    n_max = len(params) + (0 if raw else len(form.single))
    n_min = len(params) - (1 if form.has_count and not raw else 0)
    if not n_min <= len(args) <= n_max:
        _fail(api, f"takes {sig}; got {len(args)} argument{'s' * (len(args) != 1)}")
    try:
        return walk(0, 0)
    except _NoMatch:
        err = best[0]
    if err.msg == "too many arguments" or err.msg.startswith("missing argument"):
        _fail(api, f"takes {sig}; got {len(args)} arguments"
                   + ("" if err.msg == "too many arguments" else f" ({err.msg})"))
    _fail(api, f"{err.msg}; call as {sig}")


def _is_address(x: Any) -> bool:
    """An integer address (raw C calls take one for a pointer)."""
    return not isinstance(x, bool) and (isinstance(x, int) or isinstance(x, _cutlass().Integer))


def _check_dtypes(api: str, form: _Form, plan: list[_Step], args: tuple) -> None:
    """Every typed pointer argument must have the element type of the chosen C function."""
    for p, step in zip(form.params, plan):
        if step.kind != "arg" or p["llvm"] != "ptr" or p.get("byval"):
            continue
        a = args[step.arg]
        if not _is_memory(a):
            continue
        et = _elem_type(a)
        why = _optable.element_mismatch(p, form.elem, form.bits, form.symbol, et.__name__, et.width,
                                        issubclass(et, _cutlass().Integer))
        if why:
            _fail(api, why)


# ----------------------------------------------------------------- lowering


def _element_ptr(x: Any, index: Any = None) -> Any:
    """Tensor / pointer (+ element index) -> CuTe pointer to that element."""
    cute = _cute()
    if _is_tensor(x):
        it = x.iterator
        if not _is_pointer(it):
            raise NvshmemTypeError(f"nvshmem_dsl.cute: a tensor without a memory pointer "
                                   f"({type(it).__name__}) cannot be passed to NVSHMEM")
        if index is not None:
            it = it + cute.crd2idx(index, x.layout)
        return it
    if index is not None:
        return x + index
    return x


def _default_count(api: str, form: _Form, plan: list[_Step], args: tuple) -> Any:
    sizes = []
    for p, step in zip(form.params, plan):
        if step.kind == "arg" and p["role"] in COUNT_ROLES:
            a = args[step.arg]
            if not _is_tensor(a):
                _fail(api, f"argument '{p['name']}' is a pointer: pass the element count "
                           "explicitly")
            sizes.append(_cute().size(a))
    if not sizes:
        _fail(api, "no tensor to take the element count from: pass it explicitly")
    if all(isinstance(s, int) for s in sizes):
        return min(sizes)
    return sizes[0] if len(sizes) == 1 else _cutlass().min(*sizes)


def _scalar_class(p: dict, form: _Form):
    """The CuTe class a scalar argument is converted to first (element-typed values)."""
    if p.get("elem") and form.elem is not None:
        return getattr(_cutlass(), form.elem, None)
    return None


def _lower(api: str, form: _Form, plan: list[_Step], args: tuple) -> list:
    values: list = []
    for p, step in zip(form.params, plan):
        if step.kind == "count":
            values.append(_default_count(api, form, plan, args))
        elif step.kind == "null":
            values.append(0)
        else:
            a = args[step.arg]
            if p["llvm"] == "ptr" and not p.get("byval"):
                if _is_memory(a):
                    index = args[step.index] if step.index >= 0 else None
                    values.append(_element_ptr(a, index))
                else:  # an integer address (raw C calls)
                    values.append(a)
            else:
                cls = _scalar_class(p, form)
                if cls is not None and type(a) is not cls:
                    a = cls(a)
                values.append(a)
    return values


def _pointer_result(value: Any, like: Any) -> Any:
    """``!llvm.ptr`` result -> ``cute.Pointer`` typed like the argument ``like``."""
    cute = _cute()
    dtype = _elem_type(like) if _is_memory(like) else _cutlass().Uint8
    align = None
    if _is_tensor(like) or _is_pointer(like):
        it = like.iterator if _is_tensor(like) else like
        align = getattr(it, "alignment", None)
    return cute.make_ptr(dtype, value, cute.AddressSpace.generic, assumed_align=align)


def _require_tracing(api: str) -> None:
    """Device functions only make sense while CuTe traces device code."""
    from cutlass._mlir import ir

    try:
        ir.InsertionPoint.current
    except ValueError:
        _fail(api, "is a device function: call it in @cute.kernel (or device @cute.jit) "
                   "code that is being compiled")


def _call(api: str, form: _Form, args: tuple, raw: bool) -> Any:
    plan = _match(api, form, args, raw)
    if not raw:
        _check_dtypes(api, form, plan, args)
    values = _lower(api, form, plan, args)
    result = form.extern(*values)
    if form.ret_ptr:
        like = next((args[s.arg] for p, s in zip(form.params, plan)
                     if s.kind == "arg" and p["llvm"] == "ptr" and _is_memory(args[s.arg])), None)
        return _pointer_result(result, like)
    return result


# ------------------------------------------------------------------ dispatch


def _select(api: str, dispatch: dict, args: tuple) -> _Form:
    """The C function for the element type of the first tensor (or pointer) argument."""
    if None in dispatch:  # dtype-free function
        return _form(dispatch[None])
    first = next((a for a in args if _is_memory(a)), None)
    if first is None:
        scalars = ", ".join(_type_name(a) for a in args) or "none"
        _fail(api, f"needs a tensor argument to select the element type (got {scalars}); "
                   f"accepted element types: {', '.join(_accepted(dispatch))}")
    et = _elem_type(first)
    name = et.__name__
    if name in dispatch:
        return _form(dispatch[name])
    width = getattr(et, "width", None)
    if width is not None and f"bits{width}" in dispatch:
        return _form(dispatch[f"bits{width}"])
    sized = sorted((int(k[4:]) for k in dispatch if k.startswith("bits")))
    extra = (f"; other types of {', '.join(map(str, sized))} bits use the sized forms"
             if sized else "")
    cutlass = _cutlass()
    for key in _accepted(dispatch):
        if not isinstance(getattr(cutlass, key, None), type):  # double2: no CuTe type
            extra += (f" ({key} has no CuTe element type: call "
                      f"nvshmem_dsl.cute.c.{dispatch[key]} with tensors of its layout)")
    _fail(api, f"element type {name} is not supported; accepted element types: "
               f"{', '.join(_accepted(dispatch))}{extra}")


def _accepted(dispatch: dict) -> list[str]:
    return sorted(k for k in dispatch if k is not None and not k.startswith("bits"))


def make_api(api: str, dispatch: dict, doc: str = ""):
    """The CuTe-callable function for one DSL-level function.

    ``dispatch`` maps a CuTe element type name (``bits<N>`` for untyped sized forms,
    ``None`` for dtype-free functions) to a C symbol. Nothing is looked up before
    the first call, so importing the generated API is cheap.
    """
    table = _pytypes.MappingProxyType(dict(dispatch))

    def fn(*args):
        _require_tracing(api)
        return _call(api, _select(api, table, args), args, raw=False)

    fn.__name__ = fn.__qualname__ = api
    fn.__doc__ = doc
    fn.__module__ = "nvshmem_dsl.cute"
    fn.dispatch = table
    return fn


@functools.lru_cache(maxsize=None)
def c_function(symbol: str):
    """The raw C-named function: arguments exactly as the C function takes them.

    Pointers: tensors (their first element), CuTe pointers, integer addresses or
    None; scalars are converted to the C parameter types. No dtype checks.
    """
    if symbol not in _optable.device_ops():
        raise AttributeError(f"nvshmem_dsl.cute.c has no device function {symbol!r}")
    form = _form(symbol)
    name = f"c.{symbol}"

    def fn(*args):
        _require_tracing(name)
        return _call(name, form, args, raw=True)

    fn.__name__ = fn.__qualname__ = symbol
    fn.__module__ = "nvshmem_dsl.cute.c"
    fn.__doc__ = _optable.c_signature(symbol)
    return fn


# ---------------------------------------------------------- peer / multicast


def _tensor_at(t: Any, raw_ptr: Any) -> Any:
    """A tensor with ``t``'s layout and element type at address ``raw_ptr`` (generic)."""
    cute = _cute()
    it = t.iterator
    ptr = cute.make_ptr(t.element_type, raw_ptr, cute.AddressSpace.generic,
                        assumed_align=getattr(it, "alignment", None))
    out = cute.make_tensor(ptr, t.layout)
    if out.element_type is not t.element_type:
        # make_tensor derives the element type from the (signless) MLIR type: Uint32
        # would come back as Int32. Keep the caller's, as CuTe does for its arguments.
        out = type(out)(out.value, dtype=t.element_type)
    return out


def peer_tensor(t: Any, pe: Any) -> Any:
    """The tensor ``t`` (symmetric) of PE ``pe`` for direct loads and stores.

    ``nvshmem_ptr``: same layout and element type, at the peer's address in the
    generic space. The address is null when ``pe`` cannot be reached by load/store
    (check ``peer.iterator.toint() != 0``).
    """
    _require_tracing("peer_tensor")
    if not _is_tensor(t):
        _fail("peer_tensor", f"argument 't' must be a tensor, got {_type_name(t)}")
    if not _is_scalar(pe):
        _fail("peer_tensor", f"argument 'pe' must be a scalar (PE number), got {_type_name(pe)}")
    form = _form(_optable.dtype_free_symbol("ptr"))
    raw = form.extern(*_lower("peer_tensor", form, _match("peer_tensor", form, (t, pe), True),
                              (t, pe)))
    return _tensor_at(t, raw)


def mc_tensor(team: Any, t: Any) -> Any:
    """The multicast view of the symmetric tensor ``t`` for ``team`` (``nvshmemx_mc_ptr``).

    Same layout and element type; stores go to every PE of the team (and
    multimem reductions through it). The address is null when the team has no
    multicast object.
    """
    _require_tracing("mc_tensor")
    if not _is_tensor(t):
        _fail("mc_tensor", f"argument 't' must be a tensor, got {_type_name(t)}")
    if not _is_scalar(team):
        _fail("mc_tensor", f"argument 'team' must be a scalar (team handle), got {_type_name(team)}")
    form = _form(_optable.dtype_free_symbol("mc_ptr"))
    raw = form.extern(*_lower("mc_tensor", form, _match("mc_tensor", form, (team, t), True),
                              (team, t)))
    return _tensor_at(t, raw)
