"""CPU tests of the host runtime: the C library is loaded but no GPU is needed.

Host operations are checked in a *fake* state (``_state.fake``: the runtime
believes it is initialised with 4 PEs) with the C calls intercepted
(``_lib._interceptor``), on fake arrays whose made-up addresses are entered
in the symmetric-memory registry; nothing is ever dereferenced.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
import textwrap
import types
import warnings
from importlib import resources

import numpy as np
import pytest
from pathlib import Path

import nvshmem_dsl as nv
from nvshmem_dsl.host import _arrays, _cuda, _lib, _table, _init, _state, operations, memory, symmetric, teams, views
from nvshmem_dsl import _libs
from nvshmem_dsl.linker import module_init
from nvshmem_dsl.linker.hooks import ModuleHooks
from nvshmem_dsl._generated.constants import STRUCT_SIZES, STRUCT_VERSIONS, Status, Team

SYM = 0x7F0000000000  # fake symmetric allocations
SYM2 = 0x7F0000100000
LOCAL = 0x7E0000000000  # fake local (non-symmetric) device memory
ALLOC = 1 << 20


def _gpu_present() -> bool:
    from conftest import _gpu_count

    return _gpu_count() > 0


def table() -> dict:
    return json.loads(resources.files("nvshmem_dsl._generated").joinpath("ops.json").read_text())


class FakeArray:
    """A device array that only describes itself (never dereferenced)."""

    def __init__(self, ptr, n=32, dtype="float32", strides=None, shape=None):
        if dtype == "bfloat16":  # numpy has no bfloat16 without ml_dtypes
            typestr, self._nvshmem_dtype = "<V2", "bfloat16"
        else:
            typestr = np.dtype(dtype).str
        self.__cuda_array_interface__ = {
            "shape": tuple(shape) if shape is not None else (n,),
            "typestr": typestr,
            "data": (ptr, False),
            "strides": strides,
            "version": 3,
        }


def sym(n=32, dtype="float32", offset=0, **kw):
    return FakeArray(SYM + offset, n, dtype, **kw)


def sym2(n=32, dtype="float32", offset=0, **kw):
    return FakeArray(SYM2 + offset, n, dtype, **kw)


def local(n=32, dtype="float32", **kw):
    return FakeArray(LOCAL, n, dtype, **kw)


class Fake(types.SimpleNamespace):
    def symbols(self):
        return [c[0] for c in self.calls]

    def last(self):
        return self.calls[-1]


@pytest.fixture
def fake(monkeypatch):
    """The runtime in a fake initialised state (4 PEs, this one PE 1), C calls recorded."""
    calls: list = []
    responses: dict = {"nvshmem_team_n_pes": 4}

    def intercept(symbol, args):
        calls.append((symbol, args))
        value = responses.get(symbol, 0)
        return value(args) if callable(value) else value

    monkeypatch.setattr(_lib, "_interceptor", intercept)
    with _state.fake(n_pes=4, my_pe=1):
        a = symmetric._testing_register(SYM, ALLOC)
        b = symmetric._testing_register(SYM2, ALLOC)
        try:
            yield Fake(calls=calls, responses=responses, allocs=(a, b))
        finally:
            memory.REGISTRY.clear("test over")


# --------------------------------------------------------------------------- library, cdef, versions


def test_cdef_loads_and_struct_sizes_match():
    ffi = _lib._cdef_only()
    for name, size in STRUCT_SIZES.items():
        assert ffi.sizeof(name) == size, name
    for name, info in table()["structs"].items():
        assert ffi.sizeof(name) == info["size"], name
    assert STRUCT_VERSIONS["nvshmemx_init_attr_t"] == (2 << 16) + STRUCT_SIZES["nvshmemx_init_attr_t"]
    assert STRUCT_VERSIONS["nvshmemx_uniqueid_t"] == (1 << 16) + STRUCT_SIZES["nvshmemx_uniqueid_t"]


def test_library_exports_every_host_function_of_the_table():
    missing = [e["symbol"] for e in table()["host"] if not _lib.has_symbol(e["symbol"])]
    assert not missing, missing[:10]
    assert _lib.loaded()
    assert str(_lib.library_path()).endswith(("libnvshmem_host.so.3", "libnvshmem_host.so"))


@pytest.mark.parametrize("kept", [False, True])
def test_a_symbol_the_library_lacks(kept, tmp_path, monkeypatch):
    """An NVSHMEM without a function (3.4.5 has no nvshmemx_flush): has_symbol says so, a call names it;
    with the declarations parsed now and with the parse kept in the cache directory (cffi's out-of-line
    ABI module, which raises its own ffi.error for a missing symbol, not AttributeError)."""
    from nvshmem_dsl.host import _ffi as ffi_module

    f = ffi_module.new_ffi(_lib.cdef_text(), folder=tmp_path)  # parses, keeps the parse in tmp_path
    if kept:
        f = ffi_module.new_ffi(_lib.cdef_text(), folder=tmp_path)  # loads the kept module
        assert list(tmp_path.glob("*.py"))
    monkeypatch.setattr(_lib, "_ffi", f)
    monkeypatch.setattr(_lib, "_lib", f.dlopen(str(_lib.library_path())))
    assert _lib.has_symbol("nvshmem_my_pe")
    assert not _lib.has_symbol("nvshmemx_no_such_function")
    with pytest.raises(nv.NvshmemNotFoundError, match="nvshmemx_no_such_function is not exported"):
        _lib._signature("nvshmemx_no_such_function")


def test_versions():
    v = nv.versions()
    assert v["nvshmem"] == "%d.%d.%d" % _libs.nvshmem_version()
    assert v["nvshmem_found"] == v["nvshmem"]
    assert v["openshmem"].count(".") == 1
    assert v["name"].startswith("NVSHMEM")
    from nvshmem_dsl._generated.constants import SPEC_SHA256

    assert v["spec_sha256"] == SPEC_SHA256
    assert v["nvshmem_dsl"]


def test_info_without_gpu():
    info = nv.info()
    assert info["versions"]["nvshmem"]
    assert info["library"].endswith("libnvshmem_host.so.3")
    assert info["bitcode_layout"] in ("per-arch", "single", "none")
    assert info["initialized"] is False
    if not _gpu_present():
        assert info["gpus"] == [] and info["cuda_driver"].startswith("unavailable")


def test_uniqueid_without_gpu():
    a, b = nv.get_uniqueid(), nv.get_uniqueid()
    assert isinstance(a, bytes) and len(a) == 128 == STRUCT_SIZES["nvshmemx_uniqueid_t"]
    assert a != b
    assert struct.unpack_from("<i", a)[0] == STRUCT_VERSIONS["nvshmemx_uniqueid_t"]


def test_status_errors_name_the_status():
    err = _lib.status_error("nvshmemx_team_init", int(Status.ERROR_SYMMETRY), "members=[0, 1]")
    assert isinstance(err, nv.NvshmemStatusError)
    assert err.function == "nvshmemx_team_init" and err.status == 4
    assert "ERROR_SYMMETRY" in str(err) and "members=[0, 1]" in str(err)


def test_call_converts_pointers_and_16_bit_floats(monkeypatch):
    # through the real call path, the C function replaced by a recorder of what it is given
    monkeypatch.setattr(_lib, "_interceptor", None)
    seen = []
    ffi = _lib.ffi()
    for symbol in ("nvshmem_half_p", "nvshmem_bfloat16_p"):
        sig = _lib._signature(symbol)
        monkeypatch.setitem(_lib._signatures, symbol, (lambda *a: seen.append(a),) + sig[1:])
    _lib.call("nvshmem_half_p", 0x1000, 1.5, 1)
    _lib.call("nvshmem_bfloat16_p", None, 2, 0)
    box = ffi.new("half *")
    box.x = 0x3C00
    _lib.call("nvshmem_half_p", ffi.cast("void *", 0x2000), box[0], 1)
    (d1, v1, pe1), (d2, v2, _), (d3, v3, _) = seen
    assert int(ffi.cast("uintptr_t", d1)) == 0x1000 and v1.x == _lib.float_to_half_bits(1.5) and pe1 == 1
    assert d2 == ffi.NULL and v2.x == _lib.float_to_bfloat16_bits(2.0)
    assert int(ffi.cast("uintptr_t", d3)) == 0x2000 and v3.x == 0x3C00  # cffi values as given
    with pytest.raises(TypeError, match="nvshmem_half_p takes 3 arguments, got 2"):
        _lib.call("nvshmem_half_p", 0x1000, 1.5)


def test_call_passes_addresses_as_ints(monkeypatch):
    """A function with pointer parameters is also called through a copy typed with uintptr_t in their
    place (no cast an argument); None or a cffi pointer among the arguments takes the casting path."""
    monkeypatch.setattr(_lib, "_interceptor", None)
    ffi = _lib.ffi()
    symbol = "nvshmemx_float_put_on_stream"  # (float *dst, const float *src, size_t, int pe, cudaStream_t)
    sig = _lib._signature(symbol)
    int_fn = sig[-1]
    assert [t.cname for t in ffi.typeof(int_fn).args] == ["uintptr_t", "uintptr_t", "size_t", "int", "uintptr_t"]
    assert _lib._signature("nvshmem_barrier")[-1] is None  # no pointer: nothing to spare
    assert _lib._signature("nvshmem_half_p")[-1] is None  # a half by value: the casting path only
    fast, slow = [], []
    monkeypatch.setitem(_lib._signatures, symbol,
                        (lambda *a: slow.append(a),) + sig[1:-1] + (lambda *a: fast.append(a),))
    _lib.call(symbol, 0x1000, 0x2000, 8, 1, 0x5EAB)
    assert fast == [(0x1000, 0x2000, 8, 1, 0x5EAB)] and not slow

    def refuse(*args):  # never called: an address that is not an int takes the casting path at once
        raise AssertionError("the int-typed copy was called")

    monkeypatch.setitem(_lib._signatures, symbol, (lambda *a: slow.append(a),) + sig[1:-1] + (refuse,))
    _lib.call(symbol, 0x1000, ffi.cast("float *", 0x2000), 8, 1, None)
    (dst, src, n, pe, stream), = slow
    assert int(ffi.cast("uintptr_t", dst)) == 0x1000 and int(ffi.cast("uintptr_t", src)) == 0x2000
    assert (n, pe, stream) == (8, 1, ffi.NULL)


def test_call_with_addresses_as_ints_reaches_the_c_function(monkeypatch):
    """The int-typed copy calls the real C function: NVSHMEM's version written through two addresses
    given as ints (a host function that needs no initialisation)."""
    monkeypatch.setattr(_lib, "_interceptor", None)
    ffi = _lib.ffi()
    symbol = "nvshmem_info_get_version"
    sig = _lib._signature(symbol)

    def casting_path(*args):
        raise AssertionError("the casting path was taken")

    monkeypatch.setitem(_lib._signatures, symbol, (casting_path,) + sig[1:])
    major, minor = ffi.new("int *"), ffi.new("int *")
    _lib.call(symbol, int(ffi.cast("uintptr_t", major)), int(ffi.cast("uintptr_t", minor)))
    assert (major[0], minor[0]) >= (1, 3)  # the OpenSHMEM version NVSHMEM implements


def test_call_with_addresses_as_ints_checks_the_status(monkeypatch):
    """A status-returning function called through its int-typed copy: a non-zero status raises, or is
    returned with check=False, as on the casting path."""
    monkeypatch.setattr(_lib, "_interceptor", None)
    symbol = "nvshmemx_float_sum_reduce_on_stream"  # (team, float *dst, const float *src, size_t, stream)
    sig = _lib._signature(symbol)
    assert sig[6] and sig[-1] is not None  # a status, and pointers
    monkeypatch.setitem(_lib._signatures, symbol, sig[:-1] + (lambda *args: 7,))
    with pytest.raises(nv.NvshmemStatusError, match="ERROR_INTERNAL"):
        _lib.call(symbol, 0, 0x1000, 0x2000, 2, 0x5EAB)
    assert _lib.call(symbol, 0, 0x1000, 0x2000, 2, 0x5EAB, check=False) == 7


def test_call_raises_status_error(monkeypatch):
    # a status-returning function returning non-zero, through the real call path
    monkeypatch.setattr(_lib, "_interceptor", None)
    fn = lambda *a: 7  # noqa: E731
    sig = _lib._signature("nvshmem_barrier")
    monkeypatch.setitem(_lib._signatures, "nvshmem_barrier", (fn,) + sig[1:])
    with pytest.raises(nv.NvshmemStatusError, match="ERROR_INTERNAL") as info:
        _lib.call("nvshmem_barrier", 0)
    assert info.value.function == "nvshmem_barrier" and info.value.status == 7
    # value-returning int functions are not statuses
    assert not _table.returns_status("nvshmem_my_pe")
    assert not _table.returns_status("nvshmem_int_g")
    assert _table.returns_status("nvshmem_float_sum_reduce")
    assert _table.returns_status("nvshmemx_hostlib_init_attr")


def test_half_and_bfloat16_conversions():
    for value in (0.0, 1.0, -2.5, 65504.0, 1e-3):
        assert _lib.half_bits_to_float(_lib.float_to_half_bits(value)) == np.float16(value).item()
    assert _lib.float_to_bfloat16_bits(1.0) == 0x3F80
    assert _lib.bfloat16_bits_to_float(_lib.float_to_bfloat16_bits(3.140625)) == 3.140625
    assert _lib.float_to_bfloat16_bits(float("nan")) == 0x7FC0


# --------------------------------------------------------------------------- init without a GPU


@pytest.mark.skipif(_gpu_present(), reason="a GPU is present")
@pytest.mark.parametrize("args", ["rank=0, nranks=1", ""])
def test_init_without_gpu_is_a_clear_error(args):
    code = textwrap.dedent(f"""
        import nvshmem_dsl as nv
        for attempt in range(2):
            try:
                nv.init({args})
            except nv.NvshmemInitError as exc:
                print("INITERROR", exc)
        assert not nv.is_initialized()
        try:
            nv.my_pe()
        except nv.NvshmemStateError:
            print("STATEERROR")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVSHMEM_DSL_", "OMPI_", "PMI_", "PMIX_"))}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("INITERROR")]
    assert len(lines) == 2
    assert "init()" in lines[0] and ("CUDA" in lines[0] or "GPU" in lines[0])
    assert "STATEERROR" in proc.stdout


def test_use_before_init_raises_state_error():
    assert not nv.is_initialized()
    x = FakeArray(SYM)
    calls = [
        nv.my_pe, nv.n_pes, lambda: nv.team_my_pe(Team.TEAM_WORLD), lambda: nv.array(4, like="cupy"),
        lambda: nv.zeros(4), lambda: nv.buffer(16), lambda: nv.put(x, x, 0), lambda: nv.get(x, x, 0),
        lambda: nv.free(x), nv.barrier_all, nv.quiet, lambda: nv.reduce(Team.TEAM_WORLD, x, x),
        lambda: nv.peer(x, 0), lambda: nv.split_strided(Team.TEAM_WORLD, 0, 1, 1), nv.query_thread,
        lambda: nv.culibrary_init(0x1234), lambda: nv.team_init([0]), lambda: nv.atomic_inc(x, 0),
    ]
    for fn in calls:
        with pytest.raises(nv.NvshmemStateError, match="not initialised"):
            fn()
    with pytest.raises(nv.NvshmemStateError):
        nv.finalize()


def test_import_is_light():
    code = ("import sys, nvshmem_dsl; heavy = [m for m in ('numpy', 'cupy', 'torch', 'numba', 'cffi', 'mpi4py') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_init_prepares_cuda_in_the_background():
    # the thread loads the op table and calls cuInit (on a CPU machine it fails: no driver library;
    # init_driver still reports the failure as before) and imports no module: an import on two threads
    # at once handed init's `from cuda.core import Device` a half-initialised cuda.core on the GPU machine
    code = ("import builtins, sys, threading; from nvshmem_dsl.host import _cuda, _init, _table\n"
            "imported = []; real = builtins.__import__\n"
            "def spy(name, *a, **k):\n"
            "    if threading.current_thread().name == _init.PREPARE_THREAD and name not in sys.modules:\n"
            "        imported.append(name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = spy; before = set(sys.modules)\n"
            "print(_table._table is None)\n"
            "_init._prepare_in_background()\n"
            "[t.join() for t in threading.enumerate() if t.name == _init.PREPARE_THREAD]\n"
            "print(_table._table is None, 'cuda.core' in sys.modules)\n"
            "print('thread-imports', imported)\n"
            "try:\n    _cuda.init_driver()\nexcept Exception as exc:\n    print(type(exc).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "True" and lines[1] == "False False", out.stdout
    assert lines[2] == "thread-imports []", out.stdout
    assert lines[3] == "NvshmemInitError", out.stdout


# --------------------------------------------------------------------------- init / finalize flow, C intercepted


@pytest.fixture
def fake_driver(monkeypatch):
    """No GPU needed: one fake device, C calls intercepted."""
    calls = []
    responses = {"nvshmem_my_pe": 0, "nvshmem_n_pes": 1, "nvshmem_calloc": 0x7D0000000000,
                 "nvshmem_malloc": 0x7D0000100000}
    seen = {}

    def intercept(symbol, args):
        calls.append((symbol, args))
        if symbol == "nvshmemx_hostlib_init_attr":
            attr = args[1]
            seen.update(
                version=attr.version, args_version=attr.args.version, uid_version=attr.args.uid_args.version,
                device=attr.args.cuda_device_id, myrank=attr.args.uid_args.myrank,
            )
        value = responses.get(symbol, 0)
        return value(args) if callable(value) else value

    _lib.lib()
    monkeypatch.setattr(_lib, "_interceptor", intercept)
    monkeypatch.setattr(_cuda, "device_count", lambda: 1)
    monkeypatch.setattr(_cuda, "set_device", lambda i: f"device {i}")
    yield types.SimpleNamespace(calls=calls, responses=responses, seen=seen)
    _state.STATE.failed_init = None
    if _state.STATE.initialized:
        _init._finalize_locked(report=False)
    memory.REGISTRY.clear("test over")


def test_init_finalize_flow(fake_driver):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no leak warning expected
        with nv.init(rank=0, nranks=1) as pe:
            assert nv.is_initialized() and pe.active
            assert (nv.my_pe(), nv.n_pes(), pe.device_id, pe.mode) == (0, 1, 0, "explicit")
            with pytest.raises(nv.NvshmemStateError, match="already initialised"):
                nv.init()
            b = nv.buffer(256)
            assert fake_driver.calls[-1][0] == "nvshmem_malloc"
            b.free()
        assert not pe.active and not nv.is_initialized()
    symbols = [c[0] for c in fake_driver.calls]
    assert symbols.index("nvshmemx_set_attr_uniqueid_args") < symbols.index("nvshmemx_hostlib_init_attr")
    assert symbols[-1] == "nvshmemx_hostlib_finalize"
    assert "nvshmem_free" in symbols  # the internal scratch buffer
    layout = _init._attr_layout()
    seen = fake_driver.seen
    if layout == 2:
        assert seen["version"] == STRUCT_VERSIONS["nvshmemx_init_attr_t"]
        assert seen["args_version"] == STRUCT_VERSIONS["nvshmemx_init_args_t"]
        assert seen["device"] == 0
    else:
        assert seen["version"] == (1 << 16) + STRUCT_SIZES["nvshmemx_init_attr_t"]
    assert seen["uid_version"] == STRUCT_VERSIONS["nvshmemx_uniqueid_args_t"]
    assert seen["myrank"] == -1  # as the initializer; set_attr_uniqueid_args (intercepted) fills it
    with pytest.raises(nv.NvshmemStateError, match="already finalized"):
        nv.finalize()
    linker = sys.modules.get("nvshmem_dsl.numba._linker")
    if linker is not None:  # finalize unhooked the Numba layer
        assert module_init.library_init not in linker.hooks.init


def test_init_with_nvshmems_own_bootstrap(fake_driver, monkeypatch):
    """NVSHMEM_BOOTSTRAP=PMIX (srun) / PMI / MPI: init hands the bootstrap to NVSHMEM (flags 0,
    no unique id) on the GPU of the launcher's local rank."""
    monkeypatch.setenv("NVSHMEM_BOOTSTRAP", "PMIX")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    fake_driver.responses.update({"nvshmem_my_pe": 3, "nvshmem_n_pes": 8})
    with nv.init() as pe:
        assert (nv.my_pe(), nv.n_pes(), pe.mode, pe.device_id) == (3, 8, "nvshmem", 0)
    symbols = [c[0] for c in fake_driver.calls]
    assert "nvshmemx_set_attr_uniqueid_args" not in symbols and "nvshmemx_get_uniqueid" not in symbols
    init_call = next(c for c in fake_driver.calls if c[0] == "nvshmemx_hostlib_init_attr")
    assert init_call[1][0] == 0  # flags: NVSHMEM's bootstrap from its environment
    assert fake_driver.seen["device"] == 0


def test_init_failure_is_reported_once_and_sticks(fake_driver):
    fake_driver.responses["nvshmemx_hostlib_init_attr"] = int(Status.ERROR_INTERNAL)
    with pytest.raises(nv.NvshmemInitError, match="ERROR_INTERNAL"):
        nv.init(rank=0, nranks=1)
    assert not nv.is_initialized()
    with pytest.raises(nv.NvshmemInitError, match="already failed"):
        nv.init(rank=0, nranks=1)
    assert "nvshmemx_hostlib_finalize" not in [c[0] for c in fake_driver.calls]  # it would abort


def test_init_argument_errors(fake_driver):
    with pytest.raises(nv.NvshmemInitError, match="uid"):
        nv.init(rank=0, nranks=2)
    with pytest.raises(nv.NvshmemInitError, match="128 bytes"):
        nv.init(rank=0, nranks=2, uid=b"short")
    with pytest.raises(nv.NvshmemInitError, match="device=3"):
        nv.init(rank=0, nranks=1, device=3)
    with pytest.raises(nv.NvshmemInitError):
        nv.init(rank=2, nranks=2, uid=bytes(128))
    assert not nv.is_initialized()


def test_limited_mpg_refuses_what_nvshmem_rejects(fake_driver, monkeypatch):
    """Several PEs on one GPU without MPS: NVSHMEM would end the process on a collective; we raise
    NvshmemMpgError first, skip the allocation size check (a collective) once-warned, and say so."""
    fake_driver.responses.update(nvshmem_n_pes=2, nvshmem_team_n_pes=2,
                                 nvshmemx_init_status=int(nv.InitStatus.STATUS_LIMITED_MPG))
    monkeypatch.setattr(_cuda, "mps_enabled", lambda dev: False)
    monkeypatch.setattr(memory, "_symmetry_check_off_said", False)
    addresses = iter(range(0x7D0000100000, 0x7D0000200000, 0x10000))
    fake_driver.responses["nvshmem_malloc"] = lambda args: next(addresses)
    nv.init(rank=0, nranks=2, uid=bytes(128))
    info = nv.info()
    assert (info["pes_per_gpu"], info["mps"], info["limited_mpg"]) == (2, False, True)
    with pytest.warns(RuntimeWarning, match="limited MPG"):
        b = nv.buffer(1024)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once only
        c = nv.buffer(1024)
    assert not any("max_reduce" in c_[0] for c_ in fake_driver.calls)
    before = len(fake_driver.calls)
    x = FakeArray(c.ptr, 8, "int32")
    refused = {
        "nvshmem_int32_sum_reduce": lambda: nv.reduce(Team.TEAM_WORLD, x, x, "sum"),
        "nvshmem_barrier": lambda: nv.barrier(Team.TEAM_WORLD),
        "nvshmem_team_sync": lambda: nv.sync(Team.TEAM_WORLD),
        "nvshmem_int32_fcollect": lambda: nv.fcollect(Team.TEAM_WORLD, x, x, nelems=4),
        "nvshmem_team_split_strided": lambda: nv.split_strided(Team.TEAM_WORLD, 0, 1, 2),
        "nvshmem_team_split_2d": lambda: nv.split_2d(Team.TEAM_WORLD, 1),
        "nvshmemx_team_get_uniqueid": lambda: nv.team_init([1, 0]),
    }
    for symbol, call in refused.items():
        with pytest.raises(nv.NvshmemMpgError, match=f"{symbol}.*limited MPG.*nvidia-cuda-mps-control") as err:
            call()
        assert isinstance(err.value, nv.NvshmemUnsupportedError)
    called = [c_[0] for c_ in fake_driver.calls[before:]]
    assert not set(called) & set(refused), called
    nv.barrier_all()  # NVSHMEM has a limited-MPG path for these
    nv.sync_all()
    assert [c_[0] for c_ in fake_driver.calls[-2:]] == ["nvshmem_barrier_all", "nvshmem_sync_all"]
    for buf in (b, c):
        nv.free(buf)
    nv.finalize()
    assert not _state.STATE.limited_mpg and _state.STATE.pes_per_gpu == 1


def test_full_mpg_and_single_pe_runs_keep_collectives(fake_driver, monkeypatch):
    fake_driver.responses.update(nvshmem_n_pes=2, nvshmem_team_n_pes=2,
                                 nvshmemx_init_status=int(nv.InitStatus.STATUS_FULL_MPG))
    monkeypatch.setattr(_cuda, "mps_enabled", lambda dev: True)
    nv.init(rank=0, nranks=2, uid=bytes(128))
    assert {k: nv.info()[k] for k in ("pes_per_gpu", "mps", "limited_mpg")} == \
        {"pes_per_gpu": 2, "mps": True, "limited_mpg": False}
    nv.barrier(Team.TEAM_WORLD)
    assert fake_driver.calls[-1][0] == "nvshmem_barrier"
    nv.finalize()


def test_limited_mpg_families_come_from_the_spec(spec):
    rejected = {op.family for op in spec.ops_for("host") if not op.limited_mpg}
    assert rejected == {"barrier", "team_sync", "broadcast", "fcollect", "alltoall", "reduce", "reducescatter",
                        "team_split_strided", "team_split_2d", "team_init", "team_get_uniqueid"}
    from nvshmem_dsl.host import _table
    assert _table.rejected_in_limited_mpg("nvshmemx_float_sum_reduce_on_stream")
    assert not _table.rejected_in_limited_mpg("nvshmem_barrier_all")
    assert not _table.rejected_in_limited_mpg("nvshmem_float_put")


def test_finalize_reports_leaks(fake_driver):
    nv.init(rank=0, nranks=1)
    fake_driver.responses["nvshmem_malloc"] = 0x7D0000100000
    b = nv.buffer(4096)
    assert b.allocation.where.startswith(__file__)
    with pytest.warns(nv.NvshmemLeakWarning, match="4096 B"):
        nv.finalize()
    assert b.freed
    with pytest.raises(nv.NvshmemMemoryError, match="finalized"):
        b.ptr


def test_allocation_size_mismatch_is_detected(fake_driver, monkeypatch):
    """The check is one max-reduction on the runtime's stream, before the allocation."""
    fake_driver.responses.update(nvshmem_n_pes=2)
    nv.init(rank=0, nranks=2, uid=bytes(128))
    written = {}
    monkeypatch.setattr(_cuda, "runtime_stream", lambda: 0x5EAB)
    monkeypatch.setattr(_cuda, "memcpy_htod", lambda ptr, data, stream=None: written.update(data=data, stream=stream))
    # the other PE asked for 512 bytes: max 1024, min 512 (read back after the runtime stream's work)
    monkeypatch.setattr(_cuda, "memcpy_dtoh", lambda ptr, n, stream: struct.pack("<qq", 1024, -512 if stream else 0))
    with pytest.raises(nv.NvshmemArgumentError, match="different sizes"):
        nv.buffer(1024)
    assert struct.unpack("<qq", written["data"]) == (1024, -1024) and written["stream"] == 0x5EAB
    reduce = [c for c in fake_driver.calls if "max_reduce" in c[0]]
    assert [(c[0], c[1][-1]) for c in reduce] == [("nvshmemx_int64_max_reduce_on_stream", 0x5EAB)]
    assert "nvshmem_malloc" not in [c[0] for c in fake_driver.calls]
    monkeypatch.setattr(_cuda, "memcpy_dtoh", lambda ptr, n, stream: struct.pack("<qq", 1024, -1024))
    fake_driver.responses["nvshmem_malloc"] = 0x7D0000100000
    b = nv.buffer(1024)
    b.free()
    count = len(fake_driver.calls)
    monkeypatch.setenv(memory.ENV_CHECK_SYMMETRY, "0")
    b = nv.buffer(1024)
    assert not [c for c in fake_driver.calls[count:] if "max_reduce" in c[0]]
    b.free()
    nv.finalize()


@pytest.mark.parametrize("why", ["every PE reached", "a PE not reached", "another PE says no", "one PE"])
def test_reached_by_load_store_is_agreed_once(fake_driver, monkeypatch, why):
    """Each PE asks nvshmem_ptr of every peer; the session's answer is the smallest over the PEs (one
    max-reduction of (yes, -yes), at the first call only; a PE alone on the load/store protocol would
    never join the others' collectives), forgotten at finalize.  One PE: its own answer."""
    n_pes = 1 if why == "one PE" else 3
    fake_driver.responses.update(nvshmem_n_pes=n_pes, nvshmem_my_pe=0,
                                 nvshmem_ptr=lambda args: 0 if why == "a PE not reached" and args[1] == 2 else 1)
    nv.init(rank=0, nranks=n_pes, uid=bytes(128))
    said = []
    monkeypatch.setattr(_cuda, "runtime_stream", lambda: 0x5EAB)
    monkeypatch.setattr(_cuda, "memcpy_htod", lambda ptr, data, stream=None: said.append(struct.unpack("<2q", data)))
    yes = why != "a PE not reached"
    smallest = 0 if why in ("a PE not reached", "another PE says no") else 1
    monkeypatch.setattr(_cuda, "memcpy_dtoh", lambda ptr, n, stream: struct.pack("<2q", 1, -smallest))
    want = yes if n_pes == 1 else smallest == 1
    assert memory.reached_by_load_store() is want
    assert memory.reached_by_load_store() is want
    assert said == ([] if n_pes == 1 else [(int(yes), -int(yes))])  # one reduction, this PE's answer
    asked = sorted(args[1] for symbol, args in fake_driver.calls if symbol == "nvshmem_ptr")
    assert asked == ([] if n_pes == 1 else [1, 2])  # every peer once, not this PE
    nv.finalize()
    assert memory._reached is None  # asked again next session


# --------------------------------------------------------------------------- op table -> symbols


def test_dtype_preferences():
    assert _table.typenames_for("float32") == ("float",)
    assert _table.typenames_for("float64") == ("double",)
    assert _table.typenames_for("float16") == ("half",)
    assert _table.typenames_for("bfloat16") == ("bfloat16",)
    assert _table.typenames_for("int64")[0] == "int64"
    assert _table.typenames_for("uint64")[0] == "uint64"
    assert _table.typenames_for("int32")[0] == "int32"
    assert "short" in _table.typenames_for("int16")
    assert _table.resolve("wait_until_on_stream", "int16", 2, untyped=False).typename == "short"
    assert _table.resolve("put", "bool", 1, untyped=True).symbol == "nvshmem_put8"
    r = _table.resolve("broadcast", "complex128", 16, untyped=True)
    assert (r.symbol, r.count_scale) == ("nvshmem_broadcastmem", 16)
    assert _table.resolve("sum_reduce", "bool", 1, untyped=False) is None


def test_family_coverage():
    families = {e["family"] for e in table()["host"]}
    covered, skipped = set(operations.COVERAGE), set(operations.NOT_WRAPPED)
    assert not covered & skipped
    assert families == covered | skipped, (families - covered - skipped, (covered | skipped) - families)
    import importlib

    for family, target in operations.COVERAGE.items():
        module, name = target.rsplit(".", 1)
        fn = getattr(importlib.import_module("nvshmem_dsl." + module), name)
        assert callable(fn), family
    for family in skipped:  # still reachable raw
        entry = next(e for e in table()["host"] if e["family"] == family)
        assert _lib.has_symbol(entry["symbol"])


def _numpy_for(dtype: str) -> str | None:
    """A numpy dtype whose arrays select NVSHMEM dtype ``dtype`` (None for aliases never chosen)."""
    if dtype in ("8", "16", "32", "64", "128"):
        return {"8": "bool", "16": "V2", "32": "V4", "64": "complex64", "128": "complex128"}[dtype]
    if dtype == "mem":
        return "V3"  # no sized form of 3 bytes
    name = _table.numpy_name(dtype)
    if not name or name.startswith("("):
        return None
    return name


def _call_for(entry, np_dtype):
    """Invoke the Python function that should reach ``entry`` with arrays of ``np_dtype``."""
    api, stream = entry["api"], (5 if entry["scope"] == "stream" else None)
    nbi = entry["nbi"]
    base = api.removesuffix("_on_stream").replace("_nbi", "")
    kw = {"stream": stream} if stream is not None else {}
    S, S2, L = (lambda **k: sym(dtype=np_dtype, **k)), (lambda **k: sym2(dtype=np_dtype, **k)), (lambda **k: local(dtype=np_dtype, **k))
    if base == "put":
        return nv.put(S(), L(), 2, nbi=nbi, **kw)
    if base == "get":
        return nv.get(L(), S(), 2, nbi=nbi, **kw)
    if base == "p":
        return nv.p(S(), 1, 2, **kw)
    if base == "g":
        return nv.g(S(), 2, **kw)
    if base == "iput":
        return nv.iput(S(), L(n=16), 2, dst_stride=2, **kw)
    if base == "iget":
        return nv.iget(L(n=16), S(), 2, src_stride=2, **kw)
    if base == "put_signal":
        return nv.put_signal(S(), L(), sym2(1, "uint64"), 1, 2, nbi=nbi, **kw)
    if base.startswith("wait_until_all_vector"):
        return nv.wait_until_all_vector(S(n=4), "eq", L(n=4), **kw)
    if base.startswith("wait_until_all"):
        return nv.wait_until_all(S(n=4), "eq", 1, **kw)
    if base.startswith("wait_until"):
        return nv.wait_until(S(n=1), "eq", 1, **kw)
    if base in ("broadcast", "fcollect", "alltoall"):
        fn = getattr(nv, base)
        extra = (0,) if base == "broadcast" else ()
        return fn(Team.TEAM_WORLD, S(n=32), S2(n=8 if base != "alltoall" else 32), *extra, **kw)
    if base.endswith("_reducescatter"):
        return nv.reducescatter(Team.TEAM_WORLD, S(n=8), S2(n=32), base.split("_")[0], **kw)
    if base.endswith("_reduce"):
        return nv.reduce(Team.TEAM_WORLD, S(n=8), S2(n=8), base.split("_")[0], **kw)
    if base.startswith("atomic_"):
        fn = getattr(nv, base)
        params = [p["role"] for p in entry["params"]]
        args = [S(n=1)]
        if "compare" in params:
            args.append(1)
        if "value" in params:
            args.append(1)
        return fn(*args, 2)
    raise AssertionError(f"no Python call for {api}")


DATA_GROUPS = ("rma", "signal", "collectives", "wait", "amo")


def test_every_typed_host_function_is_reached(fake):
    """For each data api of the table and each dtype an array can have, the Python call picks that C function."""
    reached, skipped_aliases = 0, 0
    for entry in table()["host"]:
        if entry["group"] not in DATA_GROUPS or entry["dtype"] is None:
            continue
        np_dtype = _numpy_for(entry["dtype"])
        if np_dtype is None:
            skipped_aliases += 1
            continue
        preferred = _table.resolve(entry["api"], np_dtype, _arrays.itemsize_of(np_dtype),
                                       untyped=entry["dtype"] in _table.UNTYPED)
        if preferred is None or preferred.symbol != entry["symbol"]:
            skipped_aliases += 1  # e.g. "long" when "int64" is preferred for numpy int64
            continue
        if entry["api"] in ("put", "get", "put_nbi", "get_nbi") and entry["dtype"] == "mem":
            np_dtype = "V3"
        fake.calls.clear()
        _call_for(entry, np_dtype)
        assert entry["symbol"] in fake.symbols(), (entry["symbol"], np_dtype, fake.symbols())
        reached += 1
    assert reached > 700
    # every (api, numpy dtype) pair is reachable: the skipped entries are aliases of reached ones
    apis_dtypes = {(e["api"], _table.numpy_name(e["dtype"])) for e in table()["host"]
                   if e["group"] in DATA_GROUPS and e["dtype"] not in (None, *_table.UNTYPED)
                   and _table.numpy_name(e["dtype"]) and not _table.numpy_name(e["dtype"]).startswith("(")}
    for api, np_dtype in apis_dtypes:
        assert _table.resolve(api, np_dtype, _arrays.itemsize_of(np_dtype), untyped=False) is not None


def test_untyped_host_functions_are_reached(fake):
    for fn, symbol in [
        (lambda: nv.quiet(), "nvshmem_quiet"), (lambda: nv.quiet(stream=3), "nvshmemx_quiet_on_stream"),
        (lambda: nv.fence(), "nvshmem_fence"), (lambda: nv.flush(), "nvshmemx_flush"),
        (lambda: nv.flush(stream=3), "nvshmemx_flush_on_stream"),
        (lambda: nv.barrier(), "nvshmem_barrier"), (lambda: nv.barrier(stream=3), "nvshmemx_barrier_on_stream"),
        (lambda: nv.barrier_all(), "nvshmem_barrier_all"), (lambda: nv.barrier_all(3), "nvshmemx_barrier_all_on_stream"),
        (lambda: nv.sync(), "nvshmem_team_sync"), (lambda: nv.sync(stream=3), "nvshmemx_team_sync_on_stream"),
        (lambda: nv.sync_all(), "nvshmem_sync_all"), (lambda: nv.sync_all(stream=3), "nvshmemx_sync_all_on_stream"),
        (lambda: nv.signal_op(sym(1, "uint64"), 1, 0), "nvshmemx_signal_op_on_stream"),
        (lambda: nv.signal_fetch(sym(1, "uint64")), "nvshmem_signal_fetch"),
        (lambda: nv.signal_wait_until(sym(1, "uint64"), "ge", 1), "nvshmemx_signal_wait_until_on_stream"),
        (lambda: nv.signal_counted_reset(sym(1, "uint64")), "nvshmemx_signal_counted_reset"),
    ]:
        fake.calls.clear()
        fn()
        assert fake.symbols() == [symbol]


def test_arguments_reach_c_in_table_order(fake):
    nv.put(sym(100), local(100), 3, nelems=10, stream=7, nbi=True)
    assert fake.last() == ("nvshmemx_float_put_nbi_on_stream", (SYM, LOCAL, 10, 3, 7))
    nv.put_signal(sym(100, "int64"), local(100, "int64"), sym2(1, "uint64"), 5, 2, op="add")
    assert fake.last() == ("nvshmemx_int64_put_signal_on_stream",
                           (SYM, LOCAL, 100, SYM2, 5, int(nv.SignalOp.SIGNAL_ADD), 2, 0))
    nv.broadcast(Team.TEAM_WORLD, sym(10, "complex128"), sym2(10, "complex128"), 3)
    assert fake.last() == ("nvshmem_broadcastmem", (0, SYM, SYM2, 160, 3))
    nv.iput(sym(20, strides=(8,), shape=(10,)), local(10), 1)
    assert fake.last() == ("nvshmem_float_iput", (SYM, LOCAL, 2, 1, 10, 1))
    nv.wait_until_all(sym(4, "int32"), ">=", 3, status=local(4, "int32"))
    assert fake.last() == ("nvshmemx_int32_wait_until_all_on_stream",
                           (SYM, 4, LOCAL, int(nv.Cmp.CMP_GE), 3, 0))
    nv.alltoall(Team.TEAM_WORLD, sym(32, "int8"), sym2(32, "int8"))
    assert fake.last() == ("nvshmem_int8_alltoall", (0, SYM, SYM2, 8))
    nv.reducescatter(Team.TEAM_WORLD, sym(8, "float64"), sym2(32, "float64"), "prod", stream=9)
    assert fake.last() == ("nvshmemx_double_prod_reducescatter_on_stream", (0, SYM, SYM2, 8, 9))
    nv.p(sym(1, "float16"), 0.5, 0)
    assert fake.last() == ("nvshmem_half_p", (SYM, 0.5, 0))


def test_stream_objects(fake):
    class CoreStream:
        def __cuda_stream__(self):
            return (0, 0xABC)

    class TorchStream:
        cuda_stream = 0xDEF

    class CupyStream:
        ptr = 0x123

    class NumbaStream:
        handle = ctypes.c_void_p(0x456)

    for stream, handle in [(CoreStream(), 0xABC), (TorchStream(), 0xDEF), (CupyStream(), 0x123),
                           (NumbaStream(), 0x456), (0x789, 0x789), (0, 0)]:
        nv.quiet(stream=stream)
        assert fake.last() == ("nvshmemx_quiet_on_stream", (handle,))
    with pytest.raises(TypeError, match="CUDA stream"):
        nv.quiet(stream=object())
    with pytest.raises(ValueError):
        nv.quiet(stream=-1)
    assert _cuda.stream_handle(None) == 0


# --------------------------------------------------------------------------- validation errors


def test_dtype_mismatch(fake):
    with pytest.raises(nv.NvshmemTypeError, match=r"put\(\): dtype mismatch: 'dst' is float32 but 'src' is int32"):
        nv.put(sym(), local(dtype="int32"), 0)
    with pytest.raises(nv.NvshmemTypeError, match="dtype mismatch"):
        nv.reduce(Team.TEAM_WORLD, sym(dtype="float64"), sym2(), "sum")
    with pytest.raises(nv.NvshmemTypeError, match="dtype mismatch"):
        nv.wait_until_all_vector(sym(4, "int32"), "eq", local(4, "int64"))
    assert not fake.calls


def test_size_checks(fake):
    with pytest.raises(nv.NvshmemArgumentError, match=r"nelems=40 needs 40 elements of 'src', which has only 32"):
        nv.put(sym(), local(), 0, nelems=40)
    with pytest.raises(nv.NvshmemArgumentError, match="'dst', which has only 8"):
        nv.get(local(8), sym(), 0)
    with pytest.raises(nv.NvshmemArgumentError):
        nv.put(sym(), local(), 0, nelems=2 ** 70)
    with pytest.raises(nv.NvshmemArgumentError, match=r"put\(\): argument .nelems. must be >= 0, got -1"):
        nv.put(sym(), local(), 0, nelems=-1)
    with pytest.raises(nv.NvshmemTypeError, match="argument .nelems. must be an int, not float"):
        nv.put(sym(), local(), 0, nelems=1.5)
    big = ALLOC // 4 + 1  # one float past the end of the allocation
    with pytest.raises(nv.NvshmemMemoryError, match="past the end of its symmetric allocation"):
        nv.put(sym(big), local(big), 0)
    with pytest.raises(nv.NvshmemArgumentError, match="from each of 4 PEs"):
        nv.fcollect(Team.TEAM_WORLD, sym(31), sym2(8))
    with pytest.raises(nv.NvshmemArgumentError, match="not a multiple of the team size 4"):
        nv.alltoall(Team.TEAM_WORLD, sym(30), sym2(30))
    with pytest.raises(nv.NvshmemArgumentError, match="for each of 4 PEs"):
        nv.reducescatter(Team.TEAM_WORLD, sym(8), sym2(31), "sum")
    with pytest.raises(nv.NvshmemArgumentError, match="stride 2 needs more than 'dst' holds"):
        nv.iput(sym(10), local(10), 0, dst_stride=2)
    with pytest.raises(nv.NvshmemArgumentError, match="positive"):
        nv.iput(sym(10), local(10), 0, dst_stride=0)
    with pytest.raises(nv.NvshmemArgumentError, match="contiguous"):
        nv.iput(sym(10, strides=(8,)), local(5), 0, dst_stride=2)
    assert not fake.calls


def test_symmetric_memory_checks(fake):
    with pytest.raises(nv.NvshmemMemoryError, match=r"put\(\): argument 'dst' is not symmetric memory"):
        nv.put(local(), local(), 0)
    with pytest.raises(nv.NvshmemMemoryError, match="argument 'src' is not symmetric"):
        nv.get(local(), local(), 0)
    with pytest.raises(nv.NvshmemMemoryError, match="'dst' is not symmetric"):
        nv.reduce(Team.TEAM_WORLD, local(), sym2(), "sum")
    with pytest.raises(nv.NvshmemMemoryError, match="'signal' is not symmetric"):
        nv.signal_op(local(1, "uint64"), 1, 0)
    symmetric._testing_unregister(fake.allocs[0])  # "free" the first allocation
    with pytest.raises(nv.NvshmemMemoryError, match="no longer valid: freed by nvshmem_dsl.free"):
        nv.put(sym(), local(), 0)
    with pytest.raises(nv.NvshmemMemoryError, match="no longer valid"):
        nv.put(sym2(), sym(), 0)  # freed memory as a local source too
    assert not nv.is_symmetric(sym()) and nv.is_symmetric(sym2())
    assert not nv.is_symmetric(object())
    assert not fake.calls


def test_pe_and_root_checks(fake):
    for bad in (4, -1, 100):
        with pytest.raises(nv.NvshmemArgumentError, match=rf"pe {bad} is out of range 0..3"):
            nv.put(sym(), local(), bad)
    with pytest.raises(nv.NvshmemTypeError, match="argument .pe. must be an int, not float"):
        nv.put(sym(), local(), 1.0)
    with pytest.raises(nv.NvshmemTypeError, match="not bool"):
        nv.g(sym(), True)
    with pytest.raises(nv.NvshmemArgumentError, match="root 4 is out of range"):
        nv.broadcast(Team.TEAM_WORLD, sym(), sym2(), 4)
    with pytest.raises(nv.NvshmemArgumentError, match="TEAM_INVALID"):
        nv.barrier(Team.TEAM_INVALID)
    with pytest.raises(nv.NvshmemTypeError, match="team must be"):
        nv.barrier("world")
    with pytest.raises(nv.NvshmemArgumentError, match="out of range"):
        nv.peer(sym(), 9)
    assert not fake.calls


def test_unsupported_dtypes_name_function_argument_and_accepted(fake):
    with pytest.raises(nv.NvshmemTypeError) as info:
        nv.reduce(Team.TEAM_WORLD, sym(dtype="bool"), sym2(dtype="bool"), "sum")
    text = str(info.value)
    assert "reduce(): argument 'dst' has dtype bool" in text and "sum_reduce" in text
    assert "accepted dtypes:" in text and "float32" in text and "bfloat16" in text
    with pytest.raises(nv.NvshmemTypeError, match=r"xor_reduce does not support.*accepted dtypes: (?!.*float)"):
        nv.reduce(Team.TEAM_WORLD, sym(), sym2(), "xor")
    with pytest.raises(nv.NvshmemTypeError, match="wait_until_on_stream does not support"):
        nv.wait_until(sym(1, "float32"), "eq", 1.0)
    with pytest.raises(nv.NvshmemTypeError, match=r"g\(\): argument 'src' has dtype complex64"):
        nv.g(sym(dtype="complex64"), 0)
    with pytest.raises(nv.NvshmemTypeError, match="atomic_and does not support"):
        nv.atomic_and(sym(1, "float32"), 1, 0)
    with pytest.raises(nv.NvshmemTypeError, match="uint64 .or int64. array"):
        nv.put_signal(sym(), local(), sym2(1, "int32"), 1, 0)
    assert not fake.calls


def test_value_and_option_checks(fake):
    with pytest.raises(nv.NvshmemArgumentError, match=r"value=300 does not fit int8 \(-128..127\)"):
        nv.p(sym(1, "int8"), 300, 0)
    with pytest.raises(nv.NvshmemArgumentError, match="does not fit uint64"):
        nv.signal_op(sym(1, "uint64"), -1, 0)
    with pytest.raises(nv.NvshmemTypeError, match="not an integer"):
        nv.p(sym(1, "int32"), 1.5, 0)
    with pytest.raises(nv.NvshmemTypeError, match="must be a number"):
        nv.p(sym(1, "float32"), "x", 0)
    with pytest.raises(nv.NvshmemArgumentError, match="unknown comparison"):
        nv.wait_until(sym(1, "int32"), "approx", 1)
    with pytest.raises(nv.NvshmemArgumentError, match="not a Cmp value"):
        nv.wait_until(sym(1, "int32"), 17, 1)
    with pytest.raises(nv.NvshmemArgumentError, match="unknown signal op"):
        nv.signal_op(sym(1, "uint64"), 1, 0, op="mul")
    with pytest.raises(nv.NvshmemArgumentError, match="unknown op 'mean'"):
        nv.reduce(Team.TEAM_WORLD, sym(), sym2(), "mean")
    with pytest.raises(nv.NvshmemArgumentError, match="not contiguous"):
        nv.put(sym(16, strides=(8,)), local(16), 0)
    with pytest.raises(nv.NvshmemArgumentError, match="status"):
        nv.wait_until_all(sym(4, "int32"), "eq", 1, status=local(2, "int32"))
    with pytest.raises(nv.NvshmemTypeError, match="int32 array"):
        nv.wait_until_all(sym(4, "int32"), "eq", 1, status=local(4, "int64"))
    assert not fake.calls
    # the accepted spellings
    nv.wait_until(sym(1, "int32"), nv.Cmp.CMP_LT, 1)
    nv.wait_until(sym(1, "int32"), "<", 1)
    nv.wait_until(sym(1, "int32"), "lt", 1)
    assert {c[1][1] for c in fake.calls} == {int(nv.Cmp.CMP_LT)}


def test_not_arrays(fake):
    with pytest.raises(nv.NvshmemTypeError, match="host .numpy. array"):
        nv.put(sym(), np.zeros(32, np.float32), 0)
    with pytest.raises(nv.NvshmemTypeError, match="must be a GPU array"):
        nv.put(sym(), [1.0, 2.0], 0)
    with pytest.raises(nv.NvshmemTypeError, match="malformed"):
        nv.put(sym(), types.SimpleNamespace(__cuda_array_interface__={"shape": None}), 0)


def test_host_atomics_refused_over_p2p(fake):
    fake.responses["nvshmem_ptr"] = 0x1000  # the target is reachable by load/store
    with pytest.raises(nv.NvshmemUnsupportedError, match="network transports"):
        nv.atomic_fetch_add(sym(1, "uint64"), 1, 2)
    fake.responses["nvshmem_ptr"] = 0  # a remote transport
    nv.atomic_fetch_add(sym(1, "uint64"), 1, 2)
    assert fake.last() == ("nvshmem_uint64_atomic_fetch_add", (SYM, 1, 2))
    nv.atomic_compare_swap(sym(1, "int32"), 3, 4, 0)
    assert fake.last() == ("nvshmem_int32_atomic_compare_swap", (SYM, 3, 4, 0))
    nv.atomic_compare_swap(sym(1, "int32"), pe=1, value=6, cond=5)
    assert fake.last() == ("nvshmem_int32_atomic_compare_swap", (SYM, 5, 6, 1))
    with pytest.raises(nv.NvshmemTypeError, match=r"atomic_add\(\): missing a required argument: 'pe'"):
        nv.atomic_add(sym(1, "int32"), 1)
    with pytest.raises(nv.NvshmemArgumentError, match="cond"):
        nv.atomic_compare_swap(sym(1, "int32"), 2**40, 4, 0)


def test_host_atomics_follow_the_spec():
    """The 14 host atomics are built from the spec (generated/host_api.py, not ops.json at
    import): the op table's parameter names and order (those of the device APIs), the spec's
    summary as docstring, the dtypes it lists."""
    import inspect
    import json

    from nvshmem_dsl.host import _atomics, _table, operations

    table = json.loads((Path(__file__).resolve().parents[1] / "generated" / "ops.json").read_text())
    apis = sorted({e["api"] for e in table["host"] if e["group"] == "amo"})
    assert len(apis) == 14 and apis == sorted(_atomics._AMO_APIS)
    for api in apis:
        fn = getattr(nv, api)
        entry = next(e for e in table["host"] if e["api"] == api)
        assert list(inspect.signature(fn).parameters) == [p["name"] for p in entry["params"]], api
        assert fn.__doc__.startswith(operations.AMO[api]["summary"]), api
        assert list(operations.AMO[api]["dtypes"]) == _table.accepted_numpy_names(api), api
        assert fn.__name__ == api


# --------------------------------------------------------------------------- memory


def test_registry():
    reg = symmetric._Registry()
    a = symmetric.Allocation(0x1000, 0x100, "fake")
    reg.add(a)
    with pytest.raises(nv.NvshmemMemoryError, match="overlaps"):
        reg.add(symmetric.Allocation(0x10F0, 0x100, "fake"))
    with pytest.raises(nv.NvshmemMemoryError, match="overlaps"):
        reg.add(symmetric.Allocation(0x0F00, 0x101, "fake"))
    b = symmetric.Allocation(0x1100, 0x10, "fake")
    reg.add(b)
    assert reg.containing(0x1000) is a and reg.containing(0x10FF) is a and reg.containing(0x1100) is b
    assert reg.containing(0x0FFF) is None and reg.containing(0x1110) is None
    reg.remove(a, "gone")
    assert reg.containing(0x1000) is None and reg.freed_reason(0x1010) == "gone" and a.freed == "gone"
    assert reg.live() == [b]


def test_memory_calls(fake):
    fake.responses["nvshmem_malloc"] = 0x7C0000000000
    b = nv.buffer(100, check=False)
    assert (b.ptr, b.nbytes) == (0x7C0000000000, 100) and nv.is_symmetric(b)
    assert fake.symbols() == ["nvshmem_malloc"] and fake.last() == ("nvshmem_malloc", (100,))
    live = nv.live_allocations()
    assert any(a["ptr"] == b.ptr and a["where"].startswith(__file__) for a in live)
    assert "100 B" in nv.leak_report()
    b.free()
    assert b.freed and not nv.is_symmetric(b)
    with pytest.raises(nv.NvshmemMemoryError, match="already freed|no longer valid"):
        b.free()
    fake.responses["nvshmem_align"] = 0x7C0000001000
    nv.buffer(64, align=4096, check=False).free()
    assert ("nvshmem_align", (4096, 64)) in fake.calls
    fake.responses["nvshmem_calloc"] = 0x7C0000002000
    nv.buffer(64, zero=True, check=False).free()
    assert ("nvshmem_calloc", (1, 64)) in fake.calls


@pytest.fixture
def no_size_check(monkeypatch):
    monkeypatch.setenv(memory.ENV_CHECK_SYMMETRY, "0")


def test_memory_argument_errors(fake, no_size_check):
    for bad in (0, -5):
        with pytest.raises(nv.NvshmemArgumentError, match="positive"):
            nv.buffer(bad)
    with pytest.raises(nv.NvshmemArgumentError, match="power of two"):
        nv.buffer(64, align=3)
    with pytest.raises(nv.NvshmemArgumentError, match="like='bogus'"):
        nv.array(4, like="bogus")
    with pytest.raises(nv.NvshmemArgumentError, match="no elements"):
        nv.array((0, 4), like="cupy")
    with pytest.raises(nv.NvshmemTypeError, match="unknown dtype"):
        nv.array(4, "notadtype", like="cupy")
    fake.responses["nvshmem_malloc"] = 0
    with pytest.raises(nv.NvshmemOutOfMemoryError, match="NVSHMEM_SYMMETRIC_SIZE"):
        nv.buffer(1 << 40)
    with pytest.raises(nv.NvshmemMemoryError, match="view into it"):
        nv.free(sym(offset=64))
    with pytest.raises(nv.NvshmemMemoryError, match="not a symmetric allocation"):
        nv.free(local())
    nv.free(sym())  # the whole allocation: fine
    with pytest.raises(nv.NvshmemMemoryError, match="no longer valid"):
        nv.free(sym())


def test_missing_array_library_is_a_clear_error(fake, no_size_check, monkeypatch):
    import importlib

    real = importlib.import_module

    def fake_import(name, *a, **k):
        if name in ("cupy", "torch"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake_import)
    fake.responses["nvshmem_malloc"] = 0x7C0000003000
    with pytest.raises(nv.NvshmemArgumentError, match="like='cupy' but cupy cannot be imported"):
        nv.array(4, like="cupy")
    assert "nvshmem_malloc" not in fake.symbols()  # refused before allocating


def test_peer_and_multicast(fake):
    fake.responses["nvshmem_ptr"] = 0
    with pytest.raises(nv.NvshmemMemoryError, match="not reachable by load/store"):
        nv.peer(sym(), 2)
    fake.responses["nvshmem_ptr"] = 0x7B0000000000
    view = nv.peer(sym(8, "int16"), 2)
    cai = view.__cuda_array_interface__
    assert cai["data"][0] == 0x7B0000000000 and cai["shape"] == (8,) and cai["typestr"] == "<i2"
    assert nv.peer_ptr(sym(), 3) == 0x7B0000000000
    with pytest.raises(nv.NvshmemMemoryError, match="not symmetric"):
        nv.peer(local(), 2)
    x = sym()
    assert nv.peer(x, 1) is x  # this PE
    fake.responses["nvshmemx_mc_ptr"] = 0
    with pytest.raises(nv.NvshmemMemoryError, match="multicast"):
        nv.multicast(sym())
    fake.responses["nvshmemx_mc_ptr"] = 0x7A0000000000
    assert nv.mc_ptr(sym(), Team.TEAM_WORLD) == 0x7A0000000000
    assert nv.multicast(sym()).__cuda_array_interface__["data"][0] == 0x7A0000000000


def test_register_external_checks(fake):
    gran = views.cumem_granularity()
    assert gran == 512 << 20
    with pytest.raises(nv.NvshmemArgumentError, match="granularity"):
        nv.register_external(FakeArray(LOCAL, 1000))
    fake.responses["nvshmemx_buffer_register_symmetric"] = 0
    big = FakeArray(0x600000000000, gran // 4)
    with pytest.raises(nv.NvshmemMemoryError, match="VMM"):
        nv.register_external(big)
    fake.responses["nvshmemx_buffer_register_symmetric"] = 0x500000000000
    y = nv.register_external(big)
    assert y.__cuda_array_interface__["data"][0] == 0x500000000000 and nv.is_symmetric(y)
    with pytest.raises(nv.NvshmemMemoryError, match="unregister_external"):
        nv.free(y)
    with pytest.raises(nv.NvshmemMemoryError, match="not registered"):
        nv.unregister_external(sym())
    nv.unregister_external(y)
    assert fake.last() == ("nvshmemx_buffer_unregister_symmetric", (0x500000000000, gran))
    assert not nv.is_symmetric(y)


def test_granularity_env(monkeypatch):
    for text, value in [("2M", 2 << 20), ("1g", 1 << 30), ("4096", 4096), ("512MiB", 512 << 20)]:
        monkeypatch.setenv("NVSHMEM_CUMEM_GRANULARITY", text)
        assert views.cumem_granularity() == value, text


# --------------------------------------------------------------------------- arrays


def test_describe_cai_layouts():
    info = _arrays.describe(FakeArray(0x1000, shape=(4, 8), dtype="float64", strides=(64, 8)))
    assert info.contiguous and info.strides is None and info.nbytes == 256 and info.size == 32
    t = _arrays.describe(FakeArray(0x1000, shape=(8, 4), dtype="float64", strides=(8, 64)))  # transposed
    assert not t.contiguous and t.span == (0x1000, 0x1000 + 256)
    s = _arrays.describe(FakeArray(0x1000, shape=(5,), dtype="int32", strides=(12,)))
    assert s.element_stride() == 3 and s.span == (0x1000, 0x1000 + 4 * 12 + 4)
    v = _arrays.describe(FakeArray(0x1000, 4, dtype="V2"))
    assert v.dtype == "V2" and v.itemsize == 2


def test_dtype_names():
    assert _arrays.dtype_name("float32") == "float32"
    assert _arrays.dtype_name(np.float16) == "float16"
    assert _arrays.dtype_name(np.dtype("uint64")) == "uint64"
    assert _arrays.dtype_name("bfloat16") == "bfloat16"
    TorchDtype = type("dtype", (), {"__module__": "torch", "__str__": lambda self: "torch.bfloat16"})
    assert _arrays.dtype_name(TorchDtype()) == "bfloat16"
    TorchFloat = type("dtype", (), {"__module__": "torch", "__str__": lambda self: "torch.float"})
    assert _arrays.dtype_name(TorchFloat()) == "float32"
    for _ in range(2):  # names are kept once parsed; an unknown one is refused every time
        with pytest.raises(nv.NvshmemTypeError, match="nonsense"):
            _arrays.dtype_name("nonsense")
    assert (_arrays.dtype_name("float"), _arrays.dtype_name("float")) == ("float64", "float64")
    assert _arrays.dtype_name("torch.half") == "float16"


def test_describe_cai_typestrs():
    def cai(typestr):
        return types.SimpleNamespace(__cuda_array_interface__={"data": (0x1000, False), "shape": (2,), "typestr": typestr})

    for _ in range(2):  # the second time from what the first one learnt
        assert (_arrays.describe(cai("<f4")).dtype, _arrays.describe(cai("<f4")).itemsize) == ("float32", 4)
        assert (_arrays.describe(cai("|V6")).dtype, _arrays.describe(cai("|V6")).itemsize) == ("V6", 6)
        with pytest.raises(nv.NvshmemTypeError, match="argument 'x' has an unknown typestr"):
            _arrays.describe(cai("<q9"), function="put", argument="x")


def test_describe_torch_like():
    class Device:
        type = "cuda"

    Tensor = type("Tensor", (), {"__module__": "torch"})
    t = Tensor()
    t.device, t.shape, t.dtype = Device(), (3, 4), "torch.bfloat16"
    t.data_ptr = lambda: 0x2000
    t.element_size = lambda: 2
    t.stride = lambda: (4, 1)
    info = _arrays.describe(t)
    assert (info.ptr, info.shape, info.dtype, info.itemsize, info.contiguous) == (0x2000, (3, 4), "bfloat16", 2, True)
    Device.type = "cpu"
    with pytest.raises(nv.NvshmemTypeError, match="CUDA tensor"):
        _arrays.describe(t)


def _dlpack_capsule(ptr, shape, code, bits, device_type=2):
    from nvshmem_dsl.host import _dlpack

    class Managed(ctypes.Structure):
        _fields_ = [("tensor", _dlpack.DLTensor), ("ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

    shape_arr = (ctypes.c_int64 * len(shape))(*shape)
    m = Managed()
    m.tensor.data = ptr
    m.tensor.device = _dlpack.DLDevice(device_type, 0)
    m.tensor.ndim = len(shape)
    m.tensor.dtype = _dlpack.DLDataType(code, bits, 1)
    m.tensor.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new(ctypes.addressof(m), b"dltensor", None)
    return capsule, (m, shape_arr)


def test_describe_dlpack():
    capsule, keep = _dlpack_capsule(0x3000, (2, 5), 4, 16)  # bfloat16 on CUDA
    obj = types.SimpleNamespace(__dlpack__=lambda: capsule)
    info = _arrays.describe(obj)
    assert (info.ptr, info.shape, info.dtype, info.itemsize, info.contiguous) == (0x3000, (2, 5), "bfloat16", 2, True)
    capsule, keep2 = _dlpack_capsule(0x3000, (4,), 2, 32, device_type=1)  # on the CPU
    with pytest.raises(nv.NvshmemTypeError, match="not on a CUDA device"):
        _arrays.describe(types.SimpleNamespace(__dlpack__=lambda: capsule))
    capsule, keep3 = _dlpack_capsule(0x3000, (4,), 3, 32)  # kDLOpaqueHandle: no dtype of ours
    with pytest.raises(nv.NvshmemTypeError, match="unsupported DLPack dtype"):
        _arrays.describe(types.SimpleNamespace(__dlpack__=lambda: capsule))


@pytest.mark.parametrize("dtype,itemsize", [("float32", 4), ("bfloat16", 2), ("bool", 1), ("uint8", 1),
                                            ("int64", 8), ("complex64", 8), ("float16", 2)])
def test_dlpack_view_is_read_back_as_written(dtype, itemsize):
    """What core's DLPack exporter writes (torch's peer tensors) is what the host's reader reads:
    one ABI and one table of element types between them."""
    from nvshmem_dsl.core.interop._dlpack import DLPackView

    view = DLPackView(0x4000, (3, 2), (1, 3), dtype, device_id=0)
    assert view.__dlpack_device__() == (2, 0)
    info = _arrays.describe(view)
    assert (info.ptr, info.shape, info.dtype, info.itemsize) == (0x4000, (3, 2), dtype, itemsize)
    assert info.strides == (itemsize, 3 * itemsize)  # elements written, bytes read
    with pytest.raises(TypeError, match="no DLPack type for dtype 'V4'"):
        DLPackView(0x4000, (1,), None, "V4", device_id=0).__dlpack__()


# --------------------------------------------------------------------------- teams


def test_team_calls(fake):
    def split(args):
        args[-1][0] = 9  # the new team handle
        return 0

    fake.responses["nvshmem_team_split_strided"] = split
    t = nv.split_strided(Team.TEAM_WORLD, 0, 2, 2)
    assert isinstance(t, nv.TeamHandle) and int(t) == 9
    symbol, args = fake.last()
    assert symbol == "nvshmem_team_split_strided" and args[:4] == (0, 0, 2, 2) and args[5] == 0
    fake.responses["nvshmem_team_split_strided"] = lambda args: 0  # leaves TEAM_INVALID: not a member
    assert nv.split_strided(Team.TEAM_WORLD, 1, 2, 2) is None
    fake.responses["nvshmem_team_split_strided"] = int(Status.ERROR_INVALID_VALUE)
    nv.reduce(t, sym(), sym2(), "sum")
    assert fake.last()[1][0] == 9
    t.destroy()
    assert fake.last() == ("nvshmem_team_destroy", (9,)) and t.destroyed
    with pytest.raises(nv.NvshmemStateError, match="destroyed"):
        nv.barrier(t)
    with pytest.raises(nv.NvshmemArgumentError, match="predefined"):
        nv.team_destroy(Team.TEAM_WORLD)
    with pytest.raises(nv.NvshmemArgumentError, match="empty"):
        nv.team_init([])
    with pytest.raises(nv.NvshmemArgumentError, match="repeat"):
        nv.team_init([0, 1, 0])
    with pytest.raises(nv.NvshmemArgumentError, match="out of range"):
        nv.team_init([0, 7])
    fake.responses["nvshmem_team_translate_pe"] = 3
    assert nv.translate_pe(Team.TEAM_WORLD, 3) == 3


def test_team_place_is_asked_once_per_team(fake):
    """my_pe / n_pes of a team are constant from its creation to its destruction: TEAM_WORLD's come
    from init, another team's are asked of NVSHMEM the first time only (per runtime)."""
    def asked():
        return [c for c in fake.symbols() if c in ("nvshmem_team_my_pe", "nvshmem_team_n_pes")]

    fake.responses.update(nvshmem_team_my_pe=1, nvshmem_team_n_pes=2)
    assert (nv.my_pe(), nv.n_pes(), nv.team_my_pe(Team.TEAM_WORLD), nv.team_n_pes(None)) == (1, 4, 1, 4)
    assert asked() == []
    assert (nv.team_my_pe(Team.TEAM_NODE), nv.team_n_pes(Team.TEAM_NODE), nv.team_n_pes(int(Team.TEAM_NODE))) == (1, 2, 2)
    assert asked() == ["nvshmem_team_my_pe", "nvshmem_team_n_pes"]
    nv.fcollect(Team.TEAM_NODE, sym(), sym2(), nelems=1)  # the team's size checks dst without asking again
    assert len(asked()) == 2

    def split(args):
        args[-1][0] = 9
        return 0

    fake.responses["nvshmem_team_n_pes"] = -1
    assert nv.team_n_pes(9) == -1  # not a team yet: not kept
    fake.responses.update(nvshmem_team_split_strided=split, nvshmem_team_n_pes=2)
    t = nv.split_strided(Team.TEAM_WORLD, 0, 2, 2)
    assert (t.n_pes(), t.n_pes()) == (2, 2) and len(asked()) == 6  # TEAM_NODE, 9 before, 9 now
    t.destroy()
    fake.responses["nvshmem_team_n_pes"] = 3
    assert nv.team_n_pes(9) == 3  # the handle may be another team's now: asked again
    with pytest.raises(nv.NvshmemArgumentError, match="TEAM_INVALID"):
        nv.team_n_pes(Team.TEAM_INVALID)
    with pytest.raises(nv.NvshmemTypeError, match="team_my_pe"):
        nv.team_my_pe("world")


def test_team_place_is_forgotten_with_the_runtime(monkeypatch):
    answers = iter([(0, 2), (1, 8)])
    now = {}

    def intercept(symbol, args):
        if symbol == "nvshmem_team_my_pe":
            now["place"] = next(answers)
            return now["place"][0]
        return now["place"][1]

    monkeypatch.setattr(_lib, "_interceptor", intercept)
    for expected in ((0, 2), (1, 8)):  # two runtimes, one after the other
        with _state.fake(n_pes=8):
            assert (nv.team_my_pe(Team.TEAM_NODE), nv.team_n_pes(Team.TEAM_NODE)) == expected
    with pytest.raises(nv.NvshmemStateError, match="team_n_pes"):
        nv.team_n_pes(Team.TEAM_NODE)


def test_team_config_struct():
    cfg, mask = teams._new_config(4, 0x1234)
    assert cfg.version == STRUCT_VERSIONS["nvshmem_team_config_t"]
    assert (cfg.num_contexts, cfg.uniqueid, mask) == (4, 0x1234, teams.CONFIG_MASK_NUM_CONTEXTS | teams.CONFIG_MASK_UNIQUEID)
    cfg, mask = teams._new_config(None, None)
    assert (cfg.num_contexts, cfg.uniqueid, mask) == (-1, 0xFFFFFFFFFFFFFFFF, 0)


# --------------------------------------------------------------------------- module init


def test_a_dsl_unloading_a_library_finalizes_every_reference(fake):
    # NVSHMEM4Py's CuTe tests: library_init on cute.compile's library, CuTe unloads it on garbage
    # collection, the test's library_finalize at teardown; NVSHMEM must have dropped it before the unload
    h = 0x5A5A
    nv.culibrary_init(h)  # the DSL's hook
    nv.culibrary_init(h)  # the program's
    module_init._dsl_library_finalize(h)  # the DSL unloads it
    assert fake.symbols().count("nvshmemx_culibrary_finalize") == 1 and module_init.refcount(h) == 0
    module_init._dsl_library_finalize(h)  # unknown now: nothing
    module_init._dsl_library_finalize(0x1234)
    assert fake.symbols().count("nvshmemx_culibrary_finalize") == 1
    import nvshmem_dsl.core as core
    core.library_finalize(core.NvshmemKernelObject.from_handle(h))  # NVSHMEM4Py's teardown: a no-op
    assert fake.symbols().count("nvshmemx_culibrary_finalize") == 1
    nv.cumodule_init(h)
    module_init._dsl_module_finalize(h)
    assert fake.last() == ("nvshmemx_cumodule_finalize", (h,)) and module_init.refcount(h, "cumodule") == 0


def test_cute_unload_callback_passes_on_libraries_it_did_not_initialise(monkeypatch):
    from nvshmem_dsl.cute import _compile
    seen = []
    monkeypatch.setattr(_compile, "_finalize_hook", seen.append)
    monkeypatch.setattr(_compile, "_initialized", {0x10})
    _compile._on_library_unload(0x10)
    _compile._on_library_unload(0x20)  # library_init'ed by the program (core), not by the init hook
    assert seen == [0x10, 0x20] and _compile._initialized == set()


def test_module_init_refcount(fake, monkeypatch):
    h = 0x5555
    assert nv.culibrary_init(h) == 1
    assert nv.culibrary_init(types.SimpleNamespace(handle=h)) == 2  # same handle through .handle
    assert [s for s in fake.symbols()] == ["nvshmemx_culibrary_init"]
    assert module_init.refcount(h) == 2
    assert nv.culibrary_finalize(ctypes.c_void_p(h)) == 1
    assert "nvshmemx_culibrary_finalize" not in fake.symbols()
    assert nv.culibrary_finalize(h) == 0
    assert fake.symbols().count("nvshmemx_culibrary_finalize") == 1
    with pytest.raises(nv.NvshmemStateError, match="not initialised"):
        nv.culibrary_finalize(h)
    nv.cumodule_init(h)  # modules and libraries are counted apart
    assert fake.last() == ("nvshmemx_cumodule_init", (h,))
    nv.cumodule_finalize(h)
    fake.responses["nvshmemx_culibrary_init"] = int(Status.ERROR_INVALID_VALUE)
    with pytest.raises(nv.NvshmemStatusError, match="nvshmemx_culibrary_init.*ERROR_INVALID_VALUE"):
        nv.culibrary_init(0x6666)
    assert module_init.refcount(0x6666) == 0
    # a library without NVSHMEM code: NVSHMEM's error is explained
    monkeypatch.setattr(module_init._cuda, "library_uses_nvshmem", lambda handle: handle != 0x7777)
    with pytest.raises(nv.NvshmemArgumentError, match="0x7777 holds no NVSHMEM device state"):
        nv.culibrary_init(0x7777)
    with pytest.raises(nv.NvshmemStatusError):
        nv.culibrary_init(0x8888)
    with pytest.raises(ValueError):
        nv.culibrary_init(0)


def test_module_init_runs_with_the_devices_context(fake, monkeypatch):
    """A thread with no current context (CuTe leaves one so after some kernels) gets the device's
    primary context pushed around NVSHMEM's module init and finalize, then popped; a current
    context is used as it is. Without it nvshmemx_culibrary_init fails with
    CUDA_ERROR_INVALID_CONTEXT and the kernel reads an empty device state
    (tests/gpu/records/2026-11-25/h200-cute-context-illegal-address.txt)."""
    events = []
    current = {"ctx": 0}

    class Driver:
        def cuCtxGetCurrent(self):
            return (0, current["ctx"])

        def cuDeviceGet(self, i):
            events.append(("device", i))
            return (0, 100 + i)

        def cuDevicePrimaryCtxRetain(self, dev):
            events.append(("retain", dev))
            return (0, 0xC7)

        def cuCtxPushCurrent(self, ctx):
            events.append(("push", ctx))
            return (0,)

        def cuCtxPopCurrent(self):
            events.append(("pop",))
            return (0, 0xC7)

        def cuDevicePrimaryCtxRelease(self, dev):
            events.append(("release", dev))
            return (0,)

    monkeypatch.setattr(module_init._cuda, "driver", lambda: Driver())
    monkeypatch.setattr(_state.STATE, "device_id", 3)
    monkeypatch.setattr(_lib, "_interceptor", lambda symbol, args: events.append((symbol,)) or 0)
    nv.culibrary_init(0x4242)
    assert events == [("device", 3), ("retain", 103), ("push", 0xC7), ("nvshmemx_culibrary_init",), ("pop",),
                      ("release", 103)]
    events.clear()
    current["ctx"] = 0xABC  # a context is current: left as it is
    nv.culibrary_finalize(0x4242)
    assert events == [("nvshmemx_culibrary_finalize",)]


def test_install_dsl_hooks(monkeypatch):
    got = {}
    numba_stub = types.SimpleNamespace(hooks=ModuleHooks("CUlibrary"))
    cute_stub = types.SimpleNamespace(set_module_init_hook=lambda fn: got.setdefault("cute_init", fn),
                                      set_module_finalize_hook=lambda fn: got.setdefault("cute_fin", fn))
    monkeypatch.setitem(sys.modules, "nvshmem_dsl.numba._linker", numba_stub)
    monkeypatch.setitem(sys.modules, "nvshmem_dsl.cute._compile", cute_stub)
    monkeypatch.delitem(sys.modules, "nvshmem_dsl.triton._compile", raising=False)
    assert nv.install_dsl_hooks() == {"numba": True, "cute": True, "triton": False}
    assert numba_stub.hooks.init == [module_init.library_init] and got["cute_init"] is module_init.library_init
    assert numba_stub.hooks.finalize == [module_init._dsl_library_finalize]
    got["cute_fin"](0x777)  # a handle never initialised: tolerated
    removed = []
    cute_stub._init_hook, cute_stub._finalize_hook = got["cute_init"], got["cute_fin"]
    cute_stub.set_module_init_hook = lambda fn: removed.append(("cute", fn))
    cute_stub.set_module_finalize_hook = lambda fn: removed.append(("cute_fin", fn))
    module_init.uninstall_dsl_hooks()  # what finalize does
    assert numba_stub.hooks.init == [] and numba_stub.hooks.finalize == []
    assert removed == [("cute", None), ("cute_fin", None)]
    monkeypatch.delitem(sys.modules, "nvshmem_dsl.numba._linker")
    monkeypatch.delitem(sys.modules, "nvshmem_dsl.cute._compile")
    assert nv.install_dsl_hooks() == {"numba": False, "cute": False, "triton": False}


# --------------------------------------------------------------------------- public API


def test_public_api():
    for name in nv.__all__:
        assert hasattr(nv, name), name
    assert nv.Team.TEAM_WORLD == 0 and nv.SignalOp.SIGNAL_SET == 9 and nv.Cmp.CMP_EQ == 0
    assert set(nv.REDUCE_OPS) == {e["op"] for e in table()["host"] if e["family"] == "reduce"}
    assert nv.session is nv.init


def test_layer_imported_after_init_gets_the_hooks():
    pytest.importorskip("numba.cuda")
    code = textwrap.dedent("""
        from nvshmem_dsl.host import _state
        from nvshmem_dsl.linker import module_init
        with _state.fake(n_pes=1):
            import nvshmem_dsl.numba
            from nvshmem_dsl.numba import _linker
            hooked = module_init.library_init in _linker.hooks.init
            module_init.on_finalize()
            print(hooked, module_init.library_init in _linker.hooks.init)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True False"


def test_exit_without_finalize_names_the_pe(monkeypatch, capsys):
    """The message at exit names this PE (read before finalizing resets it)."""
    from nvshmem_dsl.host import _init, _state

    def finalize(report):
        _state.STATE.initialized, _state.STATE.my_pe = False, -1
        return ""

    monkeypatch.setattr(_init, "_finalize_locked", finalize)
    with _state.fake(n_pes=4, my_pe=3):
        _state.STATE.fake = False  # as a real run: fake() restores the state when the block ends
        _init._atexit()
    assert not _state.STATE.initialized and not _state.STATE.fake
    assert "nvshmem_dsl: PE 3: finalize() was not called; finalized at exit" in capsys.readouterr().err
