"""What the cache directory holds, when each entry was last used, and pruning it.

Everything nvshmem-dsl derives from NVSHMEM's bitcode lives in :func:`.store_file.cache_dir`
(``$NVSHMEM_DSL_CACHE``, default ``~/.cache/nvshmem-dsl``), keyed by what it was made from: a
new NVSHMEM, llvmlite, ptxas or nvshmem-dsl makes new entries and leaves the old ones unused (a
piece store is about 100 MB, a libNVVM copy 50 MB).  An entry is a file with its companions
(``X.pieces`` and ``X.lock``; an object ``X.cubin``, ``X.calls``, ``X.lock``; NVIDIA's compiled helpers
``X.o`` and their answers ``X.o.sm90.v2.json`` with its lock; every name holds the digest
of what it was made from, and nothing else in the directory is touched); its last use is the
newest modification time among them, which the code that reads an entry renews
(:func:`.store_file.mark_used`).

:func:`prune` removes the entries unused for some days, skipping any whose lock another process
holds (a build under way); it runs by itself, for :func:`auto_days` days, whenever a piece store
has to be built (a new NVSHMEM or llvmlite: when old entries appear).  ``python -m nvshmem_dsl
cache`` reports, prunes or clears (:mod:`nvshmem_dsl.__main__`).

Public: :class:`Entry`, :func:`entries`, :func:`summary`, :func:`prune`, :func:`auto_days`; :data:`DAYS_ENV`,
:data:`DEFAULT_DAYS`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from pathlib import Path

from . import helper_archive, store_file
from .store_file import KERNELS_FOLDER, OBJECTS_FOLDER, cache_dir

__all__ = ["DAYS_ENV", "DEFAULT_DAYS", "Entry", "auto_days", "entries", "prune", "summary"]

#: Days an entry may go unused before the automatic pruning removes it; ``never`` turns that off.
DAYS_ENV = "NVSHMEM_DSL_CACHE_DAYS"
DEFAULT_DAYS = 30.0

#: File endings of an entry's files (longest first), and what its main file says it is.
_SUFFIXES = (".nvvm.lock", ".nvvm.same", ".nvvm.bc", ".pieces", ".cubin", ".calls", ".lock", ".o")
#: The answers (and their lock) kept beside NVIDIA's compiled helpers (``X.o``): ``X.o.sm90.v2.json``.
_ANSWERS = helper_archive.ANSWERS_ENDING
_KINDS = {".pieces": "piece stores", ".nvvm.bc": "libNVVM bitcode (CuTe)", ".nvvm.same": "libNVVM bitcode (CuTe)",
          ".cubin": "out-of-line objects", ".o": "NVIDIA's compiled helpers"}
_LEFTOVERS = "build leftovers"
_FOLDERS = (OBJECTS_FOLDER, KERNELS_FOLDER)


@dataclasses.dataclass
class Entry:
    """One cache entry: its ``kind`` (one of :data:`_KINDS`' values, or build leftovers: a lock
    without its file, temporary files of a build), its files, their total ``size`` in bytes and
    ``last_used`` (seconds since the epoch)."""

    kind: str
    paths: list
    size: int = 0
    last_used: float = 0.0

    @property
    def lock(self) -> Path | None:
        return next((p for p in self.paths if p.name.endswith(".lock")), None)


#: Every name the cache gives a file or a build's folder holds a hex digest after a dash (the
#: key of what it was made from); nothing else there is counted or removed, so that a cache
#: directory set to a folder of other files (``NVSHMEM_DSL_CACHE=~``) loses none of them.
_DIGEST = re.compile(r"-[0-9a-f]{16,}")


def _split(name: str) -> tuple[str, str] | None:
    """(stem, ending) of a cache file's name (ending "" for a build's leftover); None for a name
    the cache does not give."""
    if not _DIGEST.search(name):
        return None
    answers = _ANSWERS.search(name)
    if answers:
        return name[:answers.start()], answers.group(0)
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return (name, "") if _is_leftover(name) else None


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def entries(root: Path | None = None) -> list:
    """The entries of the cache directory ``root`` (default: :func:`.store_file.cache_dir`) and
    of its folders, by stem."""
    root = Path(root) if root is not None else cache_dir()
    groups: dict = {}
    folders = [root] + [root / name for name in _FOLDERS if (root / name).is_dir()]
    for folder in folders:
        for path in folder.iterdir():
            split = _split(path.name)
            if split is None or (path.is_dir() and split[1]):
                continue
            groups.setdefault((folder, split[0]), []).append((path, split[1]))
    out = []
    for (folder, _), files in groups.items():
        endings = {ending for _, ending in files}
        kind = next((_KINDS[e] for e in _KINDS if e in endings), _LEFTOVERS)
        if kind != _LEFTOVERS and folder.name == KERNELS_FOLDER:
            kind = "CuTe kernels' bitcode"
        entry = Entry(kind, sorted(p for p, _ in files))
        for p in entry.paths:
            try:
                entry.size += _size(p)
                entry.last_used = max(entry.last_used, p.stat().st_mtime)
            except OSError:  # removed meanwhile
                pass
        out.append(entry)
    return sorted(out, key=lambda e: (e.kind, str(e.paths[0])))


def _is_leftover(name: str) -> bool:
    """A store build's folders and temporary files (``.build-*``, ``.closure-*``, ``*.tmp``)."""
    return ".build-" in name or ".closure-" in name or name.endswith(".tmp")


def summary(root: Path | None = None) -> dict:
    """``{kind: (entries, bytes, last use of the least recently used)}``."""
    out: dict = {}
    for e in entries(root):
        n, size, oldest = out.get(e.kind, (0, 0, e.last_used))
        out[e.kind] = (n + 1, size + e.size, min(oldest, e.last_used))
    return out


def _busy(lock: Path | None) -> bool:
    """Whether another process holds ``lock`` (a build of its entry under way)."""
    if lock is None:
        return False
    try:
        fd = store_file.try_lock(lock, create=False)
    except OSError:  # no lock file: no build
        return False
    if fd is None:
        return True
    store_file.release(fd)  # releases the lock taken here
    return False


def prune(days: float, root: Path | None = None, dry_run: bool = False) -> list:
    """Remove the entries of ``root`` (default: the cache directory) unused for ``days`` days (0:
    all), but those whose build is under way; returns the entries removed (``dry_run``: that
    would be)."""
    if days < 0:
        raise ValueError(f"days={days!r}: give a number of days >= 0")
    limit = time.time() - days * 86400.0
    gone = []
    for e in entries(root):
        if e.last_used > limit or _busy(e.lock):
            continue
        if not dry_run:
            for p in e.paths:
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    try:
                        p.unlink()
                    except FileNotFoundError:
                        pass
        gone.append(e)
    return gone


def auto_days() -> float | None:
    """The days of the automatic pruning: ``$NVSHMEM_DSL_CACHE_DAYS`` (a number > 0, or ``never``),
    :data:`DEFAULT_DAYS` by default; None: off."""
    text = os.environ.get(DAYS_ENV, "").strip().lower()
    if not text:
        return DEFAULT_DAYS
    if text in ("never", "none", "off"):
        return None
    try:
        days = float(text)
    except ValueError:
        days = 0.0
    if not days > 0:
        raise ValueError(f"{DAYS_ENV}={text!r}: give a number of days > 0, or 'never'")
    return days
