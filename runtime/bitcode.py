"""NVSHMEM device bitcode, prepared once and cached on disk.

NVSHMEM ships its device library as LLVM bitcode (``libnvshmem_device*.bc``)
written by a recent clang.  NVVM cannot read it, llvmlite >= 0.50 can, but
parsing the 54 MB sm_90 file takes 5-9 s -- far too slow to do per kernel.
Almost all of that size is the API itself: every one of the ~2700 exported
``nvshmem*`` functions carries its whole implementation inlined, so "pruning"
the file barely shrinks it.  What makes per-kernel linking fast is loading
*only the functions a kernel calls*.

So the bitcode is parsed once (per file, per llvmlite version) and split into
a *piece store* kept in a user-private cache directory:

* a preamble: data layout, triple, named types, declarations and attribute
  groups (``target-cpu``/``target-features`` removed, so that the code takes
  the PTX ISA version and SM of the kernel it is linked into);
* every global variable, every defined function and every metadata node as
  a separate piece of LLVM assembly, with its direct dependencies.

:func:`api_module` takes the transitive closure of the requested API names
(plus the state globals the host library looks up), assembles those pieces
and parses them (a few ms to a few hundred ms), memoised per process.

Public functions: :func:`api_module`, :func:`pruned_bitcode`,
:func:`api_names`, :func:`cache_dir`; constant :data:`EXPORTED_GLOBALS`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = [
    "EXPORTED_GLOBALS",
    "api_module",
    "api_names",
    "cache_dir",
    "pruned_bitcode",
    "store_path",
]

#: Bump when the on-disk layout or the way pieces are derived changes.
FORMAT_VERSION = 1

#: Device globals that the host library (``nvshmemx_culibrary_init``) looks up
#: by name in every loaded module; they must survive linking with external
#: linkage.  The ibgda/gpunetio ones exist only in some NVSHMEM versions.
EXPORTED_GLOBALS = (
    "nvshmemi_device_state_d",
    "nvshmemi_device_lib_version_d",
    "nvshmemi_ibgda_device_state_d",
    "nvshmemi_gpunetio_device_state_d",
)

_MAGIC = b"NVSHMEM-DSL-PIECES\0"
_HEAD = struct.Struct("<32sQ")  # sha256 of the JSON index, its length

# A global name as printed by LLVM: @foo, @"foo bar", or a numbered @12.
_GLOBAL_REF = re.compile(rb'@("(?:[^"\\]|\\.)*"|[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+)')
_MD_REF = re.compile(rb"!(\d+)")
_TARGET_ATTRS = re.compile(rb' ?"target-(?:cpu|features)"="[^"]*"')

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


def _candidate_lib_dirs() -> list[Path]:
    dirs = []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None:
        for loc in spec.submodule_search_locations or ():
            dirs.append(Path(loc) / "nvshmem" / "lib")
    home = os.environ.get("NVSHMEM_HOME")
    if home:
        dirs.append(Path(home) / "lib")
    return [d for d in dirs if d.is_dir()]


def _default_bitcode(arch) -> Path:
    """The NVSHMEM device bitcode to use for ``arch``.

    NVSHMEM >= 3.8 ships ``libnvshmem_device_sm_NN.bc``: take the highest NN
    not above ``arch``.  Older releases ship a single ``libnvshmem_device.bc``.
    """
    want = _arch_number(arch)
    for d in _candidate_lib_dirs():
        per_arch = []
        for p in d.glob("libnvshmem_device_sm_*.bc"):
            m = re.fullmatch(r"libnvshmem_device_sm_(\d+)\.bc", p.name)
            if m and int(m.group(1)) <= want:
                per_arch.append((int(m.group(1)), p))
        if per_arch:
            return max(per_arch)[1]
        single = d / "libnvshmem_device.bc"
        if single.is_file():
            return single
    raise FileNotFoundError(
        f"no NVSHMEM device bitcode for sm_{want} found (looked in "
        f"{[str(d) for d in _candidate_lib_dirs()] or 'nothing'}); install "
        "nvidia-nvshmem-cu12/cu13 or set NVSHMEM_HOME"
    )


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


# --------------------------------------------------------------------------
# Building the store


def _name_of(define_line: bytes) -> bytes:
    # nothing before the function's name contains an '@'
    return _GLOBAL_REF.search(define_line).group(1)


def _split(text: bytes):
    """Split printed LLVM assembly into preamble lines, globals, functions and
    metadata nodes.  Relies on the printer's layout: one top-level entity per
    line, function bodies between ``define ... {`` and a line ``}``."""
    preamble, globs, funcs, mds = [], {}, {}, {}
    pos, n = 0, len(text)
    while pos < n:
        eol = text.find(b"\n", pos)
        eol = n if eol < 0 else eol
        line = text[pos:eol]
        if line.startswith(b"define "):
            end = text.find(b"\n}\n", pos)
            end = n if end < 0 else end + 3
            funcs[_name_of(line)] = text[pos:end]
            pos = end
            continue
        if line.startswith(b"@"):
            globs[_GLOBAL_REF.match(line).group(1)] = line
        elif line.startswith(b"!") and line[1:2].isdigit():
            key, _ = line.split(b" ", 1)
            mds[int(key[1:])] = line
        elif line.startswith(b"attributes #"):
            preamble.append(_TARGET_ATTRS.sub(b"", line))
        elif line.startswith((b"target ", b"%", b"$", b"declare ", b"module asm")):
            preamble.append(line)
        # source_filename, comments, blank lines and named metadata are dropped
        pos = eol + 1
    return preamble, globs, funcs, mds


def _deps(text: bytes, globs, funcs):
    g, f = set(), set()
    for ref in _GLOBAL_REF.findall(text):
        if ref in funcs:
            f.add(ref)
        elif ref in globs:
            g.add(ref)
    return f, g, {int(x) for x in _MD_REF.findall(text)}


def _build(bc_path: Path, arch: int, out: Path, key: str) -> None:
    import llvmlite.binding as llvm

    t0 = time.perf_counter()
    print(
        f"nvshmem-dsl: preparing NVSHMEM bitcode for sm_{arch} (once) ...",
        file=sys.stderr,
        flush=True,
    )
    mod = llvm.parse_bitcode(bc_path.read_bytes())
    stats["bitcode_parses"] += 1
    api = sorted(
        f.name
        for f in mod.functions
        if not f.is_declaration
        and f.linkage == llvm.Linkage.external
        and f.name.startswith("nvshmem")
    )
    text = str(mod).encode()
    del mod
    preamble, globs, funcs, mds = _split(text)
    del text

    # zlib releases the GIL: compress the pieces on all cores.
    names = list(funcs)
    pieces = [funcs[n] for n in names] + [
        b"\n".join(preamble),
        b"\n".join(globs.values()),
        b"\n".join(mds[k] for k in sorted(mds)),
    ]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as ex:
        packed = list(ex.map(lambda data: zlib.compress(data, 6), pieces))
    blob, where = bytearray(), []
    for z in packed:
        where.append([len(blob), len(z)])
        blob += z

    fn_index = {}
    for i, name in enumerate(names):
        f, g, m = _deps(funcs[name], globs, funcs)
        f.discard(name)
        fn_index[name.decode()] = [
            *where[i],
            sorted(x.decode() for x in f),
            sorted(x.decode() for x in g),
            sorted(m),
        ]
    index = {
        "format": FORMAT_VERSION,
        "key": key,
        "arch": arch,
        "source": str(bc_path),
        "api": api,
        "preamble": where[-3],
        "globals": where[-2],
        "metadata": where[-1],
        "functions": fn_index,
    }
    index["blob_size"] = len(blob)
    raw = json.dumps(index, separators=(",", ":")).encode()

    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC)
            fh.write(_HEAD.pack(hashlib.sha256(raw).digest(), len(raw)))
            fh.write(raw)
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    print(
        f"nvshmem-dsl: NVSHMEM bitcode for sm_{arch} ready "
        f"({time.perf_counter() - t0:.1f} s, {len(api)} API functions)",
        file=sys.stderr,
        flush=True,
    )


# --------------------------------------------------------------------------
# Loading the store


class _Store:
    """A validated piece store, read lazily from its file."""

    def __init__(self, path: Path, key: str):
        self.path, self.key = path, key
        with open(path, "rb") as fh:
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
            self._base = len(_MAGIC) + _HEAD.size + n
            size = os.fstat(fh.fileno()).st_size
        if idx.get("format") != FORMAT_VERSION or idx.get("key") != key:
            raise CacheCorrupt("stale key")
        if size != self._base + idx["blob_size"]:
            raise CacheCorrupt("file size mismatch")
        self.api = frozenset(idx["api"])
        self.functions = idx["functions"]
        self._fh = open(path, "rb")
        self._lock = threading.Lock()
        self.preamble = self._read(idx["preamble"])
        self.globals = {
            _GLOBAL_REF.match(line).group(1).decode(): line
            for line in self._read(idx["globals"]).split(b"\n")
            if line
        }
        self.metadata = {}
        for line in self._read(idx["metadata"]).split(b"\n"):
            if line:
                key_, _ = line.split(b" ", 1)
                self.metadata[int(key_[1:])] = line
        stats["store_loads"] += 1

    def _read(self, where) -> bytes:
        off, n = where[0], where[1]
        with self._lock:
            self._fh.seek(self._base + off)
            data = self._fh.read(n)
        try:
            return zlib.decompress(data)
        except zlib.error as e:
            raise CacheCorrupt(f"piece unreadable: {e}") from None

    def assemble(self, names) -> bytes:
        """LLVM assembly for the functions ``names``, everything they refer
        to, and :data:`EXPORTED_GLOBALS`."""
        missing = [n for n in names if n not in self.api]
        if missing:
            raise KeyError(
                "not NVSHMEM device functions: " + ", ".join(sorted(missing))
            )
        funcs, globs, mds = set(), set(), set()
        todo = [(True, n) for n in names]
        todo += [(False, g) for g in EXPORTED_GLOBALS if g in self.globals]
        while todo:
            is_fn, name = todo.pop()
            if is_fn:
                if name not in funcs:
                    funcs.add(name)
                    _, _, f, g, m = self.functions[name]
                    todo += [(True, x) for x in f] + [(False, x) for x in g]
                    mds.update(m)
            elif name not in globs:
                globs.add(name)
                line = self.globals[name]
                for ref in _GLOBAL_REF.findall(line):
                    r = ref.decode()
                    if r in self.functions or r in self.globals:
                        todo.append((r in self.functions, r))
                mds.update(int(x) for x in _MD_REF.findall(line))
        md_todo = list(mds)
        mds = set()
        while md_todo:
            i = md_todo.pop()
            if i in mds or i not in self.metadata:
                continue
            mds.add(i)
            md_todo.extend(int(x) for x in _MD_REF.findall(self.metadata[i]))
        parts = [self.preamble]
        parts += [self.globals[g] for g in sorted(globs)]
        parts += [self._read(self.functions[f]) for f in sorted(funcs)]
        parts += [self.metadata[i] for i in sorted(mds)]
        return b"\n".join(parts) + b"\n"


_stores: dict[str, _Store] = {}
_subsets: OrderedDict = OrderedDict()  # (store key, names) -> ModuleRef, LRU
_MAX_SUBSETS = 64
_lock = threading.RLock()


def _store(bc_path, arch) -> _Store:
    bc_path = Path(bc_path) if bc_path else _default_bitcode(arch)
    key = _cache_key(bc_path)
    with _lock:
        st = _stores.get(key)
        if st is not None:
            return st
        st = _open_or_build(bc_path, _arch_number(arch), _store_file(bc_path, key), key)
        _stores[key] = st
        return st


def _open_or_build(bc_path: Path, arch: int, path: Path, key: str) -> _Store:
    try:
        return _Store(path, key)
    except (FileNotFoundError, CacheCorrupt):
        pass
    # Serialise builders across processes; re-check once we hold the lock.
    with _file_lock(path.with_suffix(".lock")):
        try:
            return _Store(path, key)
        except (FileNotFoundError, CacheCorrupt):
            _build(bc_path, arch, path, key)
    return _Store(path, key)


class _file_lock:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - not POSIX
            pass
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # releases the flock


def _drop_store(bc_path, arch) -> None:
    """Forget a store found corrupt, and delete its file unless another
    process has already replaced it."""
    bc_path = Path(bc_path) if bc_path else _default_bitcode(arch)
    key = _cache_key(bc_path)
    with _lock:
        st = _stores.pop(key, None)
        for k in [k for k in _subsets if k[0] == key]:
            del _subsets[k]
        if st is None:
            return
        try:
            if os.stat(st.path).st_ino == os.fstat(st._fh.fileno()).st_ino:
                st.path.unlink()
        except FileNotFoundError:
            pass
        st._fh.close()


# --------------------------------------------------------------------------
# Public API


def api_names(arch=90, bc_path=None) -> frozenset:
    """All exported NVSHMEM device functions of the bitcode for ``arch``."""
    return _store(bc_path, arch).api


def api_module(names, arch=90, bc_path=None):
    """A fresh :class:`llvmlite.binding.ModuleRef` holding the NVSHMEM device
    functions ``names``, everything they call, and :data:`EXPORTED_GLOBALS`.

    Functions and globals keep the linkage they have in NVSHMEM (the API is
    external); the caller links the module in and internalizes.  The caller
    owns the returned module (``link_in`` may consume it).  Raises
    :class:`KeyError` for names that are not NVSHMEM device functions.
    """
    import llvmlite.binding as llvm

    names = tuple(sorted(set(names)))
    for attempt in (0, 1):
        st = _store(bc_path, arch)
        key = (st.key, names)
        with _lock:
            mod = _subsets.get(key)
            if mod is not None:
                _subsets.move_to_end(key)
                return mod.clone()
        try:
            mod = llvm.parse_assembly(st.assemble(names).decode())
        except (CacheCorrupt, RuntimeError):
            if attempt:
                raise
            _drop_store(bc_path, arch)  # rebuilt by the next _store()
            continue
        stats["subset_parses"] += 1
        with _lock:
            _subsets[key] = mod
            while len(_subsets) > _MAX_SUBSETS:
                _subsets.popitem(last=False)
        return mod.clone()
    raise AssertionError("unreachable")


def pruned_bitcode(bc_path=None, arch=90, names=None) -> bytes:
    """Bitcode of the NVSHMEM device functions ``names`` (default: the whole
    API) with their dependencies, target attributes removed.  The whole API is
    slow (hundreds of MB of IR); pass the names you call."""
    if names is None:
        names = api_names(arch, bc_path)
    return api_module(names, arch, bc_path).as_bitcode()


# --------------------------------------------------------------------------
# A copy that libNVVM accepts (for the CuTe DSL, which links bitcode through NVVM)

_SECTION = re.compile(r' section "\.text\.[^"]*"')


def nvvm_bitcode(bc_path) -> Path:
    """``bc_path`` itself, or a cached copy of it that libNVVM accepts.

    NVSHMEM 3.4's single ``libnvshmem_device.bc`` puts some functions in an
    explicit ``.text.compute`` section, which libNVVM rejects ("Explicit section
    marker ... is not allowed"); 3.8's per-arch files have none.  The first call
    per file parses it once (seconds) and, if it has such markers, writes a copy
    without them to the cache directory (atomically); later calls only stat.
    """
    import llvmlite.binding as llvm

    bc_path = Path(bc_path)
    key = _cache_key(bc_path)
    copy = cache_dir() / f"{bc_path.stem}-{key[:24]}.nvvm.bc"
    same = copy.with_suffix(".same")
    if copy.exists():
        return copy
    if same.exists():
        return bc_path
    with _file_lock(copy.with_suffix(".lock")):
        if copy.exists() or same.exists():
            return copy if copy.exists() else bc_path
        text = str(llvm.parse_bitcode(bc_path.read_bytes()))
        stripped, n = _SECTION.subn("", text)
        if n == 0:
            same.touch(mode=0o600)
            return bc_path
        print(f"nvshmem-dsl: preparing {bc_path.name} for NVVM (once) ...", file=sys.stderr, flush=True)
        data = llvm.parse_assembly(stripped).as_bitcode()
        fd, tmp = tempfile.mkstemp(dir=copy.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, copy)
        return copy
