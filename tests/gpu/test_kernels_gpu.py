"""The communication kernels (nvshmem_dsl.kernels) on GPUs, any number of PEs, in every DSL that
imports here: one-shot and two-shot all-reduce, all-gather and reduce-scatter against a torch
reference, from one element to 64 MiB; 200 calls back to back on one stream with fresh data and
no host barrier; bad input. The one-shot at sizes around its LL threshold (_plan.LL_MAX_BYTES), and
back to back in both protocols, interleaved with the other kernels.

Run on every PE at once: `python -m nvshmem_dsl.run -n 2 -m pytest -m gpu tests/gpu/test_kernels_gpu.py`
(tests/gpu/run_suite.py --dsl kernels; several PEs per GPU need MPS).
"""
import importlib

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import shapes as S  # noqa: E402

session = S.session_fixture()

KINDS = ("one_shot", "two_shot", "all_gather", "reduce_scatter")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SIZES = (1, 7, 1000, 4099, 65537, 1 << 20, 16 << 20)  # elements; 16 Mi float32 = 64 MiB


def _dsl(name):
    try:
        importlib.import_module(f"nvshmem_dsl.kernels.{name}")
    except Exception as exc:  # noqa: BLE001 - a DSL that does not import here is skipped
        pytest.skip(f"nvshmem_dsl.kernels.{name} does not import: {exc}")
    return name


@pytest.fixture(params=("numba", "triton", "cute"))
def dsl(request):
    return _dsl(request.param)


def _pe():
    import nvshmem_dsl as nvshmem
    return nvshmem.my_pe(), nvshmem.n_pes()


def _values(count, pe, call, dtype):
    """Small integers (exact in bfloat16, and so are their sums) that differ by element, PE and call."""
    i = torch.arange(count, device="cuda", dtype=torch.int64)
    return (((i * 7 + pe * 3 + call * 5) % 17) - 8).to(dtype)


def _expected(kind, n, me, npes, call, dtype):
    """(input of this PE, expected output) of one call; n as the host call's size (x's elements)."""
    if kind in ("one_shot", "two_shot"):
        total = sum(_values(n, p, call, torch.float32) for p in range(npes))
        return _values(n, me, call, dtype), total.to(dtype)
    if kind == "all_gather":
        return _values(n, me, call, dtype), torch.cat([_values(n, p, call, dtype) for p in range(npes)])
    total = sum(_values(n * npes, p, call, torch.float32) for p in range(npes))
    return _values(n * npes, me, call, dtype), total[me * n:(me + 1) * n].to(dtype)


def _call(kind, x, out, dsl, stream=None):
    from nvshmem_dsl import kernels
    if kind in ("one_shot", "two_shot"):
        return kernels.all_reduce(x, out, algorithm=kind, dsl=dsl, stream=stream)
    return getattr(kernels, kind)(x, out, dsl=dsl, stream=stream)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_against_reference(dsl, kind, dtype, n):
    import nvshmem_dsl as nvshmem
    me, npes = _pe()
    if kind == "reduce_scatter" and n * npes > (16 << 20):
        n = (16 << 20) // npes  # 64 MiB of float32 in all
    src, want = _expected(kind, n, me, npes, 0, DTYPES[dtype])
    x = nvshmem.array(src.shape, dtype, like="torch")
    x.copy_(src)
    out = torch.full_like(want, float("nan"))  # poisoned
    torch.cuda.synchronize()
    got = _call(kind, x, out, dsl)
    torch.cuda.synchronize()
    assert got is out
    bad = (out != want).nonzero()
    assert bad.numel() == 0, (f"PE {me}: {kind} {dtype} n={n}: {bad.numel()} wrong, first at {bad[0].item()}: "
                              f"{out[bad[0]].item()} != {want[bad[0]].item()}")
    nvshmem.free(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_back_to_back(dsl, kind, dtype):
    """200 calls on one stream, fresh data each time, no host barrier or sync between them."""
    import nvshmem_dsl as nvshmem
    me, npes = _pe()
    calls, n = 200, 4099
    cases = [_expected(kind, n, me, npes, c, DTYPES[dtype]) for c in range(calls)]
    x = nvshmem.array(cases[0][0].shape, dtype, like="torch")
    outs = torch.full((calls, *cases[0][1].shape), float("nan"), dtype=DTYPES[dtype], device="cuda")
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        for c in range(calls):
            x.copy_(cases[c][0])  # after the previous call on this stream: it has read x
            _call(kind, x, outs[c], dsl)  # the current stream: `stream`
    stream.synchronize()
    for c in range(calls):
        assert torch.equal(outs[c], cases[c][1]), f"PE {me}: call {c} of {calls} is wrong"
    nvshmem.free(x)


def _ll_sizes(dtype):
    """One-shot sizes (elements): the largest of the LL protocol, the smallest above it."""
    from nvshmem_dsl.kernels import _plan
    top = _plan.LL_MAX_BYTES // _plan.ITEMSIZE[dtype]
    return top, top + 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_shot_around_the_ll_threshold(dsl, dtype):
    """The LL protocol up to its threshold (where every PE reaches every peer by load/store: one GPU,
    NVLink), put with signal above it; both against the reference."""
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl import kernels
    from nvshmem_dsl.kernels import _plan
    me, npes = _pe()
    load_store = kernels.default_workspace().load_store("test")
    for n, ll in zip(_ll_sizes(dtype), (True, False)):
        assert _plan.plan("one_shot", dtype, n, npes, load_store).ll is (ll and load_store)
        src, want = _expected("one_shot", n, me, npes, 0, DTYPES[dtype])
        x = nvshmem.array(src.shape, dtype, like="torch")
        x.copy_(src)
        out = torch.full_like(want, float("nan"))
        torch.cuda.synchronize()
        _call("one_shot", x, out, dsl)
        torch.cuda.synchronize()
        assert torch.equal(out, want), f"PE {me}: one_shot {dtype} n={n} (LL: {ll and load_store})"
        nvshmem.free(x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_back_to_back_both_protocols(dsl, dtype):
    """The one-shot LL (7 and the threshold's elements) and put with signal (one more), the two-shot
    and the all-gather, interleaved, 60 rounds on one stream with fresh data and no host barrier:
    an LL call's half is rewritten two calls later whatever ran in between."""
    import nvshmem_dsl as nvshmem
    me, npes = _pe()
    top, above = _ll_sizes(dtype)
    kinds = [("one_shot", 7), ("one_shot", top), ("two_shot", 1000), ("one_shot", above), ("all_gather", 7)]
    rounds = 60
    xs = {(k, n): nvshmem.array(_expected(k, n, me, npes, 0, DTYPES[dtype])[0].shape, dtype, like="torch")
          for k, n in kinds}
    cases = [[_expected(k, n, me, npes, r, DTYPES[dtype]) for k, n in kinds] for r in range(rounds)]
    outs = [[torch.full_like(w, float("nan")) for _, w in row] for row in cases]
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        for r in range(rounds):
            for j, (k, n) in enumerate(kinds):
                xs[k, n].copy_(cases[r][j][0])
                _call(k, xs[k, n], outs[r][j], dsl)
    stream.synchronize()
    for r in range(rounds):
        for j, (k, n) in enumerate(kinds):
            assert torch.equal(outs[r][j], cases[r][j][1]), f"PE {me}: round {r}, {k} n={n} is wrong"
    for x in xs.values():
        nvshmem.free(x)


def test_bad_input(dsl):
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl import kernels
    me, npes = _pe()
    local = torch.zeros(64, device="cuda")
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'x' must be symmetric"):
        kernels.all_reduce(local, dsl=dsl)
    x = nvshmem.zeros((64,), "int32", like="torch")
    with pytest.raises(nvshmem.NvshmemTypeError, match="'x' must be float32 or bfloat16"):
        kernels.all_reduce(x, dsl=dsl)
    nvshmem.free(x)
    x = nvshmem.zeros((64,), "float32", like="torch")
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'out' must not overlap"):
        kernels.all_reduce(x, x, dsl=dsl)
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'out' must hold"):
        kernels.all_gather(x, torch.zeros(npes * 64 + 1, device="cuda"), dsl=dsl)
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'algorithm'"):
        kernels.all_reduce(x, algorithm="three_shot", dsl=dsl)
    if npes > 1:
        # sizes that differ by PE: every PE raises (the first call of a shape is checked), none hangs
        with pytest.raises(nvshmem.NvshmemArgumentError, match="different arguments"):
            kernels.all_reduce(x[:32 + me], dsl=dsl)
    nvshmem.free(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_pes_may_mix_dsls(kind, dtype):
    """One protocol (_plan): PE p runs the DSL p % 3 of those that import, and the results are the same."""
    import nvshmem_dsl as nvshmem
    me, npes = _pe()
    dsls = []
    for name in ("numba", "triton", "cute"):
        try:
            importlib.import_module(f"nvshmem_dsl.kernels.{name}")
            dsls.append(name)
        except Exception:  # noqa: BLE001 - every PE sees the same DSLs
            pass
    if len(dsls) < 2 or npes < 2:
        pytest.skip("needs two PEs and two DSLs")
    src, want = _expected(kind, 4099, me, npes, 0, DTYPES[dtype])  # the one-shot: LL where peers load / store
    x = nvshmem.array(src.shape, dtype, like="torch")
    x.copy_(src)
    out = torch.full_like(want, float("nan"))
    torch.cuda.synchronize()
    _call(kind, x, out, dsls[me % len(dsls)])
    torch.cuda.synchronize()
    assert torch.equal(out, want), f"PE {me} ({dsls[me % len(dsls)]}): {kind} {dtype}"
    nvshmem.free(x)
