"""What ``python -m nvshmem_dsl`` (:mod:`nvshmem_dsl.__main__`) shows and does of the linker: how
NVSHMEM's out-of-line objects are built (``info``: :func:`explain`) and the cache directory
(``cache``: :func:`cache_dir`, its contents by kind, :func:`summary`, and its pruning,
:func:`prune`, by itself after :func:`auto_days`, ``$NVSHMEM_DSL_CACHE_DAYS``: :data:`DAYS_ENV`)."""

from __future__ import annotations

from . import helper_archive
from .cache import DAYS_ENV, auto_days, prune, summary
from .store_file import cache_dir

__all__ = ["DAYS_ENV", "auto_days", "cache_dir", "explain", "prune", "summary"]


def explain() -> list:
    """``[(what, how)]``: how the objects of collectives (their calling convention), of cold
    functions (their optimisation tiers) and of NVSHMEM's transport helpers (built or NVIDIA's
    compiled ones) are made here; ``how`` says ``unknown: <why>`` where that cannot be told."""
    from . import abi, outline  # here: init() reads cache_dir from this module and needs neither

    rows = []
    for what, tell in (("collective objects", abi.explain), ("cold objects", outline.explain_tiers),
                       ("transport helpers", helper_archive.explain)):
        try:
            rows.append((what, tell()))
        except Exception as exc:  # noqa: BLE001 - report, don't fail
            rows.append((what, f"unknown: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"))
    return rows
