"""Whether this machine has NVSHMEM's sm_90 device bitcode (the CPU tests that link or build objects need it)."""
import pytest

from nvshmem_dsl.linker import store

try:
    store._default_bitcode(90)
    HAVE_BITCODE = True
except FileNotFoundError:
    HAVE_BITCODE = False
needs_bitcode = pytest.mark.skipif(not HAVE_BITCODE, reason="no NVSHMEM device bitcode")
