"""1-D halo exchange (CuTe DSL): each PE writes its edge cells into its neighbours' ghost cells
with p, then all PEs sync.

Run: python -m nvshmem_dsl.run -n 2 examples/cute_halo_exchange.py
"""
import cutlass
import numpy as np
from cutlass import cute
from cutlass.cute.runtime import from_dlpack

import nvshmem_dsl as nvshmem
import nvshmem_dsl.cute as nv

N = 1024  # interior cells per PE; the slab holds N + 2 with the ghosts at 0 and N + 1


@cute.kernel
def exchange_kernel(slab: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    if tidx == 0:
        me, npes = nv.my_pe(), nv.n_pes()
        left, right = (me + npes - 1) % npes, (me + 1) % npes
        nv.p(slab, 0, slab[N], right)      # my last interior cell is the right PE's left ghost
        nv.p(slab, N + 1, slab[1], left)   # my first interior cell is the left PE's right ghost
        nv.quiet()
    nv.sync_all_block()


@cute.jit
def exchange(slab: cute.Tensor):
    exchange_kernel(slab).launch(grid=[1, 1, 1], block=[32, 1, 1])


def run():
    import cupy
    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    slab = nvshmem.zeros((N + 2,), np.float32, like="cupy")
    slab[1:N + 1] = cupy.arange(N, dtype=np.float32) + 1000 * me
    nvshmem.barrier_all()
    t = from_dlpack(slab, assumed_align=16)
    nv.compile(exchange, t)(t)
    cupy.cuda.runtime.deviceSynchronize()
    got = cupy.asnumpy(slab)
    left, right = (me - 1) % npes, (me + 1) % npes
    assert got[0] == 1000 * left + N - 1 and got[N + 1] == 1000 * right, f"PE {me}: ghosts {got[0]}, {got[-1]}"
    print(f"PE {me}: ghost cells {got[0]:.0f} and {got[N + 1]:.0f}")
    nvshmem.free(slab)


def compile_check(arch="sm_90a"):
    t = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (N + 2,), assumed_align=16)
    return [nv.compile_to_ptx(exchange, t, arch=arch)]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
