"""NVSHMEM4Py's raw host bindings (``nvshmem.bindings``) over nvshmem_dsl's host library.

Every host function of the spec, under its C name without the ``nvshmem_`` / ``nvshmemx_``
prefix, with the parameter names of NVSHMEM's headers: pointers, streams and struct addresses
are ints, pointer results ints (0 for NULL)::

    import nvshmem_dsl.core.bindings as bindings      # was: import nvshmem.bindings as bindings

    bindings.my_pe()
    ptr = bindings.malloc(1 << 20)
    bindings.barrier_all_on_stream(stream_handle)
    bindings.free(ptr)

The list is generated from the spec (``nvshmem_dsl._generated.nvshmem4py_bindings``, written by
codegen/emit/nvshmem4py.py); each function calls :func:`nvshmem_dsl.host._lib.call`.  A function
whose int result is a status returns None and raises :class:`NVSHMEMError` on a non-zero status,
as NVSHMEM4Py's do; the others return the C result.  These are the raw C calls: nvshmem_dsl's own
bookkeeping (its allocation registry, its initialisation state) does not see them, so a program
that initialises or allocates through the bindings uses the bindings for that memory.  Also here:
NVSHMEM4Py's enums (``Cmp_type``, ``Team_id``, ...), struct wrappers (``uniqueid``,
``TeamConfig``, ``InitAttr``, ``team_uniqueid``) and their dtypes; ``ask_smem`` is
``nvshmem_dsl.core.bindings.ask_smem.ask_smem`` as in NVSHMEM4Py.
"""

from __future__ import annotations

import inspect as _inspect
from typing import Any as _Any

from ..._generated.nvshmem4py_bindings import BINDINGS as _ROWS
from ...host import _lib
from .._bindtypes import (  # noqa: F401
    Cmp_type, Flags, Init_status, InitAttr, Pe_index, Proxy_status, Qp_handle_index, Region_hint, Signal_op,
    Smem_amount, Status, Team_id, TeamConfig, TeamUniqueId, Thread_support, Tma_policy, UniqueId, init_attr_dtype,
    team_config_dtype, team_uniqueid, uniqueid, uniqueid_dtype,
)


class NVSHMEMError(Exception):
    """A non-zero NVSHMEM status from a binding (``status``), as NVSHMEM4Py's."""

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"Status code {status}")

    def __reduce__(self):
        return (type(self), (self.status,))


def check_status(status: int) -> None:
    """Raise :class:`NVSHMEMError` for a non-zero ``status``."""
    if status != 0:
        raise NVSHMEMError(status)


def _bind(name: str, params: tuple[str, ...], args: tuple, kwargs: dict) -> tuple:
    """The positional arguments of a call with keywords (or the wrong count): a TypeError as
    Python's own for a bad call."""
    sig = _inspect.Signature([_inspect.Parameter(p, _inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params])
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{name}() {exc}") from None
    return tuple(bound.arguments[p] for p in params)


def _make(name: str, symbol: str, kind: str, ret: str, params: tuple[str, ...], ctypes: tuple[str, ...]):
    call = _lib.call
    n = len(params)
    if kind == "status":
        def binding(*args: _Any, **kwargs: _Any) -> None:
            if kwargs or len(args) != n:
                args = _bind(name, params, args, kwargs)
            status = call(symbol, *args, check=False)
            if status:
                raise NVSHMEMError(status)
    elif kind == "void":
        def binding(*args: _Any, **kwargs: _Any) -> None:
            if kwargs or len(args) != n:
                args = _bind(name, params, args, kwargs)
            call(symbol, *args, check=False)
    else:
        def binding(*args: _Any, **kwargs: _Any) -> _Any:
            if kwargs or len(args) != n:
                args = _bind(name, params, args, kwargs)
            return call(symbol, *args, check=False)
    binding.__name__ = binding.__qualname__ = name
    binding.__module__ = __name__
    c_params = ", ".join(f"{c}{'' if c.endswith('*') else ' '}{p}" for c, p in zip(ctypes, params)) or "void"
    returns = {"status": "None; NVSHMEMError on a non-zero status", "void": "None"}.get(
        kind, "an int (the address)" if ret.endswith("*") else f"the {ret} result")
    binding.__doc__ = f"``{ret} {symbol}({c_params})``: returns {returns}."
    binding.__signature__ = _inspect.Signature(
        [_inspect.Parameter(p, _inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params])
    return binding


_FUNCTIONS = {row[0]: _make(*row) for row in _ROWS}
globals().update(_FUNCTIONS)

#: What ``from nvshmem.bindings import *`` gives (NVSHMEM4Py: every public name of the module)
__all__ = sorted([*_FUNCTIONS, "NVSHMEMError", "check_status", *(n for n in (
    "Cmp_type", "Flags", "Init_status", "InitAttr", "Pe_index", "Proxy_status", "Qp_handle_index", "Region_hint",
    "Signal_op", "Smem_amount", "Status", "Team_id", "TeamConfig", "TeamUniqueId", "Thread_support", "Tma_policy",
    "UniqueId", "init_attr_dtype", "team_config_dtype", "team_uniqueid", "uniqueid", "uniqueid_dtype"))])
