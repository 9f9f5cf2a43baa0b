"""Load spec/ into the typed model: read YAML, validate against spec/schema.yaml, build dataclasses."""
from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from .model import (AxisGroup, ConstantGroup, ConstantValue, Dtype, Exclusion, Family,
                    ParamSpec, Scope, Spec, Struct)
from .schema import SpecError, Validator

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"


def spec_files(spec_dir: Path) -> list[Path]:
    """Every YAML file of the spec, in a fixed order."""
    return sorted(spec_dir.rglob("*.yaml"), key=lambda p: p.relative_to(spec_dir).as_posix())


def digest(spec_dir: Path) -> str:
    h = hashlib.sha256()
    for path in spec_files(spec_dir):
        h.update(path.relative_to(spec_dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _read(path: Path, spec_dir: Path):
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError([f"{_rel(path, spec_dir)}: not valid YAML: {exc}"]) from None


def _rel(path: Path, spec_dir: Path) -> str:
    return f"spec/{path.relative_to(spec_dir).as_posix()}"


def load(spec_dir: Path = SPEC_DIR) -> Spec:
    spec_dir = Path(spec_dir)
    schema = _read(spec_dir / "schema.yaml", spec_dir)
    validator = Validator(schema)
    validator.known["role"] = set(schema["roles"])

    tables_path = spec_dir / "tables.yaml"
    tables = _read(tables_path, spec_dir)
    validator.check(tables, "tables_file", _rel(tables_path, spec_dir))
    if validator.problems:
        raise SpecError(validator.problems)

    dtypes = _dtypes(tables)
    dtype_sets = {k: tuple(str(v) for v in vs) for k, vs in tables["dtype_sets"].items()}
    for set_name, members in dtype_sets.items():
        for m in members:
            if m not in dtypes:
                validator.problems.append(
                    f"spec/tables.yaml: dtype_sets[{set_name}]: unknown dtype {m!r}")
    validator.known["dtype set"] = set(dtype_sets)
    validator.known["scope"] = {s["name"] for s in tables["scopes"]}
    validator.known["C type"] = set(tables["ctypes"])

    excl_path = spec_dir / "exclusions.yaml"
    exclusions_doc = _read(excl_path, spec_dir)
    validator.check(exclusions_doc, "exclusions_file", _rel(excl_path, spec_dir))

    groups: dict[str, str] = {}
    families: list[Family] = []
    seen: dict[str, str] = {}
    for path in spec_files(spec_dir):
        if path.parent == spec_dir:
            continue  # tables, schema, exclusions
        where = _rel(path, spec_dir)
        doc = _read(path, spec_dir)
        before = len(validator.problems)
        validator.check(doc, "family_file", where)
        if len(validator.problems) > before:
            continue
        groups[doc["group"]] = doc["doc"].strip()
        for i, fam in enumerate(doc["families"]):
            key = (fam["name"])
            if key in seen:
                validator.problems.append(
                    f"{where}: families[{i}] (name={key}): field 'name': already defined in {seen[key]}")
            seen[key] = where
            families.append(_family(fam, doc["group"], where))
    if validator.problems:
        raise SpecError(validator.problems)

    scopes = {}
    for s in tables["scopes"]:
        scopes[s["name"]] = Scope(
            name=s["name"], prefix=s["prefix"], suffix=s["suffix"], doc=s["doc"],
            side=s.get("side", "both"), convergent=s.get("convergent", False),
            extra_params=tuple(ParamSpec(**p) for p in s.get("extra_params", [])))

    return Spec(
        dtypes=dtypes,
        dtype_sets=dtype_sets,
        scopes=scopes,
        ctypes={k: v["llvm"] for k, v in tables["ctypes"].items()},
        constants={
            name: ConstantGroup(name=name, doc=g["doc"], c_type=g["c_type"],
                                values=tuple(ConstantValue(**v) for v in g["values"]))
            for name, g in tables["constants"].items()
        },
        structs=tuple(
            Struct(name=s["name"], size=s["size"], fields=tuple(s["fields"]),
                   version_major=s.get("version", {}).get("major"))
            for s in tables["structs"]
        ),
        roles=dict(schema["roles"]),
        groups=groups,
        families=tuple(families),
        exclusions={side: tuple(Exclusion(**e) for e in exclusions_doc[side]) for side in ("device", "host")},
        digest=digest(spec_dir),
    )


def _dtypes(tables: dict) -> dict[str, Dtype]:
    out: dict[str, Dtype] = {}
    for row in tables["dtypes"]:
        out[row["name"]] = Dtype(**row)
    for row in tables["sizes"]:
        name = str(row["name"])
        out[name] = Dtype(name=name, ctype="void", llvm="", bits=row["bits"],
                          kind="mem" if row["bits"] == 0 else "sized")
    return out


def _axes(groups: list[dict]) -> tuple[AxisGroup, ...]:
    return tuple(
        AxisGroup(
            dtype_sets=tuple(g.get("dtype", ())),
            scopes=tuple(g["scope"]),
            nbi=tuple(g.get("nbi", (False,))),
            ops=tuple(g.get("op", (None,))),
            prefix=g.get("prefix"),
        )
        for g in groups
    )


def _family(fam: dict, group: str, where: str) -> Family:
    return Family(
        name=fam["name"],
        group=group,
        api=fam["api"],
        symbol=fam["symbol"],
        side=fam["side"],
        axes=_axes(fam["axes"]),
        host_axes=_axes(fam["host_axes"]) if "host_axes" in fam else None,
        params=tuple(ParamSpec(**p) for p in fam["params"]),
        returns=fam["returns"],
        summary=" ".join(fam["summary"].split()),
        semantics=" ".join(fam["semantics"].split()),
        source=where,
        limited_mpg=fam.get("limited_mpg", True),
    )
