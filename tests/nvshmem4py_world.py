"""A fake world for running NVSHMEM4Py-style programs on a CPU (tests/test_core.py).

* the NVSHMEM host library's calls are intercepted (``_lib._interceptor``, as in
  tests/test_host_cpu.py) and recorded; allocations get made-up addresses backed by host memory
  (:class:`FakeMemory`), so that ``arr[:] = 1; print(arr)`` shows real values;
* ``cupy`` is a small fake (arrays over that memory) and ``torch`` too, enough for the arrays and
  tensors nvshmem_dsl.core hands out;
* the CUDA driver calls of the runtime (device count, set device, copies, synchronize) and the
  ``cuda.core`` ``Device`` / ``Stream`` / ``VirtualMemoryResource`` are fakes;
* a Numba kernel launch compiles the kernel to PTX for the arguments' types (recorded) instead
  of running it.

This PE is PE ``my_pe`` of ``n_pes``; the other PEs do not run, so nothing a remote PE would write
arrives.  What is checked is which NVSHMEM calls the program makes, with which arguments.
"""

from __future__ import annotations

import itertools
import sys
import types
from typing import Any

import numpy as np

HEAP = 0x7D0000000000  # fake symmetric heap
LOCAL = 0x7C0000000000  # fake local device memory (cupy.ones, VMM buffers)
REGISTERED = 0x7B0000000000  # where registered external memory is mapped
PEER_SHIFT = 0x10000000000  # PE p's copy of a heap address: address + (p + 1) * PEER_SHIFT
MC_SHIFT = 0x30000000000
BACKED_LIMIT = 1 << 24  # blocks larger than this are not backed by host memory


class FakeMemory:
    def __init__(self) -> None:
        self.blocks: dict[int, bytearray | None] = {}
        self.sizes: dict[int, int] = {}

    def add(self, base: int, nbytes: int) -> int:
        self.blocks[base] = bytearray(nbytes) if nbytes <= BACKED_LIMIT else None
        self.sizes[base] = nbytes
        return base

    def find(self, address: int, nbytes: int):
        for base, size in self.sizes.items():
            if base <= address and address + nbytes <= base + size:
                return self.blocks[base], address - base
        raise KeyError(f"fake memory: no block holds 0x{address:x}..+{nbytes}")

    def view(self, address: int, shape, dtype, strides=None) -> np.ndarray:
        dtype = np.dtype(dtype)
        n = int(np.prod(shape)) * dtype.itemsize if shape else dtype.itemsize
        buf, offset = self.find(address, max(n, 1))
        if buf is None:
            raise KeyError(f"fake memory: the block at 0x{address:x} is not backed")
        return np.ndarray(shape, dtype, buffer=buf, offset=offset, strides=strides)

    def read(self, address: int, nbytes: int) -> bytes:
        buf, offset = self.find(address, nbytes)
        return bytes(buf[offset:offset + nbytes]) if buf is not None else bytes(nbytes)

    def write(self, address: int, data: bytes) -> None:
        buf, offset = self.find(address, len(data))
        if buf is not None:
            buf[offset:offset + len(data)] = data


# --------------------------------------------------------------------------- cupy


def make_cupy(world: "World") -> types.ModuleType:
    mem = world.memory
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    cupy.cuda = cuda

    class UnownedMemory:
        def __init__(self, ptr, size, owner, device_id=0):
            self.ptr, self.size, self.owner, self.device_id = int(ptr), int(size), owner, device_id

    class MemoryPointer:
        def __init__(self, mem_, offset):
            self.mem, self.ptr = mem_, mem_.ptr + offset

    class Device:
        def __init__(self, id_):
            self.id = id_

    class ndarray:
        def __init__(self, shape, dtype=float, memptr=None, strides=None):
            self.shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
            self.dtype = np.dtype(dtype)
            if memptr is None:
                nbytes = max(1, int(np.prod(self.shape)) * self.dtype.itemsize)
                memptr = MemoryPointer(UnownedMemory(world.new_local(nbytes), nbytes, None), 0)
            self.data = memptr
            self.strides = strides
            self.device = Device(getattr(memptr.mem, "device_id", 0))

        size = property(lambda self: int(np.prod(self.shape)))
        nbytes = property(lambda self: self.size * self.dtype.itemsize)
        ndim = property(lambda self: len(self.shape))

        @property
        def __cuda_array_interface__(self):
            return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                    "strides": self.strides, "version": 3}

        def _np(self) -> np.ndarray:
            return mem.view(self.data.ptr, self.shape, self.dtype, self.strides)

        def get(self):
            return self._np().copy()

        def __setitem__(self, key, value):
            self._np()[key] = value._np() if isinstance(value, ndarray) else value

        def __getitem__(self, key):
            return self._np()[key]

        def fill(self, value):
            self._np()[...] = value

        def view(self, dtype):
            dtype = np.dtype(dtype)
            shape = self.shape[:-1] + (self.shape[-1] * self.dtype.itemsize // dtype.itemsize,)
            return ndarray(shape, dtype, self.data)

        def reshape(self, *shape, order="C"):
            shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
            return ndarray(tuple(shape), self.dtype, self.data)

        @property
        def T(self):
            strides = self.strides or tuple(self._np().strides)
            return ndarray(tuple(reversed(self.shape)), self.dtype, self.data, tuple(reversed(strides)))

        def __mul__(self, other):
            out = ndarray(self.shape, self.dtype)
            out._np()[...] = self._np() * other
            return out

        def __eq__(self, other):
            return self._np() == (other._np() if isinstance(other, ndarray) else other)

        def __repr__(self):
            return repr(self._np()).replace("array", "array", 1)

        def __str__(self):
            return str(self._np())

        def __dlpack__(self, stream=None, **kwargs):
            from nvshmem_dsl.core.interop._dlpack import DLPackView

            strides = None if self.strides is None else tuple(s // self.dtype.itemsize for s in self.strides)
            return DLPackView(self.data.ptr, self.shape, strides, self.dtype.name, self.device.id, self).__dlpack__()

        def __dlpack_device__(self):
            return (2, self.device.id)

    for cls in (ndarray, UnownedMemory, MemoryPointer, Device):
        cls.__module__ = "cupy"
    cuda.UnownedMemory, cuda.MemoryPointer, cuda.Device = UnownedMemory, MemoryPointer, Device
    cupy.ndarray = ndarray
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "bool_"):
        setattr(cupy, name, getattr(np, name))

    def ones(shape, dtype=float):
        out = ndarray(shape if isinstance(shape, tuple) else (shape,), dtype)
        out.fill(1)
        return out

    def from_dlpack(obj, copy=None):
        if hasattr(obj, "handle") and hasattr(obj, "size"):  # a cuda.core Buffer: 1-D int8
            n = int(obj.size)
            return ndarray((n,), np.int8, MemoryPointer(UnownedMemory(int(obj.handle), n, obj), 0))
        from nvshmem_dsl.host import _arrays

        info = _arrays.describe(obj)
        return ndarray(info.shape, info.dtype, MemoryPointer(UnownedMemory(info.ptr, info.nbytes, obj), 0))

    cupy.ones, cupy.from_dlpack = ones, from_dlpack
    cuda.runtime = types.SimpleNamespace(deviceSynchronize=lambda: None)
    return cupy


# --------------------------------------------------------------------------- torch


def make_torch(world: "World") -> types.ModuleType:
    torch = types.ModuleType("torch")

    class dtype:
        def __init__(self, name, np_name):
            self.name, self.np = name, np.dtype(np_name)

        def __str__(self):
            return f"torch.{self.name}"

        __repr__ = __str__

    dtype.__module__ = "torch"
    dtypes = {n: dtype(n, n) for n in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8")}
    dtypes["bool"] = dtype("bool", "bool")
    for n, d in dtypes.items():
        setattr(torch, n, d)

    def _dtype(x):
        if isinstance(x, dtype):
            return x
        return dtypes[np.dtype(x).name]

    class Device:
        def __init__(self, index):
            self.type, self.index = "cuda", index

        def __str__(self):
            return f"cuda:{self.index}"

    class Tensor:
        def __init__(self, ptr, shape, dtype_, strides=None, device=0, owner=None):
            self.ptr, self.shape, self.dtype = int(ptr), tuple(shape), dtype_
            item = dtype_.np.itemsize
            self._strides = strides or tuple(int(s) // item for s in np.empty(self.shape, dtype_.np).strides)
            self.device, self.owner = Device(device), owner

        def data_ptr(self):
            return self.ptr

        def element_size(self):
            return self.dtype.np.itemsize

        def stride(self):
            return self._strides

        def numel(self):
            return int(np.prod(self.shape))

        def dim(self):
            return len(self.shape)

        def permute(self, *dims):
            return Tensor(self.ptr, [self.shape[d] for d in dims], self.dtype, [self._strides[d] for d in dims],
                          self.device.index, self)

        def _np(self):
            item = self.dtype.np.itemsize
            return world.memory.view(self.ptr, self.shape, self.dtype.np, tuple(s * item for s in self._strides))

        def fill_(self, value):
            self._np()[...] = value
            return self

    Tensor.__module__ = "torch"
    torch.Tensor = Tensor

    def as_tensor(obj):
        cai = obj.__cuda_array_interface__
        np_dtype = np.dtype(cai["typestr"])
        item = np_dtype.itemsize
        strides = None if cai.get("strides") is None else tuple(s // item for s in cai["strides"])
        return Tensor(cai["data"][0], cai["shape"], _dtype(np_dtype), strides, world.device_of(cai["data"][0]), obj)

    def from_dlpack(obj):
        from nvshmem_dsl.host import _arrays

        device = obj.__dlpack_device__()[1]
        info = _arrays.describe(obj)
        strides = None if info.strides is None else tuple(s // info.itemsize for s in info.strides)
        return Tensor(info.ptr, info.shape, _dtype(info.dtype), strides, device, info.obj)

    torch.as_tensor = as_tensor
    torch.get_default_dtype = lambda: dtypes["float32"]
    torch.utils = types.SimpleNamespace(dlpack=types.SimpleNamespace(from_dlpack=from_dlpack))
    return torch


# --------------------------------------------------------------------------- cuda.core


class FakeStream:
    _handles = itertools.count(0x5000)

    def __init__(self, device=None) -> None:
        self.handle = next(self._handles)
        self.device = device
        self.synced = 0

    def __cuda_stream__(self):
        return (0, self.handle)

    def sync(self) -> None:
        self.synced += 1


class FakeDevice:
    def __init__(self, device_id: int | None = None) -> None:
        self.device_id = 0 if device_id is None else int(device_id)

    def set_current(self) -> None:
        pass

    def create_stream(self, options=None) -> FakeStream:
        return FakeStream(self)

    def sync(self) -> None:
        pass


# --------------------------------------------------------------------------- the world


class World:
    def __init__(self, monkeypatch, *, my_pe: int = 0, n_pes: int = 2, multicast: bool = False) -> None:
        from nvshmem_dsl.host import _bootstrap, _cuda, _lib

        self.my_pe, self.n_pes, self.multicast = my_pe, n_pes, multicast
        self.memory = FakeMemory()
        self.calls: list[tuple[str, tuple]] = []
        self.launches: list[tuple[str, str]] = []  # (kernel name, PTX)
        self.bootstraps: list[dict] = []
        self._heap = itertools.count(HEAP, 0x100000)
        self._local = itertools.count(LOCAL, 1 << 30)
        self._registered = itertools.count(REGISTERED, 1 << 30)
        self._teams = itertools.count(7)
        self.responses: dict[str, Any] = {}

        _lib.lib()
        monkeypatch.setattr(_lib, "_interceptor", self._intercept)
        monkeypatch.setattr(_cuda, "device_count", lambda: 2)
        monkeypatch.setattr(_cuda, "set_device", lambda i: FakeDevice(i))
        monkeypatch.setattr(_cuda, "synchronize", lambda: None)
        monkeypatch.setattr(_cuda, "stream_synchronize", lambda handle: None)
        monkeypatch.setattr(_cuda, "memcpy_htod", lambda ptr, data, stream=None: self.memory.write(ptr, bytes(data)))
        monkeypatch.setattr(_cuda, "memcpy_dtoh", lambda ptr, n, stream=None: self.memory.read(ptr, n))
        monkeypatch.setattr(_cuda, "runtime_stream", lambda: 0x5EAB)
        monkeypatch.setattr(_cuda, "current_device_id", lambda: 0)
        monkeypatch.setattr(_cuda, "compute_capability", lambda dev: (9, 0))
        monkeypatch.setattr(_cuda, "mps_enabled", lambda dev: False)
        real_bootstrap = _bootstrap.bootstrap

        def bootstrap(make_uid, **kwargs):
            self.bootstraps.append(kwargs)
            if kwargs.get("comm") is not None or kwargs.get("mode") == "launcher":
                return _bootstrap.Bootstrap(kwargs.get("mode") or "mpi", my_pe, n_pes, my_pe, bytes(128),
                                            kwargs.get("comm"))
            return real_bootstrap(make_uid, **kwargs)

        monkeypatch.setattr(_bootstrap, "bootstrap", bootstrap)
        from nvshmem_dsl.host import _init

        monkeypatch.setattr(_init, "_prefetch_device_code", lambda device_id: None)
        self.cupy = make_cupy(self)
        self.torch = make_torch(self)
        monkeypatch.setitem(sys.modules, "cupy", self.cupy)
        monkeypatch.setitem(sys.modules, "torch", self.torch)
        import cuda.core

        monkeypatch.setattr(cuda.core, "Device", FakeDevice)
        monkeypatch.setattr(cuda.core.system, "get_num_devices", lambda: 2, raising=False)
        monkeypatch.setattr(cuda.core, "VirtualMemoryResource", self._vmm_class())

    # ------------------------------------------------------------------ driver

    def new_local(self, nbytes: int) -> int:
        return self.memory.add(next(self._local), nbytes)

    def device_of(self, address: int) -> int:
        for pe in range(self.n_pes):
            lo = HEAP + (pe + 1) * PEER_SHIFT
            if pe != self.my_pe and lo <= address < lo + PEER_SHIFT:
                return pe
        return self.my_pe

    def _alloc(self, nbytes: int) -> int:
        base = self.memory.add(next(self._heap), nbytes)
        for pe in range(self.n_pes):  # the peers' copies, reachable through nvshmem_ptr
            if pe != self.my_pe:
                self.memory.add(base + (pe + 1) * PEER_SHIFT, nbytes)
        return base

    def _intercept(self, symbol: str, args: tuple) -> Any:
        self.calls.append((symbol, args))
        if symbol in self.responses:
            value = self.responses[symbol]
            return value(args) if callable(value) else value
        if symbol in ("nvshmem_my_pe",):
            return self.my_pe
        if symbol == "nvshmem_n_pes":
            return self.n_pes
        if symbol == "nvshmem_team_n_pes":
            return self.n_pes if args[0] in (0, 1, 2) else 1
        if symbol == "nvshmem_team_my_pe":
            return self.my_pe
        if symbol == "nvshmemx_init_status":
            return 2  # STATUS_IS_INITIALIZED
        if symbol == "nvshmem_malloc":
            return self._alloc(args[0])
        if symbol == "nvshmem_calloc":
            return self._alloc(args[0] * args[1])
        if symbol == "nvshmem_align":
            return self._alloc(args[1])
        if symbol == "nvshmem_ptr":
            address, pe = args
            return address if pe == self.my_pe else address + (pe + 1) * PEER_SHIFT
        if symbol == "nvshmemx_mc_ptr":
            return args[1] + MC_SHIFT if self.multicast else 0
        if symbol == "nvshmemx_buffer_register_symmetric":
            return self.memory.add(next(self._registered), args[1])
        if symbol == "nvshmem_team_split_strided":
            parent, start, stride, size, _cfg, _mask, out = args
            member = (self.my_pe - start) % stride == 0 and 0 <= (self.my_pe - start) // stride < size
            out[0] = next(self._teams) if member else -1
            return 0
        if symbol == "nvshmem_team_split_2d":
            args[4][0] = next(self._teams)
            args[7][0] = next(self._teams)
            return 0
        if symbol == "nvshmemx_team_init":
            args[0][0] = next(self._teams)
            return 0
        if symbol == "nvshmem_team_translate_pe":
            return args[1]
        if symbol == "nvshmemx_vendor_get_version_info":
            args[0][0], args[1][0], args[2][0] = 3, 8, 0
            return None
        if symbol == "nvshmem_info_get_version":
            args[0][0], args[1][0] = 1, 5
            return None
        if symbol == "nvshmemx_team_get_uniqueid":
            args[0][0] = 0xABCDEF
            return 0
        return 0

    def symbols(self) -> list[str]:
        return [c[0] for c in self.calls]

    def calls_of(self, symbol_part: str) -> list[tuple[str, tuple]]:
        return [c for c in self.calls if symbol_part in c[0]]

    # ------------------------------------------------------------------ cuda.core, Numba

    def _vmm_class(self):
        world = self

        class VirtualMemoryResource:
            def __init__(self, device, config=None):
                self.device = device

            def allocate(self, size, stream=None):
                return types.SimpleNamespace(handle=world.new_local(size), size=size)

        return VirtualMemoryResource

    def compile_launches(self, monkeypatch) -> None:
        """Numba kernel launches compile the kernel to PTX (recorded) instead of running it."""
        from numba import cuda
        from numba.cuda import dispatcher, types as nbtypes

        world = self

        def typeof(x):
            if isinstance(x, (bool, np.bool_)):
                return nbtypes.boolean
            if isinstance(x, (int, np.integer)):
                return nbtypes.int64
            if isinstance(x, float):
                return nbtypes.float64
            info = __import__("nvshmem_dsl.host._arrays", fromlist=["describe"]).describe(x)
            return nbtypes.Array(getattr(nbtypes, info.dtype), len(info.shape), "C" if info.contiguous else "A")

        class Launch:
            def __init__(self, kernel, config):
                self.kernel, self.config = kernel, config

            def __call__(self, *args):
                sig = tuple(typeof(a) for a in args)
                ptx, _ = cuda.compile_ptx(self.kernel.py_func, sig, cc=(9, 0))
                world.launches.append((self.kernel.py_func.__name__, ptx))

        monkeypatch.setattr(dispatcher.CUDADispatcher, "__getitem__", lambda self, config: Launch(self, config))
        monkeypatch.setattr(cuda, "external_stream", lambda ptr: int(ptr))


def compile_cute_launches(world: World, monkeypatch) -> None:
    """CuTe kernels compile (to PTX, recorded at the first launch) for ``sm_90a`` and do not run; the
    first launch "loads" a made-up CUDA library and runs the NVSHMEM init hook on it as a real
    load does."""
    import nvshmem_dsl.cute as nv_cute
    from nvshmem_dsl.cute import _compile

    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    real_compile = _compile.compile
    libraries = itertools.count(0x4242000)

    def compile_keeping_ptx(fn, *args, **kwargs):
        kwargs.setdefault("keep_ptx", True)
        return real_compile(fn, *args, **kwargs)

    def call(self, *args, **kwargs):
        if not getattr(self, "_fake_libraries", None):
            self._fake_libraries = [next(libraries)]
            if _compile._init_hook is not None:
                _compile._init_hook(self._fake_libraries[0])
        world.launches.append((getattr(self._fn, "function_name", "cute"), self._fn.__ptx__))

    monkeypatch.setattr(nv_cute, "compile", compile_keeping_ptx)
    monkeypatch.setattr(_compile, "compile", compile_keeping_ptx)
    monkeypatch.setattr(_compile.CompiledKernel, "__call__", call)
    monkeypatch.setattr(_compile.CompiledKernel, "libraries", property(lambda self: getattr(self, "_fake_libraries", [])))


def close(world: World) -> None:
    """Leave no initialised runtime behind (while the C calls are still intercepted)."""
    from nvshmem_dsl.host import _init, _state, memory
    from nvshmem_dsl.core import _tracking
    from nvshmem_dsl.core._types import _PREDEFINED_TEAMS, Teams

    _state.STATE.failed_init = None
    if _state.STATE.initialized:
        _init._finalize_locked(report=False)
    memory.REGISTRY.clear("test over")
    _tracking.clear()
    for name in list(Teams.keys()):
        if name not in _PREDEFINED_TEAMS:
            Teams.remove(name)
