"""Atomics from CuTe DSL kernels (``nvshmem.core.device.cute.amo``): nvshmem_dsl's own functions,
same names and arguments (``atomic_fetch_add(dst, value, pe)`` returns a CuTe scalar, ...)."""

import nvshmem_dsl.cute as _nv

from .. import AMO, reexport

__all__ = list(AMO)

reexport(globals(), _nv, __all__)
