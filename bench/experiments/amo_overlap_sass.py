"""Experiment: why a Triton loop of fetching atomics cannot overlap them, read in SASS (CPU only).

In a one-warp Triton program a thread-scope fetch-add is made by lane 0 and its result shuffled to
every lane (nvshmem_dsl.triton._compile._from_lane0), as Triton's own scalar ``tl.atomic_add`` does.
Numba's unswitched loop issues its atomics back to back (0.51x of C++); Triton's measure 1.25-1.47x.
This compiles, with the ptxas and nvdisasm that come with Triton, for sm_90:

  interleaved  a hand-written PTX loop of four predicated atomics, each followed by the two
               shuffles of its result (what an unrolled Triton loop would be)
  grouped      the same instructions with the four atomics first, then the eight shuffles
  triton       bench/triton_bench.py's amo_lat kernel as nvshmem_dsl.triton compiles it

and prints the kernel's atomics, shuffles, global loads, calls and reconvergence points in program
order, and how many atomics come before the first shuffle: the most that can be in flight at once,
since a shuffle waits for its atomic's result.  (In the triton kernel the loop is not unrolled: lane
0 loads the peer's heap base, makes NVSHMEM's generic-address atomic, whose second ATOM is the
shared-memory fallback of a generic address, or calls the proxy helper, and the warp reconverges
before the shuffles.)

    python bench/experiments/amo_overlap_sass.py [--run]

``--run`` (a GPU and cupy): also times the two hand-written loops, one warp, system-scope atomics on
the GPU's own memory (no NVSHMEM; what matters is their ratio), and checks the counter.
"""
from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

UNROLL = 4


def _bin(tool: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)


def _loop_sass():
    """bench/experiments/loop_sass.py, with Triton's ptxas and nvdisasm unless PTXAS= / NVDISASM= say."""
    os.environ.setdefault("PTXAS", _bin("ptxas"))
    os.environ.setdefault("NVDISASM", _bin("nvdisasm"))
    import loop_sass

    return loop_sass


def _loop_ptx(grouped: bool) -> str:
    atoms, rest = [], []
    for k in range(UNROLL):
        atoms.append(f"\t@%p0 atom.global.sys.relaxed.add.u64 %a{k}, [%addr], 1;")
        rest += [f"\tmov.b64 {{%lo{k}, %hi{k}}}, %a{k};",
                 f"\tshfl.sync.idx.b32 %slo{k}, %lo{k}, 0, 31, -1;",
                 f"\tshfl.sync.idx.b32 %shi{k}, %hi{k}, 0, 31, -1;",
                 f"\tmov.b64 %b{k}, {{%slo{k}, %shi{k}}};",
                 f"\tadd.s64 %acc, %acc, %b{k};"]
    if grouped:
        body = atoms + rest
    else:
        body = [line for k in range(UNROLL) for line in [atoms[k]] + rest[5 * k:5 * k + 5]]
    regs = "".join(f"\t.reg .b32 %{r}<{UNROLL}>;\n" for r in ("lo", "hi", "slo", "shi"))
    return (".version 8.5\n.target sm_90\n.address_size 64\n"
            ".visible .entry k(.param .u64 p0, .param .u32 p1)\n.reqntid 32\n{\n"
            f"\t.reg .pred %p<2>;\n\t.reg .b32 %n;\n\t.reg .b32 %t;\n{regs}"
            f"\t.reg .b64 %a<{UNROLL}>;\n\t.reg .b64 %b<{UNROLL}>;\n\t.reg .b64 %acc;\n\t.reg .b64 %addr;\n"
            "\tld.param.u64 %addr, [p0];\n\tld.param.u32 %n, [p1];\n\tmov.u32 %t, %tid.x;\n"
            "\tsetp.eq.u32 %p0, %t, 0;\n\tmov.b64 %acc, 0;\nLOOP:\n" + "\n".join(body) +
            "\n\tadd.s32 %n, %n, -1;\n\tsetp.ne.s32 %p1, %n, 0;\n\t@%p1 bra LOOP;\n"
            "\t@%p0 st.global.u64 [%addr+8], %acc;\n\tret;\n}\n")


_LETTERS = (("ATOM", "A"), ("SHFL", "S"), ("LDG", "L"), ("CALL", "C"), ("BSYNC", "B"))


def _report(what: str, sass: list, note: str = "") -> None:
    """``sass``: ``[(address, instruction)]`` (loop_sass.sass_of_*)."""
    seq = "".join(next(letter for op, letter in _LETTERS if op in s) for _, s in sass
                  if any(op in s for op, _ in _LETTERS))
    atoms = seq.replace("L", "").replace("C", "").replace("B", "")
    first = atoms.index("S") if "S" in atoms else len(atoms)
    print(f"{what:>12}: {seq:<16} " + (note or f"{first} atomic(s) before the first shuffle"))


def _run(iters: int = 1 << 16, reps: int = 5) -> None:
    import cupy as cp
    import numpy as np

    counter = cp.zeros(2, dtype=cp.uint64)
    for grouped in (False, True):
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(_loop_sass().assemble(_loop_ptx(grouped), "sm_90"))
            f.flush()
            kernel = cp.RawModule(path=f.name).get_function("k")
        counter[:] = 0
        launch = lambda: kernel((1,), (32,), (counter, np.uint32(iters // UNROLL)))  # noqa: E731
        launch()
        times = []
        for _ in range(reps):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            launch()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e6 / iters)
        got, want = int(counter[0]), (reps + 1) * (iters // UNROLL) * UNROLL
        assert got == want, f"counter {got}, expected {want}"
        print(f"{'grouped' if grouped else 'interleaved':>12}: {sorted(times)[reps // 2]:.1f} ns a fetch-add "
              f"(median of {reps} launches of {iters}; {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()})")


def main() -> int:
    import triton

    print(f"ptxas and nvdisasm of triton {triton.__version__}, sm_90, -O3; in program order: A ATOM, S SHFL, "
          "L LDG, C CALL, B BSYNC (reconvergence)")
    for grouped in (False, True):
        _report("grouped" if grouped else "interleaved", _loop_sass().sass_of_ptx(_loop_ptx(grouped), "sm_90"))
    import triton_bench as tb

    _report("triton", _loop_sass().sass_of_cubin(tb.compile_kernel("amo_lat").asm["cubin"], "amo_lat"),
            "a loop of one atomic an iteration (the ATOMs are the global and shared paths of a generic "
            "address), its result shuffled after the warp reconverges")
    if "--run" in sys.argv[1:]:
        _run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
