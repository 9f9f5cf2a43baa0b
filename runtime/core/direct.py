"""Queries and enums used as-is (``nvshmem.core.direct``)."""

from __future__ import annotations

from typing import Any

from ..host import _init as _native
from .._generated.constants import Cmp, InitStatus, SignalOp
from ._tracking import translated
from .teams import team_value

__all__ = ["ComparisonType", "SignalOp", "InitStatus", "my_pe", "team_my_pe", "team_n_pes", "n_pes", "init_status"]

#: ``nvshmemx_cmp_type_t`` (CMP_EQ, CMP_NE, CMP_GT, CMP_LE, CMP_LT, CMP_GE)
ComparisonType = Cmp


@translated
def my_pe() -> int:
    """This PE's number in ``TEAM_WORLD``."""
    return _native.my_pe()


@translated
def n_pes() -> int:
    """The number of PEs in ``TEAM_WORLD``."""
    return _native.n_pes()


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
