"""Expand each family over its axes (dtype x scope x nbi x op) into concrete `Op`s."""
from __future__ import annotations

import itertools
import re

from .model import AxisGroup, Dtype, Family, Op, Param, ParamSpec, Spec
from .schema import SpecError, ctype_base, ctype_pointer_depth

SIDES = ("device", "host")
_PLACEHOLDER = re.compile(r"{(prefix|T_|N|nbi|scope|op)}")


def fill(template: str, values: dict[str, str]) -> str:
    """Substitute the known {placeholders}; leave other braces alone."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def expand(spec: Spec) -> Spec:
    problems: list[str] = []
    for side in SIDES:
        ops: list[Op] = []
        where_defined: dict[str, str] = {}
        for fam in spec.families:
            for op in _family_ops(spec, fam, side, problems):
                if op.symbol in where_defined:
                    problems.append(f"{fam.source}: family {fam.name}: {side} symbol {op.symbol} "
                                    f"is also produced by {where_defined[op.symbol]}")
                    continue
                where_defined[op.symbol] = f"{fam.source} ({fam.name})"
                ops.append(op)
        spec.ops[side] = tuple(ops)
    if problems:
        raise SpecError(problems)
    return spec


def _groups_for(fam: Family, side: str) -> tuple[AxisGroup, ...]:
    if side == "device":
        return fam.axes if fam.side in ("device", "both") else ()
    if fam.side == "host":
        return fam.axes
    if fam.side == "both":
        if fam.host_axes is not None:
            return fam.host_axes
        # By default the host has the thread-scope forms only.
        return tuple(AxisGroup(g.dtype_sets, ("thread",), g.nbi, g.ops, g.prefix)
                     for g in fam.axes if "thread" in g.scopes)
    return ()


def _family_ops(spec: Spec, fam: Family, side: str, problems: list[str]):
    for group in _groups_for(fam, side):
        dtypes: list[Dtype | None] = [spec.dtypes[d] for s in group.dtype_sets
                                      for d in spec.dtype_sets[s]] or [None]
        for dt, scope_name, nbi, opname in itertools.product(dtypes, group.scopes, group.nbi, group.ops):
            scope = spec.scopes[scope_name]
            if scope.side not in ("both", side):
                problems.append(f"{fam.source}: family {fam.name}: scope {scope_name} "
                                f"does not exist on the {side}")
                continue
            values = {
                "prefix": group.prefix or scope.prefix,
                "T_": dt.symbol_T if dt else "",
                "N": dt.symbol_N if dt else "",
                "nbi": "_nbi" if nbi else "",
                "scope": scope.suffix,
                "op": opname or "",
            }
            try:
                params = tuple(_param(spec, p, dt) for p in fam.params + scope.extra_params)
                ret_ctype, ret_llvm = _return(spec, fam.returns, dt)
            except ValueError as exc:
                problems.append(f"{fam.source}: family {fam.name}: {exc}")
                continue
            yield Op(
                symbol=fill(fam.symbol, values),
                api=fill(fam.api, values),
                family=fam.name,
                group=fam.group,
                side=side,
                scope=scope_name,
                nbi=nbi,
                dtype=dt.name if dt else None,
                op=opname,
                params=params,
                ret_ctype=ret_ctype,
                ret_llvm=ret_llvm,
                summary=fill(fam.summary, values),
                semantics=fill(fam.semantics, values),
                limited_mpg=fam.limited_mpg,
            )


def _spell(base: str, const: bool, depth: int) -> str:
    return f"{'const ' if const else ''}{base}{' ' + '*' * depth if depth else ''}"


def _param(spec: Spec, p: ParamSpec, dt: Dtype | None) -> Param:
    base, depth, const = ctype_base(p.type), ctype_pointer_depth(p.type), "const" in p.type.split()
    if base == "T":
        if dt is None:
            raise ValueError(f"parameter {p.name} has type T but the family has no dtype axis")
        if depth:
            return Param(p.name, p.role, _spell(dt.ctype if dt.typed else "void", const, depth),
                         "ptr", pointer=True, elem=dt.name)
        if dt.abi == "struct":
            return Param(p.name, p.role, dt.ctype, "ptr", byval=dt.llvm, elem=dt.name)
        return Param(p.name, p.role, dt.ctype, dt.llvm, elem=dt.name)
    if depth:
        return Param(p.name, p.role, _spell(base, const, depth), "ptr", pointer=True)
    return Param(p.name, p.role, _spell(base, const, 0), spec.ctypes[base], required=p.required)


def _return(spec: Spec, text: str, dt: Dtype | None) -> tuple[str, str]:
    base, depth = ctype_base(text), ctype_pointer_depth(text)
    if base == "T":
        if dt is None:
            raise ValueError("returns T but the family has no dtype axis")
        return (dt.ctype, dt.llvm) if not depth else (_spell(dt.ctype, False, depth), "ptr")
    if depth:
        return _spell(base, False, depth), "ptr"
    return base, spec.ctypes[base]
