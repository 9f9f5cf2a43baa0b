"""The shims: small LLVM functions defining each ``__nvshmem_dsl_tt_<C symbol>`` extern a Triton
kernel calls, around the NVSHMEM C function (:func:`shim_module`), and the check that Triton
declared each extern with the op table's types (:func:`check_externs`).

Who calls: Triton runs a program's scalar code in every thread of its CTA.  Block
scope functions are called by all of them.  Thread-, warp- and warpgroup-scope functions by
thread 0, warp 0 or the first 128 threads only (a warpgroup-scope call needs ``num_warps >= 4``,
checked here; where that group is the whole program, by all, as at block scope); then the CTA
synchronises (``bar.sync 0``: :data:`_BARRIER`) and a result is broadcast through
8 bytes of shared memory, except: a call that acts only at another PE (:func:`only_sends`) is
not waited for, and in a program of one warp a thread-scope result is shuffled from lane 0 after the barrier
(:func:`_from_lane0`).  The pure queries (:data:`nvshmem_dsl.triton._calls.PURE_FAMILIES`) and
``g`` (:func:`every_thread_reads`) are made by every thread.  NVSHMEM calls must therefore be reached by all threads of a program
together (not in warp-specialised partitions), as Triton's own ``tl.debug_barrier`` must.
"""

from __future__ import annotations

import re

from .. import _optable
from ..linker.pipeline import NvshmemLinkError
from ._calls import SHIM_PREFIX, form
from ._shared import DYNAMIC_SHARED_ALIGN, SLOT_BYTES

TRIPLE = "nvptx64-nvidia-cuda"

#: A declaration of one of our externs in Triton's LLVM IR; group 1: the C symbol.
DECLARATION = re.compile(r'^declare [^\n]*?@"?' + SHIM_PREFIX + r'(nvshmem\w*)"?\(([^)\n]*)\)', re.M)

#: LLVM type of each Triton dtype at the extern boundary.
_LLVM = {"int8": "i8", "uint8": "i8", "int16": "i16", "uint16": "i16", "int32": "i32",
         "uint32": "i32", "int64": "i64", "uint64": "i64", "fp16": "half", "bf16": "bfloat",
         "fp32": "float", "fp64": "double"}
#: Threads of a program that make a call of each scope (block: all of them).
_LEADERS = {"thread": 1, "warp": 32, "warpgroup": 128}



def nvshmem_externs(llir: str) -> dict:
    """``{C symbol: LLVM parameter types as declared}`` of the NVSHMEM externs in Triton IR."""
    return {m.group(1): m.group(2) for m in DECLARATION.finditer(llir)}


def _decl_params(op: dict) -> str:
    return ", ".join(f"ptr byval({p['byval']}) align 2" if p.get("byval") else p["llvm"]
                     for p in op["params"])


def only_sends(op: dict) -> bool:
    """Whether a call's only effects are at another PE (the op table's parameter roles: it names a
    ``pe`` and touches no local buffer: ``p``, non-fetching atomics, ``signal_op``): the program's
    other threads need not wait for the leader that makes it.  (A put reads a local source the
    program may write again after it, a get writes a local destination: those keep the barrier.)
    Without it a loop of such calls can be unswitched on NVSHMEM's P2P test, as in Numba kernels;
    the barrier, convergent, forbids that."""
    roles = [p["role"] for p in op["params"]]
    return "pe" in roles and not any(r.startswith("local_") for r in roles)


def every_thread_reads(op: dict) -> bool:
    """Whether a call reads one value at another PE and nothing else (parameters ``sym_src`` and
    ``pe``, a result: ``g``): every thread of the program makes it, as every thread makes a scalar
    ``tl.load``, with no leader, barrier or hand-over of the value.  Where the peer is mapped (NVLink,
    the same GPU) a warp's loads of one address are one load and a loop of them is unswitched on
    NVSHMEM's P2P test as in Numba kernels; through a proxy transport each thread's read is a
    request of its own."""
    return [p["role"] for p in op["params"]] == ["sym_src", "pe"] and op["ret"]["llvm"] != "void"


#: The CTA barrier the other threads wait at for the leaders: ``bar.sync 0`` (aligned: every lane of a warp
#: reaches it together, at the join after the leaders' branch).  Not ``barrier.sync 0`` (any lane alone):
#: while lane 0 is inside a collective that polls with YIELD, the other lanes of its warp waiting at a
#: ``syncwarp`` made a call 0.20-0.30 us slower than waiting at ``bar.sync`` (a Numba kernel of one warp
#: whose lane 0 calls broadcast or barrier, 3.8 on two H200 hosts, 2026-11-25:
#: ``tests/gpu/records/2026-11-25/h200-one-warp-leader.txt``);
#: Triton's waits at ``barrier.sync 0`` or a shuffle's reconvergence alike (its thread-scope barrier
#: 1.12 -> 0.98x of C++, broadcast 1.21 -> 1.08x with this, same record).
_BARRIER = "  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)"

#: ``llvm.nvvm.shfl.sync.idx.i32`` of lane 0, all lanes: ``{0}`` the result, ``{1}`` the value.
_SHFL = "  {0} = call i32 @llvm.nvvm.shfl.sync.idx.i32(i32 -1, i32 {1}, i32 0, i32 31)"


def _from_lane0(ty: str, value: str) -> list:
    """Lines making ``%w`` (of LLVM type ``ty``, at most 64 bits) lane 0's ``value`` in every lane."""
    if ty in ("i64", "double"):
        bits = [f"  %wb = bitcast double {value} to i64"] if ty == "double" else [f"  %wb = add i64 {value}, 0"]
        return [*bits, "  %wlo = trunc i64 %wb to i32", "  %whs = lshr i64 %wb, 32", "  %whi = trunc i64 %whs to i32",
                _SHFL.format("%slo", "%wlo"), _SHFL.format("%shi", "%whi"),
                "  %xlo = zext i32 %slo to i64", "  %xhi = zext i32 %shi to i64", "  %xhs = shl i64 %xhi, 32",
                "  %xb = or i64 %xhs, %xlo",
                "  %w = bitcast i64 %xb to double" if ty == "double" else "  %w = add i64 %xb, 0"]
    if ty in ("i32", "float"):
        return ([f"  %wb = bitcast float {value} to i32" if ty == "float" else f"  %wb = add i32 {value}, 0"]
                + [_SHFL.format("%xb", "%wb"),
                   "  %w = bitcast i32 %xb to float" if ty == "float" else "  %w = add i32 %xb, 0"])
    narrow = {"i8": "i8", "i16": "i16", "half": "i16", "bfloat": "i16"}[ty]
    lines = [f"  %wn = bitcast {ty} {value} to i16"] if ty in ("half", "bfloat") else [f"  %wn = add {ty} {value}, 0"]
    lines += [f"  %wb = zext {narrow} %wn to i32", _SHFL.format("%xb", "%wb"), f"  %xn = trunc i32 %xb to {narrow}"]
    lines.append(f"  %w = bitcast i16 %xn to {ty}" if ty in ("half", "bfloat") else f"  %w = add {ty} %xn, 0")
    return lines


def _shim(symbol: str, num_warps: int | None = None) -> tuple[str, str]:
    """(definition of ``__nvshmem_dsl_tt_<symbol>``, declaration of ``symbol``) for programs of
    ``num_warps`` warps (None: unknown)."""
    f = form(symbol)
    op = f.op
    tparams = [_LLVM[t] for t in f.arg_types]
    tret = _LLVM[f.ret_type]
    cret = op["ret"]["llvm"]
    pre, args = [], []
    for k, p in enumerate(f.params):
        if p.get("byval"):
            pre.append(f"  %v{k} = alloca {p['byval']}, align 2")
            pre.append(f"  store {tparams[k]} %a{k}, ptr %v{k}, align 2")
            args.append(f"ptr byval({p['byval']}) align 2 %v{k}")
        elif p["llvm"] == "ptr":
            pre.append(f"  %v{k} = inttoptr i64 %a{k} to ptr")
            args.append(f"ptr %v{k}")
        else:
            args.append(f"{p['llvm']} %a{k}")
    call = f"call {cret} @{symbol}({', '.join(args)})"
    sig = ", ".join(f"{t} %a{k}" for k, t in enumerate(tparams))
    out = [f"define {tret} @{SHIM_PREFIX}{symbol}({sig}) #0 {{", "entry:", *pre]

    def convert(value: str) -> list:
        """The C result ``value`` as the extern's result (in %res)."""
        if cret == "void":
            return ["  %res = add i32 0, 0"]
        if cret == "ptr":
            return [f"  %res = ptrtoint ptr {value} to i64"]
        if cret.startswith("%struct."):
            return [f"  %bits = extractvalue {cret} {value}, 0",
                    f"  %res = bitcast i16 %bits to {tret}"]
        return [f"  %res = add {tret} {value}, 0" if tret.startswith("i")
                else f"  %res = fadd {tret} {value}, 0.0"]

    leaders = None if f.pure or every_thread_reads(op) else _LEADERS.get(op["scope"])
    if leaders is not None and num_warps is not None and leaders >= 32 * num_warps:
        leaders = None  # the group is the whole program (a warp-scope call in a one-warp program)
    if leaders is None:  # every thread calls
        out.append(f"  %r = {call}" if cret != "void" else f"  {call}")
        out += convert("%r")
        out += [f"  ret {tret} %res", "}"]
    else:
        out += ["  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
                f"  %lead = icmp ult i32 %tid, {leaders}",
                "  br i1 %lead, label %do, label %join",
                "do:"]
        if cret == "void" and only_sends(op):  # nothing for the other threads to wait for
            out += [f"  {call}", "  br label %join", "join:", "  ret i32 0", "}"]
        elif cret == "void":
            out += [f"  {call}", "  br label %join",
                    "join:", _BARRIER]
            out += ["  ret i32 0", "}"]
        elif leaders == 1 and num_warps == 1:  # one warp: lanes meet at the barrier, lane 0's result by a shuffle
            out += [f"  %r = {call}", *convert("%r"), "  br label %join",
                    "join:", f"  %v = phi {tret} [ %res, %do ], [ poison, %entry ]", _BARRIER, *_from_lane0(tret, "%v"),
                    f"  ret {tret} %w", "}"]
        else:
            out += [f"  %r = {call}",
                    "  %first = icmp eq i32 %tid, 0",
                    "  br i1 %first, label %store, label %join",
                    "store:",
                    f"  store {cret} %r, ptr addrspace(3) @{SHIM_PREFIX}slot, align 8",
                    "  br label %join",
                    "join:",
                    _BARRIER,
                    f"  %b = load {cret}, ptr addrspace(3) @{SHIM_PREFIX}slot, align 8",
                    _BARRIER]
            out += convert("%b")
            out += [f"  ret {tret} %res", "}"]
    return "\n".join(out) + "\n", f"declare {cret} @{symbol}({_decl_params(op)})\n"


#: The broadcast slot (only where a shim uses it), in llvm.used: kept whole, where LLVM would
#: shrink it to the 8 bytes the shims touch (``_shared.SLOT_BYTES``).
_SLOT = (f"@{SHIM_PREFIX}slot = internal addrspace(3) global [{SLOT_BYTES} x i8] undef, align {DYNAMIC_SHARED_ALIGN}",
         f"@llvm.used = appending global [1 x ptr] [ptr addrspacecast (ptr addrspace(3) @{SHIM_PREFIX}slot to ptr)], "
         'section "llvm.metadata"')


def shim_module(symbols, num_warps: int | None = None) -> str:
    """LLVM IR defining the externs ``__nvshmem_dsl_tt_<symbol>`` for ``symbols``, called by
    programs of ``num_warps`` warps (None: unknown)."""
    defs, decls = [], set()
    for sym in sorted(symbols):
        d, decl = _shim(sym, num_warps)
        defs.append(d)
        decls.add(decl)
    head = [
        f'target triple = "{TRIPLE}"',
        "%struct.__half = type { i16 }",
        "%struct.__nv_bfloat16 = type { i16 }",
        "%struct.double2 = type { double, double }",
        *(_SLOT if any(f"@{SHIM_PREFIX}slot" in d for d in defs) else ()),
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)",
        "declare i32 @llvm.nvvm.shfl.sync.idx.i32(i32, i32, i32, i32)",
        'attributes #0 = { alwaysinline nounwind }',
    ]
    return "\n".join(head) + "\n" + "".join(sorted(decls)) + "\n".join(defs)


def check_externs(externs: dict, num_warps: int | None = None) -> None:
    """Triton declared each extern with the types the op table gives (the same code made both), and
    a program that makes a warpgroup-scope call has the 4 warps it needs (``num_warps``, None: unknown)."""
    if num_warps is not None and num_warps < 4:
        wg = sorted(s for s in externs if s in _optable.device_ops() and form(s).op["scope"] == "warpgroup")
        if wg:
            raise NvshmemLinkError(
                f"{wg[0]} (warpgroup scope) needs 4 warps a program; the kernel has num_warps="
                f"{num_warps}")
    bad = []
    for sym, printed in externs.items():
        if sym not in _optable.device_ops():
            bad.append(f"{sym}: not an NVSHMEM device function of the op table")
            continue
        want = [_LLVM[t] for t in form(sym).arg_types]
        have = [t.split()[0] for t in printed.split(",") if t.strip()]
        if have != want:
            bad.append(f"{sym}: declared ({', '.join(have)}), expected ({', '.join(want)})")
    if bad:
        raise NvshmemLinkError("NVSHMEM externs declared with the wrong types:\n  " + "\n  ".join(bad))
