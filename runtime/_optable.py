"""The generated op table (generated/ops.json), loaded once, indexed for the DSL layers."""
from __future__ import annotations

import functools
import json
from importlib import resources


@functools.lru_cache(maxsize=None)
def table() -> dict:
    text = resources.files("nvshmem_dsl._generated").joinpath("ops.json").read_text()
    return json.loads(text)


@functools.lru_cache(maxsize=None)
def device_ops() -> dict[str, dict]:
    """C symbol -> op entry, for every device function."""
    return {op["symbol"]: op for op in table()["device"]}


@functools.lru_cache(maxsize=None)
def host_ops() -> dict[str, dict]:
    return {op["symbol"]: op for op in table()["host"]}


def dtypes() -> dict[str, dict]:
    return table()["dtypes"]


_UNSIGNED_CTYPES = ("unsigned", "uint", "size_t")


def scalar_kind(ctype: str) -> str:
    """'signed' or 'unsigned' for an integer C spelling (dtype-free parameters)."""
    base = ctype.replace("const", "").strip()
    return "unsigned" if base.startswith(_UNSIGNED_CTYPES) else "signed"
