"""The generated op table (``nvshmem_dsl._generated/ops.json``), indexed for the host runtime.

(Host side only; the DSL layers use :mod:`nvshmem_dsl._optable`.)

Nothing here knows a dtype or a C symbol by heart: every list comes from the table.
Loaded lazily, once (about 30 ms), so that ``import nvshmem_dsl`` stays fast.
"""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = [
    "table",
    "host_op",
    "host_entry",
    "host_apis",
    "host_families",
    "dtypes_of",
    "typenames_for",
    "numpy_name",
    "dtype_info",
    "returns_status",
    "rejected_in_limited_mpg",
    "Resolved",
    "resolve",
    "UNTYPED",
]

_lock = threading.Lock()
_table: dict | None = None

#: dtype names of the untyped forms: sized ("8".."128") and byte-count ("mem").
UNTYPED = ("8", "16", "32", "64", "128", "mem")

# Families whose int return value is data, not a status (everything else that
# returns int from the host groups below is a status).
_INT_RESULT_FAMILIES = frozenset(
    {"my_pe", "n_pes", "team_my_pe", "team_n_pes", "team_translate_pe", "init_status"}
)
_STATUS_GROUPS = frozenset({"host", "collectives", "sync", "queries"})


@functools.lru_cache(maxsize=None)
def source():
    """Where ops.json is (a resource of nvshmem_dsl._generated; finding it imports importlib's readers)."""
    return resources.files("nvshmem_dsl._generated").joinpath("ops.json")


def table() -> dict:
    """The parsed ops.json (cached)."""
    global _table
    if _table is None:
        with _lock:
            if _table is None:
                _table = json.loads(source().read_text())
    return _table


@functools.lru_cache(maxsize=None)
def _host_index() -> dict[str, dict[str | None, dict]]:
    """api -> {dtype (None for untyped-by-design functions) -> entry}."""
    out: dict[str, dict[str | None, dict]] = {}
    for entry in table()["host"]:
        out.setdefault(entry["api"], {})[entry["dtype"]] = entry
    return out


@functools.lru_cache(maxsize=None)
def _by_symbol() -> dict[str, dict]:
    return {e["symbol"]: e for e in table()["host"]}


def host_entry(symbol: str) -> dict | None:
    """The table entry of a host C symbol, or None."""
    return _by_symbol().get(symbol)


def host_op(api: str, dtype: str | None = None) -> dict | None:
    """The entry for host ``api`` (e.g. "put_on_stream") and NVSHMEM dtype name, or None."""
    return _host_index().get(api, {}).get(dtype)


def host_apis() -> list[str]:
    return sorted(_host_index())


@functools.lru_cache(maxsize=None)
def host_families() -> dict[str, list[str]]:
    """family -> sorted list of its host api names."""
    out: dict[str, set[str]] = {}
    for entry in table()["host"]:
        out.setdefault(entry["family"], set()).add(entry["api"])
    return {k: sorted(v) for k, v in sorted(out.items())}


def dtypes_of(api: str) -> list[str]:
    """NVSHMEM dtype names for which host ``api`` exists, in table order."""
    return [d for d in _host_index().get(api, {}) if d is not None]


def dtype_info(name: str) -> dict:
    """ops.json's description of NVSHMEM dtype ``name`` (bits, kind, numpy, ctype ...)."""
    return table()["dtypes"][name]


def numpy_name(typename: str) -> str:
    """The numpy dtype name of an NVSHMEM typename ('' for untyped forms)."""
    return table()["dtypes"][typename]["numpy"]


@functools.lru_cache(maxsize=None)
def _numpy_to_typenames() -> dict[str, tuple[str, ...]]:
    """numpy dtype name -> NVSHMEM typenames, preferred first.

    Preference: the typename spelled like the numpy name (int32, uint64, bfloat16),
    then the others in the table's order (float -> "float", int64 -> long, longlong, ptrdiff).
    """
    groups: dict[str, list[str]] = {}
    for name, info in table()["dtypes"].items():
        np_name = info.get("numpy") or ""
        if not np_name or info.get("kind") in ("pair", "sized", "mem") or np_name.startswith("("):
            continue
        groups.setdefault(np_name, []).append(name)
    order = {name: i for i, name in enumerate(table()["dtype_sets"]["rma"])}
    out = {}
    for np_name, names in groups.items():
        names.sort(key=lambda n: (n != np_name, order.get(n, 1000), n))
        out[np_name] = tuple(names)
    return out


def typenames_for(numpy_dtype_name: str) -> tuple[str, ...]:
    """NVSHMEM typenames that hold numpy dtype ``numpy_dtype_name``, preferred first."""
    return _numpy_to_typenames().get(numpy_dtype_name, ())


def returns_status(symbol: str) -> bool:
    """True when the host function's int return value is an NVSHMEM status code."""
    entry = host_entry(symbol)
    if entry is None:
        return False
    if entry["ret"]["ctype"] != "int":
        return False
    if entry["family"] in _INT_RESULT_FAMILIES:
        return False
    return entry["group"] in _STATUS_GROUPS


def rejected_in_limited_mpg(symbol: str) -> bool:
    """True when NVSHMEM rejects host function ``symbol`` in a limited-MPG run (the spec's
    ``limited_mpg: false`` families: team collectives, barriers, team splits)."""
    entry = host_entry(symbol)
    return entry is not None and entry.get("limited_mpg", True) is False


@dataclass(frozen=True)
class Resolved:
    """How an array dtype maps onto one host function."""

    entry: dict  #: the ops.json entry
    typename: str  #: NVSHMEM dtype name used ("float", "64", "mem" ...)
    count_scale: int  #: multiply element counts by this (itemsize for "mem" forms, else 1)

    @property
    def symbol(self) -> str:
        return self.entry["symbol"]


def accepted_numpy_names(api: str) -> list[str]:
    """numpy dtype names accepted by the typed forms of ``api`` (sorted, unique)."""
    names = {numpy_name(t) for t in dtypes_of(api) if t not in UNTYPED and numpy_name(t)}
    return sorted(n for n in names if not n.startswith("("))


def resolve(api: str, dtype_name: str, itemsize: int, *, untyped: bool) -> Resolved | None:
    """The host function for ``api`` on arrays of numpy dtype ``dtype_name``.

    Typed forms first (preferred typename, then its aliases); with ``untyped``
    (pure data movement) the sized form of the same width, then the byte-count
    ``mem`` form.  None when the family has no form for this dtype.  Decided once per
    (api, dtype, itemsize, untyped): every operation asks.
    """
    key = (api, dtype_name, itemsize, untyped)
    try:
        return _RESOLVED[key]
    except KeyError:
        found = _RESOLVED[key] = _resolve(api, dtype_name, itemsize, untyped)
        return found


_RESOLVED: dict[tuple, Resolved | None] = {}


def _resolve(api: str, dtype_name: str, itemsize: int, untyped: bool) -> Resolved | None:
    index = _host_index().get(api, {})
    for typename in typenames_for(dtype_name):
        entry = index.get(typename)
        if entry is not None:
            return Resolved(entry, typename, 1)
    if untyped:
        sized = str(itemsize * 8)
        if sized in index:
            return Resolved(index[sized], sized, 1)
        if "mem" in index:
            return Resolved(index["mem"], "mem", itemsize)
    return None


def untyped_entry(api: str) -> dict | None:
    """The entry of an api that has no dtype axis (quiet, barrier_all, malloc ...)."""
    return _host_index().get(api, {}).get(None)


def entry_for(api: str) -> dict:
    """Like :func:`untyped_entry`, raising KeyError with the api name when missing."""
    entry = untyped_entry(api)
    if entry is None:
        raise KeyError(f"host api {api!r} is not in the op table")
    return entry


def params(entry: dict) -> list[dict[str, Any]]:
    return entry["params"]
