"""Signatures and docs of the host atomics (generated/host_api.py), so that nvshmem_dsl builds
its host atomic functions at import without reading the op table (ops.json, 3 MB)."""
from __future__ import annotations

from ..model import Spec
from . import render, with_header


def atomics(spec: Spec) -> list[dict]:
    """One row per host atomic api: its family, parameter names (C order), whether it returns the old
    value, the spec's summary and semantics, the numpy dtypes it takes."""
    rows: dict[str, dict] = {}
    for op in spec.ops_for("host"):
        if op.group != "amo":
            continue
        row = rows.setdefault(op.api, {
            "api": op.api, "family": op.family, "params": tuple(p.name for p in op.params), "fetching": op.ret_ctype != "void",
            "summary": op.summary, "semantics": op.semantics, "dtypes": set(),
        })
        numpy = spec.dtypes[op.dtype].numpy if op.dtype else ""
        if numpy:
            row["dtypes"].add(numpy)
    return [dict(r, dtypes=tuple(sorted(r["dtypes"]))) for _, r in sorted(rows.items())]


def emit(spec: Spec) -> dict[str, str]:
    body = render("host_api.py.j2", atomics=atomics(spec))
    return {"host_api.py": with_header(body, spec.digest, "#")}
