"""Host-initiated atomics as NVSHMEM4Py has them (``nvshmem.core.amo``).

``atomic_<op>(target, [cond,] [value,] remote_pe=, *, offset=0, dtype=None)`` is nvshmem_dsl's
host atomic of the same name on element ``offset`` of ``target`` (a CuPy array, a torch tensor,
or a ``cuda.core`` buffer with ``dtype``).  NVSHMEM implements host atomics only through network
transports: towards a PE reached over NVLink/PCIe they raise (use device atomics there).
"""

from __future__ import annotations

import inspect
import operator
from typing import Any

from ..host import _arrays
from ..host import operations as _ops
from . import _tracking
from ._tracking import CAIView, translated
from .collective import _NVSHMEM_DTYPES
from ._types import NvshmemInvalid

__all__ = ["atomic_fetch", "atomic_set", "atomic_inc", "atomic_fetch_inc", "atomic_add", "atomic_fetch_add",
           "atomic_and", "atomic_fetch_and", "atomic_or", "atomic_fetch_or", "atomic_xor", "atomic_fetch_xor",
           "atomic_swap", "atomic_compare_swap"]


def _element(target: Any, offset: Any, dtype: Any, function: str) -> CAIView:
    if isinstance(offset, bool):
        raise NvshmemInvalid("AMO offset must be a non-negative integer")
    try:
        offset = operator.index(offset)
    except TypeError:
        raise NvshmemInvalid("AMO offset must be a non-negative integer") from None
    if offset < 0:
        raise NvshmemInvalid("AMO offset must be a non-negative integer")
    if _tracking.is_core_buffer(target):
        if dtype is None:
            raise NvshmemInvalid(f"{function}(): dtype is required when the AMO target is a raw Buffer")
        name = _NVSHMEM_DTYPES.get(str(dtype)) or _arrays.dtype_name(dtype)
        ptr, nbytes = int(target.handle), int(target.size)
    else:
        info = _arrays.describe(target, function=function, argument="target")
        name, ptr, nbytes = info.dtype, info.ptr, info.nbytes
        if dtype is not None and (_NVSHMEM_DTYPES.get(str(dtype)) or _arrays.dtype_name(dtype)) != name:
            raise NvshmemInvalid(f"{function}(): The supplied dtype does not match the AMO target dtype ({name})")
    itemsize = _arrays.itemsize_of(name) or 0
    if not itemsize or (offset + 1) * itemsize > nbytes:
        raise NvshmemInvalid(f"{function}(): AMO target is too small for the requested offset {offset}")
    import numpy

    return CAIView(ptr + offset * itemsize, (1,), numpy.dtype(name).str, owner=target, dtype=name)


def _make(name: str, values: tuple[str, ...]):
    native = getattr(_ops, name)
    P = inspect.Parameter
    sig = inspect.Signature(
        [P("target", P.POSITIONAL_OR_KEYWORD), *(P(v, P.POSITIONAL_OR_KEYWORD) for v in values),
         P("remote_pe", P.POSITIONAL_OR_KEYWORD, default=-1), P("offset", P.KEYWORD_ONLY, default=0),
         P("dtype", P.KEYWORD_ONLY, default=None)])

    @translated
    def amo(*args: Any, **kwargs: Any):
        try:
            a = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}(): {exc}") from None
        a.apply_defaults()
        _tracking.require_initialized(name)
        v = a.arguments
        target = _element(v["target"], v["offset"], v["dtype"], name)
        return native(target, *(v[x] for x in values), v["remote_pe"])

    amo.__signature__ = sig
    amo.__name__ = amo.__qualname__ = name
    amo.__module__ = __name__
    amo.__doc__ = (f"Host ``{name}`` on element ``offset`` of ``target`` on PE ``remote_pe`` "
                   f"(:func:`nvshmem_dsl.{name}`).")
    return amo


_VALUES = {"atomic_fetch": (), "atomic_inc": (), "atomic_fetch_inc": (), "atomic_compare_swap": ("cond", "value")}
for _name in __all__:
    globals()[_name] = _make(_name, _VALUES.get(_name, ("value",)))
del _name
