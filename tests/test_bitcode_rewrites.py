"""The rewrite of NVSHMEM's copy loops (nvshmem_dsl.linker.rewrites): what it changes, what it
must leave alone, and the PTX a Numba put gets with and without it."""
import re

import llvmlite.binding as llvm
import pytest

from nvshmem_dsl.linker import nvvm, rewrites as bc

# NVSHMEM 3.4's copy loop (nvshmem_float_put), cut down: the v4 path runs only when
# (dst | src) & 15 == 0.
GUARDED = """
define void @copy(ptr %dst, ptr %src, i64 %n) {
entry:
  %d = ptrtoint ptr %dst to i64
  %s = ptrtoint ptr %src to i64
  %or = or i64 %d, %s
  %low = and i64 %or, 15
  %ok = icmp eq i64 %low, 0
  br i1 %ok, label %loop, label %done

loop:
  %i = phi i64 [ %next, %loop ], [ 0, %entry ]
  %to = getelementptr inbounds i32, ptr %dst, i64 %i
  %from = getelementptr inbounds i32, ptr %src, i64 %i
  %a = load i32, ptr %from, align 4
  %p1 = getelementptr inbounds i32, ptr %from, i64 1
  %b = load i32, ptr %p1, align 4
  %p2 = getelementptr inbounds i32, ptr %from, i64 2
  %c = load i32, ptr %p2, align 4
  %p3 = getelementptr inbounds i32, ptr %from, i64 3
  %e = load i32, ptr %p3, align 4
  tail call void asm sideeffect "st.volatile.global.v4.u32 [$0], {$1,$2,$3,$4};", "l,r,r,r,r"(ptr nonnull %to, i32 %a, i32 %b, i32 %c, i32 %e)
  %next = add nuw nsw i64 %i, 4
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done, !llvm.loop !0

done:
  ret void
}

!0 = distinct !{!0, !1}
!1 = !{!"llvm.loop.unroll.disable"}
"""

UNGUARDED = GUARDED.replace("%low = and i64 %or, 15", "%low = and i64 %or, 3")

# An LL-protocol packet: data and flag words, not a copy; must stay a volatile asm store.
FLAGS = """
define void @packet(ptr %dst, ptr %src, i32 %flag) {
  %a = load i32, ptr %src, align 4
  %p1 = getelementptr inbounds i8, ptr %src, i64 4
  %b = load i32, ptr %p1, align 4
  tail call void asm sideeffect "st.volatile.global.v4.u32 [$0], {$1,$2,$3,$4};", "l,r,r,r,r"(ptr %dst, i32 %a, i32 %flag, i32 %b, i32 %flag)
  ret void
}
"""


def _rewrite(text, how):
    out, n = bc.rewrite(text, how)
    llvm.parse_assembly(out).verify()
    return out, n


def test_guarded_copy_becomes_vector_load_and_weak_store():
    out, n = _rewrite(GUARDED, "vector")
    assert n == 1
    assert "asm sideeffect" not in out
    assert "load <4 x i32>, ptr %from, align 16" in out
    assert "store <4 x i32>" in out and "ptr addrspace(1)" in out and "store volatile" not in out
    assert out.count("load i32") == 0


def test_a_copy_that_is_not_a_tail_call_is_rewritten_too():
    """NVSHMEM 3.8's collectives copy with ``call`` (not ``tail call``) asm stores
    (nvshmemi_memcpy_threadgroup inlined into broadcast, fcollect, block reductions)."""
    plain = GUARDED.replace("  tail call void asm", "  call void asm")
    assert "tail call" not in plain
    out, n = _rewrite(plain, "vector")
    assert n == 1 and "asm sideeffect" not in out and "load <4 x i32>, ptr %from, align 16" in out


def test_rewritten_copy_loop_is_unrolled_by_four():
    """NVSHMEM's loop says unroll.disable; the rewritten one asks for NVCC's unroll count."""
    out, _ = _rewrite(GUARDED, "vector")
    assert "!llvm.loop !0" not in out
    mod = llvm.parse_assembly(out)
    text = str(mod)
    assert f'!{{!"llvm.loop.unroll.count", i32 {bc.UNROLL}}}' in text
    latch = next(line for line in text.splitlines() if "br i1 %more" in line)
    node = latch.rsplit("!llvm.loop ", 1)[1]
    assert f"{node} = distinct !{{{node}, " in text


def test_strided_group_loops_are_not_unrolled():
    """A warp's or block's copy loop steps by the group's stride: left as NVSHMEM has it."""
    strided = GUARDED.replace("define void @copy(ptr %dst, ptr %src, i64 %n)",
                              "define void @copy(ptr %dst, ptr %src, i64 %n, i64 %stride)")
    strided = strided.replace("%next = add nuw nsw i64 %i, 4", "%next = add nuw nsw i64 %i, %stride")
    out, n = _rewrite(strided, "vector")
    assert n == 1 and "!llvm.loop !0" in out and "llvm.loop.unroll.count" not in out


def test_freeze_loops_keeps_clangs_unrolling():
    """Every backward branch without loop metadata gets unroll.disable; forward ones do not,
    and existing loop metadata stays."""
    text = """
define void @f(i64 %n, i1 %c) {
entry:
  br label %head

head:                                             ; preds = %head, %entry
  %i = phi i64 [ 0, %entry ], [ %j, %head ]
  %j = add i64 %i, 1
  %more = icmp ult i64 %j, %n
  br i1 %more, label %head, label %next

next:                                             ; preds = %next, %head
  %k = phi i64 [ 0, %head ], [ %l, %next ]
  %l = add i64 %k, 1
  %again = icmp ult i64 %l, %n
  br i1 %again, label %next, label %done, !llvm.loop !0

done:                                             ; preds = %next
  ret void
}

!0 = distinct !{!0, !1}
!1 = !{!"llvm.loop.mustprogress"}
"""
    out, n = bc.freeze_loops(text)
    assert n == 1
    llvm.parse_assembly(out).verify()
    first = next(line for line in out.splitlines() if "br i1 %more" in line)
    second = next(line for line in out.splitlines() if "br i1 %again" in line)
    assert "!llvm.loop" in first and second.endswith("!llvm.loop !0")
    assert "br label %head" in out and 'llvm.loop.unroll.disable' in out


def test_unchecked_source_alignment_is_left_alone_by_vector():
    out, n = _rewrite(UNGUARDED, "vector")
    assert n == 0 and out == UNGUARDED


def test_packets_with_flags_are_never_rewritten():
    out, n = _rewrite(FLAGS, "vector")
    assert n == 0 and out == FLAGS


def test_off_changes_nothing():
    assert bc.rewrite(GUARDED, "off") == (GUARDED, 0)


def test_mode_from_environment(monkeypatch):
    monkeypatch.delenv(bc.ENV, raising=False)
    assert bc.mode() == "vector"
    monkeypatch.setenv(bc.ENV, "OFF")
    assert bc.mode() == "off"
    for bad in ("fast", "store"):
        monkeypatch.setenv(bc.ENV, bad)
        with pytest.raises(ValueError, match=f"NVSHMEM_DSL_COPY_REWRITE='{bad}'"):
            bc.mode()


@pytest.mark.parametrize("how", ["off", "vector"])
def test_numba_put_copy_loop(monkeypatch, how):
    """With the rewrite the thread-scope put copies with 128-bit loads and weak 128-bit stores
    (as nvcc's header path does); without it NVSHMEM's volatile asm store is there."""
    pytest.importorskip("numba.cuda")
    from numba import cuda, float32, int64, void

    import nvshmem_dsl.numba as nv
    try:
        from nvshmem_dsl._libs import bitcode_path

        bitcode_path("sm_90")
    except Exception as exc:  # pragma: no cover
        pytest.skip(f"no NVSHMEM device bitcode: {exc}")
    monkeypatch.setenv(bc.ENV, how)

    def put(dst, src, n, pe):
        nv.put(dst, src, n, pe)

    ptx, _ = cuda.compile_ptx(put, void(float32[::1], float32[::1], int64, int64), cc=(9, 0))
    if how == "off":
        assert "st.volatile.global.v4.u32" in ptx
    else:
        assert "st.volatile.global.v4.u32" not in ptx
        assert "ld.global.v4" in ptx and "st.global.v4" in ptx
        assert ptx.count("st.global.v4") >= bc.UNROLL  # the copy loop unrolled as nvcc does


def test_nvvm_copy_for_cute_is_rewritten(tmp_path, monkeypatch):
    """The CuTe DSL links NVSHMEM through libNVVM from nvshmem_dsl.linker.store.nvvm_bitcode: its copy
    gets the same rewrite (a copy per mode); with the rewrite off, an unchanged file is used as is."""
    from nvshmem_dsl.linker import store

    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "lib.bc"
    src.write_bytes(llvm.parse_assembly(GUARDED, context=llvm.create_context()).as_bitcode())
    monkeypatch.delenv(bc.ENV, raising=False)
    out = nvvm.nvvm_bitcode(src)
    assert out != src and out.name.endswith(f"-vector-r{bc.REVISION}-c{nvvm.COPY_REVISION}.nvvm.bc")
    text = str(llvm.parse_bitcode(out.read_bytes(), context=llvm.create_context()))
    assert "load <4 x i32>" in text and "asm sideeffect" not in text
    assert nvvm.nvvm_bitcode(src) == out  # cached
    monkeypatch.setenv(bc.ENV, "off")
    assert nvvm.nvvm_bitcode(src) == src


def test_cute_put_copy_loop():
    """A CuTe thread-scope put links the rewritten NVVM copy: 128-bit loads and weak stores."""
    cute = pytest.importorskip("cutlass.cute")
    from cutlass import Float32, Int32, Int64

    import nvshmem_dsl.cute as nv

    @cute.kernel
    def put_kernel(dst: cute.Tensor, src: cute.Tensor, n: Int64, pe: Int32):
        nv.put(dst, src, n, pe)

    @cute.jit
    def put_launcher(dst: cute.Tensor, src: cute.Tensor, n: Int64, pe: Int32):
        put_kernel(dst, src, n, pe).launch(grid=[1, 1, 1], block=[1, 1, 1])

    t = cute.runtime.make_fake_compact_tensor(Float32, (4096,), assumed_align=16)
    ptx = nv.compile_to_ptx(put_launcher, t, t, Int64(4096), Int32(1), arch="sm_90a")
    assert "nvshmemi_device_state_d" in ptx
    assert "st.volatile.global.v4.u32" not in ptx
    assert "ld.global.v4" in ptx and "st.global.v4" in ptx
    assert ptx.count("st.global.v4") >= bc.UNROLL  # libNVVM unrolls the rewritten loop too


HELPERS = """
define internal fastcc i64 @_Z5thelpv() unnamed_addr #0 {
  ret i64 1
}

define internal fastcc i64 @_Z5bhelpIL13threadgroup_t3EEvv() unnamed_addr #0 {
  ret i64 2
}

define internal fastcc float @_Z5ghelpIfET_v() unnamed_addr #0 section ".text.compute" {
  ret float 1.0
}

define i64 @nvshmem_api() #1 {
  %a = notail call fastcc i64 @_Z5thelpv() #2
  %b = notail call fastcc i64 @_Z5bhelpIL13threadgroup_t3EEvv() #2
  %g = notail call contract fastcc float @_Z5ghelpIfET_v() #2
  %c = add i64 %a, %b
  ret i64 %c
}

attributes #0 = { convergent noinline nounwind }
attributes #1 = { alwaysinline convergent nounwind }
attributes #2 = { convergent nounwind }
"""


def test_thread_helpers_not_convergent():
    """A thread-level helper and the calls to it lose `convergent` (also one defined in a section,
    as NVSHMEM 3.4's are); a block instance keeps it, and so does the API function (inlined anyway)."""
    out, n = bc.thread_helpers_not_convergent(HELPERS)
    assert n == 2
    mod = llvm.parse_assembly(out)
    mod.verify()
    text = str(mod)
    attrs = dict(re.findall(r"^attributes (#\d+) = \{ ([^}]*)\}", text, re.M))

    def group(pattern):
        return attrs[re.search(pattern, text, re.M).group(1)]
    assert "convergent" not in group(r"^define internal fastcc i64 @_Z5thelpv\(\) unnamed_addr (#\d+)")
    assert "convergent" in group(r"^define internal fastcc i64 @_Z5bhelpIL13threadgroup_t3EEvv\(\) unnamed_addr (#\d+)")
    assert "convergent" not in group(r"call fastcc i64 @_Z5thelpv\(\) (#\d+)")
    assert "convergent" not in group(r'^define internal fastcc float @_Z5ghelpIfET_v\(\) unnamed_addr (#\d+) section ".text.compute" \{')
    assert "convergent" not in group(r"call contract fastcc float @_Z5ghelpIfET_v\(\) (#\d+)")
    assert "convergent" in group(r"call fastcc i64 @_Z5bhelpIL13threadgroup_t3EEvv\(\) (#\d+)")
    assert "convergent" in group(r"^define i64 @nvshmem_api\(\) (#\d+)")


# The entry of NVSHMEM's put/get at block scope (3.4's constant-space load of the device
# state) and at warp scope (3.8's generic-space load), cut down.
GROUP_ENTRY = """
%struct.state = type { [13 x ptr], ptr }
@nvshmemi_device_state_d = addrspace(4) externally_initialized global %struct.state zeroinitializer, align 8

define void @put_block(ptr %dst, i32 %pe) {
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  %5 = load ptr, ptr addrspace(4) getelementptr inbounds (%struct.state, ptr addrspace(4) @nvshmemi_device_state_d, i64 0, i32 1), align 8
  %6 = sext i32 %pe to i64
  %7 = getelementptr inbounds i64, ptr %5, i64 %6
  %8 = addrspacecast ptr %7 to ptr addrspace(1)
  %9 = load i64, ptr addrspace(1) %8, align 8, !invariant.load !0
  %10 = icmp eq i64 %9, 0
  ret void
}

define void @put_warp(ptr %dst, i32 %pe) {
  tail call void @llvm.nvvm.bar.warp.sync(i32 -1)
  %5 = load ptr, ptr getelementptr inbounds nuw (i8, ptr addrspacecast (ptr addrspace(4) @nvshmemi_device_state_d to ptr), i64 104), align 8
  %6 = sext i32 %pe to i64
  %7 = getelementptr inbounds i64, ptr %5, i64 %6
  %8 = addrspacecast ptr %7 to ptr addrspace(1)
  %9 = load i64, ptr addrspace(1) %8, align 8, !invariant.load !0
  ret void
}

define void @flag_then_base(ptr %flag, i32 %pe) {
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  store i32 1, ptr %flag, align 4
  %5 = load ptr, ptr addrspace(4) getelementptr inbounds (%struct.state, ptr addrspace(4) @nvshmemi_device_state_d, i64 0, i32 1), align 8
  %6 = sext i32 %pe to i64
  %7 = getelementptr inbounds i64, ptr %5, i64 %6
  %8 = addrspacecast ptr %7 to ptr addrspace(1)
  %9 = load i64, ptr addrspace(1) %8, align 8, !invariant.load !0
  ret void
}

declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)
declare void @llvm.nvvm.bar.warp.sync(i32)

!0 = !{}
"""


def _body(text, fn):
    return re.search(rf"define void @{fn}\(.*?\n}}", text, re.S).group(0)


def test_peer_base_moves_above_the_group_sync():
    """Block and warp entries (both NVSHMEM versions' forms) load the peer base first, then
    sync; an entry with a store between the sync and the load is left alone."""
    out, n = bc.peer_base_before_sync(GROUP_ENTRY)
    assert n == 2
    llvm.parse_assembly(out).verify()
    for fn, sync in (("put_block", "barrier.cta.sync"), ("put_warp", "bar.warp.sync")):
        body = _body(out, fn)
        assert body.index("!invariant.load") < body.index(sync) < body.index("icmp" if fn == "put_block" else "ret")
    assert _body(out, "flag_then_base") == _body(GROUP_ENTRY, "flag_then_base")


LANEID = """
define i32 @lane2() {
  %a = tail call noundef i32 asm sideeffect "mov.u32  $0,  %laneid;", "=r"() #0, !srcloc !0
  %b = call i32 asm sideeffect "mov.u32  $0,  %laneid;", "=r"()
  %c = add i32 %a, %b
  ret i32 %c
}

attributes #0 = { convergent nounwind }
!0 = !{i64 1}
"""


def test_laneid_asm_becomes_the_intrinsic():
    out, n = bc.laneid_intrinsic(LANEID)
    assert n == 2 and "asm" not in out
    assert out.count("declare i32 @llvm.nvvm.read.ptx.sreg.laneid()") == 1
    mod = llvm.parse_assembly(out)
    mod.verify()
    assert str(mod).count("call i32 @llvm.nvvm.read.ptx.sreg.laneid()") == 2


def _kernel_ptx(ptx):
    """The PTX of the .entry (NVSHMEM's out-of-line helpers are .func's after it)."""
    start = ptx.index(".entry")
    end = ptx.find("\n.func", start)
    return ptx[start:end if end > 0 else len(ptx)]


def test_numba_loop_of_group_puts_loads_the_peer_base_once():
    """In a loop of put_block / put_warp the peer-base load and the lane id leave the loop:
    no `ld.global.nc` after the first barrier, one %laneid read."""
    pytest.importorskip("numba.cuda")
    from numba import cuda, float32, int32, void

    import nvshmem_dsl.numba as nv
    try:
        from nvshmem_dsl._libs import bitcode_path

        bitcode_path("sm_90")
    except Exception as exc:  # pragma: no cover
        pytest.skip(f"no NVSHMEM device bitcode: {exc}")

    def block_loop(dst, src, iters, pe):
        for _ in range(iters):
            nv.put_block(dst, src, pe)

    def warp_loop(dst, src, iters, pe):
        for _ in range(iters):
            nv.put_warp(dst, src, pe)

    sig = void(float32[::1], float32[::1], int32, int32)
    block = _kernel_ptx(cuda.compile_ptx(block_loop, sig, cc=(9, 0))[0])
    assert block.count("ld.global.nc.b64") == 1
    assert block.index("ld.global.nc.b64") < block.index("bar.sync")
    warp = _kernel_ptx(cuda.compile_ptx(warp_loop, sig, cc=(9, 0))[0])
    assert warp.count("ld.global.nc.b64") == 1 and warp.count("%laneid") == 1
