"""Communication kernels written with nvshmem_dsl's device API, and the host calls that run them.

    import nvshmem_dsl as nvshmem
    from nvshmem_dsl import kernels

    with nvshmem.init():
        x = nvshmem.full((1 << 20,), 1.0, "float32", like="torch")   # symmetric input
        y = kernels.all_reduce(x)                                  # sum over the PEs, on torch's stream
        y = kernels.all_reduce(x, algorithm="two_shot", dsl="triton")
        g = kernels.all_gather(x)                                  # (n_pes * n,) in PE order
        r = kernels.reduce_scatter(g)                              # this PE's (n,) of the sum

The kernels (one-shot and two-shot all-reduce, all-gather, reduce-scatter) exist in Numba
(:mod:`.numba`), Triton (:mod:`.triton`) and the CuTe DSL (:mod:`.cute`), each written only with the
DSL's nvshmem_dsl device functions (put_signal_nbi_block, signal_op, signal_wait_until, quiet; LL: peer,
signal_fetch) on symmetric memory; :mod:`._plan` holds their one protocol. Where every PE reaches every
peer by load/store, the one-shot all-reduce of at most ``_plan.LL_MAX_BYTES`` a PE takes the LL protocol
instead (stores through ``peer``, each element in one 64-bit word with the call's epoch: no signal, no
fence). Calls are collective (every PE makes the same calls with the same shapes, in the same order) and
stream-ordered; back-to-back calls need no host barrier and no reset: each call has its number (epoch)
and waits for its peers' signals (LL: words) of that number. The first call of a shape checks that every
PE makes it (one host collective), later calls do not.
"""
from __future__ import annotations

from typing import Any

from ..errors import NvshmemArgumentError, NvshmemTypeError
from ..host import _arrays, _state
from ..host._cuda import stream_handle, synchronize
from ..host.views import span_is_symmetric
from . import _dsl, _plan
from ._views import default_stream, kernel_array
from ._workspace import Workspace, default as default_workspace

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "Workspace", "default_workspace", "DSLS", "ALGORITHMS"]

#: The DSLs the kernels are written in; ``dsl=`` picks one.
DSLS = ("numba", "triton", "cute")
#: all_reduce's algorithms.
ALGORITHMS = ("one_shot", "two_shot")


def _module(dsl: str, function: str):
    return _dsl.module(__name__, DSLS, dsl, function)


def _input(x: Any, function: str) -> _arrays.ArrayInfo:
    info = _arrays.describe(x, function=function, argument="x")
    if info.dtype not in _plan.DTYPES:
        raise NvshmemTypeError(f"{function}(): argument 'x' must be {' or '.join(_plan.DTYPES)}, got {info.dtype}")
    if not info.contiguous:
        raise NvshmemArgumentError(f"{function}(): argument 'x' must be contiguous")
    if not span_is_symmetric(info):
        raise NvshmemArgumentError(
            f"{function}(): argument 'x' must be symmetric memory (nvshmem_dsl.array, zeros, full, ... or "
            "register_external), so that the kernels can put from it over every transport")
    return info


def _output(out: Any, x: Any, xi: _arrays.ArrayInfo, shape: tuple, function: str) -> tuple[Any, _arrays.ArrayInfo]:
    """(``out`` checked, or a new array of x's library and dtype of ``shape``; its description)."""
    if out is None:
        out = _empty_like(x, xi, shape, function)
        return out, _arrays.describe(out)
    oi = _arrays.describe(out, function=function, argument="out")
    if oi.dtype != xi.dtype:
        raise NvshmemTypeError(f"{function}(): argument 'out' must be {xi.dtype} like 'x', got {oi.dtype}")
    if not oi.contiguous:
        raise NvshmemArgumentError(f"{function}(): argument 'out' must be contiguous")
    size = 1
    for d in shape:
        size *= d
    if oi.size != size:
        raise NvshmemArgumentError(f"{function}(): argument 'out' must hold {size} elements {shape}, got {oi.shape}")
    (lo, hi), (xlo, xhi) = oi.span, xi.span
    if lo < xhi and xlo < hi:
        raise NvshmemArgumentError(f"{function}(): argument 'out' must not overlap 'x'")
    return out, oi


def _empty_like(x: Any, xi: _arrays.ArrayInfo, shape: tuple, function: str) -> Any:
    lib = xi.library
    if lib == "torch":
        import torch
        return torch.empty(shape, dtype=x.dtype, device=x.device)
    if lib == "cupy":
        import cupy
        return cupy.empty(shape, dtype=x.dtype)
    if lib == "numba":
        from numba import cuda
        return cuda.device_array(shape, dtype=xi.dtype)
    raise NvshmemArgumentError(f"{function}(): pass 'out' for arrays of {lib}")


def _run(kind: str, x: Any, out: Any, xi: _arrays.ArrayInfo, n: int, out_shape: tuple, *,
         dsl: str, stream: Any, workspace: Workspace | None, function: str) -> Any:
    s = _state.require(f"{function}()")
    mod = _module(dsl, function)
    out, oi = _output(out, x, xi, out_shape, function)
    if n == 0:
        return out
    handle = default_stream(xi) if stream is None else stream_handle(stream)
    ws = workspace if workspace is not None else default_workspace()
    plan = _plan.plan(kind, xi.dtype, n, s.n_pes)
    if _plan.takes_ll(kind, xi.dtype, n, True) and ws.load_store(function, plan):
        plan = _plan.plan(kind, xi.dtype, n, s.n_pes, True)
    epoch = ws.prepare(plan, function, synchronize)
    like = mod.ARRAYS
    stage, sig = ws.views(xi.dtype, like, plan.ll)
    mod.launch(plan.kernel, plan, kernel_array(out, oi, like), kernel_array(x, xi, like), stage, sig, epoch,
               s.my_pe, handle)
    return out


def all_reduce(x: Any, out: Any = None, *, algorithm: str = "one_shot", dsl: str = "numba", stream: Any = None,
               workspace: Workspace | None = None) -> Any:
    """Sum of ``x`` over all PEs into ``out`` (new, of x's shape, when None), on ``stream`` (default:
    the current stream of x's library). ``x``: symmetric float32 or bfloat16; ``algorithm``:
    "one_shot" (every PE puts x to every PE and sums: fewest steps, for small sizes) or
    "two_shot" (reduce-scatter then all-gather: less traffic, for large sizes)."""
    if algorithm not in ALGORITHMS:
        raise NvshmemArgumentError(
            f"all_reduce(): argument 'algorithm' must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    xi = _input(x, "all_reduce")
    return _run(algorithm, x, out, xi, xi.size, xi.shape, dsl=dsl, stream=stream, workspace=workspace,
                function="all_reduce")


def all_gather(x: Any, out: Any = None, *, dsl: str = "numba", stream: Any = None,
               workspace: Workspace | None = None) -> Any:
    """Every PE's ``x`` in PE order into ``out`` (new when None: shape (n_pes * x.shape[0], ...))."""
    xi = _input(x, "all_gather")
    npes = _state.require("all_gather()").n_pes
    shape = (npes * xi.shape[0], *xi.shape[1:]) if xi.shape else (npes,)
    return _run("all_gather", x, out, xi, xi.size, shape, dsl=dsl, stream=stream, workspace=workspace,
                function="all_gather")


def reduce_scatter(x: Any, out: Any = None, *, dsl: str = "numba", stream: Any = None,
                   workspace: Workspace | None = None) -> Any:
    """This PE's part of the sum of ``x`` over all PEs: x holds n_pes equal parts along its first
    axis; ``out`` (new when None: shape (x.shape[0] // n_pes, ...)) gets part my_pe of the sum."""
    xi = _input(x, "reduce_scatter")
    npes = _state.require("reduce_scatter()").n_pes
    if not xi.shape or xi.shape[0] % npes:
        raise NvshmemArgumentError(
            f"reduce_scatter(): argument 'x' must have a first axis divisible by the {npes} PEs, got shape {xi.shape}")
    shape = (xi.shape[0] // npes, *xi.shape[1:])
    return _run("reduce_scatter", x, out, xi, xi.size // npes, shape, dsl=dsl, stream=stream,
                workspace=workspace, function="reduce_scatter")
