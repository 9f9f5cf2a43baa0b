"""NVSHMEM device functions for Numba-CUDA kernels.

    import nvshmem_dsl.numba as nv

    @cuda.jit
    def ring(dst, src):
        nv.put_block(dst, src, (nv.my_pe() + 1) % nv.n_pes())   # dst, src[, nelems], pe

Every function of the generated API (`nvshmem_dsl._dispatch.table`, from the spec)
dispatches on the element dtype of its arrays; `c` holds every device function under its
C name. Kernels that call NVSHMEM are linked with the NVSHMEM bitcode and get it inlined
(`_linker`), but for the large routines (collectives, barriers), which they call in objects
compiled once (`nvshmem_dsl.linker.outline`; `with nv.outline("none"):` around a kernel's compilation
inlines them too); each loaded module is initialised for NVSHMEM before its first launch by the
host runtime's hook (installed at `nvshmem_dsl.init()`). Kernels that call no NVSHMEM
function compile exactly as before.
"""
from .. import _dispatch
from .._optable import api_doc as _api_doc
from .._generated.constants import Cmp, SignalOp, SmemAmount, Team
from . import c
from ._calls import make_api
from ._intrinsics import declare_device_function
from ._linker import (
    add_module_finalize_hook, add_module_init_hook, remove_module_finalize_hook,
    remove_module_init_hook, set_module_init_hook,
)
from ._views import multicast, peer, window
from ..linker.pipeline import override as outline

DISPATCH = _dispatch.table("numba")
# The generated API: one intrinsic per DSL function of the spec.
globals().update({_name: make_api(_name, DISPATCH[_name], _api_doc(_name, DISPATCH[_name], "array"))
                  for _name in _dispatch.FUNCTIONS})

__all__ = [*_dispatch.FUNCTIONS, "c", "peer", "multicast", "window", "outline", "Cmp", "SignalOp", "SmemAmount", "Team", "DISPATCH",
           "declare_device_function", "add_module_init_hook", "add_module_finalize_hook",
           "remove_module_init_hook", "remove_module_finalize_hook", "set_module_init_hook"]

from ..linker import module_init as _module_init  # noqa: E402

_module_init.wire_if_running()
