"""The fused all-gather + GEMM (nvshmem_dsl.kernels.ag_gemm) on GPUs, any number of PEs, in Triton and
CuTe, both communications (a put kernel's CTAs, the copy engine): against torch's matmul of the
gathered A, from one row per PE (odd m, N and K not multiples of the tiles; Triton) to an
8192 x 8192 gathered A; b row- and column-major (Triton); 100 calls back to back on one stream with
fresh data and no host barrier (also alternating the communication); bad input. The CuTe kernel
takes whole tiles of m and N (128) and K a multiple of 8 only: other shapes are skipped for it (and
refused: test_bad_input).

Integer-valued data (|a|, |b| <= 4, K <= 8192) make every float32 sum exact whatever its order, so
those results must equal the reference bit for bit; random normal data are compared with bfloat16
tolerances.

Run on every PE at once: `python -m nvshmem_dsl.run -n 2 -m pytest -m gpu tests/gpu/test_ag_gemm_gpu.py`
(tests/gpu/run_suite.py --dsl kernels; several PEs per GPU need MPS).
"""
import importlib

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import shapes as S  # noqa: E402

session = S.session_fixture()

COMMS = ("ctas", "copy_engine")
#: (m rows a PE, K, N): one row; odd m, N and K off the tiles (128 x 256, K steps of 64); a few
#: tiles; K below one K step and K off the steps (CuTe: TMA fills zeros past K); a larger square one.
SHAPES = ((1, 16, 8), (7, 72, 40), (129, 1000, 300), (128, 256, 128), (256, 512, 512), (384, 1024, 384),
          (128, 40, 256), (256, 200, 128), (1000, 1024, 1024))


@pytest.fixture(params=("triton", "cute"))
def dsl(request):
    try:
        importlib.import_module(f"nvshmem_dsl.kernels.ag_gemm.{request.param}")
    except Exception as exc:  # noqa: BLE001 - a DSL that does not import here is skipped
        pytest.skip(f"nvshmem_dsl.kernels.ag_gemm.{request.param} does not import: {exc}")
    return request.param


@pytest.fixture(params=COMMS)
def comm(request):
    return request.param


def _takes(dsl, m, K, N, npes, row_major=True):
    """Skip shapes the DSL's kernel does not take (CuTe: whole tiles, row-major b)."""
    if dsl == "cute":
        from nvshmem_dsl.kernels.ag_gemm import cute as kc
        why = kc.check_shape(m, N, K, npes, row_major)
        if why:
            pytest.skip(why)


def _pe():
    import nvshmem_dsl as nvshmem
    return nvshmem.my_pe(), nvshmem.n_pes()


def _ints(rows, cols, salt):
    """Integers in [-4, 4] as bfloat16, differing by element and salt."""
    i = torch.arange(rows, device="cuda", dtype=torch.int64).view(-1, 1)
    j = torch.arange(cols, device="cuda", dtype=torch.int64).view(1, -1)
    return (((i * 7 + j * 3 + salt * 5 + (i * j) % 5) % 9) - 4).to(torch.bfloat16)


def _shard(pe, call, m, K):
    return _ints(m, K, 11 * pe + call)


def _weights(me, K, N):
    return _ints(K, N, 1000 + me)


def _reference(npes, call, m, K, b):
    """cat(every PE's shard) @ b: exact in float32 for these integers, rounded once to bfloat16."""
    full = torch.cat([_shard(p, call, m, K) for p in range(npes)])
    return (full.float() @ b.float()).to(torch.bfloat16)


def _symmetric(src):
    import nvshmem_dsl as nvshmem
    a = nvshmem.array(tuple(src.shape), "bfloat16", like="torch")
    a.copy_(src)
    return a


def _check(got, want, what):
    bad = (got != want).nonzero()
    assert bad.numel() == 0, (f"{what}: {bad.shape[0]} wrong, first at {tuple(bad[0].tolist())}: "
                              f"{got[tuple(bad[0])].item()} != {want[tuple(bad[0])].item()}")


@pytest.mark.parametrize("layout", ("row_major", "col_major"))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"m{m}-K{k}-N{n}" for m, k, n in SHAPES])
def test_against_reference(dsl, comm, shape, layout):
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.ag_gemm import all_gather_matmul
    me, npes = _pe()
    m, K, N = shape
    _takes(dsl, m, K, N, npes, layout == "row_major")
    a = _symmetric(_shard(me, 0, m, K))
    b = _weights(me, K, N)
    if layout == "col_major":
        b = b.t().contiguous().t()  # strides (1, K)
    want = _reference(npes, 0, m, K, b)
    out = torch.full_like(want, float("nan"))  # poisoned
    torch.cuda.synchronize()
    got = all_gather_matmul(a, b, out, dsl=dsl, comm=comm)
    torch.cuda.synchronize()
    assert got is out
    _check(out, want, f"PE {me}: {comm} m={m} K={K} N={N} {layout}")
    nvshmem.free(a)


def test_large(dsl, comm):
    """The benchmark's gathered A (8192 x 8192), N = 8192 / n_pes, fresh output."""
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.ag_gemm import all_gather_matmul
    me, npes = _pe()
    M = K = 8192
    m, N = M // npes, max(256, 8192 // npes)
    a = _symmetric(_shard(me, 0, m, K))
    b = _weights(me, K, N)
    torch.cuda.synchronize()
    got = all_gather_matmul(a, b, dsl=dsl, comm=comm)
    torch.cuda.synchronize()
    assert got.shape == (npes * m, N) and got.dtype == torch.bfloat16
    _check(got, _reference(npes, 0, m, K, b), f"PE {me}: {comm} large")
    nvshmem.free(a)


def test_random_data_within_bfloat16_tolerance(dsl, comm):
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.ag_gemm import all_gather_matmul
    me, npes = _pe()
    m, K, N = 256, 2048, 384

    def shard(p):
        g = torch.Generator(device="cuda").manual_seed(p)
        return torch.randn(m, K, generator=g, device="cuda").to(torch.bfloat16)

    a = _symmetric(shard(me))
    b = (torch.randn(K, N, device="cuda", generator=torch.Generator(device="cuda").manual_seed(99 + me))
         / K ** 0.5).to(torch.bfloat16)
    torch.cuda.synchronize()
    got = all_gather_matmul(a, b, dsl=dsl, comm=comm)
    want = torch.matmul(torch.cat([shard(p) for p in range(npes)]), b)  # cuBLAS, bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    nvshmem.free(a)


@pytest.mark.parametrize("mode", ("ctas", "copy_engine", "alternating"))
def test_back_to_back(dsl, mode):
    """100 calls on one stream, fresh data each time, no host barrier or sync between them."""
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.ag_gemm import all_gather_matmul
    me, npes = _pe()
    calls, (m, K, N) = 100, ((37, 96, 136) if dsl == "triton" else (128, 64, 128))
    b = _weights(me, K, N)
    a = nvshmem.array((m, K), "bfloat16", like="torch")
    shards = [_shard(me, c, m, K) for c in range(calls)]
    outs = torch.full((calls, npes * m, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        for c in range(calls):
            a.copy_(shards[c])  # after the previous call on this stream: its puts have read a
            comm = mode if mode != "alternating" else COMMS[c % 2]
            all_gather_matmul(a, b, outs[c], dsl=dsl, comm=comm)  # the current stream: `stream`
    stream.synchronize()
    for c in range(calls):
        _check(outs[c], _reference(npes, c, m, K, b), f"PE {me}: call {c} of {calls} ({mode})")
    nvshmem.free(a)


def test_stream_and_workspace_arguments(dsl, comm):
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels import Workspace
    from nvshmem_dsl.kernels.ag_gemm import all_gather_matmul
    me, npes = _pe()
    m, K, N = 128, 128, 128
    a = _symmetric(_shard(me, 0, m, K))
    b = _weights(me, K, N)
    ws, stream = Workspace(), torch.cuda.Stream()
    torch.cuda.synchronize()
    got = all_gather_matmul(a, b, dsl=dsl, comm=comm, stream=stream, workspace=ws, comm_ctas=3 if comm == "ctas"
                            else None)
    stream.synchronize()
    _check(got, _reference(npes, 0, m, K, b), f"PE {me}: {comm} own stream and workspace")
    assert ws.epoch == 1
    ws.free()
    nvshmem.free(a)


def test_bad_input(dsl):
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.ag_gemm import all_gather_matmul
    me, npes = _pe()
    b = _weights(me, 64, 32)
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'a' must be symmetric"):
        all_gather_matmul(torch.zeros(16, 64, device="cuda", dtype=torch.bfloat16), b, dsl=dsl)
    a32 = nvshmem.zeros((16, 64), "float32", like="torch")
    with pytest.raises(nvshmem.NvshmemTypeError, match="'a' must be bfloat16"):
        all_gather_matmul(a32, b, dsl=dsl)
    nvshmem.free(a32)
    a = nvshmem.zeros((16, 64), "bfloat16", like="torch")
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'b' must have K = 64 rows"):
        all_gather_matmul(a, b[:63], dsl=dsl)
    with pytest.raises(nvshmem.NvshmemTypeError, match="'b'"):
        all_gather_matmul(a, b.cpu(), dsl=dsl)
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'out' must be contiguous"):
        all_gather_matmul(a, b, torch.empty(16, 32, device="cuda", dtype=torch.bfloat16), dsl=dsl)
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'comm'"):
        all_gather_matmul(a, b, comm="nccl", dsl=dsl)
    if dsl == "cute":
        with pytest.raises(nvshmem.NvshmemArgumentError, match="dsl='cute' needs m"):
            all_gather_matmul(a, b, dsl=dsl)  # 16 rows: not a whole tile
    if npes > 1:
        # shards that differ by PE: every PE raises (the first call of a shape is checked), none hangs
        # K = 160 is no other test's and one CuTe takes (a multiple of 8): a shape one PE called before is not checked
        # again there (the check is made at each PE's first call of a shape), and the other PEs would wait
        # in it for that PE
        big = nvshmem.zeros((256, 160), "bfloat16", like="torch")  # whole CuTe tiles of rows either way
        with pytest.raises(nvshmem.NvshmemArgumentError, match="different arguments"):
            all_gather_matmul(big[:128 * (1 + me % 2)], _weights(me, 160, 128), dsl=dsl)
        nvshmem.free(big)
    nvshmem.free(a)


def test_gemm_waiting_by_signal_wait_until(dsl, monkeypatch):
    """The GEMM as it runs where a peer is not reachable by load/store (NVSHMEM's signal_wait_until
    instead of the signal_fetch poll; CuTe: its kernel "ag_gemm_wait_until"), forced on every PE;
    comm="ctas"."""
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels import ag_gemm
    monkeypatch.setattr(ag_gemm, "_all_mapped", lambda *args: False)
    me, npes = _pe()
    m, K, N = (129, 1000, 300) if dsl == "triton" else (256, 1000, 256)  # CuTe: whole tiles of m and N
    a = _symmetric(_shard(me, 0, m, K))
    b = _weights(me, K, N)
    torch.cuda.synchronize()
    got = ag_gemm.all_gather_matmul(a, b, dsl=dsl, comm="ctas")
    torch.cuda.synchronize()
    _check(got, _reference(npes, 0, m, K, b), f"PE {me}: signal_wait_until")
    with pytest.raises(nvshmem.NvshmemUnsupportedError, match="copy_engine' needs every PE reachable"):
        ag_gemm.all_gather_matmul(a, b, dsl=dsl, comm="copy_engine")
    nvshmem.free(a)
