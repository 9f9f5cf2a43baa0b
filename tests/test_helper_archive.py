"""NVSHMEM's transport helpers from NVIDIA's libnvshmem_device.a (nvshmem_dsl.linker.helper_archive), on CPU.

* The archive's member and its fat binary's SMs are read without CUDA tools; the member is written
  once to the cache (``NVSHMEM_DSL_HELPERS=archive``); by default, or with no archive or no code for
  the SM: none.
* The probe tells the helpers the member defines with the bitcode's prototype from those it lacks
  (``rma_p`` of ``__half`` in 3.8.0) and those it defines otherwise (``amo_fetch<unsigned long>``:
  six parameters there, five in the bitcode); the answers outlive the process.
* A kernel's PTX prepared for the link calls the first by their names (not specialised), the
  second specialised as before, the third by a name of their own (``$p``); the kernel links with
  the member and the objects built for the others, and nothing is defined twice.
"""
from __future__ import annotations

import pytest

from nvshmem_dsl.linker import calls, helper_archive, link, outline, store_file
from nvshmem_dsl.linker.object_llvm import split_specialised

try:
    from nvshmem_dsl._libs import bitcode_path

    BC = bitcode_path(90)
except Exception as e:  # pragma: no cover
    pytest.skip(f"no NVSHMEM device bitcode: {e}", allow_module_level=True)

ARCHIVE = BC.parent / helper_archive.ARCHIVE
needs_archive = pytest.mark.skipif(not ARCHIVE.exists(), reason=f"no {ARCHIVE}")

RMA = "_Z21nvshmemi_transfer_rmaIL13threadgroup_t0EL13nvshmemi_op_t1EEvPvS2_mii"
RMA_P_HALF = "_Z23nvshmemi_transfer_rma_pI6__halfEvPvT_ii"
AMO_FETCH = "_Z27nvshmemi_transfer_amo_fetchImET_PvS0_S0_i14nvshmemi_amo_ti"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NVSHMEM_DSL_CACHE", str(tmp_path))
    monkeypatch.setenv(helper_archive.ENV, "archive")
    helper_archive._answers.clear()
    helper_archive._extracted.cache_clear()
    yield tmp_path
    helper_archive._answers.clear()
    helper_archive._probe_failed.clear()
    helper_archive._extracted.cache_clear()


def _ar(members: dict) -> bytes:
    """A GNU ar archive of ``members`` (names over 15 characters in the long-name table)."""
    longnames = b"".join(n.encode() + b"/\n" for n in members if len(n) > 15)
    out, at = [b"!<arch>\n"], 0

    def header(name: bytes, size: int) -> bytes:
        return name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"644".ljust(8) + \
            str(size).encode().ljust(10) + b"`\n"

    if longnames:
        out += [header(b"//", len(longnames)), longnames + b"\n" * (len(longnames) & 1)]
    for name, body in members.items():
        if len(name) > 15:
            ref = b"/" + str(at).encode()
            at += len(name) + 2
        else:
            ref = name.encode() + b"/"
        out += [header(ref, len(body)), body + b"\n" * (len(body) & 1)]
    return b"".join(out)


def test_archive_members_by_short_and_long_names(tmp_path):
    path = tmp_path / "lib.a"
    path.write_bytes(_ar({"a.o": b"odd", "transfer_device.cu.o": b"helpers!", "init_device.cu.o": b"x"}))
    assert helper_archive.archive_member(path) == b"helpers!"
    assert helper_archive.archive_member(path, "a.o") == b"odd"
    assert helper_archive.archive_member(path, "missing.o") is None
    (tmp_path / "not.a").write_bytes(b"ELF")
    assert helper_archive.archive_member(tmp_path / "not.a") is None


def test_fatbin_archs_of_nothing():
    assert helper_archive.fatbin_archs(b"") == frozenset()
    assert helper_archive.fatbin_archs(b"\x7fELF" + b"\0" * 100) == frozenset()


@needs_archive
def test_the_member_has_code_for_sm90_and_is_written_once(cache):
    member = helper_archive.archive_member(ARCHIVE)
    assert 90 in helper_archive.fatbin_archs(member)
    path = helper_archive.path(90, BC)
    assert path.parent == store_file.cache_dir() / "outline" and path.read_bytes() == member
    mtime = path.stat().st_mtime_ns
    helper_archive._extracted.cache_clear()
    assert helper_archive.path(90, BC) == path and path.stat().st_mtime_ns == mtime
    assert helper_archive.path(52, BC) is None  # no code for that SM


def test_none_when_asked_to_build_or_without_an_archive(cache, monkeypatch, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / BC.name).write_bytes(b"")
    assert helper_archive.path(90, bare / BC.name) is None
    monkeypatch.setenv(helper_archive.ENV, "build")
    assert helper_archive.path(90, BC) is None
    assert helper_archive.provided(90, {RMA: ".extern .func x;"}, BC) == {}
    monkeypatch.setenv(helper_archive.ENV, "sometimes")
    with pytest.raises(ValueError, match="NVSHMEM_DSL_HELPERS"):
        helper_archive.path(90, BC)


@needs_archive
def test_the_archive_is_the_default(cache, monkeypatch):
    monkeypatch.delenv(helper_archive.ENV)
    assert helper_archive.mode() == "archive"
    assert helper_archive.path(90, BC) is not None
    monkeypatch.setenv(helper_archive.ENV, " Build ")
    assert helper_archive.mode() == "build"


@needs_archive
def test_info_says_where_the_helpers_come_from(cache, monkeypatch):
    assert "sm_90" in helper_archive.explain() and str(ARCHIVE) in helper_archive.explain()
    monkeypatch.setenv(helper_archive.ENV, "build")
    assert helper_archive.explain() == "built from the bitcode (NVSHMEM_DSL_HELPERS=build)"


@needs_archive
def test_helpers_the_probe_could_not_answer_are_built_under_their_own_names(cache, monkeypatch):
    """A probe that fails (no nvJitLink, a crash, a timeout) answers nothing: the helpers it asked
    about are built as those NVIDIA defines otherwise ($p names: none clashes with the member, which
    still serves the helpers known to be its), the process probes no more (not one probe per
    kernel), and the next process asks again."""
    member = helper_archive.path(90, BC)
    helper_archive._save(member, 90, {RMA: True})
    probes = []
    monkeypatch.setattr(helper_archive, "_probe", lambda *a: probes.append(a) and None)
    decl = {n: f".extern .func {n}();" for n in (RMA, AMO_FETCH)}
    assert helper_archive.provided(90, decl, BC) == {RMA: True, AMO_FETCH: helper_archive.MISMATCH}
    assert len(probes) == 1
    decl[RMA_P_HALF] = f".extern .func {RMA_P_HALF}();"
    assert helper_archive.provided(90, decl, BC) == {RMA: True, AMO_FETCH: helper_archive.MISMATCH,
                                                     RMA_P_HALF: helper_archive.MISMATCH}
    assert len(probes) == 1  # not again
    assert AMO_FETCH not in helper_archive._read(member, 90)  # not kept
    helper_archive._probe_failed.clear()  # a new process
    assert helper_archive.known(90, AMO_FETCH, BC) is None


def _kernel_ptx(call: str) -> str:
    """PTX of a Numba kernel making ``call`` (nv.<call>), as linked (helpers declared)."""
    numba = pytest.importorskip("numba")
    from numba.cuda.compiler import _compile_pyfunc_with_fixup

    import nvshmem_dsl.numba as nv  # noqa: F401 - used by the source below

    ns = {"nv": nv}
    exec(f"def kernel(a, b, pe):\n    {call}\n", ns)
    sig = (numba.types.uint64[:], numba.types.float16[:], numba.types.int32)
    lib, _ = _compile_pyfunc_with_fixup(ns["kernel"], sig, device=False, abi="numba", cc=(9, 0))
    return lib.get_asm_strs(cc=(9, 0))[0]


@pytest.fixture
def answers(monkeypatch):
    """The default cache (its piece store, built once), the answers held in memory forgotten."""
    monkeypatch.setenv(helper_archive.ENV, "archive")
    helper_archive._answers.clear()
    yield
    helper_archive._answers.clear()
    helper_archive._probe_failed.clear()


KERNEL = "nv.put(a, a, 4, pe); nv.p(b, b[0], pe); nv.atomic_fetch_add(a, 1, pe)"


@needs_archive
def test_the_probe_sorts_helpers_and_remembers(answers):
    pytest.importorskip("cuda.bindings.nvjitlink")
    _kernel_ptx(KERNEL)  # prepared for its link: the probe ran
    assert helper_archive.known(90, RMA, BC) is True
    assert helper_archive.known(90, RMA_P_HALF, BC) is False
    assert helper_archive.known(90, AMO_FETCH, BC) == helper_archive.MISMATCH
    assert helper_archive._answers_file(helper_archive.path(90, BC), 90).exists()
    helper_archive._answers.clear()  # as a new process: from the file, no probe
    assert helper_archive.known(90, RMA, BC) is True and helper_archive.known(90, "_Z3foov", BC) is None


@needs_archive
def test_a_kernel_links_with_the_member_and_built_helpers(answers):
    pytest.importorskip("cuda.bindings.nvjitlink")
    from nvshmem_dsl.linker import link

    ptx = _kernel_ptx(KERNEL)
    called = calls.extern_calls(ptx)
    assert RMA in called  # by its name: from NVIDIA's object
    assert {split_specialised(n)[0] for n in called if n != RMA_P_HALF} >= {RMA, AMO_FETCH}
    assert any(split_specialised(n)[0] == RMA_P_HALF for n in called)
    assert AMO_FETCH not in called  # specialised on its modes, or "$p": not NVIDIA's amo_fetch
    cpu, features = link.ptx_target(ptx)
    paths = outline.objects(called, 90, cpu, features)
    member = helper_archive.path(90, BC)
    assert member in paths and all(p.suffix == ".cubin" for p in paths if p != member)
    assert not any(p.name.startswith(RMA) for p in paths)  # not built: NVIDIA's
    cubin = link.nvjitlink_cubin(cpu, [("kernel.ptx", ptx.encode())] + [(p.name, p.read_bytes()) for p in paths])
    defined, _ = link.cubin_info(cubin)
    assert defined[RMA] == 1 and all(c == 1 for n, c in defined.items() if n.startswith(("_Z", "nvshmem")))


@needs_archive
def test_ptx_prepared_otherwise_links_without_the_member(answers, monkeypatch):
    """PTX whose helper calls were not prepared here (Numba's cache from before, answers since removed):
    a helper it calls by name that the answers do not know; the link builds every helper and leaves the
    member out (before: NvshmemLinkError), and nothing is defined twice."""
    pytest.importorskip("cuda.bindings.nvjitlink")
    from nvshmem_dsl.linker import link

    ptx = _kernel_ptx(KERNEL)
    called = calls.extern_calls(ptx)
    assert RMA in called
    known = helper_archive.known
    monkeypatch.setattr(helper_archive, "known", lambda sm, n, bc=None: None if n == RMA else known(sm, n, bc))
    cpu, features = link.ptx_target(ptx)
    paths = outline.objects(called, 90, cpu, features)
    assert helper_archive.path(90, BC) not in paths
    assert any(p.name.startswith(RMA) for p in paths)  # built here
    cubin = link.nvjitlink_cubin(cpu, [("kernel.ptx", ptx.encode())] + [(p.name, p.read_bytes()) for p in paths])
    defined, _ = link.cubin_info(cubin)
    assert defined[RMA] == 1 and all(c == 1 for n, c in defined.items() if n.startswith(("_Z", "nvshmem")))


def test_a_renamed_helper_is_its_helper():
    assert split_specialised(AMO_FETCH + "$p") == (AMO_FETCH, {})
    assert split_specialised(AMO_FETCH + "$p3_1") == (AMO_FETCH, {3: 1})
    ptx = f".extern .func {AMO_FETCH}$p\n(\n\t.param .b64 x\n)\n;\n"
    assert calls.extern_calls(ptx) == {AMO_FETCH + "$p"}


@needs_archive
def test_answers_of_another_process_are_read_and_kept(cache):
    """Two PEs compile at once: each adds its answers to the file (neither loses the other's), and
    one asks the file for a helper the other probed (its object's calls name it)."""
    member = helper_archive.path(90, BC)
    assert helper_archive.known(90, RMA, BC) is None  # loaded: nothing yet
    helper_archive._save(member, 90, {RMA: True})  # another process
    helper_archive._save(member, 90, {RMA_P_HALF: False})  # and a third
    assert helper_archive.known(90, RMA, BC) is True and helper_archive.known(90, RMA_P_HALF, BC) is False
    assert helper_archive._read(member, 90) == {RMA: True, RMA_P_HALF: False}


@needs_archive
def test_a_member_whose_helpers_read_a_global_the_bitcode_lacks_is_not_used(cache, monkeypatch):
    """NVSHMEM 3.4.5: its member reads nvshmemi_ibgda_device_state_d, which its bitcode does not define
    (played here by the 3.8 bitcode with that name hidden): the member serves no kernel, helpers are built."""
    pytest.importorskip("cuda.bindings.nvjitlink")
    hidden = "nvshmemi_ibgda_device_state_d"
    real = helper_archive._bitcode_has
    monkeypatch.setattr(helper_archive, "_bitcode_has", lambda bc, name: name != hidden and real(bc, name))
    member = helper_archive.path(90, BC)
    assert member is not None
    decl = {RMA: f".extern .func {RMA}\n(\n\t.param .b64 a,\n\t.param .b64 b,\n\t.param .b64 c,\n"
                 f"\t.param .b32 d,\n\t.param .b32 e\n)\n;"}
    assert helper_archive.provided(90, decl, BC) == {}
    assert helper_archive.path(90, BC) is None and helper_archive.known(90, RMA, BC) is False
    assert hidden in helper_archive._read(member, 90)[helper_archive.UNUSABLE]
