"""The calling convention of NVSHMEM's objects (nvshmem_dsl.linker.abi), on CPU.

* How PTX is marked (``.abi_preserve N`` on NVSHMEM functions declared external or defined, the
  ``.version`` raised) and when (NVSHMEM_DSL_ABI_PRESERVE, the toolchain).
* With a CUDA 13 ptxas and nvlink (the CPU machine has them beside CUDA 12.9's wheels): a
  collective's object built preserving 2 registers saves none at its entry where under CUDA's
  default ABI it saves dozens; a Numba kernel's PTX calling it links with it; the same PTX left
  with the default convention does not link (nvlink: "Prototype doesn't match"), so a kernel and
  an object that disagree fail loudly instead of running with the wrong convention.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nvshmem_dsl.linker import abi, calls, link, plan

def NVSHMEM(name: str) -> bool:
    """Any NVSHMEM function, API or helper."""
    return re.fullmatch(r"(?:nvshmem\w*|_Z\d+nvshmemi_\w*)", name) is not None

KERNEL = """//
.version 8.5
.target sm_90a
.address_size 64

.extern .func  (.param .b32 func_retval0) vprintf(
\t.param .b64 vprintf_param_0,
\t.param .b64 vprintf_param_1
)
;
.extern .func nvshmem_float_broadcast(
\t.param .b32 nvshmem_float_broadcast_param_0,
\t.param .b64 nvshmem_float_broadcast_param_1
)
;
.extern .func  (.param .b32 func_retval0) _Z20nvshmemi_helper_callPvi(
\t.param .b64 p0,
\t.param .b32 p1
) .abi_preserve 16
;
.visible .func nvshmem_int_sum_reduce(
\t.param .b32 p0
)
{
\tret;
}
.visible .func numba_function(
\t.param .b32 p0
)
{
\tret;
}
"""


def test_mark_sets_the_count_on_nvshmem_functions_only():
    got = abi.mark(KERNEL, 2, NVSHMEM)
    assert abi.declared(got, NVSHMEM) == {"nvshmem_float_broadcast": 2, "_Z20nvshmemi_helper_callPvi": 2,
                                          "nvshmem_int_sum_reduce": 2}
    assert ".version 9.0\n" in got
    assert re.search(r"\)\s*\n\;", got.split("vprintf(")[1]), "vprintf keeps CUDA's convention"
    assert "numba_function(\n\t.param .b32 p0\n)\n{" in got
    assert got.count(".abi_preserve") == 3
    assert abi.mark(got, 2, NVSHMEM) == got  # once
    assert abi.marked(got) and abi.marked(KERNEL)  # KERNEL's own extern declares 16
    assert not abi.marked(abi.mark(KERNEL, None, lambda name: True))
    assert not abi.marked("// .abi_preserve 2 in a comment\n.visible .entry k()\n{\n}\n")


def test_mark_none_restores_the_default_convention():
    got = abi.mark(abi.mark(KERNEL, 2, NVSHMEM), None, NVSHMEM)
    assert ".abi_preserve" not in got
    assert set(abi.declared(got, NVSHMEM).values()) == {None}
    assert got == KERNEL.replace(") .abi_preserve 16\n;", ")\n;").replace(".version 8.5", ".version 9.0")


def test_mark_leaves_ptx_without_nvshmem_calls_as_it_is():
    plain = ".version 8.5\n.target sm_90\n.visible .entry k()\n{\n\tret;\n}\n"
    assert abi.mark(plain, 2, NVSHMEM) == plain  # its .version too: Triton's ptxas may compile it
    newer = KERNEL.replace(".version 8.5", ".version 9.2")
    assert ".version 9.2\n" in abi.mark(newer, 2, NVSHMEM)


def test_preserve_follows_the_environment(monkeypatch):
    monkeypatch.setenv(abi.ENV, "off")
    assert abi.preserve() is None
    monkeypatch.setenv(abi.ENV, "24")
    assert abi.preserve() == 24
    monkeypatch.setattr(abi, "supported", lambda: True)
    monkeypatch.setenv(abi.ENV, "auto")
    assert abi.preserve() == abi.PRESERVE
    monkeypatch.delenv(abi.ENV)
    assert abi.preserve() == abi.PRESERVE
    monkeypatch.setattr(abi, "supported", lambda: False)
    assert abi.preserve() is None
    for bad, needle in (("yes", "choose off, auto or a count"), ("1", "from 2 to 255"), ("256", "from 2 to 255")):
        monkeypatch.setenv(abi.ENV, bad)
        with pytest.raises(ValueError, match=needle):
            abi.preserve()


def test_supported_needs_cuda_13_ptxas_and_driver(monkeypatch):
    """nvJitLink may be CUDA 12's: the kernels it cannot read are compiled by the objects' ptxas
    (tests/test_link_ptxas.py)."""
    from nvshmem_dsl.linker import link, outline

    monkeypatch.setattr(link, "ptxas", lambda: "/x/ptxas")
    monkeypatch.setattr(abi, "_driver_ptx_ok", lambda: True)
    for major, isa, want in ((13, 90, True), (12, 90, False), (13, 88, True), (13, None, True), (None, 90, False)):
        monkeypatch.setattr(abi, "_ptxas_major", lambda path, m=major: m)
        monkeypatch.setattr(link, "nvjitlink_ptx_isa", lambda i=isa: i)
        assert abi.supported() is want, (major, isa)
    monkeypatch.setattr(abi, "_ptxas_major", lambda path: 13)
    monkeypatch.setattr(link, "nvjitlink_ptx_isa", lambda: 90)
    monkeypatch.setattr(abi, "_driver_ptx_ok", lambda: False)  # a CUDA 12 driver: Numba's PTX
    assert abi.supported() is False


def test_objects_features_and_keys_follow_the_count(monkeypatch):
    from nvshmem_dsl.linker import link, outline

    monkeypatch.setattr(link, "ptxas_ptx_isa", lambda: 95)  # CUDA 13.5's
    monkeypatch.setenv(abi.ENV, "off")
    assert abi.object_features("+ptx85") == "+ptx85"
    monkeypatch.setattr(link, "ptxas_ptx_isa", lambda: 88)  # CUDA 12.9's, under a kernel of CUDA 13's
    assert abi.object_features("+ptx94") == "+ptx88"
    monkeypatch.setattr(link, "ptxas_ptx_isa", lambda: 95)
    off = outline._object_path("nvshmem_int_sum_reduce", Path(__file__), "sm_90a", "+ptx85", 64)
    monkeypatch.setenv(abi.ENV, "2")
    assert abi.object_features("+ptx85") == "+ptx90"
    assert abi.object_features("+ptx92") == "+ptx92"
    on = outline._object_path("nvshmem_int_sum_reduce", Path(__file__), "sm_90a", "+ptx85", 64)
    assert on != off


# ------------------------------------------------------------------ with CUDA 13's ptxas and nvlink


def _cuda13(tool: str) -> str | None:
    for path in (shutil.which(tool), f"/usr/local/cuda/bin/{tool}", f"/usr/local/cuda-13.0/bin/{tool}"):
        if path and Path(path).exists():
            out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
            m = re.search(r"release (\d+)\.", out)
            if m and int(m.group(1)) >= 13:
                return path
    return None


def _nvdisasm() -> str | None:
    try:
        import triton
    except ImportError:
        triton = None
    if triton is not None:
        path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
        if path.exists():
            return str(path)
    return shutil.which("nvdisasm")


def entry_saves(sass: str, function: str) -> int:
    """Local-memory stores before the first branch, call or return of ``function``: the
    registers its entry saves."""
    body = re.split(rf"^\$?[^\n]*\b{re.escape(function)}:\n", sass, maxsplit=1, flags=re.M)[-1]
    entry = re.split(r"\bBRA\b|\bBRX\b|\bCALL\b|\bRET\b", body, maxsplit=1)[0]
    return len(re.findall(r"\bSTL\b", entry))


@pytest.fixture
def cuda13(tmp_path, monkeypatch):
    from bitcode_available import HAVE_BITCODE
    from nvshmem_dsl.linker import outline

    ptxas, nvlink, nvdisasm = _cuda13("ptxas"), _cuda13("nvlink"), _nvdisasm()
    if not (HAVE_BITCODE and ptxas and nvlink and nvdisasm):
        pytest.skip("needs NVSHMEM's bitcode, CUDA 13's ptxas and nvlink, and nvdisasm")
    monkeypatch.setattr(link, "ptxas", lambda: ptxas)
    monkeypatch.setattr(outline, "_objects_dir", lambda: tmp_path)
    monkeypatch.delenv(plan.ENV, raising=False)
    return {"ptxas": ptxas, "nvlink": nvlink, "nvdisasm": nvdisasm, "tmp": tmp_path}


def test_a_collective_object_preserving_two_registers_saves_few(cuda13, monkeypatch):
    """The same object under the default ABI saves about a hundred registers at its entry;
    preserving two, a sixth of that (bench/results/abi-preserve-cpu-2026-11-25.txt: this one 98 ->
    16, the broadcast's 71 -> 0 at 255 registers)."""
    from nvshmem_dsl.linker import outline

    name = "nvshmem_float_sum_reduce"
    saves = {}
    for how in ("off", "2"):
        monkeypatch.setenv(abi.ENV, how)
        (path,) = [p for p in outline.objects([name], 90, "sm_90a", "+ptx85", 255) if p.name.startswith(name + "-")]
        sass = subprocess.run([cuda13["nvdisasm"], "-c", str(path)], capture_output=True, text=True, check=True).stdout
        saves[how] = entry_saves(sass, name)
    assert saves["off"] >= 64 and saves["2"] * 4 <= saves["off"], saves


def test_a_kernel_links_only_with_objects_of_its_convention(cuda13, monkeypatch):
    from numba import cuda, float32, int32

    import nvshmem_dsl.numba as nv
    from nvshmem_dsl.linker import outline

    @cuda.jit(launch_bounds=(1,))
    def k(dst, src, n):
        for _ in range(n):
            nv.sum_reduce(nv.Team.TEAM_WORLD, dst, src, 2)

    monkeypatch.setenv(abi.ENV, "2")
    ptx, _ = cuda.compile_ptx(k.py_func, (float32[:], float32[:], int32), cc=(9, 0))
    assert abi.declared(ptx, NVSHMEM)["nvshmem_float_sum_reduce"] == 2 and ".version 9.0" in ptx
    objects = outline.objects_for(ptx, 90)
    tmp = cuda13["tmp"]

    def link(kernel_ptx: str) -> subprocess.CompletedProcess:
        src, obj = tmp / "k.ptx", tmp / "k.o"
        src.write_text(kernel_ptx)
        subprocess.run([cuda13["ptxas"], "-c", "-arch=sm_90", str(src), "-o", str(obj)], check=True)
        return subprocess.run([cuda13["nvlink"], "-arch=sm_90", str(obj), *map(str, objects), "-o", str(tmp / "k.cubin")],
                              capture_output=True, text=True)

    done = link(ptx)
    assert done.returncode == 0, done.stderr
    default = link(abi.mark(ptx, None, NVSHMEM))
    assert default.returncode != 0 and "Prototype doesn't match" in default.stderr, default.stderr


def test_only_api_functions_take_the_objects_convention(monkeypatch):
    """calls.prepare_calls marks NVSHMEM's API functions (nvshmem_, nvshmemx_), not its helpers:
    an object calling a helper under .abi_preserve would save what it keeps live around every
    call (a broadcast 1.15 -> 1.34x of C++, tests/gpu/records/2026-11-25/h200-abi-preserve.txt)."""
    from nvshmem_dsl.linker import outline

    ptx = KERNEL.replace(") .abi_preserve 16\n;", ")\n;")
    monkeypatch.setenv(abi.ENV, "2")
    got = abi.declared(calls.prepare_calls(ptx), NVSHMEM)
    assert got == {"nvshmem_float_broadcast": 2, "nvshmem_int_sum_reduce": 2, "_Z20nvshmemi_helper_callPvi": None}
    monkeypatch.setenv(abi.ENV, "off")
    assert calls.prepare_calls(ptx) == ptx


def test_explain_names_what_keeps_the_default_abi(monkeypatch):
    """``python -m nvshmem_dsl info`` says which convention the objects use and, for CUDA's default,
    which part of the toolchain keeps it and the remedy."""
    from nvshmem_dsl.linker import link, outline

    monkeypatch.delenv(abi.ENV, raising=False)
    monkeypatch.setattr(link, "ptxas", lambda: "/x/ptxas")
    monkeypatch.setattr(abi, "_driver_ptx_ok", lambda: True)
    monkeypatch.setattr(abi, "_ptxas_major", lambda path: 13)
    monkeypatch.setattr(link, "nvjitlink_ptx_isa", lambda: 90)
    assert abi.explain() == "preserve 2 registers (ptxas 13)"
    monkeypatch.setattr(link, "nvjitlink_ptx_isa", lambda: 88)  # CUDA 12's: the kernels compiled by ptxas
    assert abi.explain().startswith("preserve 2 registers (ptxas 13 at /x/ptxas; it compiles the kernels")
    monkeypatch.setattr(abi, "_ptxas_major", lambda path: 12)
    text = abi.explain()
    assert text.startswith("CUDA default ABI") and "ptxas 12 (needs 13)" in text and "nvshmem-dsl[cu13]" in text
    assert "driver" not in text.split(";")[0].split(":")[1]
    monkeypatch.setattr(abi, "_driver_ptx_ok", lambda: False)
    assert "driver older than CUDA 13" in abi.explain()
    monkeypatch.setenv(abi.ENV, "off")
    assert abi.explain() == f"CUDA default ABI ({abi.ENV}=off)"


@pytest.mark.parametrize("driver,ptxas,env,warns", [(13, 12, "", True), (13, 13, "", False), (12, 12, "", False),
                                                     (None, 12, "", False), (13, 12, "off", False)])
def test_a_cuda13_driver_with_an_older_ptxas_is_told_the_remedy_once(monkeypatch, driver, ptxas, env, warns):
    import warnings

    from nvshmem_dsl.linker import outline

    monkeypatch.setattr(abi, "_advised", False)
    monkeypatch.setenv(abi.ENV, env)
    monkeypatch.setattr(link, "driver_major", lambda: driver)
    monkeypatch.setattr(link, "ptxas", lambda: "/x/ptxas")
    monkeypatch.setattr(abi, "_ptxas_major", lambda path: ptxas)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        abi.advise()
        abi.advise()
    texts = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert len(texts) == warns
    if warns:
        assert "ptxas 12 (needs 13)" in texts[0] and "nvidia-cuda-nvcc>=13,<14" in texts[0] and abi.ENV in texts[0]


def test_info_prints_the_objects_convention():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "nvshmem_dsl", "info"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "collective objects:" in line)
    assert row.split(":", 1)[1].strip().startswith(("preserve", "CUDA default ABI")), row
