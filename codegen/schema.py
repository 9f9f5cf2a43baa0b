"""Validate spec YAML documents against the record definitions in spec/schema.yaml.

Errors are collected, not raised one at a time, and each names the file, the entry
(by its `name` where it has one) and the field, e.g.
``spec/device/rma.yaml: families[2] (name=p): field 'returns': expected ctype, got 3``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TEMPLATE_FIELDS = re.compile(r"{([^{}]*)}")
TEMPLATE_PLACEHOLDERS = {"prefix", "T_", "N", "nbi", "scope", "op"}


class SpecError(Exception):
    """The spec is malformed; the message lists every problem found."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid spec:\n  " + "\n  ".join(problems))


@dataclass
class Validator:
    schema: dict
    # Names that list-of-name types must refer to (filled from tables.yaml).
    known: dict[str, set[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def check(self, doc, record: str, where: str) -> None:
        self._record(doc, record, where)

    def _fail(self, where: str, msg: str) -> None:
        self.problems.append(f"{where}: {msg}")

    def _record(self, value, record: str, where: str) -> None:
        spec = self.schema["records"][record]
        if not isinstance(value, dict):
            self._fail(where, f"expected a mapping ({record}), got {type(value).__name__}")
            return
        for name in spec["required"]:
            if name not in value:
                self._fail(where, f"missing required field '{name}'")
        for name, item in value.items():
            if name not in spec["fields"]:
                self._fail(where, f"unknown field '{name}' (allowed: {', '.join(spec['fields'])})")
                continue
            typ = spec["fields"][name]
            if isinstance(typ, str) and typ.startswith("list(") and typ[5:-1] in self.schema["records"]:
                # a list of entries: name each one, e.g. "families[2] (name=p)"
                self._value(item, typ, f"{where}: {name}")
            else:
                self._value(item, typ, f"{where}: field '{name}'")

    def _value(self, value, typ, where: str) -> None:
        if isinstance(typ, dict):  # {enum: [...]}
            if value not in typ["enum"]:
                self._fail(where, f"expected one of {typ['enum']}, got {value!r}")
            return
        if typ.startswith("list(") or typ.startswith("map("):
            inner = typ[typ.index("(") + 1 : -1]
            if typ.startswith("list("):
                if not isinstance(value, list):
                    self._fail(where, f"expected a list, got {type(value).__name__}")
                    return
                for i, item in enumerate(value):
                    label = f"[{i}]"
                    if isinstance(item, dict) and "name" in item:
                        label += f" (name={item['name']})"
                    self._value(item, inner, where + label)
            else:
                if not isinstance(value, dict):
                    self._fail(where, f"expected a mapping, got {type(value).__name__}")
                    return
                for key, item in value.items():
                    self._value(item, inner, f"{where}[{key}]")
            return
        if typ in self.schema["records"]:
            self._record(value, typ, where)
            return
        checker = getattr(self, f"_t_{typ}", None)
        if checker is None:
            raise KeyError(f"schema names unknown type {typ!r}")
        checker(value, where)

    def _t_str(self, v, where):
        if not isinstance(v, str):
            self._fail(where, f"expected a string, got {v!r}")

    def _t_int(self, v, where):
        if not isinstance(v, int) or isinstance(v, bool):
            self._fail(where, f"expected an integer, got {v!r}")

    def _t_bool(self, v, where):
        if not isinstance(v, bool):
            self._fail(where, f"expected true or false, got {v!r}")

    def _t_identifier(self, v, where):
        if not isinstance(v, str) or not _IDENT.match(v):
            self._fail(where, f"expected an identifier, got {v!r}")

    def _t_template(self, v, where):
        if not isinstance(v, str):
            self._fail(where, f"expected a string template, got {v!r}")
            return
        bad = set(_TEMPLATE_FIELDS.findall(v)) - TEMPLATE_PLACEHOLDERS
        if bad:
            self._fail(where, f"unknown placeholder(s) {sorted(bad)} in {v!r} "
                              f"(allowed: {sorted(TEMPLATE_PLACEHOLDERS)})")

    def _named(self, kind: str, v, where: str) -> None:
        names = self.known.get(kind)
        if not isinstance(v, str):
            self._fail(where, f"expected a {kind} name, got {v!r}")
        elif names is not None and v not in names:
            self._fail(where, f"unknown {kind} {v!r} (known: {', '.join(sorted(names))})")

    def _t_dtype_set_name(self, v, where):
        self._named("dtype set", v, where)

    def _t_scope_name(self, v, where):
        self._named("scope", v, where)

    def _t_role(self, v, where):
        self._named("role", v, where)

    def _t_ctype(self, v, where):
        if not isinstance(v, str) or not v.strip():
            self._fail(where, f"expected a C type, got {v!r}")
            return
        base = ctype_base(v)
        if base != "T":
            self._named("C type", base, where)


def ctype_base(text: str) -> str:
    """'const uint64_t *' -> 'uint64_t'; 'T*' -> 'T'."""
    t = text.replace("*", " ").split()
    return " ".join(w for w in t if w != "const")


def ctype_pointer_depth(text: str) -> int:
    return text.count("*")
