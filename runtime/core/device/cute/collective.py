"""Collectives from CuTe DSL kernels (``nvshmem.core.device.cute.collective``).

``barrier*``, ``barrier_all*`` and ``sync_all*`` are nvshmem_dsl's functions; ``sync*`` are its
``team_sync*``.  The data collectives take NVSHMEM4Py's arguments and element counts and call
nvshmem_dsl's typed ones: ``reduce(team, dst, src, op)`` (``op`` a string: "sum", "prod", "min",
"max", "and", "or", "xor") and ``reducescatter`` count ``size(dst)``; ``fcollect`` ``size(src)``;
``broadcast(team, dst, src, root=0)`` ``min(size(dst), size(src))``; ``alltoall``
``size(src) // team_n_pes(team)``.
"""

import nvshmem_dsl.cute as _nv

from ..._types import NvshmemInvalid
from .. import COLLECTIVE, DATA_COLLECTIVES, REDUCE_OPS, reexport

__all__ = list(COLLECTIVE)

reexport(globals(), _nv, [n for n in __all__ if n.split("_")[0] not in DATA_COLLECTIVES])


def _size(t):
    from cutlass import cute

    return cute.size(t)


def _op(name: str, op) -> str:
    if op not in REDUCE_OPS:
        raise NvshmemInvalid(f"nvshmem_dsl.core.device.cute.{name}: unknown operator {op!r}; expected one of "
                             f"{', '.join(map(repr, REDUCE_OPS))}")
    return op


def _define(scope: str) -> None:
    suffix = f"_{scope}" if scope else ""

    def reduce(team, dst, src, op):
        return getattr(_nv, f"{_op('reduce' + suffix, op)}_reduce{suffix}")(team, dst, src, _size(dst))

    def reducescatter(team, dst, src, op):
        return getattr(_nv, f"{_op('reducescatter' + suffix, op)}_reducescatter{suffix}")(team, dst, src, _size(dst))

    def fcollect(team, dst, src):
        return getattr(_nv, f"fcollect{suffix}")(team, dst, src, _size(src))

    def broadcast(team, dst, src, root=0):
        return getattr(_nv, f"broadcast{suffix}")(team, dst, src, root)

    def alltoall(team, dst, src):
        return getattr(_nv, f"alltoall{suffix}")(team, dst, src, _size(src) // _nv.team_n_pes(team))

    for fn, what in ((reduce, "All-reduce ``size(dst)`` elements with the operator string ``op``"),
                     (reducescatter, "Reduce-scatter, ``size(dst)`` elements per PE"),
                     (fcollect, "All-gather of ``size(src)`` elements from each PE"),
                     (broadcast, "Broadcast from the team's PE ``root`` (default 0)"),
                     (alltoall, "All-to-all, ``size(src) // team_n_pes(team)`` elements per PE")):
        fn.__name__ = fn.__qualname__ = fn.__name__ + suffix
        fn.__module__ = __name__
        fn.__doc__ = f"{what} ({scope or 'thread'}-scoped)."
        globals()[fn.__name__] = fn


for _scope in ("", "block", "warp"):
    _define(_scope)
del _scope
