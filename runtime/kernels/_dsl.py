"""The kernels' DSL module of a host call's ``dsl=`` argument (communication kernels, MoE, fused
all-gather + GEMM alike)."""
from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import NvshmemArgumentError

#: The package that brings each DSL (for the error of one that does not import).
DISTRIBUTIONS = {"numba": "numba-cuda", "triton": "triton", "cutlass": "nvidia-cutlass-dsl"}


def module(package: str, dsls: tuple, dsl: str, function: str) -> ModuleType:
    """``package``'s module of ``dsl`` (one of ``dsls``). A DSL that is not installed: an ImportError
    naming the call, the DSL, the missing module and (for a DSL's own) the package to install, with
    the original error as its cause."""
    if dsl not in dsls:
        raise NvshmemArgumentError(f"{function}(): argument 'dsl' must be one of {', '.join(dsls)}, got {dsl!r}")
    try:
        return importlib.import_module(f".{dsl}", package)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if not top or top == package.split(".")[0]:
            raise
        hint = f" (pip install {DISTRIBUTIONS[top]})" if top in DISTRIBUTIONS else ""
        raise ImportError(f"{function}(): dsl={dsl!r} needs the Python module {top!r}{hint}, "
                          f"which does not import here: {e}") from e
