"""The objects stage of hybrid linking: NVSHMEM's large device routines as calls into cached
relocatable objects.

NVSHMEM's small device functions are inlined into kernels; its large routines (collectives,
barriers: which, :mod:`nvshmem_dsl.linker.plan`) are compiled once per (NVSHMEM bitcode, target,
register cap), each into a relocatable cubin kept in the cache directory, and linked into the
kernel as out-of-line calls, the way ``nvcc -rdc`` links a device library: the kernel's PTX
declares them ``.extern .func``, the link adds their objects.

An object (:func:`objects`, built by :func:`object_ptx` and ``ptxas -c``): the function, external,
and everything it calls from the piece store (:mod:`nvshmem_dsl.linker.store`), internal, except
NVSHMEM's ``noinline`` transport helpers, which are linked from NVIDIA's compiled ones
(:mod:`nvshmem_dsl.linker.helper_archive`, the default) or are objects of their own shared by every object
and kernel calling them (specialised on the calls' constant modes: :mod:`nvshmem_dsl.linker.calls`), with
the same rewrites as inlined code, lightly optimised (interprocedural constant propagation; the
rest was optimised by clang), emitted by LLVM's NVPTX backend for the kernel's SM and PTX ISA, and
assembled by ``ptxas -c`` with at most the registers the kernel's declared block size leaves a
thread (:func:`register_cap`: ``.maxntid``/``.reqntid``, or the kernel's ``max_registers``), and
:data:`MAX_REGISTERS` for a kernel that declares neither, so that the kernel, its callees
included, can be launched with the threads it may be launched with (any: 1024 a block).
The device-state globals (:data:`nvshmem_dsl.linker.store.EXPORTED_GLOBALS`) are declared, not defined,
in the objects: the kernel's module defines them, once per loaded module, where
``nvshmemx_culibrary_init`` finds them.  How an object is optimised (:func:`opt_level`), and the
first forms a cold kernel links while the final ones build in the background (:func:`opt_tiered`,
:func:`provisional`), are here too.

Linkers use it through :func:`nvshmem_dsl.linker.calls.extern_calls` (the outlined functions a
kernel's PTX calls) and :func:`objects` (their cubins, to add to the link), or :func:`objects_for`
(both); nothing here depends on Numba, so that the CuTe DSL can link the same objects.

Public: :func:`objects`, :func:`objects_for`, :func:`prefetch`, :func:`object_ir`, :func:`object_ptx`,
:func:`object_calls`, :func:`opt_level`, :func:`provisional`, :func:`opt_tiered`, :func:`explain_tiers`,
:func:`register_cap`, :func:`block_cap`, :func:`registers_a_thread`; constants :data:`MAX_REGISTERS`;
counters :data:`stats`.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import _optable
from . import abi, calls, code_env, helper_archive, link, loop_split, object_workers, rewrites, store, store_build, store_file
from .object_llvm import OPT_LEVELS, SPECIALISED, specialised_name, split_specialised

__all__ = ["MAX_REGISTERS", "SPECIALISED", "block_cap", "explain_tiers", "object_calls", "object_ir", "object_ptx",
           "objects", "objects_for", "opt_level", "opt_tiered", "prefetch", "provisional", "register_cap",
           "registers_a_thread", "specialised_name", "split_specialised", "stats"]


#: How the objects' code is optimised (``$NVSHMEM_DSL_OUTLINE_OPT``): ``light`` (constant
#: propagation, instcombine, unrolling of the rewritten copy loops: NVSHMEM's code as clang
#: optimised it), ``quick`` (the same, LLVM's code generation at level 0: the split objects' first
#: form, :func:`_first_form`), ``o3`` (LLVM's whole O3 pipeline with non-trivial loop unswitching,
#: as inlined code gets it) or ``auto`` (the default: :data:`O3_SCOPES`, :data:`LIGHT_FAMILIES`).
#: Part of each object's cache key.
OPT_ENV = code_env.OUTLINE_OPT

#: Scopes whose API functions' objects ``auto`` builds at ``o3``, but for the families of
#: :data:`LIGHT_FAMILIES` (the rest, and NVSHMEM's helpers, ``light``).  Measured with the objects
#: preserving 2 registers (1 x H200, NVSHMEM 3.8, C++ in each run, four runs on three hosts:
#: tests/gpu/records/2026-11-25/h200-objects-opt-ab.txt): at thread scope O3 is as fast or faster
#: (broadcast 1.04-1.07 -> 0.99-1.03x of C++ in Numba, 1.02 -> 0.98x in CuTe; barrier up to 0.08x
#: less), at warp scope mixed (Numba's broadcast 0.94-1.03 -> 1.02-1.09x), at block scope within the
#: runs' spread.  O3 costs an object's LLVM step about 2x (a broadcast's 0.67 -> 1.25 s on the CPU
#: machine, bench/results/object-opt-cpu-2026-11-25.txt), once.
O3_SCOPES = frozenset({"thread"})
#: Families kept ``light`` at every scope: the reductions, which O3 did not make faster at thread
#: scope either (0.89-0.92x of C++ both ways) and cost most to build at O3 (an object per operator
#: and type, each LLVM step 0.29 -> 0.69 s, same CPU record: on the GPU host the Numba suite's twelve
#: thread-scope collective tests took 22.8 -> 33.2 s with them at O3, most of it the nine reductions,
#: same GPU record).
LIGHT_FAMILIES = frozenset({"reduce", "reducescatter"})


#: Registers a block may use on every GPU NVSHMEM supports (sm_70 .. sm_100: 64 Ki).
REGISTERS_PER_BLOCK = 65536
#: Most registers a thread may have (PTX, every SM).
REGISTERS_PER_THREAD = 255
#: Registers are given to a warp in units of this many a thread.
REGISTER_GRANULE = 8
#: Most registers the objects' functions may use (``ptxas -maxrregcount``) in a kernel that does not
#: declare its block size: what lets it launch 1024 threads a block, 64.
MAX_REGISTERS = REGISTERS_PER_BLOCK // 1024

#: A kernel's declared block size in PTX: ``.maxntid x[, y[, z]]`` or ``.reqntid ...``.
_BLOCK_DIRECTIVE = re.compile(r"^\s*\.(?:maxntid|reqntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", re.M)
_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s", re.M)
_MAXNREG = re.compile(r"^\s*\.maxnreg\s+(\d+)", re.M)  # a kernel's own register limit (Triton's maxnreg)


#: Scopes whose objects keep at most :data:`MAX_REGISTERS` registers where the kernel would allow
#: more, under CUDA's default calling convention: there block-scope collectives measured slower with
#: more registers (each saved at the object's entry), thread- and warp-scope ones faster
#: (tests/gpu/records/2026-11-24/h200-mps-triton-g-register-caps.txt).  Objects that preserve only
#: :func:`nvshmem_dsl.linker.abi.preserve` registers save none of them: uncapped, the block-scope ones
#: are faster too (broadcast block 1.16 -> 0.88x of C++, tests/gpu/records/2026-11-25/h200-abi-block-caps.txt).
CAPPED_SCOPES = frozenset({"block", "warpgroup"})


def _scope_cap(name: str, cap: int) -> int:
    """The register cap of ``name``'s object in a kernel that allows ``cap`` (:data:`CAPPED_SCOPES`,
    under CUDA's default convention)."""
    op = _optable.device_ops().get(name)
    if op is not None and op["scope"] in CAPPED_SCOPES and abi.preserve() is None:
        return min(cap, MAX_REGISTERS)
    return cap


def registers_a_thread(threads: int) -> int:
    """The most registers a thread may have in a block of ``threads`` threads: the block's
    :data:`REGISTERS_PER_BLOCK` over its warps, in granules of :data:`REGISTER_GRANULE`, at most
    :data:`REGISTERS_PER_THREAD` (1024 threads: 64; one warp: 255)."""
    warps = max(1, -(-threads // 32))
    return min(REGISTERS_PER_THREAD, REGISTERS_PER_BLOCK // (warps * 32) // REGISTER_GRANULE * REGISTER_GRANULE)


def register_cap(ptx_texts, max_registers=None) -> int:
    """Registers a thread of the kernels in ``ptx_texts`` (their PTX) may use, callees included:
    what each kernel's declared block size (``.maxntid``/``.reqntid``) leaves a thread of a block of
    :data:`REGISTERS_PER_BLOCK` (in warps, in granules of :data:`REGISTER_GRANULE`, at most
    :data:`REGISTERS_PER_THREAD`: :func:`registers_a_thread`), :data:`MAX_REGISTERS` for a kernel that declares none; at most
    a kernel's ``.maxnreg`` and ``max_registers`` (the kernel's ``-maxrregcount``) where given.  The
    least over the kernels (:func:`block_cap`)."""
    blocks = []
    limits = [int(n) for ptx in ptx_texts for n in _MAXNREG.findall(ptx)]
    for ptx in ptx_texts:
        declared = _BLOCK_DIRECTIVE.findall(ptx)
        blocks += [math.prod(int(d or 1) for d in dims) for dims in declared]
        blocks += [None] * (len(_ENTRY.findall(ptx)) - len(declared))
    return block_cap(blocks, [*limits, max_registers])


def block_cap(blocks, limits=()) -> int:
    """Registers a thread may use in kernels declaring the block sizes ``blocks`` (threads; None
    for a kernel that declares none: :data:`MAX_REGISTERS`; no kernels count as one of those), at
    most each of ``limits`` (register limits; None for none): the least."""
    caps = [registers_a_thread(t) if t else MAX_REGISTERS for t in (blocks or [None])]
    return min(caps + [n for n in limits if n])

#: Bump when objects are built differently (names the cached objects).
VERSION = 4

#: Counters for tests and diagnostics: objects built, objects found cached (by :func:`objects`), objects
#: handed to a background build of their final form (:func:`_build_final_later`).
stats = {"builds": 0, "hits": 0, "final_later": 0}

_stats_lock = threading.Lock()




def _objects_dir() -> Path:
    folder = store.cache_dir() / store_file.OBJECTS_FOLDER
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def opt_level(name: str | None = None) -> str:
    """How the object of NVSHMEM function ``name`` (maybe specialised) is optimised, one of
    :data:`~nvshmem_dsl.linker.object_llvm.OPT_LEVELS`: ``$NVSHMEM_DSL_OUTLINE_OPT`` where it names
    one, else by the function's scope and family (:data:`O3_SCOPES`, :data:`LIGHT_FAMILIES`; ``name``
    None: ``auto`` itself)."""
    how = os.environ.get(OPT_ENV, "").strip().lower() or "auto"
    if how not in (*OPT_LEVELS, "auto"):
        raise ValueError(f"{OPT_ENV}={how!r}: choose one of auto, {', '.join(OPT_LEVELS)}")
    if how != "auto" or name is None:
        return how
    op = _optable.device_ops().get(split_specialised(name)[0])
    o3 = op is not None and op["scope"] in O3_SCOPES and op["family"] not in LIGHT_FAMILIES
    return "o3" if o3 else "light"


def _object_path(name: str, bc_path: Path, cpu: str, features: str, cap: int, split: str | None = None,
                 opt: str | None = None) -> Path:
    """Where the object of ``name`` is cached; ``split``: its loops' :func:`nvshmem_dsl.linker.loop_split.key`
    (default: the one in effect); ``opt``: how it is optimised (default: :func:`opt_level`)."""
    st = os.stat(link.ptxas())
    split = loop_split.key() if split is None else split
    ident = [VERSION, store_file._cache_key(bc_path), rewrites.mode(), rewrites.REVISION,
             cpu, features, cap, link.ptxas(), st.st_size, st.st_mtime_ns, opt or opt_level(name), split, abi.preserve(),
             helper_archive.key(store_file._arch_number(cpu), bc_path)]
    digest = hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:20]
    return _objects_dir() / f"{name}-{cpu}-r{cap}-{digest}.cubin"


def objects_for(ptx: str, arch: int, max_registers=None, bc_path=None) -> list:
    """The objects (paths) a kernel's PTX ``ptx`` (for SM ``arch``'s bitcode) is to be linked
    with: those of the NVSHMEM functions it calls out of line (:func:`nvshmem_dsl.linker.calls.extern_calls`), for its
    ``.target`` and ``.version``, at the register cap its declared block size leaves
    (:func:`register_cap`); none when it calls none.  For PTX linked by hand (nvJitLink, the
    driver's linker) rather than through a DSL's own link."""
    names = calls.extern_calls(ptx)
    if not names:
        return []
    cpu, features = link.ptx_target(ptx)
    calls.archived_helpers(ptx, bc_path)  # (asked already where the PTX was prepared: prepare_calls)
    return objects(names, arch, cpu, features, register_cap([ptx], max_registers), bc_path)


def _cap_and_bitcode(max_registers, arch, bc_path) -> tuple[int, Path]:
    """The register cap :func:`objects` builds at for ``max_registers``, and the bitcode file."""
    cap = min(REGISTERS_PER_THREAD, max_registers) if max_registers else MAX_REGISTERS
    return cap, Path(bc_path) if bc_path else store_file._default_bitcode(arch)


def prefetch(names, arch, cpu: str, features: str, max_registers=None, bc_path=None):
    """Start building the objects of ``names`` that are not cached (:func:`objects`, same
    arguments) in a thread of its own, and return it (None when there is nothing to build): a
    front-end calls it as soon as its link knows what it calls out of line, before the kernel's
    PTX is emitted, and its later :func:`objects` call waits for the builds under way (their file
    locks) instead of starting them again.  Errors are left to that call.  A process waits for
    the thread when it exits."""
    cap, bc_path = _cap_and_bitcode(max_registers, arch, bc_path)
    features = abi.object_features(features)
    sm = store_file._arch_number(cpu)
    if all((calls.is_helper(n) and helper_archive.known(sm, split_specialised(n)[0], bc_path) in (True, None))
           or _cached(_object_path(n, bc_path, cpu, features, _scope_cap(n, cap))) for n in names):
        return None

    def build():
        try:
            objects(names, arch, cpu, features, max_registers, bc_path)
        except Exception:  # noqa: BLE001 - the front-end's own objects() call reports it
            pass

    thread = threading.Thread(target=build, name="nvshmem-dsl-objects")
    thread.start()
    return thread


def objects(names, arch, cpu: str, features: str, max_registers=None, bc_path=None) -> list:
    """The relocatable cubins (paths) that define the NVSHMEM functions ``names`` for a kernel of
    SM ``arch`` (the bitcode's) compiled for ``cpu`` and ``features`` (e.g. ``sm_90a``,
    ``+ptx85``), one per function, with those of the helpers they call, transitively (an
    object calls NVSHMEM's helpers in theirs: :func:`object_calls`), in the order of their
    sorted names, built where not cached; their functions use at most ``max_registers``
    registers (at most :data:`REGISTERS_PER_THREAD`; :data:`MAX_REGISTERS` when not given: see
    :func:`register_cap`).

    Builds run at once, largest IR first: those of the helpers an object will call start with
    it (:func:`nvshmem_dsl.linker.calls.predicted_helper_calls` of its IR; a call its PTX names otherwise starts when the
    PTX is there), since a collective's object and its put_signal helper take about as long."""
    cap, bc_path = _cap_and_bitcode(max_registers, arch, bc_path)
    abi.advise()  # where a CUDA 13 ptxas would make them faster
    features = abi.object_features(features)
    archive = calls.helpers_archive(cpu, bc_path)  # NVIDIA's compiled helpers, or None: built here
    sm = store_file._arch_number(cpu)
    if archive is not None and not calls._archive_serves(names, sm, bc_path):
        archive = None  # PTX not prepared for it (Numba's cache from another mode, PTX by hand): all built
    paths: dict = {}  # every object wanted: called, or predicted to be
    lock = threading.Lock()
    futures = collections.deque()
    hits = 0
    later: dict = {}  # objects given in a first form: name -> the split key of its final form, built in the background
    forms: dict = {}  # name -> the optimisation level its object is built at here, where not opt_level(name)

    def plan(wanted) -> list:
        """``(IR, name)`` of the objects to build for ``wanted`` and the helpers they are
        predicted to call, transitively, largest first (the paths of all in ``paths``)."""
        nonlocal hits
        wanted = set(wanted)
        todo, builds = list(wanted), []
        while todo:
            n = todo.pop()
            with lock:
                if n in paths:
                    continue
                if archive is not None and calls.is_helper(n):
                    found = helper_archive.known(sm, split_specialised(n)[0], bc_path)
                    if found == helper_archive.MISMATCH and SPECIALISED not in n:
                        raise link.NvshmemLinkError(f"NVSHMEM's helper {n} is called by its name, which NVIDIA's "
                                               f"compiled helpers ({archive.name}) define with another prototype; "
                                               f"{helper_archive.ENV}=build builds them all instead")
                    if found is True:
                        paths[n] = archive
                        continue
                    if found is None and SPECIALISED not in n:  # every kernel's and object's helpers are asked
                        raise link.NvshmemLinkError(f"NVSHMEM's helper {n}: not known whether NVIDIA's compiled helpers "
                                               f"({archive.name}) define it; {helper_archive.ENV}=build builds them all "
                                               "instead")
                paths[n] = path = _object_path(n, bc_path, cpu, features, _scope_cap(n, cap))
            first = _first_form(n, arch, bc_path)
            if first is not None:  # tiered: the final form where it is there, else the first, the final built later
                final_split, first_opt = first
                final = _object_path(n, bc_path, cpu, features, _scope_cap(n, cap), final_split)
                if _cached(final):
                    with lock:
                        paths[n] = path = final
                else:
                    with lock:
                        paths[n] = path = _object_path(n, bc_path, cpu, features, _scope_cap(n, cap), opt=first_opt)
                        later[n] = final_split
                        if first_opt != opt_level(n):
                            forms[n] = first_opt
            if _cached(path):
                with lock:
                    hits += 1
                todo += object_calls(path)
                continue
            try:
                text = object_ir([n], arch, bc_path)
            except KeyError:
                if n in wanted:
                    raise
                with lock:  # only predicted: not NVSHMEM's to build (what the PTX calls decides)
                    del paths[n]
                continue
            builds.append((text, n))
            if archive is None:  # (else: its PTX names them, once asked whether NVIDIA's object has them)
                todo += calls.predicted_helper_calls(text)
            else:  # asked while LLVM emits the object, not after
                calls._ask_archive_ahead(text, cpu, features, bc_path)
        return sorted(builds, key=lambda b: (-len(b[0]), b[1]))

    def want(wanted, ex):
        for text, n in plan(wanted):
            futures.append(ex.submit(_build, n, arch, bc_path, cpu, features, _scope_cap(n, cap), paths[n], text,
                                     lambda called: want(called, ex), opt=forms.get(n)))

    built = 0
    with ThreadPoolExecutor(max_workers=store_build._cpus()) as ex:
        want(names, ex)
        while futures:  # builds add the builds of what they call
            built += futures.popleft().result()
    with _stats_lock:
        stats["builds"] += built
        stats["hits"] += hits
    linked, todo = set(), list(names)  # what the kernel calls, transitively (not what was only predicted)
    while todo:
        n = todo.pop()
        if n not in linked:
            linked.add(n)
            todo += object_calls(paths[n])
    for n in linked:
        store_file.mark_used(paths[n])
    first_forms = sorted(later.keys() & linked)
    if first_forms:
        with _stats_lock:
            _provisional.update(str(paths[n]) for n in first_forms)
        _build_final_later([(n, later[n]) for n in first_forms], arch, bc_path, cpu, features, cap)
    return list(dict.fromkeys(paths[n] for n in sorted(linked)))


def opt_tiered() -> bool:
    """Whether an object that :func:`opt_level` builds at ``o3`` is first built ``light`` for the cold
    kernel that waits for it, and at ``o3`` after it in the background (:func:`objects`), and a split
    first form ``quick`` (:func:`_first_form`):
    ``$NVSHMEM_DSL_OUTLINE_OPT`` unset (a value set decides alone) and a CUDA driver here (kernels run
    here; on a machine without one only compile time counts).  Light, the thread-scope broadcast's
    object took 1.1 s of LLVM and 2.8 s of ptxas where O3 took 2.75 and 3.4 s on an H200 host
    (tests/gpu/records/2026-12-01/h200-cold-o3-objects-light-first.txt), and ran 1.05x of C++ where O3
    ran 1.00x (tests/gpu/records/2026-11-25/h200-objects-opt-ab.txt)."""
    return not os.environ.get(OPT_ENV, "").strip() and link.driver_major() is not None


def explain_tiers() -> str:
    """What a cold kernel waits for here (``python -m nvshmem_dsl info``): its objects' first forms
    (:func:`_first_form`: the largest with their loops split and quick, those at O3 built light), their final
    ones built in the background; or the final ones."""
    forms = [what for what, on in (("the largest with their loops split" + (", quick" if opt_tiered() else ""), loop_split.tiered()),
                                   ("those at O3 built light", opt_tiered())) if on]
    if forms:
        return (f"a cold kernel links first forms ({', '.join(forms)}); the final ones are built in the background "
                f"for the kernels after it ({OPT_ENV} / {loop_split.ENV} set: waits for those)")
    return ("a cold kernel waits for its objects' final forms (no CUDA driver here, or "
            f"{OPT_ENV} and {loop_split.ENV} set)")


def _first_form(name: str, arch, bc_path) -> tuple | None:
    """Where a cold kernel waits for another object than API function ``name``'s final one (built later,
    in the background): ``(the split key of the final form, the optimisation level of the first)``;
    None where it waits for the final one.  The first form is split and ``quick`` where its loops are
    split (:func:`nvshmem_dsl.linker.loop_split.tiered`: the final one whole and light), light where the
    final one is at O3 (:func:`opt_tiered`); with ``$NVSHMEM_DSL_OUTLINE_OPT`` set, at its level.  Quick
    only for the split form: what it costs and gains, :data:`~nvshmem_dsl.linker.object_llvm.CODEGEN_LEVELS`."""
    if not calls.is_api_function(split_specialised(name)[0]):
        return None
    split_tier = loop_split.tiered() and _split([name], arch, bc_path)
    opt = opt_level(name)
    opt_tier = opt == "o3" and opt_tiered()
    if not (split_tier or opt_tier):
        return None
    first = ("quick" if split_tier else "light") if opt_tiered() else opt
    return (loop_split.WHOLE if split_tier else loop_split.key()), first


#: Objects :func:`objects` gave in their first form while their final one was still to be built (str paths).
_provisional: set = set()


def provisional(paths) -> bool:
    """Whether any of ``paths`` (from :func:`objects`) is an object in its first form given in place of
    its final one still being built (split where the final one is whole,
    :func:`nvshmem_dsl.linker.loop_split.tiered`; light where it is at O3, :func:`opt_tiered`): a kernel
    linked with it serves this process, but a DSL's disk cache is not to keep it, so that a later process
    links the final object (Numba's ``cache=True``, CuTe's and Triton's file caches)."""
    with _stats_lock:
        return any(str(p) in _provisional for p in paths)


def _split(names, arch, bc_path) -> bool:
    """Whether the object of ``names`` (API functions or helpers, maybe specialised) has its loops
    split (:func:`nvshmem_dsl.linker.loop_split.wanted` of their bodies' sizes)."""
    bases = sorted({split_specialised(name)[0] for name in names})
    return loop_split.wanted(store.body_sizes(bases, arch, bc_path))


#: Final objects this process started building in the background (not started twice).
_final_started: set = set()


def _build_final_later(forms, arch, bc_path: Path, cpu: str, features: str, cap: int) -> None:
    """Start building the final objects of ``forms`` (``(name, split key of its final form)``: whole, at
    :func:`opt_level`) that a kernel was just linked with in their first form (:func:`_first_form`), in a
    process of its own at lower priority that outlives this one if need be; kernels compiled once they
    are there link them instead.  Its failures are its own: the first forms stay."""
    job = [[n, arch, str(bc_path), cpu, features, _scope_cap(n, cap), split] for n, split in forms
           if (n, cpu, features, cap, str(bc_path)) not in _final_started]
    if not job:
        return
    _final_started.update((n, cpu, features, cap, str(bc_path)) for n, _ in forms)
    try:
        subprocess.Popen([sys.executable, "-c", "import json, sys; sys.path[:] = json.loads(sys.argv[2]); "
                          "from nvshmem_dsl.linker import outline; outline._build_final_main(sys.argv[1])",
                          json.dumps(job), json.dumps(sys.path)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    except (OSError, ValueError):  # no interpreter to start (an embedded Python): the first forms stay
        return
    with _stats_lock:
        stats["final_later"] += len(job)


def _build_final_main(job: str) -> None:
    """The process :func:`_build_final_later` starts: builds the objects of ``job`` in their final form."""
    store_build._lower_priority()
    for name, arch, bc_path, cpu, features, cap, split in json.loads(job):
        path = _object_path(name, Path(bc_path), cpu, features, cap, split)
        _build(name, arch, Path(bc_path), cpu, features, cap, path, split=False if split == loop_split.WHOLE else None)


def _cached(path: Path) -> bool:
    """Whether the object ``path`` is in the cache, whole: one that is not (cut short by a crash of
    the machine) is built again, never given to the linker (:func:`.store_file.whole_elf`)."""
    return store_file.whole_elf(path)


def object_calls(path: Path) -> frozenset:
    """The NVSHMEM functions the object ``path`` calls in other objects (written beside it when
    built: ``<object>.calls``; where that is missing, its undefined functions); none for NVIDIA's
    compiled helpers (:func:`nvshmem_dsl.linker.calls.helpers_archive`, a host object: they call each other in it)."""
    if Path(path).suffix == ".o":
        return frozenset()
    try:
        text = path.with_suffix(".calls").read_text()
        if text and not text.endswith("\n"):  # not whole (written with a newline after each)
            raise FileNotFoundError
        return frozenset(text.split())
    except FileNotFoundError:
        return frozenset(n for n, defined in link.elf_symbols(path.read_bytes())
                         if not defined and n not in store.EXPORTED_GLOBALS and re.fullmatch(calls._NVSHMEM_FUNCTION, n))


def _build(name, arch, bc_path, cpu, features, cap, path: Path, text=None, on_calls=None,
           split: bool | None = None, opt: str | None = None) -> bool:
    """Build the object ``path`` of function ``name`` (from its :func:`object_ir` ``text`` where
    given) unless another process did meanwhile; True if built here.  ``on_calls(names)``: told
    what it calls in other objects, before ptxas runs.  ``split``, ``opt``: :func:`object_ptx`'s."""
    with store_file._file_lock(path.with_suffix(".lock")):
        if _cached(path):
            if on_calls is not None:
                on_calls(object_calls(path))
            return False
        for made in (path, path.with_suffix(".calls")):
            store_file.remove_temporaries(made)  # of a build that died
        ptx = calls.prepare_calls(object_ptx([name], arch, cpu, features, bc_path, text=text, split=split, opt=opt), bc_path)
        called = calls.extern_calls(ptx)
        if on_calls is not None:
            on_calls(called)
        try:
            cubin = link.assemble(ptx, cpu, ("-O3", f"-maxrregcount={cap}", *link._ptxas_options()))
        except link.PtxasError as e:
            raise RuntimeError(f"ptxas failed on NVSHMEM's {name} for {cpu} ({code_env.OUTLINE}=none inlines it "
                               f"instead):\n{e}") from None
        store_file.write_atomically(path.with_suffix(".calls"), "".join(f"{n}\n" for n in sorted(called)).encode())
        store_file.write_atomically(path, cubin)  # after its calls: an object's calls are known once it is there
        return True


def object_ir(names, arch, bc_path=None) -> str:
    """The LLVM IR text an object of the NVSHMEM functions ``names`` is built from
    (:func:`object_ptx`): their helpers' (:func:`split_specialised`), everything they call but
    NVSHMEM's out-of-line helpers (declared), and the device-state globals, declared."""
    bases = sorted({split_specialised(name)[0] for name in names})
    return store.api_text(bases, arch, bc_path, declare_exported=True, helpers_out=True)


def object_ptx(names, arch, cpu: str, features: str, bc_path=None, text=None,
               split: bool | None = None, opt: str | None = None) -> str:
    """PTX that defines the NVSHMEM functions ``names`` (``.visible``) and, internal, everything
    they call, for ``cpu``/``features``, except NVSHMEM's helpers, which it calls in their objects
    (before 2026-11-24 afternoon objects held them: bench/results/object-sizes-cpu-2026-11-24.txt
    compares the two); the device-state globals are ``.extern``.  ``text``:
    their :func:`object_ir`, where the caller has it.  ``split``: whether its loops are made
    functions of their own (default: :func:`_split`, by the threshold in effect); ``opt``: how it is
    optimised (default: the most :func:`opt_level` asks for any of ``names``).  The LLVM part
    (:func:`nvshmem_dsl.linker.object_llvm.emit`) runs in a worker process where there may be
    one (:mod:`nvshmem_dsl.linker.object_workers`)."""
    ops = _optable.device_ops()
    if text is None:
        text = object_ir(names, arch, bc_path)
    if opt is None:
        opts = {opt_level(n) for n in names}
        opt = max(opts, key=OPT_LEVELS.index)  # one object of several functions: the most any asks
    return object_workers.emit(
        text=text, names=list(names), cpu=cpu, features=features, opt=opt,
        split_loops=_split(names, arch, bc_path) if split is None else split,
        types={n: ops[n]["llvm_type"] for n in names if n in ops})
