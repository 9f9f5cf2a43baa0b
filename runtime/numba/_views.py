"""Array views inside kernels: `peer(x, pe)` and `multicast(team, x)` of symmetric memory, and
`window(x, start, n)`, a cheap slice.  Each function's docstring is what docs/api/numba.rst
shows (docs/_ext/docstrings.py).
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, errors
from numba.cuda import types
from numba.cuda.extending import intrinsic

from .. import _optable
from ._calls import _function_type
from ._intrinsics import declare_device_function


def _view(context, builder, aryty, value, symbol, ptr_arg, other_arg):
    ary = context.make_array(aryty)(context, builder, value)
    op = _optable.device_ops()[symbol]
    fn = declare_device_function(builder, symbol, _function_type(op, builder.module))
    data = builder.bitcast(ary.data, cgutils.voidptr_t)
    args = [data, other_arg] if ptr_arg == 0 else [other_arg, data]
    return _alias(context, builder, aryty, ary, builder.call(fn, args))


def _alias(context, builder, aryty, ary, data, count=None):
    """An array of type ``aryty`` like ``ary`` whose data is at ``data``, of ``count`` elements
    (1-D; ``ary``'s shape when None)."""
    out = context.make_array(aryty)(context, builder)
    for field in ("meminfo", "parent", "itemsize", "strides", "nitems", "shape"):
        setattr(out, field, getattr(ary, field))
    if count is not None:
        out.nitems = count
        out.shape = cgutils.pack_array(builder, [count])
    out.data = builder.bitcast(data, ary.data.type)
    return out._getvalue()


@intrinsic
def peer(typingctx, x, pe):
    """An array aliasing symmetric array ``x`` on PE ``pe`` (``nvshmem_ptr``): plain loads and
    stores through it reach that PE.  Its data is null where there is no load/store path (a PE on
    another node): test ``ptr(x, pe) != 0`` first where that can happen."""
    if not isinstance(x, types.Array):
        raise errors.TypingError(f"nvshmem_dsl.numba.peer: argument 'x' must be an array, got {x}")
    if not isinstance(pe, (types.Integer, types.IntegerLiteral)):
        raise errors.TypingError(f"nvshmem_dsl.numba.peer: argument 'pe' must be an integer, got {pe}")

    def codegen(context, builder, sig, args):
        pe32 = context.cast(builder, args[1], sig.args[1], types.int32)
        return _view(context, builder, sig.args[0], args[0], _optable.dtype_free_symbol("ptr"), 0, pe32)
    return x(x, pe), codegen


@intrinsic
def multicast(typingctx, team, x):
    """An array aliasing the multicast address of symmetric array ``x`` for ``team``
    (``nvshmemx_mc_ptr``); null data where the team has no multicast object."""
    if not isinstance(x, types.Array):
        raise errors.TypingError(f"nvshmem_dsl.numba.multicast: argument 'x' must be an array, got {x}")

    def codegen(context, builder, sig, args):
        team32 = context.cast(builder, args[0], sig.args[0], types.int32)
        return _view(context, builder, sig.args[1], args[1], _optable.dtype_free_symbol("mc_ptr"), 1, team32)
    return x(team, x), codegen


@intrinsic
def window(typingctx, x, start, n):
    """The ``n`` elements of 1-D array ``x`` from ``start``, as an array of the same type.

    What ``x[start:start + n]`` gives for indices inside the array, for a fraction of its cost:
    the data pointer moves by ``start`` elements and only the size is checked.  ``n`` is
    clamped to what is left from ``start``; a ``start`` outside ``[0, x.size]`` (negative
    included: no wrap-around) gives an empty window, whose data pointer means nothing.  Numba
    has no pointer arithmetic; in a loop of small puts or gets, where all of a block's warps run
    the indexing code, clamping the pointer as slices do costs bandwidth (``BENCHMARKS.md``).
    An explicit count given to a put or get is not checked against the window."""
    if not isinstance(x, types.Array) or x.ndim != 1:
        raise errors.TypingError(f"nvshmem_dsl.numba.window: argument 'x' must be a 1-D array, got {x}")
    for name, ty in (("start", start), ("n", n)):
        if not isinstance(ty, (types.Integer, types.IntegerLiteral)):
            raise errors.TypingError(f"nvshmem_dsl.numba.window: argument '{name}' must be an integer, got {ty}")

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        i64 = ir.IntType(64)
        zero = i64(0)
        start64 = context.cast(builder, args[1], sig.args[1], types.int64)
        n64 = context.cast(builder, args[2], sig.args[2], types.int64)
        size = builder.extract_value(ary.shape, 0)

        # the size says what may be touched: n clamped to [0, size - start], and 0 when start
        # is outside [0, size] (as unsigned, a negative start is above any size); the pointer
        # is not clamped (an empty window's data is never read by a put or get of its size)
        inside = builder.icmp_unsigned("<=", start64, size)
        left = builder.sub(size, start64)
        count = builder.select(builder.icmp_signed("<", n64, zero), zero, n64)
        count = builder.select(builder.icmp_signed(">", count, left), left, count)
        count = builder.select(inside, count, zero)
        if aryty.layout in ("C", "F"):  # contiguous: the element size is the stride
            data = builder.gep(ary.data, [start64])
        else:
            data = builder.bitcast(ary.data, cgutils.voidptr_t)
            data = builder.gep(data, [builder.mul(start64, builder.extract_value(ary.strides, 0))])
        return _alias(context, builder, aryty, ary, data, count)
    return x(x, start, n), codegen
