"""Write tests/data/nvshmem4py-<version>-surface.json from an NVSHMEM4Py wheel, without importing it.

::

    pip download --no-deps nvshmem4py-cu12==0.4.1 -d /tmp/nv4py
    python tests/data/extract_nvshmem4py_surface.py /tmp/nv4py/nvshmem4py_cu12-0.4.1-*.whl

What is read (only the wheel's text files, with ``ast`` and regular expressions):

* ``modules``: the ``__all__`` of ``nvshmem.core`` (the sum of its submodules' lists, as its
  ``__init__`` builds it), ``nvshmem.core.device.numba`` and ``nvshmem.core.device.cute`` (the
  same), and, for ``nvshmem.core.utils`` (which has no ``__all__``), its top-level functions
  and classes whose names do not start with ``_``;
* ``signatures``: the parameters (name, positional or keyword-only, default as written) of the
  functions of ``nvshmem.core`` and ``nvshmem.core.utils``;
* ``bindings``: ``nvshmem.bindings``' functions, from the ``cpdef`` definitions of
  ``nvshmem/bindings/nvshmem.pyx`` (name, parameter names and C types, return type, the one C
  function each calls, whether a non-zero status raises ``NVSHMEMError``), plus its classes
  and enums; ``nvshmem.bindings.device.numba`` / ``.cute``: the functions of the Numbast /
  CuTe generated modules (``_FUNCTION_SYMBOLS`` / ``__all__``) with the C function each calls.

The output is sorted and stable, so a re-run on the same wheel gives the same file.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Wheel:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())

    def text(self, name: str) -> str:
        return self.zip.read(name).decode()

    def module_file(self, dotted: str) -> str:
        base = dotted.replace(".", "/")
        for cand in (f"{base}.py", f"{base}/__init__.py"):
            if cand in self.names:
                return cand
        raise KeyError(dotted)


def _all_of(wheel: Wheel, dotted: str) -> list[str]:
    """The module's ``__all__``, resolving ``sub.__all__ + [...]`` and ``[*sub.__all__, ...]``."""
    tree = ast.parse(wheel.text(wheel.module_file(dotted)))
    package = dotted if wheel.module_file(dotted).endswith("__init__.py") else dotted.rsplit(".", 1)[0]
    value = None
    for node in ast.walk(tree):  # the first assignment, also inside `if ...:` (device/numba)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            value = node.value
            break
    if value is None:
        raise KeyError(f"{dotted} has no __all__")
    return _evaluate(wheel, package, value)


def _evaluate(wheel: Wheel, package: str, node: ast.AST) -> list[str]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _evaluate(wheel, package, node.left) + _evaluate(wheel, package, node.right)
    if isinstance(node, (ast.List, ast.Tuple)):
        out: list[str] = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                out += _evaluate(wheel, package, elt.value)
            else:
                out.append(ast.literal_eval(elt))
        return out
    if isinstance(node, ast.Attribute) and node.attr == "__all__":
        return _all_of(wheel, f"{package}.{ast.unparse(node.value)}")
    raise ValueError(f"cannot evaluate {ast.unparse(node)} in {package}")


def _top_level_public(wheel: Wheel, dotted: str) -> list[str]:
    tree = ast.parse(wheel.text(wheel.module_file(dotted)))
    return [n.name for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")]


_CORE_SUBMODULES = ("memory", "init_fini", "nvshmem_types", "interop.cupy", "interop.torch", "direct", "collective",
                    "rma", "amo", "teams")


def _signatures(wheel: Wheel, modules: list[str], names: set[str]) -> dict[str, list[list]]:
    """name -> [[parameter, kind, default source or None], ...] of the top-level functions ``names``
    defined in ``modules`` (kind: "pos" or "kw", keyword-only)."""
    out: dict[str, list[list]] = {}
    for dotted in modules:
        tree = ast.parse(wheel.text(wheel.module_file(dotted)))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name not in names:
                continue
            a = node.args
            pos = a.posonlyargs + a.args
            defaults = [None] * (len(pos) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
            params = [[p.arg, "pos", d] for p, d in zip(pos, defaults)]
            params += [[p.arg, "kw", None if d is None else ast.unparse(d)] for p, d in zip(a.kwonlyargs, a.kw_defaults)]
            out[node.name] = params
    return dict(sorted(out.items()))


def _unique(names: list[str]) -> list[str]:
    return sorted(set(names))


_CPDEF = re.compile(r"^cpdef (?:inline )?(?P<head>[^(]*?)\b(?P<name>\w+)\((?P<params>[^)]*)\)(?P<tail>[^:\n]*):\s*$",
                    re.M)
_CALL = re.compile(r"\b(nvshmemx?_\w+)\(")


def _params(text: str) -> list[dict]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        ctype, _, name = part.rpartition(" ")
        out.append({"name": name, "ctype": ctype.strip()})
    return out


def host_bindings(wheel: Wheel) -> dict:
    text = wheel.text("nvshmem/bindings/nvshmem.pyx")
    matches = list(_CPDEF.finditer(text))
    functions = {}
    for i, m in enumerate(matches):
        name = m.group("name")
        if name == "check_status":  # the error helper, not a binding of a C function
            continue
        body = text[m.end(): matches[i + 1].start() if i + 1 < len(matches) else len(text)]
        body = body.split("\n\n\n")[0]
        calls = _CALL.findall(body)
        if len(calls) != 1:
            raise ValueError(f"binding {name}: expected one C call, found {calls}")
        ret = m.group("head").strip() or "object"
        functions[name] = {
            "symbol": calls[0],
            "params": _params(m.group("params")),
            "returns": ret,
            "raises_on_status": "check_status(status)" in body,
        }
    classes = sorted(set(re.findall(r"^(?:cdef )?class (\w+)\b", text, re.M)))
    tree_all = wheel.text("nvshmem/bindings/__init__.py")
    if "from .nvshmem import *" not in tree_all:
        raise ValueError("nvshmem/bindings/__init__.py no longer re-exports .nvshmem")
    extra = {}
    if "nvshmem/bindings/ask_smem.pyx" in wheel.names:  # a separate extension (nvshmem.bindings.ask_smem)
        m = next(_CPDEF.finditer(wheel.text("nvshmem/bindings/ask_smem.pyx")))
        extra["ask_smem.ask_smem"] = {"symbol": "nvshmemx_ask_smem", "params": _params(m.group("params")),
                                      "returns": m.group("head").strip(), "raises_on_status": False}
    return {
        "source": "nvshmem/bindings/nvshmem.pyx (cpdef functions; check_status left out)",
        "functions": dict(sorted(functions.items())),
        "classes": classes,
        "dtypes": sorted(set(re.findall(r"^(\w+_dtype) = ", text, re.M))),
        "other_modules": extra,
    }


_SHIM = re.compile(r'shim_raw_str = """(?P<shim>.*?)"""\s*@lower\((?P<name>\w+)\s*,', re.S)
_SHIM_CALL = re.compile(r"^\s*(?:retval = )?(\w+)\(", re.M)


def device_numba(wheel: Wheel) -> dict:
    path = "nvshmem/bindings/device/numba/_numbast.py"
    text = wheel.text(path)
    names = json.loads(re.search(r"^_FUNCTION_SYMBOLS = (\[.*?\])$", text, re.M).group(1))
    enums = json.loads(re.search(r"^_ENUM_SYMBOLS = (\[.*?\])$", text, re.M).group(1))
    symbols: dict[str, set[str]] = {}
    for m in _SHIM.finditer(text):  # each lowering: a C++ shim whose body calls the C function
        body = m.group("shim").split("{", 1)[1]
        calls = _SHIM_CALL.findall(body)
        if calls:
            symbols.setdefault(m.group("name"), set()).add(calls[0])
    functions = {}
    for n in set(names):
        found = sorted(symbols.get(n, ()))
        if len(found) != 1:
            raise ValueError(f"device binding {n}: expected one C function, found {found}")
        functions[n] = found[0]
    return {"source": f"{path} (_FUNCTION_SYMBOLS, _ENUM_SYMBOLS; the C function from each lowering's shim)",
            "functions": _by_prefix(functions), "enums": sorted(enums)}


def _by_prefix(functions: dict[str, str]) -> dict:
    """{name: C symbol} as lists of names per prefix (symbol = prefix + name), the rest as a map."""
    out: dict = {"nvshmem_": [], "nvshmemx_": [], "other": {}}
    for name, symbol in sorted(functions.items()):
        for prefix in ("nvshmem_", "nvshmemx_"):
            if symbol == prefix + name:
                out[prefix].append(name)
                break
        else:
            out["other"][name] = symbol
    return out


def device_functions(entry: dict) -> dict[str, str]:
    """The {name: C symbol} of a device bindings entry of the data file (inverse of _by_prefix)."""
    f = entry["functions"]
    return {**{n: "nvshmem_" + n for n in f["nvshmem_"]}, **{n: "nvshmemx_" + n for n in f["nvshmemx_"]},
            **f["other"]}


def device_cute(wheel: Wheel) -> dict:
    path = "nvshmem/bindings/device/cute/_cuteast.py"
    tree = ast.parse(wheel.text(path))
    functions = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        symbol = ""
        for dec in node.decorator_list:
            if isinstance(dec, ast.Call) and ast.unparse(dec.func) == "cute.extern":
                symbol = next((ast.literal_eval(k.value) for k in dec.keywords if k.arg == "name"), "")
        if not symbol:
            raise ValueError(f"device binding {node.name}: no cute.extern name")
        functions[node.name] = symbol
    return {"source": f"{path} (its public @cute.extern functions)", "functions": _by_prefix(functions)}


def extract(wheel_path: Path) -> dict:
    wheel = Wheel(wheel_path)
    digest = hashlib.sha256(wheel_path.read_bytes()).hexdigest()
    version = re.search(r"-(\d+\.\d+\.\d+)-", wheel_path.name).group(1)
    modules = {
        "nvshmem.core": _unique(_all_of(wheel, "nvshmem.core")),
        "nvshmem.core.utils": _unique(_top_level_public(wheel, "nvshmem.core.utils")),
        "nvshmem.core.device.numba": _unique(_all_of(wheel, "nvshmem.core.device.numba")),
        "nvshmem.core.device.cute": _unique(_all_of(wheel, "nvshmem.core.device.cute")),
    }
    raw = {name: len(_all_of(wheel, name)) for name in modules if name != "nvshmem.core.utils"}
    signatures = {
        "nvshmem.core": _signatures(wheel, [f"nvshmem.core.{m}" for m in _CORE_SUBMODULES], set(modules["nvshmem.core"])),
        "nvshmem.core.utils": _signatures(wheel, ["nvshmem.core.utils"], set(modules["nvshmem.core.utils"])),
    }
    return {
        "provenance": {
            "wheel": wheel_path.name,
            "sha256": digest,
            "version": version,
            "extracted_by": "tests/data/extract_nvshmem4py_surface.py",
            "notes": ("modules: unique names of each __all__ (nvshmem.core.utils has none: its public "
                      "top-level functions); all_lengths: each __all__'s length with its repeats (device.cute "
                      "and device.numba list barrier_all and sync_all twice, numba put_signal_nbi_warp too); "
                      "bindings: see the script's docstring"),
            "all_lengths": raw,
        },
        "modules": modules,
        "signatures": signatures,
        "bindings": {
            "nvshmem.bindings": host_bindings(wheel),
            "nvshmem.bindings.device.numba": device_numba(wheel),
            "nvshmem.bindings.device.cute": device_cute(wheel),
        },
    }


def dumps(data: dict) -> str:
    """JSON with one binding per line (readable diffs, a small file)."""

    def dump(value, indent: str) -> str:
        if isinstance(value, dict) and value and any(isinstance(v, (dict, list)) for v in value.values()):
            inner = indent + " "
            rows = [f"{inner}{json.dumps(k)}: {dump(v, inner)}" for k, v in value.items()]
            return "{\n" + ",\n".join(rows) + "\n" + indent + "}"
        return json.dumps(value)

    return dump(data, "") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="default: tests/data/nvshmem4py-<version>-surface.json")
    args = ap.parse_args(argv)
    data = extract(args.wheel)
    out = args.out or HERE / f"nvshmem4py-{data['provenance']['version']}-surface.json"
    out.write_text(dumps(data))
    counts = {k: len(v) for k, v in data["modules"].items()}
    counts.update({k: len(v["functions"]) if k == "nvshmem.bindings" else len(device_functions(v))
                   for k, v in data["bindings"].items()})
    print(f"wrote {out}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
