# The CUTLASS CuTe DSL distributed examples' NVSHMEM4Py pattern (shared/seeds/004, the README's
# "Example"): a symmetric torch tensor and its peer tensors, ported to nvshmem_dsl.core by
# changing the import.  The seed is a fragment: it refers to the examples' init/finalize helpers
# and leaves M, N, world_size and the use of the tensors out; those parts are added between the
# "PORT: begin" / "PORT: end" lines (original: examples/nvshmem4py/original/seed004_torch_peer_tensors.py.txt).
#
# Run: torchrun --nproc-per-node 2 examples/nvshmem4py/seed004_torch_peer_tensors.py

import nvshmem_dsl.core as nvshmem
# PORT: begin - what the fragment leaves out: imports, and the examples' init/finalize helpers
import os

import torch
import torch.distributed as dist
from cuda.core import Device

M, N = 128, 256


def torchrun_uid_init_bcast():
    """Initialize NVSHMEM with a UniqueID broadcast over torch.distributed (launcher: torchrun),
    as the CUTLASS distributed examples' helper does."""
    global stream, rank, world_size
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = Device(local_rank)
    dev.set_current()
    stream = dev.create_stream()
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    uid = nvshmem.core.get_unique_id(empty=(rank != 0))
    uid_tensor = torch.from_numpy(uid._data.copy())
    dist.broadcast(uid_tensor, src=0)
    uid._data[:] = uid_tensor.numpy()
    nvshmem.core.init(device=dev, uid=uid, rank=rank, nranks=world_size, initializer_method="uid")


def torchrun_finalize():
    nvshmem.core.finalize()
    dist.destroy_process_group()


torchrun_uid_init_bcast()
# PORT: end
# init the environment
# refer to the torchrun_uid_init_bcast() in example
# Allocate symmetric tensor
local_tensor = nvshmem.core.tensor((M, N), dtype=torch.float32)
# Get peer tensors for P2P access
tensor_list = [nvshmem.core.get_peer_tensor(local_tensor, rank) for rank in range(world_size)]
# ... use tensors ...
# PORT: begin - a use of the tensors: each PE stores into its right neighbour's tensor through
# the peer tensor (NVLink stores), then checks what its left neighbour stored into its own
right, left = (rank + 1) % world_size, (rank - 1) % world_size
local_tensor.fill_(-1.0)
torch.cuda.synchronize()
nvshmem.core.barrier(nvshmem.core.Teams.TEAM_WORLD, stream=stream)
stream.sync()
tensor_list[right].fill_(float(rank + 1))
torch.cuda.synchronize()
nvshmem.core.barrier(nvshmem.core.Teams.TEAM_WORLD, stream=stream)
stream.sync()
assert bool((local_tensor == float(left + 1)).all()), f"PE {rank}: expected {left + 1} from PE {left}"
print(f"PE {rank}: PE {left} stored {local_tensor[0, 0].item()} into my tensor through its peer tensor; "
      f"devices {[str(t.device) for t in tensor_list]}")
# multicast only where NVSHMEM reports support (get_multicast_tensor raises NvshmemError otherwise)
try:
    mc_tensor = nvshmem.core.get_multicast_tensor(nvshmem.core.Teams.TEAM_WORLD, local_tensor)
except nvshmem.core.NvshmemError as exc:
    print(f"PE {rank}: no multicast tensor: {exc}")
else:
    print(f"PE {rank}: multicast tensor {tuple(mc_tensor.shape)} at 0x{mc_tensor.data_ptr():x}")
    nvshmem.core.free_tensor(mc_tensor)
nvshmem.core.barrier(nvshmem.core.Teams.TEAM_WORLD, stream=stream)
stream.sync()
# PORT: end
# Explicitly free memory when done
for t in tensor_list:
    nvshmem.core.free_tensor(t)
# finalize the environment
# refer to the torchrun_finalize() in example
torchrun_finalize()  # PORT: the call the two comments above refer to
