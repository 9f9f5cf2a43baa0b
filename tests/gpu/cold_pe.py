"""The PE program of tests/gpu/test_cold_pes_gpu.py: initialise, then compile and run, in this order,
a Numba kernel with inlined calls (p, my_pe), a Numba kernel with an out-of-line collective
(sum_reduce over TEAM_WORLD) and a Triton kernel with a put; check each result; print one line

    RESULT {"pe": k, "npes": n, "init_s": ..., "numba_p_s": ..., "numba_reduce_s": ..., "triton_s": ..., "ok": ...}

(seconds of each first call: compile, link, module init, launch, synchronise). Run under
``python -m nvshmem_dsl.run -n N`` with NVSHMEM_DSL_CACHE (and TRITON_CACHE_DIR) where the test wants them.
"""

import json
import time

import numpy as np

t0 = time.perf_counter()
import nvshmem_dsl as nvshmem  # noqa: E402

nvshmem.init()
me, npes = nvshmem.my_pe(), nvshmem.n_pes()
times = {"pe": me, "npes": npes, "init_s": time.perf_counter() - t0}
ok = {}

from numba import cuda  # noqa: E402

import nvshmem_dsl.numba as nv  # noqa: E402


@cuda.jit
def p_kernel(dst):
    nv.p(dst[nv.my_pe():], nv.my_pe() + 100, (nv.my_pe() + 1) % nv.n_pes())


@cuda.jit
def reduce_kernel(dst, src):
    nv.sum_reduce(nv.Team.TEAM_WORLD, dst, src, src.size)


def timed(name, fn):
    t = time.perf_counter()
    fn()
    cuda.synchronize()
    times[name] = time.perf_counter() - t


a = nvshmem.zeros((npes,), np.int32, like="numba")
nvshmem.barrier_all()
timed("numba_p_s", lambda: p_kernel[1, 1](a))
nvshmem.barrier_all()
got = a.copy_to_host()
left = (me - 1) % npes
ok["numba_p"] = bool(got[left] == left + 100)

src = nvshmem.full((64,), me + 1, np.float32, like="numba")
dst = nvshmem.zeros((64,), np.float32, like="numba")
nvshmem.barrier_all()
timed("numba_reduce_s", lambda: reduce_kernel[1, 32](dst, src))
ok["numba_reduce"] = bool((dst.copy_to_host() == npes * (npes + 1) / 2).all())

try:
    import triton
    import triton.language as tl

    import nvshmem_dsl.triton as nvt

    @triton.jit
    def triton_put(dst, src, me, n: tl.constexpr):
        nvt.put(dst + me * n, src, n, (me + 1) % nvt.n_pes())

    tdst = nvshmem.zeros((npes * 4,), np.int32, like="torch")
    tsrc = nvshmem.full((4,), me + 7, np.int32, like="torch")
    nvshmem.barrier_all()
    timed("triton_s", lambda: triton_put[(1,)](tdst, tsrc, me, 4))
    nvshmem.barrier_all()
    ok["triton"] = bool((tdst[left * 4:(left + 1) * 4] == left + 7).all().item())
except ImportError as exc:
    times["triton_skipped"] = str(exc)

times["ok"] = all(ok.values())
times["checks"] = ok
print("RESULT " + json.dumps(times), flush=True)
nvshmem.finalize()
