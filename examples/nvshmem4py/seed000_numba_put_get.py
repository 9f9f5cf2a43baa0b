# NVSHMEM4Py's Numba device-RMA example (shared/seeds/000, "Example: Using put and get in a
# Numba-CUDA kernel"), ported to nvshmem_dsl.core by changing the imports: `import nvshmem` and
# `import nvshmem.core.device.numba` name nvshmem_dsl.core and nvshmem_dsl.core.device.numba.
# The seed's own bugs, which no implementation can run, are fixed on the lines marked "PORT:"
# (original: examples/nvshmem4py/original/seed000_numba_put_get.py.txt).
#
# Run (one GPU per PE): python -m nvshmem_dsl.run --gpus 0,1 examples/nvshmem4py/seed000_numba_put_get.py
# or unchanged (the original) with: python -m nvshmem_dsl.run --as-nvshmem4py --gpus 0,1 prog.py

import numpy as np
import cupy as cp
from numba import cuda
import nvshmem_dsl.core as nvshmem
import nvshmem_dsl.core.device.numba as nvshmem_numba
from mpi4py import MPI
from cuda.core import Device as cudaDevice  # PORT: the seed calls cudaDevice() and never imports it
@cuda.jit
def rma_kernel(src, dst, remote_buf, pe):
    tid = cuda.threadIdx.x + cuda.blockIdx.x * cuda.blockDim.x
    if tid == 0:
        # Put data from src to remote_buf on remote PE
        nvshmem_numba.put(remote_buf, src, pe)
        # Get data from remote_buf on remote PE to dst
        nvshmem_numba.get(dst, remote_buf, pe)
# Initialize NVSHMEM
dev = cudaDevice()
dev.set_current()
stream = dev.create_stream()
nvshmem.init(dev=dev, mpi_comm=MPI.COMM_WORLD, initializer_method="mpi", stream=stream)
# Get information about the current PE
me = nvshmem.my_pe()
n_pes = nvshmem.n_pes()
# Choose a remote PE (for example, next PE in a ring)
pe = (me + 1) % n_pes
# Allocate device buffers
src = nvshmem.array((1,), dtype=np.int32)
dst = nvshmem.array((1,), dtype=np.int32)
remote_buf = nvshmem.array((1,), dtype=np.int32)
# Launch kernel to perform put and get on remote PE's buffer
# Note, Numba-cuda does not accept a cuda.core Stream, so we need to pass the stream handle.
rma_kernel[1, 1, cuda.external_stream(int(stream.handle))](src, dst, remote_buf, pe)  # PORT: Numba kernels take no stream= argument (TypeError); the stream goes in the launch configuration
# Finalize NVSHMEM
nvshmem.finalize(dev=dev, stream=stream)
