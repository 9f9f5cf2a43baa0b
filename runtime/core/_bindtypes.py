"""The types of NVSHMEM4Py's raw bindings (``nvshmem.bindings``): its enums, the struct wrappers
(``uniqueid``, ``team_uniqueid``, ``TeamConfig``, ``InitAttr``) and the struct dtypes.

Shared by :mod:`nvshmem_dsl.core.bindings` and the high-level ``nvshmem_dsl.core`` (whose
``TeamConfig``, ``TeamUniqueId`` and ``ThreadSupport`` are these, as NVSHMEM4Py's are its
bindings'), and kept apart so that ``import nvshmem_dsl.core`` does not build the ~1500 raw
bindings.  Enum values are the spec's constants (``nvshmem_dsl._generated.constants``); each
NVSHMEM4Py enum also has the header's range markers (``*_SENTINEL``, ``MAX``, ``*_INDEX``),
listed in :data:`_LIMITS`.  Struct layouts are NVSHMEM's (sizes checked against the spec's).
"""

from __future__ import annotations

import enum
from typing import Any

from .._generated import constants as _c

__all__ = [
    "Signal_op", "Tma_policy", "Smem_amount", "Region_hint", "Cmp_type", "Thread_support", "Proxy_status",
    "Init_status", "Qp_handle_index", "Pe_index", "Team_id", "Status", "Flags",
    "uniqueid", "UniqueId", "team_uniqueid", "TeamUniqueId", "InitAttr", "TeamConfig",
    "uniqueid_dtype", "init_attr_dtype", "team_config_dtype",
]

_INT_MAX = 2**31 - 1
_MODULE = "nvshmem_dsl.core.bindings"

#: The header's range markers of each enum (not operands: sentinels, maxima, index aliases).
_LIMITS: dict[str, tuple[tuple[str, int], ...]] = {
    "Tma_policy": (("MAX", _INT_MAX),),  # NVSHMEMX_TMA_POLICY_MAX
    "Smem_amount": (("MAX", _INT_MAX),),  # NVSHMEMX_SMEM_AMOUNT_MAX
    "Cmp_type": (("CMP_SENTINEL", _INT_MAX),),
    "Thread_support": (("THREAD_TYPE_SENTINEL", _INT_MAX),),
    "Proxy_status": (("_PROXY_GLOBAL_EXIT_MAX_STATE", _INT_MAX),),
    "Init_status": (("STATUS_INVALID", _INT_MAX),),
    "Qp_handle_index": (("QP_ALL", _INT_MAX),),
    "Pe_index": (("PE_ALL", 1 << 15),),
    "Team_id": (("TEAMS_MIN", max(int(t) for t in _c.Team) + 1), ("TEAM_INDEX_MAX", _INT_MAX)),
    "Status": (("ERROR_SENTINEL", _INT_MAX),),
    "Flags": (("INIT_MAX", 1 << 31),),
}


def _enum(name: str, base: type[enum.IntEnum], prefix: str = "") -> type[enum.IntEnum]:
    members: list[tuple[str, int]] = []
    for m in base:
        members.append((prefix + m.name, int(m)))
        if name == "Team_id" and int(m) >= 0:  # NVSHMEM_TEAM_<X>_INDEX, the same value
            members.append((m.name + "_INDEX", int(m)))
    members += _LIMITS.get(name, ())
    made = enum.IntEnum(name, members, module=_MODULE)
    made.__doc__ = f"{base.__doc__} (NVSHMEM4Py's ``nvshmem.bindings.{name}``)"
    return made


Signal_op = _enum("Signal_op", _c.SignalOp)
Tma_policy = _enum("Tma_policy", _c.TmaPolicy)
Smem_amount = _enum("Smem_amount", _c.SmemAmount)
Region_hint = _enum("Region_hint", _c.RegionHint)
Cmp_type = _enum("Cmp_type", _c.Cmp)
Thread_support = _enum("Thread_support", _c.ThreadLevel)
Proxy_status = _enum("Proxy_status", _c.ProxyStatus, prefix="_")  # NVSHMEM4Py's names start with "_"
Init_status = _enum("Init_status", _c.InitStatus)
Qp_handle_index = _enum("Qp_handle_index", _c.QpHandleIndex)
Pe_index = _enum("Pe_index", _c.PeIndex)
Team_id = _enum("Team_id", _c.Team)
Status = _enum("Status", _c.Status)
Flags = _enum("Flags", _c.InitFlags)


# --------------------------------------------------------------------------- struct dtypes

_DTYPES: dict = {}


def _dtypes() -> dict:
    """The struct dtypes, made on first use (numpy is not imported by ``import nvshmem_dsl.core``)."""
    if not _DTYPES:
        import numpy as np

        made = {
            "uniqueid_dtype": np.dtype([("version", np.int32), ("internal", np.int8, (124,))], align=True),
            "init_attr_dtype": np.dtype([("version", np.int32), ("mpi_comm", np.intp),
                                         ("args", np.int8, (_c.STRUCT_SIZES["nvshmemx_init_args_t"],))], align=True),
            "team_config_dtype": np.dtype([("version", np.int32), ("num_contexts", np.int32),
                                           ("uniqueid", np.uint64), ("padding", np.int8, (48,))], align=True),
        }
        for name, struct in (("uniqueid_dtype", "nvshmemx_uniqueid_t"), ("init_attr_dtype", "nvshmemx_init_attr_t"),
                             ("team_config_dtype", "nvshmem_team_config_t")):
            assert made[name].itemsize == _c.STRUCT_SIZES[struct], (struct, made[name].itemsize)
        _DTYPES.update(made)
    return _DTYPES


def __getattr__(name: str) -> Any:
    if name in ("uniqueid_dtype", "init_attr_dtype", "team_config_dtype"):
        return _dtypes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _np():
    import numpy

    return numpy

_INVALID_TEAM_UID = 0xFFFFFFFFFFFFFFFF


class _Record:
    """A numpy record array over one (or more) C structs; ``ptr`` is its address."""

    _dtype_name: str  #: its key in _dtypes()

    @classmethod
    def _dt(cls):
        return _dtypes()[cls._dtype_name]

    def __init__(self, size: int = 1) -> None:
        self._data = _np().zeros(size, dtype=self._dt()).view(_np().recarray)

    @property
    def ptr(self) -> int:
        """The address of the data as a Python int."""
        return int(self._data.ctypes.data)

    def __len__(self) -> int:
        return self._data.size

    def __int__(self) -> int:
        if self._data.size > 1:
            raise TypeError("int() argument must be a bytes-like object of size 1. "
                            "To get the pointer address of an array, use .ptr")
        return self.ptr

    def _field(self, name: str) -> Any:
        value = getattr(self._data, name)
        return int(value[0]) if self._data.size == 1 else value

    def _set(self, name: str, value: Any) -> None:
        setattr(self._data, name, value)

    def __eq__(self, other: Any) -> bool:
        return (type(other) is type(self) and self._data.size == other._data.size
                and bool((self._data == other._data).all()))

    __hash__ = None  # mutable, as NVSHMEM4Py's


class uniqueid(_Record):
    """``nvshmemx_uniqueid_t`` (128 bytes): ``uniqueid(size=1)``, ``ptr``, ``version``."""

    _dtype_name = "uniqueid_dtype"

    @property
    def version(self) -> Any:
        return self._field("version")

    @version.setter
    def version(self, val: Any) -> None:
        self._set("version", val)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            size = self._data.size
            if key >= size or key <= -(size + 1):
                raise IndexError("index is out of bounds")
            key %= size
            return type(self).from_data(self._data[key:key + 1])
        out = self._data[key]
        if isinstance(out, _np().recarray) and out.dtype == self._dt():
            return type(self).from_data(out)
        return out

    def __setitem__(self, key: Any, val: Any) -> None:
        self._data[key] = val

    @classmethod
    def from_data(cls, data: Any) -> "uniqueid":
        """Wrap a 1-D numpy array of ``uniqueid_dtype``."""
        if not isinstance(data, _np().ndarray):
            raise TypeError("data argument must be a NumPy ndarray")
        if data.ndim != 1:
            raise ValueError("data array must be 1D")
        if data.dtype != cls._dt():
            raise ValueError("data array must be of dtype uniqueid_dtype")
        obj = cls.__new__(cls)
        obj._data = data.view(_np().recarray)
        return obj

    @classmethod
    def from_ptr(cls, ptr: int, size: int = 1, readonly: bool = False) -> "uniqueid":
        """Wrap ``size`` structs at address ``ptr``."""
        if ptr == 0:
            raise ValueError("ptr must not be null (0)")
        import ctypes

        buf = (ctypes.c_char * (cls._dt().itemsize * size)).from_address(int(ptr))
        data = _np().frombuffer(buf, dtype=cls._dt(), count=size)
        if readonly:
            data.flags.writeable = False
        return cls.from_data(data)

    def __repr__(self) -> str:
        suffix = f"_Array_{self._data.size}" if self._data.size > 1 else ""
        return f"<{_MODULE}.uniqueid{suffix} object at {hex(id(self))}>"


class UniqueId(uniqueid):
    pass


class team_uniqueid:
    """``nvshmemx_team_uniqueid_t`` (a uint64): ``value`` (read/write), ``ptr`` (its address).

    Also usable as the int it holds (``int(uid)``, ``uid == 5``, ``TeamConfig(uniqueid=uid)``).
    """

    def __init__(self, value: int = 0) -> None:
        self._data = _np().zeros(1, dtype=_np().uint64).view(_np().recarray)
        self._data[0] = int(value)

    @property
    def ptr(self) -> int:
        return int(self._data.ctypes.data)

    @property
    def value(self) -> int:
        return int(self._data[0])

    @value.setter
    def value(self, val: int) -> None:
        self._data[0] = int(val)

    def __int__(self) -> int:
        return self.value

    __index__ = __int__

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, team_uniqueid):
            return self.value == other.value
        if isinstance(other, int):
            return self.value == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return f"team_uniqueid({self.value})"

    def __repr__(self) -> str:
        return f"team_uniqueid(value={self.value})"


class TeamUniqueId(team_uniqueid):
    pass


class InitAttr(_Record):
    """``nvshmemx_init_attr_t`` (144 bytes): ``ptr``, ``version``, ``mpi_comm``; the args opaque."""

    _dtype_name = "init_attr_dtype"

    def __init__(self) -> None:
        super().__init__(1)

    version = property(lambda self: self._field("version"), lambda self, v: self._set("version", v))
    mpi_comm = property(lambda self: self._field("mpi_comm"), lambda self, v: self._set("mpi_comm", v))


class TeamConfig(_Record):
    """``nvshmem_team_config_t`` (64 bytes): ``version``, ``num_contexts``, ``uniqueid``; ``ptr``.

    Starts as ``NVSHMEM_TEAM_CONFIG_INITIALIZER`` sets it (NVSHMEM4Py's starts uninitialised);
    the keyword arguments (as NVSHMEM4Py's tutorial passes them) set the fields too.  Which
    fields NVSHMEM reads is said by the ``config_mask`` passed alongside
    (``NVSHMEM_TEAM_CONFIG_MASK_NUM_CONTEXTS`` = 1, ``..._UNIQUEID`` = 2).  The memory at
    ``ptr`` is this object's: what NVSHMEM writes there (``team_get_config``) reads back here.
    """

    _dtype_name = "team_config_dtype"

    def __init__(self, version: int | None = None, num_contexts: int | None = None,
                 uniqueid: Any = None) -> None:
        super().__init__(1)
        self.version = _c.STRUCT_VERSIONS["nvshmem_team_config_t"] if version is None else int(version)
        self.num_contexts = -1 if num_contexts is None else int(num_contexts)
        self.uniqueid = _INVALID_TEAM_UID if uniqueid is None else int(uniqueid)

    version = property(lambda self: self._field("version"), lambda self, v: self._set("version", int(v)))
    num_contexts = property(lambda self: self._field("num_contexts"),
                            lambda self, v: self._set("num_contexts", int(v)))
    uniqueid = property(lambda self: self._field("uniqueid"),
                        lambda self, v: self._set("uniqueid", int(v) & _INVALID_TEAM_UID))

    def struct(self):
        """A cffi ``nvshmem_team_config_t *`` holding a copy of the fields (for the host library)."""
        from ..host import _lib

        cfg = _lib.new("nvshmem_team_config_t *")
        cfg.version = self.version
        cfg.num_contexts = self.num_contexts
        cfg.uniqueid = self.uniqueid
        return cfg

    def __repr__(self) -> str:
        return f"TeamConfig(version={self.version}, num_contexts={self.num_contexts}, uniqueid={self.uniqueid})"


for _cls in (uniqueid, UniqueId, team_uniqueid, TeamUniqueId, InitAttr, TeamConfig):
    _cls.__module__ = _MODULE
del _cls
