"""NVSHMEM's device bitcode in forms libNVVM accepts (the CuTe DSL links bitcode through
libNVVM): the whole library (:func:`nvvm_bitcode`, for kernels that inline everything) and, with
hybrid linking, one file per set of functions kernels inline (:func:`kernel_bitcode`).

CuTe's front-end (:mod:`nvshmem_dsl.cute._link`, :mod:`nvshmem_dsl.cute._extern`) calls
:func:`nvvm_bitcode`, :func:`kernel_bitcode_placeholder` (what a traced call names) and
:func:`kernel_bitcode_for` (the kernel's bitcode at its compile); its objects and link are
:mod:`.pipeline`'s."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

from . import rewrites
from .store_file import (KERNELS_FOLDER, _arch_number, _cache_key, _file_lock, cache_dir, mark_used,
                         remove_temporaries, whole_bitcode, write_atomically)

__all__ = ["kernel_bitcode_for", "kernel_bitcode_placeholder", "nvvm_bitcode"]

_SECTION = re.compile(r' section "\.text\.[^"]*"')
_DATA_LAYOUT = re.compile(r'^target datalayout = "[^"]*"$', re.M)
#: The data layout libNVVM gives the modules it links the library into (64-bit pointers, 32-bit
#: shared ones).  The copy says the same, instead of LLVM 22's NVPTX layout, so that every CuTe
#: compile does not print "Linking two modules of different data layouts"; libNVVM links the
#: library under this layout either way.
NVVM_DATA_LAYOUT = ("e-p:64:64:64-p3:32:32:32-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-"
                    "f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")


#: Bump when :func:`nvvm_bitcode` makes its copy differently (part of its name); 2: thread-scope
#: helpers not ``convergent`` (:func:`nvshmem_dsl.linker.rewrites.thread_helpers_not_convergent`).
COPY_REVISION = 2


def nvvm_bitcode(bc_path) -> Path:
    """``bc_path`` itself, or a cached copy of it that libNVVM accepts, with NVSHMEM's copy
    loops, group-RMA entries and lane-id reads rewritten (:mod:`nvshmem_dsl.linker.rewrites`,
    as for Numba kernels), and its thread-scope transport helpers not ``convergent``, so that
    libNVVM unswitches a loop of ``p``/``g``/atomics on NVSHMEM's P2P test
    (:func:`nvshmem_dsl.linker.rewrites.thread_helpers_not_convergent`, as for Numba kernels).

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
    copy = cache_dir() / f"{bc_path.stem}-{key[:24]}-{how}-r{rewrites.REVISION}-c{COPY_REVISION}.nvvm.bc"
    same = copy.with_suffix(".same")
    if whole_bitcode(copy):  # (one cut short by a crash of the machine is made again)
        mark_used(copy)
        return copy
    if same.exists():
        mark_used(same)
        return bc_path
    with _file_lock(copy.with_suffix(".lock")):
        if whole_bitcode(copy) or same.exists():
            return copy if copy.exists() else bc_path
        remove_temporaries(copy)  # of a process that died making it
        print(f"nvshmem-dsl: preparing {bc_path.name} for NVVM (once) ...", file=sys.stderr, flush=True)
        text = str(llvm.parse_bitcode(bc_path.read_bytes(), context=llvm.create_context()))
        text, sections = _SECTION.subn("", text)
        text, changes = rewrites.for_inlining(text, how)
        text, helpers = rewrites.thread_helpers_not_convergent(text)
        changes += helpers
        text = _DATA_LAYOUT.sub(f'target datalayout = "{NVVM_DATA_LAYOUT}"', text, count=1)
        if sections == 0 and changes == 0:
            same.touch(mode=0o600)
            return bc_path
        write_atomically(copy, llvm.parse_assembly(text, context=llvm.create_context()).as_bitcode())
        return copy


def _digest(ident: list) -> str:
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:24]


#: Bump when :func:`kernel_bitcode` makes its files differently (part of their names); 2: helpers
#: declared; 3: thread-scope helpers not ``convergent``.
KERNEL_REVISION = 3

# `@nvshmemi_device_state_d = ... addrspace(4) externally_initialized global ...`: the global's
# address space (none: generic)
_GLOBAL_DEF = r"^@{name} = [\w ]*?(?:addrspace\((\d+)\) )?[\w ]*?(?:global|constant) "


def _helpers_out(helpers_out) -> bool:
    if helpers_out is None:
        from . import plan

        return plan.helpers_out()
    return bool(helpers_out)


def kernel_bitcode_placeholder(bc_path, helpers_out=None) -> str:
    """The path CuTe kernels traced with hybrid linking name as their NVSHMEM bitcode (in their
    ``link-libraries``) until their compile, when :func:`nvshmem_dsl.cute._link` puts the path of
    their :func:`kernel_bitcode` in its place.  No file: the name says what the kernel's bitcode
    is made of (NVSHMEM's bitcode, by its cache key, the rewrites of its code, and whether its
    helpers are objects: ``helpers_out``, default :func:`nvshmem_dsl.linker.plan.helpers_out`),
    so that CuTe's own caches, which key a kernel by its module and pipeline, tell kernels of two
    NVSHMEM builds or linking modes apart."""
    bc_path = Path(bc_path)
    return str(cache_dir() / f"{bc_path.stem}-{_digest(_kernel_ident(bc_path, _helpers_out(helpers_out)))}"
                             f"-kernel.nvvm.bc")


def _kernel_ident(bc_path: Path, helpers_out: bool) -> list:
    """What a :func:`kernel_bitcode` is made of, but the functions."""
    return [_cache_key(bc_path), rewrites.mode(), rewrites.REVISION, KERNEL_REVISION, helpers_out]


def kernel_bitcode(names, arch, bc_path, helpers_out=None) -> Path:
    """The bitcode libNVVM links into a CuTe kernel that calls the NVSHMEM functions ``names``
    inlined (for SM ``arch``, an int): those functions and everything they call, from the piece
    store (:func:`nvshmem_dsl.linker.store.api_text`: with no store cached yet, from a closure of
    them extracted while the store is built, well under a second), with the rewrites of inlined
    code, in a form libNVVM accepts (no sections, libNVVM's data layout).  The functions the
    kernel calls out of line are not in it: the kernel declares them and its link adds their
    objects (:func:`nvshmem_dsl.linker.outline.objects`).  With ``helpers_out`` (default
    :func:`nvshmem_dsl.linker.plan.helpers_out`) NVSHMEM's out-of-line helpers (its
    ``noinline`` transport functions) are declarations too, linked from their objects, as for
    Numba and Triton kernels; :func:`kernel_bitcode_calls` says which.  The device-state globals
    (:data:`nvshmem_dsl.linker.store.EXPORTED_GLOBALS`) are defined and kept in
    ``@llvm.compiler.used`` as in NVSHMEM's own file, so that every kernel defines them (once:
    the objects only declare them), also one that calls only outlined functions.

    Made once per (bitcode, rewrites, ``helpers_out``, ``names``) in the cache directory (13-75 ms
    with the store cached, bench/results/cute-kernel-bitcode-cpu-2026-11-24.txt); later calls only
    stat it."""
    import llvmlite.binding as llvm

    from . import store

    bc_path = Path(bc_path)
    names = sorted(set(names))
    helpers_out = _helpers_out(helpers_out)
    path = cache_dir() / KERNELS_FOLDER / f"{bc_path.stem}-{_digest(_kernel_ident(bc_path, helpers_out) + [names])}.nvvm.bc"
    if whole_bitcode(path) and _calls_path(path).exists():  # (its calls are written first)
        mark_used(path)
        return path
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with _file_lock(path.with_suffix(".lock")):
        if whole_bitcode(path) and _calls_path(path).exists():
            return path
        for made in (path, _calls_path(path)):
            remove_temporaries(made)  # of a process that died making them
        # unswitch: NVSHMEM's thread-scope helpers not convergent, so that libNVVM unswitches a loop of
        # p/g/atomics on NVSHMEM's P2P test (NVSHMEM 3.8: p 26.7 ns without, 0.51x of C++'s)
        text = _SECTION.sub("", store.api_text(names, arch, bc_path, unswitch=True, helpers_out=helpers_out))
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
        called = {"helpers": [], "predicted": [], "declares": {}}
        if helpers_out:
            from . import calls

            called = {"helpers": sorted(f.name for f in mod.functions if f.is_declaration and calls.is_helper(f.name)),
                      "predicted": sorted(calls.predicted_helper_calls(text)),
                      "declares": calls.helper_declares(text)}
        write_atomically(_calls_path(path), json.dumps(called).encode())  # before the bitcode: read once it is there
        write_atomically(path, mod.as_bitcode())
        return path


def kernel_bitcode_for(names, arch, bc_path) -> tuple[Path, frozenset, frozenset]:
    """``(path, helpers, predicted)``: the :func:`kernel_bitcode` of a CuTe kernel for ``arch``
    (``sm_90a``) that inlines the NVSHMEM functions ``names`` of ``bc_path``, and its
    :func:`kernel_bitcode_calls`; NVIDIA's compiled helpers asked about the helpers it declares
    meanwhile (:func:`nvshmem_dsl.linker.calls.ask_archive_ahead_declares`, for the kernel's
    default PTX ISA), so that the kernel's :func:`nvshmem_dsl.linker.pipeline.prepare_calls`
    finds the answers, or waits for that probe, instead of probing after libNVVM's compile."""
    from . import calls, link

    sm = _arch_number(arch)
    path = kernel_bitcode(names, sm, bc_path)
    calls.ask_archive_ahead_declares(kernel_bitcode_declares(path), arch, link.default_features(sm), bc_path)
    return (path, *kernel_bitcode_calls(path))


def _calls_path(path: Path) -> Path:
    return path.parent / (path.name[: -len(".nvvm.bc")] + ".calls")


def kernel_bitcode_calls(path) -> tuple[frozenset, frozenset]:
    """``(helpers, predicted)`` of a :func:`kernel_bitcode`: NVSHMEM's out-of-line helpers it
    declares (their objects go into the kernel's link), and those helpers as the kernel's PTX is
    predicted to call them, specialised on constant modes
    (:func:`nvshmem_dsl.linker.calls.predicted_helper_calls`: what to start building early)."""
    calls = json.loads(_calls_path(Path(path)).read_text())
    return frozenset(calls["helpers"]), frozenset(calls["predicted"])


def kernel_bitcode_declares(path) -> dict:
    """``{helper: its IR declare line}`` of the NVSHMEM helpers a :func:`kernel_bitcode` declares
    (:func:`nvshmem_dsl.linker.calls.helper_declares`), from which NVIDIA's compiled helpers are
    asked about them while libNVVM compiles the kernel; none from a file made before they were kept."""
    return json.loads(_calls_path(Path(path)).read_text()).get("declares", {})
