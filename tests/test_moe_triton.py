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
    """The E combine words are polled by the program's threads at once, each thread its own word in a
    loop of volatile loads (a PTX loop in the thread, as the C++ twin's ``while (words[i] < epoch)``),
    then a barrier and one NVSHMEM wait_until of a word already set (its transport step); no poll
    loop of the whole program (a block-wide sum a poll, as before), not thread 0 waiting word after
    word."""
    ck = compiled("combine")
    ptx = ck.asm["ptx"]
    spin = re.search(r"(\$W\d+): ld\.volatile\.global\.u64 v, \[%rd\d+\]; setp\.lt\.u64 p, v, %rd\d+; "
                     r"@p bra (\$W\d+);", ptx)
    assert spin and spin.group(1) == spin.group(2), "no volatile poll loop in a thread"
    assert "bar.sync" in ptx[spin.end():ptx.index("nvshmemi_device_state_d", spin.end())]
    ttir = ck.asm["ttir"]
    assert "scf.while" not in ttir  # no program-wide poll loop
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


def _emulate_p2p_dispatch(topk, e):
    """The Triton dispatch's P2P path for expert e in numpy, expression by expression: per vector of
    SCAN entries, the matches (_matches), their running counts (tl.cumsum), recv_src by the counts,
    then per ROWS rows the entries _entry_of finds (key and offs reshaped to [SCAN // 32, 32] in
    element order, as tl.reshape keeps it).  Returns (recv_src, the rows' entries) in slot order."""
    import numpy as np

    T, K = topk.shape
    flat, TK, scan, rows = topk.reshape(-1), T * K, mt.SCAN, int(mt.ROWS)
    src, copied, count = {}, [], 0
    for base in range(0, TK, scan):
        offs = base + np.arange(scan)
        inside = offs < TK
        at = np.where(inside, offs, 0)
        hit = inside & (flat[at] == e)
        j = offs - (offs // K) * K
        for jj in range(1, K):
            ahead = np.where(hit & (j >= jj), flat[np.clip(offs - jj, 0, TK - 1)], -1)
            hit &= ahead != e
        rank = np.cumsum(hit)
        for o, r in zip(offs[hit], rank[hit]):
            src[count + r - 1] = int(o)
        n = int(hit.sum())
        key = np.where(hit, rank, 0).reshape(scan // 32, 32)
        offs_w = base + np.arange(scan).reshape(scan // 32, 32)
        for i0 in range(0, n, rows):
            i = i0 + np.arange(rows)
            sel = key[:, None, :] == (i + 1)[None, :, None]
            idx = np.where(sel, offs_w[:, None, :], 0).sum(axis=0).sum(axis=1)
            copied += [int(v) for v, live in zip(idx, i < n) if live]
        count += n
    assert sorted(src) == list(range(count))
    return [src[s] for s in range(count)], copied


@pytest.mark.parametrize("T,K,E", [(128, 8, 64), (37, 3, 4), (300, 8, 2), (64, 1, 2)])
def test_p2p_dispatch_finds_each_slots_entry(T, K, E):
    """The rows the P2P dispatch copies, slot by slot, are the protocol's (t * K + j of expert e in
    token order, a repeated expert at its first slot), as is recv_src."""
    import numpy as np

    rng = np.random.default_rng(T * 100 + K)
    topk = rng.integers(-1, E, size=(T, K))
    if K > 1:
        topk[::3, 1] = topk[::3, 0]  # repeated experts
    topk[:, 0] = np.where(np.arange(T) % 2 == 0, 0, topk[:, 0])  # an overfull expert (> SCAN // K rows)
    for e in range(E):
        want = [t * K + j for t in range(T) for j in range(K) if topk[t, j] == e and e not in topk[t, :j]]
        src, copied = _emulate_p2p_dispatch(topk, e)
        assert src == want and copied == want, e
        if e == 0:  # the overfull expert: several ROWS-row steps (and SCAN vectors, where T * K > SCAN)
            assert len(want) > int(mt.ROWS) and (want[-1] >= mt.SCAN) == (T * K > mt.SCAN)


@pytest.mark.parametrize("H", [8, 1000, 1024, 7168, 8200])
def test_copy_tile_covers_each_element_once(H):
    """_copy_rows' [ROW_BLOCK // WARP_H, ROWS, WARP_H] steps cover each element of a row once."""
    import numpy as np

    row_block, warp_h = int(mt.ROW_BLOCK), int(mt.WARP_H)
    hh0 = (np.arange(row_block // warp_h)[:, None] * warp_h + np.arange(warp_h)[None, :]).ravel()
    seen = np.zeros(H, int)
    for h in range(0, H, row_block):
        hh = h + hh0
        np.add.at(seen, hh[hh < H], 1)
    assert (seen == 1).all()
    assert warp_h == 32 * 8  # a warp's 32 lanes, one 16-byte vector of bfloat16 each


_LAYOUT = re.compile(r"^(#\w+) = #ttg\.blocked<\{sizePerThread = \[([\d, ]+)\], threadsPerWarp = \[([\d, ]+)\], "
                     r"warpsPerCTA = \[([\d, ]+)\]", re.M)


@pytest.mark.parametrize("kind", KINDS)
def test_p2p_rows_a_warp_a_row(compiled, kind):
    """The P2P copy's tile puts each of the ROWS rows on one warp (its 32 lanes along the row, 8
    bfloat16 a lane: 16-byte vectors), the C++ twin's copy_row, not a row spread over 4 warps."""
    ttgir = compiled(kind, aligned=True).asm["ttgir"]
    layouts = {m.group(1): tuple(tuple(int(v) for v in m.group(g).split(",")) for g in (2, 3, 4))
               for m in _LAYOUT.finditer(ttgir)}
    shape = f"{int(mt.ROW_BLOCK) // int(mt.WARP_H)}x{int(mt.ROWS)}x{int(mt.WARP_H)}"
    loads = re.findall(rf"= tt\.load %\S+, %\S+ : tensor<{shape}x!tt\.ptr<bf16>, (#\w+)>", ttgir)
    assert loads, f"no {shape} row copy"
    for name in loads:
        per_thread, lanes, warps = layouts[name]
        assert per_thread == (1, 1, 8) and lanes == (1, 1, 32), layouts[name]
        assert warps == (1, _layout.THREADS // 32, 1), layouts[name]


def test_dispatch_finds_its_rows_without_block_reductions(compiled):
    """Each copy step's rows are found in the warp that copies them (a sum in each lane, then a warp
    reduction): no shared memory or barrier in the loop over the ROWS-row steps, and the dispatch's
    barriers and butterfly shuffles down from the ROWS x SCAN block-wide sum's (37 and 152 in PTX,
    before; 21 and 24 after)."""
    ck = compiled("dispatch", aligned=True)
    ptx = ck.asm["ptx"]
    assert len(re.findall(r"\bbar\.sync\b", ptx)) <= 24
    assert len(re.findall(r"\bshfl\.sync\.bfly\b", ptx)) <= 32
    # the TTGIR loop over the steps (step ROWS), up to its end: reductions but no layout conversion
    # through shared memory (ttg.local_alloc) and no barrier
    ttgir = ck.asm["ttgir"]
    start = re.search(rf"scf\.for %i0 = %\S+ to %n step %c{int(mt.ROWS)}_i64", ttgir)
    assert start, "no loop over the matches ROWS at a time"
    body = ttgir[start.end():ttgir.index("tt.store", ttgir.index(f"x{int(mt.WARP_H)}x!tt.ptr<bf16>", start.end()))]
    assert body.count('"tt.reduce"') == 2  # in each lane, then across the warp
    assert "local_alloc" not in body and "ttg.barrier" not in body
