"""What a team argument is: a :class:`~nvshmem_dsl.Team`, its int, or a team this runtime made
(:class:`TeamRef`, whose methods :class:`nvshmem_dsl.host.teams.TeamHandle` adds), as the
``nvshmem_team_t`` the C API takes (:func:`team_id`)."""

from __future__ import annotations

from typing import Any

from . import _state
from .._generated.constants import Team
from ..errors import NvshmemArgumentError, NvshmemStateError, NvshmemTypeError

__all__ = ["TeamRef", "team_id"]


class TeamRef:
    """A team created by this runtime, as a handle.  ``int(team)`` is the ``nvshmem_team_t`` (for kernels)."""

    __slots__ = ("_handle", "_generation", "_destroyed", "how", "__weakref__")

    def __init__(self, handle: int, how: str) -> None:
        self._handle = int(handle)
        self._generation = _state.STATE.generation
        self._destroyed = False
        self.how = how

    @property
    def handle(self) -> int:
        if self._destroyed:
            raise NvshmemStateError(f"team {self._handle} ({self.how}) was destroyed")
        if self._generation != _state.STATE.generation:
            raise NvshmemStateError(f"team {self._handle} ({self.how}) belongs to a finalized runtime")
        return self._handle

    def __int__(self) -> int:
        return self.handle

    __index__ = __int__

    @property
    def destroyed(self) -> bool:
        return self._destroyed


def team_id(team: Any, function: str = "") -> int:
    """The ``nvshmem_team_t`` of ``team`` (Team, int, TeamHandle; None = TEAM_WORLD)."""
    if team is None:
        return int(Team.TEAM_WORLD)
    if isinstance(team, TeamRef):
        return team.handle
    if isinstance(team, bool) or not isinstance(team, int):
        where = f"{function}(): " if function else ""
        raise NvshmemTypeError(f"{where}team must be a Team, a TeamHandle or an int, not {type(team).__name__}")
    value = int(team)
    if value == int(Team.TEAM_INVALID):
        where = f"{function}(): " if function else ""
        raise NvshmemArgumentError(f"{where}TEAM_INVALID is not a team (a PE outside a split gets it)")
    return value
