"""Helpers for Numba ``@intrinsic`` implementations of NVSHMEM device functions.

Generated code calls :func:`declare_device_function` from an intrinsic's
codegen, for example::

    @intrinsic
    def int_p(typingctx, dest, value, pe):
        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(),
                                                   ir.IntType(32), ir.IntType(32)])
            fn = declare_device_function(builder, "nvshmem_int_p", fnty)
            builder.call(fn, [...])
        return types.void(dest, value, pe), codegen

Declaring the function is all it takes: the code library notices the
declaration and links NVSHMEM in (see :mod:`nvshmem_dsl.numba._linker`).
"""

from __future__ import annotations

from llvmlite import ir

from . import _linker  # noqa: F401  (installs the code library class)

__all__ = ["declare_device_function"]


def declare_device_function(builder_or_module, name: str, fnty: ir.FunctionType) -> ir.Function:
    """Declare (or reuse) the NVSHMEM device function ``name`` of LLVM type
    ``fnty`` in the module being built, and return it for ``builder.call``.

    ``builder_or_module`` is the intrinsic's ``llvmlite.ir.IRBuilder`` (or its
    ``ir.Module``).  Pointer types may be any ``ir.PointerType``; they are all
    the same opaque ``ptr`` by link time.  The type must otherwise match
    NVSHMEM's definition, which is checked when the kernel is linked.
    """
    if not name.startswith("nvshmem"):
        raise ValueError(f"{name!r} is not an NVSHMEM device function name")
    module = getattr(builder_or_module, "module", builder_or_module)
    fn = module.globals.get(name)
    if fn is None:
        return ir.Function(module, fnty, name)
    if not isinstance(fn, ir.Function) or fn.function_type != fnty:
        have = getattr(fn, "function_type", fn.type)
        raise TypeError(f"{name} already declared as {have}, not {fnty}")
    return fn
