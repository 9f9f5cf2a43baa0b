"""Where the communication kernels' small-size time goes (one PE: no peers, so a call is the
launch, the block's put/signal-free path, the reduce of a few elements and quiet): per-call GPU time
behind a spin of the one-shot kernel of each DSL, of an empty Numba kernel taking the same
arguments, and of an empty Numba kernel of one scalar; and the host time of kernels.all_reduce.
Run: python -m nvshmem_dsl.run -n 1 THIS   (C++ twin alone: comm_cpp --plans one_shot:float32:2:2:4:1)"""
import time

import torch
from numba import cuda

import nvshmem_dsl as nvshmem
from nvshmem_dsl import kernels
from nvshmem_dsl.kernels import numba as KN


@cuda.jit
def empty_same_args(out, x, stage, sig, epoch, n, span, chunk, me, npes):
    pass


@cuda.jit
def empty_one_arg(a):
    pass


def gpu_us(call, iters=200):
    s = torch.cuda.current_stream()
    for _ in range(10):
        call()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(200_000_000)
    a.record(s)
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    host = (time.perf_counter() - t0) / iters * 1e6
    late = a.query()
    b.record(s)
    b.synchronize()
    return a.elapsed_time(b) * 1000 / iters, host, late


with nvshmem.init():
    x = nvshmem.full((2,), 1.0, "float32", like="torch")
    out = torch.empty_like(x)
    for dsl in ("numba", "triton", "cute"):
        try:
            g, h, late = gpu_us(lambda: kernels.all_reduce(x, out, dsl=dsl))
            print(f"{dsl} one_shot n=2, 1 PE: {g:.2f} us/call GPU, host {h:.1f} us{' (host-paced!)' if late else ''}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"{dsl}: {exc}")
    ws = kernels.default_workspace()
    stage, sig = ws.views("float32", "numba")
    xv, ov = cuda.as_cuda_array(x), cuda.as_cuda_array(out)
    st = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
    g, h, _ = gpu_us(lambda: empty_same_args[1, 512, st](ov, xv, stage, sig, 1, 2, 2, 4, 0, 1))
    print(f"numba empty kernel, same 10 args: {g:.2f} us/call GPU, host {h:.1f} us", flush=True)
    g, h, _ = gpu_us(lambda: empty_one_arg[1, 512, st](1))
    print(f"numba empty kernel, one int: {g:.2f} us/call GPU, host {h:.1f} us", flush=True)
    k = KN.kernels("float32")["one_shot"]
    g, h, _ = gpu_us(lambda: k[1, 512, st](ov, xv, stage, sig, 1, 2, 2, 4, 0, 1))
    print(f"numba one_shot launched directly (epoch fixed: no peers to wait for): {g:.2f} us/call GPU, host {h:.1f} us", flush=True)
    nvshmem.free(x)
