"""The PE program of tests/gpu/test_faults_gpu.py: initialise, allocate symmetric arrays, then one PE
(the last, "the victim") fails as told while the others go on with what it abandons:

    python fault_pe.py FAULT TOKEN      (under nvshmem_dsl.run, torchrun or mpirun)

exception / sys_exit / os_exit   the victim raises, sys.exit(3)s or os._exit(4)s; the others wait in
                                 barrier_all
kill_put                         every PE puts to the next in a loop; the victim is SIGKILLed in it
kill_collective                  every PE loops over a sum reduction; the victim is SIGKILLed in it
kill_signal_wait                 the victim waits for a signal nobody sends and is SIGKILLed there;
                                 the others wait in barrier_all
skip_collective                  the others call a sum reduction that the victim skips; it finalizes
                                 (bounded by NVSHMEM_DSL_FINALIZE_TIMEOUT)
size_mismatch                    the victim allocates 256 more elements than the others

Each PE prints ``READY pe=<k> pid=<pid>`` once initialised and allocated, and ``FAULT pe=<k>
t=<time.time()>`` right before the fault (TOKEN is only there for the test to find every process of
the job in /proc). A PE that is not ended keeps waiting: the test measures how long the job takes to end.
"""

import os
import signal
import sys
import threading
import time

import nvshmem_dsl as nv
from nvshmem_dsl.host import _cuda

KILL_AFTER_S = 1.0  #: the victim's SIGKILL comes this long after it starts its loop or wait
LOOP_S = 120.0  #: a survivor's put loop ends after this long (the job should have ended long before)


def fault_line(me: int) -> None:
    print(f"FAULT pe={me} t={time.time():.3f}", flush=True)


def kill_soon(me: int) -> None:
    def fire():
        time.sleep(KILL_AFTER_S)
        fault_line(me)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=fire, daemon=True).start()


def main() -> None:
    fault = sys.argv[1]
    nv.init()
    me, n = nv.my_pe(), nv.n_pes()
    victim = me == n - 1
    if fault == "size_mismatch":
        print(f"READY pe={me} pid={os.getpid()}", flush=True)
        fault_line(me)
        nv.zeros(1024 + (256 if victim else 0), "float32")  # raises on every PE: the sizes differ
        raise SystemExit(f"PE {me}: the allocation of different sizes was not refused")
    x = nv.zeros(1024, "float32")  # symmetric arrays alive when the job fails
    local = nv.zeros(1024, "float32")
    src, dst = nv.zeros(8, "int64"), nv.zeros(8, "int64")
    sig = nv.zeros(1, "uint64")
    nv.barrier_all()
    print(f"READY pe={me} pid={os.getpid()}", flush=True)

    if fault in ("exception", "sys_exit", "os_exit"):
        if victim:
            time.sleep(0.5)  # the others are in their barrier
            fault_line(me)
            if fault == "exception":
                raise RuntimeError(f"injected fault on PE {me}")
            if fault == "sys_exit":
                sys.exit(3)
            os._exit(4)
        nv.barrier_all()
    elif fault == "kill_put":
        if victim:
            kill_soon(me)
        end = time.monotonic() + LOOP_S
        while time.monotonic() < end:
            nv.put(x, local, (me + 1) % n)
            nv.quiet()
        nv.barrier_all()
    elif fault == "kill_collective":
        if victim:
            kill_soon(me)
        while True:
            nv.reduce(nv.Team.TEAM_WORLD, dst, src, "sum")
    elif fault == "kill_signal_wait":
        if victim:
            kill_soon(me)
            nv.signal_wait_until(sig, "eq", 1)  # nobody sends it
            _cuda.synchronize()
        nv.barrier_all()
    elif fault == "skip_collective":
        if victim:  # straight to finalize (free() is collective too), whose wait is bounded
            time.sleep(0.5)
            fault_line(me)
            nv.finalize()
            print(f"PE {me}: finalized", flush=True)
            return
        nv.reduce(nv.Team.TEAM_WORLD, dst, src, "sum")
    else:
        raise SystemExit(f"fault_pe.py: unknown fault {fault!r}")
    for a in (sig, dst, src, local, x):
        nv.free(a)
    nv.finalize()
    print(f"PE {me}: finalized", flush=True)


if __name__ == "__main__":
    main()
