/* Stand-in for rdma-core's <infiniband/mlx5dv.h>, used by bench/cpp/build.sh only when the
 * real header is missing and NVSHMEM's headers include it unconditionally (seen with some
 * NVSHMEM 3.4 builds).  The benchmark does not use IBGDA/GPUNetIO, which need the real one;
 * this file only lets the headers parse.  It declares nothing on purpose: if a header needs
 * a definition from it, the compile fails loudly rather than building something wrong. */
#ifndef BENCH_STUB_INFINIBAND_MLX5DV_H
#define BENCH_STUB_INFINIBAND_MLX5DV_H
#endif
