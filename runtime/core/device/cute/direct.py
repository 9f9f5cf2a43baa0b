"""PE queries, all-PE barriers, ordering, signals and the TMA shared-memory budget from CuTe DSL
kernels (``nvshmem.core.device.cute.direct``).

``signal_wait(signal_var, signal_op, signal_val)`` (``signal_op`` a ``ComparisonType``) is
nvshmem_dsl's ``signal_wait_until``; ``give_smem(smem)`` takes the whole shared-memory tensor and
lends its size in bytes (nvshmem_dsl's ``give_smem(smem, size)``), as NVSHMEM4Py's does; the rest
(``fence``, ``quiet`` included) are nvshmem_dsl's functions of the same name.
"""

import nvshmem_dsl.cute as _nv
from nvshmem_dsl.core._bindtypes import Smem_amount as SmemAmount  # NVSHMEM4Py's: the bindings' enum

from .. import DIRECT, reexport

__all__ = ["SmemAmount", "ask_smem", "give_smem", "release_smem", *DIRECT[:6], "fence", "quiet", *DIRECT[6:]]

reexport(globals(), _nv, [n for n in __all__ if n not in ("SmemAmount", "give_smem")])


def give_smem(smem):
    """NVSHMEM4Py's ``give_smem(smem)``: lend the shared-memory tensor ``smem`` (the whole dynamic
    allocation, 16-byte aligned, at least ``ask_smem(SMEM_MINIMUM)`` bytes) to NVSHMEM's TMA
    transfers for this block; ``release_smem()`` before the block exits."""
    from cutlass import cute

    return _nv.give_smem(smem, cute.size_in_bytes(smem.element_type, smem.layout))
