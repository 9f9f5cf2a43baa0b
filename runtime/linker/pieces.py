"""NVSHMEM's device bitcode as pieces: the text-level work behind the piece store.

Parses (a part of) ``libnvshmem_device*.bc`` with llvmlite, prints it, and splits the assembly
into a preamble, one piece per global, function and metadata node, each with its direct
dependencies (:func:`_part`); merges the parts several processes print into one index and blob
(:func:`_merge`), and extracts a *closure*: the part owning just the functions one kernel calls,
from a parse of their bodies only (:func:`_closure`, with :mod:`.bodies`).  Reading and writing
the store file is :mod:`.store_file`'s job, running the parts :mod:`.store_build`'s.

Build workers import this module in a package of their own (see
:data:`nvshmem_dsl.linker.store_build._WORKER_MAIN`): it imports nothing from outside this folder.
"""

from __future__ import annotations

import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import bodies
from .rewrites import ATTRIBUTE_GROUP

#: Bump when the on-disk layout or the way pieces are derived changes.
FORMAT_VERSION = 3

#: Device globals that the host library (``nvshmemx_culibrary_init``) looks up
#: by name in every loaded module; they must survive linking with external
#: linkage.  The ibgda/gpunetio ones exist only in some NVSHMEM versions.
#: NVSHMEM's device state, which nvshmemx_cumodule_init/culibrary_init fill in; a module
#: without it calls no NVSHMEM function.
DEVICE_STATE = "nvshmemi_device_state_d"

EXPORTED_GLOBALS = (
    DEVICE_STATE,
    "nvshmemi_device_lib_version_d",
    "nvshmemi_ibgda_device_state_d",
    "nvshmemi_gpunetio_device_state_d",
)


# A global name as printed by LLVM: @foo, @"foo bar", or a numbered @12.
_GLOBAL_REF = re.compile(rb'@("(?:[^"\\]|\\.)*"|[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+)')
_MD_REF = re.compile(rb"!(\d+)")
_ATTRIBUTE_GROUP = re.compile(ATTRIBUTE_GROUP.encode(), re.M)
_TARGET_ATTRS = re.compile(rb' ?"target-(?:cpu|features)"="[^"]*"')


# --------------------------------------------------------------------------
# Building the store
#
# Parsing the bitcode (4-7 s) and printing it as text (5-13 s) are single calls
# into LLVM; the rest is cheap.  So the store is built by several worker
# processes at once (*parts*): each parses the bitcode (only its own bodies and
# the internal ones: :func:`_store_part`), makes the externally visible
# definitions that are not its own (a sorted list dealt out round-robin)
# internal, lets GlobalDCE drop what its own ones do not use, gives the
# survivors their linkage back, and prints, splits and compresses what is left.  Every externally visible function is taken from the part that
# owns it; internal helpers and globals, which several parts may print, from
# the first.  Parts number their metadata and attribute groups independently:
# the store keeps each part's metadata and :meth:`_Store.assemble` renumbers
# part ``s``'s ``!N`` and ``#N`` to ``N + s * stride`` (part 0 keeps its own).
#
# The same machinery extracts a *closure*: a part that owns only the functions
# one kernel calls, from a parse of their bodies (:func:`_closure`).  It is what
# every kernel links while the store is still being built (see
# :func:`_first_store`).


def _name_of(define_line: bytes) -> bytes:
    # nothing before the function's name contains an '@'
    return _GLOBAL_REF.search(define_line).group(1)


def _unquote(name: bytes) -> str:
    """The symbol of a printed global name (``"a b"`` -> ``a b``)."""
    if name[:1] != b'"':
        return name.decode()
    body = re.sub(rb"\\([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), name[1:-1])
    return body.decode(errors="surrogateescape")


def _split(text: bytes):
    """Split printed LLVM assembly into preamble lines, globals, functions and
    metadata nodes.  Relies on the printer's layout: one top-level entity per
    line, function bodies between ``define ... {`` and a line ``}``."""
    preamble, globs, funcs, mds = [], {}, {}, {}
    pos, n = 0, len(text)
    while pos < n:
        eol = text.find(b"\n", pos)
        eol = n if eol < 0 else eol
        line = text[pos:eol]
        if line.startswith(b"define "):
            end = text.find(b"\n}\n", pos)
            end = n if end < 0 else end + 3
            funcs[_name_of(line)] = text[pos:end]
            pos = end
            continue
        if line.startswith(b"@"):
            globs[_GLOBAL_REF.match(line).group(1)] = line
        elif line.startswith(b"!") and line[1:2].isdigit():
            key, _ = line.split(b" ", 1)
            mds[int(key[1:])] = line
        elif line.startswith(b"attributes #"):
            preamble.append(_TARGET_ATTRS.sub(b"", line))
        elif line.startswith((b"target ", b"%", b"$", b"declare ", b"module asm")):
            preamble.append(line)
        # source_filename, comments, blank lines and named metadata are dropped
        pos = eol + 1
    return preamble, globs, funcs, mds


def _deps(text: bytes, globs, funcs, elsewhere=frozenset()):
    """The functions, globals and metadata ``text`` refers to; ``elsewhere``: the names of the
    functions defined in the file but only declared in this part (see :func:`_store_part`)."""
    g, f = set(), set()
    for ref in _GLOBAL_REF.findall(text):
        if ref in funcs or (elsewhere and _unquote(ref) in elsewhere):
            f.add(ref)
        elif ref in globs:
            g.add(ref)
    return f, g, {int(x) for x in _MD_REF.findall(text)}


def _global_dce(mod, prototypes: bool = False) -> None:
    """GlobalDCE on ``mod``; ``prototypes``: unused declarations go too."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    tm = llvm.Target.from_triple(mod.triple or "nvptx64-nvidia-cuda").create_target_machine()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(0))
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_global_dead_code_eliminate_pass()
    if prototypes:
        mpm.add_strip_dead_prototype_pass()
    mpm.run(mod, pb)


#: zlib level of the pieces: 1 packs the IR text about 4.5:1 at three times
#: the speed of level 6 (5:1); reading is as fast either way.
_ZLEVEL = 1
_ATTR_DEF = re.compile(rb"attributes #(\d+) ")
# what `_renumber` rewrites: !N and #N outside quoted strings
_RENUMBER = re.compile(rb'"[^"]*"|([!#])(\d+)')


def _renumber(text: bytes, md_off: int, attr_off: int) -> bytes:
    """``text`` with metadata ``!N`` -> ``!(N + md_off)`` and attribute groups
    ``#N`` -> ``#(N + attr_off)`` (quoted strings left alone)."""
    if not (md_off or attr_off):
        return text

    def sub(m):
        kind = m.group(1)
        if kind is None:
            return m.group(0)
        return kind + str(int(m.group(2)) + (md_off if kind == b"!" else attr_off)).encode()

    return _RENUMBER.sub(sub, text)


def _parse(bc_path: Path, data: bytes | None = None):
    """``(context, module)``: the bitcode ``bc_path`` (or ``data``, bitcode made from it) parsed
    in an LLVM context of its own, freed with it, in which no type of another module can make
    LLVM rename NVSHMEM's types (all parts must print the same names)."""
    import llvmlite.binding as llvm

    ctx = llvm.create_context()
    return ctx, llvm.parse_bitcode(bc_path.read_bytes() if data is None else data, context=ctx)


def _part(bc_path: Path, part: int, parts: int, threads: int = 1, own=None, parsed=None,
          prototypes: bool = False, listing=None) -> dict:
    """Part ``part`` of ``parts`` of the store for ``bc_path`` (see above); with
    ``own`` (names), the part that owns just those functions (a closure).  ``parsed``: the
    bitcode as :func:`_parse` returns it (this function consumes it), if already parsed;
    ``prototypes``: drop the declarations nothing uses (those of the bodies not parsed);
    ``listing``: ``(api, public)`` names of the whole file, when ``parsed`` holds only some of
    its bodies (:func:`_store_part`)."""
    import llvmlite.binding as llvm

    ctx, mod = parsed or _parse(bc_path)
    local = (llvm.Linkage.internal, llvm.Linkage.private)
    api, defined = [], {}
    # a closure of internal functions (NVSHMEM's helpers, built as objects of their own): kept
    # through GlobalDCE as if public, printed as they are
    inner = {}
    for f in mod.functions:  # one pass: a closure's module declares thousands (an LLVM call each)
        if f.is_declaration:
            continue
        name, linkage = f.name, f.linkage
        if linkage not in local:
            defined[name] = f
            if linkage == llvm.Linkage.external and is_api_name(name):
                api.append(name)
        elif own is not None and name in own:
            inner[name] = f
    api, public = (api, set(defined)) if listing is None else listing
    mine = set(sorted(public)[part::parts]) if own is None else set(own) & (public | inner.keys())
    changed = {}
    for name, f in defined.items():
        if name not in mine:
            changed[name] = (f.linkage, f.visibility)
            f.linkage = "internal"
    for name, f in inner.items():
        changed[name] = (f.linkage, f.visibility)
        f.linkage = "external"
    del defined, inner  # drop the ValueRefs: GlobalDCE deletes functions
    if changed or prototypes:
        _global_dce(mod, prototypes)
        for f in mod.functions:  # the survivors print as they are in NVSHMEM
            old = changed.get(f.name)
            if old is not None:
                f.linkage, f.visibility = old
    text = str(mod).encode()
    mod.close()
    ctx.close()
    preamble, globs, funcs, mds = _split(text)
    del text
    # a part of the store keeps its own functions and the internal ones; a
    # closure all it printed (the others' linkage is restored above)
    names = [n for n in funcs
             if own is not None or _unquote(n) in mine or _unquote(n) not in public]
    if sum(_unquote(n) in mine for n in names) != len(mine):
        raise RuntimeError(f"part {part}/{parts}: some of its own functions were not printed")
    sources = [funcs[n] for n in names]
    sources.append(b"\n".join(mds[k] for k in sorted(mds)))
    if threads > 1:  # zlib releases the GIL
        with ThreadPoolExecutor(max_workers=threads) as ex:
            packed = list(ex.map(lambda data: zlib.compress(data, _ZLEVEL), sources))
    else:
        packed = [zlib.compress(data, _ZLEVEL) for data in sources]
    blob, fn_index = bytearray(), {}
    elsewhere = public if listing is not None else frozenset()
    for name, z in zip(names, packed):
        f, g, m = _deps(funcs[name], globs, funcs, elsewhere)
        f.discard(name)
        fn_index[name.decode()] = [
            len(blob),
            len(z),
            sorted(x.decode() for x in f),
            sorted(x.decode() for x in g),
            sorted(m),
        ]
        blob += z
    attrs = [int(m.group(1)) for m in map(_ATTR_DEF.match, preamble) if m]
    return {
        "api": sorted(api),
        "public": len(public),
        "preamble": preamble,
        "globals": {k.decode(): v for k, v in globs.items()},
        "metadata": packed[-1],
        "md_max": max(mds, default=0),
        "attr_max": max(attrs, default=0),
        "functions": fn_index,
        "blob": bytes(blob),
    }

_listed: dict = {}  # (path, size, mtime) of a bitcode file -> bodies.functions() of it (_functions_of)


def is_api_name(name: str) -> bool:
    """Whether ``name`` is named as NVSHMEM's API functions are (``nvshmem*``; its helpers are C++
    ``_Z...nvshmemi_...`` names); with external linkage, a function so named is one of them."""
    return name.startswith("nvshmem")


def _api_of(listed) -> set:
    """NVSHMEM's API among :func:`bodies.functions` ``listed``: external definitions
    named ``nvshmem*`` (as :func:`_part` finds them in a parsed module)."""
    return {f.name for f in listed if f.has_body and f.external and is_api_name(f.name)}


def _store_part(bc_path: Path, part: int, parts: int, threads: int = 1) -> dict:
    """Part ``part`` of ``parts`` of the store (:func:`_part`), from a parse of the bodies it
    prints: its own functions and every internal one.  The functions it calls that other parts
    own are declarations here; they are its dependencies all the same, and the merged preamble
    leaves out their declarations.  A file :mod:`~nvshmem_dsl.linker.bodies` does not read is
    parsed whole."""
    data = bc_path.read_bytes()
    try:
        listed = bodies.functions(data)
        public = {f.name for f in listed if f.has_body and not f.local}
        api = sorted(_api_of(listed))
        keep = set(sorted(public)[part::parts]) | {f.name for f in listed if f.has_body and f.local}
        parsed = _parse(bc_path, bodies.keep_bodies(data, keep, listed))
    except bodies.BitcodeLayoutError:
        return _part(bc_path, part, parts, threads)
    return _part(bc_path, part, parts, threads, parsed=parsed, prototypes=True, listing=(api, public))


def _closure(bc_path: Path, names, helpers: bool = True) -> dict:
    """The closure of ``names`` (:func:`_part` with ``own``), from a parse of the function bodies
    it needs only (:mod:`nvshmem_dsl.linker.bodies`): ``names`` and every function that is not
    an API function, then the API functions those call, until nothing is missing.  ``helpers``
    False: ``names``, then the functions those call but NVSHMEM's out-of-line helpers (the
    ``noinline`` functions that are not API functions: :func:`noinline_groups`), which stay
    declarations, their bodies unread, for code that calls them in their objects.  Almost all of
    NVSHMEM's bitcode is API bodies: this parse is a few percent of the whole file's
    (tests/gpu/records/2026-11-22/closure-parse.txt); a put kernel's without the helpers 0.13-0.24 s,
    with them 0.41-0.50 s (bench/results/closure-helpers-cpu-2026-11-25.txt).  A file laid out in a
    way :mod:`~nvshmem_dsl.linker.bodies` does not read is parsed whole (helpers included)."""
    data = bc_path.read_bytes()
    try:
        fns = _functions_of(bc_path, data)
        with_body = {f.name for f in fns if f.has_body}
        api = _api_of(fns)
        # with the helpers: every function that is not an API function at once (a parse of them all
        # costs less than one more round of parsing)
        keep = set(names) | (with_body - api if helpers else set())
        while True:
            kept = bodies.keep_bodies(data, keep, fns)
            part = _part(bc_path, 0, 1, 1, own=names, parsed=_parse(bc_path, kept), prototypes=True)
            called = {_unquote(_name_of(line)) for line in part["preamble"] if line.startswith(b"declare ")}
            if not helpers:
                called -= _declare_helpers(part)
            missing = (called & with_body) - keep
            if not missing:
                return part
            keep |= missing
    except bodies.BitcodeLayoutError:
        try:
            return _part(bc_path, 0, 1, 1, own=names)
        finally:
            _release_heap()


def _helpers_closure(bc_path: Path) -> dict:
    """The closure of every function of ``bc_path`` with a body that is not an API function:
    NVSHMEM's out-of-line helpers and what they call, for their objects, before a kernel names
    them (:func:`nvshmem_dsl.linker.store.prefetch`).  Raises :class:`.bodies.BitcodeLayoutError`
    for a file :mod:`~nvshmem_dsl.linker.bodies` does not read."""
    fns = _functions_of(bc_path)
    api = _api_of(fns)
    return _closure(bc_path, sorted(f.name for f in fns if f.has_body and f.name not in api))


def _functions_of(bc_path: Path, data: bytes | None = None) -> list:
    """:func:`.bodies.functions` of the bitcode file ``bc_path`` (its bytes ``data``, if read), once
    per version of the file."""
    st = bc_path.stat()
    key = (str(bc_path.resolve()), st.st_size, st.st_mtime_ns)
    found = _listed.get(key)
    if found is None:
        found = _listed[key] = bodies.functions(bc_path.read_bytes() if data is None else data)
    return found


def noinline_groups(preamble: bytes) -> frozenset:
    """The attribute groups (their numbers, as bytes) of IR text ``preamble`` that say ``noinline``."""
    return frozenset(m[1] for m in _ATTRIBUTE_GROUP.finditer(preamble) if b"noinline" in m[2].split())


#: A function declaration's attribute group, at the end of its line.
_DECLARATION_GROUP = re.compile(rb"#(\d+)$")
_LOCAL_LINKAGE = re.compile(rb"\b(?:internal|private)\b")


def _declare_helpers(part: dict) -> set:
    """The helpers a closure ``part`` declares (internal and ``noinline`` functions: an API
    function is external), their declarations made external in its preamble (a body LLVM did
    not parse leaves an internal function's ``declare internal ...``, which it does not parse
    back)."""
    preamble = part["preamble"]
    groups = noinline_groups(b"\n".join(line for line in preamble if line.startswith(b"attributes #")))
    found = set()
    for i, line in enumerate(preamble):
        if not line.startswith(b"declare ") or not _LOCAL_LINKAGE.search(line[:_GLOBAL_REF.search(line).start()]):
            continue
        group = _DECLARATION_GROUP.search(line.rstrip())
        if group and group[1] in groups:
            found.add(_unquote(_name_of(line)))
            preamble[i] = external_declaration(line)
    return found


def _merge_preambles(parts, attr_stride: int, defined=frozenset()) -> bytes:
    """One preamble for all parts: the first part's target lines, every named
    type, comdat and declaration once (none of a function in ``defined``: a part
    parsed without a body another part prints), and every part's attribute groups
    (renumbered like the part's functions)."""
    head, types, decls, attrs = [], {}, {}, []
    for s, part in enumerate(parts):
        for line in part["preamble"]:
            if line.startswith((b"target ", b"module asm")):
                if s == 0:
                    head.append(line)
            elif line.startswith(b"attributes #"):
                attrs.append(_renumber(line, 0, s * attr_stride))
            elif line.startswith(b"declare "):
                if _unquote(_name_of(line)) not in defined:
                    decls.setdefault(_name_of(line), _renumber(line, 0, s * attr_stride))
            else:  # %type = ..., $comdat = ...
                types.setdefault(line.split(b" = ", 1)[0], line)
    return b"\n".join(head + list(types.values()) + list(decls.values()) + attrs)


def _merge(parts, bc_path: Path, arch: int, key: str):
    """The store's index and blob, from its parts."""
    if any(p["api"] != parts[0]["api"] or p["public"] != parts[0]["public"] for p in parts):
        raise RuntimeError("the parts of the NVSHMEM bitcode disagree")
    md_stride = 10 ** len(str(max(p["md_max"] for p in parts) + 1))
    attr_stride = 10 ** len(str(max(p["attr_max"] for p in parts) + 1))
    blob = bytearray()

    def put(data: bytes) -> list:
        blob.extend(data)
        return [len(blob) - len(data), len(data)]

    functions, seen, segments = {}, set(), []
    for s, part in enumerate(parts):
        pb = part["blob"]
        for name, (off, n, f, g, m) in part["functions"].items():
            if name not in functions:
                functions[name] = [s, *put(pb[off:off + n]), f, g, m]
        lines = [line for name, line in part["globals"].items() if name not in seen]
        seen.update(part["globals"])
        segments.append({
            "globals": put(zlib.compress(b"\n".join(lines), _ZLEVEL)),
            "metadata": put(part["metadata"]),
        })
    preamble = put(zlib.compress(_merge_preambles(parts, attr_stride, set(functions)), _ZLEVEL))
    index = {
        "format": FORMAT_VERSION,
        "key": key,
        "arch": arch,
        "source": str(bc_path),
        "api": parts[0]["api"],
        "preamble": preamble,
        "md_stride": md_stride,
        "attr_stride": attr_stride,
        "segments": segments,
        "functions": functions,
        "blob_size": len(blob),
    }
    return index, blob


# --------------------------------------------------------------------------
# Loading the store


# A global variable's definition: its name, what declares it (address space, `constant`/`global`,
# type: a named or a first-class one) and its alignment; the initializer between them goes.
_GLOBAL_DEFINITION = re.compile(
    rb'^(@[\w.$]+) = (?:dso_local )?((?:addrspace\(\d+\) )?(?:externally_initialized )?'
    rb'(?:constant|global) (?:%[\w.$]+|[a-z]\w*)) .*?((?:, align \d+)?)$')


def _declaration(line: bytes) -> bytes:
    """The external declaration of the global variable defined on ``line``, e.g. the device state
    for code linked beside a module that defines it (:func:`nvshmem_dsl.linker.outline.objects`)."""
    m = _GLOBAL_DEFINITION.match(line)
    if m is None:
        raise ValueError(f"cannot declare the NVSHMEM global {line[:120]!r}")
    return m[1] + b" = external " + m[2] + m[3]


#: Words of a function definition's header that a declaration does not take (its linkage,
#: visibility and address significance) or that need a body.
_DEFINITION_ONLY = re.compile(
    rb"\b(?:internal|private|linkonce_odr|linkonce|weak_odr|weak|available_externally|hidden|protected"
    rb"|dso_local|local_unnamed_addr|unnamed_addr)\b ?")


def _split_top(text: bytes) -> list:
    """``text`` split at its commas outside parentheses, brackets and braces."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in b"([{<":
            depth += 1
        elif ch in b")]}>":
            depth -= 1
        elif ch == ord(",") and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [t.strip() for t in out if t.strip()]


def function_declaration(define_line: bytes) -> bytes:
    """The external declaration of the function whose definition starts with ``define_line``
    (``define internal fastcc void @f(ptr noundef %0) unnamed_addr #4 {``  ->
    ``declare fastcc void @f(ptr noundef) #4``): for code that calls it in another object."""
    line = define_line.rstrip()
    if not line.startswith(b"define ") or not line.endswith(b"{"):
        raise ValueError(f"not the first line of a function definition: {define_line[:120]!r}")
    name = _GLOBAL_REF.search(line)
    head, rest = line[len(b"define "):name.start()], line[name.end():]
    depth = 0
    for i, ch in enumerate(rest):  # the parameter list: up to its closing parenthesis
        depth += ch == ord("(")
        depth -= ch == ord(")")
        if depth == 0:
            break
    params, tail = rest[1:i], rest[i + 1:-1]
    kept = []
    for p in _split_top(params):
        words = p.split(b" ")
        kept.append(b" ".join(words[:-1]) if len(words) > 1 and words[-1].startswith(b"%") else p)
    tail = re.sub(rb"\s*(?:comdat(?:\([^)]*\))?|section \"[^\"]*\"|personality .*|!dbg !\d+)", b"", tail)
    return (b"declare " + _DEFINITION_ONLY.sub(b"", head) + name.group(0) + b"(" + b", ".join(kept) + b")"
            + _DEFINITION_ONLY.sub(b"", tail).rstrip())


def external_declaration(declare_line: bytes) -> bytes:
    """``declare_line`` as an external declaration: a body LLVM did not parse leaves an internal
    function's prototype printed as ``declare internal fastcc void @f(ptr noundef) unnamed_addr #4``,
    which LLVM does not parse back (-> ``declare fastcc void @f(ptr noundef) #4``)."""
    name = _GLOBAL_REF.search(declare_line)
    head, rest = declare_line[:name.start()], declare_line[name.start():]
    close = rest.rindex(b")")
    return _DEFINITION_ONLY.sub(b"", head) + rest[:close + 1] + _DEFINITION_ONLY.sub(b"", rest[close + 1:]).rstrip()


def _release_heap() -> None:
    """Give the C heap's free memory back to the system (glibc keeps what a
    parse of the whole bitcode freed: cold-compile.txt); after a closure
    parsed from the whole file only (a closure's own parse is small)."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
