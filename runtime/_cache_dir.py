"""The user's private cache directory, shared by the host runtime and the device-code linker."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """User-private cache directory (``$NVSHMEM_DSL_CACHE`` or
    ``~/.cache/nvshmem-dsl``), created with mode 0700."""
    d = Path(
        os.environ.get("NVSHMEM_DSL_CACHE")
        or Path.home() / ".cache" / "nvshmem-dsl"
    )
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise PermissionError(f"cache directory {d} is not owned by this user")
    if st.st_mode & 0o077:
        os.chmod(d, 0o700)
    return d
