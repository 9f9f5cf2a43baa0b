"""reStructuredText reference pages (generated/docs/*.rst) for the Sphinx docs in docs/.

The same model and per-DSL views as the code emitters: the API pages cannot disagree with
the functions they describe. One compact table per family keeps the pages small.
"""
from __future__ import annotations

import re
from collections import Counter

from ..model import Op, Spec
from . import render, with_header
from .dsl import DSLS, Dsl
from .views import ApiFunction, api_functions

_TICK = re.compile(r"(?<![`\w])`([^`\n]+)`(?![`\w])")


def rst(text: str) -> str:
    """Spec prose -> inline rst: `x` (markdown code) becomes ``x``; stray markup is escaped."""
    text = " ".join((text or "").split())
    parts = _TICK.split(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"``{part}``")
        else:
            out.append(re.sub(r"([*|_\\])", r"\\\1", part))
    return "".join(out)


def _call_forms(api: ApiFunction, count_default: bool = True) -> list[str]:
    names = [p.name for p in api.first.params]
    forms = [f"{api.name}({', '.join(names)})"]
    if api.has_count and count_default:
        forms.append(f"{api.name}({', '.join(p.name for p in api.first.params if p.role != 'count')})")
    return forms


def _families(spec: Spec, apis: list[ApiFunction], dsl: Dsl) -> list[dict]:
    """Group -> families -> their DSL functions, in spec order."""
    by_family: dict[str, list[ApiFunction]] = {}
    for api in apis:
        by_family.setdefault(api.family, []).append(api)
    groups: dict[str, list[dict]] = {}
    for fam in spec.families:
        if fam.name not in by_family:
            continue
        fapis = by_family[fam.name]
        params: dict[str, str] = {}
        for api in fapis:
            for p in api.first.params:
                params.setdefault(p.name, spec.roles[p.role] + (f" ({dsl.container})" if p.pointer else ""))
        groups.setdefault(fam.group, []).append({
            "name": fam.name,
            "summary": rst(fapis[0].first.summary),
            "semantics": rst(fapis[0].first.semantics),
            "symbol": fam.symbol,
            "source": fam.source,
            "params": list(params.items()),
            "apis": [{
                "name": a.name,
                "forms": _call_forms(a, dsl.count_default),
                "scope": a.scope,
                "nbi": a.nbi,
                "dtypes": list(a.dtypes),
                "sized": any(k and k.startswith("bits") for k, _ in a.dispatch),
                "n_c": len(a.ops),
                "dispatch": list(a.dispatch),
            } for a in fapis],
        })
    return [{"name": g, "doc": rst(spec.groups.get(g, "")), "families": fams} for g, fams in groups.items()]


def _host(spec: Spec) -> list[dict]:
    ops: dict[str, list[Op]] = {}
    for op in spec.ops_for("host"):
        ops.setdefault(op.family, []).append(op)
    groups: dict[str, list[dict]] = {}
    for fam in spec.families:
        if fam.name not in ops:
            continue
        fops = ops[fam.name]
        groups.setdefault(fam.group, []).append({
            "name": fam.name, "side": fam.side, "symbol": fam.symbol,
            "summary": rst(fops[0].summary), "n_c": len(fops), "limited_mpg": fam.limited_mpg,
            "examples": [o.symbol for o in fops[:3]],
            "scopes": sorted({o.scope for o in fops}, key=list(spec.scopes).index),
        })
    return [{"name": g, "doc": rst(spec.groups.get(g, "")), "families": f} for g, f in groups.items()]


def _coverage(spec: Spec, apis: dict[str, list[ApiFunction]]) -> dict:
    """Family x scope cells: the DSLs that have functions there (their DSLS letters), how many DSL
    functions (the same in every DSL) over how many device C functions; host C functions."""
    scopes = list(spec.scopes)
    count = Counter((o.side, o.family, o.scope) for side in ("device", "host") for o in spec.ops_for(side))
    fns = {DSLS[dsl].letter: Counter((a.family, a.scope) for a in fapis) for dsl, fapis in apis.items()}
    rows = []
    totals = {"device": 0, "host": 0}
    for fam in spec.families:
        cells = []
        for sc in scopes:
            dev, host = count[("device", fam.name, sc)], count[("host", fam.name, sc)]
            have = {letter: c[(fam.name, sc)] for letter, c in fns.items()}
            n = max(have.values(), default=0)
            parts = []
            if n:
                parts.append(" ".join(x for x, k in have.items() if k) + f" {n}fn/{dev}")
            elif dev:
                parts.append(f"raw {dev}")
            if host:
                parts.append(f"H {host}")
            cells.append(" · ".join(parts) or "--")
            totals["device"] += dev
            totals["host"] += host
        rows.append({"name": fam.name, "group": fam.group, "cells": cells})
    return {"scopes": scopes, "rows": rows, "totals": totals,
            "dsls": [{"letter": DSLS[d].letter, "title": DSLS[d].title, "module": f"nvshmem_dsl.{d}",
                      "n": len(fapis)} for d, fapis in apis.items()]}


def emit(spec: Spec) -> dict[str, str]:
    apis = {dsl: api_functions(spec, row.column) for dsl, row in DSLS.items()}
    pages = {
        f"{dsl}_api.rst": render("docs_dsl_api.rst.j2", spec=spec, dsl=dsl, module=f"nvshmem_dsl.{dsl}",
                                 title=row.title, n_apis=len(apis[dsl]),
                                 groups=_families(spec, apis[dsl], row), array=row.container,
                                 count_default=row.count_default,
                                 others=[DSLS[d].title.split(" device")[0] for d in DSLS])
        for dsl, row in DSLS.items()
    }
    pages.update({
        "host_api.rst": render("docs_host_api.rst.j2", spec=spec, groups=_host(spec),
                               n_host=len(spec.ops_for("host"))),
        "constants.rst": render("docs_constants.rst.j2", spec=spec,
                                groups=[{"name": g.name, "doc": rst(g.doc), "c_type": g.c_type,
                                         "members": [(v.name, v.c, v.value, rst(v.doc)) for v in g.values]}
                                        for g in spec.constants.values()]),
        "coverage.rst": render("docs_coverage.rst.j2", spec=spec, cov=_coverage(spec, apis)),
    })
    return {f"docs/{name}": with_header(body, spec.digest, "..") for name, body in pages.items()}
