"""A workspace of the communication kernels: symmetric staging, LL words and signal words, the call
count (epoch), the shapes the PEs have agreed on, and whether every PE reaches every peer by load/store.

Calls through one workspace must be ordered (one stream, or streams ordered by events): the epoch
numbers the calls. Use one workspace per concurrent stream.
"""
from __future__ import annotations

import threading

from ..errors import NvshmemArgumentError
from ..host import _state, memory
from . import _plan


class Workspace:
    """Symmetric staging and LL words (grown as calls need them) and signal words, made on first use
    (collective)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = -1
        self._stage: memory.Buffer | None = None
        self._sig: memory.Buffer | None = None
        self._ll: memory.Buffer | None = None
        self._load_store: bool | None = None
        self._views: dict = {}
        self._agreed: set = set()
        self.epoch = 0  #: calls made so far (the next call's epoch is epoch + 1)

    def _reset_if_stale(self, s) -> None:
        if self._generation != s.generation:  # a new init: the old buffers are gone
            self._stage = self._sig = self._ll = None
            self._views, self._agreed, self.epoch = {}, set(), 0
            self._load_store = None
            self._generation = s.generation

    def agree(self, plan, function: str) -> None:
        """On the first call of a shape, check that every PE calls with it (one host collective).
        ``plan``: a :class:`~nvshmem_dsl.kernels._plan.Plan` or any plan with ``agreement()``
        (names and codes, at most 4) and ``describe()``."""
        names, codes = plan.agreement()
        key = tuple(codes)
        if key in self._agreed:
            return
        ranges = memory.value_ranges(codes)
        if ranges:
            for name, mine, (lo, hi) in zip(names, codes, ranges):
                if lo != hi:
                    raise NvshmemArgumentError(
                        f"{function}(): the PEs called with different arguments: {name} differs (this PE: "
                        f"{plan.describe()}; over all PEs the {name} code ranges "
                        f"from {lo} to {hi}). Every PE must make the same calls, in the same order."
                    )
        self._agreed.add(key)

    def load_store(self, function: str, plan=None) -> bool:
        """Whether every PE reaches every peer by load/store, agreed over all PEs so that every PE
        takes the same protocol (:func:`nvshmem_dsl.host.memory.reached_by_load_store`: collective on
        a session's first call). ``plan``: agreed on first (:meth:`agree`), so that PEs that call with
        different shapes raise before they ask."""
        s = _state.require(f"{function}()")
        with self._lock:
            self._reset_if_stale(s)
            if plan is not None:
                self.agree(plan, function)
            if self._load_store is None:
                self._make_signals(s)
                self._load_store = memory.reached_by_load_store()
            return self._load_store

    def _make_signals(self, s) -> None:
        if self._sig is None:
            self._sig = memory.internal_buffer(8 * _plan.signal_words(s.n_pes), "kernels workspace signals")

    def _grown(self, buf, need: int, what: str, sync):
        """``buf``, or a new zeroed buffer of at least ``need`` bytes when it is smaller (collective)."""
        if buf is not None and buf.nbytes >= need:
            return buf
        if buf is not None:
            sync()  # kernels of earlier calls may still use the old buffer
            memory.free_internal(buf)
            self._views = {}
        size = max(need, 1 << 20, 2 * (buf.nbytes if buf is not None else 0))
        return memory.internal_buffer(size, what)

    def prepare(self, plan, function: str, sync) -> int:
        """Make room for ``plan`` and return its epoch; ``sync()`` waits for the device before a
        buffer is replaced."""
        s = _state.require(f"{function}()")
        with self._lock:
            self._reset_if_stale(s)
            self.agree(plan, function)
            self._make_signals(s)
            self._stage = self._grown(self._stage, plan.stage_bytes, "kernels workspace staging", sync)
            self.epoch += 1
            if self.epoch & _plan.LL_EPOCH_MASK == 0:
                self._wrap_ll(sync)
            if getattr(plan, "ll", False):
                # zeroed when made (nvshmem_calloc: no word matches an epoch before it is written)
                self._ll = self._grown(self._ll, plan.ll_bytes, "kernels workspace LL words", sync)
            return self.epoch

    def _wrap_ll(self, sync) -> None:
        """The LL words' epoch half wraps around (every 2**32 calls): a word last written 2**32 calls ago
        (or never: 0) would match. Skip two epochs (the halves keep alternating; the new epoch's half is
        2, above a zeroed word's) and make the LL words anew, zeroed (collective: every PE wraps at the
        same call)."""
        self.epoch += 2
        if self._ll is not None:
            sync()  # this PE's kernels are done; nvshmem_free waits for every PE's
            nbytes = self._ll.nbytes
            memory.free_internal(self._ll)
            self._ll = memory.internal_buffer(nbytes, "kernels workspace LL words")
            self._views = {}

    def views(self, dtype: str, like: str, ll: bool = False):
        """(staging, signals) as arrays of ``like`` ("numba", "torch", "cupy"); bfloat16 staging as
        int16 for Numba. ``ll``: the LL words (uint64) in place of the staging."""
        if ll:
            key = ("ll", like)
            got = self._views.get(key)
            if got is None:
                words = self._ll.as_array(self._ll.nbytes // 8, "uint64", like)
                got = self._views[key] = (words, self.views(dtype, like)[1])
            return got
        key = (dtype, like)
        got = self._views.get(key)
        if got is None:
            elem = "int16" if (like == "numba" and dtype == "bfloat16") else dtype
            stage = self._stage.as_array(self._stage.nbytes // _plan.ITEMSIZE[dtype], elem, like)
            sig = self._sig.as_array(self._sig.nbytes // 8, "uint64", like)
            got = self._views[key] = (stage, sig)
        return got

    def free(self) -> None:
        """Free the buffers now (collective); the next call makes them again."""
        with self._lock:
            for buf in (self._stage, self._sig, self._ll):
                if buf is not None and not buf.freed and self._generation == _state.STATE.generation:
                    memory.free_internal(buf)
            self._stage = self._sig = self._ll = None
            self._views = {}


_default: Workspace | None = None


def default() -> Workspace:
    """The process's workspace for calls that name none."""
    global _default
    if _default is None:
        _default = Workspace()
    return _default
