"""Run a command with its stdout in a file of its own rank: ``python rank_output.py DIR -- cmd ...``
writes ``DIR/rank<N>.out`` (N from the MPI launcher's environment).  tests/gpu/test_core_gpu.py
starts the MPI seeds as ``mpirun -n 2 python rank_output.py DIR -- python prog.py``, so that each
PE's output is read whole, whatever the MPI's tagging of its output lines does."""

import os
import sys

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")


def main() -> None:
    out, sep, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    if sep != "--" or not cmd:
        raise SystemExit("usage: rank_output.py DIR -- command ...")
    rank = next((os.environ[v] for v in RANK_VARS if v in os.environ), None)
    if rank is None:
        raise SystemExit(f"rank_output.py: no rank in the environment ({', '.join(RANK_VARS)})")
    fd = os.open(os.path.join(out, f"rank{int(rank)}.out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.close(fd)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
