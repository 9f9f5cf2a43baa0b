"""Experiment (GPU): kernels that call NVSHMEM's objects compiled by the objects' ptxas first, as where nvJitLink is
CUDA 12's (it does not read their PTX 9.0: nvshmem_dsl.linker.link.nvjitlink_reads), on a GPU host whose toolchain
is CUDA 13 throughout: nvJitLink is made to say it reads PTX 8.8, so every such kernel goes through
link.ptxas_object and nvJitLink links cubins only (with CUDA 12's nvJitLink: tests/test_link_ptxas.py, CPU).
Checks the results of a broadcast, a reduction and a barrier over all PEs, then times 2000 thread-scope broadcasts
and barriers as bench/experiments/one_warp_leader.py's one-thread kernels.

Run (2 PEs): python -m nvshmem_dsl.run -n 2 bench/experiments/cuda12_link.py
"""
import numpy as np
from numba import cuda

from nvshmem_dsl.linker import abi, link

link.nvjitlink_ptx_isa = lambda: 88  # noqa: E731 - as CUDA 12.9's

import nvshmem_dsl.numba as nv  # noqa: E402

from _timing import collective_session, median_seconds  # noqa: E402
from one_warp_leader import SIG, kernels  # noqa: E402

W = nv.Team.TEAM_WORLD
compiled_by_ptxas = []
_ptxas_object = link.ptxas_object


def _counting(*args, **kw):
    compiled_by_ptxas.append(1)
    return _ptxas_object(*args, **kw)


link.ptxas_object = _counting
import nvshmem_dsl.numba._linker as _nl  # noqa: E402

_nl.ptxas_object = _counting


def check(dst, src, out):
    nv.broadcast(W, dst, src, 2, 0)
    out[0] = dst[0]
    nv.barrier(W)
    nv.sum_reduce(W, dst, src, 2)
    out[1] = dst[0]


def main():
    with collective_session() as (me, dst, src):
        import cupy as cp

        import nvshmem_dsl as nvshmem

        npes = nvshmem.n_pes()
        out = cp.zeros(2, np.float32)
        cuda.jit(launch_bounds=(1,))(check)[1, 1](dst, src, out)
        cp.cuda.Stream.null.synchronize()
        got = out.get().tolist()
        want = [1.0, float(sum(range(1, npes + 1)))]
        print(f"PE {me}: preserve {abi.preserve()}, kernels compiled by ptxas {len(compiled_by_ptxas)}, "
              f"broadcast/sum_reduce {got} (want {want}): {'ok' if got == want else 'WRONG'}", flush=True)
        for coll, name, fn, _ in kernels():
            if name != "one-thread":
                continue
            k = cuda.jit(SIG, launch_bounds=(1,))(fn)
            us = median_seconds(lambda: k[1, 1](dst, src, 2000)) / 2000 * 1e6
            if me == 0:
                print(f"{coll:>10} one-thread: {us:7.3f} us per call", flush=True)


if __name__ == "__main__":
    main()
