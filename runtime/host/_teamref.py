"""What a team argument is: a :class:`~nvshmem_dsl.Team`, its int, or a team this runtime made
(:class:`TeamRef`, whose methods :class:`nvshmem_dsl.host.teams.TeamHandle` adds), as the
``nvshmem_team_t`` the C API takes (:func:`team_id`); and this PE's place in it (:func:`place`),
asked of NVSHMEM once per team."""

from __future__ import annotations

from typing import Any

from . import _lib, _state
from .._generated.constants import Team
from ..errors import NvshmemArgumentError, NvshmemStateError, NvshmemTypeError

__all__ = ["TeamRef", "team_id", "place", "forget_place"]


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


#: Team's values as ints (an Enum's attribute costs ~0.1 us a read in Python 3.11: read once here)
_WORLD = int(Team.TEAM_WORLD)
_INVALID = int(Team.TEAM_INVALID)
_WORLD_MEMBER = Team.TEAM_WORLD


def team_id(team: Any, function: str = "") -> int:
    """The ``nvshmem_team_t`` of ``team`` (Team, int, TeamHandle; None = TEAM_WORLD)."""
    if type(team) is int:
        value = team
    elif team is None:
        return _WORLD
    elif isinstance(team, TeamRef):
        return team.handle
    elif isinstance(team, bool) or not isinstance(team, int):
        where = f"{function}(): " if function else ""
        raise NvshmemTypeError(f"{where}team must be a Team, a TeamHandle or an int, not {type(team).__name__}")
    else:
        value = int(team)
    if value == _INVALID:
        where = f"{function}(): " if function else ""
        raise NvshmemArgumentError(f"{where}TEAM_INVALID is not a team (a PE outside a split gets it)")
    return value


#: (runtime generation, my_pe, n_pes) of each valid team asked about, by handle: constant from the
#: team's creation to its destruction (teams.destroy forgets it; a new runtime, a new generation).
_PLACES: dict[int, tuple[int, int, int]] = {}


def place(team: Any, function: str) -> tuple[int, int, int]:
    """(generation, this PE's number in ``team`` or -1, its PE count) for ``function()``: TEAM_WORLD's
    from the state, another team's asked of NVSHMEM the first time (NvshmemStateError before init)."""
    s = _state.STATE
    if not s.initialized:
        _state.require(f"{function}()")
    handle = _WORLD if team is _WORLD_MEMBER else team_id(team, function)
    if handle == _WORLD:
        return s.generation, s.my_pe, s.n_pes
    known = _PLACES.get(handle)
    if known is not None and known[0] == s.generation:
        return known
    known = (s.generation, _lib.call("nvshmem_team_my_pe", handle), _lib.call("nvshmem_team_n_pes", handle))
    if known[2] > 0:  # not a team (yet): asked again next time
        _PLACES[handle] = known
    return known


def forget_place(handle: int) -> None:
    """Drop what :func:`place` knows of ``handle`` (destroyed, or newly made)."""
    _PLACES.pop(int(handle), None)
