#!/usr/bin/env bash
# Build the CUDA C++ NVSHMEM baseline: bench/cpp/build/bench_cpp (bench.cu, coll.cu),
# bench/cpp/build/comm_cpp (comm.cu: the communication kernels' twins) and bench/cpp/build/moe_cpp
# (moe.cu: the MoE dispatch / combine twins), three binaries.
#
#   bash bench/cpp/build.sh            # NVSHMEM found by nvshmem_dsl._libs (wheel, NVSHMEM_HOME, ...)
#   PYTHON=.venv/bin/python NVCC=/usr/local/cuda/bin/nvcc ARCH=sm_90 bash bench/cpp/build.sh
#
# Variables: PYTHON (the interpreter with nvshmem_dsl installed; default: .venv/bin/python if
# present, else python3), NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc),
# ARCH (default sm_90), NVSHMEM_INC / NVSHMEM_LIB (override the discovered directories),
# BENCH_CPP_OUT (default bench/cpp/build/bench_cpp), COMM_CPP_OUT and MOE_CPP_OUT (default comm_cpp and
# moe_cpp beside it), BENCH_CPP_TARGETS (default "bench comm moe": the binaries to build; "comm" alone
# skips the collectives),
# NVCC_FLAGS (extra flags),
# BENCH_CPP_JOBS (nvcc processes at once; default: the CPUs).
# BENCH_CPP_PRINT_FLAGS=1: print nvcc and its compile flags, one a line, and build nothing
# (bench/compile_families.py compiles its single-collective objects with them).
#
# Separate compilation (-rdc): bench.cu and the collectives' coll.cu (once per family with 4 or more
# jobs: each family costs nvcc 10-30 s of one CPU), comm.cu and moe.cu, compiled in parallel, then linked
# with libnvshmem_device: bench_cpp from bench.cu and coll.cu, comm_cpp from comm.cu alone, moe_cpp from
# moe.cu alone (same flags).
#
# NVSHMEM's headers include <infiniband/mlx5dv.h> (IBGDA / GPUNetIO support) without a guard
# in some releases (3.4.x); when the system has no rdma-core headers, bench/stub_include
# provides an empty stand-in.  It is put last on the include path, so real headers win.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi
if [[ -z "${NVCC:-}" ]]; then
  if command -v nvcc >/dev/null 2>&1; then NVCC=nvcc
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then NVCC=/usr/local/cuda/bin/nvcc
  else echo "build.sh: no nvcc (set NVCC=/path/to/nvcc)" >&2; exit 1; fi
fi
ARCH="${ARCH:-sm_90}"
OUT="${BENCH_CPP_OUT:-$here/build/bench_cpp}"
COMM_OUT="${COMM_CPP_OUT:-$(dirname "$OUT")/comm_cpp}"
MOE_OUT="${MOE_CPP_OUT:-$(dirname "$OUT")/moe_cpp}"
TARGETS="${BENCH_CPP_TARGETS:-bench comm moe}"
want_bench=0; want_comm=0; want_moe=0
for t in $TARGETS; do
  case "$t" in
    bench) want_bench=1 ;;
    comm) want_comm=1 ;;
    moe) want_moe=1 ;;
    *) echo "build.sh: unknown target $t in BENCH_CPP_TARGETS (bench, comm, moe)" >&2; exit 1 ;;
  esac
done

if [[ -z "${NVSHMEM_INC:-}" || -z "${NVSHMEM_LIB:-}" ]]; then
  # nvshmem_dsl's own discovery (NVSHMEM_HOME, the nvidia-nvshmem wheels, cuda.pathfinder);
  # without nvshmem_dsl installed, the nvidia-nvshmem-cu12/cu13 wheel of $PYTHON.
  locate='
try:
    import nvshmem_dsl._libs as l
    i = l.installation()
    print(i.lib_dir, i.include_dir)
except Exception:
    import importlib.util, os
    spec = importlib.util.find_spec("nvidia.nvshmem")
    root = list(spec.submodule_search_locations)[0]
    print(os.path.join(root, "lib"), os.path.join(root, "include"))
'
  found="$(cd "$root" && "$PYTHON" -c "$locate" 2>/dev/null || true)"
  read -r lib inc <<<"$found"
  NVSHMEM_LIB="${NVSHMEM_LIB:-$lib}"
  NVSHMEM_INC="${NVSHMEM_INC:-$inc}"
fi
for f in "$NVSHMEM_INC/nvshmem.h" "$NVSHMEM_LIB/libnvshmem_device.a"; do
  [[ -f "$f" ]] || { echo "build.sh: no NVSHMEM: missing $f (set PYTHON to an interpreter with nvidia-nvshmem-cu12/cu13 or nvshmem_dsl, or NVSHMEM_INC and NVSHMEM_LIB)" >&2; exit 1; }
done
# the wheels ship only libnvshmem_host.so.3 (no .so link), which nvcc will not take as an input
# file: hand it to the host linker as is.
host_lib="$NVSHMEM_LIB/libnvshmem_host.so"
[[ -f "$host_lib" ]] || host_lib="$NVSHMEM_LIB/libnvshmem_host.so.3"

# NVSHMEM's headers include <infiniband/mlx5dv.h> (see above): without it, the stand-in
probe_dir="$(mktemp -d)"
trap 'rm -rf "$probe_dir"' EXIT
printf '#include <nvshmem.h>\n#include <nvshmemx.h>\n' >"$probe_dir/probe.cu"
stub=()
if ! "$NVCC" -E -std=c++17 "-arch=$ARCH" -I"$NVSHMEM_INC" "$probe_dir/probe.cu" -o /dev/null 2>"$probe_dir/log"; then
  if grep -q "mlx5dv.h" "$probe_dir/log"; then
    echo "build.sh: no <infiniband/mlx5dv.h>: using bench/stub_include (IBGDA is not used by this benchmark)" >&2
    stub=(-I"$root/bench/stub_include")
  else
    cat "$probe_dir/log" >&2
    exit 1
  fi
fi
# shellcheck disable=SC2206
cflags=(-O3 -std=c++17 -rdc=true "-arch=$ARCH" -I"$NVSHMEM_INC" ${stub[@]+"${stub[@]}"} ${NVCC_FLAGS:-})
if [[ -n "${BENCH_CPP_PRINT_FLAGS:-}" ]]; then
  printf '%s\n' "$NVCC" "${cflags[@]}"
  exit 0
fi

mkdir -p "$(dirname "$OUT")"
objdir="$(dirname "$OUT")/obj"
mkdir -p "$objdir"
njobs="${BENCH_CPP_JOBS:-$(nproc 2>/dev/null || echo 2)}"
# name|source|extra flags: the collectives in one object per family with 4 or more jobs at a time
# (each object parses NVSHMEM's headers again: more CPU in all, less time with the CPUs for it)
# comm.cu first: the longest single object, it starts at once
units=()
if (( want_comm )); then units+=("comm|$here/comm.cu|"); fi
if (( want_moe )); then units+=("moe|$here/moe.cu|"); fi
if (( want_bench )); then
  units+=("bench|$here/bench.cu|")
  if (( njobs >= 4 )); then
    for family in BROADCAST FCOLLECT ALLTOALL REDUCE REDUCESCATTER BARRIER; do
      units+=("coll_${family,,}|$here/coll.cu|-DCOLL_FAMILY=COLL_$family")
    done
  else
    units+=("coll|$here/coll.cu|")
  fi
fi
echo "build.sh: ${#units[@]} objects, $njobs at a time: $NVCC ${cflags[*]} -c ..." >&2
start=$(date +%s.%N)
objs=()
for unit in "${units[@]}"; do
  IFS='|' read -r name src extra <<<"$unit"
  [[ "$name" == comm || "$name" == moe ]] || objs+=("$objdir/$name.o")  # bench_cpp's objects
  while (( $(jobs -rp | wc -l) >= njobs )); do wait -n || true; done
  # shellcheck disable=SC2086
  ( if "$NVCC" "${cflags[@]}" $extra -c "$src" -o "$objdir/$name.o" >"$objdir/$name.log" 2>&1; then
      echo 0 >"$objdir/$name.status"
    else
      echo 1 >"$objdir/$name.status"
    fi ) &
done
wait
failed=0
for unit in "${units[@]}"; do
  IFS='|' read -r name _ _ <<<"$unit"
  cat "$objdir/$name.log" >&2
  if [[ "$(cat "$objdir/$name.status" 2>/dev/null)" != 0 ]]; then
    echo "build.sh: compiling $name failed" >&2
    failed=1
  fi
done
(( failed == 0 )) || exit 1
link() {  # link OUT OBJECTS...: one binary against NVSHMEM's device and host libraries
  local out="$1"; shift
  mkdir -p "$(dirname "$out")"
  cmd=("$NVCC" -rdc=true "-arch=$ARCH" "$@" -o "$out"
       -L"$NVSHMEM_LIB" -lnvshmem_device -Xlinker "$host_lib"
       -Xlinker -rpath -Xlinker "$NVSHMEM_LIB"
       ${NVCC_FLAGS:-})
  echo "${cmd[*]}" >&2
  "${cmd[@]}"
  built+=("$out")
}
built=()
if (( want_bench )); then link "$OUT" "${objs[@]}"; fi
if (( want_comm )); then link "$COMM_OUT" "$objdir/comm.o"; fi
if (( want_moe )); then link "$MOE_OUT" "$objdir/moe.o"; fi
end=$(date +%s.%N)
echo "build.sh: built ${built[*]} in $(awk "BEGIN{printf \"%.1f\", $end - $start}") s" >&2
