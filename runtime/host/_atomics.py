"""Atomics from the host: one function per atomic of the spec (generated/host_api.py's ``AMO``), built
at import (re-exported by :mod:`nvshmem_dsl.host.operations`).
"""

from __future__ import annotations

import inspect
from typing import Any

from . import _lib, _state
from .._generated.host_api import AMO
from ..errors import NvshmemTypeError, NvshmemUnsupportedError
from ._op_args import _invoke, _pe, _resolve, _result, _scalar, _single

__all__ = [*AMO]  # the host atomics of the spec, built below


# --------------------------------------------------------------------------- atomics
#
# Host-initiated atomics work only where NVSHMEM reaches the target PE through a
# network transport; to a PE reachable by load/store they raise
# NvshmemUnsupportedError (see _amo).


def _amo(api: str, target: Any, pe: Any, value: Any = None, compare: Any = None) -> Any:
    fn = api
    _state.require(f"{fn}()")
    t = _single(target, fn, "target")
    r = _resolve(fn, api, t, "target", untyped=False)
    target_pe = _pe(pe, fn)
    if _lib.call("nvshmem_ptr", t.ptr, target_pe):
        # NVSHMEM's host library implements AMOs only through network transports; over
        # P2P it prints "not implemented" and returns garbage (seen with 3.4.5).
        raise NvshmemUnsupportedError(
            f"{fn}(): PE {target_pe} is reached by load/store (NVLink/PCIe P2P), and NVSHMEM implements "
            "host-initiated atomics only over network transports (it would print 'not implemented' and "
            "return garbage). Do the atomic on the GPU (nvshmem_dsl.numba / nvshmem_dsl.cute device "
            "atomics), or through peer(x, pe) with an atomic kernel of your array library."
        )
    values: dict[str, Any] = {"sym_target": t.ptr, "pe": target_pe}
    roles = {p["role"] for p in r.entry["params"]}
    if "value" in roles:
        values["value"] = _scalar(value, r.typename, fn, "value")
    if "compare" in roles:
        values["compare"] = _scalar(compare, r.typename, fn, "cond")
    result = _invoke(r, values)
    return None if r.entry["ret"]["ctype"] == "void" else _result(result, r.typename)


def _amo_function(api: str, spec: dict):
    """The host function for atomic ``api`` from its row of generated/host_api.py: the spec's
    parameters (names and order as in C and in the device APIs: target, cond, value, pe) and
    its summary as docstring."""
    names = spec["params"]  # C order: target, [cond,] [value,] pe

    def amo(*args: Any, **kwargs: Any) -> Any:
        try:
            a = amo.__signature__.bind(*args, **kwargs).arguments
        except TypeError as exc:
            raise NvshmemTypeError(f"{api}(): {exc}") from None
        target, *middle, pe = (a[n] for n in names)
        value = middle[-1] if middle else None
        cond = middle[0] if len(middle) == 2 else None
        return _amo(api, target, pe, value, cond)

    amo.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Any) for n in names],
        return_annotation=Any if spec["fetching"] else None)
    amo.__name__ = amo.__qualname__ = api
    amo.__module__ = __name__
    amo.__doc__ = (f"{spec['summary']}\n\n{spec['semantics']} The target is the first element of the "
                   f"symmetric array ``target`` (slice it to pick another); blocking host call.\n\n"
                   f"Element dtypes: {', '.join(spec['dtypes'])}. C functions: ``nvshmem_<TYPE>_{api}``.")
    return amo


_AMO_APIS = tuple(AMO)
for _api, _row in AMO.items():
    globals()[_api] = _amo_function(_api, _row)
del _api, _row
