"""The calling convention of NVSHMEM's out-of-line functions: which registers a call preserves.

Under CUDA's default ABI a called function preserves the caller's callee-saved registers: the
object of a large NVSHMEM routine saves every one it uses at its entry and restores them at each
exit, in every call (a broadcast's object: 71 registers at 255, 39 at 64), whatever the caller
keeps live across the call (a kernel's loop: a few).  That was located as one of the two costs
of calling a collective out of line rather than inlining it (BENCHMARKS.md, "Where out-of-line
calls cost").  PTX ISA 9.0 (CUDA 13) lets a function say how many registers it preserves,
``.abi_preserve N`` on its definition and on every declaration its callers see; the callers then
save what they keep live around the call instead.

:func:`preserve` says the count the objects and the kernels that call them use in this process:
:data:`PRESERVE` where the toolchain reads PTX 9.0 (:func:`supported`), else None (the default
ABI); ``NVSHMEM_DSL_ABI_PRESERVE`` forces it (``off``, or a count).  :func:`mark` writes it into
PTX: every NVSHMEM function declared external (a kernel's or an object's calls into objects) and
every one an object defines, and raises ``.version`` to 9.0.  The count is part of each object's
cache key.  A kernel whose declarations disagree with an object's definition does not link (the
linker reports "Prototype doesn't match"): never a call with the wrong convention.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Callable

from . import code_env, link

__all__ = ["ENV", "PRESERVE", "MIN_PTX", "advise", "declared", "explain", "mark", "marked", "object_features",
           "preserve", "supported"]

ENV = code_env.ABI_PRESERVE

#: Registers NVSHMEM's objects preserve for their callers: the fewest ptxas takes without warning
#: that the return-address registers (R14, R15) would be scratch.  A broadcast's object at 255
#: registers then saves none at its entry (71 under the default ABI), at 64 registers 12 (39):
#: tests/test_abi.py, bench/results/abi-preserve-cpu-2026-11-25.txt.
PRESERVE = 2

#: The PTX ISA (x10) that has ``.abi_preserve``.
MIN_PTX = 90

#: ``.abi_preserve N`` after a function's parameter list, if there (its group: the count).
_DIRECTIVE = r"(?:\s*\.abi_preserve\s+(\d+))?"


@functools.lru_cache(maxsize=None)
def _function(kind: str) -> re.Pattern:
    """A function declared (``kind`` ``.extern``) or defined (``.visible``), up to the end of its
    parameters and any ``.abi_preserve``, where ``;`` (declaration) or ``{`` (definition) follows.
    Groups: 1 the text up to the parameters' end, 2 the name, 3 the count (None: no directive)."""
    end = ";" if kind == ".extern" else "{"
    return re.compile(rf"^({re.escape(kind)} \.func\s+(?:\([^)]*\)\s*)?([\w$.]+)\s*\([^)]*\))"
                      rf"{_DIRECTIVE}(?=\s*{re.escape(end)})", re.M)


def mark(ptx: str, count: int | None, wanted: Callable[[str], bool]) -> str:
    """``ptx`` with every function ``wanted(name)`` says, declared ``.extern`` or defined
    ``.visible``, preserving ``count`` registers (``.abi_preserve count``; None: the default ABI, any
    directive removed), and ``.version`` at least 9.0 where one was written."""
    suffix = "" if count is None else f" .abi_preserve {int(count)}"
    marked = 0

    def put(m: re.Match) -> str:
        nonlocal marked
        if not wanted(m.group(2)):
            return m.group(0)
        marked += 1
        return m.group(1) + suffix

    for kind in (".extern", ".visible"):
        ptx = _function(kind).sub(put, ptx)
    if count is None or not marked:
        return ptx
    isa = link.ptx_isa(ptx)
    return ptx if isa is None or isa >= MIN_PTX else link.with_ptx_isa(ptx, MIN_PTX)


def declared(ptx: str, wanted: Callable[[str], bool]) -> dict:
    """``{name: count or None}`` of the functions ``wanted(name)`` says that ``ptx`` declares
    ``.extern`` or defines ``.visible``."""
    out = {}
    for kind in (".extern", ".visible"):
        for m in _function(kind).finditer(ptx):
            if wanted(m.group(2)):
                out[m.group(2)] = None if m.group(3) is None else int(m.group(3))
    return out


def marked(ptx: str) -> bool:
    """Whether ``ptx`` declares or defines a function preserving registers (:func:`mark`), which
    needs PTX :data:`MIN_PTX`."""
    return any(count is not None for count in declared(ptx, lambda name: True).values())


def preserve() -> int | None:
    """The registers NVSHMEM's objects preserve in this process (None: CUDA's default ABI):
    ``$NVSHMEM_DSL_ABI_PRESERVE`` (``off``, ``auto`` or a count from 2 to 255), by default
    :data:`PRESERVE` where :func:`supported`."""
    how = os.environ.get(ENV, "").strip().lower() or "auto"
    if how == "off":
        return None
    if how == "auto":
        return PRESERVE if supported() else None
    try:
        count = int(how)
    except ValueError:
        raise ValueError(f"{ENV}={how!r}: choose off, auto or a count of registers (2-255)") from None
    if not 2 <= count <= 255:
        raise ValueError(f"{ENV}={count}: a count of registers from 2 to 255")
    return count


def _ptxas_major(path: str) -> int | None:
    version = link._ptxas_version(path)
    return version[0] if version else None


def _driver_ptx_ok() -> bool:
    """Whether the CUDA driver, where one is installed, JIT-compiles PTX 9.0 (CUDA 13.0 and later;
    Numba's linker gives it the kernel's PTX).  No driver (a CPU machine): nothing to refuse."""
    major = link.driver_major()
    return major is None or major >= 13


def explain() -> str:
    """What :func:`preserve` gives in this process and why, in words (``python -m nvshmem_dsl info``)."""
    how = os.environ.get(ENV, "").strip().lower() or "auto"
    if how != "auto":
        count = preserve()
        return f"{'CUDA default ABI' if count is None else f'preserve {count} registers'} ({ENV}={how})"
    path = link.ptxas()
    major = _ptxas_major(path) if path else None
    missing = _missing()
    if missing:
        return f"CUDA default ABI, {_COST}: " + ", ".join(missing) + "; " + _REMEDY
    isa = link.nvjitlink_ptx_isa()
    if isa is not None and isa < MIN_PTX:
        return (f"preserve {PRESERVE} registers (ptxas {major} at {path}; it compiles the kernels that call them, "
                f"for nvJitLink of PTX ISA {isa // 10}.{isa % 10})")
    return f"preserve {PRESERVE} registers (ptxas {major})"


#: What CUDA's default ABI costs NVSHMEM's out-of-line collectives (BENCHMARKS.md, h200-abi-preserve.txt).
_COST = "collectives up to 1.24x slower than C++'s"
_REMEDY = ("with a CUDA 13 driver install nvshmem-dsl[cu13], or beside cu12 a CUDA 13 ptxas "
           "(a CUDA 13 toolkit, or pip install 'nvidia-cuda-nvcc>=13,<14')")
_advised = False


def advise() -> None:
    """Warn once a process where a CUDA 13 driver would run objects preserving registers but the
    ptxas found is older (the ``cu12`` wheels alone), so that they keep CUDA's default ABI under
    ``auto`` (:data:`_COST`): the remedy is an install away.  Nothing where
    ``$NVSHMEM_DSL_ABI_PRESERVE`` is set, without a driver or with a CUDA 12 one.  Checked once a
    process (the first link of objects), as the toolchain does not change within one."""
    global _advised
    if _advised:
        return
    _advised = True
    if os.environ.get(ENV, "").strip() or (link.driver_major() or 0) < 13 or supported():
        return
    import warnings

    warnings.warn(f"nvshmem-dsl: NVSHMEM's out-of-line collectives keep CUDA's default calling convention "
                  f"({', '.join(_missing())}), {_COST}; {_REMEDY} ({ENV}=off silences this)",
                  RuntimeWarning, stacklevel=3)


def supported() -> bool:
    """Whether what reads the objects' and kernels' PTX reads ISA 9.0: the objects' ptxas and the
    driver (Numba's linker may give it the kernel's PTX) are CUDA 13 or later.  An nvJitLink that
    reads less (CUDA 12's) gets the kernels that call the objects compiled by that ptxas
    (:func:`nvshmem_dsl.linker.link.nvjitlink_reads`); it links CUDA 13 ptxas's objects."""
    return not _missing()


def _missing() -> list:
    """What keeps :func:`preserve` at CUDA's default ABI under ``auto``, in words (empty: nothing)."""
    path = link.ptxas()
    major = _ptxas_major(path) if path else None
    missing = []
    if major is None or major < 13:
        missing.append(f"ptxas {major if major else 'not found'} (needs 13)")
    if not _driver_ptx_ok():
        missing.append("driver older than CUDA 13")
    return missing


def object_features(features: str) -> str:
    """The LLVM features of the objects for a kernel of ``features`` (``+ptx85``): the same, with
    a PTX ISA of at least :data:`MIN_PTX` where the objects preserve
    registers (``.abi_preserve`` is PTX 9.0), and at most what their ptxas reads (a DSL's own
    compiler may write a newer one: Triton 3.9 and CuTe built for CUDA 13 write 9.4)."""
    least = MIN_PTX if preserve() is not None else 0
    most = link.ptxas_ptx_isa() or 10 ** 6
    return re.sub(r"\+ptx(\d+)", lambda m: f"+ptx{max(min(int(m.group(1)), most), least)}", features)
