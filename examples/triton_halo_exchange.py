"""1-D halo exchange (Triton): each PE owns a slab with one ghost cell at each end and writes its
edge cells into its neighbours' ghost cells with p, then all PEs sync before the next step.

Run: python -m nvshmem_dsl.run -n 2 examples/triton_halo_exchange.py
"""
import numpy as np
import triton
import triton.language as tl

import nvshmem_dsl as nvshmem
import nvshmem_dsl.triton as nv

N = 1024  # interior cells per PE; the slab holds N + 2 with the ghosts at 0 and N + 1


@triton.jit
def exchange(slab, n):
    me = nv.my_pe()
    npes = nv.n_pes()
    left = (me + npes - 1) % npes
    right = (me + 1) % npes
    nv.p(slab, tl.load(slab + n), right)         # my last interior cell is the right PE's left ghost
    nv.p(slab + n + 1, tl.load(slab + 1), left)  # my first interior cell is the left PE's right ghost
    nv.quiet()
    nv.sync_all_block()


def run():
    import torch

    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    slab = nvshmem.zeros((N + 2,), np.float32, like="torch")
    slab[1:N + 1] = torch.arange(N, dtype=torch.float32) + 1000 * me
    nvshmem.barrier_all()
    exchange[(1,)](slab, N, num_warps=1)
    torch.cuda.synchronize()
    got = slab.cpu().numpy()
    left, right = (me - 1) % npes, (me + 1) % npes
    assert got[0] == 1000 * left + N - 1 and got[N + 1] == 1000 * right, f"PE {me}: ghosts {got[0]}, {got[-1]}"
    print(f"PE {me}: ghost cells {got[0]:.0f} and {got[N + 1]:.0f}")
    nvshmem.free(slab)


def compile_check(target=None):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = target or GPUTarget("cuda", 90, 32)
    return [triton.compile(ASTSource(fn=exchange, signature={"slab": "*fp32", "n": "i32"}, constexprs={}),
                           target=target, options={"num_warps": 1})]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
