"""NVIDIA's NVSHMEM4Py CuTe example (shared/seeds/001), ported to nvshmem-dsl.

The kernel and launcher are the seed's, but for the import names; the host side uses our
init/array/compile. Run: python -m nvshmem_dsl.run -n 2 examples/cute_ring_put_get.py
"""
import cutlass
import numpy as np
from cutlass import cute
from cutlass.cute.runtime import from_dlpack

import nvshmem_dsl as nvshmem
import nvshmem_dsl.cute as nvshmem_cute


@cute.kernel
def rma_kernel(src: cute.Tensor, dst: cute.Tensor, remote_buf: cute.Tensor, pe: cutlass.Int32):
    # Put data from src to remote_buf on remote PE
    nvshmem_cute.put_block(remote_buf, src, pe)
    # Get data from remote_buf on remote PE to dst
    nvshmem_cute.get_block(dst, remote_buf, pe)


@cute.jit
def rma_launcher(src, dst, remote_buf, pe):
    rma_kernel(src, dst, remote_buf, pe).launch(grid=[1, 1, 1], block=[1, 1, 1])


def run():
    """The example on an initialised NVSHMEM (every PE calls it)."""
    me, n_pes = nvshmem.my_pe(), nvshmem.n_pes()
    pe = (me + 1) % n_pes
    src = nvshmem.full((1,), me + 42, np.int32, like="cupy")
    dst = nvshmem.zeros((1,), np.int32, like="cupy")
    remote_buf = nvshmem.zeros((1,), np.int32, like="cupy")
    args = [from_dlpack(x) for x in (src, dst, remote_buf)] + [cutlass.Int32(pe)]
    compiled = nvshmem_cute.compile(rma_launcher, *args)  # arch + NVSHMEM module init
    compiled(*args)
    import cupy
    cupy.cuda.runtime.deviceSynchronize()
    nvshmem.barrier_all()
    got = int(dst[0])
    assert got == me + 42, f"PE {me}: got {got}, expected {me + 42}"
    print(f"PE {me}: put {me + 42} to PE {pe} and got it back")
    for x in (src, dst, remote_buf):
        nvshmem.free(x)


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
