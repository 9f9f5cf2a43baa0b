"""CPU checks of the benchmark suite (no GPU needed):

    python -m pytest -q bench/test_bench_compile.py          # all (~2 min: nvcc and CuTe are slow)
    python -m pytest -q bench/test_bench_compile.py -m "not slow"

* the C++ baseline builds with nvcc against the installed NVSHMEM headers (skipped without nvcc):
  bench_cpp and comm_cpp, whose kernels (bench/cpp/comm.cu) put with signal, wait and quiet, and
  whose constants and kernel arguments are those of nvshmem_dsl.kernels._plan; moe_cpp, whose MoE
  dispatch / combine (bench/cpp/moe.cu) store rows through nvshmem_ptr in 16-byte vectors (else
  put_nbi_block), fence, signal, wait and quiet, with the constants and kernel arguments of
  nvshmem_dsl.kernels.moe (_layout, numba.py);
* every Python file of bench/ byte-compiles;
* every Numba kernel compiles to PTX for sm_90 with NVSHMEM linked and inlined (the collectives:
  or called in their objects, nvshmem_dsl.linker.outline);
* every CuTe launcher compiles to PTX for sm_90a with NVSHMEM inlined (skipped without cutlass-dsl);
* every NVSHMEM4Py kernel (bench/nv4py_bench.py) compiles to a cubin for sm_90a as a launch compiles it, in
  its own process (skipped where NVSHMEM4Py is not installed, as in CI); of its collectives three, all with
  BENCH_TEST_NV4PY_COLL=all; the CuTe launchers compile with NVSHMEM4Py's CuTe API (bench/_nv4py_cute.py),
  two of the collectives (all with BENCH_TEST_NV4PY_COLL=all);
* every Triton kernel compiles to PTX for sm_90 (``GPUTarget("cuda", 90, 32)``, Triton's ptxas stage
  left out) with the fine-grained NVSHMEM functions inlined (skipped without triton);
* the kernel table (bench/bench_shapes.py) is what every DSL instantiates;
  of the 18 collective ones (5-80 s each on 2 CPUs) the barriers and fcollect at thread scope,
  all of them with BENCH_TEST_CUTE_COLL=all;
* the parameters of bench/_common.py are those of bench/cpp/bench.cu;
* bench/run.py's parsing, averaging and ratios, and bench/check.py's verdicts, on made-up results;
* the collectives' expected results, points and rows; bench/compile_families.py on one kernel.
"""

from __future__ import annotations

import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402

CALL = re.compile(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$.]+)")


def _check_inlined(ptx: str, name: str, outlined=frozenset()) -> None:
    """No call of an NVSHMEM API function but those of ``outlined`` (linked as objects)."""
    public = [c for c in CALL.findall(ptx) if re.match(r"nvshmemx?_", c) and c not in outlined]
    assert not public, f"{name}: NVSHMEM API calls not inlined: {public}"
    assert not re.search(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?%rd\d+", ptx), f"{name}: indirect call"


# ------------------------------------------------------------------ files


def test_python_files_compile(tmp_path):
    files = sorted(HERE.glob("*.py")) + sorted(HERE.glob("cpp/*.py"))
    assert len(files) >= 8
    for f in files:
        py_compile.compile(str(f), cfile=str(tmp_path / (f.name + "c")), doraise=True)


def _nvcc() -> str | None:
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.path.exists(cand):
            return cand
    return None


@pytest.mark.slow
def test_cpp_builds(tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no nvcc")
    try:
        from nvshmem_dsl._libs import installation

        inc = installation().include_dir
    except Exception as exc:  # pragma: no cover
        pytest.skip(f"no NVSHMEM installation: {exc}")
    if inc is None or not (Path(inc) / "nvshmem.h").is_file():
        pytest.skip("the NVSHMEM installation has no headers")
    out = tmp_path / "bench_cpp"
    env = dict(os.environ, NVCC=nvcc, PYTHON=sys.executable, BENCH_CPP_OUT=str(out))
    proc = subprocess.run(["bash", str(HERE / "cpp" / "build.sh")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    comm = tmp_path / "comm_cpp"  # beside bench_cpp (COMM_CPP_OUT)
    for binary in (out, comm):
        assert binary.is_file() and os.access(binary, os.X_OK), binary
        assert binary.read_bytes()[:4] == b"\x7fELF", binary
    # a malformed plan is refused before NVSHMEM starts (no GPU needed)
    bad = subprocess.run([str(comm), "--plans", "one_shot:float32:10:10:16"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "bad plan" in bad.stderr, bad.stderr[-2000:]
    moe = tmp_path / "moe_cpp"  # beside bench_cpp (MOE_CPP_OUT)
    assert moe.is_file() and os.access(moe, os.X_OK) and moe.read_bytes()[:4] == b"\x7fELF", moe
    _moe_cpp_rejects_bad_arguments(moe)


def _moe_cpp_rejects_bad_arguments(moe: Path) -> None:
    """moe_cpp refuses bad arguments with exit status 2 before NVSHMEM starts (no GPU needed)."""
    sizes = ["--tokens", "8", "--hidden", "16", "--experts", "4", "--topk", "2"]
    for argv, why in ([[], "bad sizes"],  # no sizes at all
                      [sizes[:6], "bad sizes"],  # no --topk
                      [sizes[:7] + ["5"], "bad sizes"],  # topk > experts
                      [["--tokens", "4097"] + sizes[2:], "bad sizes"],  # over MAX_TOKENS
                      [["--tokens", "0"] + sizes[2:], "bad sizes"],
                      [sizes + ["--iters", "0"], "usage"],
                      [sizes + ["--spin-us", "x"], "usage"],
                      [sizes + ["--hidden"], "usage"],  # a flag without its value
                      [sizes + ["--bogus", "1"], "usage"]):
        bad = subprocess.run([str(moe), *argv], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and why in bad.stderr, (argv, bad.returncode, bad.stderr[-2000:])
        assert "failed" not in bad.stderr, (argv, bad.stderr[-2000:])  # no CUDA / NVSHMEM call was made


COMM_KINDS = ("one_shot", "two_shot", "all_gather", "reduce_scatter")


def test_comm_cpp_matches_plan():
    """bench/cpp/comm.cu's constants, kinds, slots and kernel arguments are those of _plan."""
    try:
        from nvshmem_dsl.kernels import _plan
    except ImportError as exc:  # pragma: no cover
        pytest.skip(f"no nvshmem_dsl.kernels: {exc}")
    src = (HERE / "cpp" / "comm.cu").read_text()
    assert int(re.search(r"static const int THREADS = (\d+);", src).group(1)) == _plan.THREADS
    assert int(re.search(r"static const int GRID_MAX = (\d+);", src).group(1)) == _plan.GRID_MAX
    assert tuple(re.findall(r'"(\w+)"', re.search(r"KIND_NAMES\[N_KINDS\] = \{([^}]*)\}", src).group(1))) == \
        _plan.KINDS == COMM_KINDS
    slots = re.search(r"SLOTS\[N_KINDS\] = \{([^}]*)\}", src).group(1)
    assert [int(v) for v in slots.split(",")] == [_plan.SLOTS[k] for k in _plan.KINDS]
    params = re.search(r"#define COMM_KERNEL\(NAME\).*?NAME\(([^)]*)\)", src, re.S).group(1)
    names = [re.findall(r"\w+", a.replace("\\", ""))[-1] for a in params.split(",")]
    assert names == ["out", "x", "stage", "sig", "epoch", "n", "span", "chunk", "me", "npes"]
    for kind in _plan.KINDS:
        assert f"COMM_KERNEL({kind})" in src, kind
    assert re.search(r'LL_KERNEL = "(\w+)";', src).group(1) == _plan.LL_KERNEL
    assert int(re.search(r"LL_WORD_BYTES = (\d+);", src).group(1)) == _plan.LL_WORD_BYTES
    assert f"{_plan.LL_KERNEL}(T* out, const T* x, uint64_t* ll, uint64_t* sig, int64_t epoch, int64_t n" in \
        " ".join(src.split())


@pytest.mark.slow
def test_comm_cpp_kernels_put_signal_and_wait(tmp_path):
    """Every kernel of bench/cpp/comm.cu (4 kinds x float, bfloat16), compiled to PTX with build.sh's flags,
    puts with signal at block scope, waits for signals, sets a lone signal and quiets, once per phase
    (two-shot: two): NVSHMEM's device functions are inlined, so the markers are the calls of their
    remote-transport paths (put_signal_dispatch<block>, signal_wait_until's syncapi_update_mem,
    signal_op's amo_nonfetch, quiet<thread>)."""
    if _nvcc() is None:
        pytest.skip("no nvcc")
    env = dict(os.environ, NVCC=_nvcc(), PYTHON=sys.executable, BENCH_CPP_PRINT_FLAGS="1")
    flags = subprocess.run(["bash", str(HERE / "cpp" / "build.sh")], env=env, capture_output=True, text=True,
                           timeout=120)
    if flags.returncode != 0:
        pytest.skip(f"build.sh found no nvcc / NVSHMEM: {flags.stderr[-1000:]}")
    cmd = [c for c in flags.stdout.split("\n") if c]
    ptx_path = tmp_path / "comm.ptx"
    proc = subprocess.run([*cmd, "-ptx", str(HERE / "cpp" / "comm.cu"), "-o", str(ptx_path)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ptx = ptx_path.read_text()
    bodies = {m.group(1): m.group(2) for m in
              re.finditer(r"^\.(?:visible|weak) \.entry (\w+)\((.*?)(?=^\.(?:visible|weak|extern) |\Z)", ptx,
                          re.M | re.S)}
    for kind in COMM_KINDS:
        for dtype in ("f", "13__nv_bfloat16"):
            name = next((k for k in bodies if re.match(rf"_Z\d+{kind}I{dtype}E", k)), None)
            assert name, (kind, dtype, sorted(bodies))
            calls = CALL.findall(bodies[name])
            phases = 2 if kind == "two_shot" else 1
            for marker, least in (("nvshmemi_transfer_put_signal_dispatchIL13threadgroup_t3E", phases),
                                  ("nvshmemi_transfer_syncapi_update_mem", phases),
                                  ("nvshmemi_transfer_amo_nonfetch", phases),
                                  ("nvshmemi_transfer_quietIL13threadgroup_t0E", 1)):
                assert sum(marker in c for c in calls) >= least, (name, marker, calls)
    for dtype in ("f", "13__nv_bfloat16"):  # the LL one-shot: stores and volatile polls, no NVSHMEM transport
        name = next((k for k in bodies if re.match(rf"_Z\d+one_shot_llI{dtype}E", k)), None)
        assert name, (dtype, sorted(bodies))
        body = bodies[name]
        assert not CALL.findall(body), (name, CALL.findall(body))
        assert re.search(r"\bst(\.global)?\.[bu]64\b", body) and re.search(r"ld\.volatile\.global\.[bu]64", body)
        assert "bar.sync" not in body and "membar" not in body and "fence" not in body


def _cpp_ptx_bodies(tmp_path: Path, source: str) -> dict:
    """The kernels' PTX of bench/cpp/<source>, compiled with build.sh's flags: {mangled name: body}."""
    if _nvcc() is None:
        pytest.skip("no nvcc")
    env = dict(os.environ, NVCC=_nvcc(), PYTHON=sys.executable, BENCH_CPP_PRINT_FLAGS="1")
    flags = subprocess.run(["bash", str(HERE / "cpp" / "build.sh")], env=env, capture_output=True, text=True,
                           timeout=120)
    if flags.returncode != 0:
        pytest.skip(f"build.sh found no nvcc / NVSHMEM: {flags.stderr[-1000:]}")
    cmd = [c for c in flags.stdout.split("\n") if c]
    ptx_path = tmp_path / (Path(source).stem + ".ptx")
    proc = subprocess.run([*cmd, "-ptx", str(HERE / "cpp" / source), "-o", str(ptx_path)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ptx = ptx_path.read_text()
    return {m.group(1): m.group(2) for m in
            re.finditer(r"^\.(?:visible|weak) \.entry (\w+)\((.*?)(?=^\.(?:visible|weak|extern) |\Z)", ptx,
                        re.M | re.S)}


# ------------------------------------------------------------------ MoE (bench/cpp/moe.cu)

MOE_PARAMS = {
    "dispatch": ["x", "topk", "recv_x", "recv_src", "sig", "recv_count", "epoch", "T", "K", "H", "L", "me", "npes",
                 "T_max"],
    "combine": ["y", "topk", "weights", "recv_src", "comb_x", "sig", "recv_count", "out", "epoch", "T", "K", "H", "L",
                "me", "npes", "T_max"],
}


def test_moe_cpp_matches_layout():
    """bench/cpp/moe.cu's constants are _layout's (THREADS, GRID_MAX, MAX_TOKENS, MAX_TOPK), its kernels take the
    Numba kernels' arguments in their order, and it launches grid = min(GRID_MAX, E) blocks of THREADS."""
    try:
        from nvshmem_dsl.kernels.moe import _layout
    except ImportError as exc:  # pragma: no cover
        pytest.skip(f"no nvshmem_dsl.kernels.moe: {exc}")
    src = (HERE / "cpp" / "moe.cu").read_text()
    for name in ("THREADS", "GRID_MAX", "MAX_TOKENS", "MAX_TOPK"):
        got = re.search(rf"static const int {name} = (\d+);", src)
        assert got and int(got.group(1)) == getattr(_layout, name), name
    assert "__shared__ int order[THREADS];" in src and "__ballot_sync(0xFFFFFFFFu, hit)" in src  # the scan
    # rows through the peer's address where it is reached by load/store (the DSL kernels' nv.peer)
    assert "nvshmem_ptr(recv_x, dst)" in src and "nvshmem_ptr(recv_src, dst)" in src and "nvshmem_ptr(comb_x, src)" in src
    assert re.search(r"static const int ROWS = THREADS / 32;", src) and "static const int BLOCK_H = 16 * THREADS;" in src
    assert "m.grid = (int)std::min<int64_t>(GRID_MAX, E);" in src
    numba_src = (ROOT / "runtime" / "kernels" / "moe" / "numba.py").read_text()
    for kernel, want in MOE_PARAMS.items():
        py = re.search(rf"^def {kernel}\(([^)]*)\):", numba_src, re.M)
        assert py, kernel
        assert [a.strip() for a in py.group(1).split(",")] == want, kernel
        cpp = re.search(rf"__launch_bounds__\(THREADS\)\s+{kernel}\(([^)]*)\)", src)
        assert cpp, kernel
        assert [re.findall(r"\w+", a)[-1] for a in cpp.group(1).split(",")] == want, kernel
        assert re.search(rf"{kernel}<<<m\.grid, THREADS, 0, s>>>", src), kernel


@pytest.mark.slow
def test_moe_cpp_kernels_put_signal_and_wait(tmp_path):
    """bench/cpp/moe.cu's dispatch and combine, compiled to PTX with build.sh's flags: NVSHMEM inlined, each
    copies rows in 16-byte vectors (ld/st .v4: the stores through nvshmem_ptr), puts at block scope where the
    PE is not reachable (rma_nbi<block>), fences, sets a signal (amo_nonfetch), waits for signals
    (syncapi_update_mem) and quiets (quiet<thread>); dispatch also puts its t * K + j with p (rma_p<int>)."""
    bodies = _cpp_ptx_bodies(tmp_path, "moe.cu")
    markers = {"nvshmemi_transfer_rma_nbiIL13threadgroup_t3EL13nvshmemi_op_t1E": 1,  # put_nbi_block
               "nvshmemi_transfer_fenceIL13threadgroup_t0E": 1,
               "nvshmemi_transfer_amo_nonfetch": 1,  # signal_op
               "nvshmemi_transfer_syncapi_update_mem": 1,  # signal_wait_until
               "nvshmemi_transfer_quietIL13threadgroup_t0E": 1}
    for kernel in ("dispatch", "combine"):
        name = next((k for k in bodies if re.match(rf"_Z\d+{kernel}P", k)), None)
        assert name, (kernel, sorted(bodies))
        _check_inlined(bodies[name], name)
        calls = CALL.findall(bodies[name])
        want = dict(markers, **({"nvshmemi_transfer_rma_pIiE": 1} if kernel == "dispatch" else {}))
        for marker, least in want.items():
            assert sum(marker in c for c in calls) >= least, (name, marker, calls)
        assert re.search(r"\bld\.global\.v4\.u32\b", bodies[name]) and re.search(r"\bst(\.global)?\.v4\.u32\b", bodies[name])
        if kernel == "combine":
            assert not any("rma_p" in c for c in calls), calls
            assert "ld.volatile" in bodies[name]  # the combine words polled by the threads at once
            assert "fma.rn.f32" not in bodies[name] and "mul.rn.f32" in bodies[name]  # each rounded
    experts = next((k for k in bodies if re.match(r"_Z\d+expertsP", k)), None)
    assert experts and not CALL.findall(bodies[experts]), "the experts kernel calls nothing"


# ------------------------------------------------------------------ Numba


def _need(module: str, arch: str) -> None:
    """Skip without ``module`` or NVSHMEM's device bitcode for ``arch``."""
    pytest.importorskip(module)
    try:
        from nvshmem_dsl._libs import bitcode_path

        bitcode_path(arch)
    except Exception as exc:  # pragma: no cover
        pytest.skip(f"no NVSHMEM device bitcode: {exc}")


@pytest.fixture(scope="module")
def numba_bench():
    _need("numba.cuda", "sm_90")
    import numba_bench as nb

    return nb


def test_numba_kernel_table(numba_bench):
    assert set(numba_bench.KERNELS) == set(numba_bench.SIGNATURES)
    assert {f"{op}_{s}" for op in ("put", "get") for s in C.SCOPES} <= set(numba_bench.KERNELS)


COLL_NAMES = [f"coll_{f}_{s}" for f in C.COLL_FAMILIES for s in C.SCOPES]
SHAPE_NAMES = ["put_thread", "put_warp", "put_block", "get_thread", "get_warp", "get_block", "p_lat", "g_lat",
               "p_lat_peer_ptr", "g_lat_peer_ptr", "amo_lat", "amo_lat_peer_ptr", "pingpong", "barrier_lat", "empty_kernel",
               "spin",
               *COLL_NAMES]


def _coll_symbol(name: str) -> str:
    """The C function kernel ``coll_<family>_<scope>`` calls (its float32 form)."""
    from nvshmem_dsl import _dispatch

    DISPATCH = _dispatch.table("numba")

    family, scope = name[len("coll_"):].rsplit("_", 1)
    table = DISPATCH[C.coll_api(family, scope)]
    return table.get("float32") or table[None]


def _large_outlined(ptx: str, name: str) -> frozenset:
    """The NVSHMEM functions kernel ``name``'s PTX calls in their objects (nvshmem_dsl.linker.outline links
    NVSHMEM's large routines so): at most the kernel's own collective or barrier, the rest is inlined."""
    from nvshmem_dsl.linker import calls

    outlined = calls.extern_calls(ptx) - calls.helper_calls(ptx)  # NVSHMEM's transport helpers aside
    large = {_coll_symbol(name)} if name.startswith("coll_") else {"nvshmemx_barrier_all_block"}
    assert outlined <= large, (name, sorted(outlined))
    return outlined


@pytest.mark.parametrize("name", SHAPE_NAMES)
def test_numba_kernel_compiles(numba_bench, name):
    from numba import cuda

    ptx, _ = cuda.compile_ptx(numba_bench.KERNELS[name], numba_bench.SIGNATURES[name], cc=(9, 0))
    assert re.search(r"^\.target sm_90\b", ptx, re.M)
    assert re.search(r"\.entry\s", ptx), f"{name}: no kernel entry"
    _check_inlined(ptx, name, _large_outlined(ptx, name))
    if name not in ("spin",):
        assert "nvshmemi_device_state_d" in ptx, f"{name}: no NVSHMEM device state referenced"


def test_numba_plain_kernel_is_empty_kernel_without_nvshmem(numba_bench):
    """launch_overhead_plain's kernel: empty_kernel's parameters and code, no NVSHMEM (no device state,
    so its launch has no module init behind it)."""
    from numba import cuda

    sig = numba_bench.SIGNATURES["empty_kernel"]
    ptx, _ = cuda.compile_ptx(numba_bench.N.plain_kernel, sig, cc=(9, 0))
    assert re.search(r"\.entry\s", ptx) and "nvshmem" not in ptx


@pytest.mark.parametrize("name", [n for n in SHAPE_NAMES if n.startswith(("put_", "get_"))])
def test_numba_bandwidth_kernel_fits_its_block(numba_bench, name, monkeypatch):
    """Each bandwidth kernel, linked to a cubin (nvJitLink, no GPU) with its jit options, has the
    registers its launch's block leaves a thread, without spills (NVSHMEM 3.8 without the
    declaration: 66-72 at 1024 threads, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)."""
    import bench_shapes as shapes

    from nvshmem_dsl.linker import link, outline

    comp = pytest.importorskip("numba.cuda.compiler")
    s = shapes.SHAPES[name]
    lib, _ = comp._compile_pyfunc_with_fixup(numba_bench.KERNELS[name], numba_bench.SIGNATURES[name], device=False,
                                             abi="numba", cc=(9, 0), **numba_bench.jit_options(name))
    try:
        cubin = lib.get_cubin(cc=(9, 0))
    except Exception as exc:  # noqa: BLE001 - no nvJitLink here
        pytest.skip(f"no cubin without a GPU here: {exc}")
    cubin = bytes(getattr(cubin, "code", cubin))
    _, registers = link.cubin_info(cubin)
    assert registers[lib._entry_name] <= outline.registers_a_thread(s.block), (name, s.block)
    _assert_no_spills(cubin, lib._entry_name, monkeypatch)


def _assert_no_spills(cubin: bytes, function: str, monkeypatch) -> None:
    """No local-memory stores (spills) in ``function`` of ``cubin`` (nvdisasm: triton's, or PATH's)."""
    sys.path.insert(0, str(HERE / "experiments"))
    import loop_sass

    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    except ImportError:
        bundled = None
    nvdisasm = str(bundled) if bundled is not None and bundled.exists() else shutil.which("nvdisasm")
    if nvdisasm is None:
        return
    monkeypatch.setattr(loop_sass, "NVDISASM", nvdisasm)
    sass = [i for _, i in loop_sass.sass_of_cubin(cubin, function)]
    assert len(sass) > 100 and not [i for i in sass if "STL" in i], f"{function}: spills"


# ------------------------------------------------------------------ CuTe


#: The CuTe collective launchers compiled by default: NVSHMEM's collectives inlined cost CuTe 5-80 s
#: each on 2 CPUs (broadcast_block 80 s), the barriers 3 s; BENCH_TEST_CUTE_COLL=all compiles the 18.
CUTE_COLL_DEFAULT = ["coll_barrier_thread", "coll_barrier_warp", "coll_barrier_block", "coll_fcollect_thread"]
CUTE_COLL = COLL_NAMES if os.environ.get("BENCH_TEST_CUTE_COLL") == "all" else CUTE_COLL_DEFAULT


@pytest.fixture(scope="module")
def cute_compiled():
    _need("cutlass.cute", "sm_90a")
    import cute_bench as cb

    names = [n for n in cb.LAUNCHERS if not n.startswith("coll_")] + CUTE_COLL
    return cb.compile_all(cb.fake_tensors(256 << 20), arch="sm_90a", names=names, keep_ptx=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["put_thread", "put_warp", "put_block", "get_thread", "get_warp", "get_block",
                                  "p_lat", "g_lat", "amo_lat", "pingpong", "barrier_lat", "empty_kernel", "spin",
                                  *COLL_NAMES])
def test_cute_kernel_compiles(cute_compiled, name):
    if name not in cute_compiled:
        pytest.skip("a CuTe collective beyond the default set: BENCH_TEST_CUTE_COLL=all compiles it (5-80 s)")
    ck = cute_compiled[name]
    assert ck.arch == "sm_90a"
    ptx = ck.__ptx__
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)
    _check_inlined(ptx, name, _large_outlined(ptx, name))
    if name not in ("spin",):
        assert "nvshmemi_device_state_d" in ptx
    import cute_bench as cb

    if cb.block_at_launch(name):  # block size given at launch (libNVVM and .reqntid 1024: see cute_bench)
        assert ".reqntid" not in ptx and ".maxntid" not in ptx
    elif name in ("p_lat", "g_lat", "amo_lat", "pingpong", "put_thread", "get_thread"):
        assert re.search(r"^\.reqntid 1, 1, 1$", ptx, re.M)  # one thread, as Numba's declare it
    elif name.startswith("coll_"):  # its block, as Numba's launch_bounds declare it
        assert re.search(rf"^\.reqntid {C.coll_threads(name.rsplit('_', 1)[1])}, 1, 1$", ptx, re.M), name


def _loops(ptx: str) -> list:
    """The bodies of the basic blocks of the PTX's kernel (its ``.entry``, not the functions beside
    it) that branch back to their own label (loops of one block)."""
    entry = ptx[ptx.index(".entry"):]
    parts = re.split(r"^(\$L__BB\d+_\d+):", entry[:entry.index("\n}\n")], flags=re.M)
    return [body for label, body in zip(parts[1::2], parts[2::2]) if re.search(rf"bra(?:\.uni)?\s+\{label};", body)]


#: What each latency kernel's loop does at a peer reached by load/store (P2P), in PTX.
_P2P_OPS = {"p_lat": r"st\.(?:global\.)?b32", "g_lat": r"ld\.(?:global\.)?(?:nc\.)?b32",
            "amo_lat": r"atom\.(?:global\.)?(?:sys\.)?add\.u64"}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_P2P_OPS))
def test_cute_latency_loops_are_unswitched(cute_compiled, name):
    """libNVVM splits each latency kernel's loop on NVSHMEM's P2P test: one loop of the plain
    operations, no call in it (the transport call in another loop), because NVSHMEM's thread-scope
    helpers are not ``convergent`` in the bitcode it links.  With NVSHMEM 3.8 the test and the call
    stayed in every unrolled copy: ``p`` 0.51x of C++ instead of 0.13x
    (tests/gpu/records/2026-11-25/h200-cute-helper-objects.txt)."""
    plain = [b for b in _loops(cute_compiled[name].__ptx__)
             if len(re.findall(rf"^\s*{_P2P_OPS[name]}", b, re.M)) >= 2 and "call" not in b]
    assert plain, f"{name}: no loop of {_P2P_OPS[name]} alone"


@pytest.mark.slow
def test_cute_p_loop_is_unswitched_inlining_everything():
    """The same with ``outline("none")``: the whole library's copy for libNVVM
    (nvshmem_dsl.linker.nvvm.nvvm_bitcode) has the same rewrite."""
    _need("cutlass.cute", "sm_90a")
    import cute_bench as cb
    from nvshmem_dsl.linker import plan

    with plan.override("none"):
        ck = cb.compile_all(cb.fake_tensors(1 << 20), arch="sm_90a", names=["p_lat"], keep_ptx=True)["p_lat"]
    assert [b for b in _loops(ck.__ptx__) if len(re.findall(rf"^\s*{_P2P_OPS['p_lat']}", b, re.M)) >= 2
            and "call" not in b]


@pytest.mark.slow
def test_cute_coll_kernels_differ(cute_compiled):
    """The launchers made by one factory compile to their own kernels in one process (CuTe caches by IR)."""
    ptx = {n: cute_compiled[n].__ptx__ for n in CUTE_COLL}
    assert len(set(ptx.values())) == len(ptx)


def test_cute_api_resolves():
    pytest.importorskip("cutlass.cute")
    import _cute_api

    api = _cute_api.api()
    for n in _cute_api.NAMES:
        assert callable(getattr(api, n))
    assert _cute_api.SOURCE != "unresolved"
    assert {"broadcast", "sum_reduce_warp", "sum_reducescatter_block", "barrier_block"} <= set(_cute_api.NAMES)


def test_cute_launcher_table():
    pytest.importorskip("cutlass.cute")
    import cute_bench as cb

    assert {n for n in cb.LAUNCHERS if n.startswith("coll_")} == set(COLL_NAMES)
    p = C.make_params(True, only=["coll_lat", "p_lat"])
    names = cb.needed(p, C.coll_points(p, 2))
    assert names[0] == "p_lat" and names[-1] == "spin" and set(names[1:-1]) == set(COLL_NAMES)  # no p_lat_peer_ptr
    assert cb.needed(C.make_params(True, only=["put_bw"]), []) == ["put_thread", "put_warp", "put_block", "spin"]
    assert [cb.block_at_launch(n) for n in ("put_warp", "coll_reduce_block", "p_lat", "barrier_lat")] == \
        [True, False, False, False]


# ------------------------------------------------------------------ Triton


@pytest.fixture(scope="module")
def triton_bench(tmp_path_factory):
    _need("triton", "sm_90")
    import triton

    import triton_bench as tb
    # PTX only: Triton's ptxas of ~300 KB of inlined NVSHMEM per kernel would add minutes
    hook = triton.knobs.runtime.add_stages_inspection_hook

    def ptx_only(*args, **kwargs):
        if not args and not kwargs:
            key, hsh = hook()
            return key + "-ptx-only", hsh + "-ptx-only"
        hook(*args, **kwargs)
        args[1]["cubin"] = lambda src, metadata: b""

    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton_cache"))
    triton.knobs.runtime.add_stages_inspection_hook = ptx_only
    yield tb
    triton.knobs.runtime.add_stages_inspection_hook = hook
    if old is None:
        os.environ.pop("TRITON_CACHE_DIR", None)
    else:
        os.environ["TRITON_CACHE_DIR"] = old


def test_triton_kernel_table(triton_bench):
    import bench_shapes as shapes

    assert set(triton_bench.KERNELS) == set(shapes.SHAPES)
    for name in triton_bench.KERNELS:
        sig = triton_bench.signature(name)
        assert len([t for t in sig.values() if t != "constexpr"]) == len(shapes.SHAPES[name].args), name


@pytest.mark.parametrize("name", [*SHAPE_NAMES])
def test_triton_kernel_compiles(triton_bench, name):
    import bench_shapes as shapes

    ck = triton_bench.compile_kernel(name)
    ptx = ck.asm["ptx"]
    assert re.search(r"^\.target sm_90a?\b", ptx, re.M)
    assert re.search(r"\.entry\s", ptx), f"{name}: no kernel entry"
    _check_inlined(ptx, name, _large_outlined(ptx, name))
    if name != "spin":
        assert "nvshmemi_device_state_d" in ptx, f"{name}: no NVSHMEM device state referenced"
    # a program is one CTA of num_warps warps (shapes.triton_geometry): Triton declares it
    _, num_warps = shapes.triton_geometry(shapes.SHAPES[name])
    assert re.search(rf"^\.reqntid {32 * num_warps}\b", ptx, re.M), name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["put_warp", "get_warp"])
def test_triton_warp_programs_keep_the_cpp_blocks_registers(triton_bench, name, monkeypatch):
    """A warp-scope program is one warp of C++'s 1024-thread block: compiled to a cubin (ptxas) with its
    launch options it has the registers that block leaves a thread, without spills (181-189 registers
    without maxnreg with NVSHMEM 3.8: a third of C++'s warps an SM)."""
    import bench_shapes as shapes
    import triton

    from nvshmem_dsl.linker import link, outline
    from nvshmem_dsl.triton import _compile

    # not the fixture's PTX-only hook: a real cubin here
    monkeypatch.setattr(triton.knobs.runtime, "add_stages_inspection_hook", _compile._stages_hook)
    cubin = triton_bench.compile_kernel(name).asm["cubin"]
    _, registers = link.cubin_info(cubin)
    assert registers["rma_bw"] <= outline.registers_a_thread(shapes.SHAPES[name].block) == 64
    _assert_no_spills(cubin, "rma_bw", monkeypatch)


def test_triton_geometry():
    """Triton's warp workers are programs of one warp: as many, in the same order, as C++'s warps."""
    import bench_shapes as shapes

    S = shapes.SHAPES
    assert shapes.triton_geometry(S["put_warp"]) == (C.BW_GRID * C.BW_BLOCK // 32, 1)
    assert shapes.triton_geometry(S["put_thread"]) == (C.BW_GRID, 1)
    assert shapes.triton_geometry(S["get_block"]) == (C.BW_GRID, C.BW_BLOCK // 32)
    assert shapes.triton_geometry(S["coll_reduce_block"]) == (1, C.COLL_BLOCK // 32)
    assert shapes.triton_geometry(S["barrier_lat"]) == (1, C.BARRIER_BLOCK // 32)
    assert shapes.triton_geometry(S["p_lat"]) == (1, 1)
    assert shapes.triton_options(S["put_warp"]) == {"num_warps": 1, "maxnreg": 64}  # a warp of a 1024-thread block
    assert shapes.triton_options(S["put_block"]) == {"num_warps": C.BW_BLOCK // 32}  # .reqntid 1024: 64 anyway
    assert shapes.triton_options(S["p_lat"]) == {"num_warps": 1}


# ------------------------------------------------------------------ NVSHMEM4Py (nv4py)

NV4PY_DISTS = ("nvshmem4py-cu12", "nvshmem4py-cu13")
#: bench/nv4py_bench.py writes every kernel of the table but the *_peer_ptr ones
NV4PY_NAMES = [n for n in SHAPE_NAMES if not n.endswith("_peer_ptr")]
#: the collective kernels compiled by default (5-17 s each on 2 CPUs); all with BENCH_TEST_NV4PY_COLL=all
NV4PY_COLL = COLL_NAMES if os.environ.get("BENCH_TEST_NV4PY_COLL") == "all" else [
    "coll_barrier_thread", "coll_fcollect_thread", "coll_reduce_block"]


def _need_nv4py() -> None:
    """Skip where NVSHMEM4Py (NVIDIA's nvshmem package) is not installed, as in CI."""
    from importlib import metadata

    for dist in NV4PY_DISTS:
        try:
            metadata.version(dist)
            return
        except metadata.PackageNotFoundError:
            continue
    pytest.skip(f"NVSHMEM4Py is not installed ({' or '.join(NV4PY_DISTS)})")


@pytest.fixture(scope="module")
def nv4py_compiled():
    """bench/_nv4py.py's compile check, in its own process (it patches numba-cuda to compile without a
    GPU, and NVSHMEM4Py must be imported after its start-up): the table, then kernel -> result."""
    _need_nv4py()
    _need("numba.cuda", "sm_90")
    names = [n for n in NV4PY_NAMES if not n.startswith("coll_")] + NV4PY_COLL
    proc = subprocess.run([sys.executable, str(HERE / "_nv4py.py"), "--arch", "sm_90a", *names], capture_output=True,
                          text=True, timeout=1800)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines and "table" in lines[0], proc.stderr[-4000:]
    return lines[0], {r["kernel"]: r for r in lines[1:]}


def test_nv4py_kernel_table(nv4py_compiled):
    """NVSHMEM4Py's benchmark has the table's kernels (not the *_peer_ptr ones), with the same signatures."""
    table, _ = nv4py_compiled
    assert sorted(table["table"]) == sorted(NV4PY_NAMES)
    import _numba_common as N

    assert table["signatures"] == N.signatures(NV4PY_NAMES)


@pytest.mark.parametrize("name", [n for n in NV4PY_NAMES if not n.startswith("coll_")] + NV4PY_COLL)
def test_nv4py_kernel_compiles(nv4py_compiled, name):
    """Each NVSHMEM4Py kernel compiles as a launch compiles it (its C++ shim by NVRTC against nvshmem_dsl's
    NVSHMEM headers, LTO, nvJitLink) to a cubin for sm_90a, without a GPU."""
    _, results = nv4py_compiled
    rec = results.get(name)
    assert rec is not None, f"{name}: not compiled"
    assert "error" not in rec, rec["error"]
    assert rec["elf"] and rec["bytes"] > 0, rec
    assert rec["device_state"] == (name != "spin"), rec  # NVSHMEM's state, which its library init sets


#: the CuTe launchers compiled with NVSHMEM4Py's CuTe API by default (collectives: 2-50 s each on 2 CPUs)
NV4PY_CUTE_NAMES = [n for n in SHAPE_NAMES if not n.startswith("coll_") and not n.endswith("_peer_ptr")] + (
    COLL_NAMES if os.environ.get("BENCH_TEST_NV4PY_COLL") == "all" else ["coll_barrier_block", "coll_alltoall_thread"])


@pytest.fixture(scope="module")
def nv4py_cute_compiled():
    """bench/_nv4py_cute.py's compile check in its own process: launcher -> result."""
    _need_nv4py()
    pytest.importorskip("cutlass")
    proc = subprocess.run([sys.executable, str(HERE / "_nv4py_cute.py"), "--arch", "sm_90a", *NV4PY_CUTE_NAMES],
                          capture_output=True, text=True, timeout=1800)
    recs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert recs, proc.stderr[-4000:]
    return {r["kernel"]: r for r in recs}


@pytest.mark.parametrize("name", NV4PY_CUTE_NAMES)
def test_nv4py_cute_launcher_compiles(nv4py_cute_compiled, name):
    """bench/cute_bench.py's launchers compile with NVSHMEM4Py's CuTe API in place of ours (bench/_nv4py_cute.py's
    adapter: each call's arguments as NVSHMEM4Py takes them, tensors aligned to their element) for sm_90a,
    NVSHMEM4Py's device bitcode linked, without a GPU."""
    rec = nv4py_cute_compiled.get(name)
    assert rec is not None, f"{name}: not compiled"
    assert "error" not in rec, rec["error"]
    assert rec["arch"] == "sm_90a", rec


def test_nv4py_compile_time_without_gpu():
    """bench/compile_time.py --impl nv4py: the first kernel and a later one, compiled to cubins without a GPU."""
    _need_nv4py()
    out = subprocess.run([sys.executable, str(HERE / "compile_time.py"), "--impl", "nv4py", "--label", "cold"],
                         capture_output=True, text=True, timeout=600)
    recs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["scope"] for r in recs] == ["cold", "cold-later"], out.stderr[-4000:]
    assert all(r["impl"] == "nv4py" and r["value"] > 0 and "no GPU" in r["stage"] for r in recs), recs


def test_run_nv4py_rows_beside_the_dsls(monkeypatch):
    """bench/run.py --impls ...,nv4py: accepted, skipped with its reason where nvshmem.core is not importable,
    its results in their own column with the nv4py/cpp ratio."""
    import run

    with pytest.raises(SystemExit) as exc:
        run.main(["--impls", "cpp,numba,nv4py", "--help"])
    assert exc.value.code == 0
    assert {"nv4py", "nv4py_cute"} <= set(run.IMPLS) and {"nv4py", "nv4py_cute"} <= set(run.DSLS)
    agg = run.aggregate([_rec("cpp", "p_lat", "thread", 4, 40.0, "ns/op"), _rec("numba", "p_lat", "thread", 4, 13.0,
                                                                                 "ns/op"),
                         _rec("nv4py", "p_lat", "thread", 4, 56.0, "ns/op"),
                         _rec("nv4py", "host_put_on_stream", "", 8, 9.0, "us")])
    lines = run.table(agg).splitlines()
    assert lines[0].split()[-1] == "nv4py/cpp" and "nv4py" in lines[0].split()
    row = next(line.split() for line in lines if line.startswith("p_lat"))
    assert row[-1] == "1.40"
    assert {r["impl"] for r in run.ratios(agg)} == {"numba", "nv4py"}
    monkeypatch.setitem(run.REQUIRES, "nv4py", "no_such_module_for_the_bench_test")
    why = run.unavailable("nv4py", sys.executable)
    assert why and "no_such_module_for_the_bench_test" in why


def test_host_rows_time_the_hosts_own_calls(capsys):
    """_common.host_benchmarks: my_pe, each allocator and each on-stream call of the host given (nvshmem_dsl's
    or NVSHMEM4Py's), every call made, the on-stream ones behind the spin."""
    calls: dict = {}

    def count(name, value=None):
        def call(*args):
            calls[name] = calls.get(name, 0) + 1
            return value
        return call

    class FakeHost:
        def api_my_pe(self):
            return count("my_pe", 0)

        def allocators(self):
            return (("host_alloc_free", count("alloc", "x")),)

        def free(self, x):
            assert x == "x"
            count("free")()

        def on_stream_calls(self, peer):
            assert peer == 1
            return (("put", 8, count("put")), ("barrier_all", 0, count("barrier_all")))

        barrier_all = sync = staticmethod(count("sync"))

    p = C.make_params(True)
    p.host_calls, p.alloc_reps, p.launches, p.reps = 5, 2, 3, 2
    out = C.Output("nv4py")
    C.host_benchmarks(out, FakeHost(), p, count("spin"), 1)
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["bench"], r["bytes"], r["unit"]) for r in recs] == [
        ("host_my_pe", 0, "ns"), ("host_alloc_free", C.ALLOC_BYTES, "us"), ("host_put_on_stream", 8, "us"),
        ("host_barrier_all_on_stream", 0, "us")]
    assert calls["my_pe"] == 10 and calls["alloc"] == calls["free"] == 4
    assert calls["put"] == calls["barrier_all"] == 9 and calls["spin"] == 6  # (reps + 1 warm-up) x launches
    p.launches = C.ON_STREAM_CALLS + 10  # no more on-stream calls queued behind one spin than that
    C.host_benchmarks(out, FakeHost(), p, count("spin"), 1)
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["iters"] for r in recs if r["bench"].endswith("_on_stream")] == [C.ON_STREAM_CALLS] * 2


# ------------------------------------------------------------------ the kernel table


def test_shapes_table():
    """One entry per kernel; the rows, geometry and iterations the host code of every DSL uses."""
    import bench_shapes as shapes

    S = shapes.SHAPES
    assert [s.kernel for s in shapes.BW] == [f"{op}_{sc}" for op in ("put", "get") for sc in C.SCOPES]
    assert {s.kernel for s in shapes.COLL} == set(COLL_NAMES)
    assert shapes.ONE_THREAD == ("p_lat", "p_lat_peer_ptr", "g_lat", "g_lat_peer_ptr", "amo_lat", "amo_lat_peer_ptr",
                                 "pingpong")
    for s in S.values():
        assert s.bench in ("", "coll", *C.BENCHES), s
        assert all(a in shapes.BUFFERS or a in shapes.SCALARS for a in s.args), s
        if s.iters:
            assert hasattr(C.make_params(True), s.iters), s
    assert (S["put_thread"].block, S["put_warp"].block, S["barrier_lat"].block) == (1, C.BW_BLOCK, C.BARRIER_BLOCK)
    assert S["pingpong"].ops == 2 and S["pingpong"].min_pes == 2
    p = C.make_params(True, only=["p_lat", "coll_lat"])
    assert shapes.needed(p, C.coll_points(p, 2))[:3] == ["p_lat", "p_lat_peer_ptr", "coll_broadcast_thread"]
    assert shapes.needed(C.make_params(True, only=["put_bw"]), []) == ["put_thread", "put_warp", "put_block",
                                                                      "spin"]
    elems = shapes.buffer_elems(256 << 20, 2)
    assert list(elems) == list(shapes.BUFFERS) and elems["a"] == (256 << 20) // 4


def test_numba_signatures_from_the_table(numba_bench):
    assert numba_bench.SIGNATURES["put_warp"] == "void(float32[::1], float32[::1], int64, int32, int32, int32)"
    assert numba_bench.SIGNATURES["amo_lat"] == "void(uint64[::1], int32, int32)"
    assert numba_bench.SIGNATURES["coll_broadcast_block"] == "void(float32[::1], float32[::1], int64, int32)"


# ------------------------------------------------------------------ parameters = bench.cu


def _cpp_source() -> str:
    return (HERE / "cpp" / "bench.cu").read_text()


def test_constants_match_cpp():
    src = _cpp_source()
    for name in ("BW_GRID", "BW_BLOCK", "THREAD_SCOPE_BLOCK", "ALIGN_ELEMS", "LAT_SLOTS", "BARRIER_BLOCK",
                 "SPIN_US_BEFORE_TIMED", "SPIN_US_BEFORE_LAUNCHES", "COLL_BLOCK", "COLL_LAT_BYTES", "ON_STREAM_CALLS"):
        m = re.search(rf"static const int {name} = (\d+);", src)
        assert m, name
        assert int(m.group(1)) == getattr(C, name), name
    assert re.search(r"ALLOC_BYTES = 1 << 20;", src) and C.ALLOC_BYTES == 1 << 20
    # the host rows of every package (_common.host_benchmarks) have a C++ row of the same name and size
    for row, nbytes in (("host_my_pe", None), ("host_alloc_free", None), ("host_put_on_stream", 8),
                        ("host_reduce_on_stream", 8), ("host_barrier_all_on_stream", 0)):
        assert f'"{row}"' in src and (nbytes is None or f'{{"{row}", {nbytes}}}' in src), row
    assert re.search(r"COLL_BW_BYTES = 1 << 20;", src) and C.COLL_BW_BYTES == 1 << 20
    assert re.search(r"DEFAULT_REDUCE_SCRATCH = 512 << 10;", src) and C.DEFAULT_REDUCE_SCRATCH == 512 << 10
    coll = (HERE / "cpp" / "coll.cuh").read_text()
    assert f"static const int COLL_ROOT = {C.COLL_ROOT};" in coll
    names = re.search(r"COLL_FAMILY_NAMES\[N_COLL_FAMILIES\] = \{([^}]*)\}", coll).group(1)
    assert tuple(re.findall(r'"(\w+)"', names)) == C.COLL_FAMILIES
    # the C function of each family and scope is the one the DSLs call (their names in the op table)
    from nvshmem_dsl import _dispatch

    DISPATCH = _dispatch.table("numba")

    for family, name, _ in re.findall(r"COLL_OPS\(COLL_(\w+), (\w+), (\([^)]*\))\)", coll):
        family = family.lower()
        for scope, sym in (("thread", f"nvshmem_{name}"), ("warp", f"nvshmemx_{name}_warp"),
                           ("block", f"nvshmemx_{name}_block")):
            assert sym in DISPATCH[C.coll_api(family, scope)].values(), (family, scope, sym)
        names = names.replace(f'"{family}"', "")
    assert not re.findall(r'"(\w+)"', names), "a family without COLL_OPS"
    for name in ("U64_COUNTER", "U64_OUT", "U64_DATA", "U64_SRC", "U64_SIGNAL"):
        assert f"[{getattr(C, name)}]" in src.split("uint64_t* u64;")[1].splitlines()[0], name


def _cpp_params(quick: bool) -> dict:
    src = _cpp_source()
    body = src[src.index("if (quick) {"):src.index("if (reps_override > 0)")]
    quick_part, full_part = body.split("} else {")
    part = quick_part if quick else full_part
    values = {}
    for name, expr in re.findall(r"p\.(\w+) = ([^;]+);", part):
        if name == "sizes":
            continue
        values[name] = eval(expr.replace("LL", ""))  # noqa: S307 - our own constant expressions
    return values


@pytest.mark.parametrize("quick", [True, False])
def test_params_match_cpp(quick):
    p = C.make_params(quick)
    cpp = _cpp_params(quick)
    for name, value in cpp.items():
        assert getattr(p, name) == value, name
    if quick:
        m = re.search(r"p\.sizes = \{([^}]*)\};", _cpp_source())
        assert [eval(x) for x in m.group(1).split(",")] == p.sizes  # noqa: S307
    else:
        assert p.sizes == [8] + [1 << (2 * k) for k in range(2, 15)]
        assert p.sizes[-1] == 256 << 20


def test_sizes_replace_the_default_ones():
    assert C.parse_sizes("1M, 4m,16M,4096,0.5K") == [1 << 20, 4 << 20, 16 << 20, 4096, 512]
    assert C.make_params(True, sizes=C.parse_sizes("4M")).sizes == [4 << 20]
    for bad in ("3", "1.5", "x", "-4"):
        with pytest.raises(ValueError, match="--sizes"):
            C.parse_sizes(bad)
    args = C.parse_args("numba", ["--sizes", "64K,1M"])
    assert args.sizes == [64 << 10, 1 << 20]
    # the C++ baseline takes them too, in bytes (bench/run.py passes them so)
    assert '"--sizes"' in _cpp_source() and "p.sizes.clear()" in _cpp_source()


def test_chunks_cover_every_element():
    for nelems in (1, 2, 31, 32, 33, 1024, 1 << 20, (256 << 20) // 4, 12345):
        for workers in (C.BW_GRID, C.BW_GRID * C.BW_BLOCK // 32):
            covered, prev_end = 0, 0
            for w in range(workers):
                s, n = C.chunk_partition(nelems, workers, w)
                if n:
                    assert s == prev_end and s % C.ALIGN_ELEMS == 0
                    prev_end = s + n
                    covered += n
            assert covered == nelems


def test_bw_iters():
    p = C.make_params(True)
    assert C.bw_iters(p, 8) == p.max_iters
    assert C.bw_iters(p, 256 << 20) == max(p.min_iters, (1 << 30) // (256 << 20))


# ------------------------------------------------------------------ run.py / check.py


def _rec(impl, bench, scope, nbytes, value, unit, pe=0, iters=10):
    return {"impl": impl, "bench": bench, "scope": scope, "bytes": nbytes, "value": value, "best": value,
            "unit": unit, "iters": iters, "reps": 3, "pe": pe, "npes": 2}


def test_run_aggregates_and_ratios():
    import run

    lines = [
        "[rank 0] " + json.dumps(_rec("cpp", "put_bw", "block", 1 << 20, 100.0, "GB/s", 0)),
        "[rank 1] " + json.dumps(_rec("cpp", "put_bw", "block", 1 << 20, 120.0, "GB/s", 1)),
        json.dumps(_rec("numba", "put_bw", "block", 1 << 20, 99.0, "GB/s", 0)),
        json.dumps(_rec("numba", "put_bw", "block", 1 << 20, 121.0, "GB/s", 1)),
        json.dumps(_rec("cpp", "p_lat", "thread", 4, 40.0, "ns/op")),
        json.dumps(_rec("cute", "p_lat", "thread", 4, 50.0, "ns/op")),
        json.dumps({"impl": "cpp", "bench": "meta", "pe": 0, "device": "X"}),
        "garbage { not json",
    ]
    recs = run.parse_records(lines)
    assert len(recs) == 7
    agg = run.aggregate(recs)
    assert agg["cpp"][("put_bw", "block", 1 << 20)]["value"] == pytest.approx(110.0)
    assert agg["numba"][("put_bw", "block", 1 << 20)]["per_pe"] == {"0": 99.0, "1": 121.0}
    rats = {(r["impl"], r["key"]): r for r in run.ratios(agg)}
    assert rats[("numba", "put_bw|block|1048576")]["ratio"] == pytest.approx(1.0)
    assert rats[("numba", "put_bw|block|1048576")]["higher_is_better"]
    assert rats[("cute", "p_lat|thread|4")]["ratio"] == pytest.approx(1.25)
    assert not rats[("cute", "p_lat|thread|4")]["higher_is_better"]
    text = run.table(agg)
    assert "put_bw" in text and "1 MiB" in text and "1.25" in text


def test_run_table_triton_column(monkeypatch):
    """A triton column (and triton/cpp) where Triton has results; an implementation --python cannot
    import is named with its reason."""
    import run

    agg = run.aggregate([_rec("cpp", "p_lat", "thread", 4, 40.0, "ns/op"), _rec("triton", "p_lat", "thread", 4, 60.0,
                                                                                  "ns/op")])
    lines = run.table(agg).splitlines()
    assert lines[0].split()[-3:] == ["numba/cpp", "cute/cpp", "triton/cpp"]
    row = next(line.split() for line in lines if line.startswith("p_lat"))
    assert row[-1] == "1.50"
    assert "triton" not in run.table(run.aggregate([_rec("cpp", "p_lat", "thread", 4, 40.0, "ns/op")]))
    assert run.unavailable("cpp", sys.executable) is None
    monkeypatch.setitem(run.REQUIRES, "triton", "no_such_module_for_the_bench_test")
    why = run.unavailable("triton", sys.executable)
    assert why and "no_such_module_for_the_bench_test" in why and "\n" not in why


def test_bench_env_measures_the_final_objects(monkeypatch):
    """The benchmarks' processes build NVSHMEM's O3 objects at O3 at once (NVSHMEM_DSL_OUTLINE_OPT set: no
    light first form, nvshmem_dsl.linker.outline.opt_tiered), an empty value counting as unset (the device
    steps' "default" mode); a value given is kept."""
    import run

    from nvshmem_dsl.linker import link, outline

    for given in (None, ""):
        monkeypatch.setattr(link, "driver_major", lambda: 13)  # as on a GPU host, where objects are tiered
        if given is None:
            monkeypatch.delenv(outline.OPT_ENV, raising=False)
        else:
            monkeypatch.setenv(outline.OPT_ENV, given)
        assert outline.opt_tiered()  # this process: tiered
        env = run.bench_env(None)
        assert env[outline.OPT_ENV] == "auto"
        monkeypatch.setattr(os, "environ", env)
        assert not outline.opt_tiered()  # a benchmark's process: not
        monkeypatch.undo()
    monkeypatch.setenv(outline.OPT_ENV, "light")
    assert run.bench_env(None)[outline.OPT_ENV] == "light"


def test_compile_time_reports_first_and_later_kernel():
    """bench/compile_time.py: the first NVSHMEM kernel, then a later one in the same process."""
    pytest.importorskip("numba.cuda")
    out = subprocess.run([sys.executable, str(HERE / "compile_time.py"), "--impl", "numba", "--label", "warm"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["scope"] for r in recs] == ["warm", "warm-later"]
    assert all(r["bench"] == "compile_time" and r["unit"] == "s" and r["value"] > 0 for r in recs)


def test_implausible_bandwidth_is_flagged():
    """More GB/s than any interconnect gives means the kernel skipped its work (the CuTe warp
    kernel of 2026-11-22 reported 130 000 GB/s): bench/run.py names it and fails."""
    import run

    agg = run.aggregate([_rec("cpp", "put_bw", "warp", 1 << 28, 365.0, "GB/s"),
                         _rec("cute", "put_bw", "warp", 1 << 28, 132370.0, "GB/s"),
                         _rec("cute", "p_lat", "thread", 4, 5000.0, "ns/op")])
    assert run.implausible(agg) == ["cute put_bw|warp|268435456 (132370 GB/s)"]
    recs = [dict(_rec("numba", "p_lat", "thread", 4, 47.0, "ns/op", pe=pe), checked=pe == 0) for pe in (0, 1)]
    assert run.aggregate(recs)["numba"][("p_lat", "thread", 4)]["checked"] is False
    assert run.implausible(run.aggregate(recs)) == ["numba p_lat|thread|4 (wrong data after the kernel)"]


def test_p_pattern():
    """What a p_lat loop of `iters` leaves in the peer's LAT_SLOTS floats."""
    import numpy as np

    for iters in (10, 1024, 5000):
        lat = np.full(C.LAT_SLOTS, -1, np.float32)
        for i in range(iters):
            lat[i & (C.LAT_SLOTS - 1)] = i
        assert C.p_pattern_ok(lat, iters)
        lat[3] += 1
        assert not C.p_pattern_ok(lat, iters)


def _results_file(path, ratios):
    path.write_text(json.dumps({"meta": {}, "ratios": [
        {"impl": impl, "key": key, "ratio": r, "higher_is_better": hib, "unit": "GB/s" if hib else "us"}
        for impl, key, r, hib in ratios]}))


def test_check_pass_and_fail(tmp_path):
    import check

    res, base = tmp_path / "latest.json", tmp_path / "baseline.json"
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 2  # no results
    _results_file(res, [("numba", "put_bw|block|1048576", 1.00, True), ("cute", "p_lat|thread|4", 1.20, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 2  # no baseline
    assert check.main(["--results", str(res), "--baseline", str(base), "--update"]) == 0
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 0
    # 4% less bandwidth, 4% more time: within 5%
    _results_file(res, [("numba", "put_bw|block|1048576", 0.96, True), ("cute", "p_lat|thread|4", 1.248, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 0
    # 6% less bandwidth: regression
    _results_file(res, [("numba", "put_bw|block|1048576", 0.94, True), ("cute", "p_lat|thread|4", 1.20, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 1
    # 6% more time relative to C++: regression
    _results_file(res, [("numba", "put_bw|block|1048576", 1.0, True), ("cute", "p_lat|thread|4", 1.28, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 1
    # faster than the baseline is fine; a point of a benchmark that ran but vanished is not
    _results_file(res, [("numba", "put_bw|block|4096", 1.0, True), ("cute", "p_lat|thread|4", 1.0, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 1
    # a benchmark not run at all is only listed
    _results_file(res, [("cute", "p_lat|thread|4", 1.0, False)])
    assert check.main(["--results", str(res), "--baseline", str(base)]) == 0


def test_amo_count():
    """The peer's amo_lat launches leave launches * iters in this PE's counter, nothing else."""
    import numpy as np

    u64 = np.zeros(C.U64_LEN, np.uint64)
    u64[C.U64_COUNTER] = 4 * 20000
    u64[C.U64_OUT] = 7
    assert C.amo_count_ok(u64, 4, 20000)
    assert not C.amo_count_ok(u64, 4, 10000)  # half the fetch-adds: a loop that skipped work


def test_lands_on_peer():
    """PE 0 launches alone: PE 1 must see the write, PE 0 must not (a local write fails)."""
    class FakeHost:
        def sync(self):
            pass

        def barrier_all(self):
            pass

    launched = []
    for me, seen, want in [(0, False, True), (1, True, True), (0, True, False), (1, False, False), (2, False, True)]:
        ok = C.lands_on_peer(FakeHost(), me, lambda: None, lambda: launched.append(me), lambda: seen)
        assert ok is want, (me, seen)
    assert launched == [0, 0]


# ------------------------------------------------------------------ collectives


def test_coll_points():
    """18 latency points (barrier: 0 bytes), 15 bandwidth ones; the reducescatter at 1 MiB only with
    the reduce scratch it needs (bench/run.py sets it)."""
    import run

    p = C.make_params(True)
    env = dict(os.environ)
    try:
        os.environ.update(run.nproc_env(2))
        pts = C.coll_points(p, 2)
    finally:
        os.environ.clear()
        os.environ.update(env)
    lat = [pt for pt in pts if pt.bench == "coll_lat"]
    bw = [pt for pt in pts if pt.bench == "coll_bw"]
    assert len(lat) == 18 and len(bw) == 15 and len(set(pts)) == len(pts)
    assert {pt.nbytes for pt in lat if pt.family != "barrier"} == {8} and {pt.nbytes for pt in bw} == {1 << 20}
    assert all(pt.nbytes == 0 for pt in lat if pt.family == "barrier")
    assert {pt.iters for pt in lat} == {p.coll_lat_iters} and {pt.iters for pt in bw} == {p.coll_bw_iters}
    assert [pt.threads for pt in lat[:3]] == [1, 32, C.COLL_BLOCK]
    assert lat[0].name == "broadcast_thread"
    assert int(run.nproc_env(8)["NVSHMEM_REDUCE_SCRATCH_SIZE"]) == 2 * (1 << 20) * 8
    assert C.reduce_scratch_bytes({"NVSHMEM_REDUCE_SCRATCH_SIZE": "4M"}) == 4 << 20
    assert C.reduce_scratch_bytes({}) == C.DEFAULT_REDUCE_SCRATCH
    # NVSHMEM's default scratch: no 1 MiB reducescatter (NVSHMEM would assert in the kernel)
    os.environ.pop("NVSHMEM_REDUCE_SCRATCH_SIZE", None)
    try:
        pts = C.coll_points(C.make_params(True, only=["coll_bw"]), 2)
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert len(pts) == 12 and not any(pt.family == "reducescatter" for pt in pts)
    assert C.coll_points(C.make_params(True, only=["put_bw"]), 2) == []


def _simulate(family: str, npes: int, n: int) -> list:
    """Every PE's destination after collective ``family`` of ``n`` elements, element by element."""
    src = [[pe * 1024 + i % 1021 for i in range(n * npes)] for pe in range(npes)]
    out = []
    for me in range(npes):
        if family == "broadcast":
            out.append(src[C.COLL_ROOT][:n])
        elif family == "fcollect":
            out.append([src[pe][i] for pe in range(npes) for i in range(n)])
        elif family == "alltoall":
            out.append([src[pe][me * n + i] for pe in range(npes) for i in range(n)])
        elif family == "reduce":
            out.append([sum(src[pe][i] for pe in range(npes)) for i in range(n)])
        else:
            out.append([sum(src[pe][me * n + i] for pe in range(npes)) for i in range(n)])
    return out


@pytest.mark.parametrize("family", [f for f in C.COLL_FAMILIES if f != "barrier"])
def test_coll_expected(family):
    """What each collective leaves on each PE, and the check of a destination against it."""
    import numpy as np

    for npes in (1, 2, 3):
        pt = C.CollPoint("coll_lat", family, "warp", 8, 1)
        want = _simulate(family, npes, pt.nelems)
        for me in range(npes):
            assert C.coll_expected(pt, me, npes).tolist() == want[me]
            dst = np.full(C.coll_buffer_elems(npes), -1, np.float32)
            assert C.coll_check(pt, me, npes, dst) == {"checked": False}
            dst[:len(want[me])] = want[me]
            assert C.coll_check(pt, me, npes, dst) == {"checked": True}
    big = C.CollPoint("coll_bw", family, "block", C.COLL_BW_BYTES, 1)
    assert C.coll_expected(big, 1, 8).dtype == np.float32  # sums of 8 PEs stay exact
    assert C.coll_check(C.CollPoint("coll_lat", "barrier", "block", 0, 1), 0, 2, None) == {}


def test_run_tables_coll_rows():
    """bench/run.py collects collective rows of the three implementations: ratios, table order."""
    import run

    lines = []
    for impl, scale in (("cpp", 1.0), ("numba", 1.1), ("cute", 1.3)):
        for pe in (0, 1):
            for fam in ("reduce", "barrier"):
                for sc, us in (("block", 12.0), ("thread", 10.0), ("warp", 11.0)):
                    nbytes = 0 if fam == "barrier" else 8
                    lines.append(f"[rank {pe}] " + json.dumps(_rec(impl, "coll_lat", f"{fam}_{sc}", nbytes, us * scale,
                                                                   "us", pe, iters=200)))
            lines.append(json.dumps(_rec(impl, "coll_bw", "reduce_block", 1 << 20, 50.0 / scale, "GB/s", pe, iters=2)))
    agg = run.aggregate(run.parse_records(lines))
    assert agg["numba"][("coll_lat", "reduce_warp", 8)]["value"] == pytest.approx(12.1)
    rats = {(r["impl"], r["key"]): r for r in run.ratios(agg)}
    assert rats[("cute", "coll_lat|barrier_thread|0")]["ratio"] == pytest.approx(1.3)
    assert not rats[("cute", "coll_lat|barrier_thread|0")]["higher_is_better"]
    assert rats[("numba", "coll_bw|reduce_block|1048576")]["ratio"] == pytest.approx(1 / 1.1)
    assert rats[("numba", "coll_bw|reduce_block|1048576")]["higher_is_better"]
    assert all(r["iters_match"] for r in rats.values())
    text = run.table(agg)
    rows = [line.split() for line in text.splitlines() if line.startswith("coll_")]
    assert [(r[0], r[1]) for r in rows] == [("coll_bw", "reduce_block"),
                                            ("coll_lat", "reduce_thread"), ("coll_lat", "reduce_warp"),
                                            ("coll_lat", "reduce_block"), ("coll_lat", "barrier_thread"),
                                            ("coll_lat", "barrier_warp"), ("coll_lat", "barrier_block")]
    lat = next(r for r in rows if r[1] == "reduce_warp")
    assert lat[2:5] == ["8", "B", "us"] and lat[-2:] == ["1.10", "1.30"]
    assert run.implausible(agg) == []


def test_compile_families_table_and_run_wiring(tmp_path, monkeypatch, capsys):
    """bench/run.py --compile-families: runs bench/compile_families.py only, keeps its records, prints
    both tables (the step itself is faked here; test_compile_families_runs runs it)."""
    import compile_families
    import run

    recs = [compile_families._record(i, compile_families.bench_name(lab, mode), "reduce_block", v, label=lab)
            for mode in ("", "none") for i, lab, v in (("numba", "cold", 9.0), ("numba", "warm", 0.9),
                                                     ("cute", "cold", 60.0), ("cute", "warm", 1.0))]
    recs += [compile_families._record("cpp", compile_families.bench_name(lab, mode), "reduce_block", 25.0,
                                      label="nvcc") for mode in ("", "none") for lab in ("cold", "warm")]
    text = compile_families.table(recs)
    row = next(line.split() for line in text.splitlines() if line.startswith("reduce") and "(env)" in line)
    assert row == ["reduce", "block", "(env)", "9.00", "0.90", "60.00", "1.00", "25.00"]
    assert any(line.split()[2] == "none" for line in text.splitlines() if line.startswith("reduce"))
    calls = []

    def fake_step(name, argv, env, timeout, log_dir, echo=True):
        calls.append((name, argv))
        return 0, [json.dumps(r) for r in recs], 1.0

    monkeypatch.setattr(run, "run_step", fake_step)
    out = tmp_path / "cf.json"
    assert run.main(["--compile-families", "--families", "reduce", "--scopes", "block", "--outline", "auto,none",
                     "--impls", "cpp,numba", "--out", str(out), "--quiet"]) == 0
    assert [c[0] for c in calls] == ["compile_families"]
    argv = calls[0][1]
    assert argv[1].endswith("compile_families.py") and "--families" in argv and "--outline" in argv
    assert argv[argv.index("--impls") + 1] == "cpp,numba"
    doc = json.loads(out.read_text())
    keys = {(r["impl"], r["key"]): r for r in doc["ratios"]}
    assert keys[("numba", "coll_compile_cold|reduce_block|0")]["ratio"] == pytest.approx(9.0 / 25.0)
    printed = capsys.readouterr().out
    assert "coll_compile_warm_outline_none" in printed and "numba cold" in printed


@pytest.mark.slow
def test_compile_families_runs(tmp_path):
    """bench/compile_families.py on one kernel, on this CPU: Numba cold and warm (to a cubin where
    nvJitLink links without a GPU), nvcc's object of the same kernel (where nvcc is)."""
    pytest.importorskip("numba.cuda")
    impls = "numba,cpp" if _nvcc() else "numba"
    proc = subprocess.run([sys.executable, str(HERE / "compile_families.py"), "--families", "barrier", "--scopes",
                           "thread", "--impls", impls], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, NVCC=_nvcc() or ""))
    assert proc.returncode == 0, proc.stderr[-3000:]
    import run

    recs = [r for r in run.parse_records(proc.stdout.splitlines()) if r["bench"] != "meta"]
    got = {(r["impl"], r["bench"]) for r in recs}
    assert {("numba", "coll_compile_cold"), ("numba", "coll_compile_warm")} <= got
    assert all(r["scope"] == "barrier_thread" and r["value"] > 0 and r["unit"] == "s" for r in recs)
    numba = {r["bench"]: r for r in recs if r["impl"] == "numba"}
    assert numba["coll_compile_cold"]["stage"].startswith(("cubin", "ptx"))
    assert numba["coll_compile_cold"]["process_s"] >= numba["coll_compile_cold"]["value"]
    if "cpp" in impls:
        assert {("cpp", "coll_compile_cold"), ("cpp", "coll_compile_warm")} <= got
    assert re.search(r"^barrier\s+thread\s", proc.stdout, re.M)


def test_build_prints_its_flags():
    """bench/compile_families.py compiles its single-kernel objects with build.sh's flags."""
    if _nvcc() is None:
        pytest.skip("no nvcc")
    import compile_families

    try:
        cmd = compile_families.nvcc_command()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    assert cmd[1:5] == ["-O3", "-std=c++17", "-rdc=true", "-arch=sm_90"]
    single = compile_families.nvcc_single(cmd, "reducescatter", "warp", Path("x.o"))
    assert "-DCOLL_FAMILY=COLL_REDUCESCATTER" in single and "-DCOLL_SCOPE=WARP" in single
    assert single[-4:] == ["-c", str(HERE / "cpp" / "coll.cu"), "-o", "x.o"]
