#!/usr/bin/env bash
# Build the CUDA C++ NVSHMEM baseline: bench/cpp/build/bench_cpp.
#
#   bash bench/cpp/build.sh            # NVSHMEM found by nvshmem_dsl._libs (wheel, NVSHMEM_HOME, ...)
#   PYTHON=.venv/bin/python NVCC=/usr/local/cuda/bin/nvcc ARCH=sm_90 bash bench/cpp/build.sh
#
# Variables: PYTHON (the interpreter with nvshmem_dsl installed; default: .venv/bin/python if
# present, else python3), NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc),
# ARCH (default sm_90), NVSHMEM_INC / NVSHMEM_LIB (override the discovered directories),
# BENCH_CPP_OUT (default bench/cpp/build/bench_cpp), NVCC_FLAGS (extra flags).
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

mkdir -p "$(dirname "$OUT")"
cmd=("$NVCC" -O3 -std=c++17 -rdc=true "-arch=$ARCH"
     -I"$NVSHMEM_INC"
     "$here/bench.cu" -o "$OUT"
     -L"$NVSHMEM_LIB" -lnvshmem_device -Xlinker "$host_lib"
     -Xlinker -rpath -Xlinker "$NVSHMEM_LIB"
     ${NVCC_FLAGS:-})
echo "${cmd[*]}" >&2
start=$(date +%s.%N)
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! "${cmd[@]}" 2>"$log"; then
  cat "$log" >&2
  if grep -q "mlx5dv.h" "$log"; then
    # no rdma-core headers: retry with the stand-in (IBGDA is not used by this benchmark)
    echo "build.sh: retrying with bench/stub_include for <infiniband/mlx5dv.h>" >&2
    "${cmd[@]}" -I"$root/bench/stub_include"
  else
    exit 1
  fi
else
  cat "$log" >&2
fi
end=$(date +%s.%N)
echo "build.sh: built $OUT in $(awk "BEGIN{printf \"%.1f\", $end - $start}") s" >&2
