#!/bin/bash
# The GPU work of a session on the lent 2 x H200 machine (no pip there), one step per device
# call, run from the repository root:  bash tests/gpu/device_steps.sh STEP [extra args]
#
#   cute-part1   carry .dw/base + .dw/cute1: places part 1 of the CuTe DSL (next call at once)
#   cute-suite   carry .dw/base + .dw/cute2: CuTe GPU suite + CuTe examples under our launcher
#   launchers    host suite under torchrun, Numba examples, Numba suite under mpirun
#   bench        make bench (C++, Numba, CuTe in one run); args go to bench/run.py
#   copy-ab      Numba bandwidth with NVSHMEM_DSL_COPY_REWRITE off/store/vector, + suite (vector)
#   latency-ab   bench/experiments/one_thread_bounds.sh, Numba suite, quick bandwidth
#   group-rma    put/get bandwidth of the three (full sizes, no compile times), Numba suite
#   put-shapes   bench/experiments/put_shapes.py beside C++'s put bandwidth
#   cold-compile Numba's cold and warm first-kernel compile times beside nvcc's build time
#   cold-start   bench/experiments/cold_start.py (REPS=2, VARIANTS), then the Numba suite (cold default cache)
#   suite        any run_suite.py arguments, e.g. --dsl numba --launchers launcher
#   pe-counts    host, Numba and CuTe suites at 1, 2, 4 and 8 PEs under our launcher (PES, DSLS,
#                SUITE_TIMEOUT per run); above one PE per GPU run_suite.py runs its own MPS daemon.
#                CuTe: carry .dw/base + .dw/cute2 right after cute-part1; DSLS=host,numba needs .dw/base
#   nv38         carry .dw/base + .dw/nv38 (+ .dw/cute2 after cute-part1 for CuTe): NVSHMEM 3.8.0, what pip
#                installs, instead of the image's 3.4.5; the suites (DSLS, PES, default numba at 2 PEs), the
#                single-collective compile times (bench/compile_families.py) and the examples
#   core         tests/gpu/test_core_gpu.py (the NVSHMEM4Py programs through nvshmem_dsl.core; it starts its
#                own 2-PE jobs) under an MPS daemon of tests/gpu/mps.py when the GPU is shared
#   coll-ab      collective and p/g/atomic latency of C++ and IMPLS (default cpp,numba,triton), NVSHMEM_DSL_OUTLINE
#                auto and none (OUTLINE_MODES), 2 PEs (one GPU: under MPS)
#   split-ab     collective latency of C++ and IMPLS with NVSHMEM_DSL_OUTLINE_SPLIT in SPLIT_MODES (none default)
#   abi-ab       the same with NVSHMEM_DSL_ABI_PRESERVE in ABI_MODES (off default): the objects' calling convention; ONLY: bench rows (coll_lat)
#   opt-ab       the same with NVSHMEM_DSL_OUTLINE_OPT in OPT_MODES (light o3): how the objects are optimised
#   helpers-ab   the same with NVSHMEM_DSL_HELPERS in HELPERS_MODES (build archive): the transport helpers' objects
#   tree-ab      cold first kernels (empty cache) of this tree and of the tree in .dw/ref (runtime/ and generated/
#                of another commit: git archive COMMIT runtime generated | tar -x -C .dw/ref), alternately, REPS
#                times: Numba's and Triton's put kernel without and with init(), then each of Numba's KERNELS
#   cold-objects each of KERNELS compiled by Numba from an empty cache (bench/compile_time.py --phases), without
#                and with NVSHMEM initialised first (--init, one PE), NVSHMEM_DSL_OBJECT_WORKERS in WORKER_MODES
#                (0 default): the objects' LLVM steps in this process or in worker processes
#   coll-overhead bench/experiments/coll_overhead.py with the step's arguments (--ptr, --noinline, --caps), 2 PEs, on
#                the carried 3.8 (.dw/nv38) and then the image's 3.4.5
#   example-ab   one example at 2 PEs from an empty cache: the code as it is, block objects capped, the default ABI
#   one-pe       bench/run.py at one PE for IMPLS and ONLY (default coll_bw): code against C++'s, not NVLink bandwidth
#   experiment   bench/experiments/<first argument> with the other arguments at 2 PEs (python -m nvshmem_dsl.run),
#                on the carried 3.8 when .dw/nv38 is (IMAGE_NVSHMEM=1: 3.4.5); one GPU: under MPS
#   comm         bench/comm_run.py (the communication kernels beside their C++ twins and NVSHMEM's collectives),
#                NPROC PEs (default 2; under MPS where they share a GPU); args go to comm_run.py
#   limited-mpg  2 PEs on one GPU without MPS (NVSHMEM's limited MPG mode): tests/gpu/test_limited_mpg.py
#
# IMAGE_NVSHMEM=1 runs a step on the image's NVSHMEM (3.4.5) in a call that carries .dw/nv38 (whose
# prelude points NVSHMEM_HOME at 3.8), so that one call can run both versions.
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
  bench)
    timeout 580 python3 bench/run.py --out "$work/latest.json" "$@" > "$work/bench.log" 2>&1 || rc=$?
    tail -80 "$work/bench.log"
    cp bench/results/*.png "$work/" 2>/dev/null; cp -r bench/results/logs "$work/" 2>/dev/null
    ;;
  copy-ab)  # NVSHMEM_DSL_COPY_REWRITE off/store/vector: bandwidth side by side with C++, then the
            # Numba suite with the rewrite on
    for m in ${COPY_MODES:-off store vector}; do
      NVSHMEM_DSL_COPY_REWRITE=$m timeout 150 python3 bench/run.py --quick --impls cpp,numba --no-compile-time \
        --only put_bw,get_bw --out "$work/copy-$m.json" > "$work/copy-$m.log" 2>&1 || rc=$?
      grep -E "^(put|get)_bw" "$work/copy-$m.log" | sed "s/^/$m /"
    done
    NVSHMEM_DSL_COPY_REWRITE=vector timeout 300 python3 tests/gpu/run_suite.py --dsl numba --launchers launcher \
      --timeout 290 --out "$work/suite-vector" | head -3 || rc=$?
    ;;
  numba-perf)  # the Numba kernels as they compile now: loop-shape experiment, bench, suite
    timeout 120 python3 -m nvshmem_dsl.run -n 2 bench/experiments/p_loop_shapes.py 2>&1 | tail -8 || rc=$?
    timeout 200 python3 bench/run.py --quick --impls cpp,numba --no-compile-time --only put_bw,p_lat,g_lat \
      --out "$work/latest.json" > "$work/bench.log" 2>&1 || rc=$?
    grep -E "^[a-z_]+ +(thread|warp|block|peer_ptr) " "$work/bench.log"
    timeout 200 python3 tests/gpu/run_suite.py --dsl numba --launchers launcher --timeout 190 \
      --out "$work/suite" > "$work/suite.txt" 2>&1 || rc=$?
    head -2 "$work/suite.txt"; grep -E "FAIL" "$work/suite.txt"
    ;;
  latency-ab)  # one-thread launch bounds x unswitching (C++ and Numba), the Numba suite,
               # quick bandwidth beside C++
    bash bench/experiments/one_thread_bounds.sh "$work/bounds" || rc=$?
    timeout 200 python3 tests/gpu/run_suite.py --dsl numba --launchers launcher \
      --timeout 190 --out "$work/suite" > "$work/suite.txt" 2>&1 || rc=$?
    head -2 "$work/suite.txt"; grep -E "FAIL" "$work/suite.txt"
    timeout 150 python3 bench/run.py --quick --impls cpp,numba --no-compile-time --only put_bw,get_bw \
      --out "$work/bw.json" > "$work/bw.log" 2>&1 || rc=$?
    grep -E "^(put|get)_bw" "$work/bw.log"
    ;;
  group-rma)  # put/get bandwidth of C++, Numba and CuTe side by side (full sizes), then the Numba suite
    timeout 360 python3 bench/run.py --impls cpp,numba,cute --no-compile-time --only put_bw,get_bw \
      --out "$work/bw.json" > "$work/bw.log" 2>&1 || rc=$?
    grep -E "^(put|get)_bw" "$work/bw.log"
    timeout 200 python3 tests/gpu/run_suite.py --dsl numba --launchers launcher --timeout 190 \
      --out "$work/suite" > "$work/suite.txt" 2>&1 || rc=$?
    head -2 "$work/suite.txt"; grep -E "FAIL" "$work/suite.txt"
    ;;
  put-shapes)  # bench/experiments/put_shapes.py (Numba put variants) beside C++'s put bandwidth
    timeout 200 python3 bench/run.py --impls cpp --no-compile-time --only put_bw --out "$work/cpp.json" \
      > "$work/cpp.log" 2>&1 || rc=$?
    grep -E "^put_bw +(warp|block) +(4|16|64) KiB" "$work/cpp.log"
    timeout 300 python3 -m nvshmem_dsl.run -n 2 bench/experiments/put_shapes.py 2>&1 | grep -E "KiB|rror" || rc=$?
    ;;
  cold-compile)  # Numba's first-kernel compile, cold (fresh cache) three times and warm, beside
                 # nvcc's build of bench.cu (the host's speed)
    t0=$(date +%s%N); bash bench/cpp/build.sh > "$work/nvcc.log" 2>&1 || rc=$?
    echo "nvcc build: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    # the caches outside $work: the step's tarball must stay small enough to come back
    for i in 1 2 3; do
      rm -rf "/tmp/cold-cache$i"
      NVSHMEM_DSL_CACHE="/tmp/cold-cache$i" python3 bench/compile_time.py --impl numba --label cold 2>/dev/null \
        | tee -a "$work/compile_time.jsonl" || rc=$?
    done
    NVSHMEM_DSL_CACHE=/tmp/cold-cache3 python3 bench/compile_time.py --impl numba --label warm 2>/dev/null \
      | tee -a "$work/compile_time.jsonl" || rc=$?
    ;;
  cold-start)  # bench/experiments/cold_start.py (first: the first cold run of a fresh machine is part of
               # it), then the Numba suite (the machine's default cache still cold: the bitcode
               # prefetch at init and typing in real 2-PE runs)
    timeout 360 python3 bench/experiments/cold_start.py --reps ${REPS:-2} --variants ${VARIANTS:-default,init} \
      2>&1 | tee "$work/cold_start.txt" | tail -12 || rc=$?
    timeout 200 python3 tests/gpu/run_suite.py --dsl numba --launchers launcher --timeout 190 \
      --out "$work/suite" > "$work/suite.txt" 2>&1 || rc=$?
    head -2 "$work/suite.txt"; grep -E "FAIL" "$work/suite.txt"
    ;;
  suite)
    timeout 580 python3 tests/gpu/run_suite.py --out "$work" "$@" || rc=$?
    ;;
  pe-counts)  # all output in suite.txt; printed without the PASS/SKIP lines of single tests
    case ",${DSLS:-host,numba,cute}," in
      *,cute,*) python3 -c "import cutlass; print('cutlass', cutlass.__version__)" || rc=1 ;;
    esac
    timeout ${STEP_TIMEOUT:-580} python3 tests/gpu/run_suite.py --pes "${PES:-1,2,4,8}" --dsl "${DSLS:-host,numba,cute}" \
      --launchers launcher --out "$work" --timeout "${SUITE_TIMEOUT:-240}" "$@" > "$work/suite.txt" 2>&1 || rc=$?
    grep -vE "^ +(PASS|SKIP)  " "$work/suite.txt"
    ;;
  nv38)
    python3 -c "import nvshmem_dsl; v = nvshmem_dsl.versions(); print('NVSHMEM', v['nvshmem'])" | tee "$work/version.txt"
    grep -q "NVSHMEM 3.8" "$work/version.txt" || { echo "nv38: NVSHMEM 3.8 not found (carry .dw/nv38)"; rc=1; }
    timeout ${STEP_TIMEOUT:-560} python3 tests/gpu/run_suite.py --pes "${PES:-2}" --dsl "${DSLS:-numba}" --launchers launcher \
      --out "$work" --timeout "${SUITE_TIMEOUT:-300}" > "$work/suite.txt" 2>&1 || rc=$?
    grep -vE "^ +(PASS|SKIP)  " "$work/suite.txt"
    ;;
  core)
    ngpu=$(nvidia-smi -L | wc -l); per=$(( (2 + ngpu - 1) / ngpu ))
    # each job ends within NVSHMEM_DSL_CORE_GPU_TIMEOUT, a hung MPI rank with its tracebacks (rank_output.py)
    NVSHMEM_DSL_CORE_GPU_TIMEOUT=${NVSHMEM_DSL_CORE_GPU_TIMEOUT:-240} timeout ${STEP_TIMEOUT:-560} \
      python3 tests/gpu/mps.py --pes-per-gpu $per -- python3 -m pytest -q -m gpu -p no:cacheprovider \
      tests/gpu/test_core_gpu.py --junitxml="$work/core.xml" > "$work/core.txt" 2>&1 || rc=$?
    tail -30 "$work/core.txt"
    ;;
  coll-ab)  # device-side latency (collectives at 8 B, p/g/atomics) of C++ and the DSLs in IMPLS in one
            # run, with NVSHMEM's large routines out of line (auto) and inlined (none); one GPU: 2 PEs
            # share it under MPS (latency only: no bandwidth from a shared GPU)
    ngpu=$(nvidia-smi -L | wc -l); per=$(( (2 + ngpu - 1) / ngpu ))
    for m in ${OUTLINE_MODES:-auto none}; do
      NVSHMEM_DSL_OUTLINE=$m timeout ${AB_TIMEOUT:-280} python3 tests/gpu/mps.py --pes-per-gpu $per -- python3 bench/run.py \
        --quick --impls "${IMPLS:-cpp,numba,triton}" --no-compile-time --only coll_lat,p_lat,g_lat,amo_lat \
        --out "$work/coll-$m.json" > "$work/coll-$m.log" 2>&1 || rc=$?
      grep -E "^(coll_lat|p_lat|g_lat|atomic|bench )" "$work/coll-$m.log" | sed "s/^/$m /"
    done
    ;;
  split-ab|abi-ab|opt-ab|helpers-ab)  # collective latency of C++ and IMPLS (default cpp,numba) in one run for each value of an
             # environment variable ("default": unset): split-ab NVSHMEM_DSL_OUTLINE_SPLIT over SPLIT_MODES ("none
             # default": the objects' loops extracted or not), abi-ab NVSHMEM_DSL_ABI_PRESERVE over ABI_MODES ("off
             # default": CUDA's default ABI for NVSHMEM's objects, or the registers nvshmem_dsl.linker.abi says),
             # opt-ab NVSHMEM_DSL_OUTLINE_OPT over OPT_MODES ("light o3": how the objects' LLVM IR is optimised),
             # helpers-ab NVSHMEM_DSL_HELPERS over HELPERS_MODES ("build archive": NVSHMEM's transport helpers
             # built here or NVIDIA's compiled ones, nvshmem_dsl.linker.helper_archive);
             # with 3.8, carry .dw/nv38a (3.8's libnvshmem_device.a, which the C++ baseline links) beside
             # .dw/nv38; one GPU: 2 PEs share it under MPS (latency only)
    if [ "$step" = split-ab ]; then var=NVSHMEM_DSL_OUTLINE_SPLIT; modes=${SPLIT_MODES:-none default}
    elif [ "$step" = opt-ab ]; then var=NVSHMEM_DSL_OUTLINE_OPT; modes=${OPT_MODES:-light o3}
    elif [ "$step" = helpers-ab ]; then var=NVSHMEM_DSL_HELPERS; modes=${HELPERS_MODES:-build archive}
    else var=NVSHMEM_DSL_ABI_PRESERVE; modes=${ABI_MODES:-off default}
      python3 -c "from nvshmem_dsl.linker import abi, link; print('ptxas', link.ptxas(), abi._ptxas_major(link.ptxas()), 'nvJitLink ISA', link.nvjitlink_ptx_isa(), 'driver PTX 9.0', abi._driver_ptx_ok(), 'preserve', abi.preserve())" 2>&1 | tee "$work/abi.txt"
    fi
    ngpu=$(nvidia-smi -L | wc -l); per=$(( (2 + ngpu - 1) / ngpu )); build=""
    for m in $modes; do
      v=$m; [ "$m" = default ] && v=""
      env "$var=$v" timeout ${AB_TIMEOUT:-280} python3 tests/gpu/mps.py --pes-per-gpu $per -- python3 bench/run.py \
        --quick --impls "${IMPLS:-cpp,numba}" --no-compile-time --only "${ONLY:-coll_lat}" $build \
        --out "$work/$step-$m.json" > "$work/$step-$m.log" 2>&1 || rc=$?
      grep -E "^(coll_lat|p_lat|g_lat|atomic|build_time|bench )" "$work/$step-$m.log" | sed "s/^/$m /"
      build=--no-build
    done
    ;;
  tree-ab)
    [ -d .dw/ref/runtime ] || { echo "tree-ab: carry .dw/ref (runtime/ and generated/ of the other commit)"; rc=1; }
    rm -rf /tmp/pkg-ref && mkdir -p /tmp/pkg-ref && cp -r .dw/ref/runtime /tmp/pkg-ref/nvshmem_dsl &&
      cp -r .dw/ref/generated /tmp/pkg-ref/nvshmem_dsl/_generated
    runs=()
    for impl in ${IMPLS:-numba triton}; do runs+=("$impl" "$impl --init"); done
    for k in ${KERNELS:-coll_broadcast_thread coll_reduce_block}; do runs+=("numba --kernel $k"); done
    for r in $(seq "${REPS:-2}"); do
      for tree in ref this; do
        for run in "${runs[@]}"; do
          # an empty cache of ours and of Triton's, outside $work (the tarball stays small)
          rm -rf /tmp/tree-ab /tmp/tree-ab-triton; mkdir -p /tmp/tree-ab /tmp/tree-ab-triton
          pp=$PYTHONPATH; [ "$tree" = ref ] && pp=/tmp/pkg-ref:$PYTHONPATH
          opts=""; [[ "$run" == *" "* ]] && opts=" ${run#* }"
          # shellcheck disable=SC2086 # $run: the impl and its options
          PYTHONPATH=$pp NVSHMEM_DSL_CACHE=/tmp/tree-ab TRITON_CACHE_DIR=/tmp/tree-ab-triton timeout 120 \
            python3 bench/compile_time.py --impl $run --phases --label "$tree$opts" 2>/dev/null \
            | tee -a "$work/tree-ab.jsonl" | python3 bench/experiments/phases.py || rc=$?
        done
      done
    done
    ;;
  cold-objects)
    for m in ${WORKER_MODES:-0 default}; do
      v=$m; [ "$m" = default ] && v=""
      for k in ${KERNELS:-coll_broadcast_thread coll_broadcast_block coll_reduce_block coll_reduce_thread}; do
        for init in "" --init; do
          rm -rf /tmp/cold-objects; mkdir -p /tmp/cold-objects  # outside $work: the tarball stays small
          NVSHMEM_DSL_OBJECT_WORKERS=$v NVSHMEM_DSL_CACHE=/tmp/cold-objects timeout 120 python3 bench/compile_time.py \
            --impl numba --label "cold workers=$m${init:+ init}" --phases --kernel $k $init 2>/dev/null \
            | tee -a "$work/cold-objects.jsonl" | python3 bench/experiments/phases.py || rc=$?
        done
      done
    done
    ;;
  coll-overhead)  # bench/experiments/coll_overhead.py (where an out-of-line collective's time goes) with the
                  # step's arguments (e.g. --noinline --caps), 2 PEs; with .dw/nv38 carried on 3.8 and then the image's 3.4.5
    ngpu=$(nvidia-smi -L | wc -l); per=$(( (2 + ngpu - 1) / ngpu ))
    for v in ${NVSHMEM_HOME:+3.8} 3.4.5; do
      ( [ "$v" = 3.4.5 ] && unset NVSHMEM_HOME
        timeout ${AB_TIMEOUT:-250} python3 tests/gpu/mps.py --pes-per-gpu $per -- python3 -m nvshmem_dsl.run -n 2 \
          bench/experiments/coll_overhead.py "$@" > "$work/overhead-$v.txt" 2>&1 ) || rc=$?
      grep "us per" "$work/overhead-$v.txt" | sed "s/^/$v /"
    done
    ;;
  example-ab)  # one example (EXAMPLE, default cute_allreduce) at 2 PEs under variants (VARIANTS, default "default
               # default capped off"), each from an empty cache but a "default" that follows another (warm):
               # default: the code as it is; capped: block-scope objects kept at 64 registers under .abi_preserve too
               # (outline._scope_cap edited in /tmp/pkg); off: NVSHMEM_DSL_ABI_PRESERVE=off. CUDA_LAUNCH_BLOCKING=1.
    ngpu=$(nvidia-smi -L | wc -l); per=$(( (2 + ngpu - 1) / ngpu )); prev=""
    for v in ${VARIANTS:-default default capped off}; do
      [ "$v" = default ] && [ "$prev" = default ] || rm -rf /tmp/ex-cache
      cp runtime/linker/outline.py /tmp/pkg/nvshmem_dsl/linker/outline.py
      [ "$v" = capped ] && sed -i 's/ and abi.preserve() is None:$/:/' /tmp/pkg/nvshmem_dsl/linker/outline.py
      abi=""; [ "$v" = off ] && abi=off
      NVSHMEM_DSL_ABI_PRESERVE=$abi NVSHMEM_DSL_CACHE=/tmp/ex-cache CUDA_LAUNCH_BLOCKING=1 timeout ${EX_TIMEOUT:-150} \
        python3 tests/gpu/mps.py --pes-per-gpu $per -- python3 -m nvshmem_dsl.run -n 2 "examples/${EXAMPLE:-cute_allreduce}.py" \
        > "$work/$v-$RANDOM.txt" 2>&1; r=$?
      echo "== $v: rc=$r"; tail -4 "$(ls -t "$work"/$v-*.txt | head -1)"; prev=$v
    done
    cp runtime/linker/outline.py /tmp/pkg/nvshmem_dsl/linker/outline.py
    ;;
  one-pe)  # bench/run.py at one PE (no GPU shared: no MPS) for IMPLS (cpp,numba,triton) and ONLY (coll_bw): the DSLs'
           # code beside C++'s on the PE's own memory, not NVLink bandwidth; with 3.8, carry .dw/nv38a too
    timeout ${AB_TIMEOUT:-400} python3 bench/run.py --quick --nproc 1 --impls "${IMPLS:-cpp,numba,triton}" --no-compile-time \
      --only "${ONLY:-coll_bw}" --out "$work/one-pe.json" > "$work/one-pe.log" 2>&1 || rc=$?
    grep -E "^(coll_|put_bw|get_bw|p_lat|g_lat|atomic|build_time|bench )" "$work/one-pe.log"
    ;;
  experiment)
    ngpu=$(nvidia-smi -L | wc -l); per=$(( (2 + ngpu - 1) / ngpu ))
    script=${1:?experiment script}; shift
    timeout ${AB_TIMEOUT:-280} python3 tests/gpu/mps.py --pes-per-gpu $per -- python3 -m nvshmem_dsl.run -n 2 \
      "bench/experiments/$script" "$@" > "$work/${script%.py}.txt" 2>&1 || rc=$?
    tail -40 "$work/${script%.py}.txt"
    ;;
  comm)  # bench/comm_run.py: the communication kernels of every DSL beside their C++ twins and NVSHMEM's
         # collectives (args go to comm_run.py, e.g. --nproc 2 --impls cpp,numba); one GPU: under MPS
    ngpu=$(nvidia-smi -L | wc -l); np=${NPROC:-2}; per=$(( (np + ngpu - 1) / ngpu ))
    timeout 560 python3 tests/gpu/mps.py --pes-per-gpu $per -- python3 bench/comm_run.py --nproc $np \
      --out "$work/comm.json" "$@" > "$work/comm.log" 2>&1 || rc=$?
    grep -v "^  comm_" "$work/comm.log" | tail -80
    ;;
  limited-mpg)
    timeout 200 python3 tests/gpu/run_suite.py --pes 2 --pes-per-gpu 2 --no-mps --dsl limited --launchers launcher \
      --out "$work" --timeout 190 > "$work/suite.txt" 2>&1 || rc=$?
    cat "$work/suite.txt"
    ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
tar -czf "$OUT/$step.tar.gz" -C /tmp "gpu-$step" 2>/dev/null
echo "step $step: rc=$rc"
exit $rc
