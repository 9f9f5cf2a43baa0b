"""The per-DSL tables of the device API (generated/<dsl>_api.py), one template for every DSL.

Each table maps a DSL-level function to {element dtype key: C symbol}; the docstrings, the same
for every DSL, are written once (device_api.py); the DSL package (nvshmem_dsl.numba,
nvshmem_dsl.cute, nvshmem_dsl.triton) builds the callable functions from it. A new DSL is one
more row of DSLS (its dtype column in spec/tables.yaml) and a runtime package; the reference
page (generated/docs/<dsl>_api.rst) and the coverage matrix follow from the row.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Spec
from . import render, with_header
from .views import api_functions


@dataclass(frozen=True)
class Dsl:
    column: str          # its dtype column in spec/tables.yaml
    container: str       # what its data arguments are called in the docs
    title: str           # the title of its reference page
    letter: str          # its mark in the coverage matrix
    count_default: bool  # whether a left-out element count defaults to the smallest data size


DSLS = {
    "numba": Dsl("numba", "array", "Numba-CUDA device API", "N", True),
    "cute": Dsl("cute", "tensor", "CuTe DSL device API", "C", True),
    # Triton pointers carry no size: element counts are always given
    "triton": Dsl("triton", "pointer", "Triton device API", "T", False),
}


def emit(spec: Spec) -> dict[str, str]:
    docs = render("device_api.py.j2", apis=api_functions(spec, "numba"), spec=spec)
    out = {"device_api.py": with_header(docs, spec.digest, "#")}
    for dsl, row in DSLS.items():
        body = render("dsl_api.py.j2", apis=api_functions(spec, row.column), spec=spec, dsl=dsl,
                      container=row.container)
        out[f"{dsl}_api.py"] = with_header(body, spec.digest, "#")
    return out
