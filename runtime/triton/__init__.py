"""NVSHMEM for Triton kernels.

Inside ``@triton.jit`` code::

    import nvshmem_dsl.triton as nv

    pe = (nv.my_pe() + 1) % nv.n_pes()
    nv.put_block(dst, src, n, pe)              # dst, src, nelems, pe: pointers + an explicit count
    nv.p(flags + 3, value, pe)                 # one element: pointer arithmetic
    old = nv.atomic_fetch_add(counter, 1, pe)  # returns a Triton scalar
    nv.signal_wait_until(sig, nv.CMP_GE, 1)
    peer = nv.peer(buf, pe)                    # load/store address of a peer's buffer
    nv.c.nvshmem_putmem(dst, src, nbytes, pe)  # any C function by its C name

and launch as usual (``kernel[grid](...)``, autotuning and Triton's cache included; a kernel that
synchronises PEs is autotuned with ``triton.autotune(..., do_bench=nv.do_bench())``, which launches
every config alike on every PE and keeps one config for all: :mod:`._autotune`): kernels
that call NVSHMEM are linked with the NVSHMEM device code they call, inlined
(:mod:`nvshmem_dsl.triton._compile`), and each loaded kernel module is initialised for NVSHMEM
before its first launch once :func:`nvshmem_dsl.init` has run. Kernels launched from functions
that ``torch.compile`` compiles work too (:mod:`._inductor`: what PyTorch's Inductor needs to see
of NVSHMEM calls).

The device functions are generated from the spec (``nvshmem_dsl._dispatch.table``); each
dispatches on the element type of its first pointer argument; the calling conventions are those
of :mod:`nvshmem_dsl.numba` and :mod:`nvshmem_dsl.cute`, with explicit element counts (see
:mod:`nvshmem_dsl.triton._calls`, which also says which threads of a program make each call).
Importing this package imports Triton and installs the compile hooks; it needs no GPU.
"""

from nvshmem_dsl._generated.constants import Cmp, SignalOp, SmemAmount, Team
from nvshmem_dsl import _dispatch
from nvshmem_dsl._optable import api_doc as _api_doc
from nvshmem_dsl.errors import NvshmemTypeError

import triton.language as _tl

from . import c
from ._args import TritonPointer, pointer
from ._autotune import do_bench
from ._calls import make_api, multicast, peer
from ._compile import (
    NvshmemLinkError, add_module_finalize_hook, add_module_init_hook, install,
    remove_module_finalize_hook, remove_module_init_hook, set_module_init_hook, uninstall,
)
from ..linker.pipeline import override as outline

DISPATCH = _dispatch.table("triton")
# The generated API: one Triton builtin per DSL function of the spec.
globals().update({_name: make_api(_name, DISPATCH[_name],
                                  _api_doc(_name, DISPATCH[_name], "pointer", count_default=False))
                  for _name in _dispatch.FUNCTIONS})

# The constants as Triton constexprs, usable in kernels: nv.CMP_GE, nv.SIGNAL_ADD, nv.TEAM_WORLD.
_CONSTANTS = {m.name: _tl.constexpr(int(m)) for group in (Cmp, SignalOp, Team, SmemAmount)
              for m in group}
globals().update(_CONSTANTS)

__all__ = [
    *_dispatch.FUNCTIONS,
    *_CONSTANTS,
    "DISPATCH",
    "c",
    "peer",
    "multicast",
    "pointer",
    "TritonPointer",
    "outline",
    "do_bench",
    "install",
    "uninstall",
    "NvshmemLinkError",
    "NvshmemTypeError",
    "add_module_init_hook",
    "add_module_finalize_hook",
    "remove_module_init_hook",
    "remove_module_finalize_hook",
    "set_module_init_hook",
    "SignalOp",
    "Cmp",
    "Team",
    "SmemAmount",
]

install()

from ..linker import module_init as _module_init  # noqa: E402

_module_init.wire_if_running()
