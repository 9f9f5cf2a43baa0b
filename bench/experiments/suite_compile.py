"""Every kernel of the Numba GPU suite (tests/gpu/numba_kernels.py, as tests/gpu/test_numba_gpu.py
launches them at 2 PEs) compiled to a cubin on a CPU (numba-cuda's compile, the NVSHMEM link, nvJitLink),
in the suite's order, with the objects' cache NVSHMEM_DSL_CACHE as it is: seconds per kernel and in all.
Compares, for one, how NVSHMEM's transport helpers are linked (NVSHMEM_DSL_HELPERS=build / archive)
from an empty object cache:

    rm -rf $CACHE/outline; NVSHMEM_DSL_CACHE=$CACHE NVSHMEM_DSL_HELPERS=archive python bench/experiments/suite_compile.py

Arguments: shape ids to compile only those (e.g. put_signal-thread).
"""
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "gpu")]

from numba.cuda.compiler import _compile_pyfunc_with_fixup  # noqa: E402

import shapes as S  # noqa: E402
from test_gpu_shapes import _numba_units  # noqa: E402


def main(only) -> int:
    total, count = 0.0, 0
    for (name, _, _), (fn, sig, sid) in _numba_units(S.shapes("numba")).items():
        if only and sid not in only:
            continue
        t0 = time.perf_counter()
        lib, _ = _compile_pyfunc_with_fixup(fn, sig, device=False, abi="numba", cc=(9, 0))
        lib.get_cubin(cc=(9, 0))
        secs = time.perf_counter() - t0
        total, count = total + secs, count + 1
        print(f"{secs:6.2f} {sid:40s} {name}", flush=True)
    print(f"total {total:.1f} s, {count} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
