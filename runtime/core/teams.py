"""Teams as NVSHMEM4Py makes them (``nvshmem.core.teams``), over :mod:`nvshmem_dsl.host.teams`.

Teams are plain ints (``nvshmem_team_t``) here as in NVSHMEM4Py, and every team made is added to
:data:`Teams` under its name.  ``team_split_strided`` / ``team_split_2d`` are
:func:`nvshmem_dsl.split_strided` / :func:`nvshmem_dsl.split_2d`; ``team_init`` is NVSHMEM's
``nvshmemx_team_init`` as NVSHMEM4Py calls it (only the member PEs call it, with the team's
unique id in the config); nvshmem_dsl's own :func:`nvshmem_dsl.team_init` (every PE passes the
member list, the unique id travels for you) is the easier one to use.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import NvshmemArgumentError
from ..host import _lib, _op_args, _state
from ..host import teams as _native
from . import _bindtypes
from ._tracking import translated
from ._types import _PREDEFINED_TEAMS as _PREDEFINED
from ._types import NvshmemError, NvshmemInvalid, Teams

__all__ = [
    "team_split_strided", "team_split_2d", "team_destroy", "team_init", "team_translate_pe", "team_get_config",
    "TeamConfig", "TeamUniqueId", "get_team_unique_id",
]

logger = logging.getLogger("nvshmem")

_MASK_NUM_CONTEXTS = _native.CONFIG_MASK_NUM_CONTEXTS
_MASK_UNIQUEID = _native.CONFIG_MASK_UNIQUEID


#: ``nvshmem_team_config_t`` (NVSHMEM4Py's ``TeamConfig`` is its bindings' too): see
#: :class:`nvshmem_dsl.core.bindings.TeamConfig`.
TeamConfig = _bindtypes.TeamConfig

#: A team unique id (``nvshmemx_team_uniqueid_t``) from :func:`get_team_unique_id`: ``value``,
#: ``ptr``, and usable as the int it holds (NVSHMEM4Py's ``bindings.team_uniqueid``).
TeamUniqueId = _bindtypes.team_uniqueid


def team_value(team: Any, function: str, argument: str = "team") -> int:
    """The ``nvshmem_team_t`` of a Teams value, a team name, an int or an nvshmem_dsl TeamHandle."""
    if isinstance(team, str):
        if team not in Teams:
            raise NvshmemInvalid(f"{function}(): argument '{argument}': no team named {team!r}")
        return int(Teams[team])
    if team is None or isinstance(team, bool):
        raise NvshmemInvalid(f"{function}(): argument '{argument}' must be a team (Teams.TEAM_WORLD, a handle), "
                             f"not {team!r}")
    try:
        return int(team)
    except (TypeError, ValueError):
        raise NvshmemInvalid(f"{function}(): argument '{argument}' must be a team, not {type(team).__name__}") from None


def _config_for_split(config: Any, config_mask: Any, function: str, config_arg: str, mask_arg: str) -> int | None:
    """num_contexts to pass to the native split (or None), from an NVSHMEM4Py config and mask."""
    mask = int(config_mask or 0)
    unknown = mask & ~(_MASK_NUM_CONTEXTS | _MASK_UNIQUEID)
    if unknown:
        raise NvshmemInvalid(f"{function}(): argument '{mask_arg}' has unknown bits 0x{unknown:x} "
                             "(NUM_CONTEXTS = 1, UNIQUEID = 2)")
    if mask & _MASK_UNIQUEID:
        raise NvshmemInvalid(f"{function}(): argument '{mask_arg}' sets UNIQUEID (2), which only team_init reads")
    if mask & _MASK_NUM_CONTEXTS:
        if config is None:
            raise NvshmemInvalid(f"{function}(): argument '{mask_arg}' sets NUM_CONTEXTS but '{config_arg}' is None")
        return int(config.num_contexts)
    return None


def _register(handle: int, name: str) -> int:
    Teams.add(name, int(handle))
    return Teams[name]


def _parent_size(parent: int, function: str) -> int:
    """PEs in team ``parent`` (the host operations' check), NVSHMEM4Py's error where it is not valid here."""
    try:
        return _op_args._team_size(parent)
    except NvshmemArgumentError as e:
        raise NvshmemError(f"{function}(): {e}") from None


@translated
def team_split_strided(parent_team: Any, start: int, stride: int, size: int, config: Any, config_mask: int,
                       new_team_name: str | None = None):
    """PEs ``start, start + stride, ...`` (``size`` of them) of ``parent_team`` as a new team
    (collective over the parent).  Returns its handle, also ``Teams.<new_team_name>``
    (default ``TEAM_<handle>``); None on PEs that are not members."""
    _state.require("team_split_strided()")
    parent = team_value(parent_team, "team_split_strided", "parent_team")
    if parent < 0:
        raise NvshmemError(f"Invalid parent_team: {parent_team}")
    if size <= 0:
        raise NvshmemError(f"Invalid size: {size}. Must be > 0.")
    if stride < 1:
        raise NvshmemError(f"Invalid stride: {stride}. Must be >= 1.")
    if start < 0:
        raise NvshmemError(f"Invalid start: {start}. Must be >= 0.")
    parent_size = _parent_size(parent, "team_split_strided")
    last = start + (size - 1) * stride
    if last >= parent_size:  # NVSHMEM would fail the collective; every PE raises here instead
        raise NvshmemError(f"Invalid start/stride/size: PE {last} (start + (size - 1) * stride) is not in the "
                           f"parent team of {parent_size} PEs")
    num_contexts = _config_for_split(config, config_mask, "team_split_strided", "config", "config_mask")
    team = _native.split_strided(parent, start, stride, size, num_contexts=num_contexts)
    if team is None:
        logger.debug("This PE is not part of the strided team")
        return None
    handle = int(team)
    return _register(handle, new_team_name if new_team_name is not None else f"TEAM_{handle}")


@translated
def team_split_2d(parent_team: Any, xrange: int, xaxis_config: Any, xaxis_mask: int, yaxis_config: Any,
                  yaxis_mask: int, new_team_name: str | None = None):
    """Split ``parent_team`` into a 2-D grid with rows of ``xrange`` PEs: (x team, y team) of this
    PE (collective over the parent).  Named ``<new_team_name>_X`` / ``_Y`` (default
    ``TEAM_X_<handle>`` / ``TEAM_Y_<handle>``); None for a team this PE is not in.

    Only masks of 0 are supported (nvshmem_dsl's split_2d passes no axis configs).
    """
    _state.require("team_split_2d()")
    parent = team_value(parent_team, "team_split_2d", "parent_team")
    if parent < 0:
        raise NvshmemError(f"Invalid parent_team: {parent_team}")
    if xrange <= 0:
        raise NvshmemError(f"Invalid xrange: {xrange}. Must be > 0.")
    for mask, name in ((xaxis_mask, "xaxis_mask"), (yaxis_mask, "yaxis_mask")):
        if int(mask or 0):
            raise NvshmemInvalid(f"team_split_2d(): argument '{name}'={mask}: axis team configs are not supported "
                                 "by nvshmem_dsl (pass 0)")
    parent_size = _parent_size(parent, "team_split_2d")
    if xrange > parent_size:
        raise NvshmemError(f"Invalid xrange: {xrange}. Must be <= parent team size {parent_size}.")
    x, y = _native.split_2d(parent, xrange)
    out = []
    for team, axis in ((x, "X"), (y, "Y")):
        if team is None:
            out.append(None)
            continue
        handle = int(team)
        name = f"{new_team_name}_{axis}" if new_team_name is not None else f"TEAM_{axis}_{handle}"
        out.append(_register(handle, name))
    return tuple(out)


@translated
def team_destroy(team: Any) -> None:
    """Destroy a team by handle or by name, and remove it from :data:`Teams`."""
    _state.require("team_destroy()")
    if isinstance(team, str):
        handle = int(Teams[team])  # KeyError for an unknown name, as in NVSHMEM4Py
        _native.destroy(handle)
        Teams.remove(team)
        return
    handle = team_value(team, "team_destroy")
    _native.destroy(handle)
    for name, value in list(Teams.items()):
        if value == handle and name not in _PREDEFINED:
            Teams.remove(name)
            break



@translated
def team_init(team_config: Any, config_mask: int, npes: int, pe_idx_in_team: int, new_team_name: str | None = None):
    """``nvshmemx_team_init``: only the ``npes`` member PEs call it, each with its index in the
    team and the same ``team_config.uniqueid`` (from :func:`get_team_unique_id` on one member,
    shared by the program), with ``config_mask`` including UNIQUEID (2)."""
    _state.require("team_init()")
    if team_config is None:
        raise NvshmemInvalid("team_init(): argument 'team_config' is required (it carries the team's uniqueid)")
    mask = int(config_mask or 0)
    unknown = mask & ~(_MASK_NUM_CONTEXTS | _MASK_UNIQUEID)
    if unknown:
        raise NvshmemInvalid(f"team_init(): argument 'config_mask' has unknown bits 0x{unknown:x}")
    if not 0 < int(npes) <= _state.STATE.n_pes:
        raise NvshmemInvalid(f"team_init(): argument 'npes'={npes} is outside 1..{_state.STATE.n_pes}")
    if not 0 <= int(pe_idx_in_team) < int(npes):
        raise NvshmemInvalid(f"team_init(): argument 'pe_idx_in_team'={pe_idx_in_team} is outside 0..{int(npes) - 1}")
    cfg = team_config.struct() if isinstance(team_config, TeamConfig) else team_config
    out = _lib.new("nvshmem_team_t *")
    out[0] = int(Teams.TEAM_INVALID)
    _lib.call("nvshmemx_team_init", out, cfg, mask, int(npes), int(pe_idx_in_team),
               context=f"npes={npes} pe_idx_in_team={pe_idx_in_team}")
    handle = int(out[0])
    name = new_team_name if new_team_name is not None else f"TEAM_{handle}"
    if handle == int(Teams.TEAM_INVALID):
        raise NvshmemError(f"Failed to create team {name}")
    return _register(handle, name)


@translated
def team_translate_pe(src_team: Any, src_pe: int, dest_team: Any) -> int:
    """``src_team``'s PE ``src_pe`` as numbered in ``dest_team`` (-1 when not a member)."""
    if src_pe < 0:
        raise NvshmemError(f"Invalid src_pe: {src_pe}. Must be >= 0.")
    return _native.translate_pe(team_value(src_team, "team_translate_pe", "src_team"), src_pe,
                                team_value(dest_team, "team_translate_pe", "dest_team"))


@translated
def get_team_unique_id() -> TeamUniqueId:
    """A new team unique id (``nvshmemx_team_get_uniqueid``) for :func:`team_init`'s config."""
    _state.require("get_team_unique_id()")
    uid = _lib.new("nvshmemx_team_uniqueid_t *")
    _lib.call("nvshmemx_team_get_uniqueid", uid)
    return TeamUniqueId(int(uid[0]))


@translated
def team_get_config(team: Any) -> TeamConfig:
    """A copy of ``team``'s ``nvshmem_team_config_t`` (``nvshmem_team_get_config``) as a
    :class:`TeamConfig`."""
    _state.require("team_get_config()")
    config = TeamConfig()
    cfg = _lib.new("nvshmem_team_config_t *")
    _lib.call("nvshmem_team_get_config", team_value(team, "team_get_config"), cfg)
    config.version, config.num_contexts, config.uniqueid = int(cfg.version), int(cfg.num_contexts), int(cfg.uniqueid)
    return config
