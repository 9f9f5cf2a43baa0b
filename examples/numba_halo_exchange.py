"""1-D halo exchange (Numba): each PE owns a slab with one ghost cell at each end and writes its
edge cells into its neighbours' ghost cells with p, then all PEs sync before the next step.

Run: python -m nvshmem_dsl.run -n 2 examples/numba_halo_exchange.py
"""
import numpy as np
from numba import cuda, types

import nvshmem_dsl as nvshmem
import nvshmem_dsl.numba as nv

N = 1024  # interior cells per PE; the slab holds N + 2 with the ghosts at 0 and N + 1


@cuda.jit
def exchange(slab):
    if cuda.threadIdx.x == 0:
        me, npes = nv.my_pe(), nv.n_pes()
        left, right = (me - 1) % npes, (me + 1) % npes
        n = slab.size - 2
        nv.p(slab, 0, slab[n], right)       # my last interior cell is the right PE's left ghost
        nv.p(slab, n + 1, slab[1], left)    # my first interior cell is the left PE's right ghost
        nv.quiet()
    nv.sync_all_block()


def run():
    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    slab = nvshmem.zeros((N + 2,), np.float32, like="numba")
    interior = np.arange(N, dtype=np.float32) + 1000 * me
    slab[1:N + 1].copy_to_device(interior)
    nvshmem.barrier_all()
    exchange[1, 32](slab)
    cuda.synchronize()
    got = slab.copy_to_host()
    left, right = (me - 1) % npes, (me + 1) % npes
    assert got[0] == 1000 * left + N - 1 and got[N + 1] == 1000 * right, f"PE {me}: ghosts {got[0]}, {got[-1]}"
    print(f"PE {me}: ghost cells {got[0]:.0f} and {got[N + 1]:.0f}")
    nvshmem.free(slab)


def compile_check(cc=(9, 0)):
    return [cuda.compile_ptx(exchange.py_func, (types.float32[::1],), cc=cc)[0]]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
