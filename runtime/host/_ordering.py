"""Ordering and synchronisation from the host: quiet, flush, fence, barriers, syncs (blocking or on
a stream; re-exported by :mod:`nvshmem_dsl.host.operations`).
"""

from __future__ import annotations

from typing import Any

from . import _lib, _state
from .._generated.constants import Team
from ._op_args import _api_for, _entry, _invoke, _team

__all__ = ["quiet", "flush", "fence", "barrier", "barrier_all", "sync", "sync_all"]


# --------------------------------------------------------------------------- ordering and sync


def _plain(base: str, stream: Any, what: str, team: Any = None, with_team: bool = False) -> None:
    _state.require(f"{what}()")
    api, handle = _api_for(base, stream)
    values: dict[str, Any] = {"stream": handle}
    if with_team:
        values["team"] = _team(team, what)
    _invoke(_entry(api), values)


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
    _plain("barrier", stream, "barrier", team, with_team=True)


def barrier_all(stream: Any = None) -> None:
    """``nvshmem_barrier_all`` / ``nvshmemx_barrier_all_on_stream``."""
    _plain("barrier_all", stream, "barrier_all")


def sync(team: Any = Team.TEAM_WORLD, *, stream: Any = None) -> None:
    """Synchronize ``team`` without completing operations (``nvshmem_team_sync``)."""
    _plain("team_sync", stream, "sync", team, with_team=True)


def sync_all(stream: Any = None) -> None:
    """``nvshmem_sync_all`` / ``nvshmemx_sync_all_on_stream``."""
    _plain("sync_all", stream, "sync_all")
