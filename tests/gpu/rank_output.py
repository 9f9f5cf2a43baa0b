"""Run a command with its output in files of its own rank: ``python rank_output.py DIR -- cmd ...``
writes ``DIR/rank<N>.out`` (stdout) and ``DIR/rank<N>.err`` (stderr), N from the MPI launcher's
environment.  tests/gpu/test_core_gpu.py starts the MPI seeds as ``mpirun -n 2 python
rank_output.py DIR -- python prog.py``, so that each PE's output is read whole, whatever the MPI's
tagging of its output lines does.

With ``RANK_OUTPUT_TIMEOUT=<seconds>`` in the environment a command still running after that long
is stopped with SIGABRT, which makes a Python command (run with ``PYTHONFAULTHANDLER=1``, set
here) write every thread's traceback into its ``.err`` file: a hung PE says where it hangs, and no
PE outlives the job (a PE left attached to an MPS server keeps the server from stopping).  The
exit status is then 124, as timeout(1)'s.
"""

import os
import signal
import subprocess
import sys

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
TIMED_OUT = 124
GRACE_S = 10  # for the tracebacks to be written after SIGABRT


def main() -> int:
    out, sep, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    if sep != "--" or not cmd:
        raise SystemExit("usage: rank_output.py DIR -- command ...")
    rank = next((os.environ[v] for v in RANK_VARS if v in os.environ), None)
    if rank is None:
        raise SystemExit(f"rank_output.py: no rank in the environment ({', '.join(RANK_VARS)})")
    timeout = float(os.environ.get("RANK_OUTPUT_TIMEOUT", "0")) or None
    base = os.path.join(out, f"rank{int(rank)}")
    with open(base + ".out", "wb") as stdout, open(base + ".err", "wb") as stderr:
        child = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=dict(os.environ, PYTHONFAULTHANDLER="1"))
        for sig in (signal.SIGTERM, signal.SIGINT):  # the launcher stopping the job stops the command
            signal.signal(sig, lambda signum, frame: child.send_signal(signum))
        try:
            return child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stderr.write(f"\nrank_output.py: still running after {timeout:g} s: SIGABRT\n".encode())
            stderr.flush()
            child.send_signal(signal.SIGABRT)
            try:
                child.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            return TIMED_OUT


if __name__ == "__main__":
    sys.exit(main())
