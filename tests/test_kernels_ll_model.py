"""The one-shot's LL protocol (nvshmem_dsl.kernels._plan) as a model run on a CPU: PEs make calls
back to back, each call a thread per element that stores its word (epoch << 32 | data) into every
peer's slot of it, then polls its element's word of every peer until the epoch half is the call's;
a PE's next call starts when its call is done (stream order), and a random scheduler interleaves
every thread of every PE. With the protocol's two halves and 32-bit epoch halves every read gets
its call's data and no schedule hangs; with one half a schedule hangs (a peer overwrites a word
before it is read), with a 1-bit epoch half a stale word of two calls before passes for this call's."""
import random

import pytest

from nvshmem_dsl.kernels import _plan


def _data(e, p, i):
    return (e * 1009 + p * 31 + i) & 0xFFFFFFFF


def run(npes, n, calls, halves, tag_bits, seed):
    """'ok', 'hang' or 'wrong' of one random schedule."""
    rng = random.Random(seed)
    mask = (1 << tag_bits) - 1
    words = [[0] * (halves * npes * n) for _ in range(npes)]  # zeroed, as the workspace's
    call = [0] * npes
    threads = [[] for _ in range(npes)]  # the running call's threads: lists of steps

    def start(me):
        e = call[me] = call[me] + 1
        par = e % halves
        threads[me] = [
            [("store", (me + k) % npes, (par * npes + me) * n + i, (e & mask) << 32 | _data(e, me, i))
             for k in range(1, npes)]
            + [("poll", me, (par * npes + p) * n + i, (e, p, i)) for p in range(npes) if p != me]
            for i in range(n)]

    for me in range(npes):
        start(me)
    while True:
        ready = []
        for me in range(npes):
            for t in threads[me]:
                if t:
                    op, pe, at, what = t[0]
                    if op == "store" or (words[pe][at] >> 32) == (what[0] & mask):
                        ready.append(t)
        if not ready:
            return "ok" if all(c == calls and not any(threads[m]) for m, c in enumerate(call)) else "hang"
        op, pe, at, what = rng.choice(ready).pop(0)
        if op == "store":
            words[pe][at] = what
        elif words[pe][at] & 0xFFFFFFFF != _data(*what):
            return "wrong"
        for me in range(npes):
            if not any(threads[me]) and call[me] < calls:
                start(me)


@pytest.mark.parametrize("npes", (2, 3))
def test_two_halves_and_the_epoch_make_back_to_back_calls_safe(npes):
    assert _plan.LL_WORD_BYTES == 8  # the epoch's 32 bits above the data's 32
    got = {run(npes, 2, 8, halves=2, tag_bits=32, seed=s) for s in range(300)}
    assert got == {"ok"}


def test_one_half_hangs():
    assert "hang" in {run(2, 2, 8, halves=1, tag_bits=32, seed=s) for s in range(300)}


def test_an_epoch_half_of_one_bit_reads_stale_words():
    assert "wrong" in {run(2, 2, 8, halves=2, tag_bits=1, seed=s) for s in range(300)}
