"""Peer and multicast views in CuTe DSL kernels (``nvshmem.core.device.cute.mem``).

``get_peer_tensor(tensor, pe)`` is :func:`nvshmem_dsl.cute.peer_tensor` (``nvshmem_ptr``) and
``get_multicast_tensor(team, tensor)`` :func:`nvshmem_dsl.cute.mc_tensor` (``nvshmemx_mc_ptr``):
tensors with the argument's layout and element type at the peer's (multicast) address.
"""

import nvshmem_dsl.cute as _nv

__all__ = ["get_peer_tensor", "get_multicast_tensor"]

get_peer_tensor = _nv.peer_tensor
get_multicast_tensor = _nv.mc_tensor
