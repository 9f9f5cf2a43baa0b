"""All-gather fused with a GEMM: ``C = all_gather(A) @ B``, the tensor-parallel first linear layer.

    import nvshmem_dsl as nvshmem
    from nvshmem_dsl.kernels.ag_gemm import all_gather_matmul

    with nvshmem.init():
        a = nvshmem.array((m, K), "bfloat16", like="torch")   # this PE's row shard of A (symmetric)
        ...                                                   # b: (K, N) bfloat16, this PE's weights
        c = all_gather_matmul(a, b)                           # (n_pes * m, N) = cat(every PE's a) @ b
        c = all_gather_matmul(a, b, comm="copy_engine")       # shards moved by the copy engine

One GEMM kernel computes the output tiles while the shards arrive: a tile of PE s's rows waits only
for the signals of the parts of shard s it reads, and tiles start with the local shard. The shards
travel on a second stream, beside the GEMM: put by a small kernel of ``comm_ctas`` programs
(``comm="ctas"``) or by the host API's stream-ordered ``put_signal`` (``comm="copy_engine"``: the
copy engine, no SM spent). The protocol is :mod:`._plan`'s; the kernels are Triton's (:mod:`.triton`:
a pipelined wgmma GEMM) or the CuTe DSL's (:mod:`.cute`, ``dsl="cute"``: a warp-specialised TMA
and wgmma GEMM, whole tiles of m and N only). Calls are collective and stream-ordered, like those of
:mod:`nvshmem_dsl.kernels` (a :class:`~nvshmem_dsl.kernels.Workspace` numbers them: no barrier and
no reset between calls; the first call of a shape is checked on every PE).
"""
from __future__ import annotations

from typing import Any

from ...errors import NvshmemArgumentError, NvshmemTypeError, NvshmemUnsupportedError
from ...host import _arrays, _state
from ...host._cuda import stream_handle, synchronize
from ...host.views import span_is_symmetric
from .. import _dsl
from .._views import default_stream, torch_stream
from .._workspace import Workspace
from . import _plan

__all__ = ["all_gather_matmul", "default_workspace", "DSLS", "COMMS"]

#: The DSLs the fused kernel is written in (CuTe: whole tiles of m and N, :mod:`.cute`).
DSLS = ("triton", "cute")
COMMS = _plan.COMMS
_FN = "all_gather_matmul"

_default: Workspace | None = None


def default_workspace() -> Workspace:
    """The process's workspace of all_gather_matmul calls that name none (apart from the
    collectives' one: its staging holds two copies of the gathered A)."""
    global _default
    if _default is None:
        _default = Workspace()
    return _default


def _module(dsl: str):
    return _dsl.module(__name__, DSLS, dsl, _FN)


def _matrix(x: Any, name: str) -> _arrays.ArrayInfo:
    info = _arrays.describe(x, function=_FN, argument=name)
    if info.dtype not in _plan.DTYPES:
        raise NvshmemTypeError(f"{_FN}(): argument '{name}' must be {' or '.join(_plan.DTYPES)}, got {info.dtype}")
    if len(info.shape) != 2 or 0 in info.shape:
        raise NvshmemArgumentError(f"{_FN}(): argument '{name}' must be a non-empty matrix, got shape {info.shape}")
    return info


def _overlap(x: _arrays.ArrayInfo, y: _arrays.ArrayInfo) -> bool:
    (lo, hi), (ylo, yhi) = x.span, y.span
    return lo < yhi and ylo < hi


def _checked(a: Any, b: Any, out: Any, npes: int):
    """(a, b, out) described and checked (out may be None)."""
    ai = _matrix(a, "a")
    if not ai.contiguous:
        raise NvshmemArgumentError(f"{_FN}(): argument 'a' must be contiguous")
    if not span_is_symmetric(ai):
        raise NvshmemArgumentError(
            f"{_FN}(): argument 'a' must be symmetric memory (nvshmem_dsl.array, zeros, full, ... or "
            "register_external): the PEs put their shards from it")
    bi = _matrix(b, "b")
    if bi.dtype != ai.dtype:
        raise NvshmemTypeError(f"{_FN}(): argument 'b' must be {ai.dtype} like 'a', got {bi.dtype}")
    K = ai.shape[1]
    if bi.shape[0] != K:
        raise NvshmemArgumentError(f"{_FN}(): argument 'b' must have K = {K} rows (a's columns), got shape {bi.shape}")
    if out is None:
        return ai, bi, None
    shape = (npes * ai.shape[0], bi.shape[1])
    oi = _matrix(out, "out")
    if oi.dtype != ai.dtype:
        raise NvshmemTypeError(f"{_FN}(): argument 'out' must be {ai.dtype} like 'a', got {oi.dtype}")
    if oi.shape != shape or not oi.contiguous:
        raise NvshmemArgumentError(f"{_FN}(): argument 'out' must be contiguous {shape}, got shape {oi.shape}")
    for name, other in (("a", ai), ("b", bi)):
        if _overlap(oi, other):
            raise NvshmemArgumentError(f"{_FN}(): argument 'out' must not overlap '{name}'")
    return ai, bi, oi


def _torch(x: Any, info: _arrays.ArrayInfo):
    """``x`` as a torch tensor of its shape and strides (no copy)."""
    if info.library == "torch":
        return x
    from ...host import memory
    return memory._wrap(info.ptr, info.shape, info.strides, info.dtype, "torch", owner=x)


def _comm_ctas(comm: str, comm_ctas: Any) -> int | None:
    if comm not in COMMS:
        raise NvshmemArgumentError(f"{_FN}(): argument 'comm' must be one of {', '.join(COMMS)}, got {comm!r}")
    if comm_ctas is None:
        return None
    if comm != "ctas":
        raise NvshmemArgumentError(f"{_FN}(): argument 'comm_ctas' is for comm='ctas' only")
    if isinstance(comm_ctas, bool) or not isinstance(comm_ctas, int) or not 1 <= comm_ctas <= _plan.MAX_PARTS:
        raise NvshmemArgumentError(f"{_FN}(): argument 'comm_ctas' must be an integer from 1 to {_plan.MAX_PARTS}, "
                                   f"got {comm_ctas!r}")
    return comm_ctas


_sm_counts: dict = {}


def _sms(device, pes_per_gpu: int) -> int:
    """The SMs a PE's kernel may fill: the device's, shared among the PEs on it."""
    index = device.index if device.index is not None else 0
    count = _sm_counts.get(index)
    if count is None:
        import torch
        count = _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return max(1, count // max(1, pes_per_gpu))


_side: dict = {}


def _side_stream(ws: Workspace, device):
    """(stream, start event, end event) of the shards' puts for ``ws`` on ``device``, made once."""
    key = (id(ws), device)
    got = _side.get(key)
    if got is None:
        import torch
        got = _side[key] = (torch.cuda.Stream(device=device), torch.cuda.Event(), torch.cuda.Event())
    return got


_mapped: dict = {}


def _all_mapped(a: Any, me: int, npes: int, generation: int) -> bool:
    """Whether every peer is reachable by load/store (NVLink, PCIe P2P, MPS), asked once a session.
    Then the copy engine's puts need no SM (NVSHMEM copies with cudaMemcpyAsync and sets the signal
    by a stream memory operation; to other peers it launches a kernel, which could wait forever
    behind the GEMM's programs that wait for it), and the GEMM may wait by signal_fetch."""
    got = _mapped.get(generation)
    if got is None:
        from ...host.views import peer_ptr
        got = _mapped[generation] = all(peer_ptr(a, pe) for pe in range(npes) if pe != me)
    return got


def _copy_engine_puts(plan: _plan.Plan, a: Any, stage: Any, sig: Any, epoch: int, me: int, side) -> None:
    """This PE's shard to every peer's slot, each with its signal, on the side stream."""
    from ...host import operations as ops

    slot = plan.slot(epoch, me)
    dst = stage[slot:slot + plan.shard_elems]
    word = sig[plan.signal(0, me):]
    for pe in plan.send_order(me):
        ops.put_signal(dst, a, word, epoch, pe, stream=side)


def all_gather_matmul(a: Any, b: Any, out: Any = None, *, dsl: str = "triton", comm: str = "ctas",
                      comm_ctas: int | None = None, stream: Any = None, workspace: Workspace | None = None) -> Any:
    """``cat([a of PE 0, a of PE 1, ...]) @ b`` into ``out`` (new when None), on ``stream`` (default:
    torch's current stream). ``a``: this PE's shard [m, K], symmetric, contiguous bfloat16, the same
    shape on every PE; ``b``: [K, N] bfloat16 on a's device, any strides, N this PE's own; ``out``:
    contiguous [n_pes * m, N], overlapping neither. ``comm``: "ctas" (a kernel of ``comm_ctas``
    programs puts the shard, default :data:`._plan.COMM_CTAS`, beside the GEMM) or "copy_engine"
    (host puts; every peer must be reachable by load/store). Sums run in float32, rounded once to
    bfloat16."""
    s = _state.require(f"{_FN}()")
    mod = _module(dsl)
    ctas = _comm_ctas(comm, comm_ctas)
    ai, bi, oi = _checked(a, b, out, s.n_pes)
    import torch
    a_t, b_t = _torch(a, ai), _torch(b, bi)
    if b_t.device != a_t.device:
        raise NvshmemArgumentError(f"{_FN}(): argument 'b' must be on a's device {a_t.device}, got {b_t.device}")
    if oi is None:
        out_t = torch.empty((s.n_pes * ai.shape[0], bi.shape[1]), dtype=a_t.dtype, device=a_t.device)
    else:
        out_t = _torch(out, oi)
        if out_t.device != a_t.device:
            raise NvshmemArgumentError(f"{_FN}(): argument 'out' must be on a's device {a_t.device}, got {out_t.device}")
    if dsl == "cute":
        why = mod.check_shape(ai.shape[0], bi.shape[1], ai.shape[1], s.n_pes,
                              b_t.stride(1) == 1 and b_t.stride(0) == bi.shape[1])
        if why:
            raise NvshmemArgumentError(f"{_FN}(): {why}")
    mapped = _all_mapped(a, s.my_pe, s.n_pes, s.generation)
    if comm == "copy_engine" and not mapped:
        raise NvshmemUnsupportedError(f"{_FN}(): comm='copy_engine' needs every PE reachable by load/store "
                                      "(NVLink, PCIe P2P); use comm='ctas'")
    m, K = ai.shape
    handle = default_stream(ai) if stream is None else stream_handle(stream)
    plan = _plan.plan(ai.dtype, m, K, s.n_pes, comm, ctas)
    ws = workspace if workspace is not None else default_workspace()
    epoch = ws.prepare(plan, _FN, synchronize)
    stage, sig = ws.views(ai.dtype, mod.ARRAYS)
    sms = _sms(a_t.device, s.pes_per_gpu)
    main = torch_stream(handle)
    side, started, sent = _side_stream(ws, a_t.device)
    started.record(main)
    side.wait_event(started)  # a is written, and this PE's previous call is done (the staging's halves)
    if comm == "copy_engine":
        _copy_engine_puts(plan, a_t, stage, sig, epoch, s.my_pe, side)
    elif plan.put_ctas:
        mod.launch_send(plan, a_t, stage, sig, epoch, s.my_pe, side)
    mod.launch(plan, out_t, a_t, b_t, stage, sig, epoch, s.my_pe, sms, mapped, handle)
    sent.record(side)
    main.wait_event(sent)  # a may be written once its puts are done
    return out_t if out is None else out
