"""Every NVSHMEM device function under its C name, for experts: `c.nvshmem_int_p(dst, v, pe)`.

Arguments are exactly the C function's: arrays (or their element 0) or pointer values
(``ffi.from_buffer(a)``, a ``CPointer``) for pointers, scalars converted to the C types, no
defaults and no dtype dispatch. The list comes from the op table.
"""
from .. import _optable
from ._calls import c_function

# Numba resolves module attributes from the module's namespace, so every name is bound here.
globals().update({_symbol: c_function(_symbol) for _symbol in _optable.device_ops()})
__all__ = sorted(_optable.device_ops())
