"""NVSHMEM linking into Numba-CUDA kernels, on the CPU (no GPU, no driver).

The NVSHMEM bitcode tests use the default cache directory: the first run
builds the sm_90 piece store (once per machine; the first kernel links a
closure extracted beside the build, ~10-15 s on two CPUs, and the build
finishes in the background).  tests/test_bitcode.py covers the store on a
small module.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from types import SimpleNamespace

import pytest

pytest.importorskip("numba.cuda")
import llvmlite.binding as llvm  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import cuda, types  # noqa: E402
from numba.cuda import codegen as numba_codegen  # noqa: E402
from numba.cuda.extending import intrinsic  # noqa: E402

import nvshmem_dsl.numba as nv  # noqa: E402
from nvshmem_dsl.linker import link, nvvm, pieces, store, store_file# noqa: E402
from nvshmem_dsl.numba import _linker  # noqa: E402
from nvshmem_dsl.numba._intrinsics import declare_device_function  # noqa: E402

from bitcode_available import needs_bitcode  # noqa: E402

I32, I64 = ir.IntType(32), ir.IntType(64)
VOIDP = ir.IntType(8).as_pointer()
SIG1 = (types.int32[:],)
SIG3 = (types.int32[:], types.float32[:], types.float32[:])
# a call to a public API function left in the PTX (mangled internal helpers
# such as _Z21nvshmemi_transfer_rma... are noinline in NVSHMEM by design)
API_CALL = re.compile(r"^\s*call[^;]*\b(nvshmemx?_\w+)", re.M)


# ---------------------------------------------------------------- intrinsics


@intrinsic
def my_pe(typingctx):
    def codegen(context, builder, sig, args):
        fn = declare_device_function(builder, "nvshmem_my_pe", ir.FunctionType(I32, []))
        return builder.call(fn, [])

    return types.int32(), codegen


@intrinsic
def int_p(typingctx, dest, value, pe):
    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        fnty = ir.FunctionType(ir.VoidType(), [VOIDP, I32, I32])
        fn = declare_device_function(builder, "nvshmem_int_p", fnty)
        builder.call(fn, [builder.bitcast(ary.data, VOIDP), args[1], args[2]])

    return types.void(dest, types.int32, types.int32), codegen


@intrinsic
def float_put_block(typingctx, dest, src, nelems, pe):
    def codegen(context, builder, sig, args):
        d = context.make_array(sig.args[0])(context, builder, args[0])
        s = context.make_array(sig.args[1])(context, builder, args[1])
        fnty = ir.FunctionType(ir.VoidType(), [VOIDP, VOIDP, I64, I32])
        fn = declare_device_function(builder, "nvshmemx_float_put_block", fnty)
        builder.call(
            fn,
            [builder.bitcast(d.data, VOIDP), builder.bitcast(s.data, VOIDP), args[2], args[3]],
        )

    return types.void(dest, src, types.int64, types.int32), codegen


@intrinsic
def my_pe_wrong_type(typingctx):
    def codegen(context, builder, sig, args):
        fn = declare_device_function(builder, "nvshmem_my_pe", ir.FunctionType(I64, []))
        return builder.trunc(builder.call(fn, []), I32)

    return types.int32(), codegen


@intrinsic
def not_in_nvshmem(typingctx):
    def codegen(context, builder, sig, args):
        fn = declare_device_function(builder, "nvshmem_no_such_function", ir.FunctionType(I32, []))
        return builder.call(fn, [])

    return types.int32(), codegen


def k_all(a, b, c):
    pe = my_pe()
    int_p(a, pe, pe + 1)
    float_put_block(b, c, c.size, pe + 1)


def k_my_pe(a):
    a[0] = my_pe()


def k_plain(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = a[i] * 2 + 1


def nvjitlink_cubin(ptx: str, arch: str) -> bytes:
    """A cubin of ``ptx`` linked by nvJitLink with the objects of the NVSHMEM functions it calls
    out of line (outline.objects_for: the large routines and NVSHMEM's transport helpers)."""
    from cuda.bindings import nvjitlink

    from nvshmem_dsl.linker import outline

    sm = int(re.search(r"sm_(\d+)", arch).group(1))
    opts = [f"-arch={arch}"]
    h = nvjitlink.create(len(opts), opts)
    try:
        inputs = [("kernel.ptx", nvjitlink.InputType.PTX, ptx.encode())]
        inputs += [(p.name, nvjitlink.InputType.CUBIN, p.read_bytes()) for p in outline.objects_for(ptx, sm)]
        for name, kind, data in inputs:
            nvjitlink.add_data(h, kind, data, len(data), name)
        try:
            nvjitlink.complete(h)
        except Exception:
            size = nvjitlink.get_error_log_size(h)
            log = bytearray(size)
            nvjitlink.get_error_log(h, log)
            raise AssertionError(log.decode(errors="replace"))
        cubin = bytearray(nvjitlink.get_linked_cubin_size(h))
        nvjitlink.get_linked_cubin(h, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(h)


# ---------------------------------------------------------------- linking


@needs_bitcode
def test_ptx_has_nvshmem_inlined():
    ptx, _ = cuda.compile_ptx(k_all, SIG3, cc=(9, 0))
    assert "Generated by LLVM NVPTX" in ptx
    assert ".target sm_90" in ptx
    assert ".entry" in ptx
    assert API_CALL.findall(ptx) == []
    assert "nvshmemi_device_state_d" in ptx
    assert re.search(r"\.visible \.const .*nvshmemi_device_state_d", ptx)
    assert "nvshmemi_device_lib_version_d" in ptx


@needs_bitcode
def test_simple_api_fully_inlined():
    ptx, _ = cuda.compile_ptx(k_my_pe, SIG1, cc=(9, 0))
    assert not re.search(r"^\s*call", ptx, re.M)
    assert "ld.const" in ptx and "nvshmemi_device_state_d" in ptx


def _entry(ptx: str) -> str:
    start = ptx.index(".entry")
    return ptx[start:ptx.index("\n}", start)]


@needs_bitcode
def test_thread_scope_loops_unroll_collective_ones_do_not():
    """O3 may unroll a loop around thread-scope calls (as nvcc does for C++): four inlined p
    per trip plus a remainder.  Warp/block-scope functions (and unknown ones) are declared
    convergent, which forbids that."""
    from numba import float32

    def p_loop(dst, n, pe):
        for i in range(n):
            nv.p(dst, i & 1023, float32(i), pe)

    ptx, _ = cuda.compile_ptx(p_loop, (types.float32[::1], types.int64, types.int32), cc=(9, 0))
    stores = re.findall(r"^\s*st(?:\.global)?\.b32\s", _entry(ptx), re.M)
    assert len(stores) >= 4, _entry(ptx)
    assert link._unconstrained() >= {"nvshmem_float_p", "nvshmem_float_put"}
    assert "nvshmemx_float_put_warp" not in link._unconstrained()

    decls = ("declare void @nvshmemx_float_put_warp(ptr, ptr, i64, i32)\n"
             "declare void @nvshmem_float_p(ptr, float, i32)\n"
             "declare void @nvshmemx_barrier_all_block()\n"
             "declare void @nvshmem_not_in_the_spec()\n")
    marked = link.DECLARATION.sub(link.mark_declaration, decls).splitlines()
    assert [line.endswith(" convergent nounwind") for line in marked] == [True, False, True, True]
    assert all(line.endswith(" nounwind") for line in marked)


def test_unswitching_is_the_default(monkeypatch):
    monkeypatch.delenv(_linker.UNSWITCH_ENV, raising=False)
    assert _linker.unswitching()
    for off in ("0", "off", "No", "false"):
        monkeypatch.setenv(_linker.UNSWITCH_ENV, off)
        assert not _linker.unswitching()
    monkeypatch.setenv(_linker.UNSWITCH_ENV, "1")
    assert _linker.unswitching()


def _longest_run(ptx: str, op: str) -> int:
    """The most ``op`` instructions in a row in the kernel, with no branch, call or label between."""
    run = best = 0
    for line in _entry(ptx).splitlines():
        if re.match(op, line.strip()):
            run += 1
            best = max(best, run)
        elif re.match(r"(@%p\d+ )?(bra|call)|^\$L", line.strip()) or "call" in line:
            run = 0
    return best


@needs_bitcode
def test_unswitching_splits_p_and_g_loops(monkeypatch):
    """By default, a loop of p (of g) is split on NVSHMEM's P2P test, so one version is plain
    stores (loads) back to back with no test or call between them, as libNVVM makes it for CuTe.
    (g's transport helper, defined in a section in 3.4's store, must lose `convergent` too.)"""
    from numba import float32

    monkeypatch.delenv(_linker.UNSWITCH_ENV, raising=False)

    def p_loop(dst, n, pe):
        for i in range(n):
            nv.p(dst, i & 1023, float32(i), pe)

    def g_loop(src, out, n, pe):
        acc = float32(0)
        for i in range(n):
            acc += nv.g(src, i & 1023, pe)
        out[0] = acc

    ptx, _ = cuda.compile_ptx(p_loop, (types.float32[::1], types.int64, types.int32), cc=(9, 0))
    assert _longest_run(ptx, r"st(?:\.global)?\.b32\s") >= 4, _entry(ptx)
    ptx, _ = cuda.compile_ptx(g_loop, (types.float32[::1], types.float32[::1], types.int64, types.int32),
                              cc=(9, 0))
    assert _longest_run(ptx, r"ld(?:\.global)?\.[bf]32\s") >= 4, _entry(ptx)


# A loop with a branch on the thread index (not uniform: LLVM's O3 does not unswitch it for a GPU)
DIVERGENT_LOOP = r"""
declare void @g(i32)
declare void @h(i32)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
define void @f(i32 %n) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %c = icmp eq i32 %t, 0
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %latch]
  br i1 %c, label %then, label %else
then:
  call void @g(i32 %i)
  br label %latch
else:
  call void @h(i32 %i)
  br label %latch
latch:
  %i1 = add i32 %i, 1
  %done = icmp eq i32 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""


def _unswitched_by_o3() -> bool:
    mod = llvm.parse_assembly(DIVERGENT_LOOP)
    tm = _linker._target_machine("sm_90", "+ptx85", 3)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3))
    pb.getModulePassManager().run(mod, pb)
    return ".us" in str(mod)  # the loop's unswitched copy


@needs_bitcode
def test_unswitching_option_is_on_only_for_nvshmem_kernels(monkeypatch):
    """LLVM's non-trivial unswitching is a process-wide option: on while an NVSHMEM kernel's
    second O3 runs, off after it, so that other code compiled with llvmlite is not changed."""
    monkeypatch.delenv(_linker.UNSWITCH_ENV, raising=False)
    with link.nontrivial_unswitching():
        assert _unswitched_by_o3()
    assert not _unswitched_by_o3()
    cuda.compile_ptx(k_all, SIG3, cc=(9, 0))
    assert not _unswitched_by_o3()


@needs_bitcode
def test_cubin_sm90_via_nvjitlink():
    ptx, _ = cuda.compile_ptx(k_all, SIG3, cc=(9, 0))
    cubin = nvjitlink_cubin(ptx, "sm_90")
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("lto", [False, True])
@pytest.mark.parametrize("readable", [True, False])
def test_nvshmem_library_links_ptx_through_the_base_link(monkeypatch, lto, readable):
    """What CUDACodeLibrary._link_all gives the linker, seen through _PtxLinker: PTX even where the
    linker is LTO (NVVM cannot read NVSHMEM's code), ptxas's object of PTX nvJitLink does not read;
    the library's linking files and cudadevrt as the base class adds them."""
    added = []

    class Linker:
        lineinfo, max_registers, arch = False, None, "sm_90"

        def __init__(self):
            self.lto = lto

        def add_ptx(self, ptx, name="<cudapy-ptx>"):
            added.append(("ptx", ptx))

        def add_cubin(self, cubin):
            added.append(("cubin", cubin))

        def add_file_guess_ext(self, path, ignore_nonlto=False):
            added.append(("file", path))

    monkeypatch.setattr(_linker, "nvjitlink_reads", lambda ptx: readable)
    monkeypatch.setattr(_linker, "ptxas_object", lambda ptx, arch, options, what: b"obj:" + ptx)
    lib = SimpleNamespace(get_asm_strs=lambda cc: ["PTX"], _linking_files=["a.o"], needs_cudadevrt=False)
    numba_codegen.CUDACodeLibrary._link_all(lib, _linker._PtxLinker(Linker(), "k"), (9, 0))
    assert added == [("ptx", b"PTX") if readable else ("cubin", b"obj:PTX"), ("file", "a.o")]


@needs_bitcode
@pytest.mark.slow  # builds the sm_80 and sm_100 stores when the cache is cold
@pytest.mark.parametrize("cc,arch", [((8, 0), "sm_80"), ((10, 0, "a"), "sm_100a")])
def test_other_archs(cc, arch):
    ptx, _ = cuda.compile_ptx(k_all, SIG3, cc=cc)
    assert f".target {arch}" in ptx
    assert API_CALL.findall(ptx) == []
    assert nvjitlink_cubin(ptx, arch)[:4] == b"\x7fELF"


def test_kernel_without_nvshmem_unchanged(monkeypatch):
    ours, _ = cuda.compile_ptx(k_plain, SIG1, cc=(9, 0))
    monkeypatch.setattr(
        numba_codegen.JITCUDACodegen, "_library_class", numba_codegen.CUDACodeLibrary
    )
    stock, _ = cuda.compile_ptx(k_plain, SIG1, cc=(9, 0))
    # only the per-compilation ABI tag in the mangled name differs
    assert ours != "" and re.sub(r"B\d+v\d+B", "B", ours) == re.sub(r"B\d+v\d+B", "B", stock)
    assert "NVVM" in ours


def test_init_prefetches_the_bitcode_of_its_device(monkeypatch):
    """nvshmem_dsl.init() with a DSL's device API imported asks for its device's bitcode (the
    part of init between choosing the device and NVSHMEM's own init; CPU: no device, faked);
    with none imported (a host-only program), nothing."""
    from nvshmem_dsl.host import _cuda, _init

    asked = []
    monkeypatch.setattr(store, "prefetch", lambda arch, bc_path=None: asked.append(arch))
    monkeypatch.setattr(_cuda, "compute_capability", lambda dev: {0: (9, 0), 1: (10, 0), 2: (8, 6)}[dev])
    _init._prefetch_device_code(1)
    assert asked == [100]
    for name in _init.DEVICE_APIS:
        monkeypatch.delitem(sys.modules, name, raising=False)
    _init._prefetch_device_code(0)
    assert asked == [100]
    monkeypatch.setitem(sys.modules, "nvshmem_dsl.cute", object())  # CuTe's or Triton's as Numba's
    _init._prefetch_device_code(2)
    assert asked == [100, 86]


def test_library_class_installed():
    assert numba_codegen.JITCUDACodegen._library_class is _linker.NvshmemCodeLibrary


@needs_bitcode
def test_wrong_declaration_type_is_reported():
    def k(a):
        a[0] = my_pe_wrong_type()

    with pytest.raises(_linker.NvshmemLinkError, match="nvshmem_my_pe"):
        cuda.compile_ptx(k, SIG1, cc=(9, 0))


@needs_bitcode
def test_unknown_function_is_reported():
    def k(a):
        a[0] = not_in_nvshmem()

    with pytest.raises(_linker.NvshmemLinkError, match="nvshmem_no_such_function"):
        cuda.compile_ptx(k, SIG1, cc=(9, 0))


@needs_bitcode
def test_ltoir_is_refused():
    def dev(a):
        int_p(a, 1, 2)

    with pytest.raises(_linker.NvshmemLinkError, match="LTO-IR"):
        cuda.compile(dev, SIG1, device=True, cc=(9, 0), output="ltoir")


def test_declare_device_function():
    mod = ir.Module()
    fnty = ir.FunctionType(I32, [])
    f1 = declare_device_function(mod, "nvshmem_my_pe", fnty)
    builder = ir.IRBuilder(ir.Function(mod, ir.FunctionType(ir.VoidType(), []), "k").append_basic_block())
    assert declare_device_function(builder, "nvshmem_my_pe", fnty) is f1
    assert f1.is_declaration
    with pytest.raises(TypeError):
        declare_device_function(mod, "nvshmem_my_pe", ir.FunctionType(I64, []))
    with pytest.raises(ValueError):
        declare_device_function(mod, "printf", fnty)


def test_nvshmem_functions_detected():
    text = 'declare i32 @"nvshmem_my_pe"()\ndeclare void @nvshmemx_barrier_all_block()\n' \
           'declare i32 @"vprintf"(i8*, i8*)\ndefine void @"k"() {\n  ret void\n}\n'
    assert _linker.nvshmem_functions([text]) == {"nvshmem_my_pe", "nvshmemx_barrier_all_block"}


# ---------------------------------------------------------------- dispatcher


class _FakeModule:
    """Stands in for numba-cuda's CudaPythonModule: runs the setup callbacks
    like the real one does, with a fake CUlibrary handle."""

    def __init__(self, image, setup, teardown):
        self.image, self.setup_functions, self.teardown_functions = image, setup, teardown
        self.object_code = SimpleNamespace(handle=0xC0FFEE)
        self.initialized = False

    def setup(self):
        for f in self.setup_functions:
            f(self.object_code)
        self.initialized = True

    def get_function(self, name):
        return SimpleNamespace(module=self, name=name)


@pytest.fixture
def fake_device(monkeypatch):
    """A 'current device' of compute capability 9.0 and a context that
    records module loads, so the real dispatcher compiles and binds."""
    import numba.cuda.dispatcher as dispatcher
    from numba.cuda.cudadrv import devices

    dev = SimpleNamespace(compute_capability=(9, 0), id=0)
    loaded = []

    def create_module_image(image, setup=None, teardown=None):
        loaded.append(_FakeModule(image, setup, teardown))
        return loaded[-1]

    ctx = SimpleNamespace(device=dev, create_module_image=create_module_image)
    monkeypatch.setattr(dispatcher, "get_current_device", lambda: dev)
    monkeypatch.setattr(devices, "get_context", lambda *a, **k: ctx)
    return loaded


@needs_bitcode
def test_dispatcher_links_and_calls_init_hook(fake_device):
    seen = []
    _linker.add_module_init_hook(seen.append)
    try:

        @cuda.jit(device=True)
        def put_pe(a, pe):
            int_p(a, pe, pe + 1)

        @cuda.jit
        def kern(a):
            put_pe(a, my_pe())

        kernel = kern.compile(SIG1)
        lib = kernel.library
        assert isinstance(lib, _linker.NvshmemCodeLibrary)
        assert lib.nvshmem_functions == {"nvshmem_my_pe", "nvshmem_int_p"}
        assert seen == [0xC0FFEE]
        (module,) = fake_device
        assert module.image.code[:4] == b"\x7fELF"  # cubin from nvJitLink
        assert _linker._module_teardown in module.teardown_functions
        ptx = kern.inspect_asm(SIG1)
        assert API_CALL.findall(ptx) == [] and "nvshmemi_device_state_d" in ptx
    finally:
        _linker.remove_module_init_hook(seen.append)


def test_dispatcher_plain_kernel_has_no_hook(fake_device):
    @cuda.jit
    def kern(a):
        a[0] = 1

    kernel = kern.compile(SIG1)
    assert not kernel.library.uses_nvshmem
    (module,) = fake_device
    assert _linker._module_setup not in (module.setup_functions or [])


def test_hook_registry():
    calls = []
    _linker.set_module_init_hook(calls.append)
    try:
        _linker._module_setup(SimpleNamespace(handle=7))
        assert calls == [7]
        _linker.set_module_init_hook(None)
        with pytest.warns(RuntimeWarning):
            monkey = _linker.hooks.warned
            _linker.hooks.warned = False
            try:
                _linker._module_setup(SimpleNamespace(handle=8))
            finally:
                _linker.hooks.warned = monkey
        assert calls == [7]
    finally:
        _linker.set_module_init_hook(None)


# ---------------------------------------------------------------- the cache


@needs_bitcode
def test_default_store_is_reused_and_private():
    store.api_names(90)  # make sure it exists (api_module may link a closure while it is built)
    path = store.store_path(arch=90)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    parses, loads = store.stats["bitcode_parses"], store.stats["store_loads"]
    store._stores.clear()
    store._subsets.clear()
    ptx, _ = cuda.compile_ptx(k_my_pe, SIG1, cc=(9, 0))
    assert "nvshmemi_device_state_d" in ptx
    assert store.stats["bitcode_parses"] == parses  # not parsed again
    assert store.stats["store_loads"] == loads + 1


@needs_bitcode
@pytest.mark.parametrize("names", [["nvshmemx_float_put_block", "nvshmem_quiet"],
                                   ["nvshmemx_putmem_signal_block", "nvshmem_signal_wait_until"]])
def test_closure_of_the_real_bitcode_is_the_stores(names):
    """A cold kernel's closure, from a parse of only the bodies it needs, is what the piece store
    gives (tests/test_bitcode.py: canonical form), with far fewer functions parsed."""
    from test_bitcode import canonical

    st = store._store(None, 90)
    bc = store._default_bitcode(90)
    closure = store._Store.from_part(pieces._closure(bc, names), "k")
    assert len(closure.functions) < len(st.functions) / 10
    assert canonical(closure.assemble(names).decode()) == canonical(st.assemble(names).decode())
    # the transport helpers they call come whole: the closure serves their objects too
    # (store._first_store reuses it), as the store would
    helpers = store.helper_closure(closure.helpers, 90) if closure.helpers else frozenset()
    assert closure.helpers and closure.helpers <= st.helpers and helpers == closure.helpers
    for h in sorted(closure.helpers):
        assert (canonical(closure.assemble([h], True, closure.helpers).decode())
                == canonical(st.assemble([h], True, st.helpers).decode())), h
    # without the helpers' bodies (a kernel calling them in their objects): what the store gives
    # with them declared, from fewer functions still
    lean = store._Store.from_part(pieces._closure(bc, names, helpers=False), "k")
    assert not lean.helpers and len(lean.functions) < len(closure.functions)
    assert (canonical(lean.assemble(names).decode())
            == canonical(st.assemble(names, False, st.helpers).decode()))


@needs_bitcode
def test_default_bitcode_choice():
    assert store._default_bitcode(90).name.endswith(("_sm_90.bc", "libnvshmem_device.bc"))
    assert store._default_bitcode((9, 0, "a")) == store._default_bitcode(90)
    per_arch = sorted(store._default_bitcode(90).parent.glob("libnvshmem_device_sm_*.bc"))
    if per_arch:
        assert store._default_bitcode(86).name == "libnvshmem_device_sm_80.bc"
        assert store._default_bitcode("sm_120").name == "libnvshmem_device_sm_100.bc"


def test_bitcode_comes_from_the_host_librarys_installation(tmp_path, monkeypatch):
    """NVSHMEM_HOME picks the device bitcode as it picks the host library: never the bitcode of
    one NVSHMEM with the host library of another (their device state layouts differ)."""
    from nvshmem_dsl import _libs

    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libnvshmem_host.so.3", "libnvshmem_device.bc"):
        (lib / name).write_bytes(b"")
    monkeypatch.setenv("NVSHMEM_HOME", str(tmp_path))
    _libs.clear_cache()
    try:
        assert _libs.installation().root == tmp_path
        assert store._default_bitcode(90) == lib / "libnvshmem_device.bc" == _libs.bitcode_path(90)
    finally:
        monkeypatch.delenv("NVSHMEM_HOME")
        _libs.clear_cache()


TINY_IR = r"""
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@nvshmemi_device_state_d = addrspace(4) externally_initialized constant i32 0, align 4
@.str = private unnamed_addr constant [3 x i8] c"hi\00", align 1
@table = internal constant ptr @.str, align 8

define internal i32 @helper(i32 %x) #0 {
  %s = load i32, ptr addrspace(4) @nvshmemi_device_state_d, align 4, !tbaa !0
  %r = add i32 %s, %x
  ret i32 %r
}

define i32 @nvshmem_foo(i32 %x) #1 {
  %r = call i32 @helper(i32 %x)
  ret i32 %r
}

define ptr @nvshmem_bar() #1 {
  %p = load ptr, ptr @table, align 8
  ret ptr %p
}

attributes #0 = { noinline nounwind "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
attributes #1 = { alwaysinline nounwind "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }

!0 = !{!1, !1, i64 0}
!1 = !{!"int", !2, i64 0}
!2 = !{!"omnipotent char", !3, i64 0}
!3 = !{!"Simple C++ TBAA"}
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A tiny NVSHMEM-like bitcode and an empty private cache."""
    bc = tmp_path / "libnvshmem_device_sm_90.bc"
    bc.write_bytes(llvm.parse_assembly(TINY_IR).as_bitcode())
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(store, "_stores", {})
    monkeypatch.setattr(store, "_subsets", type(store._subsets)())
    return bc


def _fresh_process():
    store._stores.clear()
    store._subsets.clear()


def test_store_build_and_closure(tiny, capfd):
    parses = store.stats["bitcode_parses"]
    mod = store.api_module(["nvshmem_foo"], 90, bc_path=tiny)
    assert "preparing NVSHMEM bitcode for sm_90 (once)" in capfd.readouterr().err
    assert store.stats["bitcode_parses"] == parses + 1
    names = {f.name for f in mod.functions}
    assert {"nvshmem_foo", "helper"} <= names and "nvshmem_bar" not in names
    assert {g.name for g in mod.global_variables} == {"nvshmemi_device_state_d"}
    text = str(mod)
    assert "target-features" not in text and "target-cpu" not in text
    assert "omnipotent char" in text  # metadata closure
    assert store.api_names(90, bc_path=tiny) == {"nvshmem_foo", "nvshmem_bar"}
    bar = store.api_module(["nvshmem_bar"], 90, bc_path=tiny)
    assert {"table", ".str"} <= {g.name for g in bar.global_variables}  # global -> global

    path = store.store_path(tiny)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not list(path.parent.glob("*.tmp"))

    _fresh_process()
    store.api_module(["nvshmem_foo"], 90, bc_path=tiny)
    assert store.stats["bitcode_parses"] == parses + 1  # reused from disk
    with pytest.raises(KeyError):
        store.api_module(["nvshmem_nope"], 90, bc_path=tiny)


def test_pruned_bitcode(tiny):
    data = store.pruned_bitcode(tiny, 90)
    mod = llvm.parse_bitcode(data)
    assert {"nvshmem_foo", "nvshmem_bar", "helper"} <= {f.name for f in mod.functions}


@pytest.mark.parametrize("entry", ["api_module", "body_sizes"])
@pytest.mark.parametrize("where", ["header", "index", "piece", "tail", "truncate"])
def test_corrupt_store_is_rebuilt(tiny, where, entry):
    """A damaged store is detected and rebuilt by either way in: api_module (the kernels' code)
    and body_sizes (the outlining criterion, asked first)."""
    store.api_module(["nvshmem_foo"], 90, bc_path=tiny)
    path = store.store_path(tiny)
    data = bytearray(path.read_bytes())
    if where == "header":
        data[0] ^= 0xFF
    elif where == "index":
        data[len(store_file._MAGIC) + store_file._HEAD.size + 5] ^= 0x01
    elif where == "piece":  # nvshmem_foo's body, read only when needed
        st = store_file._Store(path, store._cache_key(tiny))
        start = st._base + st.functions["nvshmem_foo"][1]
        st._fh.close()
        for i in range(start + 2, start + 12):
            data[i] ^= 0x5A
    elif where == "tail":  # the metadata, read when the store is opened
        for i in range(len(data) - 40, len(data)):
            data[i] ^= 0x5A
    else:
        del data[-10:]
    path.write_bytes(bytes(data))

    parses = store.stats["bitcode_parses"]
    _fresh_process()
    if entry == "body_sizes":
        sizes = store.body_sizes(["nvshmem_foo", "nvshmem_bar"], 90, bc_path=tiny)
        assert set(sizes) == {"nvshmem_foo", "nvshmem_bar"} and all(n > 0 for n in sizes.values())
    else:
        mod = store.api_module(["nvshmem_foo", "nvshmem_bar"], 90, bc_path=tiny)
        assert "nvshmem_foo" in {f.name for f in mod.functions}
    assert store.stats["bitcode_parses"] == parses + 1  # detected, rebuilt
    store._Store(path, store._cache_key(tiny))  # valid again


def test_concurrent_builders_share_one_build(tiny):
    code = (
        "import sys; from nvshmem_dsl.linker import store; "
        "store.api_module(['nvshmem_foo'], 90, bc_path=sys.argv[1]); "
        "print(store.stats['bitcode_parses'])"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tiny)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert [rc for _, _, rc in results] == [0, 0, 0], results
    assert sum(int(out) for out, _, _ in results) == 1  # one built, two waited
    store._Store(store.store_path(tiny), store._cache_key(tiny))


def test_changed_bitcode_gets_new_store(tiny):
    first = store.store_path(tiny)
    store.api_module(["nvshmem_foo"], 90, bc_path=tiny)
    st = os.stat(tiny)
    os.utime(tiny, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert store.store_path(tiny) != first


def test_cache_dir_is_made_private(tmp_path, monkeypatch):
    d = tmp_path / "c"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(d))
    assert store.cache_dir() == d
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_nvvm_bitcode_strips_explicit_sections(tmp_path, monkeypatch):
    """NVSHMEM 3.4 marks some functions `section ".text.compute"`, which libNVVM (CuTe) rejects."""
    import llvmlite.binding as llvm

    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "lib.bc"
    src.write_bytes(llvm.parse_assembly(
        'target triple = "nvptx64-nvidia-cuda"\n'
        'define void @nvshmem_quiet() section ".text.compute" { ret void }\n').as_bitcode())
    out = nvvm.nvvm_bitcode(src)
    assert out != src and "section" not in str(llvm.parse_bitcode(out.read_bytes()))
    assert nvvm.nvvm_bitcode(src) == out  # cached
    plain = tmp_path / "plain.bc"
    plain.write_bytes(llvm.parse_assembly('define void @nvshmem_fence() { ret void }\n').as_bitcode())
    assert nvvm.nvvm_bitcode(plain) == plain and nvvm.nvvm_bitcode(plain) == plain
