"""The host declarations' parse kept in the cache directory (runtime/host/_ffi.py): written by the
first process, loaded by the next (a fraction of the parse's time), equal to a fresh parse, and a
damaged file parsed again and replaced rather than failing. CPU only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("cffi")

from nvshmem_dsl.host import _ffi, _lib  # noqa: E402

PROBE = r"""
import json, time
t = time.perf_counter()
from nvshmem_dsl.host import _lib
f = _lib._cdef_only()
took = time.perf_counter() - t
print(json.dumps({"took": took, "kind": type(f).__module__ + "." + type(f).__name__,
                  "uid": f.sizeof("nvshmemx_uniqueid_t"), "attr": f.sizeof("nvshmemx_init_attr_t"),
                  "malloc": f.typeof("void *(*)(size_t)").cname}))
"""


def _probe(cache) -> dict:
    env = dict(os.environ, NVSHMEM_DSL_CACHE=str(cache))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_parse_kept_then_loaded(tmp_path):
    first = _probe(tmp_path)
    kept = list((tmp_path / _ffi.FOLDER).glob("*.py"))
    assert len(kept) == 1 and not list((tmp_path / _ffi.FOLDER).glob("*.tmp"))
    second = _probe(tmp_path)
    assert first["kind"] == "cffi.api.FFI" and second["kind"] == "_cffi_backend.FFI"
    assert {k: v for k, v in first.items() if k not in ("took", "kind")} == \
        {k: v for k, v in second.items() if k not in ("took", "kind")}
    assert second["took"] < first["took"] / 3, (first["took"], second["took"])


def test_kept_parse_equals_a_fresh_one(tmp_path):
    text = _lib.cdef_text()
    fresh = _ffi.new_ffi(text, folder=tmp_path)
    kept = _ffi.new_ffi(text, folder=tmp_path)
    assert type(kept).__name__ == "FFI" and type(kept) is not type(fresh)
    for ctype in ("nvshmemx_uniqueid_t", "nvshmemx_init_attr_t", "nvshmemx_uniqueid_args_t"):
        assert kept.sizeof(ctype) == fresh.sizeof(ctype), ctype
    for ctype in ("nvshmemx_init_attr_t", "nvshmemx_uniqueid_args_t"):
        assert [(n, f.offset) for n, f in kept.typeof(ctype).fields] == \
            [(n, f.offset) for n, f in fresh.typeof(ctype).fields], ctype


def test_a_damaged_kept_parse_is_replaced(tmp_path):
    text = "int nvshmem_dsl_probe(int);\ntypedef struct { char x[24]; } probe_t;"
    _ffi.new_ffi(text, folder=tmp_path)
    (path,) = tmp_path.glob("*.py")
    path.write_text("this is not python(")
    t = time.perf_counter()
    ffi = _ffi.new_ffi(text, folder=tmp_path)
    assert ffi.sizeof("probe_t") == 24 and time.perf_counter() - t < 30
    assert "ffi = _cffi_backend.FFI" in path.read_text()
    assert _ffi.new_ffi(text, folder=tmp_path).sizeof("probe_t") == 24


def test_another_text_or_cffi_another_file():
    assert _ffi._module_name("a", "2.0") != _ffi._module_name("b", "2.0")
    assert _ffi._module_name("a", "2.0") != _ffi._module_name("a", "2.1")
