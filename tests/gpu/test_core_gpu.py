"""The seed programs, ported to nvshmem_dsl.core (examples/nvshmem4py/), run on 2 GPUs.

Each test starts its own 2-PE job and checks what the program printed or, through
tests/gpu/nvshmem4py_probe.py, what it moved: the programs that start MPI (seeds 000, 001, 003:
``MPI.COMM_WORLD``) under ``mpirun -n 2``, as their authors ran them (an MPI singleton inside our
launcher cannot start Open MPI's local daemon in every image), the others under
``python -m nvshmem_dsl.run -n 2``, seed 004 under torchrun (with one GPU: two one-process torchrun
"nodes" on this host, each PE's LOCAL_RANK 0).  Run this file in ONE process (it launches the PEs itself):

    python -m pytest -m gpu tests/gpu/test_core_gpu.py

Under a multi-PE launch of the GPU suite its tests skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import MPIRUN_ROOT_ENV, gpu_count, launched_as_pe, mpirun  # noqa: E402

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
PORTS = ROOT / "examples" / "nvshmem4py"
PROBE = Path(__file__).resolve().parent / "nvshmem4py_probe.py"
RANK_OUTPUT = Path(__file__).resolve().parent / "rank_output.py"
TIMEOUT = float(os.environ.get("NVSHMEM_DSL_CORE_GPU_TIMEOUT", "400"))
RANK_MARGIN_S = 60  # an MPI rank still running this long before TIMEOUT is stopped (rank_output.py)


@pytest.fixture(scope="module", autouse=True)
def twogpu_count():
    if launched_as_pe():
        pytest.skip("launches its own 2-PE jobs: run tests/gpu/test_core_gpu.py in one process")
    mps = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"), "control").exists()
    if gpu_count() < 2 and not (gpu_count() == 1 and mps):
        pytest.skip("needs 2 GPUs, or one shared by 2 PEs under MPS (python tests/gpu/mps.py --pes-per-gpu 2 -- ...)")


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVSHMEM_DSL_") or k == "NVSHMEM_DSL_INIT_TIMEOUT"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**MPIRUN_ROOT_ENV, **env}


def _mpirun() -> list[str]:
    """``mpirun -n 2`` (Open MPI or MPICH)."""
    cmd = mpirun()
    if cmd is None:
        pytest.skip("the program starts MPI and no mpirun is installed")
    return [*cmd, "-n", "2"]


def _job(*args: str, mpi: bool = False) -> dict[int, list[str]]:
    """Run a 2-PE job (``mpi``: under mpirun); its output lines by rank (rc 0 required).
    ``args`` may start with ``--as-nvshmem4py``: the program runs with the import alias."""
    alias = args[:1] == ("--as-nvshmem4py",)
    with tempfile.TemporaryDirectory() as logs:
        if mpi:  # each rank's stdout in a file of its own (tests/gpu/rank_output.py)
            target = list(args[1:] if alias else args)
            cmd = [*_mpirun(), sys.executable, str(RANK_OUTPUT), logs, "--", sys.executable,
                   *(["-m", "nvshmem_dsl.core.alias"] if alias else []), *target]
        else:
            gpus = ["--gpus", "0,1"] if gpu_count() >= 2 else []  # one GPU: both PEs on it (under MPS)
            cmd = [sys.executable, "-m", "nvshmem_dsl.run", "-n", "2", *gpus, *args]
        env = _env()
        if mpi:  # a hung rank writes its threads' tracebacks and ends before the job's timeout
            env["RANK_OUTPUT_TIMEOUT"] = str(max(TIMEOUT - RANK_MARGIN_S, RANK_MARGIN_S))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=ROOT)
        except subprocess.TimeoutExpired as e:  # the launcher itself hung: report what the ranks wrote
            text = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr)]
            proc = subprocess.CompletedProcess(cmd, f"timeout after {TIMEOUT:g} s", *text)
        lines: dict[int, list[str]] = {0: [], 1: []}
        errors = ""
        if mpi:
            for rank in lines:
                path = Path(logs, f"rank{rank}.out")
                lines[rank] = path.read_text().splitlines() if path.exists() else []
                err = Path(logs, f"rank{rank}.err")
                if err.exists():
                    errors += f"--- rank {rank} stderr\n{err.read_text()[-6000:]}\n"
        else:
            for line in proc.stdout.splitlines():
                if line.startswith("[rank "):  # our launcher's prefix
                    rank, _, text = line[6:].partition("] ")
                    lines[int(rank)].append(text)
    shown = "\n".join(f"--- rank {r}\n" + "\n".join(texts)[-4000:] for r, texts in lines.items())
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}\n{shown}\n{errors}"
    return lines


def _probes(lines: dict[int, list[str]]) -> dict[int, dict]:
    found = {}
    for rank, texts in lines.items():
        for text in texts:
            if text.startswith("PROBE "):
                report = json.loads(text[6:])
                found[report["pe"]] = report
    assert sorted(found) == [0, 1], lines
    return found


def _check_ring(reports: dict[int, dict]) -> None:
    """put(remote_buf, src, next PE) then get(dst, remote_buf, next PE): every PE gets its own src
    back, and its remote_buf holds the previous PE's src (allocations: src, dst, remote_buf)."""
    for pe, r in reports.items():
        left = reports[(pe - 1) % 2]
        assert r["src"] == 1000 * (pe + 1) + 0, r
        assert r["dst"] == r["src"], f"PE {pe}: dst {r['dst']} != src {r['src']} (initially {1000 * (pe + 1) + 1})"
        assert r["remote_buf"] == left["src"], f"PE {pe}: remote_buf {r['remote_buf']} != PE {(pe - 1) % 2}'s src"


def _as_nvshmem4py_program(name: str, tmp_path: Path) -> Path:
    """The ported program with its imports turned back into NVSHMEM4Py's."""
    text = (PORTS / f"{name}.py").read_text()
    text = text.replace("import nvshmem_dsl.core as nvshmem\n", "import nvshmem.core as nvshmem\n", 1) \
        if "import nvshmem.core as nvshmem" in (PORTS / "original" / f"{name}.py.txt").read_text() \
        else text.replace("import nvshmem_dsl.core as nvshmem\n", "import nvshmem\n", 1)
    text = text.replace("nvshmem_dsl.core.", "nvshmem.core.")
    assert "nvshmem_dsl" not in "\n".join(l for l in text.splitlines() if not l.startswith("#"))
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def test_seed000_numba_example():
    pytest.importorskip("cupy")
    pytest.importorskip("mpi4py")
    _check_ring(_probes(_job(str(PROBE), str(PORTS / "seed000_numba_put_get.py"), "src,dst,remote_buf", mpi=True)))


def test_seed000_unchanged_through_the_alias(tmp_path):
    pytest.importorskip("cupy")
    pytest.importorskip("mpi4py")
    program = _as_nvshmem4py_program("seed000_numba_put_get", tmp_path)
    assert "import nvshmem\n" in program.read_text()
    lines = _job("--as-nvshmem4py", str(PROBE), str(program), "src,dst,remote_buf", mpi=True)
    _check_ring(_probes(lines))


def test_seed001_cute_example():
    pytest.importorskip("cutlass.cute")
    pytest.importorskip("cupy")
    pytest.importorskip("mpi4py")
    _check_ring(_probes(_job(str(PROBE), str(PORTS / "seed001_cute_put_get.py"), "src,dst,remote_buf", mpi=True)))


@pytest.mark.parametrize("alias", [False, True], ids=["ported", "unchanged-imports"])
def test_seed003_tutorial_every_cell(alias, tmp_path):
    pytest.importorskip("cupy")
    pytest.importorskip("mpi4py")
    if alias:
        lines = _job("--as-nvshmem4py", str(_as_nvshmem4py_program("seed003_tutorial", tmp_path)), mpi=True)
    else:
        lines = _job(str(PORTS / "seed003_tutorial.py"), mpi=True)
    out = {rank: "\n".join(texts) for rank, texts in lines.items()}
    for pe in (0, 1):
        wanted = ["NVSHMEM Library version:", f"\n{pe}\n2\n", " 4096",  # versions, my_pe, n_pes, buf.size
                  f"[[[[[{pe + 1}. {pe + 1}.",  # arr[:] = my_pe + 1
                  "Array before reduction:", "Array after reduction:",
                  f"From PE {pe}, array contains [{pe}]"]  # simple_shift wrote my_pe
        missing = [w for w in wanted if w not in out[pe]]
        assert not missing, f"PE {pe} did not print {missing}:\n{out[pe]}"
    assert "Created team with handle" in out[0] and "Created team with handle None" in out[1]
    assert "From PE 0 sent buf to remote PE 1 and set signal" in out[0]
    assert "From PE 1 waited for signal" in out[1]
    # PE 1 printed its dst after the wait on its stream and stream.sync(): PE 0's src (all 1.0)
    tail = out[1][out[1].index("From PE 1 src="):]
    dst = tail[tail.index("dst=") + 4:tail.index("signal=")]
    assert dst.count("1.") == 16 and "0." not in dst.replace("1.", ""), tail
    assert "signal=[1]" in tail


def test_seed004_torch_peer_tensors():
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun")
    if torchrun is None or importlib.util.find_spec("torch.distributed") is None:
        pytest.skip("torchrun is not installed")
    seed = str(PORTS / "seed004_torch_peer_tensors.py")
    if gpu_count() >= 2:
        procs = [subprocess.Popen([torchrun, "--nproc-per-node", "2", seed], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=_env(), cwd=ROOT)]
    else:
        # one GPU (shared under MPS, see the fixture): the program sets device LOCAL_RANK, so each PE
        # is a torchrun "node" of one process on this host (LOCAL_RANK 0, RANK 0 and 1)
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        procs = [subprocess.Popen([torchrun, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                                   "--master-addr", "127.0.0.1", "--master-port", str(port), seed],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(), cwd=ROOT)
                 for node in (0, 1)]
    try:
        outs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    text = "".join(outs)
    assert all(p.returncode == 0 for p in procs), text[-8000:]
    for pe, left in ((0, 1), (1, 0)):
        assert f"PE {pe}: PE {left} stored {float(left + 1)} into my tensor through its peer tensor" in text, text
        device = pe if gpu_count() >= 2 else 0  # peer tensors on this PE's device
        assert f"devices ['cuda:{device}', 'cuda:{device}']" in text, text
        # multicast only where NVSHMEM has it: a tensor at the multicast address, or NVSHMEM's refusal
        assert f"PE {pe}: multicast tensor (128, 256) at 0x" in text or f"PE {pe}: no multicast tensor:" in text
