"""Library discovery (nvshmem_dsl._libs): real wheel, fake trees, arch choice, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvshmem_dsl import _libs
from nvshmem_dsl.errors import NvshmemError, NvshmemNotFoundError

PER_ARCH = (70, 80, 89, 90, 100)
VERSION_H = """#pragma once
#define NVSHMEM_VENDOR_MAJOR_VERSION {0}
#define NVSHMEM_VENDOR_MINOR_VERSION {1}
#define NVSHMEM_VENDOR_PATCH_VERSION {2}
"""


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    monkeypatch.delenv("NVSHMEM_HOME", raising=False)
    _libs.clear_cache()
    yield
    _libs.clear_cache()


def make_tree(root: Path, *, layout: str, version=(3, 8, 0), lib="lib") -> Path:
    libdir = root / lib
    libdir.mkdir(parents=True)
    (libdir / "libnvshmem_host.so.3").write_bytes(b"")
    for name in ("mpi", "uid", "pmix"):
        (libdir / f"nvshmem_bootstrap_{name}.so.3").write_bytes(b"")
    if layout == "per-arch":
        for arch in PER_ARCH:
            (libdir / f"libnvshmem_device_sm_{arch}.bc").write_bytes(b"")
    elif layout == "single":
        (libdir / "libnvshmem_device.bc").write_bytes(b"")
    if version is not None:
        (root / "include" / "non_abi").mkdir(parents=True)
        (root / "include" / "nvshmem.h").write_text("")
        (root / "include" / "non_abi" / "nvshmem_version.h").write_text(VERSION_H.format(*version))
    return root


# --------------------------------------------------------------------------- the real wheel

def _wheel_installed() -> bool:
    from importlib import metadata

    for dist in ("nvidia-nvshmem-cu12", "nvidia-nvshmem-cu13"):
        try:
            metadata.distribution(dist)
            return True
        except metadata.PackageNotFoundError:
            pass
    return False


wheel_present = _wheel_installed()


@pytest.mark.skipif(not wheel_present, reason="nvidia-nvshmem wheel not installed")
def test_real_wheel_found():
    inst = _libs.installation()
    assert inst.source.startswith("wheel nvidia-nvshmem-cu1")
    assert inst.host_library.name == "libnvshmem_host.so.3" and inst.host_library.is_file()
    assert inst.host_library == _libs.host_library_path()
    assert inst.version is not None and inst.version >= (3, 4, 0)
    assert _libs.nvshmem_version() == inst.version
    assert inst.layout in ("per-arch", "single")
    assert {"mpi", "uid"} <= set(inst.bootstrap_plugins)
    assert _libs.bootstrap_plugin_dir() == inst.lib_dir
    assert _libs.bootstrap_plugin_path("uid").name == "nvshmem_bootstrap_uid.so.3"
    bc = _libs.bitcode_path("sm_90a")
    assert bc.is_file() and bc.suffix == ".bc"
    if inst.version[:2] == (3, 8):
        assert inst.layout == "per-arch"
        assert bc.name == "libnvshmem_device_sm_90.bc"
        assert _libs.bitcode_path(120).name == "libnvshmem_device_sm_100.bc"
    assert _libs.installation() is inst  # cached


def test_real_wheel_version_matches_metadata():
    from importlib import metadata

    for dist in ("nvidia-nvshmem-cu12", "nvidia-nvshmem-cu13"):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        assert "%d.%d.%d" % _libs.nvshmem_version() == ".".join(version.split(".")[:3])
        return
    pytest.skip("no nvidia-nvshmem wheel")


# --------------------------------------------------------------------------- fake trees


def test_nvshmem_home_per_arch_layout(tmp_path, monkeypatch):
    root = make_tree(tmp_path / "nvshmem", layout="per-arch", version=(3, 9, 1))
    monkeypatch.setenv("NVSHMEM_HOME", str(root))
    inst = _libs.installation()
    assert inst.source == "NVSHMEM_HOME"
    assert inst.root == root and inst.lib_dir == root / "lib"
    assert inst.version == (3, 9, 1) and inst.version_string == "3.9.1"
    assert inst.layout == "per-arch"
    assert list(inst.bitcode_archs) == list(PER_ARCH)
    assert inst.bootstrap_dir == root / "lib"
    assert sorted(inst.bootstrap_plugins) == ["mpi", "pmix", "uid"]
    assert _libs.host_library_path() == root / "lib" / "libnvshmem_host.so.3"


@pytest.mark.parametrize(
    "arch, expected",
    [
        (90, 90),
        ("sm_90", 90),
        ("sm_90a", 90),
        ("90a", 90),
        ("compute_90", 90),
        ((9, 0), 90),
        (86, 80),
        ("sm_87", 80),
        (89, 89),
        (80, 80),
        (70, 70),
        (75, 70),
        ("sm_100a", 100),
        (103, 100),
        ("sm_120", 100),
    ],
)
def test_arch_selection_per_arch(tmp_path, monkeypatch, arch, expected):
    root = make_tree(tmp_path / "nv", layout="per-arch")
    monkeypatch.setenv("NVSHMEM_HOME", str(root))
    assert _libs.bitcode_path(arch) == root / "lib" / f"libnvshmem_device_sm_{expected}.bc"


def test_arch_too_old(tmp_path, monkeypatch):
    root = make_tree(tmp_path / "nv", layout="per-arch")
    monkeypatch.setenv("NVSHMEM_HOME", str(root))
    with pytest.raises(NvshmemNotFoundError, match="sm_60"):
        _libs.bitcode_path("sm_60")


@pytest.mark.parametrize("bad", ["sm_9x", "", "gfx90a", -1, 3.5, None, True])
def test_bad_arch(bad):
    with pytest.raises(ValueError):
        _libs.parse_arch(bad)


def test_nvshmem_home_single_layout(tmp_path, monkeypatch):
    root = make_tree(tmp_path / "nv34", layout="single", version=(3, 4, 5), lib="lib64")
    monkeypatch.setenv("NVSHMEM_HOME", str(root))
    inst = _libs.installation()
    assert inst.layout == "single" and inst.lib_dir == root / "lib64"
    assert inst.bitcode_archs == {}
    assert _libs.nvshmem_version() == (3, 4, 5)
    for arch in (70, "sm_80", "sm_90a", 100):
        assert _libs.bitcode_path(arch) == root / "lib64" / "libnvshmem_device.bc"


def test_host_only_tree_has_no_bitcode(tmp_path, monkeypatch):
    root = make_tree(tmp_path / "rt", layout="none", version=None)
    monkeypatch.setenv("NVSHMEM_HOME", str(root))
    inst = _libs.installation()
    assert inst.layout == "none" and inst.version is None and inst.include_dir is None
    with pytest.raises(NvshmemNotFoundError, match="no device bitcode"):
        _libs.bitcode_path(90)
    with pytest.raises(NvshmemNotFoundError, match="version"):
        _libs.nvshmem_version()
    with pytest.raises(NvshmemNotFoundError, match="shmem"):
        _libs.bootstrap_plugin_path("shmem")


def test_fake_wheel_found_on_sys_path(tmp_path, monkeypatch):
    site = tmp_path / "site"
    make_tree(site / "nvidia" / "nvshmem", layout="per-arch", version=(3, 8, 0))
    monkeypatch.setattr(_libs, "_wheel_search_dirs", lambda: [tmp_path / "empty", site])
    inst = _libs.installation()
    assert inst.root == site / "nvidia" / "nvshmem"
    assert inst.source == "wheel"  # no distribution metadata for the fake one
    assert inst.include_dir == site / "nvidia" / "nvshmem" / "include"


def test_invalid_home_falls_back_to_wheel(tmp_path, monkeypatch, caplog):
    site = tmp_path / "site"
    make_tree(site / "nvidia" / "nvshmem", layout="single")
    monkeypatch.setattr(_libs, "_wheel_search_dirs", lambda: [site])
    monkeypatch.setenv("NVSHMEM_HOME", str(tmp_path / "nowhere"))
    assert _libs.installation().root == site / "nvidia" / "nvshmem"
    assert "NVSHMEM_HOME" in caplog.text


def test_pathfinder_system_layout(tmp_path, monkeypatch):
    prefix = make_tree(tmp_path / "conda", layout="per-arch")
    monkeypatch.setattr(_libs, "_wheel_search_dirs", lambda: [])
    monkeypatch.setattr(_libs, "_pathfinder_include_dir", lambda: (prefix / "include", "conda"))
    inst = _libs.installation()
    assert inst.source == "cuda.pathfinder (conda)"
    assert inst.lib_dir == prefix / "lib" and inst.version == (3, 8, 0)


# --------------------------------------------------------------------------- not found


def test_not_found_lists_every_place(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    site = tmp_path / "site-packages"
    monkeypatch.setenv("NVSHMEM_HOME", str(home))
    monkeypatch.setattr(_libs, "_wheel_search_dirs", lambda: [site])
    monkeypatch.setattr(_libs, "_pathfinder_include_dir", lambda: None)
    with pytest.raises(NvshmemNotFoundError) as info:
        _libs.host_library_path()
    text = str(info.value)
    assert isinstance(info.value, NvshmemError)
    assert f"NVSHMEM_HOME={home}" in text and str(home / "lib") in text
    assert str(site) in text and "nvidia-nvshmem-cu12" in text
    assert "cuda.pathfinder" in text
    assert "pip install nvshmem-dsl[cu12]" in text and "set NVSHMEM_HOME" in text
    for call in (_libs.installation, lambda: _libs.bitcode_path(90), _libs.nvshmem_version):
        with pytest.raises(NvshmemNotFoundError):
            call()


def test_not_found_without_home(monkeypatch, tmp_path):
    monkeypatch.setattr(_libs, "_wheel_search_dirs", lambda: [tmp_path])
    monkeypatch.setattr(_libs, "_pathfinder_include_dir", lambda: None)
    with pytest.raises(NvshmemNotFoundError, match=r"\$NVSHMEM_HOME: not set"):
        _libs.installation()


def test_cache_follows_nvshmem_home(tmp_path, monkeypatch):
    a = make_tree(tmp_path / "a", layout="single", version=(3, 4, 0))
    b = make_tree(tmp_path / "b", layout="per-arch", version=(3, 8, 0))
    monkeypatch.setenv("NVSHMEM_HOME", str(a))
    assert _libs.nvshmem_version() == (3, 4, 0)
    monkeypatch.setenv("NVSHMEM_HOME", str(b))
    assert _libs.nvshmem_version() == (3, 8, 0)
