"""NVSHMEM4Py's ``nvshmem.core``, over nvshmem_dsl: switch by changing one import.

::

    import nvshmem_dsl.core as nvshmem          # was: import nvshmem.core as nvshmem

    nvshmem.init(device=dev, mpi_comm=MPI.COMM_WORLD, initializer_method="mpi")
    x = nvshmem.array((1024,), dtype="float32")              # a CuPy array
    nvshmem.reduce(nvshmem.Teams.TEAM_WORLD, y, x, "sum", stream=stream)
    nvshmem.free_array(x)
    nvshmem.finalize()

Every function has NVSHMEM4Py's name, arguments, return type (CuPy arrays, torch tensors,
``cuda.core`` buffers, int team handles) and exceptions (:class:`NvshmemInvalid`,
:class:`NvshmemError`), and is a thin layer over nvshmem_dsl's own host API (allocation,
collectives, teams, init are nvshmem_dsl's; nothing is implemented twice).  The device APIs are
``nvshmem_dsl.core.device.numba`` and ``nvshmem_dsl.core.device.cute`` (re-exports of
:mod:`nvshmem_dsl.numba` and :mod:`nvshmem_dsl.cute` under NVSHMEM4Py's names); its utilities are
``nvshmem_dsl.core.utils`` and its raw bindings ``nvshmem_dsl.core.bindings`` (NVSHMEM's C host
functions without their prefix, generated from the spec; ``.device.numba`` / ``.device.cute``: the
device functions by C name).  To run a program
that says ``import nvshmem.core`` unchanged: ``python -m nvshmem_dsl.run --as-nvshmem4py -n 2
prog.py`` (see :mod:`nvshmem_dsl.core.alias`).  Where NVSHMEM4Py's documents and its package
disagree, the package's behaviour is followed; docs/migrating.rst lists each case.
"""

from __future__ import annotations

import sys as _sys
from typing import Any

from ._bindtypes import Smem_amount as SmemAmount  # NVSHMEM4Py's: the bindings' enum (MAX too)
from .amo import (
    atomic_add, atomic_and, atomic_compare_swap, atomic_fetch, atomic_fetch_add, atomic_fetch_and,
    atomic_fetch_inc, atomic_fetch_or, atomic_fetch_xor, atomic_inc, atomic_or, atomic_set,
    atomic_swap, atomic_xor,
)
from .collective import (
    alltoall, barrier, barrier_all, broadcast, collective_on_buffer, fcollect, reduce,
    reducescatter, sync, sync_all,
)
from .direct import (
    ComparisonType, InitStatus, SignalOp, ThreadSupport, ask_smem, init_status, my_pe, n_pes, query_thread,
    team_my_pe, team_n_pes,
)
from .init_fini import (
    DeviceLibLanguage, UniqueID, finalize, find_device_bitcode_library, get_name, get_unique_id, get_version, init,
    library_finalize, library_init, module_finalize, module_init,
)
from .interop.cupy import (
    array, array_get_buffer, bytearray, free_array, get_multicast_array, get_peer_array,
    register_external_array, unregister_external_array,
)
from .interop.torch import (
    bytetensor, free_tensor, get_multicast_tensor, get_peer_tensor, register_external_tensor,
    tensor, tensor_get_buffer, unregister_external_tensor,
)
from .memory import (
    buffer, free, get_multicast_buffer, get_peer_buffer, register_external_buffer,
    unregister_external_buffer,
)
from .nvshmem_types import (
    BufferTypes, MutableEnum, NvshmemError, NvshmemInvalid, NvshmemKernelObject, NvshmemStream,
    NvshmemStreamsType, NvshmemWarning, Teams, Version,
)
from .rma import (
    flush, get, get_nbi, put, put_nbi, put_signal, put_signal_nbi, quiet, signal_fetch, signal_op, signal_wait,
)
from .teams import (
    TeamConfig, TeamUniqueId, get_team_unique_id, team_destroy, team_get_config, team_init, team_split_2d,
    team_split_strided, team_translate_pe,
)

__all__ = [
    # memory
    "buffer", "free", "get_peer_buffer", "get_multicast_buffer", "register_external_buffer",
    "unregister_external_buffer",
    # init_fini
    "get_unique_id", "init", "finalize", "get_name", "get_version", "module_init", "module_finalize", "library_init",
    "library_finalize", "UniqueID", "DeviceLibLanguage", "find_device_bitcode_library",
    # nvshmem_types
    "Version", "NvshmemInvalid", "NvshmemError", "NvshmemWarning", "NvshmemResource", "NvshmemStream",
    "NvshmemStreamsType", "MutableEnum", "Teams", "BufferTypes", "NvshmemKernelObject", "SmemAmount",
    # interop.cupy
    "bytearray", "array", "free_array", "array_get_buffer", "get_peer_array", "get_multicast_array",
    "register_external_array", "unregister_external_array",
    # interop.torch
    "bytetensor", "tensor", "free_tensor", "tensor_get_buffer", "get_peer_tensor", "get_multicast_tensor",
    "register_external_tensor", "unregister_external_tensor",
    # direct
    "ComparisonType", "SignalOp", "InitStatus", "ThreadSupport", "ask_smem", "query_thread", "my_pe", "team_my_pe",
    "team_n_pes", "n_pes", "init_status",
    # collective
    "reduce", "reducescatter", "alltoall", "fcollect", "broadcast", "barrier", "sync", "barrier_all", "sync_all",
    "collective_on_buffer",
    # rma
    "put_signal", "put_signal_nbi", "signal_op", "signal_wait", "put", "put_nbi", "get", "get_nbi", "quiet", "flush",
    "signal_fetch",
    # teams
    "team_split_strided", "team_split_2d", "team_destroy", "team_init", "team_translate_pe", "team_get_config",
    "TeamConfig", "TeamUniqueId", "get_team_unique_id",
    # amo
    "atomic_fetch", "atomic_set", "atomic_inc", "atomic_fetch_inc", "atomic_add", "atomic_fetch_add", "atomic_and",
    "atomic_fetch_and", "atomic_or", "atomic_fetch_or", "atomic_xor", "atomic_fetch_xor", "atomic_swap",
    "atomic_compare_swap",
]


def _package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("nvshmem-dsl")
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = _package_version()

#: NVSHMEM4Py's tutorial binds ``nvshmem`` to ``nvshmem.core`` and then writes both
#: ``nvshmem.array(...)`` and ``nvshmem.core.array(...)``; its device pages import ``nvshmem`` and
#: call ``nvshmem.init(...)`` and ``nvshmem.core.library_finalize(...)``.  ``core`` is this
#: module itself so that all of them work.
core = _sys.modules[__name__]


def __getattr__(name: str) -> Any:
    if name == "NvshmemResource":  # needs cuda.core: imported on first use
        from ._resource import NvshmemResource

        return NvshmemResource
    if name == "utils":  # NVSHMEM4Py's submodules import it: its programs write nvshmem.core.utils.X unimported
        import importlib

        return importlib.import_module(f"{__name__}.utils")  # (`from . import utils` would ask here again)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
