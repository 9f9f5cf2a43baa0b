"""All-reduce written with device collectives (Triton): every PE sums its vector with every other
PE's, in one kernel, with sum_reduce_block (made by all 512 threads of the one program; the
collective is linked out of line, see nvshmem_dsl.linker.outline).

Run: python -m nvshmem_dsl.run -n 2 examples/triton_allreduce.py
"""
import numpy as np
import triton
import triton.language as tl

import nvshmem_dsl as nvshmem
import nvshmem_dsl.triton as nv

N = 1 << 16


@triton.jit
def allreduce(dst, src, n):
    nv.sum_reduce_block(nv.TEAM_WORLD, dst, src, n)


def run():
    import torch

    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    src = nvshmem.full((N,), me + 1, np.float32, like="torch")
    dst = nvshmem.zeros((N,), np.float32, like="torch")
    nvshmem.barrier_all()
    allreduce[(1,)](dst, src, N, num_warps=16)  # collectives run in one program per PE here
    torch.cuda.synchronize()
    expected = npes * (npes + 1) / 2
    assert bool((dst == expected).all()), f"PE {me}: wrong sum"
    print(f"PE {me}: all-reduce gives {expected} everywhere")
    nvshmem.free(src), nvshmem.free(dst)


def compile_check(target=None):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = target or GPUTarget("cuda", 90, 32)
    sig = {"dst": "*fp32", "src": "*fp32", "n": "i64"}
    return [triton.compile(ASTSource(fn=allreduce, signature=sig, constexprs={}), target=target,
                           options={"num_warps": 16})]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
