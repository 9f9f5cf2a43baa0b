"""The NVSHMEM bitcode piece store (nvshmem_dsl.linker.store) on a small NVSHMEM-like module:
stores built in several processes, closures extracted on the side, concurrent cold starts.

Everything runs on the CPU in a few seconds; the real bitcode is covered by
tests/test_numba_linker.py.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys

import pytest

llvm = pytest.importorskip("llvmlite.binding")

from nvshmem_dsl.linker import bodies, pieces, store, store_build  # noqa: E402

# Three parts' worth of API functions sharing an internal helper, an internal
# mutable global, TBAA and loop metadata; a string that looks like metadata and
# attribute references; a hidden API function that another one calls.
IR = r"""
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%struct.state = type { i32, i32 }

@nvshmemi_device_state_d = addrspace(4) externally_initialized constant %struct.state zeroinitializer, align 4
@counter = internal addrspace(1) global i32 0, align 4
@.str = private unnamed_addr constant [6 x i8] c"a!1#2\00", align 1
@table = internal constant ptr @.str, align 8

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() #2

define internal i32 @helper(i32 %x) #0 {
  %s = load i32, ptr addrspace(4) @nvshmemi_device_state_d, align 4, !tbaa !0
  %c = atomicrmw add ptr addrspace(1) @counter, i32 %x seq_cst, align 4
  %r = add i32 %s, %c
  ret i32 %r
}

define i32 @nvshmem_bar() #1 {
  ret i32 7
}

define hidden i32 @nvshmem_foo(i32 %x) #1 {
  %r = call i32 @helper(i32 %x)
  ret i32 %r
}

define i32 @nvshmem_baz(i32 %n) #3 {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i1, %loop ]
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %v = call i32 @nvshmem_foo(i32 %t)
  %w = call i32 @helper(i32 %v)
  %i1 = add i32 %i, %w
  %c = icmp slt i32 %i1, %n
  br i1 %c, label %loop, label %exit, !llvm.loop !4
exit:
  ret i32 %i1
}

define ptr @nvshmem_zap() #1 {
  %p = load ptr, ptr @table, align 8, !tbaa !6
  ret ptr %p
}

attributes #0 = { noinline nounwind "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
attributes #1 = { alwaysinline nounwind "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
attributes #2 = { nounwind memory(none) }
attributes #3 = { nounwind "frame-pointer"="all" "target-cpu"="sm_90" }

!0 = !{!1, !1, i64 0}
!1 = !{!"int", !2, i64 0}
!2 = !{!"omnipotent char", !3, i64 0}
!3 = !{!"Simple C++ TBAA"}
!4 = distinct !{!4, !5}
!5 = !{!"llvm.loop.mustprogress"}
!6 = !{!7, !7, i64 0}
!7 = !{!"any pointer", !2, i64 0}
"""
API = ["nvshmem_bar", "nvshmem_baz", "nvshmem_foo", "nvshmem_zap"]


@pytest.fixture
def bc(tmp_path, monkeypatch):
    path = tmp_path / "libnvshmem_device_sm_90.bc"
    path.write_bytes(llvm.parse_assembly(IR).as_bitcode())
    monkeypatch.delenv("NVSHMEM_DSL_BUILD_JOBS", raising=False)
    monkeypatch.setattr(store, "_stores", {})
    monkeypatch.setattr(store, "_subsets", type(store._subsets)())
    monkeypatch.setattr(store, "_prefetch_asked", set())
    return path


def _store(bc, tmp_path, monkeypatch, jobs: int, name: str):
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / name))
    monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", str(jobs))
    store._stores.clear()
    store.api_names(90, bc_path=bc)  # builds it
    return store._Store(store.store_path(bc), store._cache_key(bc))


_REF = re.compile(r'"[^"]*"|!(\d+)')


def canonical(asm: str) -> list:
    """The module's lines, sorted, with attribute groups and metadata nodes
    written out in place of their numbers; unused declarations left out, type
    names without the suffixes LLVM adds."""
    ctx = llvm.create_context()
    mod = llvm.parse_assembly(asm, context=ctx)
    text = str(mod)
    mod.close()
    ctx.close()
    attrs = dict(re.findall(r"^attributes (#\d+) = (.*)$", text, re.M))
    nodes = {int(k): v for k, v in re.findall(r"^!(\d+) = (.*)$", text, re.M)}

    def node(n, seen=()):
        if n in seen:
            return "SELF"
        return _REF.sub(lambda m: m.group(0) if m.group(1) is None
                        else "<" + node(int(m.group(1)), seen + (n,)) + ">", nodes[n])

    lines = []
    for line in text.split("\n"):
        if not line.strip() or line.startswith(("attributes #", ";", "!", "source_filename")):
            continue
        if line.startswith("declare ") and not re.search(
                r"@([\w.]+)\(", line).group(1) in re.findall(r"call [^@]*@([\w.]+)\(", text):
            continue
        line = re.sub(r'"[^"]*"|#\d+\b', lambda m: attrs.get(m.group(0), m.group(0)), line)
        line = re.sub(r"(%struct\.[A-Za-z_]+)[.\d]*", r"\1", line)  # renamed by the context
        lines.append(_REF.sub(lambda m: m.group(0) if m.group(1) is None
                              else "<" + node(int(m.group(1))) + ">", line))
    return sorted(lines)


def test_renumber_leaves_strings_alone():
    text = b'@s = constant [5 x i8] c"!1#2\\00"\n  %x = load i32, ptr %p, !tbaa !7 #3'
    assert pieces._renumber(text, 100, 10) == (
        b'@s = constant [5 x i8] c"!1#2\\00"\n  %x = load i32, ptr %p, !tbaa !107 #13')
    assert pieces._renumber(text, 0, 0) is text


def test_parts_give_the_same_modules(bc, tmp_path, monkeypatch):
    one = _store(bc, tmp_path, monkeypatch, 1, "one")
    two = _store(bc, tmp_path, monkeypatch, 2, "two")
    assert one.api == two.api == set(API)
    assert len(one._segments) == 1 and len(two._segments) == 2
    # sorted API dealt out: part 0 owns bar and foo, part 1 baz and zap
    assert [two.functions[n][0] for n in API] == [0, 1, 0, 1]
    assert two.functions["helper"][0] == 0  # from the first part that has it
    for names in [[n] for n in API] + [API]:
        assert canonical(one.assemble(names).decode()) == canonical(two.assemble(names).decode()), names
    zap = two.assemble(["nvshmem_zap"]).decode()
    assert 'c"a!1#2\\00"' in zap  # renumbered (part 1), the string kept
    assert min(int(n) for n in re.findall(r"!tbaa !(\d+)", zap)) >= two._md_stride
    assert "target-cpu" not in zap and "target-features" not in zap
    # the only internal mutable global is defined once
    both = two.assemble(["nvshmem_foo", "nvshmem_baz"]).decode()
    assert len(re.findall(r"^@counter = ", both, re.M)) == 1
    mod = llvm.parse_assembly(both)
    mod.verify()
    assert {"nvshmem_foo", "nvshmem_baz", "helper"} <= {f.name for f in mod.functions}
    path = store.store_path(bc)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not list(path.parent.glob("*.tmp")) and not list(path.parent.glob("*.build-*"))


def test_closure_is_the_same_module(bc, tmp_path, monkeypatch):
    st = _store(bc, tmp_path, monkeypatch, 1, "one")
    closure = store._Store.from_part(pieces._part(bc, 0, 1, own=["nvshmem_baz"]), "k")
    assert closure.temporary and closure.api == set(API)
    assert set(closure.functions) == {"nvshmem_baz", "nvshmem_foo", "helper"}
    text = closure.assemble(["nvshmem_baz"]).decode()
    # nvshmem_foo, not its own, is printed as NVSHMEM has it (external, hidden)
    assert re.search(r"^define hidden i32 @nvshmem_foo", text, re.M)
    assert canonical(text) == canonical(st.assemble(["nvshmem_baz"]).decode())
    with pytest.raises(KeyError):
        closure.assemble(["nvshmem_nope"])


def test_cold_start_links_a_closure_while_the_store_is_built(bc, tmp_path, monkeypatch):
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cold"))
    monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", "2")
    monkeypatch.setattr(store_build, "_builders", [])
    parses = store.stats["bitcode_parses"]
    mod = store.api_module(["nvshmem_baz"], 90, bc_path=bc)
    assert {"nvshmem_baz", "nvshmem_foo", "helper"} <= {f.name for f in mod.functions}
    assert store.stats["bitcode_parses"] == parses  # built elsewhere
    assert len(store_build._builders) == 1
    store_build._wait_for_builders()
    assert store_build._builders[0].returncode == 0
    path = store.store_path(bc)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not [p for p in path.parent.iterdir() if p.suffix not in (".pieces", ".lock")]
    st = store._Store(path, store._cache_key(bc))
    assert canonical(str(mod)) == canonical(st.assemble(["nvshmem_baz"]).decode())
    # the next call of this process finds the store (and no new build starts)
    store.api_module(["nvshmem_bar"], 90, bc_path=bc)
    assert store._stores and len(store_build._builders) == 1


def test_a_build_beside_the_compiles_yields_the_cpus(monkeypatch):
    """The store's builder (and the part processes it starts, which inherit it) runs at a lower
    priority than the process compiling kernels meanwhile (a cold first kernel's ptxas runs)."""
    calls = []
    monkeypatch.setattr(store_build, "_build", lambda *a, **kw: calls.append(("build", a[1], kw)))
    monkeypatch.setattr(store_build.os, "nice", lambda inc: calls.append(("nice", inc)) or inc)
    store_build._worker_main(["build", "x.bc", "90", "out.pieces", "key"])
    assert calls == [("nice", store_build.BACKGROUND_NICENESS), ("build", 90, {"side": True})]
    assert store_build.BACKGROUND_NICENESS > 0


def test_a_process_bound_to_one_cpu_builds_beside(monkeypatch, tmp_path):
    """An mpirun rank (bound to one core) builds the store in a process of its own, as with more
    CPUs: its first kernels link closures instead of waiting for the whole build (GPU record
    2026-12-03 session 23: ranks bound to one core waited past 90 s)."""
    monkeypatch.delenv("NVSHMEM_DSL_BUILD_JOBS", raising=False)
    monkeypatch.setattr(store_build, "_can_spawn", lambda bc: True)
    monkeypatch.setattr(store_build, "_mem_available", lambda: None)
    monkeypatch.setattr(store_build, "_cpus", lambda: 1)
    assert store_build._side_builds(tmp_path / "x.bc")
    monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", "1")
    assert not store_build._side_builds(tmp_path / "x.bc")


def _functions(mod):
    return sorted(f.name for f in mod.functions if not f.is_declaration)


def test_bodies_are_listed_and_dropped_in_place(bc):
    """bitcode_bodies reads the module's function records; keep_bodies turns the others into
    declarations by one bit each (the file keeps its size), except the first with a body."""
    data = bc.read_bytes()
    fns = {f.name: f for f in bodies.functions(data)}
    assert {n for n, f in fns.items() if f.has_body} == {"helper", *API}
    assert not fns["llvm.nvvm.read.ptx.sreg.tid.x"].has_body
    assert fns["nvshmem_foo"].external and not fns["helper"].external  # hidden is still external
    first = next(f.name for f in bodies.functions(data) if f.has_body)
    small = bodies.keep_bodies(data, {"nvshmem_baz"})
    assert len(small) == len(data) and small != data
    mod = llvm.parse_bitcode(small)
    mod.verify()
    assert _functions(mod) == sorted({first, "nvshmem_baz"})
    with pytest.raises(bodies.BitcodeLayoutError, match="not LLVM bitcode"):
        bodies.functions(b"not bitcode at all")


def test_defined_globals_are_read_from_the_module_records(tmp_path):
    """defined_globals names the global variables with an initializer, not those only declared (as
    NVSHMEM 3.4.5's bitcode would have a device state its compiled helpers read); helper_archive asks
    it whether a kernel module can define what NVIDIA's helpers read, not its bytes (a name inside
    another, or only declared, would pass there)."""
    from nvshmem_dsl.linker import helper_archive

    data = llvm.parse_assembly(
        'target triple = "nvptx64-nvidia-cuda"\n'
        "@nvshmemi_device_state_d = addrspace(4) externally_initialized global [16 x i8] zeroinitializer\n"
        "@nvshmemi_ibgda_device_state_d_old = global i32 1\n"
        "@nvshmemi_ibgda_device_state_d = external global i32\n"
        "define i32 @nvshmem_my_pe() {\n  %v = load i32, ptr @nvshmemi_ibgda_device_state_d\n  ret i32 %v\n}\n"
        "declare void @nvshmemi_transfer_quiet()\n").as_bitcode()
    assert bodies.defined_globals(data) == {"nvshmemi_device_state_d", "nvshmemi_ibgda_device_state_d_old"}
    bc = tmp_path / "libnvshmem_device.bc"
    bc.write_bytes(data)
    has = {n: helper_archive._bitcode_has(bc, n) for n in ("nvshmemi_device_state_d", "nvshmemi_ibgda_device_state_d",
                                                             "nvshmem_my_pe", "nvshmemi_transfer_quiet")}
    assert has == {"nvshmemi_device_state_d": True, "nvshmemi_ibgda_device_state_d": False, "nvshmem_my_pe": True,
                   "nvshmemi_transfer_quiet": False}


@pytest.mark.parametrize("names", [["nvshmem_baz"], ["nvshmem_zap", "nvshmem_bar"], ["nvshmem_foo"]])
def test_closure_from_the_bodies_it_needs_is_the_same(bc, names, monkeypatch):
    """_closure parses only ``names``' bodies, the non-API ones and, in a second round, the API
    functions they call (nvshmem_baz calls nvshmem_foo): the same closure as from the whole file."""
    parsed = []
    real = pieces._parse
    monkeypatch.setattr(pieces, "_parse", lambda path, data=None: (parsed.append(data), real(path, data))[1])
    closure = store._Store.from_part(pieces._closure(bc, names), "k").assemble(names).decode()
    whole = store._Store.from_part(pieces._part(bc, 0, 1, own=names), "k").assemble(names).decode()
    assert canonical(closure) == canonical(whole)
    assert parsed[0] is not None and parsed[0] != bc.read_bytes()  # bodies dropped
    assert len(parsed) == (3 if names == ["nvshmem_baz"] else 2)  # + nvshmem_foo; then the whole


# An out-of-line helper that is not the first function with a body (that one's body is always
# read: tests above), called by an API function beside an internal function that is not one.
HELPERS_IR = r"""
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@nvshmemi_device_state_d = addrspace(4) externally_initialized constant i32 0, align 4

define i32 @nvshmem_first() #1 {
  ret i32 1
}

define internal i32 @inner(i32 %x) #1 {
  %r = add i32 %x, 1
  ret i32 %r
}

define internal fastcc void @transfer(ptr %p, i32 %x) unnamed_addr #0 {
  %s = load i32, ptr addrspace(4) @nvshmemi_device_state_d, align 4
  %v = add i32 %s, %x
  store i32 %v, ptr %p, align 4
  ret void
}

define void @nvshmem_qux(ptr %p, i32 %x) #1 {
  %y = call i32 @inner(i32 %x)
  call fastcc void @transfer(ptr %p, i32 %y)
  ret void
}

attributes #0 = { noinline nounwind }
attributes #1 = { alwaysinline nounwind }
"""


@pytest.fixture
def helpers_bc(tmp_path, monkeypatch):
    path = tmp_path / "helpers" / "libnvshmem_device_sm_90.bc"
    path.parent.mkdir()
    path.write_bytes(llvm.parse_assembly(HELPERS_IR).as_bitcode())
    monkeypatch.setattr(store, "_stores", {})
    monkeypatch.setattr(store, "_subsets", type(store._subsets)())
    monkeypatch.setattr(store, "_closures", {})
    monkeypatch.setattr(store, "_helper_closures", {})
    monkeypatch.setattr(store, "_prefetch_asked", set())
    return path


def test_closure_without_helpers_leaves_their_bodies_unread(helpers_bc, monkeypatch):
    """helpers=False: the out-of-line helper is an external declaration (its prototype printed
    `declare internal`, which LLVM would not parse back), its body never parsed; the internal
    function that is not a helper comes with the kernel.  helpers=True: the helper too."""
    parsed = []
    real = pieces._parse
    monkeypatch.setattr(pieces, "_parse", lambda path, data=None: (parsed.append(data), real(path, data))[1])
    without = store._Store.from_part(pieces._closure(helpers_bc, ["nvshmem_qux"], helpers=False), "k")
    assert set(without.functions) == {"nvshmem_qux", "inner"}
    text = without.assemble(["nvshmem_qux"]).decode()
    assert "declare internal" not in text and re.search(r"^declare fastcc void @transfer\(ptr, i32\) #\d+$", text, re.M)
    mod = llvm.parse_assembly(text)
    assert mod.get_function("transfer").is_declaration
    assert len(parsed) == 2  # nvshmem_qux, then inner
    with_helpers = store._Store.from_part(pieces._closure(helpers_bc, ["nvshmem_qux"]), "k")
    assert set(with_helpers.functions) == {"nvshmem_qux", "inner", "transfer"}
    assert with_helpers.helpers == {"transfer"}


def test_prefetch_extracts_the_helpers_closure_for_their_objects(helpers_bc, tmp_path, monkeypatch):
    """prefetch() (init) extracts the helpers' closure in a process of its own; a kernel's closure
    then leaves the helpers out, and a helper's object IR comes from the prefetched closure, no
    closure of its own.  A kernel that inlines the helpers still gets their bodies."""
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", "2")
    monkeypatch.setattr(store, "_start_builder", lambda *args: False)  # another process's build
    monkeypatch.setattr(store, "_store", lambda *args: pytest.fail("waited for the store"))
    store.prefetch(90, bc_path=helpers_bc)
    prefetched = store._helper_closures[os.getpid(), store._cache_key(helpers_bc)].result(timeout=120)
    assert prefetched.helpers == {"transfer"} and "nvshmem_qux" not in prefetched.functions
    closures = []
    real = pieces._closure
    monkeypatch.setattr(pieces, "_closure", lambda path, names, helpers=True: (
        closures.append((names, helpers)), real(path, names, helpers))[1])
    kernel = store.api_text(["nvshmem_qux"], 90, bc_path=helpers_bc, helpers_out=True)
    assert closures == [(["nvshmem_qux"], False)]
    assert re.search(r"^declare fastcc void @transfer\(", kernel, re.M)
    helper = store.api_text(["transfer"], 90, bc_path=helpers_bc, declare_exported=True, helpers_out=True)
    assert closures == [(["nvshmem_qux"], False)]  # none more
    assert "define internal fastcc void @transfer(" in helper
    assert _functions(store.api_module(["nvshmem_qux"], 90, bc_path=helpers_bc)) == ["inner", "nvshmem_qux", "transfer"]
    assert closures[-1] == (["nvshmem_qux"], True)


def test_a_failed_helpers_closure_leaves_kernels_closures_as_without_it(helpers_bc, tmp_path, monkeypatch):
    """A prefetched closure that failed (here: its process could not run) is not waited for, and kernels'
    closures read the helpers' bodies again, one closure serving the kernel and its helpers' objects."""
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", "2")
    monkeypatch.setattr(store, "_start_builder", lambda *args: False)
    monkeypatch.setattr(store, "_store", lambda *args: pytest.fail("waited for the store"))

    def broken(args, **kw):
        raise OSError("no interpreter")

    monkeypatch.setattr(store_build, "_spawn", broken)
    store.prefetch(90, bc_path=helpers_bc)
    failed = store._helper_closures[os.getpid(), store._cache_key(helpers_bc)]
    with pytest.raises(OSError):
        failed.result(timeout=60)
    closures = []
    real = pieces._closure
    monkeypatch.setattr(pieces, "_closure", lambda path, names, helpers=True: (
        closures.append((names, helpers)), real(path, names, helpers))[1])
    store.api_text(["nvshmem_qux"], 90, bc_path=helpers_bc, helpers_out=True)
    store.api_text(["transfer"], 90, bc_path=helpers_bc, declare_exported=True, helpers_out=True)
    assert closures == [(["nvshmem_qux"], True)]


@pytest.mark.parametrize("archive", [True, False])
def test_a_kernels_closure_reads_the_helpers_only_where_they_are_built(helpers_bc, tmp_path, monkeypatch, archive):
    """Without a prefetched helpers' closure, a kernel's closure reads the helpers' bodies for their
    objects where those are built from the bitcode (NVSHMEM_DSL_HELPERS=build, or NVIDIA's compiled
    helpers refused); where NVIDIA's compiled helpers serve them (the default) it leaves them out,
    and a helper built all the same (one NVIDIA's object lacks) gets its IR from a closure of its own."""
    from nvshmem_dsl.linker import helper_archive

    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", "2")
    monkeypatch.setattr(store, "_start_builder", lambda *args: False)  # another process's build
    monkeypatch.setattr(store, "_store", lambda *args: pytest.fail("waited for the store"))
    member = tmp_path / "member.o"
    monkeypatch.setattr(helper_archive, "path", lambda sm, bc_path=None: member if archive else None)
    closures = []
    real = pieces._closure
    monkeypatch.setattr(pieces, "_closure", lambda path, names, helpers=True: (
        closures.append((names, helpers)), real(path, names, helpers))[1])
    kernel = store.api_text(["nvshmem_qux"], 90, bc_path=helpers_bc, helpers_out=True)
    assert re.search(r"^declare fastcc void @transfer\(", kernel, re.M)
    assert closures == [(["nvshmem_qux"], not archive)]
    helper = store.api_text(["transfer"], 90, bc_path=helpers_bc, declare_exported=True, helpers_out=True)
    assert "define internal fastcc void @transfer(" in helper
    assert closures == ([(["nvshmem_qux"], False), (["transfer"], False)] if archive else [(["nvshmem_qux"], True)])


def test_a_forked_child_does_not_wait_for_its_parents_helpers_closure(helpers_bc, tmp_path, monkeypatch):
    """The prefetched closure belongs to the process that started it: a forked child (whose copy of the
    Future no thread completes) makes its own closures instead of waiting forever."""
    import threading

    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", "2")
    monkeypatch.setattr(store, "_start_builder", lambda *args: False)
    monkeypatch.setattr(store, "_store", lambda *args: pytest.fail("waited for the store"))
    release = threading.Event()

    class Stuck:  # the parent's closure process, still at work
        returncode = 0
        stdout = type("Out", (), {"read": lambda self: release.wait(120) and b""})()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(store_build, "_spawn", lambda args, **kw: Stuck())
    parent = os.getpid()
    store.prefetch(90, bc_path=helpers_bc)
    monkeypatch.setattr(store.os, "getpid", lambda: parent + 1)  # this process: the forked child
    done = []
    worker = threading.Thread(target=lambda: done.append(
        store.api_text(["transfer"], 90, bc_path=helpers_bc, declare_exported=True, helpers_out=True)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    release.set()
    assert done and "define internal fastcc void @transfer(" in done[0]


def test_closure_of_an_unreadable_layout_parses_the_whole_file(bc, monkeypatch):
    def unreadable(data):
        raise bodies.BitcodeLayoutError("no")

    monkeypatch.setattr(bodies, "functions", unreadable)
    part = pieces._closure(bc, ["nvshmem_baz"])
    assert "nvshmem_baz" in part["functions"]


def test_every_kernel_before_the_store_links_a_closure(bc, tmp_path, monkeypatch):
    """While the store is being built (here: never), each kernel's functions come from a closure
    of their own, none waits for the build."""
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "building"))
    monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", "2")
    monkeypatch.setattr(store, "_start_builder", lambda *args: False)  # another process's build
    monkeypatch.setattr(store, "_store", lambda *args: pytest.fail("waited for the store"))
    closures = []
    real = pieces._closure
    monkeypatch.setattr(pieces, "_closure", lambda path, names, *a: (closures.append(names), real(path, names, *a))[1])
    assert _functions(store.api_module(["nvshmem_baz"], 90, bc_path=bc)) == ["helper", "nvshmem_baz", "nvshmem_foo"]
    assert _functions(store.api_module(["nvshmem_bar"], 90, bc_path=bc)) == ["nvshmem_bar"]
    assert closures == [["nvshmem_baz"], ["nvshmem_bar"]]


def test_prefetch_starts_the_build(bc, tmp_path, monkeypatch):
    """Typing (or init) asks for a prefetch: the build starts, once; the kernel's closure is
    linked meanwhile, the same as the store's."""
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "ahead"))
    monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", "2")
    monkeypatch.setattr(store_build, "_builders", [])
    store.prefetch(90, bc_path=bc)
    store.prefetch(90, bc_path=bc)  # asked again: nothing more
    assert len(store_build._builders) == 1
    mod = store.api_module(["nvshmem_baz"], 90, bc_path=bc)
    assert _functions(mod) == ["helper", "nvshmem_baz", "nvshmem_foo"]
    assert len(store_build._builders) == 1
    store_build._wait_for_builders()
    assert store_build._builders[0].returncode == 0
    st = store._Store(store.store_path(bc), store._cache_key(bc))
    assert canonical(str(mod)) == canonical(st.assemble(["nvshmem_baz"]).decode())


@pytest.mark.parametrize("jobs", ["1", None])
def test_prefetch_does_nothing_without_side_builds_or_with_a_store(bc, tmp_path, monkeypatch, jobs):
    if jobs:  # the store is built in the calling process, when a kernel needs it
        monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "one"))
        monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", jobs)
    else:
        _store(bc, tmp_path, monkeypatch, 1, "built")
        store._stores.clear()
        monkeypatch.setenv("NVSHMEM_DSL_BUILD_JOBS", "2")
    monkeypatch.setattr(store_build, "_builders", [])
    store.prefetch(90, bc_path=bc)
    assert not store_build._builders


def test_concurrent_cold_starts_build_once(bc, tmp_path):
    """Several PEs starting at once: each links its first kernel, one store is built."""
    code = (
        "import sys; from nvshmem_dsl.linker import store; "
        "m = store.api_module(['nvshmem_baz'], 90, bc_path=sys.argv[1]); "
        "print(sorted(f.name for f in m.functions if not f.is_declaration))"
    )
    env = dict(os.environ, NVSHMEM_DSL_CACHE=str(tmp_path / "cache"), NVSHMEM_DSL_BUILD_JOBS="2")
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(bc)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert [rc for _, _, rc in results] == [0, 0, 0], results
    assert {out for out, _, _ in results} == {"['helper', 'nvshmem_baz', 'nvshmem_foo']\n"}
    assert sum(err.count("preparing NVSHMEM bitcode") for _, err, _ in results) == 1, results
    cache = tmp_path / "cache"
    (path,) = cache.glob("*.pieces")
    store._Store(path, store._cache_key(bc))
    assert not [p for p in cache.iterdir() if p.suffix not in (".pieces", ".lock")]


def test_failed_parts_fall_back_to_one_process(bc, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(store_build, "_WORKER_MAIN", "import sys; sys.exit(3)")
    st = _store(bc, tmp_path, monkeypatch, 2, "fallback")
    assert st.api == set(API) and len(st._segments) == 1
    err = capfd.readouterr().err
    assert "failed" in err and "exited with status 3" in err


def test_reading_pieces_leaves_the_shared_file_offset_alone(bc, tmp_path, monkeypatch):
    """A process forked from one holding the store (a ProcessPoolExecutor's worker) shares the
    file's offset: seek-then-read raced with it and read other bytes (CacheCorrupt in
    tests/test_triton_api.py after CuTe tests had opened the store).  Reads are positional."""
    st = _store(bc, tmp_path, monkeypatch, 1, "pread")
    fd = st._fh.fileno()
    os.lseek(fd, 7, os.SEEK_SET)  # where another process left the shared offset
    st.assemble(["nvshmem_baz"])
    assert os.lseek(fd, 0, os.SEEK_CUR) == 7


@pytest.mark.parametrize("define, declare", [
    (b"define internal fastcc void @_Z23nvshmemi_transfer_quietIL13threadgroup_t0EEvbiPii(i1 noundef zeroext %0, "
     b"i32 noundef %1, ptr noundef readonly captures(address) %2, i32 noundef range(i32 3, 9) %3) unnamed_addr #4 {",
     b"declare fastcc void @_Z23nvshmemi_transfer_quietIL13threadgroup_t0EEvbiPii(i1 noundef zeroext, i32 noundef, "
     b"ptr noundef readonly captures(address), i32 noundef range(i32 3, 9)) #4"),
    (b"define internal noundef zeroext i1 @_Z43f() local_unnamed_addr #5 {",
     b"declare noundef zeroext i1 @_Z43f() #5"),
    # 3.4's bitcode: a section after the attribute group
    (b'define linkonce_odr hidden void @"f.x"(ptr %p, <2 x float> %v) #1 section ".text.compute" {',
     b'declare void @"f.x"(ptr, <2 x float>) #1'),
])
def test_a_helpers_declaration(define, declare):
    """NVSHMEM's transport helpers are declared in kernels that call them in their objects: the
    definition's first line becomes a declaration LLVM reads, with the same types and attributes."""
    llvm = pytest.importorskip("llvmlite.binding")
    got = pieces.function_declaration(define)
    assert got == declare
    llvm.parse_assembly("attributes #1 = { nounwind }\nattributes #4 = { nounwind }\nattributes #5 = { nounwind }\n"
                        + got.decode() + "\n").verify()
    with pytest.raises(ValueError):
        pieces.function_declaration(b"declare void @f()")
