"""GPU tests of the host runtime: run on every rank of a job, e.g.

    python -m nvshmem_dsl.run -n 2 -m pytest -q tests/test_host_gpu.py
    mpirun -np 2 python -m pytest -q tests/test_host_gpu.py

Each rank runs the same tests in the same order (every collective call is made
by all ranks) and checks its own results against numpy references computed from
every rank's deterministic random inputs.  Works with any number of PEs >= 1.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy")

import nvshmem_dsl as nv  # noqa: E402
from nvshmem_dsl import Team  # noqa: E402

N = 1000
RMA_DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32",
              "int64", "uint64", "bool", "complex64"]
SCALAR_DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                 "int64", "uint64"]


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def pe():
    session = nv.init()
    if nv.info()["limited_mpg"]:
        pytest.skip("limited MPG run (several PEs per GPU without MPS): no collectives; "
                    "tests/gpu/test_limited_mpg.py covers this mode")
    yield session
    try:
        nv.barrier_all()
    finally:
        nv.finalize()
    with pytest.raises(nv.NvshmemStateError):
        nv.finalize()


def dsync():
    cupy.cuda.runtime.deviceSynchronize()


def phase():
    """Local device work done; then every PE lines up."""
    dsync()
    nv.barrier_all()


def data(dtype: str, n: int, tag: str, rank: int, *, small: bool = False) -> np.ndarray:
    """Deterministic random data of PE ``rank`` (every PE can compute every PE's data)."""
    rng = np.random.default_rng(zlib.crc32(f"{tag}/{dtype}/{n}".encode()) * 1000 + rank)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    if dt.kind in "iu":
        if small:
            return rng.integers(1, 3, n).astype(dt)
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -100), min(info.max, 100), n, endpoint=True).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    if small:
        return rng.uniform(0.5, 1.5, n).astype(dt)
    return rng.standard_normal(n).astype(dt)


def host(x) -> np.ndarray:
    return cupy.asnumpy(x)


def neighbours(pe):
    return (pe.my_pe + 1) % pe.n_pes, (pe.my_pe - 1) % pe.n_pes


def make_stream(kind: str):
    if kind == "cupy":
        return cupy.cuda.Stream(non_blocking=True)
    if kind == "cuda.core":
        from cuda.core import Device

        return Device().create_stream()
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return torch.cuda.Stream()
    if kind == "int":
        return cupy.cuda.Stream(non_blocking=True).ptr  # the object dies; use a fresh one below
    raise ValueError(kind)


class StreamBox:
    """A stream of some library, and how to synchronize it."""

    def __init__(self, kind: str):
        self.kind = kind
        if kind == "int":
            self._keep = cupy.cuda.Stream(non_blocking=True)
            self.stream = self._keep.ptr
        else:
            self.stream = make_stream(kind)

    def sync(self):
        s = self.stream
        if self.kind == "int":
            self._keep.synchronize()
        elif self.kind == "cuda.core":
            s.sync()
        else:
            s.synchronize()


# --------------------------------------------------------------------------- init and queries


def test_init_state(pe):
    assert nv.is_initialized()
    assert 0 <= nv.my_pe() < nv.n_pes()
    assert pe.my_pe == nv.my_pe() and pe.n_pes == nv.n_pes()
    assert nv.team_my_pe(Team.TEAM_WORLD) == nv.my_pe()
    assert nv.team_n_pes(Team.TEAM_WORLD) == nv.n_pes()
    assert nv.init_status() >= nv.InitStatus.STATUS_IS_INITIALIZED
    with pytest.raises(nv.NvshmemStateError):
        nv.init()
    v = nv.versions()
    assert v["nvshmem"] and v["nvshmem"][0].isdigit()
    info = nv.info()
    assert info["initialized"] and info["n_pes"] == nv.n_pes()
    assert info["gpus"] and all("name" in g for g in info["gpus"])
    assert nv.query_thread() in list(nv.ThreadLevel)


# --------------------------------------------------------------------------- memory


def test_buffer_alloc_free(pe):
    b = nv.buffer(4096)
    assert b.ptr != 0 and b.nbytes == 4096
    assert nv.is_symmetric(b)
    assert b.__cuda_array_interface__["shape"] == (4096,)
    view = cupy.asarray(b)  # zero-copy through __cuda_array_interface__
    view[:] = 7
    dsync()
    b.free()
    assert b.freed and not nv.is_symmetric(view)
    with pytest.raises(nv.NvshmemMemoryError):
        b.ptr
    with pytest.raises(nv.NvshmemMemoryError):
        nv.put(view, view, 0)
    with nv.buffer(256, align=256) as a:
        assert a.ptr % 256 == 0
    assert a.freed


@pytest.mark.parametrize("like", ["cupy", "torch"])
def test_array_kinds(pe, like):
    if like == "torch":
        torch = pytest.importorskip("torch")
    x = nv.zeros((4, 8), "float32", like=like)
    assert tuple(x.shape) == (4, 8)
    assert nv.is_symmetric(x)
    if like == "cupy":
        assert isinstance(x, cupy.ndarray) and x.dtype == np.float32
        assert float(x.sum()) == 0.0
    else:
        assert isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.is_cuda
        assert float(x.sum()) == 0.0
    y = nv.full(16, 3, "int32", like=like)
    assert int(y.sum()) == 48
    z = nv.empty_like(y)
    assert tuple(z.shape) == (16,) and nv.is_symmetric(z)
    for a in (x, y, z):
        nv.free(a)
    with pytest.raises(nv.NvshmemMemoryError):
        nv.free(x)


def test_numba_array(pe):
    numba_cuda = pytest.importorskip("numba.cuda")
    x = nv.zeros(32, "int64", like="numba")
    assert x.shape == (32,) and nv.is_symmetric(x)
    assert int(x.copy_to_host().sum()) == 0
    nv.free(x)


def test_bfloat16_torch(pe):
    torch = pytest.importorskip("torch")
    right, left = neighbours(pe)
    gen = torch.Generator().manual_seed(1234)
    mine = [torch.randn(N, generator=gen).to(torch.bfloat16) for _ in range(pe.n_pes)]
    src = mine[pe.my_pe].cuda()
    dst = nv.zeros(N, "bfloat16", like="torch")
    assert dst.dtype == torch.bfloat16
    phase()
    nv.put(dst, src, right)
    nv.quiet()
    phase()
    assert torch.equal(dst.cpu(), mine[left])
    out = nv.zeros(N, "bfloat16", like="torch")
    phase()
    nv.reduce(Team.TEAM_WORLD, out, dst, "max")
    expect = torch.stack(mine).float().max(0).values.to(torch.bfloat16)
    assert torch.equal(out.cpu(), expect)
    nv.p(dst, 1.5, right)
    nv.quiet()
    phase()
    assert float(dst[0]) == 1.5
    assert nv.g(dst, right) == 1.5
    phase()
    nv.free(out)
    nv.free(dst)


def test_leak_report(pe):
    assert nv.leak_report() is None
    x = nv.zeros(100, "float32", like="cupy")
    live = nv.live_allocations()
    assert len(live) == 1 and live[0]["nbytes"] == 400
    assert "test_host_gpu.py" in live[0]["where"]
    report = nv.leak_report()
    assert report and "400 B" in report and "test_host_gpu.py" in report
    nv.free(x)
    assert nv.leak_report() is None


def test_alloc_free_cycles_no_growth(pe):
    before = len(nv.live_allocations(include_internal=True))
    addresses = set()
    for i in range(1000):
        b = nv.buffer(1 << 16)
        addresses.add(b.ptr)
        b.free()
    assert len(nv.live_allocations(include_internal=True)) == before
    assert len(addresses) <= 4, f"the heap grew: {len(addresses)} distinct addresses"
    big = nv.buffer(64 << 20)  # still fits: nothing leaked
    big.free()


def test_size_mismatch_detected(pe):
    if pe.n_pes < 2:
        pytest.skip("needs 2 PEs")
    for larger in (0, 1):  # each PE the larger once: every PE raises, whichever asked for more
        with pytest.raises(nv.NvshmemArgumentError, match="different sizes"):
            nv.buffer(1024 + 8 * (pe.my_pe == larger))
    assert nv.leak_report() is None
    # nothing was allocated on any PE: the next allocations line up (a put through them lands)
    right, left = neighbours(pe)
    dst = nv.zeros(N, "int64", like="cupy")
    src = nv.full(N, pe.my_pe + 1, "int64", like="cupy")
    phase()
    nv.put(dst, src, right)
    nv.quiet()
    phase()
    assert np.all(host(dst) == left + 1)
    nv.free(src)
    nv.free(dst)


def test_peer_views(pe):
    right, left = neighbours(pe)
    x = nv.zeros(N, "float32", like="cupy")
    phase()
    try:
        view = nv.peer(x, right)
    except nv.NvshmemMemoryError:
        phase()
        nv.free(x)
        pytest.skip("peers not reachable by load/store")
    assert view.shape == x.shape and view.dtype == x.dtype
    if right != pe.my_pe:
        assert view.data.ptr != x.data.ptr
    view[:] = pe.my_pe + 1
    phase()
    assert np.all(host(x) == left + 1)
    assert nv.peer_ptr(x, pe.my_pe) == x.data.ptr
    phase()
    nv.free(x)


def test_multicast_or_clear_error(pe):
    x = nv.zeros(1024, "float32", like="cupy")
    address = nv.mc_ptr(x, Team.TEAM_WORLD)
    if address == 0:
        with pytest.raises(nv.NvshmemMemoryError, match="multicast"):
            nv.multicast(x, Team.TEAM_WORLD)
    else:
        assert nv.multicast(x).shape == x.shape
    phase()
    nv.free(x)


def test_register_external_vmm(pe):
    try:
        from cuda.core import Device, VirtualMemoryResource
    except ImportError:
        pytest.skip("cuda.core has no VirtualMemoryResource")
    dev = Device()
    resource = VirtualMemoryResource(dev)
    small = cupy.from_dlpack(resource.allocate(2 << 20)).view(cupy.float32)
    with pytest.raises(nv.NvshmemArgumentError, match="granularity"):
        nv.register_external(small)  # NVSHMEM would crash on it
    from nvshmem_dsl.host import views

    vbuf = resource.allocate(views.cumem_granularity())
    arr = cupy.from_dlpack(vbuf).view(cupy.float32)
    sym = nv.register_external(arr)
    assert nv.is_symmetric(sym) and sym.shape == arr.shape
    right, left = neighbours(pe)
    n = 1 << 20
    src = cupy.asarray(data("float32", n, "vmm", pe.my_pe))
    phase()
    nv.put(sym, src, right)  # nelems = src.size
    nv.quiet()
    phase()
    np.testing.assert_array_equal(host(sym[:n]), data("float32", n, "vmm", left))
    np.testing.assert_array_equal(host(arr[:n]), host(sym[:n]))  # the same memory
    nv.unregister_external(sym)
    assert not nv.is_symmetric(sym)
    vbuf.close()


# --------------------------------------------------------------------------- RMA


@pytest.mark.parametrize("mode", ["blocking", "nbi", "stream", "stream_nbi"])
@pytest.mark.parametrize("dtype", RMA_DTYPES)
def test_put_get(pe, dtype, mode):
    right, left = neighbours(pe)
    box = StreamBox("cupy") if mode.startswith("stream") else None
    kw = {"stream": box.stream} if box else {}
    nbi = mode.endswith("nbi")
    src = cupy.asarray(data(dtype, N, "put", pe.my_pe))
    dst = nv.zeros(N, dtype, like="cupy")
    got = cupy.zeros(N, dtype)
    phase()
    nv.put(dst, src, right, nbi=nbi, **kw)
    if box:
        nv.quiet(stream=box.stream)
        box.sync()
    else:
        nv.quiet()
    phase()
    np.testing.assert_array_equal(host(dst), data(dtype, N, "put", left))
    # right's dst holds my data now: read it back
    nv.get(got, dst, right, nbi=nbi, **kw)
    if box:
        nv.quiet(stream=box.stream)
        box.sync()
    else:
        nv.quiet()
    np.testing.assert_array_equal(host(got), data(dtype, N, "put", pe.my_pe))
    # part of an array: nelems
    got[:] = 0
    nv.get(got, dst, right, nelems=10, **kw)
    if box:
        box.sync()
    assert np.array_equal(host(got)[:10], data(dtype, N, "put", pe.my_pe)[:10])
    assert not host(got)[10:].any()
    phase()
    nv.free(dst)


@pytest.mark.parametrize("kind", ["cupy", "cuda.core", "torch", "int"])
def test_stream_kinds(pe, kind):
    right, left = neighbours(pe)
    box = StreamBox(kind)
    src = cupy.asarray(data("float32", N, "streams", pe.my_pe))
    dst = nv.zeros(N, "float32", like="cupy")
    phase()
    nv.put(dst, src, right, stream=box.stream)
    nv.barrier_all(stream=box.stream)
    box.sync()
    phase()
    np.testing.assert_array_equal(host(dst), data("float32", N, "streams", left))
    nv.free(dst)


def test_torch_local_source(pe):
    torch = pytest.importorskip("torch")
    right, left = neighbours(pe)
    src = torch.arange(N, dtype=torch.int64, device="cuda") + 1000 * pe.my_pe
    dst = nv.zeros(N, "int64", like="torch")
    phase()
    torch.cuda.synchronize()
    nv.put(dst, src, right)
    nv.quiet()
    phase()
    assert torch.equal(dst.cpu(), torch.arange(N, dtype=torch.int64) + 1000 * left)
    nv.free(dst)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dtype", SCALAR_DTYPES)
def test_p_g(pe, dtype, stream):
    right, left = neighbours(pe)
    box = StreamBox("cupy") if stream else None
    kw = {"stream": box.stream} if box else {}
    values = [data(dtype, 1, "p", r)[0].item() for r in range(pe.n_pes)]
    dst = nv.zeros(4, dtype, like="cupy")
    phase()
    nv.p(dst[2:], values[pe.my_pe], right, **kw)
    if box:
        nv.quiet(stream=box.stream)
        box.sync()
    else:
        nv.quiet()
    phase()
    assert host(dst)[2] == values[left]
    assert host(dst)[0] == 0
    value = nv.g(dst[2:], right, **kw)
    if box:
        box.sync()
    assert value == values[pe.my_pe]
    phase()
    nv.free(dst)


@pytest.mark.parametrize("dtype", ["float32", "int64", "int16", "bool"])
def test_iput_iget(pe, dtype):
    right, left = neighbours(pe)
    n = 64
    src = cupy.asarray(data(dtype, n, "iput", pe.my_pe))
    dst = nv.zeros(2 * n, dtype, like="cupy")
    phase()
    nv.iput(dst[::2], src, right)  # stride from the view
    nv.quiet()
    phase()
    out = host(dst)
    np.testing.assert_array_equal(out[::2], data(dtype, n, "iput", left))
    assert not out[1::2].any()
    got = cupy.zeros(n, dtype)
    nv.iget(got, dst, right, src_stride=2)  # explicit stride on a contiguous array
    nv.quiet()
    np.testing.assert_array_equal(host(got), data(dtype, n, "iput", pe.my_pe))
    box = StreamBox("cupy")
    got2 = cupy.zeros(2 * n, dtype)
    nv.iget(got2[::2], dst[::2], right, stream=box.stream)
    box.sync()
    np.testing.assert_array_equal(host(got2)[::2], data(dtype, n, "iput", pe.my_pe))
    phase()
    nv.free(dst)


# --------------------------------------------------------------------------- signals and waits


@pytest.mark.parametrize("nbi", [False, True])
def test_put_signal(pe, nbi):
    right, left = neighbours(pe)
    box = StreamBox("cupy")
    src = cupy.asarray(data("float64", N, "sig", pe.my_pe))
    dst = nv.zeros(N, "float64", like="cupy")
    sig = nv.zeros(1, "uint64", like="cupy")
    phase()
    nv.put_signal(dst, src, sig, 1, right, nbi=nbi, stream=box.stream)
    nv.signal_wait_until(sig, "eq", 1, stream=box.stream)
    box.sync()
    np.testing.assert_array_equal(host(dst), data("float64", N, "sig", left))
    assert nv.signal_fetch(sig) == 1
    phase()
    nv.signal_op(sig, 5, right, op="add", stream=box.stream)
    nv.signal_wait_until(sig, nv.Cmp.CMP_GE, 6, stream=box.stream)
    box.sync()
    assert nv.signal_fetch(sig) == 6
    phase()
    nv.signal_op(sig, 0, right, op=nv.SignalOp.SIGNAL_SET, stream=box.stream)
    nv.quiet(stream=box.stream)
    box.sync()
    phase()
    assert nv.signal_fetch(sig) == 0
    nv.free(sig)
    nv.free(dst)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint64", "int16", "uint32"])
def test_wait_until(pe, dtype):
    right, left = neighbours(pe)
    box = StreamBox("cupy")
    ivar = nv.zeros(1, dtype, like="cupy")
    phase()
    nv.p(ivar, 7, right)
    nv.quiet()
    nv.wait_until(ivar, "==", 7, stream=box.stream)
    box.sync()
    assert host(ivar)[0] == 7
    phase()
    ivars = nv.zeros(4, dtype, like="cupy")
    ones = cupy.full(4, 3, dtype)
    phase()
    nv.put(ivars, ones, right)
    nv.quiet()
    nv.wait_until_all(ivars, ">=", 3, stream=box.stream)
    box.sync()
    values = cupy.asarray(np.array([3, 3, 3, 3], dtype))
    status = cupy.zeros(4, "int32")
    nv.wait_until_all_vector(ivars, "eq", values, status=status, stream=box.stream)
    box.sync()
    assert np.all(host(ivars) == 3)
    phase()
    nv.free(ivars)
    nv.free(ivar)


# --------------------------------------------------------------------------- sync


@pytest.mark.parametrize("stream", [False, True])
def test_sync_family(pe, stream):
    box = StreamBox("cupy") if stream else None
    kw = {"stream": box.stream} if box else {}
    nv.barrier(Team.TEAM_WORLD, **kw)
    nv.barrier_all(**kw)
    nv.sync(Team.TEAM_WORLD, **kw)
    nv.sync_all(**kw)
    nv.quiet(**kw)
    nv.flush(**kw)
    if box:
        box.sync()
    nv.fence()
    phase()


# --------------------------------------------------------------------------- collectives


REDUCE_CASES = [(op, dt) for op in ("sum", "prod", "min", "max") for dt in ("float32", "float64", "int32", "int64", "uint8")] + \
               [(op, dt) for op in ("and", "or", "xor") for dt in ("int32", "uint64", "int8")] + \
               [("sum", "float16"), ("max", "int16"), ("min", "uint16")]

_NP_REDUCE = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
              "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


def _reference(op, arrays):
    out = arrays[0].copy()
    for a in arrays[1:]:
        out = _NP_REDUCE[op](out, a).astype(out.dtype)
    return out


def _check_close(got, expect, dtype):
    if np.dtype(dtype).kind == "f":
        tol = 1e-2 if dtype == "float16" else 1e-5
        np.testing.assert_allclose(got.astype(np.float64), expect.astype(np.float64), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("stream", [None, "cupy", "cuda.core"])
@pytest.mark.parametrize("op,dtype", REDUCE_CASES)
def test_reduce(pe, op, dtype, stream):
    box = StreamBox(stream) if stream else None
    kw = {"stream": box.stream} if box else {}
    small = op == "prod"
    inputs = [data(dtype, N, f"reduce-{op}", r, small=small) for r in range(pe.n_pes)]
    src = nv.array(N, dtype, like="cupy")
    src[:] = cupy.asarray(inputs[pe.my_pe])
    dst = nv.zeros(N, dtype, like="cupy")
    phase()
    nv.reduce(Team.TEAM_WORLD, dst, src, op, **kw)
    if box:
        box.sync()
    _check_close(host(dst), _reference(op, inputs), dtype)
    phase()
    nv.free(dst)
    nv.free(src)


@pytest.mark.parametrize("stream", [None, "cupy"])
@pytest.mark.parametrize("op,dtype", [("sum", "float32"), ("max", "int32"), ("xor", "uint64"), ("prod", "float64")])
def test_reducescatter(pe, op, dtype, stream):
    box = StreamBox(stream) if stream else None
    kw = {"stream": box.stream} if box else {}
    n = 64
    inputs = [data(dtype, n * pe.n_pes, f"rs-{op}", r, small=op == "prod") for r in range(pe.n_pes)]
    src = nv.array(n * pe.n_pes, dtype, like="cupy")
    src[:] = cupy.asarray(inputs[pe.my_pe])
    dst = nv.zeros(n, dtype, like="cupy")
    phase()
    nv.reducescatter(Team.TEAM_WORLD, dst, src, op, **kw)
    if box:
        box.sync()
    full = _reference(op, inputs)
    _check_close(host(dst), full[pe.my_pe * n:(pe.my_pe + 1) * n], dtype)
    phase()
    nv.free(dst)
    nv.free(src)


@pytest.mark.parametrize("stream", [None, "cupy"])
@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "complex64", "uint64"])
def test_broadcast_fcollect_alltoall(pe, dtype, stream):
    box = StreamBox(stream) if stream else None
    kw = {"stream": box.stream} if box else {}
    n, npes, me = 32, pe.n_pes, pe.my_pe
    inputs = [data(dtype, n * npes, "coll", r) for r in range(npes)]
    src = nv.array(n * npes, dtype, like="cupy")
    src[:] = cupy.asarray(inputs[me])
    dst = nv.zeros(n * npes, dtype, like="cupy")
    phase()
    root = npes - 1
    nv.broadcast(Team.TEAM_WORLD, dst, src, root, nelems=n, **kw)
    if box:
        box.sync()
    np.testing.assert_array_equal(host(dst)[:n], inputs[root][:n])
    phase()
    nv.fcollect(Team.TEAM_WORLD, dst, src, nelems=n, **kw)
    if box:
        box.sync()
    np.testing.assert_array_equal(host(dst), np.concatenate([inputs[r][:n] for r in range(npes)]))
    phase()
    nv.alltoall(Team.TEAM_WORLD, dst, src, **kw)
    if box:
        box.sync()
    expect = np.concatenate([inputs[r][me * n:(me + 1) * n] for r in range(npes)])
    np.testing.assert_array_equal(host(dst), expect)
    phase()
    nv.free(dst)
    nv.free(src)


# --------------------------------------------------------------------------- atomics


def test_atomics(pe):
    npes, me = pe.n_pes, pe.my_pe
    counter = nv.zeros(1, "uint64", like="cupy")
    phase()
    if any(nv.peer_ptr(counter, r) for r in range(npes)):
        # host-initiated AMOs exist only over network transports: a clear error, not garbage
        with pytest.raises(nv.NvshmemUnsupportedError, match="network transports"):
            nv.atomic_fetch_add(counter, 1, 0)
        with pytest.raises(nv.NvshmemUnsupportedError):
            nv.atomic_fetch(counter, me)
        phase()
        nv.free(counter)
        pytest.skip("every PE is reached by P2P, where NVSHMEM has no host-initiated atomics")
    old = nv.atomic_fetch_add(counter, 1, 0)
    assert 0 <= old < npes
    nv.quiet()
    phase()
    assert nv.atomic_fetch(counter, 0) == npes
    phase()
    if me == 0:
        assert nv.atomic_compare_swap(counter, npes, 100, 0) == npes
        assert nv.atomic_swap(counter, 5, 0) == 100
        nv.atomic_set(counter, 10, 0)
        nv.atomic_inc(counter, 0)
        assert nv.atomic_fetch_inc(counter, 0) == 11
        nv.atomic_add(counter, 8, 0)
        nv.quiet()
        assert nv.atomic_fetch(counter, 0) == 20
    phase()
    assert nv.atomic_fetch(counter, 0) == 20
    phase()
    bits = nv.zeros(1, "int32", like="cupy")
    phase()
    nv.atomic_or(bits, 1 << me, 0)
    nv.quiet()
    phase()
    assert nv.atomic_fetch(bits, 0) == (1 << npes) - 1
    phase()
    if me == 0:
        assert nv.atomic_fetch_and(bits, 1, 0) == (1 << npes) - 1
        assert nv.atomic_fetch_xor(bits, 3, 0) == 1
        assert nv.atomic_fetch_or(bits, 4, 0) == 2
        nv.atomic_and(bits, 6, 0)
        nv.atomic_xor(bits, 1, 0)
        nv.quiet()
        assert nv.atomic_fetch(bits, 0) == 7
    phase()
    f = nv.zeros(1, "float32", like="cupy")
    phase()
    nv.atomic_add(f, 0.5, 0)
    nv.quiet()
    phase()
    assert nv.atomic_fetch(f, 0) == 0.5 * npes
    phase()
    for a in (f, bits, counter):
        nv.free(a)


# --------------------------------------------------------------------------- teams


def test_teams(pe):
    npes, me = pe.n_pes, pe.my_pe
    world = nv.split_strided(Team.TEAM_WORLD, 0, 1, npes)
    assert world is not None and world.n_pes() == npes and world.my_pe() == me
    assert world.translate_pe(npes - 1) == npes - 1
    cfg = world.config()
    assert "num_contexts" in cfg
    src = nv.full(8, me + 1, "int32", like="cupy")
    dst = nv.zeros(8, "int32", like="cupy")
    phase()
    nv.reduce(world, dst, src, "sum")
    assert np.all(host(dst) == npes * (npes + 1) // 2)
    world.sync()
    world.destroy()
    assert world.destroyed
    with pytest.raises(nv.NvshmemStateError):
        int(world)

    members = list(reversed(range(npes)))
    rev = nv.team_init(members)
    assert rev is not None
    assert rev.n_pes() == npes and rev.my_pe() == npes - 1 - me
    assert nv.translate_pe(rev, 0, Team.TEAM_WORLD) == npes - 1
    gathered = nv.zeros(8 * npes, "int32", like="cupy")
    phase()
    nv.fcollect(rev, gathered, src)
    expect = np.concatenate([np.full(8, m + 1, np.int32) for m in members])
    np.testing.assert_array_equal(host(gathered), expect)
    phase()
    rev.destroy()

    even = nv.split_strided(Team.TEAM_WORLD, 0, 2, (npes + 1) // 2)
    if me % 2 == 0:
        assert even is not None and even.my_pe() == me // 2
        even.destroy()
    else:
        assert even is None
    phase()
    x, y = nv.split_2d(Team.TEAM_WORLD, 1)
    assert x is not None and y is not None
    assert x.n_pes() == 1 and y.n_pes() == npes
    x.destroy()
    y.destroy()
    with pytest.raises(nv.NvshmemArgumentError):
        nv.team_destroy(Team.TEAM_WORLD)
    assert nv.team_config(Team.TEAM_WORLD)["version"] > 0
    phase()
    for a in (gathered, dst, src):
        nv.free(a)


def test_sub_team_collectives(pe):
    """Every second PE as a team (all PEs with 1 PE): reduce, fcollect, alltoall, broadcast on it;
    then the x/y teams of split_2d with rows of 2 PEs (a real grid from 4 PEs up)."""
    npes, me = pe.n_pes, pe.my_pe
    stride = 2 if npes >= 2 else 1
    members = list(range(0, npes, stride))
    team = nv.split_strided(Team.TEAM_WORLD, 0, stride, len(members))
    n, k = 16, len(members)
    inputs = {r: data("int32", n * k, "subteam", r) for r in members}
    src = nv.array(n * k, "int32", like="cupy")
    src[...] = cupy.asarray(inputs.get(me, np.zeros(n * k, np.int32)))
    dst = nv.zeros(n * k * k, "int32", like="cupy")
    phase()
    if team is not None:
        i = members.index(me)
        nv.reduce(team, dst, src, "sum", nreduce=n * k)
        np.testing.assert_array_equal(host(dst)[:n * k], sum(inputs.values()))
        nv.fcollect(team, dst, src, nelems=n)
        np.testing.assert_array_equal(host(dst)[:n * k], np.concatenate([inputs[r][:n] for r in members]))
        nv.alltoall(team, dst, src, nelems=n)
        np.testing.assert_array_equal(host(dst)[:n * k],
                                      np.concatenate([inputs[r][i * n:(i + 1) * n] for r in members]))
        nv.broadcast(team, dst, src, root=k - 1, nelems=n)
        np.testing.assert_array_equal(host(dst)[:n], inputs[members[-1]][:n])
        team.destroy()
    phase()
    xrange = min(2, npes)
    x, y = nv.split_2d(Team.TEAM_WORLD, xrange)
    row = [r for r in range(npes) if r // xrange == me // xrange]
    col = [r for r in range(npes) if r % xrange == me % xrange]
    assert (x.n_pes(), x.my_pe(), y.n_pes(), y.my_pe()) == (len(row), row.index(me), len(col), col.index(me))
    assert nv.translate_pe(y, 0, Team.TEAM_WORLD) == col[0]
    one = nv.full(4, me, "int64", like="cupy")
    total = nv.zeros(4, "int64", like="cupy")
    phase()
    nv.reduce(y, total, one, "sum")
    assert (host(total) == sum(col)).all()
    nv.reduce(x, total, one, "max")
    assert (host(total) == max(row)).all()
    x.destroy(), y.destroy()
    phase()
    for a in (src, dst, one, total):
        nv.free(a)


def test_no_leaks_at_end(pe):
    phase()
    assert nv.leak_report() is None, nv.leak_report()


# --------------------------------------------------------------------------- exit paths (a child process of rank 0)


def _child(code: str):
    import os
    import subprocess
    import sys
    import textwrap

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NVSHMEM_DSL_", "OMPI_", "PMI_", "PMIX_", "MV2_", "HYDRA_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=180, env=env)


def test_exit_without_finalize(pe):
    if pe.my_pe != 0:
        pytest.skip("runs once, in a child process of PE 0")
    proc = _child("""
        import nvshmem_dsl as nv
        nv.init()
        b = nv.buffer(1024)
        print("READY", nv.n_pes())
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "READY 1" in proc.stdout
    assert "PE 0: finalize() was not called; finalized at exit" in proc.stderr
    assert "1 symmetric allocation(s), 1024 bytes" in proc.stderr
    proc = _child("""
        import nvshmem_dsl as nv
        nv.init()
        raise RuntimeError("boom")
    """)
    assert proc.returncode == 1, proc.stderr[-3000:]  # Python's status, no signal of the teardown
    assert "RuntimeError: boom" in proc.stderr
    assert "PE 0: finalize() was not called; finalized at exit" in proc.stderr  # one PE: nobody to wait for


def test_context_manager_session(pe):
    if pe.my_pe != 0:
        pytest.skip("runs once, in a child process of PE 0")
    proc = _child("""
        import warnings
        import nvshmem_dsl as nv
        with nv.init() as s:
            x = nv.zeros(8, "float32", like="cupy")
            with nv.buffer(64) as b:
                pass
        assert not nv.is_initialized()
        print("DONE", s.active)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DONE False" in proc.stdout
    assert "NvshmemLeakWarning" in proc.stderr and "32 B" in proc.stderr
