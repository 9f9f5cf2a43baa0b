"""NVSHMEM's largest out-of-line routines with their loops as functions of their own, for ptxas.

ptxas's time grows faster than a function's size.  NVSHMEM 3.8's block reduction is one function of
22 000 instructions in its object (787 KiB of PTX), 6-10 s of ptxas at any ``-O`` level, register cap or
``-Ofast-compile`` (4.4 s at ``-O0``); a broadcast, 11 500 instructions, 2.4 s.  With each of their loops
made a function of its own (LLVM's loop extractor: 179 loops in the block reduction, 118 in a broadcast)
ptxas takes 1.8 s and 1.1 s, and optimises those functions in threads (``--split-compile``); objects of
7000-8000 instructions (thread and warp reductions, fcollects) take about 1 s either way
(bench/experiments/loop_split.py, bench/results/loop-split-cpu-2026-11-24.txt).  A loop made a function
costs a call each time the loop is entered, not each iteration.

The criterion, in one place: an object whose NVSHMEM API function has at least
:data:`MIN_INSTRUCTIONS` instructions of its own (:func:`nvshmem_dsl.linker.store.body_sizes`, the measure
hybrid linking decides by) has its loops extracted; ``$NVSHMEM_DSL_OUTLINE_SPLIT`` sets another threshold
(``none``: never).  Part of each object's cache key (:func:`key`).

Public: :func:`threshold`, :func:`wanted`, :func:`extract_loops`, :func:`key`; :data:`ENV`, :data:`MIN_INSTRUCTIONS`.
"""

from __future__ import annotations

import os

__all__ = ["ENV", "MIN_INSTRUCTIONS", "extract_loops", "key", "threshold", "wanted"]

ENV = "NVSHMEM_DSL_OUTLINE_SPLIT"

#: Objects whose API function has at least this many instructions of its own have their loops
#: extracted: NVSHMEM 3.8's broadcasts (11 200-12 600) and block reductions (8300-22 500); not the
#: thread and warp reductions and fcollects (at most 8200, about 1 s of ptxas unsplit).
MIN_INSTRUCTIONS = 10000

_NEVER = ("none", "off", "never")


def threshold() -> int | None:
    """The instructions an object's API function must have for its loops to be extracted:
    ``$NVSHMEM_DSL_OUTLINE_SPLIT`` (a count, or ``none``), :data:`MIN_INSTRUCTIONS` by default;
    None: never."""
    text = os.environ.get(ENV, "").strip().lower()
    if not text:
        return MIN_INSTRUCTIONS
    if text in _NEVER:
        return None
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"{ENV}={text!r}: give a number of instructions (0: every object) or 'none'")
    return count


def wanted(sizes: dict) -> bool:
    """Whether an object defining the API functions of ``sizes`` (name -> instructions of its own
    body) has its loops extracted: one of them reaches :func:`threshold`."""
    least = threshold()
    return least is not None and any(n >= least for n in sizes.values())


def key() -> str:
    """What objects are built with, for their cache key: the threshold in effect."""
    least = threshold()
    return "none" if least is None else str(least)


def extract_loops(mod, pb) -> int:
    """Make every top-level loop of every function defined in ``mod`` a function of its own
    (LLVM's loop extractor, after putting the loops in the simplified, LCSSA form it needs), with
    ``pb`` (an llvmlite pass builder).  The new functions are ``convergent``: they may hold barriers
    and warp-synchronous code, and LLVM does not carry that attribute over to them.  Returns how
    many functions were made."""
    import llvmlite.binding as llvm

    from ._llvm import run

    before = {fn.name for fn in mod.functions}
    fpm = llvm.create_new_function_pass_manager()
    fpm.add_loop_simplify_pass()
    fpm.add_lcssa_pass()
    for fn in mod.functions:
        if not fn.is_declaration:
            fpm.run(fn, pb)
    run(mod, pb, "loop_extract")
    made = [fn for fn in mod.functions if fn.name not in before]
    for fn in made:
        fn.add_function_attribute("convergent")
    return len(made)
