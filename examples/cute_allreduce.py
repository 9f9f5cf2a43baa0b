"""All-reduce written with device collectives (CuTe DSL): sum_reduce_block over all PEs.

Run: python -m nvshmem_dsl.run -n 2 examples/cute_allreduce.py
"""
import cutlass
import numpy as np
from cutlass import cute
from cutlass.cute.runtime import from_dlpack

import nvshmem_dsl as nvshmem
import nvshmem_dsl.cute as nv

N = 1 << 16


@cute.kernel
def allreduce_kernel(dst: cute.Tensor, src: cute.Tensor):
    nv.sum_reduce_block(nv.Team.TEAM_WORLD, dst, src, cute.size(dst))


@cute.jit
def allreduce(dst: cute.Tensor, src: cute.Tensor):
    allreduce_kernel(dst, src).launch(grid=[1, 1, 1], block=[512, 1, 1])


def run():
    import cupy
    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    src = nvshmem.full((N,), me + 1, np.float32, like="cupy")
    dst = nvshmem.zeros((N,), np.float32, like="cupy")
    args = (from_dlpack(dst, assumed_align=16), from_dlpack(src, assumed_align=16))
    nvshmem.barrier_all()
    nv.compile(allreduce, *args)(*args)
    cupy.cuda.runtime.deviceSynchronize()
    expected = npes * (npes + 1) / 2
    assert bool((dst == expected).all()), f"PE {me}: wrong sum"
    print(f"PE {me}: all-reduce gives {expected} everywhere")
    nvshmem.free(src), nvshmem.free(dst)


def compile_check(arch="sm_90a"):
    t = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (N,), assumed_align=16)
    return [nv.compile_to_ptx(allreduce, t, t, arch=arch)]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
