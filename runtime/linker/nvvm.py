"""A copy of NVSHMEM's device bitcode that libNVVM accepts (the CuTe DSL links bitcode through
libNVVM)."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

from . import rewrites
from .store_file import _cache_key, _file_lock, cache_dir

_SECTION = re.compile(r' section "\.text\.[^"]*"')
_DATA_LAYOUT = re.compile(r'^target datalayout = "[^"]*"$', re.M)
#: The data layout libNVVM gives the modules it links the library into (64-bit pointers, 32-bit
#: shared ones).  The copy says the same, instead of LLVM 22's NVPTX layout, so that every CuTe
#: compile does not print "Linking two modules of different data layouts"; libNVVM links the
#: library under this layout either way.
NVVM_DATA_LAYOUT = ("e-p:64:64:64-p3:32:32:32-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-"
                    "f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")


def nvvm_bitcode(bc_path) -> Path:
    """``bc_path`` itself, or a cached copy of it that libNVVM accepts, with NVSHMEM's copy
    loops, group-RMA entries and lane-id reads rewritten (:mod:`nvshmem_dsl.linker.rewrites`,
    as for Numba kernels).

    NVSHMEM 3.4's single ``libnvshmem_device.bc`` puts some functions in an
    explicit ``.text.compute`` section, which libNVVM rejects ("Explicit section
    marker ... is not allowed"); 3.8's per-arch files have none.  The first call
    per file and rewrite mode parses it once (seconds) and, if anything changes,
    writes the copy to the cache directory (atomically); later calls only stat.
    """
    import llvmlite.binding as llvm


    bc_path = Path(bc_path)
    key = _cache_key(bc_path)
    how = rewrites.mode()
    copy = cache_dir() / f"{bc_path.stem}-{key[:24]}-{how}-r{rewrites.REVISION}.nvvm.bc"
    same = copy.with_suffix(".same")
    if copy.exists():
        return copy
    if same.exists():
        return bc_path
    with _file_lock(copy.with_suffix(".lock")):
        if copy.exists() or same.exists():
            return copy if copy.exists() else bc_path
        print(f"nvshmem-dsl: preparing {bc_path.name} for NVVM (once) ...", file=sys.stderr, flush=True)
        text = str(llvm.parse_bitcode(bc_path.read_bytes(), context=llvm.create_context()))
        text, sections = _SECTION.subn("", text)
        text, changes = rewrites.for_inlining(text, how)
        text = _DATA_LAYOUT.sub(f'target datalayout = "{NVVM_DATA_LAYOUT}"', text, count=1)
        if sections == 0 and changes == 0:
            same.touch(mode=0o600)
            return bc_path
        data = llvm.parse_assembly(text, context=llvm.create_context()).as_bitcode()
        fd, tmp = tempfile.mkstemp(dir=copy.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, copy)
        return copy
