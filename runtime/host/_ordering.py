"""Ordering and synchronisation from the host: quiet, flush, fence, barriers, syncs (blocking or on
a stream; re-exported by :mod:`nvshmem_dsl.host.operations`).
"""

from __future__ import annotations

from typing import Any

from . import _lib, _state
from .._generated.constants import Team
from ._op_args import _api_for, _entry, _stream, _team

__all__ = ["quiet", "flush", "fence", "barrier", "barrier_all", "sync", "sync_all"]


# --------------------------------------------------------------------------- ordering and sync


#: (api, stream given) -> the C symbol and whether it takes the team, the stream: read once
_CALLS: dict[tuple[str, bool], tuple[str, bool, bool]] = {}


def _call_of(base: str, on_stream: bool) -> tuple[str, bool, bool]:
    api, _ = _api_for(base, 0 if on_stream else None)
    entry = _entry(api)
    roles = [p["role"] for p in entry["params"]]
    with_team, with_stream = "team" in roles, "stream" in roles
    if roles != ["team"] * with_team + ["stream"] * with_stream:
        raise RuntimeError(f"internal: {entry['symbol']} takes ({', '.join(roles)}), not (team, stream)")
    call = _CALLS[base, on_stream] = (entry["symbol"], with_team, with_stream)
    return call


def _plain(base: str, stream: Any, what: str, team: Any = None) -> None:
    """Call ``base`` (its host form, or ``base_on_stream`` on ``stream``): these are called in loops,
    so the C symbol and its arguments' order are looked up once (``_CALLS``)."""
    if not _state.STATE.initialized:
        _state.require(f"{what}()")
    on_stream = stream is not None
    symbol, with_team, with_stream = _CALLS.get((base, on_stream)) or _call_of(base, on_stream)
    if with_stream:
        handle = _stream(stream)
        if with_team:
            _lib.call(symbol, _team(team, what), handle)
        else:
            _lib.call(symbol, handle)
    elif with_team:
        _lib.call(symbol, _team(team, what))
    else:
        _lib.call(symbol)


def quiet(stream: Any = None) -> None:
    """Complete all outstanding puts/gets of this PE (``nvshmem_quiet`` / ``nvshmemx_quiet_on_stream``)."""
    _plain("quiet", stream, "quiet")


def flush(stream: Any = None) -> None:
    """``nvshmemx_flush`` / ``nvshmemx_flush_on_stream``.

    NVSHMEM releases without them (3.4) get :func:`quiet`, which guarantees more.
    """
    _state.require("flush()")
    api, _ = _api_for("flush", stream)
    if not _lib.has_symbol(_entry(api)["symbol"]):
        quiet(stream)
        return
    _plain("flush", stream, "flush")


def fence() -> None:
    """Order this PE's puts to each PE (``nvshmem_fence``)."""
    _plain("fence", None, "fence")


def barrier(team: Any = Team.TEAM_WORLD, *, stream: Any = None) -> None:
    """Barrier over ``team`` with completion of this PE's operations (``nvshmem_barrier``)."""
    _plain("barrier", stream, "barrier", team)


def barrier_all(stream: Any = None) -> None:
    """``nvshmem_barrier_all`` / ``nvshmemx_barrier_all_on_stream``."""
    _plain("barrier_all", stream, "barrier_all")


def sync(team: Any = Team.TEAM_WORLD, *, stream: Any = None) -> None:
    """Synchronize ``team`` without completing operations (``nvshmem_team_sync``)."""
    _plain("team_sync", stream, "sync", team)


def sync_all(stream: Any = None) -> None:
    """``nvshmem_sync_all`` / ``nvshmemx_sync_all_on_stream``."""
    _plain("sync_all", stream, "sync_all")
