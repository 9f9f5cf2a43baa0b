"""The NVSHMEM host library, loaded through cffi in ABI mode.

The declarations are the generated ``host_cdef.h`` (never written by hand; parsed once and kept
by :mod:`._ffi`); the library is the ``libnvshmem_host.so.3`` that :mod:`nvshmem_dsl._libs` finds.
Both are loaded lazily, once, under a lock, on the first use.

:func:`call` is the one door to the C functions used by the rest of the runtime:
it converts Python ints to the pointer parameters, Python floats to ``half`` /
``__nv_bfloat16`` values, pointer results to ints (0 for NULL), and turns a
non-zero status of a status-returning function into :class:`NvshmemStatusError`.
"""

from __future__ import annotations

import math
import struct
import threading
from importlib import resources
from typing import Any, Callable

from . import _ffi as _ffi_module, _table, _state
from .. import _libs
from ..errors import NvshmemMpgError, NvshmemNotFoundError, NvshmemStatusError

__all__ = ["ffi", "lib", "library_path", "call", "status_name", "has_symbol", "loaded"]

_lock = threading.Lock()
_ffi = None
_lib = None
_path = None
_cdef_ffi = None
_signatures: dict[str, tuple] = {}

# Test hook: when set, call() hands (symbol, args) to it instead of calling C.
_interceptor: Callable[[str, tuple], Any] | None = None


def cdef_text() -> str:
    """The generated cffi declarations of the host library."""
    return resources.files("nvshmem_dsl._generated").joinpath("host_cdef.h").read_text()


def _cdef_only():
    """An FFI with the declarations but no library (struct layouts, for tests and tools)."""
    global _cdef_ffi
    if _ffi is not None:
        return _ffi
    if _cdef_ffi is None:
        with _lock:
            if _cdef_ffi is None:
                _cdef_ffi = _ffi_module.new_ffi(cdef_text())
    return _cdef_ffi


def _load():
    global _ffi, _lib, _path
    if _lib is None:
        with _lock:
            if _lib is None:
                path = _libs.host_library_path()
                f = _cdef_ffi
                if f is None:
                    f = _ffi_module.new_ffi(cdef_text())
                try:
                    handle = f.dlopen(str(path))
                except OSError as exc:
                    raise NvshmemNotFoundError(f"cannot load the NVSHMEM host library {path}: {exc}") from exc
                _path, _ffi, _lib = path, f, handle
    return _ffi, _lib


def loaded() -> bool:
    """Whether the host library was loaded already (nothing is loaded by asking)."""
    return _lib is not None


def ffi():
    """The cffi FFI holding the generated declarations (loads the library)."""
    return _load()[0]


def lib():
    """The loaded ``libnvshmem_host.so.3`` (cffi ABI-mode library object)."""
    return _load()[1]


def library_path():
    """Path of the host library (found, not necessarily loaded)."""
    return _path if _path is not None else _libs.host_library_path()


def _missing_symbol_error(f) -> type:
    """What getattr of a symbol the library lacks raises besides AttributeError: the out-of-line ABI
    module of the kept parse (:mod:`._ffi`) raises its ``ffi.error``; a parsed FFI has none."""
    return getattr(f, "error", AttributeError)


def has_symbol(symbol: str) -> bool:
    """Whether the loaded library exports ``symbol`` (older NVSHMEMs lack some)."""
    f, library = _load()
    try:
        getattr(library, symbol)
        return True
    except (AttributeError, _missing_symbol_error(f)):
        return False


def status_name(status: int) -> str:
    from .._generated.constants import Status

    try:
        return Status(status).name
    except ValueError:
        return f"unknown status {status}"


_STATUS_TEXT = {
    "ERROR_INVALID_VALUE": "an argument is invalid",
    "ERROR_OUT_OF_MEMORY": "out of memory",
    "ERROR_NOT_SUPPORTED": "not supported by this NVSHMEM build or transport",
    "ERROR_SYMMETRY": "the PEs disagree on a collective argument",
    "ERROR_GPU_NOT_SELECTED": "no GPU selected",
    "ERROR_COLLECTIVE_LAUNCH_FAILED": "collective launch failed",
    "ERROR_INTERNAL": "internal error (run with NVSHMEM_DEBUG=INFO for details)",
}


def status_error(symbol: str, status: int, context: str = "") -> NvshmemStatusError:
    name = status_name(status)
    text = name + (": " + _STATUS_TEXT[name] if name in _STATUS_TEXT else "")
    if context:
        text += f" ({context})"
    return NvshmemStatusError(symbol, status, text)


# --------------------------------------------------------------------------- 16-bit floats


def float_to_half_bits(value: float) -> int:
    return struct.unpack("<H", struct.pack("<e", float(value)))[0]


def half_bits_to_float(bits: int) -> float:
    return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]


def float_to_bfloat16_bits(value: float) -> int:
    value = float(value)
    if math.isnan(value):
        return 0x7FC0
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
    return (bits >> 16) & 0xFFFF


def bfloat16_bits_to_float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


_TO_BITS = {"half": float_to_half_bits, "__half": float_to_half_bits, "__nv_bfloat16": float_to_bfloat16_bits}
_FROM_BITS = {"half": half_bits_to_float, "__half": half_bits_to_float, "__nv_bfloat16": bfloat16_bits_to_float}


# --------------------------------------------------------------------------- calls


def _signature(symbol: str):
    """(function, (index, type) of its pointer parameters, of its half/bfloat16 ones, its parameter
    count, result kind, result type, returns a status, the function typed with ``uintptr_t`` for its
    pointers or None: :func:`_int_typed`), worked out once per symbol."""
    sig = _signatures.get(symbol)
    if sig is not None:
        return sig
    f, library = _load()
    try:
        fn = getattr(library, symbol)
    except (AttributeError, _missing_symbol_error(f)):
        version = "unknown version"
        try:
            v = _libs.nvshmem_version()
            version = "%d.%d.%d" % v
        except Exception:
            pass
        raise NvshmemNotFoundError(
            f"{symbol} is not exported by {library_path()} (NVSHMEM {version}); "
            "a newer NVSHMEM is needed for this operation"
        ) from None
    ftype = f.typeof(fn)
    pointers = tuple((i, arg) for i, arg in enumerate(ftype.args) if arg.kind == "pointer")
    halves = tuple((i, arg) for i, arg in enumerate(ftype.args) if arg.kind == "struct" and arg.cname in _TO_BITS)
    result = ftype.result
    if result.kind == "pointer":
        ret = "ptr"
    elif result.kind == "struct" and result.cname in _FROM_BITS:
        ret = "f16"
    else:
        ret = None
    sig = (fn, pointers, halves, len(ftype.args), ret, result, _table.returns_status(symbol),
           _int_typed(f, fn, ftype) if pointers and not halves and ret != "f16" and not ftype.ellipsis else None)
    _signatures[symbol] = sig
    return sig


def _int_typed(f, fn, ftype):
    """``fn`` with its pointer parameters (and a pointer result) typed ``uintptr_t``: called with
    addresses as ints, no cast an argument (about 1 us a call of three pointers).  A pointer and a
    ``uintptr_t`` are passed and returned alike by the C calling conventions of the 64-bit targets
    NVSHMEM ships for (x86-64, aarch64)."""
    def ctype(t):
        return "uintptr_t" if t.kind == "pointer" else t.cname

    params = ", ".join(ctype(t) for t in ftype.args)
    return f.cast(f"{ctype(ftype.result)}(*)({params})", fn)


def call(symbol: str, *args: Any, check: bool = True, context: str = "") -> Any:
    """Call host function ``symbol`` with Python values.

    Pointers may be given as ints (0 = NULL) or cffi pointers; ``half`` and
    ``__nv_bfloat16`` values as Python floats.  Returns the C result (pointers as
    ints).  With ``check``, a non-zero status of a function that returns one
    raises :class:`NvshmemStatusError` naming the function and the Status enum.
    In a limited-MPG run, a function NVSHMEM rejects there raises :class:`NvshmemMpgError`
    instead of being called (NVSHMEM would end the process).
    """
    if _state.STATE.limited_mpg:
        refuse_in_limited_mpg(symbol, context)
    if _interceptor is not None:
        result = _interceptor(symbol, args)
        if check and isinstance(result, int) and result != 0 and _table.returns_status(symbol):
            raise status_error(symbol, result, context)
        return result
    fn, pointers, halves, nargs, ret, rtype, is_status, int_fn = _signatures.get(symbol) or _signature(symbol)
    if len(args) != nargs:
        raise TypeError(f"{symbol} takes {nargs} arguments, got {len(args)}")
    if int_fn is not None:
        for i, _ in pointers:
            if not isinstance(args[i], int):  # None, a cffi pointer (or a numpy int: refused below, as before)
                break
        else:  # every address an int, the common case (a negative one: cast below, as before)
            try:
                result = int_fn(*args)  # cffi converts every argument before the call: an error means no call
            except OverflowError:
                pass
            else:
                if check and is_status and result != 0:
                    raise status_error(symbol, result, context)
                return result
    if pointers or halves:
        f = _ffi
        args = list(args)
        for i, ctype in pointers:  # ints cast (0 = NULL), None as NULL, cffi pointers as they are
            value = args[i]
            if isinstance(value, int):
                args[i] = f.cast(ctype, value)
            elif value is None:
                args[i] = f.NULL
        for i, ctype in halves:  # Python numbers as their 16 bits
            value = args[i]
            if isinstance(value, (int, float)):
                box = f.new(ctype.cname + " *")
                box.x = _TO_BITS[ctype.cname](value)
                args[i] = box[0]
    result = fn(*args)
    if ret is None:
        if check and is_status and result != 0:
            raise status_error(symbol, result, context)
        return result
    if ret == "ptr":
        return int(_ffi.cast("uintptr_t", result))
    return _FROM_BITS[rtype.cname](result.x)


def refuse_in_limited_mpg(symbol: str, context: str = "") -> None:
    """Raise NvshmemMpgError when this is a limited-MPG run and NVSHMEM rejects ``symbol`` there.

    Call it on every PE before work that only some PEs would do (so that none is left waiting)."""
    s = _state.STATE
    if s.limited_mpg and _table.rejected_in_limited_mpg(symbol):
        where = f"{context}: " if context else ""
        raise NvshmemMpgError(
            f"{where}{symbol} is not supported when several PEs share a GPU without MPS (NVSHMEM's "
            f"limited MPG mode: {s.pes_per_gpu} PEs on this PE's GPU); NVSHMEM would end the process. "
            "Start the CUDA MPS control daemon before the PEs (nvidia-cuda-mps-control -d) and give each "
            f"PE CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={max(1, 100 // max(1, s.pes_per_gpu))}, or run one PE per GPU."
        )


def new(ctype: str, init: Any = None):
    """``ffi.new`` on the loaded FFI (or the declarations-only one when intercepted)."""
    f = _ffi if _ffi is not None else (_cdef_only() if _interceptor is not None else ffi())
    return f.new(ctype, init)


def sizeof(ctype: str) -> int:
    return _cdef_only().sizeof(ctype)
