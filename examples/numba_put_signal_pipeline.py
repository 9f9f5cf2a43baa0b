"""Producer/consumer pipeline with put_signal (Numba), on a ring of any number of PEs: every PE
streams chunks to the next PE; each chunk's signal tells that PE that exactly that chunk has
landed, so it starts on it without a barrier.

Run: python -m nvshmem_dsl.run -n 2 examples/numba_put_signal_pipeline.py
"""
import numpy as np
from numba import cuda, types

import nvshmem_dsl as nvshmem
import nvshmem_dsl.numba as nv

CHUNKS, CHUNK = 8, 4096


@cuda.jit
def producer(data, src, signals, consumer_pe):
    c = cuda.blockIdx.x  # one block per chunk
    lo = c * CHUNK
    nv.put_signal_nbi_block(data[lo:lo + CHUNK], src[lo:lo + CHUNK], signals[c:c + 1],
                            1, nv.SignalOp.SIGNAL_SET, consumer_pe)


@cuda.jit
def consumer(data, signals, out):
    c = cuda.blockIdx.x
    if cuda.threadIdx.x == 0:
        nv.signal_wait_until(signals[c:c + 1], nv.Cmp.CMP_EQ, 1)
    cuda.syncthreads()
    lo = c * CHUNK
    for i in range(cuda.threadIdx.x, CHUNK, cuda.blockDim.x):
        out[lo + i] = 2 * data[lo + i]  # the "work" on a chunk


def run():
    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    data = nvshmem.zeros((CHUNKS * CHUNK,), np.float32, like="numba")
    signals = nvshmem.zeros((CHUNKS,), np.uint64, like="numba")
    src = cuda.to_device(np.arange(CHUNKS * CHUNK, dtype=np.float32) + 1000 * me)
    out = cuda.device_array(CHUNKS * CHUNK, np.float32)
    nvshmem.barrier_all()
    producer[CHUNKS, 256](data, src, signals, (me + 1) % npes)  # never waits: no deadlock
    consumer[CHUNKS, 256](data, signals, out)  # the previous PE's chunks, as they land
    cuda.synchronize()
    nvshmem.barrier_all()
    left = (me - 1) % npes
    np.testing.assert_array_equal(out.copy_to_host(), 2 * (np.arange(CHUNKS * CHUNK, dtype=np.float32) + 1000 * left))
    print(f"PE {me}: every chunk of PE {left} arrived and was processed")
    nvshmem.free(data), nvshmem.free(signals)


def compile_check(cc=(9, 0)):
    """Compile the kernels to PTX without a GPU (used by the CPU tests)."""
    f, u = types.float32[::1], types.uint64[::1]
    return [cuda.compile_ptx(producer.py_func, (f, f, u, types.int32), cc=cc)[0],
            cuda.compile_ptx(consumer.py_func, (f, u, f), cc=cc)[0]]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
