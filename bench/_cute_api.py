"""The CuTe device API the CuTe benchmark calls: ``nvshmem_dsl.cute`` when it offers it.

While ``nvshmem_dsl.cute`` does not (yet) export the generated functions (``put_block`` ...),
this module builds the few the benchmark needs from the op table (``generated/ops.json``)
with ``nvshmem_dsl.cute._extern.extern``, the same declaration route the generated CuTe API
uses: each is declared with the LLVM types of its bitcode definition and inlined.  The calling
convention is the DSL's: ``put_block(dst, src, nelems, pe)``, ``p(dst, value, pe)``,
``g(src, pe)``, ``atomic_fetch_add(target, value, pe)``,
``put_signal(dst, src, nelems, sig_addr, signal, sig_op, pe)``,
``signal_wait_until(sig_addr, cmp, cmp_value)``; arrays are ``cute.Tensor`` (the C function
is chosen by the first tensor's element type) and single-element targets are the tensor's
first element.  ``SOURCE`` says which one is in use; the benchmark reports it.
"""

from __future__ import annotations

import functools
from typing import Any

from _common import COLL_FAMILIES, SCOPES, coll_api  # bench/ is on sys.path (cute_bench.py, the tests)

NAMES = ("put", "put_warp", "put_block", "get", "get_warp", "get_block", "p", "g", "atomic_fetch_add",
         "put_signal", "signal_wait_until", "quiet", "barrier_all_block", "my_pe", "n_pes",
         *(coll_api(f, s) for f in COLL_FAMILIES for s in SCOPES))

SOURCE = "unresolved"

#: (api, compile function, source) given by :func:`use`: another package's CuTe API in this calling convention
_USED: tuple | None = None


def use(api_obj: Any, compile_fn_: Any, source: str) -> None:
    """Make :func:`api` and :func:`compile_fn` answer another package's device API in the calling convention
    above and its compile (bench/_nv4py_cute.py: NVSHMEM4Py's); call before cute_bench is imported."""
    global _USED
    _USED = (api_obj, compile_fn_, source)


def view(t, offset, n):
    """Elements [offset, offset + n) of tensor ``t`` as a tensor (the kernels' windows and one-element targets)."""
    import cutlass.cute as cute

    return cute.make_tensor(t.iterator + offset, cute.make_layout(n))


def _load():
    global SOURCE
    try:
        import nvshmem_dsl.cute as real
    except ImportError:
        real = None
    if real is not None and all(hasattr(real, n) for n in NAMES):
        SOURCE = "nvshmem_dsl.cute"
        return real
    SOURCE = "bench extern shim (nvshmem_dsl.cute lacks the generated API)"
    return None


def _ops_for(api: str) -> list[dict]:
    from nvshmem_dsl import _optable

    return [op for op in _optable.table()["device"] if op["api"] == api]


@functools.lru_cache(maxsize=None)
def _extern_for(api: str, cute_type: str | None):
    """The Extern of ``api`` for element type ``cute_type`` (a cutlass class name, e.g. Float32)."""
    from nvshmem_dsl import _optable
    from nvshmem_dsl.cute._extern import extern

    dtypes = _optable.dtypes()
    ops = _ops_for(api)
    if not ops:
        raise AttributeError(f"no NVSHMEM device function for {api!r} in the op table")
    if cute_type is None or all(op["dtype"] is None for op in ops):
        op = next(op for op in ops if op["dtype"] is None)
    else:
        matching = [op for op in ops if op["dtype"] and dtypes[op["dtype"]].get("cute") == cute_type]
        if not matching:
            raise TypeError(f"{api}: element type {cute_type} is not supported")
        # the canonical spelling: the dtype whose numpy name is the NVSHMEM name (uint64, not ulong)
        matching.sort(key=lambda op: (dtypes[op["dtype"]].get("numpy") != op["dtype"], op["symbol"]))
        op = matching[0]
    return extern(op["symbol"], op["ret"]["llvm"], [p["llvm"] for p in op["params"]])


def _element_name(args) -> str | None:
    for a in args:
        et = getattr(a, "element_type", None)
        if et is not None:
            return getattr(et, "__name__", str(et))
    return None


def _make(api: str):
    def call(*args: Any):
        return _extern_for(api, _element_name(args))(*args)

    call.__name__ = api
    call.__qualname__ = api
    return call


def api():
    """The module-like object with NAMES as attributes."""
    global SOURCE
    if _USED is not None:
        SOURCE = _USED[2]
        return _USED[0]
    real = _load()
    if real is not None:
        return real

    class _Shim:
        pass

    shim = _Shim()
    for n in NAMES:
        setattr(shim, n, _make(n))
    return shim


def compile_fn():
    """``nvshmem_dsl.cute.compile`` (cute.compile with an explicit arch and the NVSHMEM module hooks), or the
    compile given to :func:`use`."""
    if _USED is not None:
        return _USED[1]
    try:
        import nvshmem_dsl.cute as pkg

        fn = getattr(pkg, "compile", None)
        if fn is not None:
            return fn
    except ImportError:
        pass
    from nvshmem_dsl.cute._compile import compile

    return compile
