"""Conformance on CPU: the spec against the installed NVSHMEM bitcode and host library.

Every externally defined function of libnvshmem_device_sm_90.bc must be produced by the
spec with the same LLVM function type (and half/bfloat16 byval parameters where the
bitcode has them); every host declaration must exist in libnvshmem_host.so.3, whose
every exported function is either in the spec or listed in spec/exclusions.yaml.
"""
import shutil
import subprocess
from pathlib import Path

import pytest

llvm = pytest.importorskip("llvmlite.binding")
cffi = pytest.importorskip("cffi")

from nvshmem_dsl import _libs  # noqa: E402

GENERATED = Path(__file__).resolve().parent.parent / "generated"


@pytest.fixture(scope="module")
def bitcode_functions():
    path = _libs.bitcode_path(90)
    # a context of its own: in the global one, struct names other modules created first
    # (%struct.__half from a kernel compiled earlier in this process) would get suffixes
    module = llvm.parse_bitcode(path.read_bytes(), context=llvm.create_context())
    out = {}
    for fn in module.functions:
        if fn.is_declaration or fn.linkage != llvm.Linkage.external:
            continue
        byval = []
        for arg in fn.arguments:
            attrs = [a.decode() if isinstance(a, bytes) else str(a) for a in arg.attributes]
            byval.append(next((a[len("byval("):-1] for a in attrs if a.startswith("byval(")), ""))
        out[fn.name] = (str(fn.global_value_type), byval)
    return out


def test_every_bitcode_function_is_in_the_spec(spec, bitcode_functions):
    generated = {op.symbol for op in spec.ops["device"]}
    excluded = {e.symbol: e.reason for e in spec.exclusions["device"]}
    for sym, reason in sorted(excluded.items()):
        print(f"excluded {sym}: {reason}")
    missing = sorted(set(bitcode_functions) - generated - set(excluded))
    extra = sorted(generated - set(bitcode_functions))
    print(f"bitcode defines {len(bitcode_functions)} external functions; spec produces "
          f"{len(generated)} of them, {len(excluded)} excluded")
    assert not missing, f"bitcode functions the spec lacks: {missing[:20]}"
    assert not extra, f"spec functions the bitcode lacks: {extra[:20]}"


def test_every_device_signature_equals_the_bitcode_type(spec, bitcode_functions):
    wrong = []
    for op in spec.ops["device"]:
        llvm_type, byval = bitcode_functions[op.symbol]
        ours = [p.byval for p in op.params]
        if op.llvm_type != llvm_type or ours != byval:
            wrong.append((op.symbol, op.llvm_type, llvm_type, ours, byval))
    assert not wrong, wrong[:10]


@pytest.fixture(scope="module")
def host():
    ffi = cffi.FFI()
    ffi.cdef((GENERATED / "host_cdef.h").read_text())  # the whole cdef must parse
    return ffi, ffi.dlopen(str(_libs.host_library_path()))


def test_every_host_declaration_is_exported(spec, host):
    ffi, lib = host
    missing = []
    for op in spec.ops["host"]:
        try:
            getattr(lib, op.symbol)
        except AttributeError:
            missing.append(op.symbol)
    assert not missing, missing[:20]


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_every_host_export_is_in_the_spec_or_excluded(spec):
    out = subprocess.run(["nm", "-D", "--defined-only", str(_libs.host_library_path())],
                         capture_output=True, text=True, check=True).stdout
    exported = {line.split()[2].split("@")[0] for line in out.splitlines()
                if len(line.split()) == 3 and line.split()[1] == "T"}
    covered = {op.symbol for op in spec.ops["host"]}
    excluded = {e.symbol for e in spec.exclusions["host"]}
    for e in spec.exclusions["host"]:
        print(f"excluded {e.symbol}: {e.reason}")
    print(f"host library exports {len(exported)} functions; spec covers {len(covered)}, "
          f"excludes {len(excluded)}")
    assert exported - covered - excluded == set()
    assert excluded <= exported, "an exclusion names a symbol the library does not export"


def test_struct_sizes_match_the_header_asserts(spec, host):
    ffi, _ = host
    for s in spec.structs:
        assert ffi.sizeof(s.name) == s.size, s.name
    assert ffi.offsetof("nvshmemx_init_attr_t", "args") == 16


def test_constants_match_the_headers(spec):
    """Each constant's C name is defined with the same value in the installed headers."""
    import re
    include = _libs.installation().include_dir
    if include is None:
        pytest.skip("no NVSHMEM headers installed")
    text = "\n".join(p.read_text(errors="replace") for p in Path(include).rglob("*.h"))
    checked = 0
    for group in spec.constants.values():
        for v in group.values:
            m = (re.search(rf"\b{v.c}\s*=\s*([^,}}\n]+)", text)
                 or re.search(rf"#define\s+{v.c}\s+([^\n]+)", text))
            expr = m.group(1).strip().strip("()") if m else ""
            num = re.fullmatch(r"(-?\d+)(?:\s*<<\s*(\d+))?", expr)
            if num:
                value = int(num.group(1)) << int(num.group(2) or 0)
                assert value == v.value, (v.c, expr)
                checked += 1
    assert checked >= 10


def test_host_return_types_match_the_header_declarations(spec):
    """Where a host function is declared by name in the headers, its return type is ours."""
    import re
    include = _libs.installation().include_dir
    if include is None:
        pytest.skip("no NVSHMEM headers installed")
    text = "\n".join(p.read_text(errors="replace") for p in Path(include).rglob("*.h"))
    macro_words = re.compile(r"\b(NVSHMEMI?_\w+|__device__|__host__|static|inline)\b")
    compared, wrong = 0, []
    for op in spec.ops["host"]:
        m = re.search(rf"(?:^|[\n;}}])\s*([A-Za-z_][\w \*]*?)\s*\b{op.symbol}\s*\(", text)
        if not m:
            continue  # declared through a macro over TYPENAME: covered by the cdef checks
        header = macro_words.sub("", m.group(1)).replace(" ", "").replace("const", "")
        compared += 1
        if header != op.ret_ctype.replace(" ", "").replace("const", ""):
            wrong.append((op.symbol, header, op.ret_ctype))
    assert compared > 50
    assert not wrong, wrong
