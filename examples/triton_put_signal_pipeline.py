"""Producer/consumer pipeline with put_signal (Triton), on a ring of any number of PEs: every PE
streams chunks to the next PE; each chunk's signal tells that PE that exactly that chunk has
landed, so it starts on it without a barrier.

One program per chunk: the producer's put_signal_nbi_block is made by all threads of its
program; in the consumer, signal_wait_until is made by one thread and the whole program goes on
once it returns.
Run: python -m nvshmem_dsl.run -n 2 examples/triton_put_signal_pipeline.py
"""
import numpy as np
import triton
import triton.language as tl

import nvshmem_dsl as nvshmem
import nvshmem_dsl.triton as nv

CHUNKS, CHUNK = 8, 4096


@triton.jit
def producer(data, src, signals, consumer_pe, CHUNK: tl.constexpr):
    c = tl.program_id(0)  # one program per chunk
    lo = c * CHUNK
    nv.put_signal_nbi_block(data + lo, src + lo, CHUNK, signals + c, 1, nv.SIGNAL_SET, consumer_pe)


@triton.jit
def consumer(data, signals, out, CHUNK: tl.constexpr):
    c = tl.program_id(0)
    nv.signal_wait_until(signals + c, nv.CMP_EQ, 1)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    tl.store(out + offs, 2 * tl.load(data + offs))  # the "work" on a chunk


def run():
    import torch

    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    data = nvshmem.zeros((CHUNKS * CHUNK,), np.float32, like="torch")
    signals = nvshmem.zeros((CHUNKS,), np.uint64, like="torch")
    src = torch.arange(CHUNKS * CHUNK, dtype=torch.float32, device="cuda") + 1000 * me
    out = torch.empty(CHUNKS * CHUNK, dtype=torch.float32, device="cuda")
    nvshmem.barrier_all()
    producer[(CHUNKS,)](data, src, signals, (me + 1) % npes, CHUNK=CHUNK)  # never waits
    consumer[(CHUNKS,)](data, signals, out, CHUNK=CHUNK)  # the previous PE's chunks, as they land
    torch.cuda.synchronize()
    nvshmem.barrier_all()
    left = (me - 1) % npes
    np.testing.assert_array_equal(out.cpu().numpy(),
                                  2 * (np.arange(CHUNKS * CHUNK, dtype=np.float32) + 1000 * left))
    print(f"PE {me}: every chunk of PE {left} arrived and was processed")
    nvshmem.free(data), nvshmem.free(signals)


def compile_check(target=None):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = target or GPUTarget("cuda", 90, 32)
    return [
        triton.compile(ASTSource(fn=producer, signature={"data": "*fp32", "src": "*fp32", "signals": "*u64",
                                                         "consumer_pe": "i32", "CHUNK": "constexpr"},
                                 constexprs={"CHUNK": CHUNK}), target=target),
        triton.compile(ASTSource(fn=consumer, signature={"data": "*fp32", "signals": "*u64", "out": "*fp32",
                                                         "CHUNK": "constexpr"},
                                 constexprs={"CHUNK": CHUNK}), target=target),
    ]


def main():
    with nvshmem.init():
        run()


if __name__ == "__main__":
    main()
