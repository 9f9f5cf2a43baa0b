"""The generated op table (``generated/ops.json``) for the DSL layers.

Loaded lazily, once.  Accessors: :func:`table` (the whole parsed file),
:func:`dtypes` (NVSHMEM dtype name -> description), :func:`device_ops` and
:func:`host_ops` (C symbol -> entry), :func:`scalar_kind` (a C scalar type's
kind: "signed", "unsigned", "float").
"""

from __future__ import annotations

import functools
import json
from importlib import resources

__all__ = ["table", "dtypes", "device_ops", "host_ops", "scalar_kind"]


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
