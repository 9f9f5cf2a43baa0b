"""Calling NVSHMEM device functions from CuTe DSL kernels, inlined or out of line.

Generated code declares each NVSHMEM function once with the LLVM types of its
bitcode definition and calls it from ``@cute.kernel`` code::

    _int_p = extern("nvshmem_int_p", "void", ["ptr", "i32", "i32"])
    _half_p = extern("nvshmem_half_p", "void",
                     ["ptr", "ptr byval(%struct.__half) align 2", "i32"])
    _bf16_g = extern("nvshmem_bfloat16_g", "%struct.__nv_bfloat16", ["ptr", "i32"])
    ...
    _int_p(dst_tensor, value, pe)          # inside a @cute.kernel

Type strings are LLVM IR parameter text (attributes other than ``byval(...)``
and ``zeroext`` are ignored).  Everything is declared exactly as the bitcode
defines it, so the linked definitions replace the declarations and LLVM inlines
them (NVSHMEM's API functions are ``alwaysinline``).  A declaration whose types
differ from the definition (``ptr addrspace(1)`` for ``ptr``, ``i16`` for
``%struct.__half``) links as an indirect call that never inlines.

* ``ptr``: all pointers are generic; tensors, CuTe pointers of any address
  space, ``!llvm.ptr`` values and integer addresses are converted
  (:func:`as_generic_ptr`).
* ``iN`` / ``float`` / ``double``: values are converted to that width
  (:func:`as_llvm_scalar`).
* ``ptr byval(%struct.__half)`` / ``(%struct.__nv_bfloat16)``: the Float16 /
  BFloat16 value is stored in an ``alloca`` in the kernel's entry block and its
  generic address is passed (:func:`byval_ptr`).
* ``%struct.__half`` / ``%struct.__nv_bfloat16`` returns: declared with an
  identified LLVM struct ``{ i16 }`` (the IR linker maps identified structs of
  the same body onto each other), unpacked to Float16 / BFloat16.
* ``ptr`` returns come back as the raw ``!llvm.ptr`` value (use
  ``cute.make_ptr(dtype, value)``).

The bitcode is chosen when the call is traced, for the arch being compiled
(:func:`nvshmem_dsl.cute._compile.current_arch`), by
:func:`nvshmem_dsl._libs.bitcode_path`: the highest ``libnvshmem_device_sm_NN.bc``
with NN <= the target (NVSHMEM >= 3.5), else the single ``libnvshmem_device.bc``.

Hybrid linking (:mod:`nvshmem_dsl.cute._link`): a function that
:func:`nvshmem_dsl.linker.pipeline.calls_out_of_line` says (collectives, barriers; all of them with
``NVSHMEM_DSL_OUTLINE=all``, none with ``none``) is declared ``inline=False`` and linked from
its cached object after CuTe's compile; every call names the kernel's own bitcode, made at the
compile from the functions the kernel inlines (:func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_for`;
until then a placeholder path, :func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_placeholder`).  The
choice is made when the call is traced, for :func:`nvshmem_dsl.linker.pipeline.outline_mode` then
(``with nvshmem_dsl.cute.outline("none"):`` around the compile: the whole library, prepared for
libNVVM once, :func:`nvshmem_dsl.linker.nvvm.nvvm_bitcode`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from . import _link
from ._compile import current_arch

__all__ = [
    "extern",
    "Extern",
    "bitcode_for_arch",
    "as_generic_ptr",
    "as_llvm_scalar",
    "byval_ptr",
    "unpack_struct",
]

# ---------------------------------------------------------------- bitcode


def bitcode_for_arch(arch: str) -> str:
    """The NVSHMEM device bitcode a call traced now for ``arch`` (e.g. ``"sm_90a"``) names, for
    the outlining mode in effect (:func:`._link.effective_mode`): with hybrid linking the
    placeholder of the kernel's own bitcode, made at its compile
    (:func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_placeholder`), in mode ``none`` the whole
    library prepared for libNVVM (:func:`nvshmem_dsl.linker.nvvm.nvvm_bitcode`)."""
    return _bitcode(arch, _link.effective_mode())


def _bitcode(arch: str, how: str) -> str:
    from .._libs import bitcode_path
    from ..linker.nvvm import kernel_bitcode_placeholder

    if how == "none":
        return _whole_bitcode(arch)
    # not cached: the compile hook names it again, for the rewrites in effect then
    return kernel_bitcode_placeholder(bitcode_path(arch))


@functools.lru_cache(maxsize=None)
def _whole_bitcode(arch: str) -> str:
    from .._libs import bitcode_path
    from ..linker.nvvm import nvvm_bitcode

    return str(nvvm_bitcode(bitcode_path(arch)))


@functools.lru_cache(maxsize=None)
def _outlined(symbol: str, arch: str, how: str) -> bool:
    """Whether a call of ``symbol`` in a kernel for ``arch`` goes out of line (mode ``how``)."""
    if how == "none":
        return False
    from .._libs import bitcode_path
    from ..linker.pipeline import calls_out_of_line

    return symbol in calls_out_of_line([symbol], arch, bitcode_path(arch), how)


# --------------------------------------------------------------- LLVM types

# name -> (CuTe Numeric class name, MLIR type builder)
_SCALARS = {
    "i8": ("Int8", "i8"), "i16": ("Int16", "i16"), "i32": ("Int32", "i32"),
    "i64": ("Int64", "i64"), "float": ("Float32", "f32"), "double": ("Float64", "f64"),
    "half": ("Float16", "f16"), "bfloat": ("BFloat16", "bf16"),
}
_UNSIGNED = {"Int8": "Uint8", "Int16": "Uint16", "Int32": "Uint32", "Int64": "Uint64"}
# by-value C++ structs in the bitcode: name -> (element class, element MLIR type)
_STRUCTS = {
    "%struct.__half": ("Float16", "f16"),
    "%struct.__nv_bfloat16": ("BFloat16", "bf16"),
}


_TYPE_TOKEN = re.compile(r"void|ptr|i\d+|float|double|half|bfloat|%[\w.]+")


@dataclass(frozen=True)
class _Ty:
    text: str  # as given
    base: str  # "void", "ptr", "i32", "%struct.__half", ...
    byval: Optional[str] = None  # struct name for "ptr byval(%struct.X)"
    zeroext: bool = False


def _parse(text: str) -> _Ty:
    t = text.strip()
    # the type is the first token that is one ("noundef i64", "ptr noundef ...")
    base = next((w for w in t.split() if _TYPE_TOKEN.fullmatch(w)), "")
    m = re.search(r"byval\((%[\w.]+)\)", t)
    ty = _Ty(t, base, m.group(1) if m else None, bool(re.search(r"\bzeroext\b", t)))
    if ty.base == "ptr" and ty.byval is None:
        return ty
    if ty.byval is not None and ty.byval not in _STRUCTS:
        raise ValueError(f"unsupported byval type in {text!r}")
    if ty.base not in ("ptr", "void") and ty.base not in _SCALARS and ty.base not in _STRUCTS:
        raise ValueError(f"unsupported LLVM type {text!r}")
    return ty


def _numeric(name: str) -> Any:
    import cutlass

    return getattr(cutlass, name)


def _ir():
    from cutlass._mlir import ir
    from cutlass._mlir.dialects import llvm

    return ir, llvm


def _mlir_type(name: str) -> Any:
    ir, llvm = _ir()
    if name == "ptr":
        return llvm.PointerType.get(0)
    if name in _STRUCTS:  # identified struct, isomorphic to the bitcode's
        return ir.Type.parse(f'!llvm.struct<"{name[1:]}", (i16)>')
    return ir.Type.parse(_SCALARS[name][1] if name in _SCALARS else name)


# ------------------------------------------------------------ conversions


def as_generic_ptr(x: Any) -> Any:
    """Tensor / CuTe pointer (any space) / ``!llvm.ptr`` / int address -> ``!llvm.ptr``."""
    ir, llvm = _ir()
    from cutlass._mlir.dialects import cute as cute_ir
    from cutlass.base_dsl.utils.mlir_value_tree import extract_mlir_values

    generic = llvm.PointerType.get(0)
    i64 = ir.IntegerType.get_signless(64)
    if hasattr(x, "iterator") and not isinstance(x, ir.Value):  # cute.Tensor
        x = x.iterator
    if isinstance(x, (int, _numeric("Integer"))):  # an address
        return llvm.inttoptr(generic, _numeric("Int64")(x).ir_value())
    vals = extract_mlir_values(x) if not isinstance(x, ir.Value) else [x]
    if len(vals) != 1:
        raise TypeError(f"cannot pass {type(x).__name__} as a pointer")
    v = vals[0]
    if cute_ir.PtrType.isinstance(v.type):
        space = cute_ir.PtrType(v.type).address_space
        v = llvm.inttoptr(llvm.PointerType.get(space), cute_ir.ptrtoint(i64, v))
    if not llvm.PointerType.isinstance(v.type):
        raise TypeError(f"cannot pass a value of type {v.type} as a pointer")
    if llvm.PointerType(v.type).address_space != 0:
        v = llvm.addrspacecast(generic, v)
    return v


def as_llvm_scalar(x: Any, llvm_type: str, unsigned: bool = False) -> Any:
    """Python / CuTe number -> MLIR value of ``llvm_type`` (``i32``, ``float``, ...)."""
    name = _SCALARS[llvm_type][0]
    if unsigned and name in _UNSIGNED:
        name = _UNSIGNED[name]
    cls = _numeric(name)
    ir, _ = _ir()
    if isinstance(x, ir.Value) and x.type == _mlir_type(llvm_type):
        return x
    return (x if type(x) is cls else cls(x)).ir_value()


def _entry_alloca(elem_type: Any, align: int) -> Any:
    """``alloca`` in the entry block of the enclosing top-level function."""
    ir, llvm = _ir()
    op = ir.InsertionPoint.current.block.owner.operation
    while op.parent is not None and op.parent.operation.name not in ("gpu.module", "builtin.module"):
        op = op.parent.operation
    entry = op.regions[0].blocks[0]
    i64 = ir.IntegerType.get_signless(64)
    with ir.InsertionPoint.at_block_begin(entry), ir.Location.unknown():
        one = llvm.mlir_constant(ir.IntegerAttr.get(i64, 1))
        return llvm.alloca(llvm.PointerType.get(0), one, elem_type, alignment=align)


def byval_ptr(x: Any, struct: str) -> Any:
    """Half / bfloat16 value -> generic pointer to a local copy (for ``byval``)."""
    ir, llvm = _ir()
    from cutlass._mlir.dialects import arith

    cls_name, _ = _STRUCTS[struct]
    cls = _numeric(cls_name)
    v = (x if type(x) is cls else cls(x)).ir_value()
    i16 = ir.IntegerType.get_signless(16)
    slot = _entry_alloca(i16, 2)
    llvm.store(arith.bitcast(i16, v), slot)
    return slot


def unpack_struct(v: Any, struct: str) -> Any:
    """``%struct.__half`` / ``__nv_bfloat16`` aggregate -> Float16 / BFloat16."""
    ir, llvm = _ir()
    from cutlass._mlir.dialects import arith

    cls_name, elem = _STRUCTS[struct]
    bits = llvm.extractvalue(ir.IntegerType.get_signless(16), v, [0])
    return _numeric(cls_name)(arith.bitcast(ir.Type.parse(elem), bits))


# ------------------------------------------------------------------ extern


class Extern:
    """An NVSHMEM device function callable from CuTe kernel code.

    The bitcode and whether the call is inlined are chosen when the call is traced (by the
    compile's arch and the outlining mode), cached per (arch, mode).
    """

    def __init__(self, symbol: str, ret: str, params: Sequence[str]) -> None:
        self.symbol = symbol
        self.ret = _parse(ret)
        self.params = tuple(_parse(p) for p in params)

    def __repr__(self) -> str:
        sig = ", ".join(p.text for p in self.params)
        return f"extern({self.symbol}: {self.ret.text} ({sig}))"

    def bitcode(self, arch: str) -> str:
        """The bitcode a call traced now for ``arch`` links (:func:`bitcode_for_arch`)."""
        return bitcode_for_arch(arch)

    def outlined(self, arch: str) -> bool:
        """Whether a call traced now for ``arch`` is out of line (hybrid linking)."""
        return _outlined(self.symbol, arch, _link.effective_mode())

    def _convert(self, arg: Any, ty: _Ty) -> Any:
        if ty.byval is not None:
            return byval_ptr(arg, ty.byval)
        if ty.base == "ptr":
            return as_generic_ptr(arg)
        return as_llvm_scalar(arg, ty.base, unsigned=ty.zeroext)

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.params):
            raise TypeError(f"{self.symbol} takes {len(self.params)} arguments, got {len(args)}")
        from cutlass.cute import ffi, BitCode

        arch, how = current_arch(), _link.effective_mode()
        # an outlined call links the same bitcode: it defines the device state the object uses
        source = BitCode(_bitcode(arch, how))
        inline = not _outlined(self.symbol, arch, how)
        values = [self._convert(a, t) for a, t in zip(args, self.params)]
        ret = None if self.ret.base == "void" else _mlir_type(self.ret.base)
        # MLIR types belong to the compile's context: build the FFI per call
        # (cheap; the prototype is created once per module by symbol name).
        call = ffi(name=self.symbol, params_types=[_mlir_type(t.base) for t in self.params],
                   return_type=ret, inline=inline, source=source)
        result = call(*values)
        if ret is None:
            return None
        if self.ret.base in _STRUCTS:
            return unpack_struct(result, self.ret.base)
        if self.ret.base == "ptr":
            return result
        name = _SCALARS[self.ret.base][0]
        return _numeric(_UNSIGNED.get(name, name) if self.ret.zeroext else name)(result)


@functools.lru_cache(maxsize=None)
def _extern_cached(symbol: str, ret: str, params: tuple[str, ...]) -> Extern:
    return Extern(symbol, ret, params)


def extern(symbol: str, ret: str, params: Sequence[str]) -> Extern:
    """Declare NVSHMEM device function ``symbol`` with LLVM types (see module doc).

    ``extern("nvshmem_int_p", "void", ["ptr", "i32", "i32"])`` -> callable for
    ``@cute.kernel`` code.  Same arguments -> the same object.
    """
    return _extern_cached(symbol, ret, tuple(params))
