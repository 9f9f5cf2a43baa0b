"""MoE dispatch and combine in low-latency mode (as DeepEP defines it): the protocol and buffer
layout every implementation (Numba, Triton, CuTe DSL) follows.

Sizes: ``npes`` PEs, ``L`` experts on each (``E = L * npes`` in all; expert ``e`` lives on PE
``e // L`` as its local expert ``e % L``), ``H`` elements a token (bfloat16), top-``K`` routing,
at most ``T_max`` tokens a PE and call (each PE may send fewer, its own ``T``). Buffers of a
:class:`~nvshmem_dsl.kernels.moe.MoEBuffer` (symmetric):

* ``recv_x[2][L][npes][T_max][H]``: dispatch's receive rows, one half per call parity
  (``par = epoch & 1``); row ``s`` of ``[l][src]`` is the ``s``-th token PE ``src`` routed to local
  expert ``l`` (in token order); ``recv_src[2][L][npes][T_max]`` (int32) its ``t * K + j``;
* ``comb_x[T_max * K][H]``: combine's receive rows on the token's PE, row ``t * K + j``;
* ``sig[L * npes + E]`` (uint64): words ``l * npes + src`` (dispatch: ``epoch << 32 | count``, set by
  PE ``src`` once its ``count`` rows for local expert ``l`` have landed), then ``L * npes + e``
  (combine: ``epoch``, set by expert ``e``'s PE once its results for this PE have landed).

Dispatch (``epoch`` = the call's number, 1, 2, ...; ``grid`` blocks of ``THREADS``, each taking
experts ``e = b, b + grid, ...``): list the (t, j) with ``topk[t][j] == e`` in order (a block scan;
a token that names ``e`` in several slots counts once, at its first ``j``), put each token row to
``recv_x[par][e % L][me][s]`` on PE ``e // L`` and its ``t * K + j`` to ``recv_src`` (by stores
through ``nv.peer``'s address where the PE is reached by load/store, else ``put_nbi`` and ``p``);
then ``fence`` and set the word.
Then each block waits for words ``w = b, b + grid, ...`` of its own PE and writes their counts to
``recv_count[w]``. Experts compute on ``recv_x[par]`` (rows below their counts), into ``y`` of the
same shape ([L][npes][T_max][H], symmetric).

Combine (same epoch as its dispatch): for each word ``w = l * npes + src`` of this PE (blocks as
above), put row ``s < recv_count[w]`` of ``y[l][src]`` to ``comb_x[recv_src[par][l][src][s]]`` on
PE ``src``, then ``fence`` and set word ``L * npes + (me * L + l)`` on ``src`` to the epoch (also
when ``count`` is 0); wait for all ``E`` combine words; ``out[t] = sum over j of w[t][j] *
comb_x[t * K + j0]`` in float32, j in order, skipping ``topk[t][j] < 0``, where ``j0`` is the first slot of
token ``t`` naming the expert of slot ``j`` (``j`` itself unless the expert repeats: its result
came back once and counts for every slot naming it).

Why no barrier: a PE's combine of call e waits for every expert's results, each sent after that
expert's PE received this PE's dispatch of call e; so a PE dispatches call e + 1 only after every
PE has passed dispatch e, and call e + 2 (the same ``recv_x`` half) only after every PE has
finished combine e + 1, long after its experts used the half of call e. ``comb_x`` needs one
half: an expert's PE sends combine rows of call e + 1 only after this PE's dispatch e + 1, which
follows this PE's combine e.
"""
from __future__ import annotations

from dataclasses import dataclass

#: The largest grid of both kernels (all blocks of every PE on one GPU under MPS stay resident).
GRID_MAX = 32
#: Threads a block (Triton: THREADS // 32 warps).
THREADS = 512
#: Tokens a PE may send in one call at most (the dispatch block's shared list).
MAX_TOKENS = 4096
#: Experts a token at most (the combine block's shared slot list).
MAX_TOPK = 32


@dataclass(frozen=True)
class Layout:
    """What every PE computes alike from the buffer's sizes."""

    npes: int
    local_experts: int  #: L
    hidden: int  #: H
    topk: int  #: K
    max_tokens: int  #: T_max

    @property
    def experts(self) -> int:
        return self.local_experts * self.npes

    @property
    def grid(self) -> int:
        return min(GRID_MAX, self.experts)

    @property
    def recv_rows(self) -> int:
        """Rows of one half of recv_x."""
        return self.local_experts * self.npes * self.max_tokens

    @property
    def signal_words(self) -> int:
        return self.local_experts * self.npes + self.experts
