#!/bin/bash
# A maintainer's GPU work on a lent machine without pip (what make gpu-test and make bench run, from a
# checkout), one step per device call, run from the repository root:  bash tests/gpu/device_steps.sh STEP [args]
#
#   cute-part1   carry .dw/base + .dw/cute1: places part 1 of the CuTe DSL (next call at once)
#   cute-suite   carry .dw/base + .dw/cute2: CuTe GPU suite + CuTe examples under our launcher
#   launchers    host suite under torchrun, the Numba examples under our launcher
#   suite        any run_suite.py arguments, e.g. --dsl numba --launchers launcher
#   pe-counts    host, Numba and CuTe suites at 1, 2, 4 and 8 PEs under our launcher (PES, DSLS,
#                SUITE_TIMEOUT per run; TOGETHER suites at once, default 4); above one PE per GPU
#                run_suite.py runs its own MPS daemon.
#                CuTe: carry .dw/base + .dw/cute2 right after cute-part1; DSLS=host,numba needs .dw/base
#   nv38         carry .dw/base + .dw/nv38 (+ .dw/cute2 after cute-part1 for CuTe): NVSHMEM 3.8.0, what pip
#                installs, instead of the image's 3.4.5; the suites (DSLS, PES, default numba at 2 PEs;
#                TOGETHER at once, default 4)
#   limited-mpg  2 PEs on one GPU without MPS (NVSHMEM's limited MPG mode): tests/gpu/test_limited_mpg.py
#   faults       tests/gpu/test_faults_gpu.py: PEs that raise, exit, are SIGKILLed or skip a collective (it starts
#                its own jobs under its own MPS daemon); FAULT_LAUNCHERS (default all found), FAULT_PES (default
#                2,4); the table of times to end in faults.rst
#   cold-pes     tests/gpu/test_cold_pes_gpu.py: COLD_PES (default 8) PEs starting together on an empty cache
#                directory, beside one PE's cold start (it starts its own jobs under its own MPS daemon)
#   core         tests/gpu/test_core_gpu.py (the NVSHMEM4Py programs through nvshmem_dsl.core; it starts its
#                own 2-PE jobs) under an MPS daemon of tests/gpu/mps.py when the GPU is shared
#   nv4py-tests  carry .dw/nv4py-tests (NVSHMEM4Py's nvshmem4py/test, never in git): NVSHMEM4Py's own tests as its
#                run_tests.sh runs them, through our alias at 2 PEs (tests/gpu/nvshmem4py_tests.py); NV4PY_SUITES (default
#                all), NV4PY_BUDGET seconds for all (default 480; each file has its own timeout too), TOGETHER jobs at
#                once (default 3, under MPS); per-file counts and the table printed, logs and JUnit in the tarball
#   bench        bench/run.py with the step's arguments (make bench's first half; e.g. --quick, --impls,
#                --only, --nproc 1), under MPS where its PEs share a GPU (latency only, then); --impls ...,nv4py
#                (NVSHMEM4Py's rows) needs .dw/nv4py carried (bash tests/gpu/pack_nv4py.sh), and .dw/nv38 for
#                both packages to run on NVSHMEM 3.8 (the image's 3.4.5 headers do not compile under NVRTC);
#                nv4py_cute (its CuTe API) the CuTe DSL too (cute-part1, then .dw/cute2, in the calls before)
#   comm         bench/comm_run.py (the communication kernels beside their C++ twins and NVSHMEM's collectives),
#                NPROC PEs (default 2; under MPS where they share a GPU); args go to comm_run.py
#   experiment   NAME [args]: bench/experiments/NAME (.py or .sh) with the args: a .sh under bash, a .py at NPROC
#                PEs (default 2) under python -m nvshmem_dsl.run (under MPS where they share a GPU), NPROC=0: a
#                plain python3 (the CPU experiments, and those that start their own processes)
#
# With .dw/nv38 carried every step runs on NVSHMEM 3.8 (carry .dw/nv38a too for the C++ baseline: 3.8's
# libnvshmem_device.a); IMAGE_NVSHMEM=1 runs it on the image's 3.4.5 instead, so that one device call can chain
# a step on each version.
#
# Everything lands in $OUT/<step>.tar.gz (the logs, JUnit files, JSON results) plus the
# printed summary. ../shared/device/README.md explains .dw (bash ../shared/device/pack.sh .dw cute).
set -u
step=${1:?step}; shift
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
work=/tmp/gpu-$step; rm -rf "$work"; mkdir -p "$work"
. tests/gpu/prelude.sh > "$work/prelude.log" 2>&1
tail -3 "$work/prelude.log"
if [ "${IMAGE_NVSHMEM:-0}" = 1 ] && [ -n "${NVSHMEM_HOME:-}" ]; then
  unset NVSHMEM_HOME; echo "IMAGE_NVSHMEM=1: the image's NVSHMEM, not the carried 3.8"
fi
export NVSHMEM_DSL_INIT_TIMEOUT=${NVSHMEM_DSL_INIT_TIMEOUT:-90} NVSHMEM_DSL_TEST_TIMEOUT=${NVSHMEM_DSL_TEST_TIMEOUT:-240}
export PYTEST_ADDOPTS="--tb=short -rfEs ${PYTEST_ADDOPTS:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$work/gpus.txt" 2>&1
rc=0
# PEs a GPU gets when $1 PEs share this machine's GPUs (above 1: tests/gpu/mps.py starts an MPS daemon)
pes_per_gpu() { local ngpu; ngpu=$(nvidia-smi -L | wc -l); echo $(( ($1 + ngpu - 1) / ngpu )); }
# with 3.8 carried (.dw/nv38) and .dw/nv38a beside it, tests/gpu/prelude.sh has put 3.8's libnvshmem_device.a
# beside its bitcode (as pip installs it): the C++ baseline links it
case "$step" in
  cute-part1) ;;
  cute-suite)
    python3 -c "import cutlass; print('cutlass', cutlass.__version__)" || rc=1
    timeout 540 python3 tests/gpu/run_suite.py --dsl cute --launchers launcher --timeout 520 --out "$work" "$@" || rc=$?
    ;;
  launchers)
    timeout 200 python3 tests/gpu/run_suite.py --dsl host --launchers torchrun --timeout 190 --out "$work" || rc=$?
    PYTEST_ADDOPTS="$PYTEST_ADDOPTS -k examples" timeout 200 python3 tests/gpu/run_suite.py --dsl numba \
      --launchers launcher --timeout 190 --out "$work/examples" || rc=$?
    ;;
  nv4py-tests)  # skips, saying why, without .dw/nv4py-tests
    together=${TOGETHER:-3}
    timeout ${STEP_TIMEOUT:-560} python3 tests/gpu/mps.py --pes-per-gpu "$(pes_per_gpu $((2 * together)))" -- \
      python3 tests/gpu/nvshmem4py_tests.py --out "$work" --budget "${NV4PY_BUDGET:-480}" --together "$together" \
      ${NV4PY_SUITES:+--suites "$NV4PY_SUITES"} "$@" > "$work/nv4py.txt" 2>&1 || rc=$?
    tail -70 "$work/nv4py.txt"
    ;;
  bench)
    np=2; prev=""; for a in "$@"; do [ "$prev" = --nproc ] && np=$a; prev=$a; done
    timeout 580 python3 tests/gpu/mps.py --pes-per-gpu "$(pes_per_gpu "$np")" -- python3 bench/run.py \
      --out "$work/latest.json" "$@" > "$work/bench.log" 2>&1 || rc=$?
    tail -80 "$work/bench.log"
    cp bench/results/*.png "$work/" 2>/dev/null; cp -r bench/results/logs "$work/" 2>/dev/null
    ;;
  suite)
    timeout 580 python3 tests/gpu/run_suite.py --out "$work" "$@" || rc=$?
    ;;
  pe-counts)  # all output in suite.txt; printed without the PASS/SKIP lines of single tests
    case ",${DSLS:-host,numba,cute}," in
      *,cute,*) python3 -c "import cutlass; print('cutlass', cutlass.__version__)" || rc=1 ;;
    esac
    timeout ${STEP_TIMEOUT:-580} python3 tests/gpu/run_suite.py --pes "${PES:-1,2,4,8}" --dsl "${DSLS:-host,numba,cute}" \
      --launchers launcher --together "${TOGETHER:-4}" --out "$work" --timeout "${SUITE_TIMEOUT:-240}" "$@" \
      > "$work/suite.txt" 2>&1 || rc=$?
    grep -vE "^ +(PASS|SKIP)  " "$work/suite.txt"
    ;;
  nv38)
    python3 -c "import nvshmem_dsl; v = nvshmem_dsl.versions(); print('NVSHMEM', v['nvshmem'])" | tee "$work/version.txt"
    grep -q "NVSHMEM 3.8" "$work/version.txt" || { echo "nv38: NVSHMEM 3.8 not found (carry .dw/nv38)"; rc=1; }
    timeout ${STEP_TIMEOUT:-560} python3 tests/gpu/run_suite.py --pes "${PES:-2}" --dsl "${DSLS:-numba}" --launchers launcher \
      --together "${TOGETHER:-4}" --out "$work" --timeout "${SUITE_TIMEOUT:-300}" > "$work/suite.txt" 2>&1 || rc=$?
    grep -vE "^ +(PASS|SKIP)  " "$work/suite.txt"
    ;;
  core)
    per=$(pes_per_gpu 2)
    # each job ends within NVSHMEM_DSL_CORE_GPU_TIMEOUT, a hung MPI rank with its tracebacks (rank_output.py)
    NVSHMEM_DSL_CORE_GPU_TIMEOUT=${NVSHMEM_DSL_CORE_GPU_TIMEOUT:-240} timeout ${STEP_TIMEOUT:-560} \
      python3 tests/gpu/mps.py --pes-per-gpu $per -- python3 -m pytest -q -m gpu -p no:cacheprovider \
      tests/gpu/test_core_gpu.py --junitxml="$work/core.xml" > "$work/core.txt" 2>&1 || rc=$?
    tail -30 "$work/core.txt"
    ;;
  experiment)  # NAME [args]; the output in $work/NAME.txt, its last 40 lines printed
    name=${1:?experiment NAME: a script of bench/experiments}; shift; name=${name%.py}; name=${name%.sh}
    np=${NPROC:-2}; log="$work/$name.txt"
    if [ -f "bench/experiments/$name.sh" ]; then
      timeout ${EXPERIMENT_TIMEOUT:-560} bash "bench/experiments/$name.sh" "$@" > "$log" 2>&1 || rc=$?
    elif [ ! -f "bench/experiments/$name.py" ]; then
      echo "experiment: no bench/experiments/$name.py or .sh"; rc=2
    elif [ "$np" = 0 ]; then
      timeout ${EXPERIMENT_TIMEOUT:-560} python3 "bench/experiments/$name.py" "$@" > "$log" 2>&1 || rc=$?
    else
      timeout ${EXPERIMENT_TIMEOUT:-560} python3 tests/gpu/mps.py --pes-per-gpu "$(pes_per_gpu "$np")" -- \
        python3 -m nvshmem_dsl.run -n "$np" "bench/experiments/$name.py" "$@" > "$log" 2>&1 || rc=$?
    fi
    [ -f "$log" ] && tail -40 "$log"
    ;;
  comm)  # bench/comm_run.py: the communication kernels of every DSL beside their C++ twins and NVSHMEM's
         # collectives (args go to comm_run.py, e.g. --nproc 2 --impls cpp,numba); one GPU: under MPS
    np=${NPROC:-2}
    timeout 560 python3 tests/gpu/mps.py --pes-per-gpu "$(pes_per_gpu "$np")" -- python3 bench/comm_run.py --nproc $np \
      --out "$work/comm.json" "$@" > "$work/comm.log" 2>&1 || rc=$?
    grep -v "^  comm_" "$work/comm.log" | tail -80
    ;;
  limited-mpg)
    timeout 200 python3 tests/gpu/run_suite.py --pes 2 --pes-per-gpu 2 --no-mps --dsl limited --launchers launcher \
      --out "$work" --timeout 190 > "$work/suite.txt" 2>&1 || rc=$?
    cat "$work/suite.txt"
    ;;
  faults)
    NVSHMEM_DSL_FAULT_TABLE="$work/faults.jsonl" NVSHMEM_DSL_FAULT_LAUNCHERS=${FAULT_LAUNCHERS:-launcher,torchrun,mpirun} \
      NVSHMEM_DSL_FAULT_PES=${FAULT_PES:-2,4} timeout ${STEP_TIMEOUT:-560} python3 -m pytest -q -m gpu \
      -p no:cacheprovider tests/gpu/test_faults_gpu.py --junitxml="$work/faults.xml" "$@" > "$work/faults.txt" 2>&1 || rc=$?
    tail -30 "$work/faults.txt"
    [ -f "$work/faults.jsonl" ] && python3 tests/gpu/test_faults_gpu.py "$work/faults.jsonl" > "$work/faults.rst" && cat "$work/faults.rst"
    ;;
  cold-pes)
    NVSHMEM_DSL_COLD_TABLE="$work/cold.jsonl" NVSHMEM_DSL_COLD_PES=${COLD_PES:-8} timeout ${STEP_TIMEOUT:-560} \
      python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/gpu/test_cold_pes_gpu.py --junitxml="$work/cold.xml" "$@" \
      > "$work/cold.txt" 2>&1 || rc=$?
    grep -E "^COLD |passed|failed|Error" "$work/cold.txt" | tail -20
    ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
tar -czf "$OUT/$step.tar.gz" -C /tmp "gpu-$step" 2>/dev/null
echo "step $step: rc=$rc"
exit $rc
