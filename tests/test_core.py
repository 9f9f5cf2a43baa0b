"""nvshmem_dsl.core, NVSHMEM4Py's surface over nvshmem_dsl, on a CPU.

* the surface: NVSHMEM4Py's names, parameters and defaults (as its package has them), enums;
* host calls reach the right NVSHMEM calls with the right arguments, in a fake world where the
  C library is intercepted (tests/nvshmem4py_world.py; as tests/test_host_cpu.py does);
* the device modules: NVSHMEM4Py's names, kernels compiled to PTX;
* the opt-in alias (``import nvshmem.core`` -> nvshmem_dsl.core) and the launcher's flag;
* the seed programs, ported (examples/nvshmem4py/): each differs from its original only in
  imports and in lines marked ``PORT:``, and each runs here against the fake world, its kernels
  compiled to PTX.  tests/gpu/test_core_gpu.py runs them on GPUs.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import logging
import os
import runpy
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

import nvshmem_dsl
import nvshmem_dsl.core as nvshmem
from nvshmem_dsl.host import _state
from nvshmem_dsl.core import _tracking
from nvshmem_dsl.core.nvshmem_types import NvshmemError, NvshmemInvalid

from nvshmem4py_world import (
    HEAP, MC_SHIFT, PEER_SHIFT, FakeDevice, FakeStream, World, close, compile_cute_launches,
)

ROOT = Path(__file__).resolve().parent.parent
PORTS = ROOT / "examples" / "nvshmem4py"
ENV = {k: v for k, v in os.environ.items() if not k.startswith("NVSHMEM_DSL_")}


# --------------------------------------------------------------------------- the surface

#: NVSHMEM4Py's host functions and their parameters, in order, as its package (nvshmem.core,
#: NVIDIA/nvshmem nvshmem4py/) defines them
REAL = {
    "init": "device uid rank nranks mpi_comm initializer_method", "finalize": "", "get_version": "",
    "get_unique_id": "empty", "module_init": "mod", "module_finalize": "mod", "library_init": "lib",
    "library_finalize": "lib",
    "buffer": "size release except_on_del", "free": "buffer", "get_peer_buffer": "buffer pe",
    "get_multicast_buffer": "team buffer", "register_external_buffer": "buffer", "unregister_external_buffer": "buffer",
    "array": "shape dtype release morder", "bytearray": "shape dtype release device_id morder", "free_array": "array",
    "array_get_buffer": "array", "get_peer_array": "array peer_pe", "get_multicast_array": "team array",
    "tensor": "shape dtype release morder except_on_del", "bytetensor": "shape dtype release morder except_on_del",
    "free_tensor": "tensor", "tensor_get_buffer": "tensor", "get_peer_tensor": "tensor peer_pe",
    "get_multicast_tensor": "team tensor", "register_external_tensor": "tensor", "unregister_external_tensor": "tensor",
    "my_pe": "", "n_pes": "", "team_my_pe": "team", "team_n_pes": "team", "init_status": "",
    "reduce": "team dst_array src_array op stream", "reducescatter": "team dst_array src_array op stream",
    "alltoall": "team dst_array src_array stream", "fcollect": "team dst_array src_array stream",
    "broadcast": "team dst_array src_array root stream", "barrier": "team stream", "sync": "team stream",
    "barrier_all": "stream", "sync_all": "stream",
    "collective_on_buffer": "coll team dest src dtype op root stream enable_timing",
    "put_signal": "dst src signal_var signal_val signal_op remote_pe stream",
    "signal_op": "signal_var signal_val signal_op remote_pe stream",
    "signal_wait": "signal_var signal_val signal_op stream", "put": "dst src remote_pe stream",
    "get": "dst src remote_pe stream", "quiet": "stream",
    "team_split_strided": "parent_team start stride size config config_mask new_team_name",
    "team_split_2d": "parent_team xrange xaxis_config xaxis_mask yaxis_config yaxis_mask new_team_name",
    "team_destroy": "team", "team_init": "team_config config_mask npes pe_idx_in_team new_team_name",
    "team_translate_pe": "src_team src_pe dest_team", "get_team_unique_id": "",
    "atomic_fetch": "target remote_pe offset dtype", "atomic_set": "target value remote_pe offset dtype",
    "atomic_inc": "target remote_pe offset dtype", "atomic_fetch_add": "target value remote_pe offset dtype",
    "atomic_compare_swap": "target cond value remote_pe offset dtype",
}
DEFAULTS = {("put", "remote_pe"): -1, ("put_signal", "remote_pe"): -1, ("array", "dtype"): "float32",
            ("array", "morder"): "C", ("broadcast", "root"): 0, ("get_peer_array", "peer_pe"): None,
            ("get_unique_id", "empty"): False, ("init", "initializer_method"): "", ("reduce", "stream"): None,
            ("team_split_strided", "new_team_name"): None, ("atomic_fetch", "offset"): 0}
#: the names in NVSHMEM4Py's nvshmem.core.__all__ (and the enums and classes it exports)
REAL_ALL = set(REAL) | {
    "UniqueID", "Version", "NvshmemInvalid", "NvshmemError", "NvshmemResource", "NvshmemStream",
    "NvshmemStreamsType", "MutableEnum", "Teams", "BufferTypes", "NvshmemKernelObject", "ComparisonType",
    "SignalOp", "InitStatus", "TeamConfig", "TeamUniqueId", "atomic_fetch_inc", "atomic_and", "atomic_fetch_and",
    "atomic_or", "atomic_fetch_or", "atomic_xor", "atomic_fetch_xor", "atomic_swap", "atomic_add",
}


def test_host_surface_has_nvshmem4py_names_and_parameters():
    assert REAL_ALL <= set(nvshmem.__all__), REAL_ALL - set(nvshmem.__all__)
    for name in nvshmem.__all__:
        assert hasattr(nvshmem, name), name
    for name, params in REAL.items():
        sig = inspect.signature(getattr(nvshmem, name))
        ours = [p.name for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD][:len(params.split())]
        assert ours == params.split(), (name, ours)
    for (name, param), default in DEFAULTS.items():
        assert inspect.signature(getattr(nvshmem, name)).parameters[param].default == default, (name, param)
    # what the seeds pass on top of NVSHMEM4Py's package: init(dev=, stream=), finalize(dev=, stream=)
    assert {"dev", "stream"} <= set(inspect.signature(nvshmem.init).parameters)
    assert {"dev", "stream"} <= set(inspect.signature(nvshmem.finalize).parameters)


def test_enums_and_types():
    T = nvshmem.Teams
    assert (T.TEAM_INVALID, T.TEAM_WORLD, T.TEAM_SHARED, T.TEAM_NODE, T.TEAM_SAME_MYPE_NODE, T.TEAM_SAME_GPU,
            T.TEAM_GPU_LEADERS, T.TEAMS_MIN, T.TEAM_INDEX_MAX) == (-1, 0, 1, 2, 3, 4, 5, 6, 32767)
    assert type(T.TEAM_WORLD) is int and "TEAM_NODE" in T and T["TEAM_NODE"] == 2
    assert int(nvshmem.SignalOp.SIGNAL_SET) == 9 and int(nvshmem.SignalOp.SIGNAL_ADD) == 10
    assert [c.name for c in nvshmem.ComparisonType] == ["CMP_EQ", "CMP_NE", "CMP_GT", "CMP_LE", "CMP_LT", "CMP_GE"]
    assert nvshmem.BufferTypes.PEER == 1 and nvshmem.InitStatus.STATUS_IS_INITIALIZED == 2
    assert issubclass(nvshmem.NvshmemInvalid, nvshmem_dsl.NvshmemError)
    assert nvshmem.NvshmemError("x").msg == "x"
    assert nvshmem.core is nvshmem  # the tutorial's nvshmem.core.X with nvshmem = nvshmem.core
    with pytest.raises(RuntimeError, match="cannot be instantiated"):
        nvshmem.NvshmemKernelObject()
    assert nvshmem.NvshmemKernelObject.from_handle(0x1234).handle == 0x1234
    uid = nvshmem.UniqueID(bytes(range(128)))
    import pickle

    assert pickle.loads(pickle.dumps(uid)) == uid and bytes(uid) == bytes(range(128))
    assert uid._data.dtype == np.uint8 and uid._data.flags.writeable


def test_import_is_light_and_installs_nothing():
    code = ("import sys, nvshmem_dsl.core; heavy = [m for m in ('cupy', 'torch', 'numba', 'cutlass') "
            "if m in sys.modules]; print(heavy, 'nvshmem' in sys.modules, any('alias' in repr(f) for f in sys.meta_path))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=ENV)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] False False"


def test_use_before_init_raises_nvshmem_invalid():
    assert not nvshmem_dsl.is_initialized()
    for call in (lambda: nvshmem.buffer(16), lambda: nvshmem.array((2,)), lambda: nvshmem.my_pe(),
                 lambda: nvshmem.team_split_strided(0, 0, 1, 1, None, 0), lambda: nvshmem.finalize()):
        with pytest.raises(NvshmemInvalid, match="not init"):
            call()


# --------------------------------------------------------------------------- host calls, fake world


@pytest.fixture
def world(monkeypatch):
    monkeypatch.setenv("NVSHMEM_DSL_CHECK_SYMMETRY", "0")
    w = World(monkeypatch)
    yield w
    close(w)


@pytest.fixture
def up(world):
    """The fake world, initialised as PE 0 of 2 (uid method), on device 0."""
    nvshmem.init(device=FakeDevice(0), uid=nvshmem.get_unique_id(), rank=0, nranks=2, initializer_method="uid")
    world.stream = FakeStream()
    world.calls.clear()
    return world


def _last(world, part):
    calls = world.calls_of(part)
    assert calls, f"no call of {part}: {world.symbols()}"
    return calls[-1]


def test_init_methods(world, monkeypatch):
    from mpi4py import MPI

    nvshmem.init(dev=FakeDevice(1), mpi_comm=MPI.COMM_WORLD, initializer_method="mpi", stream=FakeStream())
    assert world.bootstraps[-1]["comm"] is MPI.COMM_WORLD and world.bootstraps[-1]["mode"] == "mpi"
    assert _state.STATE.device_id == 1 and (nvshmem.my_pe(), nvshmem.n_pes()) == (0, 2)
    assert "nvshmemx_hostlib_init_attr" in world.symbols()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nvshmem.finalize(dev=FakeDevice(1), stream=FakeStream())
    assert world.symbols()[-1] == "nvshmemx_hostlib_finalize"
    # a one-rank COMM_WORLD in a job of nvshmem_dsl.run: the launcher's ranks
    monkeypatch.setenv("NVSHMEM_DSL_BOOTSTRAP", "launcher")
    monkeypatch.setenv("NVSHMEM_DSL_NRANKS", "2")
    nvshmem.init(initializer_method="mpi")
    assert world.bootstraps[-1]["comm"] is None and world.bootstraps[-1]["mode"] == "launcher"
    nvshmem.finalize()
    uid = nvshmem.get_unique_id()
    assert world.symbols()[-1] == "nvshmemx_get_uniqueid" and nvshmem.get_unique_id(empty=True) == nvshmem.UniqueID()
    nvshmem.init(uid=uid, rank=0, nranks=2, initializer_method="uid")
    assert world.bootstraps[-1]["nranks"] == 2 and world.bootstraps[-1]["uid"] == bytes(uid)
    nvshmem.init(uid=uid, rank=0, nranks=2, initializer_method="uid")  # a nested init counts, as NVSHMEM4Py's
    nvshmem.finalize()
    assert _state.STATE.initialized and world.symbols()[-1] != "nvshmemx_hostlib_finalize"
    nvshmem.finalize()
    assert world.symbols()[-1] == "nvshmemx_hostlib_finalize"


@pytest.mark.parametrize("kwargs, message", [
    ({}, "Invalid init method requested"),
    ({"initializer_method": "pmi"}, "initializer_method='pmi'"),
    ({"initializer_method": "uid", "rank": 0, "nranks": 2}, "UID based init"),
    ({"initializer_method": "mpi", "mpi_comm": object()}, "mpi_comm"),
    ({"initializer_method": "mpi", "device": 0, "dev": 1}, "not both"),
])
def test_init_argument_errors(world, kwargs, message):
    with pytest.raises(NvshmemInvalid, match=message):
        nvshmem.init(**kwargs)
    assert not nvshmem_dsl.is_initialized() and "nvshmemx_hostlib_init_attr" not in world.symbols()


def test_buffers(up):
    from cuda.core import Buffer

    buf = nvshmem.buffer(4096)
    assert isinstance(buf, Buffer) and buf.size == 4096
    assert ("nvshmem_malloc", (4096,)) in up.calls and int(buf.handle) >= HEAP
    ptr = int(buf.handle)
    peer = nvshmem.get_peer_buffer(buf, 1)
    assert int(peer.handle) == ptr + 2 * PEER_SHIFT and peer.size == 4096
    assert nvshmem.get_peer_buffer(buf, 1) is peer
    nvshmem.free(peer)  # a peer buffer: no-op
    assert "nvshmem_free" not in up.symbols()
    with pytest.raises(NvshmemError, match="multicast"):
        nvshmem.get_multicast_buffer(nvshmem.Teams.TEAM_WORLD, buf)
    up.multicast = True
    assert int(nvshmem.get_multicast_buffer(nvshmem.Teams.TEAM_NODE, buf).handle) == ptr + MC_SHIFT
    assert _last(up, "nvshmemx_mc_ptr")[1] == (2, ptr)
    nvshmem.free(buf)
    assert up.calls_of("nvshmem_free") == [("nvshmem_free", (ptr,))] and buf.is_closed
    with pytest.raises(NvshmemError, match="not tracked"):
        nvshmem.free(buf)
    with pytest.raises(NvshmemInvalid, match="cuda.core Buffer"):
        nvshmem.free(np.zeros(4))


def test_arrays(up):
    cp = up.cupy
    arr = nvshmem.array((2, 3), dtype="float32")
    assert isinstance(arr, cp.ndarray) and arr.shape == (2, 3) and arr.dtype == np.float32
    arr[:] = 7
    assert (arr.get() == 7).all()
    buf, size, dtype = nvshmem.array_get_buffer(arr)
    assert (int(buf.handle), buf.size, size, dtype) == (arr.data.ptr, 24, 24, "float32")
    fortran = nvshmem.array((2, 3), dtype=np.int64, morder="F")
    assert fortran.shape == (2, 3) and fortran.strides == (8, 16)
    assert nvshmem.bytearray((5,), dtype="float64").dtype == np.int8  # dtype ignored, as in NVSHMEM4Py
    with pytest.raises(NvshmemInvalid, match="memory order"):
        nvshmem.array((2,), morder="X")
    # a peer view and this PE's own "peer": freeing the view is a no-op; the allocation goes
    # with the last of its two handles
    view = nvshmem.get_peer_array(arr, 1)
    assert view.data.ptr == arr.data.ptr + 2 * PEER_SHIFT and view.shape == (2, 3)
    assert nvshmem.get_peer_array(arr, 0) is arr
    nvshmem.free_array(view)
    nvshmem.free_array(arr)
    assert "nvshmem_free" not in up.symbols()
    ptr = arr.data.ptr
    nvshmem.free_array(arr)
    assert up.calls_of("nvshmem_free") == [("nvshmem_free", (ptr,))] and buf.is_closed
    with pytest.raises(NvshmemInvalid, match="not tracked"):
        nvshmem.free_array(cp.ones((3,), np.float32))


def test_tensors_and_the_seed004_free_pattern(up, caplog):
    torch = up.torch
    local = nvshmem.tensor((4, 8), dtype=torch.float32)
    assert isinstance(local, torch.Tensor) and local.shape == (4, 8) and str(local.dtype) == "torch.float32"
    default = nvshmem.tensor((2,), dtype=None)
    assert default.dtype is torch.float32  # torch's default dtype
    nvshmem.free_tensor(default)
    up.calls.clear()
    peers = [nvshmem.get_peer_tensor(local, pe) for pe in range(2)]
    assert peers[0] is local
    # NVSHMEM4Py's peer tensors are on this PE's device (it makes them through DLPack), not the peer's
    assert peers[1].data_ptr() == local.data_ptr() + 2 * PEER_SHIFT and peers[1].device.index == 0
    buf, size, dtype = nvshmem.tensor_get_buffer(local)
    assert (int(buf.handle), size, dtype) == (local.data_ptr(), 128, "torch.float32")
    for t in peers:  # seed 004: frees the peers' views and this PE's handle, never `local` itself
        nvshmem.free_tensor(t)
    assert "nvshmem_free" not in up.symbols()
    with caplog.at_level(logging.ERROR, logger="nvshmem"):
        nvshmem.finalize()
    frees = [c[1][0] for c in up.calls_of("nvshmem_free")]
    assert local.data_ptr() in frees  # freed at finalize, silently (free() was called on it)
    assert "not freed" not in caplog.text
    assert up.symbols()[-1] == "nvshmemx_hostlib_finalize"


def test_never_freed_memory_is_freed_at_finalize_with_an_error_log(up, caplog):
    arr = nvshmem.array((4,), dtype="int32")
    with caplog.at_level(logging.ERROR, logger="nvshmem"), warnings.catch_warnings():
        warnings.simplefilter("error")  # no NvshmemLeakWarning: freed here, as NVSHMEM4Py does
        nvshmem.finalize()
    assert f"0x{arr.data.ptr:x}" in caplog.text and "not freed explicitly" in caplog.text
    assert ("nvshmem_free", (arr.data.ptr,)) in up.calls


def test_external_registration(up):
    cp = up.cupy
    gran = 512 << 20
    vmm = cp.from_dlpack(types.SimpleNamespace(handle=up.new_local(gran), size=gran)).view("float32")
    reg = nvshmem.register_external_array(vmm)
    symbol, args = _last(up, "nvshmemx_buffer_register_symmetric")
    assert args == (vmm.data.ptr, gran, 0) and reg.data.ptr != vmm.data.ptr and reg.shape == vmm.shape
    nvshmem.unregister_external_array(vmm)  # the tutorial passes the original array
    assert _last(up, "nvshmemx_buffer_unregister_symmetric")[1] == (reg.data.ptr, gran)
    from cuda.core import Buffer

    raw = Buffer.from_handle(up.new_local(gran), gran, owner=vmm)
    rbuf = nvshmem.register_external_buffer(raw)
    with pytest.raises(NvshmemError, match="unregister"):
        nvshmem.free(rbuf)
    nvshmem.unregister_external_buffer(rbuf)
    assert _last(up, "nvshmemx_buffer_unregister_symmetric")[1] == (int(rbuf.handle), gran)
    with pytest.raises(NvshmemError, match="not tracked"):
        nvshmem.unregister_external_buffer(rbuf)


def test_rma_and_signals(up):
    s, h = up.stream, up.stream.handle
    dst = nvshmem.array((16,), dtype="float32")
    src = nvshmem.array((8,), dtype="float32")
    nvshmem.put(dst, src, remote_pe=1, stream=s)
    assert _last(up, "_put_on_stream") == ("nvshmemx_uint8_put_on_stream", (dst.data.ptr, src.data.ptr, 32, 1, h))
    nvshmem.get(src, dst, 1, s)
    assert _last(up, "_get_on_stream")[1] == (src.data.ptr, dst.data.ptr, 32, 1, h)
    with pytest.raises(NotImplementedError, match="stream"):
        nvshmem.put(dst, src, remote_pe=1)
    with pytest.raises(TypeError, match="stream"):  # the tutorial's put(dst, src, size, pe, stream=)
        nvshmem.put(dst, src, 10, 1, stream=s)
    with pytest.raises(NvshmemInvalid, match="out of range"):
        nvshmem.put(dst, src, stream=s)  # remote_pe defaults to -1, as in NVSHMEM4Py
    signal = nvshmem.array((1,), dtype="uint64")
    sig, _, _ = nvshmem.array_get_buffer(signal)
    nvshmem.put_signal(dst, src, sig, 1, nvshmem.SignalOp.SIGNAL_SET, remote_pe=1, stream=s)
    assert _last(up, "put_signal_on_stream")[1] == (dst.data.ptr, src.data.ptr, 32, signal.data.ptr, 1, 9, 1, h)
    nvshmem.signal_wait(sig, 1, nvshmem.ComparisonType.CMP_GE, stream=s)
    assert _last(up, "signal_wait_until_on_stream")[1] == (signal.data.ptr, 5, 1, h)
    nvshmem.signal_op(sig, 3, nvshmem.SignalOp.SIGNAL_ADD, remote_pe=1, stream=s)
    assert _last(up, "signal_op_on_stream")[1] == (signal.data.ptr, 3, 10, 1, h)
    nvshmem.quiet(stream=s)
    assert _last(up, "quiet")[1] == (h,)
    with pytest.raises(NvshmemInvalid, match="Signal must be a Buffer >= 8 bytes"):
        nvshmem.put_signal(dst, src, nvshmem.buffer(4), 1, nvshmem.SignalOp.SIGNAL_SET, remote_pe=1, stream=s)
    with pytest.raises(NvshmemInvalid, match="Buffer, a CuPy array or a torch tensor"):
        nvshmem.put(dst, "nope", remote_pe=1, stream=s)


def test_collectives(up):
    s, h = up.stream, up.stream.handle
    world = nvshmem.Teams.TEAM_WORLD
    a10 = nvshmem.array((10,), dtype="float32")
    b10 = nvshmem.array((10,), dtype="float32")
    a20 = nvshmem.array((20,), dtype="float32")
    a5 = nvshmem.array((5,), dtype="float32")
    nvshmem.reduce(world, b10, a10, "sum", stream=s)
    assert _last(up, "reduce_on_stream") == ("nvshmemx_float_sum_reduce_on_stream", (0, b10.data.ptr, a10.data.ptr, 10, h))
    nvshmem.reducescatter(world, a5, a10, "max", stream=s)
    assert _last(up, "reducescatter_on_stream") == ("nvshmemx_float_max_reducescatter_on_stream",
                                                   (0, a5.data.ptr, a10.data.ptr, 5, h))
    nvshmem.fcollect(world, a20, a10, stream=s)
    assert _last(up, "fcollect_on_stream")[1] == (0, a20.data.ptr, a10.data.ptr, 10, h)
    nvshmem.alltoall(world, b10, a10, stream=s)
    assert _last(up, "alltoall_on_stream")[1] == (0, b10.data.ptr, a10.data.ptr, 5, h)  # 10 over 2 PEs
    nvshmem.broadcast(world, b10, a10, 1, stream=s)
    assert _last(up, "broadcast_on_stream")[1] == (0, b10.data.ptr, a10.data.ptr, 10, 1, h)
    nvshmem.barrier(nvshmem.Teams.TEAM_NODE, stream=s)
    assert _last(up, "barrier_on_stream") == ("nvshmemx_barrier_on_stream", (2, h))
    nvshmem.sync(world, stream=s)
    assert _last(up, "sync_on_stream") == ("nvshmemx_team_sync_on_stream", (0, h))
    nvshmem.barrier_all(stream=s)
    nvshmem.sync_all(stream=s)
    assert up.symbols()[-2:] == ["nvshmemx_barrier_all_on_stream", "nvshmemx_sync_all_on_stream"]
    with pytest.raises(NotImplementedError, match="stream"):
        nvshmem.reduce(world, b10, a10, "sum")
    with pytest.raises(NvshmemInvalid, match="Non-matching data types"):
        nvshmem.reduce(world, nvshmem.array((10,), dtype="int32"), a10, "sum", stream=s)
    with pytest.raises(NvshmemInvalid, match="unknown op"):
        nvshmem.reduce(world, b10, a10, "avg", stream=s)
    dest, src = nvshmem.buffer(64), nvshmem.buffer(64)
    with pytest.raises(NvshmemInvalid, match="collective_on_buffer"):
        nvshmem.reduce(world, dest, src, "sum", stream=s)
    assert nvshmem.collective_on_buffer("reduce", world, dest, src, dtype="float", op="sum", stream=s) == 0
    assert _last(up, "reduce_on_stream") == ("nvshmemx_float_sum_reduce_on_stream", (0, dest.handle, src.handle, 16, h))
    gathered = nvshmem.buffer(128)
    nvshmem.collective_on_buffer("fcollect", world, gathered, src, dtype="int64", stream=s)
    assert _last(up, "fcollect_on_stream") == ("nvshmemx_int64_fcollect_on_stream",
                                               (0, gathered.handle, src.handle, 8, h))
    with pytest.raises(NvshmemInvalid, match="dtype"):
        nvshmem.collective_on_buffer("reduce", world, dest, src, dtype="float32x", op="sum", stream=s)


def test_collective_on_buffer_counts_as_nvshmem4py_reading_past_a_short_source(up):
    # NVSHMEM4Py's collective_test.py: dest n_pes times src, reduce's count from dest: NVSHMEM4Py
    # reads past src; so do we where the bytes stay in the symmetric heap, warning; writes never
    s, h = up.stream, up.stream.handle
    world = nvshmem.Teams.TEAM_WORLD
    src, dest = nvshmem.buffer(32), nvshmem.buffer(64)  # 2 PEs
    with pytest.warns(RuntimeWarning, match=r"reduce of 16 elements .* reads 64 bytes of 'src', which holds 32"):
        nvshmem.collective_on_buffer("reduce", world, dest, src, dtype="float", op="max", stream=s)
    assert _last(up, "reduce_on_stream") == ("nvshmemx_float_max_reduce_on_stream", (0, dest.handle, src.handle, 16, h))
    with pytest.warns(RuntimeWarning, match=r"reducescatter of 8 elements .* reads 128 bytes of 'src'"):
        nvshmem.collective_on_buffer("reducescatter", world, dest, src, dtype="int64", op="sum", stream=s)
    assert _last(up, "reducescatter_on_stream") == ("nvshmemx_int64_sum_reducescatter_on_stream",
                                                    (0, dest.handle, src.handle, 8, h))
    with pytest.warns(RuntimeWarning, match="broadcast of 16 elements"):
        nvshmem.collective_on_buffer("broadcast", world, dest, src, dtype="int32", root=1, stream=s)
    assert _last(up, "broadcast_on_stream")[1] == (0, dest.handle, src.handle, 16, 1, h)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # within both buffers: no warning
        nvshmem.collective_on_buffer("fcollect", world, dest, src, dtype="float", stream=s)
        nvshmem.collective_on_buffer("alltoall", world, dest, src, dtype="float", stream=s)
    assert _last(up, "alltoall_on_stream")[1] == (0, dest.handle, src.handle, 4, h)
    with pytest.raises(NvshmemInvalid, match="fcollect of 16 elements writes 128 bytes of 'dest', which holds 64"):
        nvshmem.collective_on_buffer("fcollect", world, dest, dest, dtype="float", stream=s)
    last = nvshmem.buffer(16)  # the heap's last allocation: 64 bytes from it are past every allocation
    big = nvshmem.buffer(64)
    nvshmem.free(big)
    with pytest.raises(NvshmemInvalid, match="past the end of the symmetric heap's allocations"):
        nvshmem.collective_on_buffer("reduce", world, dest, last, dtype="float", op="sum", stream=s)


def test_teams(up):
    Teams = nvshmem.Teams
    team = nvshmem.team_split_strided(Teams.TEAM_WORLD, start=0, stride=1, size=2, config=nvshmem.TeamConfig(),
                                      config_mask=0, new_team_name="PAIR")
    symbol, args = _last(up, "split_strided")
    assert args[:4] == (0, 0, 1, 2) and args[5] == 0 and type(team) is int and Teams.PAIR == team
    nvshmem.team_split_strided(Teams.TEAM_WORLD, 0, 1, 2, nvshmem.TeamConfig(num_contexts=4), 1, "CTX")
    args = _last(up, "split_strided")[1]
    assert args[5] == 1 and args[4].num_contexts == 4
    assert nvshmem.team_split_strided(Teams.TEAM_WORLD, 1, 1, 1, None, 0) is None  # not a member
    before = len(up.calls_of("split_strided"))
    for kwargs, error, message in (
        ({"start": 0, "stride": 2, "size": 2}, NvshmemError, "not in the parent team"),  # the tutorial's at 2 PEs
        ({"start": 0, "stride": 0, "size": 1}, NvshmemError, "stride"),
        ({"start": 0, "stride": 1, "size": 1, "config_mask": 2}, NvshmemInvalid, "config_mask"),
        ({"start": 0, "stride": 1, "size": 1, "config_mask": 8}, NvshmemInvalid, "config_mask"),
    ):
        kwargs.setdefault("config_mask", 0)
        with pytest.raises(error, match=message):
            nvshmem.team_split_strided(Teams.TEAM_WORLD, config=nvshmem.TeamConfig(), **kwargs)
    assert len(up.calls_of("split_strided")) == before  # refused before NVSHMEM's collective
    with pytest.raises(ValueError, match="already exists"):  # MutableEnum, as in NVSHMEM4Py
        nvshmem.team_split_strided(Teams.TEAM_WORLD, 0, 1, 2, nvshmem.TeamConfig(), 0, "PAIR")
    x, y = nvshmem.team_split_2d(Teams.TEAM_WORLD, 1, nvshmem.TeamConfig(), 0, nvshmem.TeamConfig(), 0, "GRID")
    assert (Teams.GRID_X, Teams.GRID_Y) == (x, y) and x != y
    with pytest.raises(NvshmemInvalid, match="yaxis_mask"):
        nvshmem.team_split_2d(Teams.TEAM_WORLD, 1, None, 0, None, 1)
    uid = nvshmem.get_team_unique_id()
    assert uid == 0xABCDEF
    made = nvshmem.team_init(nvshmem.TeamConfig(uniqueid=uid), 2, 2, 0, "MINE")
    args = _last(up, "nvshmemx_team_init")[1]
    assert args[1].uniqueid == 0xABCDEF and args[2:] == (2, 2, 0) and Teams.MINE == made
    with pytest.raises(TypeError):  # the tutorial's team_init(..., n_pes=, my_pe=)
        nvshmem.team_init(nvshmem.TeamConfig(), config_mask=0, n_pes=2, my_pe=0)
    assert nvshmem.team_translate_pe(Teams.PAIR, 1, Teams.TEAM_WORLD) == 1
    nvshmem.team_destroy("PAIR")
    assert _last(up, "team_destroy")[1] == (team,) and "PAIR" not in Teams
    nvshmem.team_destroy(made)
    assert "MINE" not in Teams
    assert nvshmem.team_n_pes(Teams.TEAM_WORLD) == 2 and nvshmem.team_my_pe(Teams.TEAM_WORLD) == 0
    nvshmem.finalize()
    assert "GRID_X" not in Teams and "TEAM_WORLD" in Teams  # made teams end with the runtime


def test_version_atomics_libraries(up):
    v = nvshmem.get_version()
    assert (v.libnvshmem_version, v.openshmem_spec_version) == ("3.8.0", "1.5")
    assert v.nvshmem4py_version.startswith("nvshmem_dsl ") and "NVSHMEM Library version: 3.8.0" in repr(v)
    counter = nvshmem.array((4,), dtype="int64")
    with pytest.raises(NvshmemError, match="network transports") as err:  # PE 1 is reached over P2P
        nvshmem.atomic_fetch_add(counter, 5, 1)
    assert isinstance(err.value, NotImplementedError)
    up.responses["nvshmem_ptr"] = 0  # PE 1 over the network
    up.responses["nvshmem_int64_atomic_fetch_add"] = 41
    assert nvshmem.atomic_fetch_add(counter, 5, remote_pe=1, offset=2) == 41
    assert _last(up, "atomic_fetch_add")[1] == (counter.data.ptr + 16, 5, 1)
    with pytest.raises(NvshmemInvalid, match="too small"):
        nvshmem.atomic_inc(counter, 1, offset=4)
    kernel = nvshmem.NvshmemKernelObject.from_handle(0x6A6A)
    nvshmem.library_init(kernel)
    nvshmem.library_finalize(kernel)
    assert up.symbols()[-2:] == ["nvshmemx_culibrary_init", "nvshmemx_culibrary_finalize"]
    nvshmem.library_finalize(nvshmem.NvshmemKernelObject.from_handle(0x7B7B))  # never initialised: tolerated
    assert up.symbols()[-1] == "nvshmemx_culibrary_finalize"


def test_errors_are_nvshmem4py_classes_and_keep_their_kind(up):
    with pytest.raises(NvshmemInvalid) as err:
        nvshmem.get_peer_array(nvshmem.array((2,)), 5)
    assert isinstance(err.value, ValueError) and isinstance(err.value, nvshmem_dsl.NvshmemError)
    with pytest.raises(NvshmemInvalid, match="peer PE is required"):
        nvshmem.get_peer_array(nvshmem.array((2,)))


# --------------------------------------------------------------------------- device modules

REAL_NUMBA = {
    "rma": "p g put get put_nbi get_nbi put_block get_block put_nbi_block get_nbi_block put_warp get_warp "
           "put_nbi_warp get_nbi_warp put_signal_block put_signal put_signal_nbi put_signal_warp put_signal_nbi_block "
           "put_signal_nbi_warp",
    "direct": "my_pe team_my_pe team_n_pes n_pes barrier_all sync_all signal_op signal_wait",
    "amo": "atomic_inc atomic_fetch_inc atomic_fetch atomic_set atomic_add atomic_fetch_add atomic_and "
           "atomic_fetch_and atomic_or atomic_fetch_or atomic_xor atomic_fetch_xor atomic_swap atomic_compare_swap",
    "collective": "sync_block sync_warp sync sync_all sync_all_block sync_all_warp barrier barrier_block barrier_warp "
                  "barrier_all barrier_all_block barrier_all_warp reduce reduce_block reduce_warp reducescatter "
                  "reducescatter_block reducescatter_warp fcollect fcollect_block fcollect_warp broadcast "
                  "broadcast_block broadcast_warp alltoall alltoall_block alltoall_warp",
}


@pytest.mark.parametrize("dsl, mem", [("numba", "get_peer_array get_multicast_array"),
                                      ("cute", "get_peer_tensor get_multicast_tensor")])
def test_device_modules_have_nvshmem4py_names(dsl, mem):
    if dsl == "numba":
        pytest.importorskip("numba.cuda")
        import nvshmem_dsl.numba as native
    else:
        pytest.importorskip("cutlass.cute")
        import nvshmem_dsl.cute as native
    import importlib

    package = importlib.import_module(f"nvshmem_dsl.core.device.{dsl}")
    for sub, names in {**REAL_NUMBA, "mem": mem}.items():
        module = importlib.import_module(f"nvshmem_dsl.core.device.{dsl}.{sub}")
        for name in names.split():
            assert name in module.__all__ and hasattr(package, name), (sub, name)
    # re-exports, not re-implementations
    assert package.put is native.put and package.atomic_fetch_add is native.atomic_fetch_add
    assert package.signal_wait is native.signal_wait_until and package.sync is native.team_sync
    assert package.sync_block is native.team_sync_block and package.barrier_all is native.barrier_all
    peer = package.get_peer_array if dsl == "numba" else package.get_peer_tensor
    assert peer is (native.peer if dsl == "numba" else native.peer_tensor)


def test_numba_device_api_compiles_with_nvshmem4py_calls():
    pytest.importorskip("numba.cuda")
    from numba import cuda
    from numba.core.errors import TypingError
    from numba.cuda import types as nbtypes

    import nvshmem_dsl.core.device.numba as nvshmem_numba

    SET, EQ = int(nvshmem.SignalOp.SIGNAL_SET), int(nvshmem.ComparisonType.CMP_EQ)

    def kernel(dst, src, sig, out):
        pe = (nvshmem_numba.my_pe() + 1) % nvshmem_numba.n_pes()
        nvshmem_numba.put(dst, src, pe)  # destination first, as NVSHMEM4Py's package does
        nvshmem_numba.p(dst, 1.5, pe)
        nvshmem_numba.put_signal(dst, src, sig, 1, SET, pe)
        nvshmem_numba.signal_wait(sig, EQ, 1)
        nvshmem_numba.reduce(0, dst, src, "sum")
        nvshmem_numba.reducescatter_block(0, dst, out, "max")
        nvshmem_numba.fcollect(0, out, src)
        nvshmem_numba.broadcast(0, dst, src)
        nvshmem_numba.broadcast_block(0, out, src, root=1)  # by keyword, as NVSHMEM4Py's tests pass it
        nvshmem_numba.alltoall_warp(0, out, src)
        nvshmem_numba.sync(0)
        nvshmem_numba.get_peer_array(dst, pe)[0] = 2.0
        nvshmem_numba.atomic_fetch_add(sig, 1, pe)

    f32 = nbtypes.float32[::1]
    ptx, _ = cuda.compile_ptx(kernel, (f32, f32, nbtypes.uint64[::1], f32), cc=(9, 0))
    assert "nvshmemi_device_state_d" in ptx
    for callee in ("nvshmem_float_sum_reduce", "nvshmemx_float_max_reducescatter_block", "nvshmem_float_fcollect",
                   "nvshmem_float_broadcast", "nvshmemx_float_broadcast_block", "nvshmemx_float_alltoall_warp",
                   "nvshmem_team_sync"):
        assert callee in ptx, callee

    def bad(dst, src):
        nvshmem_numba.reduce(0, dst, src, "avg")

    with pytest.raises(TypingError, match="unknown operator 'avg'"):
        cuda.compile_ptx(bad, (f32, f32), cc=(9, 0))


def test_numba_broadcast_root_by_keyword_position_or_default():
    # NVSHMEM4Py's tests write broadcast(team, dest, src, root=0); the root reaches NVSHMEM's 5th argument
    pytest.importorskip("numba.cuda")
    from numba import cuda
    from numba.cuda import types as nbtypes

    import nvshmem_dsl.core.device.numba as nvshmem_numba

    def by_keyword(dst, src):
        nvshmem_numba.broadcast(0, dst, src, root=5)

    def by_position(dst, src):
        nvshmem_numba.broadcast(0, dst, src, 3)

    def by_default(dst, src):
        nvshmem_numba.broadcast(0, dst, src)

    f32 = nbtypes.float32[::1]
    for kernel, root in ((by_keyword, 5), (by_position, 3), (by_default, 0)):
        ptx, _ = cuda.compile_ptx(kernel, (f32, f32), cc=(9, 0))
        call = ptx[:ptx.index("call.uni (retval0), nvshmem_float_broadcast,")]
        assert call.rsplit("st.param.b32 \t[param4], ", 1)[1].startswith(f"{root};"), kernel.__name__


def test_numba_data_collectives_take_nvshmem4py_s_parameter_names():
    pytest.importorskip("numba.cuda")
    from numba import cuda
    from numba.core.errors import TypingError
    from numba.cuda import types as nbtypes

    import nvshmem_dsl.core.device.numba as nvshmem_numba

    def by_keywords(dst, src):
        nvshmem_numba.reduce(0, dst, src, op="max")
        nvshmem_numba.reducescatter_warp(team=0, dst_array=dst, src_array=src, op="min")
        nvshmem_numba.fcollect_block(0, dst_array=dst, src_array=src)
        nvshmem_numba.alltoall(0, src_array=src, dst_array=dst)

    f32 = nbtypes.float32[::1]
    ptx, _ = cuda.compile_ptx(by_keywords, (f32, f32), cc=(9, 0))
    for callee in ("nvshmem_float_max_reduce", "nvshmemx_float_min_reducescatter_warp", "nvshmemx_float_fcollect_block",
                   "nvshmem_float_alltoall"):
        assert f"call.uni (retval0), {callee}," in ptx, callee

    def no_op(dst, src):
        nvshmem_numba.reduce(0, dst, src)

    def not_an_array(dst, src):
        nvshmem_numba.fcollect(0, dst, 1.0)

    with pytest.raises(TypingError, match=r"reduce: takes \(team, dst_array, src_array, op\); argument 'op' is missing"):
        cuda.compile_ptx(no_op, (f32, f32), cc=(9, 0))
    with pytest.raises(TypingError, match="argument src_array must be an array"):
        cuda.compile_ptx(not_an_array, (f32, f32), cc=(9, 0))


def test_cute_collectives_map_to_the_typed_functions(monkeypatch):
    pytest.importorskip("cutlass.cute")
    from nvshmem_dsl.core.device.cute import collective

    calls = []
    recorder = types.SimpleNamespace(team_n_pes=lambda team: 4)
    for name in ("sum_reduce", "max_reduce_block", "min_reducescatter_warp", "fcollect", "broadcast_block",
                 "alltoall"):
        setattr(recorder, name, lambda *args, _n=name: calls.append((_n, args)))
    monkeypatch.setattr(collective, "_nv", recorder)
    monkeypatch.setattr(collective, "_size", len)
    dst, src = [0] * 8, [0] * 12
    collective.reduce(0, dst, src, "sum")
    collective.reduce_block(1, dst, src, "max")
    collective.reducescatter_warp(0, dst, src, "min")
    collective.fcollect(0, dst, src)
    collective.broadcast_block(0, dst, src)
    collective.alltoall(0, dst, src)
    assert calls == [("sum_reduce", (0, dst, src, 8)), ("max_reduce_block", (1, dst, src, 8)),
                     ("min_reducescatter_warp", (0, dst, src, 8)), ("fcollect", (0, dst, src, 12)),
                     ("broadcast_block", (0, dst, src, 0)), ("alltoall", (0, dst, src, 3))]
    with pytest.raises(NvshmemInvalid, match="unknown operator"):
        collective.reduce(0, dst, src, "avg")


# --------------------------------------------------------------------------- the alias


def _python(code, *, env=None, cwd=None):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60,
                          env=env or ENV, cwd=cwd)


@pytest.fixture
def real_nvshmem(tmp_path):
    """A directory holding a stand-in for the real NVSHMEM4Py package."""
    pkg = tmp_path / "site" / "nvshmem"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("REAL = True\n")
    (pkg / "core" / "__init__.py").write_text("REAL = True\n")
    return tmp_path / "site"


def test_alias_maps_nvshmem_core_and_is_opt_in():
    out = _python("""
        import sys
        try:
            import nvshmem.core
        except ModuleNotFoundError:
            print("not installed by default")
        import nvshmem_dsl.core.alias as alias
        alias.enable()
        import nvshmem.core as core, nvshmem
        import nvshmem.core.device.numba as nb
        import nvshmem.core.interop.cupy as icp
        from nvshmem.core import Teams, init
        print(core.__name__, nvshmem is core, nb.__name__, icp.__name__, init is core.init)
        print(sys.modules["nvshmem.core.device.numba"] is sys.modules["nvshmem_dsl.core.device.numba"])
        import nvshmem.bindings as b, nvshmem.core.utils as u
        print(b.__name__, u.__name__, sys.modules["nvshmem.bindings"] is sys.modules["nvshmem_dsl.core.bindings"])
        alias.disable()
        print("nvshmem" in sys.modules, alias.is_enabled())
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:5] == [
        "not installed by default",
        "nvshmem_dsl.core True nvshmem_dsl.core.device.numba nvshmem_dsl.core.interop.cupy True",
        "True", "nvshmem_dsl.core.bindings nvshmem_dsl.core.utils True", "False False"]


def test_alias_refuses_when_nvshmem4py_is_there(real_nvshmem):
    env = {**ENV, "PYTHONPATH": str(real_nvshmem)}
    code = """
        import nvshmem_dsl.core.alias as alias
        try:
            alias.enable()
        except alias.AliasRefused as exc:
            print("refused:", exc)
        alias.enable(force=True)
        import nvshmem.core
        print(nvshmem.core.__name__)
    """
    out = _python(code, env=env)
    assert out.returncode == 0, out.stderr
    assert "refused: nvshmem_dsl.core.alias: a real 'nvshmem' package (NVSHMEM4Py) is importable from" in out.stdout
    assert str(real_nvshmem) in out.stdout and out.stdout.strip().endswith("nvshmem_dsl.core")
    out = _python("import nvshmem; import nvshmem_dsl.core.alias as a; a.enable(force=True)", env=env)
    assert out.returncode != 0 and "already imported" in out.stderr


def test_launcher_as_nvshmem4py(tmp_path, real_nvshmem):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import os, sys
        import nvshmem.core
        import nvshmem.core.device.cute
        print(os.environ["NVSHMEM_DSL_RANK"], nvshmem.core.__name__, sys.argv[1:], __name__)
    """))
    run = [sys.executable, "-m", "nvshmem_dsl.run", "-n", "2"]
    out = subprocess.run([*run, "--as-nvshmem4py", str(prog), "x", "-n", "1"], capture_output=True, text=True,
                         timeout=120, env=ENV)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [f"[rank {r}] {r} nvshmem_dsl.core ['x', '-n', '1'] __main__"
                                               for r in (0, 1)]
    out = subprocess.run([*run, str(prog)], capture_output=True, text=True, timeout=60, env=ENV)
    assert out.returncode != 0 and "No module named 'nvshmem'" in out.stderr  # never installed silently
    env = {**ENV, "PYTHONPATH": str(real_nvshmem)}
    out = subprocess.run([*run, "--as-nvshmem4py", str(prog)], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2 and "--as-nvshmem4py=force" in out.stderr and out.stdout == ""
    out = subprocess.run([*run, "--as-nvshmem4py=force", str(prog)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("nvshmem_dsl.core") == 2


# --------------------------------------------------------------------------- the seed programs

SEEDS = ["seed000_numba_put_get", "seed001_cute_put_get", "seed003_tutorial", "seed004_torch_peer_tensors"]


def _is_import(line: str) -> bool:
    try:
        tree = ast.parse(line.split("#")[0].strip())
    except SyntaxError:
        return False
    return len(tree.body) == 1 and isinstance(tree.body[0], (ast.Import, ast.ImportFrom))


@pytest.mark.parametrize("name", SEEDS)
def test_ports_change_only_imports_and_marked_lines(name):
    ported = (PORTS / f"{name}.py").read_text().splitlines()
    original = (PORTS / "original" / f"{name}.py.txt").read_text().splitlines()
    while ported[0].startswith("#"):  # the header (then a blank line) says where it comes from and what changed
        ported.pop(0)
    assert ported.pop(0) == ""
    assert not any(line.startswith("import nvshmem.") or line == "import nvshmem" for line in ported)
    matcher = difflib.SequenceMatcher(a=original, b=ported, autojunk=False)
    in_block = False
    changed = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for line in ported[j1:j2]:
            if line.startswith("# PORT: begin"):
                in_block = True
            if tag != "equal":
                changed += 1
                assert in_block or "# PORT" in line or _is_import(line), f"{name}: unmarked change: {line!r}"
            if line.startswith("# PORT: end"):
                in_block = False
        if tag == "delete":
            pytest.fail(f"{name}: original lines dropped without a PORT line: {original[i1:i2]}")
    assert changed and not in_block
    compile("\n".join(ported), name, "exec")


@pytest.fixture
def seed_world(monkeypatch):
    monkeypatch.setenv("NVSHMEM_DSL_CHECK_SYMMETRY", "0")
    w = World(monkeypatch)
    yield w
    close(w)


def _run(name):
    return runpy.run_path(str(PORTS / f"{name}.py"), run_name="__main__")


def test_seed000_numba_example_runs_against_the_fake_driver(seed_world, monkeypatch, caplog):
    pytest.importorskip("numba.cuda")
    from mpi4py import MPI

    seed_world.compile_launches(monkeypatch)
    g = _run("seed000_numba_put_get")
    assert seed_world.bootstraps[-1]["comm"] is MPI.COMM_WORLD  # init(dev=, mpi_comm=, "mpi", stream=)
    [(kernel, ptx)] = seed_world.launches
    assert kernel == "rma_kernel" and "nvshmemi_device_state_d" in ptx
    assert ".func nvshmem" not in ptx and "call.uni nvshmem_int32_put" not in ptx  # put/get inlined
    mallocs = [c[1] for c in seed_world.calls_of("nvshmem_malloc")]
    assert mallocs == [(4,), (4,), (4,)] and isinstance(g["src"], seed_world.cupy.ndarray)
    assert g["pe"] == 1 and seed_world.symbols()[-1] == "nvshmemx_hostlib_finalize"
    assert "not freed explicitly" in caplog.text  # the seed never frees: logged and freed, as NVSHMEM4Py does
    assert len(seed_world.calls_of("nvshmem_free")) == 4  # the three arrays and the runtime's scratch


def test_seed001_cute_example_runs_against_the_fake_driver(seed_world, monkeypatch):
    pytest.importorskip("cutlass.cute")
    compile_cute_launches(seed_world, monkeypatch)
    g = _run("seed001_cute_put_get")
    [(kernel, ptx)] = seed_world.launches
    assert "rma_launcher" in kernel and "nvshmemi_device_state_d" in ptx and ".func nvshmem" not in ptx
    handle = g["nvshmem_kernel"].handle
    symbols = seed_world.symbols()
    # cute_compile_helper's library is initialised for NVSHMEM before the launch; the program's
    # library_finalize undoes it
    assert ("nvshmemx_culibrary_init", (handle,)) in seed_world.calls
    assert ("nvshmemx_culibrary_finalize", (handle,)) in seed_world.calls
    assert symbols.index("nvshmemx_culibrary_finalize") < symbols.index("nvshmemx_hostlib_finalize")
    assert [c[1] for c in seed_world.calls_of("nvshmem_malloc")] == [(4,), (4,), (4,)]


def test_seed003_tutorial_runs_against_the_fake_driver(seed_world, monkeypatch, capsys):
    pytest.importorskip("numba.cuda")
    seed_world.compile_launches(monkeypatch)
    g = _run("seed003_tutorial")
    out = capsys.readouterr().out
    calls, symbols = seed_world.calls, seed_world.symbols()
    # every cell: version, PE queries, teams, buffer, array, registration, reduce, put, peer
    # array + kernel + barrier, put_signal, finalize
    assert "NVSHMEM Library version: 3.8.0" in out and "\n0\n2\n" in out
    assert "Created team with handle 7 using team_split_strided" in out
    assert f"{HEAP + 0x100000} 4096" in out and ("nvshmem_malloc", (4096,)) in calls
    assert "[[[[[1. 1. 1. 1. 1.]" in out  # arr[:] = my_pe + 1, printed
    s = g["stream"].handle
    assert "Array before reduction: [1. 1. 1. 1. 1. 1. 1. 1. 1. 1.]" in out
    assert any(c[0] == "nvshmemx_float_sum_reduce_on_stream" and c[1][0] == 0 and c[1][3] == 10 for c in calls)
    [put] = [c[1] for c in calls if c[0] == "nvshmemx_uint8_put_on_stream"]
    assert put[2:4] == (40, 1) and put[4] >= 0x5000  # 10 float32 to PE 1, on the cell's stream
    assert ("nvshmemx_buffer_register_symmetric" in symbols and "nvshmemx_buffer_unregister_symmetric" in symbols)
    assert [k for k, _ in seed_world.launches] == ["simple_shift"]
    assert ("nvshmem_ptr", (g["array"].data.ptr, 1)) in calls  # get_peer_array(array, dst_pe)
    assert any(c[0] == "nvshmemx_barrier_on_stream" and c[1][0] == 2 for c in calls)  # TEAM_NODE
    put_signal = [c[1] for c in calls if c[0] == "nvshmemx_uint8_put_signal_on_stream"]
    assert len(put_signal) == 1 and put_signal[0][2] == 64 and put_signal[0][4:8] == (1, 9, 1, s)
    # the port's fix of the notebook's race: a TEAM_WORLD barrier on the stream before the put_signal
    names = [c[0] for c in calls]
    last_world_barrier = max(i for i, c in enumerate(calls) if c[0] == "nvshmemx_barrier_on_stream"
                             and c[1] == (0, s))
    assert last_world_barrier < names.index("nvshmemx_uint8_put_signal_on_stream")
    assert "From PE 0 sent buf to remote PE 1 and set signal" in out
    assert "waited" not in out  # PE 1's branch
    assert symbols[-1] == "nvshmemx_hostlib_finalize"
    assert not _tracking.ENTRIES  # everything freed (the notebook frees all it allocates)


def test_gpu_probe_patterns_allocations_and_reports_them(seed_world, monkeypatch, capsys):
    """tests/gpu/nvshmem4py_probe.py, which the GPU tests read the seed programs' results through:
    here no kernel runs, so it must report the patterns it wrote."""
    import json

    from nvshmem_dsl.core.interop import _common

    seed_world.compile_launches(monkeypatch)
    monkeypatch.setattr(nvshmem, "finalize", nvshmem.finalize)  # restored after the probe's patching
    monkeypatch.setattr(_common, "new_array", _common.new_array)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "argv", ["probe", str(PORTS / "seed000_numba_put_get.py"), "src,dst,remote_buf"])
    runpy.run_path(str(ROOT / "tests" / "gpu" / "nvshmem4py_probe.py"))["main"]()
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("PROBE ")]
    assert json.loads(line[6:]) == {"pe": 0, "src": 1000, "dst": 1001, "remote_buf": 1002}
    assert seed_world.symbols()[-1] == "nvshmemx_hostlib_finalize"


def test_finalize_imports_no_cute_the_program_did_not(up, monkeypatch):
    """finalize() cleans up CuTe kernel objects only where the program imported the CuTe interop;
    it never imports it (and the CuTe DSL) itself."""
    import sys

    import nvshmem_dsl.core.interop as interop

    name = "nvshmem_dsl.core.interop.cute"
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delattr(interop, "cute", raising=False)
    nvshmem.finalize()
    assert name not in sys.modules
    assert up.symbols()[-1] == "nvshmemx_hostlib_finalize"


def test_finalize_cleans_up_cute_kernels_when_the_interop_is_in_use(up, monkeypatch):
    import sys
    import types as _types

    cleaned = []
    fake = _types.SimpleNamespace(cleanup_cute=lambda: cleaned.append(True))
    monkeypatch.setitem(sys.modules, "nvshmem_dsl.core.interop.cute", fake)
    nvshmem.finalize()
    assert cleaned == [True]


def test_a_split_of_a_team_invalid_here_is_nvshmem4pys_error(monkeypatch):
    """team_split_*'s parent: its size from the host operations' check, the error NVSHMEM4Py's class naming the call."""
    from nvshmem_dsl.core import teams as core_teams
    from nvshmem_dsl.core.nvshmem_types import NvshmemError, Teams
    from nvshmem_dsl.host import _lib, _state

    monkeypatch.setattr(_lib, "call", lambda name, team: -1 if team == 7 else 3)
    with _state.fake(n_pes=4, my_pe=1):
        assert core_teams._parent_size(int(Teams.TEAM_WORLD), "team_split_strided") == 4
        assert core_teams._parent_size(5, "team_split_strided") == 3
        with pytest.raises(NvshmemError, match=r"team_split_2d\(\): team 7 is not a valid team on this PE"):
            core_teams._parent_size(7, "team_split_2d")


def test_utils_is_an_attribute_without_an_import():
    # NVSHMEM4Py's collective_test.py writes nvshmem.core.utils.get_size(...) having imported nvshmem.core only
    code = ("import nvshmem_dsl.core as c\n"
            "print(c.utils.__name__, c.utils.get_size((2, 3), 'float32'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["nvshmem_dsl.core.utils", "24"], out.stdout
