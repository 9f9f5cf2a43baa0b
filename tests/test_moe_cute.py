"""The CuTe DSL MoE kernels (nvshmem_dsl.kernels.moe.cute), on CPU: both take the Numba kernels'
arguments and call exactly the protocol's NVSHMEM functions; both compile to PTX for sm_90a
(512 threads, tensors and eight 64-bit scalars, NVSHMEM inlined, the fence before each signal, the
signal waits' polling loops, the dispatch's ballot count, rows in 16-byte vectors, 64-bit index arithmetic,
the combine's sum rounded as the Numba kernel's: mul.rn and add.rn, never an fma); and the launches
compile a cubin once per (kind, arch) and pass what the Numba launches pass (marshalled from host
arrays, no launch: no GPU here)."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

cute = pytest.importorskip("cutlass.cute")
import cutlass  # noqa: E402

try:
    from nvshmem_dsl._libs import bitcode_path

    bitcode_path("sm_90a")
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

import nvshmem_dsl.cute as nv  # noqa: E402
from nvshmem_dsl.cute import _compile  # noqa: E402
from nvshmem_dsl.kernels import moe  # noqa: E402
from nvshmem_dsl.kernels.moe import _layout  # noqa: E402
from nvshmem_dsl.kernels.moe import cute as mc  # noqa: E402
from nvshmem_dsl.kernels.moe import numba as mn  # noqa: E402
from test_cute_api import PTX_OPTIONS, _called, _check_ptx  # noqa: E402
from test_kernels_cute import _WAIT, _params, record_launches  # noqa: E402

KINDS = ("dispatch", "combine")
#: The NVSHMEM functions each kernel calls (the protocol's), and no other.
CALLS = {
    "dispatch": {nv.DISPATCH["put_nbi_block"]["BFloat16"], nv.DISPATCH["p"]["Int32"], nv.DISPATCH["fence"][None],
                 nv.DISPATCH["signal_op"][None], nv.DISPATCH["signal_wait_until"][None], nv.DISPATCH["quiet"][None],
                 nv.DISPATCH["ptr"][None]},
    "combine": {nv.DISPATCH["put_nbi_block"]["BFloat16"], nv.DISPATCH["fence"][None], nv.DISPATCH["signal_op"][None],
                nv.DISPATCH["wait_until"]["Uint64"], nv.DISPATCH["quiet"][None], nv.DISPATCH["ptr"][None]},
}
#: The kernels' arrays: the tensor parameters before the eight Int64 scalars.
ARRAYS = {"dispatch": 6, "combine": 8}


@pytest.fixture(scope="module")
def ptx():
    """kind -> PTX, each compiled once (a few seconds each)."""
    done = {}

    def get(kind):
        if kind not in done:
            done[kind] = mc.compile_ptx(kind, "sm_90a", options=PTX_OPTIONS)
        return done[kind]

    return get


def test_kernels_take_the_numba_kernels_arguments():
    assert set(mc.KERNELS) == set(KINDS)
    for kind, k in mc.KERNELS.items():
        assert list(inspect.signature(k).parameters) == list(inspect.signature(getattr(mn, kind).py_func).parameters)
        assert len(mc._ARRAY_TYPES[kind]) == ARRAYS[kind]
    for name in ("launch_dispatch", "launch_combine"):
        assert inspect.signature(getattr(mc, name)) == inspect.signature(getattr(mn, name)), name
    assert mc.ARRAYS == "torch" and mc.THREADS == _layout.THREADS
    assert mc.MAX_TOPK == _layout.MAX_TOPK
    assert mc.BLOCK_H == 16 * mc.THREADS and mc.WARPS * 32 == mc.THREADS
    assert "cute" in moe.DSLS
    with pytest.raises(ValueError, match="no MoE kernel"):
        mc.compile_ptx("gather")


@pytest.mark.parametrize("kind", KINDS)
def test_calls_the_protocols_functions(kind):
    """Traced (no compile): exactly the NVSHMEM functions of the protocol."""
    token = _compile._compile_arch.set("sm_90a")
    try:
        text = str(cute.compile.to_precompiled_mlir(mc._LAUNCHERS[kind], *mc._example_args(kind),
                                                    options="--gpu-arch sm_90a"))
    finally:
        _compile._compile_arch.reset(token)
    assert set(_called(text)) == CALLS[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_compiles_to_ptx(ptx, kind):
    text = ptx(kind)
    assert re.search(r"^\.target sm_90a\b", text, re.M)
    assert len(re.findall(r"^\.visible \.entry ", text, re.M)) == 1
    # (arrays, epoch, T, K, H, L, me, npes, T_max)
    assert _params(text, kind) == ["tensor"] * ARRAYS[kind] + ["u64"] * 8
    assert re.search(rf"^\.reqntid {_layout.THREADS}, 1, 1\b", text, re.M)
    # NVSHMEM inlined: no call of an API function, no indirect call; the device state is there
    _check_ptx(text)
    helpers = set(re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$.]+)", text))
    assert any("transfer_rma_nbi" in h for h in helpers), helpers  # the warp put's remote transport
    assert any("quiet" in h for h in helpers), helpers
    assert "membar.sys" in text  # the fence before each signal
    assert _WAIT.search(text)  # the signal waits poll their words
    assert "bar.sync" in text
    # the block-strided loops count in 64 bits (recv_x passes 2**31 elements)
    assert re.search(r"\bmul\.lo\.s64\b|\bmad\.lo\.s64\b|\bmul\.wide\.s32\b", text)
    assert re.search(rf"add\.s64\s+(%rd\d+),\s*\1,\s*{_layout.THREADS};", text)


def test_dispatch_counts_the_matches_by_ballots(ptx):
    """The matches' running count over THREADS entries of topk: a ballot a warp, its popcount, the
    warps' totals in shared memory (the C++ twin's scan); the match stored as int32."""
    text = ptx("dispatch")
    assert "vote.sync.ballot.b32" in text and re.search(r"\bpopc\.b32\b", text)
    assert re.search(r"\bst\.shared\.b32\b", text) and re.search(r"\bld\.shared\.(?:v4\.)?(?:b|s)32\b", text)
    # the word: epoch << 32 | count; the count stored from an awaited word's low half
    assert re.search(r"shl\.b64\s+%rd\d+,\s*%rd\d+,\s*32;", text)
    assert re.search(r"st\.global\.b32", text)


@pytest.mark.parametrize("kind", KINDS)
def test_rows_to_a_reachable_peer_by_vector_stores(ptx, kind):
    """Where nvshmem_ptr reaches the row's PE, a warp copies a row by 16-byte vectors through the
    peer's address (NVSHMEM put's P2P path), four loaded before they are stored; the combine's rows
    are summed from 16-byte vectors too; put_nbi_block otherwise (test_calls_the_protocols_functions)."""
    text = ptx(kind)
    blocks = re.split(r"^\$L__BB\d+_\d+:", text, flags=re.M)  # basic blocks
    assert any(len(re.findall(r"\bld\.global\.v4\.b32\b", bb)) >= 4 and len(re.findall(r"\bst\.global\.v4\.b32\b", bb)) >= 4
               for bb in blocks), kind
    if kind == "combine":
        # the combine words polled by the threads at once, then NVSHMEM's wait_until of one
        assert re.search(r"\bld\.relaxed\.sys\.global\.b64\b", text)
        assert len(re.findall(r"\bld\.global\.v4\.b32\b", text)) >= 4 + 8  # the copy; 4 slots x 2 vectors


def test_combine_sums_as_the_numba_kernel(ptx):
    """float32 products and sums each rounded (mul.rn, add.rn: no fma, no flush to zero), as
    Numba's combine compiles; rounded to bfloat16 to nearest even."""
    text = ptx("combine")
    assert re.search(r"\bmul\.rn\.f32\b", text) and re.search(r"\badd\.rn\.f32\b", text)
    assert not re.search(r"\bfma\.", text) and ".ftz" not in text
    assert not re.search(r"\b(?:mul|add)\.f32\b", text)  # ptxas may contract these: none left
    assert "cvt.f32.bf16" in text and "cvt.rn.bf16.f32" in text
    assert re.search(r"\bst\.global\.b16\b", text)


def test_launches_up_to_the_launch(monkeypatch):
    """launch_dispatch / launch_combine on host arrays, up to the launch (which needs a GPU): each
    compiles once per (kind, arch) to a cubin, passes the arrays as tensors of their element types
    (bfloat16 also as its int16 bits), the Numba launches' scalars, the grid and the stream; the
    compiled function marshals every argument, also of a call with no tokens."""
    from cuda.bindings import driver

    calls, real = record_launches(monkeypatch, mc)
    numba_args = {}

    class NumbaKernel:
        def __init__(self, kind):
            self.kind = kind

        def __getitem__(self, config):
            return lambda *args: numba_args.setdefault(self.kind, (config, args))

    for kind in KINDS:
        monkeypatch.setattr(mn, kind, NumbaKernel(kind))
    monkeypatch.setattr(mn, "_stream", lambda handle: handle)
    lay = _layout.Layout(npes=2, local_experts=3, hidden=64, topk=4, max_tokens=8)
    T, rows = 5, lay.recv_rows
    bf = lambda n: np.zeros(n, np.int16)  # noqa: E731  bfloat16 as its bits
    x, topk, w = bf(T * lay.hidden), np.zeros(T * lay.topk, np.int64), np.zeros(T * lay.topk, np.float32)
    recv_x, recv_src, y = bf(2 * rows * lay.hidden), np.zeros(2 * rows, np.int32), bf(rows * lay.hidden)
    comb_x, out = bf(lay.max_tokens * lay.topk * lay.hidden), bf(T * lay.hidden)
    sig, recv_count = np.zeros(lay.signal_words, np.uint64), np.zeros(lay.local_experts * lay.npes, np.int32)
    d_arrays = (x, topk, recv_x, recv_src, sig, recv_count)
    c_arrays = (y, topk, w, recv_src, comb_x, sig, recv_count, out)
    for m in (mc, mn):
        m.launch_dispatch(lay, *d_arrays, 5, T, 1, 7)
        m.launch_combine(lay, *c_arrays, 5, T, 1, 7)
    assert [k for k, _ in calls] == [real("dispatch", "sm_90a"), real("combine", "sm_90a")]  # cached
    for (k, args), kind, arrays in zip(calls, KINDS, (d_arrays, c_arrays)):
        n = ARRAYS[kind]
        assert k.linked_cubin is not None and k.linked_cubin[:4] == b"\x7fELF"
        assert [t.element_type for t in args[:n]] == list(mc._ARRAY_TYPES[kind])
        assert [t.data_ptr for t in args[:n]] == [a.ctypes.data for a in arrays]
        config, want = numba_args[kind]
        assert config == (lay.grid, mc.THREADS, 7)
        assert args[n:n + 8] == want[n:]  # epoch, T, K, H, L, me, npes, T_max: the Numba launch's
        assert args[n + 8] == lay.grid
        assert isinstance(args[n + 9], driver.CUstream) and int(args[n + 9]) == 7
        exe, _ = k._fn.generate_execution_args(*args)
        assert len(exe) == n + 8 + 2  # a descriptor per tensor, the scalars, grid and stream
    # the launch's dynamic shared memory, as CuTe infers it: dispatch's matches and warps' totals
    smem = 4 * (mc.THREADS + mc.WARPS)
    assert f"llvm.mlir.constant({smem} : i64)" in str(real("dispatch", "sm_90a")._fn.ir_module)
    # a PE with no tokens this call: empty x, topk (and weights, out)
    calls.clear()
    empty = bf(0)
    mc.launch_dispatch(lay, empty, topk[:0], recv_x, recv_src, sig, recv_count, 6, 0, 1, 0)
    mc.launch_combine(lay, y, topk[:0], w[:0], recv_src, comb_x, sig, recv_count, empty, 6, 0, 1, 0)
    for k, args in calls:
        k._fn.generate_execution_args(*args)
