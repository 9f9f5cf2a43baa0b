"""NVSHMEM4Py's ``nvshmem.core.nvshmem_types``: the types, enums and exceptions of :mod:`._types`
and ``NvshmemResource`` (:mod:`._resource`, imported on first use: it needs ``cuda.core``).

The other modules of ``nvshmem_dsl.core`` import :mod:`._types`, below :mod:`.memory`; only this
module and the package itself reach up to the resource, which allocates through :mod:`.memory`.
"""

from __future__ import annotations

from typing import Any

from . import _types
from ._types import *  # noqa: F403 - this module is NVSHMEM4Py's name for them

__all__ = [*_types.__all__, "NvshmemResource"]


def __getattr__(name: str) -> Any:
    if name == "NvshmemResource":  # needs cuda.core: built on first use
        from ._resource import NvshmemResource

        return NvshmemResource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
