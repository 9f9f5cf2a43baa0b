"""nvshmem_dsl.core against NVSHMEM4Py 0.4.1's whole public surface, on a CPU.

The reference is tests/data/nvshmem4py-0.4.1-surface.json, read from the ``nvshmem4py-cu12``
0.4.1 wheel's files by tests/data/extract_nvshmem4py_surface.py (never by importing it):

* ``nvshmem.core``, ``nvshmem.core.utils``, ``nvshmem.core.device.numba`` / ``.cute``: every
  name of their ``__all__`` (utils: its public functions) is in ours;
* ``nvshmem.bindings``: every raw host binding, with its parameter names, its C function and
  how it reports a status; its enums, struct wrappers and dtypes;
* ``nvshmem.bindings.device.numba`` / ``.cute``: every raw device function by name, on the
  same C function, but :data:`DEVICE_NOT_PROVIDED`;

then the new functions behave as NVSHMEM4Py's (the fake world of tests/nvshmem4py_world.py).
Set NVSHMEM4PY_WHEEL to a downloaded wheel to check the data file against it too.
"""

from __future__ import annotations

import ctypes
import importlib
import inspect
import json
import os
import re
import sys
from pathlib import Path

import pytest

import nvshmem_dsl.core as nvshmem
from nvshmem_dsl.core import bindings
from nvshmem_dsl.core.nvshmem_types import NvshmemInvalid

from nvshmem4py_world import FakeDevice, FakeStream, World, close

DATA = Path(__file__).resolve().parent / "data"
SURFACE = json.loads((DATA / "nvshmem4py-0.4.1-surface.json").read_text())
sys.path.insert(0, str(DATA))
from extract_nvshmem4py_surface import device_functions  # noqa: E402

OURS = {
    "nvshmem.core": "nvshmem_dsl.core",
    "nvshmem.core.utils": "nvshmem_dsl.core.utils",
    "nvshmem.core.device.numba": "nvshmem_dsl.core.device.numba",
    "nvshmem.core.device.cute": "nvshmem_dsl.core.device.cute",
}
#: Device bindings NVSHMEM4Py has and nvshmem_dsl does not, each with why (a name -> reason; the
#: CuTe list's internal entry points by their pattern).
DEVICE_NOT_PROVIDED = {
    "atomicAdd_system": "CUDA's own half-precision atomicAdd_system (cuda_fp16.h), not an NVSHMEM function: "
                        "Numbast and the CuTe generator picked it up from the headers NVSHMEM includes",
}
#: NVSHMEM's internal nvshmemi_<T>_put_signal_{block,warp}(..., is_nbi) device entry points, which
#: NVSHMEM4Py's CuTe generator exports; the spec has their public forms
#: nvshmemx_<T>_put_signal[_nbi]_{block,warp} (``<T>_put_signal_block`` ... here).
CUTE_INTERNAL = re.compile(r"nvshmemi_\w+_put_signal_(block|warp)")


def _module(name: str):
    pytest.importorskip("numba.cuda") if "numba" in name else None
    pytest.importorskip("cutlass.cute") if "cute" in name else None
    return importlib.import_module(name)


def _coverage(theirs, ours_module) -> tuple[list[str], int]:
    missing = [n for n in theirs if not hasattr(ours_module, n)]
    return missing, len(theirs) - len(missing)


@pytest.mark.parametrize("theirs", sorted(OURS))
def test_every_public_name_is_ours(theirs):
    mod = _module(OURS[theirs])
    names = SURFACE["modules"][theirs]
    missing, have = _coverage(names, mod)
    print(f"{theirs}: {have}/{len(names)}")
    assert not missing, missing
    listed = set(getattr(mod, "__all__", ()))
    assert set(names) <= listed, sorted(set(names) - listed)  # `from ... import *` gives them too


#: NVSHMEM4Py defaults that name something we spell otherwise: torch's float32 (ours is the
#: string, so that torch is not imported to define the function)
SAME_DEFAULT = {"float32": "float32"}


@pytest.mark.parametrize("theirs", ["nvshmem.core", "nvshmem.core.utils"])
def test_every_function_takes_nvshmem4pys_parameters_and_defaults(theirs):
    """Positional parameters in NVSHMEM4Py's order, keyword-only ones by name, the same defaults
    (ours may add parameters after them: init(dev=, stream=) ...)."""
    mod = _module(OURS[theirs])
    wrong = []
    for name, params in SURFACE["signatures"][theirs].items():
        ours = inspect.signature(getattr(mod, name)).parameters
        positional = [p for p in ours.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for i, (pname, kind, default) in enumerate(params):
            p = ours.get(pname)
            if kind == "pos" and (i >= len(positional) or positional[i].name != pname):
                wrong.append((name, pname, "not at position", i))
                continue
            if p is None or p.kind is p.POSITIONAL_ONLY:
                wrong.append((name, pname, "not a keyword"))
                continue
            if default is not None:
                want = SAME_DEFAULT[default] if default in SAME_DEFAULT else eval(default, vars(mod))
                if p.default is p.empty or p.default != want:
                    wrong.append((name, pname, p.default, default))
    print(f"{theirs}: {len(SURFACE['signatures'][theirs])} functions compared")
    assert not wrong, wrong


def test_the_counts_the_issue_names():
    """100 names in nvshmem.core, 73 unique in each device module (their __all__ repeat
    barrier_all and sync_all: 76 and 75 entries), 370 raw host bindings."""
    counts = {k: len(v) for k, v in SURFACE["modules"].items()}
    assert counts == {"nvshmem.core": 100, "nvshmem.core.utils": 2, "nvshmem.core.device.numba": 73,
                      "nvshmem.core.device.cute": 73}
    assert SURFACE["provenance"]["all_lengths"]["nvshmem.core.device.cute"] == 75
    assert len(SURFACE["bindings"]["nvshmem.bindings"]["functions"]) == 370


# --------------------------------------------------------------------------- raw host bindings

HOST = SURFACE["bindings"]["nvshmem.bindings"]


def test_every_host_binding_with_its_parameters_symbol_and_status():
    from nvshmem_dsl._generated.nvshmem4py_bindings import BINDINGS

    rows = {r[0]: r for r in BINDINGS}
    wrong = []
    for name, theirs in HOST["functions"].items():
        fn = getattr(bindings, name, None)
        if fn is None:
            wrong.append((name, "missing"))
            continue
        params = [p["name"] for p in theirs["params"]]
        if list(inspect.signature(fn).parameters) != params:
            wrong.append((name, list(inspect.signature(fn).parameters), params))
        _, symbol, kind, ret, _, _ = rows[name]
        if symbol != theirs["symbol"]:
            wrong.append((name, symbol, theirs["symbol"]))
        expected = "status" if theirs["raises_on_status"] else "void" if theirs["returns"] == "void" else "value"
        if kind != expected:
            wrong.append((name, kind, expected))
    have = len(HOST["functions"]) - len(wrong)
    print(f"nvshmem.bindings: {have}/{len(HOST['functions'])} functions (and {len(BINDINGS)} in all)")
    assert not wrong, wrong[:20]
    for name in [*HOST["classes"], *HOST["dtypes"], "check_status"]:
        assert hasattr(bindings, name), name
        assert name in bindings.__all__, name
    assert set(HOST["functions"]) <= set(bindings.__all__)


def test_binding_status_rule_is_the_host_runtimes_but_for_nvshmem4py_raw_ints():
    """A status-returning function raises, as nvshmem_dsl's own calls check it; NVSHMEM4Py hands
    six of them back as ints (codegen/emit/nvshmem4py.py RAW_STATUS)."""
    from codegen.emit.nvshmem4py import RAW_STATUS
    from nvshmem_dsl._generated.nvshmem4py_bindings import BINDINGS
    from nvshmem_dsl.host import _table

    for name, symbol, kind, ret, _, _ in BINDINGS:
        assert (kind == "status") == (_table.returns_status(symbol) and symbol not in RAW_STATUS), name
    assert {b["symbol"] for b in HOST["functions"].values()
            if _table.returns_status(b["symbol"]) and not b["raises_on_status"]} == set(RAW_STATUS)


@pytest.fixture
def world(monkeypatch):
    monkeypatch.setenv("NVSHMEM_DSL_CHECK_SYMMETRY", "0")
    w = World(monkeypatch)
    yield w
    close(w)


@pytest.fixture
def up(world):
    nvshmem.init(device=FakeDevice(0), uid=nvshmem.get_unique_id(), rank=0, nranks=2, initializer_method="uid")
    world.stream = FakeStream()
    world.calls.clear()
    return world


def test_host_bindings_call_the_c_function(world):
    assert bindings.my_pe() == 0 and bindings.n_pes() == world.n_pes
    ptr = bindings.malloc(1 << 20)
    assert isinstance(ptr, int) and world.calls[-1] == ("nvshmem_malloc", (1 << 20,))
    bindings.barrier_all_on_stream(0x1234)
    assert world.calls[-1] == ("nvshmemx_barrier_all_on_stream", (0x1234,))
    bindings.putmem_on_stream(dest=ptr, source=ptr + 64, bytes=64, pe=1, cstrm=0x1234)  # the header's names
    assert world.calls[-1] == ("nvshmemx_putmem_on_stream", (ptr, ptr + 64, 64, 1, 0x1234))
    assert bindings.float_sum_reduce_on_stream(0, ptr, ptr, 4, 0x1234) is None
    world.responses["nvshmemx_float_sum_reduce_on_stream"] = 7
    with pytest.raises(bindings.NVSHMEMError, match="Status code 7") as err:
        bindings.float_sum_reduce_on_stream(0, ptr, ptr, 4, 0x1234)
    assert err.value.status == 7
    world.responses["nvshmemx_team_sync_on_stream"] = 3
    assert bindings.team_sync_on_stream(0, 0x1234) == 3  # returned, not raised, as NVSHMEM4Py does
    with pytest.raises(TypeError, match="missing a required argument"):
        bindings.malloc()
    with pytest.raises(TypeError, match="unexpected keyword"):
        bindings.malloc(8, nbytes=8)
    bindings.free(ptr)
    assert world.calls[-1] == ("nvshmem_free", (ptr,))
    assert "nvshmem_malloc" in bindings.malloc.__doc__


def test_binding_types():
    B = bindings
    assert B.Cmp_type.CMP_GE == 5 and B.Cmp_type.CMP_SENTINEL == 2**31 - 1
    assert B.Team_id.TEAM_NODE == B.Team_id.TEAM_NODE_INDEX == 2 and B.Team_id.TEAM_INVALID == -1
    assert B.Signal_op.SIGNAL_ADD == 10 and B.Smem_amount.SMEM_BARRIERS_ONLY == 2 and B.Smem_amount.MAX == 2**31 - 1
    assert [m.name for m in B.Proxy_status][0] == "_PROXY_GLOBAL_EXIT_NOT_REQUESTED"
    assert B.Flags.INIT_WITH_UNIQUEID == 8 and B.Status.ERROR_INTERNAL == 7 and B.Pe_index.PE_ALL == 1 << 15
    assert B.Thread_support.THREAD_MULTIPLE == 3 and B.Tma_policy.TMA_FORCE == 2 and B.Region_hint.BATCH_RMA == 1
    assert B.uniqueid_dtype.itemsize == 128 and B.init_attr_dtype.itemsize == 144
    assert B.team_config_dtype.itemsize == 64
    uid = B.uniqueid()
    assert len(uid) == 1 and int(uid) == uid.ptr and uid == B.uniqueid()
    uid.version = 3
    assert uid.version == 3 and uid != B.uniqueid() and B.uniqueid.from_ptr(uid.ptr).version == 3
    many = B.uniqueid(3)
    assert len(many) == 3 and many[1].version == 0
    with pytest.raises(TypeError):
        int(many)
    attr = B.InitAttr()
    attr.mpi_comm = 0x1000
    assert attr.mpi_comm == 0x1000 and attr.ptr
    t = B.TeamUniqueId(5)
    t.value = 6
    assert t.value == 6 == int(t) and t == 6 and repr(t) == "team_uniqueid(value=6)"
    cfg = B.TeamConfig()
    assert cfg.num_contexts == -1 and cfg.uniqueid == 2**64 - 1 and cfg.version == (2 << 16) + 64
    ctypes.c_int32.from_address(cfg.ptr).value = 0
    assert cfg.version == 0  # the object's memory is the struct at cfg.ptr
    assert nvshmem.TeamConfig is B.TeamConfig and nvshmem.TeamUniqueId is B.team_uniqueid
    assert nvshmem.ThreadSupport is B.Thread_support


# --------------------------------------------------------------------------- raw device bindings


@pytest.mark.parametrize("dsl", ["numba", "cute"])
def test_every_device_binding_on_the_same_c_function(dsl):
    mod = _module(f"nvshmem_dsl.core.bindings.device.{dsl}")
    theirs = device_functions(SURFACE["bindings"][f"nvshmem.bindings.device.{dsl}"])
    from nvshmem_dsl import _optable

    ours = _optable.device_ops()
    missing, not_provided = [], []
    for name, symbol in theirs.items():
        if name in DEVICE_NOT_PROVIDED or (dsl == "cute" and CUTE_INTERNAL.fullmatch(name)):
            not_provided.append(name)
            assert symbol not in ours, (name, "is provided now: take it off the list")
            continue
        if name not in mod.__all__ or symbol not in ours:
            missing.append((name, symbol))
    have = len(theirs) - len(missing) - len(not_provided)
    print(f"nvshmem.bindings.device.{dsl}: {have}/{len(theirs)} ({len(not_provided)} not provided)")
    assert not missing, missing[:20]
    assert len(not_provided) == (1 if dsl == "numba" else 51)
    for name in ("quiet", "float_p", "int_sum_reduce_block", "putmem_signal_nbi_block"):
        assert getattr(mod, name) is not None
    if dsl == "numba":  # NVSHMEM4Py's enum there: the header's names, MAX included
        assert "nvshmemx_smem_amount_t" in mod.__all__
        assert {m.name: int(m) for m in mod.nvshmemx_smem_amount_t} == {
            "NVSHMEMX_SMEM_RECOMMENDED": 0, "NVSHMEMX_SMEM_MINIMUM": 1, "NVSHMEMX_SMEM_BARRIERS_ONLY": 2,
            "NVSHMEMX_SMEM_AMOUNT_MAX": 2**31 - 1}


def test_numba_device_bindings_compile_with_pointers_and_arrays():
    pytest.importorskip("numba.cuda")
    import cffi
    from numba import cuda
    from numba.cuda import types as nbtypes

    import nvshmem_dsl.core.bindings.device.numba as raw
    import nvshmem_dsl.core.device.numba as nvshmem_numba

    ffi = cffi.FFI()

    def kernel(dst, src, sig):
        pe = (raw.my_pe() + 1) % raw.n_pes()
        raw.float_p(ffi.from_buffer(dst), 1.5, pe)  # a pointer, as NVSHMEM4Py's programs pass
        raw.float_put_block(dst, src, 4, pe)  # or an array
        raw.signal_op(ffi.from_buffer(sig), 1, 9, pe)
        raw.quiet()
        smem = cuda.shared.array(2048, nbtypes.uint8)
        nvshmem_numba.give_smem(smem)  # NVSHMEM4Py's one-argument form: smem.nbytes
        dst[0] = nvshmem_numba.ask_smem(nvshmem_numba.SmemAmount.SMEM_MINIMUM)
        dst[1] = raw.ask_smem(raw.nvshmemx_smem_amount_t.NVSHMEMX_SMEM_MINIMUM)
        nvshmem_numba.release_smem()

    f32 = nbtypes.float32[::1]
    ptx, _ = cuda.compile_ptx(kernel, (f32, f32, nbtypes.uint64[::1]), cc=(9, 0))
    assert "nvshmemi_device_state_d" in ptx

    def bad(dst):
        nvshmem_numba.give_smem(dst[::2])

    from numba.core.errors import TypingError

    with pytest.raises(TypingError, match="C-contiguous"):
        cuda.compile_ptx(bad, (nbtypes.float32[:],), cc=(9, 0))


# --------------------------------------------------------------------------- the new core functions


def test_missing_core_names_behave_as_nvshmem4pys(up):
    s, h = up.stream, up.stream.handle
    dst, src = nvshmem.array((8,), dtype="float32"), nvshmem.array((8,), dtype="float32")
    nvshmem.put_nbi(dst, src, remote_pe=1, stream=s)
    nvshmem.get_nbi(dst, src, remote_pe=1, stream=s)
    args = (dst.data.ptr, src.data.ptr, 32, 1, h)  # min(sizes) bytes, as NVSHMEM4Py's putmem_nbi_on_stream
    assert up.calls[-2:] == [("nvshmemx_uint8_put_nbi_on_stream", args), ("nvshmemx_uint8_get_nbi_on_stream", args)]
    signal = nvshmem.array((1,), dtype="uint64")
    sig, _, _ = nvshmem.array_get_buffer(signal)
    nvshmem.put_signal_nbi(dst, src, sig, 1, nvshmem.SignalOp.SIGNAL_SET, remote_pe=1, stream=s)
    assert "put_signal_nbi_on_stream" in up.calls[-1][0] and up.calls[-1][1][-5:] == (signal.data.ptr, 1, 9, 1, h)
    nvshmem.flush(stream=s)
    assert up.calls[-1] in (("nvshmemx_flush_on_stream", (h,)), ("nvshmemx_quiet_on_stream", (h,)))
    with pytest.raises(NotImplementedError):
        nvshmem.flush()
    up.responses["nvshmem_signal_fetch"] = 42
    assert nvshmem.signal_fetch(sig) == 42 and up.calls[-1] == ("nvshmem_signal_fetch", (signal.data.ptr,))
    with pytest.raises(NvshmemInvalid, match="Signal must be a Buffer >= 8 bytes"):
        nvshmem.signal_fetch(nvshmem.buffer(4))

    def config(args):
        args[1].version, args[1].num_contexts, args[1].uniqueid = 7, 3, 99

    up.responses["nvshmem_team_get_config"] = config
    cfg = nvshmem.team_get_config(nvshmem.Teams.TEAM_NODE)
    assert isinstance(cfg, nvshmem.TeamConfig) and (cfg.version, cfg.num_contexts, cfg.uniqueid) == (7, 3, 99)
    assert up.calls[-1][1][0] == 2
    uid = nvshmem.get_team_unique_id()
    assert uid.value == 0xABCDEF == uid and isinstance(uid, nvshmem.TeamUniqueId)
    up.responses["nvshmem_query_thread"] = lambda args: args[0].__setitem__(0, 3)
    assert nvshmem.query_thread() is nvshmem.ThreadSupport.THREAD_MULTIPLE


def test_queries_before_init(world):
    def name(args):
        for i, ch in enumerate(b"NVIDIA Corporation\0"):
            args[0][i] = bytes([ch])

    world.responses["nvshmem_info_get_name"] = name
    assert nvshmem.get_name() == "NVIDIA Corporation"
    world.responses["nvshmem_query_thread"] = lambda args: args[0].__setitem__(0, 1)
    assert nvshmem.query_thread() == nvshmem.ThreadSupport.THREAD_FUNNELED
    assert nvshmem.ask_smem() == 65536 and nvshmem.ask_smem(nvshmem.SmemAmount.SMEM_MINIMUM) == 32768
    assert nvshmem.ask_smem(99) == 65536  # any other value: the recommended size, as the C helper
    # NVSHMEM4Py's SmemAmount is its bindings' Smem_amount, the header's MAX included (its tests ask for it)
    assert nvshmem.SmemAmount is nvshmem.bindings.Smem_amount and nvshmem.ask_smem(nvshmem.SmemAmount.MAX) == 65536
    assert [m.value for m in nvshmem.DeviceLibLanguage] == ["bc", "ltoir", "a"]


def test_ask_smem_matches_the_installed_header():
    from nvshmem_dsl import _libs

    include = _libs.installation().include_dir
    header = include and Path(include) / "device" / "nvshmemx_defines.h"
    if not header or not header.exists():
        pytest.skip("no NVSHMEM headers with nvshmemx_ask_smem")
    text = "\n".join(p.read_text(errors="replace") for p in Path(include).rglob("*.h"))
    text = re.sub(r"\\\n", " ", text)  # join continued lines
    body = re.search(r"int nvshmemx_ask_smem\(.*?\n}", text, re.S).group(0)
    cases = dict(re.findall(r"case NVSHMEMX_SMEM_(\w+):\s*return (\w+);", body))
    macros = dict(re.findall(r"#define (NVSHMEMI_\w+)[ \t]+([^\n]+)", text))

    def value(token: str) -> int:
        if token.isdigit():
            return int(token)
        return eval(re.sub(r"NVSHMEMI_\w+", lambda m: str(value(m.group(0))), macros[token]))

    for name, token in cases.items():
        assert nvshmem.ask_smem(nvshmem.SmemAmount[f"SMEM_{name}"]) == value(token), name


def test_bool_collectives_travel_as_uint8(up):
    """NVSHMEM4Py maps bool (and torch.bool) to NVSHMEM's uint8 for its collectives."""
    s, h = up.stream, up.stream.handle
    team = nvshmem.Teams.TEAM_WORLD
    a, b = nvshmem.array((8,), dtype="bool"), nvshmem.array((8,), dtype="bool")
    nvshmem.reduce(team, b, a, "sum", stream=s)
    assert up.calls[-1] == ("nvshmemx_uint8_sum_reduce_on_stream", (0, b.data.ptr, a.data.ptr, 8, h))
    half = nvshmem.array((4,), dtype="bool")
    nvshmem.reducescatter(team, half, a, "max", stream=s)
    assert up.calls[-1] == ("nvshmemx_uint8_max_reducescatter_on_stream", (0, half.data.ptr, a.data.ptr, 4, h))
    nvshmem.broadcast(team, b, a, 0, stream=s)
    assert "broadcast_on_stream" in up.calls[-1][0] and up.calls[-1][1][1:3] == (b.data.ptr, a.data.ptr)
    with pytest.raises(NvshmemInvalid, match="Non-matching data types"):
        nvshmem.reduce(team, nvshmem.array((8,), dtype="uint8"), a, "sum", stream=s)


def test_utils():
    from nvshmem_dsl.core import utils

    assert utils.get_size((64, 64), "float32") == 16384 and utils.get_size([3], "bfloat16") == 6
    assert utils.dtype_nbytes("half") == 2 and utils.dtype_nbytes("ptrdiff") == 8
    with pytest.raises(ValueError, match="Unsupported NVSHMEM dtype"):
        utils.dtype_nbytes("float32")
    torch = pytest.importorskip("torch")
    assert utils.get_size((2, 2), torch.bfloat16) == 8


def test_find_device_library_languages(tmp_path, monkeypatch):
    from nvshmem_dsl import _libs

    inst = _libs.installation()
    for language, filename in ((nvshmem.DeviceLibLanguage.LTOIR, "libnvshmem_device.ltoir.fatbin"),
                               (nvshmem.DeviceLibLanguage.STATIC, "libnvshmem_device.a")):
        path = Path(inst.lib_dir) / filename
        if path.exists():
            assert nvshmem.find_device_bitcode_library(language=language) == str(path)
        else:
            with pytest.raises(NvshmemInvalid, match="not found"):
                nvshmem.find_device_bitcode_library(language=language)
    if inst.bitcode_files:
        assert nvshmem.find_device_bitcode_library(arch="sm_90").endswith(".bc")


# --------------------------------------------------------------------------- provenance


def test_the_data_file_is_what_the_script_extracts_from_the_wheel():
    wheel = os.environ.get("NVSHMEM4PY_WHEEL")
    if not wheel:
        pytest.skip("set NVSHMEM4PY_WHEEL to an nvshmem4py-cu12 0.4.1 wheel to re-extract")
    from extract_nvshmem4py_surface import dumps, extract

    data = extract(Path(wheel))
    assert data["provenance"]["sha256"] == SURFACE["provenance"]["sha256"]
    assert dumps(data) == (DATA / "nvshmem4py-0.4.1-surface.json").read_text()


def test_alias_gives_bindings_and_utils():
    import subprocess
    import textwrap

    env = {k: v for k, v in os.environ.items() if not k.startswith("NVSHMEM_DSL_")}
    code = textwrap.dedent("""
        import nvshmem_dsl.core.alias as alias
        alias.enable()
        import nvshmem.bindings as b
        from nvshmem.bindings import malloc, Cmp_type
        from nvshmem.bindings.ask_smem import ask_smem
        import nvshmem.core.utils as u
        import nvshmem.bindings.device
        print(b.__name__, u.__name__, ask_smem(1), malloc.__name__, Cmp_type.CMP_EQ == 0)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["nvshmem_dsl.core.bindings", "nvshmem_dsl.core.utils", "32768", "malloc", "True"]
