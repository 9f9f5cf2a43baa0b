"""NVSHMEM for CuTe DSL kernels.

Inside ``@cute.kernel`` / ``@cute.jit`` device code::

    import nvshmem_dsl.cute as nv

    nv.put_nbi_block(dst, src, pe)            # count = min(size(dst), size(src))
    nv.p(flags, 3, value, pe)                 # one element: tensor + index
    old = nv.atomic_fetch_add(counter, 1, pe) # returns a CuTe scalar
    nv.signal_wait_until(sig, nv.Cmp.CMP_GE, 1)
    peer = nv.peer_tensor(buf, pe)            # load/store view of a peer's buffer
    nv.c.nvshmem_putmem(dst, src, nbytes, pe) # any C function by its C name

and compile with :func:`compile` (``cute.compile`` with an explicit GPU arch and
the NVSHMEM module-init hook), e.g. ``nv.compile(host_fn, *args, arch="sm_90a")``.
NVSHMEM's collectives and barriers are linked from cached objects (hybrid linking,
``nvshmem_dsl.linker.outline``); ``with nv.outline("none"):`` around a compile inlines them.

The device functions are generated from the spec (``nvshmem_dsl._dispatch.table``);
each dispatches on the element type of its first tensor argument; the calling
conventions are those of :mod:`nvshmem_dsl.numba` (see
:mod:`nvshmem_dsl.cute._calls`). Importing this package needs neither a GPU nor
CuTe DSL itself; tracing a kernel needs ``nvidia-cutlass-dsl``.
"""

from nvshmem_dsl._generated.constants import Cmp, SignalOp, SmemAmount, Team
from nvshmem_dsl import _dispatch
from nvshmem_dsl._optable import api_doc as _api_doc

from . import c
from ._calls import make_api, mc_tensor, peer_tensor

# The names nvshmem_dsl.numba uses for the same views.
peer = peer_tensor
multicast = mc_tensor
from ._compile import (
    ArchNotSetError, CompiledKernel, compile, compile_to_ptx, set_module_finalize_hook,
    set_module_init_hook,
)
from ..errors import NvshmemTypeError
from ..linker.pipeline import override as outline

DISPATCH = _dispatch.table("cute")
# The generated API: one function per DSL function of the spec.
globals().update({_name: make_api(_name, DISPATCH[_name], _api_doc(_name, DISPATCH[_name], "tensor"))
                  for _name in _dispatch.FUNCTIONS})

__all__ = [
    *_dispatch.FUNCTIONS,
    "DISPATCH",
    "c",
    "peer_tensor",
    "mc_tensor",
    "peer",
    "multicast",
    "compile",
    "compile_to_ptx",
    "outline",
    "CompiledKernel",
    "ArchNotSetError",
    "set_module_init_hook",
    "set_module_finalize_hook",
    "NvshmemTypeError",
    "SignalOp",
    "Cmp",
    "Team",
    "SmemAmount",
]

from ..linker import module_init as _module_init  # noqa: E402

_module_init.wire_if_running()
