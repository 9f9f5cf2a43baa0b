"""The device-code linker the DSL front-ends share (Numba, CuTe, Triton): a pipeline of stages.

Read it top-down, in the order of :data:`STAGES`; a module imports only modules after it there
(``tests/test_linker_layers.py`` checks it), so no import circle is possible:

* interface: what the rest of the package calls; the modules outside the linker (the front-ends,
  the host, ``__main__``) import from the linker only these, and of each only the names of its
  ``__all__`` (``tests/test_linker_layers.py`` checks it).  :mod:`.pipeline` (each function a whole
  step of a kernel's link: Numba's and Triton's llvmlite module in, NVSHMEM linked and inlined,
  :func:`~.pipeline.link_nvshmem`; the out-of-line calls' objects, :func:`~.pipeline.objects`;
  the cubin nvJitLink links of the PTX and them, :func:`~.pipeline.link_cubin`; the outlining mode
  and its override), :mod:`.nvvm` (CuTe: the bitcode libNVVM links,
  :func:`~.nvvm.kernel_bitcode_for`), :mod:`.info` (what ``python -m nvshmem_dsl`` shows: how the
  objects are built, the cache), :mod:`.module_init` and :mod:`.hooks` (NVSHMEM's initialisation
  of every loaded module);
* plan (:mod:`.plan`): which NVSHMEM functions a kernel inlines and which it calls out of line: the
  criterion, ``NVSHMEM_DSL_OUTLINE``, the per-kernel override;
* objects: the out-of-line functions' cached relocatable objects.  :mod:`.outline` (which objects a
  link needs, their cache, optimisation tiers, background builds, register caps), :mod:`.calls`
  (what PTX calls; NVSHMEM's helpers specialised on their calls' constant modes; NVIDIA's compiled
  helpers asked), :mod:`.object_workers` (the LLVM step in worker processes), :mod:`.object_llvm`
  (that step), :mod:`.loop_split` (loops of the largest made functions), :mod:`.abi` (the registers
  a call preserves);
* bodies: NVSHMEM's code.  :mod:`.store` (the bitcode split once into a cached piece store, and the
  closure of the functions a kernel calls), :mod:`.cache` (what the cache directory holds, its
  pruning), :mod:`.helper_archive` (NVIDIA's compiled transport helpers), :mod:`.store_build`
  (the store's build, in processes), :mod:`.store_file` (its file), :mod:`.pieces` (the text-level
  splitting), :mod:`.bodies` (the partial parse of function bodies);
* rewrites (:mod:`.rewrites`): NVSHMEM's code rewritten before it is inlined;
* link (:mod:`.link`): ptxas, nvJitLink, the ELF reader, the toolchain's PTX ISA;
* shared: :mod:`._llvm` (llvmlite helpers), :mod:`.code_env` (the names of the variables that change
  the code).
"""

#: ``(stage, modules)`` in pipeline order, each stage's modules in import order: a module imports
#: only the modules after it (its stage's later ones, and later stages').
STAGES = (
    ("interface", ("pipeline", "nvvm", "info", "module_init", "hooks")),
    ("plan", ("plan",)),
    ("objects", ("outline", "calls", "object_workers", "object_llvm", "loop_split", "abi")),
    ("bodies", ("store", "cache", "helper_archive", "store_build", "store_file", "pieces", "bodies")),
    ("rewrites", ("rewrites",)),
    ("link", ("link",)),
    ("shared", ("_llvm", "code_env")),
)
