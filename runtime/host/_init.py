"""Initialising and finalizing NVSHMEM, and what a PE can ask about itself.

``init()`` finds this process's rank (explicit arguments, MPI, torchrun, our
launcher ``python -m nvshmem_dsl.run``, or a single PE: see
:mod:`nvshmem_dsl.host._bootstrap`), makes the CUDA device ``local_rank % device
count`` current (or ``device=``), has rank 0 create the NVSHMEM unique id and
hands it to the others, then calls ``nvshmemx_hostlib_init_attr`` with
``NVSHMEMX_INIT_WITH_UNIQUEID``.  ``finalize()`` undoes it.  Use it as a context
manager::

    with nvshmem_dsl.init() as pe:
        x = nvshmem_dsl.zeros(1024)
        ...

If the program forgets ``finalize()``, an atexit hook finalizes (with a
warning), and reports symmetric allocations that were never freed. A PE of a
multi-PE job that ends with an uncaught exception or ``sys.exit(n)``, n != 0,
skips the collective finalize (the other PEs may never reach it) and leaves at
once with the status Python would give (:mod:`nvshmem_dsl.host._exit`). For the same reason, leaving the
``with`` block by an exception finalizes only a single-PE job. A collective
finalize waits at most ``NVSHMEM_DSL_FINALIZE_TIMEOUT`` seconds for the other PEs.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import warnings
from typing import Any

from . import _bootstrap, _cuda, _exit, _lib, _state, _table
from ._state import my_pe, n_pes  # noqa: F401 - re-exported: a module global read each
from ._teamref import place as _place
from .. import _libs
from .._generated.constants import (
    SPEC_SHA256, STRUCT_SIZES, STRUCT_VERSIONS, InitFlags, InitStatus, ThreadLevel,
)
from ..errors import (
    NvshmemError, NvshmemInitError, NvshmemLeakWarning, NvshmemNotFoundError, NvshmemStateError,
)

__all__ = [
    "Session",
    "init",
    "session",
    "finalize",
    "is_initialized",
    "my_pe",
    "n_pes",
    "team_my_pe",
    "team_n_pes",
    "get_uniqueid",
    "init_status",
    "query_thread",
    "global_exit",
    "versions",
    "info",
    "ENV_ATEXIT",
]

ENV_ATEXIT = "NVSHMEM_DSL_ATEXIT_FINALIZE"
_UID_IFNAME = "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"

_atexit_registered = False
_prev_excepthook = None


# --------------------------------------------------------------------------- the unique id


def get_uniqueid() -> bytes:
    """A fresh NVSHMEM unique id (``nvshmemx_get_uniqueid``; needs no GPU), as bytes.

    Rank 0 makes one and every rank passes it to :func:`init` (``uid=``).
    """
    uid = _lib.new("nvshmemx_uniqueid_t *")
    uid.version = STRUCT_VERSIONS["nvshmemx_uniqueid_t"]
    _lib.call("nvshmemx_get_uniqueid", uid)
    return bytes(_lib.ffi().buffer(uid))


# --------------------------------------------------------------------------- init attributes


def _attr_layout() -> int:
    """2 when the NVSHMEM found has the v2 init attributes (cuda_device_id), else 1.

    Read from the installation's header when there is one; NVSHMEM 3.4 has v1
    only, 3.8 both.  Without headers: v1, which both accept.
    """
    try:
        inst = _libs.installation()
        if inst.include_dir is not None:
            header = inst.include_dir / "device_host" / "nvshmem_types.h"
            text = header.read_text(errors="replace")
            return 2 if "nvshmemx_init_args_v2" in text else 1
    except (OSError, NvshmemNotFoundError):
        pass
    return 1


def _new_init_attr(layout: int, device_id: int):
    """nvshmemx_init_attr_t as NVSHMEMX_INIT_ATTR_INITIALIZER (v2) or ..._V1_INITIALIZER sets it."""
    attr = _lib.new("nvshmemx_init_attr_t *")  # zero-filled: mpi_comm NULL, padding 0
    uid_args = attr.args.uid_args
    uid_args.version = STRUCT_VERSIONS["nvshmemx_uniqueid_args_t"]
    uid_args.myrank = -1  # UNIQUEID_ARGS_INVALID
    uid_args.nranks = -1
    if layout == 2:
        attr.version = STRUCT_VERSIONS["nvshmemx_init_attr_t"]
        attr.args.version = STRUCT_VERSIONS["nvshmemx_init_args_t"]
        attr.args.cuda_device_id = device_id  # INIT_ARGS_SCALAR_INVALID (-1) in the initializer
    else:
        attr.version = (1 << 16) + STRUCT_SIZES["nvshmemx_init_attr_t"]
        attr.args.version = (1 << 16) + STRUCT_SIZES["nvshmemx_init_args_t"]
    return attr


# --------------------------------------------------------------------------- session


class Session:
    """What :func:`init` returns: this PE's place, and a context manager that finalizes."""

    def __init__(self) -> None:
        s = _state.STATE
        self.mode: str = s.mode
        self.my_pe: int = s.my_pe
        self.n_pes: int = s.n_pes
        self.local_rank: int = s.local_rank
        self.device_id: int = s.device_id
        self.device: Any = s.device
        self._generation = s.generation

    @property
    def active(self) -> bool:
        s = _state.STATE
        return s.initialized and s.generation == self._generation

    def finalize(self) -> None:
        finalize()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.active:
            return
        if exc_type is not None and self.n_pes > 1:
            # finalize is collective: the other PEs may never get here; let the error propagate
            # (if it ends the program, the exit hook leaves without the collective finalize)
            _exit.note_leaving(exc, sys._getframe(1))
            return
        finalize()

    def __repr__(self) -> str:
        state = "active" if self.active else "finalized"
        return (
            f"<nvshmem_dsl.Session PE {self.my_pe} of {self.n_pes}, mode {self.mode}, "
            f"device {self.device_id}, {state}>"
        )


def _describe_state() -> str:
    s = _state.STATE
    return f"PE {s.my_pe} of {s.n_pes}, mode {s.mode}, device {s.device_id}"


def init(
    *,
    uid: bytes | None = None,
    rank: int | None = None,
    nranks: int | None = None,
    mpi_comm: Any = None,
    device: int | None = None,
    timeout: float | None = None,
    local_rank: int | None = None,
) -> Session:
    """Initialise NVSHMEM for this process (collective over all ranks of the job).

    * ``rank``/``nranks`` (and ``uid`` from :func:`get_uniqueid` on rank 0 when
      nranks > 1): explicit mode; ``mpi_comm``: an mpi4py communicator (rank 0's id
      travels over MPI); otherwise the launcher's environment decides (MPI,
      torchrun, ``python -m nvshmem_dsl.run``), or a single PE.
    * ``device``: the CUDA device to use (default ``local_rank % device count``).
    * ``timeout``: seconds to wait for the other ranks (default
      ``$NVSHMEM_DSL_INIT_TIMEOUT`` or 60).

    Raises NvshmemStateError when already initialised, NvshmemInitError when it
    cannot initialise (no GPU or driver, rendezvous failure, NVSHMEM error),
    NvshmemNotFoundError when NVSHMEM is not installed.
    """
    with _state.lock:
        s = _state.STATE
        if s.initialized:
            raise NvshmemStateError(
                f"init(): nvshmem_dsl is already initialised ({_describe_state()}); call finalize() first"
            )
        if s.failed_init:
            raise NvshmemInitError(
                f"init(): NVSHMEM initialisation already failed in this process ({s.failed_init}); "
                "NVSHMEM cannot be initialised again after a failure: start a new process"
            )
        _prepare_in_background()  # cuInit and the op table: while the steps before them run
        _lib.lib()  # NvshmemNotFoundError with the places looked at
        try:
            finalize_timeout = _exit.finalize_timeout()
        except ValueError as exc:
            raise NvshmemInitError(f"init(): {exc}") from None
        try:
            count = _cuda.device_count()
        except NvshmemInitError as exc:
            raise NvshmemInitError(f"init(): {exc}") from None
        if count < 1:
            raise NvshmemInitError("init(): no CUDA device is visible to this process (check CUDA_VISIBLE_DEVICES)")

        explicit = uid is not None or rank is not None or nranks is not None
        mode = _bootstrap.detect_mode(explicit=explicit, comm=mpi_comm)
        if mode in ("single", "launcher") or (mode == "explicit" and nranks == 1):
            # every rank is on this host: keep the id's bootstrap socket on loopback
            os.environ.setdefault(_UID_IFNAME, "lo")
        bs = _bootstrap.bootstrap(
            get_uniqueid, uid=uid, rank=rank, nranks=nranks, local_rank=local_rank, comm=mpi_comm,
            mode=mode, timeout=timeout,
        )
        own_bootstrap = bs.mode == "nvshmem"  # NVSHMEM_BOOTSTRAP=PMI/PMIX/MPI...: NVSHMEM finds the ranks
        if not own_bootstrap and (bs.uid is None or len(bs.uid) != STRUCT_SIZES["nvshmemx_uniqueid_t"]):
            got = "none" if bs.uid is None else f"{len(bs.uid)} bytes"
            raise NvshmemInitError(
                f"init(): the unique id must be the {STRUCT_SIZES['nvshmemx_uniqueid_t']} bytes of "
                f"nvshmem_dsl.get_uniqueid(); got {got}"
            )
        if device is None:
            device_id = bs.device(count)
        else:
            device_id = int(device)
            if not 0 <= device_id < count:
                raise NvshmemInitError(f"init(): device={device_id}, but only {count} CUDA device(s) are visible")
        try:
            dev = _cuda.set_device(device_id)
        except Exception as exc:
            raise NvshmemInitError(f"init(): cannot make CUDA device {device_id} current: {exc}") from exc
        _prefetch_device_code(device_id)

        layout = _attr_layout()
        attr = _new_init_attr(layout, device_id)
        if own_bootstrap:
            flags, who = 0, f"with NVSHMEM_BOOTSTRAP={os.environ.get('NVSHMEM_BOOTSTRAP')}"
        else:
            f = _lib.ffi()
            uid_struct = f.new("nvshmemx_uniqueid_t *")
            f.memmove(uid_struct, bs.uid, len(bs.uid))
            _lib.call("nvshmemx_set_attr_uniqueid_args", bs.rank, bs.nranks, uid_struct, attr)
            flags, who = int(InitFlags.INIT_WITH_UNIQUEID), f"PE {bs.rank} of {bs.nranks}"
        status = _lib.call("nvshmemx_hostlib_init_attr", flags, attr, check=False)
        if status != 0:
            name = _lib.status_name(status)
            s.failed_init = f"nvshmemx_hostlib_init_attr returned {status} ({name})"
            raise NvshmemInitError(
                f"init(): NVSHMEM failed to initialise {who} on device {device_id}: "
                f"nvshmemx_hostlib_init_attr returned {status} ({name}). Run with NVSHMEM_DEBUG=INFO for "
                "NVSHMEM's own explanation; NVSHMEM cannot be initialised again in this process."
            )
        pe = _lib.call("nvshmem_my_pe")
        npes = _lib.call("nvshmem_n_pes")
        if not own_bootstrap and (pe != bs.rank or npes != bs.nranks):
            warnings.warn(
                f"NVSHMEM numbers this PE {pe} of {npes}, the bootstrap said rank {bs.rank} of {bs.nranks}",
                RuntimeWarning,
                stacklevel=2,
            )
        s.initialized, s.fake = True, False
        s.mode, s.my_pe, s.n_pes = bs.mode, pe, npes
        s.local_rank, s.device_id, s.device, s.bootstrap = bs.local_rank, device_id, dev, bs
        s.attr_version = layout
        s.extra["finalize_timeout"] = finalize_timeout
        s.generation += 1
        _read_mpg_mode(s, device_id)
        try:
            from . import memory

            memory._scratch_alloc()  # collective, like every allocation: all PEs do it here
        except BaseException:
            _finalize_locked(report=False)
            raise
        _install_exit_hooks()
        _exit.FinalizeWatchdog.start()  # now: at exit Python 3.12 starts no thread
        _exit.tell_launcher("initialized")
    try:
        from ..linker import module_init

        module_init.install_dsl_hooks()  # layers imported later wire themselves
    except Exception as exc:  # a broken DSL layer must not break host use
        warnings.warn(f"nvshmem_dsl: could not install the DSL module hooks: {exc}", RuntimeWarning, stacklevel=2)
    return Session()


session = init  #: ``with nvshmem_dsl.session(): ...`` reads well too

#: The name of :func:`_prepare_in_background`'s thread.
PREPARE_THREAD = "nvshmem_dsl-prepare"


def _prepare_in_background() -> None:
    """Start, on a thread, what init's later steps need and nothing of init's own order depends on:
    the driver's ``cuInit`` (C, without the GIL) and the op table (``ops.json``, 2.9 MB of JSON: every
    C call's status check reads it, rank 0's unique id first). They then run while init's first steps
    wait in C (the library load, the bootstrap's exchange); the steps that need them find them done or
    wait for them (a second cuInit returns at once; the table's lock). The thread imports nothing: the
    driver's module and the table's resource readers are imported here, on the caller's thread. Imports
    on two threads at once can hand one of them a module still being initialised (seen on the GPU
    machine: init's ``from cuda.core import Device`` while this thread imported ``cuda.core`` failed
    with "cannot import name 'Device'"). A failure here happens again, with its error, where it is
    needed. Never raises."""
    if _cuda._initialised and _table._table is not None:
        return
    try:
        drv = _cuda.driver()
        _table.source()
    except Exception:  # noqa: BLE001 - reported by the step that needs it
        return

    def prepare() -> None:
        for step in (lambda: drv.cuInit(0), _table.table):
            try:
                step()
            except Exception:  # noqa: BLE001 - reported by the step that needs it
                pass

    try:
        threading.Thread(target=prepare, name=PREPARE_THREAD, daemon=True).start()
    except RuntimeError:  # no thread can start (interpreter shutdown): each done when needed
        pass


def _read_mpg_mode(s: _state.State, device_id: int) -> None:
    """How many PEs share this GPU, whether MPS joins them, and whether NVSHMEM runs in its
    *limited MPG* mode (several PEs per GPU without MPS: no collectives, no team splits)."""
    from .._generated.constants import Team

    status = _lib.call("nvshmemx_init_status")
    same_gpu = _lib.call("nvshmem_team_n_pes", int(Team.TEAM_SAME_GPU))
    s.pes_per_gpu = same_gpu if same_gpu > 0 else 1
    try:
        s.mps = bool(_cuda.mps_enabled(device_id))
    except Exception:  # noqa: BLE001 - a driver that cannot tell: NVSHMEM's own status decides below
        s.mps = False
    s.limited_mpg = status == InitStatus.STATUS_LIMITED_MPG


#: The device APIs whose kernels link NVSHMEM's bitcode (imported: :func:`_prefetch_device_code`).
DEVICE_APIS = ("nvshmem_dsl.numba", "nvshmem_dsl.cute", "nvshmem_dsl.triton")


def _prefetch_device_code(device_id: int) -> None:
    """With a device API of :data:`DEVICE_APIS` imported, start preparing what this device's first
    kernels need of NVSHMEM's device bitcode while NVSHMEM initialises, if it is not cached yet
    (:func:`nvshmem_dsl.linker.pipeline.prefetch_device_code`: the store's build and the helpers' closure).
    Never raises."""
    if not any(name in sys.modules for name in DEVICE_APIS):
        return
    try:
        from ..linker.pipeline import prefetch_device_code

        prefetch_device_code(_cuda.compute_capability(device_id))
    except Exception:  # noqa: BLE001 - the first kernel reads the bitcode itself
        pass


def finalize() -> None:
    """Finalize NVSHMEM (collective).  Warns about symmetric allocations never freed."""
    with _state.lock:
        s = _state.STATE
        if not s.initialized:
            if s.extra.get("finalized"):
                raise NvshmemStateError("finalize(): nvshmem_dsl was already finalized")
            raise NvshmemStateError("finalize(): nvshmem_dsl is not initialised")
        report = _finalize_locked(report=True)
    if report:
        warnings.warn("nvshmem_dsl.finalize(): " + report, NvshmemLeakWarning, stacklevel=2)


def _finalize_locked(report: bool) -> str | None:
    from . import memory
    from ..linker import module_init

    s = _state.STATE
    s.finalizing = True
    text = None
    timeout = None if s.fake else s.extra.get("finalize_timeout", _exit.DEFAULT_FINALIZE_TIMEOUT)
    try:
        with _exit.FinalizeWatchdog(s.my_pe, s.n_pes, timeout):  # nvshmem_free and finalize are collective
            module_init.on_finalize()
            text = memory._on_finalize(free_internal=not s.fake)
            if not s.fake:
                _lib.call("nvshmemx_hostlib_finalize")
                _exit.tell_launcher("finalized")
    finally:
        s.initialized = False
        s.finalizing = False
        s.mode, s.my_pe, s.n_pes = "", -1, 0
        s.pes_per_gpu, s.mps, s.limited_mpg = 1, False, False
        s.device, s.bootstrap = None, None
        s.generation += 1
        s.extra["finalized"] = True
    return text if report else None


def is_initialized() -> bool:
    """Whether :func:`init` succeeded and :func:`finalize` has not run since."""
    return _state.STATE.initialized


# --------------------------------------------------------------------------- exit hooks


def _excepthook(exc_type, exc, tb):
    _exit.note_uncaught(exc)
    if _state.STATE.initialized:
        # the program ends: our exit hook first, before handlers registered after init() run
        # against a library that will never be finalized
        atexit.unregister(_atexit)
        atexit.register(_atexit)
    hook = _prev_excepthook or sys.__excepthook__
    hook(exc_type, exc, tb)


def _install_exit_hooks() -> None:
    global _atexit_registered, _prev_excepthook
    if _atexit_registered:
        return
    _atexit_registered = True
    atexit.register(_atexit)
    _prev_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    _exit.install()


def _leaving_words(exc: BaseException, status: int | None) -> str:
    if status is None:
        return "an uncaught KeyboardInterrupt: ending by SIGINT, as Python does"
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"
    return f"an uncaught {type(exc).__name__}"


def _atexit() -> None:
    s = _state.STATE
    if not s.initialized or s.fake:
        return
    ending = _exit.pending_exit()
    if ending is not None and ending[1] != 0 and s.n_pes > 1:  # one PE: no peer to wait for, finalize
        exc, status = ending
        _exit.leave(status, (
            f"nvshmem_dsl: PE {s.my_pe} of {s.n_pes} is exiting with status "
            f"{'SIGINT' if status is None else status} ({_leaving_words(exc, status)}) without finalize(): "
            "skipping the collective NVSHMEM finalize (the other PEs may never reach it) and leaving at once\n"))
    if os.environ.get(ENV_ATEXIT, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    me = s.my_pe  # finalizing resets it
    try:
        with _state.lock:
            report = _finalize_locked(report=True)
        msg = f"nvshmem_dsl: PE {me}: finalize() was not called; finalized at exit"
        if report:
            msg += ".\n" + report
        sys.stderr.write(msg + "\n")
    except Exception as exc:  # never raise at exit
        sys.stderr.write(f"nvshmem_dsl: finalizing at exit failed: {exc}\n")


# --------------------------------------------------------------------------- queries


def team_my_pe(team: Any) -> int:
    """This PE's number in ``team`` (-1 when not a member)."""
    return _place(team, "team_my_pe")[1]


def team_n_pes(team: Any) -> int:
    """Number of PEs in ``team``."""
    return _place(team, "team_n_pes")[2]


def init_status() -> InitStatus:
    """``nvshmemx_init_status()`` as an InitStatus (callable before init)."""
    return InitStatus(_lib.call("nvshmemx_init_status"))


def query_thread() -> ThreadLevel:
    """The thread support level NVSHMEM provides (``nvshmem_query_thread``)."""
    _state.require("query_thread()")
    level = _lib.new("int *")
    _lib.call("nvshmem_query_thread", level)
    return ThreadLevel(level[0])


def global_exit(status: int = 1) -> None:
    """End every PE of the job with exit ``status`` (``nvshmem_global_exit``; does not return)."""
    _state.require("global_exit()")
    _lib.call("nvshmem_global_exit", int(status))


def _package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("nvshmem-dsl")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def versions() -> dict:
    """Versions: this package, the spec it was generated from, and the NVSHMEM library.

    ``nvshmem`` comes from the loaded library (``nvshmemx_vendor_get_version_info``,
    callable before init), ``nvshmem_found`` from the installation's files,
    ``openshmem`` is the OpenSHMEM spec version the library implements.
    """
    out: dict[str, Any] = {"nvshmem_dsl": _package_version(), "spec_sha256": SPEC_SHA256}
    try:
        inst = _libs.installation()
        out["nvshmem_found"] = inst.version_string
        out["nvshmem_source"] = inst.source
    except NvshmemNotFoundError:
        out["nvshmem_found"] = None
        out["nvshmem_source"] = None
    try:
        major, minor, patch = _lib.new("int *"), _lib.new("int *"), _lib.new("int *")
        _lib.call("nvshmemx_vendor_get_version_info", major, minor, patch)
        out["nvshmem"] = f"{major[0]}.{minor[0]}.{patch[0]}"
        _lib.call("nvshmem_info_get_version", major, minor)
        out["openshmem"] = f"{major[0]}.{minor[0]}"
        name = _lib.new("char[256]")
        _lib.call("nvshmem_info_get_name", name)
        out["name"] = _lib.ffi().string(name).decode(errors="replace")
    except NvshmemError:
        out.setdefault("nvshmem", None)
    return out


def info() -> dict:
    """Versions, library and bitcode paths, runtime state, GPUs and their peer access."""
    out: dict[str, Any] = {"versions": versions()}
    try:
        inst = _libs.installation()
        out["library"] = str(inst.host_library)
        out["lib_dir"] = str(inst.lib_dir)
        out["include_dir"] = None if inst.include_dir is None else str(inst.include_dir)
        out["bitcode_layout"] = inst.layout
        out["bitcode"] = {str(k): str(v) for k, v in inst.bitcode_archs.items()} or [str(p) for p in inst.bitcode_files]
        out["bootstrap_plugins"] = {k: str(v) for k, v in inst.bootstrap_plugins.items()}
    except NvshmemNotFoundError as exc:
        out["library"] = None
        out["error"] = str(exc)
    s = _state.STATE
    out["initialized"] = s.initialized
    if s.initialized:
        out.update(mode=s.mode, my_pe=s.my_pe, n_pes=s.n_pes, local_rank=s.local_rank, device=s.device_id,
                   init_attr_version=s.attr_version, pes_per_gpu=s.pes_per_gpu, mps=s.mps,
                   limited_mpg=s.limited_mpg)
    gpus = []
    try:
        count = _cuda.device_count()
        for i in range(count):
            gpu = {"id": i}
            try:
                gpu["name"] = _cuda.device_name(i)
                gpu["compute_capability"] = "%d.%d" % _cuda.compute_capability(i)
                gpu["peer_access"] = [j for j in range(count) if j != i and _cuda.can_access_peer(i, j)]
                gpu["mps"] = _cuda.mps_enabled(i)
            except Exception as exc:  # report what could be read
                gpu["error"] = str(exc)
            gpus.append(gpu)
        out["cuda_driver"] = "available"
    except NvshmemInitError as exc:
        out["cuda_driver"] = f"unavailable: {exc}"
    out["gpus"] = gpus
    return out
