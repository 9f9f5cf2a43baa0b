"""NVSHMEM4Py's Numba device API (``nvshmem.core.device.numba``) over :mod:`nvshmem_dsl.numba`.

::

    import nvshmem_dsl.core.device.numba as nvshmem_numba   # was: nvshmem.core.device.numba

    @cuda.jit
    def kernel(dst, src, pe):
        nvshmem_numba.put(dst, src, pe)          # destination first, count min(dst.size, src.size)

Kernels are linked with NVSHMEM's device bitcode by nvshmem_dsl, and their modules initialised
for NVSHMEM before the first launch, as for :mod:`nvshmem_dsl.numba`: no NVSHMEM runtime
(``NUMBA_CUDA_ENABLE_NRT``) is needed for the peer and multicast views.
"""

from . import amo, collective, direct, mem, rma
from .amo import *  # noqa: F401,F403
from .collective import *  # noqa: F401,F403
from .direct import *  # noqa: F401,F403
from .mem import *  # noqa: F401,F403
from .rma import *  # noqa: F401,F403

__all__ = [*rma.__all__, *direct.__all__, *amo.__all__, *collective.__all__, *mem.__all__]
