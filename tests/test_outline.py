"""Hybrid linking (nvshmem_dsl.linker.outline), on the CPU: NVSHMEM's large routines called out of line in
objects built once, the small ones inlined as before.

Uses the default sm_90 piece store (built on first use, as for tests/test_numba_linker.py) and a
private folder for the objects (each test run builds the few it links: a sync, a reducescatter, p
and my_pe, a few seconds each).
"""

from __future__ import annotations

import collections
import os
import re
import time
from pathlib import Path

import pytest

pytest.importorskip("numba.cuda")
from llvmlite import ir  # noqa: E402
from numba import cuda, types, uint64  # noqa: E402
from numba.cuda.compiler import _compile_pyfunc_with_fixup  # noqa: E402
from numba.cuda.extending import intrinsic  # noqa: E402

import nvshmem_dsl.numba as nv  # noqa: E402
from nvshmem_dsl import _optable
from nvshmem_dsl.linker import abi, calls, link, _llvm, outline, plan, store  # noqa: E402
from nvshmem_dsl.numba import _linker  # noqa: E402
from nvshmem_dsl.numba._intrinsics import declare_device_function  # noqa: E402

from bitcode_available import HAVE_BITCODE  # noqa: E402
pytestmark = pytest.mark.skipif(not HAVE_BITCODE or link.ptxas() is None,
                                reason="no NVSHMEM device bitcode or no ptxas")

CC = (9, 0)
I32 = types.int32[::1]
W = nv.Team.TEAM_WORLD
COLLECTIVE = "nvshmem_int32_sum_reducescatter"


@pytest.fixture
def objects_dir(tmp_path, monkeypatch):
    """Objects built in a folder of this test's (the piece store stays the shared one)."""
    monkeypatch.setattr(outline, "_objects_dir", lambda: tmp_path)
    monkeypatch.delenv(plan.ENV, raising=False)
    return tmp_path


@pytest.fixture
def built_helpers(objects_dir, monkeypatch):
    """As :func:`objects_dir`, NVSHMEM's helpers built from the bitcode too (NVSHMEM_DSL_HELPERS=build:
    where there is no libnvshmem_device.a, or no code in it for the GPU; tests/test_helper_archive.py
    covers the helpers NVIDIA compiled)."""
    monkeypatch.setenv("NVSHMEM_DSL_HELPERS", "build")
    return objects_dir


def cubin_of(fn, sig=(I32, I32)):
    """(PTX, cubin) of kernel ``fn``: Numba's link with nvJitLink, as at a kernel's first launch."""
    lib, _ = _compile_pyfunc_with_fixup(fn, sig, device=False, abi="numba", cc=CC)
    (ptx,) = lib.get_asm_strs(cc=CC)
    cubin = lib.get_cubin(cc=CC)
    return ptx, bytes(getattr(cubin, "code", cubin)), lib._entry_name


def k_collective(dst, src):
    dst[0] = nv.my_pe()
    nv.p(dst, 1, 7, 0)
    nv.sum_reducescatter(W, dst, src, 1)
    nv.sync_all()


def k_small(d, s, u64, n, pe):
    nv.p(d, 0, 1, pe)
    d[1] = nv.g(s, 2, pe)
    nv.put_block(d, s, n, pe)
    nv.get_warp(d, s, n, pe)
    u64[0] = nv.atomic_fetch_add(u64, 1, uint64(1), pe)
    nv.put_signal(d, s, n, u64, 3, uint64(1), nv.SignalOp.SIGNAL_SET, pe)
    nv.signal_wait_until(u64, 2, nv.Cmp.CMP_GE, uint64(1))
    nv.fence()
    nv.quiet()


SMALL_SIG = (types.float32[::1], types.float32[::1], types.uint64[::1], types.int64, types.int32)


def _same_kernel(ptx: str) -> str:
    """``ptx`` less what differs between two compilations of one kernel in a process: the ABI tag
    of the kernel's name and LLVM's numbering of call sequences (``// callseq 174, 0``)."""
    return re.sub(r"// callseq \d+", "// callseq", re.sub(r"B\d+v\d+B", "B", ptx))


# ---------------------------------------------------------------- the criterion


def test_criterion_inlines_small_ops_and_outlines_collectives():
    """Every function of NVSHMEM's small-operation groups is below the threshold, every collective,
    sync and barrier above it (the data the criterion is written against)."""
    ops = _optable.device_ops()
    sizes = store.body_sizes(ops, 90)
    small = {"rma", "amo", "signal", "wait", "qp", "queries"}
    for name, n in sizes.items():
        op = ops[name]
        if op["group"] in small or op["family"] in ("quiet", "fence", "flush"):
            assert not plan.is_large(n), (name, n)
        else:  # collectives; barrier, barrier_all, sync_all, team_sync
            assert plan.is_large(n), (name, n)
    inline, out = plan.split(["nvshmem_int_p", "nvshmem_float_g", "nvshmemx_float_put_block",
                                 "nvshmem_int32_atomic_fetch_add", "nvshmemx_putmem_signal_block",
                                 "nvshmem_quiet", "nvshmem_uint64_wait_until", COLLECTIVE,
                                 "nvshmemx_float_sum_reduce_block", "nvshmem_int32_broadcast",
                                 "nvshmemx_barrier_all_block", "nvshmem_no_such_function"], 90)
    assert out == {COLLECTIVE, "nvshmemx_float_sum_reduce_block", "nvshmem_int32_broadcast",
                   "nvshmemx_barrier_all_block"}
    assert "nvshmem_no_such_function" in inline  # reported by the link, as before


def test_modes(monkeypatch):
    names = {"nvshmem_int_p", COLLECTIVE}
    monkeypatch.setenv(plan.ENV, "none")
    assert plan.split(names, 90) == (names, frozenset())
    with plan.override("all"):
        assert plan.split(names, 90) == (frozenset(), names)
        with nv.outline("auto"):
            assert plan.split(names, 90) == ({"nvshmem_int_p"}, {COLLECTIVE})
    monkeypatch.setenv(plan.ENV, "sometimes")
    with pytest.raises(ValueError, match=plan.ENV):
        plan.mode()


# ---------------------------------------------------------------- kernels


def test_collective_is_called_in_its_object(objects_dir, built_helpers):
    builds, hits = outline.stats["builds"], outline.stats["hits"]
    ptx, cubin, entry = cubin_of(k_collective)
    # the collective and the sync are declared and called, not defined; p and my_pe are inlined,
    # p's transport helper (NVSHMEM's noinline proxy path) is called in its object too
    helper = "_Z23nvshmemi_transfer_rma_pIiEvPvT_ii"
    assert calls.extern_calls(ptx) == {COLLECTIVE, "nvshmem_sync_all", helper}
    assert re.search(rf"^\s*call[^;]*\b{COLLECTIVE},", ptx, re.M)
    assert not re.search(rf"^\.visible \.func[^\n]*\b{COLLECTIVE}\b", ptx, re.M)
    assert not re.search(r"^\s*call[^;]*\bnvshmem_(int32_p|my_pe)\b", ptx, re.M)
    assert re.search(r"^\.visible \.const [^\n]*nvshmemi_device_state_d", ptx, re.M)
    assert len(ptx) < 100_000  # inlined, the reducescatter alone is ~500 KiB of PTX
    # a helper's object may call other helpers: their objects come too
    made = sorted(p.name.split("-")[0] for p in objects_dir.glob("*.cubin"))
    assert {COLLECTIVE, "nvshmem_sync_all", helper} <= set(made) and outline.stats["builds"] == builds + len(made)
    assert all(m.startswith("_Z") and "nvshmemi_transfer" in m for m in set(made) - {COLLECTIVE, "nvshmem_sync_all"})

    defined, _ = link.cubin_info(cubin)
    assert all(defined[m] == 1 for m in made), made  # every object linked, each function once
    assert defined[COLLECTIVE] == 1
    for name in store.EXPORTED_GLOBALS:  # the kernel's, once: the objects only declare them
        assert defined[name] == 1, name

    def k_again(dst, src):  # another kernel: the object comes from the cache
        nv.sum_reducescatter(W, dst, src, 2)

    hits = outline.stats["hits"]  # the first kernel's link may have found objects its prefetch built
    _, cubin, entry = cubin_of(k_again)
    # cached: the collective's object and those of the helpers it calls (its .calls, transitively)
    called, todo = {COLLECTIVE}, [COLLECTIVE]
    while todo:
        (path,) = objects_dir.glob(f"{todo.pop()}-*.cubin")
        new = outline.object_calls(path) - called
        called |= new
        todo += sorted(new)
    assert len(called) > 1 and called <= set(made)
    assert outline.stats["builds"] == builds + len(made) and outline.stats["hits"] == hits + len(called)
    defined, registers = link.cubin_info(cubin)
    assert defined[COLLECTIVE] == 1 and defined["nvshmemi_device_state_d"] == 1
    # callees included (the first kernel's p calls NVSHMEM's transport helper, an object capped
    # as the collective's): 1024 threads a block
    assert registers[entry] <= outline.MAX_REGISTERS


def _entry(ptx: str) -> str:
    start = ptx.index(".visible .entry")
    return ptx[start:ptx.index("\n}\n", start)]


def _memory_ops(ptx: str) -> collections.Counter:
    """The kernel's loads, stores, atomics, fences, barriers and shuffles (not those of call
    parameters), by kind: what its fast paths do."""
    return collections.Counter(
        m.group(1) for m in re.finditer(r"^\s*(?:@%p\d+ )?((?:ld|st|atom|red|membar|fence|bar|shfl)\.[\w.]*)",
                                        _entry(ptx), re.M) if ".param" not in m.group(1))


def test_small_ops_stay_inlined(monkeypatch):
    """The small operations stay inlined: no API function is called out of line, and the kernel
    does the same loads, stores, atomics and fences as with everything inlined; what is called out
    of line is NVSHMEM's own noinline transport helpers (the proxy path), from their objects
    instead of compiled into the kernel (their calls keep NVSHMEM's full parameter lists)."""
    monkeypatch.setenv(plan.ENV, "none")
    before, _ = cuda.compile_ptx(k_small, SMALL_SIG, cc=CC)
    monkeypatch.setenv(plan.ENV, "auto")
    after, _ = cuda.compile_ptx(k_small, SMALL_SIG, cc=CC)
    assert calls.extern_calls(before) == set()
    helpers = calls.extern_calls(after)
    assert helpers and not helpers & _optable.device_ops().keys()
    assert all(h.startswith("_Z") and "nvshmemi_transfer" in h for h in helpers)
    assert _memory_ops(after) == _memory_ops(before)
    assert len(after) < len(before) / 5  # the helpers' bodies are most of the PTX


def test_forcing(objects_dir):
    def k(dst, src):
        dst[0] = nv.my_pe()
        nv.p(dst, 1, 7, 0)

    with nv.outline("all"):  # every NVSHMEM function in an object: the kernel still defines the state
        ptx, cubin, _ = cubin_of(k)
    assert calls.extern_calls(ptx) == {"nvshmem_my_pe", "nvshmem_int32_p"}
    defined, _ = link.cubin_info(cubin)
    assert defined["nvshmemi_device_state_d"] == 1 and defined["nvshmem_int32_p"] == 1

    def k_none(dst, src):
        nv.sum_reducescatter(W, dst, src, 1)

    with nv.outline("none"):  # the collective inlined, as before hybrid linking
        ptx, _ = cuda.compile_ptx(k_none, (I32, I32), cc=CC)
    assert calls.extern_calls(ptx) == set() and not re.search(rf"\b{COLLECTIVE}\b", ptx)


@intrinsic
def sync_all_wrong_type(typingctx):
    def codegen(context, builder, sig, args):
        fn = declare_device_function(builder, "nvshmem_sync_all", ir.FunctionType(ir.IntType(32), []))
        return builder.call(fn, [])

    return types.int32(), codegen


def test_wrong_type_of_an_outlined_function_is_reported(objects_dir):
    def k(a):
        a[0] = sync_all_wrong_type()

    with pytest.raises(_linker.NvshmemLinkError, match="nvshmem_sync_all"):
        cuda.compile_ptx(k, (I32,), cc=CC)


def test_object_declares_the_device_state():
    ptx = outline.object_ptx(["nvshmem_sync_all"], 90, "sm_90", "+ptx85")
    assert re.search(r"^\.visible \.func[^\n]*\bnvshmem_sync_all\b", ptx, re.M)
    assert re.search(r"^\.extern \.const [^\n]*\bnvshmemi_device_state_d\b", ptx, re.M)
    assert not re.search(r"^\.(visible|weak) [^\n]*\bnvshmemi_\w+_d\b", ptx, re.M)


def test_a_kernel_of_a_newer_ptx_isa_than_llvmlite_writes_gets_objects_ptxas_reads(objects_dir, capfd):
    """Triton 3.9 with CUDA 13 and CuTe's cu13 build write PTX 9.4, which llvmlite's LLVM 22 does not
    know: the objects are written for the highest ISA it does (not its default for the SM, 8.0, which
    NVSHMEM's fences are above), with no warning, and ptxas builds them."""
    from nvshmem_dsl.linker import _llvm, link

    top = _llvm.max_ptx_isa(200)
    assert _llvm.ptx_features("+ptx200") == f"+ptx{top}" and _llvm.ptx_features("+ptx85") == "+ptx85"
    assert top >= 90 and _llvm._writes(top)
    newer = f"+ptx{top + 4}"
    ptx = outline.object_ptx(["nvshmem_sync_all"], 90, "sm_90", abi.object_features(newer))
    assert link.ptx_isa(ptx) == min(top, link.ptxas_ptx_isa())  # what LLVM writes and ptxas reads
    assert "not a recognized feature" not in capfd.readouterr().err
    paths = outline.objects(["nvshmem_sync_all"], 90, "sm_90", newer)
    assert paths and all(p.exists() for p in paths)


def test_kernel_register_limit_caps_the_objects(objects_dir):
    """A kernel compiled with max_registers=32 links objects built with that cap."""
    paths = outline.objects(["nvshmem_sync_all"], 90, "sm_90", "+ptx85", max_registers=32)
    assert any(p.name.startswith("nvshmem_sync_all-") for p in paths)  # with its helpers' objects
    for path in paths:
        assert "-r32-" in path.name and path.parent == objects_dir
        registers = link.cubin_info(path.read_bytes())[1]
        assert registers and max(registers.values()) <= 32
    # a cached object linked again counts as used now (what the cache's pruning reads)
    from nvshmem_dsl.linker import store_file

    old = time.time() - 90 * 86400
    for path in paths:
        os.utime(path, (old, old))
        store_file._used.discard(str(path))
    assert outline.objects(["nvshmem_sync_all"], 90, "sm_90", "+ptx85", max_registers=32) == paths
    assert all(time.time() - path.stat().st_mtime < 600 for path in paths)


def test_a_failing_ptxas_leaves_no_object_and_names_the_function(objects_dir, monkeypatch, tmp_path):
    """ptxas failing on an object: an error naming the function and the way around it (inlining), and
    nothing left in the objects' folder (no object, calls list or temporary file for a later link)."""
    text = outline.object_ir(["nvshmem_sync_all"], 90)
    fake = tmp_path / "bin" / "ptxas"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'ptxas fatal : Unresolved extern function nope' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(link, "ptxas", lambda: str(fake))
    monkeypatch.setattr(link, "_ptxas_options", lambda: ())
    with pytest.raises(link.PtxasError, match="Unresolved extern function nope"):
        link.assemble(".version 8.5", "sm_90")
    path = objects_dir / "nvshmem_sync_all-test.cubin"
    with pytest.raises(RuntimeError, match=r"ptxas failed on NVSHMEM's nvshmem_sync_all for sm_90 \(NVSHMEM_DSL_OUTLINE=none"
                                           r"[^)]*\):\nptxas fatal : Unresolved extern function nope"):
        outline._build("nvshmem_sync_all", 90, None, "sm_90", "+ptx85", 64, path, text=text)
    assert [p.name for p in objects_dir.iterdir() if p.is_file() and p.suffix != ".lock"] == []


def test_extern_calls():
    ptx = (".extern .func  (.param .b32 func_retval0) nvshmem_int32_broadcast(\n"
           ".extern .func nvshmem_barrier_all\n()\n.extern .func vprintf(\n"
           ".visible .func nvshmem_quiet()\n")
    assert calls.extern_calls([ptx]) == {"nvshmem_int32_broadcast", "nvshmem_barrier_all"}


def test_object_optimisation_level_is_checked_and_keys_the_objects(monkeypatch):
    from nvshmem_dsl.linker import outline

    monkeypatch.delenv(outline.OPT_ENV, raising=False)
    assert outline.opt_level() == "auto"
    # auto: the thread-scope API functions' objects at O3 (specialised names too), the rest light
    assert outline.O3_SCOPES == {"thread"} and outline.LIGHT_FAMILIES == {"reduce", "reducescatter"}
    assert outline.opt_level("nvshmem_float_broadcast") == "o3"
    assert outline.opt_level("nvshmem_barrier_all") == "o3"
    assert outline.opt_level("nvshmem_float_broadcast$p0_0") == "o3"
    assert outline.opt_level("nvshmemx_float_broadcast_warp") == "light"
    assert outline.opt_level("nvshmemx_int_sum_reduce_block") == "light"
    assert outline.opt_level("nvshmem_int_sum_reduce") == "light"  # a reduction: light at thread scope too
    assert outline.opt_level("nvshmem_float_sum_reducescatter") == "light"
    assert outline.opt_level("nvshmem_float_fcollect") == outline.opt_level("nvshmem_float_alltoall") == "o3"
    assert outline.opt_level("_Z23nvshmemi_transfer_quietIL13threadgroup_t0EEv") == "light"  # a helper
    for forced in outline.OPT_LEVELS:
        monkeypatch.setenv(outline.OPT_ENV, forced)
        assert {outline.opt_level(n) for n in ("nvshmem_float_broadcast", "nvshmemx_int_sum_reduce_block")} == {forced}
    monkeypatch.setenv(outline.OPT_ENV, "fast")
    with pytest.raises(ValueError, match="NVSHMEM_DSL_OUTLINE_OPT='fast': choose one of auto, quick, light, o3"):
        outline.opt_level()
    if link.ptxas() is None:
        pytest.skip("no ptxas")
    bc = Path(__file__)  # any file: the key reads its size and mtime
    monkeypatch.setattr(outline.store_file, "_cache_key", lambda path: "k")

    def path(name, how):
        monkeypatch.setenv(outline.OPT_ENV, how)
        return outline._object_path(name, bc, "sm_90a", "+ptx85", 64)

    assert len({path("nvshmem_int_sum_reduce", how) for how in outline.OPT_LEVELS}) == len(outline.OPT_LEVELS)
    assert path("nvshmem_float_broadcast", "auto") == path("nvshmem_float_broadcast", "o3")
    assert path("nvshmem_int_sum_reduce", "auto") == path("nvshmem_int_sum_reduce", "light")


def test_auto_builds_thread_scope_objects_at_o3(monkeypatch):
    """What ``auto`` emits: a thread-scope function's object as ``o3`` does, a warp-scope one's as
    ``light`` (PTX compared but for LLVM's call-sequence numbers, which count on in a process)."""
    from nvshmem_dsl.linker import outline

    def ptx(name, how):
        monkeypatch.setenv(outline.OPT_ENV, how)
        return re.sub(r"callseq \d+", "callseq", outline.object_ptx([name], 90, "sm_90", "+ptx85"))

    thread, warp = "nvshmem_barrier_all", "nvshmemx_barrier_all_warp"
    assert ptx(thread, "auto") == ptx(thread, "o3") != ptx(thread, "light")
    assert ptx(warp, "auto") == ptx(warp, "light") != ptx(warp, "o3")


def test_an_object_of_several_functions_is_built_at_the_most_any_asks(monkeypatch):
    from nvshmem_dsl.linker import object_workers

    asked = []
    monkeypatch.setattr(object_workers, "emit", lambda **request: asked.append(request["opt"]) or "")
    monkeypatch.delenv(outline.OPT_ENV, raising=False)
    levels = {"nvshmem_barrier_all": "o3", "nvshmemx_barrier_all_warp": "light"}
    monkeypatch.setattr(outline, "opt_level", lambda name=None: levels.get(name, "quick"))
    for names, want in ((["nvshmemx_barrier_all_warp"], "light"), (sorted(levels), "o3"),
                        (["nvshmemx_barrier_all_block"], "quick"), (["nvshmemx_barrier_all_block", "nvshmemx_barrier_all_warp"], "light")):
        outline.object_ptx(names, 90, "sm_90", "+ptx85", text="")
        assert asked.pop() == want, names


def test_quick_objects_are_light_code_generated_at_level_0(monkeypatch):
    """``quick`` (the split first forms' level): the light passes, then LLVM's code generation at level 0, which
    emits the same functions (more PTX: no machine-level optimisation; ptxas optimises it)."""
    from nvshmem_dsl.linker import object_llvm, outline

    assert object_llvm.CODEGEN_LEVELS["quick"] == 0 < object_llvm.CODEGEN_LEVELS["light"]
    monkeypatch.setenv(outline.OPT_ENV, "quick")
    name = "nvshmemx_barrier_all_warp"
    quick = outline.object_ptx([name], 90, "sm_90", "+ptx85")
    light = outline.object_ptx([name], 90, "sm_90", "+ptx85", opt="light")
    functions = re.compile(r"^\.(?:visible \.)?func\s+(?:\([^)]*\)\s*)?([\w$]+)", re.M)
    assert quick != light and sorted(functions.findall(quick)) == sorted(functions.findall(light))
    assert re.search(rf"^\.visible \.func\s+(?:\([^)]*\)\s*)?{name}\(", quick, re.M)
    assert len(quick) > len(light)


@pytest.mark.parametrize("directives, max_registers, cap", [
    ([".reqntid 32"], None, 255),            # one warp: a thread may have the most there are
    ([".maxntid 1024, 1, 1"], None, 64),     # 1024 threads: 64 each
    ([".maxntid 640"], None, 96),            # 20 warps: 102 a thread, in granules of 8
    ([".maxntid 16, 16, 2"], None, 128),     # 512 threads
    ([".reqntid 1"], None, 255),             # a warp is allocated for one thread
    ([None], None, outline.MAX_REGISTERS),   # no declaration: any block size, up to 1024 threads
    ([".reqntid 32"], 100, 100),             # the kernel's own -maxrregcount
    ([".reqntid 32", None], None, 64),       # two kernels: the least
    ([".reqntid 32\n.maxnreg 40"], None, 40),  # the kernel's own limit (Triton's maxnreg)
    ([], 100, outline.MAX_REGISTERS),        # no kernel (a library's PTX): as a kernel that declares none
])
def test_register_cap_follows_the_declared_block_size(directives, max_registers, cap):
    ptx = "".join(f".visible .entry k{i}(\n\t.param .u64 p\n)\n{d or ''}\n{{\n\tret;\n}}\n"
                  for i, d in enumerate(directives))
    assert outline.register_cap([ptx], max_registers) == cap


class _Stop(Exception):
    pass


def test_numba_objects_follow_the_kernels_launch_bounds(monkeypatch):
    """A Numba kernel's declared block size (``launch_bounds``) sets the objects' register cap;
    without one, 64 (1024 threads); ``max_registers`` caps it too.  The objects the link starts
    building before the PTX is emitted (outline.prefetch, from the IR) are those the link asks
    for (from the PTX)."""
    seen, prefetched = [], []

    def objects(names, arch, cpu, features, max_registers=None, bc_path=None):
        seen.append((sorted(names), cpu, features, max_registers))
        raise _Stop

    def prefetch(names, arch, cpu, features, max_registers=None, bc_path=None):
        prefetched.append((sorted(names), cpu, features, max_registers))

    monkeypatch.setattr(outline, "objects", objects)
    monkeypatch.setattr(outline, "prefetch", prefetch)
    for bounds, most in ((None, None), ((32,), None), ((1024,), None), ((512,), None), ((32,), 100)):
        lib, _ = _compile_pyfunc_with_fixup(k_collective, (I32, I32), device=False, abi="numba", cc=CC,
                                            launch_bounds=bounds)
        lib._max_registers = most  # what cuda.jit(max_registers=...) gives the library
        with pytest.raises(_Stop):
            lib.get_cubin(cc=CC)
    assert [cap for *_, cap in seen] == [64, 255, 64, 128, 100]
    api = [(names, cpu, features, cap) for names, cpu, features, cap in seen]
    assert [(sorted(set(n) & set(_optable.device_ops())), c, f, r) for n, c, f, r in api] == prefetched


def test_block_scope_objects_keep_64_registers_under_the_default_abi(monkeypatch, tmp_path):
    monkeypatch.setenv("NVSHMEM_DSL_HELPERS", "build")  # (the helpers' own caps too)
    """Where a kernel allows 255 registers, thread- and warp-scope objects get them; block-scope
    ones stay at 64 under CUDA's default calling convention (outline.CAPPED_SCOPES: measured slower
    with more), and get them too where the objects preserve few registers (abi.preserve)."""
    from nvshmem_dsl.linker import abi

    monkeypatch.setenv(abi.ENV, "off")
    built = {}

    def build(name, arch, bc_path, cpu, features, cap, path, text=None, on_calls=None, opt=None):
        built[name] = cap
        path.with_suffix(".calls").write_text("")  # as if it called no other object
        path.write_bytes(b"")
        return 1

    monkeypatch.setattr(outline, "_build", build)
    monkeypatch.setattr(outline, "_objects_dir", lambda: tmp_path)
    names = ["nvshmem_int32_sum_reduce", "nvshmemx_int32_sum_reduce_warp", "nvshmemx_int32_sum_reduce_block",
             "nvshmemx_barrier_all_block"]
    paths = outline.objects(names, 90, "sm_90a", "+ptx85", 255)
    api = {n: cap for n, cap in built.items() if n in names}
    assert api == {"nvshmem_int32_sum_reduce": 255, "nvshmemx_int32_sum_reduce_warp": 255,
                   "nvshmemx_int32_sum_reduce_block": 64, "nvshmemx_barrier_all_block": 64}
    assert set(built) - set(names) and all(cap == 255 for n, cap in built.items() if n not in names)  # helpers
    assert [p.name.split("-")[2] for p in paths] == ["r255", "r64", "r64", "r255"]  # sorted names
    for p in tmp_path.iterdir():
        p.unlink()
    built.clear()
    outline.objects(names, 90, "sm_90a", "+ptx85")  # no cap asked: 64 for all
    assert set(built.values()) == {64}
    monkeypatch.setenv(abi.ENV, "2")
    built.clear()
    outline.objects(names, 90, "sm_90a", "+ptx85", 255)
    assert {n: cap for n, cap in built.items() if n in names} == dict.fromkeys(names, 255)


def test_a_helpers_object_brings_the_helpers_it_calls(objects_dir, built_helpers):
    """NVSHMEM's transport helpers are objects of their own; one that calls others (quiet calls
    the region functions) brings their objects, each defining its function once, visible."""
    st = store._store(store._default_bitcode(90), 90)
    quiet = next((h for h in sorted(st.helpers) if "nvshmemi_transfer_quiet" in h and "threadgroup_t0" in h), None)
    if quiet is None:
        pytest.skip("no thread-scope quiet helper in this NVSHMEM")
    paths = outline.objects([quiet], 90, "sm_90a", "+ptx85")
    names = [p.name.split("-")[0] for p in paths]
    assert quiet in names and len(names) > 1 and names == sorted(names)
    for p in paths:
        defined = {n for n, d in link.elf_symbols(p.read_bytes()) if d}
        assert p.name.split("-")[0] in defined
    assert set(names) <= st.helpers
    # the helpers the store's call graph reaches from it, no more (none of its calls is specialised)
    assert set(names) == store.helper_closure([quiet], 90)


@pytest.mark.parametrize("threads, registers", [(1, 255), (32, 255), (256, 255), (512, 128), (640, 96),
                                                (1000, 64), (1024, 64)])
def test_registers_a_thread(threads, registers):
    assert outline.registers_a_thread(threads) == registers


# ---------------------------------------------------------------- helpers specialised on their modes

NONFETCH = "_Z30nvshmemi_transfer_amo_nonfetchImEvPvT_i14nvshmemi_amo_ti"


def _declaration(name: str) -> str:
    params = ",\n".join(f"\t.param .b{64 if i < 2 else 32} {name}_param_{i}" for i in range(5))
    return f".extern .func {name}\n(\n{params}\n)\n;\n"


def _callseq(n: int, op: str) -> str:
    params = ", ".join(f"param{i}" for i in range(5))
    return (f"\t{{ // callseq {n}, 0\n"
            + "".join(f"\t.param .b{64 if i < 2 else 32} \tparam{i};\n" for i in range(5))
            + f"\tst.param.b64 \t[param0], %rd1;\n\tst.param.b64 \t[param1], 5;\n\tst.param.b32 \t[param2], 1;\n"
            f"\tst.param.b32 \t[param3], {op};\n\tst.param.b32 \t[param4], %r1;\n"
            f"\tcall.uni {NONFETCH}, ({params});\n\t}} // callseq {n}\n")


def _ptx(*ops: str) -> str:
    body = "".join(_callseq(n, op) for n, op in enumerate(ops))
    return f".version 8.5\n.target sm_90\n.address_size 64\n\n{_declaration(NONFETCH)}\n.visible .entry k()\n{{\n{body}\tret;\n}}\n"


def test_mangled_modes_are_bools_and_enums_by_value():
    assert calls._mangled_modes(NONFETCH) == (False, False, False, True, False)  # (ptr, T, pe, op, int)
    dispatch = "_Z37nvshmemi_transfer_put_signal_dispatchIL13threadgroup_t0EEvPvS1_mS1_m14nvshmemi_amo_tibi"
    assert calls._mangled_modes(dispatch) == (False,) * 5 + (True, False, True, False)
    assert calls._mangled_modes("_Z23nvshmemi_transfer_quietIL13threadgroup_t0EEvbiPii") == (True, False, False, False)
    assert calls._mangled_modes("_Z28nvshmemi_transfer_region_endIL13threadgroup_t0EEvPK22nvshmemi_region_info_t") \
        == (False,)  # an enum or struct behind a pointer is data
    assert calls._mangled_modes("_Z43nvshmemi_transfer_submit_active_region_slowIL13threadgroup_t0EEbv") == ()
    assert calls._mangled_modes("_Z23nvshmemi_transfer_rma_pIiEvPvT_ii") == (False,) * 4  # the value is data
    assert calls._mangled_modes("_Z9somethingN3fooE") is None  # not read: not specialised
    assert calls._mangled_modes("nvshmem_int_p") is None


def test_specialised_names_round_trip():
    name = outline.specialised_name(NONFETCH, {3: 10, 4: -1})
    assert name == NONFETCH + "$p3_10$p4_m1"
    assert outline.split_specialised(name) == (NONFETCH, {3: 10, 4: -1})
    assert outline.split_specialised(NONFETCH) == (NONFETCH, {})
    assert calls.extern_calls(_declaration(name)) == {name}


def test_calls_with_constant_modes_call_specialised_helpers():
    ptx = calls.specialise_helper_calls(_ptx("10", "%r2"))
    spec = NONFETCH + "$p3_10"  # the op; not the 64-bit value 5 nor the PE 1 (data)
    assert calls.extern_calls(ptx) == {NONFETCH, spec}  # the second call's op is a register
    called = re.findall(r"call\.uni (\S+), \(", ptx)
    assert called == [spec, NONFETCH]
    assert _declaration(spec) in ptx and _declaration(NONFETCH) in ptx
    only = calls.specialise_helper_calls(_ptx("10", "9"))
    assert calls.extern_calls(only) == {NONFETCH + "$p3_10", NONFETCH + "$p3_9"}  # no longer called as is
    assert calls.specialise_helper_calls(_ptx("%r2")) == _ptx("%r2")
    assert calls.specialise_helper_calls(only) == only  # once
    # a helper with a result: call.uni (retval0), name, (...); a count of parameters other than its
    # C++ name's is left alone
    fetch = "_Z27nvshmemi_transfer_amo_fetchImET_PvS0_S0_i14nvshmemi_amo_ti"  # (ptr, ptr, ptr, pe, op, int)
    params = ", ".join(f"param{i}" for i in range(6))
    body = ("\t{ // callseq 0, 0\n\tst.param.b32 \t[param3], 1;\n\tst.param.b32 \t[param4], 8;\n"
            f"\tcall.uni (retval0), {fetch}, ({params});\n\t}} // callseq 0\n")
    decl = f".extern .func (.param .b64 func_retval0) {fetch}\n(\n\t.param .b64 {fetch}_param_0\n)\n;\n"
    got = calls.specialise_helper_calls(f"{decl}\n.visible .entry k()\n{{\n{body}\tret;\n}}\n")
    assert re.findall(r"call\.uni \(retval0\), (\S+), \(", got) == [fetch + "$p4_8"]  # the op, not the PE
    assert calls.extern_calls(got) == {fetch + "$p4_8"}
    five = body.replace(", param5)", ")")
    assert calls.specialise_helper_calls(f"{decl}\n{five}") == f"{decl}\n{five}"


def k_put_signals(d, s, u64, n, pe):
    nv.put_signal(d, s, n, u64, 3, uint64(1), nv.SignalOp.SIGNAL_SET, pe)
    nv.put_signal_nbi(d, s, n, u64, 3, uint64(1), nv.SignalOp.SIGNAL_ADD, pe)


def test_put_signal_links_specialised_dispatch_objects(objects_dir, built_helpers):
    """A kernel's put_signal calls NVSHMEM's put_signal_dispatch helper with its signal op and nbi
    constant: it calls, and links, objects of the helper specialised on them (each ~400 KiB of
    PTX instead of ~930 KiB unspecialised with 3.8: bench/results/object-sizes-cpu-2026-11-24.txt), one per (op, nbi)."""
    ptx, cubin, entry = cubin_of(k_put_signals, (I32, I32, types.uint64[::1], types.int32, types.int32))
    dispatch = {n for n in calls.extern_calls(ptx) if "put_signal_dispatch" in n}
    if not dispatch:
        pytest.skip("this NVSHMEM has no put_signal_dispatch helper")
    assert all(outline.SPECIALISED in n for n in dispatch) and len(dispatch) == 2
    ops = {outline.split_specialised(n)[1].get(5) for n in dispatch}
    assert len(ops) == 2  # SIGNAL_SET and SIGNAL_ADD
    built = {p.name.split("-")[0]: p for p in objects_dir.iterdir() if p.suffix == ".cubin"}
    for name in dispatch:
        assert name in {n for n, d in link.elf_symbols(built[name].read_bytes()) if d}
    assert cubin[:4] == b"\x7fELF"


def test_objects_share_the_helpers_they_call(objects_dir, built_helpers):
    """An API function's object calls NVSHMEM's transport helpers in theirs (specialised on the
    calls' modes), so that a second collective builds only its own object."""
    first = outline.objects([COLLECTIVE], 90, "sm_90", "+ptx85")
    own = next(p for p in first if p.name.startswith(COLLECTIVE + "-"))
    helpers = set(first) - {own}
    assert helpers and outline.object_calls(own) <= {p.name.split("-")[0] for p in helpers}
    undefined = {n for n, d in link.elf_symbols(own.read_bytes()) if not d and n.startswith("_Z")}
    assert undefined == set(outline.object_calls(own))
    own.with_suffix(".calls").unlink()  # a cache without the list: read from the object's symbols
    assert outline.object_calls(own) == undefined
    builds = outline.stats["builds"]
    other = "nvshmem_float_sum_reducescatter"
    second = outline.objects([other], 90, "sm_90", "+ptx85")
    assert outline.stats["builds"] == builds + 1  # its own object only
    assert set(second) - helpers == {p for p in second if p.name.startswith(other + "-")}


@pytest.mark.parametrize("name", ["nvshmem_float_broadcast", "nvshmemx_float_sum_reduce_block",
                                  COLLECTIVE, "nvshmemx_barrier_all_block", "nvshmemx_int_alltoall_warp"])
def test_helpers_predicted_from_the_ir_are_those_the_ptx_calls(name):
    """The helpers an object calls, read from its IR before LLVM runs on it (their objects start
    building with it), are those its PTX calls, specialised alike."""
    text = outline.object_ir([name], 90)
    predicted = calls.predicted_helper_calls(text)
    ptx = outline.object_ptx([name], 90, "sm_90", "+ptx85", text=text)
    called = calls.helper_calls(calls.specialise_helper_calls(ptx))
    assert called and predicted == called
    if name == "nvshmem_float_broadcast":  # its put_signal dispatch is specialised on the signal op
        assert any(outline.SPECIALISED in n for n in called)


@pytest.mark.parametrize("name", ["nvshmem_float_broadcast", "nvshmemx_barrier_all_block", "nvshmemx_int_alltoall_warp"])
def test_helper_declarations_from_the_ir_are_the_ptxs(name):
    """The PTX declarations of the helpers an object calls, made from its IR's declarations alone (NVIDIA's
    compiled helpers are asked about them while LLVM emits the object), are its PTX's, character for
    character: the answers are its helpers'."""
    text = outline.object_ir([name], 90)
    early = calls.helper_declarations(text, "sm_90", "+ptx85")
    ptx = outline.object_ptx([name], 90, "sm_90", "+ptx85", text=text)
    called = {n for n in calls.helper_calls(ptx) if outline.SPECIALISED not in n}
    assert called and called <= set(early)
    for n in called:
        assert early[n] == calls._declaration(ptx, n).group(0).rstrip("\n"), n


def test_objects_ask_about_their_helpers_before_their_ptx(monkeypatch, tmp_path):
    """With NVIDIA's compiled helpers in use, an object's helpers are asked about (ask_ahead) before its
    LLVM step returns, and its PTX's own question (prepare_calls) waits for that probe instead of
    probing again: one probe for them."""
    from nvshmem_dsl.linker import helper_archive

    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cache"))
    member = tmp_path / "member.o"
    member.write_bytes(b"")
    monkeypatch.setattr(helper_archive, "path", lambda sm, bc_path=None: member)
    monkeypatch.setattr(helper_archive, "_answers", {})
    monkeypatch.setattr(helper_archive, "_asking", {})
    events, probes = [], []

    def probe(m, sm, declarations, bc_path):
        probes.append(sorted(declarations))
        time.sleep(0.5)  # a probe under way when the PTX asks
        return {n: False for n in declarations}  # the member has none: all built

    real_ptx = outline.object_ptx
    monkeypatch.setattr(helper_archive, "_probe", probe)
    monkeypatch.setattr(outline, "object_ptx", lambda *a, **k: (events.append(("ptx", len(probes))), real_ptx(*a, **k))[1])
    monkeypatch.setattr(link, "assemble", lambda ptx, cpu, options=(): b"")  # no ptxas: what is asked, not built
    monkeypatch.setattr(outline, "object_calls", lambda path: frozenset())
    name = "nvshmemx_barrier_all_block"
    text = outline.object_ir([name], 90)
    declared = calls.helper_declarations(text, "sm_90", "+ptx85")
    assert declared
    outline.objects([name], 90, "sm_90", "+ptx85")
    assert probes[0] == sorted(declared)  # the object's helpers, from its IR (then those of the helpers built)
    asked = [n for names in probes for n in names]
    assert len(asked) == len(set(asked))  # none asked twice
    assert events[0] == ("ptx", 1)  # the first probe started before the object's LLVM step


def test_a_kernels_helpers_are_asked_about_before_its_ptx_is_emitted(monkeypatch, tmp_path):
    """A kernel being linked (its objects wanted) has NVIDIA's compiled helpers asked about the helpers
    its NVSHMEM code declares before LLVM optimises and emits it, with the declarations its PTX then
    makes; a kernel compiled to PTX alone asks nothing early."""
    from nvshmem_dsl.linker import helper_archive

    member = tmp_path / "member.o"
    monkeypatch.setattr(helper_archive, "path", lambda sm, bc_path=None: member)
    asked = []
    monkeypatch.setattr(helper_archive, "ask_ahead",
                        lambda sm, names, declarations, bc_path=None: asked.append(declarations()))
    monkeypatch.setattr(outline, "prefetch", lambda *a, **k: None)
    lib, _ = _compile_pyfunc_with_fixup(k_small, SMALL_SIG, device=False, abi="numba", cc=CC)
    monkeypatch.setattr(_linker, "prepare_calls", lambda ptx, bc_path=None: ptx)  # the PTX as LLVM emitted it
    ptx = _linker.compile_ptx(lib.llvm_strs, CC, prefetch=False)
    assert asked == []
    ptx = _linker.compile_ptx(lib.llvm_strs, CC, prefetch=True)
    (early,) = asked
    called = calls.helper_calls(ptx)
    assert called and called <= set(early)  # (and those LLVM then found unused: asked about, harmless)
    for n in called:
        assert early[n] == calls._declaration(ptx, n).group(0).rstrip("\n"), n


def test_ir_call_arguments():
    args = calls._ir_arguments("ptr noundef %0, i32 noundef 9, i1 true, i1 false, i64 4, i32 -1, "
                                 "ptr getelementptr (i8, ptr @x, i64 8), i8 %m, <2 x i32> %v")
    assert args == [None, 9, 1, 0, None, -1, None, None, None]
    assert calls._ir_arguments("") == []


def test_ptx_alone_builds_no_objects(monkeypatch):
    """``cuda.compile_ptx`` (PTX, no link) starts no object builds; a cubin's link does."""
    started = []
    monkeypatch.setattr(outline, "prefetch", lambda names, *a, **k: started.append(sorted(names)))
    monkeypatch.setattr(outline, "objects", lambda *a, **k: [])
    cuda.compile_ptx(k_collective, (I32, I32), cc=CC)
    assert started == []
    lib, _ = _compile_pyfunc_with_fixup(k_collective, (I32, I32), device=False, abi="numba", cc=CC)
    with pytest.raises(Exception):  # no objects given to the link: it fails, after starting them
        lib.get_cubin(cc=CC)
    assert started == [sorted({COLLECTIVE, "nvshmem_sync_all"})]


def test_a_prefetch_and_the_links_objects_build_each_object_once(objects_dir, built_helpers):
    """The link's objects() call while the prefetch of the same objects is under way waits for
    those builds (their file locks) instead of repeating them: each object is built once."""
    builds = outline.stats["builds"]
    thread = outline.prefetch([COLLECTIVE], 90, "sm_90", "+ptx85")
    assert thread is not None
    paths = outline.objects([COLLECTIVE], 90, "sm_90", "+ptx85")
    thread.join()
    assert paths and all(p.exists() for p in paths)
    assert outline.stats["builds"] == builds + len(paths)
    assert outline.prefetch([COLLECTIVE], 90, "sm_90", "+ptx85") is None  # all cached: no thread


def test_split_objects_are_built_whole_later_and_then_linked(objects_dir, monkeypatch):
    """Where objects are tiered (a driver, the default threshold), a kernel links the split object
    it waited for and hands the function to a background build of the whole one; kernels linked
    once that is there get it, with the same helpers."""
    import json

    from nvshmem_dsl.linker import loop_split, store_build

    monkeypatch.setattr(loop_split, "MIN_INSTRUCTIONS", 0)  # every object split
    monkeypatch.setattr(loop_split, "tiered", lambda: True)  # as where a CUDA driver is
    monkeypatch.setattr(store_build, "_lower_priority", lambda: None)  # not this test's process
    later = []
    monkeypatch.setattr(outline, "_build_final_later", lambda forms, *rest: later.append((forms, rest)))
    first = outline.objects([COLLECTIVE], 90, "sm_90", "+ptx85")
    split = next(p for p in first if p.name.startswith(COLLECTIVE + "-"))
    # the API function only, not its helpers; its final form whole
    assert [forms for forms, _ in later] == [[(COLLECTIVE, loop_split.WHOLE)]]
    # a kernel linked with it is not for the DSLs' disk caches
    assert outline.provisional(first) and outline.provisional([split])
    assert not outline.provisional(set(first) - {split})
    arch, bc_path, cpu, features, cap = later[0][1]
    outline._build_final_main(json.dumps([[COLLECTIVE, arch, str(bc_path), cpu, features,
                                           outline._scope_cap(COLLECTIVE, cap), loop_split.WHOLE]]))
    later.clear()
    second = outline.objects([COLLECTIVE], 90, "sm_90", "+ptx85")
    whole = next(p for p in second if p.name.startswith(COLLECTIVE + "-"))
    assert whole != split and whole.exists() and not later and not outline.provisional(second)
    functions = [len(link.elf_symbols(p.read_bytes())) for p in (split, whole)]
    assert functions[0] > functions[1]  # whole: no loops made functions of their own
    assert set(second) - {whole} == set(first) - {split}
    assert outline.object_calls(whole) == outline.object_calls(split)


def test_o3_objects_are_built_light_first_and_at_o3_later(objects_dir, monkeypatch):
    """Where objects are tiered (a driver, NVSHMEM_DSL_OUTLINE_OPT unset), a kernel calling a function whose
    object is built at O3 (thread scope) links it built light, provisionally, and hands it to a background
    build at O3; kernels linked once that is there get it.  A function built light anyway is not tiered."""
    import json

    from nvshmem_dsl.linker import abi, loop_split, store_build

    monkeypatch.delenv(outline.OPT_ENV, raising=False)
    monkeypatch.delenv(loop_split.ENV, raising=False)
    monkeypatch.setattr(link, "driver_major", lambda: 13)  # as where a CUDA driver is
    monkeypatch.setattr(store_build, "_lower_priority", lambda: None)
    later = []
    monkeypatch.setattr(outline, "_build_final_later", lambda forms, *rest: later.append((forms, rest)))
    name = "nvshmem_barrier_all"
    assert outline.opt_tiered() and outline.opt_level(name) == "o3"
    final = outline._object_path(name, store._default_bitcode(90), "sm_90", "+ptx85", 64)
    light = outline._object_path(name, store._default_bitcode(90), "sm_90", "+ptx85", 64, opt="light")
    assert light != final
    first = outline.objects([name], 90, "sm_90", "+ptx85")
    assert light in first and final not in first and light.exists() and not final.exists()
    assert [forms for forms, _ in later] == [[(name, loop_split.key())]]
    assert outline.provisional([light])
    arch, bc_path, cpu, features, cap = later[0][1]
    outline._build_final_main(json.dumps([[name, arch, str(bc_path), cpu, features, outline._scope_cap(name, cap),
                                           loop_split.key()]]))
    later.clear()
    second = outline.objects([name], 90, "sm_90", "+ptx85")
    assert final in second and light not in second and not later and not outline.provisional(second)
    assert outline.object_calls(final) == outline.object_calls(light)
    # light anyway (a reduction; a value set): waited for as it is
    assert outline._first_form("nvshmem_int_sum_reduce", 90, None) is None
    # split (the block reduction): split and quick first, whole and light later; a value set keeps its level
    block_reduction = "nvshmemx_float_sum_reduce_block"
    assert outline.opt_level(block_reduction) == "light" and outline._split([block_reduction], 90, None)
    assert outline._first_form(block_reduction, 90, None) == (loop_split.WHOLE, "quick")
    monkeypatch.setenv(outline.OPT_ENV, "light")
    assert outline._first_form(block_reduction, 90, None) == (loop_split.WHOLE, "light")
    monkeypatch.setenv(outline.OPT_ENV, "auto")
    assert not outline.opt_tiered() and outline._first_form(name, 90, None) is None
    monkeypatch.delenv(outline.OPT_ENV)
    monkeypatch.setattr(link, "driver_major", lambda: None)  # no driver: only compile time counts
    assert not outline.opt_tiered()


def test_info_says_what_a_cold_kernel_waits_for(monkeypatch):
    from nvshmem_dsl.linker import abi, loop_split

    monkeypatch.delenv(outline.OPT_ENV, raising=False)
    monkeypatch.delenv(loop_split.ENV, raising=False)
    monkeypatch.setattr(link, "driver_major", lambda: 13)
    assert outline.explain_tiers().startswith(
        "a cold kernel links first forms (the largest with their loops split, quick, those at O3 built light)")
    monkeypatch.setenv(outline.OPT_ENV, "auto")
    assert "first forms (the largest with their loops split);" in outline.explain_tiers()
    monkeypatch.setenv(loop_split.ENV, "16000")
    assert outline.explain_tiers().startswith("a cold kernel waits for its objects' final forms")
    monkeypatch.delenv(outline.OPT_ENV)
    monkeypatch.delenv(loop_split.ENV)
    monkeypatch.setattr(link, "driver_major", lambda: None)
    assert "no CUDA driver here" in outline.explain_tiers()


@pytest.mark.parametrize("provisional", [True, False])
def test_numbas_disk_cache_keeps_no_cubin_linked_with_provisional_objects(objects_dir, monkeypatch, provisional):
    """A kernel linked with split objects whose whole form is still being built is pickled for
    Numba's cache (``cache=True``) with its PTX but not that cubin: a later process links it again."""
    linked = []

    def told(paths):
        linked.append(sorted(p.name for p in paths))
        return provisional and bool(paths)

    monkeypatch.setattr(outline, "provisional", told)
    lib, _ = _compile_pyfunc_with_fixup(k_collective, (I32, I32), device=False, abi="numba", cc=CC)
    lib.get_cubin(cc=CC)
    assert linked and any(n.startswith(COLLECTIVE + "-") for n in linked[0])
    state = lib._reduce_states()
    assert CC in lib._cubin_cache and state["ptx_cache"][CC]
    assert (CC in state["cubin_cache"]) is not provisional
    cubin = type(lib)._rebuild(**state).get_cubin(cc=CC)  # as in a later process
    assert bytes(getattr(cubin, "code", cubin))[:4] == b"\x7fELF"
    assert len(linked) == (2 if provisional else 1)  # linked again where it was left out


def test_final_builds_start_once_a_process_in_the_background(monkeypatch, tmp_path):
    import json
    import sys

    from nvshmem_dsl.linker import loop_split

    started = []
    monkeypatch.setattr(outline, "_final_started", set())
    monkeypatch.setattr(outline.subprocess, "Popen", lambda args, **kw: started.append((args, kw)))
    before = outline.stats["final_later"]
    for _ in range(2):
        outline._build_final_later([(COLLECTIVE, loop_split.WHOLE)], 90, tmp_path / "x.bc", "sm_90", "+ptx85", 64)
    assert len(started) == 1 and outline.stats["final_later"] == before + 1
    args, kw = started[0]
    assert "env" not in kw and kw["start_new_session"]  # the job says the final form, not the environment
    assert json.loads(args[-2]) == [[COLLECTIVE, 90, str(tmp_path / "x.bc"), "sm_90", "+ptx85",
                                     outline._scope_cap(COLLECTIVE, 64), loop_split.WHOLE]]
    assert json.loads(args[-1]) == sys.path  # the child imports nvshmem_dsl as this process does


def test_tiering_needs_the_default_threshold_and_a_driver(monkeypatch):
    from nvshmem_dsl.linker import abi, loop_split

    monkeypatch.setattr(link, "driver_major", lambda: 12)
    monkeypatch.delenv(loop_split.ENV, raising=False)
    assert loop_split.tiered()
    monkeypatch.setenv(loop_split.ENV, "16000")  # a value set decides alone
    assert not loop_split.tiered()
    monkeypatch.delenv(loop_split.ENV)
    monkeypatch.setattr(link, "driver_major", lambda: None)  # no driver: only compile time counts
    assert not loop_split.tiered()


def test_final_builds_need_an_interpreter_to_start(monkeypatch, tmp_path):
    """Where no process can be started (an embedded Python), the kernel keeps the first forms."""
    def refuse(*args, **kw):
        raise OSError("no interpreter")

    monkeypatch.setattr(outline, "_final_started", set())
    monkeypatch.setattr(outline.subprocess, "Popen", refuse)
    before = outline.stats["final_later"]
    outline._build_final_later([(COLLECTIVE, "none")], 90, tmp_path / "x.bc", "sm_90", "+ptx85", 64)
    assert outline.stats["final_later"] == before
