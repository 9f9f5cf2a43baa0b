"""Kernels that call every generated Triton function, for tests/test_triton_api.py (CPU) and
the GPU suite: the calls are generated from the dispatch tables and the op table.

:func:`forms` lists every (DSL function, dispatch key); :func:`call_text` writes one call of a
form as kernel source (through the DSL function where a Triton element type selects the form,
else through ``nv.c``); :func:`kernel_source` a ``@triton.jit`` kernel calling a list of forms;
:func:`load_kernels` writes such kernels to a file and imports it (Triton reads kernel source
from files).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from nvshmem_dsl import _optable
from nvshmem_dsl import _dispatch

DISPATCH = _dispatch.table("triton")
OPS = _optable.device_ops()

#: One kernel parameter per element type: name -> Triton signature type.
POINTERS = {
    "fp16": "*fp16", "bf16": "*bf16", "fp32": "*fp32", "fp64": "*fp64",
    "int8": "*i8", "int16": "*i16", "int32": "*i32", "int64": "*i64",
    "uint8": "*u8", "uint16": "*u16", "uint32": "*u32", "uint64": "*u64",
    "fp8e5": "*fp8e5",
}
SIGNATURE = {**{f"p_{k}": v for k, v in POINTERS.items()}, "pe": "i32", "n": "i64", "sink": "*i64"}
PARAMS = ", ".join(SIGNATURE)
#: Element types without a typed form of their width reach the sized forms (fp8 -> bits8).
SIZED_TYPES = {8: "fp8e5"}
#: Pointee C types of dtype-free pointer parameters -> kernel parameter.
POINTEE = {
    "uint64_t": "uint64", "size_t": "uint64", "int": "int32", "char": "int8", "void": "int8",
    "nvshmemx_qp_handle_t": "int32", "nvshmemx_region_handle_t": "uint64",
    "nvshmemx_region_attrs_t": "int8", "double2": "fp64",
}
#: Integer widths of the untyped sized forms, for the C-named calls.
BY_BITS = {8: "int8", 16: "int16", 32: "int32", 64: "int64", 128: "int64"}
SCALARS = {
    "count": "n", "nbytes": "n", "dst_stride": "1", "src_stride": "1", "stride": "1",
    "pe": "pe", "root": "0", "team": "nv.TEAM_WORLD", "value": "1", "compare": "0",
    "cmp_value": "1", "signal_value": "1", "signal_op": "nv.SIGNAL_SET", "cmp": "nv.CMP_EQ",
    "qp": "0", "exit_status": "0", "smem_amount": "nv.SMEM_MINIMUM", "hints": "0", "handle": "0",
    "flags": "0",
}


def forms(apis=None) -> list[tuple[str, object]]:
    """(DSL function, dispatch key) for every entry of the given (default: all) functions."""
    return [(api, key) for api in (apis or DISPATCH) for key in DISPATCH[api]]


def symbol(api: str, key) -> str:
    return DISPATCH[api][key]


def _pointee(ctype: str) -> str:
    return " ".join(ctype.replace("const", " ").replace("*", " ").split())


def _route(api: str, key) -> tuple[bool, str | None]:
    """(through the DSL function?, element type of its data pointers)."""
    if key is None:
        return True, None
    if isinstance(key, str) and key.startswith("bits"):
        bits = int(key[4:])
        name = SIZED_TYPES.get(bits)
        if name is not None and name not in DISPATCH[api]:
            return True, name
        return False, BY_BITS[bits]
    if key in POINTERS:
        return True, key
    return False, POINTEE.get(key, "int8")  # double2: no Triton type, by C name


def call_text(api: str, key, k: int = 0) -> tuple[str, bool]:
    """Source of one call of the form (offset ``k`` keeps calls apart), and whether it returns."""
    sym = symbol(api, key)
    op = OPS[sym]
    dsl, elem = _route(api, key)
    args = []
    for p in op["params"]:
        if p["llvm"] == "ptr" and not p.get("byval"):
            if p["role"] == "status":
                args.append("None")
                continue
            name = elem if p.get("elem") and elem else POINTEE.get(_pointee(p["ctype"]), "int8")
            args.append(f"p_{name} + {k}")
        else:
            args.append(SCALARS.get(p["role"], "0"))
    fn = f"nv.{api}" if dsl else f"nv.c.{sym}"
    return f"{fn}({', '.join(args)})", op["ret"]["llvm"] != "void"


def kernel_source(name: str, items) -> str:
    """A ``@triton.jit`` kernel ``name`` calling each (api, key) of ``items``; results are summed
    into ``sink`` so that none is dropped."""
    lines = ["@triton.jit", f"def {name}({PARAMS}):", "    acc = n * 0"]
    for k, (api, key) in enumerate(items):
        text, returns = call_text(api, key, k)
        if returns:
            op = OPS[symbol(api, key)]
            conv = ".to(tl.int64)"
            lines.append(f"    acc += {text}{conv}")
        else:
            lines.append(f"    {text}")
    lines.append("    tl.store(sink, acc)")
    return "\n".join(lines) + "\n"


def load_kernels(path: Path, kernels: dict, module_name: str = "nvshmem_dsl_triton_test_kernels"):
    """Write ``{name: [(api, key), ...]}`` as kernels to ``path`` and import them."""
    src = ["import triton", "import triton.language as tl", "import nvshmem_dsl.triton as nv", ""]
    for name, items in kernels.items():
        src.append(kernel_source(name, items))
    path.write_text("\n".join(src))
    spec = importlib.util.spec_from_file_location(module_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod
