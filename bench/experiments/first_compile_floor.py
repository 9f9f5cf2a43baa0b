"""Experiment: what a DSL's first kernel costs without NVSHMEM, in a fresh process (GPU host).

bench/compile_time.py times the first NVSHMEM kernel from its compile request to a loaded cubin; part of
that is the DSL's own first compile (Numba: typing, lowering, NVVM/libdevice setup, the CUDA context and
module load).  This times, for Numba, a kernel of the same shape as bench/numba_bench.py's put_block with
a plain copy instead of the NVSHMEM call, the same way (compile_time.numba_compile_loaded: cuda.jit(signature),
then its cubin, loaded), then a second such kernel.

    python bench/experiments/first_compile_floor.py
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main() -> int:
    t0 = time.perf_counter()
    from numba import cuda, float32, int64

    t_import = time.perf_counter() - t0
    cuda.is_available()  # the driver initialised outside the timed part, as compile_time.py does

    def copy_block(dst, src, nelems, peer):
        i = cuda.threadIdx.x
        while i < nelems:
            dst[i] = src[i]
            i += cuda.blockDim.x

    def copy_one(dst, src, nelems, peer):
        if cuda.threadIdx.x == 0:
            dst[0] = src[0]

    from compile_time import numba_compile_loaded

    sig = (float32[::1], float32[::1], int64, int64)
    out = []
    for fn in (copy_block, copy_one):
        t0 = time.perf_counter()
        numba_compile_loaded(fn, sig)
        out.append(round(time.perf_counter() - t0, 4))
    print(json.dumps({"impl": "numba", "what": "first kernel without NVSHMEM", "first_s": out[0], "later_s": out[1],
                      "import_s": round(t_import, 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
