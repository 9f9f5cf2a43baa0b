"""NVSHMEM4Py's raw Numba device bindings (``nvshmem.bindings.device.numba``).

Every NVSHMEM device function by its C name without the prefix, for Numba-CUDA kernels::

    import nvshmem_dsl.core.bindings.device.numba as bindings   # was: nvshmem.bindings.device.numba

    @cuda.jit
    def kernel(dst):
        bindings.float_p(dst, 1.0, 1)        # nvshmem_float_p: an array (or a pointer) for the pointer
        bindings.quiet()

These are :mod:`nvshmem_dsl.numba.c`'s functions: arguments exactly the C function's; a pointer
parameter takes an array or a pointer value (``ffi.from_buffer(arr)``, as NVSHMEM4Py's programs
pass).  No C++ shim is compiled: the calls go to NVSHMEM's device bitcode, linked by nvshmem_dsl.
"""

import enum

from nvshmem_dsl import _optable
from nvshmem_dsl._generated.constants import C_NAMES
from nvshmem_dsl.core._bindtypes import Smem_amount
from nvshmem_dsl.numba import c as _c

from .. import binding_name

#: NVSHMEM4Py's enum of this module: the header's names (NVSHMEMX_SMEM_MINIMUM, ...), its MAX included
nvshmemx_smem_amount_t = enum.IntEnum("nvshmemx_smem_amount_t", [
    (C_NAMES["SmemAmount"].get(m.name, "NVSHMEMX_SMEM_AMOUNT_MAX"), int(m)) for m in Smem_amount])

# Numba resolves module attributes from the module's namespace, so every name is bound here.
_NAMES = {binding_name(_symbol): _symbol for _symbol in _optable.device_ops()}
globals().update({_name: getattr(_c, _symbol) for _name, _symbol in _NAMES.items()})

__all__ = sorted([*_NAMES, "nvshmemx_smem_amount_t"])
