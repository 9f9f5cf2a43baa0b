// The collective kernels of coll.cuh in objects of their own (each family's cost nvcc 10-30 s of one
// CPU; build.sh compiles them beside bench.cu, one object per family when it has the CPUs for it):
//   nvcc -rdc=true -c coll.cu -o coll.o                                  every family
//   nvcc -rdc=true -c coll.cu -DCOLL_FAMILY=COLL_REDUCE -o coll_reduce.o  one family
// With -DCOLL_SCOPE=BLOCK as well, the object holds that one kernel: the single-collective source
// whose compile time bench/compile_families.py measures beside the DSLs'.
#include "coll.cuh"

#define COLL_KERNELS_OF(FAMILY)                                                   \
    template <>                                                                   \
    CollKernel coll_kernel<FAMILY>(int scope) {                                   \
        return scope == THREAD ? coll<FAMILY, THREAD>                             \
               : scope == WARP ? coll<FAMILY, WARP>                               \
                               : coll<FAMILY, BLOCK>;                             \
    }

#if defined(COLL_FAMILY) && defined(COLL_SCOPE)
template <>
CollKernel coll_kernel<COLL_FAMILY>(int) {
    return coll<COLL_FAMILY, COLL_SCOPE>;
}
#elif defined(COLL_FAMILY)
COLL_KERNELS_OF(COLL_FAMILY)
#else
COLL_KERNELS_OF(COLL_BROADCAST)
COLL_KERNELS_OF(COLL_FCOLLECT)
COLL_KERNELS_OF(COLL_ALLTOALL)
COLL_KERNELS_OF(COLL_REDUCE)
COLL_KERNELS_OF(COLL_REDUCESCATTER)
COLL_KERNELS_OF(COLL_BARRIER)
#endif
