"""The first stage of the linker: which NVSHMEM functions a kernel inlines, which it calls out of line.

NVSHMEM's small device functions (p/g, put/get at every scope, atomics, signals, waits,
fence/quiet, queries) are inlined into the kernel: that is what makes them as fast as C++.  Its
large routines are not: each of NVSHMEM 3.8's collectives inlined is about 1 MiB of PTX, 9-13 s
from a kernel to its cubin on a 2-CPU machine, and well over 64 registers (a 512-thread block
reduction no longer launched).  They are called in cached relocatable objects instead
(:mod:`nvshmem_dsl.linker.outline`).

The criterion (:func:`is_large`): the number of instructions of the function's own body in
NVSHMEM's bitcode (what inlining copies into the caller; not its out-of-line helpers, which are
calls either way), at least :data:`MIN_INSTRUCTIONS`.  Measured on NVSHMEM 3.8
(bench/results/outline-cpu-2026-11-24.txt): the small operations have at most 477
(``put_signal_block``), syncs and barriers 811-991, collectives 1668-12581.
``NVSHMEM_DSL_OUTLINE`` forces it: ``auto`` (the criterion, default), ``none`` (all inlined, as
before), ``all`` (every NVSHMEM function out of line); per kernel, ``with override("none"):``
around the kernel's compilation (its first launch or ``compile()``).  :func:`split` applies it;
:func:`helpers_out` says whether NVSHMEM's own out-of-line helpers are called in objects too.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import warnings

from .. import _optable
from . import code_env, link, store

__all__ = ["ENV", "MIN_INSTRUCTIONS", "MODES", "helpers_out", "is_large", "mode", "override", "split"]


#: The variable that forces the mode, and the modes.
ENV = code_env.OUTLINE
MODES = ("auto", "none", "all")

#: The criterion's threshold: an NVSHMEM function whose own body has at least this many
#: instructions is linked out of line (between the largest small operation, 477, and the smallest
#: sync, 811, of NVSHMEM 3.8).
MIN_INSTRUCTIONS = 600

_forced: contextvars.ContextVar = contextvars.ContextVar("nvshmem_dsl_outline", default=None)


def _check_mode(how: str) -> str:
    how = (how or "auto").strip().lower()
    if how not in MODES:
        raise ValueError(f"{ENV}={how!r}: choose one of {', '.join(MODES)}")
    return how


def mode() -> str:
    """``auto``, ``none`` or ``all``: the :func:`override` in effect, else ``$NVSHMEM_DSL_OUTLINE``
    (default ``auto``)."""
    return _check_mode(_forced.get() or os.environ.get(ENV, "auto"))


@contextlib.contextmanager
def override(how: str):
    """Compile the kernels compiled inside with outlining ``how`` (``auto``, ``none``, ``all``),
    whatever ``$NVSHMEM_DSL_OUTLINE`` says, e.g. ``with nv.outline("none"): kernel.compile(sig)``."""
    token = _forced.set(_check_mode(how))
    try:
        yield
    finally:
        _forced.reset(token)


def is_large(instructions: int) -> bool:
    """The criterion: whether an NVSHMEM function whose own body has ``instructions``
    instructions is linked out of line (in ``auto`` mode)."""
    return instructions >= MIN_INSTRUCTIONS


_warned_no_ptxas = False


def split(names, arch=90, bc_path=None) -> tuple[frozenset, frozenset]:
    """``(inline, outlined)``: the NVSHMEM functions ``names`` to inline into a kernel for SM
    ``arch`` and those to call in their objects, as :func:`mode` says.  Only functions of the op
    table are outlined (it gives their type); without ptxas none is."""
    global _warned_no_ptxas
    names = frozenset(names)
    how = mode()
    if how == "none" or not names:
        return names, frozenset()
    if link.ptxas() is None:
        if not _warned_no_ptxas:
            _warned_no_ptxas = True
            warnings.warn("no ptxas found (CUDA's nvidia-cuda-nvcc wheel or CUDA_HOME): NVSHMEM's "
                          "collectives are inlined into kernels, which is slow to compile",
                          RuntimeWarning, stacklevel=2)
        return names, frozenset()
    known = names & _optable.device_ops().keys()
    if how == "all":
        out = known
    else:
        out = {n for n, k in store.body_sizes(known, arch, bc_path).items() if is_large(k)}
    return names - out, frozenset(out)


def helpers_out() -> bool:
    """Whether kernels call NVSHMEM's out-of-line helpers (its ``noinline`` transport functions,
    :attr:`nvshmem_dsl.linker.store_file._Store.helpers`) in cached objects instead of compiling
    them again each (most of a fine-grained kernel's PTX, docs/concepts.rst): as hybrid linking,
    unless :func:`mode` is ``none`` or there is no ptxas."""
    return mode() != "none" and link.ptxas() is not None
