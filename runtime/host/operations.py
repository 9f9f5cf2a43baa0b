"""Host-initiated and stream-ordered NVSHMEM operations on arrays.

The functions live in private modules, one per kind, and are re-exported here (and by
:mod:`nvshmem_dsl`): :mod:`._rma` put/get, p/g, iput/iget; :mod:`._signals` signals and waits;
:mod:`._ordering` quiet, fence, barriers, syncs; :mod:`._collectives` broadcast, fcollect,
alltoall, reductions; :mod:`._atomics` the atomics of the spec; :mod:`._op_args` what they all do
with their arguments.  This module also says which of them serves each host family of the op
table (``COVERAGE``) and which families are not wrapped (``NOT_WRAPPED``).

Every function picks its C function from the generated op table by the
arrays' dtype (numpy dtype -> NVSHMEM TYPENAME through ``ops.json``'s dtypes,
preferring the fixed-width names: int32, uint64, float, double, half, bfloat16);
there is no per-dtype code.  Pure data movement (put/get/iput/iget/put_signal,
broadcast/fcollect/alltoall) also takes dtypes without a typed C function
(bool, complex64 ...) through the sized (``put64``) or byte (``putmem``) forms.

Conventions:

* arrays are anything with ``__cuda_array_interface__`` or ``__dlpack__`` (cupy,
  numba, nvshmem_dsl buffers) and torch CUDA tensors;
* argument order: destination, source, counts, pe; the team first for
  collectives (as in C): ``put(dst, src, pe)``, ``reduce(team, dst, src, "sum")``;
* counts default to the arrays' sizes and are checked against both arrays;
* single-element targets (p/g, atomics, signal words, wait variables) are the
  first element of the array given (slice it to pick another);
* ``stream``: None runs the blocking host form where one exists (otherwise the
  operation goes on the legacy default stream); a cuda.core / cupy / torch /
  numba stream or an int handle selects the ``*_on_stream`` form;
* everything is validated before the C call: dtypes, sizes, symmetric memory
  (freed or foreign memory is refused), PE and root ranges.

Ordering: NVSHMEM's blocking host forms run on its own internal streams, which
do not wait for the streams your array library writes on (the
``__cuda_array_interface__`` ``stream`` field is not consulted).  Finish such
writes first (``cupy.cuda.runtime.deviceSynchronize()``,
``torch.cuda.synchronize()``), or pass that library's stream as ``stream=``.
"""

from __future__ import annotations

from .._generated.host_api import AMO
from ._rma import get, get_nbi, g, iget, iput, p, put, put_nbi
from ._signals import (
    put_signal, put_signal_nbi, signal_counted_reset, signal_fetch, signal_op, signal_wait_until, wait_until,
    wait_until_all, wait_until_all_vector,
)
from ._ordering import barrier, barrier_all, fence, flush, quiet, sync, sync_all
from ._collectives import REDUCE_OPS, alltoall, broadcast, fcollect, reduce, reducescatter
from ._atomics import *  # noqa: F403  the host atomics of the spec (names: AMO's keys)

__all__ = [
    "put", "get", "put_nbi", "get_nbi", "p", "g", "iput", "iget",
    "put_signal", "put_signal_nbi", "signal_op", "signal_fetch", "signal_wait_until", "signal_counted_reset",
    "wait_until", "wait_until_all", "wait_until_all_vector",
    "quiet", "flush", "fence", "barrier", "barrier_all", "sync", "sync_all",
    "broadcast", "fcollect", "alltoall", "reduce", "reducescatter", "REDUCE_OPS",
    *AMO,  # the host atomics of the spec, built by ._atomics
    "COVERAGE", "NOT_WRAPPED",
]


# --------------------------------------------------------------------------- coverage of the op table

#: Every host family of ops.json -> the Python function(s) that reach it ("module.function").
COVERAGE: dict[str, str] = {
    # RMA
    "put": "host.operations.put", "get": "host.operations.get", "p": "host.operations.p", "g": "host.operations.g",
    "iput": "host.operations.iput", "iget": "host.operations.iget",
    # signals and waits
    "put_signal": "host.operations.put_signal", "signal_op": "host.operations.signal_op",
    "signal_fetch": "host.operations.signal_fetch", "signal_wait_until_on_stream": "host.operations.signal_wait_until",
    "signal_counted_reset": "host.operations.signal_counted_reset",
    "wait_until": "host.operations.wait_until", "wait_until_all": "host.operations.wait_until_all",
    "wait_until_all_vector": "host.operations.wait_until_all_vector",
    # ordering and sync
    "quiet": "host.operations.quiet", "flush": "host.operations.flush", "fence": "host.operations.fence",
    "barrier": "host.operations.barrier", "barrier_all": "host.operations.barrier_all",
    "team_sync": "host.operations.sync", "sync_all": "host.operations.sync_all",
    # collectives
    "broadcast": "host.operations.broadcast", "fcollect": "host.operations.fcollect", "alltoall": "host.operations.alltoall",
    "reduce": "host.operations.reduce", "reducescatter": "host.operations.reducescatter",
    # atomics: every family's apis are built from the spec (below)
    **{row["family"]: f"host.operations.{api}" for api, row in AMO.items()},
    # memory
    "malloc": "host.memory.buffer", "calloc": "host.memory.zeros", "align": "host.memory.buffer", "free": "host.memory.free",
    "ptr": "host.views.peer", "mc_ptr": "host.views.multicast",
    "buffer_register": "host.views.register_buffer", "buffer_unregister": "host.views.unregister_buffer",
    "buffer_unregister_all": "host.views.unregister_all_buffers",
    "buffer_register_symmetric": "host.views.register_external",
    "buffer_unregister_symmetric": "host.views.unregister_external",
    # teams
    "team_my_pe": "host.teams.my_pe", "team_n_pes": "host.teams.n_pes", "team_translate_pe": "host.teams.translate_pe",
    "team_split_strided": "host.teams.split_strided", "team_split_2d": "host.teams.split_2d",
    "team_init": "host.teams.team_init", "team_get_uniqueid": "host.teams.team_init",
    "team_get_config": "host.teams.config", "team_destroy": "host.teams.destroy",
    # init, queries
    "hostlib_init_attr": "host._init.init", "hostlib_finalize": "host._init.finalize", "get_uniqueid": "host._init.get_uniqueid",
    "set_attr_uniqueid_args": "host._init.init", "init_status": "host._init.init_status", "query_thread": "host._init.query_thread",
    "my_pe": "host._init.my_pe", "n_pes": "host._init.n_pes",
    "info_get_version": "host._init.versions", "info_get_name": "host._init.versions",
    "vendor_get_version_info": "host._init.versions", "global_exit": "host._init.global_exit",
    # kernels
    "module_init": "linker.module_init.library_init", "module_finalize": "linker.module_init.library_finalize",
}

#: Host families deliberately not wrapped, with the reason; all stay reachable as
#: ``nvshmem_dsl.lib().<symbol>`` (raw cffi) or ``nvshmem_dsl.host._lib.call(symbol, ...)``.
NOT_WRAPPED: dict[str, str] = {
    "buffer_register_symmetric_at_preferred_address": "register_external() lets NVSHMEM choose the address",
    "set_attr_mpi_comm_args": "init() bootstraps MPI jobs through the unique id over mpi4py (portable across MPIs)",
    "collective_launch": "takes a CUDA runtime function pointer, which JIT-compiled Python kernels do not have",
    "collective_launch_query_gridsize": "takes a CUDA runtime function pointer (see collective_launch)",
    "qp_create": "IBGDA queue pairs for device-side QP APIs; not needed by host code",
    "region_host": "experimental region API (nvshmemx_region_start); raw access only",
    "region_stop_host": "experimental region API (nvshmemx_region_stop); raw access only",
    "region_is_active": "experimental region API; raw access only",
}
