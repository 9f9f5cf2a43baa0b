"""NVSHMEM's largest out-of-line objects with their loops as functions of their own
(nvshmem_dsl.linker.loop_split), on the CPU: the criterion, the LLVM step, and objects built and linked
with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bitcode_available import needs_bitcode
from nvshmem_dsl.linker import link, loop_split, outline, store

ENV = loop_split.ENV

# Two top-level loops, the second with a barrier in it (a convergent call), the first nesting a loop.
TWO_LOOPS = r"""
declare void @sync() convergent

define void @work(ptr %p, i32 %n) convergent {
entry:
  br label %outer
outer:
  %i = phi i32 [ 0, %entry ], [ %i1, %outer.latch ]
  br label %inner
inner:
  %j = phi i32 [ 0, %outer ], [ %j1, %inner ]
  %q = getelementptr i32, ptr %p, i32 %j
  store i32 %i, ptr %q
  %j1 = add i32 %j, 1
  %jc = icmp slt i32 %j1, %n
  br i1 %jc, label %inner, label %outer.latch
outer.latch:
  %i1 = add i32 %i, 1
  %ic = icmp slt i32 %i1, %n
  br i1 %ic, label %outer, label %mid
mid:
  br label %second
second:
  %k = phi i32 [ 0, %mid ], [ %k1, %second ]
  call void @sync()
  %k1 = add i32 %k, 1
  %kc = icmp slt i32 %k1, %n
  br i1 %kc, label %second, label %done
done:
  ret void
}
"""


def _split_module(text):
    import llvmlite.binding as llvm

    from nvshmem_dsl.linker._llvm import TRIPLE, target_machine

    mod = llvm.parse_assembly(text)
    tm = target_machine("sm_90", "+ptx85", 3)
    mod.triple, mod.data_layout = TRIPLE, str(tm.target_data)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3))
    return mod, loop_split.extract_loops(mod, pb), tm


def test_threshold_from_the_environment(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert loop_split.threshold() == loop_split.MIN_INSTRUCTIONS
    assert loop_split.wanted({"a": loop_split.MIN_INSTRUCTIONS, "b": 1})
    assert not loop_split.wanted({"a": loop_split.MIN_INSTRUCTIONS - 1})
    monkeypatch.setenv(ENV, "0")
    assert loop_split.threshold() == 0 and loop_split.wanted({"a": 0})
    monkeypatch.setenv(ENV, "None")
    assert loop_split.threshold() is None and not loop_split.wanted({"a": 10 ** 6})
    for bad in ("-1", "many"):
        monkeypatch.setenv(ENV, bad)
        with pytest.raises(ValueError, match=ENV):
            loop_split.threshold()


def test_the_threshold_keys_the_objects(monkeypatch):
    if link.ptxas() is None:
        pytest.skip("no ptxas")
    monkeypatch.setattr(outline.store_file, "_cache_key", lambda path: "k")
    paths = set()
    for how in ("", "0", "none"):
        monkeypatch.setenv(ENV, how)
        paths.add(outline._object_path("nvshmem_int_broadcast", Path(__file__), "sm_90", "+ptx85", 64))
    assert len(paths) == 3


def test_top_level_loops_become_convergent_functions():
    """Each top-level loop (the nested one goes with its parent) is a function of its own, called
    where the loop was, and marked convergent: LLVM's extractor drops that attribute, and the
    second loop holds a barrier."""
    mod, made, tm = _split_module(TWO_LOOPS)
    assert made == 2
    mod.verify()
    new = [fn for fn in mod.functions if fn.name.startswith("work.")]
    assert len(new) == 2
    for fn in new:
        assert any(b"convergent" in bytes(a) for a in fn.attributes), fn.name
    work = str(mod.get_function("work"))
    assert all(f'@"{fn.name}"(' in work or f"@{fn.name}(" in work for fn in new)
    assert "call void @sync()" not in work  # the barrier moved with its loop
    ptx = tm.emit_assembly(mod)
    assert len(re.findall(r"^\.func\s", ptx, re.M)) >= 2


def test_a_module_without_loops_is_left_alone():
    mod, made, _ = _split_module("define i32 @f(i32 %a) {\n  %b = add i32 %a, 1\n  ret i32 %b\n}\n")
    assert made == 0 and [fn.name for fn in mod.functions] == ["f"]



_EXTRACTED = re.compile(r"^\.func\s+(?:\([^)]*\)\s*)?\w+_\$_extracted\w*\(", re.M)
SMALL_COLLECTIVE = "nvshmem_int32_sum_reducescatter"
BIG_COLLECTIVE = "nvshmemx_int32_sum_reduce_block"


@needs_bitcode
def test_only_objects_over_the_threshold_are_split(monkeypatch):
    """NVSHMEM 3.8's block reductions of 32-bit types reach the threshold, its broadcasts (slower
    split) and reducescatters do not; ``none`` keeps every loop inline."""
    sizes = store.body_sizes([BIG_COLLECTIVE, "nvshmem_int_broadcast", SMALL_COLLECTIVE], 90)
    assert sizes["nvshmem_int_broadcast"] < loop_split.MIN_INSTRUCTIONS
    monkeypatch.delenv(ENV, raising=False)
    small = outline.object_ptx([SMALL_COLLECTIVE], 90, "sm_90", "+ptx85")
    assert sizes[SMALL_COLLECTIVE] < loop_split.MIN_INSTRUCTIONS and not _EXTRACTED.search(small)
    if sizes[BIG_COLLECTIVE] < loop_split.MIN_INSTRUCTIONS:
        pytest.skip("this NVSHMEM's block reduction is below the threshold (3.4)")
    split = outline.object_ptx([BIG_COLLECTIVE], 90, "sm_90", "+ptx85")
    assert len(_EXTRACTED.findall(split)) > 50
    assert re.search(r"^\.visible \.func\s+(?:\([^)]*\)\s*)?" + BIG_COLLECTIVE + r"\(", split, re.M)
    monkeypatch.setenv(ENV, "none")
    assert not _EXTRACTED.search(outline.object_ptx([BIG_COLLECTIVE], 90, "sm_90", "+ptx85"))


@needs_bitcode
def test_a_split_object_assembles_and_defines_its_function(monkeypatch, tmp_path):
    """Forced on a small collective (``0``): its object, loops and all, assembles with ptxas; the
    loops' functions are internal to it; it calls only NVSHMEM's helpers in other objects."""
    if link.ptxas() is None:
        pytest.skip("no ptxas")
    monkeypatch.setattr(outline, "_objects_dir", lambda: tmp_path)
    monkeypatch.setenv(ENV, "0")
    paths = outline.objects([SMALL_COLLECTIVE], 90, "sm_90", "+ptx85")
    own = next(p for p in paths if p.name.startswith(SMALL_COLLECTIVE + "-"))
    symbols = link.elf_symbols(own.read_bytes())
    defined = {n for n, d in symbols if d}
    assert SMALL_COLLECTIVE in defined
    assert any("_$_extracted" in n for n in defined)
    undefined = {n for n, d in symbols if not d and n}
    assert not any("extracted" in n for n in undefined)
    assert {n for n in undefined if n.startswith("_Z")} == set(outline.object_calls(own))
