"""Calls of NVSHMEM device functions from Triton kernels, by DSL name.

The generated dispatch table (``nvshmem_dsl._dispatch.table("triton")``) describes each DSL-level function
(``put``, ``put_nbi_block``, ``atomic_fetch_add``, ...) as a dispatch table from a Triton element
type name (``fp32``, ``bf16``, ``uint64``, ``bits32`` for the untyped sized forms, ``None`` for
dtype-free functions) to a C symbol; :func:`make_api` turns such a table into a Triton builtin
that ``@triton.jit`` code calls.  :func:`c_function` makes the raw, C-named function
(``nvshmem_dsl.triton.c``).  Everything about a symbol's parameters comes from the op table
(generated/ops.json), never from here.

Argument conventions (those of nvshmem_dsl.numba and nvshmem_dsl.cute, for pointers):
  * canonical order: destination, source, counts, pe (the team first for collectives, as in C);
  * data arguments are Triton pointers (scalar ``tl.pointer_type`` values: kernel arguments,
    ``ptr + offset``) whose element type selects the C function; one element is addressed by
    pointer arithmetic (``flags + 3``), there is no index argument;
  * element counts are always given: a Triton pointer carries no size;
  * a status array may be ``None`` (a null pointer);
  * scalars (Triton scalars, constexprs, Python numbers) are converted to the C parameter's type
    (values of the element type to the pointers' element type), but a float is an error, naming
    the argument, where the parameter takes integers only (:func:`nvshmem_dsl._optable.integer_only`);
  * results come back as Triton scalars (``int32``, ``uint64``, ``fp16`` ...); ``ptr`` /
    ``mc_ptr`` (and :func:`peer` / :func:`multicast`) return a pointer with the element type of
    their argument (null when the peer is not reachable by load/store).

Who calls: Triton runs a program's scalar code in every thread of the program (one CTA of
``num_warps`` warps).  A call of NVSHMEM is performed once per program, by the threads its scope
names, as NVSHMEM's C API defines them: ``_block`` functions by all threads of the program;
``_warpgroup`` ones by its first 128 threads (``num_warps >= 4``), ``_warp`` ones by warp 0 and
thread-scope ones by thread 0.  After such a call the program's threads synchronise (a CTA
barrier), so that every thread sees it done and gets its result.  The pure queries (``my_pe``,
``n_pes``, ``team_*``, ``ptr``, ``mc_ptr``) are made by every thread, without a barrier.  See
:mod:`nvshmem_dsl.triton._compile` for how the calls are compiled.

The C function is chosen when the kernel is compiled, from the element type of the first pointer
argument; every error (unsupported or mismatched dtypes, arguments of the wrong kind or number) is
an :class:`nvshmem_dsl.errors.NvshmemTypeError` naming the function and the argument (Triton
reports it as a ``CompilationError`` at the call).
"""

from __future__ import annotations

import functools
import types as _pytypes
from dataclasses import dataclass
from typing import Any, Optional

from .. import _optable
from ..errors import NvshmemTypeError
from . import _inductor

__all__ = ["make_api", "c_function", "peer", "multicast", "NvshmemTypeError",
           "SHIM_PREFIX", "PURE_FAMILIES", "form"]

#: Prefix of the externs a Triton kernel declares: ``__nvshmem_dsl_tt_<C symbol>`` (the
#: compile hook defines each as a small function around the C function, see _compile).
SHIM_PREFIX = "__nvshmem_dsl_tt_"

#: Families whose functions only read NVSHMEM's device state: every thread of a program makes
#: the call itself (no leader thread, no barrier) and Triton may merge repeated calls.
PURE_FAMILIES = frozenset({"my_pe", "n_pes", "team_my_pe", "team_n_pes", "team_translate_pe",
                           "ptr", "mc_ptr"})

# Roles of pointer parameters that may be passed as None (a null pointer).
NULLABLE_ROLES = frozenset({"status"})

# --------------------------------------------------------------------- helpers


def _tl():
    import triton.language as tl

    return tl


def _fail(api: str, msg: str):
    raise NvshmemTypeError(f"nvshmem_dsl.triton.{api}: {msg}")


def _unwrap(x: Any) -> Any:
    tl = _tl()
    return x.value if isinstance(x, tl.constexpr) else x


def _is_tensor(x: Any) -> bool:
    return isinstance(x, _tl().tensor)


def _is_pointer(x: Any) -> bool:
    """A scalar Triton pointer to scalar elements (what the data arguments are)."""
    if not _is_tensor(x) or x.type.is_block():
        return False
    sca = x.type.scalar
    return sca.is_ptr() and not sca.element_ty.is_block()


def _is_block(x: Any) -> bool:
    return _is_tensor(x) and x.type.is_block()


def _is_scalar(x: Any) -> bool:
    x = _unwrap(x)
    if isinstance(x, (bool, int, float)):
        return True
    return _is_tensor(x) and not x.type.is_block() and not x.type.scalar.is_ptr()


def _is_integer(x: Any) -> bool:
    """An integer or boolean scalar: a Python int (IntEnum members, bools included) or a Triton one."""
    x = _unwrap(x)
    if isinstance(x, (bool, int)):
        return True
    return _is_tensor(x) and not x.type.is_block() and (x.type.scalar.is_int() or x.type.scalar.is_bool())


def _is_address(x: Any) -> bool:
    """A 64-bit integer scalar (raw C calls take one for a pointer)."""
    x = _unwrap(x)
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    return (_is_tensor(x) and not x.type.is_block() and x.type.scalar.is_int()
            and x.type.scalar.primitive_bitwidth == 64)


def _elem_type(x: Any):
    """The element type (``tl.dtype``) of a scalar pointer."""
    return x.type.scalar.element_ty


def _type_name(x: Any) -> str:
    x = _unwrap(x)
    if x is None:
        return "None"
    if isinstance(x, (bool, int, float)):
        return f"the Python {type(x).__name__} {x!r}"
    if _is_tensor(x):
        sca = x.type.scalar
        if x.type.is_block():
            shape = "x".join(str(int(_unwrap(s))) for s in x.type.shape)
            what = f"pointers to {sca.element_ty.name}" if sca.is_ptr() else sca.name
            return f"a block of {shape} {what}"
        if sca.is_ptr():
            if sca.element_ty.is_block():
                return "a block pointer (tl.make_block_ptr)"
            return f"a pointer to {sca.element_ty.name}"
        return f"a scalar {sca.name}"
    return type(x).__name__


@functools.lru_cache(maxsize=None)
def _byval_triton() -> dict:
    """LLVM struct of a by-value half/bfloat16 -> its Triton dtype name (fp16, bf16)."""
    return {info["llvm"]: info["triton"] for info in _optable.dtypes().values()
            if info.get("abi") == "struct" and info.get("kind") == "float"}


def boundary_type(llvm: str, ctype: str, byval: Optional[str] = None) -> str:
    """The Triton dtype name a C parameter or result crosses the extern boundary as:
    pointers as int64 (addresses), half/bfloat16 as fp16/bf16, integers with the C type's
    signedness, void as int32 (a dummy result)."""
    if byval:
        return _byval_triton()[byval]
    if llvm == "void":
        return "int32"
    if llvm == "ptr":
        return "int64"
    if llvm in _byval_triton():
        return _byval_triton()[llvm]
    if llvm == "float":
        return "fp32"
    if llvm == "double":
        return "fp64"
    if llvm.startswith("i"):
        sign = "uint" if _optable.scalar_kind(ctype) == "unsigned" else "int"
        return f"{sign}{llvm[1:]}"
    raise NvshmemTypeError(f"nvshmem_dsl.triton: no Triton type for the LLVM type {llvm!r} ({ctype})")


# ------------------------------------------------------------------- C forms


@dataclass(frozen=True)
class _Form:
    """One C function as this layer calls it (built once per symbol)."""

    op: dict
    params: tuple
    elem: Optional[str]   # Triton name of the element type of a typed form
    bits: Optional[int]   # element width of an untyped sized form
    arg_types: tuple      # Triton dtype names at the extern boundary
    ret_type: str
    pure: bool

    @property
    def symbol(self) -> str:
        return self.op["symbol"]

    @property
    def void(self) -> bool:
        return self.op["ret"]["llvm"] == "void"

    @property
    def ret_ptr(self) -> bool:
        return self.op["ret"]["llvm"] == "ptr"

    def signature(self) -> str:
        return f"({', '.join(p['name'] for p in self.params)})"


@functools.lru_cache(maxsize=None)
def form(symbol: str) -> _Form:
    """The :class:`_Form` of device C function ``symbol`` (from the op table)."""
    op = _optable.device_ops()[symbol]
    params = tuple(op["params"])
    elem, bits = _optable.element_of(op, "triton")
    arg_types = tuple(boundary_type(p["llvm"], p["ctype"], p.get("byval")) for p in params)
    ret_type = boundary_type(op["ret"]["llvm"], op["ret"]["ctype"])
    return _Form(op, params, elem, bits, arg_types, ret_type, op["family"] in PURE_FAMILIES)


# ------------------------------------------------------------- arg checks


def _is_pointer_param(p: dict) -> bool:
    return p["llvm"] == "ptr" and not p.get("byval")


def _check_kinds(api: str, f: _Form, args: tuple, raw: bool) -> None:
    sig = f"{api}{f.signature()}"
    if len(args) != len(f.params):
        _fail(api, f"takes {sig}; got {len(args)} argument{'s' * (len(args) != 1)}")
    for p, a in zip(f.params, args):
        a = _unwrap(a)
        if _is_pointer_param(p):
            if a is None and (p["role"] in NULLABLE_ROLES or raw):
                continue
            if _is_pointer(a) or (raw and _is_address(a)):
                continue
            what = "a pointer" + (" or None" if p["role"] in NULLABLE_ROLES else "")
            if raw:
                what = "a pointer, a 64-bit integer address or None"
            hint = ""
            if _is_block(a) and a.type.scalar.is_ptr():
                hint = ": pass one pointer (base + offset), not a block of them"
            _fail(api, f"argument '{p['name']}' must be {what} ({_optable.role_text(p)}), "
                       f"got {_type_name(a)}{hint}; call as {sig}")
        elif not _is_scalar(a):
            hint = ""
            if _is_block(a):
                hint = ": NVSHMEM calls take scalars (reduce the block first, e.g. tl.sum)"
            _fail(api, f"argument '{p['name']}' must be a scalar ({_optable.role_text(p)}), "
                       f"got {_type_name(a)}{hint}; call as {sig}")
        elif _optable.integer_only(p) and not _is_integer(a):
            _fail(api, f"argument '{p['name']}' must be an integer ({_optable.role_text(p)}), "
                       f"got {_type_name(a)}; call as {sig}")


def _check_dtypes(api: str, f: _Form, args: tuple) -> None:
    """Every typed pointer argument must have the element type of the chosen C function."""
    for p, a in zip(f.params, args):
        a = _unwrap(a)
        if not _is_pointer_param(p) or not _is_pointer(a):
            continue
        et = _elem_type(a)
        why = _optable.element_mismatch(p, f.elem, f.bits, f.symbol, et.name, et.primitive_bitwidth, et.is_int(),
                                        got=_type_name(a))
        if why:
            _fail(api, why)


# ----------------------------------------------------------------- lowering


def _dtype(name: str):
    tl = _tl()
    return {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32,
            "fp64": tl.float64}.get(name) or getattr(tl, name)


def _value(x: Any, dtype_name: str, sem) -> Any:
    """A Triton scalar of type ``dtype_name`` for a user scalar or pointer."""
    x = _unwrap(x)
    dtype = _dtype(dtype_name)
    if x is None:  # a null pointer
        return sem.scalar_constant(0, dtype)
    if isinstance(x, (bool, int, float)):
        if isinstance(x, int) and dtype.is_int() and not isinstance(x, bool):
            return sem.scalar_constant(x, dtype)
        x = sem.to_tensor(x)
    return sem.cast(x, dtype)


def _extern(f: _Form, values: list, sem) -> Any:
    from triton.language import core

    key = tuple(_dtype(t) for t in f.arg_types)
    return core.extern_elementwise(
        "", "", values, {key: (SHIM_PREFIX + f.symbol, _dtype(f.ret_type))},
        is_pure=f.pure, _semantic=sem)


def _call(api: str, f: _Form, args: tuple, raw: bool, sem) -> Any:
    if sem is None:
        _fail(api, "is a device function: call it in @triton.jit code")
    _check_kinds(api, f, args, raw)
    if not raw:
        _check_dtypes(api, f, args)
    values = [_value(a, t, sem) for a, t in zip(args, f.arg_types)]
    result = _extern(f, values, sem)
    if not f.pure and _inductor.analysing():  # torch.compile: the tensors this call may write
        _inductor.declare_writes([_unwrap(a) for p, a in zip(f.params, args)
                                  if _is_pointer_param(p) and _is_pointer(_unwrap(a))], sem)
    if f.void:
        return None
    if f.ret_ptr:
        like = next((_unwrap(a) for p, a in zip(f.params, args)
                     if _is_pointer_param(p) and _is_pointer(_unwrap(a))), None)
        tl = _tl()
        elem = _elem_type(like) if like is not None else tl.int8
        return sem.cast(result, tl.pointer_type(elem))
    return result


# ------------------------------------------------------------------ dispatch


def _accepted(dispatch: dict) -> list[str]:
    return sorted(k for k in dispatch if k is not None and not k.startswith("bits"))


def _select(api: str, dispatch: dict, args: tuple) -> _Form:
    """The C function for the element type of the first pointer argument."""
    if None in dispatch:  # dtype-free function
        return form(dispatch[None])
    first = next((_unwrap(a) for a in args if _is_pointer(_unwrap(a))), None)
    if first is None:
        # an argument of the wrong kind (a block of pointers ...): say which, as a typed form would
        _check_kinds(api, form(next(iter(dispatch.values()))), args, raw=False)
        got = ", ".join(_type_name(a) for a in args) or "none"
        _fail(api, f"needs a pointer argument to select the element type (got {got}); "
                   f"accepted element types: {', '.join(_accepted(dispatch))}")
    et = _elem_type(first)
    name = et.name
    if name in dispatch:
        return form(dispatch[name])
    width = et.primitive_bitwidth
    if f"bits{width}" in dispatch and width % 8 == 0:
        return form(dispatch[f"bits{width}"])
    sized = sorted(int(k[4:]) for k in dispatch if k.startswith("bits"))
    extra = (f"; other types of {', '.join(map(str, sized))} bits use the sized forms"
             if sized else "")
    for key in _accepted(dispatch):
        if key == "double2":  # no Triton element type: by C name with fp64 pairs
            extra += (f" (double2 has no Triton element type: call "
                      f"nvshmem_dsl.triton.c.{dispatch[key]} with pointers to fp64 pairs)")
    _fail(api, f"element type {name} is not supported; accepted element types: "
               f"{', '.join(_accepted(dispatch))}{extra}")


def _builtin(fn):
    """Mark ``fn`` as a Triton builtin (called by ``@triton.jit`` code with ``_semantic``)."""
    from triton.language import core

    wrapped = core.builtin(fn)
    return wrapped


def make_api(api: str, dispatch: dict, doc: str = ""):
    """The Triton builtin for one DSL-level function.

    ``dispatch`` maps a Triton element type name (``bits<N>`` for untyped sized forms, ``None``
    for dtype-free functions) to a C symbol. Nothing is looked up before the first call.
    """
    table = _pytypes.MappingProxyType(dict(dispatch))

    def fn(*args, _semantic=None):
        return _call(api, _select(api, table, args), args, False, _semantic)

    fn.__name__ = fn.__qualname__ = api
    fn.__doc__ = doc
    fn.__module__ = "nvshmem_dsl.triton"
    out = _builtin(fn)
    out.__module__ = "nvshmem_dsl.triton"
    out.dispatch = table
    return out


@functools.lru_cache(maxsize=None)
def c_function(symbol: str):
    """The raw C-named function: arguments exactly as the C function takes them.

    Pointers: Triton pointers of any element type, 64-bit integer addresses or None; scalars
    are converted to the C parameter types. No dtype checks.
    """
    if symbol not in _optable.device_ops():
        raise AttributeError(f"nvshmem_dsl.triton.c has no device function {symbol!r}")
    f = form(symbol)
    name = f"c.{symbol}"

    def fn(*args, _semantic=None):
        return _call(name, f, args, True, _semantic)

    fn.__name__ = fn.__qualname__ = symbol
    fn.__doc__ = _optable.c_signature(symbol)
    out = _builtin(fn)
    out.__module__ = "nvshmem_dsl.triton.c"
    return out


# ---------------------------------------------------------- peer / multicast


def peer(ptr, pe, _semantic=None):
    """The address of the symmetric pointer ``ptr`` on PE ``pe``, for direct loads and stores
    (``nvshmem_ptr``): a pointer with ``ptr``'s element type, usable by ``tl.load`` and
    ``tl.store`` (with offsets: ``peer(x, pe) + tl.arange(0, BLOCK)``); null when ``pe``
    cannot be reached by load/store (test ``peer(x, pe).to(tl.int64) != 0``).  Every thread
    of the program makes the call."""
    f = form(_optable.dtype_free_symbol("ptr"))
    if not _is_pointer(_unwrap(ptr)):
        _fail("peer", f"argument 'ptr' must be a pointer, got {_type_name(ptr)}")
    return _call("peer", f, (ptr, pe), False, _semantic)


def multicast(team, ptr, _semantic=None):
    """The multicast address of the symmetric pointer ``ptr`` for ``team``
    (``nvshmemx_mc_ptr``): a pointer with ``ptr``'s element type; stores through it go to every
    PE of the team.  Null when the team has no multicast object (no NVLink SHARP)."""
    f = form(_optable.dtype_free_symbol("mc_ptr"))
    if not _is_pointer(_unwrap(ptr)):
        _fail("multicast", f"argument 'ptr' must be a pointer, got {_type_name(ptr)}")
    return _call("multicast", f, (team, ptr), False, _semantic)


def _make_view(fn):
    out = _builtin(fn)
    out.__module__ = "nvshmem_dsl.triton"
    return out


peer = _make_view(peer)
multicast = _make_view(multicast)
