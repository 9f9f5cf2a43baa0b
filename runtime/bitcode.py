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

Building the store takes a few seconds of several CPUs: worker processes
each parse the bodies of their share of the functions (and the few internal
ones) and print them, one per CPU up to 8, fewer when memory is short
(:func:`_store_part`).  A process that finds no store starts that build in a
process of its own and meanwhile gets the functions each kernel calls from a
*closure* it extracts itself (the same IR, from a parse of just the function
bodies it needs: :func:`_closure`, :mod:`nvshmem_dsl.bitcode_bodies`), and
waits for the build when it exits.  :func:`prefetch` starts the build before
any kernel is linked.  Another process finding the store being built
does the same or,
when it needs the whole store (:func:`api_names`), waits for it (a file
lock).  ``$NVSHMEM_DSL_BUILD_JOBS`` sets the number of build processes; ``1``
builds in the calling process, without closures.

:func:`api_module` takes the transitive closure of the requested API names
(plus the state globals the host library looks up), assembles those pieces
and parses them (a few ms to a few hundred ms), memoised per process.

Public functions: :func:`api_module`, :func:`prefetch`, :func:`pruned_bitcode`,
:func:`api_names`, :func:`body_sizes`, :func:`cache_dir`; constant :data:`EXPORTED_GLOBALS`.
"""

from __future__ import annotations

import atexit
import glob
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import struct
import subprocess
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
    "body_sizes",
    "cache_dir",
    "prefetch",
    "pruned_bitcode",
    "store_path",
]

#: Bump when the on-disk layout or the way pieces are derived changes.
FORMAT_VERSION = 3

#: Device globals that the host library (``nvshmemx_culibrary_init``) looks up
#: by name in every loaded module; they must survive linking with external
#: linkage.  The ibgda/gpunetio ones exist only in some NVSHMEM versions.
#: NVSHMEM's device state, which nvshmemx_cumodule_init/culibrary_init fill in; a module
#: without it calls no NVSHMEM function.
DEVICE_STATE = "nvshmemi_device_state_d"

EXPORTED_GLOBALS = (
    DEVICE_STATE,
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


def _default_bitcode(arch) -> Path:
    """The NVSHMEM device bitcode to use for ``arch``: that of the installation the host
    library comes from (:func:`nvshmem_dsl._libs.bitcode_path`), so that device code and host
    library are always one NVSHMEM.  Raises :class:`FileNotFoundError` when there is none."""
    from ._libs import bitcode_path  # imported here: build workers load this file on its own
    from .errors import NvshmemNotFoundError

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
#
# Parsing the bitcode (4-7 s) and printing it as text (5-13 s) are single calls
# into LLVM; the rest is cheap.  So the store is built by several worker
# processes at once (*parts*): each parses the bitcode (only its own bodies and
# the internal ones: :func:`_store_part`), makes the externally visible
# definitions that are not its own (a sorted list dealt out round-robin)
# internal, lets GlobalDCE drop what its own ones do not use, gives the
# survivors their linkage back, and prints, splits and compresses what is left.  Every externally visible function is taken from the part that
# owns it; internal helpers and globals, which several parts may print, from
# the first.  Parts number their metadata and attribute groups independently:
# the store keeps each part's metadata and :meth:`_Store.assemble` renumbers
# part ``s``'s ``!N`` and ``#N`` to ``N + s * stride`` (part 0 keeps its own).
#
# The same machinery extracts a *closure*: a part that owns only the functions
# one kernel calls, from a parse of their bodies (:func:`_closure`).  It is what
# every kernel links while the store is still being built (see
# :func:`_first_store`).


def _name_of(define_line: bytes) -> bytes:
    # nothing before the function's name contains an '@'
    return _GLOBAL_REF.search(define_line).group(1)


def _unquote(name: bytes) -> str:
    """The symbol of a printed global name (``"a b"`` -> ``a b``)."""
    if name[:1] != b'"':
        return name.decode()
    body = re.sub(rb"\\([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), name[1:-1])
    return body.decode(errors="surrogateescape")


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


def _deps(text: bytes, globs, funcs, elsewhere=frozenset()):
    """The functions, globals and metadata ``text`` refers to; ``elsewhere``: the names of the
    functions defined in the file but only declared in this part (see :func:`_store_part`)."""
    g, f = set(), set()
    for ref in _GLOBAL_REF.findall(text):
        if ref in funcs or (elsewhere and _unquote(ref) in elsewhere):
            f.add(ref)
        elif ref in globs:
            g.add(ref)
    return f, g, {int(x) for x in _MD_REF.findall(text)}


def _global_dce(mod, prototypes: bool = False) -> None:
    """GlobalDCE on ``mod``; ``prototypes``: unused declarations go too."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    tm = llvm.Target.from_triple(mod.triple or "nvptx64-nvidia-cuda").create_target_machine()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(0))
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_global_dead_code_eliminate_pass()
    if prototypes:
        mpm.add_strip_dead_prototype_pass()
    mpm.run(mod, pb)


#: zlib level of the pieces: 1 packs the IR text about 4.5:1 at three times
#: the speed of level 6 (5:1); reading is as fast either way.
_ZLEVEL = 1
_ATTR_DEF = re.compile(rb"attributes #(\d+) ")
# what `_renumber` rewrites: !N and #N outside quoted strings
_RENUMBER = re.compile(rb'"[^"]*"|([!#])(\d+)')


def _renumber(text: bytes, md_off: int, attr_off: int) -> bytes:
    """``text`` with metadata ``!N`` -> ``!(N + md_off)`` and attribute groups
    ``#N`` -> ``#(N + attr_off)`` (quoted strings left alone)."""
    if not (md_off or attr_off):
        return text

    def sub(m):
        kind = m.group(1)
        if kind is None:
            return m.group(0)
        return kind + str(int(m.group(2)) + (md_off if kind == b"!" else attr_off)).encode()

    return _RENUMBER.sub(sub, text)


def _parse(bc_path: Path, data: bytes | None = None):
    """``(context, module)``: the bitcode ``bc_path`` (or ``data``, bitcode made from it) parsed
    in an LLVM context of its own, freed with it, in which no type of another module can make
    LLVM rename NVSHMEM's types (all parts must print the same names)."""
    import llvmlite.binding as llvm

    ctx = llvm.create_context()
    return ctx, llvm.parse_bitcode(bc_path.read_bytes() if data is None else data, context=ctx)


def _part(bc_path: Path, part: int, parts: int, threads: int = 1, own=None, parsed=None,
          prototypes: bool = False, listing=None) -> dict:
    """Part ``part`` of ``parts`` of the store for ``bc_path`` (see above); with
    ``own`` (names), the part that owns just those functions (a closure).  ``parsed``: the
    bitcode as :func:`_parse` returns it (this function consumes it), if already parsed;
    ``prototypes``: drop the declarations nothing uses (those of the bodies not parsed);
    ``listing``: ``(api, public)`` names of the whole file, when ``parsed`` holds only some of
    its bodies (:func:`_store_part`)."""
    import llvmlite.binding as llvm

    ctx, mod = parsed or _parse(bc_path)
    local = (llvm.Linkage.internal, llvm.Linkage.private)
    api, defined = [], {}
    for f in mod.functions:
        if not f.is_declaration and f.linkage not in local:
            defined[f.name] = f
            if f.linkage == llvm.Linkage.external and f.name.startswith("nvshmem"):
                api.append(f.name)
    api, public = (api, set(defined)) if listing is None else listing
    mine = set(sorted(public)[part::parts]) if own is None else set(own) & public
    changed = {}
    for name, f in defined.items():
        if name not in mine:
            changed[name] = (f.linkage, f.visibility)
            f.linkage = "internal"
    del defined  # drop the ValueRefs: GlobalDCE deletes functions
    if changed or prototypes:
        _global_dce(mod, prototypes)
        for f in mod.functions:  # the survivors print as they are in NVSHMEM
            old = changed.get(f.name)
            if old is not None:
                f.linkage, f.visibility = old
    text = str(mod).encode()
    mod.close()
    ctx.close()
    preamble, globs, funcs, mds = _split(text)
    del text
    # a part of the store keeps its own functions and the internal ones; a
    # closure all it printed (the others' linkage is restored above)
    names = [n for n in funcs
             if own is not None or _unquote(n) in mine or _unquote(n) not in public]
    if sum(_unquote(n) in mine for n in names) != len(mine):
        raise RuntimeError(f"part {part}/{parts}: some of its own functions were not printed")
    sources = [funcs[n] for n in names]
    sources.append(b"\n".join(mds[k] for k in sorted(mds)))
    if threads > 1:  # zlib releases the GIL
        with ThreadPoolExecutor(max_workers=threads) as ex:
            packed = list(ex.map(lambda data: zlib.compress(data, _ZLEVEL), sources))
    else:
        packed = [zlib.compress(data, _ZLEVEL) for data in sources]
    blob, fn_index = bytearray(), {}
    elsewhere = public if listing is not None else frozenset()
    for name, z in zip(names, packed):
        f, g, m = _deps(funcs[name], globs, funcs, elsewhere)
        f.discard(name)
        fn_index[name.decode()] = [
            len(blob),
            len(z),
            sorted(x.decode() for x in f),
            sorted(x.decode() for x in g),
            sorted(m),
        ]
        blob += z
    attrs = [int(m.group(1)) for m in map(_ATTR_DEF.match, preamble) if m]
    return {
        "api": sorted(api),
        "public": len(public),
        "preamble": preamble,
        "globals": {k.decode(): v for k, v in globs.items()},
        "metadata": packed[-1],
        "md_max": max(mds, default=0),
        "attr_max": max(attrs, default=0),
        "functions": fn_index,
        "blob": bytes(blob),
    }


_listed: dict = {}  # store key -> bitcode_bodies.functions() of its file, for _closure


def _api_of(listed) -> set:
    """NVSHMEM's API among :func:`bitcode_bodies.functions` ``listed``: external definitions
    named ``nvshmem*`` (as :func:`_part` finds them in a parsed module)."""
    return {f.name for f in listed if f.has_body and f.external and f.name.startswith("nvshmem")}


def _store_part(bc_path: Path, part: int, parts: int, threads: int = 1) -> dict:
    """Part ``part`` of ``parts`` of the store (:func:`_part`), from a parse of the bodies it
    prints: its own functions and every internal one.  The functions it calls that other parts
    own are declarations here; they are its dependencies all the same, and the merged preamble
    leaves out their declarations.  A file :mod:`~nvshmem_dsl.bitcode_bodies` does not read is
    parsed whole."""
    bodies = _bodies_module()
    data = bc_path.read_bytes()
    try:
        listed = bodies.functions(data)
        public = {f.name for f in listed if f.has_body and not f.local}
        api = sorted(_api_of(listed))
        keep = set(sorted(public)[part::parts]) | {f.name for f in listed if f.has_body and f.local}
        parsed = _parse(bc_path, bodies.keep_bodies(data, keep, listed))
    except bodies.BitcodeLayoutError:
        return _part(bc_path, part, parts, threads)
    return _part(bc_path, part, parts, threads, parsed=parsed, prototypes=True, listing=(api, public))


def _bodies_module():
    """:mod:`nvshmem_dsl.bitcode_bodies`, also in a build worker, which loads this file outside
    the package (its neighbour, by path)."""
    if __package__:
        from . import bitcode_bodies

        return bitcode_bodies
    import importlib.util

    name = "_nvshmem_dsl_bitcode_bodies"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("bitcode_bodies.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
    return module


def _closure(bc_path: Path, names) -> dict:
    """The closure of ``names`` (:func:`_part` with ``own``), from a parse of the function bodies
    it needs only (:mod:`nvshmem_dsl.bitcode_bodies`): ``names`` and every function that is not
    an API function, then the API functions those call, until nothing is missing.  Almost all of
    NVSHMEM's bitcode is API bodies: this parse is a few percent of the whole file's
    (tests/gpu/records/2026-11-22/closure-parse.txt).  A file laid out in a way
    :mod:`~nvshmem_dsl.bitcode_bodies` does not read is parsed whole."""
    bitcode_bodies = _bodies_module()
    data = bc_path.read_bytes()
    key = _cache_key(bc_path)
    try:
        fns = _listed.get(key) or _listed.setdefault(key, bitcode_bodies.functions(data))
        api = _api_of(fns)
        keep = set(names) | {f.name for f in fns if f.has_body and f.name not in api}
        while True:
            bodies = bitcode_bodies.keep_bodies(data, keep, fns)
            part = _part(bc_path, 0, 1, 1, own=names, parsed=_parse(bc_path, bodies), prototypes=True)
            called = {_unquote(_name_of(line)) for line in part["preamble"] if line.startswith(b"declare ")}
            missing = (called & api) - keep
            if not missing:
                return part
            keep |= missing
    except bitcode_bodies.BitcodeLayoutError:
        try:
            return _part(bc_path, 0, 1, 1, own=names)
        finally:
            _release_heap()


def _merge_preambles(parts, attr_stride: int, defined=frozenset()) -> bytes:
    """One preamble for all parts: the first part's target lines, every named
    type, comdat and declaration once (none of a function in ``defined``: a part
    parsed without a body another part prints), and every part's attribute groups
    (renumbered like the part's functions)."""
    head, types, decls, attrs = [], {}, {}, []
    for s, part in enumerate(parts):
        for line in part["preamble"]:
            if line.startswith((b"target ", b"module asm")):
                if s == 0:
                    head.append(line)
            elif line.startswith(b"attributes #"):
                attrs.append(_renumber(line, 0, s * attr_stride))
            elif line.startswith(b"declare "):
                if _unquote(_name_of(line)) not in defined:
                    decls.setdefault(_name_of(line), _renumber(line, 0, s * attr_stride))
            else:  # %type = ..., $comdat = ...
                types.setdefault(line.split(b" = ", 1)[0], line)
    return b"\n".join(head + list(types.values()) + list(decls.values()) + attrs)


def _merge(parts, bc_path: Path, arch: int, key: str):
    """The store's index and blob, from its parts."""
    if any(p["api"] != parts[0]["api"] or p["public"] != parts[0]["public"] for p in parts):
        raise RuntimeError("the parts of the NVSHMEM bitcode disagree")
    md_stride = 10 ** len(str(max(p["md_max"] for p in parts) + 1))
    attr_stride = 10 ** len(str(max(p["attr_max"] for p in parts) + 1))
    blob = bytearray()

    def put(data: bytes) -> list:
        blob.extend(data)
        return [len(blob) - len(data), len(data)]

    functions, seen, segments = {}, set(), []
    for s, part in enumerate(parts):
        pb = part["blob"]
        for name, (off, n, f, g, m) in part["functions"].items():
            if name not in functions:
                functions[name] = [s, *put(pb[off:off + n]), f, g, m]
        lines = [line for name, line in part["globals"].items() if name not in seen]
        seen.update(part["globals"])
        segments.append({
            "globals": put(zlib.compress(b"\n".join(lines), _ZLEVEL)),
            "metadata": put(part["metadata"]),
        })
    preamble = put(zlib.compress(_merge_preambles(parts, attr_stride, set(functions)), _ZLEVEL))
    index = {
        "format": FORMAT_VERSION,
        "key": key,
        "arch": arch,
        "source": str(bc_path),
        "api": parts[0]["api"],
        "preamble": preamble,
        "md_stride": md_stride,
        "attr_stride": attr_stride,
        "segments": segments,
        "functions": functions,
        "blob_size": len(blob),
    }
    return index, blob


def _write_store(out: Path, index: dict, blob) -> None:
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


# Worker processes run `python -S -c _WORKER_MAIN ...`: this file loaded by
# path, so that neither the nvshmem_dsl package nor the user's __main__ is
# imported, with the parent's sys.path.
_WORKER_MAIN = (
    "import importlib.util, json, sys\n"
    "sys.path[:] = json.loads(sys.argv[1])\n"
    "spec = importlib.util.spec_from_file_location('_nvshmem_dsl_bitcode_worker', sys.argv[2])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(mod)\n"
    "mod._worker_main(sys.argv[3:])\n"
)

#: Most part processes a build starts, and the smallest bitcode worth them.
_MAX_JOBS = 8
_PARALLEL_MIN_BYTES = 4 << 20
#: Memory a part needs, per byte of bitcode (~1.6 GB for the 54 MB sm_90 file).
_BYTES_PER_BC_BYTE = 40


class _WorkerFailed(RuntimeError):
    pass


def _worker_main(argv) -> None:
    what, *args = argv
    if what == "part":  # bc_path part parts threads out
        bc_path, part, parts, threads, out = args
        data = _store_part(Path(bc_path), int(part), int(parts), int(threads))
        with open(out + ".tmp", "wb") as fh:
            pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(out + ".tmp", out)
    elif what == "build":  # bc_path arch out key; holds the store's lock (inherited)
        bc_path, arch, out, key = args
        _build(Path(bc_path), int(arch), Path(out), key, side=True)
    else:
        raise SystemExit(f"unknown worker command {what!r}")


def _spawn(args, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-S", "-c", _WORKER_MAIN, json.dumps(sys.path),
         os.path.abspath(__file__), *map(str, args)],
        stdin=subprocess.DEVNULL, **kw,
    )


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _mem_available():
    """Bytes of memory this process may still use, or None if unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    try:  # cgroup v2 limit
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            free = int(limit) - used
            avail = free if avail is None else min(avail, free)
    except (OSError, ValueError):
        pass
    return avail


def _per_process_bytes(bc_path: Path) -> int:
    return _BYTES_PER_BC_BYTE * bc_path.stat().st_size


def _can_spawn(bc_path: Path) -> bool:
    return (bool(sys.executable) and os.path.isfile(__file__)
            and bc_path.stat().st_size >= _PARALLEL_MIN_BYTES)


def _env_jobs():
    try:
        return max(1, int(os.environ.get("NVSHMEM_DSL_BUILD_JOBS", "").strip()))
    except ValueError:
        return None


def _build_jobs(bc_path: Path, side: bool = False) -> int:
    """How many processes build the store for ``bc_path``:
    ``$NVSHMEM_DSL_BUILD_JOBS``, else one per CPU (at most :data:`_MAX_JOBS`;
    one CPU left for closures when ``side``) as far as the available memory
    allows; 1 (the building process itself) for small files."""
    env = _env_jobs()
    if env is not None:
        return env
    if not _can_spawn(bc_path):
        return 1
    jobs = min(_cpus() - side, _MAX_JOBS)
    avail = _mem_available()
    if avail is not None:
        jobs = min(jobs, avail // _per_process_bytes(bc_path) - side)
    return max(1, int(jobs))


def _side_builds(bc_path: Path) -> bool:
    """Whether a missing store is built by a process of its own while the
    kernels that need it now link closures extracted meanwhile: with
    ``NVSHMEM_DSL_BUILD_JOBS`` > 1, or, by default, for files worth it with two
    CPUs and the memory for two processes (``NVSHMEM_DSL_BUILD_JOBS=1``:
    never; everything in the calling process)."""
    try:
        import fcntl  # noqa: F401  (the builder holds the store's lock)
    except ImportError:  # pragma: no cover - not POSIX
        return False
    env = _env_jobs()
    if env is not None:
        return env > 1 and bool(sys.executable) and os.path.isfile(__file__)
    if not _can_spawn(bc_path) or _cpus() < 2:
        return False
    avail = _mem_available()
    return avail is None or avail >= 2 * _per_process_bytes(bc_path)


def _run_parts(bc_path: Path, tmpdir: Path, parts: int, threads: int) -> list:
    """The ``parts`` parts of the store for ``bc_path``, built by as many
    processes at once (working in ``tmpdir``)."""
    procs = []
    try:
        for i in range(parts):
            with open(tmpdir / f"part{i}.log", "wb") as log:
                procs.append(_spawn(
                    ["part", bc_path, i, parts, threads, tmpdir / f"part{i}"],
                    stdout=log, stderr=subprocess.STDOUT,
                ))
        results = []
        for i, p in enumerate(procs):
            rc = p.wait()
            if rc != 0:
                log = (tmpdir / f"part{i}.log").read_bytes()[-1500:].decode(errors="replace")
                raise _WorkerFailed(f"part {i} exited with status {rc}: {log.strip()}")
            with open(tmpdir / f"part{i}", "rb") as fh:
                results.append(pickle.load(fh))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _remove_leftovers(out: Path) -> None:
    """Temporary files of builds of ``out`` that died (call with the lock held),
    and closure folders older than an hour."""
    for p in out.parent.glob(glob.escape(out.name) + ".build-*"):
        shutil.rmtree(p, ignore_errors=True)
    for p in out.parent.glob(glob.escape(out.name) + "*.tmp"):
        try:
            p.unlink()
        except OSError:
            pass
    for p in out.parent.glob(glob.escape(out.name) + ".closure-*"):
        try:
            if time.time() - p.stat().st_mtime > 3600:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def _build(bc_path: Path, arch: int, out: Path, key: str, side: bool = False) -> None:
    """Build the store ``out`` (the caller holds its lock); ``side``: in a
    process of its own, with closures being extracted beside it."""
    t0 = time.perf_counter()
    _remove_leftovers(out)
    jobs = _build_jobs(bc_path, side)
    how = f" with {jobs} processes" if jobs > 1 else ""
    print(
        f"nvshmem-dsl: preparing NVSHMEM bitcode for sm_{arch} (once){how} ...",
        file=sys.stderr,
        flush=True,
    )
    stats["bitcode_parses"] += 1
    parts = None
    if jobs > 1:
        tmpdir = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".build-"))
        threads = max(1, _cpus() // jobs)
        try:
            parts = _run_parts(bc_path, tmpdir, jobs, threads)
        except (OSError, _WorkerFailed, pickle.UnpicklingError, EOFError) as e:
            print(
                f"nvshmem-dsl: preparing in {jobs} processes failed ({e}); "
                "preparing in this process ...",
                file=sys.stderr,
                flush=True,
            )
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
    if parts is None:
        parts = [_part(bc_path, 0, 1, threads=_cpus())]
    index, blob = _merge(parts, bc_path, arch, key)
    del parts
    _write_store(out, index, blob)
    print(
        f"nvshmem-dsl: NVSHMEM bitcode for sm_{arch} ready "
        f"({time.perf_counter() - t0:.1f} s, {len(index['api'])} API functions)",
        file=sys.stderr,
        flush=True,
    )


# --------------------------------------------------------------------------
# Loading the store


# A global variable's definition: its name, what declares it (address space, `constant`/`global`,
# type: a named or a first-class one) and its alignment; the initializer between them goes.
_GLOBAL_DEFINITION = re.compile(
    rb'^(@[\w.$]+) = (?:dso_local )?((?:addrspace\(\d+\) )?(?:externally_initialized )?'
    rb'(?:constant|global) (?:%[\w.$]+|[a-z]\w*)) .*?((?:, align \d+)?)$')


def _declaration(line: bytes) -> bytes:
    """The external declaration of the global variable defined on ``line``, e.g. the device state
    for code linked beside a module that defines it (:func:`nvshmem_dsl.outline.objects`)."""
    m = _GLOBAL_DEFINITION.match(line)
    if m is None:
        raise ValueError(f"cannot declare the NVSHMEM global {line[:120]!r}")
    return m[1] + b" = external " + m[2] + m[3]


class _Store:
    """A validated piece store, read lazily from its file (or, for a closure,
    from memory: :meth:`from_part`)."""

    temporary = False

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
            base = len(_MAGIC) + _HEAD.size + n
            size = os.fstat(fh.fileno()).st_size
        if idx.get("format") != FORMAT_VERSION or idx.get("key") != key:
            raise CacheCorrupt("stale key")
        if size != base + idx["blob_size"]:
            raise CacheCorrupt("file size mismatch")
        self._load(idx, open(path, "rb"), base)

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
        with self._lock:
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

    def assemble(self, names, declare_exported: bool = False) -> bytes:
        """LLVM assembly for the functions ``names``, everything they refer
        to, and :data:`EXPORTED_GLOBALS` (``declare_exported``: as external declarations)."""
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
        for f in sorted(funcs):
            s, off, n = self.functions[f][:3]
            parts.append(self._renumber(self._read((off, n)), s))
        parts += [self._renumber(self.metadata(s)[i], s) for s, i in sorted(mds)]
        return b"\n".join(parts) + b"\n"


_stores: dict[str, _Store] = {}
_subsets: OrderedDict = OrderedDict()  # (store key, names, rewrite mode, unswitch, declare_exported) -> ModuleRef, LRU
_MAX_SUBSETS = 64
_closures: dict = {}  # store key -> the last closures extracted while its store is being built
_MAX_CLOSURES = 4
_lock = threading.RLock()
_builders: list = []  # build processes this process started (waited for at exit)


def _open_store(path: Path, key: str):
    try:
        return _Store(path, key)
    except (FileNotFoundError, CacheCorrupt):
        return None


def _store(bc_path, arch) -> _Store:
    """The store for ``bc_path`` (default: the bitcode for ``arch``), built
    first if need be."""
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
    st = _open_store(path, key)
    if st is not None:
        return st
    started = _start_builder(bc_path, arch, path, key)
    # Serialise builders across processes (two PEs starting at once: one
    # builds, the other waits for it); re-check once we hold the lock.
    waiting = None if started else (
        f"nvshmem-dsl: waiting for another process preparing NVSHMEM bitcode for sm_{arch} ...")
    with _file_lock(path.with_suffix(".lock"), waiting):
        st = _open_store(path, key)
        if st is not None:
            return st
        _build(bc_path, arch, path, key)  # here: none started, or it failed
    return _Store(path, key)


def _start_builder(bc_path: Path, arch: int, path: Path, key: str) -> bool:
    """Start a process that builds the store, unless one is at it or the store
    is small enough to build here; True if one was started.  The builder
    inherits the store's lock, taken here, and holds it until it is done."""
    if not _side_builds(bc_path):
        return False
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return False
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another process is building it
        if _open_store(path, key) is not None:
            return False
        proc = _spawn(["build", bc_path, arch, path, key], pass_fds=(fd,),
                      stdout=subprocess.DEVNULL)  # stderr: this one's, for its progress
    except OSError:
        return False
    finally:
        os.close(fd)  # the builder's copy keeps the lock
    with _lock:
        if not _builders:
            atexit.register(_wait_for_builders)
        _builders.append(proc)
    return True


def _wait_for_builders() -> None:
    """At exit: let the store builds this process started finish (they hold
    its stderr and write the cache the next process reads)."""
    for proc in _builders:
        if proc.poll() is None:
            print("nvshmem-dsl: waiting for the NVSHMEM bitcode cache to be written ...",
                  file=sys.stderr, flush=True)
            try:
                proc.wait()
            except KeyboardInterrupt:
                proc.kill()
                raise


def _first_store(names, bc_path: Path, arch, key: str) -> _Store:
    """A store that has ``names``: the cached one; or, while the cache is being built by
    processes of their own (started here if need be), a closure of ``names`` extracted here
    (:func:`_closure`: a parse of the few function bodies it needs, well under a second), for
    this kernel and for each one after it until the store is there."""
    path = _store_file(bc_path, key)
    st = _open_store(path, key)
    if st is not None:
        with _lock:
            _closures.pop(key, None)
            return _stores.setdefault(key, st)
    arch = _arch_number(arch)
    if not _side_builds(bc_path):
        return _store(bc_path, arch)
    _start_builder(bc_path, arch, path, key)
    with _lock:  # a closure extracted for a kernel serves each subset of it (body_sizes, then api_module)
        for st in _closures.get(key, ()):
            if set(names) <= st.api:
                return st
    try:
        part = _closure(bc_path, sorted(names))
    except (OSError, RuntimeError):
        return _store(bc_path, arch)  # use the cache once it is there
    st = _Store.from_part(part, key)
    with _lock:
        recent = _closures.setdefault(key, [])
        recent.insert(0, st)
        del recent[_MAX_CLOSURES:]
    return st


_prefetch_asked: set = set()  # (arch, bc_path) that prefetch() has seen


def prefetch(arch=90, bc_path=None) -> None:
    """Start building the store for ``arch`` (processes of their own) if it is not cached yet,
    before any kernel needs it: ``nvshmem_dsl.init()`` calls this (with Numba's API imported)
    once it has chosen the GPU, so that the store is ready sooner (a kernel linked before it is
    there links a closure).  Does nothing when the store is cached, when the build runs in the calling process
    (``NVSHMEM_DSL_BUILD_JOBS=1``), or for arguments seen before.  Never raises: what fails here
    fails again, and is reported, when a kernel is linked."""
    with _lock:
        if (arch, bc_path) in _prefetch_asked:
            return
        _prefetch_asked.add((arch, bc_path))
    try:
        bc_path = Path(bc_path) if bc_path else _default_bitcode(arch)
        key = _cache_key(bc_path)
        path = _store_file(bc_path, key)
        if _side_builds(bc_path) and not path.exists() and key not in _stores:
            _start_builder(bc_path, _arch_number(arch), path, key)
    except Exception:  # noqa: BLE001 - see the docstring
        return


def _release_heap() -> None:
    """Give the C heap's free memory back to the system (glibc keeps what a
    parse of the whole bitcode freed: cold-compile.txt); after a closure
    parsed from the whole file only (a closure's own parse is small)."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class _file_lock:
    """An exclusive ``flock`` on ``path``; prints ``waiting`` (if given) when
    another process holds it."""

    def __init__(self, path: Path, waiting: str | None = None):
        self.path, self.waiting = path, waiting

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return self
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if self.waiting:
                print(self.waiting, file=sys.stderr, flush=True)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
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


def api_module(names, arch=90, bc_path=None, unswitch=False, declare_exported=False):
    """A fresh :class:`llvmlite.binding.ModuleRef` holding the NVSHMEM device
    functions ``names``, everything they call, and :data:`EXPORTED_GLOBALS`.

    ``unswitch``: NVSHMEM's thread-level helpers are not ``convergent`` (see
    :func:`nvshmem_dsl.bitcode_rewrites.thread_helpers_not_convergent`).
    ``declare_exported``: :data:`EXPORTED_GLOBALS` are external declarations (for code that is
    linked beside a module defining them: :mod:`nvshmem_dsl.outline`).

    Functions and globals keep the linkage they have in NVSHMEM (the API is
    external); the caller links the module in and internalizes.  The caller
    owns the returned module (``link_in`` may consume it).  Raises
    :class:`KeyError` for names that are not NVSHMEM device functions.

    With no cache yet, the first call starts building it (unless another
    process is at it) and returns the same module from a closure of ``names``
    extracted meanwhile, which is quicker than the whole build; a process
    that started a build waits for it when it exits.
    """
    import llvmlite.binding as llvm

    # imported here: the build workers load this file on its own, outside the package
    from . import bitcode_rewrites

    names = tuple(sorted(set(names)))
    bc_path = Path(bc_path) if bc_path else _default_bitcode(arch)
    key = _cache_key(bc_path)
    how = bitcode_rewrites.mode()  # NVSHMEM's copy loops, rewritten in the text before parsing
    subset = (key, names, how, bool(unswitch), bool(declare_exported))
    for attempt in (0, 1):
        with _lock:
            mod = _subsets.get(subset)
            if mod is not None:
                _subsets.move_to_end(subset)
                return mod.clone()
            st = _stores.get(key)
        if st is None:
            st = _first_store(names, bc_path, arch, key) if attempt == 0 else _store(bc_path, arch)
        try:
            text, _ = bitcode_rewrites.for_inlining(st.assemble(names, declare_exported).decode(), how)
            text, _ = bitcode_rewrites.freeze_loops(text)  # clang's unrolling stays as it was
            if unswitch:
                text, _ = bitcode_rewrites.thread_helpers_not_convergent(text)
            mod = llvm.parse_assembly(text)
        except (CacheCorrupt, RuntimeError):
            if attempt:
                raise
            if not st.temporary:
                _drop_store(bc_path, arch)  # rebuilt by the next _store()
            continue
        stats["subset_parses"] += 1
        with _lock:
            _subsets[subset] = mod
            while len(_subsets) > _MAX_SUBSETS:
                _subsets.popitem(last=False)
        return mod.clone()
    raise AssertionError("unreachable")


def body_sizes(names, arch=90, bc_path=None) -> dict:
    """``{name: instructions}``: how many instructions the body of each NVSHMEM API function of
    ``names`` has (its own, not those of the functions it calls: what inlining it copies into the
    caller); names that are not API functions are left out.  From the store, or with none cached
    yet from the closure that :func:`api_module` then reuses."""
    names = frozenset(names)
    bc_path = Path(bc_path) if bc_path else _default_bitcode(arch)
    key = _cache_key(bc_path)
    with _lock:
        st = _stores.get(key)
    if st is None:
        st = _first_store(names, bc_path, arch, key)
    return {n: st.instructions(n) for n in names if n in st.api}


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
_DATA_LAYOUT = re.compile(r'^target datalayout = "[^"]*"$', re.M)
#: The data layout libNVVM gives the modules it links the library into (64-bit pointers, 32-bit
#: shared ones).  The copy says the same, instead of LLVM 22's NVPTX layout, so that every CuTe
#: compile does not print "Linking two modules of different data layouts"; libNVVM links the
#: library under this layout either way.
NVVM_DATA_LAYOUT = ("e-p:64:64:64-p3:32:32:32-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-"
                    "f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")


def nvvm_bitcode(bc_path) -> Path:
    """``bc_path`` itself, or a cached copy of it that libNVVM accepts, with NVSHMEM's copy
    loops, group-RMA entries and lane-id reads rewritten (:mod:`nvshmem_dsl.bitcode_rewrites`,
    as for Numba kernels).

    NVSHMEM 3.4's single ``libnvshmem_device.bc`` puts some functions in an
    explicit ``.text.compute`` section, which libNVVM rejects ("Explicit section
    marker ... is not allowed"); 3.8's per-arch files have none.  The first call
    per file and rewrite mode parses it once (seconds) and, if anything changes,
    writes the copy to the cache directory (atomically); later calls only stat.
    """
    import llvmlite.binding as llvm

    from . import bitcode_rewrites

    bc_path = Path(bc_path)
    key = _cache_key(bc_path)
    how = bitcode_rewrites.mode()
    copy = cache_dir() / f"{bc_path.stem}-{key[:24]}-{how}-r{bitcode_rewrites.REVISION}.nvvm.bc"
    same = copy.with_suffix(".same")
    if copy.exists():
        return copy
    if same.exists():
        return bc_path
    with _file_lock(copy.with_suffix(".lock")):
        if copy.exists() or same.exists():
            return copy if copy.exists() else bc_path
        print(f"nvshmem-dsl: preparing {bc_path.name} for NVVM (once) ...", file=sys.stderr, flush=True)
        text = str(llvm.parse_bitcode(bc_path.read_bytes(), context=llvm.create_context()))
        text, sections = _SECTION.subn("", text)
        text, changes = bitcode_rewrites.for_inlining(text, how)
        text = _DATA_LAYOUT.sub(f'target datalayout = "{NVVM_DATA_LAYOUT}"', text, count=1)
        if sections == 0 and changes == 0:
            same.touch(mode=0o600)
            return bc_path
        data = llvm.parse_assembly(text, context=llvm.create_context()).as_bitcode()
        fd, tmp = tempfile.mkstemp(dir=copy.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, copy)
        return copy
