"""Collectives from Numba kernels (``nvshmem.core.device.numba.collective``).

``barrier*``, ``barrier_all*`` and ``sync_all*`` are nvshmem_dsl's functions; ``sync*`` are its
``team_sync*``.  The data collectives take NVSHMEM4Py's arguments (by position or by its names)
and element counts and call nvshmem_dsl's typed ones (they are intrinsics over them, so they
compile without a GPU too):

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


def _nitems(context, builder, aryty, value):
    return context.make_array(aryty)(context, builder, value).nitems


def _delegate(name: str, scope: str):
    """The intrinsic ``name`` (NVSHMEM4Py's arguments, by position or keyword) over nvshmem_dsl's
    typed collectives."""
    suffix = f"_{scope}" if scope else ""
    public = f"{name}{suffix}"

    def build(typingctx, argtys):
        """(signature, codegen) for ``argtys``: (team, dst_array, src_array[, op | root])."""
        params = ("team", "dst_array", "src_array", *{"broadcast": ("root=0",), "reduce": ("op",),
                                                      "reducescatter": ("op",)}.get(name, ()))
        for what, ty in zip(params, argtys):
            if not isinstance(ty, types.Type):  # omitted: the typer's default, None
                _fail(public, f"takes ({', '.join(params)}); argument '{what}' is missing")
        for i, what in ((1, "dst_array"), (2, "src_array")):
            if not isinstance(argtys[i], types.Array):
                _fail(public, f"argument {what} must be an array, got {argtys[i]}")
        if name in ("reduce", "reducescatter"):
            native = getattr(_nv, f"{_op(public, argtys[3])}_{name}{suffix}")
            native_tys = (*argtys[:3], types.int64)
        elif name in ("fcollect", "alltoall"):
            native = getattr(_nv, f"{name}{suffix}")
            native_tys = (*argtys, types.int64)
        else:  # broadcast
            native = getattr(_nv, f"broadcast{suffix}")
            native_tys = argtys
        native_sig, native_codegen = native._defn(typingctx, *native_tys)
        n_pes_sig, n_pes_codegen = _nv.team_n_pes._defn(typingctx, argtys[0]) if name == "alltoall" else (None, None)

        def codegen(context, builder, sig, llargs):
            team, dst, src = llargs[:3]
            if name in ("reduce", "reducescatter"):
                count = _nitems(context, builder, argtys[1], dst)
            elif name == "fcollect":
                count = _nitems(context, builder, argtys[2], src)
            elif name == "alltoall":
                team_size = n_pes_codegen(context, builder, n_pes_sig, [cgutils.pack_struct(builder, [team])])
                team_size = context.cast(builder, team_size, n_pes_sig.return_type, types.int64)
                count = builder.sdiv(_nitems(context, builder, argtys[2], src), team_size)
            else:
                count = llargs[3]  # the root
            # nvshmem_dsl's intrinsics take their arguments as one star-args tuple
            return native_codegen(context, builder, native_sig, [cgutils.pack_struct(builder, [team, dst, src, count])])

        return signature(native_sig.return_type, *argtys), codegen

    # NVSHMEM4Py's parameter names: its programs and tests pass some by keyword (broadcast's root)
    # (None defaults: an omitted argument is named in a typing error, not a TypeError from numba)
    if name in ("reduce", "reducescatter"):
        def typer(typingctx, team=None, dst_array=None, src_array=None, op=None):
            return build(typingctx, (team, dst_array, src_array, op))
    elif name in ("fcollect", "alltoall"):
        def typer(typingctx, team=None, dst_array=None, src_array=None):
            return build(typingctx, (team, dst_array, src_array))
    else:
        def typer(typingctx, team=None, dst_array=None, src_array=None, root=0):
            # root omitted: numba passes the default, 0, and lowers it as a constant of the signature's type
            return build(typingctx, (team, dst_array, src_array, root if isinstance(root, types.Type) else types.int32))

    typer.__name__ = typer.__qualname__ = public
    fn = _intrinsic(target="cuda", prefer_literal=True)(typer)  # the operator string as a literal
    fn.__doc__ = (f"NVSHMEM4Py's ``{public}`` over nvshmem_dsl's typed ``{name}`` functions "
                  f"({scope or 'thread'}-scoped); see the module docstring for the element count.")
    return fn


for _name in DATA_COLLECTIVES:
    for _scope in ("", "block", "warp"):
        globals()[f"{_name}_{_scope}" if _scope else _name] = _delegate(_name, _scope)
del _name, _scope
