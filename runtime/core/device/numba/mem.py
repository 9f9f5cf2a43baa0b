"""Peer and multicast views in Numba kernels (``nvshmem.core.device.numba.mem``).

``get_peer_array(arr, pe)`` is :func:`nvshmem_dsl.numba.peer` (``nvshmem_ptr``) and
``get_multicast_array(team, array)`` :func:`nvshmem_dsl.numba.multicast` (``nvshmemx_mc_ptr``):
array views with the argument's type, made in the kernel without Numba's runtime (NVSHMEM4Py's
need ``NUMBA_CUDA_ENABLE_NRT=1``).
"""

import nvshmem_dsl.numba as _nv

__all__ = ["get_multicast_array", "get_peer_array"]

get_peer_array = _nv.peer
get_multicast_array = _nv.multicast
