"""MoE dispatch and combine in low-latency mode, written with nvshmem_dsl's device API (Numba, Triton,
CuTe DSL: ``dsl="numba" | "triton" | "cute"``):

    buf = MoEBuffer(max_tokens=128, hidden=7168, num_experts=64, topk=8)      # collective
    recv_x, recv_count = buf.dispatch(x, topk_idx)     # x: symmetric (T, 7168) bfloat16
    y = buf.expert_output()                             # symmetric, recv_x's shape
    ...                                                 # each local expert l: y[l, src, :recv_count[l, src]]
    out = buf.combine(y, topk_idx, topk_weights)        # (T, 7168): sum over k of weight * result

Tokens go to the PEs of their experts by puts (stores through the peer's address where it is
reached by load/store, as NVSHMEM's put does), one signal a (expert, source PE) carrying the
count; results come back to the token's PE the same way and are summed there. No host step
between dispatch and combine or between calls; the buffers are reused, two halves of the receive
buffer alternating (the protocol: :mod:`._layout`). Each call of a PE may send its own
number of tokens (up to ``max_tokens``); every PE calls dispatch and combine alike, in order, on
one stream per buffer. ``recv_x`` of a dispatch stays valid until the dispatch after the next one.
"""
from __future__ import annotations

from typing import Any

from ...errors import NvshmemArgumentError, NvshmemStateError, NvshmemTypeError
from ...host import _arrays, _state, memory
from ...host._cuda import stream_handle
from ...host.views import span_is_symmetric
from .. import _dsl
from .._views import default_stream, kernel_array
from . import _layout

__all__ = ["MoEBuffer", "DSLS"]

#: The DSLs the MoE kernels are written in.
DSLS = ("numba", "triton", "cute")


def _module(dsl: str, function: str):
    return _dsl.module(__name__, DSLS, dsl, function)


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise NvshmemArgumentError(f"MoEBuffer(): argument '{name}' must be a positive integer, got {value!r}")
    return value


class MoEBuffer:
    """Symmetric buffers and call state of MoE dispatch/combine (allocation is collective)."""

    def __init__(self, max_tokens: int, hidden: int, num_experts: int, topk: int) -> None:
        s = _state.require("MoEBuffer()")
        max_tokens, hidden = _positive(max_tokens, "max_tokens"), _positive(hidden, "hidden")
        num_experts, topk = _positive(num_experts, "num_experts"), _positive(topk, "topk")
        if num_experts % s.n_pes:
            raise NvshmemArgumentError(
                f"MoEBuffer(): argument 'num_experts' ({num_experts}) must be a multiple of the {s.n_pes} PEs")
        if max_tokens > _layout.MAX_TOKENS:
            raise NvshmemArgumentError(
                f"MoEBuffer(): argument 'max_tokens' must be at most {_layout.MAX_TOKENS}, got {max_tokens}")
        if topk > num_experts:
            raise NvshmemArgumentError(f"MoEBuffer(): argument 'topk' ({topk}) exceeds num_experts ({num_experts})")
        if topk > _layout.MAX_TOPK:
            raise NvshmemArgumentError(f"MoEBuffer(): argument 'topk' must be at most {_layout.MAX_TOPK}, got {topk}")
        self.layout = lay = _layout.Layout(s.n_pes, num_experts // s.n_pes, hidden, topk, max_tokens)
        self._me, self._generation = s.my_pe, s.generation
        rows = lay.recv_rows
        self._recv_x = memory.internal_buffer(2 * rows * hidden * 2, "MoEBuffer recv_x")
        self._recv_src = memory.internal_buffer(2 * rows * 4, "MoEBuffer recv_src")
        self._comb_x = memory.internal_buffer(max_tokens * topk * hidden * 2, "MoEBuffer comb_x")
        self._sig = memory.internal_buffer(8 * lay.signal_words + 4 * lay.local_experts * lay.npes, "MoEBuffer signals")
        self._y: memory.Buffer | None = None
        self._parts_of: dict = {}
        self.epoch = 0  #: dispatches made (the last one's number)
        self._combined = True

    # ------------------------------------------------------------------ views

    def _view(self, buf: memory.Buffer, offset: int, shape: tuple, dtype: str, like: str):
        return memory._wrap(buf.ptr + offset, shape, None, dtype, like, owner=buf)

    def _parts(self, like: str) -> dict:
        """The buffers as flat arrays of ``like`` (bfloat16 as int16 for Numba), made once."""
        got = self._parts_of.get(like)
        if got is None:
            got = self._parts_of[like] = self._make_parts(like)
        return got

    def _make_parts(self, like: str) -> dict:
        lay, bf = self.layout, ("int16" if like == "numba" else "bfloat16")
        rows = lay.recv_rows
        return {"recv_x": self._view(self._recv_x, 0, (2 * rows * lay.hidden,), bf, like),
                "recv_src": self._view(self._recv_src, 0, (2 * rows,), "int32", like),
                "comb_x": self._view(self._comb_x, 0, (lay.max_tokens * lay.topk * lay.hidden,), bf, like),
                "sig": self._view(self._sig, 0, (lay.signal_words,), "uint64", like),
                "recv_count": self._view(self._sig, 8 * lay.signal_words, (lay.local_experts * lay.npes,), "int32", like)}

    def expert_output(self):
        """A symmetric torch array of recv_x's shape (L, n_pes, max_tokens, hidden) for the experts'
        results (combine's ``y``), made once."""
        lay = self.layout
        if self._y is None:
            self._y = memory.internal_buffer(lay.recv_rows * lay.hidden * 2, "MoEBuffer expert output")
        return self._view(self._y, 0, (lay.local_experts, lay.npes, lay.max_tokens, lay.hidden), "bfloat16", "torch")

    # ------------------------------------------------------------------ checks

    def _check(self, function: str):
        s = _state.require(f"{function}()")
        if s.generation != self._generation or self._recv_x.freed:
            raise NvshmemStateError(f"{function}(): this MoEBuffer belongs to an earlier session or was freed")
        return s

    def _tokens(self, x: Any, function: str) -> _arrays.ArrayInfo:
        info = _arrays.describe(x, function=function, argument="x")
        lay = self.layout
        if info.dtype != "bfloat16":
            raise NvshmemTypeError(f"{function}(): argument 'x' must be bfloat16, got {info.dtype}")
        if len(info.shape) != 2 or info.shape[1] != lay.hidden or not info.contiguous:
            raise NvshmemArgumentError(
                f"{function}(): argument 'x' must be contiguous (tokens, {lay.hidden}), got {info.shape}")
        if info.shape[0] > lay.max_tokens:
            raise NvshmemArgumentError(
                f"{function}(): argument 'x' has {info.shape[0]} tokens; the buffer takes at most {lay.max_tokens}")
        if not span_is_symmetric(info):
            raise NvshmemArgumentError(f"{function}(): argument 'x' must be symmetric memory (nvshmem_dsl.array, ...)")
        return info

    def _routing(self, topk_idx: Any, tokens: int, function: str) -> _arrays.ArrayInfo:
        info = _arrays.describe(topk_idx, function=function, argument="topk_idx")
        if info.dtype != "int64" or info.shape != (tokens, self.layout.topk) or not info.contiguous:
            raise NvshmemArgumentError(
                f"{function}(): argument 'topk_idx' must be contiguous int64 ({tokens}, {self.layout.topk}), "
                f"got {info.dtype} {info.shape}")
        return info

    # ------------------------------------------------------------------ calls

    def dispatch(self, x: Any, topk_idx: Any, *, dsl: str = "numba", stream: Any = None):
        """Send each token of ``x`` (symmetric bfloat16 (T, hidden)) to the PEs of its experts
        ``topk_idx`` ((T, topk) int64; -1: none). Returns (recv_x, recv_count): torch views of this
        call's receive rows (L, n_pes, max_tokens, hidden) and counts (L, n_pes) int32."""
        s = self._check("dispatch")
        mod = _module(dsl, "dispatch")
        xi = self._tokens(x, "dispatch")
        ti = self._routing(topk_idx, xi.shape[0], "dispatch")
        if not self._combined:
            raise NvshmemStateError("dispatch(): the previous dispatch has not been combined yet")
        handle = default_stream(xi) if stream is None else stream_handle(stream)
        self.epoch += 1
        self._combined = False
        p = self._parts(mod.ARRAYS)
        mod.launch_dispatch(self.layout, kernel_array(x, xi, mod.ARRAYS), kernel_array(topk_idx, ti, mod.ARRAYS),
                            p["recv_x"], p["recv_src"], p["sig"], p["recv_count"], self.epoch, xi.shape[0],
                            s.my_pe, handle)
        lay = self.layout
        half = (self.epoch & 1) * lay.recv_rows * lay.hidden * 2
        recv_x = self._view(self._recv_x, half, (lay.local_experts, lay.npes, lay.max_tokens, lay.hidden),
                            "bfloat16", "torch")
        counts = self._view(self._sig, 8 * lay.signal_words, (lay.local_experts, lay.npes), "int32", "torch")
        return recv_x, counts

    def combine(self, y: Any, topk_idx: Any, topk_weights: Any, out: Any = None, *, dsl: str = "numba",
                stream: Any = None):
        """Send the experts' results ``y`` (symmetric, recv_x's shape) back to their tokens' PEs and
        sum them there: out[t] = sum over j of topk_weights[t, j] * result of (t, j); returns ``out``
        (new (T, hidden) bfloat16 when None). ``topk_idx`` / ``topk_weights`` (float32): this PE's,
        as given to its dispatch."""
        s = self._check("combine")
        mod = _module(dsl, "combine")
        if self._combined:
            raise NvshmemStateError("combine(): no dispatch to combine (call dispatch first)")
        lay = self.layout
        yi = _arrays.describe(y, function="combine", argument="y")
        want = (lay.local_experts, lay.npes, lay.max_tokens, lay.hidden)
        if yi.dtype != "bfloat16" or yi.shape != want or not yi.contiguous or not span_is_symmetric(yi):
            raise NvshmemArgumentError(
                f"combine(): argument 'y' must be symmetric contiguous bfloat16 {want} (expert_output()), "
                f"got {yi.dtype} {yi.shape}")
        ti = _arrays.describe(topk_idx, function="combine", argument="topk_idx")
        tokens = ti.shape[0] if ti.shape else 0
        ti = self._routing(topk_idx, tokens, "combine")
        wi = _arrays.describe(topk_weights, function="combine", argument="topk_weights")
        if wi.dtype != "float32" or wi.shape != ti.shape or not wi.contiguous:
            raise NvshmemArgumentError(
                f"combine(): argument 'topk_weights' must be contiguous float32 {ti.shape}, got {wi.dtype} {wi.shape}")
        if out is None:
            import torch
            out = torch.empty((tokens, lay.hidden), dtype=torch.bfloat16, device="cuda")
        oi = _arrays.describe(out, function="combine", argument="out")
        if oi.dtype != "bfloat16" or oi.shape != (tokens, lay.hidden) or not oi.contiguous:
            raise NvshmemArgumentError(
                f"combine(): argument 'out' must be contiguous bfloat16 ({tokens}, {lay.hidden}), got {oi.dtype} {oi.shape}")
        handle = default_stream(yi) if stream is None else stream_handle(stream)
        p = self._parts(mod.ARRAYS)
        a = mod.ARRAYS
        mod.launch_combine(lay, kernel_array(y, yi, a), kernel_array(topk_idx, ti, a), kernel_array(topk_weights, wi, a),
                           p["recv_src"], p["comb_x"], p["sig"], p["recv_count"], kernel_array(out, oi, a),
                           self.epoch, tokens, s.my_pe, handle)
        self._combined = True
        return out

    def free(self) -> None:
        """Free the buffers (collective)."""
        for buf in (self._recv_x, self._recv_src, self._comb_x, self._sig, self._y):
            if buf is not None and not buf.freed and self._generation == _state.STATE.generation:
                memory.free_internal(buf)
