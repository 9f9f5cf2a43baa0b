"""Device APIs under NVSHMEM4Py's names (``nvshmem.core.device``): :mod:`.numba` and :mod:`.cute`,
each with the submodules ``rma``, ``amo``, ``collective``, ``direct`` and ``mem``.

They re-export nvshmem_dsl's device functions (:mod:`nvshmem_dsl.numba`, :mod:`nvshmem_dsl.cute`),
which already take NVSHMEM4Py's arguments where NVSHMEM4Py has the same function: destination
first (``put(dst, src, pe)``, as NVSHMEM4Py's package does, not as its Numba reference page lists
it), element counts ``min(dst.size, src.size)``, signal words of uint64 or int64.  What differs in
name or arguments is a small wrapper here: ``signal_wait``, ``sync*``, the collectives that take
the operator as a string (``reduce(team, dst, src, "sum")``), ``get_peer_array`` /
``get_multicast_array`` (Numba), ``get_peer_tensor`` / ``get_multicast_tensor`` (CuTe),
``give_smem(smem)`` (the whole shared array or tensor, its size in bytes taken from it).
NVSHMEM4Py's raw device functions by C name are :mod:`nvshmem_dsl.core.bindings.device`.
"""

#: NVSHMEM4Py's names, per submodule (as in nvshmem.core.device.numba / .cute)
RMA = ("p", "g", "put", "get", "put_nbi", "get_nbi", "put_block", "get_block", "put_nbi_block", "get_nbi_block",
       "put_warp", "get_warp", "put_nbi_warp", "get_nbi_warp", "put_signal_block", "put_signal", "put_signal_nbi",
       "put_signal_warp", "put_signal_nbi_block", "put_signal_nbi_warp")
DIRECT = ("my_pe", "team_my_pe", "team_n_pes", "n_pes", "barrier_all", "sync_all", "signal_op", "signal_wait")
AMO = ("atomic_inc", "atomic_fetch_inc", "atomic_fetch", "atomic_set", "atomic_add", "atomic_fetch_add", "atomic_and",
       "atomic_fetch_and", "atomic_or", "atomic_fetch_or", "atomic_xor", "atomic_fetch_xor", "atomic_swap",
       "atomic_compare_swap")
COLLECTIVE = ("sync_block", "sync_warp", "sync", "sync_all", "sync_all_block", "sync_all_warp",
              "barrier", "barrier_block", "barrier_warp", "barrier_all", "barrier_all_block", "barrier_all_warp",
              "reduce", "reduce_block", "reduce_warp", "reducescatter", "reducescatter_block", "reducescatter_warp",
              "fcollect", "fcollect_block", "fcollect_warp", "broadcast", "broadcast_block", "broadcast_warp",
              "alltoall", "alltoall_block", "alltoall_warp")
#: NVSHMEM4Py name -> nvshmem_dsl name, where they differ (the collectives with an operator
#: string and a defaulted root are wrappers, not renames)
RENAMED = {"signal_wait": "signal_wait_until", "sync": "team_sync", "sync_block": "team_sync_block",
           "sync_warp": "team_sync_warp"}
#: reduction operators the collectives take as a string
REDUCE_OPS = ("sum", "prod", "min", "max", "and", "or", "xor")
#: the collectives that move data: wrappers in each DSL's ``collective`` module (the others are
#: nvshmem_dsl's functions, :func:`reexport`)
DATA_COLLECTIVES = frozenset({"reduce", "reducescatter", "fcollect", "broadcast", "alltoall"})


def reexport(namespace: dict, api, names) -> None:
    """Bind each NVSHMEM4Py name of ``names`` in ``namespace`` (a submodule's ``globals()``) to the
    device API ``api``'s function (:data:`RENAMED`'s name where they differ)."""
    for name in names:
        namespace[name] = getattr(api, RENAMED.get(name, name))
