"""nvshmem_dsl.cute's generated API: one CuTe-callable function per DSL-level function."""
from __future__ import annotations

from ..model import Spec
from . import render, with_header
from .views import api_functions


def emit(spec: Spec) -> dict[str, str]:
    apis = api_functions(spec, "cute")
    body = render("cute_api.py.j2", apis=apis, spec=spec)
    return {"cute_api.py": with_header(body, spec.digest, "#")}
