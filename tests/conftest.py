import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the codegen package lives at the repo root


def _gpu_count() -> int:
    try:
        from cuda.core import system
        return system.get_num_devices() if hasattr(system, "get_num_devices") else system.num_devices
    except Exception:
        return 0


def pytest_collection_modifyitems(config, items):
    if _gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spec():
    from codegen.expand import expand
    from codegen.load import load
    return expand(load())
