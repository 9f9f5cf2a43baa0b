"""NVSHMEM's objects under CUDA 13's calling convention with CUDA 12's nvJitLink (the ``cu12`` wheels beside a
CUDA 13 toolkit, on a CUDA 13 driver): the kernels that call them are compiled by the objects' ptxas
(nvJitLink 12 does not read their PTX 9.0) and nvJitLink links the objects.  On the CPU: this machine's
nvJitLink (12.9 with the cu12 wheels) and a CUDA 13 ptxas where one is installed; the driver is pretended."""

from __future__ import annotations

import pytest

pytest.importorskip("numba.cuda")
from numba import types  # noqa: E402
from numba.cuda.compiler import _compile_pyfunc_with_fixup  # noqa: E402

import nvshmem_dsl.numba as nv  # noqa: E402
from nvshmem_dsl.linker import abi, link, outline, pipeline  # noqa: E402

from bitcode_available import HAVE_BITCODE  # noqa: E402

CC = (9, 0)
I32 = types.int32[::1]
W = nv.Team.TEAM_WORLD


def _ptxas_13():
    for path in link._ptxas_found():
        version = link._ptxas_version(path)
        if version and version[0] >= 13:
            return path
    return None


PTXAS_13 = _ptxas_13()


def k_collective(dst, src):
    dst[0] = nv.my_pe()
    nv.sum_reducescatter(W, dst, src, 1)


@pytest.fixture
def cuda13_toolkit_cuda12_link(tmp_path, monkeypatch):
    """A CUDA 13 driver and toolkit pretended (ptxas 13 for the objects), this machine's nvJitLink,
    objects built in a folder of this test's."""
    if not HAVE_BITCODE or PTXAS_13 is None:
        pytest.skip("needs NVSHMEM's bitcode and a CUDA 13 ptxas")
    isa = link.nvjitlink_ptx_isa()
    if isa is None or isa >= abi.MIN_PTX:
        pytest.skip("needs an nvJitLink that does not read PTX 9.0 (CUDA 12's)")
    monkeypatch.delenv(abi.ENV, raising=False)
    monkeypatch.setattr(link, "driver_major", lambda: 13)
    monkeypatch.setattr(link, "ptxas", lambda: PTXAS_13)
    monkeypatch.setattr(outline, "_objects_dir", lambda: tmp_path)
    assert abi.preserve() == abi.PRESERVE
    return tmp_path


def test_numba_kernel_compiled_by_ptxas_links_with_cuda12_nvjitlink(cuda13_toolkit_cuda12_link):
    lib, _ = _compile_pyfunc_with_fixup(k_collective, (I32, I32), device=False, abi="numba", cc=CC)
    (ptx,) = lib.get_asm_strs(cc=CC)
    assert ".abi_preserve 2" in ptx and not link.nvjitlink_reads(ptx)
    cubin = lib.get_cubin(cc=CC)
    cubin = bytes(getattr(cubin, "code", cubin))
    assert cubin[:4] == b"\x7fELF"
    defined = {n for n, d in link.elf_symbols(cubin) if d}
    assert "nvshmem_int32_sum_reducescatter" in defined and lib._entry_name in defined


def test_nvjitlink_cubin_compiles_the_ptx_it_cannot_read(cuda13_toolkit_cuda12_link):
    """CuTe's and Triton's link: a kernel's PTX 9.0 goes to ptxas, its objects to nvJitLink."""
    lib, _ = _compile_pyfunc_with_fixup(k_collective, (I32, I32), device=False, abi="numba", cc=CC)
    (ptx,) = lib.get_asm_strs(cc=CC)
    paths = outline.objects_for(ptx, 90)
    assert paths
    inputs = [("kernel.ptx", pipeline.ptx_for_nvjitlink(ptx).encode())] + [(p.name, p.read_bytes()) for p in paths]
    cubin = link.nvjitlink_cubin("sm_90", inputs, ["-O3", "-lineinfo", "-Xptxas=--fmad=false"])
    assert not [n for n, d in link.elf_symbols(cubin) if not d and n.startswith("nvshmem")]


def test_ptx_for_nvjitlink_keeps_what_the_convention_needs(monkeypatch):
    monkeypatch.setattr(link, "nvjitlink_ptx_isa", lambda: 88)
    monkeypatch.setattr(link, "ptxas_ptx_isa", lambda: 90)
    plain = ".version 9.4\n.target sm_90\n"
    assert pipeline.ptx_for_nvjitlink(plain).startswith(".version 8.8")  # nothing newer used: lowered
    marked = ".version 9.4\n.target sm_90\n.extern .func f() .abi_preserve 2;\n"
    out = pipeline.ptx_for_nvjitlink(marked)
    assert out.startswith(".version 9.0") and not link.nvjitlink_reads(out)  # for ptxas 13.0
    monkeypatch.setattr(link, "nvjitlink_ptx_isa", lambda: None)
    assert link.nvjitlink_reads(marked)  # no nvJitLink: the driver's linker reads it


def test_ptxas_object_takes_the_ptxas_options(monkeypatch, tmp_path):
    seen = []

    def run(cmd, **kw):
        seen.append(cmd)
        open(cmd[cmd.index("-o") + 1], "wb").write(b"\x7fELF")

        class Done:
            returncode, stderr = 0, ""
        return Done()

    import subprocess

    monkeypatch.setattr(link, "ptxas", lambda: "/x/ptxas")
    monkeypatch.setattr(subprocess, "run", run)
    assert link.ptxas_object(b".version 9.0", "sm_90a", ["-O3", "-lineinfo", "-maxrregcount=64",
                                                            "-Xptxas=--fmad=false", "-arch=sm_90a"]) == b"\x7fELF"
    cmd = seen[0]
    assert cmd[:3] == ["/x/ptxas", "-c", "-arch=sm_90a"]
    assert cmd[3:7] == ["-O3", "-lineinfo", "-maxrregcount=64", "--fmad=false"]


def test_ptxas_choice_follows_the_driver(monkeypatch):
    """The newest ptxas of a CUDA release the driver runs; without a driver, the first found."""
    versions = {"/wheel/ptxas": (12, 9), "/usr/local/cuda/bin/ptxas": (13, 0), "/opt/ptxas": (13, 5)}
    monkeypatch.setattr(link, "_ptxas_found", lambda: list(versions))
    monkeypatch.setattr(link, "_ptxas_version", lambda path: versions[path])
    choose = link.ptxas.__wrapped__
    monkeypatch.setattr(link, "driver_major", lambda: 13)
    assert choose() == "/opt/ptxas"
    monkeypatch.setattr(link, "driver_major", lambda: 12)
    assert choose() == "/wheel/ptxas"
    monkeypatch.setattr(link, "driver_major", lambda: None)
    assert choose() == "/wheel/ptxas"
    monkeypatch.setattr(link, "_ptxas_found", lambda: [])
    assert choose() is None


def test_triton_kernel_compiled_by_ptxas_links_with_cuda12_nvjitlink(cuda13_toolkit_cuda12_link, monkeypatch):
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import nvshmem_dsl.triton as nvt

    monkeypatch.setenv("TRITON_CACHE_DIR", str(cuda13_toolkit_cuda12_link / "triton"))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")

    @triton.jit
    def coll(dst, src, nelems):
        nvt.sum_reducescatter(nvt.TEAM_WORLD, dst, src, nelems)

    ck = triton.compile(ASTSource(fn=coll, signature={"dst": "*i32", "src": "*i32", "nelems": "i64"}, constexprs={}),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 1})
    assert ".abi_preserve 2" in ck.asm["ptx"] and not link.nvjitlink_reads(ck.asm["ptx"])
    defined = {n for n, d in link.elf_symbols(ck.asm["cubin"]) if d}
    assert "nvshmem_int32_sum_reducescatter" in defined



try:  # a CuTe kernel (annotations are read from this module's globals)
    import cutlass
    from cutlass import cute

    import nvshmem_dsl.cute as nvc

    @cute.kernel
    def _cute_kernel(dst: cute.Tensor, src: cute.Tensor):
        tid, _, _ = cute.arch.thread_idx()
        if tid == 0:
            nvc.sum_reduce(nvc.Team.TEAM_WORLD, dst, src, cute.size(dst))

    @cute.jit
    def _cute_host(dst: cute.Tensor, src: cute.Tensor):
        _cute_kernel(dst, src).launch(grid=[1, 1, 1], block=[64, 1, 1])
except ImportError:  # pragma: no cover - no CuTe DSL
    cute = None


@pytest.mark.skipif(cute is None, reason="needs the CuTe DSL")
def test_cute_kernel_compiled_by_ptxas_links_with_cuda12_nvjitlink(cuda13_toolkit_cuda12_link, monkeypatch):
    def tensor():
        return cute.runtime.make_fake_compact_tensor(cutlass.Int32, (256,), assumed_align=16)

    compiled = []
    ptxas_object = link.ptxas_object
    monkeypatch.setattr(link, "ptxas_object", lambda ptx, *a, **k: compiled.append(ptx) or ptxas_object(ptx, *a, **k))
    k = nvc.compile(_cute_host, tensor(), tensor(), arch="sm_90a", keep_ptx=True, keep_cubin=True)
    assert len(compiled) == 1 and b".abi_preserve 2" in compiled[0]
    assert abi.MIN_PTX <= link.ptx_isa(compiled[0].decode()) <= link.ptxas_ptx_isa()  # what that ptxas reads
    defined = {n for n, d in link.elf_symbols(k.linked_cubin) if d}
    assert "nvshmem_int32_sum_reduce" in defined


def test_ptxas_object_without_ptxas_names_the_remedy(monkeypatch):
    monkeypatch.setattr(link, "ptxas", lambda: None)
    with pytest.raises(link.NvshmemLinkError, match=r"kernel k: its PTX ISA is newer than nvJitLink reads.*cu13"):
        link.ptxas_object(b".version 9.0", "sm_90", (), "kernel k")


def test_both_nvcc_wheels_are_found_and_the_driver_chooses(monkeypatch, tmp_path):
    """``nvidia-cuda-nvcc`` 13 beside the cu12 wheels: each wheel's ptxas is a candidate (cuda.pathfinder
    names only the first), so a CUDA 12 driver gets CUDA 12's and a CUDA 13 one CUDA 13's."""
    import os
    import sys

    site = tmp_path / "site-packages"
    made = {}
    for parts, release in ((("nvidia", "cu13", "bin"), "13.5"), (("nvidia", "cuda_nvcc", "bin"), "12.9")):
        folder = site.joinpath(*parts)
        folder.mkdir(parents=True)
        exe = folder / "ptxas"
        exe.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.0'\n")
        exe.chmod(0o755)
        made[release] = str(exe)
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setattr(link.shutil, "which", lambda name: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    import cuda.pathfinder as pathfinder

    monkeypatch.setattr(pathfinder, "find_nvidia_binary_utility", lambda name: made["13.5"], raising=False)
    found = link._ptxas_found()
    assert found[:2] == [made["13.5"], made["12.9"]]
    choose = link.ptxas.__wrapped__
    monkeypatch.setattr(link, "driver_major", lambda: 12)
    assert choose() == made["12.9"]
    monkeypatch.setattr(link, "driver_major", lambda: 13)
    assert choose() == made["13.5"] and os.access(choose(), os.X_OK)
