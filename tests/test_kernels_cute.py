"""The CuTe DSL communication kernels (nvshmem_dsl.kernels.cute), on CPU: every kind and element
type compiles to PTX for sm_90a with the protocol's arguments (tensors, four 64-bit and two 32-bit
scalars), 512 threads, the NVSHMEM calls of the protocol inlined (put_signal_nbi_block, signal_op,
signal_wait_until, quiet: only NVSHMEM's out-of-line transport helpers stay calls), one signal
wait per phase, 64-bit index arithmetic and float32 sums rounded to bfloat16; and one kernel to a
cubin, whose arguments are those :func:`launch` passes (marshalled from host arrays, no launch)."""

from __future__ import annotations

import re

import numpy as np
import pytest

cute = pytest.importorskip("cutlass.cute")
import cutlass  # noqa: E402

try:
    from nvshmem_dsl._libs import bitcode_path

    bitcode_path("sm_90a")
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

import nvshmem_dsl.cute as nv  # noqa: E402
from nvshmem_dsl.cute import _compile  # noqa: E402
from nvshmem_dsl.kernels import _plan  # noqa: E402
from nvshmem_dsl.kernels import cute as kc  # noqa: E402
from test_cute_api import PTX_OPTIONS, _called, _check_ptx  # noqa: E402

CASES = [(kind, dtype) for kind in _plan.KINDS for dtype in _plan.DTYPES]
CUTE_NAME = {"float32": "Float32", "bfloat16": "BFloat16"}
BITS = {"float32": 32, "bfloat16": 16}
# NVSHMEM's signal_wait_until(CMP_GE), inlined: poll the word while it is below the epoch
_WAIT = re.compile(r"ld\.volatile\.global\.b64\s+(%rd\d+),\s*\[[^\]]+\];\s*"
                   r"setp\.lt\.u64\s+%p\d+,\s*\1,\s*%rd\d+;")


@pytest.fixture(scope="module")
def ptx():
    """(kind, dtype) -> PTX, each compiled once (about 1 s each)."""
    done = {}

    def get(kind, dtype):
        if (kind, dtype) not in done:
            done[kind, dtype] = kc.compile_ptx(kind, dtype, "sm_90a", options=PTX_OPTIONS)
        return done[kind, dtype]

    return get


def _params(ptx: str, kind: str) -> list[str]:
    """The kernel's parameter kinds: "tensor" (a 16-byte descriptor) or the scalar's PTX type."""
    m = re.search(rf"^\.visible \.entry (kernel_cutlass_{kind}_\w*)\((.*?)\)", ptx, re.M | re.S)
    assert m, f"no entry for {kind}"
    out = []
    for p in re.findall(r"\.param\s+([^,]+?)\s+\w+(?:\[\d+\])?\s*(?:,|$)", m.group(2)):
        out.append("tensor" if ".b8" in p else p.split()[-1].lstrip("."))
    return out


def test_kernels():
    assert set(kc.KERNELS) == {*_plan.KINDS, _plan.LL_KERNEL}
    assert kc.THREADS == _plan.THREADS
    assert set(kc.ELEMENT) == set(_plan.DTYPES)
    with pytest.raises(ValueError, match="unknown kernel"):
        kc.compile_ptx("all_reduce", "float32")


@pytest.mark.parametrize("kind,dtype", CASES)
def test_calls_the_protocols_functions(kind, dtype):
    """Traced (no compile): exactly the NVSHMEM functions of the protocol, for the element type."""
    token = _compile._compile_arch.set("sm_90a")
    try:
        text = str(cute.compile.to_precompiled_mlir(kc._launch, *kc._example_args(kind, dtype),
                                                    options="--gpu-arch sm_90a"))
    finally:
        _compile._compile_arch.reset(token)
    assert set(_called(text)) == {nv.DISPATCH["put_signal_nbi_block"][CUTE_NAME[dtype]],
                                  nv.DISPATCH["signal_op"][None],
                                  nv.DISPATCH["signal_wait_until"][None], nv.DISPATCH["quiet"][None]}


@pytest.mark.parametrize("kind,dtype", CASES)
def test_compiles_to_ptx(ptx, kind, dtype):
    text = ptx(kind, dtype)
    assert re.search(r"^\.target sm_90a\b", text, re.M)
    assert len(re.findall(r"^\.visible \.entry ", text, re.M)) == 1
    # (out, x, stage, sig, epoch, n, span, chunk, me, npes)
    assert _params(text, kind) == ["tensor"] * 4 + ["u64"] * 4 + ["u32"] * 2
    assert re.search(rf"^\.reqntid {_plan.THREADS}, 1, 1\b", text, re.M)
    # NVSHMEM inlined: no call of an API function, no indirect call; the device state is there
    _check_ptx(text)
    helpers = {name for name in re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$.]+)", text)}
    assert any("put_signal" in h for h in helpers), helpers  # the put's remote transport
    assert any("quiet" in h for h in helpers), helpers
    # one wait per phase (two_shot: reduce-scatter, then all-gather), each followed by bar.sync
    assert len(_WAIT.findall(text)) == (2 if kind == "two_shot" else 1)
    assert "bar.sync" in text
    # the block-strided loops count in 64 bits (offsets pass 2**31)
    assert re.search(rf"add\.s64\s+(%rd\d+),\s*\1,\s*{_plan.THREADS};", text)
    assert re.search(rf"\bst\.global\.b{BITS[dtype]}\b", text)
    # a reduction sums in float32 and rounds to bfloat16 (to nearest even); a copy converts nothing
    sums = kind != "all_gather"
    if dtype == "bfloat16":
        assert ("cvt.rn.bf16.f32" in text) is sums and ("cvt.f32.bf16" in text) is sums
        assert sums or "add.f32" not in text
    else:
        assert not re.search(r"\bcvt\.\S*bf16", text)
    if sums:
        assert "add.f32" in text


@pytest.mark.parametrize("dtype", _plan.DTYPES)
def test_ll_kernel_compiles(ptx, dtype):
    """one_shot_ll: the protocol's arguments (stage: the LL words), the words stored through the peer's
    address (64-bit), polled by 64-bit volatile loads until their epoch half is the call's; no signal,
    fence, barrier or quiet; float32 sums (bfloat16: from the words' bits, rounded to nearest even)."""
    text = ptx(_plan.LL_KERNEL, dtype)
    assert _params(text, _plan.LL_KERNEL) == ["tensor"] * 4 + ["u64"] * 4 + ["u32"] * 2
    assert re.search(rf"^\.reqntid {_plan.THREADS}, 1, 1\b", text, re.M)
    _check_ptx(text)
    assert not re.search(r"call(?:\.uni)?\s", text)  # nvshmem_ptr and signal_fetch inlined, no transport
    assert re.search(r"\bst(\.global)?\.b64\b", text)
    poll = re.search(r"ld\.volatile\.global\.b64\s+(%rd\d+),[^\n]*\n\s*and\.b64\s+%rd\d+,\s*\1,\s*-4294967296;", text)
    assert poll, "no poll of a word's epoch half"
    assert "bar.sync" not in text and "membar" not in text and "fence" not in text
    assert "add.f32" in text
    assert ("cvt.rn.bf16.f32" in text) is (dtype == "bfloat16")


def record_launches(monkeypatch, module) -> tuple[list, object]:
    """``module._compiled`` (sm_90a) made to record its kernels' calls, (kernel, args), instead of
    launching them (no GPU here); returns the list of calls and the real ``_compiled``."""
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    calls = []

    class Recorder:
        def __init__(self, kernel):
            self.kernel = kernel

        def __call__(self, *args):
            calls.append((self.kernel, args))

    real = module._compiled
    monkeypatch.setattr(module, "_compiled", lambda *key: Recorder(real(*key)))
    return calls, real


def test_launch_up_to_the_launch(monkeypatch):
    """launch() on host arrays, up to the launch (which needs a GPU): it compiles once per (kind,
    dtype, arch) to a cubin, turns the arrays into tensors of a dynamic size (bfloat16 also from
    its int16 / uint16 bits) and the stream handle into a CUstream, and the compiled function marshals
    every argument it passes; arrays of the wrong element type are refused."""
    from cuda.bindings import driver

    calls, real = record_launches(monkeypatch, kc)
    plan = _plan.plan("two_shot", "bfloat16", 1000, 2)
    out, x = np.zeros(plan.n, np.uint16), np.zeros(plan.n, np.int16)
    stage, sig = np.zeros(plan.stage_elems, np.uint16), np.zeros(_plan.signal_words(2), np.uint64)
    kc.launch("two_shot", plan, out, x, stage, sig, 3, 1, 7)
    (k, args), = calls
    assert k is real("two_shot", "bfloat16", "sm_90a")  # cached
    assert k.linked_cubin is not None and k.linked_cubin[:4] == b"\x7fELF"
    assert [t.element_type for t in args[:4]] == [cutlass.BFloat16] * 3 + [cutlass.Uint64]
    assert [t.data_ptr for t in args[:4]] == [a.ctypes.data for a in (out, x, stage, sig)]
    assert args[4:11] == (*plan.args(3, 1), plan.grid)
    assert isinstance(args[11], driver.CUstream) and int(args[11]) == 7
    exe, _ = k._fn.generate_execution_args(*args)
    assert len(exe) == 4 + 6 + 2  # a descriptor per tensor, the scalars, grid and stream
    with pytest.raises(TypeError, match="float32 plan"):
        kc.launch("one_shot", _plan.plan("one_shot", "float32", 1000, 2), out, x, stage, sig, 3,
                  1, 0)
    # the LL kernel takes the LL words (uint64) for stage, and nothing else there
    plan = _plan.plan("one_shot", "bfloat16", 1000, 2, True)
    words = np.zeros(plan.stage_elems, np.uint64)
    kc.launch(_plan.LL_KERNEL, plan, out, x, words, sig, 5, 0, 0)
    k, args = calls[-1]
    assert k is real(_plan.LL_KERNEL, "bfloat16", "sm_90a")
    assert [t.element_type for t in args[:4]] == [cutlass.BFloat16] * 2 + [cutlass.Uint64] * 2
    assert args[4:11] == (*plan.args(5, 0), plan.grid)
    with pytest.raises(TypeError, match="bfloat16 plan"):
        kc.launch(_plan.LL_KERNEL, plan, out, x, stage, sig, 5, 0, 0)
