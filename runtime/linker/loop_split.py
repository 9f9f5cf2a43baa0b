"""NVSHMEM's largest out-of-line routines with their loops as functions of their own, for ptxas.

ptxas's time grows faster than a function's size.  NVSHMEM 3.8's block reduction is one function of
22 000 instructions in its object (787 KiB of PTX), 6-10 s of ptxas at any ``-O`` level, register cap or
``-Ofast-compile`` (4.4 s at ``-O0``); 14 s to build on the GPU host.  With each of its loops made a
function of its own (LLVM's loop extractor: 179 loops) ptxas takes 1.7 s, and optimises those functions in
threads (``--split-compile``) (bench/results/loop-split-cpu-2026-11-24.txt).

A loop made a function costs a call each time the loop is entered, and the callee saves and restores the
registers it uses in local memory: NVSHMEM 3.8's broadcasts (11 200-12 600 instructions, 2.4 s of ptxas
unsplit) were 1.4-1.9x slower at 8 B split, the block reduction unchanged (0.72x -> 0.74x of C++), on one
H200 (tests/gpu/records/2026-11-24/h200-loop-split.txt).  So only objects above the broadcasts are split.

The criterion, in one place: an object whose NVSHMEM API function has at least
:data:`MIN_INSTRUCTIONS` instructions of its own (:func:`nvshmem_dsl.linker.store.body_sizes`, the measure
hybrid linking decides by) has its loops extracted; ``$NVSHMEM_DSL_OUTLINE_SPLIT`` sets another threshold
(``none``: never).  Part of each object's cache key (:func:`key`).

Split, NVSHMEM 3.8's block reduction moves 1 MiB at one PE at 0.94-0.99x of C++, whole at 1.14-1.18x (one H200,
tests/gpu/records/2026-11-25/h200-coll-bw-1pe.txt).  So where kernels run (a CUDA driver) and the threshold is the
default (:func:`tiered`), the object a cold kernel waits for is the split one, and the whole one is built after it,
in the background, for the kernels compiled later (:func:`nvshmem_dsl.linker.outline.objects`).

Public: :func:`threshold`, :func:`wanted`, :func:`tiered`, :func:`extract_loops`, :func:`key`; :data:`ENV`,
:data:`MIN_INSTRUCTIONS`, :data:`WHOLE`.
"""

from __future__ import annotations

import os

from . import code_env, link

__all__ = ["ENV", "MIN_INSTRUCTIONS", "WHOLE", "extract_loops", "key", "threshold", "tiered", "wanted"]

ENV = code_env.OUTLINE_SPLIT

#: Objects whose API function has at least this many instructions of its own have their loops
#: extracted: NVSHMEM 3.8's block reductions of 32- and 64-bit types (21 500-22 500 instructions;
#: those of 8- and 16-bit types have 8300-9700); not its broadcasts (11 200-12 600: slower split),
#: nor anything smaller (about 1 s of ptxas).
MIN_INSTRUCTIONS = 16000

_NEVER = ("none", "off", "never")
#: :func:`key` of objects built whole (never split).
WHOLE = "none"


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
    return WHOLE if least is None else str(least)


def tiered() -> bool:
    """Whether an object split by the default threshold is built whole too, later, in the background:
    ``$NVSHMEM_DSL_OUTLINE_SPLIT`` unset (a value set decides alone), and a CUDA driver here (kernels
    run here; on a machine without one only compile time counts)."""
    return not os.environ.get(ENV, "").strip() and link.driver_major() is not None


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
