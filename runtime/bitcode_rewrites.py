"""Rewrites of NVSHMEM's device bitcode that let LLVM optimise the code it inlines into kernels:
the copy loops.

NVSHMEM's ``libnvshmem_device*.bc`` (built with clang) copies data in its put/get paths with
four scalar 32-bit loads and an inline-asm ``st.volatile.global.v4.u32``; the header path that
CUDA C++ compiles with nvcc uses one 128-bit load and a weak 128-bit store for the same loop.
The volatile asm store cannot be merged or scheduled by LLVM, and the scalar loads cost four
load instructions per 16 bytes: small and thread-scope transfers run at 0.6-0.75x of C++.

:func:`rewrite` turns each *copy idiom* (an asm v4 store whose four values are 32-bit loads at
offsets 0, 4, 8, 12 of one base pointer) into plain LLVM IR:

* ``store``: a weak ``store <4 x i32>`` (align 16, as ``st.v4`` itself requires) to the global
  space, the same semantics as the header path (completion still comes from quiet/fence);
* ``vector`` (the default): also one ``load <4 x i32>`` (align 16) for the four loads.  That
  asserts the source is 16-byte aligned, so it is done only where the function checks it: the
  source and destination are ``base[i]`` of two pointers whose ``(dst | src) & 15`` the
  function tests (NVSHMEM's copy loops take the v4 path only when that is 0).  Other copy
  sites are left as they are.

Other asm stores (LL-protocol packets with flags, IBGDA doorbells) are left alone.  Numba kernels
get it in :func:`nvshmem_dsl.bitcode.api_module`, CuTe kernels in the copy of the library that
:func:`nvshmem_dsl.bitcode.nvvm_bitcode` makes for libNVVM.  Selected by
``NVSHMEM_DSL_COPY_REWRITE`` (``off``, ``store`` or ``vector``; default ``vector``).  Measured on
2 x H200 (BENCHMARKS.md): thread-scope put of 1 MiB 0.66x -> 0.79x of C++, 4 KiB 0.78x -> 0.86x;
``store`` alone changes nothing measurable.
"""
from __future__ import annotations

import os
import re

MODES = ("off", "store", "vector")
ENV = "NVSHMEM_DSL_COPY_REWRITE"

_STORE = re.compile(
    r'^(?P<indent>\s*)tail call void asm sideeffect "st\.volatile\.global\.v4\.u32 \[\$0\], '
    r'\{\$1,\$2,\$3,\$4\};", "l,r,r,r,r"\(ptr (?:nonnull )?(?P<dst>%[\w.]+), i32 (?P<a>%[\w.]+), '
    r'i32 (?P<b>%[\w.]+), i32 (?P<c>%[\w.]+), i32 (?P<d>%[\w.]+)\)[^\n]*$', re.M)
_LOAD = re.compile(r'^(?P<indent>\s*)(?P<name>%[\w.]+) = load i32, ptr (?P<ptr>%[\w.]+), align \d+[^\n]*$', re.M)
_GEP = re.compile(r'^\s*(?P<name>%[\w.]+) = getelementptr inbounds (?:nuw )?(?P<ty>i8|i32), ptr (?P<base>%[\w.]+), '
                  r'i64 (?P<off>\d+)', re.M)
_DEFINE = re.compile(r'\n(?=define )')
_INDEXED = re.compile(r'^\s*(?P<name>%[\w.]+) = getelementptr inbounds (?:nuw )?i32, ptr (?P<base>%[\w.]+), '
                      r'i64 (?P<idx>%[\w.]+)$', re.M)
_PTRTOINT = re.compile(r'^\s*(?P<name>%[\w.]+) = ptrtoint ptr (?P<ptr>%[\w.]+) to i64$', re.M)
_OR = re.compile(r'^\s*(?P<name>%[\w.]+) = or i64 (?P<a>%[\w.]+), (?P<b>%[\w.]+)$', re.M)
_AND15 = re.compile(r'^\s*%[\w.]+ = and i64 (?P<x>%[\w.]+), 15$', re.M)


def _aligned_pairs(fn: str) -> set[frozenset]:
    """Pairs of pointers {dst, src} whose ``(ptrtoint dst | ptrtoint src) & 15`` ``fn`` computes."""
    as_int = {m["name"]: m["ptr"] for m in _PTRTOINT.finditer(fn)}
    ors = {m["name"]: (m["a"], m["b"]) for m in _OR.finditer(fn)}
    pairs = set()
    for m in _AND15.finditer(fn):
        a, b = ors.get(m["x"], (None, None))
        if a in as_int and b in as_int:
            pairs.add(frozenset((as_int[a], as_int[b])))
    return pairs


def mode() -> str:
    value = os.environ.get(ENV, "vector").strip().lower() or "vector"
    if value not in MODES:
        raise ValueError(f"{ENV}={value!r}: choose one of {', '.join(MODES)}")
    return value


def rewrite(text: str, how: str) -> tuple[str, int]:
    """``text`` (LLVM IR) with its copy idioms rewritten as ``how`` says; and how many."""
    if how == "off" or "st.volatile.global.v4.u32" not in text:
        return text, 0
    parts = _DEFINE.split(text)
    total = 0
    for i, fn in enumerate(parts):
        if "st.volatile.global.v4.u32" in fn:
            parts[i], n = _rewrite_function(fn, how)
            total += n
    return "\n".join(parts), total


def _rewrite_function(fn: str, how: str) -> tuple[str, int]:
    loads = {m["name"]: m for m in _LOAD.finditer(fn)}
    indexed = {m["name"]: (m["base"], m["idx"]) for m in _INDEXED.finditer(fn)}
    checked = _aligned_pairs(fn) if how == "vector" else set()
    geps = {m["name"]: (m["base"], int(m["off"]) * (4 if m["ty"] == "i32" else 1)) for m in _GEP.finditer(fn)}
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), non-overlapping
    count = 0
    for st in _STORE.finditer(fn):
        vals = [st[k] for k in "abcd"]
        lds = [loads.get(v) for v in vals]
        if any(ld is None for ld in lds):
            continue  # not a copy (flags, constants): keep the volatile asm
        base = lds[0]["ptr"]
        if not all(geps.get(ld["ptr"]) == (base, 4 * k) for k, ld in enumerate(lds[1:], 1)):
            continue
        d, s = indexed.get(st["dst"]), indexed.get(base)
        guarded = (d is not None and s is not None and d[1] == s[1]
                   and frozenset((d[0], s[0])) in checked)
        if how == "vector" and not guarded:
            continue  # alignment of the source unknown here: keep NVSHMEM's code
        tag = f"%nvdsl.cp{count}"
        ind = st["indent"]
        vec = "poison"
        lines = []
        for k, v in enumerate(vals):
            lines.append(f"{ind}{tag}.v{k} = insertelement <4 x i32> {vec}, i32 {v}, i64 {k}")
            vec = f"{tag}.v{k}"
        lines.append(f"{ind}{tag}.p = addrspacecast ptr {st['dst']} to ptr addrspace(1)")
        lines.append(f"{ind}store <4 x i32> {vec}, ptr addrspace(1) {tag}.p, align 16")
        edits.append((st.start(), st.end(), "\n".join(lines)))
        if how == "vector" and all(lds[k].start() < lds[k + 1].start() for k in range(3)):
            first = lds[0]
            edits.append((first.start(), first.end(),
                          f"{first['indent']}{tag}.l = load <4 x i32>, ptr {base}, align 16\n"
                          f"{first['indent']}{first['name']} = extractelement <4 x i32> {tag}.l, i64 0"))
            for k, ld in enumerate(lds[1:], 1):
                edits.append((ld.start(), ld.end(),
                              f"{ld['indent']}{ld['name']} = extractelement <4 x i32> {tag}.l, i64 {k}"))
        count += 1
    if not edits:
        return fn, 0
    edits.sort()
    out, pos = [], 0
    for start, end, new in edits:
        if start < pos:  # a load shared by two stores: leave the function as it was
            return fn, 0
        out.append(fn[pos:start])
        out.append(new)
        pos = end
    out.append(fn[pos:])
    return "".join(out), count
