"""Initialising and finalizing as NVSHMEM4Py does it (``nvshmem.core.init_fini``).

``init(device=, mpi_comm=, initializer_method="mpi" | "uid" | "emulated_mpi", uid=, rank=,
nranks=)`` is :func:`nvshmem_dsl.init`: with ``"mpi"`` / ``"emulated_mpi"`` rank 0's unique id
travels over the mpi4py communicator (the portable way; NVSHMEM's own MPI bootstrap plugin is
not needed), with ``"uid"`` the caller passes the id from :func:`get_unique_id`.
"""

from __future__ import annotations

import enum
import logging
import os
import sys
from pathlib import Path
from typing import Any

from ..host import _cuda, _launch_env, _lib, _state
from ..host import _init as _native
from ..linker import module_init as _modules
from . import _tracking
from ._tracking import translated
from ._types import _PREDEFINED_TEAMS, NvshmemInvalid, NvshmemKernelObject, Teams, Version

__all__ = ["get_unique_id", "init", "finalize", "get_name", "get_version", "module_init", "module_finalize",
           "library_init", "library_finalize", "UniqueID", "DeviceLibLanguage", "find_device_bitcode_library"]

logger = logging.getLogger("nvshmem")

#: The device given to init() (NVSHMEM4Py's ``_cached_device``).
_cached_device: dict[str, Any] = {"device": None}
#: init() calls not matched by a finalize() yet: NVSHMEM4Py (as NVSHMEM's own init) lets a program
#: call init again while initialised and finalize as often; the last finalize ends NVSHMEM
_depth = {"init": 0}

_METHODS = ("mpi", "uid", "emulated_mpi")


class UniqueID:
    """An NVSHMEM unique id (``nvshmemx_uniqueid_t``, 128 bytes) for ``init(initializer_method="uid")``.

    Picklable (for ``torch.distributed.broadcast_object_list`` and friends); ``bytes(uid)`` is
    its content, ``_data`` a numpy byte array over it (for ``comm.Bcast``), ``ptr`` its address.
    """

    SIZE = 128

    def __init__(self, data: bytes | None = None) -> None:
        import numpy

        raw = bytes(self.SIZE) if data is None else bytes(data)
        if len(raw) != self.SIZE:
            raise NvshmemInvalid(f"UniqueID: expected {self.SIZE} bytes, got {len(raw)}")
        self._data = numpy.frombuffer(bytearray(raw), dtype=numpy.uint8)

    @property
    def ptr(self) -> int:
        return int(self._data.ctypes.data)

    def __bytes__(self) -> bytes:
        return self._data.tobytes()

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UniqueID) and bytes(self) == bytes(other)

    def __hash__(self) -> int:
        return hash(bytes(self))

    def __reduce__(self):
        return (UniqueID, (bytes(self),))

    def __repr__(self) -> str:
        return f"<UniqueID {bytes(self)[:8].hex()}...>"


@translated
def get_unique_id(empty: bool = False) -> UniqueID:
    """A new unique id (``nvshmemx_get_uniqueid``; rank 0 makes it), or an empty one (``empty=True``,
    for the ranks that receive it)."""
    if empty:
        return UniqueID()
    return UniqueID(_native.get_uniqueid())


def _device_id(device: Any) -> int | None:
    if device is None:
        return None
    if isinstance(device, bool):
        raise NvshmemInvalid("init(): argument 'device' must be a cuda.core Device or an int")
    value = getattr(device, "device_id", device)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise NvshmemInvalid(f"init(): argument 'device' must be a cuda.core Device or an int, "
                             f"not {type(device).__name__}") from None


def _mpi_comm(comm: Any) -> Any:
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as exc:
        raise NvshmemInvalid(f"init(): initializer_method='mpi' needs mpi4py ({exc})") from None
    if comm is None:
        return MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise NvshmemInvalid(f"Invalid MPI communicator passed in: argument 'mpi_comm' is a {type(comm).__name__}, "
                             "not an mpi4py Comm")
    return comm


def _launched_by_nvshmem_dsl() -> bool:
    """A rank of ``python -m nvshmem_dsl.run -n N`` with N > 1."""
    env = os.environ
    return env.get(_launch_env.ENV_MODE, "") == "launcher" and env.get(_launch_env.ENV_NRANKS, "1") not in ("", "0", "1")


@translated
def init(device: Any = None, uid: UniqueID | None = None, rank: int | None = None, nranks: int | None = None,
         mpi_comm: Any = None, initializer_method: str = "", *, dev: Any = None, stream: Any = None) -> None:
    """Initialise NVSHMEM (collective), as NVSHMEM4Py's ``init``.

    * ``device``: the ``cuda.core.Device`` (or device id) this PE uses; default ``local_rank %
      device count``.  ``dev=`` is accepted too: NVSHMEM4Py's device-API pages call
      ``init(dev=dev, ..., stream=stream)``, which its package rejects.  ``stream`` is accepted and
      not used (initialisation queues no work on it).
    * ``initializer_method="mpi"`` (or ``"emulated_mpi"``): ``mpi_comm`` (default
      ``MPI.COMM_WORLD``) carries rank 0's unique id.  A one-rank ``COMM_WORLD`` in a job started by
      ``python -m nvshmem_dsl.run -n N`` (where every process is an MPI singleton) takes the
      launcher's N ranks instead.
    * ``initializer_method="uid"``: ``uid`` (:func:`get_unique_id` on rank 0, shared by the
      program), ``rank`` and ``nranks``; no ``mpi_comm``.
    * Called again while initialised (on the same device), it only counts, as NVSHMEM4Py's does:
      each init needs its finalize, and the last finalize ends NVSHMEM.
    """
    if dev is not None:
        if device is not None and device is not dev:
            raise NvshmemInvalid("init(): pass the device as device= or as dev=, not both")
        device = dev
    if initializer_method not in _METHODS:
        raise NvshmemInvalid(f"Invalid init method requested: initializer_method={initializer_method!r}; "
                             f"expected one of {', '.join(map(repr, _METHODS))}")
    device_id = _device_id(device)
    if _depth["init"] and _state.STATE.initialized:
        if device_id is not None and device_id != _state.STATE.device_id:
            raise NvshmemInvalid(f"init(): already initialised on device {_state.STATE.device_id}; a second init() "
                                 f"asked for device {device_id} (finalize first)")
        _depth["init"] += 1  # NVSHMEM4Py's nested init: the first one's world goes on
        return
    if initializer_method == "uid":
        if uid is None or rank is None or nranks is None or mpi_comm is not None:
            raise NvshmemInvalid(f"Invalid parameters for UID based init: uid={uid!r} rank={rank!r} nranks={nranks!r} "
                                 "(all three are required, and mpi_comm must be None)")
        _native.init(uid=bytes(uid), rank=int(rank), nranks=int(nranks), device=device_id)
    else:
        comm = _mpi_comm(mpi_comm)
        if comm.Get_size() == 1 and _launched_by_nvshmem_dsl():
            _native.init(device=device_id)
        else:
            _native.init(mpi_comm=comm, device=device_id)
    _cached_device["device"] = device
    _depth["init"] = 1


def _sync_before_finalize(stream: Any) -> None:
    if _state.STATE.fake:
        return
    if stream is not None:
        _cuda.stream_synchronize(_cuda.stream_handle(stream))
    _cuda.synchronize()  # kernels still running on any stream must not outlive NVSHMEM


@translated
def finalize(*, dev: Any = None, stream: Any = None) -> None:
    """Finalize NVSHMEM (collective).

    Waits for the device first (``stream``, then everything: NVSHMEM must not go while kernels
    that use it run).  ``dev`` / ``stream`` are accepted because NVSHMEM4Py's device-API pages pass
    them.  Allocations never freed are reported by :func:`nvshmem_dsl.finalize` (an
    ``NvshmemLeakWarning``); NVSHMEM's finalize releases them.
    """
    from . import memory

    _state.require("finalize()")
    _sync_before_finalize(stream)
    if _depth["init"] > 1:  # a nested init's finalize: NVSHMEM stays
        _depth["init"] -= 1
        return
    _depth["init"] = 0
    memory._free_pending()
    # CuTe kernel objects exist only where the program imported the CuTe interop: never import it
    # (and the CuTe DSL with it, seconds of work) here
    cute_interop = sys.modules.get(f"{__package__}.interop.cute")
    if cute_interop is not None:
        cute_interop.cleanup_cute()
    try:
        _native.finalize()
    finally:
        _tracking.clear()
        for name in list(Teams.keys()):
            if name not in _PREDEFINED_TEAMS:
                Teams.remove(name)
        _cached_device["device"] = None


#: NVSHMEM_MAX_NAME_LEN: the size of the buffer nvshmem_info_get_name writes
_MAX_NAME_LEN = 256


@translated
def get_name() -> str:
    """The NVSHMEM vendor name (``nvshmem_info_get_name``); callable before :func:`init`."""
    name = _lib.new(f"char[{_MAX_NAME_LEN}]")
    _lib.call("nvshmem_info_get_name", name)
    return _lib._cdef_only().string(name).decode("utf-8")


@translated
def get_version() -> Version:
    """Versions: the OpenSHMEM spec, this package (``nvshmem4py_version``), and the NVSHMEM library."""
    v = _native.versions()
    return Version(openshmem_spec_version=v.get("openshmem") or "", nvshmem4py_version=f"nvshmem_dsl {v['nvshmem_dsl']}",
                   libnvshmem_version=v.get("nvshmem") or "")


def _handle_of(obj: Any, function: str) -> int:
    handle = getattr(obj, "handle", obj)
    if handle is None:
        raise NvshmemInvalid(f"{function}(): invalid module/library object (no handle)")
    return handle


@translated
def module_init(mod: NvshmemKernelObject) -> None:
    """``nvshmemx_cumodule_init`` (reference-counted per handle)."""
    _modules.module_init(_handle_of(mod, "module_init"))


@translated
def module_finalize(mod: NvshmemKernelObject) -> None:
    """``nvshmemx_cumodule_finalize`` when the last :func:`module_init` of the handle is undone."""
    _modules.module_finalize(_handle_of(mod, "module_finalize"))


@translated
def library_init(lib: NvshmemKernelObject) -> None:
    """``nvshmemx_culibrary_init`` (reference-counted per handle)."""
    _modules.library_init(_handle_of(lib, "library_init"))


@translated
def library_finalize(lib: NvshmemKernelObject) -> None:
    """``nvshmemx_culibrary_finalize`` when the last :func:`library_init` of the handle is undone.

    nvshmem_dsl initialises the libraries of the kernels it compiles by itself (and undoes it at
    finalize); a handle it never initialised is tolerated here.
    """
    handle = _handle_of(lib, "library_finalize")
    if _modules.refcount(handle) > 0:
        _modules.library_finalize(handle)


class DeviceLibLanguage(enum.Enum):
    """The format of an NVSHMEM device library (:func:`find_device_bitcode_library`'s ``language``):
    LLVM bitcode (``.bc``, what nvshmem_dsl links), LTO-IR (``libnvshmem_device.ltoir.fatbin``) or
    the static archive (``libnvshmem_device.a``)."""

    LLVM_BITCODE = "bc"
    LTOIR = "ltoir"
    STATIC = "a"


def find_device_bitcode_library(arch: Any = None, *, language: DeviceLibLanguage = DeviceLibLanguage.LLVM_BITCODE) -> str:
    """The path of an NVSHMEM device library: the bitcode for ``arch`` (``90``, ``"sm_90"``,
    ...; default: the current device's, else the installation's default) or, with ``language``,
    the LTO-IR fatbin or the static archive (the installation's entry points, whatever ``arch``).
    An explicit ``arch`` names its own file, as NVSHMEM4Py's lookup; without one, the current
    device's arch takes the file nvshmem_dsl's linker takes for it (its own, else the nearest older
    one), where NVSHMEM4Py falls back to ``libnvshmem_device.bc``.  Raises :class:`NvshmemInvalid`
    when the file is not installed."""
    from .. import _libs

    language = DeviceLibLanguage(language)
    if language is not DeviceLibLanguage.LLVM_BITCODE:
        filename = "libnvshmem_device.ltoir.fatbin" if language is DeviceLibLanguage.LTOIR else "libnvshmem_device.a"
        path = Path(_libs.installation().lib_dir) / filename
        if not path.exists():
            raise NvshmemInvalid(f"NVSHMEM device library not found at {path}")
        return str(path)
    if arch is None:
        try:
            dev = _state.STATE.device_id if _state.STATE.initialized else _cuda.current_device_id()
        except RuntimeError:  # no CUDA driver here (cuda.pathfinder's DynamicLibNotFoundError): no current device
            dev = None
        if dev is not None and dev >= 0:
            arch = _cuda.compute_capability(dev)
        if arch is None:
            files = _libs.installation().bitcode_files
            if not files:
                raise NvshmemInvalid("find_device_bitcode_library(): no NVSHMEM device bitcode found")
            return str(files[-1])
        return str(_libs.bitcode_path(arch))
    return _bitcode_of_arch(arch)


#: The SM numbers a single-layout installation's one bitcode file is taken to serve (NVSHMEM builds
#: for sm_70 and newer); an arch outside them is refused, as a missing per-arch file is.
_SINGLE_LAYOUT_ARCHS = range(70, 200)


def _bitcode_of_arch(arch: Any) -> str:
    """NVSHMEM4Py's lookup for an explicit ``arch``: the installed ``libnvshmem_device_sm_<arch>.bc``
    itself (not the nearest older one, as nvshmem_dsl's linker takes), else NvshmemInvalid.  A
    single-layout installation's one file serves any arch NVSHMEM builds for."""
    from .. import _libs

    try:
        wanted = _libs.parse_arch(arch)
    except ValueError as exc:
        raise NvshmemInvalid(f"find_device_bitcode_library(): {exc}") from None
    inst = _libs.installation()
    if inst.layout == "per-arch":
        path = inst.bitcode_archs.get(wanted)
        if path is None:
            raise NvshmemInvalid(
                f"NVSHMEM device library not found: no libnvshmem_device_sm_{wanted}.bc in {inst.lib_dir} (it ships "
                f"{', '.join(f'sm_{a}' for a in inst.bitcode_archs)})")
        return str(path)
    if inst.layout == "single" and wanted in _SINGLE_LAYOUT_ARCHS:
        return str(inst.bitcode_files[0])
    raise NvshmemInvalid(f"NVSHMEM device library not found for sm_{wanted} in {inst.lib_dir}")
