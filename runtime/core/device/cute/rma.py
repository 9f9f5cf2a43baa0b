"""RMA from CuTe DSL kernels (``nvshmem.core.device.cute.rma``): nvshmem_dsl's own functions,
which take NVSHMEM4Py's arguments (``put(dst, src, pe)``, ``p(dst, value, pe)``, ``g(src, pe)``,
``put_signal(dst, src, signal_var, signal_val, signal_op, pe)``)."""

import nvshmem_dsl.cute as _nv

from .. import RMA, reexport

__all__ = list(RMA)

reexport(globals(), _nv, __all__)
