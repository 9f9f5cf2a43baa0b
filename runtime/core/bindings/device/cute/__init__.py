"""NVSHMEM4Py's raw CuTe DSL device bindings (``nvshmem.bindings.device.cute``).

Every NVSHMEM device function by its C name without the prefix (``quiet()``,
``float_put_block(dst, src, n, pe)``), for CuTe DSL kernels: :mod:`nvshmem_dsl.cute.c`'s
functions, arguments exactly the C function's.  Compile with ``nvshmem_dsl.cute.compile`` (or
``nvshmem_dsl.core.interop.cute.cute_compile_helper``): NVSHMEM's device code is linked in.
"""

from nvshmem_dsl import _optable
from nvshmem_dsl.cute import c as _c

from .. import binding_name

_NAMES = {binding_name(_symbol): _symbol for _symbol in _optable.device_ops()}


def __getattr__(name: str):
    symbol = _NAMES.get(name)
    if symbol is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    fn = getattr(_c, symbol)
    globals()[name] = fn
    return fn


def __dir__():
    return sorted(set(globals()) | set(_NAMES))


__all__ = sorted(_NAMES)
