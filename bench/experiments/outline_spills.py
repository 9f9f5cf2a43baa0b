"""Spills of NVSHMEM's out-of-line objects: ptxas -v on outline.object_ptx at the 64-register cap and
uncapped (255), NVSHMEM 3.8.0 sm_90 bitcode, sm_90a, light optimisation (the default)."""
import re, subprocess, tempfile, os
from nvshmem_dsl.linker import outline
for name in ["nvshmem_broadcastmem", "nvshmem_int_sum_reduce", "nvshmemx_int_sum_reduce_block", "nvshmem_barrier_all"]:
    ptx = outline.object_ptx([name], 90, "sm_90a", "+ptx85")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "o.ptx"); open(src, "w").write(ptx)
        for cap in (64, 255):
            r = subprocess.run([outline.ptxas(), "-c", "-arch=sm_90a", "-O3", f"-maxrregcount={cap}", "-v", src,
                                "-o", os.path.join(d, "o.cubin")], capture_output=True, text=True)
            lines = r.stderr.splitlines()
            for i, l in enumerate(lines):
                if re.search(rf"Function properties for {name}$", l):
                    print(f"{name:32s} cap {cap:3d}: {lines[i + 1].strip()}")
