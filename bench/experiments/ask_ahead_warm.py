"""Experiment (CPU): what asking NVIDIA's compiled helpers ahead costs a warm kernel link, where every helper the
kernel declares is answered already (nvshmem_dsl.linker.outline.ask_archive_ahead, called by every kernel link
that wants its objects: linker.link.inline_nvshmem).

    python bench/experiments/ask_ahead_warm.py

Result: bench/results/ask-ahead-warm-cpu-2026-12-01.txt.
"""
from __future__ import annotations

import time

from nvshmem_dsl.linker import helper_archive, outline, store

NAMES = ["nvshmemx_float_put_block", "nvshmem_float_p", "nvshmem_quiet", "nvshmem_uint64_atomic_fetch_add"]


def main(calls: int = 200) -> None:
    api = store.api_module(NAMES, 90, unswitch=True, helpers_out=True)
    text = "\n".join(str(f).strip() for f in api.functions if f.is_declaration and outline.is_helper(f.name))
    declarations = outline.helper_declarations(text, "sm_90a", "+ptx85")
    if helper_archive.path(90) is None:
        raise SystemExit("NVIDIA's compiled helpers are not in use here (NVSHMEM_DSL_HELPERS, or no archive)")
    helper_archive.provided(90, declarations)  # every one answered, as in a warm cache
    start = time.perf_counter()
    for _ in range(calls):
        outline.ask_archive_ahead(api, "sm_90a", "+ptx85")
    per_call = (time.perf_counter() - start) / calls * 1e3
    print(f"ask_archive_ahead, all answered: {per_call:.2f} ms a call ({len(list(api.functions))} functions in the "
          f"kernel's NVSHMEM module, {len(declarations)} helpers)")


if __name__ == "__main__":
    main()
