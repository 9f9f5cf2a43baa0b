"""What NVSHMEM4Py's own tests assume of the machine, given to the ranks that tests/gpu/nvshmem4py_tests.py
starts (this folder on their PYTHONPATH) and to no other process:

* ``cuda.core.system.num_devices``: the tests read it (init_test.py, test_ring_allreduce.py); the
  cuda.core installed may have only ``get_num_devices()``. Answered by that function.
* ``NV4PY_SHARE_GPU=1`` (the runner sets it where the ranks outnumber the GPUs, which MPS then
  shares): the tests' ``utils`` give each rank ``Device(node-local rank)``; here ``Device(i)`` is
  ``Device(i % GPUs)``, so that 2 ranks run on one GPU as this project's own tests do.
* ``NV4PY_USE_OUR_NVSHMEM=1`` (the runner's ``--package nvshmem4py``: NVSHMEM4Py itself runs its
  tests): NVSHMEM4Py gets nvshmem_dsl's NVSHMEM, host library and headers, as the benchmarks give
  it (bench/_nv4py.py ``use_our_nvshmem``), so that both packages run the tests on one NVSHMEM.

A sitecustomize found after this one on the path still runs.
"""
import importlib.machinery
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def shared_device_id(device_id, count):
    """The GPU a rank asking for ``device_id`` gets when ``count`` GPUs are shared by the ranks."""
    if device_id is None or count < 1:
        return device_id
    return int(device_id) % count


def _patch_cuda_core():
    try:
        import cuda.core as core
        from cuda.core import system
    except ImportError:
        return
    if not hasattr(system, "num_devices") and hasattr(system, "get_num_devices"):
        def __getattr__(name, _prior=getattr(system, "__getattr__", None)):
            if name == "num_devices":
                return system.get_num_devices()
            if _prior is not None:
                return _prior(name)
            raise AttributeError(f"module {system.__name__!r} has no attribute {name!r}")
        system.__getattr__ = __getattr__
    if os.environ.get("NV4PY_SHARE_GPU") == "1":
        base = core.Device

        class SameDevices(type(base)):
            def __instancecheck__(cls, obj):  # what Device() returns is a cuda.core Device
                return isinstance(obj, base)

        class Device(base, metaclass=SameDevices):
            def __new__(cls, device_id=None):
                count = system.get_num_devices() if hasattr(system, "get_num_devices") else system.num_devices
                return base.__new__(base, shared_device_id(device_id, count))

        Device.__doc__ = base.__doc__
        core.Device = Device


def _use_our_nvshmem():
    if os.environ.get("NV4PY_USE_OUR_NVSHMEM") != "1":
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "bench"))
    try:
        import _nv4py
    finally:
        del sys.path[0]
    _nv4py.use_our_nvshmem()


def _chain():
    """Run the next sitecustomize on the path, if any (this module took its name)."""
    path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_patch_cuda_core()
_use_our_nvshmem()
_chain()
