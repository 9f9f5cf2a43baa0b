"""Run an NVSHMEM4Py-style program unchanged and report what it moved (tests/gpu/test_core_gpu.py).

    python -m nvshmem_dsl.run --gpus 0,1 tests/gpu/nvshmem4py_probe.py PROGRAM NAME[,NAME...]

Each int32 symmetric array or tensor that nvshmem_dsl.core allocates is filled, before the
program sees it, with ``1000 * (my_pe + 1) + k`` (k: the allocation's number), so that every
value is known and different.  When the program calls ``finalize``, the device is synchronized,
every PE meets in a barrier (the programs end without one: a peer's put may not have landed yet),
and the first element of each named global of the program is printed as one JSON line
``PROBE {"pe": ..., "NAME": value, ...}``; then the program's finalize runs.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

import numpy as np

import nvshmem_dsl
import nvshmem_dsl.core as core
from nvshmem_dsl.host import _arrays, _cuda, _state
from nvshmem_dsl.core import _tracking
from nvshmem_dsl.core.interop import _common


def main() -> None:
    program, names = sys.argv[1], sys.argv[2].split(",")
    counter = [0]
    new_array = _common.new_array

    def patterned(*args, **kwargs):
        array, entry = new_array(*args, **kwargs)
        k = counter[0]
        counter[0] += 1
        if _arrays.describe(array).dtype == "int32":
            values = np.full(entry.nbytes // 4, 1000 * (_state.STATE.my_pe + 1) + k, np.int32)
            _cuda.memcpy_htod(entry.ptr, values.tobytes())
        return array, entry

    finalize = core.finalize

    def reporting_finalize(*args, **kwargs):
        # every PE's puts have landed (the seeds end without a barrier) before any PE reads
        _cuda.synchronize()
        nvshmem_dsl.barrier_all()
        _cuda.synchronize()
        scope = sys._getframe(1).f_globals
        report = {"pe": _state.STATE.my_pe}
        for name in names:
            entry = _tracking.entry_of(scope[name], "probe", name)
            report[name] = int(np.frombuffer(_cuda.memcpy_dtoh(entry.ptr, 4), np.int32)[0])
        print("PROBE " + json.dumps(report), flush=True)
        return finalize(*args, **kwargs)

    _common.new_array = patterned
    core.finalize = reporting_finalize
    sys.argv = [program, *sys.argv[3:]]
    sys.path[0] = os.path.dirname(os.path.abspath(program))
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()
