"""Shared memory of Triton kernels that call NVSHMEM: the shims' static broadcast slot beside
Triton's dynamic shared memory (``global_smem``), which must stay 1024-byte aligned and, past 48 KB
in all, opted in. Used by :mod:`nvshmem_dsl.triton._compile` on the PTX it emits."""
from __future__ import annotations

import re

#: Bytes of the shims' broadcast slot (static shared memory; 8 used). The dynamic shared memory
#: (Triton's ``global_smem``) follows the static in the CTA's window, and Triton assumes it starts
#: 1024-byte aligned: its 128-byte swizzled tiles are written at swizzled offsets from it (cp.async)
#: and read by wgmma, whose hardware swizzles the absolute address. An 8-byte slot put it 16 bytes
#: off, so wgmma read permuted operands (our reading of the wrong sums of the ag_gemm GEMM in its
#: first H200 run). So the slot fills a whole 1024 bytes, 1024-aligned, and the PTX declares
#: ``global_smem`` 1024-aligned (:func:`align_dynamic_shared`).
SLOT_BYTES = 1024
#: Dynamic shared memory a kernel may use without an opt-in (CUDA's 48 KB), static included.
DEFAULT_SHARED = 48 * 1024
#: Alignment of Triton's dynamic shared memory that its swizzled layouts need.
DYNAMIC_SHARED_ALIGN = 1024


_STATIC_SHARED = re.compile(r"^\s*\.shared\s+\.align\s+(\d+)\s+\.(?:b|u|s)(\d+)\s+([\w$.]+)(?:\[(\d+)\])?\s*;", re.M)
_DYNAMIC_SHARED = re.compile(r"^(\s*\.extern\s+\.shared\s+\.align\s+)(\d+)(\s+\.b8\s+global_smem\[\]\s*;)", re.M)


def static_shared_bytes(ptx: str) -> int:
    """Bytes of static shared memory the PTX declares (each variable rounded up to the next one's
    alignment is left to ptxas: this is the sum of their sizes)."""
    return sum(int(bits) // 8 * int(count or 1) for _, bits, _, count in _STATIC_SHARED.findall(ptx))


def align_dynamic_shared(ptx: str) -> str:
    """The PTX with Triton's dynamic shared memory (``global_smem``) declared
    :data:`DYNAMIC_SHARED_ALIGN`-aligned, where static shared memory precedes it."""
    if not static_shared_bytes(ptx):
        return ptx
    return _DYNAMIC_SHARED.sub(lambda m: m.group(1) + str(max(int(m.group(2)), DYNAMIC_SHARED_ALIGN)) + m.group(3),
                               ptx)


def opt_in_shared(dynamic: int, static: int) -> int:
    """The dynamic shared memory to tell Triton a kernel needs (its metadata's ``shared``), given
    what it uses and the static shared memory the PTX declares. Triton opts a kernel in to more
    than :data:`DEFAULT_SHARED` only when its dynamic shared memory alone passes that; with static
    shared memory beside it (the slot) a kernel of 48 KB less the static, up to 48 KB, of dynamic
    shared memory is refused at launch (CUDA_ERROR_INVALID_VALUE: Triton's "invalid argument"; the
    GEMM of nvshmem_dsl.kernels.ag_gemm at unaligned shapes, one 48 KB stage). Such a kernel says it
    needs a byte more than 48 KB, so that Triton opts it in."""
    if static and dynamic <= DEFAULT_SHARED < dynamic + static:
        return DEFAULT_SHARED + 1
    return dynamic
