"""NVSHMEM4Py's raw host bindings (``nvshmem.bindings``) as a view of the host ops
(generated/nvshmem4py_bindings.py).

NVSHMEM4Py binds NVSHMEM's host C functions under their names without the ``nvshmem_`` /
``nvshmemx_`` prefix (``nvshmem_malloc`` -> ``malloc``, ``nvshmemx_barrier_all_on_stream`` ->
``barrier_all_on_stream``), with the parameter names of NVSHMEM's headers, pointers and streams
as ints.  A function whose int result is a status returns None and raises ``NVSHMEMError`` on a
non-zero status; the others return their C result (pointers as ints).  Every host op of the spec
gets its binding here (no two host symbols share a name once the prefix is gone: checked below);
``nvshmem_dsl.core.bindings`` builds the callables over ``nvshmem_dsl.host._lib.call``.
"""
from __future__ import annotations

from ..model import Op, Param, Spec
from ..schema import SpecError
from . import render, with_header

PREFIXES = ("nvshmemx_", "nvshmem_")

# Families whose int result is data, not a status (as nvshmem_dsl.host._table.returns_status).
_INT_RESULT_FAMILIES = frozenset({"my_pe", "n_pes", "team_my_pe", "team_n_pes", "team_translate_pe", "init_status"})
_STATUS_GROUPS = frozenset({"host", "collectives", "sync", "queries"})
# Status-returning functions that NVSHMEM4Py's bindings hand back as a plain int instead of
# raising (its generator declares them `cpdef int ...` without the status check).
RAW_STATUS = frozenset({
    "nvshmemx_team_sync_on_stream", "nvshmemx_cumodule_init", "nvshmemx_cumodule_finalize",
    "nvshmemx_culibrary_init", "nvshmemx_culibrary_finalize", "nvshmemx_buffer_unregister_symmetric",
})

# NVSHMEM's header names for the parameters the spec names otherwise (NVSHMEM4Py's bindings use the
# header names, so keyword calls must too).  Keys: the spec's name; values: (groups or families it
# applies to, the header name), first match wins.
_HEADER_NAMES: dict[str, tuple[tuple[frozenset[str], str], ...]] = {
    "dst": ((frozenset({"rma", "signal", "collectives"}), "dest"),),
    "target": ((frozenset({"amo"}), "dest"),),
    "src": ((frozenset({"rma", "signal"}), "source"),),
    "root": ((frozenset({"broadcast"}), "pe_root"),),
    "PE_start": ((frozenset({"team_split_strided"}), "pe_start"),),
    "PE_stride": ((frozenset({"team_split_strided"}), "pe_stride"),),
    "PE_size": ((frozenset({"team_split_strided"}), "pe_size"),),
    "attr": ((frozenset({"set_attr_mpi_comm_args"}), "nvshmem_attr"),),
}


def binding_name(symbol: str) -> str:
    for prefix in PREFIXES:
        if symbol.startswith(prefix):
            return symbol[len(prefix):]
    raise ValueError(f"host symbol {symbol} has no nvshmem_/nvshmemx_ prefix")


def header_name(op: Op, p: Param) -> str:
    """The parameter's name in NVSHMEM's headers (what NVSHMEM4Py's binding calls it)."""
    where = {op.group, op.family}
    if p.name == "nelems":
        if op.dtype == "mem" and op.group in ("rma", "signal"):
            return "bytes"  # nvshmem_putmem(dest, source, bytes, pe)
        if op.group == "collectives":
            return "nelem"  # nvshmem_TYPE_fcollect(team, dest, src, nelem)
    if p.name == "stream":
        if op.family == "signal_wait_until_on_stream":
            return "cstream"
        if op.group != "collectives" and op.family not in ("barrier", "barrier_all", "sync_all", "team_sync"):
            return "cstrm"  # nvshmemx_putmem_on_stream(..., cudaStream_t cstrm)
    if p.name == "module" and op.symbol.startswith("nvshmemx_culibrary"):
        return "library"
    for applies, name in _HEADER_NAMES.get(p.name, ()):
        if applies & where:
            return name
    return p.name


def kind(op: Op) -> str:
    """'status' (returns None, raises on a non-zero status), 'void' or 'value' (the C result)."""
    if op.ret_ctype == "void":
        return "void"
    if (op.ret_ctype == "int" and op.group in _STATUS_GROUPS and op.family not in _INT_RESULT_FAMILIES
            and op.symbol not in RAW_STATUS):
        return "status"
    return "value"


def bindings(spec: Spec) -> list[dict]:
    rows: dict[str, dict] = {}
    problems = []
    for op in spec.ops_for("host"):
        name = binding_name(op.symbol)
        if name in rows:
            problems.append(f"host symbols {rows[name]['symbol']} and {op.symbol} are both binding {name!r}")
            continue
        rows[name] = {
            "name": name, "symbol": op.symbol, "kind": kind(op), "ret": op.ret_ctype,
            "params": tuple(header_name(op, p) for p in op.params),
            "ctypes": tuple(p.ctype for p in op.params),
        }
    for name in RAW_STATUS:
        if not any(r["symbol"] == name for r in rows.values()):
            problems.append(f"codegen/emit/nvshmem4py.py: RAW_STATUS names {name}, which the spec does not have")
    if problems:
        raise SpecError(problems)
    return [rows[k] for k in sorted(rows)]


def emit(spec: Spec) -> dict[str, str]:
    body = render("nvshmem4py_bindings.py.j2", bindings=bindings(spec))
    return {"nvshmem4py_bindings.py": with_header(body, spec.digest, "#")}
