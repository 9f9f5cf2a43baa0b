# Source on the GPU host from the repository root (no pip there): installs what
# ../shared/device/pack.sh prepared into .dw and makes `import nvshmem_dsl` work from this
# checkout. Keeps NVLink multicast off (the device prelude exports NVSHMEM_DISABLE_NVLS=1).
. .dw/base/prelude.sh .dw
rm -rf /tmp/pkg/nvshmem_dsl && mkdir -p /tmp/pkg
cp -r runtime /tmp/pkg/nvshmem_dsl && cp -r generated /tmp/pkg/nvshmem_dsl/_generated
export PYTHONPATH="/tmp/pkg:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NVSHMEM_DISABLE_NVLS=1 NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo
# NVSHMEM 3.8 as pip installs it has libnvshmem_device.a beside its bitcode (the C++ baseline links it;
# our kernels link its compiled transport helpers: nvshmem_dsl.linker.helper_archive): carried apart
if [ -n "${NVSHMEM_HOME:-}" ] && [ -f .dw/nv38a/libnvshmem_device.a.xz ] && [ ! -f "$NVSHMEM_HOME/lib/libnvshmem_device.a" ]; then
  xz -dc .dw/nv38a/libnvshmem_device.a.xz > "$NVSHMEM_HOME/lib/libnvshmem_device.a.part" &&
    mv "$NVSHMEM_HOME/lib/libnvshmem_device.a.part" "$NVSHMEM_HOME/lib/libnvshmem_device.a"
fi
# NVSHMEM4Py (bench/run.py --impls ...,nv4py), carried in .dw/nv4py (bash tests/gpu/pack_nv4py.sh): its wheel without
# its dependencies (the image has them; cffi comes with .dw/base), cuda-pathfinder only where the image's is older than
# it needs (1.2.3); bench/_nv4py.py points it at nvshmem_dsl's NVSHMEM (the carried 3.8)
if ls .dw/nv4py/nvshmem4py_*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dw/nv4py/nvshmem4py_*.whl
  python3 -c "import sys, cuda.pathfinder as p; sys.exit(tuple(map(int, p.__version__.split('.')[:3])) < (1, 2, 3))" 2>/dev/null ||
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dw/nv4py/cuda_pathfinder-*.whl
  python3 -c "import nvshmem; print('prelude: NVSHMEM4Py', nvshmem.__version__, 'in /tmp/site')"
fi
