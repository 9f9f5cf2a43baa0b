"""The linker's modules import only downward: each imports only the modules after it in
nvshmem_dsl.linker.STAGES (imports inside functions included), and every module is listed once.
The package's other modules (the front-ends, the host, ``__main__``) import from the linker only
its interface stage's modules, and of those only the names of their ``__all__``."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import nvshmem_dsl.linker as linker

FOLDER = Path(linker.__file__).parent
PACKAGE = FOLDER.parent
ORDER = [m for _, modules in linker.STAGES for m in modules]
INTERFACE = dict(linker.STAGES)["interface"]


def _imports(module: str) -> set:
    """The linker modules ``module`` imports (``from . import x``, ``from .x import y``,
    ``from ..linker import x`` and the like), anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse((FOLDER / f"{module}.py").read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1:
            out |= {node.module} if node.module else {a.name for a in node.names}
        elif node.module and node.module.split(".")[-1] == "linker":
            out |= {a.name for a in node.names}
        elif node.module and ".linker." in f".{node.module}":
            out.add(node.module.split(".")[-1])
    return out & set(ORDER)


def test_every_module_is_in_one_stage():
    files = sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")
    assert sorted(ORDER) == files
    assert len(ORDER) == len(set(ORDER))


def test_modules_import_only_later_ones():
    upward = [f"{m} imports {n}" for i, m in enumerate(ORDER) for n in sorted(_imports(m))
              if n not in ORDER[i + 1:]]
    assert not upward, upward


def test_the_check_sees_imports():
    """The reader finds what the modules do import (a check that saw none could not fail)."""
    assert {"plan", "outline", "store", "link"} <= _imports("pipeline")
    assert "link" in _imports("abi")


def _interface(module: str) -> set:
    return set(importlib.import_module(f"nvshmem_dsl.linker.{module}").__all__)


def _outside_violations(source: str, package: str) -> list:
    """What code ``source`` of a module in ``package`` (``nvshmem_dsl.cute`` ...) imports from the
    linker beyond its interface: a module not of the interface stage, a name not in an interface
    module's ``__all__`` (imported, or read as an attribute of the module imported), anywhere in it."""
    tree = ast.parse(source)
    bad, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("nvshmem_dsl.linker.") and a.name.split(".")[2] not in INTERFACE:
                    bad.append(f"import {a.name}")
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(parts + ([base] if base else []))
        if base == "nvshmem_dsl.linker":
            for a in node.names:
                if a.name not in INTERFACE:
                    bad.append(f"from {base} import {a.name}")
                else:
                    aliases[a.asname or a.name] = a.name
        elif base.startswith("nvshmem_dsl.linker."):
            module = base.split(".")[2]
            if module not in INTERFACE:
                bad.append(f"from {base} import ...")
                continue
            bad += [f"from {base} import {a.name}" for a in node.names if a.name not in _interface(module)]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr not in _interface(aliases[node.value.id])):
            bad.append(f"{aliases[node.value.id]}.{node.attr}")
    return bad


def test_the_interface_is_defined():
    """Every interface module says what it offers (``__all__``), and offers it."""
    for module in INTERFACE:
        m = importlib.import_module(f"nvshmem_dsl.linker.{module}")
        assert [n for n in m.__all__ if not hasattr(m, n)] == [], module


def test_outside_modules_import_only_the_interface():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "linker":
            continue
        package = ".".join(("nvshmem_dsl", *rel.parts[:-1]))
        bad += [f"{rel}: {b}" for b in _outside_violations(path.read_text(), package)]
    assert not bad, bad


def test_the_outside_check_sees_violations():
    """The reader finds what a front-end must not import (a check that saw none could not fail)."""
    cute = "nvshmem_dsl.cute"
    assert _outside_violations("from ..linker import outline", cute) == ["from nvshmem_dsl.linker import outline"]
    assert _outside_violations("def f():\n    from ..linker.store_file import _arch_number", cute)
    assert _outside_violations("from nvshmem_dsl.linker.pipeline import inline_nvshmem", cute)
    assert _outside_violations("from .linker.pipeline import inline_nvshmem", "nvshmem_dsl")
    assert _outside_violations("from ..linker import module_init as m\nm._refs.clear()", cute) == ["module_init._refs"]
    assert _outside_violations("import nvshmem_dsl.linker.calls", cute)
    assert _outside_violations("from ..linker.pipeline import link_cubin\n"
                               "from ..linker import module_init as m\nm.wire_if_running()", cute) == []
