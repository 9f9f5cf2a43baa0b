"""NVSHMEM's limited MPG mode: several PEs on one GPU and no MPS server joining them.

NVSHMEM supports point-to-point operations there but ends the process on a team collective, a team
barrier or a team split. These tests run only in such a run (they skip elsewhere), e.g.
`python tests/gpu/run_suite.py --pes 2 --no-mps --dsl limited` on one GPU, and check that the mode
is reported, that allocation works (its size check, a collective, is off and said once), that
puts, gets and `barrier_all` work from the host and from a Numba kernel, and that what NVSHMEM
rejects raises NvshmemMpgError on every PE instead of ending the process.
"""
import warnings

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

import nvshmem_dsl as nvshmem  # noqa: E402
from nvshmem_dsl import InitStatus, Team  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def session():
    if not nvshmem.is_initialized():
        nvshmem.init()
    if not nvshmem.info()["limited_mpg"]:
        pytest.skip("not a limited MPG run (needs several PEs per GPU and no MPS)")
    yield
    nvshmem.barrier_all()


def test_the_mode_is_reported():
    info = nvshmem.info()
    assert info["pes_per_gpu"] >= 2 and info["mps"] is False
    assert nvshmem.init_status() == InitStatus.STATUS_LIMITED_MPG


def test_allocation_says_once_that_the_size_check_is_off():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        a = nvshmem.zeros((4,), np.int32, like="cupy")
        b = nvshmem.zeros((4,), np.int32, like="cupy")
    said = [w for w in seen if "limited MPG" in str(w.message)]
    assert len(said) <= 1  # once per process (earlier tests may have said it already)
    nvshmem.free(a), nvshmem.free(b)


def test_host_put_and_barrier_all():
    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    src = nvshmem.full((64,), me + 1, np.int32, like="cupy")
    dst = nvshmem.zeros((64,), np.int32, like="cupy")
    cp.cuda.runtime.deviceSynchronize()
    nvshmem.barrier_all()
    nvshmem.put(dst, src, (me + 1) % npes)
    nvshmem.quiet()
    nvshmem.barrier_all()
    assert (cp.asnumpy(dst) == (me - 1) % npes + 1).all()
    nvshmem.free(src), nvshmem.free(dst)


def test_numba_put_kernel():
    from numba import cuda

    import nvshmem_dsl.numba as nv

    @cuda.jit
    def ring_put(dst, src, pe):
        nv.put_block(dst, src, pe)

    me, npes = nvshmem.my_pe(), nvshmem.n_pes()
    src = nvshmem.full((256,), me + 7, np.float32, like="cupy")
    dst = nvshmem.zeros((256,), np.float32, like="cupy")
    cp.cuda.runtime.deviceSynchronize()
    nvshmem.barrier_all()
    ring_put[1, 128](dst, src, (me + 1) % npes)
    cuda.synchronize()
    nvshmem.barrier_all()
    assert (cp.asnumpy(dst) == (me - 1) % npes + 7).all()
    nvshmem.free(src), nvshmem.free(dst)


def test_what_nvshmem_rejects_raises_on_every_pe():
    x = nvshmem.zeros((8,), np.int32, like="cupy")
    for call in (lambda: nvshmem.reduce(Team.TEAM_WORLD, x, x, "sum"),
                 lambda: nvshmem.barrier(Team.TEAM_WORLD),
                 lambda: nvshmem.fcollect(Team.TEAM_WORLD, x, x, nelems=1),
                 lambda: nvshmem.split_strided(Team.TEAM_WORLD, 0, 1, nvshmem.n_pes()),
                 lambda: nvshmem.team_init(list(range(nvshmem.n_pes())))):
        with pytest.raises(nvshmem.NvshmemMpgError, match="nvidia-cuda-mps-control"):
            call()
    nvshmem.barrier_all()  # every PE is still here
    nvshmem.free(x)
