# NVSHMEM4Py's CuTe DSL device-RMA example (shared/seeds/001, "Example: Using put and get in a
# CuTe kernel"), ported to nvshmem_dsl.core by changing the imports: `import nvshmem`,
# `nvshmem.core.device.cute` and `nvshmem.core.interop.cute` name nvshmem_dsl.core and its
# submodules.  The seed's own bugs, which no implementation can run, are fixed on the lines
# marked "PORT:" (original: examples/nvshmem4py/original/seed001_cute_put_get.py.txt).
#
# Run (one GPU per PE): python -m nvshmem_dsl.run --gpus 0,1 examples/nvshmem4py/seed001_cute_put_get.py

import cutlass
from cutlass import cute
from cuda.core import Device, Stream
import nvshmem_dsl.core as nvshmem
import nvshmem_dsl.core.device.cute as nvshmem_cute
import nvshmem_dsl.core.interop.cute as nvshmem_cute_interop
from mpi4py import MPI
@cute.kernel
def rma_kernel(src: cute.Tensor, dst: cute.Tensor, remote_buf: cute.Tensor, pe: cutlass.Int32):
    # Put data from src to remote_buf on remote PE
    nvshmem_cute.put_block(remote_buf, src, pe)
    # Get data from remote_buf on remote PE to dst
    nvshmem_cute.get_block(dst, remote_buf, pe)
@cute.jit
def rma_launcher(src, dst, remote_buf, pe):
    rma_kernel(src, dst, remote_buf, pe).launch(grid=[1, 1, 1], block=[1, 1, 1])  # PORT: CuTe DSL kernels have no kernel[grid, block](...) launch syntax ('function' object is not subscriptable)
# Initialize NVSHMEM
dev = Device()
dev.set_current()
stream = dev.create_stream()
nvshmem.init(dev=dev, mpi_comm=MPI.COMM_WORLD, initializer_method="mpi", stream=stream)
# Get information about the current PE
me = nvshmem.my_pe()
n_pes = nvshmem.n_pes()
# Choose a remote PE (for example, next PE in a ring)
pe = (me + 1) % n_pes
# Allocate device tensors using NVSHMEM symmetric memory
src = nvshmem_cute_interop.tensor((1,), dtype=cute.Int32)
dst = nvshmem_cute_interop.tensor((1,), dtype=cute.Int32)
remote_buf = nvshmem_cute_interop.tensor((1,), dtype=cute.Int32)
# Compile and launch the kernel
compiled_fn, nvshmem_kernel = nvshmem_cute_interop.cute_compile_helper(
    rma_launcher, src, dst, remote_buf, pe
)
compiled_fn(src, dst, remote_buf, pe)  # PORT: the compiled launcher has no 'stream' parameter (CuTe rejects the unexpected keyword); it launches on the default stream
# Finalize NVSHMEM
nvshmem.core.library_finalize(nvshmem_kernel)
nvshmem_cute_interop.cleanup_cute()
nvshmem.finalize(dev=dev, stream=stream)
