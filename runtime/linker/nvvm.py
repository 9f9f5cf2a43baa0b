"""Copies of NVSHMEM's device bitcode that libNVVM accepts (the CuTe DSL links bitcode through
libNVVM): the whole library (:func:`nvvm_bitcode`) and the library without the functions hybrid
linking calls out of line (:func:`inline_bitcode`)."""

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


#: Bump when :func:`inline_bitcode` makes its file differently (part of the file's name).
INLINE_REVISION = 1

# `@nvshmemi_device_state_d = ... addrspace(4) externally_initialized global ...`: the global's
# address space (none: generic)
_GLOBAL_DEF = r"^@{name} = [\w ]*?(?:addrspace\((\d+)\) )?[\w ]*?(?:global|constant) "


def inline_bitcode(bc_path, arch) -> Path:
    """The bitcode the CuTe DSL links through libNVVM for kernels of SM ``arch`` (an int, e.g.
    90): NVSHMEM's, prepared as by :func:`nvvm_bitcode`, *without* the functions that hybrid
    linking calls out of line (:func:`nvshmem_dsl.linker.outline.split` of all of them, for
    :func:`~nvshmem_dsl.linker.outline.mode`), which the kernel declares and its link adds from
    their objects (:func:`~nvshmem_dsl.linker.outline.objects`).  libNVVM would otherwise
    resolve the declarations against the bitcode's definitions and inline them.

    The device-state globals (:data:`nvshmem_dsl.linker.store.EXPORTED_GLOBALS`) are kept in
    ``@llvm.compiler.used`` as in NVSHMEM's own file, so that every kernel that links it defines
    them (once: the objects only declare them), also one that calls only outlined functions.

    In mode ``none``, or without ptxas to build the objects (then nothing is outlined), it is
    :func:`nvvm_bitcode`'s file: everything is inlined, as before hybrid linking.  Otherwise the
    file is made once per (bitcode, rewrites, outlining criterion, mode) in the cache directory
    (a few seconds: it needs the piece store) and later calls only stat it.
    """
    import hashlib
    import json

    import llvmlite.binding as llvm

    from . import outline, store

    bc_path = Path(bc_path)
    how = outline.mode()
    if how == "none" or outline.ptxas() is None:
        return nvvm_bitcode(bc_path)
    ident = [_cache_key(bc_path), rewrites.mode(), rewrites.REVISION, outline.VERSION,
             outline.MIN_INSTRUCTIONS, how, INLINE_REVISION]
    digest = hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:20]
    path = cache_dir() / f"{bc_path.stem}-inline-{how}-{digest}.nvvm.bc"
    if path.exists():
        return path
    with _file_lock(path.with_suffix(".lock")):
        if path.exists():
            return path
        print(f"nvshmem-dsl: preparing {bc_path.name} without its outlined functions for NVVM "
              f"(once) ...", file=sys.stderr, flush=True)
        inline, _ = outline.split(store.api_names(arch, bc_path), arch, bc_path)
        text = str(store.api_module(inline, arch, bc_path))
        text = _SECTION.sub("", text)
        if "@llvm.compiler.used" not in text:
            used = []
            for name in store.EXPORTED_GLOBALS:
                m = re.search(_GLOBAL_DEF.format(name=re.escape(name)), text, re.M)
                if m is None:
                    continue  # not in this NVSHMEM
                used.append(f"ptr addrspacecast (ptr addrspace({m.group(1)}) @{name} to ptr)"
                            if m.group(1) not in (None, "0") else f"ptr @{name}")
            if used:
                text += (f"\n@llvm.compiler.used = appending global [{len(used)} x ptr] "
                         f"[{', '.join(used)}], section \"llvm.metadata\"\n")
        mod = llvm.parse_assembly(text, context=llvm.create_context())
        mod.data_layout = NVVM_DATA_LAYOUT
        data = mod.as_bitcode()
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return path
