# NVSHMEM4Py's tutorial notebook (shared/seeds/003), every code cell in order, ported to
# nvshmem_dsl.core by changing the imports: `import nvshmem.core as nvshmem` names
# nvshmem_dsl.core, and cuda.core's `experimental` namespace (gone in cuda.core 1.x) is dropped.
# The notebook's own bugs, which no implementation can run, are fixed on the lines marked
# "PORT:" (original: examples/nvshmem4py/original/seed003_tutorial.py.txt): names it never defines
# or imports, a call NVSHMEM4Py rejects (`put(dst, src, size, pe, stream=)`), a strided team that
# does not fit 2 PEs, cuda.core 1.x renames, and a race of its put-with-signal cell.
#
# Run: python -m nvshmem_dsl.run -n 2 examples/nvshmem4py/seed003_tutorial.py
# (or under mpirun; a one-rank MPI.COMM_WORLD under nvshmem_dsl.run takes the launcher's ranks)

# In [1]:
# PORT (removed): an IPython shell command, not Python: !pip install mpi4py nvshmem4py-cu12 cupy-cuda13x numba-cuda==0.20.1 cuda-core

# In [2]:
from mpi4py import MPI
from cuda.core import Device, system
import nvshmem_dsl.core as nvshmem
import cupy  # PORT: cells 7, 9 use cupy and cp without importing them
import cupy as cp

rank = MPI.COMM_WORLD.Get_rank()
dev = Device(rank % system.get_num_devices())  # PORT: cuda.core 1.x: system.num_devices is system.get_num_devices()
dev.set_current()

nvshmem.init(device=dev, mpi_comm=MPI.COMM_WORLD, initializer_method="mpi")

# To finalize NVSHMEM, simply call nvshmem.finalize() (we'll hold off until the end of the notebook)

# In [3]:
# This returns a Python class encapsulating the NVSHMEM version, NVSHMEM4Py version,
# and the version of the OpenSHMEM Spec that NVSHMEM was written against.
print(nvshmem.get_version())

# These functions return the number of PEs in the runtime and the PE of each process
print(nvshmem.my_pe())
print(nvshmem.n_pes())

# In [4]:
# Using team_split_strided to create a team with every other PE, starting with PE0
team_strided = nvshmem.team_split_strided(
    nvshmem.Teams.TEAM_WORLD, start=0, stride=2, size=min(2, (nvshmem.n_pes() + 1) // 2), config=nvshmem.TeamConfig(),  # PORT: 2 PEs at stride 2 need 3 PEs; every other PE of n is (n + 1) // 2
    config_mask=0, new_team_name="STRIDED_TEAM"
)
print(f"Created team with handle {team_strided} using team_split_strided")

# Create a 2-d strided PE (requires >=4 PEs)
if nvshmem.n_pes() >= 4:
    x_team, y_team = nvshmem.team_split_2d(
        nvshmem.Teams.TEAM_WORLD, xrange=2,  # PORT: `Teams.WORLD` is undefined (NameError at 4 PEs)
        xaxis_config=nvshmem.TeamConfig(), xaxis_mask=0,
        yaxis_config=nvshmem.TeamConfig(), yaxis_mask=0,
        new_team_name="TWO_D_TEAM"
    )
    print(f"Created team_split_2d teams. X-team: {x_team}, Y-team: {y_team}")

# Create an arbitrary team
config_init = nvshmem.TeamConfig(version=2, num_contexts=1, uniqueid=1004)
my_pe = nvshmem.my_pe()
n_pes = nvshmem.n_pes()

if n_pes >= 4:
    # Let's say we want to make a team of PEs 2,3:
    if my_pe in (2,3):
        config = nvshmem.TeamConfig()
        team_init = nvshmem.team_init(
            config, config_mask=0, npes=2, pe_idx_in_team=my_pe - 2,  # PORT: team_init takes npes= and pe_idx_in_team= (n_pes=/my_pe= are TypeErrors); the team has 2 PEs
            new_team_name="USER_CREATED_TEAM"
        )
        print(f"Created team_init team. {team_init}")

# In [5]:
# Allocate a symmetric Buffer of size 4 KiB
# Important! nvshmem.core.buffer is a collective. All PEs in the NVSHMEM runtime must call this function together.
buf = nvshmem.buffer(4096)
# Buffers are typeless blocks of memory characterized by a pointer and size.
# Buffers created from the same call to buffer() on each PE will have the same symmetric address
# NVSHMEM4Py allocated Buffers are always Device (GPU Memory) buffers
print(buf.handle, buf.size)
# When you are done using the buffer, release it back to the NVSHMEM symmetric heap
nvshmem.free(buf)

# In [6]:
# You can also allocate CuPy arrays on the symmetric heap.
# CuPy arrays are wrappers around Buffers that carry shape and data type information.
shape = (1,2,3,4,5)
dtype = "float32"
arr = nvshmem.array(shape, dtype=dtype)
# Once you allocate your array, you can print it or perform operations on it just like you would for any other CuPy array:
print(arr)
arr[:] = nvshmem.my_pe() + 1
print(arr)
# Free it when you are done
nvshmem.free_array(arr)

# In [7]:
from cuda.core import VirtualMemoryResource
# Get a VirtualMemoryResource tied to our current GPU
dev = Device()
resource = VirtualMemoryResource(dev)
# This buffer is allocated by the CUDA VMM APIs
buffer = resource.allocate(536870912)
# Take that buffer and wrap it in a CuPy array
arr = cupy.from_dlpack(buffer, copy=False).view("float32")

# Register it with the NVSHMEM runtime
# NOTE! This is a collective across TEAM_WORLD
arr_reg = nvshmem.register_external_array(arr)
# Use the array however you'd like
# When you're done, unregister the array
# NOTE! this is also a collective across TEAM_WORLD
arr_reg = nvshmem.unregister_external_array(arr)

# In [8]:
# Get current device and create a stream
device = Device()
stream = device.create_stream()

# Allocate symmetric memory using nvshmem.core.array
size = 10
src_array = nvshmem.array((size,), dtype="float32")
dest_array = nvshmem.array((size,), dtype="float32")

# Set values on each PE
my_pe = nvshmem.my_pe()
n_pes = nvshmem.n_pes()

# Fill source array with PE ID + 1
src_array[:] = my_pe + 1

print("Array before reduction:", src_array, dest_array)

# Perform the reduction from src_array into dst_array across TEAM_WORLD
nvshmem.reduce(nvshmem.Teams.TEAM_WORLD, dest_array, src_array, "sum", stream=stream)

print("Array after reduction:", src_array, dest_array)
nvshmem.free_array(src_array)
nvshmem.free_array(dest_array)

# In [9]:
# Get current device and create a stream
device = Device()
stream = device.create_stream()

# Allocate symmetric memory
size = 10
src_array = nvshmem.array((size,), dtype=cp.float32)
dest_array = nvshmem.array((size,), dtype=cp.float32)

# Set values on local PE
my_pe = nvshmem.my_pe()
n_pes = nvshmem.n_pes()

# Fill source array with PE ID
src_array[:] = cp.ones(size, dtype=cp.float32) * my_pe

# Target PE (circular next PE)
target_pe = (my_pe + 1) % n_pes

# Put data to the target PE
nvshmem.put(dest_array, src_array, remote_pe=target_pe, stream=stream)  # PORT: NVSHMEM4Py's put is (dst, src, remote_pe, stream): `size` made target_pe the stream (TypeError)

# Ensure operation is complete
stream.sync()  # PORT: cuda.core's Stream has sync(), not synchronize()

# Clean up - explicit free is required
nvshmem.free_array(src_array)
nvshmem.free_array(dest_array)

# In [10]:
from numba import cuda

@cuda.jit
def simple_shift(arr, dst_pe):
    # This line evaluates to NVLink stores when passed an array retrieved by `get_peer_array`
    arr[0] = dst_pe

dev = Device()
stream = dev.create_stream()

array = nvshmem.array((1,), dtype="int32")

my_pe = nvshmem.my_pe()
# A unidirectional ring - always get the neighbor to the right
dst_pe = (my_pe + 1) % nvshmem.n_pes()

# This function returns an Array which can be directly load/store'd to over NVLink
# The dst_PE must be in the same NVL domain as the PE calling this function, otherwise it will raise an Exception
dev_dst = nvshmem.core.get_peer_array(array, dst_pe)  # PORT: `b` is undefined; the array of this cell is `array`

block = 1
grid = (size + block - 1) // block
# Launch the kernel, followed by a global barrier across the whole NVSHMEM runtime
simple_shift[block, grid, 0, 0](array, my_pe)
nvshmem.core.barrier(nvshmem.Teams.TEAM_NODE, stream=stream)
# The value should be the neighbor PE
print(f"From PE {my_pe}, array contains {array}")

nvshmem.core.free_array(dev_dst)  # PORT: `arr_src` is undefined; the peer view goes first (freeing it is a no-op)
nvshmem.core.free_array(array)  # PORT: `arr_dst` is undefined; this cell's array

# In [11]:
dev = Device()
local_rank_per_node = dev.device_id
stream = dev.create_stream()

buf_src = nvshmem.core.array((4,4), dtype="float32")
buf_src [:] = nvshmem.core.my_pe() + 1
buf_dst = nvshmem.core.array((4,4), dtype="float32")
buf_dst [:] = 0

# NVSHMEM signals are always 1-element arrays of type uint64
signal = nvshmem.core.array((1,), dtype="uint64")
signal [:] = 0
buf_sig, sz, type = nvshmem.core.array_get_buffer(signal)
# PORT: begin. The notebook races: PE 0's put_signal may land before PE 1's zeroing of buf_dst and
# signal above (CuPy fills, asynchronous), which then overwrites the signal: PE 1 waits forever.
# Every PE finishes its fills, then a barrier, then the put (on the same stream).
dev.sync()
nvshmem.core.barrier(nvshmem.Teams.TEAM_WORLD, stream=stream)
# PORT: end

if nvshmem.core.my_pe() == 0:
    # The SIGNAL_SET operator sets the signal value to `val` (in this case 1) when the put operation is complete
    nvshmem.core.put_signal(buf_dst, buf_src, buf_sig, 1, nvshmem.core.SignalOp.SIGNAL_SET, remote_pe=1, stream=stream)
    print(f"From PE {nvshmem.core.my_pe()} sent buf to remote PE 1 and set signal")

if nvshmem.core.my_pe() == 1:
    # This signal_wait will wait until the signal value is equal to 1.
    nvshmem.core.signal_wait(buf_sig, 1, nvshmem.core.ComparisonType.CMP_EQ, stream=stream)
    print(f"From PE {nvshmem.core.my_pe()} waited for signal")

stream.sync()
print(f"From PE {nvshmem.core.my_pe()} src={buf_src}, dst={buf_dst} signal={signal}")

nvshmem.core.free_array(buf_src)
nvshmem.core.free_array(buf_dst)
nvshmem.core.free_array(signal)

# In [12]:
nvshmem.finalize()
