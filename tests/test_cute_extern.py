"""CuTe DSL kernels calling NVSHMEM device functions through nvshmem_dsl.cute._extern.

CPU only: compiles for explicit archs and inspects the PTX.  Every NVSHMEM API
call must be inlined: no indirect call, no call to an ``nvshmem_*`` /
``nvshmemx_*`` symbol.  (Calls to NVSHMEM's internal ``nvshmemi_*`` transport
helpers stay: they are ``noinline`` in NVSHMEM's own bitcode, as in CUDA C++.)
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from pathlib import Path

import pytest

try:
    import nvshmem_dsl  # noqa: F401
except ImportError:  # not installed: map the source tree
    _root = Path(__file__).resolve().parents[1]
    _spec = importlib.util.spec_from_file_location(
        "nvshmem_dsl", _root / "runtime" / "__init__.py",
        submodule_search_locations=[str(_root / "runtime")])
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["nvshmem_dsl"] = _mod
    _spec.loader.exec_module(_mod)

cute = pytest.importorskip("cutlass.cute")
import cutlass  # noqa: E402

from nvshmem_dsl.cute import _compile  # noqa: E402
from nvshmem_dsl.cute._compile import (
    ArchNotSetError, CompiledKernel, compile, compile_to_ptx, loaded_libraries, resolve_arch,
    set_module_finalize_hook, set_module_init_hook,
)
from nvshmem_dsl.cute._extern import _parse, extern  # noqa: E402

try:
    from nvshmem_dsl._libs import bitcode_path

    bitcode_path("sm_90a")
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

# declared as generated code will: LLVM types copied from the bitcode definitions
my_pe = extern("nvshmem_my_pe", "i32", [])
int_p = extern("nvshmem_int_p", "void", ["ptr noundef", "i32 noundef", "i32 noundef"])
put_block = extern("nvshmemx_float_put_block", "void", ["ptr", "ptr", "i64", "i32"])
half_p = extern("nvshmem_half_p", "void",
                ["ptr noundef", "ptr noundef readonly byval(%struct.__half) align 2 captures(none)",
                 "i32 noundef"])
bf16_g = extern("nvshmem_bfloat16_g", "%struct.__nv_bfloat16", ["ptr noundef", "i32 noundef"])
half_g = extern("nvshmem_half_g", "%struct.__half", ["ptr", "i32"])
short_p = extern("nvshmem_short_p", "void", ["ptr noundef", "i16 noundef signext", "i32 noundef"])
uint8_p = extern("nvshmem_uint8_p", "void", ["ptr", "i8 noundef zeroext", "i32"])
remote_ptr = extern("nvshmem_ptr", "ptr", ["ptr noundef", "i32 noundef"])

T = cute.runtime.make_fake_compact_tensor


@cute.kernel
def _full_kernel(a: cute.Tensor, f: cute.Tensor, h: cute.Tensor, b: cute.Tensor,
                 s: cute.Tensor, x: cutlass.Float16):
    pe = my_pe()
    int_p(a, pe, pe + 1)                  # tensor -> generic ptr
    put_block(f.iterator, f, 16, pe)      # CuTe pointer and tensor, int -> i64
    half_p(h, x, pe)                      # half by value (byval)
    b[0] = bf16_g(b, pe)                  # %struct.__nv_bfloat16 return
    short_p(s, cutlass.Int32(3), pe)      # Int32 -> i16


@cute.jit
def _full_host(a: cute.Tensor, f: cute.Tensor, h: cute.Tensor, b: cute.Tensor,
               s: cute.Tensor, x: cutlass.Float16):
    _full_kernel(a, f, h, b, s, x).launch(grid=[1, 1, 1], block=[32, 1, 1])


def _full_args():
    return (T(cutlass.Int32, (16,)), T(cutlass.Float32, (16,)), T(cutlass.Float16, (16,)),
            T(cutlass.BFloat16, (16,)), T(cutlass.Int16, (16,)), cutlass.Float16(1.0))


@cute.kernel
def _small_kernel(a: cute.Tensor, h: cute.Tensor, u: cute.Tensor):
    pe = my_pe()
    int_p(a, pe, 0)
    h[1] = half_g(h, pe)
    half_p(h, h[1], pe)
    uint8_p(u, 255, pe)
    p = remote_ptr(a, pe)                 # ptr return -> usable with cute.make_ptr
    a[2] = cute.make_ptr(cutlass.Int32, p).toint().to(cutlass.Int32)


@cute.jit
def _small_host(a: cute.Tensor, h: cute.Tensor, u: cute.Tensor):
    _small_kernel(a, h, u).launch(grid=[1, 1, 1], block=[32, 1, 1])


def _small_args():
    return (T(cutlass.Int32, (16,)), T(cutlass.Float16, (16,)), T(cutlass.Uint8, (16,)))


def _check_inlined(ptx: str) -> None:
    indirect = re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?%rd\d+", ptx)
    assert not indirect, f"indirect calls: {indirect}"
    addr_taken = re.findall(r"mov\.b64\s+%rd\d+,\s+nvshmemx?_\w+", ptx)
    assert not addr_taken, f"function addresses taken: {addr_taken}"
    callees = re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$.]+)", ptx)
    public = [c for c in callees if re.match(r"nvshmemx?_", c)]
    assert not public, f"NVSHMEM API calls not inlined: {public}"
    assert not re.search(r"\.func\s+(?:\([^)]*\)\s*)?nvshmemx?_", ptx)
    assert "nvshmemi_device_state_d" in ptx


@pytest.fixture(scope="module")
def full_sm90a():
    return compile(_full_host, *_full_args(), arch="sm_90a", keep_ptx=True, keep_cubin=True)


def test_sm90a_everything_inlined(full_sm90a):
    ptx = full_sm90a.__ptx__
    assert isinstance(full_sm90a, CompiledKernel) and full_sm90a.arch == "sm_90a"
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)
    _check_inlined(ptx)


def test_sm90a_cubin(full_sm90a):
    cubin = full_sm90a.__cubin__
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"
    # nothing is loaded before the first launch (no GPU needed to compile)
    assert loaded_libraries(full_sm90a) == []


@pytest.mark.parametrize("arch", ["sm_80", "sm_100a"])
def test_other_archs(arch):
    ptx = compile_to_ptx(_small_host, *_small_args(), arch=arch)
    assert re.search(rf"^\.target {arch}\b", ptx, re.M)
    _check_inlined(ptx)


def test_bitcode_per_arch():
    """The bitcode (or its libNVVM copy, named after it) is the arch's; with hybrid linking
    the placeholder of the kernel's own bitcode (made at its compile), without it (``none``) the
    whole library."""
    from nvshmem_dsl.linker import plan

    if not re.search(r"_sm_\d+\.bc$", str(bitcode_path("sm_90a"))):
        pytest.skip("single-file bitcode layout (NVSHMEM < 3.5)")
    with plan.override("none"):
        for arch, sm in [("sm_90a", 90), ("sm_80", 80), ("sm_86", 80), ("sm_100a", 100),
                         ("sm_120a", 100)]:
            name = Path(int_p.bitcode(arch)).name
            assert re.match(rf"libnvshmem_device_sm_{sm}[.-]", name) and "-inline-" not in name
    with plan.override("auto"):
        name = Path(int_p.bitcode("sm_90a")).name
    assert re.match(r"libnvshmem_device_sm_90-\w{24}-kernel\.nvvm\.bc$", name)
    assert not Path(int_p.bitcode("sm_90a")).exists()  # a placeholder


def test_arch_missing(monkeypatch):
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)
    monkeypatch.setattr(_compile, "_device_arch", lambda: None)
    with pytest.raises(ArchNotSetError, match="arch='sm_90a'.*CUTE_DSL_ARCH"):
        compile(_small_host, *_small_args())
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_80")
    assert resolve_arch() == "sm_80"
    assert resolve_arch("sm_100a") == "sm_100a"


def test_arch_names():
    assert resolve_arch("90a") == "sm_90a"
    assert resolve_arch((9, 0)) == "sm_90a"
    assert resolve_arch((8, 0)) == "sm_80"
    with pytest.raises(ValueError, match="unknown GPU arch"):
        resolve_arch("sm_42")
    with pytest.raises(ValueError, match="--gpu-arch"):
        _compile._with_arch("--gpu-arch sm_80", "sm_90a")
    assert _compile._with_arch("--gpu-arch sm_90a", None) == ("--gpu-arch sm_90a", "sm_90a")
    assert _compile._with_arch("--keep-ptx", "90a") == ("--keep-ptx --gpu-arch sm_90a", "sm_90a")


def test_type_strings():
    assert _parse("noundef i64").base == "i64"
    t = _parse("ptr noundef readonly byval(%struct.__nv_bfloat16) align 2 captures(none)")
    assert (t.base, t.byval) == ("ptr", "%struct.__nv_bfloat16")
    assert _parse("i8 noundef zeroext").zeroext
    with pytest.raises(ValueError):
        extern("f", "void", ["<2 x i32>"])
    assert extern("nvshmem_my_pe", "i32", []) is my_pe


# ----------------------------------------------------- init/finalize wiring


class _FakeLibs:
    """Stands in for CuTe's CudaDialectJitModule."""

    def __init__(self, handles):
        self.cuda_library = list(handles)
        self._unloaded = False

    def is_unloaded(self):
        return self._unloaded

    def unload(self):  # as CuTe does: notify, then unload
        from cutlass.base_dsl.jit_executor import _notify_library_unload

        for h in self.cuda_library:
            _notify_library_unload(int(h))
        self.cuda_library.clear()
        self._unloaded = True


_handles = itertools.count(0x1000, 0x10)


class _FakeCompiled:
    """Stands in for CudaDialectJitCompiledFunction (loads lazily in .to())."""

    def __init__(self, events):
        self.jit_module = None
        self.events = events

    def to(self, device=None):
        if self.jit_module is None or self.jit_module.is_unloaded():
            h = next(_handles)
            self.jit_module = _FakeLibs([h, h + 1])
        return "executor"

    def handles(self):
        return list(self.jit_module.cuda_library)

    def __call__(self, *args):
        self.to()
        self.events.append(("launch", args))
        return 0


@pytest.fixture
def hooks(monkeypatch):
    import nvshmem_dsl.cute._compile as compile_module

    # the fake libraries all hold NVSHMEM code (test_library_without_nvshmem_is_left_alone: not all)
    monkeypatch.setattr(compile_module, "library_uses_nvshmem", lambda h: True)
    events = []
    set_module_init_hook(lambda h: events.append(("init", h)))
    set_module_finalize_hook(lambda h: events.append(("fini", h)))
    yield events
    set_module_init_hook(None)
    set_module_finalize_hook(None)


def test_init_before_first_launch_and_finalize_on_release(hooks):
    fake = _FakeCompiled(hooks)
    k = CompiledKernel(fake, "sm_90a")
    assert k.libraries == []
    k(1)
    k(2)
    h = fake.handles()
    assert hooks == [("init", h[0]), ("init", h[1]), ("launch", (1,)), ("launch", (2,))]
    assert k.libraries == h
    hooks.clear()
    k.release()
    assert hooks == [("fini", h[0]), ("fini", h[1])]
    hooks.clear()
    k(3)  # reloaded -> the new libraries are initialized again
    h = fake.handles()
    assert hooks == [("init", h[0]), ("init", h[1]), ("launch", (3,))]
    hooks.clear()
    fake.jit_module.unload()  # CuTe unloading by itself (GC) also finalizes
    assert hooks == [("fini", h[0]), ("fini", h[1])]


def test_library_without_nvshmem_is_left_alone(hooks, monkeypatch):
    """NVSHMEM's culibrary_init fails (status 7) on a library with no NVSHMEM device state, e.g.
    a helper kernel that calls no NVSHMEM function: such libraries get neither init nor finalize."""
    import nvshmem_dsl.cute._compile as compile_module

    monkeypatch.setattr(compile_module, "library_uses_nvshmem", lambda h: h % 2 == 0)
    fake = _FakeCompiled(hooks)
    k = CompiledKernel(fake, "sm_90a")
    k(1)
    k(2)
    h = fake.handles()
    assert h[0] % 2 == 0 and h[1] % 2 == 1
    assert hooks == [("init", h[0]), ("launch", (1,)), ("launch", (2,))]
    hooks.clear()
    k.release()
    assert hooks == [("fini", h[0])]


def test_to_device_initializes(hooks):
    fake = _FakeCompiled(hooks)
    assert CompiledKernel(fake, "sm_90a").to(0) == "executor"
    assert hooks == [("init", h) for h in fake.handles()]


def test_hook_registered_after_compile(hooks):
    set_module_init_hook(None)
    fake = _FakeCompiled(hooks)
    k = CompiledKernel(fake, "sm_90a")
    k(1)
    assert hooks == [("launch", (1,))]
    set_module_init_hook(lambda h: hooks.append(("init", h)))
    k(2)
    assert hooks[1:] == [("init", h) for h in fake.handles()] + [("launch", (2,))]
