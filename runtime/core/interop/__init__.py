"""Array-library helpers of ``nvshmem_dsl.core`` (``nvshmem.core.interop``): CuPy arrays
(:mod:`.cupy`), torch tensors (:mod:`.torch`) and CuTe DSL tensors (:mod:`.cute`, imported on
demand as in NVSHMEM4Py)."""
