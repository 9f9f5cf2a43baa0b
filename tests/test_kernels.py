"""nvshmem_dsl.kernels on a CPU: the protocol's launch plans, the host calls' argument checks and
shape agreement (fake runtime, C calls intercepted), every Numba kernel compiled to PTX, and the
C++ twins' plans handed over by bench/comm_run.py. The kernels run in tests/gpu/test_kernels_gpu.py."""
import itertools
import re
import sys
from pathlib import Path

import pytest

from nvshmem_dsl import kernels
from nvshmem_dsl.errors import NvshmemArgumentError, NvshmemTypeError
from nvshmem_dsl.host import _lib, _state, memory, symmetric
from nvshmem_dsl.host.memory import _CAIHolder
from nvshmem_dsl.kernels import _plan, _workspace

SYM, LOCAL, ALLOC = 0x7F0000000000, 0x7E0000000000, 1 << 20


@pytest.mark.parametrize("kind", _plan.KINDS)
@pytest.mark.parametrize("dtype", _plan.DTYPES)
def test_plan_covers_every_element_once(kind, dtype):
    size = _plan.ITEMSIZE[dtype]
    for n, npes in itertools.product((1, 2, 7, 1000, 4099, 65537, 1 << 20, (16 << 20) + 5), (1, 2, 3, 8)):
        p = _plan.plan(kind, dtype, n, npes)
        assert 1 <= p.grid <= _plan.GRID_MAX
        assert (p.chunk * size) % _plan.ALIGN_BYTES == 0
        blocks = [(b * p.chunk, min((b + 1) * p.chunk, p.span)) for b in range(p.grid)]
        assert all(lo < hi for lo, hi in blocks), (n, npes, p)  # every block has elements
        assert blocks[0][0] == 0 and blocks[-1][1] == p.span
        assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
        if kind == "two_shot":
            assert p.span * npes >= n > p.span * (npes - 1) - npes
        else:
            assert p.span == n
        assert p.stage_elems == 2 * _plan.SLOTS[kind] * npes * p.span
        assert p.args(7, 1) == (7, n, p.span, p.chunk, 1, npes)


@pytest.mark.parametrize("dtype", _plan.DTYPES)
def test_one_shot_takes_ll_up_to_its_threshold_where_peers_are_loaded_and_stored(dtype):
    size = _plan.ITEMSIZE[dtype]
    top = _plan.LL_MAX_BYTES // size
    for npes in (1, 2, 8):
        for n in (1, 7, 4099, top - 1, top):
            p = _plan.plan("one_shot", dtype, n, npes, True)
            assert p.ll and p.kernel == _plan.LL_KERNEL, (n, npes)
            assert p.stage_bytes == 0 and p.ll_bytes == 2 * npes * n * _plan.LL_WORD_BYTES
            # block ranges over 8-byte words, LL_BLOCK_BYTES of them a block
            want = max(1, min(_plan.GRID_MAX, -(-n * _plan.LL_WORD_BYTES // _plan.LL_BLOCK_BYTES)))
            assert p.grid <= want and -(-n // p.chunk) == p.grid
            assert (p.chunk * size) % _plan.ALIGN_BYTES == 0
        assert not _plan.plan("one_shot", dtype, top + 1, npes, True).ll  # above: put with signal
        assert not _plan.plan("one_shot", dtype, 7, npes, False).ll  # a peer not loaded / stored
        for kind in ("two_shot", "all_gather", "reduce_scatter"):
            p = _plan.plan(kind, dtype, 7, npes, True)
            assert not p.ll and p.kernel == kind and p.ll_bytes == 0
    assert _plan.plan("one_shot", dtype, top, 2, True).grid == {"float32": 16, "bfloat16": 32}[dtype]


def test_plan_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown kernel"):
        _plan.plan("three_shot", "float32", 10, 2)


def test_signal_words_cover_every_block_phase_and_sender():
    npes = 8
    last = (((_plan.GRID_MAX - 1) * 2 + 1) * npes) + npes - 1  # signal(b, phase, src) of the protocol
    assert last == _plan.signal_words(npes) - 1


# --------------------------------------------------------------------------- host calls (fake runtime)


def _array(ptr, n, typestr="<f4", dtype=None):
    return _CAIHolder(ptr, (n,), None, typestr, owner=None, dtype=dtype)


@pytest.fixture
def fake(monkeypatch):
    calls = []
    monkeypatch.setattr(_lib, "_interceptor", lambda symbol, args: calls.append(symbol) or 0)
    with _state.fake(n_pes=4, my_pe=1):
        symmetric._testing_register(SYM, ALLOC)
        try:
            yield calls
        finally:
            memory.REGISTRY.clear("test over")


def test_host_calls_name_the_bad_argument(fake):
    x = _array(SYM, 64)
    with pytest.raises(NvshmemArgumentError, match="argument 'x' must be symmetric"):
        kernels.all_reduce(_array(LOCAL, 64))
    with pytest.raises(NvshmemTypeError, match="argument 'x' must be float32 or bfloat16, got int32"):
        kernels.all_gather(_array(SYM, 64, "<i4"))
    with pytest.raises(NvshmemArgumentError, match="argument 'algorithm'"):
        kernels.all_reduce(x, algorithm="three_shot")
    with pytest.raises(NvshmemArgumentError, match="argument 'dsl' must be one of numba, triton, cute"):
        kernels.all_reduce(x, _array(LOCAL, 64), dsl="cuda")
    with pytest.raises(NvshmemArgumentError, match="argument 'out' must not overlap 'x'"):
        kernels.all_reduce(x, _array(SYM + 128, 64))
    with pytest.raises(NvshmemArgumentError, match=r"argument 'out' must hold 256 elements \(256,\)"):
        kernels.all_gather(x, _array(LOCAL, 64))
    with pytest.raises(NvshmemTypeError, match="argument 'out' must be float32 like 'x'"):
        kernels.all_reduce(x, _array(LOCAL, 64, "<f8"))
    with pytest.raises(NvshmemArgumentError, match="first axis divisible by the 4 PEs"):
        kernels.reduce_scatter(_array(SYM, 66))
    assert fake == []  # nothing reached NVSHMEM


def test_first_call_of_a_shape_is_agreed_once(fake, monkeypatch):
    asked = []
    monkeypatch.setattr(memory, "value_ranges", lambda values: asked.append(values) or [(v, v) for v in values])
    ws = _workspace.Workspace()
    p = _plan.plan("one_shot", "float32", 100, 4)
    ws.agree(p, "all_reduce")
    ws.agree(p, "all_reduce")
    ws.agree(_plan.plan("two_shot", "float32", 100, 4), "all_reduce")
    assert asked == [[0, 0, 100], [1, 0, 100]]


def test_a_shape_that_differs_by_pe_raises_on_every_pe(fake, monkeypatch):
    monkeypatch.setattr(memory, "value_ranges", lambda values: [(values[0], values[0]), (0, 0), (100, 103)])
    ws = _workspace.Workspace()
    with pytest.raises(NvshmemArgumentError, match="different arguments: size differs"):
        ws.agree(_plan.plan("one_shot", "float32", 100, 4), "all_reduce")
    assert not ws._agreed  # asked again at the next call


class _Buf:
    def __init__(self, nbytes):
        self.ptr, self.nbytes, self.freed = SYM, nbytes, False


@pytest.mark.parametrize("want", [True, False])
def test_load_store_is_asked_once_and_agreed(fake, monkeypatch, want):
    """Every PE takes the LL protocol or none: the session's agreed answer
    (memory.reached_by_load_store), asked once, after the shape is agreed on."""
    asked, made = [], []
    monkeypatch.setattr(memory, "value_ranges", lambda values: asked.append(values) or [(v, v) for v in values])
    monkeypatch.setattr(memory, "reached_by_load_store", lambda: asked.append("reached") or want)
    monkeypatch.setattr(memory, "internal_buffer", lambda nbytes, what: made.append(what) or _Buf(nbytes))
    ws = _workspace.Workspace()
    p = _plan.plan("one_shot", "float32", 100, 4)
    assert ws.load_store("all_reduce", p) is want
    assert ws.load_store("all_reduce") is want
    assert asked == [[0, 0, 100], "reached"]  # the shape agreed on first
    assert made == ["kernels workspace signals"]


@pytest.mark.parametrize("load_store", (True, False))
def test_all_reduce_launches_the_protocol_of_its_size(fake, monkeypatch, load_store):
    """The one-shot up to LL_MAX_BYTES, where every peer is loaded / stored: one_shot_ll on the LL words;
    else (and the two-shot) the put-with-signal kernel on the staging; load_store is asked after the
    shape's agreement, and only for sizes LL could take."""
    import types
    launched, asked = [], []
    fake_mod = types.SimpleNamespace(ARRAYS="numba",
                                     launch=lambda kernel, plan, *a: launched.append((kernel, plan.ll, a[2])))
    monkeypatch.setattr(kernels, "_module", lambda dsl, function: fake_mod)
    monkeypatch.setattr(kernels, "kernel_array", lambda a, info, like: a)
    ws = _workspace.Workspace()
    monkeypatch.setattr(ws, "load_store", lambda function, plan=None: asked.append(plan.n) or load_store)
    monkeypatch.setattr(ws, "prepare", lambda plan, function, sync: 5)
    monkeypatch.setattr(ws, "views", lambda dtype, like, ll=False: ("words" if ll else "stage", "sig"))
    top = _plan.LL_MAX_BYTES // 4
    for n, algorithm in ((top, "one_shot"), (top + 1, "one_shot"), (64, "two_shot")):
        kernels.all_reduce(_array(SYM, n), _array(LOCAL, n), algorithm=algorithm, workspace=ws)
    ll = [(_plan.LL_KERNEL, True, "words")] if load_store else [("one_shot", False, "stage")]
    assert launched == ll + [("one_shot", False, "stage"), ("two_shot", False, "stage")]
    assert asked == [top]


def test_ll_words_are_a_zeroed_buffer_of_their_own(fake, monkeypatch):
    made = []
    monkeypatch.setattr(memory, "value_ranges", lambda values: [(v, v) for v in values])
    monkeypatch.setattr(memory, "internal_buffer", lambda nbytes, what: made.append((what, nbytes)) or _Buf(nbytes))
    ws = _workspace.Workspace()
    put = _plan.plan("one_shot", "float32", 1 << 20, 4, True)
    ll = _plan.plan("one_shot", "float32", 1000, 4, True)
    assert ws.prepare(put, "all_reduce", lambda: None) == 1 and ws.prepare(ll, "all_reduce", lambda: None) == 2
    assert ("kernels workspace LL words", 1 << 20) in made  # internal_buffer: nvshmem_calloc
    assert [w for w, _ in made].count("kernels workspace LL words") == 1
    assert ws._ll is not ws._stage


def test_the_ll_epoch_half_wraps_to_fresh_words(fake, monkeypatch):
    """Every 2**32 calls: two epochs skipped (the halves still alternate, the epoch half is 2: above a
    zeroed word's) and the LL words made anew, zeroed, after this PE's kernels are done."""
    made, freed, synced = [], [], []
    monkeypatch.setattr(memory, "value_ranges", lambda values: [(v, v) for v in values])
    monkeypatch.setattr(memory, "internal_buffer", lambda nbytes, what: made.append(what) or _Buf(nbytes))
    monkeypatch.setattr(memory, "free_internal", lambda buf: freed.append(buf))
    ws = _workspace.Workspace()
    ll = _plan.plan("one_shot", "float32", 1000, 4, True)
    assert ws.prepare(ll, "all_reduce", lambda: synced.append(1)) == 1
    words = ws._ll
    ws.epoch = (1 << 32) - 2
    epochs = [ws.prepare(ll, "all_reduce", lambda: synced.append(1)) for _ in range(3)]
    assert epochs == [(1 << 32) - 1, (1 << 32) + 2, (1 << 32) + 3]
    assert [e & 1 for e in epochs] == [1, 0, 1] and (epochs[1] & _plan.LL_EPOCH_MASK) == 2
    assert freed == [words] and ws._ll is not words and ws._ll.nbytes == words.nbytes
    assert made.count("kernels workspace LL words") == 2 and synced == [1]


def test_value_ranges_is_one_max_reduction(fake, monkeypatch):
    from nvshmem_dsl.host import _cuda
    written, read = {}, []
    monkeypatch.setattr(_cuda, "runtime_stream", lambda: 0x5EAB)
    monkeypatch.setattr(_cuda, "memcpy_htod", lambda ptr, data, stream: written.update({(ptr, stream): data}))
    monkeypatch.setattr(memory, "_scratch_alloc", lambda: symmetric.Allocation(SYM, 256, "internal"))
    import struct
    # what the max-reduction leaves: max(a) = 5, max(-a) = -2 -> a in [2, 5]; b the same everywhere
    monkeypatch.setattr(_cuda, "memcpy_dtoh", lambda ptr, n, stream: read.append((ptr, n, stream)) or struct.pack(
        "<4q", 5, 9, -2, -9))
    assert memory.value_ranges([3, 9]) == [(2, 5), (9, 9)]
    assert struct.unpack("<4q", written[SYM, 0x5EAB]) == (3, 9, -3, -9)
    assert read == [(SYM + 128, 32, 0x5EAB)]  # after the reduction on the same stream
    assert [c for c in fake if "max_reduce" in c] == ["nvshmemx_int64_max_reduce_on_stream"]


# --------------------------------------------------------------------------- kernels and the C++ plans


@pytest.mark.slow
@pytest.mark.parametrize("dtype", _plan.DTYPES)
@pytest.mark.parametrize("kind", _plan.KINDS)
def test_numba_kernel_compiles(kind, dtype):
    from nvshmem_dsl.kernels import numba as K
    ptx = K.compile_ptx(kind, dtype)
    assert ".entry" in ptx and "st.global" in ptx and "llvm." not in ptx
    assert f".maxntid {_plan.THREADS}" in ptx
    # NVSHMEM's signal wait is inlined: a loop on a volatile or acquire load of the signal word
    assert ("ld.volatile" in ptx) or ("ld.acquire" in ptx) or ("ld.relaxed" in ptx), kind
    if dtype == "bfloat16":
        assert "ld.global.u16" in ptx or "ld.global.nc.u16" in ptx or "ld.u16" in ptx or "ld.global.b16" in ptx
    _assert_cpp_index_math(ptx)
    assert "div." not in ptx, kind  # no trip count of a range() with a run-time step


@pytest.mark.slow
@pytest.mark.parametrize("dtype", _plan.DTYPES)
def test_numba_ll_kernel_compiles(dtype):
    """one_shot_ll: 64-bit stores of the words to the peers' addresses, 64-bit volatile polls, no signal,
    no fence, no barrier, no quiet."""
    from nvshmem_dsl.kernels import numba as K
    ptx = K.compile_ptx(_plan.LL_KERNEL, dtype)
    assert f".maxntid {_plan.THREADS}" in ptx
    assert re.search(r"\bst(\.global)?\.[bu]64\b", ptx)
    assert "ld.volatile.global.b64" in ptx or "ld.volatile.global.u64" in ptx
    assert "bar.sync" not in ptx and "membar" not in ptx and "fence" not in ptx
    assert not re.search(r"call(\.uni)?\s", ptx)  # nvshmem_ptr and signal_fetch inlined, no transport
    _assert_cpp_index_math(ptx)
    assert "div." not in ptx


_SIGN_SHIFT = re.compile(r"shr\.s64\s+%rd\d+,\s*%rd\d+,\s*63;")


def _assert_cpp_index_math(ptx):
    """Index math as cheap as the C++ twins' (issue 39/40): no signed index wrapped around, no slice
    bound clamped, no floor-division fix-up (each takes a sign, shr.s64 by 63, of which the twins' PTX
    has none), and / and % unsigned (every number is non-negative: no sign handling at all)."""
    assert not _SIGN_SHIFT.search(ptx), _SIGN_SHIFT.search(ptx).group(0)
    assert not re.search(r"(div|rem)\.s64", ptx)


def test_numba_kernels_declare_their_block():
    """As the C++ twins' __launch_bounds__(THREADS): without it ptxas budgets registers for 1024
    threads (64 a thread) and a kernel may spill where its twin does not."""
    from nvshmem_dsl.kernels import numba as K
    from nvshmem_dsl.kernels.moe import numba as M
    for dtype in _plan.DTYPES:
        for kind, kernel in K.kernels(dtype).items():
            assert kernel.targetoptions["launch_bounds"] == (_plan.THREADS,), (kind, dtype)
    for kernel in (M.dispatch, M.combine):
        assert kernel.targetoptions["launch_bounds"] == (M.THREADS,)


def test_cpp_plans_are_the_protocols():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import comm_run
    import comm_shapes as CS
    text = comm_run.plans(["one_shot", "two_shot", "all_gather"], ["bfloat16"], [8, 1 << 20], 4)
    rows = [r.split(":") for r in text.split(",")]
    assert len(rows) == 6
    for kernel, dtype, n, span, chunk, grid in rows:
        kind = "one_shot" if kernel == _plan.LL_KERNEL else kernel
        p = _plan.plan(kind, dtype, CS.elements(kind, int(n) * (4 if kind == "all_gather" else 1) * 2, 2, 4), 4, True)
        assert (kernel, int(n), int(span), int(chunk), int(grid)) == (p.kernel, p.n, p.span, p.chunk, p.grid)
    assert [r[0] for r in rows[:2]] == [_plan.LL_KERNEL, "one_shot"]  # LL at 8 B, not at 1 MiB


# --------------------------------------------------------------------------- MoE


def test_moe_layout():
    from nvshmem_dsl.kernels.moe import _layout
    lay = _layout.Layout(npes=4, local_experts=4, hidden=7168, topk=8, max_tokens=128)
    assert lay.experts == 16 and lay.grid == 16 and lay.recv_rows == 4 * 4 * 128
    assert lay.signal_words == 16 + 16
    assert _layout.Layout(8, 32, 7168, 8, 128).grid == _layout.GRID_MAX


def test_moe_buffer_checks_its_sizes(fake):
    from nvshmem_dsl.kernels.moe import MoEBuffer
    with pytest.raises(NvshmemArgumentError, match="'num_experts' \\(18\\) must be a multiple of the 4 PEs"):
        MoEBuffer(128, 7168, 18, 8)
    with pytest.raises(NvshmemArgumentError, match="'max_tokens' must be at most 4096"):
        MoEBuffer(5000, 7168, 16, 8)
    with pytest.raises(NvshmemArgumentError, match="'topk' \\(32\\) exceeds num_experts"):
        MoEBuffer(128, 7168, 16, 32)
    with pytest.raises(NvshmemArgumentError, match="'hidden' must be a positive integer"):
        MoEBuffer(128, 0, 16, 8)
    assert fake == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", ("dispatch", "combine"))
def test_moe_numba_kernel_compiles(kind):
    from nvshmem_dsl.kernels.moe import numba as M
    ptx = M.compile_ptx(kind)
    assert f".maxntid {M.THREADS}" in ptx
    assert ".entry" in ptx and "bar.sync" in ptx and "membar.sys" in ptx  # fence before each signal
    assert "llvm." not in ptx  # an intrinsic LLVM does not know stays a call ptxas cannot parse
    _assert_cpp_index_math(ptx)
    # rows to a load/store reachable PE (nvshmem_ptr) by 16-byte vector stores through its address, as
    # the C++ twin's and NVSHMEM put_nbi's P2P path; put_nbi_block a row where it is not reachable
    assert re.search(r"\bld\.global\.v4\.b32\b", ptx) and re.search(r"\bst(\.global)?\.v4\.b32\b", ptx), kind
    assert "nvshmemi_transfer_rma_nbi" in ptx, kind  # put_nbi_block's remote path (NVSHMEM inlined)
    if kind == "dispatch":
        assert ".shared" in ptx and "vote.sync.ballot" in ptx and "popc.b32" in ptx  # the ballot scan
    else:
        # float32 products and sums each rounded (never an fma), two vectors of 8 a thread and the
        # slot loop unrolled by 4: 16 products a slot, 4 + 1 slots written out
        assert "fma." not in ptx and ptx.count("mul.rn.f32") >= 16 * 5 and ptx.count("add.rn.f32") >= 16 * 5
        assert ptx.count("ld.global.v4.b32") >= 8 * 2  # the unrolled slots' rows, two vectors each
        assert re.search(r"\bld\.volatile(\.global)?\.[bu]64\b", ptx)  # the combine words polled at once


def test_numba_asm_ops_compile_to_what_the_cpp_twins_do():
    """The Numba kernels' vector loads and stores (ld/st.v4 of 16 bytes) and ballot
    (vote.sync.ballot, not Numba's llvm.nvvm.vote.sync call, which ptxas cannot read)."""
    from numba import cuda, types
    from numba.core.errors import TypingError

    from nvshmem_dsl.kernels._numba_asm import address, ballot, load16, store16

    def kernel(dst, src, words, out):
        i = cuda.threadIdx.x
        if address(dst) != 0:
            store16(dst, 8 * i, load16(src, 8 * i))
        out[i] = ballot(words[i] > 0)

    a = types.int16[::1]
    ptx = cuda.compile_ptx(kernel, (a, a, types.uint64[::1], types.uint32[::1]), cc=(9, 0))[0]
    assert re.search(r"\bld(\.global)?\.v4\.[bu]32\b", ptx) and re.search(r"\bst(\.global)?\.v4\.[bu]32\b", ptx)
    assert "vote.sync.ballot.b32" in ptx and "llvm." not in ptx

    def bad(words):
        store16(words, 0, (1, 2, 3))

    with pytest.raises(TypingError, match="store16: argument 'v' must be a tuple of four integers"):
        cuda.compile_ptx(bad, (types.uint64[::1],), cc=(9, 0))


@pytest.mark.parametrize("package,function", [("nvshmem_dsl.kernels", "all_reduce"),
                                              ("nvshmem_dsl.kernels.moe", "dispatch"),
                                              ("nvshmem_dsl.kernels.ag_gemm", "all_gather_matmul")])
def test_a_dsl_not_installed_is_named_with_its_package(monkeypatch, package, function):
    """dsl='cute' without the CuTe DSL: an ImportError naming the call, the DSL and what to install
    (the communication kernels, MoE and the fused GEMM alike); a name not among DSLS: the argument."""
    import importlib
    pkg = importlib.import_module(package)
    if function == "all_gather_matmul":
        pick = pkg._module
    else:
        pick = lambda dsl: pkg._module(dsl, function)  # noqa: E731
    monkeypatch.setitem(sys.modules, "cutlass", None)  # import cutlass: ModuleNotFoundError
    monkeypatch.delitem(sys.modules, f"{package}.cute", raising=False)
    with pytest.raises(ImportError, match=rf"^{function}\(\): dsl='cute' needs the Python module 'cutlass' "
                                          r"\(pip install nvidia-cutlass-dsl\)") as err:
        pick("cute")
    assert isinstance(err.value.__cause__, ModuleNotFoundError)
    with pytest.raises(NvshmemArgumentError, match=rf"^{function}\(\): argument 'dsl' must be one of"):
        pick("cuda")


def test_moe_bench_table_averages_pes_and_divides_by_cpp():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import comm_run
    rows = [{"bench": "moe", "impl": "cpp", "op": "dispatch", "us": 10.0, "pe": 0},
            {"bench": "moe", "impl": "cpp", "op": "dispatch", "us": 12.0, "pe": 1},
            {"bench": "moe", "impl": "numba", "op": "dispatch", "us": 22.0, "pe": 0},
            {"bench": "moe", "impl": "numba", "op": "dispatch", "us": 22.0, "pe": 1}]
    line = next(l for l in comm_run.moe_table(rows).splitlines() if l.startswith("dispatch"))
    assert line.split()[1:] == ["11.00", "1.00", "22.00", "2.00"]


def test_moe_bench_routes_as_the_cpp_twin():
    """bench/moe_bench.py's routing is bench/cpp/moe.cu's (both move the same rows): the hash and
    rejection loop, checked against values printed by the C++ (route(pe, t, 64, 8))."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import moe_bench
    assert moe_bench.route(0, 0, 64, 8) == [47, 63, -1, 58, 54, -1, 3, 62]
    assert moe_bench.route(0, 1, 64, 8) == [30, 3, 43, 23, 35, 50, 12, 25]
    rows = [moe_bench.route(pe, t, 16, 8) for pe in range(4) for t in range(64)]
    assert all(len({e for e in r if e >= 0}) == sum(e >= 0 for e in r) for r in rows)  # distinct experts
