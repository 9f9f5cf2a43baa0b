"""The cache directory (nvshmem_dsl.linker.cache): its entries, their last use, pruning, the
automatic pruning when a piece store is built, and ``python -m nvshmem_dsl cache``.  CPU only,
on a private cache folder of made-up files named as the linker names them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from nvshmem_dsl.linker import cache, link, store, store_file

DAY = 86400.0


def _file(path, size=10, age_days=0.0):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    when = time.time() - age_days * DAY
    os.utime(path, (when, when))
    return path


@pytest.fixture
def root(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(d))
    monkeypatch.delenv(cache.DAYS_ENV, raising=False)
    return d


def _fill(root):
    """One entry of each kind: an old piece store (with its lock), a fresh one, an old object
    (cubin, calls, lock), an old libNVVM copy, an old CuTe kernel bitcode, an old lock alone, an
    old temporary file."""
    _file(root / "libnvshmem_device_sm_90-aaaaaaaaaaaaaaaaaaaaaaaa.pieces", 1000, age_days=40)
    _file(root / "libnvshmem_device_sm_90-aaaaaaaaaaaaaaaaaaaaaaaa.lock", 0, age_days=45)
    _file(root / "libnvshmem_device_sm_90-bbbbbbbbbbbbbbbbbbbbbbbb.pieces", 2000, age_days=1)
    _file(root / "libnvshmem_device_sm_90-bbbbbbbbbbbbbbbbbbbbbbbb.lock", 0, age_days=50)  # the lock is as old as the first build
    for ending, size in ((".cubin", 300), (".calls", 5), (".lock", 0)):
        _file(root / "outline" / f"nvshmem_int_broadcast-sm_90-r64-cccccccccccccccccccccccc{ending}", size, age_days=31)
    _file(root / "libnvshmem_device_sm_90-dddddddddddddddddddddddd-vector-r5.nvvm.bc", 500, age_days=60)
    _file(root / "libnvshmem_device_sm_90-dddddddddddddddddddddddd-vector-r5.nvvm.lock", 0, age_days=60)
    _file(root / "kernels" / "libnvshmem_device_sm_90-eeeeeeeeeeeeeeeeeeeeeeee.nvvm.bc", 50, age_days=35)
    _file(root / "libnvshmem_device_sm_90-ffffffffffffffffffffffff.lock", 0, age_days=40)
    _file(root / "kernels" / "libnvshmem_device_sm_90-eeeeeeeeeeeeeeeeeeeeeeee.nvvm.bc12345.tmp", 7, age_days=40)


def test_entries_group_an_entrys_files_by_kind(root):
    _fill(root)
    by_kind = {}
    for e in cache.entries():
        by_kind.setdefault(e.kind, []).append(e)
    assert sorted(by_kind) == sorted(["piece stores", "out-of-line objects", "libNVVM bitcode (CuTe)",
                                      "CuTe kernels' bitcode", "build leftovers"])
    stores = {e.paths[0].name: e for e in by_kind["piece stores"]}
    fresh = stores["libnvshmem_device_sm_90-bbbbbbbbbbbbbbbbbbbbbbbb.lock"]
    assert [p.name for p in fresh.paths] == ["libnvshmem_device_sm_90-bbbbbbbbbbbbbbbbbbbbbbbb.lock", "libnvshmem_device_sm_90-bbbbbbbbbbbbbbbbbbbbbbbb.pieces"]
    assert fresh.size == 2000
    assert time.time() - fresh.last_used == pytest.approx(DAY, abs=60)  # the newest of its files
    obj, = by_kind["out-of-line objects"]
    assert len(obj.paths) == 3 and obj.size == 305
    assert len(by_kind["build leftovers"]) == 2  # the lock alone, the temporary file
    summary = cache.summary()
    assert summary["piece stores"][:2] == (2, 3000)


def test_prune_removes_what_is_unused_for_so_many_days(root):
    _fill(root)
    gone = cache.prune(30, dry_run=True)
    assert len(gone) == 6 and all(p.exists() for e in gone for p in e.paths)
    gone = cache.prune(30)
    assert len(gone) == 6
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert left == ["libnvshmem_device_sm_90-bbbbbbbbbbbbbbbbbbbbbbbb.lock", "libnvshmem_device_sm_90-bbbbbbbbbbbbbbbbbbbbbbbb.pieces"]
    assert cache.prune(0) and not [p for p in root.rglob("*") if p.is_file()]


def test_files_the_cache_did_not_name_are_left_alone(root):
    """A cache directory set to a folder of other files loses none of them: only names with the
    digest the cache gives its files count."""
    foreign = [_file(root / "notes.txt", age_days=400), _file(root / "build.lock", age_days=400),
               _file(root / "outline" / "mine.cubin", age_days=400),
               _file(root / "kernels" / "attention-v2.nvvm.bc", age_days=400),
               _file(root / "src" / "x-0123456789abcdef0123.cubin", age_days=400)]
    _fill(root)
    assert not any(p in e.paths for e in cache.entries() for p in foreign)
    cache.prune(0)
    assert all(p.exists() for p in foreign)
    assert not cache.entries()


def test_prune_skips_an_entry_whose_build_holds_its_lock(root):
    fcntl = pytest.importorskip("fcntl")
    lock = _file(root / "outline" / "nvshmem_int_broadcast-sm_90-r64-cccccccccccccccccccccccc.lock", 0, age_days=90)
    with open(lock, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert cache.prune(0) == []
        assert lock.exists()
    assert len(cache.prune(0)) == 1 and not lock.exists()


def test_using_an_entry_renews_its_last_use(root):
    path = _file(root / "outline" / "x-sm_90-r64-cccccccccccccccccccccccc.cubin", age_days=40)
    store_file._used.discard(str(path))
    store_file.mark_used(path)
    assert time.time() - path.stat().st_mtime < 60
    assert cache.prune(30) == []


def test_auto_days(monkeypatch):
    monkeypatch.delenv(cache.DAYS_ENV, raising=False)
    assert cache.auto_days() == cache.DEFAULT_DAYS
    monkeypatch.setenv(cache.DAYS_ENV, "7.5")
    assert cache.auto_days() == 7.5
    monkeypatch.setenv(cache.DAYS_ENV, "never")
    assert cache.auto_days() is None
    for bad in ("0", "-1", "soon"):
        monkeypatch.setenv(cache.DAYS_ENV, bad)
        with pytest.raises(ValueError, match=cache.DAYS_ENV):
            cache.auto_days()


def test_a_new_piece_store_prunes_the_old_entries(root, monkeypatch):
    """The automatic pruning runs where a store is missing (a new NVSHMEM or llvmlite), before its
    build; with NVSHMEM_DSL_CACHE_DAYS=never it does not."""
    _fill(root)

    class Built(Exception):
        pass

    def no_build(*args):
        raise Built

    monkeypatch.setattr(store, "_start_builder", no_build)
    monkeypatch.setenv(cache.DAYS_ENV, "never")
    with pytest.raises(Built):
        store._open_or_build(root / "none.bc", 90, root / "libnvshmem_device_sm_90-gggggggggggggggggggggggg.pieces", "gggg")
    assert len(cache.entries()) == 7
    monkeypatch.setenv(cache.DAYS_ENV, "30")
    with pytest.raises(Built):
        store._open_or_build(root / "none.bc", 90, root / "libnvshmem_device_sm_90-gggggggggggggggggggggggg.pieces", "gggg")
    assert [e.kind for e in cache.entries()] == ["piece stores"]


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "nvshmem_dsl", "cache", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_cache_command_reports_prunes_and_clears(root):
    _fill(root)
    done = _cli()
    assert done.returncode == 0, done.stderr
    assert str(root) in done.stdout and "entries unused for 30 days" in done.stdout
    assert "piece stores:     2 entries" in done.stdout and "total:     7 entries" in done.stdout
    done = _cli("--prune", "30", "--dry-run")
    assert "would remove 6 entries" in done.stdout and len(cache.entries()) == 7
    done = _cli("--prune", "30")
    assert "removed 6 entries" in done.stdout and "total:     1 entries" in done.stdout
    done = _cli("--clear")
    assert "removed 1 entries" in done.stdout and not cache.entries()


def test_cache_command_rejects_bad_arguments(root):
    done = _cli("--prune", "-2")
    assert done.returncode == 2 and "--prune -2: give a number of days >= 0" in done.stderr
    done = subprocess.run([sys.executable, "-m", "nvshmem_dsl", "info", "--clear"], capture_output=True, text=True)
    assert done.returncode == 2 and "go with the cache command" in done.stderr


def test_cache_command_names_a_malformed_days_variable(root):
    done = _cli(env={cache.DAYS_ENV: "soon"})
    assert done.returncode == 2 and cache.DAYS_ENV in done.stderr and "Traceback" not in done.stderr


def test_the_catalogue_knows_the_names_the_linker_gives(root):
    """cache.py lists the endings of the cache's files (it reads every entry, not one writer's): each
    name the writers make (a piece store, an object and its calls, a libNVVM copy and its "same"
    marker, a CuTe kernel's bitcode and calls, NVIDIA's compiled helpers and their answers), with its lock, is
    one entry of the right kind."""
    from pathlib import Path

    llvm = pytest.importorskip("llvmlite.binding")
    from nvshmem_dsl.linker import nvvm, outline

    bc = root.parent / "libnvshmem_device_sm_90.bc"  # nothing for libNVVM to change: a "same" marker
    bc.write_bytes(llvm.parse_assembly('target triple = "nvptx64-nvidia-cuda"\n'
                                       "define i32 @nvshmem_my_pe() {\n  ret i32 0\n}\n").as_bitcode())
    made = {"piece stores": [store_file._store_file(bc, store_file._cache_key(bc))]}
    if link.ptxas() is not None:
        obj = outline._object_path("nvshmem_int_p", bc, "sm_90a", "+ptx85", 64)
        made["out-of-line objects"] = [obj, obj.with_suffix(".calls")]
    assert nvvm.nvvm_bitcode(bc) == bc
    from nvshmem_dsl.linker import helper_archive

    member = helper_archive._member_file(b"NVIDIA's helpers")
    answers = helper_archive._answers_file(member, 90)
    made["NVIDIA's compiled helpers"] = [member, answers, answers.with_suffix(".lock")]
    made["libNVVM bitcode (CuTe)"] = [p for p in root.iterdir() if p.name.endswith(".same")]
    for p in made["libNVVM bitcode (CuTe)"] + list(root.glob("*.lock")):
        p.unlink()  # made again below, with the others
    kernel = Path(nvvm.kernel_bitcode_placeholder(bc, helpers_out=True))
    made["CuTe kernels' bitcode"] = [root / store_file.KERNELS_FOLDER / kernel.name,
                                     nvvm._calls_path(root / store_file.KERNELS_FOLDER / kernel.name)]
    for paths in made.values():
        for p in paths + [paths[0].with_suffix(".lock")]:
            _file(p)
    kinds = {}
    for e in cache.entries(root):
        kinds.setdefault(e.kind, []).append(sorted(p.name for p in e.paths))
    assert set(kinds) == set(made), kinds
    for kind, paths in made.items():
        assert kinds[kind] == [sorted([p.name for p in paths] + [paths[0].with_suffix(".lock").name])], kind
