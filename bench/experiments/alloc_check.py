"""Experiment (issue 41 item 4): where an allocation's host time goes, and which way of the size
check to keep.  On each PE, alternated in rounds, median host time a call of:

  reduction      memory._ranges_by_reduction([n]): the reduction check alone (a max-reduction on
                 the runtime's stream between two copies)
  barrier        nvshmemx_barrier_all_on_stream on the runtime's stream, then its wait
  c_alloc_free   nvshmem_malloc + nvshmem_free of 1 MiB through _lib.call (the C calls alone)
  alloc_free     nvshmem_dsl.array(1 MiB, like="cupy") + free (the check as the session agreed:
                 through the slots where every PE reaches every other, around NVSHMEM's malloc)
  alloc_free_reduction / alloc_free_nocheck   the same with the reduction forced / check=False

Every PE prints one JSON line (its medians in us); PE 0 a table of the slowest PE's.

    python -m nvshmem_dsl.run -n 2 bench/experiments/alloc_check.py [--reps 200] [--rounds 5]
    (device step: bash tests/gpu/device_steps.sh experiment alloc_check; MPS where PEs share a GPU)
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import nvshmem_dsl as nv
from nvshmem_dsl.host import _cuda, _lib, memory

N = 1 << 18  # float32: 1 MiB, the bench row's size


def _forced_reduction(f):
    """``f`` with the session's check way set to the reduction for its duration."""
    def run():
        kept = memory._SLOT_CHECK_MAX_PES
        memory._SLOT_CHECK_MAX_PES = 0  # _allocate then takes the reduction
        try:
            f()
        finally:
            memory._SLOT_CHECK_MAX_PES = kept
    return run


def calls() -> dict:
    stream = _cuda.runtime_stream()

    def barrier():
        _lib.call("nvshmemx_barrier_all_on_stream", stream)
        _cuda.memcpy_dtoh(memory._scratch_alloc().ptr, 8, stream)

    def c_alloc_free():
        _lib.call("nvshmem_free", _lib.call("nvshmem_malloc", 4 * N))

    def alloc_free(check=None):
        return lambda: nv.free(nv.array((N,), "float32", like="cupy", check=check))

    out = {"reduction": lambda: memory._ranges_by_reduction([4 * N]),
           "barrier": barrier, "c_alloc_free": c_alloc_free, "alloc_free": alloc_free(),
           "alloc_free_reduction": _forced_reduction(alloc_free()), "alloc_free_nocheck": alloc_free(False)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200, help="calls a round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with nv.init():
        me = nv.my_pe()
        slots = memory._sizes_through_slots()  # the session agrees on its way (the first check)
        table = calls()
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(args.rounds):
            for name, f in table.items():
                nv.barrier_all()
                f()  # untimed: the PEs meet in it
                t0 = time.perf_counter()
                for _ in range(args.reps):
                    f()
                times[name].append((time.perf_counter() - t0) / args.reps * 1e6)
        mine = {name: statistics.median(v) for name, v in times.items()}
        print(json.dumps({"pe": me, "n_pes": nv.n_pes(), "through_slots": slots, "us": mine}), flush=True)
        import cupy

        src = nv.array((len(mine),), "float64", like="cupy")
        worst = nv.array((len(mine),), "float64", like="cupy")
        src[:] = cupy.asarray(list(mine.values()))
        nv.reduce(nv.Team.TEAM_WORLD, worst, src, "max")
        if me == 0:
            for name, value in zip(mine, worst.get()):
                print(f"{name:24s} {value:9.2f} us (slowest PE)")
        nv.free(worst)
        nv.free(src)


if __name__ == "__main__":
    main()
