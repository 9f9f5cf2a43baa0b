"""The objects' LLVM step in worker processes (nvshmem_dsl.linker.object_workers): the same PTX as in
the calling process, errors told back, a worker's death reported, the pool's bound, and the
objects of a collective planned with the helpers its IR calls, largest first."""

from __future__ import annotations

import threading

import pytest

from bitcode_available import needs_bitcode
from nvshmem_dsl.linker import calls, object_llvm, object_workers, outline

ADD = """
define i32 @nvshmem_test_add(i32 %a, i32 %b) {
  %c = add i32 %a, %b
  ret i32 %c
}

define internal i32 @twice(i32 %a) {
  %c = shl i32 %a, 1
  ret i32 %c
}

define i32 @nvshmem_test_twice(i32 %a) {
  %c = call i32 @twice(i32 %a)
  ret i32 %c
}
"""


def _request(**kw):
    return {"text": ADD, "names": ["nvshmem_test_add"], "cpu": "sm_90", "features": "+ptx85", **kw}


@pytest.fixture
def workers(monkeypatch):
    """Two workers of a pool of this test's own, ended after it."""
    monkeypatch.setenv(object_workers.ENV, "2")
    pool = object_workers._Pool()
    monkeypatch.setattr(object_workers, "_pool", pool)
    yield pool
    pool.close()


def test_a_worker_emits_what_the_process_emits(workers):
    here = object_llvm.emit(**_request())
    assert ".visible .func  (.param .b32 func_retval0) nvshmem_test_add(" in here
    assert object_workers.emit(**_request()) == here
    assert len(workers._all) == 1 and workers._all[0].proc.poll() is None  # kept for the next object
    assert object_workers.emit(**_request(names=["nvshmem_test_twice"])).count(".visible .func") == 1
    assert len(workers._all) == 1


def test_errors_come_back_as_the_callers_exceptions(workers):
    with pytest.raises(RuntimeError, match=r"NVSHMEM's nvshmem_test_add is i32 \(i32, i32\), the op table says i64"):
        object_workers.emit(**_request(types={"nvshmem_test_add": "i64 (i64, i64)"}))
    with pytest.raises(ValueError, match="opt='o9'"):
        object_workers.emit(**_request(opt="o9"))
    with pytest.raises(RuntimeError, match="expected"):  # LLVM's parser
        object_workers.emit(**_request(text="define i32 @nvshmem_test_add( {"))
    assert object_workers.emit(**_request())  # the worker lives on


def test_a_worker_that_died_is_reported_and_replaced(workers):
    worker = workers.take()
    worker.proc.kill()
    worker.proc.wait()
    with pytest.raises(object_workers.WorkerDied, match=r"object worker \(pid \d+\) ended .* nvshmem_test_add"):
        worker.call(_request())
    workers.give(worker)
    assert not workers._all
    assert object_workers.emit(**_request())


def test_workers_that_cannot_run_leave_the_build_here(workers, monkeypatch):
    """An interpreter whose workers end before answering (here: they exit at once) builds its objects
    itself, and says so once."""
    import subprocess
    import sys

    def spawn(args, **kw):
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"], **kw)

    monkeypatch.setattr("nvshmem_dsl.linker.store_build._spawn", spawn)
    with pytest.warns(RuntimeWarning, match="built in this process, without workers: .*exit status 3"):
        assert object_workers.emit(**_request()) == object_llvm.emit(**_request())
    assert workers._failed and not workers._all
    assert object_workers.emit(**_request())  # no worker tried again, no second warning


def test_a_worker_dying_on_an_object_after_others_is_an_error(workers, monkeypatch):
    """A worker that built objects and dies on the next is not retried here (that object might
    bring this process down too): the build fails, naming it."""
    assert object_workers.emit(**_request())

    def die(self, request):
        raise object_workers.WorkerDied("an NVSHMEM object worker ended building nvshmem_test_add")

    monkeypatch.setattr(object_workers._Worker, "call", die)
    with pytest.raises(object_workers.WorkerDied, match="nvshmem_test_add"):
        object_workers.emit(**_request())


def test_no_more_workers_than_asked(workers):
    results, errors = [], []

    def one():
        try:
            results.append(object_workers.emit(**_request()))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 6 and len(set(results)) == 1
    assert 1 <= len(workers._all) <= 2


def test_idle_workers_end(workers, monkeypatch):
    """A process does not keep its workers (100-150 MiB each) once it builds no more objects."""
    monkeypatch.setattr(object_workers, "IDLE_SECONDS", 0.2)
    assert object_workers.emit(**_request())
    proc = workers._all[0].proc
    proc.wait(timeout=10)
    assert not workers._all and proc.returncode == 0
    assert object_workers.emit(**_request())  # a new one starts when needed
    assert len(workers._all) == 1


def test_zero_workers_builds_here(monkeypatch):
    monkeypatch.setenv(object_workers.ENV, "0")
    pool = object_workers._Pool()
    monkeypatch.setattr(object_workers, "_pool", pool)
    assert object_workers.emit(**_request())
    assert not pool._all


@pytest.mark.parametrize("raw", ["two", "-1"])
def test_a_bad_worker_count_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv(object_workers.ENV, raw)
    with pytest.raises(ValueError, match=f"{object_workers.ENV}='{raw}'"):
        object_workers.count()


def test_default_count(monkeypatch):
    monkeypatch.delenv(object_workers.ENV, raising=False)
    for cpus, n in ((1, 0), (2, 2), (16, object_workers.DEFAULT_MAX)):
        monkeypatch.setattr("nvshmem_dsl.linker.store_build._cpus", lambda c=cpus: c)
        assert object_workers.count() == n


@needs_bitcode
def test_a_collectives_objects_start_with_its_helpers_largest_first(monkeypatch, tmp_path):
    monkeypatch.setenv("NVSHMEM_DSL_HELPERS", "build")  # the helpers are objects built here
    """The helpers a broadcast's IR calls are built with it, not after its PTX (its put_signal
    helper's IR is larger than its own); the largest IR first; what is only predicted is built but
    not linked."""
    started = []

    def build(name, arch, bc_path, cpu, features, cap, path, text=None, on_calls=None, opt=None):
        started.append((name, len(text)))
        assert text == outline.object_ir([name], arch)
        # as if the broadcast's PTX called all the helpers its IR calls but the first
        called = sorted(calls.predicted_helper_calls(text))[1:] if name == "nvshmem_float_broadcast" else ()
        path.with_suffix(".calls").write_text("".join(f"{c}\n" for c in called))
        path.write_bytes(b"")
        return 1

    monkeypatch.setattr(outline, "_build", build)
    monkeypatch.setattr(outline, "_objects_dir", lambda: tmp_path)
    monkeypatch.setattr(outline.store_build, "_cpus", lambda: 1)  # builds start in the order submitted
    paths = outline.objects(["nvshmem_float_broadcast"], 90, "sm_90a", "+ptx85")
    names = [n for n, _ in started]
    helpers = calls.predicted_helper_calls(outline.object_ir(["nvshmem_float_broadcast"], 90))
    assert "nvshmem_float_broadcast" in names and helpers and helpers <= set(names)
    sizes = [size for _, size in started]  # all planned at once: what the helpers call is predicted too
    assert sizes == sorted(sizes, reverse=True)
    assert {p.name.split("-")[0] for p in paths} == {"nvshmem_float_broadcast", *sorted(helpers)[1:]}


@needs_bitcode
def test_a_predicted_helper_nvshmem_lacks_is_not_built(monkeypatch, tmp_path):
    """Predictions only start builds early: one that names no NVSHMEM function is dropped, while a
    function the kernel asks for that NVSHMEM lacks is an error."""
    monkeypatch.setenv("NVSHMEM_DSL_HELPERS", "build")  # (helpers from NVIDIA's object are not predicted)
    built = []

    def build(name, arch, bc_path, cpu, features, cap, path, text=None, on_calls=None, opt=None):
        built.append(name)
        path.with_suffix(".calls").write_text("")
        path.write_bytes(b"")
        return 1

    predicted = calls.predicted_helper_calls
    monkeypatch.setattr(calls, "predicted_helper_calls", lambda text: predicted(text) | {"_Z9nvshmemi_nonev"})
    monkeypatch.setattr(outline, "_build", build)
    monkeypatch.setattr(outline, "_objects_dir", lambda: tmp_path)
    paths = outline.objects(["nvshmem_barrier_all"], 90, "sm_90a", "+ptx85")
    assert "nvshmem_barrier_all" in built and "_Z9nvshmemi_nonev" not in built
    assert [p.name.split("-")[0] for p in paths] == ["nvshmem_barrier_all"]
    with pytest.raises(KeyError, match="_Z9nvshmemi_nonev"):
        outline.objects(["_Z9nvshmemi_nonev"], 90, "sm_90a", "+ptx85")
