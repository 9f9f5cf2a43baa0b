"""nvshmem_dsl: NVSHMEM for Python GPU DSLs, and a Pythonic NVSHMEM host API.

Host API (this package)::

    import nvshmem_dsl as nv

    with nv.init() as pe:                      # python -m nvshmem_dsl.run -n 2 script.py
        x = nv.zeros(1024, "float32", like="cupy")
        y = nv.array(1024, "float32", like="cupy")
        nv.put(y, x, (pe.my_pe + 1) % pe.n_pes)   # dst, src, pe
        nv.quiet(); nv.barrier_all()
        nv.reduce(nv.Team.TEAM_WORLD, y, x, "sum", stream=stream)
        nv.free(x); nv.free(y)

Importing is cheap: the NVSHMEM library, numpy and the array libraries are
loaded on first use.  Device-side APIs live in ``nvshmem_dsl.numba`` and
``nvshmem_dsl.cute``.
"""

from ._generated.constants import Cmp, InitStatus, SignalOp, Status, Team, ThreadLevel
from .host._lib import ffi, lib
from .host._init import (
    Session, finalize, get_uniqueid, global_exit, info, init, init_status, is_initialized, my_pe,
    n_pes, query_thread, session, team_my_pe, team_n_pes, versions,
)
from .errors import (
    NvshmemArgumentError, NvshmemError, NvshmemInitError, NvshmemLeakWarning, NvshmemMemoryError,
    NvshmemMpgError, NvshmemNotFoundError, NvshmemOutOfMemoryError, NvshmemStateError,
    NvshmemStatusError, NvshmemTypeError, NvshmemUnsupportedError,
)
from .host.operations import (
    REDUCE_OPS, alltoall, atomic_add, atomic_and, atomic_compare_swap, atomic_fetch,
    atomic_fetch_add, atomic_fetch_and, atomic_fetch_inc, atomic_fetch_or, atomic_fetch_xor,
    atomic_inc, atomic_or, atomic_set, atomic_swap, atomic_xor, barrier, barrier_all, broadcast,
    fcollect, fence, flush, g, get, get_nbi, iget, iput, p, put, put_nbi, put_signal,
    put_signal_nbi, quiet, reduce, reducescatter, signal_counted_reset, signal_fetch, signal_op,
    signal_wait_until, sync, sync_all, wait_until, wait_until_all, wait_until_all_vector,
)
from .host.memory import Buffer, array, buffer, empty, empty_like, free, full, zeros, zeros_like
from .host.symmetric import leak_report, live_allocations
from .host.views import (
    is_symmetric, mc_ptr, multicast, peer, peer_ptr, register_buffer, register_external,
    unregister_all_buffers, unregister_buffer, unregister_external,
)
from .linker.module_init import install_dsl_hooks
from .linker.module_init import library_finalize as culibrary_finalize
from .linker.module_init import library_init as culibrary_init
from .linker.module_init import module_finalize as cumodule_finalize
from .linker.module_init import module_init as cumodule_init
from .host.teams import TeamHandle, split_2d, split_strided, team_init, translate_pe
from .host.teams import config as team_config
from .host.teams import destroy as team_destroy

__all__ = [
    # constants
    "Cmp", "InitStatus", "SignalOp", "Status", "Team", "ThreadLevel", "REDUCE_OPS",
    # errors
    "NvshmemError", "NvshmemNotFoundError", "NvshmemStatusError", "NvshmemInitError", "NvshmemStateError",
    "NvshmemArgumentError", "NvshmemTypeError", "NvshmemMemoryError", "NvshmemOutOfMemoryError",
    "NvshmemLeakWarning", "NvshmemUnsupportedError", "NvshmemMpgError",
    # init and queries
    "init", "session", "Session", "finalize", "is_initialized", "my_pe", "n_pes", "team_my_pe", "team_n_pes",
    "get_uniqueid", "init_status", "query_thread", "global_exit", "versions", "info", "lib", "ffi",
    # memory
    "Buffer", "buffer", "array", "empty", "zeros", "full", "empty_like", "zeros_like", "free", "peer",
    "peer_ptr", "multicast", "mc_ptr", "is_symmetric", "register_external", "unregister_external",
    "register_buffer", "unregister_buffer", "unregister_all_buffers", "live_allocations", "leak_report",
    # teams
    "TeamHandle", "split_strided", "split_2d", "team_init", "translate_pe", "team_config", "team_destroy",
    # host operations
    "put", "get", "put_nbi", "get_nbi", "p", "g", "iput", "iget", "put_signal", "put_signal_nbi",
    "signal_op", "signal_fetch", "signal_wait_until", "signal_counted_reset",
    "wait_until", "wait_until_all", "wait_until_all_vector",
    "quiet", "flush", "fence", "barrier", "barrier_all", "sync", "sync_all",
    "broadcast", "fcollect", "alltoall", "reduce", "reducescatter",
    "atomic_fetch", "atomic_set", "atomic_swap", "atomic_compare_swap", "atomic_inc", "atomic_fetch_inc",
    "atomic_add", "atomic_fetch_add", "atomic_and", "atomic_or", "atomic_xor",
    "atomic_fetch_and", "atomic_fetch_or", "atomic_fetch_xor",
    # kernels
    "cumodule_init", "cumodule_finalize", "culibrary_init", "culibrary_finalize", "install_dsl_hooks",
]
