"""The linker's modules import only downward: each imports only the modules after it in
nvshmem_dsl.linker.STAGES (imports inside functions included), and every module is listed once."""

from __future__ import annotations

import ast
from pathlib import Path

import nvshmem_dsl.linker as linker

FOLDER = Path(linker.__file__).parent
ORDER = [m for _, modules in linker.STAGES for m in modules]


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
