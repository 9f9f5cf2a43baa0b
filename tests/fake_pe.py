"""A PE program for CPU tests of how PEs end (tests/test_pe_exit.py, tests/test_launcher.py): it
initialises nvshmem_dsl with NVSHMEM's C calls intercepted (no GPU, no NVSHMEM job), as PE
``$NVSHMEM_DSL_RANK`` of ``$NVSHMEM_DSL_NRANKS`` under ``python -m nvshmem_dsl.run``, as the MPI rank
under mpirun (mpi mode: mpi4py), else as the last PE of ``$FAKE_PE_NRANKS`` (default 2; explicit
mode), allocates a symmetric buffer, and ends as its argument says:

    python fake_pe.py ENDING          every PE ends so
    python fake_pe.py 1:raise,0:barrier   PE 1 raises, PE 0 waits in a barrier (for ever: no peer comes)

Endings: normal, raise, sys_exit (3), sys_exit_text, sys_exit_0, os_exit (4), keyboard, caught_exit
(sys.exit(7) caught, then a normal end), finalize, barrier, skip (finalize while the others wait in a
barrier); ``with_<ending>`` runs it inside ``with nvshmem_dsl.init():``. ``HANG_FINALIZE=1``: NVSHMEM's
finalize never returns (a peer that never arrives). The intercepted finalize and frees print
``C call: <symbol>``. ``FAKE_PE_NO_THREADS_AT_EXIT=1``: no thread can start at exit, as in Python
3.12+. ``FAKE_PE_OUT=<dir>``: the PE writes its output to ``<dir>/rank<k>.txt`` (mpirun
may lose the last lines of a rank that aborts the job). Under a launcher a PE whose ending is not ``barrier`` waits a second first,
for the others to be waiting.
"""

import atexit
import os
import sys
import threading
import time

import nvshmem_dsl as nv
from nvshmem_dsl._generated.constants import STRUCT_SIZES
from nvshmem_dsl.host import _cuda, _lib

_RANK_VARS = {"NVSHMEM_DSL_RANK": "NVSHMEM_DSL_NRANKS", "PMI_RANK": "PMI_SIZE",
              "OMPI_COMM_WORLD_RANK": "OMPI_COMM_WORLD_SIZE"}  # our launcher, MPICH, Open MPI
LAUNCHED = next((v for v in _RANK_VARS if v in os.environ), None)
NRANKS = int(os.environ[_RANK_VARS[LAUNCHED]] if LAUNCHED else os.environ.get("FAKE_PE_NRANKS", "2"))
RANK = int(os.environ[LAUNCHED]) if LAUNCHED else NRANKS - 1
RESPONSES = {"nvshmem_my_pe": RANK, "nvshmem_n_pes": NRANKS, "nvshmem_team_n_pes": 1,
             "nvshmem_calloc": 0x7D0000000000, "nvshmem_malloc": 0x7D0000100000}


def intercept(symbol, args):
    if symbol in ("nvshmemx_hostlib_finalize", "nvshmem_free"):
        print("C call:", symbol, flush=True)
        if symbol == "nvshmemx_hostlib_finalize" and os.environ.get("HANG_FINALIZE"):
            time.sleep(600)
    if symbol == "nvshmem_barrier_all":
        print("waiting in barrier_all", flush=True)
        time.sleep(600)  # the peer this PE waits for never comes
    return RESPONSES.get(symbol, 0)


def _refuse_threads():
    def start(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    threading.Thread.start = start


def work(ending):
    if os.environ.get("FAKE_PE_NO_THREADS_AT_EXIT"):  # as Python 3.12+ at exit (runs before our exit hook)
        atexit.register(_refuse_threads)
    b = nv.buffer(256, check=False)  # a live symmetric allocation, as a tensor would be
    print("initialized PE", nv.my_pe(), "of", nv.n_pes(), flush=True)
    if LAUNCHED and ending != "barrier":
        time.sleep(1.0)  # until the other PEs wait in their barrier
    if ending == "raise":
        raise RuntimeError("injected failure")
    if ending == "sys_exit":
        sys.exit(3)
    if ending == "sys_exit_text":
        sys.exit("bad input, giving up")
    if ending == "sys_exit_0":
        sys.exit(0)
    if ending == "os_exit":
        os._exit(4)
    if ending == "keyboard":
        raise KeyboardInterrupt
    if ending == "caught_exit":
        try:
            sys.exit(7)
        except SystemExit:
            print("caught SystemExit", flush=True)
    if ending == "barrier":
        nv.barrier_all()
    if ending in ("finalize", "skip"):
        b.free()
        nv.finalize()


def main():
    if os.environ.get("FAKE_PE_OUT"):  # this rank's output straight into a file of its own
        with open(os.path.join(os.environ["FAKE_PE_OUT"], f"rank{RANK}.txt"), "ab") as out:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
    spec = sys.argv[1]
    if ":" in spec:
        ending = dict(item.split(":") for item in spec.split(","))[str(RANK)]
    else:
        ending = spec
    _lib.lib()
    _lib._interceptor = intercept
    _cuda.device_count = lambda: 1
    _cuda.set_device = lambda i: f"device {i}"
    args = {} if LAUNCHED else {"rank": RANK, "nranks": NRANKS, "uid": bytes(STRUCT_SIZES["nvshmemx_uniqueid_t"])}
    if ending.startswith("with_"):
        with nv.init(**args):
            work(ending[5:])
    else:
        nv.init(**args)
        work(ending)
    print("main program done", flush=True)


if __name__ == "__main__":
    main()
