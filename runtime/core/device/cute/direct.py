"""PE queries, all-PE barriers, signals and shared-memory budget from CuTe DSL kernels
(``nvshmem.core.device.cute.direct``).

``signal_wait(signal_var, signal_op, signal_val)`` (``signal_op`` a ``ComparisonType``) is
nvshmem_dsl's ``signal_wait_until``; the rest are nvshmem_dsl's functions of the same name.
"""

import nvshmem_dsl.cute as _nv
from nvshmem_dsl._generated.constants import SmemAmount

from .. import DIRECT, reexport

__all__ = ["SmemAmount", "ask_smem", "give_smem", "release_smem", *DIRECT]

reexport(globals(), _nv, __all__[1:])
