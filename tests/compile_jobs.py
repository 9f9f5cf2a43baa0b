"""How many processes the CPU tests that compile many kernels (tests/test_triton_api.py,
tests/test_cute_api.py, tests/test_cute_gpu_kernels.py) compile them in: ``$NVSHMEM_DSL_TEST_JOBS``,
else the test's own default (1: in the test's process, where the test can)."""
from __future__ import annotations

import os

ENV = "NVSHMEM_DSL_TEST_JOBS"


def compile_jobs(default: int) -> int:
    """``$NVSHMEM_DSL_TEST_JOBS`` (a whole number >= 1), else ``default`` (at least 1)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return max(1, default)
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{ENV}={value!r}: expected a whole number >= 1")
    return int(value)
