"""Hybrid linking for CuTe DSL kernels (nvshmem_dsl.cute._link), on CPU for sm_90a.

A kernel calling a thread-scope collective (``sum_reduce``) and ``p``: the collective is
declared ``.extern .func`` and called in its cached object (nvJitLink links it after CuTe's
compile), ``p`` is inlined exactly as before; with ``outline("none")`` everything is inlined.
The linked cubin defines the collective and the device state once and references no NVSHMEM
symbol it lacks.  The first test may build the reduction's object and the bitcode without the
outlined functions (10-30 s once per cache); the rest reuses them.
"""

from __future__ import annotations

import hashlib
import re
import struct
import time
import warnings
from pathlib import Path

import pytest

cute = pytest.importorskip("cutlass.cute")
import cutlass  # noqa: E402
from cutlass import Int32  # noqa: E402

import nvshmem_dsl.cute as nv  # noqa: E402
from nvshmem_dsl.cute import _link  # noqa: E402
from nvshmem_dsl.linker import calls, link, outline, pipeline, plan  # noqa: E402
from nvshmem_dsl.linker.link import NvshmemLinkError  # noqa: E402

try:
    from nvshmem_dsl._libs import bitcode_path

    bitcode_path("sm_90a")
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

if link.ptxas() is None:  # pragma: no cover
    pytest.skip("no ptxas to build NVSHMEM's objects", allow_module_level=True)

REDUCE, P = "nvshmem_int32_sum_reduce", "nvshmem_int32_p"
STATE = "nvshmemi_device_state_d"


@cute.kernel
def _kernel(dst: cute.Tensor, src: cute.Tensor):
    tid, _, _ = cute.arch.thread_idx()
    if tid == 0:
        nv.sum_reduce(nv.Team.TEAM_WORLD, dst, src, cute.size(dst))
    nv.p(dst, Int32(7), Int32(1))


@cute.jit
def _host(dst: cute.Tensor, src: cute.Tensor):
    _kernel(dst, src).launch(grid=[1, 1, 1], block=[64, 1, 1])


def _args():
    def make():
        return cute.runtime.make_fake_compact_tensor(cutlass.Int32, (256,), assumed_align=16)

    return make(), make()


def _compile(**kw):
    return nv.compile(_host, *_args(), arch="sm_90a", keep_ptx=True, keep_cubin=True, **kw)


def _calls(ptx: str) -> set:
    return set(re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?(nvshmem\w+)", ptx))


def _undefined(cubin: bytes) -> set:
    return {n for n in pipeline.undefined_symbols(cubin) if n.startswith("nvshmem")}


@pytest.fixture(scope="module")
def hybrid():
    with plan.override("auto"):
        _compile()  # builds what is not cached yet
        t0 = time.perf_counter()
        k = _compile()
        k.warm_seconds = time.perf_counter() - t0
    return k


def _api(names) -> set:
    """``names`` but NVSHMEM's out-of-line helpers."""
    return {n for n in names if not calls.is_helper(n)}


def test_collective_is_called_out_of_line(hybrid):
    ptx = hybrid.__ptx__
    assert _api(calls.extern_calls(ptx)) == {REDUCE}
    assert re.search(rf"^\.extern \.func\s+\([^)]*\)\s*{REDUCE}\b", ptx, re.M)
    assert _calls(ptx) == {REDUCE}  # p inlined: no call
    assert P not in ptx
    # NVSHMEM's transport helpers that the inlined p calls are in their objects, linked (specialised
    # on the modes the PTX passes them, as the link names them)
    assert hybrid.outlined == calls.extern_calls(calls.specialise_helper_calls(ptx))
    defined, _ = link.cubin_info(hybrid.linked_cubin)
    assert all(defined[n] == 1 for n in hybrid.outlined)


def test_linked_cubin(hybrid):
    cubin = hybrid.__cubin__
    assert cubin == hybrid.linked_cubin and cubin[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", cubin, 16)[0] == 2  # ET_EXEC: what CuTe loads
    defined, registers = link.cubin_info(cubin)
    assert defined[REDUCE] == 1
    assert defined[STATE] == 1
    assert not _undefined(cubin)
    # the kernel declares its 64-thread block (.reqntid): the object may use what that leaves a thread
    cap = outline.register_cap([hybrid.__ptx__])
    assert cap == outline.REGISTERS_PER_THREAD and registers[REDUCE] <= cap


def test_warm_compile_is_quick(hybrid):
    # a sanity bound, not a benchmark (everything inlined takes 15-25 s on 2 CPUs)
    assert hybrid.warm_seconds < 10


def test_a_kernel_linked_with_provisional_objects_stays_out_of_cutes_file_cache(hybrid, tmp_path, monkeypatch):
    """A kernel linked with split objects whose whole form is still being built serves this process
    but is not written to CuTe's file cache (the next process compiles it again); others are."""
    from cutlass.base_dsl import compile_backend

    monkeypatch.setenv("CUTE_DSL_CACHE_DIR", str(tmp_path))
    assert getattr(compile_backend.dump_cache_to_path, "_nvshmem_dsl_hybrid", False)  # installed
    monkeypatch.setattr(_link, "_provisional_cubins", set())

    def dump(fn, name) -> bool:  # (cute.compile writes no file cache; a JIT call does, through this)
        compile_backend.dump_cache_to_path("CUTE_DSL", fn._fn, name, path=str(tmp_path))
        return bool(list(tmp_path.glob(f"*{name}*")))

    assert dump(hybrid, "linked-whole")
    monkeypatch.setattr(outline, "provisional", lambda paths: bool(paths))
    k = nv.compile(_host, *_args(), arch="sm_90a", no_cache=True)  # compiled again: not the fixture's
    assert hashlib.sha256(k.linked_cubin).digest() in _link._provisional_cubins
    assert not dump(k, "linked-provisional")
    assert not _link._holds_provisional(object())  # not a module: CuTe's own dump goes ahead


def test_none_inlines_everything():
    with nv.outline("none"):
        k = nv.compile(_host, *_args(), arch="sm_90a", keep_ptx=True)
    ptx = k.__ptx__
    assert not calls.extern_calls(ptx) and not _calls(ptx)
    assert k.outlined == frozenset() and k.linked_cubin is None
    assert STATE in ptx


def test_only_small_functions_inlined():
    """A kernel calling only small functions has them inlined; what it calls out of line are
    NVSHMEM's transport helpers (their fallback path), from their objects, as in Numba and Triton
    kernels (before 2026-11-25 libNVVM compiled them into every CuTe kernel)."""

    @cute.kernel
    def k_p(dst: cute.Tensor):
        nv.p(dst, Int32(7), Int32(1))

    @cute.jit
    def host_p(dst: cute.Tensor):
        k_p(dst).launch(grid=[1, 1, 1], block=[32, 1, 1])

    with plan.override("auto"):
        k = nv.compile(host_p, _args()[0], arch="sm_90a", keep_ptx=True, keep_cubin=True)
    helpers = calls.extern_calls(calls.specialise_helper_calls(k.__ptx__))
    assert not _calls(k.__ptx__) and all(calls.is_helper(n) for n in helpers)
    assert k.outlined == helpers
    defined, _ = link.cubin_info(k.__cubin__)
    assert defined[STATE] == 1 and all(defined[n] == 1 for n in helpers)
    assert (k.linked_cubin is not None) == bool(helpers)
    with plan.override("none"):  # everything inlined: no helper object
        k = nv.compile(host_p, _args()[0], arch="sm_90a", keep_ptx=True)
    assert not calls.extern_calls(k.__ptx__) and k.linked_cubin is None


def test_user_register_cap():
    with plan.override("auto"):
        k = _compile(options="--ptxas-options=-maxrregcount=32")
    defined, registers = link.cubin_info(k.linked_cubin)
    assert defined[REDUCE] == 1 and registers[REDUCE] <= 32
    assert max(v for n, v in registers.items() if n.startswith("kernel")) <= 32


def test_relocatable_pipeline():
    p, cap = _link.relocatable_pipeline("builtin.module(cute-to-nvvm{opt-level=3 ptx-options='-O0 "
                                        "-maxrregcount=40' cubin-chip='sm_90a'})")
    assert "ptx-options='-c -O0 -maxrregcount=40'" in p and cap == 40
    p, cap = _link.relocatable_pipeline("builtin.module(cute-to-nvvm{opt-level=3})")
    assert "cute-to-nvvm{ptx-options='-c' opt-level=3}" in p and cap is None
    with pytest.raises(NvshmemLinkError, match="NVSHMEM_DSL_OUTLINE=none"):
        _link.relocatable_pipeline("builtin.module(something-else)")


def test_nvjitlink_error_is_clear(monkeypatch):
    """A failed link of a CuTe kernel names the way out (link_module's hint to the linker's link)."""
    seen = {}

    def link_cubin(ptx, arch, options=(), **kw):
        seen.update(kw)
        return real(ptx, arch, options, **kw)

    real = pipeline.link_cubin
    monkeypatch.setattr(_link, "link_cubin", link_cubin)
    monkeypatch.setattr(_link, "_binaries", lambda module: iter([(None, b"")]))
    ptx = ".version 8.5\n.target sm_90a\n.address_size 64\nnot PTX at all\n"
    with pytest.raises(NvshmemLinkError, match=r"nvJitLink failed.*\n(.|\n)*NVSHMEM_DSL_OUTLINE=none"):
        _link.link_module(None, "sm_90a", frozenset(), ptx)
    assert seen["what"] == "a CuTe kernel" and seen["names"] == frozenset()


def test_kernel_bitcode_holds_what_the_kernel_inlines(monkeypatch):
    """The compile replaces the placeholder its calls named by the kernel's own bitcode: the
    functions it inlines (``p``) and the device state (kept), not the outlined collective."""
    import llvmlite.binding as llvm

    from nvshmem_dsl._libs import bitcode_path
    from nvshmem_dsl.linker.nvvm import kernel_bitcode, kernel_bitcode_placeholder

    seen = []
    orig = _link.resolve_kernel_bitcode

    def spy(module, pipeline):
        result = orig(module, pipeline)
        seen.append((pipeline, result[0]))
        return result

    monkeypatch.setattr(_link, "resolve_kernel_bitcode", spy)
    with plan.override("auto"):
        _compile()
    placeholder = kernel_bitcode_placeholder(bitcode_path("sm_90a"))
    (before, after), = seen
    path = str(kernel_bitcode({P}, 90, bitcode_path("sm_90a")))
    assert placeholder in before and placeholder not in after and path in after
    mod = llvm.parse_bitcode(Path(path).read_bytes())
    defined = {f.name for f in mod.functions if not f.is_declaration}
    assert P in defined and REDUCE not in defined
    assert not mod.get_global_variable(STATE).is_declaration
    assert "@llvm.compiler.used" in str(mod)


@pytest.mark.parametrize("own", [False, True])
def test_nvidias_bitcode_given_by_the_program_is_left_out(monkeypatch, own):
    """A program that links NVSHMEM's whole bitcode itself (NVSHMEM4Py's way: ``--link-libraries=``
    ``find_device_bitcode_library()``) gets the kernel's own bitcode in its place: libNVVM read all of
    it at every compile (bench/results/cute-link-libraries-cpu-2026-12-04.txt).  Kept where the kernel declares an ``nvshmem*``
    function that is no NVSHMEM function of the op table (``own``): it may be the program's."""
    from nvshmem_dsl._libs import bitcode_path

    seen = []
    orig = _link.resolve_kernel_bitcode
    if own:
        monkeypatch.setattr(_link, "inlined_declarations", lambda module: frozenset({P, "nvshmem_users_own"}))

    def spy(module, pipeline):
        result = orig(module, pipeline)
        libraries = [[x.value for x in op.attributes["link-libraries"]] for op in _link._gpu_modules(module)
                     if "link-libraries" in op.attributes]
        seen.append((pipeline, result[0], libraries))
        return result

    monkeypatch.setattr(_link, "resolve_kernel_bitcode", spy)
    nvidia = str(bitcode_path("sm_90a"))
    with plan.override("auto"):
        k = _compile(options=f"--link-libraries={nvidia}")
    (before, after, libraries), = seen
    linked = re.search(r"link-libraries='([^']*)'", after).group(1).split(",")
    assert nvidia in before and linked == ([nvidia] if own else []) + [x for x in linked if x.endswith(".nvvm.bc")]
    assert len(linked) == 1 + own  # the kernel's bitcode, and NVIDIA's where it is kept
    assert all(nvidia not in x for x in libraries)
    assert _calls(k.__ptx__) >= {REDUCE}


def test_kernel_bitcode_placeholder_names_what_the_bitcode_is_made_of(monkeypatch):
    """CuTe keys its cached kernels by module and pipeline, which hold the placeholder: a kernel
    whose NVSHMEM code is rewritten differently names another one."""
    from nvshmem_dsl._libs import bitcode_path
    from nvshmem_dsl.linker import rewrites
    from nvshmem_dsl.linker.nvvm import kernel_bitcode_placeholder

    names = set()
    for how in rewrites.MODES:
        monkeypatch.setenv(rewrites.ENV, how)
        names.add(kernel_bitcode_placeholder(bitcode_path("sm_90a")))
    assert len(names) == len(rewrites.MODES)


def test_kernel_bitcode_leaves_out_declarations_nvshmem_lacks(monkeypatch):
    """A module's own ``nvshmem*``-named declaration that is no NVSHMEM function is not asked of
    NVSHMEM's bitcode (it stays the module's to define), so the compile does not fail on it."""
    asked = []
    monkeypatch.setattr(_link, "inlined_declarations", lambda module: frozenset({P, "nvshmem_users_own"}))
    import nvshmem_dsl.linker.nvvm as nvvm

    real = nvvm.kernel_bitcode
    monkeypatch.setattr(nvvm, "kernel_bitcode", lambda names, *a: asked.append(set(names)) or real(names, *a))
    with plan.override("auto"):
        _compile()
    assert asked == [{P}]


def test_a_kernel_without_nvshmem_compiles_as_before(monkeypatch):
    """The hook wraps every CuTe compile: one whose module declares no NVSHMEM function is left to
    CuTe as it was, NVSHMEM's bitcode not even looked for."""
    import nvshmem_dsl._libs

    def no_bitcode(arch):
        raise AssertionError("NVSHMEM's bitcode looked for")

    assert _link.install()  # as after any NVSHMEM call traced in the process
    monkeypatch.setattr(nvshmem_dsl._libs, "bitcode_path", no_bitcode)

    @cute.kernel
    def k_plain(dst: cute.Tensor):
        dst[0] = Int32(7)

    @cute.jit
    def host_plain(dst: cute.Tensor):
        k_plain(dst).launch(grid=[1, 1, 1], block=[32, 1, 1])

    with plan.override("auto"):
        k = nv.compile(host_plain, _args()[0], arch="sm_90a", keep_ptx=True)
    assert "nvshmem" not in k.__ptx__ and k.linked_cubin is None


def test_kernel_bitcode_of_no_function_defines_the_state():
    """A kernel that only calls outlined functions still defines the device state they read."""
    import llvmlite.binding as llvm

    from nvshmem_dsl._libs import bitcode_path
    from nvshmem_dsl.linker.nvvm import kernel_bitcode

    mod = llvm.parse_bitcode(kernel_bitcode((), 90, bitcode_path("sm_90a")).read_bytes())
    assert not [f.name for f in mod.functions if not f.is_declaration and f.name.startswith("nvshmem")]
    assert not mod.get_global_variable(STATE).is_declaration


def test_kernel_bitcode_declares_the_helpers_it_names():
    """With the helpers in their objects, a kernel bitcode of ``p`` declares NVSHMEM's transport
    helper ``p`` calls and names it (and its predicted specialised calls) beside it; without,
    defines it; a bitcode whose list went missing is made again."""
    import llvmlite.binding as llvm

    from nvshmem_dsl._libs import bitcode_path
    from nvshmem_dsl.linker.nvvm import _calls_path, kernel_bitcode, kernel_bitcode_calls, kernel_bitcode_declares

    path = kernel_bitcode({P}, 90, bitcode_path("sm_90a"), helpers_out=True)
    helpers, predicted = kernel_bitcode_calls(path)
    mod = llvm.parse_bitcode(path.read_bytes())
    declared = {f.name for f in mod.functions if f.is_declaration}
    assert helpers and helpers <= declared and all(calls.is_helper(n) for n in helpers)
    assert {outline.split_specialised(n)[0] for n in predicted} <= helpers
    inlined = kernel_bitcode({P}, 90, bitcode_path("sm_90a"), helpers_out=False)
    assert inlined != path and kernel_bitcode_calls(inlined) == (frozenset(), frozenset())
    assert helpers <= {f.name for f in llvm.parse_bitcode(inlined.read_bytes()).functions if not f.is_declaration}
    # the declare lines of those helpers, from which NVIDIA's compiled helpers are asked about them early
    declares = kernel_bitcode_declares(path)
    assert declares and set(declares) <= helpers and all(line.startswith("declare ") for line in declares.values())
    assert kernel_bitcode_declares(inlined) == {}
    _calls_path(path).unlink()
    assert kernel_bitcode({P}, 90, bitcode_path("sm_90a"), helpers_out=True) == path
    assert kernel_bitcode_calls(path) == (helpers, predicted)


def test_a_kernels_helpers_are_asked_about_before_cute_compiles(monkeypatch, tmp_path):
    """With NVIDIA's compiled helpers in use, the hook asks about the helpers of the kernel's bitcode
    before CuTe compiles it, with the declarations its PTX then has (what the link's own question
    asks), not after."""
    from nvshmem_dsl.linker import helper_archive

    member = tmp_path / "member.o"
    monkeypatch.setattr(helper_archive, "path", lambda sm, bc_path=None: member)
    events = []
    monkeypatch.setattr(helper_archive, "ask_ahead",
                        lambda sm, names, declarations, bc_path=None: events.append(("asked", declarations())))
    monkeypatch.setattr(helper_archive, "provided", lambda sm, declared, bc_path=None: {n: False for n in declared})
    real = _link.link_module
    monkeypatch.setattr(_link, "link_module", lambda *a, **k: (events.append(("link", a[3])), real(*a, **k))[1])
    with plan.override("auto"):
        _compile()
    [(_, early)], [(_, ptx)] = [e for e in events if e[0] == "asked"], [e for e in events if e[0] == "link"]
    assert events.index(("asked", early)) < events.index(("link", ptx))
    called = calls.helper_calls(ptx)
    assert called and called <= set(early)
    for n in called:
        assert early[n] == calls._declaration(ptx, n).group(0).rstrip("\n"), n


def test_objects_start_before_cute_compiles(monkeypatch):
    """The hook starts the objects at the cap of the kernel's declared block (its ``nvvm.reqntid``),
    the cap the link after CuTe's compile asks for."""
    asked = {}
    monkeypatch.setattr(outline, "prefetch", lambda *a: asked.setdefault("prefetch", a))
    orig = outline.objects
    monkeypatch.setattr(outline, "objects", lambda *a: asked.setdefault("objects", a) and orig(*a))
    with plan.override("auto"):
        _compile()
    assert asked["prefetch"][1:] == asked["objects"][1:]
    names, sm, arch, features, cap, _ = asked["prefetch"]
    assert _api(names) == {REDUCE} and cap == outline.registers_a_thread(64) and arch == "sm_90a"
    # the helpers the inlined p calls, predicted from the kernel's bitcode, are what the link asks for
    assert set(asked["objects"][0]) == set(names)


def test_hook_unavailable_falls_back_to_inlining(monkeypatch):
    from cutlass.cutlass_dsl import CuTeDSL

    monkeypatch.setattr(_link, "_installed", None)

    def broken():
        raise AttributeError("no compiler_provider")

    monkeypatch.setattr(CuTeDSL, "_get_dsl", staticmethod(broken))
    with plan.override("auto"), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert _link.effective_mode() == "none"
        assert _link.effective_mode() == "none"
    msgs = [str(w.message) for w in seen]
    assert len(msgs) == 1 and "nvidia-cutlass-dsl" in msgs[0] and "inlined" in msgs[0]


# ------------------------------------------------------------------ measuring
# python tests/test_cute_outline.py [--cold]: compile time (one process per kernel) of one
# thread-scope collective kernel per family and of a p-only kernel, NVSHMEM_DSL_OUTLINE=none vs
# auto (bench/results/cute-outline-cpu-2026-11-24.txt).  --cold: hybrid with an empty object
# cache (a cache directory of links to the prepared bitcode files, without outline/).

_BENCH = {
    "broadcast": lambda d, s: nv.broadcast(nv.Team.TEAM_WORLD, d, s, cute.size(s), 0),
    "fcollect": lambda d, s: nv.fcollect(nv.Team.TEAM_WORLD, d, s, 8),
    "alltoall": lambda d, s: nv.alltoall(nv.Team.TEAM_WORLD, d, s, 8),
    "sum_reduce": lambda d, s: nv.sum_reduce(nv.Team.TEAM_WORLD, d, s, cute.size(d)),
    "sum_reducescatter": lambda d, s: nv.sum_reducescatter(nv.Team.TEAM_WORLD, d, s, 8),
    "barrier_all": lambda d, s: nv.barrier_all(),
    "p": lambda d, s: None,  # p only
}


def _bench_one(case: str) -> None:
    call = _BENCH[case]

    @cute.kernel
    def k(dst: cute.Tensor, src: cute.Tensor):
        tid, _, _ = cute.arch.thread_idx()
        if tid == 0:
            call(dst, src)
        nv.p(dst, Int32(7), Int32(1))

    @cute.jit
    def host(dst: cute.Tensor, src: cute.Tensor):
        k(dst, src).launch(grid=[1, 1, 1], block=[64, 1, 1])

    t0 = time.perf_counter()
    c = nv.compile(host, *_args(), arch="sm_90a", keep_ptx=True)
    print(f"{time.perf_counter() - t0:.1f} {len(c.__ptx__)} {','.join(sorted(c.outlined))}")


def _bench(cold: bool) -> None:
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from nvshmem_dsl.linker.store_file import cache_dir

    env = dict(os.environ)
    tmp = None
    if cold:
        tmp = tempfile.mkdtemp(prefix="cute-outline-cold-")
        for f in cache_dir().iterdir():
            if f.is_file() and "sm_90" in f.name and f.suffix in (".pieces", ".bc"):
                (Path(tmp) / f.name).symlink_to(f)
        env["NVSHMEM_DSL_CACHE"] = tmp
    modes = ["auto"] if cold else ["none", "auto"]
    print(f"{'kernel':<20}" + "".join(f"{m + (' cold' if cold else ''):>22}" for m in modes)
          + "   (seconds, PTX bytes)")
    for case in _BENCH:
        row = f"{case:<20}"
        for m in modes:
            out = subprocess.run([sys.executable, __file__, "--one", case],
                                 env={**env, "NVSHMEM_DSL_OUTLINE": m}, capture_output=True,
                                 text=True, check=True).stdout.split()
            row += f"{out[0] + ' s, ' + out[1]:>22}"
        print(row, flush=True)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--one"]:
        _bench_one(sys.argv[2])
    else:
        _bench("--cold" in sys.argv)


def test_the_link_step_asks_cute_for_the_kernels_ptx(tmp_path):
    """The PTX, not CuTe's relocatable cubin, goes to nvJitLink (CuTe's bundled ptxas may be newer
    than the installed nvJitLink): the pipeline gets a dump path, or keeps the user's."""
    pipeline = "builtin.module(cute-to-nvvm{cubin-chip=sm_90a ptx-options='-c'})"
    added, prefix = _link.ptx_dump_pipeline(pipeline, str(tmp_path / "kernel"))
    assert prefix == str(tmp_path / "kernel") and f"dump-ptx-path='{prefix}'" in added
    users = pipeline.replace("{", "{dump-ptx-path='/keep/f' ")
    assert _link.ptx_dump_pipeline(users, "/elsewhere") == (users, "/keep/f")
    (tmp_path / "kernel.sm_90a.ptx").write_text(".version 8.8")
    assert _link._read_dumped_ptx(prefix) == ".version 8.8"
    with pytest.raises(NvshmemLinkError, match="wrote no PTX"):
        _link._read_dumped_ptx(str(tmp_path / "other"))


def test_ptx_newer_than_nvjitlink_is_lowered(monkeypatch):
    """CuTe's cu13 build writes PTX 9.4; CUDA 13.0's nvJitLink compiles up to 9.0 (measured on the
    GPU image): the .version line is lowered to what the installed nvJitLink takes, never raised."""
    from nvshmem_dsl.linker import link

    ptx = "//\n.version 9.4\n.target sm_90a\n.address_size 64\n"
    monkeypatch.setattr(link, "nvjitlink_ptx_isa", lambda: 90)
    assert pipeline.ptx_for_nvjitlink(ptx) == ptx.replace("9.4", "9.0")
    assert pipeline.ptx_for_nvjitlink(ptx.replace("9.4", "8.8")) == ptx.replace("9.4", "8.8")
    monkeypatch.setattr(link, "nvjitlink_ptx_isa", lambda: None)
    assert pipeline.ptx_for_nvjitlink(ptx) == ptx
