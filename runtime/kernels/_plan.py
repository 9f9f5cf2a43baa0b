"""The communication kernels' protocol: launch shape, buffer layout and signals, in one place.

Every implementation (Numba, CuTe, Triton, and the CUDA C++ twins in bench/cpp/comm.cu) takes the same
arguments, in this order, and follows the same protocol::

    kernel(out, x, stage, sig, epoch, n, span, chunk, me, npes)

* ``x`` the PE's input (symmetric), ``out`` its output (any device memory, not overlapping ``x``);
* ``stage`` the workspace's symmetric staging array, of the element type; ``sig`` its symmetric
  uint64 signal words; both belong to a :class:`~nvshmem_dsl.kernels.Workspace`;
* ``epoch`` the call's number (1, 2, ...; the same on every PE: calls are collective and made in
  the same order); ``par = epoch & 1`` picks one of the two staging halves;
* ``n`` the elements of the all-reduce (all-gather and reduce-scatter: of one PE's shard); ``span``
  the elements one PE's range holds (one-shot: n; two-shot: ceil(n / npes), the shard; all-gather,
  reduce-scatter: n); block ``b`` of the grid works on ``[b * chunk, min((b + 1) * chunk, span))`` of
  every range (:func:`plan`: every block has at least one element of every non-empty range).

Staging slots: ``slot(k, src) = ((par * K + k) * npes + src) * span`` elements into ``stage``, with
K = 2 for the two-shot all-reduce (k = 0: the reduce-scatter phase, k = 1: the all-gather phase),
K = 1 for the others. Signal words: ``signal(b, phase, src) = (b * 2 + phase) * npes + src``. A
sender puts its data into the receiver's slot and sets (``SIGNAL_SET``) the receiver's word to
``epoch`` in the same ``put_signal_nbi_block``; the receiver waits until the word is >= epoch (the
words only grow, so they are never reset). A word belongs to one sender and one block index,
whatever the grid, so a peer's next call cannot satisfy a wait of this call with another block's
signal.

Why two staging halves are enough and no barrier is needed: every kernel waits for the data of
every peer, so a PE finishes call e only after each peer has started call e; it then writes the
half of call e + 1, and reaches the half of call e again (call e + 2) only after each peer has
started call e + 1, that is, finished reading call e.

Kernels (each block, ``threads`` threads; puts by the whole block, waits by one thread per peer):

* one-shot all-reduce: put my block range of x to every peer's slot(0, me); wait for every peer;
  out[i] = sum over p = 0..npes-1 in order of (x[i] if p == me else slot(0, p)[i]), in float32.
* two-shot all-reduce: put x's shard q (``q * span + range``) to peer q's slot(0, me); wait (phase 0);
  reduce my shard into slot(1, me) and out; put it to every peer's slot(1, me) (phase 1); wait;
  copy every peer's slot(1, q) into out's shard q. An empty range (n < npes * span) still signals.
* all-gather: put x's range to every peer's slot(0, me); out's shard me from x; wait; copy slot(0, q)
  into out's shard q.
* reduce-scatter: put x's shard p to peer p's slot(0, me); wait; out[i] = sum over p in order of
  (x[me * n + i] if p == me else slot(0, p)[i]).

Every kernel ends with ``quiet`` by one thread, so that x may be written once the kernel is done
whatever the transport. Sums run in float32 in PE order: every PE gets the same bits.

The one-shot all-reduce's LL protocol (``one_shot_ll``; NCCL's low-latency one): where every PE reaches
every peer by load/store (``nvshmem_ptr`` not null on every PE: NVLink, P2P, MPS; the workspace asks
once a session, and one host collective makes every PE take the same protocol) and x holds at most
:data:`LL_MAX_BYTES`, the one-shot sends no signal and needs no fence: each element travels in one
64-bit word, ``word = epoch << 32 | bits`` (the epoch's low 32 bits above, the element's bits below:
float32's 32, bfloat16's 16 zero-extended: one element a word, so that both dtypes share the word
layout, the block ranges and the kernel, and no word holds two elements with a tail to mask), which a
64-bit store writes and a 64-bit volatile load (``signal_fetch``) reads whole: a word whose epoch half is
this call's carries this call's data. The kernel takes the workspace's LL words (uint64) in place of
``stage``: ``word(src, i) = (par * npes + src) * span + i``; the plan is the one-shot's over 8-byte words
(block ranges by :data:`BLOCK_BYTES` of words). Each thread stores its elements' words through
``nvshmem_ptr`` into every peer's slot of me (peers in the order (me + k) % npes), then, for each of its
elements, sums in PE order x[i] (p == me) or the data of word(p, i), polled until its epoch half is
this call's. No quiet: plain stores are visible to the peer once they are made, and x is read before
the kernel ends. The LL words are a buffer of their own (the other kernels' data in ``stage`` could
read as a word of a later epoch); they start zeroed and epochs start at 1, so a word never matches
before it is written, and a word of an earlier call holds another epoch half. Every 2**32 calls the
epoch half wraps around (a word last written 2**32 calls before, or never, would match): the workspace
then skips two epochs (to epoch half 2: the halves keep alternating) and makes the LL words anew,
zeroed, every PE at the same call (``Workspace.prepare``). Two
halves are enough by the argument above: every thread waits for every peer's words of its elements,
so a PE finishes call e only after each peer has started call e, and rewrites the half of call e (at
call e + 2, LL or not in between: every kernel waits for every peer) only after each peer has
finished reading it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..host import _arrays

#: The largest grid; the signal array holds 2 * GRID_MAX * npes words.
GRID_MAX = 32
#: Threads per block (Triton: THREADS // 32 warps).
THREADS = 512
#: Bytes of one range that one block takes before the grid grows (up to GRID_MAX).
BLOCK_BYTES = 64 * 1024
#: Chunks are whole multiples of this many bytes (vector copies stay aligned).
ALIGN_BYTES = 16

#: Input bytes of one PE up to which the one-shot all-reduce takes the LL protocol (where every peer is
#: reached by load/store). LL moves 8 bytes an element (float32: 2x, bfloat16: 4x the data); measured
#: (2 PEs, one H200 under MPS, float32, one block): LL 2.96 / 3.03 / 3.70 us at 64 / 512 / 4096 B, the
#: put-with-signal one-shot 5.55 / 5.61 / 6.07 us, NVSHMEM's reduce 8.5 / 8.7 / 10.9 us.
LL_MAX_BYTES = 64 * 1024
#: Bytes of LL words that one block takes before the grid grows (up to GRID_MAX): a block's LL time
#: grows with its words (2 PEs, one H200 under MPS, one block: 3.5 / 4.0 / 6.9 / 11.1 us at 1 / 8 / 32 /
#: 64 KiB of words) while more blocks cost nothing measurable (64 KiB of words a block: 11.1 us with one
#: block, 11.2 with four; tests/gpu/records/2026-12-03/h200-session22.txt).
LL_BLOCK_BYTES = 8 * 1024
#: The LL protocol's word: 8 bytes, the element's bits in the low 32, the epoch's low 32 bits above.
LL_WORD_BYTES = 8
#: The epoch bits an LL word carries.
LL_EPOCH_MASK = 0xFFFFFFFF

KINDS = ("one_shot", "two_shot", "all_gather", "reduce_scatter")
#: The kernel of the one-shot all-reduce's LL protocol (same arguments, ``stage`` the LL words).
LL_KERNEL = "one_shot_ll"
#: Staging slots per PE and half.
SLOTS = {"one_shot": 1, "two_shot": 2, "all_gather": 1, "reduce_scatter": 1}
#: Element types of the kernels (all-gather copies any of them; the reductions sum in float32).
DTYPES = ("float32", "bfloat16")
#: Their sizes, from the host runtime's one table of element sizes.
ITEMSIZE = {name: _arrays.itemsize_of(name) for name in DTYPES}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Plan:
    """The launch of one call: what every PE computes alike from the call's arguments."""

    kind: str
    dtype: str
    n: int  #: elements of the all-reduce, or of one PE's shard
    npes: int
    span: int  #: elements of one PE's range
    chunk: int  #: elements of one block's part of a range
    grid: int
    ll: bool = False  #: the one-shot's LL protocol (``stage``: the LL words, uint64)

    @property
    def kernel(self) -> str:
        """The kernel that runs the plan: ``kind``, or :data:`LL_KERNEL`."""
        return LL_KERNEL if self.ll else self.kind

    @property
    def stage_elems(self) -> int:
        """Elements (LL: words) of staging the call needs (two halves)."""
        return 2 * SLOTS[self.kind] * self.npes * self.span

    @property
    def stage_bytes(self) -> int:
        """Bytes of ``stage`` the call needs (LL: none; :attr:`ll_bytes` of LL words instead)."""
        return 0 if self.ll else self.stage_elems * ITEMSIZE[self.dtype]

    @property
    def ll_bytes(self) -> int:
        """Bytes of LL words the call needs (two halves)."""
        return self.stage_elems * LL_WORD_BYTES if self.ll else 0

    def args(self, epoch: int, me: int) -> tuple[int, int, int, int, int, int]:
        """The kernel's scalar arguments after (out, x, stage, sig)."""
        return (epoch, self.n, self.span, self.chunk, me, self.npes)

    def agreement(self) -> tuple[tuple[str, ...], list[int]]:
        """(names, codes) that every PE's first call of this shape must share."""
        return ("kernel", "dtype", "size"), [KINDS.index(self.kind), DTYPES.index(self.dtype), self.n]

    def describe(self) -> str:
        return f"{self.kind}, {self.dtype}, {self.n} elements"


def takes_ll(kind: str, dtype: str, n: int, load_store: bool) -> bool:
    """Whether ``kind`` over ``n`` elements of ``dtype`` takes the LL protocol; ``load_store``: every PE
    reaches every peer by load/store."""
    return load_store and kind == "one_shot" and n * ITEMSIZE[dtype] <= LL_MAX_BYTES


def plan(kind: str, dtype: str, n: int, npes: int, load_store: bool = False) -> Plan:
    """The launch shape of ``kind`` over ``n`` elements of ``dtype`` on ``npes`` PEs (n >= 1);
    ``load_store``: every PE reaches every peer by load/store (the one-shot may take the LL protocol)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kernel {kind!r}; expected one of {', '.join(KINDS)}")
    ll = takes_ll(kind, dtype, n, load_store)
    size = ITEMSIZE[dtype]
    span = _ceil(n, npes) if kind == "two_shot" else n
    align = ALIGN_BYTES // size
    if ll:
        grid = max(1, min(GRID_MAX, _ceil(span * LL_WORD_BYTES, LL_BLOCK_BYTES)))
    else:
        grid = max(1, min(GRID_MAX, _ceil(span * size, BLOCK_BYTES)))
    chunk = _ceil(_ceil(span, grid), align) * align
    grid = _ceil(span, chunk)
    return Plan(kind, dtype, n, npes, span, chunk, grid, ll)


def signal_words(npes: int) -> int:
    """uint64 words of a workspace's signal array."""
    return 2 * GRID_MAX * npes
