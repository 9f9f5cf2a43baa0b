"""Host side: arrays as Triton kernel arguments.

Triton passes any object with a ``data_ptr()`` method and a ``dtype`` as a pointer to its
elements. torch tensors are such objects; :func:`pointer` makes one of every other device array
nvshmem_dsl knows (cupy, numba device arrays, nvshmem_dsl buffers, DLPack arrays), without a
copy, so that symmetric arrays from :func:`nvshmem_dsl.array` of any library can be given to
``kernel[grid](...)``.
"""

from __future__ import annotations

from typing import Any

from ..host import _arrays

__all__ = ["pointer", "TritonPointer"]


class TritonPointer:
    """A device address with an element type, as Triton takes a kernel argument
    (``data_ptr()``, ``dtype``); keeps the array it points into alive."""

    __slots__ = ("_ptr", "dtype", "base")

    def __init__(self, ptr: int, dtype: str, base: Any = None) -> None:
        self._ptr = int(ptr)
        self.dtype = dtype  # numpy-style name: Triton reads str(dtype)
        self.base = base

    def data_ptr(self) -> int:
        return self._ptr

    def __repr__(self) -> str:
        return f"TritonPointer(0x{self._ptr:x}, {self.dtype})"


def pointer(x: Any, offset: int = 0) -> Any:
    """``x`` as a Triton pointer argument to its element ``offset``: torch tensors (offset 0)
    are returned as they are; other device arrays are wrapped (:class:`TritonPointer`)."""
    if offset == 0 and _arrays.library_of(x) == "torch":
        return x
    info = _arrays.describe(x, function="nvshmem_dsl.triton.pointer", argument="x")
    return TritonPointer(info.ptr + int(offset) * info.itemsize, info.dtype, base=x)
