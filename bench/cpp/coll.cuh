// Device-side collectives over NVSHMEM_TEAM_WORLD: the kernels of bench.cu's coll_lat / coll_bw
// (bench/numba_bench.py's and bench/cute_bench.py's coll_* kernels are the same), and the
// single-kernel source whose nvcc time bench/compile_families.py measures (coll.cu).
//
// coll<FAMILY, SCOPE>(dst, src, nelems, iters): `iters` calls of one collective by every thread of
// the (one) block: a block of one thread at thread scope, of 32 at warp scope, of COLL_BLOCK at
// block scope.  float data, counts as in the C API: broadcast, fcollect, alltoall take nelems per
// PE, reduce and reducescatter nreduce = nelems; fcollect's dst, alltoall's src and dst and
// reducescatter's src hold nelems * npes.
#pragma once

#include <cstddef>

#include <nvshmem.h>
#include <nvshmemx.h>

enum Scope { THREAD = 0, WARP = 1, BLOCK = 2, N_SCOPES = 3 };
static inline const char* scope_name(int s) { return s == THREAD ? "thread" : s == WARP ? "warp" : "block"; }

// (NVSHMEM's headers have their own BROADCAST, REDUCE, ...)
enum CollFamily { COLL_BROADCAST = 0, COLL_FCOLLECT, COLL_ALLTOALL, COLL_REDUCE, COLL_REDUCESCATTER, COLL_BARRIER,
                  N_COLL_FAMILIES };
static const char* const COLL_FAMILY_NAMES[N_COLL_FAMILIES] = {"broadcast", "fcollect",      "alltoall",
                                                               "reduce",    "reducescatter", "barrier"};
static const int COLL_ROOT = 0;  // broadcast root

// CollOp<FAMILY, SCOPE>::run: one call of the collective.
template <int FAMILY, int SCOPE>
struct CollOp;

#define COLL_OP(FAMILY, SCOPE, FN, ARGS)                                                              \
    template <>                                                                                       \
    struct CollOp<FAMILY, SCOPE> {                                                                    \
        static __device__ __forceinline__ void run(float* dst, const float* src, size_t n) { FN ARGS; } \
    };
// A family's three scopes: nvshmem_NAME, nvshmemx_NAME_warp, nvshmemx_NAME_block, called with ARGS.
#define COLL_OPS(FAMILY, NAME, ARGS)                   \
    COLL_OP(FAMILY, THREAD, nvshmem_##NAME, ARGS)      \
    COLL_OP(FAMILY, WARP, nvshmemx_##NAME##_warp, ARGS) \
    COLL_OP(FAMILY, BLOCK, nvshmemx_##NAME##_block, ARGS)

COLL_OPS(COLL_BROADCAST, float_broadcast, (NVSHMEM_TEAM_WORLD, dst, src, n, COLL_ROOT))
COLL_OPS(COLL_FCOLLECT, float_fcollect, (NVSHMEM_TEAM_WORLD, dst, src, n))
COLL_OPS(COLL_ALLTOALL, float_alltoall, (NVSHMEM_TEAM_WORLD, dst, src, n))
COLL_OPS(COLL_REDUCE, float_sum_reduce, (NVSHMEM_TEAM_WORLD, dst, src, n))
COLL_OPS(COLL_REDUCESCATTER, float_sum_reducescatter, (NVSHMEM_TEAM_WORLD, dst, src, n))
COLL_OPS(COLL_BARRIER, barrier, (NVSHMEM_TEAM_WORLD))
#undef COLL_OPS
#undef COLL_OP

template <int FAMILY, int SCOPE>
__global__ void coll(float* dst, float* src, size_t nelems, int iters) {
    for (int i = 0; i < iters; i++) CollOp<FAMILY, SCOPE>::run(dst, src, nelems);
}

typedef void (*CollKernel)(float*, float*, size_t, int);

// coll<FAMILY, scope>: defined in coll.cu, compiled once per family (build.sh compiles them in parallel).
template <int FAMILY>
CollKernel coll_kernel(int scope);
template <> CollKernel coll_kernel<COLL_BROADCAST>(int scope);
template <> CollKernel coll_kernel<COLL_FCOLLECT>(int scope);
template <> CollKernel coll_kernel<COLL_ALLTOALL>(int scope);
template <> CollKernel coll_kernel<COLL_REDUCE>(int scope);
template <> CollKernel coll_kernel<COLL_REDUCESCATTER>(int scope);
template <> CollKernel coll_kernel<COLL_BARRIER>(int scope);
