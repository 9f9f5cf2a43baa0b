"""What the communication-kernel benchmark measures, said once for bench/comm_bench.py (the DSLs,
NVSHMEM's collectives) and bench/comm_run.py (which hands the C++ twins their plans).

A row's size is nccl-tests' convention: the bytes of the all-reduce's vector, of the all-gather's
output and of the reduce-scatter's input (all PEs' parts together).
"""
from __future__ import annotations

from nvshmem_dsl.kernels._plan import KINDS  # noqa: F401 - the kernels, as the protocol names them

#: Latency sizes (bytes), and bandwidth sizes (only with one PE per GPU: shared GPUs are no benchmark).
LAT_BYTES = (8, 64, 512, 4096, 32768, 65536, 262144, 1 << 20)
BW_BYTES = (16 << 20, 64 << 20, 256 << 20)


def elements(kind: str, nbytes: int, itemsize: int, npes: int) -> int:
    """The kernel's n for a row of ``nbytes``: the all-reduce's elements, or one PE's part's."""
    n = max(1, nbytes // itemsize)
    return n if kind in ("one_shot", "two_shot") else max(1, n // npes)
