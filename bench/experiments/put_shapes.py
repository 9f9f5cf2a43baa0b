"""Experiment: what is left of Numba's small-message warp/block put gap against C++.

After the 2026-11-22 rewrites (peer base above the entry sync, lane id as the intrinsic) Numba's
block puts are 1.04-1.09x C++ but warp puts of 4-64 KiB 0.93x (records/2026-11-22/
group-rma.txt).  This times one put kernel (132 blocks x 1024 threads, 1000 puts in
the kernel, both PEs at once, device events, median of 5) at 4, 16 and 64 KiB, written as:
  bench      bench/numba_bench.py's kernel (nv.window of both arrays every iteration)
  hoisted    no window arithmetic: the windows taken once before the loop (puts use one window)
  unclamped  windows without nv.window's clamping (the data pointer moved, nothing checked;
             since the change this experiment led to, nv.window compiles to the same code)
  generic    the bench kernel with the rewritten copy storing through a generic pointer, as
             nvcc's header path does (ST.E.128), instead of a global one (STG.E.128)
The C++ kernel is timed in the same device call by bench/run.py (device step put-shapes).
Earlier version (commit a1532f1, before nv.window): records/2026-11-22/put_shapes.txt; this
one: records/2026-11-22/put-shapes.txt.

Run on 2 GPUs:  python -m nvshmem_dsl.run -n 2 bench/experiments/put_shapes.py
On the CPU:     python bench/experiments/put_shapes.py --ptx   (what each variant's PTX holds)
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
from numba import cuda, int64, types  # noqa: E402
from numba.core.extending import intrinsic  # noqa: E402

import _common as C  # noqa: E402
import numba_bench as nb  # noqa: E402
import nvshmem_dsl as nvshmem  # noqa: E402
import nvshmem_dsl.numba as nv  # noqa: E402
from nvshmem_dsl.linker import store, rewrites  # noqa: E402
from nvshmem_dsl.numba import _views  # noqa: E402
from _timing import median_seconds  # noqa: E402


@intrinsic
def raw_window(typingctx, x, start, n):
    """nv.window without the clamping: x's data pointer moved by `start` elements."""
    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        s = context.cast(builder, args[1], sig.args[1], types.int64)
        count = context.cast(builder, args[2], sig.args[2], types.int64)
        return _views._alias(context, builder, sig.args[0], ary, builder.gep(ary.data, [s], inbounds=True), count)
    return x(x, start, n), codegen


def hoisted(op, worker):
    def kernel(dst, src, nelems, iters, peer, nwin):
        s, n = worker(nelems)
        if n > 0:
            d, v = nv.window(dst, s, n), nv.window(src, s, n)
            for _ in range(iters):
                op(d, v, n, peer)
        nv.quiet()
    return kernel


_CAST = re.compile(r'^(\s*)(%nvdsl\.cp\d+\.p) = addrspacecast ptr (%[\w.]+) to ptr addrspace\(1\)$', re.M)
_STORE = re.compile(r'store <4 x i32> (%[\w.]+), ptr addrspace\(1\) (%nvdsl\.cp\d+\.p), align 16')


def generic_store_rewrite(rewrite):
    """rewrites.rewrite, its vector stores made through the generic pointer."""
    def patched(text, how):
        text, n = rewrite(text, how)
        text = _CAST.sub(r"\1\2 = getelementptr i8, ptr \3, i64 0", text)
        return _STORE.sub(r"store <4 x i32> \1, ptr \2, align 16", text), n
    return patched


def variants():
    """(scope, name, kernel function, copy rewrite to compile it with) of every variant."""
    for scope, op, worker in (("warp", nv.put_warp, nb.warp_worker), ("block", nv.put_block, nb.block_worker)):
        bench = nb.KERNELS[f"put_{scope}"]
        yield scope, "bench", bench, rewrites.rewrite
        yield scope, "hoisted", hoisted(op, worker), rewrites.rewrite
        unclamped = nb.rma_bw(f"put_{scope}_unclamped", op, worker, raw_window)
        yield scope, "unclamped", unclamped, rewrites.rewrite
        yield scope, "generic", bench, generic_store_rewrite(rewrites.rewrite)


def compiled(fn, rewrite, compile):
    """compile(fn) with NVSHMEM's API modules built with ``rewrite``."""
    plain = rewrites.rewrite
    rewrites.rewrite = rewrite
    store._subsets.clear()  # the API modules are cached per name set: rebuild them
    try:
        return compile(fn)
    finally:
        rewrites.rewrite = plain
        store._subsets.clear()


def check_ptx():
    """CPU check: what each variant's PTX holds (no GPU needed: --ptx)."""
    sig = nb.SIGNATURES["put_warp"]
    for scope, name, fn, rewrite in variants():
        ptx = compiled(fn, rewrite, lambda f: cuda.compile_ptx(f, sig, cc=(9, 0))[0])
        print(f"{scope:>5} {name:>9}: {ptx.count('st.global.v4')} st.global.v4, {ptx.count('st.v4')} st.v4, "
              f"{len(ptx.splitlines())} lines")


def main():
    nvshmem.init()

    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    peer = (me + 1) % npes
    nfl = (64 << 10) // 4
    a = nvshmem.zeros((nfl,), np.float32, like="cupy")
    b = nvshmem.zeros((nfl,), np.float32, like="cupy")
    b[:] = 1
    sig = nb.SIGNATURES["put_warp"]
    iters = 1000
    for scope, name, fn, rewrite in variants():
        k = compiled(fn, rewrite, lambda f: cuda.jit(sig)(f))
        for nbytes in (4 << 10, 16 << 10, 64 << 10):
            nelems = nbytes // 4
            seconds = median_seconds(lambda: k[C.BW_GRID, C.BW_BLOCK](a, b, nelems, iters, peer, 1))
            gbs = nbytes * iters / seconds / 1e9
            if me == 0:
                print(f"{scope:>5} {name:>9} {nbytes >> 10:>3} KiB: {gbs:8.2f} GB/s", flush=True)
    nvshmem.barrier_all()
    nvshmem.free(a)
    nvshmem.free(b)
    nvshmem.finalize()


if __name__ == "__main__":
    check_ptx() if "--ptx" in sys.argv else main()
