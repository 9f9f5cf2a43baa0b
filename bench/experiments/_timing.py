"""How the GPU experiments time a kernel (device events around one launch, every PE starting together),
and the NVSHMEM session of the collective ones."""
import contextlib

import numpy as np

import nvshmem_dsl as nvshmem


def median_seconds(launch, reps: int = 5) -> float:
    """Median seconds of ``reps`` launches of ``launch()`` (after one untimed), each timed by device
    events on the null stream after the stream is idle and a barrier of all PEs."""
    import cupy as cp

    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for r in range(reps + 1):
        cp.cuda.Stream.null.synchronize()
        nvshmem.barrier_all()
        e0.record()
        launch()
        e1.record()
        e1.synchronize()
        if r:
            times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
    return sorted(times)[len(times) // 2]


@contextlib.contextmanager
def collective_session(n: int = 64):
    """NVSHMEM started and ``(my_pe, dst, src)``: two symmetric float32 cupy arrays of ``n`` (``dst``
    zeros, ``src`` my_pe + 1) for a collective experiment; freed and NVSHMEM finalized after."""
    nvshmem.init()
    me = nvshmem.my_pe()
    dst = nvshmem.zeros((n,), np.float32, like="cupy")
    src = nvshmem.zeros((n,), np.float32, like="cupy")
    src[:] = me + 1
    try:
        yield me, dst, src
    finally:
        nvshmem.barrier_all()
        nvshmem.free(dst)
        nvshmem.free(src)
        nvshmem.finalize()
