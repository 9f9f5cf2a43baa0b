"""Run programs written for NVSHMEM4Py unchanged: ``import nvshmem.core`` -> ``nvshmem_dsl.core``.

Opt-in only; nothing here is installed by importing nvshmem_dsl.  Three ways to turn it on::

    python -m nvshmem_dsl.run --as-nvshmem4py -n 2 prog.py args   # our launcher, every rank
    mpirun -n 2 python -m nvshmem_dsl.core.alias prog.py args      # any launcher
    import nvshmem_dsl.core.alias; nvshmem_dsl.core.alias.enable() # in code, before `import nvshmem`

While enabled, ``nvshmem``, ``nvshmem.core`` and every ``nvshmem.core.<sub>`` (``device.numba``,
``device.cute``, ``interop.cute``, ``utils`` ...) import as ``nvshmem_dsl.core`` and its submodules;
``nvshmem.bindings`` (NVSHMEM4Py's raw bindings) and ``nvshmem.bindings.device.numba`` /
``.cute`` import as ``nvshmem_dsl.core.bindings`` and its submodules.  ``nvshmem`` itself is
``nvshmem_dsl.core`` too, so ``import nvshmem; nvshmem.init(...)`` (as NVSHMEM4Py's device pages
write it) works.

When a real ``nvshmem`` package (NVSHMEM4Py) is importable, :func:`enable` refuses, unless
``force=True`` (``--as-nvshmem4py=force``, ``python -m nvshmem_dsl.core.alias --force``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
from typing import Any, Sequence

__all__ = ["enable", "disable", "is_enabled", "real_nvshmem", "AliasRefused", "main"]

_NAME = "nvshmem"
_TARGET = "nvshmem_dsl.core"


class AliasRefused(ImportError):
    """A real NVSHMEM4Py is importable (or already imported) and ``force`` was not given."""


def _target(fullname: str) -> str | None:
    if fullname in (_NAME, f"{_NAME}.core"):
        return _TARGET
    prefix = f"{_NAME}.core."
    if fullname.startswith(prefix):
        return f"{_TARGET}.{fullname[len(prefix):]}"
    if fullname == f"{_NAME}.bindings" or fullname.startswith(f"{_NAME}.bindings."):
        return f"{_TARGET}.{fullname[len(_NAME) + 1:]}"  # nvshmem.bindings[.x] -> nvshmem_dsl.core.bindings[.x]
    return None


class _Loader(importlib.abc.Loader):
    """Hands out the nvshmem_dsl.core module itself under the ``nvshmem`` name."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        name = _target(fullname)
        if name is None:
            return None
        spec = importlib.util.find_spec(name)
        if spec is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Loader(name),
                                               is_package=spec.submodule_search_locations is not None)

    def __repr__(self) -> str:
        return "<nvshmem_dsl.core.alias finder: nvshmem.core, nvshmem.bindings -> nvshmem_dsl.core[.bindings]>"


_finder: _Finder | None = None


def real_nvshmem() -> str | None:
    """Where a real ``nvshmem`` package would be imported from (None when there is none)."""
    mod = sys.modules.get(_NAME)
    if mod is not None and getattr(mod, "__name__", "") != _TARGET:
        return getattr(mod, "__file__", None) or repr(mod)
    spec = importlib.machinery.PathFinder.find_spec(_NAME)
    if spec is None:
        return None
    return spec.origin or ", ".join(spec.submodule_search_locations or []) or _NAME


def is_enabled() -> bool:
    return _finder is not None and _finder in sys.meta_path


def enable(force: bool = False) -> None:
    """Make ``import nvshmem[.core[...]]`` import ``nvshmem_dsl.core[...]`` in this process.

    Raises :class:`AliasRefused` when a real ``nvshmem`` is importable and ``force`` is false, or
    when one is already imported (it cannot be replaced then).
    """
    global _finder
    if is_enabled():
        return
    loaded = sys.modules.get(_NAME)
    if loaded is not None and getattr(loaded, "__name__", "") != _TARGET:
        raise AliasRefused(f"nvshmem_dsl.core.alias: the real 'nvshmem' ({real_nvshmem()}) is already imported; "
                           "enable the alias before anything imports nvshmem")
    found = real_nvshmem()
    if found is not None and not force:
        raise AliasRefused(
            f"nvshmem_dsl.core.alias: a real 'nvshmem' package (NVSHMEM4Py) is importable from {found}; "
            "nvshmem_dsl will not shadow it. Use NVSHMEM4Py, uninstall it, or ask for the alias anyway: "
            "enable(force=True), python -m nvshmem_dsl.run --as-nvshmem4py=force, "
            "python -m nvshmem_dsl.core.alias --force"
        )
    _finder = _Finder()
    sys.meta_path.insert(0, _finder)


def disable() -> None:
    """Remove the alias; modules imported through it stay imported under both names."""
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None
    for name in [n for n in sys.modules if n == _NAME or n.startswith(_NAME + ".")]:
        if getattr(sys.modules[name], "__name__", "").startswith(_TARGET):
            del sys.modules[name]


_USAGE = "python -m nvshmem_dsl.core.alias [--force] (script.py | -m module) [args...]"


def main(argv: Sequence[str] | None = None) -> int:
    """Run a script or module with the alias enabled (what ``--as-nvshmem4py`` runs on each rank)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    force = False
    while argv and argv[0] in ("--force", "--help", "-h"):
        if argv[0] in ("--help", "-h"):
            print(f"usage: {_USAGE}\n\n{__doc__}")
            return 0
        force = True
        argv.pop(0)
    if not argv or argv == ["-m"]:
        sys.stderr.write(f"usage: {_USAGE}\n")
        return 2
    if argv[0] == "-m" or (argv[0].startswith("-m") and len(argv[0]) > 2):
        module = argv[1] if argv[0] == "-m" else argv[0][2:]
        rest = argv[2:] if argv[0] == "-m" else argv[1:]
        sys.argv = [module, *rest]
        sys.path[0:1] = [os.getcwd()]
        enable(force=force)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    sys.argv = [script, *argv[1:]]
    sys.path[0:1] = [os.path.dirname(os.path.abspath(script))]  # as `python script.py` sets it
    enable(force=force)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except AliasRefused as exc:
        sys.stderr.write(f"{exc}\n")
        code = 3
    sys.exit(code)
