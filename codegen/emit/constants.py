"""Python enums for the spec's constants (signal ops, comparisons, teams, ...)."""
from __future__ import annotations

from ..model import Spec
from . import render, with_header


def _class_name(group: str) -> str:
    return "".join(w.capitalize() for w in group.split("_"))


def emit(spec: Spec) -> dict[str, str]:
    groups = [(g, _class_name(g.name)) for g in spec.constants.values()]
    structs = [s for s in spec.structs]
    body = render("constants.py.j2", groups=groups, structs=structs, digest=spec.digest)
    return {"constants.py": with_header(body, spec.digest, "#")}
