"""The device API's dispatch table (generated/dispatch.py), written once for every DSL.

``DISPATCH`` maps each DSL-level function to {NVSHMEM element type (the spec's TYPENAME) |
``bits<N>`` | None: C symbol}; ``DTYPE_KEYS`` lists the NVSHMEM element types that hold the same
values, best first, with each DSL's dtype name for them (its column of spec/tables.yaml;
:func:`dtype_table`). ``nvshmem_dsl._dispatch.table(dsl)`` joins the two into
the DSL's {function: {its dtype key: C symbol}}; the docstrings, the same for every DSL, are
written once (device_api.py); the DSL package (nvshmem_dsl.numba, nvshmem_dsl.cute,
nvshmem_dsl.triton) builds the callable functions from it. A new DSL is one more row of DSLS (its
dtype column in spec/tables.yaml) and a runtime package; the reference page
(generated/docs/<dsl>_api.rst) and the coverage matrix follow from the row.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Spec
from . import render, with_header
from .views import api_functions, dispatch_forms, dtype_keys


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


def dtype_table(spec: Spec) -> list[tuple[tuple[str, ...], dict[str, str]]]:
    """``[(NVSHMEM element types that hold the same values, best first; {dsl: its dtype name for
    them})]``: each DSL's :func:`~codegen.emit.views.dtype_keys`, the groups written once."""
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    for dsl, row in DSLS.items():
        for key, names in dtype_keys(spec, row.column):
            rows.setdefault(names, {})[dsl] = key
    return sorted(rows.items())


def emit(spec: Spec) -> dict[str, str]:
    apis = api_functions(spec, "numba")
    docs = render("device_api.py.j2", apis=apis, spec=spec)
    table = render("dispatch.py.j2", forms=dispatch_forms(spec), spec=spec, keys=dtype_table(spec))
    return {"device_api.py": with_header(docs, spec.digest, "#"),
            "dispatch.py": with_header(table, spec.digest, "#")}
