"""nvshmem_dsl: NVSHMEM for Python GPU DSLs."""
