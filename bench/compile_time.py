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

No NVSHMEM initialisation (unless ``--init``), one process, two JSON lines (impl, bench "compile_time", scope = the
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


def _numba(arch: str, marks: dict | None, init: dict | None) -> tuple[float, list[float], str]:
    t0 = time.perf_counter()
    from numba import cuda

    import numba_bench as nb

    t_import = time.perf_counter() - t0
    if marks is not None:
        _trace_phases(marks)
    gpu = cuda.is_available()  # initialises the driver outside the timed part
    if init is not None:
        import nvshmem_dsl

        if not gpu:
            raise SystemExit("--init needs a GPU")
        t0 = time.perf_counter()
        nvshmem_dsl.init()
        init["init_s"] = round(time.perf_counter() - t0, 3)
    times = []
    for name in KERNELS:
        t0 = time.perf_counter()
        if marks is not None:
            marks.setdefault("compile", (t0, None))
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


def _trace_phases(marks: dict) -> None:
    """Note in ``marks`` when each step of nvshmem_dsl's path to the first kernel's PTX starts
    and ends (``label: (start, end)`` in perf_counter seconds, the first call of each): the
    prefetch (the store's build started by ``init()``, with ``--init``), the closure's
    extraction, within it the parse of the bodies it needs and the GlobalDCE, and the link of
    the kernel."""
    from nvshmem_dsl import bitcode
    from nvshmem_dsl.numba import _linker

    def wrap(owner, name, label):
        orig = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                marks.setdefault(label, (start, time.perf_counter()))
        setattr(owner, name, timed)

    wrap(bitcode, "prefetch", "prefetch")
    wrap(bitcode, "_parse", "parse")
    wrap(bitcode, "_global_dce", "dce")
    wrap(bitcode, "_closure", "closure")
    wrap(_linker, "link", "link")


def _cc(arch: str) -> tuple[int, int]:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits[:-1]), int(digits[-1])


def _cute(arch: str, marks: dict | None, init: dict | None) -> tuple[float, list[float], str]:
    if init is not None:
        raise SystemExit("--init: numba only")
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
    ap.add_argument("--phases", action="store_true",
                    help="numba: add when each step of the first kernel's NVSHMEM link started and ended "
                         "(seconds from its compile request) to its line")
    ap.add_argument("--init", action="store_true",
                    help="numba, GPU: initialise NVSHMEM (one PE) before the first compile, as a program "
                         "does (NVSHMEM's bitcode is read meanwhile); adds init_s, its seconds")
    args = ap.parse_args(argv)
    marks = {} if args.phases and args.impl == "numba" else None
    init = {} if args.init else None
    t_import, times, stage = (_numba if args.impl == "numba" else _cute)(args.arch, marks, init)
    for scope, secs in zip((args.label, f"{args.label}-later"), times):
        rec = {"impl": args.impl, "bench": "compile_time", "scope": scope, "bytes": 0, "value": round(secs, 4),
               "best": round(secs, 4), "unit": "s", "iters": 1, "reps": 1, "pe": 0, "npes": 1,
               "import_s": round(t_import, 3), "stage": stage,
               "cache": os.environ.get("NVSHMEM_DSL_CACHE", "(default)")}
        rec.update(init or {})
        if marks and scope == args.label:
            t0 = marks.pop("compile")[0]
            rec["phases"] = {k: [round(a - t0, 3), round(b - t0, 3)] for k, (a, b) in marks.items()}
        print(json.dumps(rec, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
