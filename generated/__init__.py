"""Files written by `make generate` from spec/ (do not edit them by hand).

This package's modules and data are read by nvshmem_dsl's runtime and DSL layers.
"""
