"""Experiment: do objects' LLVM steps run in parallel in threads?  (CPU only.)

llvmlite takes one process-wide lock around every call into LLVM, so the LLVM step of several
objects built in threads of one process (nvshmem_dsl.linker.outline.objects) runs one at a time;
only their ptxas runs in parallel.  This times outline.object_ptx (the LLVM step: the module from
the piece store, light optimisation, PTX emission) for a few objects one after the other, in a
thread each, in a process each (spawned, importing the package), and in a thread each calling the
persistent object workers (nvshmem_dsl.linker.object_workers, started beforehand: what objects() does
since 2026-11-24 21:00), on NVSHMEM's default sm_90 bitcode with the piece store built; then each
worker's resident memory (VmRSS) after those builds and a block reduction's.

    python bench/experiments/llvm_lock.py [name,name,...]
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time

OBJECTS = ("nvshmem_int_broadcast", "nvshmem_int32_sum_reduce", "nvshmemx_int_fcollect_block",
           "nvshmemx_int_alltoall_warp")


def _llvm(name: str) -> float:
    from nvshmem_dsl.linker import outline

    t0 = time.perf_counter()
    outline.object_ptx([name], 90, "sm_90", "+ptx85")
    return time.perf_counter() - t0


def _threads(names) -> float:
    t0 = time.perf_counter()
    threads = [threading.Thread(target=_llvm, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def main(argv) -> int:
    from nvshmem_dsl.linker import object_workers

    names = argv[0].split(",") if argv else list(OBJECTS)
    os.environ[object_workers.ENV] = "0"  # in this process, as objects were built before the workers
    for name in names:  # warm: the piece store's subsets parsed once, as in a running process
        _llvm(name)
    print(f"{os.cpu_count()} CPUs; objects: {', '.join(names)}", flush=True)

    t0 = time.perf_counter()
    each = [_llvm(n) for n in names]
    print(f"one after the other: {time.perf_counter() - t0:.2f} s ({', '.join(f'{s:.2f}' for s in each)})", flush=True)

    print(f"a thread each: {_threads(names):.2f} s", flush=True)

    ctx = multiprocessing.get_context("spawn")
    t0 = time.perf_counter()
    with ctx.Pool(len(names)) as pool:
        inside = pool.map(_llvm, names)
    print(f"a process each (spawned, imports and first parse included): {time.perf_counter() - t0:.2f} s "
          f"(in the processes: {', '.join(f'{s:.2f}' for s in inside)})", flush=True)

    os.environ[object_workers.ENV] = str(len(names))
    _threads(names)  # the workers started (and their first LLVM calls made), as after a kernel's first object
    print(f"a thread each, LLVM in the persistent object workers: {_threads(names):.2f} s", flush=True)
    _llvm("nvshmemx_int32_sum_reduce_block")  # the largest object
    for worker in object_workers._pool._all:
        with open(f"/proc/{worker.proc.pid}/status") as f:
            rss = next(line.split()[1] for line in f if line.startswith("VmRSS"))
        print(f"worker {worker.proc.pid}: {int(rss) >> 10} MiB resident", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
