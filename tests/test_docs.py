"""The Sphinx docs build cleanly (-W) and every Python code block in them compiles."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_BLOCK = re.compile(r"^( *)\.\. code-block:: (\w+)\n((?:\1 +:.*\n)*)\n((?:(?:\1 +.*)?\n)+)", re.M)


def _blocks(language: str):
    for page in sorted(DOCS.rglob("*.rst")):
        text = page.read_text()
        for m in _BLOCK.finditer(text):
            if m.group(2) != language:
                continue
            lines = m.group(4).splitlines()
            indent = min(len(l) - len(l.lstrip()) for l in lines if l.strip())
            code = "\n".join(l[indent:] for l in lines).strip() + "\n"
            yield f"{page.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}", code


def test_docs_have_python_blocks():
    assert len(list(_blocks("python"))) >= 3


@pytest.mark.parametrize("where,code", list(_blocks("python")), ids=lambda x: x if ":" in str(x) else "")
def test_python_code_blocks_compile(where, code):
    compile(code, where, "exec")


def test_console_blocks_name_real_make_targets_and_examples():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    for where, code in _blocks("console"):
        for line in code.splitlines():
            cmd = line.removeprefix("$ ").split("#")[0]
            for target in re.findall(r"\bmake ([\w-]+)", cmd):
                assert target in targets, f"{where}: make {target}"
            for script in re.findall(r"(\S+\.py)\b", cmd):
                assert (ROOT / script).exists(), f"{where}: {script}"


def test_literalincludes_exist():
    for page in DOCS.rglob("*.rst"):
        for target in re.findall(r"^\.\. (?:literalinclude|include):: (\S+)", page.read_text(), re.M):
            assert (page.parent / target).resolve().exists(), f"{page}: {target}"


def test_sphinx_build_is_warning_free(tmp_path):
    pytest.importorskip("sphinx")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "-d", str(tmp_path / "doctrees"),
         str(DOCS), str(tmp_path / "html")],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    numba_page = " ".join(re.sub(r"<[^>]+>", "", (tmp_path / "html" / "api" / "numba.html").read_text()).split())
    # the views' docstrings, read from the source by docs/_ext/docstrings.py
    assert "window(x, start, n)" in numba_page
    assert "An explicit count given to a put or get is not checked against the window." in numba_page


def test_docstring_directive_reads_the_source(tmp_path):
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from docstrings import signature_and_doc
    finally:
        sys.path.pop(0)
    views = ROOT / "runtime" / "numba" / "_views.py"
    sig, doc = signature_and_doc(views, "peer")
    assert sig == "peer(x, pe)"  # the typer's typingctx is not the user's
    assert doc.startswith("An array aliasing symmetric array ``x`` on PE ``pe``")
    assert "\n    " not in doc  # indentation removed
    with pytest.raises(ValueError, match="no top-level function 'nope'"):
        signature_and_doc(views, "nope")
    sig, _ = signature_and_doc(ROOT / "runtime" / "triton" / "_autotune.py", "do_bench")
    assert sig == "do_bench(*, warmup=3, reps=10, team=None, return_mode='mean')"  # keyword-only, defaults
    bare = tmp_path / "bare.py"
    bare.write_text("def f(a):\n    pass\n")
    with pytest.raises(ValueError, match="f has no docstring"):
        signature_and_doc(bare, "f")


def test_readme_python_blocks_compile():
    """The README's quick start is valid Python (it runs on GPUs as examples/ do)."""
    import re
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks, "the README has a quick start"
    for block in blocks:
        compile(block, "README.md", "exec")


def test_concepts_states_the_outlining_thresholds_the_code_has():
    """docs/concepts.rst gives hybrid linking's criterion and the loop-splitting threshold in numbers:
    they are the code's (nvshmem_dsl.linker.plan, nvshmem_dsl.linker.loop_split)."""
    from nvshmem_dsl.linker import loop_split, plan

    text = " ".join((DOCS / "concepts.rst").read_text().split())
    assert f"at least {plan.MIN_INSTRUCTIONS} instructions" in text
    assert f"at least {loop_split.MIN_INSTRUCTIONS:,} instructions".replace(",", " ") in text


def test_docs_state_the_object_workers_the_code_has():
    """concepts.rst and troubleshooting.rst name the object workers' variable, default bound and idle
    time as nvshmem_dsl.linker.object_workers has them."""
    from nvshmem_dsl.linker import object_workers

    for page in ("concepts.rst", "troubleshooting.rst"):
        text = " ".join((DOCS / page).read_text().split())
        assert f"``{object_workers.ENV}`` a process (default: its CPUs, at most {object_workers.DEFAULT_MAX}" in text \
            or f"``{object_workers.ENV}``, default: the CPUs, at most {object_workers.DEFAULT_MAX}" in text, page
    concepts = " ".join((DOCS / "concepts.rst").read_text().split())
    assert f"ended {object_workers.IDLE_SECONDS:g} s after the last" in concepts
    troubleshooting = " ".join((DOCS / "troubleshooting.rst").read_text().split())
    assert f"ends {object_workers.IDLE_SECONDS:g} s after its last build" in troubleshooting
    assert f"``RuntimeWarning: {object_workers.FALLBACK_WARNING}``" in troubleshooting


#: Where the code that reads NVSHMEM_DSL_* variables lives: the package, its tests (not the records of
#: past runs, which name variables since removed) and its benchmarks.
_CODE_SUFFIXES = {".py", ".sh", ".cu", ".cuh", ".h", ""}


def _code_files():
    for top in ("runtime", "tests", "bench"):
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix in _CODE_SUFFIXES and "records" not in path.relative_to(ROOT).parts:
                yield path


def test_environment_page_names_every_variable_the_code_reads():
    """docs/environment.rst names each NVSHMEM_DSL_* variable that runtime/, tests/ and bench/ name,
    and no other."""
    pattern = re.compile(r"\bNVSHMEM_DSL_[A-Z0-9_]*[A-Z0-9]\b")
    in_code: dict[str, set] = {}
    for path in _code_files():
        for name in pattern.findall(path.read_text(errors="replace")):
            in_code.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    documented = set(pattern.findall((DOCS / "environment.rst").read_text()))
    assert any(f.startswith("runtime/") for files in in_code.values() for f in files), "none found in runtime/"
    assert any(f.startswith("tests/") and "NVSHMEM_DSL_TEST_" in n for n, files in in_code.items() for f in files)
    missing = {name: sorted(files) for name, files in in_code.items() if name not in documented}
    assert missing == {}, "named by the code, missing from docs/environment.rst"
    assert documented - set(in_code) == set(), "in docs/environment.rst, read by no code"


def test_environment_page_states_the_defaults_the_code_has():
    """The numbers docs/environment.rst gives as defaults are the code's constants."""
    from nvshmem_dsl.host import _exit, _launch_env
    from nvshmem_dsl.linker import abi, cache, loop_split, object_workers, store_build

    page = " ".join((DOCS / "environment.rst").read_text().split())
    expected = {
        "NVSHMEM_DSL_INIT_TIMEOUT": f"(default {_launch_env.DEFAULT_TIMEOUT:g})",
        "NVSHMEM_DSL_FINALIZE_TIMEOUT": f"(default {_exit.DEFAULT_FINALIZE_TIMEOUT:g};",
        "NVSHMEM_DSL_CACHE_DAYS": f"(default {cache.DEFAULT_DAYS:g};",
        "NVSHMEM_DSL_BUILD_JOBS": f"at most {store_build._MAX_JOBS},",
        "NVSHMEM_DSL_OBJECT_WORKERS": f"at most {object_workers.DEFAULT_MAX};",
        "NVSHMEM_DSL_OUTLINE_SPLIT": f"(default {loop_split.MIN_INSTRUCTIONS}:",
        "NVSHMEM_DSL_ABI_PRESERVE": f"(default: {abi.PRESERVE} where",
    }
    for var, phrase in expected.items():
        entry = page[page.index(f"``{var}`` "):]
        entry = entry[:entry.index("``NVSHMEM", 2)] if "``NVSHMEM" in entry[2:] else entry
        assert phrase in entry, f"docs/environment.rst, {var}: expected {phrase!r}"


def test_troubleshooting_states_how_a_job_ends_as_the_code_does():
    """The bounds and statuses docs/troubleshooting.rst gives for PEs that leave are the code's."""
    from nvshmem_dsl import run
    from nvshmem_dsl.host import _exit

    page = " ".join((DOCS / "troubleshooting.rst").read_text().split())
    assert f"SIGKILL after ``--grace`` seconds (default {run.DEFAULT_GRACE:g})" in page
    assert f"within ``--grace`` seconds and {run.POLL_S:g} s of polling" in page
    assert f"at most ``NVSHMEM_DSL_FINALIZE_TIMEOUT`` seconds (default {_exit.DEFAULT_FINALIZE_TIMEOUT:g};" in page
    assert f"exits with status {_exit.STALLED_STATUS}," in page
