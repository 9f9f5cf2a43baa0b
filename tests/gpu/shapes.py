"""The kernel shapes of the GPU device-API tests, described once for every DSL.

tests/gpu/test_numba_gpu.py, test_cute_gpu.py and test_triton_gpu.py test the same NVSHMEM
device functions from three DSLs. What a test does is data here: a :class:`Shape` names the
device function (as in the spec: ``put_nbi``, ``atomic_fetch_add``, ``sum_reduce`` ...), its
scope, element type, count, signal op and launch geometry, the buffers it starts from (a
function of the PE and the number of PEs) and the check of what they hold afterwards; and the
DSLs it applies to, with a one-line reason for each DSL it leaves out. :data:`TABLE` lists the
shapes, grouped by *kind* (one test function per kind in each DSL's test file, parametrised with
:func:`cases`; the test ids are the shapes' :attr:`Shape.id`).

The DSL files keep what is theirs: the kernels (``numba_kernels.py``, ``cute_kernels.py``,
``triton_gpu_kernels.py``: importable without a GPU, so that CPU tests compile every kernel of the
table) and how a shape is launched. :func:`run` does the rest for every DSL: skip where NVSHMEM
or the PE count lacks what the shape needs, allocate and fill the buffers (outputs poisoned),
barrier, launch, barrier, check on every PE against the host reference.

Every PE can compute every PE's input (:func:`data`), so the checks work for any number of PEs
(1, 2, 4, 8 ...). This module imports numpy only; cupy, torch and NVSHMEM are imported when a
test runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

POISON = -7777.0
INT_POISON = 0x5A
N = 1024          # elements of the RMA shapes
COLL_N = 64       # elements per PE of the collective shapes
REDUCE_N = 256    # elements of the reductions
THREADS = 64      # threads of a one-block launch, unless a shape says otherwise
SCOPES = ("thread", "warp", "block")
SUFFIX = {"thread": "", "warp": "_warp", "block": "_block"}
DSLS = ("numba", "cute", "triton")
REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply,
            "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
EXAMPLES = ("ring_put_get", "put_signal_pipeline", "allreduce", "halo_exchange")

# Reasons a DSL leaves a shape out (one line each, shown by describe()).
NO_BF16_NUMBA = "numba: numba-cuda and cupy have no bfloat16 arrays (the uint16 shape moves the same bits)"
NO_COMPLEX_CUTE = "cute: CuTe DSL has no complex element type"
NO_COMPLEX_TRITON = "triton: Triton has no complex dtype"
NO_WINDOW_CUTE = "cute: nvshmem_dsl.cute has no nv.window (a sub-tensor as RMA target is untried)"
NUMBA_ONLY_WINDOW = "only nv.window (Numba) clamps windows; CuTe has none, Triton offsets pointers"
NO_TEAM_CUTE = ("cute: not written: the gathered output's size depends on the team, and a CuTe "
                "launcher is compiled per static tensor size")


# --------------------------------------------------------------- inputs


def data(pe, n=N, dtype=np.float32, salt=0):
    """The random data PE `pe` contributes: every PE can compute every other PE's.
    "bfloat16": the top 16 bits of the float32 data, as uint16 (its host storage)."""
    if str(dtype) == "bfloat16":
        return (data(pe, n, np.float32, salt).view(np.uint32) >> 16).astype(np.uint16)
    rng = np.random.default_rng(1000 * pe + salt)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(1, 100, n).astype(dtype)
    return rng.integers(1, 100, n).astype(dtype)


def storage(dtype) -> np.dtype:
    """The host dtype that holds elements of `dtype` (bfloat16: uint16)."""
    return np.dtype(np.uint16) if str(dtype) == "bfloat16" else np.dtype(dtype)


def poison(n, dtype=np.float32):
    dt = storage(dtype)
    return np.full(n, POISON if dt.kind == "f" and str(dtype) != "bfloat16" else INT_POISON, dt)


@dataclass(frozen=True)
class Buf:
    """One array of a test: its initial contents, whether it is symmetric (else a plain device
    array of this PE) and its element type name ("bfloat16" for bfloat16 held as uint16)."""
    values: np.ndarray
    symmetric: bool = True
    dtype: str = ""

    @property
    def elem(self) -> str:
        return self.dtype or self.values.dtype.name


def sym(values, dtype=""):
    return Buf(np.ascontiguousarray(values), True, dtype)


def local(values):
    return Buf(np.ascontiguousarray(values), False)


class Bufs(dict):
    """name -> array; also as attributes (``b.dst``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# --------------------------------------------------------------- the shapes


@dataclass(frozen=True)
class Shape:
    kind: str                 # the test function: test_<kind> in each DSL file
    op: str                   # the device function, as the spec names it (no scope suffix)
    scope: str = "thread"
    dtype: str = "float32"
    count: int | None = None  # explicit nelems, where the shape passes one
    nbi: bool = False
    signal_op: str | None = None
    grid: int = 1             # blocks (Numba, CuTe)
    block: int = THREADS      # threads per block (Triton: num_warps = block // 32, at least 1)
    per_thread: bool = False  # every thread of grid x block calls once (Triton: one program each)
    requires: tuple = ()      # device functions older NVSHMEM lacks: the test skips without them
    min_pes: int = 1
    excluded: tuple = ()      # "dsl: why", one per DSL that leaves the shape out
    name: str = ""            # the id, where op-scope does not say it

    @property
    def id(self) -> str:
        if self.name:
            return self.name
        return self.op if self.kind in SCOPELESS else f"{self.op}-{self.scope}"

    @property
    def function(self) -> str:
        """The DSL function called, with its scope suffix (``put_nbi_warp``)."""
        return self.op + SUFFIX[self.scope]

    @property
    def calls(self) -> int:
        return self.grid * self.block

    def applies(self, dsl: str) -> bool:
        return not any(r.startswith(dsl + ":") for r in self.excluded)

    def buffers(self, me: int, npes: int) -> Bufs:
        return Bufs(KINDS[self.kind].buffers(self, me, npes))

    def check(self, got: dict, me: int, npes: int) -> None:
        KINDS[self.kind].check(self, Bufs(got), me, npes)


@dataclass(frozen=True)
class Kind:
    buffers: Callable   # (shape, me, npes) -> {name: Buf}
    check: Callable     # (shape, got: {name: host array}, me, npes) -> None (asserts)
    doc: str = ""


def _left(me, npes):
    return (me - 1) % npes


def _peer(me, npes):
    return (me + 1) % npes


def _eq(got, want, what, me):
    np.testing.assert_array_equal(got, want, err_msg=f"{what} on PE {me}")


def _src_dst(s, me, npes):
    return {"dst": sym(poison(N, s.dtype), s.dtype), "src": sym(data(me, N, s.dtype), s.dtype)}


def _check_moved(s, got, me, npes):
    """put-like ops bring the left PE's data here; get-like ones the right PE's."""
    from_pe = _peer(me, npes) if s.op in ("get", "get_nbi", "g") else _left(me, npes)
    _eq(got.dst, data(from_pe, N, s.dtype), s.function, me)


def _check_part(s, got, me, npes, start=0):
    want = poison(N)
    want[start:start + s.count] = data(_left(me, npes))[start:start + s.count]
    _eq(got.dst, want, f"{s.function} of [{start}, {start + s.count})", me)


def _check_strided(s, got, me, npes):
    n = s.count
    want = poison(N)
    src = _left(me, npes) if s.op == "iput" else _peer(me, npes)
    want[0:2 * n:2] = data(src)[0:3 * n:3]  # dst stride 2, src stride 3
    _eq(got.dst, want, s.function, me)


def _signal_bufs(s, me, npes):
    return {**_src_dst(s, me, npes), "sig": sym(np.zeros(4, np.uint64))}


def _check_signal(s, got, me, npes):
    _eq(got.dst, data(_left(me, npes)), f"{s.function} data", me)
    _eq(got.sig, np.array([7, 7, 7, 0], np.uint64), "signal word, wait_until result, signal_fetch", me)


def _check_atomics(s, got, me, npes):
    n = s.calls
    # each call adds 1 / 2 / 1 / 1; the or/xor of bit i % 64: n // 64 xors of each bit cancel
    _eq(got.counter, np.array([n, 2 * n, n, n, 2 ** 64 - 1, 0, 0, 0], np.uint64), "atomic counters", me)
    _eq(np.sort(got.out), np.arange(n, dtype=np.uint64), "atomic_fetch_add: each old value once", me)


def _check_atomics_scalar(s, got, me, npes):
    # swap 5->11, cswap 11->12, cswap (99: no match), fetch 12; set 42, 42 & 0b111000 = 40,
    # 40 | 1 = 41, 41 ^ 3 = 42, 42 & 2 = 2
    _eq(got.out, [5, 11, 12, 12, 42, 40, 41, 2], "values fetched", me)
    _eq(got.x, np.array([12, 2], np.int64), "target after the left PE's atomics", me)


def _wait_bufs(s, me, npes):
    b = {"ivars": sym(np.zeros(8, np.int32)), "out": local(np.full(8, -1, np.int64)),
         "idx": local(np.full(8, 99, np.uint64))}
    if s.kind == "wait_vector":
        b["cmp_values"] = local(np.arange(8, dtype=np.int32))  # ivars[i] = 2i >= i; > i for i >= 1
        b["idx2"] = local(np.full(8, 99, np.uint64))
    return b


def _check_wait(s, got, me, npes):
    # test_all, test(ivars[3] == 4), test_any(== 3), wait_until_any(>= 8), wait_until_some(<= 2)
    # and its indices idx[0] + 10 idx[1]
    _eq(got.out, [1, 1, 2, 7, 2, 10, -1, -1], "wait/test results", me)
    _eq(got.idx, [0, 1, 99, 99, 99, 99, 99, 99], "wait_until_some indices", me)
    _eq(got.ivars, np.arange(1, 9, dtype=np.int32), "ivars written by the left PE", me)


def _check_wait_vector(s, got, me, npes):
    o = got.out
    # test_all_vector, wait_until_any_vector(>), test_some_vector(>), test_any_vector(==),
    # wait_until_some_vector(>=), test_some(>= 0)
    assert o[0] == 1 and 1 <= o[1] <= 7 and o[2] == 7 and o[3] == 0 and o[4] == 8 and o[5] == 8, o
    assert (o[6:] == -1).all(), o
    _eq(np.sort(got.idx[:7]), np.arange(1, 8), "test_some_vector indices (i > i fails for 0)", me)
    assert got.idx[7] == 99, got.idx
    _eq(np.sort(got.idx2), np.arange(8), "wait_until_some_vector / test_some indices", me)
    _eq(got.ivars, 2 * np.arange(8, dtype=np.int32), "ivars written by the left PE", me)


def _check_barriers(s, got, me, npes):
    _eq(got.x, np.array([1, 2], np.int32), "fence-ordered puts", me)
    # barrier, team_sync, my_pe, n_pes, team_my_pe, team_n_pes, translate_pe(n_pes - 1)
    _eq(got.out, [0, 0, me, npes, me, npes, npes - 1, -9], "barriers and queries", me)


def _check_ptr(s, got, me, npes):
    assert got.out[0] != 0, "nvshmem_ptr to the peer is null"
    assert got.out[1] == int(POISON), got.out  # the peer's x[3], loaded through the view
    _eq(got.x, np.array([123.0, _left(me, npes), POISON, POISON], np.float32),
        "stores through a peer view (123, the left PE's number)", me)


def coll_count(s, npes):
    """nelems of a broadcast / fcollect / alltoall shape: alltoall's is per destination PE."""
    return COLL_N if s.op == "alltoall" else COLL_N * npes


def _coll_bufs(s, me, npes):
    return {"dst": sym(poison(COLL_N * npes * npes, np.int32)),
            "src": sym(data(me, COLL_N * npes, np.int32))}


def _check_coll(s, got, me, npes):
    n = COLL_N
    if s.op == "broadcast":
        want = data(0, n * npes, np.int32)
    elif s.op == "fcollect":
        want = np.concatenate([data(pe, n * npes, np.int32) for pe in range(npes)])
    else:
        want = np.concatenate([data(pe, n * npes, np.int32)[me * n:(me + 1) * n] for pe in range(npes)])
    expected = poison(n * npes * npes, np.int32)
    expected[:want.size] = want
    _eq(got.dst, expected, s.function, me)


def _reduce_values(pe):
    return data(pe, REDUCE_N, np.uint32, salt=7) % 8 + 1


def _check_reduce(s, got, me, npes):
    want = _reduce_values(0)
    for pe in range(1, npes):
        want = REDUCERS[s.op[:-len("_reduce")]](want, _reduce_values(pe)).astype(np.uint32)
    _eq(got.dst, want, s.function, me)


def _check_reducescatter(s, got, me, npes):
    want = sum(data(pe, COLL_N * npes) for pe in range(npes))[me * COLL_N:(me + 1) * COLL_N]
    np.testing.assert_allclose(got.dst, want, rtol=1e-6, err_msg=f"{s.function} on PE {me}")


A2A_N = 16


def _check_all_to_all(s, got, me, npes):
    _eq(got.dst, np.concatenate([data(pe, A2A_N, np.int32) for pe in range(npes)]), "put_signal from every PE", me)
    _eq(got.sig, np.array(list(range(1, npes + 1)) + [0], np.uint64), "signal words", me)


TEAM_N = 8


def team_bufs(members, me):
    """The buffers of the team kernel on a team of `members` (world PEs)."""
    return Bufs({"dst": sym(poison(TEAM_N, np.int32)), "src": sym(data(me, TEAM_N, np.int32, salt=3)),
                 "gathered": sym(poison(TEAM_N * len(members), np.int32)),
                 "out": local(np.full(8, -9, np.int32))})


def check_team(members, got, me, what):
    got = Bufs(got)
    values = {pe: data(pe, TEAM_N, np.int32, salt=3) for pe in members}
    # team_my_pe, team_n_pes, translate_pe(0 -> world), sum_reduce, fcollect, team_sync
    _eq(got.out[:6], [members.index(me), len(members), members[0], 0, 0, 0],
        f"{what}: team queries and return codes", me)
    _eq(got.dst, sum(values.values()).astype(np.int32), f"{what}: sum_reduce", me)
    _eq(got.gathered, np.concatenate([values[pe] for pe in members]), f"{what}: fcollect", me)


KINDS: dict[str, Kind] = {
    "put_get": Kind(_src_dst, _check_moved, "put / get (+ nbi, then quiet) of N floats"),
    "put_count": Kind(_src_dst, _check_part, "put_block of the first `count` elements: the rest untouched"),
    "window": Kind(_src_dst, lambda s, g, me, np_: _check_part(s, g, me, np_, start=300),
                   "put_block of elements [300, 300 + count) of both arrays"),
    "window_sizes": Kind(lambda s, me, npes: {"sizes": local(np.zeros(4, np.int64)), "x": local(np.zeros(N, np.float32))},
                         lambda s, g, me, npes: _eq(g.sizes, [200, 0, 3, 0], "window sizes", me),
                         "nv.window(x, 300, 200), (-5, 10), (N - 3, 10), (N + 8, 1): their sizes"),
    "put_width": Kind(_src_dst, _check_moved, "put_block of N elements of every width"),
    "p_g": Kind(_src_dst, _check_moved, "p / g of one element from every thread"),
    "strided": Kind(_src_dst, _check_strided, "iput / iget of `count` elements, dst stride 2, src stride 3"),
    "put_signal": Kind(_signal_bufs, _check_signal,
                       "put_signal(SET 7) to the right PE; thread 0 waits for its own word (wait_until "
                       "-> sig[1], signal_fetch -> sig[2])"),
    "signal_add": Kind(lambda s, me, npes: {"sig": sym(np.zeros(1, np.uint64))},
                       lambda s, g, me, npes: _eq(g.sig, np.array([s.calls], np.uint64), "signal_op ADD", me),
                       "signal_op(ADD 1) to the right PE from every thread"),
    "atomics": Kind(lambda s, me, npes: {"counter": sym(np.zeros(8, np.uint64)),
                                         "out": local(np.zeros(s.calls, np.uint64))},
                    _check_atomics, "fetch_add, add 2, inc, fetch_inc, or / xor of bit i % 64 from every thread"),
    "atomics_scalar": Kind(lambda s, me, npes: {"x": sym(np.array([5, 0], np.int64)),
                                                "out": local(np.zeros(8, np.int64))},
                           _check_atomics_scalar, "swap, compare_swap, fetch, set and the bitwise AMOs"),
    "float_atomic_add": Kind(lambda s, me, npes: {"x": sym(np.zeros(1, np.float32))},
                             lambda s, g, me, npes: _eq(g.x, np.array([0.5 * s.calls], np.float32),
                                                        "float atomic_add 0.5", me),
                             "atomic_add(0.5) of a float from every thread"),
    "wait": Kind(_wait_bufs, _check_wait, "p ivars[i] = i + 1 to the right PE; wait/test on this PE's"),
    "wait_vector": Kind(_wait_bufs, _check_wait_vector,
                        "p ivars[i] = 2i to the right PE; the vector wait/test forms against cmp_values[i] = i"),
    "barriers": Kind(lambda s, me, npes: {"x": sym(np.zeros(2, np.int32)), "out": local(np.full(8, -9, np.int32))},
                     _check_barriers, "fence-ordered p's to the right PE; barriers, syncs and queries at a scope"),
    "flush": Kind(lambda s, me, npes: {"x": sym(np.zeros(1, np.int32))},
                  lambda s, g, me, npes: _eq(g.x, np.array([5], np.int32), "p then flush", me),
                  "p, then flush at every scope"),
    "barrier_warpgroup": Kind(lambda s, me, npes: {"out": local(np.full(1, -9, np.int32))},
                              lambda s, g, me, npes: _eq(g.out, [0], "barrier_warpgroup", me),
                              "barrier_warpgroup by 4 warps"),
    "ptr_peer": Kind(lambda s, me, npes: {"x": sym(poison(4)), "out": local(np.zeros(2, np.int64))},
                     _check_ptr, "ptr to the right PE; stores and a load through the peer view"),
    "coll": Kind(_coll_bufs, _check_coll, "broadcast (root 0) / fcollect / alltoall on TEAM_WORLD"),
    "reduce": Kind(lambda s, me, npes: {"dst": sym(poison(REDUCE_N, np.uint32)),
                                        "src": sym(_reduce_values(me))},
                   _check_reduce, "<op>_reduce of REDUCE_N uint32 on TEAM_WORLD"),
    "reducescatter": Kind(lambda s, me, npes: {"dst": sym(poison(COLL_N)), "src": sym(data(me, COLL_N * npes))},
                          _check_reducescatter, "sum_reducescatter of COLL_N floats per PE"),
    "all_to_all_signals": Kind(lambda s, me, npes: {"dst": sym(poison(A2A_N * npes, np.int32)),
                                                    "src": sym(data(me, A2A_N, np.int32)),
                                                    "sig": sym(np.zeros(npes + 1, np.uint64))},
                               _check_all_to_all,
                               "put_signal_nbi of this PE's block to every PE (slot my_pe, signal word my_pe "
                               "set to my_pe + 1); wait_until_all of every word here"),
    # the team kernel's buffers depend on the team: see run_team
    "team": Kind(lambda s, me, npes: team_bufs(list(range(npes)), me), None,
                 "on a team made on the host: queries, sum_reduce, fcollect, team_sync"),
}
SCOPELESS = {"put_count", "window", "window_sizes", "put_width", "p_g", "signal_add", "atomics",
             "atomics_scalar", "float_atomic_add", "wait", "wait_vector", "flush",
             "barrier_warpgroup", "ptr_peer", "all_to_all_signals", "team"}

FLUSH = ("nvshmemx_flush", "nvshmemx_flush_warp", "nvshmemx_flush_block")


def _table() -> list[Shape]:
    t = []
    for op in ("put", "put_nbi", "get", "get_nbi"):
        t += [Shape("put_get", op, s, block=128, nbi=op.endswith("_nbi")) for s in SCOPES]
    t.append(Shape("put_count", "put", "block", count=100, name="put_block-100"))
    t.append(Shape("window", "put", "block", count=200, name="put_block-300-200", excluded=(NO_WINDOW_CUTE,)))
    t.append(Shape("window_sizes", "window", count=200, name="window-sizes",
                   excluded=("cute: " + NUMBA_ONLY_WINDOW, "triton: " + NUMBA_ONLY_WINDOW)))
    for d in ("int8", "uint16", "int32", "uint64", "float16", "float64", "bfloat16", "complex64"):
        ex = {"bfloat16": (NO_BF16_NUMBA,), "complex64": (NO_COMPLEX_CUTE, NO_COMPLEX_TRITON)}.get(d, ())
        t.append(Shape("put_width", "put", "block", dtype=d, name=d, excluded=ex))
    for d in ("float32", "float16", "bfloat16"):
        for op in ("p", "g"):
            t.append(Shape("p_g", op, dtype=d, grid=N // 128, block=128, per_thread=True,
                           name=op if d == "float32" else f"{op}-{d}",
                           excluded=(NO_BF16_NUMBA,) if d == "bfloat16" else ()))
    for op in ("iput", "iget"):
        t += [Shape("strided", op, s, count=100) for s in SCOPES]
    for op in ("put_signal", "put_signal_nbi"):
        t += [Shape("put_signal", op, s, nbi=op.endswith("_nbi"), signal_op="SIGNAL_SET") for s in SCOPES]
    t.append(Shape("signal_add", "signal_op", dtype="uint64", signal_op="SIGNAL_ADD", grid=4, block=128,
                   per_thread=True))
    t.append(Shape("atomics", "atomic_fetch_add", dtype="uint64", grid=4, block=128, per_thread=True))
    t.append(Shape("atomics_scalar", "atomic_swap", dtype="int64", block=1))
    t.append(Shape("float_atomic_add", "atomic_add", grid=2, block=128, per_thread=True,
                   requires=("nvshmemx_float_atomic_add",)))
    t.append(Shape("wait", "wait_until", dtype="int32", block=32))
    t.append(Shape("wait_vector", "wait_until_all_vector", dtype="int32", block=32))
    t += [Shape("barriers", "barrier", s, block=128) for s in SCOPES]
    t.append(Shape("flush", "flush", dtype="int32", requires=FLUSH))
    t.append(Shape("barrier_warpgroup", "barrier_warpgroup", block=128))
    t.append(Shape("ptr_peer", "ptr", block=1))
    for op in ("broadcast", "fcollect", "alltoall"):
        t += [Shape("coll", op, s, dtype="int32") for s in SCOPES]
    # every op at thread scope, and every scope for sum and xor (each is a kernel of its own:
    # a block-scope reduction is large)
    for op, s in [(op, "thread") for op in REDUCERS] + [("sum", "warp"), ("sum", "block"), ("xor", "block")]:
        t.append(Shape("reduce", f"{op}_reduce", s, dtype="uint32"))
    t += [Shape("reducescatter", "sum_reducescatter", s) for s in SCOPES]
    t.append(Shape("all_to_all_signals", "put_signal_nbi", dtype="int32", signal_op="SIGNAL_SET",
                   name="every-pe", excluded=(NO_WINDOW_CUTE,)))
    t.append(Shape("team", "split_strided", dtype="int32", block=32, name="split_strided",
                   excluded=(NO_TEAM_CUTE,)))
    t.append(Shape("team", "split_2d", dtype="int32", block=32, min_pes=4, name="split_2d",
                   excluded=(NO_TEAM_CUTE,)))
    return t


TABLE: list[Shape] = _table()


def shapes(dsl: str, kind: str | None = None) -> list[Shape]:
    return [s for s in TABLE if s.applies(dsl) and (kind is None or s.kind == kind)]


def cases(dsl: str, kind: str):
    """``@pytest.mark.parametrize("shape", ...)`` over the shapes of `kind` that `dsl` runs."""
    import pytest

    found = shapes(dsl, kind)
    assert found, (dsl, kind)
    return pytest.mark.parametrize("shape", found, ids=[s.id for s in found])


def describe() -> str:
    """The table as text: one line a shape, with the DSLs that leave it out and why."""
    lines = []
    for s in TABLE:
        runs = ",".join(d for d in DSLS if s.applies(d))
        lines.append(f"{s.kind:20} {s.id:24} {s.function:26} {s.dtype:9} {runs:18} " + "; ".join(s.excluded))
    return "\n".join(lines)


# --------------------------------------------------------------- running a shape (GPU)


def me() -> int:
    import nvshmem_dsl
    return nvshmem_dsl.my_pe()


def npes() -> int:
    import nvshmem_dsl
    return nvshmem_dsl.n_pes()


def peer() -> int:
    return _peer(me(), npes())


def left() -> int:
    return _left(me(), npes())


class Cupy:
    """Arrays for Numba and CuTe kernels: cupy (symmetric ones from nvshmem.array)."""

    def __init__(self, extra_sync=None):
        import cupy
        self.cp, self.extra_sync = cupy, extra_sync

    def alloc(self, b: Buf):
        import nvshmem_dsl
        if not b.symmetric:
            return self.cp.asarray(b.values)
        x = nvshmem_dsl.array(b.values.shape, b.values.dtype, like="cupy")
        x[...] = self.cp.asarray(b.values)
        return x

    def host(self, x):
        return self.cp.asnumpy(x)

    def sync(self):
        import nvshmem_dsl
        if self.extra_sync:
            self.extra_sync()
        self.cp.cuda.runtime.deviceSynchronize()
        nvshmem_dsl.barrier_all()

    def cc(self) -> int:
        return int(self.cp.cuda.Device().compute_capability)


class Torch:
    """Arrays for Triton kernels: torch tensors (bfloat16 filled and read through int16 views)."""

    def __init__(self):
        import torch
        self.torch = torch

    def alloc(self, b: Buf):
        import nvshmem_dsl
        torch = self.torch
        bits = b.elem == "bfloat16"
        host = torch.from_numpy(b.values.view(np.int16) if bits else b.values)
        if not b.symmetric:
            return host.cuda()
        x = nvshmem_dsl.array(b.values.shape, "bfloat16" if bits else b.values.dtype, like="torch")
        (x.view(torch.int16) if bits else x).copy_(host)
        return x

    def host(self, x):
        if x.dtype == self.torch.bfloat16:
            return x.view(self.torch.int16).cpu().numpy().view(np.uint16)
        return x.cpu().numpy()

    def sync(self):
        import nvshmem_dsl
        self.torch.cuda.synchronize()
        nvshmem_dsl.barrier_all()

    def cc(self) -> int:
        major, minor = self.torch.cuda.get_device_capability()
        return major * 10 + minor


def skip_unless_runnable(shape: Shape, arrays) -> None:
    import pytest

    if npes() < shape.min_pes:
        pytest.skip(f"needs >= {shape.min_pes} PEs")
    if shape.requires:
        from nvshmem_dsl.linker import store
        have = store.api_names(arrays.cc())
        missing = [s for s in shape.requires if s not in have]
        if missing:
            pytest.skip(f"not in this NVSHMEM's device library: {', '.join(missing)}")


def _run_on(shape, arrays, bufs: Bufs, launch, check) -> None:
    import nvshmem_dsl

    dev = Bufs({k: arrays.alloc(b) for k, b in bufs.items()})
    try:
        arrays.sync()
        launch(dev)
        arrays.sync()
        check(Bufs({k: arrays.host(x) for k, x in dev.items()}))
    finally:
        for k, b in bufs.items():
            if b.symmetric:
                nvshmem_dsl.free(dev[k])


def run(shape: Shape, arrays, launch) -> None:
    """Run `shape` on every PE: `launch(bufs)` launches the DSL's kernel on the device arrays
    (``bufs.dst`` ...); then every PE checks its own."""
    skip_unless_runnable(shape, arrays)
    m, n = me(), npes()
    _run_on(shape, arrays, shape.buffers(m, n), launch, lambda got: shape.check(got, m, n))


def teams(shape: Shape):
    """(team or None off it, world PEs of the team, what) of a "team" shape, made on the host;
    the caller destroys them (:func:`run_team` does)."""
    import nvshmem_dsl
    W = nvshmem_dsl.Team.TEAM_WORLD
    m, n = me(), npes()
    if shape.op == "split_strided":  # every second PE (all PEs with 1 PE)
        stride = 2 if n >= 2 else 1
        size = (n + stride - 1) // stride
        return [(nvshmem_dsl.split_strided(W, 0, stride, size), [i * stride for i in range(size)],
                 f"split_strided(0, {stride}, {size})")]
    xrange = 2  # rows of 2 PEs (x teams) and columns (y teams)
    x, y = nvshmem_dsl.split_2d(W, xrange)
    row, col = m // xrange, m % xrange
    rows = [pe for pe in range(n) if pe // xrange == row]
    cols = [pe for pe in range(n) if pe % xrange == col]
    assert x is not None and y is not None
    assert (x.n_pes(), x.my_pe(), y.n_pes(), y.my_pe()) == (len(rows), col, len(cols), row)
    return [(x, rows, "split_2d x team"), (y, cols, "split_2d y team")]


def run_team(shape: Shape, arrays, launch) -> None:
    """A "team" shape: `launch(team, bufs)` on each team (not called off the team)."""
    skip_unless_runnable(shape, arrays)
    m = me()
    made = teams(shape)
    try:
        for team, members, what in made:
            def go(dev, team=team):
                if team is not None:
                    launch(team, dev)

            def check(got, team=team, members=members, what=what):
                if team is not None:
                    check_team(members, got, m, what)
            _run_on(shape, arrays, team_bufs(members, m), go, check)
    finally:
        for team, _, _ in made:
            if team is not None:
                team.destroy()


def session_fixture():
    """The module fixture of each DSL's test file: NVSHMEM initialised; the module skipped in a
    limited MPG run (tests/gpu/test_limited_mpg.py covers that mode)."""
    import pytest

    @pytest.fixture(scope="module", autouse=True)
    def session():
        import nvshmem_dsl
        if not nvshmem_dsl.is_initialized():
            nvshmem_dsl.init()
        if nvshmem_dsl.info()["limited_mpg"]:
            pytest.skip("limited MPG run (several PEs per GPU without MPS): no collectives; "
                        "tests/gpu/test_limited_mpg.py covers this mode")
        yield
        nvshmem_dsl.barrier_all()
    return session


def assert_no_leaks(arrays) -> None:
    import nvshmem_dsl
    arrays.sync()
    live = nvshmem_dsl.live_allocations()
    assert live == [] or all("session" in repr(a) for a in live)


def run_example(dsl: str, name: str) -> None:
    """examples/<dsl>_<name>.py: it asserts its own result (the session is already initialised)."""
    import runpy
    from pathlib import Path
    example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / f"{dsl}_{name}.py"))
    example["run"]()
