"""Exceptions raised by the nvshmem_dsl host runtime."""

from __future__ import annotations

import operator
from typing import Any

__all__ = [
    "NvshmemError",
    "NvshmemNotFoundError",
    "NvshmemStatusError",
    "NvshmemInitError",
    "NvshmemStateError",
    "NvshmemArgumentError",
    "NvshmemTypeError",
    "NvshmemMemoryError",
    "NvshmemOutOfMemoryError",
    "NvshmemLeakWarning",
    "NvshmemUnsupportedError",
    "NvshmemMpgError",
    "int_argument",
]


class NvshmemError(Exception):
    """Base class of every error raised by nvshmem_dsl."""


class NvshmemNotFoundError(NvshmemError):
    """The NVSHMEM libraries (host library, bootstrap plugins, device bitcode) were not found."""


class NvshmemStatusError(NvshmemError):
    """An NVSHMEM host call returned a non-zero status.

    Attributes: ``function`` (the C function's name), ``status`` (the integer it
    returned) and ``message`` (an explanation, possibly empty).
    """

    def __init__(self, function: str, status: int, message: str = "") -> None:
        self.function = function
        self.status = status
        self.message = message
        text = f"{function} failed with status {status}"
        if message:
            text += f": {message}"
        super().__init__(text)

    def __reduce__(self):  # keep the three fields through pickling (multiprocessing)
        return (type(self), (self.function, self.status, self.message))


class NvshmemInitError(NvshmemError):
    """Initialisation failed: bootstrap, rendezvous with the other ranks, device choice."""


class NvshmemStateError(NvshmemError):
    """The runtime was used in the wrong state: before init, init twice, finalize twice."""


class NvshmemArgumentError(NvshmemError, ValueError):
    """An argument of a host call is invalid (checked before NVSHMEM is called)."""


class NvshmemTypeError(NvshmemArgumentError, TypeError):
    """An argument has the wrong type or dtype (not an array, unsupported dtype, mismatch)."""


class NvshmemMemoryError(NvshmemArgumentError):
    """Memory that must be symmetric is not: foreign, freed, or out of an allocation's bounds."""


class NvshmemOutOfMemoryError(NvshmemError, MemoryError):
    """The symmetric heap could not satisfy an allocation."""


class NvshmemLeakWarning(RuntimeWarning):
    """Symmetric allocations were still live when the runtime was finalized."""


class NvshmemUnsupportedError(NvshmemError, NotImplementedError):
    """The NVSHMEM library found cannot do this operation here (missing symbol, transport limitation)."""


class NvshmemMpgError(NvshmemUnsupportedError):
    """NVSHMEM rejects this operation in a *limited MPG* run: several PEs share one GPU and no MPS
    server joins them (NVSHMEM would print an error and end the process)."""


def int_argument(value: Any, fn: str, arg: str, least: int | None = None) -> int:
    """``value`` as an int for argument ``arg`` of ``fn()``: :class:`NvshmemTypeError` when it is
    not an integer (a bool neither), :class:`NvshmemArgumentError` when it is below ``least``."""
    if isinstance(value, bool):
        raise NvshmemTypeError(f"{fn}(): argument '{arg}' must be an int, not bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise NvshmemTypeError(f"{fn}(): argument '{arg}' must be an int, not {type(value).__name__}") from None
    if least is not None and n < least:
        raise NvshmemArgumentError(f"{fn}(): argument '{arg}' must be >= {least}, got {n}")
    return n
