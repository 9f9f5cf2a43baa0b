"""NVSHMEM4Py (NVIDIA's ``nvshmem`` package: nvshmem.core, nvshmem.core.device.numba) as the
benchmarks use it: its start-up on our NVSHMEM, its host side, and a compile without a GPU.

Start-up (:func:`use_our_nvshmem`, called before anything imports ``nvshmem``): NVSHMEM4Py finds
NVSHMEM's host library and headers through ``cuda.pathfinder``, which looks in site-packages
only (not ``NVSHMEM_HOME``); on the GPU host that is the image's nvidia-nvshmem-cu13 3.4.5,
whose headers NVRTC cannot compile (they include ``infiniband/mlx5dv.h`` unguarded) while
nvshmem_dsl runs on the carried 3.8 (``NVSHMEM_HOME=/tmp/nv38``).  So that both packages run on
the same NVSHMEM, the installation nvshmem_dsl would use (``nvshmem_dsl._libs.installation()``)
is handed to NVSHMEM4Py:

* its ``libnvshmem_host.so.3`` is loaded first, ``RTLD_GLOBAL``: ``cuda.pathfinder``'s
  ``load_nvidia_dynamic_lib("nvshmem_host")`` returns a library already loaded, and NVSHMEM4Py's
  bindings ``dlopen("libnvshmem_host.so.3")``, which gives the one loaded;
* ``cuda.pathfinder.find_nvidia_header_directory("nvshmem")`` answers its ``include`` directory:
  NVSHMEM4Py's Numba binding reads it once, at import (``from cuda.pathfinder import ...``), for
  the NVRTC include path of its C++ shim, and its device-library lookup reads it too.

Host (:class:`Host`): _common.Host's methods (what bench_shapes.run_rows and
_common.host_benchmarks call) through nvshmem.core: init by unique id (the id made by PE 0's
``get_unique_id()`` and handed over by nvshmem_dsl's launcher store, as nvshmem_dsl's own init
gets its id: nvshmem_dsl.host._bootstrap, which calls no NVSHMEM), ``array`` / ``free_array``,
``barrier_all`` on the stream, on-stream put / reduce / barrier_all.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any, Callable

import _common as C

#: What use_our_nvshmem handed to NVSHMEM4Py (reported in the benchmark's meta line).
USED: dict = {}


def use_our_nvshmem() -> dict:
    """Make NVSHMEM4Py load nvshmem_dsl's NVSHMEM (host library and headers); idempotent. Call it
    before anything imports ``nvshmem``.  Returns ``{"nvshmem_root", "nvshmem_version", ...}``."""
    if USED:
        return USED
    import sys

    if any(m == "nvshmem" or m.startswith("nvshmem.") for m in sys.modules):
        raise RuntimeError("_nv4py.use_our_nvshmem() must run before nvshmem (NVSHMEM4Py) is imported")
    from nvshmem_dsl._libs import installation

    inst = installation()
    if inst.include_dir is None or not (inst.include_dir / "nvshmem.h").is_file():
        raise RuntimeError(f"NVSHMEM at {inst.root} ({inst.source}) has no headers: NVSHMEM4Py's Numba binding "
                           "compiles them with NVRTC")
    ctypes.CDLL(str(inst.host_library), mode=ctypes.RTLD_GLOBAL)

    import cuda.pathfinder as pathfinder

    found = pathfinder.find_nvidia_header_directory

    def find_nvidia_header_directory(libname: str):
        return str(inst.include_dir) if libname == "nvshmem" else found(libname)

    pathfinder.find_nvidia_header_directory = find_nvidia_header_directory
    USED.update(nvshmem_root=str(inst.root), nvshmem_source=inst.source,
                nvshmem_version=inst.version_string or "?", nvshmem_host=str(inst.host_library))
    return USED


# ------------------------------------------------------------------ compile without a GPU


def no_gpu_device(cc: tuple[int, int]) -> None:
    """Let numba-cuda compile NVSHMEM4Py's kernels for ``cc`` on a machine without a driver (CPU
    checks only): its device functions are ``@overload`` implementations, which numba-cuda compiles
    for the current device's compute capability, and a kernel's code library asks the current
    context for its own; both are answered ``cc``."""
    import types

    import numba.cuda.api as api
    import numba.cuda.cudadrv.devices as devices
    import numba.cuda.dispatcher as dispatcher

    device = types.SimpleNamespace(compute_capability=tuple(cc), id=0)
    context = types.SimpleNamespace(device=device)
    devices.get_context = lambda devnum=None: context
    api.current_context = devices.get_context
    dispatcher.get_current_device = lambda: device


def compile_cubin(fn, sig: str, cc: tuple[int, int], **jit_options: Any) -> bytes:
    """The cubin of kernel ``fn`` for ``sig`` and ``cc``, compiled as a launch compiles it with
    numba-cuda's default link-time optimisation (typing, NVVM to LTO-IR, NVSHMEM4Py's C++ shim by
    NVRTC to LTO-IR, nvJitLink); needs no GPU after :func:`no_gpu_device`."""
    from numba.cuda.core import sigutils
    from numba.cuda.dispatcher import _Kernel

    args, _ = sigutils.normalize_signature(sig)
    kernel = _Kernel(fn, args, lto=True, opt=True, **jit_options)
    code = kernel._codelibrary.get_cubin(cc=(*cc, "a" if tuple(cc) >= (9, 0) else ""))
    return getattr(code, "code", code)


# ------------------------------------------------------------------ host side


def init_by_uid(core, device_count: int):
    """NVSHMEM4Py's ``core.init`` by unique id: this PE's rank, size and GPU (of ``device_count``), and
    PE 0's id, from nvshmem_dsl's bootstrap (its launcher's store, torchrun or MPI: no NVSHMEM call);
    the GPU made current first. Returns its cuda.core Device."""
    import numpy as np
    from cuda.core import Device

    from nvshmem_dsl.host import _bootstrap

    boot = _bootstrap.bootstrap(lambda: core.get_unique_id()._data.view(np.uint8).tobytes())
    uid = core.get_unique_id(empty=True)
    uid._data.view(np.uint8)[:] = np.frombuffer(boot.uid, np.uint8)
    device = Device(boot.device(device_count))
    device.set_current()
    core.init(device=device, uid=uid, rank=boot.rank, nranks=boot.nranks, initializer_method="uid")
    return device


class Host(C.Host):
    """_common.Host's methods through NVSHMEM4Py's nvshmem.core (cupy arrays)."""

    def __init__(self) -> None:  # noqa: D107 - not C.Host's: no nvshmem_dsl
        import cupy

        use_our_nvshmem()
        import nvshmem.core as core

        self.core = core
        self.nvshmem = core
        self.cupy = cupy
        self._live: list[Any] = []
        self.init_s = 0.0
        self.device = None

    def init(self, layers) -> None:
        """Import ``layers``, then :func:`init_by_uid` (its time: ``init_s``)."""
        import cuda.core  # noqa: F401 - init_by_uid's imports, before the clock
        import numpy  # noqa: F401

        from nvshmem_dsl.host import _bootstrap, _exit  # noqa: F401

        for mod in layers:
            __import__(mod)
        t0 = time.perf_counter()
        self.device = init_by_uid(self.core, self.cupy.cuda.runtime.getDeviceCount())
        self.cupy.cuda.Device(self.device.device_id).use()
        self.init_s = time.perf_counter() - t0
        _exit.tell_launcher("initialized")

    @property
    def stream(self):
        """The legacy default stream, as NVSHMEM4Py takes streams (a cuda.core Stream)."""
        return self.device.default_stream

    def my_pe(self) -> int:
        return int(self.core.my_pe())

    def n_pes(self) -> int:
        return int(self.core.n_pes())

    def array(self, n: int, dtype: str, *, zero: bool = True, keep: bool = True):
        x = self.core.array((n,), dtype)
        if zero:
            x.fill(0)
        if keep:
            self._live.append(x)
        return x

    def free(self, x) -> None:
        self.core.free_array(x)

    def barrier_all(self) -> None:
        """NVSHMEM4Py has no blocking host barrier: barrier_all on the stream, then wait for it."""
        self.core.barrier_all(self.stream)
        self.stream.sync()

    def api_my_pe(self) -> Callable[[], int]:
        return self.core.my_pe

    def allocators(self) -> tuple:
        return (("host_alloc_free", lambda n: self.core.array((n,), "float32")),)

    def on_stream_calls(self, peer: int) -> tuple:
        core, stream = self.core, self.stream
        dst, src = self.array(2, "float32"), self.array(2, "float32")
        return (("put", 8, lambda: core.put(dst, src, peer, stream)),
                ("reduce", 8, lambda: core.reduce(core.Teams.TEAM_WORLD, dst, src, "sum", stream)),
                ("barrier_all", 0, lambda: core.barrier_all(stream)))

    def versions(self) -> dict:
        v = self.core.get_version()
        return {"nvshmem": v.libnvshmem_version, "nvshmem4py": v.nvshmem4py_version, **USED}

    def finalize(self) -> None:
        """_common.Host's (the arrays freed, then nvshmem.core.finalize), then a word to our launcher."""
        from nvshmem_dsl.host import _exit

        super().finalize()
        _exit.tell_launcher("finalized")


# ------------------------------------------------------------------ compile check (CPU)


def compile_report(names, compile_one: Callable[[str], dict]) -> int:
    """Compile each of ``names`` with ``compile_one(name)`` (-> the fields to report), printing one JSON line
    per name: ``kernel``, the fields or ``error``, ``seconds``; 1 when one failed, else 0."""
    import json

    status = 0
    for name in names:
        t0 = time.perf_counter()
        rec: dict = {"kernel": name}
        try:
            rec.update(compile_one(name))
        except Exception as exc:  # noqa: BLE001 - reported, the next one compiled
            rec["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            status = 1
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        print(json.dumps(rec), flush=True)
    return status


def check_args(argv, what: str):
    """The compile checks' arguments: ``--arch`` (default sm_90a), then the names to compile."""
    import argparse

    ap = argparse.ArgumentParser(description=f"compile {what} without a GPU; one JSON line each")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("names", nargs="*")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    """``python bench/_nv4py.py [--arch sm_90a] [KERNEL ...]``: compile bench/nv4py_bench.py's kernels (default
    all) to cubins without a GPU (bench/test_bench_compile.py); a JSON line of the kernel table (names and
    signatures), then one per kernel (compile_report): whether the cubin is an ELF, its size, whether it names
    NVSHMEM's device state (what NVSHMEM's library init sets)."""
    import json

    args = check_args(argv, "bench/nv4py_bench.py's kernels")
    digits = "".join(ch for ch in args.arch if ch.isdigit())
    cc = (int(digits[:-1]), int(digits[-1]))
    no_gpu_device(cc)
    import nv4py_bench as nb

    print(json.dumps({"table": list(nb.KERNELS), "signatures": nb.SIGNATURES}), flush=True)

    def one(name: str) -> dict:
        cubin = compile_cubin(nb.KERNELS[name], nb.SIGNATURES[name], cc, **nb.jit_options(name))
        return {"elf": cubin[:4] == b"\x7fELF", "bytes": len(cubin),
                "device_state": b"nvshmemi_device_state_d" in cubin}

    return compile_report(args.names or list(nb.KERNELS), one)


if __name__ == "__main__":
    import sys

    sys.exit(main())
