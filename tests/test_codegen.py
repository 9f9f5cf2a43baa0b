"""The generator: deterministic, fast, sealed output; drift and malformed specs are caught."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codegen.emit import split_header, seal
from codegen.emit.optable import dumps
from codegen.load import SPEC_DIR, load
from codegen.main import GENERATED, build, check, write
from codegen.schema import SpecError

ROOT = Path(__file__).resolve().parent.parent


def _run_codegen(*args, env=None):
    return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)


def test_generate_is_deterministic_across_hash_seeds(tmp_path):
    outs = []
    for seed in ("0", "12345"):
        out = tmp_path / seed
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = _run_codegen("generate", "--out", str(out), env=env)
        assert r.returncode == 0, r.stderr
        outs.append({p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()})
    assert outs[0] == outs[1]
    assert set(outs[0]) >= {"host_cdef.h", "ops.json", "constants.py"}


def test_generate_full_spec_under_3_seconds():
    t0 = time.perf_counter()
    build()
    assert time.perf_counter() - t0 < 3.0


def test_checked_in_generated_files_are_current():
    assert check(build(), GENERATED) == []


def test_second_generate_changes_nothing(tmp_path):
    files = build()
    write(files, tmp_path)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    write(files, tmp_path)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_check_generated_catches_a_hand_edit(tmp_path):
    shutil.copytree(GENERATED, tmp_path / "g", ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "g" / "host_cdef.h"
    target.write_text(target.read_text().replace("nvshmem_my_pe", "nvshmem_my_pe_edited", 1))
    r = _run_codegen("check", "--out", str(tmp_path / "g"))
    assert r.returncode == 1
    assert "host_cdef.h" in r.stderr and "nvshmem_my_pe_edited" in r.stderr


def test_check_generated_catches_a_stray_file(tmp_path):
    shutil.copytree(GENERATED, tmp_path / "g", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "g" / "extra.py").write_text("x = 1\n")
    assert any("extra.py" in p for p in check(build(), tmp_path / "g"))


def test_every_generated_file_carries_provenance_and_a_valid_seal():
    spec_digest = load().digest
    for path in GENERATED.rglob("*"):
        if path.name == "__init__.py" or not path.is_file() or "__pycache__" in path.parts:
            continue
        text = path.read_text()
        if path.suffix == ".json":
            data = json.loads(text)
            prov = data.pop("provenance")
            assert prov["spec_sha256"] == spec_digest
            assert prov["seal"] == seal(dumps(data)), path
        else:
            comment = {".h": "//", ".rst": ".."}.get(path.suffix, "#")
            recorded, body = split_header(text, comment)
            assert spec_digest[:16] in text.splitlines()[0]
            assert recorded == seal(body), path


def _broken_spec(tmp_path, file, old, new):
    spec_copy = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, spec_copy)
    path = spec_copy / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return spec_copy


def test_malformed_entry_names_file_entry_and_field(tmp_path):
    spec_dir = _broken_spec(tmp_path, "device/rma.yaml", "    returns: void\n", "    returns: [void]\n")
    with pytest.raises(SpecError) as err:
        load(spec_dir)
    msg = str(err.value)
    assert "spec/device/rma.yaml" in msg and "families[0] (name=put)" in msg and "field 'returns'" in msg


def test_unknown_dtype_set_is_reported(tmp_path):
    spec_dir = _broken_spec(tmp_path, "device/amo.yaml", "dtype: [amo_extended]", "dtype: [amo_nonsense]")
    with pytest.raises(SpecError, match=r"spec/device/amo.yaml.*name=atomic_fetch.*field 'dtype'.*amo_nonsense"):
        load(spec_dir)


def test_unknown_field_and_missing_field_are_reported(tmp_path):
    spec_dir = _broken_spec(tmp_path, "device/sync.yaml", "    summary: \"Wait until every put",
                            "    sumary: \"Wait until every put")
    with pytest.raises(SpecError) as err:
        load(spec_dir)
    assert "unknown field 'sumary'" in str(err.value)
    assert "missing required field 'summary'" in str(err.value)


def test_bad_template_placeholder_is_reported(tmp_path):
    spec_dir = _broken_spec(tmp_path, "device/rma.yaml", '"{prefix}_{T_}put{N}{nbi}{scope}"',
                            '"{prefix}_{T}put{N}{nbi}{scope}"')
    with pytest.raises(SpecError, match=r"field 'symbol'.*unknown placeholder"):
        load(spec_dir)


def test_duplicate_symbols_are_reported(tmp_path):
    from codegen.expand import expand
    spec_dir = _broken_spec(tmp_path, "device/rma.yaml", 'symbol: "{prefix}_{T_}get{N}{nbi}{scope}"',
                            'symbol: "{prefix}_{T_}put{N}{nbi}{scope}"')
    with pytest.raises(SpecError, match="nvshmem_float_put is also produced by"):
        expand(load(spec_dir))


def test_codegen_cli_reports_spec_errors_with_exit_2(tmp_path):
    spec_dir = _broken_spec(tmp_path, "tables.yaml", "bits: 32, kind: float", "bits: 32, kind: floaty")
    r = _run_codegen("generate", "--spec", str(spec_dir), "--out", str(tmp_path / "out"))
    assert r.returncode == 2
    assert "spec/tables.yaml" in r.stderr and "field 'kind'" in r.stderr


@pytest.mark.parametrize("dsl", ["numba", "cute", "triton"])
def test_each_dsl_dispatches_as_its_reference_page_says(dsl):
    """The dispatch table is written once (generated/dispatch.py); each DSL's view of it, joined
    at import (nvshmem_dsl._dispatch.table), is exactly what codegen's per-DSL view gives its
    reference page: the same functions, dtype keys, C symbols and order."""
    from codegen.emit.dsl import DSLS
    from codegen.emit.views import api_functions
    from codegen.expand import expand

    from nvshmem_dsl import _dispatch

    want = {a.name: dict(a.dispatch) for a in api_functions(expand(load(SPEC_DIR)), DSLS[dsl].column)}
    have = _dispatch.table(dsl)
    assert have == want
    assert list(have) == list(want) and all(list(have[k]) == list(want[k]) for k in want)
    # a key served by several NVSHMEM types takes the first the function has (int64 before long)
    assert _dispatch.table("numba")["atomic_fetch"]["int64"] == "nvshmem_int64_atomic_fetch"
    with pytest.raises(ValueError, match="dsl='fortran'"):
        _dispatch.table("fortran")
