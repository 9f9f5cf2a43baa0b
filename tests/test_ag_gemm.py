"""nvshmem_dsl.kernels.ag_gemm on a CPU: the protocol's staging, signal words and send order; the
host call's argument checks (fake runtime, no C call reached); the Triton kernel compiled to PTX for
sm_90 with both kinds of communication (NVSHMEM's calls inlined, wgmma fed by a 3-stage pipeline,
the signal wait polled); its launch (stand-in torch and kernel). It runs in tests/gpu/test_ag_gemm_gpu.py."""
from __future__ import annotations

import itertools
import re

import pytest

from nvshmem_dsl.errors import NvshmemArgumentError, NvshmemTypeError
from nvshmem_dsl.host import memory
from nvshmem_dsl.host.memory import _CAIHolder
from nvshmem_dsl.kernels import _plan as comm_plan
from nvshmem_dsl.kernels.ag_gemm import _plan
from test_kernels import LOCAL, SYM, fake  # noqa: F401 - fake: the fake runtime's fixture


# --------------------------------------------------------------------------- protocol


@pytest.mark.parametrize("comm", _plan.COMMS)
def test_slots_and_signal_words_are_disjoint(comm):
    for m, K, npes in itertools.product((1, 7, 128, 1000), (16, 4096), (1, 2, 3, 8)):
        p = _plan.plan("bfloat16", m, K, npes, comm)
        slots = sorted(p.slot(e, s) for e in (1, 2) for s in range(npes))
        assert slots == [i * m * K for i in range(2 * npes)]  # two halves of every source, no overlap
        assert slots[-1] + m * K == p.stage_elems
        assert p.slot(3, 1) == p.slot(1, 1) != p.slot(2, 1)  # the halves alternate
        words = [p.signal(c, s) for c in range(p.parts) for s in range(npes)]
        assert sorted(words) == list(range(p.parts * npes))
        assert max(words) < comm_plan.signal_words(npes)  # they fit the workspace's signal array
        assert p.parts * p.part_rows >= m > p.parts * (p.part_rows - 1)  # the parts cover the rows, none too long


def test_parts():
    assert _plan.plan("bfloat16", 100, 64, 4, "copy_engine").parts == 1
    assert _plan.plan("bfloat16", 100, 64, 4, "ctas").parts == _plan.COMM_CTAS
    assert _plan.plan("bfloat16", 100, 64, 4, "ctas", 3).part_rows == 34
    assert _plan.MAX_PARTS * 8 == comm_plan.signal_words(8)  # the last part's words are the array's last
    with pytest.raises(ValueError, match="comm_ctas must be 1 to"):
        _plan.plan("bfloat16", 100, 64, 4, "ctas", _plan.MAX_PARTS + 1)
    with pytest.raises(ValueError, match="unknown communication"):
        _plan.plan("bfloat16", 100, 64, 4, "nccl")


@pytest.mark.parametrize("npes", (2, 3, 4, 8))
def test_each_pe_gets_the_shard_it_reads_first_first(npes):
    p = _plan.plan("bfloat16", 64, 64, npes, "ctas")
    orders = {me: p.send_order(me) for me in range(npes)}
    for me, order in orders.items():
        assert sorted(order) == sorted(set(range(npes)) - {me})
    for k in range(npes - 1):
        receivers = [orders[me][k] for me in range(npes)]
        assert sorted(receivers) == list(range(npes))  # a permutation: no PE gets two shards at once
        for me in range(npes):  # receiver r reads chunks r, r + 1, ...: at step k it gets r + k + 1
            assert (orders[me][k] + k + 1) % npes == me


def test_agreement_codes_differ_by_communication():
    ce = _plan.plan("bfloat16", 64, 128, 4, "copy_engine").agreement()[1]
    c8 = _plan.plan("bfloat16", 64, 128, 4, "ctas").agreement()[1]
    c4 = _plan.plan("bfloat16", 64, 128, 4, "ctas", 4).agreement()[1]
    assert len({ce[0], c8[0], c4[0]}) == 3 and ce[1:] == c8[1:] == [0, 64, 128]
    assert min(ce[0], c8[0], c4[0]) > len(comm_plan.KINDS)  # never a collective's kind code
    assert len(ce) <= 4  # memory.value_ranges takes at most 4 values


# --------------------------------------------------------------------------- host call (fake runtime)


def _bf16(ptr, shape):
    return _CAIHolder(ptr, shape, None, "<u2", owner=None, dtype="bfloat16")


def test_host_call_names_the_bad_argument(fake):
    from nvshmem_dsl.kernels.ag_gemm import all_gather_matmul as agm
    a, b = _bf16(SYM, (32, 64)), _bf16(LOCAL, (64, 48))
    with pytest.raises(NvshmemArgumentError, match="argument 'a' must be symmetric"):
        agm(_bf16(LOCAL + (1 << 16), (32, 64)), b)
    with pytest.raises(NvshmemTypeError, match="argument 'a' must be bfloat16, got float32"):
        agm(_CAIHolder(SYM, (32, 64), None, "<f4", owner=None), b)
    with pytest.raises(NvshmemArgumentError, match="argument 'a' must be a non-empty matrix"):
        agm(_bf16(SYM, (2048,)), b)
    with pytest.raises(NvshmemArgumentError, match="argument 'a' must be a non-empty matrix"):
        agm(_bf16(SYM, (0, 64)), b)
    with pytest.raises(NvshmemArgumentError, match="argument 'a' must be contiguous"):
        agm(_CAIHolder(SYM, (32, 64), (2, 64), "<u2", owner=None, dtype="bfloat16"), b)
    with pytest.raises(NvshmemTypeError, match="argument 'b' must be bfloat16"):
        agm(a, _CAIHolder(LOCAL, (64, 48), None, "<f4", owner=None))
    with pytest.raises(NvshmemArgumentError, match=r"argument 'b' must have K = 64 rows"):
        agm(a, _bf16(LOCAL, (63, 48)))
    with pytest.raises(NvshmemArgumentError, match=r"argument 'out' must be contiguous \(128, 48\)"):
        agm(a, b, _bf16(LOCAL + (1 << 16), (32, 48)))
    with pytest.raises(NvshmemArgumentError, match="argument 'out' must not overlap 'a'"):
        agm(a, b, _bf16(SYM + 64, (128, 48)))
    with pytest.raises(NvshmemArgumentError, match="argument 'out' must not overlap 'b'"):
        agm(a, b, _bf16(LOCAL, (128, 48)))
    with pytest.raises(NvshmemArgumentError, match="argument 'comm' must be one of ctas, copy_engine"):
        agm(a, b, comm="nccl")
    with pytest.raises(NvshmemArgumentError, match="argument 'comm_ctas' must be an integer from 1 to 64"):
        agm(a, b, comm_ctas=0)
    with pytest.raises(NvshmemArgumentError, match="argument 'comm_ctas' is for comm='ctas' only"):
        agm(a, b, comm="copy_engine", comm_ctas=4)
    with pytest.raises(NvshmemArgumentError, match="argument 'dsl' must be one of"):
        agm(a, b, dsl="numba")
    assert fake == []  # nothing reached NVSHMEM


def test_shapes_that_differ_by_pe_raise(fake, monkeypatch):
    from nvshmem_dsl.kernels import Workspace
    monkeypatch.setattr(memory, "value_ranges", lambda values: [(v, v) for v in values[:2]] + [(32, 33), (64, 64)])
    ws = Workspace()
    with pytest.raises(NvshmemArgumentError, match="different arguments: rows of a shard differs"):
        ws.agree(_plan.plan("bfloat16", 32, 64, 4, "ctas"), "all_gather_matmul")
    assert not ws._agreed


# --------------------------------------------------------------------------- the Triton kernel

triton = pytest.importorskip("triton")
_CALL = re.compile(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(nvshmem\w+)")


def _have_bitcode():
    try:
        from nvshmem_dsl._libs import bitcode_path
        bitcode_path(90)
        return True
    except Exception:  # noqa: BLE001
        return False


needs_bitcode = pytest.mark.skipif(not _have_bitcode(), reason="no NVSHMEM device bitcode")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(kind, fetch_wait) -> the kernel compiled to PTX (cubin stage left out), once each."""
    from nvshmem_dsl.kernels.ag_gemm import triton as kt
    cache = str(tmp_path_factory.mktemp("triton-cache"))
    done = {}

    def get(kind, fetch_wait=True):
        if (kind, fetch_wait) not in done:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("TRITON_CACHE_DIR", cache)
                mp.setenv("TRITON_DEFAULT_FP_FUSION", "1")
                done[kind, fetch_wait] = kt.compile(kind, fetch_wait=fetch_wait, ptx_only=True)
        return done[kind, fetch_wait]

    return get


@needs_bitcode
@pytest.mark.parametrize("fetch_wait", (True, False), ids=("signal_fetch", "signal_wait_until"))
def test_gemm_compiles_to_ptx(compiled, fetch_wait):
    import nvshmem_dsl.triton as nv
    from nvshmem_dsl.kernels.ag_gemm import triton as kt
    from nvshmem_dsl.triton import _compile
    ck = compiled("ag_gemm", fetch_wait)
    ptx, llir = ck.asm["ptx"], ck.asm["llir"]
    assert ck.metadata.name == "ag_gemm" and ck.metadata.num_warps == kt.NUM_WARPS
    assert re.search(r"^\.visible \.entry ag_gemm\(", ptx, re.M)
    # the GEMM only waits: by polling signal_fetch and a fence (no call at all: ptxas would serialise
    # every wgmma of a kernel that calls), or by NVSHMEM's signal_wait_until (its helper's call)
    wait = "signal_fetch" if fetch_wait else "signal_wait_until"
    assert set(_compile.nvshmem_externs(llir)) == {nv.DISPATCH[wait][None]}
    assert not _CALL.findall(ptx)  # NVSHMEM inlined
    calls = re.findall(r"\bcall(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$.]+)", ptx)
    assert (calls == []) is fetch_wait, calls
    assert ("fence.acq_rel.sys" in ptx) is fetch_wait
    assert "ld.volatile" in ptx and "bar.sync" in ptx  # the wait polls its word, then the program syncs
    # Hopper's wgmma on bf16 into float32, fed by NUM_STAGES buffers of A and B tiles
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.bf16\.bf16", ptx)
    assert "cp.async" in ptx
    assert ck.metadata.shared >= kt.NUM_STAGES * (kt.BM * kt.BK + kt.BK * kt.BN) * 2
    assert "cvt.rn.bf16" in ptx  # the float32 sums rounded once to bfloat16
    _assert_swizzle_safe_shared(ptx)


def _assert_swizzle_safe_shared(ptx):
    """Triton's 128-byte swizzled tiles (cp.async writes them at swizzled offsets from global_smem,
    wgmma's hardware swizzles the absolute address) need global_smem 1024-byte aligned; the shims'
    static slot precedes it. With an 8-byte slot it sat 16 bytes off and wgmma read permuted
    operands (the cause we find of the wrong sums of the first H200 run)."""
    from nvshmem_dsl.triton import _shared
    assert re.search(r"^\s*\.extern \.shared \.align 1024 \.b8 global_smem\[\];", ptx, re.M), \
        re.findall(r".*global_smem\[\].*", ptx)
    static = _shared.static_shared_bytes(ptx)
    assert static and static % 1024 == 0, static
    assert re.search(r"^\s*\.shared \.align 1024 \.b8 \S*slot\S*\[1024\];", ptx, re.M)


def test_static_shared_beside_triton_s_is_opted_in():
    """Triton opts a kernel in to more than 48 KB of shared memory only when its dynamic shared
    memory passes 48 KB; the slot's static bytes beside 48 KB less them, up to 48 KB, failed at
    launch (CUDA_ERROR_INVALID_VALUE, "invalid argument": the GEMM at m=7 K=72 N=40 on the H200)."""
    from nvshmem_dsl.triton import _shared as c
    kb48 = c.DEFAULT_SHARED
    assert c.opt_in_shared(kb48, c.SLOT_BYTES) == kb48 + 1  # the unaligned GEMM: one 48 KB stage
    assert c.opt_in_shared(kb48 - c.SLOT_BYTES + 1, c.SLOT_BYTES) == kb48 + 1
    assert c.opt_in_shared(kb48 - c.SLOT_BYTES, c.SLOT_BYTES) == kb48 - c.SLOT_BYTES  # fits without
    assert c.opt_in_shared(147456, c.SLOT_BYTES) == 147456  # Triton opts it in itself
    assert c.opt_in_shared(kb48, 0) == kb48  # no static shared memory: Triton's own rule holds
    ptx = (".extern .shared .align 16 .b8 global_smem[];\n.shared .align 1024 .b8 s[1024];\n"
           ".shared .align 8 .u64 t;\n")
    assert c.static_shared_bytes(ptx) == 1032
    assert ".extern .shared .align 1024 .b8 global_smem[];" in c.align_dynamic_shared(ptx)
    alone = ".extern .shared .align 16 .b8 global_smem[];\n"
    assert c.align_dynamic_shared(alone) == alone  # no static shared memory: left as Triton made it


@needs_bitcode
def test_gemm_at_unaligned_shapes_compiles_opted_in(tmp_path, monkeypatch):
    """The GEMM as launched at odd shapes (K, N, strides not multiples of 16): no cp.async, one
    stage of 48 KB of dynamic shared memory, which with the slot beside it needs the opt-in."""
    from nvshmem_dsl.kernels.ag_gemm import triton as kt
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    ck = kt.compile("ag_gemm", aligned=False, ptx_only=True)
    ptx = ck.asm["ptx"]
    _assert_swizzle_safe_shared(ptx)
    from nvshmem_dsl.triton import _shared
    assert ck.metadata.shared + _shared.static_shared_bytes(ptx) > _shared.DEFAULT_SHARED
    assert ck.metadata.shared > _shared.DEFAULT_SHARED  # so Triton raises the kernel's limit


@needs_bitcode
def test_send_compiles_to_ptx(compiled):
    import nvshmem_dsl.triton as nv
    from nvshmem_dsl.kernels.ag_gemm import triton as kt
    from nvshmem_dsl.linker import calls, link
    from nvshmem_dsl.triton import _compile
    ck = compiled("ag_send")
    ptx, llir = ck.asm["ptx"], ck.asm["llir"]
    assert ck.metadata.num_warps == kt.SEND_WARPS
    # puts with their signal, an empty part's signal alone, quiet: NVSHMEM inlined but its helpers
    assert set(_compile.nvshmem_externs(llir)) == {nv.DISPATCH["put_signal_nbi_block"]["bf16"],
                                                   nv.DISPATCH["signal_op"][None], nv.DISPATCH["quiet"][None]}
    assert not _CALL.findall(ptx)
    assert all(calls.is_helper(name) for name in calls.extern_calls(ptx)), calls.extern_calls(ptx)
    assert "wgmma" not in ptx


@pytest.mark.slow
@needs_bitcode
def test_gemm_to_a_cubin_keeps_wgmma_asynchronous(tmp_path, monkeypatch):
    """ptxas says C7509 and serialises every wgmma of a kernel that calls a function; the
    signal_fetch GEMM calls none (its cubin links and has the device state)."""
    from nvshmem_dsl.kernels.ag_gemm import triton as kt
    from nvshmem_dsl.linker import calls, link
    from nvshmem_dsl.triton import _compile
    if link.ptxas() is None or link.nvjitlink_ptx_isa() is None:
        pytest.skip("needs ptxas and nvJitLink")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    ck = kt.compile("ag_gemm")
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    defined, _ = link.cubin_info(ck.asm["cubin"])
    assert defined["nvshmemi_device_state_d"] == 1
    ptx = tmp_path / "ag_gemm.ptx"
    ptx.write_text(ck.asm["ptx"])
    import subprocess
    log = subprocess.run([link.ptxas(), "-v", "-arch=sm_90a", str(ptx), "-o", str(tmp_path / "x.cubin")],
                         capture_output=True, text=True)
    assert log.returncode == 0, log.stderr
    assert "C7509" not in log.stderr and "0 bytes spill stores" in log.stderr, log.stderr


def test_grid_leaves_the_put_kernel_its_sms():
    from nvshmem_dsl.kernels.ag_gemm import triton as kt
    p = _plan.plan("bfloat16", 4096, 8192, 2, "ctas")
    assert kt.grid(p, 4096, 132) == 132 - _plan.COMM_CTAS
    ce = _plan.plan("bfloat16", 4096, 8192, 2, "copy_engine")
    assert kt.grid(ce, 4096, 132) == 132
    small = _plan.plan("bfloat16", 3, 64, 2, "ctas")
    assert kt.grid(small, 5, 132) == 2  # one program a tile: 2 chunks x 1 x 1
    assert kt.grid(p, 4096, 4) == 1  # never none
    alone = _plan.plan("bfloat16", 4096, 8192, 1, "ctas")
    assert alone.put_ctas == 0 and kt.grid(alone, 4096, 132) == 132  # one PE: nothing to put


def test_launches_pass_the_plan_on_their_streams(monkeypatch, torch_standin):
    """launch and launch_send: grids, arguments (b's strides, the plan's scalars) and streams,
    stand-ins for torch and the kernels (no GPU here)."""

    from nvshmem_dsl.kernels.ag_gemm import triton as kt

    class B:
        shape = (64, 48)

        def stride(self, d):
            return (1, 64)[d]  # column-major

    current = torch_standin
    calls = []

    class Kernel:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kw: calls.append((self.name, grid, args, kw, current[0]))

    monkeypatch.setattr(kt, "ag_gemm", Kernel("gemm"))
    monkeypatch.setattr(kt, "ag_send", Kernel("send"))
    p = _plan.plan("bfloat16", 32, 64, 4, "ctas", 3)
    kt.launch_send(p, "a", "stage", "sig", 5, 2, "side")
    kt.launch(p, "out", "a", B(), "stage", "sig", 5, 2, 132, True, 0xABC)
    ce = _plan.plan("bfloat16", 32, 64, 4, "copy_engine")
    kt.launch(ce, "out", "a", B(), "stage", "sig", 6, 2, 132, False, 0)
    send, gemm, gemm_ce = calls
    assert send[:3] == ("send", (3,), ("a", "stage", "sig", 5, 32, 64, 2, 4, 11)) and send[4] == "side"
    assert send[3] == {"num_warps": kt.SEND_WARPS}
    assert gemm[1] == (4,)  # one program a tile: 4 chunks x 1 x 1
    assert gemm[2][5:] == (5, 32, 48, 64, 1, 64, 2, 4, 11)  # epoch, m, N, K, b's strides, me, npes, part_rows
    assert gemm[3]["FETCH_WAIT"] is True and gemm_ce[3]["FETCH_WAIT"] is False
    assert gemm_ce[2][-1] == 32  # the copy engine's one part: the whole shard
    assert gemm[3]["num_warps"] == kt.NUM_WARPS and gemm[3]["num_stages"] == kt.NUM_STAGES
    assert gemm[4].handle == 0xABC and gemm_ce[4] == "default"


# --------------------------------------------------------------------------- the CuTe kernels


def _have_cute_bitcode():
    try:
        import cutlass  # noqa: F401
        from nvshmem_dsl._libs import bitcode_path
        bitcode_path("sm_90a")
        return True
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(not _have_cute_bitcode(), reason="no CuTe DSL or NVSHMEM device bitcode")
@pytest.mark.parametrize("kind", ("ag_gemm", "ag_gemm_wait_until"))
def test_cute_gemm_compiles_to_ptx_with_the_per_chunk_wait(monkeypatch, tmp_path, kind):
    """The CuTe GEMM: THREADS threads (two wgmma warpgroups, a TMA producer warp), TMA tiles into
    shared memory through an mbarrier pipeline, bf16 wgmma into float32, one per-chunk wait (a
    signal_fetch poll and fence.acq_rel.sys, or signal_wait_until) then fence.proxy.async before a
    remote tile's loads. The poll's kernel calls nothing (a call makes ptxas serialise every wgmma:
    C7509) and is CuTe's own cubin; signal_wait_until's calls NVSHMEM's helper and links."""
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    import nvshmem_dsl.cute as nv
    from nvshmem_dsl.kernels.ag_gemm import cute as kc
    from nvshmem_dsl.linker import link
    from test_cute_api import PTX_OPTIONS, _check_ptx
    ptx = kc.compile_ptx(kind, "sm_90a", options=PTX_OPTIONS)
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)
    assert re.search(rf"^\.reqntid {kc.THREADS}, 1, 1\b", ptx, re.M)
    _check_ptx(ptx)  # NVSHMEM inlined: no call of an API function
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16", ptx)
    assert "wgmma.fence.sync.aligned" in ptx and "wgmma.commit_group.sync.aligned" in ptx
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)  # one k-tile of wgmma in flight
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile\.mbarrier::complete_tx::bytes", ptx)
    assert "prefetch.tensormap" in ptx
    assert "mbarrier.arrive.expect_tx.shared.b64" in ptx  # a stage's bytes expected:
    assert re.search(rf"mov\.b32\s+%r\d+, {kc.STAGE_BYTES};", ptx) and kc.STAGE_BYTES == (128 + 128) * 64 * 2
    assert "mbarrier.try_wait.parity.shared.b64" in ptx and "mbarrier.arrive.shared.b64" in ptx
    assert "mma.sync" not in ptx and "cp.async.cg" not in ptx
    # the one wait (in the producer's tile loop), then the proxy fence, then the tile's TMA loads
    assert len(re.findall(r"ld\.volatile\.global\.b64", ptx)) == 1
    assert len(re.findall(r"fence\.proxy\.async\.global;", ptx)) == 1
    assert ptx.index("ld.volatile.global.b64") < ptx.index("fence.proxy.async.global") < \
        ptx.index("cp.async.bulk.tensor")
    assert "cvt.rn.bf16x2.f32" in ptx and "st.global.b32" in ptx  # the epilogue: bf16 pairs to out
    callees = re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$.]+)", ptx)
    if kind == "ag_gemm":
        assert not callees and "fence.acq_rel.sys;" in ptx
        k = nv.compile(kc._LAUNCHERS[kind], *kc._example_args(kind), arch="sm_90a",
                       options=f"--keep-cubin --dump-dir {tmp_path}")
        assert k.linked_cubin is None and not k.outlined  # nothing of NVSHMEM's to link
        assert k.__cubin__[:4] == b"\x7fELF"
    else:
        assert callees == ["_Z36nvshmemi_transfer_syncapi_update_memv"]
        k = kc._compiled(kind, "sm_90a")
        assert k.linked_cubin[:4] == b"\x7fELF"
        assert link.cubin_info(k.linked_cubin)[0]["nvshmemi_device_state_d"] == 1


@pytest.mark.skipif(not _have_cute_bitcode(), reason="no CuTe DSL or NVSHMEM device bitcode")
def test_cute_send_compiles_to_ptx(monkeypatch):
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    import nvshmem_dsl.cute as nv
    from nvshmem_dsl.cute import _compile
    from nvshmem_dsl.kernels.ag_gemm import cute as kc
    from test_cute_api import PTX_OPTIONS, _called, _check_ptx
    ptx = kc.compile_ptx("ag_send", "sm_90a", options=PTX_OPTIONS)
    assert re.search(rf"^\.reqntid {kc.SEND_THREADS}, 1, 1\b", ptx, re.M)
    _check_ptx(ptx)
    token = _compile._compile_arch.set("sm_90a")
    try:
        import cutlass.cute as cute
        text = str(cute.compile.to_precompiled_mlir(kc._launch_send, *kc._example_args("ag_send"),
                                                             options="--gpu-arch sm_90a"))
    finally:
        _compile._compile_arch.reset(token)
    assert set(_called(text)) == {nv.DISPATCH["put_signal_nbi_block"]["BFloat16"], nv.DISPATCH["signal_op"][None],
                                  nv.DISPATCH["quiet"][None]}


def test_cute_takes_whole_tiles_only():
    pytest.importorskip("cutlass")
    from nvshmem_dsl.kernels.ag_gemm import cute as kc
    assert (kc.BM, kc.BN, kc.BK) == (128, 128, 64)
    assert kc.check_shape(256, 128, 64, 8, True) is None
    assert kc.check_shape(128, 256, 200, 2, True) is None  # K off the k-tiles: TMA fills zeros past it
    assert kc.check_shape(128, 128, 8, 2, True) is None
    assert "m (a's rows) a multiple of 128, got 100" in kc.check_shape(100, 128, 64, 2, True)
    assert "N (b's columns) a multiple of 128" in kc.check_shape(128, 100, 64, 2, True)
    assert "K a multiple of 8, got 52" in kc.check_shape(128, 128, 52, 2, True)
    assert "row-major" in kc.check_shape(128, 128, 64, 2, False)
    assert "2**31" in kc.check_shape(16384, 128, 16384, 8, True)
    p = _plan.plan("bfloat16", 256, 64, 2, "ctas")
    assert kc.grid(p, 256, 132) == 2 * 2 * 2  # one program a tile
    assert kc.grid(p, 256, 12) == 12 - p.put_ctas and kc.grid(p, 256, 8) == 1


# --------------------------------------------------------------------------- the benchmark's table


def test_bench_table_divides_fused_by_the_best_unfused():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import comm_run

    def row(impl, us, pe, ok=True, per_gpu=1):
        return {"bench": "ag_gemm", "impl": impl, "M": 8192, "N": 8192, "K": 8192, "us": us, "pe": pe, "ok": ok,
                "pes_per_gpu": per_gpu}

    rows = [row("unfused_ours", 1000.0, 0), row("unfused_ours", 1200.0, 1),
            row("unfused_nvshmem", 1500.0, 0), row("unfused_nvshmem", 1500.0, 1),
            row("fused_ce", 800.0, 0), row("fused_ce", 850.0, 1, ok=False),
            row("gemm", 700.0, 0), row("gemm", 700.0, 1)]
    lines = comm_run.ag_gemm_table(rows).splitlines()
    fused = next(l for l in lines if "fused_ce" in l).split()
    assert fused[1:] == ["fused_ce!", "825.0", "0.75", "1.33"]  # 825 / 1100 (the best unfused: ours)
    assert next(l for l in lines if "gemm" in l).split()[2:] == ["700.0", "-", "-"]
    assert not any("share a GPU" in l for l in lines)
    shared = comm_run.ag_gemm_table([row("fused_ce", 1.0, 0, per_gpu=2)])
    assert "share a GPU" in shared
