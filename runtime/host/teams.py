"""Teams: the predefined ones (:class:`Team`), and teams made by splitting or from PE lists.

Team creation is collective: :func:`split_strided` and :func:`split_2d` over the
parent team, :func:`team_init` over ``TEAM_WORLD`` (every PE passes the same
member list; the team's unique id travels through NVSHMEM itself).  A PE that
is not a member gets ``None``.  Anywhere a team is taken, a :class:`Team` value,
its int, or a :class:`TeamHandle` will do.
"""

from __future__ import annotations

import struct
from typing import Any, Sequence

from . import _cuda, _lib, _state, _table, memory, operations
from ._teamref import TeamRef, forget_place, place, team_id
from .._generated.constants import STRUCT_VERSIONS, Team
from ..errors import NvshmemArgumentError

__all__ = [
    "Team",
    "TeamHandle",
    "team_id",
    "my_pe",
    "n_pes",
    "translate_pe",
    "split_strided",
    "split_2d",
    "team_init",
    "destroy",
    "config",
]

# nvshmem_types.h: NVSHMEM_TEAM_CONFIG_MASK_*
CONFIG_MASK_NUM_CONTEXTS = 0x1
CONFIG_MASK_UNIQUEID = 0x2
_INVALID_UID = 0xFFFFFFFFFFFFFFFF


class TeamHandle(TeamRef):
    """A team created by this runtime.  ``int(team)`` is the ``nvshmem_team_t`` (for kernels)."""

    __slots__ = ()

    def my_pe(self) -> int:
        return my_pe(self)

    def n_pes(self) -> int:
        return n_pes(self)

    def translate_pe(self, pe: int, dest: Any = Team.TEAM_WORLD) -> int:
        """This team's PE ``pe`` as numbered in ``dest`` (-1 when not a member there)."""
        return translate_pe(self, pe, dest)

    def world_pe(self, pe: int) -> int:
        return translate_pe(self, pe, Team.TEAM_WORLD)

    def config(self) -> dict:
        return config(self)

    def sync(self, stream: Any = None) -> None:
        operations.sync(self, stream=stream)

    def barrier(self, stream: Any = None) -> None:
        operations.barrier(self, stream=stream)

    def destroy(self) -> None:
        destroy(self)

    def __enter__(self) -> "TeamHandle":
        return self

    def __exit__(self, *exc) -> None:
        if not self._destroyed:
            destroy(self)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, TeamHandle):
            return self._handle == other._handle and self._generation == other._generation
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._handle, self._generation))

    def __repr__(self) -> str:
        state = " destroyed" if self._destroyed else ""
        return f"<TeamHandle {self._handle} ({self.how}){state}>"


def my_pe(team: Any = Team.TEAM_WORLD) -> int:
    """This PE's number in ``team`` (-1 when not a member)."""
    return place(team, "team_my_pe")[1]


def n_pes(team: Any = Team.TEAM_WORLD) -> int:
    """Number of PEs in ``team``."""
    return place(team, "team_n_pes")[2]


def translate_pe(src_team: Any, pe: int, dest_team: Any = Team.TEAM_WORLD) -> int:
    """PE ``pe`` of ``src_team`` as numbered in ``dest_team`` (-1 when it is not in it)."""
    _state.require("translate_pe()")
    return _lib.call(
        "nvshmem_team_translate_pe", team_id(src_team, "translate_pe"), int(pe), team_id(dest_team, "translate_pe")
    )


def _new_config(num_contexts: int | None, uniqueid: int | None):
    """An nvshmem_team_config_t as NVSHMEM_TEAM_CONFIG_INITIALIZER sets it, and the mask."""
    cfg = _lib.new("nvshmem_team_config_t *")
    cfg.version = STRUCT_VERSIONS["nvshmem_team_config_t"]
    cfg.num_contexts = -1
    cfg.uniqueid = _INVALID_UID
    mask = 0
    if num_contexts is not None:
        cfg.num_contexts = int(num_contexts)
        mask |= CONFIG_MASK_NUM_CONTEXTS
    if uniqueid is not None:
        cfg.uniqueid = int(uniqueid)
        mask |= CONFIG_MASK_UNIQUEID
    return cfg, mask


def _result(handle: int, how: str) -> TeamHandle | None:
    if handle == int(Team.TEAM_INVALID):
        return None
    forget_place(handle)  # a handle asked about before it was this team's
    return TeamHandle(handle, how)


def split_strided(parent: Any, start: int, stride: int, size: int, *, num_contexts: int | None = None) -> TeamHandle | None:
    """PEs ``start, start+stride, ...`` (``size`` of them) of ``parent`` as a new team.

    Collective over ``parent``; returns None on PEs that are not members.
    """
    _state.require("split_strided()")
    if size < 1:
        raise NvshmemArgumentError(f"split_strided(): size must be positive, got {size}")
    cfg, mask = _new_config(num_contexts, None) if num_contexts is not None else (None, 0)
    out = _lib.new("nvshmem_team_t *")
    out[0] = int(Team.TEAM_INVALID)
    _lib.call(
        "nvshmem_team_split_strided", team_id(parent, "split_strided"), int(start), int(stride), int(size),
        cfg, mask, out, context=f"start={start} stride={stride} size={size}",
    )
    return _result(out[0], f"split_strided(start={start}, stride={stride}, size={size})")


def split_2d(parent: Any, xrange: int) -> tuple[TeamHandle | None, TeamHandle | None]:
    """Split ``parent`` into a 2-D grid with rows of ``xrange`` PEs: (x team, y team) of this PE.

    Collective over ``parent``.
    """
    _state.require("split_2d()")
    if xrange < 1:
        raise NvshmemArgumentError(f"split_2d(): xrange must be positive, got {xrange}")
    null = None
    x = _lib.new("nvshmem_team_t *")
    y = _lib.new("nvshmem_team_t *")
    x[0] = y[0] = int(Team.TEAM_INVALID)
    _lib.call("nvshmem_team_split_2d", team_id(parent, "split_2d"), int(xrange), null, 0, x, null, 0, y)
    return _result(x[0], f"split_2d(xrange={xrange}).x"), _result(y[0], f"split_2d(xrange={xrange}).y")


def team_init(members: Sequence[int], *, num_contexts: int | None = None) -> TeamHandle | None:
    """A team of the world PEs ``members``, in that order (any set, any order).

    Collective over ``TEAM_WORLD``: every PE calls it with the same list.  The
    first member creates the team's unique id (``nvshmemx_team_get_uniqueid``)
    and writes it to every member through NVSHMEM; then the members call
    ``nvshmemx_team_init``.  Returns None on PEs that are not members.
    """
    s = _state.require("team_init()")
    members = [int(m) for m in members]
    if not members:
        raise NvshmemArgumentError("team_init(): the member list is empty")
    if len(set(members)) != len(members):
        raise NvshmemArgumentError(f"team_init(): members repeat: {members}")
    bad = [m for m in members if not 0 <= m < s.n_pes]
    if bad:
        raise NvshmemArgumentError(f"team_init(): PEs {bad} are out of range 0..{s.n_pes - 1}")
    _lib.refuse_in_limited_mpg("nvshmemx_team_get_uniqueid", "team_init()")  # on every PE: none waits
    scratch = memory._scratch_alloc()
    slot = scratch.ptr + memory._SCRATCH_UID
    p_symbol = _table.resolve("p", "uint64", 8, untyped=False).symbol
    root = members[0]
    if s.my_pe == root:
        uid = _lib.new("nvshmemx_team_uniqueid_t *")
        _lib.call("nvshmemx_team_get_uniqueid", uid)
        for pe in members:
            _lib.call(p_symbol, slot, int(uid[0]), pe)
        operations.quiet()
    operations.barrier_all()
    uid_value = struct.unpack("<Q", _cuda.memcpy_dtoh(slot, 8))[0] if s.my_pe in members else None
    operations.barrier_all()  # nobody overwrites the slot before every member has read it
    if uid_value is None:
        return None
    cfg, mask = _new_config(num_contexts, uid_value)
    out = _lib.new("nvshmem_team_t *")
    out[0] = int(Team.TEAM_INVALID)
    index = members.index(s.my_pe)
    _lib.call("nvshmemx_team_init", out, cfg, mask, len(members), index, context=f"members={members}")
    return _result(out[0], f"team_init({members})")


def destroy(team: Any) -> None:
    """Destroy a team made by split or team_init (collective over the team's members)."""
    _state.require("destroy()")
    if isinstance(team, Team):
        raise NvshmemArgumentError(f"destroy(): {team.name} is predefined and cannot be destroyed")
    if isinstance(team, TeamHandle):
        handle = team.handle
    else:
        handle = team_id(team, "destroy")
    forget_place(handle)  # NVSHMEM may hand the handle out again
    _lib.call("nvshmem_team_destroy", handle)
    if isinstance(team, TeamHandle):
        team._destroyed = True


def config(team: Any = Team.TEAM_WORLD) -> dict:
    """The team's configuration (``nvshmem_team_get_config``): version, num_contexts, uniqueid."""
    _state.require("config()")
    cfg = _lib.new("nvshmem_team_config_t *")
    _lib.call("nvshmem_team_get_config", team_id(team, "config"), cfg)
    return {"version": cfg.version, "num_contexts": cfg.num_contexts, "uniqueid": int(cfg.uniqueid)}
