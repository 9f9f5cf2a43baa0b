"""`python -m nvshmem_dsl info|demo|cache`: what is installed, what the package offers, what its cache holds."""
from __future__ import annotations

import argparse
import collections
import sys
import time


def _versions() -> list[tuple[str, str]]:
    from importlib import metadata

    from . import _libs, _optable
    rows = [("nvshmem-dsl", metadata.version("nvshmem-dsl") if _installed("nvshmem-dsl") else "(source tree)"),
            ("spec sha256", _optable.table()["provenance"]["spec_sha256"][:16])]
    try:
        inst = _libs.installation()
        rows += [("NVSHMEM", f"{inst.version_string} ({inst.source})"),
                 ("host library", str(inst.host_library)),
                 ("bitcode", f"{inst.layout}: {', '.join(p.name for p in inst.bitcode_files)}")]
    except Exception as exc:  # noqa: BLE001 - report, don't fail
        rows.append(("NVSHMEM", f"not found: {str(exc).splitlines()[0]}"))
    for dist in ("numba-cuda", "llvmlite", "nvidia-cutlass-dsl", "triton", "cuda-core", "mpi4py"):
        rows.append((dist, metadata.version(dist) if _installed(dist) else "not installed"))
    from .linker.info import explain

    return rows + explain()


def _installed(dist: str) -> bool:
    from importlib import metadata
    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


def _gpus() -> list[str]:
    try:
        from cuda.core import Device, system

        from .host import _cuda
        n = system.get_num_devices() if hasattr(system, "get_num_devices") else system.num_devices
        lines = [f"GPU {i}: {Device(i).name} (sm_{''.join(map(str, Device(i).compute_capability))}), "
                 f"MPS {_MPS_WORDS[_cuda.mps_enabled(i)]}" for i in range(n)]
    except Exception as exc:  # noqa: BLE001
        return [f"no GPU visible ({type(exc).__name__})"]
    return lines + [f"PEs per GPU: ceil(PEs / {n}); more than one on a GPU needs MPS (nvidia-cuda-mps-control -d), "
                    "else NVSHMEM runs in limited MPG mode (no collectives, no team splits)"]


_MPS_WORDS = {True: "on", False: "off", None: "unknown"}


def _coverage() -> list[tuple[str, int, int, int, int, int]]:
    """Per family: C device functions, Numba, CuTe and Triton functions, host functions."""
    from . import _optable
    table = _optable.table()
    dev = collections.Counter(op["family"] for op in table["device"])
    host = collections.Counter(op["family"] for op in table["host"])
    from . import _dispatch

    dsl = {}
    for name in ("numba", "cute", "triton"):  # the generated dispatch table, each DSL's view
        apis = set(_dispatch.table(name))
        dsl[name] = collections.Counter(op["family"] for op in {o["api"]: o for o in table["device"]
                                                                 if o["api"] in apis}.values())
    families = list(dict.fromkeys([op["family"] for op in table["device"]] + [op["family"] for op in table["host"]]))
    return [(f, dev[f], dsl["numba"][f], dsl["cute"][f], dsl["triton"][f], host[f])
            for f in families]


def info() -> int:
    for k, v in _versions():
        print(f"{k:>20}: {v}")
    for line in _gpus():
        print(f"{'':>20}  {line}")
    return 0


def _sample_numba() -> str:
    from numba import types
    from numba.cuda import compile_ptx

    from . import numba as nv

    def ring_put(dst, src):
        nv.put_block(dst, src, (nv.my_pe() + 1) % nv.n_pes())

    t0 = time.perf_counter()
    ptx, _ = compile_ptx(ring_put, (types.float32[:], types.float32[:]), cc=(9, 0))
    return f"Numba ring put_block -> {len(ptx) // 1024} KiB of PTX for sm_90 in {time.perf_counter() - t0:.1f} s"


def _sample_cute() -> str:
    import cutlass
    from cutlass import cute

    from . import cute as nvc
    # CuTe re-reads kernel sources against the module's globals: publish the names there.
    globals().update(cute=cute, cutlass=cutlass, nvc=nvc)

    @cute.kernel
    def ring_put(dst: cute.Tensor, src: cute.Tensor):
        nvc.put_block(dst, src, (nvc.my_pe() + 1) % nvc.n_pes())

    @cute.jit
    def launch(dst: cute.Tensor, src: cute.Tensor):
        ring_put(dst, src).launch(grid=(1, 1, 1), block=(128, 1, 1))

    t0 = time.perf_counter()
    a = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (1024,), assumed_align=16)
    ptx = nvc.compile_to_ptx(launch, a, a, arch="sm_90a")
    return f"CuTe ring put_block -> {len(ptx) // 1024} KiB of PTX for sm_90a in {time.perf_counter() - t0:.1f} s"


def _sample_triton() -> str:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import triton as nvt
    # Triton reads kernel sources against the module's globals: publish the names there.
    globals().update(triton=triton, nvt=nvt)

    @triton.jit
    def ring_put(dst, src, n):
        nvt.put_block(dst, src, n, (nvt.my_pe() + 1) % nvt.n_pes())

    t0 = time.perf_counter()
    kernel = triton.compile(ASTSource(fn=ring_put, signature={"dst": "*fp32", "src": "*fp32", "n": "i64"},
                                      constexprs={}), target=GPUTarget("cuda", 90, 32),
                            options={"enable_fp_fusion": True})  # Triton 3.9 warns when left to its default
    ptx = kernel.asm["ptx"]
    return (f"Triton ring put_block -> {len(ptx) // 1024} KiB of PTX and a cubin for sm_90a in "
            f"{time.perf_counter() - t0:.1f} s")


def demo() -> int:
    print("nvshmem-dsl: the NVSHMEM device API for Python GPU DSLs, from one spec\n")
    info()
    rows = _coverage()
    print(f"\n{'family':<34}{'C device':>9}{'Numba':>7}{'CuTe':>6}{'Triton':>7}{'host':>6}")
    for fam, c, nb, cu, tr, h in rows:
        print(f"{fam:<34}{c:>9}{nb:>7}{cu:>6}{tr:>7}{h:>6}")
    tot = [sum(r[i] for r in rows) for i in range(1, 6)]
    print(f"{'total':<34}{tot[0]:>9}{tot[1]:>7}{tot[2]:>6}{tot[3]:>7}{tot[4]:>6}")
    print("(C device: C functions in the bitcode; Numba/CuTe/Triton: DSL functions, each dispatching over dtypes)\n")
    for sample in (_sample_numba, _sample_cute, _sample_triton):
        try:
            print(sample())
        except Exception as exc:  # noqa: BLE001 - a demo reports what fails
            print(f"{sample.__name__[8:]} sample failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return 0


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def _days_ago(when: float) -> str:
    return f"{(time.time() - when) / 86400:.1f} days ago"


def cache(prune: float | None = None, clear: bool = False, dry_run: bool = False) -> int:
    """Report the cache directory's contents by kind; with ``prune``, remove the entries unused for
    that many days first, with ``clear`` all (``dry_run``: say what would go)."""
    from .linker import info as c

    days = c.auto_days()
    print(f"cache directory: {c.cache_dir()} ($NVSHMEM_DSL_CACHE); automatic pruning: "
          + (f"entries unused for {days:g} days" if days else "off") + f" (${c.DAYS_ENV})")
    if prune is not None or clear:
        gone = c.prune(0 if clear else prune, dry_run=dry_run)
        print(f"{'would remove' if dry_run else 'removed'} {len(gone)} entries, "
              f"{_mib(sum(e.size for e in gone))}")
    rows = c.summary()
    for kind, (n, size, oldest) in sorted(rows.items()):
        print(f"{kind:>28}: {n:>5} entries, {_mib(size):>12}, least recently used {_days_ago(oldest)}")
    print(f"{'total':>28}: {sum(r[0] for r in rows.values()):>5} entries, "
          f"{_mib(sum(r[1] for r in rows.values())):>12}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nvshmem_dsl",
                                 description="info: what is installed; demo: coverage and a kernel per DSL; "
                                             "cache: the compile cache's contents (--prune DAYS, --clear)")
    ap.add_argument("command", choices=["info", "demo", "cache"], nargs="?", default="info")
    ap.add_argument("--prune", type=float, metavar="DAYS",
                    help="cache: remove the entries unused for DAYS days")
    ap.add_argument("--clear", action="store_true", help="cache: remove every entry (but builds under way)")
    ap.add_argument("--dry-run", action="store_true", help="cache: say what --prune/--clear would remove")
    args = ap.parse_args(argv)
    if args.command != "cache" and (args.prune is not None or args.clear or args.dry_run):
        ap.error("--prune, --clear and --dry-run go with the cache command")
    if args.prune is not None and args.prune < 0:
        ap.error(f"--prune {args.prune:g}: give a number of days >= 0")
    if args.command == "cache":
        try:
            return cache(args.prune, args.clear, args.dry_run)
        except ValueError as exc:  # a malformed NVSHMEM_DSL_CACHE_DAYS
            ap.error(str(exc))
    return {"info": info, "demo": demo}[args.command]()


if __name__ == "__main__":
    sys.exit(main())
