"""CPU emulation of the MoE kernels' index logic (Numba, CuTe and the C++ twin alike; no GPU): the
dispatch's slots from a ballot a warp and the warps' totals, over vectors of THREADS entries of
topk, are the protocol's (token order, a repeated expert at its first slot, -1 nowhere); a warp's
row copy (four vectors a lane while they fit, then one) covers each 16-byte vector of a row once;
the combine's two vectors a thread cover a row of H <= BLOCK_H once, the loads clamped inside the
row."""
from __future__ import annotations

import numpy as np
import pytest

from nvshmem_dsl.kernels.moe import _layout

THREADS = _layout.THREADS
WARPS = THREADS // 32
VEC = 8


def _slots(topk: np.ndarray, e: int) -> list:
    """recv_src of expert e as the kernels fill it: per vector of THREADS entries, each thread's hit,
    its warp's ballot, rank = popc(ballot & lanes up to it) + the totals of the warps before."""
    K = topk.shape[1]
    flat = topk.reshape(-1)
    TK = flat.size
    out, count = {}, 0
    for base in range(0, TK, THREADS):
        hits = np.zeros(THREADS, bool)
        for tid in range(THREADS):
            idx = base + tid
            if idx < TK and flat[idx] == e:
                hits[tid] = not any(flat[jj] == e for jj in range(idx - idx % K, idx))
        ballots = [sum(1 << lane for lane in range(32) if hits[w * 32 + lane]) for w in range(WARPS)]
        warp_hits = [bin(b).count("1") for b in ballots]
        n = sum(warp_hits)
        for tid in np.nonzero(hits)[0]:
            w, lane = divmod(int(tid), 32)
            below = ((2 << lane) - 1) & 0xFFFFFFFF
            rank = bin(ballots[w] & below).count("1") + sum(warp_hits[:w])
            slot = count + rank - 1
            assert slot not in out
            out[slot] = base + int(tid)
        count += n
    assert sorted(out) == list(range(count))
    return [out[s] for s in range(count)]


def _protocol(topk: np.ndarray, e: int) -> list:
    K = topk.shape[1]
    return [t * K + j for t in range(topk.shape[0]) for j in range(K)
            if topk[t, j] == e and e not in topk[t, :j]]


@pytest.mark.parametrize("T,K,E", [(128, 8, 16), (37, 3, 4), (300, 8, 2)])
def test_dispatch_slots_are_the_protocols(T, K, E):
    rng = np.random.default_rng(T * 100 + K)
    topk = rng.integers(-1, E, size=(T, K))
    topk[::3, 1 % K] = topk[::3, 0]  # repeated experts
    topk[:, 0] = np.where(np.arange(T) % 2 == 0, 0, topk[:, 0])  # an overfull expert
    for e in range(E):
        assert _slots(topk, e) == _protocol(topk, e), e


@pytest.mark.parametrize("H", [8, 256, 1024, 7168, 7176, 8192, 16384])
def test_row_copy_covers_each_vector_once(H):
    n = H // VEC
    seen = np.zeros(n, int)
    for lane in range(32):
        v = lane  # in vectors (the C++ twin; Numba and CuTe count elements: v * VEC)
        while v + 96 < n:
            seen[[v, v + 32, v + 64, v + 96]] += 1
            v += 128
        while v < n:
            seen[v] += 1
            v += 32
    assert (seen == 1).all()


@pytest.mark.parametrize("H", [8, 1000, 4096, 7168, 8192, 8200, 16384])
def test_combine_vectors_cover_the_row_once(H):
    block_h = 2 * VEC * THREADS
    stored = np.zeros(H, int)
    for h in range(0, H, block_h):
        for tid in range(THREADS):
            for h_ in (h + tid * VEC, h + tid * VEC + THREADS * VEC):
                load = min(h_, H - VEC)
                assert 0 <= load and load + VEC <= H  # a load past the row reads its last vector
                if h_ < H:
                    assert load == h_
                    stored[h_:h_ + VEC] += 1
    assert (stored == 1).all()
