#!/bin/bash
# Experiment (2 GPUs): the one-thread latency kernels with and without a declared launch shape,
# C++ and Numba side by side, Numba with and without NVSHMEM_DSL_UNSWITCH=1.
#
# CuTe's static launches give its kernels `.reqntid 1`; bench.cu's (ONE_THREAD) and
# numba_bench.py's (launch_bounds=(1,)) now declare the same.  Without it ptxas aggregates a
# warp's atomics (vote/popc/shuffle around every fetch-add, the shuffle waiting for the result).
# This measures what the declaration and unswitching change, for both implementations:
#
#   bash bench/experiments/one_thread_bounds.sh OUTDIR
#
# Prints the latency rows of each configuration; results in OUTDIR/<bounds>-<unswitch>.json.
set -u
out=${1:?outdir}; mkdir -p "$out"
for bounds in 1 0; do
  flags=""; [ "$bounds" = 0 ] && flags="-DONE_THREAD="
  for unswitch in 0 1; do
    tag="bounds$bounds-unswitch$unswitch"
    NVCC_FLAGS="$flags" BENCH_ONE_THREAD_BOUNDS=$bounds NVSHMEM_DSL_UNSWITCH=$unswitch \
      timeout 150 python3 bench/run.py --quick --impls cpp,numba --no-compile-time \
      --only p_lat,g_lat,amo_lat,pingpong --out "$out/$tag.json" > "$out/$tag.log" 2>&1
    echo "$tag rc=$?"
    grep -E "^(p_lat|g_lat|atomic|put_signal)" "$out/$tag.log" | sed "s/^/  /"
  done
done
