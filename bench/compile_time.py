"""First-kernel compile time of a DSL kernel calling NVSHMEM, in a fresh process.

    NVSHMEM_DSL_CACHE=/tmp/empty python bench/compile_time.py --impl numba --label cold
    NVSHMEM_DSL_CACHE=/tmp/empty python bench/compile_time.py --impl numba --label warm

bench/run.py runs it twice per DSL with the same, initially empty cache directories
(``NVSHMEM_DSL_CACHE`` for nvshmem_dsl's bitcode piece store, ``CUTE_DSL_CACHE_DIR`` for the
CuTe DSL's own file cache): the first run is "cold", the second "warm".  The kernel is the
block-scope put kernel of the bandwidth benchmark (bench/numba_bench.py, bench/cute_bench.py);
what is timed is everything from the first compile request to a cubin:

* numba: ``cuda.jit(signature)`` (typing, lowering) + NVSHMEM link + PTX + cubin; without a GPU
  (no driver) the same compile for ``--arch``, linked to a cubin by nvJitLink (which needs no
  driver), or where that fails only up to PTX (``stage`` says which);
* cute: ``nvshmem_dsl.cute.compile`` (tracing, MLIR pipeline, NVSHMEM bitcode link, cubin), for
  ``--arch`` (default sm_90a), with fake tensors (no GPU needed);
* triton: ``triton.compile`` of bench/triton_bench.py's kernel for ``--arch`` (``GPUTarget``, no GPU
  needed; Triton's stages, NVSHMEM linked and inlined by nvshmem_dsl.triton, ptxas to a cubin),
  with ``TRITON_CACHE_DIR`` as the third cache directory (bench/run.py sets it per DSL);
* nv4py: NVSHMEM4Py's Numba kernel (bench/nv4py_bench.py) as a launch compiles it (numba-cuda's
  LTO, its C++ shim compiled by NVRTC at the link, nvJitLink) to a cubin, not loaded (loading needs
  NVSHMEM initialised); without a GPU for ``--arch`` (bench/_nv4py.py).  It has no cache: its
  "warm" is only a second process; nv4py_cute: cute's kernel with NVSHMEM4Py's CuTe API
  (bench/_nv4py_cute.py), compiled as for cute, not loaded.

Then, in the same process, a second and different kernel (the ``p`` latency kernel) is
compiled the same way: scope ``<label>-later``, the cost of any later kernel (target 0.3 s).
``--kernel NAME`` times that kernel of the benchmark alone instead (bench/compile_families.py:
``coll_reduce_block`` and the like).

No NVSHMEM initialisation (unless ``--init``; ``--prefetch`` starts what it starts for the device
code), one process, two JSON lines (impl, bench "compile_time", scope = the label, value in seconds,
plus import_s: the time to import the DSL and the benchmark module).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


KERNELS = ("put_block", "p_lat")  # the first kernel timed, then a later one


def _start(init: dict | None, arch: str, gpu: bool = True) -> None:
    """What a program does before its first kernel, where asked: ``--init`` (``init`` has no
    ``prefetch_s``): NVSHMEM initialised, one PE (a GPU), its seconds noted in ``init``;
    ``--prefetch``: what ``init()`` starts for the device code (the store's build, the helpers'
    closure), then ``init["prefetch_s"]`` seconds of waiting, no GPU needed."""
    if init is None:
        return
    if "prefetch_s" in init:
        from nvshmem_dsl.linker import store

        store.prefetch(arch)  # "sm_90a": the SM's bitcode, as init() asks for its device's
        time.sleep(init["prefetch_s"])
        return
    if not gpu:
        raise SystemExit("--init needs a GPU")
    import nvshmem_dsl

    t0 = time.perf_counter()
    nvshmem_dsl.init()
    init["init_s"] = round(time.perf_counter() - t0, 3)


def _numba(arch: str, marks: dict | None, init: dict | None, kernels=KERNELS) -> tuple[float, list[float], str]:
    t0 = time.perf_counter()
    from numba import cuda

    import numba_bench as nb

    t_import = time.perf_counter() - t0
    if marks is not None:
        _trace_phases(marks)
    gpu = cuda.is_available()  # initialises the driver outside the timed part
    _start(init, arch, gpu)
    times = []
    for name in kernels:
        t0 = time.perf_counter()
        if marks is not None:
            marks.setdefault("compile", (t0, None))
        if gpu:
            # compiled, linked and loaded as for a launch: for the device's (major, minor, "a") on
            # sm_90+ (numba-cuda's default); the cubin is then the one cached.  (Asking for the
            # cubin of compute_capability, (9, 0), compiled and linked the kernel a second time,
            # for sm_90: every GPU figure before 2026-11-24 15:00 counted both, see
            # tests/gpu/records/2026-11-24/h200-compile-single-count-nice-core-race.txt, part 3)
            cc = numba_compile_loaded(nb.KERNELS[name], nb.SIGNATURES[name])
            times.append(time.perf_counter() - t0)
            stage = f"cubin sm_{''.join(map(str, cc))}, loaded"
        else:
            secs, stage = _numba_no_gpu(nb.KERNELS[name], nb.SIGNATURES[name], _cc(arch), t0)
            times.append(secs)
    return t_import, times, stage


def numba_compile_loaded(fn, sig) -> tuple:
    """Compile the Numba kernel ``fn`` for ``sig`` as its first launch does (``cuda.jit(sig)``, its
    cubin for the current device), loaded; the compute capability it was built for."""
    from numba import cuda

    kernel = next(iter(cuda.jit(sig)(fn).overloads.values()))
    kernel._codelibrary.get_cubin()
    return kernel._codelibrary._ensure_cc(None)


def _numba_no_gpu(fn, sig, cc, t0: float) -> tuple[float, str]:
    """Without a driver: the kernel compiled as ``cuda.jit`` would for ``cc`` (numba-cuda's compile
    of a kernel, the NVSHMEM link, PTX), then linked to a cubin by nvJitLink, which needs no GPU;
    where that is not possible, up to PTX.  (seconds since ``t0``, stage)."""
    from numba import cuda

    try:
        from numba.cuda.compiler import _compile_pyfunc_with_fixup
    except ImportError:  # another numba-cuda: PTX only
        cuda.compile_ptx(fn, sig, cc=cc)
        return time.perf_counter() - t0, f"ptx sm_{cc[0]}{cc[1]} (no GPU)"
    lib, _ = _compile_pyfunc_with_fixup(fn, sig, device=False, abi="numba", cc=cc)
    lib.get_asm_strs(cc=cc)
    t_ptx = time.perf_counter() - t0
    try:
        lib.get_cubin(cc=cc)
    except Exception as exc:  # noqa: BLE001 - no nvJitLink: PTX is as far as this machine goes
        print(f"compile_time: no cubin without a GPU ({type(exc).__name__}: {str(exc)[:200]}); PTX only",
              file=sys.stderr)
        return t_ptx, f"ptx sm_{cc[0]}{cc[1]} (no GPU)"
    return time.perf_counter() - t0, f"cubin sm_{cc[0]}{cc[1]} (no GPU: nvJitLink)"


def _trace_phases(marks: dict) -> None:
    """Note in ``marks`` when each step of nvshmem_dsl's path to the first kernel's PTX starts
    and ends (``label: (start, end)`` in perf_counter seconds, the first call of each): the
    prefetch (the store's build started by ``init()``, with ``--init``), the closure's
    extraction, within it the parse of the bodies it needs and the GlobalDCE, the link of
    the kernel, the objects of what it calls out of line (found or built), the probes of NVIDIA's
    compiled helpers (``probe <first helper>``); of each object
    built, ``build <name>`` (LLVM and ptxas) and ``llvm <name>`` (LLVM), names cut to 48 characters."""
    from nvshmem_dsl.linker import helper_archive, outline, pieces, store
    from nvshmem_dsl.numba import _linker

    def wrap(owner, name, label, key=None):  # key(args): a mark per call's key, not only the first
        orig = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                mark = label if key is None else f"{label} {key(args)[:48]}"
                marks.setdefault(mark, (start, time.perf_counter()))
        setattr(owner, name, timed)

    wrap(store, "prefetch", "prefetch")
    wrap(pieces, "_parse", "parse")
    wrap(pieces, "_global_dce", "dce")
    wrap(pieces, "_closure", "closure")
    wrap(_linker, "link", "link")
    wrap(outline, "objects", "objects")
    # which helpers NVIDIA's compiled object has: each probe, by the first helper it asks about
    wrap(helper_archive, "_probe", "probe", lambda args: min(args[2]))
    # each object built: its LLVM step (object_ptx) and the whole build (LLVM, ptxas), by its name
    wrap(outline, "object_ptx", "llvm", lambda args: args[0][0])
    wrap(outline, "_build", "build", lambda args: args[0])


def _nv4py(arch: str, marks: dict | None, init: dict | None, kernels=KERNELS) -> tuple[float, list[float], str]:
    """NVSHMEM4Py's Numba kernels (bench/nv4py_bench.py), compiled as a launch compiles them (numba-cuda's
    default LTO; its C++ shim compiled by NVRTC at each kernel's link: it has no cache of its own) to a
    cubin, for the GPU's compute capability, else for ``--arch``; not loaded (loading calls NVSHMEM's
    library init, which needs NVSHMEM initialised).  import_s counts importing its device API, not the
    start-up that points it at our NVSHMEM (bench/_nv4py.py, done first)."""
    import _nv4py

    if init is not None:
        raise SystemExit("--init / --prefetch start nvshmem_dsl, not NVSHMEM4Py")
    _nv4py.use_our_nvshmem()
    t0 = time.perf_counter()
    from numba import cuda

    import nv4py_bench as nb

    t_import = time.perf_counter() - t0
    if cuda.is_available():
        cc, where = cuda.get_current_device().compute_capability, ""
    else:
        cc, where = _cc(arch), " (no GPU)"
        _nv4py.no_gpu_device(cc)
    times = []
    for name in kernels:
        t0 = time.perf_counter()
        _nv4py.compile_cubin(nb.KERNELS[name], nb.SIGNATURES[name], cc)
        times.append(time.perf_counter() - t0)
    return t_import, times, f"cubin sm_{cc[0]}{cc[1]}{'a' if tuple(cc) >= (9, 0) else ''}, not loaded{where}"


def _nv4py_cute(arch: str, marks: dict | None, init: dict | None, kernels=KERNELS) -> tuple[float, list[float], str]:
    """CuTe's kernels with NVSHMEM4Py's CuTe API (bench/_nv4py_cute.py), compiled as for ``cute`` (not loaded:
    loading needs NVSHMEM initialised), CuTe's own cache in ``CUTE_DSL_CACHE_DIR``; import_s counts importing
    cutlass and NVSHMEM4Py's CuTe API, not the start-up (bench/_nv4py.py)."""
    import _nv4py
    import _nv4py_cute

    _nv4py.use_our_nvshmem()
    t0 = time.perf_counter()
    _nv4py_cute.install(load=False)  # imports cutlass and NVSHMEM4Py's CuTe API
    t_install = time.perf_counter() - t0
    t_import, times, stage = _cute(arch, marks, init, kernels)
    return t_install + t_import, times, stage


def _cc(arch: str) -> tuple[int, int]:
    digits = "".join(ch for ch in arch if ch.isdigit())
    return int(digits[:-1]), int(digits[-1])


def _cute(arch: str, marks: dict | None, init: dict | None, kernels=KERNELS) -> tuple[float, list[float], str]:
    t0 = time.perf_counter()
    import cute_bench as cb

    t_import = time.perf_counter() - t0
    _start(init, arch)
    tensors = cb.fake_tensors(1 << 20)
    times = []
    for name in kernels:
        t0 = time.perf_counter()
        compiled = cb.compile_all(tensors, arch=arch, names=[name])[name]
        times.append(time.perf_counter() - t0)
    return t_import, times, f"cubin {compiled.arch}"


def _triton(arch: str, marks: dict | None, init: dict | None, kernels=KERNELS) -> tuple[float, list[float], str]:
    t0 = time.perf_counter()
    from triton.backends.compiler import GPUTarget

    import triton_bench as tb

    t_import = time.perf_counter() - t0
    _start(init, arch)
    cc = _cc(arch)
    target = GPUTarget("cuda", cc[0] * 10 + cc[1], 32)
    times = []
    for name in kernels:
        t0 = time.perf_counter()
        compiled = tb.compile_kernel(name, target)
        assert compiled.asm["cubin"][:4] == b"\x7fELF"
        times.append(time.perf_counter() - t0)
    return t_import, times, f"cubin sm_{target.arch}"


def _outline_mode() -> str:
    """How NVSHMEM's large routines were linked: nvshmem_dsl.linker.plan's mode (NVSHMEM_DSL_OUTLINE)."""
    from nvshmem_dsl.linker import plan

    return plan.mode()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", choices=("numba", "cute", "triton", "nv4py", "nv4py_cute"), required=True)
    ap.add_argument("--label", default="cold", help="scope field of the result (cold / warm)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--phases", action="store_true",
                    help="numba: add when each step of the first kernel's NVSHMEM link started and ended "
                         "(seconds from its compile request) to its line")
    ap.add_argument("--init", action="store_true",
                    help="GPU: initialise NVSHMEM (one PE) before the first compile, as a program "
                         "does (NVSHMEM's bitcode is read meanwhile); adds init_s, its seconds")
    ap.add_argument("--prefetch", type=float, default=None, metavar="SECONDS",
                    help="no GPU needed: start what init() starts for the device's code "
                         "(nvshmem_dsl.linker.store.prefetch) and wait SECONDS, as long as an init "
                         "takes, before the first compile")
    ap.add_argument("--kernel", default=None,
                    help="time this kernel of the benchmark (its name in bench/bench_shapes.py SHAPES) "
                         "alone instead of put_block, then p_lat")
    args = ap.parse_args(argv)
    marks = {} if args.phases and args.impl == "numba" else None
    init = {} if args.init else None
    if args.prefetch is not None:
        if args.init:
            raise SystemExit("--prefetch or --init, not both")
        init = {"prefetch_s": args.prefetch}
    kernels = (args.kernel,) if args.kernel else KERNELS
    run = {"numba": _numba, "cute": _cute, "triton": _triton, "nv4py": _nv4py, "nv4py_cute": _nv4py_cute}[args.impl]
    t_import, times, stage = run(args.arch, marks, init, kernels)
    for scope, secs, kernel in zip((args.label, f"{args.label}-later"), times, kernels):
        rec = {"impl": args.impl, "bench": "compile_time", "scope": scope, "bytes": 0, "value": round(secs, 4),
               "best": round(secs, 4), "unit": "s", "iters": 1, "reps": 1, "pe": 0, "npes": 1,
               "import_s": round(t_import, 3), "stage": stage, "kernel": kernel, "outline": _outline_mode(),
               "cache": os.environ.get("NVSHMEM_DSL_CACHE", "(default)")}
        rec.update(init or {})
        if marks and scope == args.label:
            t0 = marks.pop("compile")[0]
            rec["phases"] = {k: [round(a - t0, 3), round(b - t0, 3)] for k, (a, b) in marks.items()}
        print(json.dumps(rec, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
