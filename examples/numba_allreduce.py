"""All-reduce written with device collectives (Numba): every PE sums its vector with every other
PE's, in one kernel, with sum_reduce_block.

Run: python -m nvshmem_dsl.run -n 2 examples/numba_allreduce.py
"""
import numpy as np
from numba import cuda, types

import nvshmem_dsl as nvshmem
import nvshmem_dsl.numba as nv

N = 1 << 16


@cuda.jit
def allreduce(dst, src):
    nv.sum_reduce_block(nv.Team.TEAM_WORLD, dst, src, dst.size)


def run():
    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    src = nvshmem.array((N,), np.float32, like="numba")
    dst = nvshmem.zeros((N,), np.float32, like="numba")
    src.copy_to_device(np.full(N, me + 1, np.float32))
    nvshmem.barrier_all()
    allreduce[1, 512](dst, src)  # collectives run in one block per PE here
    cuda.synchronize()
    expected = npes * (npes + 1) / 2
    assert np.all(dst.copy_to_host() == expected), f"PE {me}: wrong sum"
    print(f"PE {me}: all-reduce gives {expected} everywhere")
    nvshmem.free(src), nvshmem.free(dst)


def compile_check(cc=(9, 0)):
    f = types.float32[::1]
    return [cuda.compile_ptx(allreduce.py_func, (f, f), cc=cc)[0]]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
