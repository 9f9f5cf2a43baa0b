"""What the two Numba benchmarks share, whichever NVSHMEM binding their kernels call.

bench/numba_bench.py (nvshmem_dsl.numba) and bench/nv4py_bench.py (NVSHMEM4Py's
nvshmem.core.device.numba) write the kernels of bench/bench_shapes.py with their own device API;
the rest is the same for both and said here once: who moves which chunk (``chunk_of``, the
workers), the bandwidth loop around a put or get, the spin kernel, the kernels' Numba signatures
(from the shapes' parameters) and their ``cuda.jit`` options.  Nothing here imports an NVSHMEM
binding.
"""

from __future__ import annotations

from numba import cuda, int64

import _common as C
import bench_shapes as shapes

ALIGN = C.ALIGN_ELEMS


@cuda.jit(device=True, inline="always")
def chunk_of(nelems, workers, w):
    """This worker's (start, n): chunks of ceil(nelems / workers) rounded up to ALIGN elements."""
    chunk = (nelems + workers - 1) // workers
    chunk = (chunk + ALIGN - 1) // ALIGN * ALIGN
    s = w * chunk
    left = nelems - s
    n = left if left < chunk else chunk
    if n < 0:
        n = int64(0)
    return s, n


@cuda.jit(device=True, inline="always")
def block_worker(nelems):
    """(start, n) of this block (thread- and block-scope kernels: one worker a block)."""
    return chunk_of(nelems, int64(cuda.gridDim.x), int64(cuda.blockIdx.x))


@cuda.jit(device=True, inline="always")
def warp_worker(nelems):
    """(start, n) of this warp (warp-scope kernels: one worker a warp)."""
    wpb = int64(cuda.blockDim.x // 32)
    return chunk_of(nelems, int64(cuda.gridDim.x) * wpb, int64(cuda.blockIdx.x) * wpb + cuda.threadIdx.x // 32)


#: who does the work of a bandwidth shape (bench_shapes.Shape.workers)
WORKERS = {"block": block_worker, "warp": warp_worker}


def rma_bw(name, op, worker, window, quiet):
    """Kernel ``name``, bench.cu's rma_bw for NVSHMEM call ``op`` (put or get at some scope, called
    ``op(dst_window, src_window, n, peer)``) and ``worker`` (who moves which chunk): ``iters`` calls,
    each moving this worker's chunk of window ``i % nwin``, the window's offset carried from one
    iteration to the next; then ``quiet()``.  ``window(array, offset, n)``: how the arrays are cut
    (other cuts measured against nvshmem_dsl's: tests/gpu/records/2026-11-22/put-shapes.txt)."""
    def kernel(dst, src, nelems, iters, peer, nwin):
        s, n = worker(nelems)
        if n > 0:
            off = s
            end = nwin * nelems + s
            for _ in range(iters):
                op(window(dst, off, n), window(src, off, n), n, peer)
                off += nelems
                if off == end:
                    off = s
        quiet()
    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def spin(us):
    for i in range(us):
        cuda.nanosleep(1000)


#: Numba types of the parameter types of bench/bench_shapes.py
NUMBA_TYPES = {"float32[]": "float32[::1]", "uint64[]": "uint64[::1]", "int32[]": "int32[::1]",
               "int32": "int32", "int64": "int64"}


def signatures(names) -> dict:
    """name -> Numba signature of each kernel of ``names``, from its parameters in bench/bench_shapes.py
    (those the host code launches with)."""
    return {name: f"void({', '.join(NUMBA_TYPES[shapes.arg_type(a)] for a in shapes.SHAPES[name].args)})"
            for name in names}


#: The one-thread latency kernels declare their launch shape, as bench.cu's do (ONE_THREAD) and
#: CuTe's static launches do (.reqntid 1): with it ptxas does not aggregate a warp's atomics.
ONE_THREAD = shapes.ONE_THREAD


def jit_options(name: str) -> dict:
    """The ``cuda.jit`` options of kernel ``name``.  The bandwidth and collective kernels declare
    their block size, as Triton's (``num_warps``) and CuTe's (static launches) do: with NVSHMEM 3.8 a
    bandwidth kernel compiled for any block size takes 66-72 registers, more than a block of 1024
    threads leaves a thread (64; with the declaration 64, no spills:
    bench/test_bench_compile.py::test_numba_bandwidth_kernel_fits_its_block), and the objects of the thread- and warp-scope
    collectives may use more registers (nvshmem_dsl.linker.outline.register_cap)."""
    if name in ONE_THREAD:
        return {"launch_bounds": (1,)}
    s = shapes.SHAPES.get(name)
    if s is not None and (s.bench == "coll" or s.bench.endswith("_bw")):
        return {"launch_bounds": (s.block,)}
    return {}


def jit_kernels(kernels: dict) -> dict:
    """Lazily compiled dispatchers of ``kernels`` (name -> Python function; compiled at the first
    launch, i.e. in the warm-up)."""
    return {name: cuda.jit(fn, **jit_options(name)) for name, fn in kernels.items()}


def plain_kernel(flag, v):
    """``empty_kernel`` without NVSHMEM (``launch_overhead_plain``: Numba's own launch, the yardstick of
    issue 41's "a launch with NVSHMEM <= 1.1x the same DSL's plain launch"); no C++ twin."""
    if v < 0:
        flag[0] = 0


def launch_rows(out: C.Output, host: C.Host, p: C.Params, K: dict, arrays: dict, bufs: dict, stream, launch) -> None:
    """``launch_overhead_cupy_args``: ``empty_kernel`` launched with a cupy array straight in (Numba converts
    and stream-synchronises it at every launch); ``launch_overhead_plain``: :func:`plain_kernel` launched as
    ``launch_overhead``'s kernel is, behind the same spin."""
    if not p.enabled("launch"):
        return
    kern, flag = K["empty_kernel"], arrays["flag"]
    vals = C.launch_overhead(host, lambda us: None, lambda: kern[1, 1, stream](flag, 1), p.launches, p.reps)
    out.emit("launch_overhead_cupy_args", "", 0, vals, "us", False, p.launches)
    plain, flag = cuda.jit(plain_kernel), bufs["flag"]
    run = lambda: plain[1, 1, stream](flag, 1)  # noqa: E731
    run()  # compile
    vals = C.launch_overhead(host, lambda us: launch(shapes.SHAPES["spin"], (us,)), run, p.launches, p.reps)
    out.emit("launch_overhead_plain", "", 0, vals, "us", False, p.launches)


def main(impl: str, layers, api_name: str, kernels: dict, argv=None, host_class: type = C.Host) -> int:
    """A Numba benchmark (``impl``: numba or nv4py) of ``kernels`` (name -> Python function, calling the device
    API named ``api_name``), its host ``host_class`` initialised after importing ``layers``: every row of
    bench_shapes.run_rows, then :func:`launch_rows`."""
    args, p, out, host, arrays = shapes.start(impl, list(layers), argv, host_class)
    import numba_cuda

    shapes.meta(out, host, p, api=api_name, numba_cuda=getattr(numba_cuda, "__version__", "?"))

    K = jit_kernels(kernels)
    stream = cuda.legacy_default_stream()
    bufs = {name: cuda.as_cuda_array(x) for name, x in arrays.items()}

    def launch(s, args):
        K[s.kernel][s.grid, s.block, stream](*args)

    shapes.run_rows(out, host, p, arrays, bufs, launch, list(K),
                    extra=lambda: launch_rows(out, host, p, K, arrays, bufs, stream, launch))
    del bufs
    host.finalize()
    return 0
