"""RMA from Numba kernels (``nvshmem.core.device.numba.rma``): nvshmem_dsl's own functions,
which take NVSHMEM4Py's arguments (``put(dst, src, pe)``, ``p(dst, value, pe)``, ``g(src, pe)``,
``put_signal(dst, src, signal_var, signal_val, signal_op, pe)``)."""

import nvshmem_dsl.numba as _nv

from .. import RMA, reexport

__all__ = list(RMA)

reexport(globals(), _nv, __all__)
