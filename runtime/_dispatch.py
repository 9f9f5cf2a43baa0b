"""Each DSL's view of the generated dispatch table (``nvshmem_dsl._generated.dispatch``).

The table is written once for every DSL: ``DISPATCH`` keys each function's C symbols by NVSHMEM
element type, and ``DTYPE_KEYS`` groups the NVSHMEM types that hold the same values, best first,
with each DSL's dtype name for the group. :func:`table` joins them into what a DSL package dispatches on:
``{function: {the DSL's dtype key | bits<N> | None: C symbol}}``, keys in sorted order (None
first), the same view codegen's reference pages show (codegen/emit/views.api_functions).
"""
from __future__ import annotations

import functools

from ._generated import dispatch as _generated

__all__ = ["FUNCTIONS", "table"]

#: The DSL-level device functions, in spec order (every DSL has all of them).
FUNCTIONS = tuple(_generated.__all__)


@functools.lru_cache(maxsize=None)
def table(dsl: str) -> dict:
    """``{function: {dtype key: C symbol}}`` for DSL ``dsl`` (``numba``, ``cute``, ``triton``)."""
    keys = {names[dsl]: group for group, names in _generated.DTYPE_KEYS if dsl in names}
    if not keys:
        known = sorted({d for _, names in _generated.DTYPE_KEYS for d in names})
        raise ValueError(f"dsl={dsl!r}: the dispatch table knows {', '.join(known)}")
    out = {}
    for name, forms in _generated.DISPATCH.items():
        chosen = {k: sym for k, sym in forms.items() if k is None or k.startswith("bits")}
        for key, candidates in keys.items():
            sym = next((forms[c] for c in candidates if c in forms), None)
            if sym is not None:
                chosen[key] = sym
        out[name] = dict(sorted(chosen.items(), key=lambda kv: "" if kv[0] is None else kv[0]))
    return out
