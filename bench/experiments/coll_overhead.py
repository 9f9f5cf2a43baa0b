"""Experiment: where the cost of calling a collective out of line comes from.

Device-side collective latency with NVSHMEM's large routines out of line is 1.1-1.2x of C++ for
thread-scope broadcast and reduce, inlined 0.75x (BENCHMARKS.md).  This times one thread calling
``broadcast`` / ``sum_reduce`` (float, 8 B, TEAM_WORLD, 2000 calls in the kernel, both PEs at once,
device events, median of 5) in four Numba kernels:
  inline          inlined (``nv.outline("none")``), the team a constant, as the bench kernels
  inline-rt-team  inlined, the team a kernel argument (NVSHMEM's code cannot fold it)
  outline         out of line (default), no launch bounds: the object capped at 64 registers
  outline-255     out of line, ``launch_bounds=(1,)``: the object may use 255 registers
  inline-reload   inlined, the team read again in every iteration (from ``dst``, which the
                  collective writes): nothing that depends on the team can leave the loop, as
                  for a call
  inline-rt-count inlined, the element count read in every iteration (team and root constant)
  inline-rt-all   inlined, team, count and root read in every iteration: what an object gets
If ``inline-reload`` is as slow as ``outline``, the cost is what inlined code hoists out of the
caller's loop (NVSHMEM's team state, read again after each collective's fences by a call).  Measured
2026-11-24 (tests/gpu/records/2026-11-24/h200-coll-overhead-reload.txt): it is not; ``inline-rt-all``
is still 0.7-0.9 us a call faster than ``outline``.
If ``inline-rt-team`` is as slow as ``outline``, what the kernel's constants let LLVM fold is the
cost (objects specialised on constant arguments would recover it); if it is as fast as
``inline``, the cost is in the call itself (the loop cannot hoist NVSHMEM's loads, the code is
not laid out for the hot path).

With ``--ptr``, also ``inline-rt-ptr``: as ``inline-rt-all`` with ``dst`` and ``src`` offset by the same
unknown amount in every iteration (so that nothing depending on the addresses, the peers' addresses of
``dst`` and NVSHMEM's alignment tests, can leave the loop either).
With ``--noinline`` (and of the inlined variants only ``inline`` and ``inline-rt-all``), also ``noinline-rt-all``: as ``inline-rt-all`` but the collective itself not
inlined: an internal function of the kernel's own PTX that ptxas compiles with the kernel (and
``noinline-rt-all-1`` with ``launch_bounds=(1,)``).  As slow as ``outline``: the cost is the call
boundary itself (what inlining lets the two sides share); as fast as ``inline-rt-all``: it is the
separate compilation (relocatable ABI, the object's own optimisation).
With ``--caps`` (and of the inlined variants only ``inline`` and ``inline-rt-all``), also out of line with the object capped at 40, 48, 96 and 128 registers (fewer
callee-saved registers to save at its entry, more spills: the object at 255 saves ~70 registers at
its entry, at 64 ~40 and spills in its body) and at 255 with the objects at LLVM's O3.

Run (2 PEs):  python -m nvshmem_dsl.run -n 2 bench/experiments/coll_overhead.py [--only=broadcast] [--caps]
On the CPU:   python bench/experiments/coll_overhead.py --ptx   (PTX size of each variant)
              python bench/experiments/coll_overhead.py --sass  (registers saved at the broadcast's entry:
              as an object, and as a noinline function compiled with the kernel; PTXAS=<CUDA 13's
              ptxas>: also the object preserving nvshmem_dsl.linker.abi.PRESERVE registers)
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from numba import cuda, float32, int32  # noqa: E402

import nvshmem_dsl.numba as nv  # noqa: E402
from nvshmem_dsl.linker.outline import OPT_ENV  # noqa: E402
from _timing import collective_session, median_seconds  # noqa: E402

W = nv.Team.TEAM_WORLD
SIG = (float32[:], float32[:], int32, int32)


@cuda.jit(device=True, inline="always")
def _broadcast(team, dst, src, count, root):
    nv.broadcast(team, dst, src, count, root)


@cuda.jit(device=True, inline="always")
def _sum_reduce(team, dst, src, count, root):  # no root
    nv.sum_reduce(team, dst, src, count)


def kernels(collective) -> dict:
    """The experiment's kernels calling ``collective`` (``_broadcast`` or ``_sum_reduce``, inlined
    into them by Numba), by variant (the module docstring's names)."""

    def const(dst, src, iters, team):
        for _ in range(iters):
            collective(W, dst, src, 2, 0)

    def rt_team(dst, src, iters, team):
        for _ in range(iters):
            collective(team, dst, src, 2, 0)

    def reload(dst, src, iters, team):
        for _ in range(iters):
            collective(team + (1 if dst[63] > 1e30 else 0), dst, src, 2, 0)  # dst[63] stays 0

    def rt_count(dst, src, iters, team):
        for _ in range(iters):
            collective(W, dst, src, 2 + (1 if dst[63] > 1e30 else 0), 0)

    def rt_all(dst, src, iters, team):
        for _ in range(iters):
            x = 1 if dst[63] > 1e30 else 0
            collective(team + x, dst, src, 2 + x, x)

    def rt_ptr(dst, src, iters, team):
        for _ in range(iters):
            x = 1 if dst[63] > 1e30 else 0
            collective(team + x, dst[x:], src[x:], 2 + x, x)

    return {"const": const, "rt-team": rt_team, "reload": reload, "rt-count": rt_count, "rt-all": rt_all,
            "rt-ptr": rt_ptr}


def _noinline_api(names):
    """Make the NVSHMEM functions ``names`` ``noinline`` in the modules the linker inlines from
    (the experiment's ``noinline-rt-all``): each stays an internal function of the kernel's own
    PTX, compiled with it by ptxas (no relocatable object, no separate LLVM optimisation)."""
    import re

    import llvmlite.binding as llvm

    from nvshmem_dsl.linker import link, store

    orig = store.api_module

    def api_module(wanted, *a, **k):
        mod = orig(wanted, *a, **k)
        if not set(names) & set(wanted):
            return mod
        text = str(mod)
        for name in names:
            m = re.search(rf'^define [^\n]*@"?{name}"?\([^\n]*\)[^\n#]* #(\d+)', text, re.M)
            group = re.search(rf"^attributes #{m.group(1)} = \{{([^\n]*)\}}", text, re.M).group(1)
            new = 90000 + len(text) % 1000
            text = text[:m.start(1)] + str(new) + text[m.end(1):]
            text += f"\nattributes #{new} = {{{group.replace('alwaysinline', 'noinline')}}}\n"
        return llvm.parse_assembly(text)

    store.api_module = api_module


def variants():
    """(collective, variant, function, outline mode, cuda.jit options)."""
    only = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")]
    for coll, collective in (("broadcast", _broadcast), ("sum_reduce", _sum_reduce)):
        if only and coll not in only:
            continue
        k = kernels(collective)
        const, every = k["const"], k["rt-all"]
        caps = "--caps" in sys.argv
        yield coll, "inline", const, "none", {}
        if not caps and "--noinline" not in sys.argv:
            for variant in ("rt-team", "reload", "rt-count"):
                yield coll, f"inline-{variant}", k[variant], "none", {}
        yield coll, "inline-rt-all", every, "none", {}
        if "--ptr" in sys.argv:
            yield coll, "inline-rt-ptr", k["rt-ptr"], "none", {}
        if "--noinline" in sys.argv:  # everything inlined but the collective, a function of the kernel's PTX
            yield coll, "noinline-rt-all", every, "none-noinline", {}
            yield coll, "noinline-rt-all-1", every, "none-noinline", {"launch_bounds": (1,)}
        yield coll, "outline", const, "auto", {}
        yield coll, "outline-255", const, "auto", {"launch_bounds": (1,)}
        if caps:  # the object's register cap (callee-saved registers against spills)
            for cap in (40, 48, 96, 128):
                yield coll, f"outline-{cap}", const, "auto", {"launch_bounds": (1,), "max_registers": cap}
            yield coll, "outline-o3-255", const, "auto-o3", {"launch_bounds": (1,)}


def check_ptx():
    for coll, name, fn, how, opts in variants():
        if how.endswith("-noinline"):
            _noinline_api([f"nvshmem_float_{coll}"])
        with nv.outline(how.split("-")[0]):
            ptx, _ = cuda.compile_ptx(fn, SIG, cc=(9, 0), **{k: v for k, v in opts.items() if k != "max_registers"})
        print(f"{coll:>10} {name:>14}: {len(ptx) >> 10} KiB PTX, {ptx.count('call')} calls")


def prologue_saves(sass: str, function: str) -> int:
    """Local-memory stores (STL) before the first branch of ``function`` in nvdisasm's ``sass``:
    the callee-saved registers its entry saves."""
    import re

    body = re.split(rf"^\$?[^\n]*\b{re.escape(function)}:\n", sass, maxsplit=1, flags=re.M)[-1]
    entry = re.split(r"\bBRA\b|\bBRX\b|\bCALL\b|\bRET\b", body, maxsplit=1)[0]
    return len(re.findall(r"\bSTL\b", entry))


def check_sass():
    """The broadcast's entry (CPU: ptxas and nvdisasm, NVDISASM= to name it): as a relocatable
    object (out of line, 64 and 255 registers) and as a noinline function of the kernel's own PTX."""
    import subprocess
    import tempfile

    from nvshmem_dsl.linker import link, outline

    from nvshmem_dsl.linker import abi, link

    nvdisasm = os.environ.get("NVDISASM", "nvdisasm")
    if os.environ.get("PTXAS"):  # another ptxas for the objects (CUDA 13's: .abi_preserve)
        link.ptxas = lambda: os.environ["PTXAS"]
    name = "nvshmem_float_broadcast"
    for how in ("off", str(abi.PRESERVE)) if os.environ.get("PTXAS") else ("off",):
        os.environ[abi.ENV] = how
        for cap in (64, 255):
            obj = [p for p in outline.objects([name], 90, "sm_90a", "+ptx85", cap) if p.name.startswith(name)][0]
            sass = subprocess.run([nvdisasm, "-c", str(obj)], capture_output=True, text=True).stdout
            print(f"object, {cap:3} registers, {abi.ENV}={how}: {prologue_saves(sass, name)} STL at the entry")
    os.environ[abi.ENV] = "off"
    _noinline_api([name])
    with nv.outline("none"):
        ptx, _ = cuda.compile_ptx(kernels(_broadcast)["rt-all"], SIG, cc=(9, 0))
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        subprocess.run([link.ptxas(), "-arch=sm_90", "-O3", src, "-o", out], check=True)
        sass = subprocess.run([nvdisasm, "-c", out], capture_output=True, text=True).stdout
    print(f"noinline in the kernel's PTX: {prologue_saves(sass, name)} STL at the entry, "
          f"{sass.count('CALL.REL')} CALL.REL in the module (the collective called, not inlined)")


def main():
    iters = 2000
    with collective_session() as (me, dst, src):
        for coll, name, fn, how, opts in variants():
            how, _, opt = how.partition("-")  # auto-o3: objects at LLVM's O3 (built at the first launch)
            if opt == "noinline":
                _noinline_api([f"nvshmem_float_{coll}"])
                opt = ""
            os.environ[OPT_ENV] = opt or "auto"  # the default (thread scope: O3 since 2026-11-25)
            with nv.outline(how):
                k = cuda.jit(SIG, **opts)(fn)
            us = median_seconds(lambda: k[1, 1](dst, src, iters, 0)) / iters * 1e6
            if me == 0:
                print(f"{coll:>10} {name:>14}: {us:7.3f} us per call", flush=True)


if __name__ == "__main__":
    if "--sass" in sys.argv:
        check_sass()
    else:
        check_ptx() if "--ptx" in sys.argv else main()
