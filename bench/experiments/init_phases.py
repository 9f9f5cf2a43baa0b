"""Where nvshmem_dsl.init() spends its time (issue 41: our init 2.13 s against NVSHMEM4Py's 1.06 s,
2 PEs under MPS, 3.8.0). Each PE prints one JSON line: the import of nvshmem_dsl, then init() under
cProfile (its total, and the cumulative seconds of the functions that take at least 2% of it:
bootstrap, CUDA context, nvshmemx_hostlib_init_attr, the scratch allocation, the device-code prefetch,
the hooks), then finalize. Run: python -m nvshmem_dsl.run -n 2 bench/experiments/init_phases.py
(device step: NPROC=2 bash tests/gpu/device_steps.sh experiment init_phases)."""
import cProfile
import json
import pstats
import time

t0 = time.perf_counter()
import nvshmem_dsl as nvshmem  # noqa: E402

import_s = time.perf_counter() - t0
prof = cProfile.Profile()
t1 = time.perf_counter()
prof.enable()
nvshmem.init()
prof.disable()
init_s = time.perf_counter() - t1
stats = pstats.Stats(prof)
rows = []
for (path, line, name), (_, _, _, cum, _) in stats.stats.items():
    if cum >= 0.02 * init_s:
        rows.append((round(cum, 3), f"{path.rsplit('/', 2)[-2:] if '/' in path else path}:{name}"))
rows.sort(reverse=True)
t2 = time.perf_counter()
nvshmem.barrier_all()
first_barrier_s = time.perf_counter() - t2
me = nvshmem.my_pe()
t3 = time.perf_counter()
nvshmem.finalize()
print(json.dumps({"pe": me, "import_s": round(import_s, 3), "init_s": round(init_s, 3),
                  "first_barrier_s": round(first_barrier_s, 4), "finalize_s": round(time.perf_counter() - t3, 3),
                  "cumulative": rows[:25]}), flush=True)
