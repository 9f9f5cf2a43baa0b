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
(:func:`.pieces._store_part`).  A process that finds no store starts that build in a
process of its own and meanwhile gets the functions each kernel calls from a
*closure* it extracts itself (the same IR, from a parse of just the function
bodies it needs: :func:`.pieces._closure`, :mod:`nvshmem_dsl.linker.bodies`), and
waits for the build when it exits.  :func:`prefetch` starts the build before
any kernel is linked.  Another process finding the store being built
does the same or,
when it needs the whole store (:func:`api_names`), waits for it (a file
lock).  ``$NVSHMEM_DSL_BUILD_JOBS`` sets the number of build processes; ``1``
builds in the calling process, without closures.

:func:`api_module` takes the transitive closure of the requested API names
(plus the state globals the host library looks up), assembles those pieces
and parses them (a few ms to a few hundred ms), memoised per process.

Public functions: :func:`api_module` (:func:`api_text` parsed), :func:`prefetch`, :func:`pruned_bitcode`,
:func:`api_names`, :func:`body_sizes`, :func:`cache_dir`; constant :data:`EXPORTED_GLOBALS`.

The file and its format are :mod:`.store_file`'s, the text-level splitting :mod:`.pieces`', the
build processes :mod:`.store_build`'s; this module finds or builds the store a kernel needs.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import threading
from collections import OrderedDict
from pathlib import Path

from . import pieces, store_build
from .pieces import DEVICE_STATE, EXPORTED_GLOBALS
from .store_build import _start_builder, _side_builds
from .store_file import (CacheCorrupt, _arch_number, _cache_key, _default_bitcode, _file_lock, _open_store,
                         _Store, _store_file, cache_dir, stats, store_path)

__all__ = [
    "DEVICE_STATE",
    "EXPORTED_GLOBALS",
    "api_module",
    "api_names",
    "api_text",
    "body_sizes",
    "cache_dir",
    "prefetch",
    "pruned_bitcode",
    "store_path",
]

_stores: dict[str, _Store] = {}
_subsets: OrderedDict = OrderedDict()  # (store key, names, rewrite mode, unswitch, declare_exported) -> ModuleRef, LRU
_MAX_SUBSETS = 64
_closures: dict = {}  # store key -> the last closures extracted while its store is being built
_MAX_CLOSURES = 4
# (pid, store key) -> Future of its helpers' closure (prefetch: _start_helpers_closure); a forked
# child, whose copy of the Future no thread completes, finds none of its parent's
_helper_closures: dict = {}
_lock = threading.RLock()


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
    _prune_cache()  # a new store: a new NVSHMEM or llvmlite, whose old entries are left unused
    started = _start_builder(bc_path, arch, path, key)
    # Serialise builders across processes (two PEs starting at once: one
    # builds, the other waits for it); re-check once we hold the lock.
    waiting = None if started else (
        f"nvshmem-dsl: waiting for another process preparing NVSHMEM bitcode for sm_{arch} ...")
    with _file_lock(path.with_suffix(".lock"), waiting):
        st = _open_store(path, key)
        if st is not None:
            return st
        store_build._build(bc_path, arch, path, key)  # here: none started, or it failed
    return _Store(path, key)


def _prune_cache() -> None:
    """Remove the cache's entries unused for :func:`.cache.auto_days` days (none if that is off);
    a cache that cannot be pruned is left as it is."""
    from . import cache

    days = cache.auto_days()
    if days is None:
        return
    try:
        cache.prune(days)
    except OSError:
        pass


def _first_store(names, bc_path: Path, arch, key: str, helpers: bool = True) -> _Store:
    """A store that has ``names``: the cached one; or, while the cache is being built by
    processes of their own (started here if need be), a closure of ``names`` extracted here
    (:func:`_closure`: a parse of the few function bodies it needs, well under a second), for
    this kernel and for each one after it until the store is there.  ``helpers`` False: the
    caller leaves the out-of-line helpers that ``names`` call out (their objects' own closures
    read them), so a closure need not hold their bodies."""
    path = _store_file(bc_path, key)
    st = _open_store(path, key)
    if st is not None:
        with _lock:
            _closures.pop(key, None)
            _helper_closures.pop((os.getpid(), key), None)
            return _stores.setdefault(key, st)
    arch = _arch_number(arch)
    if not _side_builds(bc_path):
        return _store(bc_path, arch)
    _start_builder(bc_path, arch, path, key)
    with _lock:  # a closure extracted for a kernel serves each subset of it (body_sizes, then api_module)
        for st in _closures.get(key, ()):  # (and the helpers it calls, if read: their objects')
            if set(names) <= st.api | st.helpers and (st.helper_bodies or not helpers):
                return st
        prefetched = _helper_closures.get((os.getpid(), key))
    if prefetched is not None and prefetched.done() and prefetched.exception() is not None:
        prefetched = None  # it failed: kernels' closures read the helpers, as without it
    if prefetched is not None and not any(pieces.is_api_name(n) for n in names):
        st = _finished(prefetched)  # helpers' objects: from the closure prefetch() started
        if st is not None and set(names) <= st.helpers:
            return st
    try:
        # a kernel's closure reads the helpers' bodies only where their objects are built from this
        # bitcode and no prefetched closure has them
        part = pieces._closure(bc_path, sorted(names),
                               helpers or (prefetched is None and _helpers_built(bc_path, arch)))
    except (OSError, RuntimeError):
        return _store(bc_path, arch)  # use the cache once it is there
    st = _Store.from_part(part, key)
    st.helper_bodies = helpers or prefetched is None
    with _lock:
        recent = _closures.setdefault(key, [])
        recent.insert(0, st)
        del recent[_MAX_CLOSURES:]
    return st


def _helpers_built(bc_path: Path, arch) -> bool:
    """Whether the objects of NVSHMEM's out-of-line helpers that kernels of ``arch`` call are built
    from ``bc_path`` (``NVSHMEM_DSL_HELPERS=build``, or NVIDIA's compiled ones refused for it), so
    that a kernel's closure may as well read their bodies for them: not where NVIDIA's compiled
    helpers serve them (:func:`.helper_archive.path`, the default), whose few exceptions (helpers
    it lacks or defines otherwise) read their own."""
    from . import helper_archive

    return helper_archive.path(_arch_number(arch), bc_path) is None


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
            _start_helpers_closure(bc_path, key)
    except Exception:  # noqa: BLE001 - see the docstring
        return


def _start_helpers_closure(bc_path: Path, key: str) -> None:
    """Extract the closure of NVSHMEM's out-of-line helpers (:func:`.pieces._helpers_closure`) in a
    process of its own, for the objects of the first kernels linked before the store is there:
    their own closures then leave the helpers out (a put kernel's: 0.5 -> 0.22 s, its cold first
    compile 1.95-2.10 -> 1.74-1.87 s on the CPU machine,
    bench/results/closure-helpers-cpu-2026-11-25.txt) and the objects' IR is there when the
    kernel's PTX names them.  Only an object's IR waits for it; one that fails is not used."""
    from concurrent.futures import Future

    future: Future = Future()
    with _lock:
        if (os.getpid(), key) in _helper_closures:
            return
        _helper_closures[os.getpid(), key] = future

    def extract():
        try:
            proc = store_build._spawn(["helpers", bc_path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            with proc:
                data = proc.stdout.read()
            if proc.returncode != 0:
                raise RuntimeError(f"the helpers' closure ended with status {proc.returncode}")
            future.set_result(_Store.from_part(pickle.loads(data), key))
        except BaseException as exc:  # noqa: BLE001 - not used: kernels' closures read the helpers
            future.set_exception(exc)

    threading.Thread(target=extract, name="nvshmem-dsl-helpers-closure", daemon=True).start()


def _finished(future):
    """The store ``future`` gives, None if it failed."""
    try:
        return future.result()
    except Exception:  # noqa: BLE001 - see _start_helpers_closure
        return None


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


def api_text(names, arch=90, bc_path=None, unswitch=False, declare_exported=False, helpers_out=False) -> str:
    """The LLVM IR text that :func:`api_module` parses (same arguments): the NVSHMEM device
    functions ``names``, everything they call and :data:`EXPORTED_GLOBALS`, with the rewrites of
    inlined code applied.  Made without LLVM (text from the store), so that another process can
    parse it (the objects' workers: :mod:`nvshmem_dsl.linker.object_workers`)."""
    # imported here: the build workers load this file on its own, outside the package
    from . import rewrites

    names = tuple(sorted(set(names)))
    how = rewrites.mode()
    return _read_store(names, arch, bc_path,
                       lambda st: _text(st, names, how, unswitch, declare_exported, helpers_out), not helpers_out)


def _read_store(names, arch, bc_path, read, helpers: bool = True, corrupt=(CacheCorrupt,)):
    """``read(store)`` of a store that has ``names`` (:func:`_first_store`, ``helpers`` passed on);
    a store found corrupt meanwhile (``read`` raises one of ``corrupt``) is dropped and ``read``
    tried once more on a rebuilt one."""
    bc_path = Path(bc_path) if bc_path else _default_bitcode(arch)
    key = _cache_key(bc_path)
    for attempt in (0, 1):
        with _lock:
            st = _stores.get(key)
        if st is None:
            st = _first_store(names, bc_path, arch, key, helpers) if attempt == 0 else _store(bc_path, arch)
        try:
            return read(st)
        except corrupt:
            if attempt:
                raise
            if not st.temporary:
                _drop_store(bc_path, arch)  # rebuilt by the next _store()
    raise AssertionError("unreachable")


def _text(st, names, how, unswitch, declare_exported, helpers_out) -> str:
    from . import rewrites

    declared = st.helpers if helpers_out else frozenset()
    text, _ = rewrites.for_inlining(st.assemble(names, declare_exported, declared).decode(), how)
    text, _ = rewrites.freeze_loops(text)  # clang's unrolling stays as it was
    if unswitch:
        text, _ = rewrites.thread_helpers_not_convergent(text)
    return text


def api_module(names, arch=90, bc_path=None, unswitch=False, declare_exported=False, helpers_out=False):
    """A fresh :class:`llvmlite.binding.ModuleRef` holding the NVSHMEM device
    functions ``names``, everything they call, and :data:`EXPORTED_GLOBALS` (:func:`api_text`
    parsed).

    ``unswitch``: NVSHMEM's thread-level helpers are not ``convergent`` (see
    :func:`nvshmem_dsl.linker.rewrites.thread_helpers_not_convergent`).
    ``declare_exported``: :data:`EXPORTED_GLOBALS` are external declarations (for code that is
    linked beside a module defining them: :mod:`nvshmem_dsl.linker.outline`).
    ``helpers_out``: NVSHMEM's out-of-line helpers (its ``noinline`` transport functions) that
    ``names`` call are external declarations, linked from their objects
    (:func:`nvshmem_dsl.linker.outline.objects`); ``names`` may name helpers themselves.

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
    from . import rewrites

    names = tuple(sorted(set(names)))
    bc_path = Path(bc_path) if bc_path else _default_bitcode(arch)
    key = _cache_key(bc_path)
    how = rewrites.mode()  # NVSHMEM's copy loops, rewritten in the text before parsing
    subset = (key, names, how, bool(unswitch), bool(declare_exported), bool(helpers_out))
    with _lock:
        mod = _subsets.get(subset)
        if mod is not None:
            _subsets.move_to_end(subset)
            return mod.clone()
    # a piece that does not parse is a corrupt store too (RuntimeError)
    mod = _read_store(names, arch, bc_path,
                      lambda st: llvm.parse_assembly(_text(st, names, how, unswitch, declare_exported, helpers_out)),
                      not helpers_out, (CacheCorrupt, RuntimeError))
    stats["subset_parses"] += 1
    with _lock:
        _subsets[subset] = mod
        while len(_subsets) > _MAX_SUBSETS:
            _subsets.popitem(last=False)
    return mod.clone()


def body_sizes(names, arch=90, bc_path=None) -> dict:
    """``{name: instructions}``: how many instructions the body of each NVSHMEM API function of
    ``names`` has (its own, not those of the functions it calls: what inlining it copies into the
    caller); names that are not API functions are left out.  From the store, or with none cached
    yet from the closure that :func:`api_module` then reuses."""
    names = frozenset(names)
    return _read_store(names, arch, bc_path, lambda st: {n: st.instructions(n) for n in names if n in st.api},
                       helpers=False)


def helper_closure(names, arch=90, bc_path=None) -> frozenset:
    """``names`` and the NVSHMEM helpers (:attr:`~nvshmem_dsl.linker.store_file._Store.helpers`)
    that the helpers among them call, through the functions they inline, transitively, in the
    store's call graph (at most what their objects call: :func:`nvshmem_dsl.linker.outline.objects`
    finds those in the objects themselves, some specialised)."""
    names = frozenset(names)
    bc_path = Path(bc_path) if bc_path else _default_bitcode(arch)
    key = _cache_key(bc_path)
    with _lock:
        st = _stores.get(key)
    if st is None:
        st = _first_store(names, bc_path, arch, key)
    helpers = st.helpers
    found, todo, seen = set(names), [n for n in names if n in helpers], set()
    while todo:
        name = todo.pop()
        for callee in st.functions.get(name, (None,) * 4)[3]:
            if callee in seen or callee not in st.functions:
                continue
            seen.add(callee)
            if callee in helpers:
                found.add(callee)
            todo.append(callee)
    return frozenset(found)


def pruned_bitcode(bc_path=None, arch=90, names=None) -> bytes:
    """Bitcode of the NVSHMEM device functions ``names`` (default: the whole
    API) with their dependencies, target attributes removed.  The whole API is
    slow (hundreds of MB of IR); pass the names you call."""
    if names is None:
        names = api_names(arch, bc_path)
    return api_module(names, arch, bc_path).as_bitcode()
