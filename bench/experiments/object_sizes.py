"""Experiment: how big NVSHMEM's out-of-line objects are, and what ptxas makes of them (CPU only).

Measures, for the default sm_90 bitcode (NVSHMEM 3.8 on the CPU machine), with
nvshmem_dsl.linker.outline.object_ptx and the ptxas the objects are built with:

  helper    NVSHMEM's put_signal dispatch helper (thread group 0): unspecialised, and specialised
            on a put_signal's modes (SIGNAL_SET, blocking) as specialise_helper_calls names it
  objects   a broadcast and a block reduction: with NVSHMEM's helpers inside (as objects were
            built before 2026-11-24 afternoon) and called in their own objects (now); PTX KiB,
            the largest function's KiB, LLVM seconds, ptxas seconds
  ptxas     the block reduction's object (now) through ptxas at -O3 / -O2 / -O1, -Ofast-compile (-Ofc)
            min / mid, register caps 64 / 128 / 255

    python bench/experiments/object_sizes.py [helper,objects,ptxas]
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

from nvshmem_dsl.linker import calls, link, outline

CPU, FEATURES = "sm_90", "+ptx85"
DISPATCH = "_Z37nvshmemi_transfer_put_signal_dispatchIL13threadgroup_t0EEvPvS1_mS1_m14nvshmemi_amo_tibi"
SIGNAL_SET = 9  # nvshmemi_amo_t of SIGNAL_SET (the op a put_signal(SIGNAL_SET) passes)
OBJECTS = ("nvshmem_int_broadcast", "nvshmemx_int_sum_reduce_block")


def ptxas_seconds(ptx: str, *options: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "o.ptx")
        with open(src, "w") as fh:
            fh.write(ptx)
        t0 = time.perf_counter()
        subprocess.run([link.ptxas(), "-c", f"-arch={CPU}", *options, src, "-o", os.path.join(tmp, "o.cubin")],
                       check=True, capture_output=True)
        return time.perf_counter() - t0


def largest_function_kib(ptx: str) -> int:
    starts = [m.start() for m in re.finditer(r"^(?:\.visible |\.weak )?\.(?:func|entry)", ptx, re.M)] + [len(ptx)]
    return max(b - a for a, b in zip(starts, starts[1:])) // 1024


def measure(names, helpers_out=True, options=("-O3", "-maxrregcount=64")) -> str:
    t0 = time.perf_counter()
    ptx = outline.object_ptx(names, 90, CPU, FEATURES, helpers_out=helpers_out)
    ptx = calls.specialise_helper_calls(ptx) if helpers_out else ptx
    llvm_s = time.perf_counter() - t0
    return (f"{len(ptx) // 1024} KiB of PTX, largest function {largest_function_kib(ptx)} KiB, LLVM {llvm_s:.2f} s, "
            f"ptxas {ptxas_seconds(ptx, *options, *link._ptxas_options()):.2f} s")


def main(argv) -> int:
    what = (argv[0] if argv else "helper,objects,ptxas").split(",")
    print(f"ptxas {link.ptxas()} {' '.join(link._ptxas_options())}; {os.cpu_count()} CPUs", flush=True)
    if "helper" in what:
        spec = outline.specialised_name(DISPATCH, {5: SIGNAL_SET, 7: 0})
        print(f"put_signal dispatch helper, unspecialised: {measure([DISPATCH])}", flush=True)
        print(f"put_signal dispatch helper, {spec[len(DISPATCH):]}: {measure([spec])}", flush=True)
    if "objects" in what:
        for name in OBJECTS:
            print(f"{name}, helpers inside: {measure([name], helpers_out=False)}", flush=True)
            print(f"{name}, helpers in their objects: {measure([name])}", flush=True)
    if "ptxas" in what:
        ptx = calls.specialise_helper_calls(outline.object_ptx([OBJECTS[1]], 90, CPU, FEATURES))
        for options in (("-O3",), ("-O2",), ("-O1",), ("-Ofc", "min"), ("-Ofc", "mid")):
            print(f"{OBJECTS[1]} ptxas {' '.join(options)} -maxrregcount=64: "
                  f"{ptxas_seconds(ptx, *options, '-maxrregcount=64', *link._ptxas_options()):.2f} s", flush=True)
        for cap in (128, 255):
            print(f"{OBJECTS[1]} ptxas -O3 -maxrregcount={cap}: "
                  f"{ptxas_seconds(ptx, '-O3', f'-maxrregcount={cap}', *link._ptxas_options()):.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
