"""NVIDIA's NVSHMEM4Py Numba example (shared/seeds/000), ported to nvshmem-dsl.

The kernel is the seed's, word for word, but for the import name; the host side uses our
init/array/launch. Run: python -m nvshmem_dsl.run -n 2 examples/numba_ring_put_get.py
"""
import numpy as np
from numba import cuda

import nvshmem_dsl as nvshmem
import nvshmem_dsl.numba as nvshmem_numba


@cuda.jit
def rma_kernel(src, dst, remote_buf, pe):
    tid = cuda.threadIdx.x + cuda.blockIdx.x * cuda.blockDim.x
    if tid == 0:
        # Put data from src to remote_buf on remote PE
        nvshmem_numba.put(remote_buf, src, pe)
        # Get data from remote_buf on remote PE to dst
        nvshmem_numba.get(dst, remote_buf, pe)


def run():
    """The example on an initialised NVSHMEM (every PE calls it)."""
    me, n_pes = nvshmem.my_pe(), nvshmem.n_pes()
    pe = (me + 1) % n_pes
    src = nvshmem.full((1,), me + 42, np.int32, like="numba")
    dst = nvshmem.zeros((1,), np.int32, like="numba")
    remote_buf = nvshmem.zeros((1,), np.int32, like="numba")
    rma_kernel[1, 1](src, dst, remote_buf, pe)
    cuda.synchronize()
    nvshmem.barrier_all()
    got = int(dst.copy_to_host()[0])
    assert got == me + 42, f"PE {me}: got {got}, expected {me + 42}"
    print(f"PE {me}: put {me + 42} to PE {pe} and got it back")
    for x in (src, dst, remote_buf):
        nvshmem.free(x)


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
