"""Experiment (CPU only): count the instructions one thread executes through a kernel's SASS.

    cuobjdump -sass k.cubin > k.sass
    python bench/experiments/sass_walk.py k.sass FUNCTION 'ADDR[:N|:TNTN],...' [-v] [--section START:STOP]

FUNCTION: a part of the kernel's name.  Starting at the kernel's first instruction, the walk follows the
listing: an unconditional BRA is taken, a conditional one (``@P0 BRA``) falls through unless its address
is listed (``ADDR``: taken once; ``ADDR:N``: its next N times; ``ADDR:TNTN``: taken, not taken, ... in
that order), a predicated EXIT ends the walk only where listed, EXIT ends it.  Every instruction met is
counted once (predicated-off ones too); a CALL counts as one (its callee is not walked); a poll loop is
walked once unless its branch back is listed.  Prints the count and the BAR.SYNC, MEMBAR, FENCE and CALL
among them (-v: every instruction).  The branch outcomes are decided by hand from the code's meaning
(bench/results/comm-rs-sass-cpu-2026-12-03.txt lists those of the reduce-scatter kernels).
``--section START:STOP``: walk only the instructions at addresses START..STOP (hex), from START, ending
after STOP (one section of a kernel, e.g. from one BAR.SYNC to the next; a branch out of it is an error).
"""
import re
import sys

INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"(@!?P\d+ )?BRA(?:\.U\.ANY|\.DIV \S+,)? (?:`\(\.L_x_\d+\) )?0x([0-9a-f]+)")


def function(listing: str, name: str) -> list:
    """[(address, instruction)] of the first function of a cuobjdump listing whose name holds ``name``."""
    for part in re.split(r"^\s+Function : ", listing, flags=re.M)[1:]:
        if name in part.split("\n", 1)[0]:
            return [(int(a, 16), i) for a, i in INSN.findall(part)]
    raise SystemExit(f"no function {name!r}")


def walk(code: list, decisions: str, verbose: bool = False, limit: int = 20000):
    at = {a: k for k, (a, _) in enumerate(code)}
    taken = {}
    for d in filter(None, decisions.split(",")):
        a, _, c = d.partition(":")
        taken[int(a, 16)] = list(c) if c and not c.isdigit() else ["T"] * int(c or 1)
    stats = dict.fromkeys(("BAR.SYNC", "MEMBAR", "FENCE", "CALL"), 0)
    k = n = 0
    while n < limit:
        addr, ins = code[k]
        n += 1
        op = ins.split(" ")[1] if ins.startswith("@") else ins.split(" ")[0]
        for s in stats:
            stats[s] += op.startswith(s)
        if verbose:
            print(f"{addr:04x} {ins}")
        if op == "EXIT" and (not ins.startswith("@") or (taken.get(addr) and taken[addr].pop(0) == "T")):
            break
        m = BRANCH.match(ins)
        if m and (not m.group(1) or (taken.get(addr) and taken[addr].pop(0) == "T")):
            k = at[int(m.group(2), 16)]
            continue
        k += 1
    left = {f"{a:04x}": "".join(c) for a, c in taken.items() if c}
    return n, stats, left


def section(code: list, start: int, stop: int) -> list:
    """The instructions of ``code`` at start..stop, then an EXIT (not counted by :func:`walk`'s caller)."""
    return [(a, i) for a, i in code if start <= a <= stop] + [(stop + 0x10, "EXIT")]


if __name__ == "__main__":
    listing, name, decisions = sys.argv[1:4]
    code = function(open(listing).read(), name)
    part = "--section" in sys.argv
    if part:
        start, _, stop = sys.argv[sys.argv.index("--section") + 1].partition(":")
        code = section(code, int(start, 16), int(stop, 16))
    n, stats, left = walk(code, decisions, "-v" in sys.argv)
    print(n - part, stats, f"unused decisions: {left}" if left else "")
