"""``nvshmem.bindings.ask_smem``: the host form of the header-inline ``nvshmemx_ask_smem``."""

from ..direct import ask_smem as _ask_smem

__all__ = ["ask_smem"]


def ask_smem(amount: int) -> int:
    """Bytes of dynamic shared memory NVSHMEM's TMA transfers ask for with ``amount`` (a
    ``Smem_amount``); other values get the recommended size, as the C helper does."""
    return _ask_smem(amount)
