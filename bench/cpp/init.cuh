// Shared by bench.cu (bench_cpp) and comm.cu (comm_cpp): CUDA_CHECK, the PE numbers, a wall clock and
// NVSHMEM's initialization over a unique-id file (no MPI needed).
//
// Rank/size/local rank come from the environment of whatever started the processes:
//   python -m nvshmem_dsl.run -n 2 bench/cpp/exec.py bench/cpp/build/<program> --uid-file F ...
//       (NVSHMEM_DSL_RANK / NVSHMEM_DSL_NRANKS / NVSHMEM_DSL_LOCAL_RANK)
//   mpirun -n 2 bench/cpp/build/<program> ...   (OMPI_COMM_WORLD_* or PMI_RANK / PMI_SIZE)
// Rank 0 calls nvshmemx_get_uniqueid and writes the 128-byte id to the file (atomically: a temporary
// file, then rename); the other ranks poll for it, then every rank calls
// nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, ...).  All ranks must see the same file system.
//
// Messages start with INIT_PROG (define it before including this file; default "bench_cpp").
#pragma once

#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#ifndef INIT_PROG
#define INIT_PROG "bench_cpp"
#endif

#define CUDA_CHECK(x)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,                \
                    cudaGetErrorString(e_));                                                 \
            exit(2);                                                                         \
        }                                                                                    \
    } while (0)

static int g_pe = 0, g_npes = 1;  // set by init_nvshmem

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ------------------------------------------------------------------ bootstrap

static int env_int(const char* const* names, int fallback) {
    for (int i = 0; names[i]; i++) {
        const char* v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return fallback;
}

static double init_timeout() {
    const char* v = getenv("NVSHMEM_DSL_INIT_TIMEOUT");
    return (v && *v) ? atof(v) : 60.0;
}

static void write_uid(const std::string& path, const nvshmemx_uniqueid_t& uid) {
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        fprintf(stderr, INIT_PROG ": cannot create %s: %s\n", tmp.c_str(), strerror(errno));
        exit(2);
    }
    if (write(fd, &uid, sizeof(uid)) != (ssize_t)sizeof(uid) || fsync(fd) != 0) {
        fprintf(stderr, INIT_PROG ": cannot write %s: %s\n", tmp.c_str(), strerror(errno));
        exit(2);
    }
    close(fd);
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        fprintf(stderr, INIT_PROG ": cannot rename %s: %s\n", tmp.c_str(), strerror(errno));
        exit(2);
    }
}

static void read_uid(const std::string& path, nvshmemx_uniqueid_t* uid, int rank) {
    double deadline = now_s() + init_timeout();
    while (true) {
        int fd = open(path.c_str(), O_RDONLY);
        if (fd >= 0) {
            ssize_t got = read(fd, uid, sizeof(*uid));
            close(fd);
            if (got == (ssize_t)sizeof(*uid)) return;
        }
        if (now_s() > deadline) {
            fprintf(stderr, INIT_PROG ": rank %d found no unique id in %s within %.0f s\n", rank,
                    path.c_str(), init_timeout());
            exit(2);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

static void init_nvshmem(const std::string& uid_file) {
    static const char* rank_vars[] = {"NVSHMEM_DSL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                      "MV2_COMM_WORLD_RANK", "SLURM_PROCID", nullptr};
    static const char* size_vars[] = {"NVSHMEM_DSL_NRANKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                      "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS", nullptr};
    static const char* local_vars[] = {"NVSHMEM_DSL_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                       "LOCAL_RANK", nullptr};
    int rank = env_int(rank_vars, 0);
    int nranks = env_int(size_vars, 1);
    int local = env_int(local_vars, rank);
    int ndev = 0;
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    if (ndev < 1) {
        fprintf(stderr, INIT_PROG ": no CUDA device\n");
        exit(2);
    }
    CUDA_CHECK(cudaSetDevice(local % ndev));
    CUDA_CHECK(cudaFree(0));

    // Every PE of this benchmark is on this host: keep the UID bootstrap on loopback, as
    // nvshmem_dsl.init() does under its launcher (an explicit setting wins).
    setenv("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo", 0);
    nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (nranks > 1 && uid_file.empty()) {
        fprintf(stderr, INIT_PROG ": %d ranks need --uid-file PATH (a path every rank can see)\n", nranks);
        exit(2);
    }
    if (rank == 0) {
        if (nvshmemx_get_uniqueid(&uid) != 0) {
            fprintf(stderr, INIT_PROG ": nvshmemx_get_uniqueid failed\n");
            exit(2);
        }
        if (nranks > 1) write_uid(uid_file, uid);
    } else {
        read_uid(uid_file, &uid, rank);
    }
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    nvshmemx_set_attr_uniqueid_args(rank, nranks, &uid, &attr);
    if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) {
        fprintf(stderr, INIT_PROG ": nvshmemx_init_attr failed\n");
        exit(2);
    }
    nvshmem_barrier_all();
    if (rank == 0 && nranks > 1) unlink(uid_file.c_str());  // everyone has read it
    g_pe = nvshmem_my_pe();
    g_npes = nvshmem_n_pes();
}
