"""NVSHMEM benchmarks with NVSHMEM4Py's CuTe device API (``nvshmem.core.device.cute``): bench/cute_bench.py's
kernels and launchers, unchanged, over NVSHMEM4Py's calls (bench/_nv4py_cute.py: the adapter, call by call),
compiled and initialised by NVSHMEM4Py (``cute_compile_helper``), its host API for everything on the host
(bench/_nv4py.py), on the NVSHMEM nvshmem_dsl uses.

    python -m nvshmem_dsl.run -n 2 bench/nv4py_cute_bench.py [--quick] [--only put_bw,p_lat]

Prints one JSON line per result (impl "nv4py_cute"); bench/run.py collects them (``--impls ...,nv4py_cute``).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _nv4py  # noqa: E402

_nv4py.use_our_nvshmem()  # before nvshmem is imported

import _nv4py_cute  # noqa: E402

_nv4py_cute.install(load=True)  # before cute_bench is imported

import cute_bench  # noqa: E402


def main(argv=None) -> int:
    return cute_bench.main(argv, impl="nv4py_cute", layers=("nvshmem.core.device.cute",), host_class=_nv4py.Host)


if __name__ == "__main__":
    sys.exit(main())
