"""Queries and enums used as-is (``nvshmem.core.direct``)."""

from __future__ import annotations

from typing import Any

from ..host import _init as _native
from ..host import _lib
from ..host import _state
from .._generated.constants import Cmp, InitStatus, SignalOp
from ._bindtypes import Smem_amount as SmemAmount  # NVSHMEM4Py's: the bindings' enum (MAX too)
from ._bindtypes import Thread_support
from ._tracking import translated
from .teams import team_value

__all__ = ["ComparisonType", "SignalOp", "InitStatus", "ThreadSupport", "SmemAmount", "ask_smem", "query_thread",
           "my_pe", "team_my_pe", "team_n_pes", "n_pes", "init_status"]

#: ``nvshmemx_cmp_type_t`` (CMP_EQ, CMP_NE, CMP_GT, CMP_LE, CMP_LT, CMP_GE)
ComparisonType = Cmp

#: ``nvshmemx_thread_support_t`` (THREAD_SINGLE ... THREAD_MULTIPLE), NVSHMEM4Py's
#: ``bindings.Thread_support``
ThreadSupport = Thread_support

#: What ``nvshmemx_ask_smem`` returns on the host.  It is a header-inline function (no host
#: library symbol: NVSHMEM4Py compiles a C extension for it), so its table is here:
#: NVSHMEM 3.8's device/nvshmemx_defines.h; BARRIERS_ONLY is NVSHMEMI_SMEM_DATA_REGION_OFFSET
#: (512 B of TMA barriers + 32 x 16 B handle barriers + 7 x 16 B counted state), and any other
#: value gets the recommended size.  tests/test_nvshmem4py_surface.py checks it against the
#: installed headers.
_ASK_SMEM = {int(SmemAmount.SMEM_RECOMMENDED): 65536, int(SmemAmount.SMEM_MINIMUM): 32768,
             int(SmemAmount.SMEM_BARRIERS_ONLY): 512 + 32 * 16 + 7 * 16}


def ask_smem(amount: SmemAmount = SmemAmount.SMEM_RECOMMENDED) -> int:
    """The dynamic shared memory (bytes) NVSHMEM's TMA transfers ask for (``nvshmemx_ask_smem``):
    launch a kernel that calls the device ``give_smem`` with this much.  Invalid values get the
    recommended size, as the native helper does."""
    return _ASK_SMEM.get(int(amount), _ASK_SMEM[int(SmemAmount.SMEM_RECOMMENDED)])


@translated
def query_thread() -> ThreadSupport:
    """The host library's thread-support level (``nvshmem_query_thread``; callable before init)."""
    provided = _lib.new("int *")
    _lib.call("nvshmem_query_thread", provided)
    return ThreadSupport(int(provided[0]))


_my_pe_or_raise = translated(_native.my_pe)
_n_pes_or_raise = translated(_native.n_pes)


def my_pe() -> int:
    """This PE's number in ``TEAM_WORLD``."""
    pe = _state._MY_PE  # known since init, -1 outside it: the native query, translated, only to raise
    return pe if pe >= 0 else _my_pe_or_raise()


def n_pes() -> int:
    """The number of PEs in ``TEAM_WORLD``."""
    n = _state._N_PES
    return n if n > 0 else _n_pes_or_raise()


@translated
def team_my_pe(team: Any) -> int:
    """This PE's number in ``team`` (-1 when not a member)."""
    return _native.team_my_pe(team_value(team, "team_my_pe"))


@translated
def team_n_pes(team: Any) -> int:
    """The number of PEs in ``team``."""
    return _native.team_n_pes(team_value(team, "team_n_pes"))


@translated
def init_status() -> InitStatus:
    """``nvshmemx_init_status()``."""
    return _native.init_status()
