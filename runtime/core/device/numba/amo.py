"""Atomics from Numba kernels (``nvshmem.core.device.numba.amo``): nvshmem_dsl's own functions,
same names and arguments (``atomic_fetch_add(dst, value, pe)``, ...)."""

import nvshmem_dsl.numba as _nv

from .. import AMO, reexport

__all__ = list(AMO)

reexport(globals(), _nv, __all__)
