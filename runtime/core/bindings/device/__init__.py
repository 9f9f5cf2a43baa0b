"""NVSHMEM4Py's raw device bindings (``nvshmem.bindings.device``): :mod:`.numba` and :mod:`.cute`,
every NVSHMEM device function of the spec under its C name without the ``nvshmem_`` /
``nvshmemx_`` prefix (``quiet()``, ``float_p(dst, value, pe)``, ``int_sum_reduce_block(team,
dst, src, n)``), arguments exactly as the C function takes them.  They are nvshmem_dsl's raw
C-named functions (``nvshmem_dsl.numba.c`` / ``nvshmem_dsl.cute.c``) under NVSHMEM4Py's names.
"""

from importlib import import_module

__all__ = ["numba", "cute"]

PREFIXES = ("nvshmemx_", "nvshmem_")


def binding_name(symbol: str) -> str:
    """NVSHMEM4Py's name of a device C function: its C name without the prefix."""
    for prefix in PREFIXES:
        if symbol.startswith(prefix):
            return symbol[len(prefix):]
    return symbol


def __getattr__(name):
    if name in __all__:
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
