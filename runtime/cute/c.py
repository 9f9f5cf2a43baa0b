"""Every NVSHMEM device function under its C name, for CuTe kernel code.

``nvshmem_dsl.cute.c.nvshmem_int_p(dst, value, pe)``: arguments exactly as the C
function takes them (no dispatch, no defaults, no dtype checks). Pointers are
tensors (their first element), CuTe pointers, integer addresses or None;
scalars are converted to the C parameter types. The functions are made on first
use (:func:`nvshmem_dsl.cute._calls.c_function`); the mem forms
(``nvshmem_putmem`` ...) and every C alias of a typed form are here.
"""

from __future__ import annotations

from .._optable import lazy_c_module
from ._calls import c_function

__getattr__, __dir__ = lazy_c_module(globals(), c_function)
del lazy_c_module, c_function
