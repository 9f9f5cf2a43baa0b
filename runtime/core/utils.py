"""NVSHMEM4Py's utilities (``nvshmem.core.utils``): sizes of shapes and of NVSHMEM type names,
and the two private helpers its own programs and tests import (``_get_device``,
``_configure_logging``)."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from typing import Any

import numpy as np

__all__ = ["get_size", "dtype_nbytes"]

#: NVSHMEM type names -> bytes per element (as NVSHMEM4Py's ``dtype_nbytes`` has them)
_NVSHMEM_SIZES = {
    "half": 2, "bfloat16": 2, "float": 4, "double": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "int8": 1, "int16": 2, "int32": 4, "int32_t": 4, "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "uint": 4,
    "long": 8, "ulong": 8, "longlong": 8, "ulonglong": 8, "ptrdiff": 8, "fp16": 2, "int": 4, "int64": 8,
    "char": 1, "schar": 1, "size": 8,
}

#: torch dtype names -> the numpy dtype whose itemsize they have (bf16 and fp8 have none in numpy)
_TORCH_TO_NUMPY = {
    "float16": np.float16, "bfloat16": np.float16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8,
    "float32": np.float32, "float64": np.float64, "int8": np.int8, "uint8": np.uint8, "uint16": np.uint16,
    "uint32": np.uint32, "uint64": np.uint64, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "bool": np.bool_,
}


def _is_torch_dtype(dtype: Any) -> bool:
    torch = sys.modules.get("torch")  # never imports torch itself
    return torch is not None and isinstance(dtype, getattr(torch, "dtype", ()))


def get_size(shape: Any, dtype: Any) -> int:
    """The size in bytes of an array of ``shape`` and ``dtype`` (a numpy name or dtype, a torch
    dtype, or "bfloat16")."""
    if _is_torch_dtype(dtype):
        name = str(dtype).split(".")[-1]
        if name not in _TORCH_TO_NUMPY:
            raise ValueError(f"Unsupported torch dtype: {dtype}")
        dtype = np.dtype(_TORCH_TO_NUMPY[name])
    else:
        if isinstance(dtype, str) and dtype == "bfloat16":  # numpy has no bfloat16
            dtype = np.float16
        dtype = np.dtype(dtype)
    return int(np.prod(shape) * dtype.itemsize)


def dtype_nbytes(dtype: str) -> int:
    """The bytes of one element of NVSHMEM type ``dtype`` ("float", "int64", "half", ...);
    ``ValueError`` for a name NVSHMEM does not have."""
    try:
        return _NVSHMEM_SIZES[dtype]
    except (KeyError, TypeError):
        raise ValueError(f"Unsupported NVSHMEM dtype: {dtype}") from None


def _get_device():
    """(the ``cuda.core.Device`` this PE was initialised with, None): NVSHMEM4Py's pre-flight helper
    (its second value, the device to restore, is only set in its debug mode)."""
    from cuda.core import Device

    from ..host import _state
    from .init_fini import _cached_device

    device = _cached_device["device"]
    if device is None or not hasattr(device, "device_id"):
        device = Device(_state.STATE.device_id if _state.STATE.initialized else None)
    return device, None


def _configure_logging(level: str = "WARNING", logfile: str | None = None, mype: int | None = None) -> None:
    """Configure the ``nvshmem`` logger as NVSHMEM's C library formats its lines
    (``host:pid:tid [PE] NVSHMEM LEVEL : message``), to stdout and optionally ``logfile``."""
    if mype is None:
        from ..host import _state

        mype = _state.STATE.my_pe if _state.STATE.initialized else -1
    numeric = getattr(logging, str(level).upper(), None)
    if not isinstance(numeric, int):
        raise ValueError(f"Invalid log level: {level}")
    host = socket.getfqdn().split(".")[0]
    formatter = logging.Formatter(f"{host}:{os.getpid()}:{threading.get_native_id()} [{mype}] "
                                  "NVSHMEM %(levelname)s : %(message)s")
    logger = logging.getLogger("nvshmem")
    logger.setLevel(numeric)
    logger.handlers = []
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(formatter)
    logger.addHandler(console)
    if logfile:
        file_handler = logging.FileHandler(logfile)
        file_handler.setFormatter(formatter)
        logger.addHandler(file_handler)
