"""The last stage of the linker: the tools that make a cubin, and what they read.

* the toolchain installed: the objects' ptxas (:func:`ptxas`, chosen for the CUDA driver,
  :func:`driver_major`) and the PTX ISA it reads (:func:`ptxas_ptx_isa`), nvJitLink's
  (:func:`nvjitlink_ptx_isa`), the ISA an SM needs (:func:`min_ptx`, :func:`default_ptx`);
* PTX's ``.version`` and ``.target`` (:func:`ptx_isa`, :func:`with_ptx_isa`, :func:`ptx_target`);
* ptxas run on PTX (:func:`assemble`: the one place it runs; :func:`ptxas_object` for a kernel that
  nvJitLink does not read) and nvJitLink's link of a kernel with NVSHMEM's objects
  (:func:`nvjitlink_cubin`, which fails with :class:`NvshmemLinkError`);
* an ELF reader for cubins and host objects (:func:`elf_sections`, :func:`elf_string`,
  :func:`elf_symbols`, :func:`cubin_info`), no CUDA tools needed.

It imports nothing of the linker: every other stage may use it.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["NvshmemLinkError", "PTX_VERSION", "PtxasError", "assemble", "cubin_info", "default_features",
           "default_ptx", "driver_major", "elf_sections", "elf_string", "elf_symbols", "min_ptx", "nvjitlink_cubin",
           "nvjitlink_ptx_isa", "nvjitlink_reads", "ptx_isa", "ptx_target", "ptxas", "ptxas_object", "ptxas_ptx_isa", "with_ptx_isa"]


class NvshmemLinkError(RuntimeError):
    """Linking NVSHMEM device code into a kernel failed."""


def min_ptx(sm: int) -> int:
    """The PTX ISA (x10) needed to target the SM at all: sm_90a 8.0, sm_100 8.6 ..."""
    table = {100: 86, 101: 86, 103: 88, 110: 90, 120: 87, 121: 88}
    return table.get(sm, 80 if sm >= 90 else 70)


def default_ptx(sm: int) -> int:
    """The PTX ISA (x10) kernels' NVSHMEM code and NVSHMEM's objects are emitted for by default:
    8.5, or what the SM needs (:func:`min_ptx`)."""
    return max(85, min_ptx(sm))


def default_features(sm: int) -> str:
    """The LLVM features of :func:`default_ptx`, e.g. ``+ptx85``."""
    return f"+ptx{default_ptx(sm)}"


def _isa(major: int, minor: int) -> int | None:
    """The highest PTX ISA (x10) CUDA ``major.minor``'s compilers read (12.x: 8.0 ... 8.8, 13.x: 9.x)."""
    if major == 12:
        return 80 + minor if minor < 6 else 79 + minor
    return 90 + minor if major == 13 else None


def nvjitlink_ptx_isa() -> int | None:
    """The highest PTX ISA (x10) the installed nvJitLink compiles (CUDA 12.x: 8.0 ... 8.8, 13.x:
    9.x), None without nvJitLink."""
    try:
        from cuda.bindings import nvjitlink

        major, minor = nvjitlink.version()
    except Exception:  # noqa: BLE001 - no cuda.bindings, no libnvJitLink
        return None
    return _isa(major, minor)


def ptxas_ptx_isa() -> int | None:
    """The highest PTX ISA (x10) the objects' ptxas (:func:`ptxas`) reads."""
    path = ptxas()
    version = _ptxas_version(path) if path else None
    return _isa(*version) if version else None


def nvjitlink_reads(ptx: str) -> bool:
    """Whether nvJitLink (where there is one) compiles ``ptx`` itself: its ``.version`` is one it
    reads.  PTX that it does not (NVSHMEM's objects' calling convention, PTX 9.0, with the nvJitLink
    of CUDA 12) is compiled by the objects' ptxas first (:func:`ptxas_object`)."""
    have, version = nvjitlink_ptx_isa(), ptx_isa(ptx)
    return have is None or version is None or version <= have


#: nvJitLink options that ptxas takes as they are (the others: ``-Xptxas=<option>``).
_PTXAS_OPTIONS = re.compile(r"^-(?:O\d|lineinfo|maxrregcount=\d+)$")


def ptxas_object(ptx: bytes, arch: str, options=(), what: str = "a kernel") -> bytes:
    """A relocatable cubin of PTX ``ptx`` for ``arch``, by the objects' ptxas, with the ptxas part of
    the nvJitLink ``options`` (``-O3``, ``-lineinfo``, ``-maxrregcount=N``, ``-Xptxas=...``), for an
    nvJitLink that does not read its PTX ISA (:func:`nvjitlink_reads`): nvJitLink of CUDA 12 links
    CUDA 13 ptxas's objects (checked: tests/test_link_ptxas.py)."""
    if ptxas() is None:
        raise NvshmemLinkError(f"{what}: its PTX ISA is newer than nvJitLink reads and no ptxas was found to "
                               "compile it (install a CUDA toolkit, or nvshmem-dsl[cu13])")
    args = []
    for opt in options:
        if opt.startswith("-Xptxas="):
            args.append(opt[len("-Xptxas="):])
        elif _PTXAS_OPTIONS.match(opt):
            args.append(opt)
    try:
        return assemble(ptx, arch, args)
    except PtxasError as e:
        raise NvshmemLinkError(f"ptxas ({ptxas()}) failed to compile {what} for {arch}:\n{e}") from None


def nvjitlink_cubin(arch: str, inputs, options=(), what: str = "a kernel", hint: str = "") -> bytes:
    """An executable cubin for ``arch`` linked by nvJitLink from ``inputs``, ``(name, bytes)``: PTX
    where the name ends in ``.ptx`` (compiled by nvJitLink's ptxas with ``options``), host objects
    with device code where it ends in ``.o`` (NVIDIA's compiled helpers), cubins otherwise (the
    objects of :func:`nvshmem_dsl.linker.outline.objects`).  A failure raises
    :class:`NvshmemLinkError` with nvJitLink's log and ``hint``."""
    from cuda.bindings import nvjitlink

    opts = [f"-arch={arch}", *options]
    handle = nvjitlink.create(len(opts), opts)
    try:
        try:
            for name, data in inputs:
                if name.endswith(".ptx") and not nvjitlink_reads(data.decode(errors="replace")):
                    name, data = name[:-len(".ptx")] + ".cubin", ptxas_object(data, arch, options, what)
                kind = (nvjitlink.InputType.PTX if name.endswith(".ptx") else
                        nvjitlink.InputType.OBJECT if name.endswith(".o") else nvjitlink.InputType.CUBIN)
                nvjitlink.add_data(handle, kind, data, len(data), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            log = bytes(log).decode(errors="replace").rstrip("\0").strip()
            raise NvshmemLinkError(f"nvJitLink failed to link {what} for {arch} with NVSHMEM's objects "
                                   f"({exc}):\n{log}" + (f"\n{hint}" if hint else "")) from None
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


@functools.lru_cache(maxsize=None)
def ptxas() -> str | None:
    """The ptxas that assembles the objects.  Of those found (:func:`_ptxas_found`), where there is a
    CUDA driver the newest of a CUDA release it runs the code of (the major version at most the
    driver's: a CUDA 13 toolkit, or the ``nvidia-cuda-nvcc`` 13 wheel, beside the ``cu12`` wheels gives
    the objects CUDA 13's calling convention, :mod:`nvshmem_dsl.linker.abi`; on a CUDA 12 driver the
    ``cu12`` wheel's is used); without one, the first."""
    found = _ptxas_found()
    if not found:
        return None
    driver = driver_major()
    if driver is None:
        return found[0]
    usable = [(version, -k, path) for k, path in enumerate(found)
              if (version := _ptxas_version(path)) is not None and version[0] <= driver]
    return max(usable)[2] if usable else found[0]


#: Where NVIDIA's nvcc wheels put ptxas under a site-packages folder: CUDA 13's, CUDA 12's.
_WHEEL_PTXAS = (("nvidia", "cu13", "bin", "ptxas"), ("nvidia", "cuda_nvcc", "bin", "ptxas"))


def _ptxas_found() -> list:
    """The ptxas executables of this machine that :func:`ptxas` chooses from, in its order of preference:
    ``cuda.pathfinder``'s, those of the nvcc wheels on ``sys.path`` (both where the CUDA 12 and 13 ones are
    installed, e.g. ``nvidia-cuda-nvcc`` 13 beside the ``cu12`` wheels), CUDA_HOME's, PATH's, /usr/local/cuda's."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        first = find_nvidia_binary_utility("ptxas")
    except Exception:  # noqa: BLE001 - an older cuda.pathfinder, or none found
        first = None
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    wheels = [os.path.join(entry, *parts) for entry in sys.path if entry for parts in _WHEEL_PTXAS]
    out = []
    for path in (first, *wheels, home and os.path.join(home, "bin", "ptxas"), shutil.which("ptxas"),
                 "/usr/local/cuda/bin/ptxas"):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            real = os.path.realpath(path)
            if real not in (os.path.realpath(p) for p in out):
                out.append(path)
    return out


@functools.lru_cache(maxsize=None)
def _ptxas_options() -> tuple:
    """``--split-compile=0`` where ptxas has it (CUDA 12.3+): it optimises the functions of an
    object in threads, one per CPU (a broadcast's object: 5.7 -> 3.1 s on 2 CPUs)."""
    help_text = subprocess.run([ptxas(), "--help"], capture_output=True, text=True).stdout
    return ("--split-compile=0",) if "--split-compile" in help_text else ()


#: A PTX file's ``.version``: (major, minor).
PTX_VERSION = re.compile(r"^\.version (\d+)\.(\d+)", re.M)


def ptx_isa(ptx: str) -> int | None:
    """The PTX ISA (x10) that ``ptx`` says in its ``.version`` (None: none written)."""
    m = PTX_VERSION.search(ptx)
    return None if m is None else int(m.group(1)) * 10 + int(m.group(2))


def with_ptx_isa(ptx: str, isa: int) -> str:
    """``ptx`` with its ``.version`` saying ISA ``isa`` (x10)."""
    m = PTX_VERSION.search(ptx)
    return f"{ptx[:m.start()]}.version {isa // 10}.{isa % 10}{ptx[m.end():]}"


def ptx_target(ptx: str) -> tuple[str, str]:
    """``(cpu, features)`` of PTX ``ptx`` as LLVM names them (``sm_90a``, ``+ptx85``): its
    ``.target`` and ``.version``, what objects linked with it are built for."""
    cpu = re.search(r"^\.target (sm_\w+)", ptx, re.M).group(1).split(",")[0].strip()
    return cpu, f"+ptx{ptx_isa(ptx)}"


class PtxasError(RuntimeError):
    """ptxas failed; the message is the end of what it printed."""


def assemble(ptx, arch: str, options=()) -> bytes:
    """The relocatable cubin ``ptxas -c -arch=<arch> <options>`` (:func:`ptxas`) makes of PTX ``ptx``
    (text or bytes), compiled in a temporary folder; :class:`PtxasError` when it fails.  The one
    place that runs ptxas on PTX: NVSHMEM's objects (:func:`nvshmem_dsl.linker.outline._build`) and kernels whose PTX
    nvJitLink does not read (:func:`nvshmem_dsl.linker.link.ptxas_object`)."""
    with tempfile.TemporaryDirectory(prefix="nvshmem-dsl-ptxas-") as tmp:
        src, out = Path(tmp, "in.ptx"), Path(tmp, "out.cubin")
        src.write_bytes(ptx.encode() if isinstance(ptx, str) else ptx)
        done = subprocess.run([ptxas(), "-c", f"-arch={arch}", *options, str(src), "-o", str(out)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise PtxasError(done.stderr[-3000:])
        return out.read_bytes()


_EIATTR_REGCOUNT = 0x2F


def elf_sections(cubin: bytes):
    """``(section names, [(name offset, type, offset, size, link)], data(i))`` of a 64-bit ELF file
    (a cubin, or a host object)."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = [struct.unpack_from("<IIxxxxxxxxxxxxxxxxQQI", cubin, shoff + i * shentsize) for i in range(shnum)]

    def data(i):
        return cubin[secs[i][2]:secs[i][2] + secs[i][3]]

    return data(shstrndx), secs, data


def elf_string(blob: bytes, at: int) -> str:
    """The string at ``at`` of an ELF string table ``blob``."""
    return blob[at:blob.index(b"\0", at)].decode()


def elf_symbols(cubin: bytes) -> list:
    """``(name, defined)`` of every entry of an ELF cubin's symbol table, in order (unnamed ones
    with the name "")."""
    cubin = bytes(cubin)
    _, secs, data = elf_sections(cubin)
    out = []
    for i, (_, kind, _, _, link) in enumerate(secs):
        if kind == 2:  # SHT_SYMTAB
            strtab, table = data(link), data(i)
            for at in range(0, len(table), 24):
                st_name, _, _, st_shndx = struct.unpack_from("<IBBH", table, at)
                out.append((elf_string(strtab, st_name), st_shndx != 0))
    return out


def cubin_info(cubin: bytes) -> tuple[collections.Counter, dict]:
    """``(defined, registers)`` of an ELF cubin: how many times each symbol is defined, and the
    registers of each function (``.nv.info``'s REGCOUNT; a linked kernel's counts its callees)."""
    cubin = bytes(cubin)
    entries = elf_symbols(cubin)
    symbols = [name for name, _ in entries]
    defined = collections.Counter(name for name, is_defined in entries if is_defined)
    names, secs, data = elf_sections(cubin)
    registers = {}
    for i, sec in enumerate(secs):
        if elf_string(names, sec[0]) == ".nv.info":
            blob, at = data(i), 0
            while at + 4 <= len(blob):
                fmt, attr, size = struct.unpack_from("<BBH", blob, at)
                size = size if fmt == 4 else 0  # EIFMT_SVAL carries `size` bytes
                if attr == _EIATTR_REGCOUNT and size == 8:
                    sym, count = struct.unpack_from("<II", blob, at + 4)
                    registers[symbols[sym]] = count
                at += 4 + size
    return defined, registers


@functools.lru_cache(maxsize=None)
def _ptxas_version(path: str) -> tuple[int, int] | None:
    """(major, minor) of the CUDA release of ptxas ``path``."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.lru_cache(maxsize=None)
def driver_major() -> int | None:
    """The CUDA major version of the installed driver (13 for 580 and later), None without one."""
    try:
        from cuda.bindings import driver

        err, version = driver.cuDriverGetVersion()
    except Exception:  # noqa: BLE001 - no cuda.bindings or no libcuda
        return None
    return None if int(err) != 0 else version // 1000
