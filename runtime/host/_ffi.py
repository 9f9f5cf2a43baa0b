"""The cffi FFI of the generated host declarations, parsed once and kept.

cffi's ABI mode parses the declarations (``host_cdef.h``, ~170 KB) with pycparser at every start:
1.2-1.4 s, half of ``init()``'s 2.45 s on an H200 host (record
tests/gpu/records/2026-12-03/h200-faults-cold-session20.txt). Its
out-of-line ABI form is the parse's result written as a Python module (``make_py_source``): loading
it took 0.11-0.15 s there, with the import of the cache directory's module (h200-comm-cold-mpirun-session20.txt),
and gives an FFI that opens the library the same way. The first process of a given
declarations text and cffi version writes that module to ``host-ffi/`` in the cache directory
(atomically: a temporary file renamed into place); later ones load it. The file's name holds the
digest of the declarations and the cffi version, so a new NVSHMEM-DSL or cffi makes a new one; the
automatic pruning of the cache does not touch this folder (a file of ~130 KB a version). Any failure
to read or write it falls back to parsing (a read-only home; a damaged file is parsed again and
replaced).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

#: The cache directory's folder of the parsed declarations.
FOLDER = "host-ffi"


def _module_name(text: str, cffi_version: str) -> str:
    digest = hashlib.sha256(f"{cffi_version}\0{text}".encode()).hexdigest()[:24]
    return f"_nvshmem_host_ffi_{digest}"


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ffi


def _write_module(ffi, name: str, folder: Path) -> None:
    from cffi import recompiler

    folder.mkdir(mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=name, suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        recompiler.make_py_source(ffi, name, tmp)
        os.replace(tmp, folder / f"{name}.py")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def new_ffi(text: str, *, folder: Path | None = None):
    """An FFI holding the declarations ``text``: the kept parse from ``folder`` (default the cache
    directory's :data:`FOLDER`) when there is one, else parsed now (and kept for the next process)."""
    import cffi

    name = _module_name(text, cffi.__version__)
    try:
        if folder is None:
            from ..linker.info import cache_dir

            folder = cache_dir() / FOLDER
    except Exception:  # noqa: BLE001 - no cache directory (a read-only home): parse every time
        folder = None
    if folder is not None and (folder / f"{name}.py").is_file():
        try:
            return _load_module(folder / f"{name}.py", name)
        except Exception:  # noqa: BLE001 - a damaged file: parsed again and replaced below
            pass
    ffi = cffi.FFI()
    ffi.cdef(text)
    if folder is not None:
        try:
            _write_module(ffi, name, folder)
        except Exception:  # noqa: BLE001 - keeping it is an optimisation only
            pass
    return ffi
