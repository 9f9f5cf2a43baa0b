"""NVSHMEM4Py's CuTe DSL device API (``nvshmem.core.device.cute``) over :mod:`nvshmem_dsl.cute`.

::

    import nvshmem_dsl.core.device.cute as nvshmem_cute     # was: nvshmem.core.device.cute

    @cute.kernel
    def kernel(dst: cute.Tensor, src: cute.Tensor, pe: cutlass.Int32):
        nvshmem_cute.put_block(dst, src, pe)                # destination first

Compile with ``nvshmem_dsl.core.interop.cute.cute_compile_helper`` (or
:func:`nvshmem_dsl.cute.compile`): NVSHMEM's device code is linked in and the loaded library
initialised for NVSHMEM before its first launch.
"""

from . import amo, collective, direct, mem, rma
from .amo import *  # noqa: F401,F403
from .collective import *  # noqa: F401,F403
from .direct import *  # noqa: F401,F403
from .mem import *  # noqa: F401,F403
from .rma import *  # noqa: F401,F403

__all__ = [*rma.__all__, *direct.__all__, *amo.__all__, *collective.__all__, *mem.__all__]
