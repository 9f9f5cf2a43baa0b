"""Per-DSL views of the model shared by the DSL emitters: one entry per DSL-level function."""
from __future__ import annotations

from dataclasses import dataclass

from ..model import Dtype, Op, Spec


@dataclass(frozen=True)
class ApiFunction:
    """One DSL-level function (e.g. `put_nbi_block`) and the C functions behind it."""
    name: str
    family: str
    group: str
    scope: str
    nbi: bool
    ops: tuple[Op, ...]                 # every typed/sized form, spec order
    dispatch: tuple[tuple[str | None, str], ...]   # (element key, C symbol), chosen per DSL dtype

    @property
    def first(self) -> Op:
        return self.ops[0]

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.dispatch if k is not None and not k.startswith("bits"))

    @property
    def has_count(self) -> bool:
        """Whether the element count may be left out (it defaults to the smallest array size)."""
        return any(p.role == "count" and not p.required for p in self.first.params)


def _preference(dt: Dtype) -> tuple[int, str]:
    """Which NVSHMEM TYPENAME serves a DSL dtype best: fixed-width names first, then float
    names, then the C names (long, ulonglong, ...) that only some families have."""
    if dt.name == dt.numba:
        return (0, dt.name)
    if dt.kind == "float":
        return (1, dt.name)
    return (2, dt.name)


def api_functions(spec: Spec, dsl_column: str) -> list[ApiFunction]:
    """Group device ops by DSL name; map each DSL dtype (column `dsl_column` of the dtype
    table: 'numba' or 'cute') to the preferred C function. mem forms are left to the raw
    C-named layer; sized forms serve dtypes that have no typed form, keyed 'bits<N>'."""
    by_api: dict[str, list[Op]] = {}
    for op in spec.ops_for("device"):
        if op.dtype == "mem":
            continue
        by_api.setdefault(op.api, []).append(op)
    out = []
    for name, ops in by_api.items():
        chosen: dict[str | None, tuple[tuple[int, str], str]] = {}
        for op in ops:
            if op.dtype is None:
                chosen[None] = ((0, ""), op.symbol)
                continue
            dt = spec.dtypes[op.dtype]
            if not dt.typed:
                chosen[f"bits{dt.bits}"] = ((0, ""), op.symbol)
                continue
            key = getattr(dt, dsl_column)
            if not key or dt.kind == "pair":
                key = dt.name
            rank = _preference(dt)
            if key not in chosen or rank < chosen[key][0]:
                chosen[key] = (rank, op.symbol)
        first = ops[0]
        out.append(ApiFunction(
            name=name, family=first.family, group=first.group, scope=first.scope, nbi=first.nbi,
            ops=tuple(ops),
            dispatch=tuple((k, sym) for k, (_, sym) in sorted(
                chosen.items(), key=lambda kv: ("" if kv[0] is None else kv[0]))),
        ))
    return out
