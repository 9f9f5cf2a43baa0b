"""The fused all-gather + GEMM's protocol: staging, signal words, tile order, in one place.

``C = all_gather(A) @ B``: every PE holds a row shard ``a`` [m, K] of A (the same m and K on
every PE, symmetric memory) and its own ``b`` [K, N] (a column shard of the weights, any device
memory, N may differ by PE); it computes ``out`` [npes * m, N], whose rows ``s * m ...`` come from
PE s's shard. The kernel reads its own shard from ``a`` and every other shard from the workspace's
staging, where the shard's owner puts it:

* staging slot of source s in call ``epoch``: ``slot(s) = (par * npes + s) * m * K`` elements
  into ``stage``, ``par = epoch & 1`` (two halves, as in :mod:`nvshmem_dsl.kernels._plan`: a PE
  writes a peer's half of call e + 2 only after that peer has finished call e, because each call
  waits for every peer's shard);
* a shard goes out in ``parts`` row ranges of ``part_rows = ceil(m / parts)`` rows; part c of
  source s sets the receiver's signal word ``signal(c, s) = c * npes + s`` to the call's epoch in
  the same put (``put_signal``, ``SIGNAL_SET``); the words only grow, never reset;
* the shard goes out on a second stream, which waits for the caller's stream at the call's start
  and which the caller's stream waits for at the call's end, beside the GEMM kernel on the
  caller's stream, to the peers in the order ``me - 1, me - 2, ...`` (so that PE r gets shard
  r + 1 first: the one its GEMM reads first);
* ``comm="ctas"``: by a kernel of ``parts`` programs, program c putting part c of ``a`` to every
  peer with ``put_signal_nbi_block``, then ``quiet``; the GEMM leaves it ``parts`` SMs;
* ``comm="copy_engine"``: in one part, by the host API's stream-ordered ``put_signal`` (NVSHMEM
  moves it with the copy engine to a peer reachable by load/store, and sets the signal by a stream
  memory operation: no SM).

Tiles (the GEMM kernel): ``BM x BN`` tiles of ``out``, chunk by chunk (a tile never straddles two
shards: any m works), chunks in the order ``me, me + 1, ...`` (the local shard needs no wait),
within a chunk grouped by ``GROUP_M`` rows of tiles (L2 reuse of ``b``); persistent programs take
tiles ``g, g + G, ...`` of that order. Before it reads a remote shard's rows a program waits (one
thread, then a program barrier) for the words of the parts those rows lie in.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import _plan as _comm_plan

#: Element types (tl.dot / wgmma inputs; the sums run in float32).
DTYPES = ("bfloat16",)
ITEMSIZE = {name: _comm_plan.ITEMSIZE[name] for name in DTYPES}
#: How the shards travel.
COMMS = ("ctas", "copy_engine")
#: Programs of the put kernel of ``comm="ctas"`` unless the call names another number.
COMM_CTAS = 8
#: The most parts a shard may go in: the workspace has 2 * GRID_MAX signal words a sender.
MAX_PARTS = 2 * _comm_plan.GRID_MAX
#: Code of the kernel in the first call's agreement (beside the collectives' kind codes).
KIND_CODE = 100


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Plan:
    """One call's shape and communication, the same on every PE."""

    dtype: str
    m: int  #: rows of a shard
    K: int
    npes: int
    comm: str
    parts: int  #: parts a shard goes in (ctas: the put kernel's programs; copy engine: 1)

    kind = "ag_gemm"

    @property
    def put_ctas(self) -> int:
        """Programs (SMs) of the put kernel beside the GEMM: the parts with comm="ctas" and peers."""
        return self.parts if self.comm == "ctas" and self.npes > 1 else 0

    @property
    def part_rows(self) -> int:
        return _ceil(self.m, self.parts)

    @property
    def shard_elems(self) -> int:
        return self.m * self.K

    @property
    def stage_elems(self) -> int:
        """Elements of staging: two halves of every PE's shard."""
        return 2 * self.npes * self.shard_elems

    @property
    def stage_bytes(self) -> int:
        return self.stage_elems * ITEMSIZE[self.dtype]

    def slot(self, epoch: int, src: int) -> int:
        """Element offset of source ``src``'s shard in ``stage`` for call ``epoch``."""
        return ((epoch & 1) * self.npes + src) * self.shard_elems

    def signal(self, part: int, src: int) -> int:
        """Index of the word that part ``part`` of source ``src``'s shard sets."""
        return part * self.npes + src

    def send_order(self, me: int) -> list[int]:
        """The peers a PE sends its shard to, in order (each gets the shard it reads first first)."""
        return [(me - k) % self.npes for k in range(1, self.npes)]

    def agreement(self) -> tuple[tuple[str, ...], list[int]]:
        """(names, codes) that every PE's first call of this shape must share."""
        return (("kernel and communication", "dtype", "rows of a shard", "K"),
                [KIND_CODE + COMMS.index(self.comm) * MAX_PARTS + self.parts, DTYPES.index(self.dtype),
                 self.m, self.K])

    def describe(self) -> str:
        return f"all_gather_matmul {self.dtype}, shard ({self.m}, {self.K}), comm {self.comm} in {self.parts} parts"


def plan(dtype: str, m: int, K: int, npes: int, comm: str, comm_ctas: int | None = None) -> Plan:
    """The plan of a call on shards [m, K] of ``dtype`` over ``npes`` PEs (m, K >= 1)."""
    if comm not in COMMS:
        raise ValueError(f"unknown communication {comm!r}; expected one of {', '.join(COMMS)}")
    if comm == "copy_engine":
        parts = 1
    else:
        parts = COMM_CTAS if comm_ctas is None else comm_ctas
        if not 1 <= parts <= MAX_PARTS:
            raise ValueError(f"comm_ctas must be 1 to {MAX_PARTS}, got {parts}")
    return Plan(dtype, m, K, npes, comm, parts)
