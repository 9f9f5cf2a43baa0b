"""Run a program as one rank of ``python -m nvshmem_dsl.run`` (which starts Python scripts only).

    python -m nvshmem_dsl.run -n 2 bench/cpp/exec.py bench/cpp/build/bench_cpp --uid-file F ...

The rank's environment (NVSHMEM_DSL_RANK, NVSHMEM_DSL_NRANKS, NVSHMEM_DSL_LOCAL_RANK, ...)
is passed on unchanged; this process is replaced by the program (same pid, same process
group, so the launcher's signals reach it).
"""

import os
import sys

if len(sys.argv) < 2:
    sys.exit("usage: exec.py PROGRAM [ARGS...]")
os.execv(sys.argv[1], sys.argv[1:])
