"""The Triton MoE kernels (nvshmem_dsl.kernels.moe.triton), on CPU: both compile to PTX for sm_90
(Triton's ``cubin`` stage left out, as in tests/test_kernels_triton.py) with the Numba kernels'
arguments, the protocol's NVSHMEM calls inlined, 64-bit index arithmetic, the combine's sum
rounded as the Numba kernel's, vector rows when the arrays are aligned, a cubin of each; and the
launches pass what the Numba launches pass, on the caller's stream."""

from __future__ import annotations

import inspect
import re

import pytest

triton = pytest.importorskip("triton")

try:
    from nvshmem_dsl._libs import bitcode_path

    bitcode_path(90)
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

import nvshmem_dsl.triton as nv  # noqa: E402
from nvshmem_dsl.kernels.moe import _layout  # noqa: E402
from nvshmem_dsl.kernels.moe import numba as mn  # noqa: E402
from nvshmem_dsl.kernels.moe import triton as mt  # noqa: E402
from nvshmem_dsl.linker import calls, link  # noqa: E402
from nvshmem_dsl.triton import _compile  # noqa: E402

KINDS = ("dispatch", "combine")
_CALL = re.compile(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(nvshmem\w+)")
_VECTOR = re.compile(r"\b(ld|st)\.global\.v[24]\.b(?:32|64)\b")
# TTIR arithmetic on 32-bit integers (the kernels compute indices in int64 only)
_I32_ARITH = re.compile(r"arith\.(?:addi|subi|muli|remsi|divsi|andi|ori|shli|minsi|maxsi)\b[^\n]*:\s*i32\b")

#: The NVSHMEM functions each kernel calls (the protocol's), and no other.
CALLS = {
    "dispatch": {nv.DISPATCH["put_nbi_block"]["bf16"], nv.DISPATCH["p"]["int32"], nv.DISPATCH["fence"][None],
                 nv.DISPATCH["signal_op"][None], nv.DISPATCH["signal_wait_until"][None], nv.DISPATCH["quiet"][None],
                 nv.DISPATCH["ptr"][None]},
    "combine": {nv.DISPATCH["put_nbi_block"]["bf16"], nv.DISPATCH["fence"][None], nv.DISPATCH["signal_op"][None],
                nv.DISPATCH["wait_until"]["uint64"], nv.DISPATCH["quiet"][None], nv.DISPATCH["ptr"][None]},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(kind, aligned) -> the compiled kernel (PTX only), compiled once in a fresh cache."""
    cache = str(tmp_path_factory.mktemp("triton-cache"))
    done = {}

    def get(kind, aligned=False):
        key = (kind, aligned)
        if key not in done:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("TRITON_CACHE_DIR", cache)
                mp.setenv("TRITON_DEFAULT_FP_FUSION", "1")
                done[key] = mt.compile(kind, aligned=aligned, ptx_only=True)
        return done[key]

    return get


def test_kernels_take_the_numba_kernels_arguments():
    assert set(mt.KERNELS) == set(KINDS)
    constexpr = {"dispatch": "SCAN", "combine": "BLOCK_H"}
    for kind, k in mt.KERNELS.items():
        numba_args = list(inspect.signature(getattr(mn, kind).py_func).parameters)
        assert k.arg_names == [*numba_args, constexpr[kind]], kind
        assert list(mt.signature(kind)) == k.arg_names, kind
        # epoch, T and me change from call to call and PE to PE: one kernel for all of them
        assert {p.name for p in k.params if p.do_not_specialize} == {"epoch", "T", "me"}, kind
    for name in ("launch_dispatch", "launch_combine"):
        assert inspect.signature(getattr(mt, name)) == inspect.signature(getattr(mn, name)), name
    assert mt.ARRAYS == "torch"
    assert mt.NUM_WARPS * 32 == _layout.THREADS
    assert mt.BLOCK_H * 2 == 32 * _layout.THREADS  # two 16-byte vectors of bfloat16 a thread a step
    assert mt.MAX_TOPK == _layout.MAX_TOPK
    assert mt.SCAN % _layout.THREADS == 0


@pytest.mark.parametrize("kind", KINDS)
def test_compiles_to_ptx_with_nvshmem_inlined(compiled, kind):
    ck = compiled(kind)
    ptx, llir, ttir = ck.asm["ptx"], ck.asm["llir"], ck.asm["ttir"]
    assert ck.metadata.name == kind and ck.metadata.num_warps == _layout.THREADS // 32
    assert re.search(rf"^\.visible \.entry {kind}\(", ptx, re.M)
    assert re.search(rf"^\.reqntid {_layout.THREADS}\b", ptx, re.M) or f".maxntid {_layout.THREADS}" in ptx
    # the calls the protocol makes (puts of rows, p of recv_src, fence, signal, wait, quiet), no other
    assert set(_compile.nvshmem_externs(llir)) == CALLS[kind]
    # NVSHMEM's API inlined: no call of an API function, only its out-of-line transport helpers
    assert not _CALL.findall(ptx)
    assert all(calls.is_helper(name) for name in calls.extern_calls(ptx)), calls.extern_calls(ptx)
    assert "nvshmemi_device_state_d" in ptx
    assert "membar.sys" in ptx  # the fence before each signal
    assert "ld.volatile" in ptx  # the signal wait polls its word
    assert "bar.sync" in ptx
    # index arithmetic in int64 only (recv_x passes 2**31 elements)
    assert not _I32_ARITH.findall(ttir), _I32_ARITH.findall(ttir)


def test_dispatch_lists_the_matches_in_token_order(compiled):
    """Per vector of topk: a count of matches (a sum), then each match as the smallest entry past
    the last (a min), its row put and its t * K + j sent, in a loop over the count."""
    ttir = compiled("dispatch").asm["ttir"]
    assert re.search(r'"tt\.reduce"[^\n]*\n[^\n]*\n\s*%\S+ = arith\.addi [^\n]*: i64', ttir)
    assert re.search(r'"tt\.reduce"[^\n]*\n[^\n]*\n\s*%\S+ = arith\.minsi [^\n]*: i64', ttir)
    put = ttir.index("nvshmemx_bfloat16_put_nbi_block")
    assert ttir.rindex("arith.minsi", 0, put) < put < ttir.index("nvshmem_int32_p") < ttir.index("nvshmem_fence")
    # the word: epoch << 32 | count, set (not added)
    assert re.search(r"arith\.shli %epoch, %c32_i64", ttir)
    assert f"%c{int(nv.SIGNAL_SET)}_i32" in ttir[ttir.index("nvshmem_fence"):]
    # the counts are stored as int32 from the awaited words
    assert re.search(r"arith\.andi %\S+, %c4294967295_i64", ttir)
    assert re.search(r"arith\.trunci %\S+ : i64 to i32[^\n]*\n\s*tt\.store %\S+, %\S+ : !tt\.ptr<i32>", ttir)


def test_combine_sums_as_the_numba_kernel(compiled):
    """float32 products and sums each rounded (mul.rn, add.rn: no fma, no flush to zero), as
    Numba's combine compiles; rounded to bfloat16 to nearest even."""
    ptx = compiled("combine").asm["ptx"]
    assert re.search(r"\bmul\.rn\.f32\b", ptx) and re.search(r"\badd\.rn\.f32\b", ptx)
    assert not re.search(r"\bfma\.", ptx) and ".ftz" not in ptx
    assert "cvt.f32.bf16" in ptx and "cvt.rn.bf16" in ptx


def test_combine_waits_a_word_a_thread(compiled):
    """The E combine words are polled by the program's threads at once (Triton's volatile vector
    load, a word a thread, as the C++ twin's threads each wait one), then one NVSHMEM wait_until of
    a word already set (its transport step); not thread 0 waiting word after word."""
    ck = compiled("combine")
    assert re.search(r"ld\.volatile\.global\.b64", ck.asm["ptx"])  # NVSHMEM's own polls are generic loads
    ttir = ck.asm["ttir"]
    assert re.search(r"tt\.load [^\n]*volatile = true", ttir) or "isVolatile = true" in ttir
    assert ttir.count("nvshmem_uint64_wait_until") == 1 and "wait_until_all" not in ttir
    assert mt.WAIT == _layout.THREADS


@pytest.mark.parametrize("kind", KINDS)
def test_aligned_arrays_get_vector_rows(compiled, kind):
    ptx = compiled(kind, aligned=True).asm["ptx"]
    assert {"ld", "st"} <= {m.group(1) for m in _VECTOR.finditer(ptx)}  # the rows' copies; the sum's rows


@pytest.mark.parametrize("kind", KINDS)
def test_rows_to_a_reachable_peer_by_vector_stores(compiled, kind):
    """Where nv.peer reaches the row's PE, the program copies ROWS rows at once by stores through the
    peer's address (NVSHMEM's put P2P path), 16-byte vectors as the loads, ROW_BLOCK elements of each
    row a step (four vectors a thread), not staged through shared memory; else put_nbi_block a row."""
    assert mt.ROWS * mt.ROW_BLOCK * 2 == 64 * _layout.THREADS
    ptx = compiled(kind, aligned=True).asm["ptx"]
    blocks = re.split(r"^\$L__BB\d+_\d+:", ptx, flags=re.M)  # basic blocks
    copies = [bb for bb in blocks if len(re.findall(r"\bld\.global\.v4\.b32\b", bb)) >= 4
              and len(re.findall(r"\bst\.global\.v4\.b32\b", bb)) >= 4 and "st.shared" not in bb
              and "bar.sync" not in bb]
    assert copies, "no block copying four vectors a thread without shared memory"
    ttir = compiled(kind).asm["ttir"]
    assert "nvshmem_ptr" in ttir and "nvshmemx_bfloat16_put_nbi_block" in ttir  # the P2P path and the other


def test_compile_ptx_leaves_tritons_hooks_as_they_were(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    hook = triton.knobs.runtime.add_stages_inspection_hook
    ptx = mt.compile_ptx("combine")
    assert re.search(r"^\.visible \.entry combine\(", ptx, re.M)
    assert triton.knobs.runtime.add_stages_inspection_hook is hook


@pytest.mark.parametrize("kind", KINDS)
def test_kernels_to_cubins(tmp_path, monkeypatch, kind):
    if link.ptxas() is None or link.nvjitlink_ptx_isa() is None:
        pytest.skip("needs ptxas and nvJitLink")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    ck = mt.compile(kind)
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    defined, _ = link.cubin_info(ck.asm["cubin"])
    assert defined["nvshmemi_device_state_d"] == 1


def test_launches_pass_what_the_numba_launches_pass(monkeypatch, torch_standin):
    """launch_dispatch / launch_combine: grid, the Numba launches' arguments, and the stream (a
    stand-in torch and kernels: no GPU here)."""
    current = torch_standin
    calls = {"triton": [], "numba": []}

    class Kernel:
        def __init__(self, dsl, kind):
            self.dsl, self.kind = dsl, kind

        def __getitem__(self, config):
            return lambda *args, **kw: calls[self.dsl].append((self.kind, config, args, kw, current[0]))

    for kind in KINDS:
        monkeypatch.setattr(mt, kind, Kernel("triton", kind))
        monkeypatch.setattr(mn, kind, Kernel("numba", kind))
    monkeypatch.setattr(mn, "_stream", lambda handle: handle)
    lay = _layout.Layout(npes=4, local_experts=3, hidden=7168, topk=8, max_tokens=128)
    for m in (mt, mn):
        m.launch_dispatch(lay, "x", "topk", "recv_x", "recv_src", "sig", "recv_count", 5, 100, 2, 0)
        m.launch_combine(lay, "y", "topk", "w", "recv_src", "comb_x", "sig", "recv_count", "out", 5, 100, 2,
                         0xABC)
        m.launch_dispatch(lay, "x", "topk", "recv_x", "recv_src", "sig", "recv_count", 6, 7, 2, 0xABC)
    got, want = calls["triton"], calls["numba"]
    assert [c[0] for c in got] == ["dispatch", "combine", "dispatch"]
    assert [c[2] for c in got] == [c[2] for c in want]  # the same arguments in the same order
    assert [c[1] for c in got] == [(lay.grid,)] * 3 and [c[1][0] for c in want] == [lay.grid] * 3
    assert [c[3] for c in got] == [{"SCAN": mt.SCAN, "num_warps": mt.NUM_WARPS},
                                   {"BLOCK_H": mt.BLOCK_H, "num_warps": mt.NUM_WARPS},
                                   {"SCAN": mt.SCAN, "num_warps": mt.NUM_WARPS}]
    assert got[0][4] == "default"
    assert got[1][4].handle == 0xABC and got[2][4] is got[1][4]  # one ExternalStream per handle
