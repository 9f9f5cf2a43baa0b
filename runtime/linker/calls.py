"""Part of the objects stage: the NVSHMEM functions a kernel's or an object's code calls out of line,
and NVSHMEM's helpers among them.

* which: the functions PTX declares external (:func:`extern_calls`; the helpers among them,
  :func:`helper_calls`, :func:`is_helper`; the API functions, :func:`is_api_function`), and those an
  object's IR will call, read before LLVM runs on it (:func:`predicted_helper_calls`);
* helper specialisation: NVSHMEM's ``noinline`` transport helpers take modes (enums, bools) that
  most calls pass as constants; a call's helper is renamed for its constant modes
  (:func:`specialise_helper_calls`, names by :func:`nvshmem_dsl.linker.object_llvm.specialised_name`)
  and its object built with them folded in (a broadcast's object: 1144 -> 421 KiB of PTX,
  bench/results/object-sizes-cpu-2026-11-24.txt; its helpers built once for every collective);
* NVIDIA's compiled helpers (:mod:`nvshmem_dsl.linker.helper_archive`): which of the declared
  helpers its object defines (:func:`archived_helpers`), asked ahead while LLVM emits the PTX
  (:func:`ask_archive_ahead`);
* :func:`prepare_calls`: a kernel's or an object's PTX made ready to be linked with objects (helpers
  specialised where built here, the calling convention marked, :mod:`nvshmem_dsl.linker.abi`).
"""

from __future__ import annotations

import collections
import re

from .. import _optable
from . import abi, helper_archive, link, pieces, store_file
from .object_llvm import SPECIALISED, specialised_name

__all__ = ["archived_helpers", "ask_archive_ahead", "ask_archive_ahead_declares", "extern_calls", "helper_calls",
           "helper_declarations", "helper_declares", "helpers_archive", "is_api_function", "is_helper",
           "predicted_helper_calls", "prepare_calls", "specialise_helper_calls"]


# `.extern .func  (.param .b32 func_retval0) nvshmem_int32_broadcast(` and the like; NVSHMEM's
# helpers are C++ functions (`_Z23nvshmemi_transfer_rma_pIfEvPvT_ii`), maybe specialised
_NVSHMEM_FUNCTION = r"(?:nvshmem\w*|_Z\d+nvshmemi_\w*)(?:" + re.escape(SPECIALISED) + r"(?:\d+_m?\d+)?)*"


_EXTERN = re.compile(r"^\.extern \.func\s+(?:\([^)]*\)\s*)?(" + _NVSHMEM_FUNCTION + ")", re.M)


_CALLSEQ = re.compile(r"^\s*\{ // callseq (\d+), \d+\n(.*?)^\s*\} // callseq \1\n", re.M | re.S)


_CALL = re.compile(r"^(\s*call(?:\.uni)? (?:\([^)]*\), )?)(" + _NVSHMEM_FUNCTION + r"), \(([^)]*)\);", re.M)


_IMMEDIATE_B32 = re.compile(r"^\s*st\.param\.b32\s+\[(\w+)\], (-?\d+);", re.M)


_BUILTIN_TYPES = "vwbcahstijlmxynofdeg"


def _mangled_type(s: str, i: int):
    """``(end, kind)`` of the Itanium-mangled type at ``s[i:]``: kind ``mode`` for a bool or a
    type named by value (NVSHMEM's enums), ``data`` for anything else; ``(i, None)`` for what
    this reader does not know."""
    pointer = False
    while i < len(s) and s[i] in "PKRV":
        pointer |= s[i] in "PR"
        i += 1
    if i >= len(s):
        return i, None
    c = s[i]
    if c in _BUILTIN_TYPES:
        return i + 1, "data" if pointer or c != "b" else "mode"
    if c in "ST":  # a substitution or a template parameter: S_, S0_, T_, T1_
        end = s.find("_", i)
        return (end + 1, "data") if end > 0 else (i, None)
    m = re.match(r"\d+", s[i:])
    if m:
        return i + len(m.group()) + int(m.group()), "data" if pointer else "mode"
    return i, None


def _mangled_modes(name: str):
    """The parameters of NVSHMEM helper ``name`` (Itanium-mangled) that are modes (a bool or an
    enum by value), as a tuple of booleans; None where this reader cannot tell."""
    m = re.match(r"_Z(\d+)", name)
    if not m:
        return None
    i = m.end() + int(m.group(1))
    template = i < len(name) and name[i] == "I"
    if template:  # template arguments: types and literals L<type><value>E, up to E
        i += 1
        while i < len(name) and name[i] != "E":
            if name[i] == "L":
                i, kind = _mangled_type(name, i + 1)
                end = name.find("E", i)
                if kind is None or end < 0:
                    return None
                i = end + 1
            else:
                i, kind = _mangled_type(name, i)
                if kind is None:
                    return None
        i += 1
        i, kind = _mangled_type(name, i)  # a template function's return type
        if kind is None:
            return None
    modes = []
    while i < len(name):
        i, kind = _mangled_type(name, i)
        if kind is None:
            return None
        modes.append(kind == "mode")
    return () if name[m.end() + int(m.group(1)):].endswith("v") and modes == [False] else tuple(modes)


def specialise_helper_calls(ptx: str, keep=frozenset(), rename=frozenset()) -> str:
    """PTX ``ptx`` with its calls of NVSHMEM's out-of-line helpers (:func:`nvshmem_dsl.linker.plan.helpers_out`) that pass
    constants as the helpers' modes (their bool and enum parameters, read from the C++ names:
    signal or atomic op, nbi ...) calling :func:`specialised_name` versions instead, whose objects are built with those constants
    folded in: ``nvshmemi_transfer_put_signal_dispatch`` is 932 KiB of PTX and 6.9 s of ptxas
    unspecialised, 410 KiB and 1.6 s for a put_signal's (SIGNAL_SET, blocking) call (bench/results/object-sizes-cpu-2026-11-24.txt).  The
    declarations of helpers no longer called go; a specialised one is declared as its helper.
    Data (addresses, sizes, values, PEs) stays arguments; API functions are called as they are, and
    so are the helpers of ``keep`` (those linked from NVIDIA's compiled object: :func:`archived_helpers`);
    those of ``rename`` (which that object defines otherwise) are called by a name of their own
    where no constant specialises them (``<helper>$p``, built as the helper)."""
    declared = helper_calls(ptx) - frozenset(keep)
    rename = frozenset(rename)
    if not declared:
        return ptx
    wanted: dict[str, set] = collections.defaultdict(set)

    def callseq(m):
        block = m.group(2)
        call = _CALL.search(block)
        if call is None or call.group(2) not in declared or SPECIALISED in call.group(2):
            return m.group(0)
        params = [p.strip() for p in call.group(3).split(",")]
        stores = dict(_IMMEDIATE_B32.findall(block))
        name = _callee(call.group(2), [int(stores[p]) if p in stores else None for p in params])
        if name == call.group(2) and name in rename:
            name += SPECIALISED
        wanted[call.group(2)].add(name)
        if name == call.group(2):
            return m.group(0)
        start = m.start(2) - m.start(0) + call.start(2)
        return m.group(0)[:start] + name + m.group(0)[start + len(call.group(2)):]

    out = _CALLSEQ.sub(callseq, ptx)
    if not any(SPECIALISED in n for names in wanted.values() for n in names):
        return ptx
    for helper in declared:
        names = wanted.get(helper, {helper})  # a helper declared but not called here stays as it is
        decl = _declaration(out, helper)
        if decl is None or names == {helper}:
            continue
        text = decl.group(0)
        copies = "".join(text.replace(helper, n) for n in sorted(names))
        out = out[:decl.start()] + copies + out[decl.end():]
    return out


def _callee(helper: str, arguments: list) -> str:
    """The helper a call of NVSHMEM's ``helper`` with ``arguments`` (each a constant, or None)
    calls: :func:`specialised_name` on the constants passed as its modes (:func:`_mangled_modes`),
    where there are any."""
    modes = _mangled_modes(helper)
    if not modes or len(modes) != len(arguments):
        return helper
    constants = {i: v for i, v in enumerate(arguments) if v is not None and modes[i]}
    return specialised_name(helper, constants) if constants else helper


# a call in LLVM IR of a function whose name may be NVSHMEM's: `call fastcc void @_Z..(ptr %0, i32 9, i1 true)`
_IR_CALL = re.compile(r"^[^;\n]*\bcall [^@\n]*@\"?(" + _NVSHMEM_FUNCTION + r")\"?\((.*)\)(?: #\d+)?(?:, !.*)?$", re.M)


_IR_CONSTANT = re.compile(r"^i(?:1|8|16|32)\b.* (-?\d+|true|false)$")


_BOOLEANS = {"true": 1, "false": 0}


def _ir_constant(arg: str):
    """An IR call argument's value (``i32 noundef 9``, ``i1 true``) if it is an integer of at most
    32 bits given by value, else None."""
    m = _IR_CONSTANT.match(arg.strip())
    if m is None:
        return None
    return _BOOLEANS[m.group(1)] if m.group(1) in _BOOLEANS else int(m.group(1))


def _ir_arguments(text: str) -> list:
    """The arguments of an IR call (``ptr noundef %0, i32 9, i1 true``), each as :func:`_ir_constant`
    reads it."""
    return [_ir_constant(arg.decode()) for arg in pieces._split_top(text.encode())]


def prepare_calls(ptx: str, bc_path=None) -> str:
    """PTX ``ptx``, a kernel's or an object's, made ready to call NVSHMEM's objects: its calls of
    the helpers specialised (:func:`specialise_helper_calls`; not where the helpers are NVIDIA's
    compiled ones, :func:`helpers_archive`, which are not specialised), and the NVSHMEM API
    functions it declares external or defines marked with their objects' calling convention
    (:func:`nvshmem_dsl.linker.abi.mark`, :func:`nvshmem_dsl.linker.abi.preserve`; the helpers keep
    CUDA's: see :func:`is_api_function`).  Every kernel's PTX passes here before it is linked with
    objects, and every object's before ptxas; ``bc_path``: the NVSHMEM bitcode they link (default:
    the host library's)."""
    found = archived_helpers(ptx, bc_path)
    ptx = specialise_helper_calls(ptx, keep={n for n, a in found.items() if a is True},
                                  rename={n for n, a in found.items() if a == helper_archive.MISMATCH})
    return abi.mark(ptx, abi.preserve(), is_api_function)


def helpers_archive(cpu: str, bc_path=None):
    """The object of NVSHMEM's transport helpers compiled by NVIDIA (:func:`nvshmem_dsl.linker.helper_archive.path`)
    that kernels and objects for ``cpu`` (``sm_90a``) link instead of helper objects built here, or None."""
    return helper_archive.path(store_file._arch_number(cpu), bc_path)


def archived_helpers(ptx: str, bc_path=None) -> dict:
    """Of the helpers PTX ``ptx`` declares, what NVIDIA's compiled object has of them
    (:func:`nvshmem_dsl.linker.helper_archive.provided`): True where it defines one with the same
    prototype (linked from it, not specialised), :data:`~nvshmem_dsl.linker.helper_archive.MISMATCH`
    where it defines one with another (the bitcode's is renamed: NVIDIA's other helpers call theirs)."""
    sm = store_file._arch_number(link.ptx_target(ptx)[0])
    if helper_archive.path(sm, bc_path) is None:  # the default: nothing to ask
        return {}
    declared = {n: m.group(0).rstrip("\n") for n in helper_calls(ptx) if SPECIALISED not in n
                for m in [_declaration(ptx, n)] if m is not None}
    return helper_archive.provided(sm, declared, bc_path) if declared else {}


def _archive_serves(names, sm: int, bc_path) -> bool:
    """Whether a link of calls ``names`` may take NVIDIA's compiled helpers: every helper called by
    its own name is known to be the member's with that prototype, or not in it (:func:`prepare_calls`
    renames the others); else (PTX prepared otherwise: cached from another mode, linked by hand)
    the link builds all its helpers and leaves the member out, so that none is defined twice."""
    return all(helper_archive.known(sm, n, bc_path) in (True, False)
               for n in names if SPECIALISED not in n and is_helper(n))


def _declaration(ptx: str, name: str):
    """The match of ``name``'s ``.extern .func`` declaration in ``ptx`` (with its line's end), or None."""
    return re.search(r"^\.extern \.func\s+(?:\([^)]*\)\s*)?" + re.escape(name) + r"\b[^;]*;\n?", ptx, re.M)


def predicted_helper_calls(text: str) -> frozenset:
    """The NVSHMEM helpers (specialised as :func:`specialise_helper_calls` will name them from the
    PTX) that the IR ``text`` (an object's :func:`nvshmem_dsl.linker.outline.object_ir`) calls and declares: read before any
    LLVM runs on it, so that their objects can start building at once.  A call the PTX passes a
    mode in a register (not a constant: IPSCCP may fold one more) is named otherwise there; the
    PTX's names are what links."""
    declared = _declares(text).keys() - _optable.device_ops().keys()
    return frozenset(_callee(name, _ir_arguments(args))
                     for name, args in _IR_CALL.findall(text) if name in declared)


def _declares(text: str) -> dict:
    """``{function: its declare line}`` of the IR ``text``'s declarations."""
    return {pieces._unquote(pieces._name_of(line.encode())): line for line in text.splitlines()
            if line.startswith("declare ")}


def helper_declarations(text: str, cpu: str, features: str) -> dict:
    """``{helper: its PTX declaration}`` of the NVSHMEM helpers the IR ``text`` (an object's
    :func:`nvshmem_dsl.linker.outline.object_ir`) declares, as the PTX that LLVM emits for ``cpu``/``features`` declares them
    (:func:`archived_helpers` asks NVIDIA's compiled object about those), from a module of those
    declarations alone: known before the object's own PTX is.  Helpers whose prototype names a type
    of the IR's own are left to the PTX."""
    return _ptx_declarations(helper_declares(text), cpu, features)


def helper_declares(text: str) -> dict:
    """:func:`_declares` of NVSHMEM's helpers (not specialised) whose prototypes name no type of the IR's
    own, each less its attribute group."""
    return {name: re.sub(r"\s+#\d+\s*$", "", line) for name, line in _declares(text).items()
            if "%" not in line and is_helper(name) and SPECIALISED not in name}


def _ptx_declarations(lines: dict, cpu: str, features: str) -> dict:
    """:func:`helper_declarations` of the declare lines ``lines`` (:func:`helper_declares`)."""
    import llvmlite.binding as llvm

    from ._llvm import TRIPLE, target_machine

    if not lines:
        return {}
    refs = ", ".join(f'ptr @"{n}"' for n in sorted(lines))
    tm = target_machine(cpu, abi.object_features(features), 2)
    mod = llvm.parse_assembly("\n".join([*lines.values(), f"@nvshmem_dsl_refs = global [{len(lines)} x ptr] [{refs}]"]))
    mod.triple, mod.data_layout = TRIPLE, str(tm.target_data)
    ptx = tm.emit_assembly(mod)
    return {n: m.group(0).rstrip("\n") for n in lines for m in [_declaration(ptx, n)] if m is not None}


def _ask_archive_ahead(text: str, cpu: str, features: str, bc_path=None) -> None:
    """Start asking NVIDIA's compiled helpers about the helpers the IR ``text`` declares
    (:func:`ask_archive_ahead_declares` of their :func:`helper_declares`)."""
    ask_archive_ahead_declares(helper_declares(text), cpu, features, bc_path)


def ask_archive_ahead_declares(lines: dict, cpu: str, features: str, bc_path=None) -> None:
    """Start asking NVIDIA's compiled helpers about the helpers of the IR declare lines ``lines``
    (:func:`helper_declares`) (:func:`nvshmem_dsl.linker.helper_archive.ask_ahead`, their
    :func:`helper_declarations` made only where one has no answer yet); nothing where the helpers are
    built.  CuTe's compile asks with its kernel bitcode's (:func:`nvshmem_dsl.linker.nvvm.kernel_bitcode_declares`)."""
    helper_archive.ask_ahead(store_file._arch_number(cpu), lines, lambda: _ptx_declarations(lines, cpu, features),
                             bc_path)


def ask_archive_ahead(module, cpu: str, features: str, bc_path=None) -> None:
    """:func:`_ask_archive_ahead` of the helpers that the llvmlite ``module`` (a kernel's NVSHMEM code,
    before it is linked in) declares, as a kernel's PTX for ``cpu``/``features`` will declare them,
    while the kernel is optimised and emitted."""
    _ask_archive_ahead("\n".join(str(f).strip() for f in module.functions if f.is_declaration and is_helper(f.name)),
                       cpu, features, bc_path)


def extern_calls(ptx) -> frozenset:
    """The NVSHMEM functions that PTX ``ptx`` (text or a list of texts) declares external: the
    outlined ones its link needs :func:`nvshmem_dsl.linker.outline.objects` for."""
    texts = [ptx] if isinstance(ptx, (str, bytes)) else ptx
    return frozenset(n for t in texts
                     for n in _EXTERN.findall(t.decode() if isinstance(t, bytes) else t))


def helper_calls(ptx) -> frozenset:
    """The NVSHMEM helpers (not API functions) that PTX ``ptx`` calls in their objects."""
    return frozenset(n for n in extern_calls(ptx) if is_helper(n))


def is_api_function(name: str) -> bool:
    """Whether ``name`` is one of NVSHMEM's device API functions (the op table's, from the spec). Their
    objects preserve :func:`nvshmem_dsl.linker.abi.preserve` registers for their callers; the helpers
    (:func:`is_helper`) keep CUDA's convention: an object calling one under ``.abi_preserve`` would save
    what it keeps live around every call, in its hot path (a broadcast 1.15 -> 1.34x of C++ at 8 B with
    the helpers marked too, tests/gpu/records/2026-11-25/h200-abi-preserve.txt)."""
    return name in _optable.device_ops()


def is_helper(name: str) -> bool:
    """Whether ``name`` is one of NVSHMEM's out-of-line helpers (a C++ ``nvshmemi_`` function,
    maybe specialised), not an API function."""
    return re.fullmatch(_NVSHMEM_FUNCTION, name) is not None and not is_api_function(name)
