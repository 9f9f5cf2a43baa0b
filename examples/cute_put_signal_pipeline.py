"""Producer/consumer pipeline with put_signal (CuTe DSL), on a ring of any number of PEs: every
PE streams chunks to the next PE, one block per chunk; each chunk's signal tells that PE that
exactly that chunk has landed.

Run: python -m nvshmem_dsl.run -n 2 examples/cute_put_signal_pipeline.py
"""
import cutlass
import numpy as np
from cutlass import Int32, Uint64, cute
from cutlass.cute.runtime import from_dlpack

import nvshmem_dsl as nvshmem
import nvshmem_dsl.cute as nv

CHUNKS, CHUNK = 8, 4096


def _chunk(t, c, n):
    return cute.make_tensor(t.iterator + c * n, cute.make_layout(n))


@cute.kernel
def producer_kernel(data: cute.Tensor, src: cute.Tensor, signals: cute.Tensor, consumer_pe: Int32):
    c, _, _ = cute.arch.block_idx()
    nv.put_signal_nbi_block(_chunk(data, c, CHUNK), _chunk(src, c, CHUNK), signals, c, Uint64(1),
                            nv.SignalOp.SIGNAL_SET, consumer_pe)


@cute.kernel
def consumer_kernel(data: cute.Tensor, signals: cute.Tensor, out: cute.Tensor):
    c, _, _ = cute.arch.block_idx()
    tidx, _, _ = cute.arch.thread_idx()
    if tidx == 0:
        nv.signal_wait_until(signals, c, nv.Cmp.CMP_EQ, Uint64(1))
    cute.arch.sync_threads()
    for i in range(tidx, CHUNK, 256):
        out[c * CHUNK + i] = data[c * CHUNK + i] * 2.0


@cute.jit
def produce(data: cute.Tensor, src: cute.Tensor, signals: cute.Tensor, consumer_pe: Int32):
    producer_kernel(data, src, signals, consumer_pe).launch(grid=[CHUNKS, 1, 1], block=[256, 1, 1])


@cute.jit
def consume(data: cute.Tensor, signals: cute.Tensor, out: cute.Tensor):
    consumer_kernel(data, signals, out).launch(grid=[CHUNKS, 1, 1], block=[256, 1, 1])


def run():
    import cupy
    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    data = nvshmem.zeros((CHUNKS * CHUNK,), np.float32, like="cupy")
    signals = nvshmem.zeros((CHUNKS,), np.uint64, like="cupy")
    src = cupy.arange(CHUNKS * CHUNK, dtype=np.float32) + 1000 * me
    out = cupy.zeros(CHUNKS * CHUNK, np.float32)
    T = lambda x: from_dlpack(x, assumed_align=16)  # noqa: E731
    nvshmem.barrier_all()
    args = (T(data), T(src), T(signals), Int32((me + 1) % npes))
    nv.compile(produce, *args)(*args)  # to the next PE; never waits: no deadlock
    args = (T(data), T(signals), T(out))
    nv.compile(consume, *args)(*args)  # the previous PE's chunks, as they land
    cupy.cuda.runtime.deviceSynchronize()
    nvshmem.barrier_all()
    left = (me - 1) % npes
    assert bool((out == 2 * (cupy.arange(CHUNKS * CHUNK, dtype=np.float32) + 1000 * left)).all()), \
        f"PE {me}: a chunk of PE {left} is wrong"
    print(f"PE {me}: every chunk of PE {left} arrived and was processed")
    nvshmem.free(data), nvshmem.free(signals)


def compile_check(arch="sm_90a"):
    F = cute.runtime.make_fake_compact_tensor
    f = F(cutlass.Float32, (CHUNKS * CHUNK,), assumed_align=16)
    u = F(cutlass.Uint64, (CHUNKS,), assumed_align=16)
    return [nv.compile_to_ptx(produce, f, f, u, Int32(1), arch=arch),
            nv.compile_to_ptx(consume, f, u, f, arch=arch)]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
