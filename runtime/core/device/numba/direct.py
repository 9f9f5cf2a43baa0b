"""PE queries, all-PE barriers, signals and the TMA shared-memory budget from Numba kernels
(``nvshmem.core.device.numba.direct``).

``signal_wait(signal_var, signal_op, signal_val)`` (``signal_op`` a ``ComparisonType``) is
nvshmem_dsl's ``signal_wait_until``; ``give_smem(smem)`` takes the whole C-contiguous
shared-memory array and lends ``smem.nbytes`` of it (nvshmem_dsl's ``give_smem(smem, size)``),
as NVSHMEM4Py's does; the rest are nvshmem_dsl's functions of the same name.
"""

from numba.core import cgutils, errors
from numba.core.typing import signature
from numba.cuda import types
from numba.cuda.extending import _intrinsic

import nvshmem_dsl.numba as _nv
from nvshmem_dsl.core._bindtypes import Smem_amount as SmemAmount  # NVSHMEM4Py's: the bindings' enum

from .. import DIRECT, reexport

__all__ = ["SmemAmount", "ask_smem", "give_smem", "release_smem", *DIRECT]

reexport(globals(), _nv, ["ask_smem", "release_smem", *DIRECT])


def _give_smem(typingctx, smem):
    """NVSHMEM4Py's ``give_smem(smem)``: lend the shared-memory array ``smem`` (C-contiguous, the
    whole dynamic allocation, 16-byte aligned, at least ``ask_smem(SMEM_MINIMUM)`` bytes) to
    NVSHMEM's TMA transfers for this block; ``release_smem()`` before the block exits."""
    if not isinstance(smem, types.Array) or smem.layout != "C":
        raise errors.TypingError(f"nvshmem_dsl.core.device.numba.give_smem: argument 'smem' must be a C-contiguous "
                                 f"shared-memory array, got {smem}")
    native_sig, native_codegen = _nv.give_smem._defn(typingctx, smem, types.uint64)
    sig = signature(types.void, smem)

    def codegen(context, builder, sig_, llargs):
        ary = context.make_array(smem)(context, builder, llargs[0])
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(smem.dtype)))
        nbytes = builder.mul(ary.nitems, itemsize)
        # nvshmem_dsl's intrinsics take their arguments as one star-args tuple
        native_codegen(context, builder, native_sig, [cgutils.pack_struct(builder, [llargs[0], nbytes])])
        return context.get_dummy_value()

    return sig, codegen


_give_smem.__name__ = _give_smem.__qualname__ = "give_smem"
give_smem = _intrinsic(target="cuda")(_give_smem)
give_smem.__doc__ = _give_smem.__doc__
