"""One description per benchmark kernel shape, instantiated by every DSL benchmark.

bench/numba_bench.py, bench/cute_bench.py and bench/triton_bench.py write each kernel in their
own syntax, but what a kernel is (its name, the NVSHMEM function it loops over, its parameters,
its launch geometry, the result row it makes, how the figure is computed and checked) is said
once here, and one driver (:func:`run_rows`) launches, times, checks and reports every shape for
every DSL.  bench/cpp/bench.cu holds the same shapes in C++ (bench/test_bench_compile.py checks
its constants).

What a DSL cannot share, and why (one line each):

* kernel bodies: each DSL has its own kernel language (Numba Python, CuTe MLIR tracing, Triton
  blocks); the bodies follow the table (``call``, ``args``, ``workers``) but are written per DSL;
* CuTe has no ``*_peer_ptr`` kernels: its benchmark predates nvshmem_dsl.cute.peer and adding
  them is not needed for the C++ comparison (C++ has none either);
* Triton's launch geometry (:func:`triton_geometry`): a Triton program is one CTA of
  ``num_warps`` warps and a warp-scope call is made by warp 0 only, so a warp-scope worker is a
  program of one warp (BW_GRID x BW_BLOCK / 32 programs), and a thread-scope one a program of
  one warp whose thread 0 calls (a program has at least 32 threads);
* Numba's ``launch_overhead_cupy_args`` row: only Numba converts foreign arrays at each launch; and
  its ``launch_overhead_plain``: the same launch of a kernel without NVSHMEM (no C++ twin).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import _common as C

# ------------------------------------------------------------------ kernel parameters

#: Symmetric buffers every benchmark allocates: name -> element type.  Their sizes: buffer_elems.
BUFFERS = {"a": "float32", "b": "float32", "lat": "float32", "res": "float32", "u64": "uint64",
           "flag": "int32", "csrc": "float32", "cdst": "float32"}
#: Scalar kernel parameters: name -> type.
SCALARS = {"nelems": "int64", "iters": "int32", "peer": "int32", "nwin": "int32", "me": "int32",
           "v": "int32", "us": "int32"}


def buffer_elems(max_bytes: int, npes: int) -> dict[str, int]:
    """Elements of each buffer of BUFFERS (``max_bytes``: the largest bandwidth message)."""
    coll = C.coll_buffer_elems(npes)
    return {"a": max_bytes // 4, "b": max_bytes // 4, "lat": C.LAT_SLOTS, "res": 16, "u64": C.U64_LEN,
            "flag": 16, "csrc": coll, "cdst": coll}


def arg_type(name: str) -> str:
    """``float32[]`` for a buffer, ``int32`` for a scalar."""
    return f"{BUFFERS[name]}[]" if name in BUFFERS else SCALARS[name]


# ------------------------------------------------------------------ shapes


@dataclass(frozen=True)
class Shape:
    """One benchmark kernel.

    kernel: its name in every DSL; bench: the ``--only`` name that runs it (_common.BENCHES);
    row, scope: the result's ``bench`` and ``scope``; call: the NVSHMEM device function it loops
    over (its DSL name); args: its parameters (BUFFERS, SCALARS), in order; workers: who does
    the work (``block``: one worker per block, ``warp``: one per warp, each moving its chunk;
    ``one``: one thread of one block; ``team``: every thread of the one block; ``aux``: not
    timed for itself); grid, block: blocks and threads per block (C++, Numba, CuTe);
    one_thread: the kernel declares a one-thread launch (C++ ONE_THREAD, Numba launch_bounds,
    CuTe .reqntid 1); nbytes: the row's size; unit and scale: the figure is ``seconds / (iters *
    ops) * scale`` (``GB/s``: bytes * iters / seconds / 1e9); iters: the Params attribute that
    gives the iterations; check: how the result is verified (``p``, ``amo``: pattern or count
    and a launch by PE 0 alone that must land on PE 1; ``pattern``: the pattern only);
    min_pes: PEs it needs.
    """

    kernel: str
    bench: str
    row: str
    scope: str
    call: str
    args: tuple[str, ...]
    workers: str
    grid: int = 1
    block: int = 1
    one_thread: bool = False
    nbytes: int = 0
    unit: str = ""
    scale: float = 1.0
    ops: int = 1
    iters: str = ""
    check: str = ""
    min_pes: int = 1

    @property
    def op(self) -> str:
        """``put`` or ``get`` for a bandwidth kernel."""
        return self.kernel.split("_")[0]


BW_ARGS = ("a", "b", "nelems", "iters", "peer", "nwin")
COLL_ARGS = ("cdst", "csrc", "nelems", "iters")


def _bw(op: str, scope: str) -> Shape:
    return Shape(f"{op}_{scope}", f"{op}_bw", f"{op}_bw", scope, op if scope == "thread" else f"{op}_{scope}",
                 BW_ARGS, "warp" if scope == "warp" else "block", C.BW_GRID,
                 C.THREAD_SCOPE_BLOCK if scope == "thread" else C.BW_BLOCK, unit="GB/s")


def _coll(family: str, scope: str) -> Shape:
    return Shape(f"coll_{family}_{scope}", "coll", "", f"{family}_{scope}", C.coll_api(family, scope), COLL_ARGS,
                 "team", 1, C.coll_threads(scope))


_LAT = dict(workers="one", one_thread=True, unit="ns/op", scale=1e9)

#: Every shape, in the order the benchmarks run them (put bandwidth first, the collectives last).
SHAPES: dict[str, Shape] = {s.kernel: s for s in (
    *(_bw(op, scope) for op in ("put", "get") for scope in C.SCOPES),
    Shape("p_lat", "p_lat", "p_lat", "thread", "p", ("lat", "iters", "peer"), nbytes=4, iters="lat_iters",
          check="p", **_LAT),
    Shape("p_lat_peer_ptr", "p_lat", "p_lat", "peer_ptr", "peer", ("lat", "iters", "peer"), nbytes=4,
          iters="lat_iters", check="pattern", **_LAT),
    Shape("g_lat", "g_lat", "g_lat", "thread", "g", ("lat", "res", "iters", "peer"), nbytes=4, iters="lat_iters",
          **_LAT),
    Shape("g_lat_peer_ptr", "g_lat", "g_lat", "peer_ptr", "peer", ("lat", "res", "iters", "peer"), nbytes=4,
          iters="lat_iters", **_LAT),
    Shape("amo_lat", "amo_lat", "atomic_fetch_add_lat", "thread", "atomic_fetch_add", ("u64", "iters", "peer"),
          nbytes=8, iters="amo_iters", check="amo", **_LAT),
    Shape("amo_lat_peer_ptr", "amo_lat", "atomic_fetch_add_lat", "peer_ptr", "peer", ("u64", "iters", "peer"),
          nbytes=8, iters="amo_iters", check="amo", **_LAT),
    Shape("pingpong", "pingpong", "put_signal_pingpong", "thread", "put_signal", ("u64", "iters", "me", "peer"),
          "one", one_thread=True, nbytes=8, unit="us", scale=1e6, ops=2, iters="pingpong_iters", min_pes=2),
    Shape("barrier_lat", "barrier", "barrier_all_block_lat", "block", "barrier_all_block", ("iters",), "team",
          1, C.BARRIER_BLOCK, unit="us", scale=1e6, iters="barrier_iters"),
    *(_coll(f, s) for f in C.COLL_FAMILIES for s in C.SCOPES),
    Shape("empty_kernel", "launch", "launch_overhead", "", "my_pe", ("flag", "v"), "aux"),
    Shape("spin", "", "", "", "", ("us",), "aux"),
)}

BW = [s for s in SHAPES.values() if s.unit == "GB/s"]
COLL = [s for s in SHAPES.values() if s.bench == "coll"]
ONE_THREAD = tuple(s.kernel for s in SHAPES.values() if s.one_thread)


def needed(p: C.Params, coll: Sequence[C.CollPoint], names=SHAPES) -> list[str]:
    """The kernels (of ``names``) a run of ``p`` launches: spin, those of the enabled benchmarks and
    those of the collective points ``coll`` (each collective costs CuTe 5-80 s to compile)."""
    want = {"spin"} | {f"coll_{pt.name}" for pt in coll}
    want |= {s.kernel for s in SHAPES.values() if s.bench not in ("", "coll") and p.enabled(s.bench)}
    return [n for n in SHAPES if n in want and n in names]


def triton_geometry(s: Shape) -> tuple[int, int]:
    """(programs, num_warps) of shape ``s`` in Triton: a program is one CTA, a warp-scope call is
    made by its warp 0, a thread-scope one by its thread 0, so a warp worker is a program of one
    warp; other shapes keep their blocks, of at least one warp."""
    if s.workers == "warp":
        return s.grid * s.block // 32, 1
    return s.grid, max(1, s.block // 32)


def triton_options(s: Shape) -> dict:
    """Triton's launch options for shape ``s``: ``num_warps`` (:func:`triton_geometry`) and, where a
    program is one warp of what C++ launches as a block of ``s.block`` threads, ``maxnreg``: the
    registers that block leaves a thread.  Without it ptxas gives a one-warp program with NVSHMEM
    3.8's inlined copies 181-189 registers (64 at the cap, no spills: bench/test_bench_compile.py),
    which lets ten programs run on an SM instead of the C++ kernel's 32 warps (0.36-0.54x of its
    bandwidth at one PE: tests/gpu/records/2026-11-25/h200-1pe-put-get-local-nv38.txt)."""
    opts = {"num_warps": triton_geometry(s)[1]}
    if s.workers == "warp":
        from nvshmem_dsl.linker.outline import registers_a_thread

        opts["maxnreg"] = registers_a_thread(s.block)
    return opts


# ------------------------------------------------------------------ the driver


def start(impl: str, layers: Sequence[str], argv=None, host_class: type = C.Host) -> tuple:
    """A DSL benchmark's start: its arguments, parameters, output (with this PE's number), the host
    runtime (``host_class``: nvshmem_dsl's, or another package's with the same methods) initialised
    after importing ``layers``, and the symmetric arrays of BUFFERS (cupy; the collectives' source
    filled): ``(args, p, out, host, arrays)``.  Collective over the PEs."""
    args = C.parse_args(impl, argv)
    p = C.make_params(args.quick, args.reps, args.only, args.sizes)
    out = C.Output(impl)
    host = host_class()
    host.init(layers)
    out.pe, out.npes = host.my_pe(), host.n_pes()
    arrays = {name: host.array(n, BUFFERS[name]) for name, n in buffer_elems(max(p.sizes), out.npes).items()}
    arrays["csrc"].set(C.coll_src_values(out.pe, arrays["csrc"].size))
    host.sync()
    host.barrier_all()
    return args, p, out, host, arrays


def meta(out: C.Output, host: C.Host, p: C.Params, **fields: Any) -> None:
    """The benchmark's first line: the run, the device, the versions, the DSL's ``fields``."""
    out.line(bench="meta", quick=p.quick, init_s=round(host.init_s, 3), **fields, **host.device_info(),
             **host.versions(), env=C.env_summary())


def run_rows(out: C.Output, host: C.Host, p: C.Params, arrays: Mapping[str, Any], bufs: Mapping[str, Any],
             launch: Callable[[Shape, tuple], None], have: Sequence[str],
             extra: Callable[[], None] | None = None) -> None:
    """Time, check and report every shape of SHAPES that the DSL has (``have``) and ``p`` enables,
    then ``extra()`` (the DSL's own rows), then the host API rows (_common.host_benchmarks, ``host``'s calls).

    arrays: the symmetric cupy arrays (BUFFERS), for resets and checks; bufs: the same as the DSL's
    kernel arguments; launch(shape, args): queue one launch of ``shape.kernel`` on the legacy
    default stream, with ``args`` in the order of ``shape.args``."""
    me, npes = out.pe, out.npes
    peer = (me + 1) % npes

    def go(s: Shape, **scalars: int) -> Callable[[], None]:
        args = tuple(bufs[a] if a in bufs else scalars[a] for a in s.args)
        return lambda: launch(s, args)

    def spin(us: int) -> None:
        launch(SHAPES["spin"], (us,))

    timer = C.Timer(host, spin)
    for s in BW:
        if s.kernel not in have or not p.enabled(s.bench):
            continue
        for nbytes in p.sizes:
            nelems = max(1, nbytes // 4)
            iters = C.bw_iters(p, nbytes)
            nwin = C.bw_windows(p, s.op, nelems)
            secs = timer.run(p.reps, go(s, nelems=nelems, iters=iters, peer=peer, nwin=nwin))
            out.emit(s.row, s.scope, nbytes, [nbytes * iters / t / 1e9 for t in secs], "GB/s", True, iters)

    lat, u64 = arrays["lat"], arrays["u64"]
    for s in SHAPES.values():
        if s.kernel not in have or not s.iters or s.unit == "GB/s" or not p.enabled(s.bench) or npes < s.min_pes:
            continue
        it = getattr(p, s.iters)
        run = go(s, iters=it, peer=peer, me=me)
        checked: dict = {}
        if s.check in ("p", "pattern"):
            lat.fill(-1)
            secs = timer.run(p.reps, run)
            ok = C.p_pattern_ok(lat, it)
            if s.check == "p":
                ok = ok and C.lands_on_peer(host, me, lambda: lat.fill(-1), run, lambda: C.p_pattern_ok(lat, it))
            checked["checked"] = ok
        elif s.check == "amo":
            u64[C.U64_COUNTER] = 0
            secs = timer.run(p.reps, run)
            checked["checked"] = C.amo_count_ok(u64, p.reps + 1, it) and C.lands_on_peer(
                host, me, lambda: u64.__setitem__(C.U64_COUNTER, 0), run, lambda: C.amo_count_ok(u64, 1, it))
        elif s.kernel == "pingpong":
            sig = u64[C.U64_SIGNAL:C.U64_SIGNAL + 1]
            secs = timer.run(p.reps, run, before=lambda: sig.fill(0))
        else:
            secs = timer.run(p.reps, run)
        out.emit(s.row, s.scope, s.nbytes, C.per_op(secs, it * s.ops, s.scale), s.unit, False, it, **checked)

    for pt in C.coll_points(p, npes, out.impl):
        s = SHAPES[f"coll_{pt.name}"]
        if s.kernel not in have:
            print(f"{out.impl}: {pt.bench} {pt.name} skipped: no kernel", file=sys.stderr, flush=True)
            continue
        arrays["cdst"].fill(-1)
        secs = timer.run(p.reps, go(s, nelems=pt.nelems, iters=pt.iters))
        C.emit_coll(out, pt, secs, **C.coll_check(pt, me, npes, arrays["cdst"]))

    if p.enabled("launch") and "empty_kernel" in have:
        s = SHAPES["empty_kernel"]
        run = go(s, v=1)
        run()  # compile
        vals = C.launch_overhead(host, spin, run, p.launches, p.reps)
        out.emit(s.row, s.scope, 0, vals, "us", False, p.launches)
    if extra is not None:
        extra()
    if p.enabled("host"):
        C.host_benchmarks(out, host, p, spin, peer)
