"""NVSHMEM4Py's types, enums and exceptions, over nvshmem_dsl (what ``nvshmem.core.nvshmem_types``
holds but ``NvshmemResource``, which allocates through :mod:`.memory` and so lives above it:
:mod:`.nvshmem_types` gives both).

The team, signal and comparison enums are nvshmem_dsl's own (generated from the same spec
the device APIs come from); ``Teams`` is NVSHMEM4Py's *mutable* enum, so that teams made by
``team_split_*`` / ``team_init`` are added to it by name, as NVSHMEM4Py does.
"""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import Any

from .. import errors as _errors
from .._generated.constants import Team as _Team

__all__ = [
    "Version", "NvshmemInvalid", "NvshmemError", "NvshmemWarning", "NvshmemStream",
    "NvshmemStreamsType", "MutableEnum", "Teams", "BufferTypes", "NvshmemKernelObject",
]


# --------------------------------------------------------------------------- exceptions


class NvshmemInvalid(_errors.NvshmemError):
    """An invalid argument or state (NVSHMEM4Py's ``NvshmemInvalid``).

    Also an :class:`nvshmem_dsl.NvshmemError`; ``msg`` holds the message, as in NVSHMEM4Py.
    """

    def __init__(self, msg: Any = "") -> None:
        super().__init__(msg)
        self.msg = msg

    def __repr__(self) -> str:
        return f"<NvshmemInvalid: {self.msg}>"


class NvshmemError(_errors.NvshmemError):
    """An NVSHMEM operation failed (NVSHMEM4Py's ``NvshmemError``); ``msg`` holds the message."""

    def __init__(self, msg: Any = "") -> None:
        super().__init__(msg)
        self.msg = msg

    def __repr__(self) -> str:
        return f"<NvshmemError: {self.msg}>"


class NvshmemWarning(UserWarning):
    """NVSHMEM4Py's warning category."""


# What a native nvshmem_dsl error becomes here: NVSHMEM4Py's class, and the builtin category the
# native one had (so that `except ValueError` / `except TypeError` keep working).
class _InvalidValue(NvshmemInvalid, ValueError):
    pass


class _InvalidType(NvshmemInvalid, TypeError):
    pass


class _Unsupported(NvshmemError, NotImplementedError):
    pass


class _OutOfMemory(NvshmemError, MemoryError):
    pass


for _cls, _name in ((_InvalidValue, "NvshmemInvalid"), (_InvalidType, "NvshmemInvalid"),
                    (_Unsupported, "NvshmemError"), (_OutOfMemory, "NvshmemError")):
    _cls.__name__ = _cls.__qualname__ = _name
del _cls, _name


def translate(exc: _errors.NvshmemError) -> _errors.NvshmemError:
    """The NVSHMEM4Py exception for a native nvshmem_dsl one (same message)."""
    if isinstance(exc, (NvshmemInvalid, NvshmemError)):
        return exc
    msg = str(exc)
    if isinstance(exc, _errors.NvshmemTypeError):
        return _InvalidType(msg)
    if isinstance(exc, _errors.NvshmemArgumentError):
        return _InvalidValue(msg)
    if isinstance(exc, _errors.NvshmemStateError):
        return NvshmemInvalid(msg)
    if isinstance(exc, _errors.NvshmemUnsupportedError):
        return _Unsupported(msg)
    if isinstance(exc, _errors.NvshmemOutOfMemoryError):
        return _OutOfMemory(msg)
    return NvshmemError(msg)


# --------------------------------------------------------------------------- enums


class MutableEnum:
    """NVSHMEM4Py's enum whose members can be added and removed (``Teams``)."""

    def __init__(self, **kwargs: Any) -> None:
        self._members = dict(kwargs)

    @classmethod
    def from_enum(cls, enum_cls: type[Enum]) -> "MutableEnum":
        return cls(**{member.name: member.value for member in enum_cls})

    def add(self, key: str, value: Any) -> None:
        if key in self._members:
            raise ValueError(f"Member '{key}' already exists.")
        self._members[key] = value

    def remove(self, key: str) -> None:
        if key not in self._members:
            raise ValueError(f"Member '{key}' does not exist.")
        del self._members[key]

    def remove_by_value(self, value: Any) -> None:
        for key, val in self._members.items():
            if val == value:
                del self._members[key]
                return

    def __getattr__(self, item: str) -> Any:
        members = self.__dict__.get("_members", {})
        if item in members:
            return members[item]
        raise AttributeError(f"No such member: {item}")

    def __getitem__(self, item: str) -> Any:
        if item in self._members:
            return self._members[item]
        raise KeyError(f"No such member: {item}")

    def __contains__(self, item: Any) -> bool:
        return item in self._members

    def __repr__(self) -> str:
        return "<MutableEnum " + ", ".join(f"{k}={v}" for k, v in self._members.items()) + ">"

    def keys(self):
        return self._members.keys()

    def values(self):
        return self._members.values()

    def items(self):
        return self._members.items()

    def __iter__(self):
        return iter(self._members)


#: The predefined teams (``nvshmem_team_id_t``); teams made later are added by name.
#: Values are plain ints, as in NVSHMEM4Py.
Teams = MutableEnum(**{m.name: int(m.value) for m in _Team})
for _name, _value in (("TEAMS_MIN", 6), ("TEAM_INDEX_MAX", 32767)):  # NVSHMEM4Py's two markers
    if _name not in Teams:
        Teams.add(_name, _value)
del _name, _value
_PREDEFINED_TEAMS = frozenset(Teams.keys())


class BufferTypes(IntEnum):
    """The kinds of buffer NVSHMEM4Py tracks."""

    NORMAL = 0  #: allocated on the symmetric heap
    PEER = 1  #: a peer's copy (nvshmem_ptr)
    MULTIMEM = 2  #: a multicast address (nvshmemx_mc_ptr)
    EXTERNAL = 3  #: registered external memory (nvshmemx_buffer_register_symmetric)


# --------------------------------------------------------------------------- versions, streams


class Version:
    """What :func:`nvshmem_dsl.core.get_version` returns."""

    def __init__(self, openshmem_spec_version: str = "", nvshmem4py_version: str = "",
                 libnvshmem_version: str = "") -> None:
        self.openshmem_spec_version = openshmem_spec_version
        self.nvshmem4py_version = nvshmem4py_version
        self.libnvshmem_version = libnvshmem_version

    def __repr__(self) -> str:
        return (f"\nNVSHMEM4Py Library:\n    NVSHMEM Library version: {self.libnvshmem_version}\n"
                f"    OpenShmem Spec version: {self.openshmem_spec_version}\n"
                f"    NVSHMEM4Py version: {self.nvshmem4py_version}\n")


class NvshmemStream:
    """Wraps a torch stream for the ``__cuda_stream__`` protocol (as NVSHMEM4Py's does)."""

    def __init__(self, pt_stream: Any) -> None:
        self.pt_stream = pt_stream
        self.handle = pt_stream.cuda_stream

    def __cuda_stream__(self):
        return (0, self.pt_stream.cuda_stream)


#: Anything the stream arguments take: a cuda.core Stream, a torch stream, an :class:`NvshmemStream`
#: (and, here, cupy/numba streams and int handles too).
NvshmemStreamsType = Any


class NvshmemKernelObject:
    """A loaded CUDA module or library handle, for :func:`library_init` / :func:`module_init`."""

    def __new__(cls, *args: Any, **kwargs: Any):
        raise RuntimeError(
            "NvshmemKernelObject objects cannot be instantiated directly. "
            "Please use NvshmemKernelObject APIs (from_handle, from_obj, ...)"
        )

    @classmethod
    def _init(cls, handle: int) -> "NvshmemKernelObject":
        self = object.__new__(cls)
        self.handle = int(handle)
        self.finalize_handle = self.handle
        return self

    @staticmethod
    def from_handle(handle: int = None) -> "NvshmemKernelObject":
        return NvshmemKernelObject._init(int(handle))

    @staticmethod
    def from_obj(obj: Any) -> "NvshmemKernelObject":
        """From a ``cuda.core.ObjectCode`` (its loaded library handle)."""
        from cuda.bindings.utils import get_cuda_native_handle

        return NvshmemKernelObject._init(get_cuda_native_handle(obj.handle))

    @staticmethod
    def from_obj_bytes(obj_bytes: bytes) -> "NvshmemKernelObject":
        from cuda.core import ObjectCode

        return NvshmemKernelObject.from_obj(ObjectCode.from_cubin(obj_bytes))

    @staticmethod
    def from_triton(triton_kernel: Any) -> "NvshmemKernelObject":
        return NvshmemKernelObject._init(int(triton_kernel.handle))

    @staticmethod
    def from_cuda_bindings(cuda_kernel: Any) -> "NvshmemKernelObject":
        from cuda.bindings.utils import get_cuda_native_handle

        return NvshmemKernelObject._init(get_cuda_native_handle(cuda_kernel))

    def __repr__(self) -> str:
        return f"<NvshmemKernelObject 0x{self.handle:x}>"

