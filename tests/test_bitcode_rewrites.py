"""The rewrite of NVSHMEM's copy loops (nvshmem_dsl.bitcode_rewrites): what it changes, what it
must leave alone, and the PTX a Numba put gets with and without it."""
import re

import llvmlite.binding as llvm
import pytest

from nvshmem_dsl import bitcode_rewrites as bc

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


def test_store_mode_keeps_the_scalar_loads():
    out, n = _rewrite(GUARDED, "store")
    assert n == 1 and "asm sideeffect" not in out
    assert out.count("load i32") == 4 and "load <4 x i32>" not in out


def test_unchecked_source_alignment_is_left_alone_by_vector():
    out, n = _rewrite(UNGUARDED, "vector")
    assert n == 0 and out == UNGUARDED


def test_packets_with_flags_are_never_rewritten():
    for how in ("store", "vector"):
        out, n = _rewrite(FLAGS, how)
        assert n == 0 and out == FLAGS


def test_off_changes_nothing():
    assert bc.rewrite(GUARDED, "off") == (GUARDED, 0)


def test_mode_from_environment(monkeypatch):
    monkeypatch.delenv(bc.ENV, raising=False)
    assert bc.mode() == "vector"
    monkeypatch.setenv(bc.ENV, "OFF")
    assert bc.mode() == "off"
    monkeypatch.setenv(bc.ENV, "fast")
    with pytest.raises(ValueError, match="NVSHMEM_DSL_COPY_REWRITE='fast'"):
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
    """The CuTe DSL links NVSHMEM through libNVVM from nvshmem_dsl.bitcode.nvvm_bitcode: its copy
    gets the same rewrite (a copy per mode); with the rewrite off, an unchanged file is used as is."""
    from nvshmem_dsl import bitcode

    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "lib.bc"
    src.write_bytes(llvm.parse_assembly(GUARDED, context=llvm.create_context()).as_bitcode())
    monkeypatch.delenv(bc.ENV, raising=False)
    out = bitcode.nvvm_bitcode(src)
    assert out != src and out.name.endswith(f"-vector-r{bc.REVISION}.nvvm.bc")
    text = str(llvm.parse_bitcode(out.read_bytes(), context=llvm.create_context()))
    assert "load <4 x i32>" in text and "asm sideeffect" not in text
    assert bitcode.nvvm_bitcode(src) == out  # cached
    monkeypatch.setenv(bc.ENV, "off")
    assert bitcode.nvvm_bitcode(src) == src


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
