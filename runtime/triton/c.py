"""Every NVSHMEM device function under its C name, for Triton kernel code.

``nvshmem_dsl.triton.c.nvshmem_int_p(dst, value, pe)``: arguments exactly as the C function
takes them (no dispatch, no dtype checks). Pointers are Triton pointers of any element type,
64-bit integer addresses or None; scalars are converted to the C parameter types. The functions
are made on first use (:func:`nvshmem_dsl.triton._calls.c_function`); the mem forms
(``nvshmem_putmem`` ...) and every C alias of a typed form are here. Who makes the call (one
thread, a warp, the whole program) follows the C function's scope, as for the DSL functions.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    from ._calls import c_function

    fn = c_function(name)
    globals()[name] = fn
    return fn


def __dir__() -> list[str]:
    from ._calls import device_symbols

    return sorted(set(globals()) | set(device_symbols()))
