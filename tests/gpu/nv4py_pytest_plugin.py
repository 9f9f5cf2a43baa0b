"""pytest plugin for NVSHMEM4Py's own tests run through our alias (tests/gpu/nvshmem4py_tests.py).

Loaded with ``-p nv4py_pytest_plugin`` in every rank of a ``mpirun -n 2 python -m
nvshmem_dsl.core.alias -m pytest ...`` or ``python -m nvshmem_dsl.run --as-nvshmem4py -n 2 -m
pytest ...`` job:

* registers the ``mpi`` mark, and ``--with-mpi`` when pytest-mpi is not installed (NVIDIA's
  run_tests.sh passes it; without the plugin pytest would stop at the unknown option);
* writes one JSON line per test case and phase to ``$NV4PY_CASE_LOG.rank<R>`` as the case ends
  (and a ``start`` line as it begins), so that a job killed by its timeout still says which cases
  passed and which one was running.
"""

from __future__ import annotations

import importlib.util
import json
import os

_LOG_VAR = "NV4PY_CASE_LOG"
#: The rank: our launcher's, else the MPI launcher's (mpirun).
_RANK_VARS = ("NVSHMEM_DSL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


def pytest_addoption(parser):
    if importlib.util.find_spec("pytest_mpi") is None:
        parser.addoption("--with-mpi", action="store_true", default=False,
                         help="accepted for NVIDIA's run_tests.sh (pytest-mpi is not installed)")


def pytest_configure(config):
    config.addinivalue_line("markers", "mpi: a test NVSHMEM4Py runs under MPI (pytest-mpi's mark)")


def _write(record: dict) -> None:
    path = os.environ.get(_LOG_VAR)
    if not path:
        return
    rank = next((os.environ[v] for v in _RANK_VARS if v in os.environ), "0")
    with open(f"{path}.rank{rank}", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid, location):  # noqa: ARG001
    _write({"case": nodeid, "phase": "start"})


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _write({"case": report.nodeid, "phase": report.when, "outcome": report.outcome,
                "seconds": round(report.duration, 3),
                "message": str(report.longrepr)[-2000:] if report.outcome == "failed" else
                (str(report.longrepr[-1]) if report.outcome == "skipped" and isinstance(report.longrepr, tuple)
                 else "")})


def pytest_collectreport(report):
    if report.outcome == "failed":
        _write({"case": report.nodeid or "<collection>", "phase": "collect", "outcome": "failed",
                "seconds": 0.0, "message": str(report.longrepr)[-2000:]})
