"""The host runtime: starting NVSHMEM, symmetric memory, teams and stream-ordered operations.

Layered bottom-up, each module importing only those above it in this list:

* :mod:`._state` the process's NVSHMEM state (``my_pe()`` / ``n_pes()`` read from it);
  :mod:`._lib` the host library through cffi (``ffi``, ``lib``, checked calls); :mod:`._table`
  which C function serves a (family, dtype); :mod:`._cuda` the few CUDA driver calls; :mod:`._arrays` what an array argument is
  (address, size, dtype) for any array library; :mod:`._teamref` a team argument's handle;
* :mod:`._launch_env` what launchers put in the environment; :mod:`._peer_user` whose process is
  at the other end of a connection on this host; :mod:`._uid_store` the TCP store rank 0 hands the
  unique id out from; :mod:`._bootstrap` this process's rank and the unique-id exchange (over that
  store or MPI); :mod:`._exit` how a PE leaves (its exit status, leaving without the collective
  finalize, the bounded finalize); :mod:`._init` ``init()`` / ``finalize()`` and queries;
* :mod:`.symmetric` the registry of live symmetric allocations (what every operation checks);
* :mod:`.memory` symmetric allocation and free (buffers, arrays of any library);
  :mod:`.views` peer and multicast views, registration of external memory;
* :mod:`._op_args` what every operation does with its arguments (checks, conversions, the C
  function of the op table that serves it); :mod:`._rma` put/get, p/g, iput/iget;
  :mod:`._signals` signals and waits; :mod:`._ordering` quiet, fence, barriers, syncs;
  :mod:`._collectives` broadcast, fcollect, alltoall, reductions; :mod:`._atomics` the atomics of
  the spec; :mod:`.operations` all of them by their public names, on a stream or blocking;
* :mod:`.teams` team handles, splits and ``team_init``.

The public names are re-exported by :mod:`nvshmem_dsl`.
"""
