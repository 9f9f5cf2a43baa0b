"""What every host operation does with its arguments (:mod:`nvshmem_dsl.host.operations`).

The checks and conversions of arrays, counts, PEs, teams, streams and scalars (each error names
the function and the argument), and the C function of the op table that serves a call: its api
name (blocking host form or ``*_on_stream``), its dtype form, the call with arguments by role.
"""

from __future__ import annotations

from typing import Any

from . import _arrays, _lib, _table, _state
from ._cuda import stream_handle
from ._teamref import place, team_id
from ._arrays import ArrayInfo
from .._generated.constants import Cmp, SignalOp
from ..errors import NvshmemArgumentError, NvshmemTypeError, int_argument
from .symmetric import check_symmetric

# --------------------------------------------------------------------------- validation helpers


def _describe(x: Any, fn: str, arg: str) -> ArrayInfo:
    return _arrays.describe(x, function=fn, argument=arg)


def _contiguous(info: ArrayInfo, fn: str, arg: str) -> None:
    if not info.contiguous:
        raise NvshmemArgumentError(
            f"{fn}(): argument '{arg}' is not contiguous (strides {info.strides}); pass a contiguous array"
            + (" or use iput/iget for strided transfers" if fn in ("put", "get", "put_nbi", "get_nbi") else "")
        )


def _same_dtype(fn: str, a: ArrayInfo, an: str, b: ArrayInfo, bn: str) -> None:
    if a.dtype != b.dtype:
        raise NvshmemTypeError(f"{fn}(): dtype mismatch: '{an}' is {a.dtype} but '{bn}' is {b.dtype}")


def _int(value: Any, fn: str, arg: str) -> int:
    return int_argument(value, fn, arg)


def _count(value: Any, default: int, fn: str, arg: str = "nelems") -> int:
    return default if value is None else int_argument(value, fn, arg, least=0)


def _pair(fn: str, first: Any, first_name: str, second: Any, second_name: str) -> tuple[ArrayInfo, ArrayInfo]:
    """Two contiguous arrays of one element type (``dst`` and ``src``, ``ivars`` and ``values``)."""
    a = _describe(first, fn, first_name)
    b = _describe(second, fn, second_name)
    _contiguous(a, fn, first_name)
    _contiguous(b, fn, second_name)
    _same_dtype(fn, a, first_name, b, second_name)
    return a, b


def _count_in(fn: str, value: Any, default: int, *arrays: tuple[ArrayInfo, str], arg: str = "nelems") -> int:
    """The element count ``value`` (``default`` when None), which each of ``arrays`` (``(info, name)``) holds."""
    n = _count(value, default, fn, arg)
    for info, name in arrays:
        _fits(fn, n, f"{arg}={n}", info, name)
    return n


def _fits(fn: str, n: int, what: str, info: ArrayInfo, arg: str, need: int | None = None) -> None:
    need = n if need is None else need
    if need > info.size:
        raise NvshmemArgumentError(
            f"{fn}(): {what} needs {need} elements of '{arg}', which has only {info.size}"
        )


def _pe(pe: Any, fn: str, arg: str = "pe") -> int:
    value = _int(pe, fn, arg)
    n = _state.STATE.n_pes
    if not 0 <= value < n:
        raise NvshmemArgumentError(f"{fn}(): {arg} {value} is out of range 0..{n - 1} ({n} PEs)")
    return value


def _stream(stream: Any) -> int:
    return stream_handle(stream)


def _team(team: Any, fn: str) -> int:
    return team_id(team, fn)


def _team_size(team: int) -> int:
    n = place(team, "team_n_pes")[2]
    if n <= 0:
        raise NvshmemArgumentError(f"team {team} is not a valid team on this PE")
    return n


def _api_for(base: str, stream: Any) -> tuple[str, int | None]:
    """(api name, stream handle or None): the host form when stream is None and it exists."""
    if stream is None and (base in _table._host_index()):
        return base, None
    return base + "_on_stream", _stream(stream)


def _resolve(fn: str, api: str, info: ArrayInfo, arg: str, *, untyped: bool) -> _table.Resolved:
    r = _table.resolve(api, info.dtype, info.itemsize, untyped=untyped)
    if r is None:
        accepted = _table.accepted_numpy_names(api)
        raise NvshmemTypeError(
            f"{fn}(): argument '{arg}' has dtype {info.dtype}, which nvshmem {api} does not support; "
            f"accepted dtypes: {', '.join(accepted)}"
        )
    return r


def _invoke(resolved_or_entry: Any, values: dict[str, Any], context: str = "") -> Any:
    """Call the C function of an op-table entry with arguments given by role (or, failing that, name)."""
    entry = resolved_or_entry.entry if isinstance(resolved_or_entry, _table.Resolved) else resolved_or_entry
    symbol = entry["symbol"]
    given = tuple(values)
    keys = _VALUE_KEYS.get((symbol, given))
    if keys is None:
        keys = _VALUE_KEYS[(symbol, given)] = _value_keys(entry, given)
    return _lib.call(symbol, *[values[k] for k in keys], context=context)


def _value_keys(entry: dict, given: tuple[str, ...]) -> tuple[str, ...]:
    """Which of the ``given`` keys serves each parameter of ``entry``'s C function: its role, or
    failing that its name."""
    keys = []
    for p in entry["params"]:
        if p["role"] in given:
            keys.append(p["role"])
        elif p["name"] in given:
            keys.append(p["name"])
        else:
            raise KeyError(f"internal: no value for {entry['symbol']} parameter {p['name']} ({p['role']})")
    return tuple(keys)


#: the keys of a call's values that serve its C function's parameters, in order, by (symbol, the
#: keys given: each call site gives its own, in its own order), found once
_VALUE_KEYS: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}


def _entry(api: str) -> dict:
    return _table.entry_for(api)


def _scalar(value: Any, typename: str, fn: str, arg: str) -> Any:
    """``value`` converted for a C parameter of NVSHMEM dtype ``typename`` (range-checked)."""
    info = _table.dtype_info(typename)
    kind, bits = info["kind"], info["bits"]
    if kind in ("signed", "unsigned"):
        if isinstance(value, float):
            if not value.is_integer():
                raise NvshmemTypeError(f"{fn}(): {arg}={value!r} is not an integer ({info['numpy']})")
            value = int(value)
        v = _int(value, fn, arg)
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind == "signed" else (0, (1 << bits) - 1)
        if not lo <= v <= hi:
            raise NvshmemArgumentError(f"{fn}(): {arg}={v} does not fit {info['numpy']} ({lo}..{hi})")
        if info["ctype"] == "char":
            return bytes([v & 0xFF])
        return v
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise NvshmemTypeError(f"{fn}(): {arg} must be a number, not {type(value).__name__}") from None
    raise NvshmemTypeError(f"{fn}(): {arg}: dtype {typename} has no scalar form")


def _result(value: Any, typename: str) -> Any:
    if isinstance(value, bytes):  # C char
        return int.from_bytes(value, "little", signed=True)
    return value


def _cmp(value: Any, fn: str) -> int:
    if isinstance(value, str):
        key = value.strip().lower()
        aliases = {"==": "eq", "!=": "ne", ">": "gt", "<=": "le", "<": "lt", ">=": "ge"}
        key = aliases.get(key, key).removeprefix("cmp_")
        try:
            return int(Cmp["CMP_" + key.upper()])
        except KeyError:
            raise NvshmemArgumentError(
                f"{fn}(): unknown comparison {value!r}; use a Cmp value or one of eq ne gt le lt ge == != > <= < >="
            ) from None
    v = _int(value, fn, "cmp")
    if v not in {int(c) for c in Cmp}:
        raise NvshmemArgumentError(f"{fn}(): cmp={v} is not a Cmp value ({', '.join(c.name for c in Cmp)})")
    return v


def _signal_op(value: Any, fn: str) -> int:
    if isinstance(value, str):
        key = value.strip().lower().removeprefix("signal_")
        try:
            return int(SignalOp["SIGNAL_" + key.upper()])
        except KeyError:
            raise NvshmemArgumentError(f"{fn}(): unknown signal op {value!r}; use SignalOp.SIGNAL_SET/ADD, 'set' or 'add'") from None
    v = _int(value, fn, "op")
    if v not in {int(c) for c in SignalOp}:
        raise NvshmemArgumentError(f"{fn}(): op={v} is not a SignalOp ({', '.join(c.name for c in SignalOp)})")
    return v


def _signal_word(x: Any, fn: str, arg: str = "signal") -> ArrayInfo:
    info = _describe(x, fn, arg)
    if info.itemsize != 8 or info.dtype not in ("uint64", "int64"):
        raise NvshmemTypeError(f"{fn}(): argument '{arg}' must be a uint64 (or int64) array, not {info.dtype}")
    if info.size < 1:
        raise NvshmemArgumentError(f"{fn}(): argument '{arg}' is empty")
    check_symmetric(info, fn, arg, nbytes=8)
    return info


def _single(x: Any, fn: str, arg: str) -> ArrayInfo:
    info = _describe(x, fn, arg)
    if info.size < 1:
        raise NvshmemArgumentError(f"{fn}(): argument '{arg}' is empty")
    check_symmetric(info, fn, arg, nbytes=info.itemsize)
    return info
