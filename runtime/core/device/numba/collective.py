"""Collectives from Numba kernels (``nvshmem.core.device.numba.collective``).

``barrier*``, ``barrier_all*`` and ``sync_all*`` are nvshmem_dsl's functions; ``sync*`` are its
``team_sync*``.  The data collectives take NVSHMEM4Py's arguments and element counts and call
nvshmem_dsl's typed ones (they are intrinsics over them, so they compile without a GPU too):

* ``reduce(team, dst_array, src_array, op)``, ``op`` a string literal ("sum", "prod", "min",
  "max", "and", "or", "xor"): ``dst_array.size`` elements;
* ``reducescatter(team, dst_array, src_array, op)``: ``dst_array.size`` elements per PE;
* ``fcollect(team, dst_array, src_array)``: ``src_array.size`` elements from each PE;
* ``broadcast(team, dst_array, src_array, root=0)``: ``min(dst_array.size, src_array.size)``;
* ``alltoall(team, dst_array, src_array)``: ``src_array.size // team_n_pes(team)`` per PE;

and the ``_block`` / ``_warp`` forms of each.
"""

from numba.core import cgutils, errors
from numba.core.typing import signature
from numba.cuda import types
from numba.cuda.extending import _intrinsic

import nvshmem_dsl.numba as _nv

from .. import COLLECTIVE, DATA_COLLECTIVES, REDUCE_OPS, reexport

__all__ = list(COLLECTIVE)

reexport(globals(), _nv, [n for n in __all__ if n.split("_")[0] not in DATA_COLLECTIVES])


def _fail(name: str, msg: str):
    raise errors.TypingError(f"nvshmem_dsl.core.device.numba.{name}: {msg}")


def _op(name: str, op) -> str:
    value = getattr(op, "literal_value", None)
    if not isinstance(value, str):
        _fail(name, f"argument 'op' must be a string literal ({', '.join(map(repr, REDUCE_OPS))}), got {op}")
    if value not in REDUCE_OPS:
        _fail(name, f"unknown operator {value!r}; expected one of {', '.join(map(repr, REDUCE_OPS))}")
    return value


def _argtys(args):
    return args[0].types if len(args) == 1 and isinstance(args[0], types.StarArgTuple) else args


def _nitems(context, builder, aryty, value):
    return context.make_array(aryty)(context, builder, value).nitems


def _delegate(name: str, scope: str):
    """The intrinsic ``name`` (NVSHMEM4Py's arguments) over nvshmem_dsl's typed collectives."""
    suffix = f"_{scope}" if scope else ""
    public = f"{name}{suffix}"

    def typer(typingctx, *args):
        argtys = tuple(_argtys(args))
        if name in ("reduce", "reducescatter"):
            if len(argtys) != 4:
                _fail(public, f"takes (team, dst_array, src_array, op); got {len(argtys)} arguments")
            native = getattr(_nv, f"{_op(public, argtys[3])}_{name}{suffix}")
            native_tys = (*argtys[:3], types.int64)
        elif name in ("fcollect", "alltoall"):
            if len(argtys) != 3:
                _fail(public, f"takes (team, dst_array, src_array); got {len(argtys)} arguments")
            native = getattr(_nv, f"{name}{suffix}")
            native_tys = (*argtys, types.int64)
        else:  # broadcast
            if len(argtys) not in (3, 4):
                _fail(public, f"takes (team, dst_array, src_array, root=0); got {len(argtys)} arguments")
            native = getattr(_nv, f"broadcast{suffix}")
            native_tys = (*argtys[:3], argtys[3] if len(argtys) == 4 else types.int32)
        for i in (1, 2):
            if not isinstance(argtys[i], types.Array):
                _fail(public, f"argument {('dst_array', 'src_array')[i - 1]} must be an array, got {argtys[i]}")
        native_sig, native_codegen = native._defn(typingctx, *native_tys)
        n_pes_sig, n_pes_codegen = _nv.team_n_pes._defn(typingctx, argtys[0]) if name == "alltoall" else (None, None)
        sig = signature(native_sig.return_type, types.StarArgTuple.from_types(argtys))

        def codegen(context, builder, sig_, llargs):
            values = list(cgutils.unpack_tuple(builder, llargs[0]) if len(llargs) == 1 else llargs)
            team, dst, src = values[:3]
            if name in ("reduce", "reducescatter"):
                count = _nitems(context, builder, argtys[1], dst)
                native_args = [team, dst, src, count]
            elif name == "fcollect":
                native_args = [team, dst, src, _nitems(context, builder, argtys[2], src)]
            elif name == "alltoall":
                team_size = n_pes_codegen(context, builder, n_pes_sig, [cgutils.pack_struct(builder, [team])])
                team_size = context.cast(builder, team_size, n_pes_sig.return_type, types.int64)
                native_args = [team, dst, src, builder.sdiv(_nitems(context, builder, argtys[2], src), team_size)]
            else:
                root = values[3] if len(values) == 4 else context.get_constant(types.int32, 0)
                native_args = [team, dst, src, root]
            # nvshmem_dsl's intrinsics take their arguments as one star-args tuple
            return native_codegen(context, builder, native_sig, [cgutils.pack_struct(builder, native_args)])

        return sig, codegen

    if name == "broadcast":  # root by keyword, as NVSHMEM4Py's tests pass it
        star_typer = typer

        def typer(typingctx, team, dst_array, src_array, root=0):
            # root omitted: numba passes the default, 0, and lowers it as a constant of the signature's type
            argtys = (team, dst_array, src_array, root if isinstance(root, types.Type) else types.int32)
            sig, codegen = star_typer(typingctx, *argtys)
            return signature(sig.return_type, *argtys), codegen  # the arguments one by one

    typer.__name__ = typer.__qualname__ = public
    fn = _intrinsic(target="cuda", prefer_literal=True)(typer)  # the operator string as a literal
    fn.__doc__ = (f"NVSHMEM4Py's ``{public}`` over nvshmem_dsl's typed ``{name}`` functions "
                  f"({scope or 'thread'}-scoped); see the module docstring for the element count.")
    return fn


for _name in DATA_COLLECTIVES:
    for _scope in ("", "block", "warp"):
        globals()[f"{_name}_{_scope}" if _scope else _name] = _delegate(_name, _scope)
del _name, _scope
