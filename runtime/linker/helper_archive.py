"""NVSHMEM's transport helpers as NVIDIA compiled them, from ``libnvshmem_device.a``.

Kernels and the objects of NVSHMEM's large routines call NVSHMEM's ``noinline`` transport helpers
(``nvshmemi_transfer_rma``, ``..._put_signal_dispatch``, ``..._quiet`` ...: the paths to PEs that
loads and stores cannot reach) out of line (:mod:`nvshmem_dsl.linker.outline`).  NVSHMEM's device
library, which CUDA C++ programs link, is those helpers: its member ``transfer_device.cu.o`` holds
all of them (1383 instantiations in 3.8.0), compiled by NVIDIA for each SM it supports (``sm_75`` to
``sm_120``, in the member's fat binary), at most 32 registers each; the API itself is header code,
not in it.  So a kernel's link can add that member (nvJitLink and the driver's linker read the fat
binary and keep the functions called) instead of helper objects compiled here: those were about two
thirds of a cold machine's object builds (the Numba GPU suite's kernels to cubins on the CPU
machine: 53.1 -> 37.4 s, ``bench/results/helper-archive-cpu-2026-11-25.txt``).

The default since 2026-11-25 (``NVSHMEM_DSL_HELPERS=build`` builds them all instead); where there
is no archive, no ``transfer_device.cu.o`` in it, no code for the kernel's SM in its fat binary, or
a member this bitcode cannot serve (:data:`UNUSABLE`), the helpers are objects built from the
bitcode (specialised on their calls' constant modes).  Measured with NVSHMEM 3.8.0, 2 PEs: on one
H200 the Numba, Triton and host suites pass (17 helper objects built, at three register caps; on
the CPU machine 7 instead of 61 at one; ``tests/gpu/records/2026-11-25/h200-helper-archive.txt``);
on one H100 the Numba, Triton and CuTe suites pass in both modes, and collective, ``p``, ``g`` and
fetch-add latency beside C++ moves within one run's spread (every collective 0.53-1.02x of C++:
``h100-helpers-default.txt``).  With 3.4.5
nearly every Numba kernel faulted at run time: 3.4.5's member reads
``nvshmemi_ibgda_device_state_d``, which 3.4.5's bitcode does not define, so no kernel module has it
(the likely cause): such a member is refused (the 3.4.5 suite then passes, every helper built).
The helpers are the paths to PEs that loads and stores cannot reach, which no single-node test
runs, whichever way they are made (NVSHMEM's proxy transport over UCX on one of the lent hosts stops
at its first atomic: ``h100-remote-transport-ucx-tcp.txt``); these are NVIDIA's own, compiled as
CUDA C++ programs link them.  The member is written once to the cache directory, under a name of
its contents' digest.

Not every helper NVSHMEM's bitcode calls is in the archive (3.8.0 has no ``nvshmemi_transfer_rma_p``
of ``__half``), and a kernel's declaration of one must be the archive's prototype: :func:`provided`
links a probe (the kernel's declarations, each function's address taken) with the member once per
helper, in a process of its own, and tells those it defines with that prototype (linked from it),
those it lacks (built) and those it defines otherwise (:data:`MISMATCH`: built under a name of their
own, ``<helper>$p``, since the member's other helpers call its own); the answers are kept beside the
member, shared by the processes that compile at once.  A kernel's or an object's helpers are asked about
while LLVM emits its PTX (:func:`ask_ahead`, from declarations made of its IR's), so that the link does
not wait for the probe after it.

Public: :func:`path`, :func:`provided`, :func:`ask_ahead`, :func:`known`, :func:`key`, :func:`fatbin_archs`,
:func:`archive_member`, :func:`mode`, :func:`explain`; :data:`ENV`, :data:`MEMBER`, :data:`MISMATCH`, :data:`UNUSABLE`,
:data:`ANSWERS_ENDING`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import threading
from pathlib import Path

from . import code_env, link, store_file

__all__ = ["ANSWERS_ENDING", "ENV", "MEMBER", "MISMATCH", "UNUSABLE", "archive_member", "ask_ahead", "explain", "fatbin_archs", "key", "known",
           "mode", "path", "provided"]

ENV = code_env.HELPERS
#: The archive member that holds NVSHMEM's transport helpers.
MEMBER = "transfer_device.cu.o"
ARCHIVE = "libnvshmem_device.a"
#: :func:`known` of a helper the member defines with another prototype than the kernel's declaration.
MISMATCH = "mismatch"
#: The answers' entry that says why the member cannot serve kernels of this bitcode at all (its helpers
#: read a device-state global the bitcode does not define, so no kernel module has it: NVSHMEM 3.4.5's
#: member and ``nvshmemi_ibgda_device_state_d``).
UNUSABLE = "(member)"
_MODES = ("archive", "build")


def mode() -> str:
    """``$NVSHMEM_DSL_HELPERS``: ``archive`` (default: NVIDIA's compiled helpers where they serve,
    see the module's docstring for what was measured) or ``build`` (objects built from the bitcode)."""
    value = os.environ.get(ENV, "").strip().lower() or "archive"
    if value not in _MODES:
        raise ValueError(f"{ENV}={value!r}: give one of {', '.join(_MODES)}")
    return value


def explain() -> str:
    """Where kernels' transport helpers come from here, in words (``python -m nvshmem_dsl info``)."""
    if mode() == "build":
        return f"built from the bitcode ({ENV}=build)"
    from .._libs import installation

    archive = _archive_beside(installation().bitcode_files[0])
    member = archive_member(archive) if archive.exists() else None
    if member is None:
        return f"built from the bitcode: no {MEMBER} in {archive}"
    archs = ", ".join(f"sm_{a}" for a in sorted(fatbin_archs(member)))
    return f"NVIDIA's compiled ones where they serve ({archive}: {archs}), the others built"


def archive_member(archive: Path, member: str = MEMBER) -> bytes | None:
    """The bytes of ``member`` of the ``ar`` archive ``archive`` (GNU or BSD names), None if absent."""
    return _member(str(archive), member, *_stamp(archive))


def _stamp(p: Path) -> tuple:
    st = os.stat(p)
    return st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=8)
def _member(archive: str, member: str, size: int, mtime: int) -> bytes | None:
    with open(archive, "rb") as fh:
        data = fh.read()
    if not data.startswith(b"!<arch>\n"):
        return None
    at, names = 8, b""
    while at + 60 <= len(data):
        head = data[at:at + 60]
        name, length = head[:16].rstrip(b" "), int(head[48:58])
        body = data[at + 60:at + 60 + length]
        if name == b"//":  # GNU long names
            names = body
        else:
            if name.startswith(b"/") and name[1:].isdigit() and names:  # GNU: an offset into them
                start = int(name[1:])
                name = names[start:names.index(b"\n", start)]
            elif name.startswith(b"#1/"):  # BSD: the name leads the body
                n = int(name[3:])
                name, body = body[:n].rstrip(b"\0"), body[n:]
            if name.rstrip(b"/").decode(errors="replace") == member:
                return bytes(body)
        at += 60 + length + (length & 1)
    return None


def fatbin_archs(obj: bytes) -> frozenset:
    """The SMs (``90``, ``100`` ...) an ELF host object's fat binaries hold relocatable device code
    (ELF, not PTX) for."""
    try:
        names, secs, data = link.elf_sections(obj)
    except (struct.error, IndexError, ValueError):
        return frozenset()
    archs = set()
    for i, (name_at, _, _, _, _) in enumerate(secs):
        if link.elf_string(names, name_at) not in (".nv_fatbin", "__nv_relfatbin"):
            continue
        fatbin, at = data(i), 0
        while at + 16 <= len(fatbin):
            magic, _, head, body = struct.unpack_from("<IHHQ", fatbin, at)
            if magic != 0xBA55ED50:
                break
            entry, last = at + head, at + head + body
            while entry + 32 <= last:
                kind, _, entry_head, payload = struct.unpack_from("<HHIQ", fatbin, entry)
                arch, = struct.unpack_from("<I", fatbin, entry + 28)
                if kind == 2:  # ELF
                    archs.add(arch)
                entry += entry_head + payload
            at = (last + 7) & ~7
    return frozenset(archs)


def path(sm: int, bc_path=None) -> Path | None:
    """The object file of NVSHMEM's compiled transport helpers to link kernels of SM ``sm`` with
    (the bitcode ``bc_path``'s installation, default the host library's), written to the cache
    directory once; None where the helpers are to be built from the bitcode instead (see the
    module's docstring)."""
    if mode() != "archive":
        return None
    try:
        bc_path = Path(bc_path) if bc_path else store_file._default_bitcode(sm)
    except Exception:  # noqa: BLE001 - no NVSHMEM: whoever links reports that
        return None
    member = _path(sm, str(_archive_beside(bc_path)))
    if member is None or _load(member, sm).get(UNUSABLE):
        return None
    store_file.mark_used(member)  # (the cache's pruning reads its last use)
    return member


def _archive_beside(bc_path: Path) -> Path:
    """Where NVSHMEM's device library is, for the bitcode file ``bc_path`` (as pip installs them)."""
    return Path(bc_path).parent / ARCHIVE


def _path(sm: int, archive: str) -> Path | None:
    try:
        stamp = _stamp(Path(archive))
    except OSError:
        return None
    return _extracted(sm, archive, *stamp)


@functools.lru_cache(maxsize=16)
def _extracted(sm: int, archive: str, size: int, mtime: int) -> Path | None:
    data = _member(archive, MEMBER, size, mtime)
    if data is None or sm not in fatbin_archs(data):
        return None
    out = _member_file(data)
    if not store_file.whole_elf(out):  # (written by whoever finds it missing: the same bytes)
        out.parent.mkdir(parents=True, exist_ok=True)
        store_file.write_atomically(out, data)
    return out


def _member_file(data: bytes) -> Path:
    """Where the member ``data`` is written in the cache (a cache entry with its answers' files:
    :mod:`nvshmem_dsl.linker.cache`)."""
    return store_file.cache_dir() / store_file.OBJECTS_FOLDER / f"nvshmem-helpers-{hashlib.sha256(data).hexdigest()[:20]}.o"


# --------------------------------------------------------------------------
# Which helpers the member defines, with the prototype kernels declare

_lock = threading.Lock()
_answers: dict = {}  # (member path, sm) -> {helper: defined with that prototype}
_probe_failed: set = set()  # (member path, sm) whose probe failed in this process: not probed again
_UNDEFINED = re.compile(r"Undefined reference to '([^']+)'")
_MISMATCH = re.compile(r"Prototype doesn't match for '([^']+)'")
_FINISH = re.compile(r"^ERROR \d+: \w+$")  # its last line: "finish" (CUDA 12), "complete" (13)


#: Bump when the answers mean something else (part of their file's name and of the objects' key:
#: :func:`key`); 2: written merged with the file's under its lock (1 lost other processes' answers).
ANSWERS_VERSION = 2


#: The ending of the answers' file beside the member ``X.o`` (``X.o.sm90.v2.json``: :func:`_answers_file`) and of its
#: lock, of this version or an earlier one: what the cache's report and pruning take as the member's (:mod:`.cache`).
ANSWERS_ENDING = re.compile(r"\.o\.sm\d+(?:\.v\d+)?\.(?:json|lock)$")


def _answers_file(member: Path, sm: int) -> Path:
    return member.with_name(f"{member.name}.sm{sm}.v{ANSWERS_VERSION}.json")


def key(sm: int, bc_path=None) -> str | None:
    """What objects built for SM ``sm`` depend on here, for their cache key: the member their calls
    of NVIDIA's helpers are linked from and the answers' version; None where helpers are built."""
    member = path(sm, bc_path)
    return None if member is None else f"{member.name}:v{ANSWERS_VERSION}"


def _read(member: Path, sm: int) -> dict:
    try:
        return json.loads(_answers_file(member, sm).read_text())
    except (OSError, ValueError):
        return {}


def _load(member: Path, sm: int, name: str | None = None) -> dict:
    """The answers for the member and SM held in memory, read from their file the first time, and
    again when ``name`` is not among them (another process may have asked since)."""
    key = (str(member), sm)
    with _lock:
        answers = _answers.setdefault(key, {})
        if not answers or (name is not None and name not in answers):
            answers.update(_read(member, sm))
            store_file.mark_used(_answers_file(member, sm))  # kept while the objects that rely on it are
        return answers


def _save(member: Path, sm: int, found: dict) -> None:
    """Add ``found`` to the answers' file (under its lock: processes asking at once keep each other's)."""
    target = _answers_file(member, sm)
    try:
        with store_file._file_lock(target.with_suffix(".lock")):
            store_file.remove_temporaries(target)  # of a process that died writing it
            answers = _read(member, sm)
            answers.update(found)
            store_file.write_atomically(target, json.dumps(answers, sort_keys=True).encode())
    except OSError:
        pass


def known(sm: int, name: str, bc_path=None):
    """Whether NVIDIA's compiled object for SM ``sm`` (:func:`path`) defines helper ``name``, as
    :func:`provided` found in this process or another: True; False (not in it, or the helpers are
    built); :data:`MISMATCH` (in it, with another prototype: a link that takes others from it would
    get that definition too); None when not asked yet."""
    member = path(sm, bc_path)
    if member is None:
        return False
    return _load(member, sm, name).get(name)


def provided(sm: int, declarations: dict, bc_path=None) -> dict:
    """Of the helpers ``declarations`` names (name -> the PTX declaration a kernel or object makes
    of it: ``.extern .func ... name (...);``), what NVIDIA's compiled object for SM ``sm``
    (:func:`path`) has (:func:`known`: True, False or :data:`MISMATCH`); empty where the helpers
    are built.  Helpers not asked about before are probed in one link, and the answers kept in a
    file beside the member before any object that calls them is built; helpers a probe under way in
    this process asks about (:func:`ask_ahead`'s) are waited for, not probed again.  Where the probe
    fails, those are answered :data:`MISMATCH` (built under names of their own), nothing is kept, and
    this process does not probe again (helpers it has not asked about are answered so too)."""
    member = path(sm, bc_path)
    if member is None or not declarations:
        return {}
    _ask(member, sm, declarations, Path(bc_path) if bc_path else store_file._default_bitcode(sm))
    answers = _load(member, sm)
    with _lock:
        if UNUSABLE in answers:
            return {}
        if (str(member), sm) in _probe_failed:
            return {n: answers.get(n, MISMATCH) for n in declarations}
        return {n: answers[n] for n in declarations if n in answers}


def ask_ahead(sm: int, names, declarations, bc_path=None) -> threading.Thread | None:
    """Start asking NVIDIA's compiled object about the helpers ``names`` in a thread of its own, before
    the PTX that calls them is there (an object's or a kernel's while LLVM emits it:
    :func:`nvshmem_dsl.linker.outline.objects`, :func:`nvshmem_dsl.linker.pipeline.inline_nvshmem`), so
    that its :func:`provided` finds the answers, or waits for them, instead of probing then.
    ``declarations()``: their declarations (as :func:`provided` takes them), made only where one of
    ``names`` has no answer yet; None where there is nothing to ask."""
    member = path(sm, bc_path)
    if member is None or not names:
        return None
    answers = _load(member, sm)
    with _lock:
        if UNUSABLE in answers or all(n in answers for n in names):
            return None
    thread = threading.Thread(target=provided, args=(sm, declarations(), bc_path), name="nvshmem-dsl-helper-probe",
                              daemon=True)
    thread.start()
    return thread


#: (member path, sm) -> {helper: the Event of the probe under way in this process that asks about it}
_asking: dict = {}


def _ask(member: Path, sm: int, declarations: dict, bc_path: Path) -> None:
    """Probe the helpers of ``declarations`` that have no answer and no probe under way (:func:`_probe`; the
    answers kept beside the member), and wait for those under way."""
    key = (str(member), sm)
    answers = _load(member, sm)
    done = threading.Event()
    with _lock:
        running = _asking.setdefault(key, {})
        unknown = [n for n in declarations if n not in answers and UNUSABLE not in answers]
        waits = {running[n] for n in unknown if n in running}
        new = {} if key in _probe_failed else {n: declarations[n] for n in unknown if n not in running}
        for n in new:
            running[n] = done
    try:
        if new:
            found = _probe(member, sm, new, bc_path)
            if found is None:  # the probe did not link (no nvJitLink, a crash, a timeout): these are built, under
                # names of their own (as MISMATCH: none can clash with the member, which serves the helpers known to
                # be its); not kept, and not probed again in this process (no probe per kernel): the next asks again
                with _lock:
                    _probe_failed.add(key)
            else:
                _save(member, sm, found)
                with _lock:
                    answers.update(found)
    finally:
        with _lock:
            for n in new:
                running.pop(n, None)
        done.set()
    for event in waits:
        event.wait()


@functools.lru_cache(maxsize=4)
def _bitcode_definitions(bc_path: str, size: int, mtime: int):
    """What the bitcode file defines (functions with a body, global variables with an initializer),
    read from its module records; for a layout :mod:`.bodies` does not read, its bytes (a name in
    them: its string table has every symbol's name)."""
    from . import bodies, pieces

    with open(bc_path, "rb") as fh:
        data = fh.read()
    try:  # the functions as a first kernel's closure listed them (read once a process)
        return bodies.defined_globals(data) | {f.name for f in pieces._functions_of(Path(bc_path), data) if f.has_body}
    except bodies.BitcodeLayoutError:
        return data


def _bitcode_has(bc_path: Path, name: str) -> bool:
    """Whether the bitcode ``bc_path`` defines ``name``, so that a kernel module made from it may."""
    st = os.stat(bc_path)
    defined = _bitcode_definitions(str(bc_path), st.st_size, st.st_mtime_ns)
    return (name.encode() if isinstance(defined, bytes) else name) in defined


def _probe(member: Path, sm: int, declarations: dict, bc_path: Path) -> dict | None:
    """``{helper: True, False or MISMATCH}`` (:func:`known`), or ``{UNUSABLE: why}``, of one link of the member with a kernel
    that takes each helper's address under its declaration, in a process of its own (nvJitLink
    lists undefined references in its log and writes prototype mismatches to the process's stderr;
    and it need not be safe to call in a forked process); None without nvJitLink, or where the
    probe fails otherwise."""
    isa = link.nvjitlink_ptx_isa()
    if isa is None:
        return None
    names = sorted(declarations)
    body = "".join(f"\tmov.u64 %rd{i}, {n};\n" for i, n in enumerate(names))
    ptx = (f".version {isa // 10}.{isa % 10}\n.target sm_{sm}\n.address_size 64\n"
           + "".join(declarations[n].rstrip() + "\n" for n in names)
           + f".visible .entry nvshmem_dsl_helper_probe()\n{{\n\t.reg .b64 %rd<{len(names) + 1}>;\n{body}\tret;\n}}\n")
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, str(member), str(sm)], input=ptx.encode(),
                              capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    log, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    if done.returncode != 0 or any(line.strip() and not _UNDEFINED.search(line) and not _FINISH.match(line.strip())
                                   for line in log.replace("\0", "").splitlines()):
        return None  # failed otherwise than on what the member lacks: build them
    missing = set(_UNDEFINED.findall(log))
    lacking = sorted(n for n in missing - set(names) if not _bitcode_has(bc_path, n))
    if lacking:  # the member's helpers read globals no kernel module of this bitcode defines
        return {UNUSABLE: f"its helpers read {', '.join(lacking)}, which {bc_path.name} does not define"}
    other = set(_MISMATCH.findall(err))
    return {n: False if n in missing else MISMATCH if n in other else True for n in names}


# The probe's process: links the PTX on stdin with the member (argv: its path, the SM) and prints
# nvJitLink's error log (none when it links); exit status 3 where the PTX did not compile.
_PROBE = """
import sys
from cuda.bindings import nvjitlink
member, sm = sys.argv[1], int(sys.argv[2])
ptx, data = sys.stdin.buffer.read(), open(member, "rb").read()
h = nvjitlink.create(1, [f"-arch=sm_{sm}"])
try:
    nvjitlink.add_data(h, nvjitlink.InputType.PTX, ptx, len(ptx), "probe.ptx")
    nvjitlink.add_data(h, nvjitlink.InputType.OBJECT, data, len(data), member)
    try:
        nvjitlink.complete(h)
    except nvjitlink.nvJitLinkError:
        log = bytearray(nvjitlink.get_error_log_size(h))
        nvjitlink.get_error_log(h, log)
        sys.stdout.write(bytes(log).decode(errors="replace"))
except nvjitlink.nvJitLinkError:
    sys.exit(3)
finally:
    nvjitlink.destroy(h)
"""
