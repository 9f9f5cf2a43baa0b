#!/bin/bash
# NVSHMEM's remote (proxy) transport on one node: P2P disabled, UCX over TCP, so that the device
# code's transport helpers run (every other GPU run here goes through P2P, where they are only
# linked).  Run from the repository root on the GPU host, after tests/gpu/prelude.sh:
#
#     bash bench/experiments/remote_transport.sh probe            # what UCX and NVSHMEM see; the ring example
#     bash bench/experiments/remote_transport.sh suite [DSLS]     # the GPU suites (default numba) over it
#
# Needs .dw/ucx/ucx.tar.xz (4.3 MB), made on a machine with pip: a folder ucx/ holding lib/ (libucp, libucs,
# libuct, libucm, libucs_signal .so.0 of `pip download --no-deps libucx-cu12`, each with its .so link),
# lib/ucx/ (its libucm_cuda, libuct_cma, libuct_cuda), libucx_cu12.libs/ (as in the wheel), bin/ucx_info as
# ucx_info, and nvshmem_transport_ucx.so.7 of nvidia-nvshmem-cu13 3.8.0; `tar -cf - ucx | xz > .dw/ucx/ucx.tar.xz`.
# Found on 2026-11-25 (tests/gpu/records/2026-11-25/h100-remote-transport-ucx-tcp.txt): the transport starts,
# but without GDRCopy or a driver >= 13.3 its atomics abort, so nothing runs past init on the lent hosts.
set -u
what=${1:-probe}; shift || true
OUT=${OUT:-/tmp/out}; work=${WORK:-/tmp/remote-transport}; mkdir -p "$work" "$OUT"
tar -xJf .dw/ucx/ucx.tar.xz -C /tmp || { echo "no .dw/ucx/ucx.tar.xz"; exit 2; }
export LD_LIBRARY_PATH=/tmp/ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} UCX_MODULE_DIR=/tmp/ucx/lib/ucx
if [ -n "${NVSHMEM_HOME:-}" ]; then cp /tmp/ucx/nvshmem_transport_ucx.so.7 "$NVSHMEM_HOME/lib/"; fi
export NVSHMEM_DISABLE_P2P=1 NVSHMEM_REMOTE_TRANSPORT=ucx
export UCX_TLS=${UCX_TLS:-tcp,cuda_copy,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
ngpu=$(nvidia-smi -L | wc -l); per=$(( (2 + ngpu - 1) / ngpu ))
rc=0
case "$what" in
  probe)
    /tmp/ucx/ucx_info -v 2>&1 | head -3
    /tmp/ucx/ucx_info -d 2>&1 | grep -E "Transport:|Device:" | head -20
    python3 -c "import nvshmem_dsl; print(nvshmem_dsl.versions())"
    NVSHMEM_DEBUG=${NVSHMEM_DEBUG:-INFO} timeout ${PROBE_TIMEOUT:-150} python3 tests/gpu/mps.py --pes-per-gpu $per -- \
      python3 -m nvshmem_dsl.run -n 2 examples/numba_ring_put_get.py > "$work/ring.txt" 2>&1 || rc=$?
    grep -iE "transport|ucx|p2p|error|warn|ring|pe [01]|passed|ok" "$work/ring.txt" | head -60
    tail -15 "$work/ring.txt"
    ;;
  suite)
    timeout ${STEP_TIMEOUT:-500} python3 tests/gpu/run_suite.py --pes 2 --dsl "${1:-numba}" --launchers launcher \
      --out "$work" --timeout "${SUITE_TIMEOUT:-240}" > "$work/suite.txt" 2>&1 || rc=$?
    grep -vE "^ +(PASS|SKIP)  " "$work/suite.txt" | tail -80
    ;;
esac
tar -czf "$OUT/remote-transport-$what.tar.gz" -C "$work" . 2>/dev/null
echo "rc=$rc"
exit $rc
