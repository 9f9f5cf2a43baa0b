"""The Python side of the host calls of issue 41 item 4, on a CPU (no GPU, no driver): the state
faked (2 PEs), the C calls answered by the tests' interceptor, the CUDA copies skipped, and a
minimal stand-in for cupy, so that what is timed is nvshmem_dsl's own work per call (plus the real
cffi call of _lib.call, which needs no GPU). Prints one line per row: the best of several repeats.
Run: python bench/experiments/host_python_cpu.py  (NPROC=0 as a device step: a plain python3).
Compare trees by running it with each on the path (its figures are in the commits of wt-hostpath)."""
import itertools
import sys
import time
import types

import numpy

import nvshmem_dsl as nv
import nvshmem_dsl.core as core
from nvshmem_dsl.host import _cuda, _lib, _state


def _fake_cupy() -> None:
    """Just what nvshmem_dsl.array(like="cupy") and describe() touch, as cheap as can be."""
    class Memory:
        def __init__(self, ptr, size, owner, device_id):
            self.ptr = ptr

    class Pointer:
        def __init__(self, mem, offset):
            self.ptr = mem.ptr + offset

    class ndarray:
        def __init__(self, shape, dtype=None, memptr=None, strides=None):
            self.shape, self.dtype, self.data = shape, numpy.dtype(dtype), memptr

        @property
        def __cuda_array_interface__(self):
            return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                    "strides": None, "version": 3, "stream": 1}

    ndarray.__module__ = "cupy"
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(UnownedMemory=Memory, MemoryPointer=Pointer)
    cupy.ndarray = ndarray
    sys.modules.setdefault("cupy", cupy)


def best(f, n: int, repeats: int = 7) -> float:
    """Seconds a call, the best of ``repeats`` loops of ``n`` calls."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        out.append((time.perf_counter() - t0) / n)
    return min(out)


def main() -> None:
    _fake_cupy()
    addresses = itertools.count(0x7D0000000000, 1 << 21)
    answers = {"nvshmem_team_my_pe": 0, "nvshmem_team_n_pes": 2}

    def intercept(symbol, args):
        if symbol in ("nvshmem_malloc", "nvshmem_calloc"):
            return next(addresses)
        return answers.get(symbol, 0)

    f, lib = _lib.ffi(), _lib.lib()
    a, b = f.new("int *"), f.new("int *")
    ai, bi = (int(f.cast("uintptr_t", p)) for p in (a, b))
    rows = [("_lib.call(nvshmem_info_get_version, 2 pointers as ints), real cffi", "ns",
             lambda: _lib.call("nvshmem_info_get_version", ai, bi), 100000),
            ("_lib.call(nvshmemx_init_status), real cffi", "ns", lambda: _lib.call("nvshmemx_init_status"), 100000),
            ("the raw cffi call nvshmemx_init_status", "ns", lib.nvshmemx_init_status, 100000)]
    for name, unit, fn, n in rows:
        print(f"{name:62s} {best(fn, n) * 1e9:8.0f} {unit}")

    _lib._interceptor = intercept
    _cuda.memcpy_htod = lambda dst, data, stream=None: None
    _cuda.memcpy_dtoh = lambda src, nbytes, stream=None: bytes(nbytes)
    _cuda.runtime_stream = lambda: 0x5EAB
    stream = types.SimpleNamespace(ptr=0x1234)  # a cupy-like stream
    world, node = nv.Team.TEAM_WORLD, nv.Team.TEAM_NODE
    with _state.fake(n_pes=2, my_pe=0) as state:
        state.device_id = 0  # as init sets it
        x, y = nv.array(1024, "float32", like="cupy"), nv.array(1024, "float32", like="cupy")
        mib = (1 << 20) // 4

        def alloc_free(**kw):
            nv.free(nv.array(mib, "float32", like="cupy", **kw))

        def core_alloc_free():
            core.free_array(core.array((mib,), dtype="float32"))

        rows = [("nv.my_pe()", "ns", nv.my_pe, 1000000), ("core.my_pe()", "ns", core.my_pe, 1000000),
                ("nv.team_my_pe(TEAM_WORLD)", "ns", lambda: nv.team_my_pe(world), 200000),
                ("nv.team_n_pes(TEAM_NODE)", "ns", lambda: nv.team_n_pes(node), 200000),
                ("nv.array(1 MiB, like='cupy') + free", "us", alloc_free, 2000),
                ("nv.array(1 MiB, like='cupy', check=False) + free", "us", lambda: alloc_free(check=False), 2000),
                ("core.array + core.free_array (1 MiB)", "us", core_alloc_free, 2000),
                ("nv.put(dst, src, 1, stream=s)", "us", lambda: nv.put(y, x, 1, stream=stream), 5000),
                ("nv.reduce(TEAM_WORLD, dst, src, 'sum', stream=s)", "us",
                 lambda: nv.reduce(world, y, x, "sum", stream=stream), 5000),
                ("nv.barrier_all(stream=s)", "us", lambda: nv.barrier_all(stream=stream), 20000)]
        for name, unit, fn, n in rows:
            print(f"{name:62s} {best(fn, n) * (1e9 if unit == 'ns' else 1e6):8.2f} {unit}")
        nv.free(x)
        nv.free(y)


if __name__ == "__main__":
    main()
