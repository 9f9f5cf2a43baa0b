"""The device-code linker the DSL front-ends share (Numba, CuTe, Triton).

* :mod:`.store` NVSHMEM's device bitcode split once into a cached piece store, and the closure
  of the functions a kernel calls (:func:`.store.api_module`);
  :mod:`.pieces` the text-level splitting behind it, :mod:`.bodies` the partial parse of
  function bodies, :mod:`.nvvm` the copy libNVVM (CuTe) can read; :mod:`.cache` what the cache
  directory holds and its pruning;
* :mod:`.rewrites` the rewrites applied to NVSHMEM's code before it is inlined;
* :mod:`.outline` hybrid linking: which functions are inlined and which are linked out of line
  from cached relocatable objects, and those objects;
* :mod:`.link` what every front-end's link step shares (declarations, targets, checks);
* :mod:`.module_init` NVSHMEM's per-module initialisation of every loaded module, and the hooks
  the front-ends call on load and unload;
* :mod:`._llvm` llvmlite helpers.
"""
