"""Rewrites of NVSHMEM's device bitcode that let LLVM optimise the code it inlines into kernels:
the copy loops; the peer-base load of warp/block RMA, moved above the entry sync
(:func:`peer_base_before_sync`); lane-id reads as the intrinsic (:func:`laneid_intrinsic`).

NVSHMEM's ``libnvshmem_device*.bc`` (built with clang) copies data in its put/get paths with
four scalar 32-bit loads and an inline-asm ``st.volatile.global.v4.u32``; the header path that
CUDA C++ compiles with nvcc uses one 128-bit load and a weak 128-bit store for the same loop.
The volatile asm store cannot be merged or scheduled by LLVM, and the scalar loads cost four
load instructions per 16 bytes: small and thread-scope transfers run at 0.6-0.75x of C++.

:func:`rewrite` turns each *copy idiom* (an asm v4 store whose four values are 32-bit loads at
offsets 0, 4, 8, 12 of one base pointer; a ``call`` or a ``tail call``: clang left the copies of
``nvshmemi_memcpy_threadgroup`` in NVSHMEM 3.8's broadcasts, warp and block fcollects and block
reductions plain calls, which until revision 6 kept them scalar loads and volatile stores: those
collectives moved 1 MiB at one PE at 0.88-0.96x of C++'s speed) into plain LLVM IR:

a weak ``store <4 x i32>`` (align 16, as ``st.v4`` itself requires) to the global space, the same
semantics as the header path (completion still comes from quiet/fence), of one ``load <4 x i32>``
(align 16) for the four loads.  That asserts the source is 16-byte aligned, so it is done only
where the function checks it: the source and destination are ``base[i]`` of two pointers whose
``(dst | src) & 15`` the function tests (NVSHMEM's copy loops take the v4 path only when that is
0).  Other copy sites are left as they are.

The loop around a rewritten copy of one thread (one block, a step of one vector; NVSHMEM's
metadata says ``unroll.disable``) is marked to be unrolled by :data:`UNROLL` (four), the shape
nvcc gives the same loop from NVSHMEM's headers; its step of four elements keeps LLVM from
unrolling it on its own.  :func:`freeze_loops` marks every other loop of NVSHMEM's code
``unroll.disable``, so that the unroll pass Numba's linker runs after inlining changes nothing
clang decided (libNVVM, for CuTe, runs its own pipeline on the library as it is).

Other asm stores (LL-protocol packets with flags, IBGDA doorbells) are left alone.  Numba kernels
get it in :func:`nvshmem_dsl.linker.store.api_module`, CuTe kernels in the copy of the library that
:func:`nvshmem_dsl.linker.nvvm.nvvm_bitcode` makes for libNVVM.  Selected by
``NVSHMEM_DSL_COPY_REWRITE`` (``vector``, the default, or ``off``: NVSHMEM's code unchanged, to rule
the rewrite out).  Measured on 2 x H200 (BENCHMARKS.md): thread-scope put of 1 MiB 0.66x -> 0.79x
of C++, 4 KiB 0.78x -> 0.86x; the store alone, the loads left scalar, changed nothing measurable.
"""
from __future__ import annotations

import os
import re

from . import code_env

MODES = ("off", "vector")
#: Bump when what a mode produces changes (names the cached libNVVM copies).
REVISION = 6
ENV = code_env.COPY_REWRITE

_STORE = re.compile(
    r'^(?P<indent>\s*)(?:tail )?call void asm sideeffect "st\.volatile\.global\.v4\.u32 \[\$0\], '
    r'\{\$1,\$2,\$3,\$4\};", "l,r,r,r,r"\(ptr (?:nonnull )?(?P<dst>%[\w.]+), i32 (?P<a>%[\w.]+), '
    r'i32 (?P<b>%[\w.]+), i32 (?P<c>%[\w.]+), i32 (?P<d>%[\w.]+)\)[^\n]*$', re.M)
_ASM = "st.volatile.global.v4.u32"
_DEFINE = re.compile(r'\n(?=define )')
# Every instruction the rewrite looks at, in one pass over a function (one regex per kind scanned
# NVSHMEM's large inlined API functions seven times: 26 s for a whole 3.8 library on the CPU
# machine, against 5 s now: tests/gpu/records/2026-11-22/cpu-facts.txt).
_DEF = re.compile(
    r'^(?P<indent>\s*)(?P<name>%[\w.]+) = (?:'
    r'load i32, ptr (?P<lptr>%[\w.]+), align \d+[^\n]*$'
    r'|getelementptr inbounds (?:nuw )?(?P<gty>i8|i32), ptr (?P<gbase>%[\w.]+), '
    r'i64 (?:(?P<goff>\d+)|(?P<gidx>%[\w.]+)$)'
    r'|ptrtoint ptr (?P<pptr>%[\w.]+) to i64$'
    r'|or i64 (?P<oa>%[\w.]+), (?P<ob>%[\w.]+)$'
    r'|and i64 (?P<ax>%[\w.]+), 15$)', re.M)


class _Defs:
    """The definitions of one function that the copy rewrite reads, by SSA name."""

    def __init__(self, fn: str):
        self.loads: dict = {}    # name -> match of `name = load i32, ptr P, align A`
        self.geps: dict = {}     # name -> (base, byte offset) of a constant i8/i32 GEP
        self.indexed: dict = {}  # name -> (base, index) of `getelementptr inbounds i32, ptr B, i64 %i`
        as_int, ors, masked = {}, {}, []
        for m in _DEF.finditer(fn):
            name = m["name"]
            if m["lptr"] is not None:
                self.loads[name] = m
            elif m["gbase"] is not None:
                if m["goff"] is not None:
                    self.geps[name] = (m["gbase"], int(m["goff"]) * (4 if m["gty"] == "i32" else 1))
                elif m["gty"] == "i32":
                    self.indexed[name] = (m["gbase"], m["gidx"])
            elif m["pptr"] is not None:
                as_int[name] = m["pptr"]
            elif m["oa"] is not None:
                ors[name] = (m["oa"], m["ob"])
            else:
                masked.append(m["ax"])
        # pairs of pointers {dst, src} whose `(ptrtoint dst | ptrtoint src) & 15` fn computes
        self.aligned_pairs = set()
        for x in masked:
            a, b = ors.get(x, (None, None))
            if a in as_int and b in as_int:
                self.aligned_pairs.add(frozenset((as_int[a], as_int[b])))


def mode() -> str:
    value = os.environ.get(ENV, "vector").strip().lower() or "vector"
    if value not in MODES:
        raise ValueError(f"{ENV}={value!r}: choose one of {', '.join(MODES)}")
    return value


def rewrite(text: str, how: str) -> tuple[str, int]:
    """``text`` (LLVM IR) with its copy idioms rewritten as ``how`` says; and how many."""
    if how == "off" or _ASM not in text:
        return text, 0
    parts = _DEFINE.split(text)
    total = 0
    loops: list = []
    for i, fn in enumerate(parts):
        if _ASM in fn:
            parts[i], n = _rewrite_function(fn, loops)
            total += n
    if loops:
        parts.append(f"!{_MD_BASE} = !{{!\"llvm.loop.unroll.count\", i32 {UNROLL}}}")
        parts += [_UNROLL_MD.format(id=_MD_BASE + 1 + k, count=_MD_BASE) for k in range(len(loops))]
    return "\n".join(parts), total


_BLOCK_LABEL = r'(?P<label>[\w.]+):'  # a basic block's label line (numbered or named)
_LABEL = re.compile('^' + _BLOCK_LABEL, re.M)
_LABEL_OR_BR = re.compile(r'^(?:' + _BLOCK_LABEL + r'|  br (?P<br>[^\n]*)$)', re.M)
_TARGET = re.compile(r'label %([\w.]+)')
_FREEZE_BASE = 4_100_000_000


def freeze_loops(text: str) -> tuple[str, int]:
    """``text`` with ``llvm.loop.unroll.disable`` on every loop branch that has no loop
    metadata; and how many.  clang already made NVSHMEM's unrolling decisions when it built
    the bitcode; the unroll pass run on a kernel after inlining (for the rewritten copy loops)
    must not make them again (without this, a block reduction no longer launched with 512
    threads on the GPU: BENCHMARKS.md).  A branch is
    taken for a loop's when it jumps back to its own block or an earlier one."""
    n = 0
    parts = _DEFINE.split(text)
    for i, fn in enumerate(parts):
        if not fn.startswith("define "):
            continue
        seen = set()
        edits = []
        for m in _LABEL_OR_BR.finditer(fn):
            if m["label"] is not None:
                seen.add(m["label"])
                continue
            br = m["br"]
            if "!llvm.loop" in br or not any(t in seen for t in _TARGET.findall(br)):
                continue
            edits.append(m.end())
        if edits:
            pieces, last = [], 0
            for end in edits:
                pieces.append(fn[last:end])
                pieces.append(f", !llvm.loop !{_FREEZE_BASE + 1 + n}")
                n += 1
                last = end
            pieces.append(fn[last:])
            parts[i] = "".join(pieces)
    if n:
        parts.append(f'!{_FREEZE_BASE} = !{{!"llvm.loop.unroll.disable"}}')
        parts += [f"!{_FREEZE_BASE + 1 + k} = distinct !{{!{_FREEZE_BASE + 1 + k}, !{_FREEZE_BASE}}}"
                  for k in range(n)]
    return "\n".join(parts), n


# A group-scope RMA's entry: the group's sync (block barrier, warp sync), then the load of the
# peer's heap base from the device state (`__ldg(peer_heap_base_p2p + pe)`, invariant for the
# kernel's lifetime).
_GROUP_SYNCS = ("call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)\n",
                "call void @llvm.nvvm.bar.warp.sync(i32 -1)\n")
_SYNC_THEN_PEER_BASE = re.compile(
    r'(?P<sync>  (?:tail )?(?:' + '|'.join(re.escape(x[:-1]) for x in _GROUP_SYNCS) + r'))\n'
    r'(?P<load>(?:  %[\w.]+ = (?:load ptr, ptr [^\n]*@nvshmemi_device_state_d[^\n]*'
    r'|sext i32 %[\w.]+ to i64|getelementptr inbounds i64, ptr %[\w.]+, i64 %[\w.]+'
    r'|addrspacecast ptr %[\w.]+ to ptr addrspace\(1\))\n)+'
    r'  %[\w.]+ = load i64, ptr addrspace\(1\) %[\w.]+, align 8, !invariant\.load ![0-9]+\n)')


def peer_base_before_sync(text: str) -> tuple[str, int]:
    """``text`` with the peer-base load of NVSHMEM's warp/block RMA functions moved above
    their entry sync; and how many.  The load reads the device state and the table of peer
    heap bases (``!invariant.load``: no thread writes them while a kernel runs), so the sync
    orders nothing it depends on.  Above the sync, a loop of puts loads it once before the
    loop instead of after every barrier (LLVM does not hoist a load across
    ``llvm.nvvm.barrier``, which is not ``willreturn``), and the threads that copy reach their
    first store sooner after the barrier."""
    edits = []
    for sync in _GROUP_SYNCS:  # candidates found with str.find: over a whole library (264 MB
        at = text.find(sync)   # of IR) 0.9-2.1 s, a regex scan 2.0-2.1 s (peer-base-scan.txt)
        while at >= 0:
            m = _SYNC_THEN_PEER_BASE.match(text, text.rfind("\n", 0, at) + 1)
            if m is not None:
                edits.append((m.start(), m.end(), m["load"] + m["sync"] + "\n"))
            at = text.find(sync, at + len(sync))
    pieces, pos = [], 0
    for start, end, new in sorted(edits):
        pieces += [text[pos:start], new]
        pos = end
    return "".join(pieces) + text[pos:], len(edits)


_LANEID_ASM = re.compile(r'call (?:noundef )?i32 asm sideeffect "mov\.u32 +\$0, +%laneid;", "=r"\(\)(?: #\d+)?')
_LANEID = "llvm.nvvm.read.ptx.sreg.laneid"


def laneid_intrinsic(text: str) -> tuple[str, int]:
    """``text`` with NVSHMEM's lane-id reads (``asm volatile("mov.u32 %0, %%laneid;")``) made
    calls of ``llvm.nvvm.read.ptx.sreg.laneid``; and how many.  The same special register,
    but LLVM knows the intrinsic has no side effect and returns 0..31: a loop of warp-scope
    calls reads it once instead of every iteration (an S2R, tens of cycles), and index
    arithmetic on it stays narrow."""
    text, n = _LANEID_ASM.subn(f"call i32 @{_LANEID}()", text)
    if n and f"declare i32 @{_LANEID}()" not in text:
        text += f"\ndeclare i32 @{_LANEID}()\n"
    return text, n


def for_inlining(text: str, how: str) -> tuple[str, int]:
    """``text`` with every rewrite of NVSHMEM's code that kernels inline (Numba's and
    libNVVM's alike): the copy loops as ``how`` says, the peer-base load above the group
    sync, lane ids as the intrinsic; and how many changes in all."""
    text, copies = rewrite(text, how)
    text, moved = peer_base_before_sync(text)
    text, lanes = laneid_intrinsic(text)
    return text, copies + moved + lanes


#: An attribute group of LLVM IR text: its number, what is between its braces.
ATTRIBUTE_GROUP = r'^attributes #(\d+) = \{([^\n]*)\}$'
_ATTRS = re.compile(ATTRIBUTE_GROUP, re.M)
# a definition's attribute group may be followed by a section, comdat, alignment (3.4's bitcode:
# `#1 section ".text.compute" {`)
_HELPER_DEFINE = re.compile(r'^(define [^\n]*@"?([\w.$]+)"?\([^\n]*\)[^\n]*?)#(\d+)((?: [^\n#{]+)? \{)$', re.M)
_HELPER_CALL = re.compile(r'(call [^\n]*@"?([\w.$]+)"?\([^\n]*\) )#(\d+)()$', re.M)
# a helper linked from its object (nvshmem_dsl.linker.plan.helpers_out) is declared
_HELPER_DECLARE = re.compile(r'^(declare [^\n]*@"?([\w.$]+)"?\([^\n]*\) )#(\d+)()$', re.M)
_GROUP_INSTANCE = re.compile(r'threadgroup_t[123]')  # NVSHMEM's warp, warpgroup, block instances


def thread_helpers_not_convergent(text: str) -> tuple[str, int]:
    """``text`` with NVSHMEM's out-of-line helpers of one thread (``_Z...`` functions that are
    not a warp/warpgroup/block instance) and the calls to them not ``convergent``; and how many
    helpers.  clang marks every CUDA function convergent; these are the transport paths of
    thread-scope calls, which any subset of a warp may make, and the mark keeps LLVM from
    unswitching a loop of such calls on NVSHMEM's P2P test (see :mod:`nvshmem_dsl.numba._linker`)."""
    groups = {int(m.group(1)): m.group(2) for m in _ATTRS.finditer(text)}
    plain = {g: re.sub(r'\bconvergent ?', '', b) for g, b in groups.items() if re.search(r'\bconvergent\b', b)}
    if not plain:
        return text, 0
    top = max(groups) + 1
    new = {g: top + k for k, g in enumerate(sorted(plain))}
    helpers = {m.group(2) for regex in (_HELPER_DEFINE, _HELPER_DECLARE) for m in regex.finditer(text)
               if m.group(2).startswith("_Z") and not _GROUP_INSTANCE.search(m.group(2))}

    def swap(m):
        g = int(m.group(3))
        return f"{m.group(1)}#{new[g]}{m.group(4)}" if m.group(2) in helpers and g in new else m.group(0)
    text = _HELPER_DEFINE.sub(swap, text)
    text = _HELPER_DECLARE.sub(swap, text)
    text = _HELPER_CALL.sub(swap, text)
    text += "\n" + "\n".join(f"attributes #{new[g]} = {{{plain[g]}}}" for g in sorted(plain)) + "\n"
    return text, len(helpers)


def _stores(fn: str):
    """The matches of _STORE in ``fn``, found from the asm text (quicker than a regex scan)."""
    pos = fn.find(_ASM)
    while pos >= 0:
        m = _STORE.match(fn, fn.rfind("\n", 0, pos) + 1)
        if m is not None:
            yield m
        pos = fn.find(_ASM, pos + len(_ASM))


_LOOP_MD = re.compile(r', !llvm\.loop !\d+')
_STEP4 = re.compile(r'^  %[\w.]+ = add nuw nsw i64 %[\w.]+, 4$', re.M)
# Loop metadata of the rewritten copy loops: unrolled by four, as nvcc unrolls NVSHMEM's header
# version (a count, because the loop steps by four elements, which keeps LLVM's cost model from
# unrolling it by itself).  Node numbers far above any the bitcode uses.
UNROLL = 4
_MD_BASE = 4_000_000_000
_UNROLL_MD = '!{id} = distinct !{{!{id}, !{count}}}'


def _loop_latch_hint(fn: str, start: int, end: int, loop_md: str):
    """An edit that gives the branch closing the single-block loop around the store at
    ``fn[start:end]`` the loop metadata ``loop_md`` instead of NVSHMEM's (which says
    ``llvm.loop.unroll.disable``); None when the store is not in such a loop or the loop is
    not one thread's (stepping by one vector: four elements)."""
    line = fn.rfind("\n", 0, start)  # back to the line that opens the store's block
    while line > 0 and fn.startswith("  ", line + 1):
        line = fn.rfind("\n", 0, line)
    label = _LABEL.match(fn, line + 1)
    if label is None:
        return None  # the entry block (no label) or not a function body
    br = fn.find("\n  br ", end)
    nxt = _LABEL.search(fn, end)
    if br < 0 or (nxt is not None and nxt.start() < br):
        return None
    line_end = fn.find("\n", br + 1)
    line = fn[br:line_end if line_end >= 0 else len(fn)]
    md = _LOOP_MD.search(line)
    if md is None or f"label %{label['label']}," not in line:
        return None
    if not _STEP4.search(fn, end, br):
        return None  # a group's strided loop (warp, block): one copy per thread is enough
    return (br + md.start(), br + md.end(), f", !llvm.loop {loop_md}")


def _rewrite_function(fn: str, loops: list) -> tuple[str, int]:
    """``fn`` with its copy idioms rewritten, and how many; the loop edits it makes are
    appended to ``loops`` (their metadata nodes are numbered by position there)."""
    defs = _Defs(fn)
    loads, geps, indexed = defs.loads, defs.geps, defs.indexed
    checked = defs.aligned_pairs
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), non-overlapping
    count = 0
    for st in _stores(fn):
        vals = [st[k] for k in "abcd"]
        lds = [loads.get(v) for v in vals]
        if any(ld is None for ld in lds):
            continue  # not a copy (flags, constants): keep the volatile asm
        base = lds[0]["lptr"]
        if not all(geps.get(ld["lptr"]) == (base, 4 * k) for k, ld in enumerate(lds[1:], 1)):
            continue
        d, s = indexed.get(st["dst"]), indexed.get(base)
        guarded = (d is not None and s is not None and d[1] == s[1]
                   and frozenset((d[0], s[0])) in checked)
        if not guarded:
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
        latch = _loop_latch_hint(fn, st.start(), st.end(), f"!{_MD_BASE + 1 + len(loops)}")
        if latch is not None:
            loops.append(latch)
            edits.append(latch)
        if all(lds[k].start() < lds[k + 1].start() for k in range(3)):
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
