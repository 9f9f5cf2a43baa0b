"""Experiment: hybrid linking (nvshmem_dsl.linker.outline) on a machine without a GPU.

NVSHMEM's large device routines (collectives, barriers) are called out of line in relocatable
cubins built once per (bitcode, target, register cap), the small ones inlined as before.  This
measures what that decision rests on and what it gives (sm_90, the NVSHMEM nvshmem_dsl finds):

  criterion  instructions of each API function's own body, and of its closure (the function and
             everything it calls), by group/family/scope: which one separates small from large
  globals    the device-state globals in the object: defined there too, internal there, or
             declared (what outline does): what nvJitLink makes of each, and how many
             definitions the linked cubin has
  object     building one object (nvshmem_int32_broadcast, or OUTLINE_OBJECT): LLVM pipeline (O3 /
             the light one outline uses / none), ptxas --split-compile, -maxrregcount: seconds
             (ptxas: the least and the median of OUTLINE_REPEAT runs, default 3), PTX KiB,
             registers
  family     one object per function against one object for a family (four dtypes of
             sum_reduce): build seconds, and the link of a kernel calling one of them
  kernels    each kernel (fresh process each, after a first small kernel that takes Numba's
             one-time costs): seconds to PTX and to the cubin, PTX KiB, the kernel's registers
             (callees included), definitions of the device state, the share of the CPUs other
             processes used meanwhile; with NVSHMEM_DSL_OUTLINE=none (all inlined, as before),
             auto with no objects cached (cold), auto again (warm), and auto-first: warm, as the
             process's first kernel (Numba's one-time costs included).  OUTLINE_KERNELS and
             OUTLINE_MODES (comma lists) choose.  Each measurement waits (OUTLINE_QUIET_WAIT s at
             most) for the machine's CPUs to be idle; "CPU s" is this process's with its ptxas runs
  ptx        the bench kernels' PTX (bench/numba_bench.py) with NVSHMEM_DSL_OUTLINE=none and auto,
             each in a fresh process: identical?

    python bench/experiments/outline_link.py [criterion|globals|object|family|kernels|ptx ...]

Needs the sm_90 piece store (built by the first NVSHMEM kernel) and ptxas; no GPU.  Results of the
2026-11-24: bench/results/outline-cpu-2026-11-24.txt.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import llvmlite.binding as llvm  # noqa: E402
from numba import cuda, types  # noqa: E402
from numba.cuda.compiler import _compile_pyfunc_with_fixup  # noqa: E402

import nvshmem_dsl.numba as nv  # noqa: E402
from nvshmem_dsl import _optable
from nvshmem_dsl.linker import calls, link, outline, plan, store  # noqa: E402
from nvshmem_dsl.linker._llvm import TRIPLE, internalize, run, target_machine  # noqa: E402

CC, CPU, FEATURES = (9, 0), "sm_90", "+ptx85"
I32, F32 = types.int32[::1], types.float32[::1]
W = nv.Team.TEAM_WORLD


# ------------------------------------------------------------------ kernels


def k_warm(a):  # compiled first in every process: Numba's one-time costs stay out of the numbers
    a[0] = nv.my_pe()


def broadcast(d, s):
    nv.broadcast(W, d, s, d.size, 0)


def sum_reduce(d, s):
    nv.sum_reduce(W, d, s, d.size)


def sum_reduce_block(d, s):  # examples/numba_allreduce.py's kernel (float32)
    nv.sum_reduce_block(W, d, s, d.size)


def fcollect_warp(d, s):
    nv.fcollect_warp(W, d, s, d.size)


def alltoall_block(d, s):
    nv.alltoall_block(W, d, s, d.size)


def reducescatter(d, s):
    nv.sum_reducescatter(W, d, s, d.size)


def barrier_all_block(d, s):
    nv.barrier_all_block()


def nine(d, s):
    nv.broadcast(W, d, s, d.size, 0)
    nv.broadcast_block(W, d, s, d.size, 0)
    nv.fcollect(W, d, s, d.size)
    nv.fcollect_block(W, d, s, d.size)
    nv.alltoall_block(W, d, s, d.size)
    nv.sum_reduce(W, d, s, d.size)
    nv.sum_reduce_block(W, d, s, d.size)
    nv.max_reduce_warp(W, d, s, d.size)
    nv.sum_reducescatter_block(W, d, s, d.size)


KERNELS = {"broadcast": (broadcast, (I32, I32)), "sum_reduce": (sum_reduce, (I32, I32)),
           "sum_reduce_block": (sum_reduce_block, (F32, F32)), "fcollect_warp": (fcollect_warp, (I32, I32)),
           "alltoall_block": (alltoall_block, (I32, I32)), "reducescatter": (reducescatter, (I32, I32)),
           "barrier_all_block": (barrier_all_block, (I32, I32)), "nine": (nine, (I32, I32))}


def _cpu_seconds() -> tuple[float, float]:
    """(CPU seconds the machine has spent busy, CPU seconds of this process and its children)."""
    import resource

    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait
    own = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for f in ("ru_utime", "ru_stime"))
    return busy, own


def wait_quiet(limit_s: float = float(os.environ.get("OUTLINE_QUIET_WAIT", 600))) -> None:
    """Wait (up to ``limit_s``) until the machine's CPUs are idle: the numbers are wall-clock seconds
    of a 2-CPU machine that other work may share."""
    t_end = time.time() + limit_s
    while time.time() < t_end:
        b0, _ = _cpu_seconds()
        time.sleep(2)
        if _cpu_seconds()[0] - b0 < 0.2:  # under 5 % of the two CPUs
            return
    print("# (the machine did not become idle)", flush=True)


def cubin_of(fn, sig) -> dict:
    """Compile kernel ``fn`` to PTX and link it (nvJitLink, as at a first launch): times and facts;
    ``others``: the share of the CPUs other processes used meanwhile (0: the numbers are clean)."""
    busy0, own0 = _cpu_seconds()
    t0 = time.perf_counter()
    lib, _ = _compile_pyfunc_with_fixup(fn, sig, device=False, abi="numba", cc=CC)
    (ptx,) = lib.get_asm_strs(cc=CC)
    t1 = time.perf_counter()
    cubin = lib.get_cubin(cc=CC)
    t2 = time.perf_counter()
    busy1, own1 = _cpu_seconds()
    defined, registers = link.cubin_info(bytes(getattr(cubin, "code", cubin)))
    others = max(0.0, (busy1 - busy0) - (own1 - own0)) / ((t2 - t0) * os.cpu_count())
    return {"to_ptx_s": round(t1 - t0, 2), "link_s": round(t2 - t1, 2), "total_s": round(t2 - t0, 2),
            "cpu_s": round(own1 - own0, 2), "others": round(others, 2),
            "ptx_kib": round(len(ptx) / 1024), "registers": registers[lib._entry_name],
            "outlined": len(calls.extern_calls(ptx)), "state_definitions": defined[store.DEVICE_STATE]}


# ------------------------------------------------------------------ criterion


def criterion() -> None:
    st = store._store(None, 90)
    ops = _optable.device_ops()

    def closure(name):
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += st.functions[n][3]
        return seen

    rows = collections.defaultdict(list)
    for name in sorted(st.api & ops.keys()):
        op = ops[name]
        rows[(op["group"], op["family"], op["scope"])].append(
            (st.instructions(name), sum(st.instructions(n) for n in closure(name))))
    print(f"criterion: is_large(own) = own >= {plan.MIN_INSTRUCTIONS}")
    print(f"{'own min':>8} {'own max':>8} | {'closure min':>11} {'max':>7} | {'n':>3}  group/family/scope  outlined")
    for key, v in sorted(rows.items(), key=lambda kv: min(o for o, _ in kv[1])):
        own, clo = [o for o, _ in v], [c for _, c in v]
        large = {plan.is_large(o) for o in own}
        verdict = "MIXED" if len(large) > 1 else "yes" if large == {True} else "no"
        print(f"{min(own):8d} {max(own):8d} | {min(clo):11d} {max(clo):7d} | {len(v):3d}  {'/'.join(key)}  {verdict}")


# ------------------------------------------------------------------ one object


def _object_module(names, declare_exported=True):
    mod = store.api_module(names, 90, declare_exported=declare_exported)
    tm = target_machine(CPU, FEATURES, 3)
    mod.triple, mod.data_layout = TRIPLE, str(tm.target_data)
    return mod, tm


def _ptxas(ptx: str, *flags) -> tuple[bytes, float, str]:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "o.ptx").write_text(ptx)
        t0 = time.perf_counter()
        done = subprocess.run([link.ptxas(), "-c", f"-arch={CPU}", "-O3", "-v", *flags,
                               f"{d}/o.ptx", "-o", f"{d}/o.cubin"], capture_output=True, text=True, check=True)
        return Path(d, "o.cubin").read_bytes(), time.perf_counter() - t0, done.stderr


REPEAT = int(os.environ.get("OUTLINE_REPEAT", 3))


def _times(times) -> str:
    times = sorted(times)
    return f"{times[0]:5.2f} s (median {times[len(times) // 2]:5.2f} s of {len(times)})"


def one_object(name: str) -> None:
    print(f"object of {name} (sm_90):")
    for pipeline in ("none", "light", "O3"):
        mod, tm = _object_module([name])
        internalize(mod, {name})
        wait_quiet()
        t0 = time.perf_counter()
        if pipeline == "O3":
            pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3))
            pb.getModulePassManager().run(mod, pb)
            ptx_t = time.perf_counter()
            ptx = tm.emit_assembly(mod)
        elif pipeline == "light":  # outline.object_ptx (from a clone of the module api_module memoised)
            ptx = outline.object_ptx([name], 90, CPU, FEATURES)
            ptx_t = None
        else:
            run(mod, llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(3)), "global_dead_code_eliminate")
            ptx_t = time.perf_counter()
            ptx = tm.emit_assembly(mod)
        t1 = time.perf_counter()
        opt = f"optimisation {ptx_t - t0:4.2f} s" if ptx_t else "optimisation and emission"
        print(f"  LLVM {pipeline:>5}: {t1 - t0:5.2f} s ({opt}), PTX {len(ptx) // 1024} KiB")
        for flags in ([], ["--split-compile=0"], ["--split-compile=0", "-maxrregcount=64"],
                      ["--split-compile=0", "-maxrregcount=32"]):
            if pipeline != "light" and flags != ["--split-compile=0", "-maxrregcount=64"]:
                continue
            times = []
            for _ in range(REPEAT):
                wait_quiet()
                cubin, dt, _ = _ptxas(ptx, *flags)
                times.append(dt)
            regs = link.cubin_info(cubin)[1]
            print(f"    ptxas -c {' '.join(flags):38s} {_times(times)}, {name} {regs.get(name, '?')} registers "
                  f"(most of any function {max(regs.values())}), cubin {len(cubin) // 1024} KiB")


# ------------------------------------------------------------------ the device state in the object


def _link(inputs) -> tuple[bytes | None, str]:
    from cuda.bindings import nvjitlink as nj

    h = nj.create(1, [f"-arch={CPU}"])
    try:
        for kind, data in inputs:
            nj.add_data(h, kind, data, len(data), "in")
        failed = False
        try:
            nj.complete(h)
        except Exception:  # noqa: BLE001 - nvJitLink's error, its log says which
            failed = True
        log = bytearray(nj.get_error_log_size(h))
        nj.get_error_log(h, log)
        err = log.decode(errors="replace").strip()
        if failed:
            return None, err
        cubin = bytearray(nj.get_linked_cubin_size(h))
        nj.get_linked_cubin(h, cubin)
        return bytes(cubin), err
    finally:
        nj.destroy(h)


def globals_in_object() -> None:
    from cuda.bindings import nvjitlink as nj

    name = "nvshmem_sync_all"

    def k(a):
        nv.sync_all()

    kptx, _ = cuda.compile_ptx(k, (I32,), cc=CC)
    print(f"kernel calling {name} out of line: PTX declares {sorted(calls.extern_calls(kptx))}, "
          f"defines the device state: {'.visible .const' in kptx}")
    for how in ("defined", "internal", "declared"):
        mod, tm = _object_module([name], declare_exported=how == "declared")
        internalize(mod, {name} | (set(store.EXPORTED_GLOBALS) if how == "defined" else set()))
        ptx = tm.emit_assembly(mod)
        decl = [ln.split(" .align")[0] for ln in ptx.splitlines() if ln.startswith(".") and store.DEVICE_STATE in ln]
        obj, _, _ = _ptxas(ptx)
        cubin, log = _link([(nj.InputType.PTX, kptx.encode()), (nj.InputType.CUBIN, obj)])
        count = link.cubin_info(cubin)[0][store.DEVICE_STATE] if cubin else "-"
        print(f"  object {how:9s} ({decl[0] if decl else 'none'}): link {'ok' if cubin else 'FAILED'}, "
              f"{store.DEVICE_STATE} defined {count} time(s); log: {log[:200] or '-'}")


# ------------------------------------------------------------------ function or family objects


def family() -> None:
    names = ["nvshmem_int32_sum_reduce", "nvshmem_int64_sum_reduce", "nvshmem_float_sum_reduce",
             "nvshmem_double_sum_reduce"]
    with tempfile.TemporaryDirectory() as d:
        wait_quiet()
        t0 = time.perf_counter()
        ptx = outline.object_ptx(names, 90, CPU, FEATURES)
        obj, dt, _ = _ptxas(ptx, "--split-compile=0", "-maxrregcount=64")
        print(f"one object for {len(names)} functions (sum_reduce: int32 int64 float double): "
              f"{time.perf_counter() - t0:5.2f} s (ptxas {dt:.2f} s), {len(obj) // 1024} KiB")
        outline_dir = outline._objects_dir
        outline._objects_dir = lambda: Path(d)
        try:
            wait_quiet()
            t0 = time.perf_counter()
            paths = dict(zip(sorted(names), outline.objects(names, 90, CPU, FEATURES)))
            size = sum(p.stat().st_size for p in paths.values())
            print(f"one object per function ({len(names)} built at once): {time.perf_counter() - t0:5.2f} s, "
                  f"{size // 1024} KiB in all")
            kptx, _ = cuda.compile_ptx(sum_reduce, (I32, I32), cc=CC)
            for label, inputs in (("its family's object", [obj]),
                                  ("its own object", [paths["nvshmem_int32_sum_reduce"].read_bytes()]),
                                  ("another's object (float)", [paths["nvshmem_float_sum_reduce"].read_bytes()])):
                from cuda.bindings import nvjitlink as nj
                t0 = time.perf_counter()
                cubin, log = _link([(nj.InputType.PTX, kptx.encode())] + [(nj.InputType.CUBIN, o) for o in inputs])
                print(f"  a kernel calling nvshmem_int32_sum_reduce linked with {label}: "
                      f"{time.perf_counter() - t0:.2f} s, " + (f"cubin {len(cubin) // 1024} KiB" if cubin else
                                                               f"FAILED: {log[:200]}"))
        finally:
            outline._objects_dir = outline_dir


# ------------------------------------------------------------------ kernels, each in a fresh process


def _child(args) -> None:
    name, objects_dir, warm_up = args
    if objects_dir:
        outline._objects_dir = lambda: Path(objects_dir)
    if warm_up == "1":
        cubin_of(k_warm, (I32,))
    fn, sig = KERNELS[name]
    print(json.dumps(cubin_of(fn, sig)))


def _fresh(name: str, mode: str, objects_dir: str = "", warm_up: bool = True) -> dict:
    env = dict(os.environ, NVSHMEM_DSL_OUTLINE=mode)
    out = subprocess.run([sys.executable, __file__, "--child", name, objects_dir, str(int(warm_up))], env=env,
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.splitlines()[-1])


def kernels(names) -> None:
    print(f"{'kernel':>18} {'mode':>10} {'to PTX':>7} {'to cubin':>8} {'CPU s':>6} {'PTX KiB':>8} {'regs':>5} "
          f"{'outlined':>8} {'state defs':>10} {'others':>6}")
    for name in names:
        with tempfile.TemporaryDirectory() as d:  # no objects cached for each kernel's cold run
            for mode in os.environ.get("OUTLINE_MODES", "none,auto-cold,auto-warm,auto-first").split(","):
                wait_quiet()
                r = _fresh(name, mode.split("-")[0], d, warm_up=mode != "auto-first")
                print(f"{name:>18} {mode:>10} {r['to_ptx_s']:7.2f} {r['total_s']:8.2f} {r['cpu_s']:6.2f} {r['ptx_kib']:8d} "
                      f"{r['registers']:5d} {r['outlined']:8d} {r['state_definitions']:10d} {r['others']:6.2f}",
                      flush=True)


def ptx_identical() -> None:
    code = ("import sys, hashlib, json; sys.path.insert(0, sys.argv[1]); import numba_bench as nb; "
            "from numba import cuda; from numba.core import sigutils\n"
            "out = {}\n"
            "for n, fn in nb.KERNELS.items():\n"
            "    args, _ = sigutils.normalize_signature(nb.SIGNATURES[n])\n"
            "    ptx, _ = cuda.compile_ptx(fn, args, cc=(9, 0), **nb.jit_options(n))\n"
            "    out[n] = hashlib.sha256(ptx.encode()).hexdigest()[:16]\n"
            "print(json.dumps(out))")
    got = {}
    for mode in ("none", "auto"):
        done = subprocess.run([sys.executable, "-c", code, str(HERE.parent)], capture_output=True, text=True,
                              env=dict(os.environ, NVSHMEM_DSL_OUTLINE=mode), check=True)
        got[mode] = json.loads(done.stdout.splitlines()[-1])
    for n in got["none"]:
        print(f"  {n:>16}: none {got['none'][n]}  auto {got['auto'][n]}  "
              f"{'identical' if got['none'][n] == got['auto'][n] else 'DIFFERENT'}")


def main(argv) -> None:
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    what = argv or ["criterion", "globals", "object", "family", "kernels", "ptx"]
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, NVSHMEM bitcode "
          f"{store._default_bitcode(90)}, ptxas {link.ptxas()}", flush=True)
    for w in what:
        print(f"\n## {w}", flush=True)
        if w == "criterion":
            criterion()
        elif w == "globals":
            globals_in_object()
        elif w == "object":
            one_object(os.environ.get("OUTLINE_OBJECT", "nvshmem_int32_broadcast"))
        elif w == "family":
            family()
        elif w == "kernels":
            kernels(os.environ.get("OUTLINE_KERNELS", ",".join(KERNELS)).split(","))
        elif w == "ptx":
            ptx_identical()


if __name__ == "__main__":
    main(sys.argv[1:])
