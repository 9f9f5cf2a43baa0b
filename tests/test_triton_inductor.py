"""nvshmem_dsl.triton under torch.compile (runtime/triton/_inductor.py), on CPU, without torch:
Inductor's two steps that NVSHMEM calls concern are played by stand-ins with Inductor's module
and function names (the GPU test, tests/gpu/test_triton_gpu.py, runs the real torch.compile).

* Inductor's analysis (``generate_ttir`` of torch._higher_order_ops.triton_kernel_wrap) gets a
  TTIR in which every pointer an NVSHMEM call takes is stored to, but the pure queries'; the
  kernel compiled outside the analysis has no such store.
* A kernel autotuned with nv.do_bench() (PEs launching each config alike) gets a warning: Inductor
  tunes with its own timing.
* The source Inductor copies of a kernel imports the nvshmem_dsl modules and functions the
  kernel and the Triton functions it calls name.
"""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import nvshmem_dsl.triton as nv  # noqa: E402
from nvshmem_dsl.triton import _inductor, put_block  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
import triton_gpu_kernels as K  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
k_put = K.k_put_compiled  # the GPU test's kernel under torch.compile


@triton.jit
def _helper_get(dst, src, n, pe):
    nv.get(dst, src, n, pe)


@triton.jit
def k_mixed(dst, src, out, n, pe):
    # a pure query (my_pe) and a peer address (pure) store nothing; a helper's get does
    tl.store(out, nv.my_pe())
    _helper_get(dst, src, n, pe)
    x = tl.load(nv.peer(src, pe))
    tl.store(out + 1, x)


@triton.jit
def k_unqualified(dst, src, n, pe):
    put_block(dst, src, n, pe)
    nv.c.nvshmem_quiet()


def _ttir(kernel, sig, constexprs=None) -> str:
    """The kernel through Triton's front end, as Inductor's analysis runs it."""
    from triton._C.libtriton import ir

    backend = triton.compiler.compiler.make_backend(TARGET)
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    src = ASTSource(fn=kernel, signature=sig, constexprs=constexprs or {})
    return str(src.make_ir(TARGET, options, backend.get_codegen_implementation(options),
                           backend.get_module_map(), context))


@pytest.fixture
def inductor_analysis(monkeypatch):
    """A stand-in for Inductor's analysis module: its ``generate_ttir`` runs :func:`_ttir`."""
    mod = types.ModuleType(_inductor.ANALYSIS_MODULE)
    code = ("from triton.runtime.autotuner import Autotuner\n"
            "def generate_ttir(kernel, sig, constexprs=None):\n"
            "    return _ttir(kernel.fn if isinstance(kernel, Autotuner) else kernel, sig, constexprs)\n"
            "def identify_mutated_tensors(kernel, sig, constexprs=None):\n"
            "    return generate_ttir(kernel, sig, constexprs)\n")
    exec(compile(code, "<inductor stand-in>", "exec"), mod.__dict__)
    mod._ttir = _ttir
    monkeypatch.setitem(sys.modules, _inductor.ANALYSIS_MODULE, mod)
    monkeypatch.setattr(_inductor, "install", lambda: False)
    return mod


def _stored_params(ttir: str) -> set:
    """The kernel arguments whose pointers (or pointers computed from them) are stored to."""
    roots = set()
    for v in re.findall(r"tt\.store (%[\w#]+)", ttir):
        while m := re.search(re.escape(v) + r" = tt\.\w+ (%[\w#]+)", ttir):  # tt.addptr ...: its base
            v = m.group(1)
        roots.add(v.lstrip("%"))
    return roots


SIG_PUT = {"dst": "*fp32", "src": "*fp32", "n": "i32", "pe": "i32"}
SIG_MIXED = {"dst": "*i32", "src": "*i32", "out": "*i32", "n": "i32", "pe": "i32"}


def test_the_analysis_sees_the_pointers_nvshmem_calls_take_as_written(inductor_analysis):
    ttir = inductor_analysis.generate_ttir(k_put, SIG_PUT)
    assert _stored_params(ttir) == {"dst", "src"}, ttir


def test_pure_queries_and_helpers(inductor_analysis):
    ttir = inductor_analysis.generate_ttir(k_mixed, SIG_MIXED)
    # out: the kernel's own stores; dst, src: the helper's get; nothing from my_pe or peer
    assert _stored_params(ttir) == {"dst", "src", "out"}, ttir


def test_the_kernel_itself_gets_no_such_store():
    assert "tt.store" not in _ttir(k_put, SIG_PUT)
    assert _stored_params(_ttir(k_mixed, SIG_MIXED)) == {"out"}


def test_the_copied_source_imports_what_the_kernel_names():
    assert _inductor.source_imports(k_put) == ["import nvshmem_dsl.triton", "import nvshmem_dsl.triton as nv"]
    assert _inductor.source_imports(k_mixed) == ["import nvshmem_dsl.triton", "import nvshmem_dsl.triton as nv"]
    assert _inductor.source_imports(k_unqualified) == [
        "import nvshmem_dsl.triton", "from nvshmem_dsl.triton import put_block as put_block",
        "import nvshmem_dsl.triton as nv"]


@triton.jit
def k_plain(x):
    tl.store(x, 1)


def test_a_kernel_without_nvshmem_gets_no_imports():
    assert _inductor.source_imports(k_plain) == []


def test_the_imports_run_and_give_the_same_objects():
    ns = {}
    exec("\n".join(_inductor.source_imports(k_unqualified)), ns)
    assert ns["nv"] is nv and ns["put_block"] is nv.put_block


def test_install_wraps_inductors_copy_once(monkeypatch):
    wrapper = types.ModuleType(_inductor.WRAPPER_MODULE)
    wrapper.user_defined_triton_kernel_transitive_closure_source_code = lambda kernel: "SRC\n"
    monkeypatch.setitem(sys.modules, _inductor.WRAPPER_MODULE, wrapper)
    assert _inductor.install() and _inductor.install()
    copy = wrapper.user_defined_triton_kernel_transitive_closure_source_code
    assert copy(k_put) == "SRC\n\nimport nvshmem_dsl.triton\nimport nvshmem_dsl.triton as nv\n"
    assert copy(k_plain) == "SRC\n"
    assert copy.__wrapped__(k_put) == "SRC\n"


def test_install_without_torch_does_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, _inductor.WRAPPER_MODULE, None)  # import fails
    assert _inductor.install() is False


@triton.autotune(configs=[triton.Config({"B": 1}), triton.Config({"B": 2})], key=["n"], do_bench=nv.do_bench())
@triton.jit
def k_team_tuned(dst, src, n, pe, B: tl.constexpr):
    nv.fcollect_block(nv.TEAM_WORLD, dst, src, n)


@triton.autotune(configs=[triton.Config({"B": 1}), triton.Config({"B": 2})], key=["n"])
@triton.jit
def k_tuned(dst, src, n, pe, B: tl.constexpr):
    nv.put_block(dst, src, n, pe)


def test_a_kernel_tuned_with_nv_do_bench_is_warned_about_once(inductor_analysis, recwarn):
    sig, consts = {**SIG_PUT, "B": "constexpr"}, {"B": 1}
    inductor_analysis.identify_mutated_tensors(k_tuned, sig, consts)
    assert not [w for w in recwarn if "nvshmem_dsl" in str(w.message)]
    for _ in range(2):
        inductor_analysis.identify_mutated_tensors(k_team_tuned, sig, consts)
    ours = [str(w.message) for w in recwarn if "nvshmem_dsl" in str(w.message)]
    assert len(ours) == 1 and "k_team_tuned" in ours[0] and "torch.compiler.disable" in ours[0], ours
