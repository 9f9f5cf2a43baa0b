"""NVIDIA's NVSHMEM4Py ring example (shared/seeds/000), in Triton with nvshmem-dsl.

Every PE puts one value into a symmetric buffer of the next PE and gets it back. A Triton
program makes thread-scope calls (put, get) with one thread; no thread-index test is needed.
Run: python -m nvshmem_dsl.run -n 2 examples/triton_ring_put_get.py
"""
import numpy as np
import triton
import triton.language as tl

import nvshmem_dsl as nvshmem
import nvshmem_dsl.triton as nv


@triton.jit
def rma_kernel(src, dst, remote_buf, pe):
    # Put data from src to remote_buf on remote PE
    nv.put(remote_buf, src, 1, pe)
    # Get data from remote_buf on remote PE to dst
    nv.get(dst, remote_buf, 1, pe)


def run():
    """The example on an initialised NVSHMEM (every PE calls it)."""
    import torch

    me, n_pes = nvshmem.my_pe(), nvshmem.n_pes()
    pe = (me + 1) % n_pes
    src = nvshmem.full((1,), me + 42, np.int32, like="torch")
    dst = nvshmem.zeros((1,), np.int32, like="torch")
    remote_buf = nvshmem.zeros((1,), np.int32, like="torch")
    rma_kernel[(1,)](src, dst, remote_buf, pe)  # module init for NVSHMEM is automatic
    torch.cuda.synchronize()
    nvshmem.barrier_all()
    got = int(dst[0])
    assert got == me + 42, f"PE {me}: got {got}, expected {me + 42}"
    print(f"PE {me}: put {me + 42} to PE {pe} and got it back")
    for x in (src, dst, remote_buf):
        nvshmem.free(x)


def compile_check(target=None):
    """Compile the kernel without a GPU (used by the CPU tests): its compiled kernels."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = target or GPUTarget("cuda", 90, 32)
    sig = {"src": "*i32", "dst": "*i32", "remote_buf": "*i32", "pe": "i32"}
    return [triton.compile(ASTSource(fn=rma_kernel, signature=sig, constexprs={}), target=target)]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
