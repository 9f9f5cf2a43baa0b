"""Experiment: a Triton kernel calling nvshmem_dsl.triton, launched from a function under
``torch.compile`` (PyTorch's Inductor compiles user-defined Triton kernels itself, in worker
processes by default, and decides which tensor arguments a kernel mutates by reading its TTIR).

Prints, on each PE: torch and Triton versions; which arguments Inductor's analysis says the kernel
mutates; whether the eager launch and the compiled function move the data to the next PE (a
``put_block`` into ``dst`` of PE me+1, ``dst`` poisoned before each run); the compile time.
An Inductor that ran the kernel on a copy of ``dst`` (functionalisation) would hand NVSHMEM an
address outside the symmetric heap: that shows as wrong data or a CUDA error here.

Run (2 PEs): python -m nvshmem_dsl.run -n 2 bench/experiments/torch_compile_triton.py
"""
import os
import sys
import time
import traceback

import numpy as np
import torch
import triton
import triton.language as tl

import nvshmem_dsl as nvshmem
import nvshmem_dsl.triton as nv

N = 4096


@triton.jit
def put_next(dst, src, n, pe, BLOCK: tl.constexpr):
    nv.put_block(dst, src, n, pe)


@triton.jit
def scale_then_put(dst, work, src, n, pe, BLOCK: tl.constexpr):
    # an ordinary Triton store Inductor can see, then the put
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        m = start + offs < n
        tl.store(work + start + offs, tl.load(src + start + offs, mask=m) * 2, mask=m)
    tl.debug_barrier()
    nv.put_block(dst, work, n, pe)


def launch_put(dst, src, pe):
    put_next[(1,)](dst, src, N, pe, BLOCK=256, num_warps=4)
    return dst


def launch_scale(dst, work, src, pe):
    scale_then_put[(1,)](dst, work, src, N, pe, BLOCK=256, num_warps=4)
    return dst


def mutated(kernel, kwargs):
    try:
        from torch._higher_order_ops.triton_kernel_wrap import identify_mutated_tensors
    except ImportError as e:
        return f"n/a ({e})"
    for call in (lambda: identify_mutated_tensors(kernel, kwargs),
                 lambda: identify_mutated_tensors(kernel, kwargs, {})):
        try:
            return sorted(call())
        except TypeError:
            continue
        except Exception as e:  # noqa: BLE001
            return f"error {type(e).__name__}: {str(e)[:300]}"
    return "n/a"


def check(me, npes, dst, want, what):
    torch.cuda.synchronize()
    nvshmem.barrier_all()
    got = dst.cpu().numpy()
    ok = np.array_equal(got, want)
    print(f"[{me}] {what}: {'ok' if ok else 'WRONG'}"
          + ("" if ok else f" got {got[:4]} ... want {want[:4]}"), flush=True)
    return ok


def main():
    with nvshmem.init():
        me, npes = nvshmem.my_pe(), nvshmem.n_pes()
        nxt, prev = (me + 1) % npes, (me - 1) % npes
        print(f"[{me}] torch {torch.__version__}, triton {triton.__version__}, "
              f"compile_threads {getattr(torch._inductor.config, 'compile_threads', '?')}", flush=True)
        src = nvshmem.full((N,), float(me + 1), np.float32, like="torch")
        work = nvshmem.zeros((N,), np.float32, like="torch")
        dst = nvshmem.full((N,), -1.0, np.float32, like="torch")
        print(f"[{me}] mutated by put_next: "
              f"{mutated(put_next, dict(dst=dst, src=src, n=N, pe=nxt, BLOCK=256))}; by scale_then_put: "
              f"{mutated(scale_then_put, dict(dst=dst, work=work, src=src, n=N, pe=nxt, BLOCK=256))}", flush=True)
        results = []
        cases = [("put_block eager", launch_put, (dst, src, nxt), float(prev + 1)),
                 ("put_block torch.compile", torch.compile(launch_put, fullgraph=True), (dst, src, nxt),
                  float(prev + 1)),
                 ("scale+put eager", launch_scale, (dst, work, src, nxt), 2.0 * (prev + 1)),
                 ("scale+put torch.compile", torch.compile(launch_scale, fullgraph=True), (dst, work, src, nxt),
                  2.0 * (prev + 1))]
        for what, fn, args, want in cases:
            dst.fill_(-1.0)
            torch.cuda.synchronize()
            nvshmem.barrier_all()
            t0 = time.perf_counter()
            try:
                fn(*args)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                print(f"[{me}] {what}: FAILED {type(e).__name__}: {str(e)[:1500]}", flush=True)
                traceback.print_exc(limit=6)
                results.append(False)
                sys.stdout.flush()
                os._exit(1)  # the other PE may wait in a barrier: end the job
            secs = time.perf_counter() - t0
            print(f"[{me}] {what}: {secs:.2f} s", flush=True)
            results.append(check(me, npes, dst, np.full(N, want, np.float32), what))
        for x in (src, work, dst):
            nvshmem.free(x)
        print(f"[{me}] {'all ok' if all(results) else 'SOME WRONG'}", flush=True)


if __name__ == "__main__":
    main()
