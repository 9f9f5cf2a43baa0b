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


@pytest.fixture(autouse=True)
def _gpu_hang_guard(request):
    """A GPU test that hangs (a peer that never arrives) must not hang the suite: after
    NVSHMEM_DSL_TEST_TIMEOUT seconds (default 120) the process dumps its stacks and exits."""
    if "gpu" not in request.keywords:
        yield
        return
    import faulthandler
    faulthandler.dump_traceback_later(float(os.environ.get("NVSHMEM_DSL_TEST_TIMEOUT", "120")), exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """`--junitxml=...%r...` gets the PE's rank, so every PE of a GPU run writes its own file."""
    path = getattr(config.option, "xmlpath", None)
    if path and "%r" in path:
        rank = next((os.environ[v] for v in ("NVSHMEM_DSL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK")
                     if v in os.environ), "0")
        config.option.xmlpath = path.replace("%r", rank)


@pytest.fixture
def torch_standin(monkeypatch):
    """A stand-in ``torch`` (no GPU here) for the kernels' launch tests: ``torch.cuda.stream(s)``
    makes ``s`` the current stream, ``ExternalStream(handle)`` keeps its handle, the default stream
    is "default". Yields a list whose item 0 is the current stream ("legacy" outside any)."""
    import contextlib
    import types

    from nvshmem_dsl.kernels import _views

    current = ["legacy"]

    @contextlib.contextmanager
    def stream(s):
        before, current[0] = current[0], s
        try:
            yield
        finally:
            current[0] = before

    class ExternalStream:
        def __init__(self, handle):
            self.handle = handle

    cuda = types.SimpleNamespace(ExternalStream=ExternalStream, default_stream=lambda: "default", stream=stream)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    _views._external_stream.cache_clear()
    try:
        yield current
    finally:
        _views._external_stream.cache_clear()
