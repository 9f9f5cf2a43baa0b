"""The per-DSL tables of the device API (generated/<dsl>_api.py), one template for every DSL.

Each table maps a DSL-level function to {element dtype key: C symbol}; the docstrings, the same
for every DSL, are written once (device_api.py); the
DSL package (nvshmem_dsl.numba, nvshmem_dsl.cute) builds the callable functions from it. A new
DSL is one more row here (its dtype column in spec/tables.yaml) and a runtime package.
"""
from __future__ import annotations

from ..model import Spec
from . import render, with_header
from .views import api_functions

# DSL -> (dtype table column, what its data arguments are called)
DSLS = {"numba": ("numba", "array"), "cute": ("cute", "tensor")}


def emit(spec: Spec) -> dict[str, str]:
    docs = render("device_api.py.j2", apis=api_functions(spec, "numba"), spec=spec)
    out = {"device_api.py": with_header(docs, spec.digest, "#")}
    for dsl, (column, container) in DSLS.items():
        body = render("dsl_api.py.j2", apis=api_functions(spec, column), spec=spec, dsl=dsl,
                      container=container)
        out[f"{dsl}_api.py"] = with_header(body, spec.digest, "#")
    return out
