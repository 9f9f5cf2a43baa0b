"""Atomics from Numba kernels (``nvshmem.core.device.numba.amo``): nvshmem_dsl's own functions,
same names and arguments (``atomic_fetch_add(dst, value, pe)``, ...)."""

import nvshmem_dsl.numba as _nv

from .. import AMO

__all__ = list(AMO)

for _name in __all__:
    globals()[_name] = getattr(_nv, _name)
del _name
