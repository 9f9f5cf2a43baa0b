"""Finding the NVSHMEM installation: host library, bootstrap plugins, device bitcode.

Nothing here loads or calls NVSHMEM; it only looks at files.  Search order:

1. ``$NVSHMEM_HOME`` (``lib``/``lib64`` below it, or the directory itself);
2. the ``nvidia-nvshmem-cu12`` / ``nvidia-nvshmem-cu13`` wheels, i.e.
   ``nvidia/nvshmem`` below each ``sys.path`` entry and site-packages directory;
3. whatever ``cuda.pathfinder`` finds for the NVSHMEM headers (conda
   environments, ``/usr/include/nvshmem_<cuda major>`` system packages), with the
   library directory that goes with it.

Device bitcode comes in two layouts: NVSHMEM >= 3.5 ships one file per
architecture, ``libnvshmem_device_sm_<NN>.bc`` ("per-arch"), older releases one
``libnvshmem_device.bc`` ("single").
"""

from __future__ import annotations

import functools
import logging
import os
import re
import site
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .errors import NvshmemNotFoundError

__all__ = [
    "Installation",
    "installation",
    "host_library_path",
    "bootstrap_plugin_dir",
    "bootstrap_plugin_path",
    "bitcode_path",
    "is_nvshmem_bitcode",
    "nvshmem_version",
    "parse_arch",
    "clear_cache",
]

_log = logging.getLogger(__name__)

ENV_HOME = "NVSHMEM_HOME"
HOST_LIBRARY_NAMES = ("libnvshmem_host.so.3", "libnvshmem_host.so")
WHEEL_DISTRIBUTIONS = ("nvidia-nvshmem-cu12", "nvidia-nvshmem-cu13")
WHEEL_SUBDIR = ("nvidia", "nvshmem")
SINGLE_BITCODE = "libnvshmem_device.bc"
_PER_ARCH_BITCODE = re.compile(r"^libnvshmem_device_sm_(\d+)\.bc$")
_BOOTSTRAP_PLUGIN = re.compile(r"^nvshmem_bootstrap_(\w+)\.so(\.\d+)*$")
_VERSION_HEADER = Path("non_abi", "nvshmem_version.h")
_FIX_HINT = (
    "To fix: `pip install nvshmem-dsl[cu12]` (or `[cu13]`), which brings the "
    "nvidia-nvshmem wheel, or set NVSHMEM_HOME to an NVSHMEM installation "
    "(the directory holding lib/libnvshmem_host.so.3)."
)


@dataclass(frozen=True)
class Installation:
    """One NVSHMEM installation found on this machine."""

    root: Path  #: the installation's top directory (the one with lib/ and include/)
    source: str  #: how it was found, e.g. "NVSHMEM_HOME" or "wheel nvidia-nvshmem-cu12"
    version: tuple[int, int, int] | None  #: (major, minor, patch), None when unknown
    host_library: Path  #: libnvshmem_host.so.3
    lib_dir: Path  #: the directory of the host library and of the plugins
    include_dir: Path | None  #: the headers, when installed
    bootstrap_plugins: dict[str, Path] = field(default_factory=dict)  #: "mpi" -> nvshmem_bootstrap_mpi.so.3
    bitcode_files: tuple[Path, ...] = ()  #: every device bitcode file found
    layout: str = "none"  #: "per-arch", "single" or "none" (no bitcode)

    @property
    def version_string(self) -> str | None:
        return None if self.version is None else "%d.%d.%d" % self.version

    @property
    def bootstrap_dir(self) -> Path:
        """Where the ``nvshmem_bootstrap_*.so.3`` plugins live."""
        return self.lib_dir

    @property
    def bitcode_archs(self) -> dict[int, Path]:
        """Per-arch layout: {90: .../libnvshmem_device_sm_90.bc, ...}; empty otherwise."""
        out = {}
        for path in self.bitcode_files:
            m = _PER_ARCH_BITCODE.match(path.name)
            if m:
                out[int(m.group(1))] = path
        return dict(sorted(out.items()))

    def bitcode_for(self, arch: int | str | tuple[int, int]) -> Path:
        """The device bitcode to link for compute capability ``arch``."""
        wanted = parse_arch(arch)
        if self.layout == "per-arch":
            archs = self.bitcode_archs
            usable = [a for a in archs if a <= wanted]
            if not usable:
                raise NvshmemNotFoundError(
                    f"NVSHMEM {self.version_string or '(unknown version)'} at {self.lib_dir} has no "
                    f"device bitcode usable for sm_{wanted}: it ships "
                    f"{', '.join('sm_%d' % a for a in archs)} (a file serves its own and newer archs)."
                )
            return archs[max(usable)]
        if self.layout == "single":
            return self.bitcode_files[0]
        raise NvshmemNotFoundError(
            f"NVSHMEM at {self.lib_dir} has no device bitcode (neither "
            f"libnvshmem_device_sm_<NN>.bc nor {SINGLE_BITCODE}); only host-side use is possible. "
            + _FIX_HINT
        )


# --------------------------------------------------------------------------- arch


def parse_arch(arch: int | str | tuple[int, int]) -> int:
    """90, "90", "sm_90", "sm_90a", "90a", "compute_90", (9, 0) -> 90."""
    if isinstance(arch, bool):
        raise ValueError(f"not a GPU architecture: {arch!r}")
    if isinstance(arch, int):
        value = arch
    elif isinstance(arch, tuple) and len(arch) == 2 and all(isinstance(x, int) for x in arch):
        value = arch[0] * 10 + arch[1]
    elif isinstance(arch, str):
        m = re.fullmatch(r"(?:sm_?|compute_?)?(\d+)[af]?", arch.strip().lower())
        if not m:
            raise ValueError(f"not a GPU architecture: {arch!r} (expected e.g. 90, 'sm_90' or 'sm_90a')")
        value = int(m.group(1))
    else:
        raise ValueError(f"not a GPU architecture: {arch!r}")
    if value < 10:
        raise ValueError(f"not a GPU architecture: {arch!r}")
    return value


# --------------------------------------------------------------------------- search


def _host_library_in(lib_dir: Path) -> Path | None:
    for name in HOST_LIBRARY_NAMES:
        candidate = lib_dir / name
        if candidate.is_file():
            return candidate
    return None


def _wheel_search_dirs() -> list[Path]:
    """sys.path entries and site-packages directories, in import order, no duplicates."""
    dirs: list[str] = list(sys.path)
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some embedded/virtualenv interpreters
        pass
    user_site = getattr(site, "USER_SITE", None)
    if user_site:
        dirs.append(user_site)
    seen, out = set(), []
    for entry in dirs:
        path = Path(entry or os.getcwd())
        key = os.path.normcase(os.path.abspath(path))
        if key not in seen:
            seen.add(key)
            out.append(path)
    return out


def _pathfinder_include_dir() -> tuple[Path, str] | None:
    """The NVSHMEM include directory according to cuda.pathfinder, if it knows one."""
    try:
        from cuda.pathfinder import locate_nvidia_header_directory
    except ImportError:
        return None
    try:
        found = locate_nvidia_header_directory("nvshmem")
    except Exception as exc:  # an unknown name in an old pathfinder, a broken install
        _log.debug("cuda.pathfinder could not look for the NVSHMEM headers: %s", exc)
        return None
    if found is None or not found.abs_path:
        return None
    return Path(found.abs_path), str(found.found_via)


def _lib_dirs_for(root: Path) -> list[Path]:
    return [root / "lib", root / "lib64", root]


def _lib_dirs_for_include(include_dir: Path) -> list[Path]:
    dirs = [include_dir.parent / "lib", include_dir.parent / "lib64"]
    m = re.fullmatch(r"nvshmem_(\d+)", include_dir.name)  # Debian/RPM: /usr/include/nvshmem_12
    if m:
        dirs += sorted(Path("/usr/lib").glob(f"*/nvshmem/{m.group(1)}"))
        dirs += [Path("/usr/lib64/nvshmem", m.group(1)), Path("/usr/lib/nvshmem", m.group(1))]
    return dirs


def _wheel_distribution_for(root: Path) -> tuple[str, str] | None:
    """(distribution name, version) of the nvidia-nvshmem wheel that installed ``root``."""
    from importlib import metadata

    for name in WHEEL_DISTRIBUTIONS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        try:
            where = Path(dist.locate_file(os.path.join(*WHEEL_SUBDIR))).resolve()
        except Exception:
            continue
        if where == root.resolve():
            return name, dist.version
    return None


def _version_from_header(include_dir: Path | None) -> tuple[int, int, int] | None:
    if include_dir is None:
        return None
    header = include_dir / _VERSION_HEADER
    try:
        text = header.read_text(errors="replace")
    except OSError:
        return None
    parts = []
    for which in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"#define\s+NVSHMEM_VENDOR_{which}_VERSION\s+(\d+)", text)
        if not m:
            return None
        parts.append(int(m.group(1)))
    return tuple(parts)  # type: ignore[return-value]


def _version_from_string(text: str) -> tuple[int, int, int] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _describe(root: Path, lib_dir: Path, host: Path, source: str, include_dir: Path | None) -> Installation:
    if include_dir is None:
        for candidate in (root / "include", lib_dir.parent / "include"):
            if (candidate / "nvshmem.h").is_file():
                include_dir = candidate
                break
    version = _version_from_header(include_dir)
    wheel = _wheel_distribution_for(root)
    if wheel is not None:
        source = f"wheel {wheel[0]}" if source == "wheel" else source
        if version is None:
            version = _version_from_string(wheel[1])

    names = sorted(p.name for p in lib_dir.iterdir()) if lib_dir.is_dir() else []
    plugins = {}
    for name in names:
        m = _BOOTSTRAP_PLUGIN.match(name)
        if m and m.group(1) not in plugins:
            plugins[m.group(1)] = lib_dir / name
    per_arch = sorted(
        (lib_dir / n for n in names if _PER_ARCH_BITCODE.match(n)),
        key=lambda p: int(_PER_ARCH_BITCODE.match(p.name).group(1)),
    )
    if per_arch:
        layout, bitcode = "per-arch", tuple(per_arch)
    elif SINGLE_BITCODE in names:
        layout, bitcode = "single", (lib_dir / SINGLE_BITCODE,)
    else:
        layout, bitcode = "none", ()
    return Installation(
        root=root,
        source=source,
        version=version,
        host_library=host,
        lib_dir=lib_dir,
        include_dir=include_dir,
        bootstrap_plugins=plugins,
        bitcode_files=bitcode,
        layout=layout,
    )


@functools.lru_cache(maxsize=8)
def _find(nvshmem_home: str | None, search_dirs: tuple[Path, ...]) -> Installation:
    looked: list[str] = []

    if nvshmem_home:
        root = Path(nvshmem_home).expanduser()
        lib_dirs = _lib_dirs_for(root)
        for lib_dir in lib_dirs:
            host = _host_library_in(lib_dir)
            if host is not None:
                return _describe(root, lib_dir, host, ENV_HOME, None)
        looked.append(f"${ENV_HOME}={nvshmem_home}: no {HOST_LIBRARY_NAMES[0]} in " + ", ".join(map(str, lib_dirs)))
        _log.warning("NVSHMEM_HOME=%s holds no %s; looking elsewhere", nvshmem_home, HOST_LIBRARY_NAMES[0])
    else:
        looked.append(f"${ENV_HOME}: not set")

    wheel_roots = [Path(d, *WHEEL_SUBDIR) for d in search_dirs]
    for root in wheel_roots:
        host = _host_library_in(root / "lib")
        if host is not None:
            return _describe(root, root / "lib", host, "wheel", root / "include" if (root / "include").is_dir() else None)
    looked.append(
        "nvidia-nvshmem-cu12/-cu13 wheels: no "
        + "/".join(WHEEL_SUBDIR)
        + f"/lib/{HOST_LIBRARY_NAMES[0]} below any of: "
        + (", ".join(str(d) for d in search_dirs) or "(no sys.path entries)")
    )

    located = _pathfinder_include_dir()
    if located is not None:
        include_dir, via = located
        lib_dirs = _lib_dirs_for_include(include_dir)
        for lib_dir in lib_dirs:
            host = _host_library_in(lib_dir)
            if host is not None:
                root = include_dir.parent if lib_dir.parent == include_dir.parent else lib_dir
                return _describe(root, lib_dir, host, f"cuda.pathfinder ({via})", include_dir)
        looked.append(
            f"cuda.pathfinder found headers at {include_dir} ({via}) but no {HOST_LIBRARY_NAMES[0]} in "
            + ", ".join(map(str, lib_dirs))
        )
    else:
        looked.append("cuda.pathfinder: no NVSHMEM headers (conda, CUDA_HOME, /usr/include/nvshmem_*)")

    raise NvshmemNotFoundError(
        "NVSHMEM was not found. Looked in:\n" + "\n".join(f"  - {entry}" for entry in looked) + "\n" + _FIX_HINT
    )


# --------------------------------------------------------------------------- public


def installation() -> Installation:
    """The NVSHMEM installation this process uses (cached; see the module doc for the order)."""
    return _find(os.environ.get(ENV_HOME) or None, tuple(_wheel_search_dirs()))


def clear_cache() -> None:
    """Forget what was found (after changing NVSHMEM_HOME or installing a wheel)."""
    _find.cache_clear()
    try:
        from cuda.pathfinder import locate_nvidia_header_directory

        locate_nvidia_header_directory.cache_clear()
    except (ImportError, AttributeError):
        pass


def host_library_path() -> Path:
    """Absolute path of ``libnvshmem_host.so.3``."""
    return installation().host_library


def bootstrap_plugin_dir() -> Path:
    """The directory holding ``nvshmem_bootstrap_*.so.3``."""
    return installation().bootstrap_dir


def bootstrap_plugin_path(name: str) -> Path:
    """The bootstrap plugin ``name`` ("mpi", "uid", "pmi", "pmi2", "pmix", "shmem")."""
    inst = installation()
    try:
        return inst.bootstrap_plugins[name]
    except KeyError:
        raise NvshmemNotFoundError(
            f"no nvshmem_bootstrap_{name}.so.3 in {inst.lib_dir}; "
            f"available: {', '.join(sorted(inst.bootstrap_plugins)) or 'none'}"
        ) from None


def bitcode_path(arch: int | str | tuple[int, int]) -> Path:
    """The device bitcode to link for ``arch`` (90, "sm_90", "sm_90a", "90a", (9, 0)).

    Per-arch layout: the file with the highest ``NN <= arch``; single layout: the one file.
    """
    return installation().bitcode_for(arch)


def is_nvshmem_bitcode(path: str | Path) -> bool:
    """Whether ``path`` names one of NVSHMEM's own device bitcode files (either layout), e.g. one a
    program links itself (NVSHMEM4Py's ``--link-libraries``, Triton's ``extern_libs``)."""
    name = Path(path).name
    return name == SINGLE_BITCODE or bool(_PER_ARCH_BITCODE.match(name))


def nvshmem_version() -> tuple[int, int, int]:
    """(major, minor, patch) of the NVSHMEM found."""
    inst = installation()
    if inst.version is None:
        raise NvshmemNotFoundError(
            f"cannot tell the NVSHMEM version of {inst.root}: no include/{_VERSION_HEADER.as_posix()} "
            "and no nvidia-nvshmem wheel metadata"
        )
    return inst.version
