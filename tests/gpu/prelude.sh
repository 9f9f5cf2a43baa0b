# Source on the GPU host from the repository root (no pip there): installs what
# ../shared/device/pack.sh prepared into .dw and makes `import nvshmem_dsl` work from this
# checkout. Keeps NVLink multicast off (the device prelude exports NVSHMEM_DISABLE_NVLS=1).
. .dw/base/prelude.sh .dw
rm -rf /tmp/pkg/nvshmem_dsl && mkdir -p /tmp/pkg
cp -r runtime /tmp/pkg/nvshmem_dsl && cp -r generated /tmp/pkg/nvshmem_dsl/_generated
export PYTHONPATH="/tmp/pkg:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NVSHMEM_DISABLE_NVLS=1 NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo
