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


def _dsl_key(dt: Dtype, dsl_column: str) -> str:
    """The key a DSL knows NVSHMEM element type ``dt`` by: its column of the dtype table, else
    (none there, or a pair type) the NVSHMEM name."""
    key = getattr(dt, dsl_column)
    return dt.name if not key or dt.kind == "pair" else key


def dtype_keys(spec: Spec, dsl_column: str) -> list[tuple[str, tuple[str, ...]]]:
    """``[(DSL dtype key, NVSHMEM element types that may serve it, best first)]``, keys sorted:
    a function dispatches a key to the first of these it has a form for."""
    keys: dict[str, list[Dtype]] = {}
    for dt in spec.dtypes.values():
        if dt.typed:
            keys.setdefault(_dsl_key(dt, dsl_column), []).append(dt)
    return [(k, tuple(d.name for d in sorted(v, key=_preference))) for k, v in sorted(keys.items())]


def _grouped(spec: Spec) -> dict[str, list[Op]]:
    """Device ops by DSL name, spec order; mem forms are left to the raw C-named layer."""
    by_api: dict[str, list[Op]] = {}
    for op in spec.ops_for("device"):
        if op.dtype != "mem":
            by_api.setdefault(op.api, []).append(op)
    return by_api


def _form_key(spec: Spec, op: Op) -> str | None:
    """An op's key among its function's forms: its NVSHMEM element type, ``bits<N>`` for an
    untyped sized form, None for a dtype-free function."""
    if op.dtype is None:
        return None
    dt = spec.dtypes[op.dtype]
    return dt.name if dt.typed else f"bits{dt.bits}"


def _sorted_keys(items) -> tuple:
    return tuple(sorted(items, key=lambda kv: "" if kv[0] is None else kv[0]))


def dispatch_forms(spec: Spec) -> list[tuple[str, tuple[tuple[str | None, str], ...]]]:
    """``[(DSL function, ((form key, C symbol), ...))]``: every form of every function, keyed as
    :func:`_form_key` says, the same for every DSL."""
    return [(name, _sorted_keys({_form_key(spec, op): op.symbol for op in ops}.items()))
            for name, ops in _grouped(spec).items()]


def api_functions(spec: Spec, dsl_column: str) -> list[ApiFunction]:
    """Group device ops by DSL name; map each DSL dtype (column `dsl_column` of the dtype
    table: 'numba', 'cute' or 'triton') to the preferred C function (:func:`dtype_keys`). mem
    forms are left to the raw C-named layer; sized forms are keyed 'bits<N>'."""
    keys = dtype_keys(spec, dsl_column)
    out = []
    for name, ops in _grouped(spec).items():
        forms = {_form_key(spec, op): op.symbol for op in ops}
        chosen = {k: sym for k, sym in forms.items() if k is None or k.startswith("bits")}
        for key, names in keys:
            sym = next((forms[n] for n in names if n in forms), None)
            if sym is not None:
                chosen[key] = sym
        first = ops[0]
        out.append(ApiFunction(
            name=name, family=first.family, group=first.group, scope=first.scope, nbi=first.nbi,
            ops=tuple(ops), dispatch=_sorted_keys(chosen.items()),
        ))
    return out
