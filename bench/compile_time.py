"""First-kernel compile time of a DSL kernel calling NVSHMEM, in a fresh process.

    NVSHMEM_DSL_CACHE=/tmp/empty python bench/compile_time.py --impl numba --label cold
    NVSHMEM_DSL_CACHE=/tmp/empty python bench/compile_time.py --impl numba --label warm

bench/run.py runs it twice per DSL with the same, initially empty cache directories
(``NVSHMEM_DSL_CACHE`` for nvshmem_dsl's bitcode piece store, ``CUTE_DSL_CACHE_DIR`` for the
CuTe DSL's own file cache): the first run is "cold", the second "warm".  The kernel is the
block-scope put kernel of the bandwidth benchmark (bench/numba_bench.py, bench/cute_bench.py);
what is timed is everything from the first compile request to a cubin:

* numba: ``cuda.jit(signature)`` (typing, lowering) + NVSHMEM link + PTX + cubin; without a GPU
  (no driver) only up to PTX (``stage`` says which);
* cute: ``nvshmem_dsl.cute.compile`` (tracing, MLIR pipeline, NVSHMEM bitcode link, cubin), for
  ``--arch`` (default sm_90a), with fake tensors (no GPU needed).

Then, in the same process, a second and different kernel (the ``p`` latency kernel) is
compiled the same way: scope ``<label>-later``, the cost of any later kernel (target 0.3 s).

No NVSHMEM initialisation, one process, two JSON lines (impl, bench "compile_time", scope = the
label, value in seconds, plus import_s: the time to import the DSL and the benchmark module).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


KERNELS = ("put_block", "p_lat")  # the first kernel timed, then a later one


def _numba(arch: str) -> tuple[float, list[float], str]:
    t0 = time.perf_counter()
    from numba import cuda

    import numba_bench as nb

    t_import = time.perf_counter() - t0
    gpu = cuda.is_available()  # initialises the driver outside the timed part
    times = []
    for name in KERNELS:
        t0 = time.perf_counter()
        if gpu:
            disp = cuda.jit(nb.SIGNATURES[name])(nb.KERNELS[name])
            kernel = next(iter(disp.overloads.values()))
            cc = cuda.get_current_device().compute_capability
            kernel._codelibrary.get_cubin(cc=cc)
            stage = f"cubin sm_{cc[0]}{cc[1]}"
        else:  # no driver / no GPU: PTX is as far as a CPU-only machine goes
            cc = _cc(arch)
            cuda.compile_ptx(nb.KERNELS[name], nb.SIGNATURES[name], cc=cc)
            stage = f"ptx sm_{cc[0]}{cc[1]} (no GPU)"
        times.append(time.perf_counter() - t0)
    return t_import, times, stage


def _cc(arch: str) -> tuple[int, int]:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits[:-1]), int(digits[-1])


def _cute(arch: str) -> tuple[float, list[float], str]:
    t0 = time.perf_counter()
    import cute_bench as cb

    t_import = time.perf_counter() - t0
    tensors = cb.fake_tensors(1 << 20)
    times = []
    for name in KERNELS:
        t0 = time.perf_counter()
        compiled = cb.compile_all(tensors, arch=arch, names=[name])[name]
        times.append(time.perf_counter() - t0)
    return t_import, times, f"cubin {compiled.arch}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", choices=("numba", "cute"), required=True)
    ap.add_argument("--label", default="cold", help="scope field of the result (cold / warm)")
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    t_import, times, stage = (_numba if args.impl == "numba" else _cute)(args.arch)
    for scope, secs in zip((args.label, f"{args.label}-later"), times):
        rec = {"impl": args.impl, "bench": "compile_time", "scope": scope, "bytes": 0, "value": round(secs, 4),
               "best": round(secs, 4), "unit": "s", "iters": 1, "reps": 1, "pe": 0, "npes": 1,
               "import_s": round(t_import, 3), "stage": stage,
               "cache": os.environ.get("NVSHMEM_DSL_CACHE", "(default)")}
        print(json.dumps(rec, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
