"""The generated op table (``generated/ops.json``) for the DSL layers.

Loaded lazily, once.  Accessors: :func:`table` (the whole parsed file),
:func:`dtypes` (NVSHMEM dtype name -> description), :func:`device_ops` and
:func:`host_ops` (C symbol -> entry), :func:`scalar_kind` (a C scalar type's
kind: "signed", "unsigned", "float"), :func:`role_text` (what a parameter is, for
messages), :func:`pointee` (bits and kind of what a C pointer points to), :func:`element_mismatch`
(why a data argument's element type does not fit a chosen C function, for the DSLs' errors),
:func:`element_of` (the element type a device function moves, in a DSL's names),
:func:`c_signature` (a device function's C prototype, the docstring of its raw form) and
:func:`lazy_c_module` (a DSL's ``c`` module, its raw forms made on first use).
"""

from __future__ import annotations

import functools
import json
from importlib import resources

__all__ = ["table", "dtypes", "device_ops", "host_ops", "scalar_kind", "role_text", "pointee", "element_mismatch",
           "element_of", "c_signature", "dtype_free_symbol", "lazy_c_module"]


@functools.lru_cache(maxsize=None)
def table() -> dict:
    """The parsed ops.json."""
    text = resources.files("nvshmem_dsl._generated").joinpath("ops.json").read_text()
    return json.loads(text)


def dtypes() -> dict:
    """NVSHMEM dtype name -> {bits, kind, ctype, numpy, numba, cute, llvm, abi}."""
    return table()["dtypes"]


@functools.lru_cache(maxsize=None)
def device_ops() -> dict:
    """Device C symbol -> op table entry."""
    return {op["symbol"]: op for op in table()["device"]}


@functools.lru_cache(maxsize=None)
def host_ops() -> dict:
    """Host C symbol -> op table entry."""
    return {op["symbol"]: op for op in table()["host"]}


def c_signature(symbol: str) -> str:
    """The C prototype of device function ``symbol``: ``int nvshmem_int_g(const int * src, int pe)``."""
    op = device_ops()[symbol]
    return f"{op['ret']['ctype']} {symbol}(" + ", ".join(f"{p['ctype']} {p['name']}" for p in op["params"]) + ")"


@functools.lru_cache(maxsize=None)
def dtype_free_symbol(api: str) -> str:
    """The device function of DSL function ``api`` that takes no element type (``ptr`` ->
    ``nvshmem_ptr``), for the DSLs' peer and multicast views."""
    for sym, op in device_ops().items():
        if op["api"] == api and op["dtype"] is None:
            return sym
    raise LookupError(f"no device function for {api!r} in the op table")


def lazy_c_module(namespace: dict, c_function) -> tuple:
    """``(__getattr__, __dir__)`` for a DSL's ``c`` module whose ``namespace`` (its ``globals()``)
    gets each device function's raw form, ``c_function(symbol)``, on first use (CuTe's and
    Triton's: a raw form is made when a kernel is traced, not at import)."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        fn = namespace[name] = c_function(name)
        return fn

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(device_ops()))

    return __getattr__, __dir__


@functools.lru_cache(maxsize=None)
def _ctype_kinds() -> dict:
    out = {}
    for info in dtypes().values():
        if info.get("ctype") and info["ctype"] != "void" and info.get("kind") in ("signed", "unsigned", "float"):
            out.setdefault(info["ctype"], info["kind"])
    return out


def scalar_kind(ctype: str) -> str:
    """"signed", "unsigned" or "float" for a C scalar type such as "unsigned int" or "uint64_t"."""
    text = " ".join(ctype.replace("const", " ").split())
    kind = _ctype_kinds().get(text)
    if kind is not None:
        return kind
    if text.startswith(("unsigned", "uint")) or text in ("size_t", "uintptr_t"):
        return "unsigned"
    if text in ("float", "double", "half", "__half", "__nv_bfloat16"):
        return "float"
    return "signed"


@functools.lru_cache(maxsize=None)
def _device_symbols_by_api() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for op in table()["device"]:
        out.setdefault(op["api"], []).append(op["symbol"])
    return out


def api_doc(api: str, dispatch: dict, container: str, count_default: bool = True) -> str:
    """The docstring of DSL function `api` for a DSL whose data arguments are `container`s:
    the shared text of the spec (generated/device_api.py) and this DSL's dtype -> C function.
    `count_default=False` (Triton: pointers carry no size) drops the call form that leaves the
    element count out."""
    from ._generated.device_api import DOCS
    text = DOCS[api].replace("{container}", container).rstrip()
    if not count_default:
        text = "\n".join(line for line in text.split("\n") if "# count = min of the" not in line)
    lines = [text, "", "C function per element dtype:"]
    lines += [f"    {key if key is not None else '(any)'}: {sym}" for key, sym in dispatch.items()]
    others = [sym for sym in _device_symbols_by_api()[api] if sym not in dispatch.values()]
    if others:
        lines.append(f"Other C spellings of the same operation ({len(others)}, e.g. {others[0]}) "
                     "are reachable under their C names.")
    return "\n".join(lines) + "\n"


def role_text(param: dict) -> str:
    """What an op-table parameter is, in words (its role's text in the spec), for messages."""
    return table()["roles"].get(param["role"], param["role"])


def integer_only(param: dict) -> bool:
    """Whether every DSL takes only integers (booleans, IntEnum members) for the scalar op-table
    parameter ``param``: one of a C integer type that is not a value of the element type (PE numbers,
    counts, strides, roots, teams, comparison and signal operators, signal values).  A float there is
    refused, naming the argument, instead of being truncated to the C type."""
    return param["llvm"].startswith("i") and not param.get("elem") and not param.get("byval")


@functools.lru_cache(maxsize=None)
def _pointee_table() -> dict:
    out = {}
    for info in dtypes().values():
        kind = info.get("kind")
        if kind in ("signed", "unsigned", "float") and info.get("ctype"):
            out.setdefault(info["ctype"], (info["bits"], "float" if kind == "float" else "int"))
    for ctype, llvm in table()["ctypes"].items():  # handles and other integer typedefs of the spec
        if llvm.startswith("i") and llvm[1:].isdigit():
            out.setdefault(ctype, (int(llvm[1:]), "int"))
    return out


def pointee(ctype: str):
    """``(bits, "int" | "float")`` of what C pointer type ``ctype`` points to (``const`` and ``*``
    dropped), from the spec's dtypes and C types; None for structs and unknown types."""
    text = " ".join(ctype.replace("const", " ").replace("*", " ").split())
    return _pointee_table().get(text)


def element_mismatch(param: dict, elem, bits, symbol: str, name: str, width: int, is_int: bool,
                     got: str | None = None):
    """Why a data argument for pointer parameter ``param`` (an op table entry's) whose element type is
    ``name`` (``width`` bits, an integer type or not) does not fit the C function ``symbol`` a DSL chose
    for element type ``elem`` (or, untyped forms, ``bits``-bit elements), in words; None where it fits.
    ``got``: the argument as the last message names it (default ``name``)."""
    if param.get("elem") and elem is not None:
        if name != elem:
            return (f"argument '{param['name']}' has element type {name}, but the other arguments select "
                    f"{elem} ({symbol}): all data arguments must share one element type")
    elif param.get("elem") and bits is not None:
        if width != bits:
            return (f"argument '{param['name']}' has element type {name} ({width} bits), but the other "
                    f"arguments select {bits}-bit elements ({symbol})")
    elif not param.get("elem"):
        want = pointee(param["ctype"])
        if want is not None and (width != want[0] or (want[1] == "int") != is_int):
            what = f"{want[0]}-bit {'integer' if want[1] == 'int' else 'float'}"
            return (f"argument '{param['name']}' ({param['ctype']}) must have a {what} element type, "
                    f"got {got or name}")
    return None


def element_of(op: dict, dsl: str) -> tuple:
    """``(element, bits)`` of device op table entry ``op`` for DSL ``dsl`` (``cute``, ``triton``):
    ``(its element type's name in that DSL, None)`` for a typed function, ``(None, bits)`` for a sized
    one (``nvshmem_put32``), ``(None, None)`` for an untyped one (``putmem``) or none."""
    dt = op["dtype"]
    if dt is None or dt == "mem":
        return None, None
    info = dtypes()[dt]
    if info.get("kind") == "sized":
        return None, info["bits"]
    return info.get(dsl) or dt, None
