"""nvshmem_dsl.numba's generated API: one Numba intrinsic per DSL-level function."""
from __future__ import annotations

from ..model import Spec
from . import render, with_header
from .views import api_functions


def emit(spec: Spec) -> dict[str, str]:
    apis = api_functions(spec, "numba")
    body = render("numba_api.py.j2", apis=apis, spec=spec)
    return {"numba_api.py": with_header(body, spec.digest, "#")}
