"""The environment variables that change the code nvshmem_dsl links into a kernel.

Each is read by the module named beside it; this module only names them (standard library only), so
that a kernel cache key can hold their values without importing the linker
(:func:`nvshmem_dsl.triton._compile.identity`).
"""

from __future__ import annotations

__all__ = ["OUTLINE", "OUTLINE_OPT", "OUTLINE_SPLIT", "COPY_REWRITE", "ABI_PRESERVE", "HELPERS", "ALL"]

OUTLINE = "NVSHMEM_DSL_OUTLINE"              #: linker.plan: which NVSHMEM functions are linked out of line
OUTLINE_OPT = "NVSHMEM_DSL_OUTLINE_OPT"      #: linker.outline: how the out-of-line objects are optimised
OUTLINE_SPLIT = "NVSHMEM_DSL_OUTLINE_SPLIT"  #: linker.loop_split: loops of large functions made functions
COPY_REWRITE = "NVSHMEM_DSL_COPY_REWRITE"    #: linker.rewrites: NVSHMEM's copy loops rewritten
ABI_PRESERVE = "NVSHMEM_DSL_ABI_PRESERVE"    #: linker.abi: registers the objects preserve for their callers
HELPERS = "NVSHMEM_DSL_HELPERS"              #: linker.helper_archive: NVIDIA's compiled transport helpers or built

#: Every one of them.
ALL = (OUTLINE, OUTLINE_OPT, OUTLINE_SPLIT, COPY_REWRITE, ABI_PRESERVE, HELPERS)
