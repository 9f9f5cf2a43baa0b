"""What the Numba kernels need and Numba lacks (no vector types or pointers) or compiles to what ptxas
cannot read (``cuda.ballot_sync`` becomes a call of ``llvm.nvvm.vote.sync``): 16-byte vector loads
and stores, addresses and a warp's ballot, as the C++ twins' ``uint4`` copies, ``nvshmem_ptr``
tests and ``__ballot_sync`` compile (volatile polls: ``nv.signal_fetch``).  Indices count the array's elements; a vector's address must be a
multiple of 16 bytes (the caller checks :func:`address`)."""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, errors
from numba.cuda import types
from numba.cuda.extending import intrinsic

_V4 = ir.VectorType(ir.IntType(32), 4)
#: A vector as Numba sees it: four uint32 words.
VECTOR = types.UniTuple(types.uint32, 4)


def _check(name, ary, index=None):
    if not isinstance(ary, types.Array) or ary.ndim != 1 or ary.layout != "C":
        raise errors.TypingError(f"{name}: argument 'ary' must be a 1-D contiguous array, got {ary}")
    if index is not None and not isinstance(index, (types.Integer, types.IntegerLiteral)):
        raise errors.TypingError(f"{name}: argument 'i' must be an integer, got {index}")


def _element(context, builder, aryty, ary, index, indexty):
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.gep(data, [context.cast(builder, index, indexty, types.int64)])


@intrinsic
def address(typingctx, ary):
    """The address of ``ary``'s data as uint64 (0: a null view, as ``peer`` gives where there is no
    load/store path)."""
    _check("address", ary)

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.ptrtoint(data, ir.IntType(64))
    return types.uint64(ary), codegen


@intrinsic
def load16(typingctx, ary, i):
    """The 16 bytes from element ``i`` of ``ary`` (one ``ld.v4.u32``) as four uint32."""
    _check("load16", ary, i)

    def codegen(context, builder, sig, args):
        p = builder.bitcast(_element(context, builder, sig.args[0], args[0], args[1], sig.args[1]), _V4.as_pointer())
        v = builder.load(p, align=16)
        words = [builder.extract_element(v, ir.Constant(ir.IntType(32), k)) for k in range(4)]
        return context.make_tuple(builder, sig.return_type, words)
    return VECTOR(ary, i), codegen


@intrinsic
def store16(typingctx, ary, i, v):
    """Store ``v``, four integers (their low 32 bits), as 16 bytes at element ``i`` of ``ary`` (one
    ``st.v4.u32``)."""
    _check("store16", ary, i)
    if not (isinstance(v, types.UniTuple) and v.count == 4 and isinstance(v.dtype, types.Integer)):
        raise errors.TypingError(f"store16: argument 'v' must be a tuple of four integers, got {v}")

    def codegen(context, builder, sig, args):
        p = builder.bitcast(_element(context, builder, sig.args[0], args[0], args[1], sig.args[1]), _V4.as_pointer())
        words = [builder.trunc(word, ir.IntType(32)) if v.dtype.bitwidth > 32 else word
                 for word in cgutils.unpack_tuple(builder, args[2], 4)]
        vec = ir.Constant(_V4, ir.Undefined)
        for k, word in enumerate(words):
            vec = builder.insert_element(vec, word, ir.Constant(ir.IntType(32), k))
        builder.store(vec, p, align=16)
        return context.get_dummy_value()
    return types.void(ary, i, v), codegen


@intrinsic
def ballot(typingctx, pred):
    """The warp's ballot of ``pred`` (bit i: lane i's ``pred``), every lane taking part
    (``vote.sync.ballot.b32`` with the full mask, as ``__ballot_sync(0xFFFFFFFF, pred)``)."""
    if not isinstance(pred, (types.Boolean, types.Integer)):
        raise errors.TypingError(f"ballot: argument 'pred' must be a bool, got {pred}")

    def codegen(context, builder, sig, args):
        p = args[0]
        p32 = builder.zext(p, ir.IntType(32)) if p.type.width < 32 else builder.trunc(p, ir.IntType(32)) \
            if p.type.width > 32 else p
        fn = ir.InlineAsm(ir.FunctionType(ir.IntType(32), [ir.IntType(32)]),
                          "{ .reg .pred p; setp.ne.u32 p, $1, 0; vote.sync.ballot.b32 $0, p, 0xffffffff; }", "=r,r",
                          side_effect=True)
        return builder.call(fn, [p32])
    return types.uint32(pred), codegen
