"""PE queries, all-PE barriers and signals from Numba kernels (``nvshmem.core.device.numba.direct``).

``signal_wait(signal_var, signal_op, signal_val)`` (``signal_op`` a ``ComparisonType``) is
nvshmem_dsl's ``signal_wait_until``; the rest are nvshmem_dsl's functions of the same name.
"""

import nvshmem_dsl.numba as _nv

from .. import DIRECT, reexport

__all__ = list(DIRECT)

reexport(globals(), _nv, __all__)
