"""NVSHMEM4Py's CuTe device API (``nvshmem.core.device.cute``) in the calling convention of
bench/cute_bench.py's kernels (bench/_cute_api.py), so that the CuTe benchmark's kernels run with
it unchanged: bench/nv4py_cute_bench.py, ``bench/run.py --impls ...,nv4py_cute``.

Call :func:`install` after bench/_nv4py.py's start-up and before importing cute_bench.  What the
adapter does, call by call (one line each; NVSHMEM4Py counts elements from the tensors' sizes):

* every tensor handed to NVSHMEM4Py is re-made with its pointer aligned to its element only
  (:func:`elem_aligned`): its externs match pointer types exactly, alignment included, and
  reject the benchmark's 16-byte aligned tensors (``CALL_FFI_NO_MATCH``);
* ``put*/get*(dst, src, n, pe)`` -> ``put*/get*(dst, src, pe)``; ``p``, ``g``,
  ``atomic_fetch_add`` as they are; ``put_signal(dst, src, n, sig, v, op, pe)`` ->
  ``put_signal(dst, src, sig, v, op, pe)``; ``signal_wait_until`` -> ``signal_wait``;
* the collectives ``(team, dst, src, nelems[, root])`` -> NVSHMEM4Py's ``(team, dst, src[, root
  | op])`` with the tensors cut to what it counts: broadcast and reduce both to ``nelems``,
  reducescatter the destination, fcollect the source, alltoall the source to ``nelems x PEs``;
  ``sum_reduce*`` -> ``reduce*(..., "sum")``.

:func:`compile`: ``cute.compile`` for an explicit arch (NVSHMEM4Py's device bitcode chosen for
that arch, not the current device's), and where :func:`install` was told ``load=True`` (after
NVSHMEM's init: the benchmark), loaded on the current device and initialised by NVSHMEM4Py's own
``cute_compile_helper`` (``library_init``).
"""

from __future__ import annotations

import types
from typing import Any

import _common as C
import _cute_api

SOURCE = "nvshmem.core.device.cute (NVSHMEM4Py)"
_LOAD = False


def elem_aligned(t):
    """Tensor ``t`` with its pointer's alignment its element's size."""
    import cutlass.cute as cute
    from cutlass.cute.typing import AddressSpace

    et = t.element_type
    ptr = cute.make_ptr(et, t.iterator.toint(), AddressSpace.gmem, assumed_align=et.width // 8)
    return cute.make_tensor(ptr, t.layout)


def _coll(family: str, f):
    """NVSHMEM4Py's collective ``f`` of ``family`` called as the benchmark calls NVSHMEM's."""
    import nvshmem.core.device.cute as nc

    a, view = elem_aligned, _cute_api.view
    if family == "broadcast":
        return lambda team, dst, src, n, root: f(team, a(view(dst, 0, n)), a(view(src, 0, n)), root)
    if family == "reduce":
        return lambda team, dst, src, n: f(team, a(view(dst, 0, n)), a(view(src, 0, n)), "sum")
    if family == "reducescatter":
        return lambda team, dst, src, n: f(team, a(view(dst, 0, n)), a(src), "sum")
    if family == "fcollect":
        return lambda team, dst, src, n: f(team, a(dst), a(view(src, 0, n)))
    if family == "alltoall":
        return lambda team, dst, src, n: f(team, a(dst), a(view(src, 0, n * nc.n_pes())))
    return f


def api():
    """The namespace of _cute_api.NAMES over nvshmem.core.device.cute."""
    import nvshmem.core.device.cute as nc

    a = elem_aligned
    ns = types.SimpleNamespace(
        p=lambda dst, value, pe: nc.p(a(dst), value, pe),
        g=lambda src, pe: nc.g(a(src), pe),
        atomic_fetch_add=lambda dst, value, pe: nc.atomic_fetch_add(a(dst), value, pe),
        put_signal=lambda dst, src, n, sig, v, op, pe: nc.put_signal(a(dst), a(src), a(sig), v, op, pe),
        signal_wait_until=lambda sig, cmp, v: nc.signal_wait(a(sig), cmp, v),
        quiet=nc.quiet, barrier_all_block=nc.barrier_all_block, my_pe=nc.my_pe, n_pes=nc.n_pes)
    for op in ("put", "get"):
        for scope in C.SCOPES:
            name = op if scope == "thread" else f"{op}_{scope}"
            setattr(ns, name, (lambda f: lambda dst, src, n, pe: f(a(dst), a(src), pe))(getattr(nc, name)))
    for family in C.COLL_FAMILIES:
        for scope in C.SCOPES:
            theirs = family if scope == "thread" else f"{family}_{scope}"
            setattr(ns, C.coll_api(family, scope), _coll(family, getattr(nc, theirs)))
    missing = [n for n in _cute_api.NAMES if not hasattr(ns, n)]
    assert not missing, missing
    return ns


class Compiled:
    """A compiled launcher and the arch it was compiled for (what cute_bench reads of nvshmem_dsl's)."""

    def __init__(self, fn, arch: str, kernel_object=None) -> None:
        self.fn, self.arch, self.kernel_object = fn, arch, kernel_object

    def __call__(self, *args):
        return self.fn(*args)


def _device_arch() -> str:
    from cuda.core import Device

    cc = Device().compute_capability
    return f"sm_{cc[0]}{cc[1]}{'a' if cc[0] >= 9 else ''}"


def compile(fn, *args: Any, arch: str | None = None, **_ignored: Any) -> Compiled:  # noqa: A001 - cute's name
    """``fn(*args)`` compiled for ``arch`` (default the current device's), loaded and initialised by
    NVSHMEM4Py where :func:`install` said ``load=True``."""
    import cutlass.cute as cute
    import nvshmem.core.init_fini as init_fini

    arch = arch or _device_arch()
    options = f"--gpu-arch {arch}"
    chosen = init_fini._current_device_library_arch
    init_fini._current_device_library_arch = lambda: "".join(ch for ch in arch if ch.isdigit())
    try:
        if not _LOAD:
            return Compiled(cute.compile(fn, *args, options=options), arch)
        # NVSHMEM4Py's helper, its library_init only where the library holds NVSHMEM's device state:
        # the spin and plain launch kernels do not, and library_init then fails ("Failed to
        # initialize CULibrary for NVSHMEM", CUDA_ERROR_NOT_FOUND)
        import nvshmem.core
        from nvshmem.core.interop.cute import cute_compile_helper
        from nvshmem_dsl.host._cuda import library_uses_nvshmem

        library_init, initialised = nvshmem.core.library_init, []

        def init_where_nvshmem(kernel_object) -> None:
            if library_uses_nvshmem(int(kernel_object.handle)):
                library_init(kernel_object)
                initialised.append(kernel_object)

        nvshmem.core.library_init = init_where_nvshmem
        try:
            compiled, kernel_object = cute_compile_helper(fn, *args, options=options)
        finally:
            nvshmem.core.library_init = library_init
        return Compiled(compiled, arch, kernel_object if initialised else None)
    finally:
        init_fini._current_device_library_arch = chosen


def install(load: bool) -> None:
    """Have cute_bench use NVSHMEM4Py's CuTe API and :func:`compile` (``load``: after NVSHMEM's init)."""
    global _LOAD
    _LOAD = load
    _cute_api.use(api(), compile, SOURCE)


# ------------------------------------------------------------------ compile check (CPU)


def main(argv=None) -> int:
    """``python bench/_nv4py_cute.py [--arch sm_90a] [LAUNCHER ...]``: compile bench/cute_bench.py's launchers
    (default all) with NVSHMEM4Py's CuTe API, without a GPU (bench/test_bench_compile.py); one JSON line per
    launcher (_nv4py.compile_report): the arch compiled for."""
    import _nv4py

    args = _nv4py.check_args(argv, "bench/cute_bench.py's launchers with NVSHMEM4Py's CuTe API")
    _nv4py.use_our_nvshmem()
    install(load=False)
    import cute_bench as cb

    tensors = cb.fake_tensors(1 << 20)
    def one(name: str) -> dict:
        return {"arch": cb.compile_all(tensors, arch=args.arch, names=[name])[name].arch}

    return _nv4py.compile_report(args.names or list(cb.LAUNCHERS), one)


if __name__ == "__main__":
    import sys

    sys.exit(main())
