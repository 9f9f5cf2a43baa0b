"""MoE dispatch and combine (nvshmem_dsl.kernels.moe) on GPUs, any number of PEs, in every DSL that
imports here: hidden 7168, top-8 routing over 16 experts spread over the PEs, each PE with its own
number of tokens; random routing with masked slots, an overfull expert (every token's first choice),
an empty one, and tokens naming an expert twice; rows that 16-byte vectors do not fit (hidden 1003, an
x not 16-byte aligned); dispatch's rows and counts checked against the
routing; combine against a torch reference; 100 dispatch/expert/combine rounds back to back on one stream, no host barrier.

Run with the other kernel tests: tests/gpu/run_suite.py --dsl kernels
"""
import importlib

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import shapes as S  # noqa: E402
from nvshmem_dsl.kernels.moe import DSLS  # noqa: E402  (numba, triton, cute)

session = S.session_fixture()

HIDDEN, TOPK, EXPERTS, MAX_TOKENS = 7168, 8, 16, 128


@pytest.fixture(params=DSLS)
def dsl(request):
    try:
        importlib.import_module(f"nvshmem_dsl.kernels.moe.{request.param}")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"nvshmem_dsl.kernels.moe.{request.param} does not import: {exc}")
    return request.param


def _tokens(pe, call, npes):
    return MAX_TOKENS - (pe + call) % 4  # every PE and call its own count


def _case(pe, call, npes, routing, hidden=HIDDEN):
    """(x, topk_idx, topk_weights) of one PE and call, the same wherever it is computed. ``routing``:
    "random" (distinct experts a token), "overfull" (expert 0 every token's first choice) or "repeats"
    (some tokens name an expert twice: sent once, its result counted for both slots)."""
    T = _tokens(pe, call, npes)
    g = torch.Generator(device="cuda").manual_seed(1000 * pe + call)
    t = torch.arange(T, device="cuda").view(-1, 1)
    h = torch.arange(hidden, device="cuda").view(1, -1)
    x = (((t * 3 + h * 7 + pe * 5 + call) % 15) - 7).to(torch.bfloat16)
    topk = torch.rand(T, EXPERTS, generator=g, device="cuda").argsort(dim=1)[:, :TOPK].contiguous()
    if routing == "overfull":
        topk[topk == 0] = EXPERTS - 1  # (masked below)
        topk[:, 0] = 0  # expert 0 gets every token
    elif routing == "repeats":
        topk[::3, 2] = topk[::3, 0]
    topk[topk == EXPERTS - 1] = -1  # the last expert gets none
    topk[::5, TOPK - 1] = -1  # and some slots are masked
    weights = (1.0 / 2 ** (torch.arange(TOPK, device="cuda") % 4)).to(torch.float32).expand(T, TOPK).contiguous()
    return x, topk, weights


def _scale(e):
    return float(e + 1)


def _expected_rows(e, src, call, npes, routing, hidden=HIDDEN):
    x, topk, _ = _case(src, call, npes, routing, hidden)
    t = (topk == e).any(dim=1).nonzero(as_tuple=True)[0]  # the tokens naming e, in order, once each
    return x[t]


def _expected_out(me, call, npes, routing, hidden=HIDDEN):
    x, topk, w = _case(me, call, npes, routing, hidden)
    scale = torch.where(topk >= 0, topk.to(torch.float32) + 1, torch.zeros_like(w))
    acc = torch.zeros(x.shape, dtype=torch.float32, device="cuda")
    for j in range(TOPK):  # in order, as the kernels sum
        acc += (w[:, j] * scale[:, j]).view(-1, 1) * x.to(torch.float32) * (topk[:, j] >= 0).view(-1, 1)
    return acc.to(torch.bfloat16)


def _experts(buf, recv_x, y, me):
    """The 'experts': local expert l multiplies its rows by its global number + 1."""
    L = buf.layout.local_experts
    scale = torch.tensor([_scale(me * L + l) for l in range(L)], device="cuda", dtype=torch.bfloat16)
    torch.mul(recv_x, scale.view(L, 1, 1, 1), out=y)


def _dispatch_and_combine(dsl, routing, hidden=HIDDEN, shift=0):
    """One round checked; ``shift``: x starts that many elements into its symmetric array (shift % 8:
    rows not 16-byte aligned, moved by elements where a kernel moves aligned rows in vectors)."""
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.moe import MoEBuffer
    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    buf = MoEBuffer(MAX_TOKENS, hidden, EXPERTS, TOPK)
    L = buf.layout.local_experts
    flat = nvshmem.array((MAX_TOKENS * hidden + shift,), "bfloat16", like="torch")
    xs = flat[shift:].view(MAX_TOKENS, hidden)
    y = buf.expert_output()
    x, topk, w = _case(me, 0, npes, routing, hidden)
    xs[:x.shape[0]].copy_(x)
    torch.cuda.synchronize()
    recv_x, counts = buf.dispatch(xs[:x.shape[0]], topk, dsl=dsl)
    torch.cuda.synchronize()
    wrong = []  # checked after combine: a PE that stopped here would leave its peers waiting in combine
    for l in range(L):
        for src in range(npes):
            want = _expected_rows(me * L + l, src, 0, npes, routing, hidden)
            if int(counts[l, src]) != want.shape[0]:
                wrong.append(f"expert {me * L + l} from PE {src}: count {int(counts[l, src])}, want {want.shape[0]}")
            elif not torch.equal(recv_x[l, src, :want.shape[0]], want):
                wrong.append(f"expert {me * L + l} from PE {src}: rows")
    _experts(buf, recv_x, y, me)
    out = buf.combine(y, topk, w, dsl=dsl)
    torch.cuda.synchronize()
    assert not wrong, f"PE {me}: dispatch: {wrong[:4]}"
    assert torch.equal(out, _expected_out(me, 0, npes, routing, hidden)), f"PE {me}: combine"
    buf.free()
    nvshmem.free(flat)


@pytest.mark.parametrize("routing", ("random", "overfull", "repeats"))
def test_dispatch_and_combine(dsl, routing):
    _dispatch_and_combine(dsl, routing)


@pytest.mark.parametrize("hidden,shift", [(1003, 0), (HIDDEN, 3)], ids=["hidden-1003", "x-unaligned"])
def test_rows_not_in_vectors(dsl, hidden, shift):
    """Rows of a hidden size not a multiple of 8 (16-byte vectors do not fit: the kernels move and sum
    them by elements), and an x not 16-byte aligned (the Numba dispatch copies its rows by elements)."""
    _dispatch_and_combine(dsl, "repeats", hidden, shift)


def test_back_to_back(dsl):
    """100 rounds of dispatch, experts, combine on one stream, fresh data and routing each round."""
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.moe import MoEBuffer
    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    rounds = 100
    buf = MoEBuffer(MAX_TOKENS, HIDDEN, EXPERTS, TOPK)
    xs = nvshmem.array((MAX_TOKENS, HIDDEN), "bfloat16", like="torch")
    y = buf.expert_output()
    routings = ("overfull", "random", "repeats")
    cases = [_case(me, c, npes, routings[c % 3]) for c in range(rounds)]
    outs = [torch.empty_like(c[0]) for c in cases]
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        for c, (x, topk, w) in enumerate(cases):
            xs[:x.shape[0]].copy_(x)
            recv_x, _ = buf.dispatch(xs[:x.shape[0]], topk, dsl=dsl)
            _experts(buf, recv_x, y, me)
            buf.combine(y, topk, w, outs[c], dsl=dsl)
    stream.synchronize()
    for c in range(rounds):
        assert torch.equal(outs[c], _expected_out(me, c, npes, routings[c % 3])), f"PE {me}: round {c}"
    buf.free()
    nvshmem.free(xs)


def test_bad_input(dsl):
    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.moe import MoEBuffer
    npes = nvshmem.n_pes()
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'num_experts'"):
        MoEBuffer(MAX_TOKENS, HIDDEN, 16 * npes + 1 if npes > 1 else 0, TOPK)
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'topk' must be at most 32"):
        MoEBuffer(MAX_TOKENS, HIDDEN, 64 * npes, 33)
    buf = MoEBuffer(8, HIDDEN, EXPERTS, TOPK)
    x = torch.zeros((4, HIDDEN), dtype=torch.bfloat16, device="cuda")
    topk = torch.zeros((4, TOPK), dtype=torch.int64, device="cuda")
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'x' must be symmetric"):
        buf.dispatch(x, topk, dsl=dsl)
    xs = nvshmem.array((16, HIDDEN), "bfloat16", like="torch")
    with pytest.raises(nvshmem.NvshmemArgumentError, match="at most 8"):
        buf.dispatch(xs, torch.zeros((16, TOPK), dtype=torch.int64, device="cuda"), dsl=dsl)
    with pytest.raises(nvshmem.NvshmemArgumentError, match="'topk_idx' must be contiguous int64"):
        buf.dispatch(xs[:4], topk.to(torch.int32), dsl=dsl)
    with pytest.raises(nvshmem.NvshmemStateError, match="no dispatch"):
        buf.combine(buf.expert_output(), topk, torch.ones((4, TOPK), device="cuda"), dsl=dsl)
    buf.free()
    nvshmem.free(xs)
