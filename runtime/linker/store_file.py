"""The piece store's file: where it lives, its key, its format, writing and reading it.

One file per (bitcode file, llvmlite) in the user's cache directory (:func:`cache_dir`): a
magic, the sha256 and length of a JSON index, the index (API names, per function its piece's
offset and dependencies, per part its globals and metadata), then the zlib-compressed pieces.
:class:`_Store` reads it lazily and assembles the closure of some functions
(:meth:`_Store.assemble`); a store in memory holds a closure (:meth:`_Store.from_part`).
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
import struct
import sys
import tempfile
import threading
import weakref
import zlib
from pathlib import Path

from .pieces import (_GLOBAL_REF, _MD_REF, EXPORTED_GLOBALS, FORMAT_VERSION, _declaration, _merge, _renumber,
                     function_declaration, noinline_groups)

_MAGIC = b"NVSHMEM-DSL-PIECES\0"
_HEAD = struct.Struct("<32sQ")  # sha256 of the JSON index, its length

#: Counters for tests and diagnostics: how often the bitcode was parsed and
#: how often a store was loaded from disk in this process.
stats = {"bitcode_parses": 0, "store_loads": 0, "subset_parses": 0}


class CacheCorrupt(Exception):
    """The cached piece store failed validation."""


# --------------------------------------------------------------------------
# Locating the bitcode


def _arch_number(arch) -> int:
    """90 for 90, "90", "sm_90a", (9, 0) or (9, 0, "a")."""
    if isinstance(arch, (tuple, list)):
        return int(arch[0]) * 10 + int(arch[1])
    if isinstance(arch, str):
        m = re.search(r"(\d+)", arch)
        if not m:
            raise ValueError(f"cannot read an SM number from {arch!r}")
        return int(m.group(1))
    return int(arch)


def _default_bitcode(arch) -> Path:
    """The NVSHMEM device bitcode to use for ``arch``: that of the installation the host
    library comes from (:func:`nvshmem_dsl._libs.bitcode_path`), so that device code and host
    library are always one NVSHMEM.  Raises :class:`FileNotFoundError` when there is none."""
    from .._libs import bitcode_path  # imported here: build workers load this file on its own
    from ..errors import NvshmemNotFoundError

    try:
        return bitcode_path(_arch_number(arch))
    except NvshmemNotFoundError as exc:
        raise FileNotFoundError(str(exc)) from None

# --------------------------------------------------------------------------
# Cache location and key


def cache_dir() -> Path:
    """User-private cache directory (``$NVSHMEM_DSL_CACHE`` or
    ``~/.cache/nvshmem-dsl``), created with mode 0700."""
    d = Path(
        os.environ.get("NVSHMEM_DSL_CACHE")
        or Path.home() / ".cache" / "nvshmem-dsl"
    )
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise PermissionError(f"cache directory {d} is not owned by this user")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)
    return d


#: The cache directory's folders: the out-of-line objects (:mod:`.outline`) and the CuTe kernels'
#: bitcode (:func:`.nvvm.kernel_bitcode`); the piece stores and libNVVM copies lie at its top.
OBJECTS_FOLDER = "outline"
KERNELS_FOLDER = "kernels"

_used: set = set()


def mark_used(path) -> None:
    """Record that the cache file ``path`` is used now (its modification time, which
    :func:`nvshmem_dsl.linker.cache.prune` reads), once per process."""
    path = str(path)
    if path in _used:
        return
    _used.add(path)
    try:
        os.utime(path)
    except OSError:  # read-only cache, or removed meanwhile: nothing to record
        pass


def _llvm_id() -> list:
    import llvmlite
    import llvmlite.binding as llvm

    return [llvmlite.__version__, list(llvm.llvm_version_info)]


def _cache_key(bc_path: Path) -> str:
    st = bc_path.stat()
    ident = [FORMAT_VERSION, str(bc_path.resolve()), st.st_size, st.st_mtime_ns]
    ident += _llvm_id()
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()


def _store_file(bc_path: Path, key: str) -> Path:
    return cache_dir() / f"{bc_path.stem}-{key[:24]}.pieces"


def store_path(bc_path=None, arch=90) -> Path:
    """Where the piece store for ``bc_path`` (default: the bitcode for
    ``arch``) lives; it may not exist yet."""
    bc_path = Path(bc_path) if bc_path else _default_bitcode(arch)
    return _store_file(bc_path, _cache_key(bc_path))

def write_atomically(path: Path, *chunks, sync: bool = False) -> None:
    """``path`` holding ``chunks`` (bytes-like, one after the other; mode 0600), written beside it and
    renamed: a reader, which takes no lock, sees all of it or none (the cache's files: the store,
    objects and their calls lists, kernel bitcode), also where the writer is killed at any point
    (it leaves its temporary file ``<name>.<random>.tmp``: :func:`remove_temporaries`).  ``sync``:
    on the disk before the rename (the store: a crash of the machine then leaves it whole or
    absent; objects and bitcode are checked whole where they are read, :func:`whole_elf`,
    :func:`whole_bitcode`, so they skip the cost in the cold kernel's path)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            if sync:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_store(out: Path, index: dict, blob) -> None:
    raw = json.dumps(index, separators=(",", ":")).encode()
    write_atomically(out, _MAGIC, _HEAD.pack(hashlib.sha256(raw).digest(), len(raw)), raw, blob, sync=True)


# Worker processes run `python -S -c _WORKER_MAIN ...`: this file loaded by
# path, so that neither the nvshmem_dsl package nor the user's __main__ is


class _Store:
    """A validated piece store, read lazily from its file (or, for a closure,
    from memory: :meth:`from_part`)."""

    temporary = False
    #: Whether the bodies of NVSHMEM's out-of-line helpers are here (a closure may leave them
    #: declarations: :func:`.pieces._closure`).
    helper_bodies = True

    def __init__(self, path: Path, key: str):
        self.path, self.key = path, key
        # one handle for the index and the pieces: a store another process writes meanwhile
        # replaces the path, never this file's contents under an index read from the other one
        fh = open(path, "rb")
        try:
            idx, base = self._index(fh, key)
        except BaseException:
            fh.close()
            raise
        self._load(idx, fh, base)
        weakref.finalize(self, fh.close)  # a store kept until the process exits is closed then
        mark_used(path)

    @staticmethod
    def _index(fh, key: str) -> tuple[dict, int]:
        """The validated index of the store open as ``fh``, and where its blob starts."""
        if fh.read(len(_MAGIC)) != _MAGIC:
            raise CacheCorrupt("bad magic")
        head = fh.read(_HEAD.size)
        if len(head) != _HEAD.size:
            raise CacheCorrupt("truncated header")
        digest, n = _HEAD.unpack(head)
        raw = fh.read(n)
        if len(raw) != n or hashlib.sha256(raw).digest() != digest:
            raise CacheCorrupt("index checksum mismatch")
        try:
            idx = json.loads(raw)
        except ValueError as e:
            raise CacheCorrupt(f"index unreadable: {e}") from None
        base = len(_MAGIC) + _HEAD.size + n
        if idx.get("format") != FORMAT_VERSION or idx.get("key") != key:
            raise CacheCorrupt("stale key")
        if os.fstat(fh.fileno()).st_size != base + idx["blob_size"]:
            raise CacheCorrupt("file size mismatch")
        return idx, base

    @classmethod
    def from_part(cls, part: dict, key: str) -> "_Store":
        """A store in memory holding one part (a closure)."""
        self = cls.__new__(cls)
        self.path, self.key, self.temporary = None, key, True
        index, blob = _merge([part], Path(), 0, key)
        self._load(index, io.BytesIO(bytes(blob)), 0)
        return self

    def _load(self, idx: dict, fh, base: int) -> None:
        self.api = frozenset(idx["api"])
        self.functions = idx["functions"]  # name -> [part, off, len, fns, globals, mds]
        self._segments = idx["segments"]
        self._md_stride, self._attr_stride = idx["md_stride"], idx["attr_stride"]
        self._fh, self._base = fh, base
        self._lock = threading.Lock()
        self.preamble = self._read(idx["preamble"])
        self.globals = {}  # name -> (part, line)
        for s, seg in enumerate(self._segments):
            for line in self._read(seg["globals"]).split(b"\n"):
                if line:
                    self.globals[_GLOBAL_REF.match(line).group(1).decode()] = (s, line)
        self._metadata = [None] * len(self._segments)
        if not self.temporary:
            stats["store_loads"] += 1

    def _read(self, where) -> bytes:
        off, n = where[0], where[1]
        if isinstance(self._fh, io.BufferedReader):
            # positional: a process forked from this one (a ProcessPoolExecutor's worker) shares
            # the file's offset, so seek-then-read would race with it
            data = os.pread(self._fh.fileno(), n, self._base + off)
        else:
            with self._lock:  # a closure's store, in memory
                self._fh.seek(self._base + off)
                data = self._fh.read(n)
        try:
            return zlib.decompress(data)
        except zlib.error as e:
            raise CacheCorrupt(f"piece unreadable: {e}") from None

    def metadata(self, part: int) -> dict:
        """The metadata nodes of ``part``, by number (read on first use)."""
        table = self._metadata[part]
        if table is None:
            table = {}
            for line in self._read(self._segments[part]["metadata"]).split(b"\n"):
                if line:
                    key_, _ = line.split(b" ", 1)
                    table[int(key_[1:])] = line
            self._metadata[part] = table
        return table

    def _renumber(self, text: bytes, part: int) -> bytes:
        return _renumber(text, part * self._md_stride, part * self._attr_stride)

    def instructions(self, name: str) -> int:
        """The number of instructions in the body of function ``name`` (its own: not those of
        the functions it calls), counted in its piece (one instruction a line)."""
        counts = self.__dict__.setdefault("_instructions", {})
        n = counts.get(name)
        if n is None:
            n = counts[name] = self._read(self.functions[name][1:3]).count(b"\n  ")
        return n

    def _header(self, name: str) -> bytes:
        """The first line of function ``name``'s definition, numbered as in :attr:`preamble`."""
        s, off, n = self.functions[name][:3]
        return self._renumber(self._read((off, n)).split(b"\n", 1)[0], s)

    @property
    def helpers(self) -> frozenset:
        """NVSHMEM's out-of-line helpers: the functions that are not API functions and that
        NVSHMEM marks ``noinline`` (its transport layer, ``nvshmemi_transfer_*``), which every
        kernel calling them would otherwise compile again."""
        found = self.__dict__.get("_helpers")
        if found is None:
            groups = noinline_groups(self.preamble)
            found = set()
            for name in self.functions:
                if name not in self.api:
                    group = re.search(rb"#(\d+)(?: [^#]*)?\{$", self._header(name))
                    if group is not None and group[1] in groups:
                        found.add(name)
            found = self.__dict__["_helpers"] = frozenset(found)
        return found

    def assemble(self, names, declare_exported: bool = False, declared=frozenset()) -> bytes:
        """LLVM assembly for the functions ``names`` (API functions or :attr:`helpers`),
        everything they refer to, and :data:`EXPORTED_GLOBALS` (``declare_exported``: as external
        declarations); the functions of ``declared`` they call are external declarations, their
        bodies left out."""
        missing = [n for n in names if n not in self.api and n not in self.helpers]
        if missing:
            raise KeyError(
                "not NVSHMEM device functions: " + ", ".join(sorted(missing))
            )
        declared = frozenset(declared) - frozenset(names)
        funcs, globs, mds, decls = set(), set(), set(), set()
        todo = [(True, n) for n in names]
        todo += [(False, g) for g in EXPORTED_GLOBALS if g in self.globals]
        while todo:
            is_fn, name = todo.pop()
            if is_fn and name in declared:
                decls.add(name)
            elif is_fn:
                if name not in funcs:
                    funcs.add(name)
                    s, _, _, f, g, m = self.functions[name]
                    todo += [(True, x) for x in f] + [(False, x) for x in g]
                    mds.update((s, x) for x in m)
            elif name not in globs:
                globs.add(name)
                s, line = self.globals[name]
                for ref in _GLOBAL_REF.findall(line):
                    r = ref.decode()
                    if r in self.functions or r in self.globals:
                        todo.append((r in self.functions, r))
                mds.update((s, int(x)) for x in _MD_REF.findall(line))
        md_todo = list(mds)
        mds = set()
        while md_todo:
            s, i = md_todo.pop()
            line = self.metadata(s).get(i)
            if line is None or (s, i) in mds:
                continue
            mds.add((s, i))
            md_todo.extend((s, int(x)) for x in _MD_REF.findall(line))
        parts = [self.preamble]
        lines = {g: self.globals[g][1] for g in globs}
        if declare_exported:
            lines.update((g, _declaration(lines[g])) for g in EXPORTED_GLOBALS if g in lines)
        parts += [self._renumber(lines[g], self.globals[g][0]) for g in sorted(globs)]
        parts += [function_declaration(self._header(f)) for f in sorted(decls)]
        for f in sorted(funcs):
            s, off, n = self.functions[f][:3]
            parts.append(self._renumber(self._read((off, n)), s))
        parts += [self._renumber(self.metadata(s)[i], s) for s, i in sorted(mds)]
        return b"\n".join(parts) + b"\n"


def _open_store(path: Path, key: str):
    try:
        return _Store(path, key)
    except (FileNotFoundError, CacheCorrupt):
        return None


# The cache's locks are ``flock``s: the kernel releases one when the last descriptor of its open
# file is closed, so a process that dies holding one (killed at any point of a build) leaves no
# lock behind, and nothing records a PID to check.  A process forked meanwhile would share it (its
# copy of the descriptor): a DataLoader's worker forked while a compile thread holds an object's
# lock would keep it for as long as it lives, also after this process released it or died, and
# every process waiting for that object would wait as long.  So the descriptors of the locks held
# are closed in a forked child at once (:func:`_after_fork_in_child`); a builder that is to hold a
# lock gets its descriptor passed explicitly (``pass_fds``: :func:`.store_build._start_builder`).
_held: set = set()  # descriptors of the locks this process holds (or waits for)
_held_lock = threading.Lock()


def _hold(fd: int) -> int:
    with _held_lock:
        _held.add(fd)
    return fd


def release(fd: int) -> None:
    """Close the descriptor ``fd`` of a lock (from :func:`try_lock`): the lock ends unless the
    descriptor was passed on to another process."""
    with _held_lock:
        _held.discard(fd)
        os.close(fd)


def _after_fork_in_child() -> None:
    for fd in _held:
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()
    _held_lock.release()  # taken before the fork (register_at_fork below), in this thread


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_held_lock.acquire, after_in_parent=_held_lock.release,
                        after_in_child=_after_fork_in_child)


def try_lock(path: Path, create: bool = True):
    """A descriptor of ``path`` holding an exclusive ``flock`` taken without waiting (give it to
    :func:`release` to release the lock), or None when another process holds it.  Raises
    :class:`OSError` where ``path`` cannot be opened (with ``create`` False: where it does not
    exist)."""
    fd = _hold(os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600))
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException as exc:
        release(fd)
        if isinstance(exc, BlockingIOError):
            return None
        raise
    return fd


class _file_lock:
    """An exclusive ``flock`` on ``path``; prints ``waiting`` (if given) when
    another process holds it.  A process that dies holding it releases it (see :data:`_held`)."""

    def __init__(self, path: Path, waiting: str | None = None):
        self.path, self.waiting = path, waiting

    def __enter__(self):
        self.fd = _hold(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return self
        try:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self.waiting:
                    print(self.waiting, file=sys.stderr, flush=True)
                fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            release(self.fd)
            raise
        return self

    def __exit__(self, *exc):
        release(self.fd)  # releases the flock


def remove_temporaries(path: Path) -> None:
    """Remove what :func:`write_atomically` left beside ``path`` in a process that died writing it
    (its temporary files: no reader ever opens them).  Call it holding ``path``'s lock: only the
    holder writes them."""
    for p in path.parent.glob(glob.escape(path.name) + ".*.tmp"):
        try:
            p.unlink()
        except OSError:
            pass


_ELF64 = struct.Struct("<16sHHIQQQIHHHHHH")


def whole_elf(path: Path) -> bool:
    """Whether ``path`` is a whole 64-bit ELF file (a cached object): its magic, and its program
    and section header tables within the file, where a file cut short (a crash of the machine
    before its data reached the disk) ends before its section headers; False where it is missing."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_ELF64.size)
            size = os.fstat(fh.fileno()).st_size
    except (FileNotFoundError, NotADirectoryError):
        return False
    if len(head) < _ELF64.size or head[:5] != b"\x7fELF\x02":
        return False
    _, _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = _ELF64.unpack(head)
    return phoff + phnum * phentsize <= size and shoff + shnum * shentsize <= size and shnum > 0


_BITCODE_MAGIC = b"BC\xc0\xde"


def whole_bitcode(path: Path) -> bool:
    """Whether ``path`` is a whole LLVM bitcode file (as ``as_bitcode`` writes it: raw, no wrapper):
    its magic, then top-level blocks whose lengths end exactly at its end (a file cut short ends
    within one); False where it is missing.  Reads a few bytes a block."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if fh.read(4) != _BITCODE_MAGIC:
                return False
            at = 4
            while at < size:
                # ENTER_SUBBLOCK (abbreviation id 1 in 2 bits), block id (vbr8), abbreviation width
                # (vbr4), aligned to 32 bits, then the block's length in 32-bit words
                fh.seek(at)
                head = fh.read(16)
                bits = int.from_bytes(head, "little")
                if len(head) < 8 or bits & 3 != 1:
                    return False
                pos = 2
                for width in (8, 4):
                    while True:  # a variable-width number: chunks of width - 1 bits, high bit = more
                        chunk = (bits >> pos) & ((1 << width) - 1)
                        pos += width
                        if not chunk >> (width - 1):
                            break
                        if pos > 96:
                            return False
                pos = (pos + 31) // 32 * 32
                if pos + 32 > len(head) * 8:
                    return False
                words = (bits >> pos) & 0xFFFFFFFF
                at += pos // 8 + 4 + 4 * words
            return at == size
    except (FileNotFoundError, NotADirectoryError):
        return False
