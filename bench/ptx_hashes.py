"""Hashes of the PTX every DSL's bench kernels compile to, on the CPU: a refactor of the linker is
checked by running this before and after and comparing the files (they must be equal).

    python bench/ptx_hashes.py OUT.json [--dsls numba,triton,cute] [--cute-kernels p_lat,put_block]
                               [--objects N] [--arch sm_90a]

* numba: every kernel of bench/numba_bench.py (its ``cuda.jit`` options), ``cuda.compile_ptx`` for
  ``--arch``, NVSHMEM linked as a launch links it;
* triton: every kernel of bench/triton_bench.py, ``triton.compile`` for the same target;
* cute: the kernels ``--cute-kernels`` of bench/cute_bench.py (a collective costs CuTe 5-80 s);
* objects: the PTX of the out-of-line objects (nvshmem_dsl.linker's ``object_ptx``: LLVM only, no
  cache, each at its default level) of ``--objects`` NVSHMEM functions the Numba kernels call out of
  line: the first half of them by name (NVSHMEM's helpers), the other the last (API functions).

Writes ``{"<dsl>:<kernel>": sha256 of the PTX}`` as JSON (sorted); names in the PTX are kept, so
a renamed symbol is a difference too.  The digests depend on the installed toolchain and NVSHMEM.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _digest(text) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def numba_ptx(arch: str) -> dict:
    from numba import cuda

    import numba_bench as nb

    cc = (int(arch[3:-1] if arch[-1].isalpha() else arch[3:]) // 10, int(arch.rstrip("a")[-1]))
    out = {}
    for name, fn in nb.KERNELS.items():
        ptx, _ = cuda.compile_ptx(fn, nb.SIGNATURES[name], cc=cc, **nb.jit_options(name))
        out[name] = ptx
    return out


def triton_ptx(arch: str) -> dict:
    from triton.backends.compiler import GPUTarget

    import nvshmem_dsl.triton  # noqa: F401 - the NVSHMEM link installed
    import triton_bench as tb

    digits = int("".join(c for c in arch if c.isdigit()))
    target = GPUTarget("cuda", digits, 32)
    return {name: tb.compile_kernel(name, target).asm["ptx"] for name in tb.KERNELS}


def cute_ptx(arch: str, names) -> dict:
    import cute_bench as cb

    tensors = cb.fake_tensors(1 << 20)
    compiled = cb.compile_all(tensors, arch=arch, names=names, keep_ptx=True)
    return {name: k.__ptx__ for name, k in compiled.items()}


def _linker_function(name: str):
    """The linker's function ``name``, wherever the linker keeps it (its modules move)."""
    import importlib
    import pkgutil

    import nvshmem_dsl.linker as linker

    for mod in pkgutil.walk_packages(linker.__path__, "nvshmem_dsl.linker."):
        m = importlib.import_module(mod.name)
        if callable(getattr(m, name, None)) and getattr(m, name).__module__ == m.__name__:
            return getattr(m, name)
    raise LookupError(name)


def object_ptxs(kernel_ptx: dict, count: int, arch: str) -> dict:
    os.environ.setdefault("NVSHMEM_DSL_OBJECT_WORKERS", "0")
    extern_calls, ptx_target = _linker_function("extern_calls"), _linker_function("ptx_target")
    object_features, object_ptx = _linker_function("object_features"), _linker_function("object_ptx")
    sm = int("".join(c for c in arch if c.isdigit()))
    calls = sorted({n for ptx in kernel_ptx.values() for n in extern_calls(ptx)})
    calls = sorted(set(calls[:count // 2] + calls[len(calls) - (count - count // 2):]))  # helpers and API functions
    some = next(ptx for ptx in kernel_ptx.values() if extern_calls(ptx))
    cpu, features = ptx_target(some)
    return {name: object_ptx([name], sm, cpu, object_features(features)) for name in calls}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--dsls", default="numba,triton,cute")
    ap.add_argument("--cute-kernels", default="p_lat,g_lat,amo_lat,put_block,barrier_lat")
    ap.add_argument("--objects", type=int, default=0)
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    dsls = args.dsls.split(",")
    result = {}
    numba = {}
    if "numba" in dsls:
        numba = numba_ptx(args.arch)
        result.update({f"numba:{k}": _digest(v) for k, v in numba.items()})
    if "triton" in dsls:
        result.update({f"triton:{k}": _digest(v) for k, v in triton_ptx(args.arch).items()})
    if "cute" in dsls:
        result.update({f"cute:{k}": _digest(v) for k, v in cute_ptx(args.arch, args.cute_kernels.split(",")).items()})
    if args.objects and numba:
        result.update({f"object:{k}": _digest(v) for k, v in object_ptxs(numba, args.objects, args.arch).items()})
    with open(args.out, "w") as f:
        json.dump(dict(sorted(result.items())), f, indent=1)
    print(f"{len(result)} digests -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
