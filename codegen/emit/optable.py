"""The machine-readable op table (generated/ops.json) that the DSL layers and tests read."""
from __future__ import annotations

import json

from ..model import Op, Spec
from . import GENERATOR, seal


def _op(op: Op) -> dict:
    return {
        "symbol": op.symbol, "api": op.api, "family": op.family, "group": op.group,
        "scope": op.scope, "nbi": op.nbi, "dtype": op.dtype, "op": op.op,
        "ret": {"ctype": op.ret_ctype, "llvm": op.ret_llvm},
        "params": [{k: v for k, v in vars(p).items() if v not in ("", False)} for p in op.params],
        "llvm_type": op.llvm_type,
        **({} if op.limited_mpg else {"limited_mpg": False}),
    }


def table(spec: Spec) -> dict:
    return {
        "dtypes": {d.name: {k: v for k, v in vars(d).items() if k != "name"} for d in spec.dtypes.values()},
        "dtype_sets": {k: list(v) for k, v in spec.dtype_sets.items()},
        "scopes": {s.name: {"prefix": s.prefix, "suffix": s.suffix, "side": s.side, "doc": s.doc,
                           "convergent": s.convergent}
                   for s in spec.scopes.values()},
        "constants": {g.name: {"doc": g.doc, "values": {v.name: v.value for v in g.values}}
                      for g in spec.constants.values()},
        "structs": {s.name: {"size": s.size, "version": s.version} for s in spec.structs},
        "roles": spec.roles,
        "ctypes": dict(spec.ctypes),
        "device": [_op(o) for o in spec.ops_for("device")],
        "host": [_op(o) for o in spec.ops_for("host")],
    }


def dumps(data: dict) -> str:
    """Stable JSON with one op per line, so diffs of the table stay readable."""
    parts = []
    for key, value in data.items():
        if key in ("device", "host"):
            rows = ",\n".join("    " + json.dumps(v, sort_keys=True) for v in value)
            parts.append(f'  "{key}": [\n{rows}\n  ]')
        else:
            parts.append(f'  "{key}": {json.dumps(value, sort_keys=True)}')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def emit(spec: Spec) -> dict[str, str]:
    body = dumps(table(spec))
    header = {"generator": GENERATOR, "spec_sha256": spec.digest, "seal": seal(body)}
    return {"ops.json": '{"provenance": ' + json.dumps(header, sort_keys=True) + ",\n" + body[2:]}
