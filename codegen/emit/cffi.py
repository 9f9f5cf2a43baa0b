"""The cffi (ABI mode) declarations of the host library, from the host ops and structs."""
from __future__ import annotations

from ..model import Spec
from . import render, with_header

# C spellings that cffi does not know and the host headers define.
_TYPEDEFS = [
    "typedef struct { uint16_t x; } __half;",
    "typedef __half half;",
    "typedef struct { uint16_t x; } __nv_bfloat16;",
    "typedef struct CUstream_st *cudaStream_t;",
    "typedef struct { unsigned int x, y, z; } dim3;",
    "typedef int32_t nvshmem_team_t;",
    "typedef int nvshmemx_qp_handle_t;",
    "typedef int nvshmemx_smem_amount_t;",
    "typedef uint64_t nvshmemx_region_handle_t;",
    "typedef uint64_t nvshmemx_team_uniqueid_t;",
]


def emit(spec: Spec) -> dict[str, str]:
    body = render("host_cdef.h.j2", typedefs=_TYPEDEFS, structs=spec.structs,
                  ops=spec.ops_for("host"))
    return {"host_cdef.h": with_header(body, spec.digest, "//")}
