"""The Triton communication kernels (nvshmem_dsl.kernels.triton), on CPU: every kind and element
type compiles to PTX for sm_90 (Triton's ``cubin`` stage left out, as in tests/test_triton_api.py),
with the protocol's arguments, NVSHMEM's calls inlined, 64-bit index arithmetic, vector copies
when the arrays are aligned, and one kernel to a cubin."""

from __future__ import annotations

import re

import pytest

triton = pytest.importorskip("triton")

try:
    from nvshmem_dsl._libs import bitcode_path

    bitcode_path(90)
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

import nvshmem_dsl.triton as nv  # noqa: E402
from nvshmem_dsl.kernels import _plan  # noqa: E402
from nvshmem_dsl.kernels import triton as kt  # noqa: E402
from nvshmem_dsl.linker import calls, link, plan  # noqa: E402
from nvshmem_dsl.triton import _compile  # noqa: E402

CASES = [(kind, dtype) for kind in _plan.KINDS for dtype in _plan.DTYPES]
PARAMS = ["out", "x", "stage", "sig", "epoch", "n", "span", "chunk", "me", "npes", "BLOCK", "NPES"]
_CALL = re.compile(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(nvshmem\w+)")
_VECTOR = re.compile(r"\b(ld|st)\.global\.v[24]\.b(?:32|64)\b")
# TTIR arithmetic on 32-bit integers (the kernels compute indices in int64 only)
_I32_ARITH = re.compile(r"arith\.(?:addi|subi|muli|remsi|divsi|andi|minsi|maxsi)\b[^\n]*:\s*i32\b")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(kind, dtype, aligned) -> the compiled kernel (PTX only), compiled once in a fresh cache."""
    cache = str(tmp_path_factory.mktemp("triton-cache"))
    done = {}

    def get(kind, dtype, aligned=False):
        key = (kind, dtype, aligned)
        if key not in done:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("TRITON_CACHE_DIR", cache)
                mp.setenv("TRITON_DEFAULT_FP_FUSION", "1")
                mp.setattr(triton.knobs.runtime, "add_stages_inspection_hook",
                           kt._ptx_only_hook(triton.knobs.runtime.add_stages_inspection_hook))
                done[key] = kt.compile(kind, dtype, aligned=aligned)
        return done[key]

    return get


def test_kernels_take_the_protocols_arguments():
    assert set(kt.KERNELS) == {*_plan.KINDS, _plan.LL_KERNEL}
    for kind, k in kt.KERNELS.items():
        assert k.arg_names == PARAMS, kind
        # epoch and me change from call to call and PE to PE: one kernel for all of them
        dns = {p.name for p in k.params if p.do_not_specialize}
        assert dns == {"epoch", "me"}, kind
    assert kt.NUM_WARPS * 32 == _plan.THREADS
    for dtype, size in _plan.ITEMSIZE.items():
        assert kt.BLOCK[dtype] * size == 16 * _plan.THREADS  # 16 bytes a thread a step


@pytest.mark.parametrize("kind", [*_plan.KINDS, _plan.LL_KERNEL])
def test_block_is_one_element_a_thread_where_a_range_fits(kind):
    """BLOCK: one element (LL: word) a thread where a block's range fits in THREADS of them, as the C++
    twin's loop takes them; else the 16-byte vector step."""
    vector = {d: kt.LL_BLOCK if kind == _plan.LL_KERNEL else kt.BLOCK[d] for d in _plan.DTYPES}
    assert kt.SMALL_BLOCK == _plan.THREADS
    for dtype in _plan.DTYPES:
        assert kt.block(kind, dtype) == vector[dtype]
        for chunk in (1, 8, _plan.THREADS):
            assert kt.block(kind, dtype, chunk) == _plan.THREADS
        assert kt.block(kind, dtype, _plan.THREADS + 1) == vector[dtype] > _plan.THREADS
        assert kt.constexprs(kind, dtype, 3, 64) == {"BLOCK": _plan.THREADS, "NPES": 3}


@pytest.mark.parametrize("kind", [*_plan.KINDS, _plan.LL_KERNEL])
def test_sums_and_copies_unrolled_over_the_pes(tmp_path, monkeypatch, kind):
    """The loops over the PEs of the sums and copies run at compile time (NPES): one load of each PE's
    element in the TTIR (a loop of a run-time count: one in its body, and LLVM's unrolled copy with its
    address set-up hoisted before its guard, run by every thread); the steps one element a thread at
    a small range (tensors of THREADS elements, none of the vector step's)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    monkeypatch.setattr(triton.knobs.runtime, "add_stages_inspection_hook",
                        kt._ptx_only_hook(triton.knobs.runtime.add_stages_inspection_hook))
    # loads a PE: the sum's (one_shot, reduce_scatter), the sum's and the copy's (two_shot), the copy's
    # (all_gather; its own range from x besides), the LL sum's two (x or the polled word) and the LL store's
    per_pe = {"one_shot": 1, "reduce_scatter": 1, "two_shot": 2, "all_gather": 1, _plan.LL_KERNEL: 2}[kind]
    fixed = {"all_gather": 1, _plan.LL_KERNEL: 1}.get(kind, 0)
    for npes in (2, 3):
        ttir = kt.compile(kind, "float32", npes=npes, chunk=64).asm["ttir"]
        assert len(re.findall(r"\btt\.load\b", ttir)) == per_pe * npes + fixed, (npes, ttir.count("tt.load"))
        assert f"tensor<{_plan.THREADS}x" in ttir and f"tensor<{kt.BLOCK['float32']}x" not in ttir


@pytest.mark.parametrize("kind,dtype", CASES)
def test_compiles_to_ptx_with_nvshmem_inlined(compiled, kind, dtype):
    ck = compiled(kind, dtype)
    ptx, llir, ttir = ck.asm["ptx"], ck.asm["llir"], ck.asm["ttir"]
    assert ck.metadata.name == kind and ck.metadata.num_warps == _plan.THREADS // 32
    assert re.search(rf"^\.visible \.entry {kind}\(", ptx, re.M)
    assert re.search(rf"^\.reqntid {_plan.THREADS}\b", ptx, re.M) or f".maxntid {_plan.THREADS}" in ptx
    # the calls the protocol makes, and no other
    put = nv.DISPATCH["put_signal_nbi_block"][kt.TRITON_DTYPE[dtype]]
    assert set(_compile.nvshmem_externs(llir)) == {
        put, nv.DISPATCH["signal_op"][None], nv.DISPATCH["wait_until"]["uint64"], nv.DISPATCH["quiet"][None]}
    # NVSHMEM's API inlined: no call of an API function, only its out-of-line transport helpers
    assert not _CALL.findall(ptx)
    assert all(calls.is_helper(name) for name in calls.extern_calls(ptx)), calls.extern_calls(ptx)
    assert "nvshmemi_device_state_d" in ptx
    assert "ld.volatile" in ptx  # the signal wait polls its word
    assert "bar.sync" in ptx
    # the wait's value is not handed over (no shared-memory slot, no second barrier a peer)
    assert "__nvshmem_dsl_tt_slot" not in ptx
    assert re.search(r"\bld\.global\.", ptx) and re.search(r"\bst\.global\.", ptx)
    # a reduction rounds its float32 sum to bfloat16 (to nearest even); a copy converts nothing
    sums = kind != "all_gather"
    if dtype == "bfloat16":
        assert ("cvt.rn.bf16" in ptx) is sums and ("cvt.f32.bf16" in ptx) is sums
    else:
        assert "bf16" not in ptx
    # index arithmetic in int64 only (staging passes 2**31 elements)
    assert not _I32_ARITH.findall(ttir), _I32_ARITH.findall(ttir)


@pytest.mark.parametrize("kind,dtype", CASES)
def test_aligned_arrays_get_vector_copies(compiled, kind, dtype):
    ptx = compiled(kind, dtype, aligned=True).asm["ptx"]
    assert {m.group(1) for m in _VECTOR.finditer(ptx)} == {"ld", "st"}


@pytest.mark.parametrize("dtype", _plan.DTYPES)
@pytest.mark.parametrize("aligned", (False, True))
def test_ll_kernel_compiles(compiled, dtype, aligned):
    """one_shot_ll: the words stored through nv.peer (vectors when aligned), polled by volatile loads;
    no NVSHMEM call but nvshmem_ptr (inlined), no fence, no quiet; float32 sums."""
    ck = compiled(_plan.LL_KERNEL, dtype, aligned)
    ptx, llir, ttir = ck.asm["ptx"], ck.asm["llir"], ck.asm["ttir"]
    assert re.search(rf"^\.visible \.entry {_plan.LL_KERNEL}\(", ptx, re.M)
    assert set(_compile.nvshmem_externs(llir)) == {"nvshmem_ptr"}
    assert not _CALL.findall(ptx)
    assert re.search(r"\bst\.global\.(v2\.)?b64\b", ptx) and re.search(r"\bld\.volatile\.global\.(v2\.)?b64\b", ptx)
    assert ("st.global.v2.b64" in ptx) is aligned
    assert "membar" not in ptx and "fence" not in ptx
    assert "add.f32" in ptx or "add.rn.f32" in ptx
    assert ("cvt.rn.bf16" in ptx) is (dtype == "bfloat16")
    assert not _I32_ARITH.findall(ttir), _I32_ARITH.findall(ttir)


_LL_POLL_LOOP = re.compile(r"^LL_POLL:\n(.*?)^LL_DONE:", re.M | re.S)


@pytest.mark.parametrize("dtype", _plan.DTYPES)
@pytest.mark.parametrize("aligned", (False, True))
def test_ll_poll_is_each_threads_own(compiled, dtype, aligned):
    """The LL poll, as the C++ twin's signal_fetch loop: each thread reloads its own word (a scalar
    volatile load in a loop of its own) until the word's epoch half is the call's; no barrier, no
    block-wide reduction (tl.max: shared memory, two bar.sync a poll), no shared memory at all."""
    ck = compiled(_plan.LL_KERNEL, dtype, aligned)
    ptx = ck.asm["ptx"]
    assert "bar.sync" not in ptx and "barrier" not in ptx
    assert "redux" not in ptx and "shfl" not in ptx and ".shared" not in ptx.split(".entry", 1)[1]
    assert ck.metadata.shared == 0
    loops = _LL_POLL_LOOP.findall(ptx)
    assert loops  # one a word of the thread and PE (LLVM may version the unrolled sum on me)
    for body in loops:
        assert re.search(r"xor\.b64 (%ll_t), (%ll_w), %\w+;\n\s*shr\.b64 \1, \1, 32;", body), body
        assert re.search(r"ld\.volatile\.global\.b64 %ll_w, \[%rd\d+\];", body), body
        assert re.search(r"^\s*bra LL_POLL;", body, re.M), body


def test_ll_kernel_to_a_cubin(compiled):
    """ptxas takes the poll (its labels repeat, one copy a word, each inside its braces)."""
    if link.ptxas() is None:
        pytest.skip("needs ptxas")
    ptx = compiled(_plan.LL_KERNEL, "float32", True).asm["ptx"]
    cubin = link.ptxas_object(ptx.encode(), "sm_90a", what="one_shot_ll")
    assert cubin[:4] == b"\x7fELF"


def test_a_kernel_to_a_cubin(tmp_path, monkeypatch):
    if link.ptxas() is None or link.nvjitlink_ptx_isa() is None:
        pytest.skip("needs ptxas and nvJitLink")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    ck = kt.compile("two_shot", "bfloat16")
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    defined, _ = link.cubin_info(ck.asm["cubin"])
    assert defined["nvshmemi_device_state_d"] == 1


def test_launch_passes_the_plan_on_the_stream(monkeypatch, torch_standin):
    """launch: grid, arguments and stream (a stand-in torch and kernel: no GPU here)."""
    current = torch_standin
    calls = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kw: calls.append((grid, args, kw, current[0]))

    monkeypatch.setitem(kt.KERNELS, "two_shot", Kernel())
    plan = _plan.plan("two_shot", "bfloat16", 3 << 20, 4)
    kt.launch("two_shot", plan, "out", "x", "stage", "sig", 7, 2, 0)
    kt.launch("two_shot", plan, "out", "x", "stage", "sig", 8, 2, 0xABC)
    kt.launch("two_shot", plan, "out", "x", "stage", "sig", 9, 2, 0xABC)
    opts = {"BLOCK": kt.BLOCK["bfloat16"], "NPES": 4, "num_warps": kt.NUM_WARPS}
    assert [c[:3] for c in calls] == [((plan.grid,), ("out", "x", "stage", "sig", *plan.args(e, 2)), opts)
                                      for e in (7, 8, 9)]
    assert calls[0][3] == "default"
    assert calls[1][3].handle == 0xABC and calls[2][3] is calls[1][3]  # one ExternalStream per handle
    monkeypatch.setitem(kt.KERNELS, _plan.LL_KERNEL, Kernel())  # the LL kernel: 16 bytes of words a thread
    plan = _plan.plan("one_shot", "bfloat16", 1000, 4, True)
    assert plan.chunk > _plan.THREADS
    kt.launch(_plan.LL_KERNEL, plan, "out", "x", "words", "sig", 10, 2, 0)
    assert calls[-1][:3] == ((plan.grid,), ("out", "x", "words", "sig", *plan.args(10, 2)),
                             {"BLOCK": kt.LL_BLOCK, "NPES": 4, "num_warps": kt.NUM_WARPS})
    assert kt.LL_BLOCK * _plan.LL_WORD_BYTES == 16 * _plan.THREADS
    plan = _plan.plan("one_shot", "float32", 2, 2, True)  # 8 bytes: a range of 4 words, one a thread
    kt.launch(_plan.LL_KERNEL, plan, "out", "x", "words", "sig", 11, 1, 0)
    assert calls[-1][2] == {"BLOCK": _plan.THREADS, "NPES": 2, "num_warps": kt.NUM_WARPS}
