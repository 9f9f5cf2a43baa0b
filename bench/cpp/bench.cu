// CUDA C++ NVSHMEM baseline for `make bench`: the same kernels as bench/numba_bench.py and
// bench/cute_bench.py, timed the same way, one JSON line per result on stdout.
//
// Bootstrap (init.cuh, shared with comm.cu): NVSHMEM's unique-id (UID) bootstrap, no MPI needed.
// Rank/size/local rank come from the environment of whatever started the processes:
//   python -m nvshmem_dsl.run -n 2 bench/cpp/exec.py bench/cpp/build/bench_cpp ...
//       (NVSHMEM_DSL_RANK / NVSHMEM_DSL_NRANKS / NVSHMEM_DSL_LOCAL_RANK)
//   mpirun -n 2 bench/cpp/build/bench_cpp ...   (OMPI_COMM_WORLD_* or PMI_RANK / PMI_SIZE)
// Rank 0 calls nvshmemx_get_uniqueid and writes the 128-byte id to --uid-file (atomically:
// write a temporary file, then rename); the other ranks poll for the file, then every rank
// calls nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, ...).  All ranks must see the same
// file system (one node), which is what this benchmark is about.  bench/run.py passes a
// fresh file in a private temporary directory.
//
// Usage: bench_cpp --uid-file PATH [--quick] [--only put_bw,get_bw,...] [--reps N] [--sizes bytes,...]
//
// The collective kernels (coll_lat, coll_bw) are in coll.cuh / coll.cu, compiled apart (build.sh).
//
// Keep the measurement parameters (sizes, iteration counts, grids, partitioning) in sync
// with bench/_common.py: bench/run.py checks that the "iters" fields agree.

#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <algorithm>
#include <utility>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "coll.cuh"
#include "init.cuh"  // CUDA_CHECK, g_pe / g_npes, now_s, init_nvshmem (shared with comm.cu)
#include "driver.cuh"  // median, print_meta (shared with comm.cu, moe.cu)

// ------------------------------------------------------------------ parameters (= _common.py)

static const int BW_GRID = 132;           // blocks for every bandwidth kernel
static const int BW_BLOCK = 1024;         // threads per block, warp and block scope
static const int THREAD_SCOPE_BLOCK = 1;  // thread scope: one thread per block
static const int ALIGN_ELEMS = 32;        // chunks are rounded up to 32 floats (128 B)
static const int LAT_SLOTS = 1024;        // p/g cycle over this many elements
static const int BARRIER_BLOCK = 128;     // barrier_all_block: one block of 128 threads
static const int SPIN_US_BEFORE_TIMED = 200;
static const int SPIN_US_BEFORE_LAUNCHES = 100000;
static const int ON_STREAM_CALLS = 256;  // host on-stream rows: calls a rep at most (queued behind a spin)
static const size_t ALLOC_BYTES = 1 << 20;
static const int COLL_BLOCK = 256;             // threads of the block-scope collective kernels
static const int COLL_LAT_BYTES = 8;           // coll_lat: bytes per PE
static const size_t COLL_BW_BYTES = 1 << 20;   // coll_bw: bytes per PE
static const size_t DEFAULT_REDUCE_SCRATCH = 512 << 10;  // NVSHMEM's NVSHMEM_REDUCE_SCRATCH_SIZE

struct Params {
    bool quick = false;
    std::vector<size_t> sizes;
    long long target_bytes;  // bytes moved per timed launch (iters = target / size, clamped)
    int min_iters, max_iters;
    int reps;
    int lat_iters, amo_iters, pingpong_iters, barrier_iters;
    int launches, host_calls, alloc_reps;
    int coll_lat_iters, coll_bw_iters;  // collectives per coll_lat / coll_bw launch
};

static Params make_params(bool quick, int reps_override) {
    Params p;
    p.quick = quick;
    if (quick) {
        p.sizes = {8, 4096, 1 << 20, 16 << 20, 256 << 20};
        p.target_bytes = 1LL << 30;
        p.min_iters = 2;
        p.max_iters = 100;
        p.reps = 3;
        p.lat_iters = 10000;
        p.amo_iters = 5000;
        p.pingpong_iters = 2000;
        p.barrier_iters = 2000;
        p.launches = 500;
        p.host_calls = 100000;
        p.alloc_reps = 20;
        p.coll_lat_iters = 200;
        p.coll_bw_iters = 2;
    } else {
        p.sizes = {8};
        for (int k = 2; k <= 14; k++) p.sizes.push_back(size_t(1) << (2 * k));  // 16 B .. 256 MiB
        p.target_bytes = 4LL << 30;
        p.min_iters = 4;
        p.max_iters = 1000;
        p.reps = 10;
        p.lat_iters = 100000;
        p.amo_iters = 20000;
        p.pingpong_iters = 10000;
        p.barrier_iters = 10000;
        p.launches = 1000;
        p.host_calls = 1000000;
        p.alloc_reps = 100;
        p.coll_lat_iters = 2000;
        p.coll_bw_iters = 10;
    }
    if (reps_override > 0) p.reps = reps_override;
    return p;
}

static int bw_iters(const Params& p, size_t bytes) {
    long long it = p.target_bytes / (long long)bytes;
    return (int)std::max<long long>(p.min_iters, std::min<long long>(p.max_iters, it));
}

// ------------------------------------------------------------------ kernels

// This worker's [start, start + n) of nelems: workers are the blocks (thread and block scope)
// or the warps (warp scope) of the grid; chunks are ceil(nelems / workers) rounded up to
// ALIGN_ELEMS, so small messages use the first worker(s) only.
template <int SCOPE>
__device__ __forceinline__ void chunk_of(size_t nelems, size_t* start, size_t* n) {
    long long workers, w;
    if (SCOPE == WARP) {
        long long wpb = blockDim.x / 32;
        workers = (long long)gridDim.x * wpb;
        w = (long long)blockIdx.x * wpb + threadIdx.x / 32;
    } else {
        workers = gridDim.x;
        w = blockIdx.x;
    }
    long long chunk = ((long long)nelems + workers - 1) / workers;
    chunk = (chunk + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS;
    long long s = w * chunk;
    *start = (size_t)s;
    long long left = (long long)nelems - s;
    *n = left > 0 ? (size_t)(left < chunk ? left : chunk) : 0;
}

// Iteration i moves window (i % nwin) of the buffers (windows of nelems elements), the offset
// carried from one iteration to the next (no division in the loop; the same in every DSL).  Gets rotate
// through the 256 MiB buffers (nwin = buffer / message): repeated gets of one message smaller
// than L2 would otherwise be served from the local L2 after the first iteration (> 2 TB/s).
// Puts repeat the same window (nwin = 1), as NVSHMEM's perftest does: remote writes are not
// cached locally, and rotating only adds first-touch costs at small sizes.
template <int SCOPE, bool GET>
__global__ void rma_bw(float* dst, float* src, size_t nelems, int iters, int peer, int nwin) {
    size_t s, n;
    chunk_of<SCOPE>(nelems, &s, &n);
    if (n > 0) {
        size_t off = s;
        const size_t end = (size_t)nwin * nelems + s;
        for (int i = 0; i < iters; i++) {
            if (GET) {  // dst local, src on peer
                if (SCOPE == THREAD) nvshmem_float_get(dst + off, src + off, n, peer);
                if (SCOPE == WARP) nvshmemx_float_get_warp(dst + off, src + off, n, peer);
                if (SCOPE == BLOCK) nvshmemx_float_get_block(dst + off, src + off, n, peer);
            } else {  // dst on peer, src local
                if (SCOPE == THREAD) nvshmem_float_put(dst + off, src + off, n, peer);
                if (SCOPE == WARP) nvshmemx_float_put_warp(dst + off, src + off, n, peer);
                if (SCOPE == BLOCK) nvshmemx_float_put_block(dst + off, src + off, n, peer);
            }
            off += nelems;
            if (off == end) off = s;
        }
    }
    nvshmem_quiet();
}

// The one-thread latency kernels declare their launch shape, as the Numba kernels do
// (launch_bounds=(1,)) and CuTe's static launches do (.reqntid 1): with it ptxas does not
// aggregate a warp's atomics (vote, popc, shuffle around every fetch-add).  Build with
// NVCC_FLAGS=-DONE_THREAD= to leave it out (the A/B script bench/experiments/one_thread_bounds.sh,
// removed in 424f6e8; the SASS in tests/gpu/records/2026-11-22/loop-sass.txt).
#ifndef ONE_THREAD
#define ONE_THREAD __launch_bounds__(1)
#endif

__global__ void ONE_THREAD p_lat(float* dst, int iters, int peer) {
    for (int i = 0; i < iters; i++) nvshmem_float_p(dst + (i & (LAT_SLOTS - 1)), (float)i, peer);
    nvshmem_quiet();
}

// The hardware floor of p_lat / g_lat: plain stores / loads through nvshmem_ptr, no NVSHMEM
// call in the loop (what an inlined nvshmem_float_p/g reduces to over NVLink).
__global__ void ONE_THREAD p_lat_peer_ptr(float* dst, int iters, int peer) {
    float* q = (float*)nvshmem_ptr(dst, peer);
    for (int i = 0; i < iters; i++) q[i & (LAT_SLOTS - 1)] = (float)i;
    nvshmem_quiet();
}

__global__ void ONE_THREAD g_lat_peer_ptr(float* src, float* out, int iters, int peer) {
    const float* q = (const float*)nvshmem_ptr(src, peer);
    float acc = 0.0f;
    for (int i = 0; i < iters; i++) acc += q[i & (LAT_SLOTS - 1)];
    out[0] = acc;
}

__global__ void ONE_THREAD g_lat(float* src, float* out, int iters, int peer) {
    float acc = 0.0f;
    for (int i = 0; i < iters; i++) acc += nvshmem_float_g(src + (i & (LAT_SLOTS - 1)), peer);
    out[0] = acc;
}

// The hardware floor of amo_lat: system-scope atomics through nvshmem_ptr, no NVSHMEM call.
__global__ void ONE_THREAD amo_lat_peer_ptr(uint64_t* counter, uint64_t* out, int iters, int peer) {
    unsigned long long* q = (unsigned long long*)nvshmem_ptr(counter, peer);
    uint64_t acc = 0;
    for (int i = 0; i < iters; i++) acc += atomicAdd_system(q, 1ULL);
    out[0] = acc;
}

__global__ void ONE_THREAD amo_lat(uint64_t* counter, uint64_t* out, int iters, int peer) {
    uint64_t acc = 0;
    for (int i = 0; i < iters; i++) acc += nvshmem_uint64_atomic_fetch_add(counter, 1, peer);
    out[0] = acc;
}

// PE 0 sends, PE 1 answers; one 8-byte payload and a signal per direction.
__global__ void ONE_THREAD pingpong(uint64_t* data, uint64_t* src, uint64_t* sig, int iters, int me, int peer) {
    if (me > 1) return;
    for (int i = 1; i <= iters; i++) {
        if (me == 0) {
            nvshmem_uint64_put_signal(data, src, 1, sig, (uint64_t)i, NVSHMEM_SIGNAL_SET, peer);
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, (uint64_t)i);
        } else {
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, (uint64_t)i);
            nvshmem_uint64_put_signal(data, src, 1, sig, (uint64_t)i, NVSHMEM_SIGNAL_SET, peer);
        }
    }
    nvshmem_quiet();
}

__global__ void barrier_lat(int iters) {
    for (int i = 0; i < iters; i++) nvshmemx_barrier_all_block();
}

// The kernel whose launch cost is measured: does nothing unless v < 0.
__global__ void empty_kernel(int* flag, int v) {
    if (v < 0) flag[0] = nvshmem_my_pe();
}

// Keeps the stream busy so that the host launch of the timed kernel is hidden.
__global__ void spin(int us) {
    for (int i = 0; i < us; i++) __nanosleep(1000);
}

// ------------------------------------------------------------------ output

// value = median over reps; best = the best rep (max for GB/s, min for times).
static void emit(const char* bench, const char* scope, long long bytes, const std::vector<double>& vals,
                 const char* unit, bool higher_better, long long iters) {
    double best = higher_better ? *std::max_element(vals.begin(), vals.end())
                                : *std::min_element(vals.begin(), vals.end());
    printf("{\"impl\":\"cpp\",\"bench\":\"%s\",\"scope\":\"%s\",\"bytes\":%lld,\"value\":%.6g,"
           "\"best\":%.6g,\"unit\":\"%s\",\"iters\":%lld,\"reps\":%zu,\"pe\":%d,\"npes\":%d}\n",
           bench, scope, bytes, median(vals), best, unit, iters, vals.size(), g_pe, g_npes);
    fflush(stdout);
}

// ------------------------------------------------------------------ timing

struct Timer {
    cudaStream_t stream;
    cudaEvent_t e0, e1;
    Timer() {
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
    }
    // Seconds for each of `reps` timed launches (after one warm-up), all PEs starting together.
    template <typename F>
    std::vector<double> run(int reps, F launch, void (*before)(cudaStream_t) = nullptr) {
        std::vector<double> out;
        for (int r = -1; r < reps; r++) {
            if (before) before(stream);
            CUDA_CHECK(cudaStreamSynchronize(stream));
            nvshmem_barrier_all();
            spin<<<1, 1, 0, stream>>>(SPIN_US_BEFORE_TIMED);
            CUDA_CHECK(cudaEventRecord(e0, stream));
            launch(stream);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaEventRecord(e1, stream));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) out.push_back(ms * 1e-3);
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        nvshmem_barrier_all();
        return out;
    }
};

// ------------------------------------------------------------------ benchmarks

struct Buffers {
    float* a;  // max_bytes
    float* b;  // max_bytes
    float* lat;
    float* out;
    uint64_t* u64;  // [0] counter, [1] out, [8] data, [9] src, [16] signal
    int* flag;
    float* coll_src;  // COLL_BW_BYTES * npes each
    float* coll_dst;
    size_t max_bytes;
};

template <int SCOPE, bool GET>
static void bw_one(Timer& t, const Params& p, const Buffers& buf, int peer) {
    dim3 block(SCOPE == THREAD ? THREAD_SCOPE_BLOCK : BW_BLOCK);
    for (size_t bytes : p.sizes) {
        if (bytes > buf.max_bytes) continue;
        size_t nelems = bytes / sizeof(float);
        if (nelems == 0) nelems = 1;
        int iters = bw_iters(p, bytes);
        int nwin = GET ? (int)std::max<size_t>(1, (buf.max_bytes / sizeof(float)) / nelems) : 1;
        float* dst = buf.a;
        float* src = buf.b;
        auto secs = t.run(p.reps, [&](cudaStream_t s) {
            rma_bw<SCOPE, GET><<<BW_GRID, block, 0, s>>>(dst, src, nelems, iters, peer, nwin);
        });
        std::vector<double> gbs;
        for (double x : secs) gbs.push_back((double)bytes * iters / x / 1e9);
        emit(GET ? "get_bw" : "put_bw", scope_name(SCOPE), (long long)bytes, gbs, "GB/s", true, iters);
    }
}

static std::vector<double> per_op(const std::vector<double>& secs, double ops, double scale) {
    std::vector<double> v;
    for (double x : secs) v.push_back(x / ops * scale);
    return v;
}

// ------------------------------------------------------------------ collectives (coll.cuh)

static CollKernel coll_kernel_of(int family, int scope) {
    switch (family) {
        case COLL_BROADCAST: return coll_kernel<COLL_BROADCAST>(scope);
        case COLL_FCOLLECT: return coll_kernel<COLL_FCOLLECT>(scope);
        case COLL_ALLTOALL: return coll_kernel<COLL_ALLTOALL>(scope);
        case COLL_REDUCE: return coll_kernel<COLL_REDUCE>(scope);
        case COLL_REDUCESCATTER: return coll_kernel<COLL_REDUCESCATTER>(scope);
        default: return coll_kernel<COLL_BARRIER>(scope);
    }
}

static int coll_threads(int scope) { return scope == THREAD ? THREAD_SCOPE_BLOCK : scope == WARP ? 32 : COLL_BLOCK; }

// NVSHMEM_REDUCE_SCRATCH_SIZE as NVSHMEM reads it (k/m/g/t suffixes), else its default: a
// reducescatter of `bytes` per PE needs 2 * bytes * npes of it (NVSHMEM asserts so).
static size_t reduce_scratch_bytes() {
    const char* v = getenv("NVSHMEM_REDUCE_SCRATCH_SIZE");
    if (!v || !*v) return DEFAULT_REDUCE_SCRATCH;
    char* end = nullptr;
    double x = strtod(v, &end);
    if (end == v) return DEFAULT_REDUCE_SCRATCH;
    const char* units = "kmgt";
    const char* u = *end ? strchr(units, tolower((unsigned char)*end)) : nullptr;
    for (const char* k = units; u && k <= u; k++) x *= 1024.0;
    return (size_t)x;
}

// Every collective x scope, latency at COLL_LAT_BYTES and bandwidth at COLL_BW_BYTES per PE (barrier:
// latency only, 0 bytes), in the order of _common.coll_points: one block calls `iters` of them.
static void coll_benchmarks(Timer& t, const Params& p, float* dst, float* src, int npes, bool lat, bool bw) {
    for (int f = 0; f < N_COLL_FAMILIES; f++) {
        for (int sc = 0; sc < N_SCOPES; sc++) {
            std::string name = std::string(COLL_FAMILY_NAMES[f]) + "_" + scope_name(sc);
            CollKernel k = coll_kernel_of(f, sc);
            dim3 threads(coll_threads(sc));
            for (int is_bw = 0; is_bw < 2; is_bw++) {
                if (is_bw ? !bw : !lat) continue;
                if (f == COLL_BARRIER && is_bw) continue;
                size_t bytes = f == COLL_BARRIER ? 0 : is_bw ? COLL_BW_BYTES : (size_t)COLL_LAT_BYTES;
                const char* bench = is_bw ? "coll_bw" : "coll_lat";
                if (f == COLL_REDUCESCATTER && 2 * bytes * npes > reduce_scratch_bytes()) {
                    fprintf(stderr, "cpp: %s %s skipped: needs NVSHMEM_REDUCE_SCRATCH_SIZE >= %zu\n", bench,
                            name.c_str(), 2 * bytes * npes);
                    continue;
                }
                size_t nelems = bytes / sizeof(float);
                int iters = is_bw ? p.coll_bw_iters : p.coll_lat_iters;
                void* args[] = {&dst, &src, &nelems, &iters};
                auto secs = t.run(p.reps, [&](cudaStream_t s) {
                    CUDA_CHECK(cudaLaunchKernel((const void*)k, dim3(1), threads, args, 0, s));
                });
                if (is_bw) {
                    std::vector<double> gbs;
                    for (double x : secs) gbs.push_back((double)bytes * iters / x / 1e9);
                    emit(bench, name.c_str(), (long long)bytes, gbs, "GB/s", true, iters);
                } else {
                    emit(bench, name.c_str(), (long long)bytes, per_op(secs, iters, 1e6), "us", false, iters);
                }
            }
        }
    }
}

static Buffers* g_buf;
static void reset_signal(cudaStream_t s) {
    CUDA_CHECK(cudaMemsetAsync(g_buf->u64 + 16, 0, sizeof(uint64_t), s));
}

int main(int argc, char** argv) {
    bool quick = false;
    int reps = 0;
    std::string uid_file, only, sizes;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--quick") quick = true;
        else if (a == "--uid-file" && i + 1 < argc) uid_file = argv[++i];
        else if (a == "--only" && i + 1 < argc) only = argv[++i];
        else if (a == "--reps" && i + 1 < argc) reps = atoi(argv[++i]);
        else if (a == "--sizes" && i + 1 < argc) sizes = argv[++i];
        else {
            fprintf(stderr, "usage: %s --uid-file PATH [--quick] [--only b1,b2] [--reps N] [--sizes bytes,bytes]\n",
                    argv[0]);
            return 2;
        }
    }
    std::set<std::string> want;
    for (size_t pos = 0; pos < only.size();) {
        size_t c = only.find(',', pos);
        if (c == std::string::npos) c = only.size();
        if (c > pos) want.insert(only.substr(pos, c - pos));
        pos = c + 1;
    }
    auto enabled = [&](const char* name) { return want.empty() || want.count(name) > 0; };

    double t_init = now_s();
    init_nvshmem(uid_file);
    t_init = now_s() - t_init;
    Params p = make_params(quick, reps);
    if (!sizes.empty()) {  // the put/get sizes in bytes (bench/run.py --sizes), instead of the default ones
        p.sizes.clear();
        for (size_t pos = 0; pos < sizes.size();) {
            size_t c = sizes.find(',', pos);
            if (c == std::string::npos) c = sizes.size();
            if (c > pos) p.sizes.push_back(strtoull(sizes.substr(pos, c - pos).c_str(), nullptr, 10));
            pos = c + 1;
        }
    }
    int me = g_pe, npes = g_npes, peer = (me + 1) % npes;

    print_meta("bench_cpp", me, npes, t_init, quick ? "\"quick\":true" : "\"quick\":false");

    Buffers buf;
    buf.max_bytes = *std::max_element(p.sizes.begin(), p.sizes.end());
    buf.a = (float*)nvshmem_malloc(buf.max_bytes);
    buf.b = (float*)nvshmem_malloc(buf.max_bytes);
    buf.lat = (float*)nvshmem_malloc(LAT_SLOTS * sizeof(float));
    buf.out = (float*)nvshmem_malloc(64);
    buf.u64 = (uint64_t*)nvshmem_malloc(32 * sizeof(uint64_t));
    buf.flag = (int*)nvshmem_malloc(64);
    const size_t coll_bytes = COLL_BW_BYTES * npes;
    buf.coll_src = (float*)nvshmem_malloc(coll_bytes);
    buf.coll_dst = (float*)nvshmem_malloc(coll_bytes);
    if (!buf.a || !buf.b || !buf.lat || !buf.out || !buf.u64 || !buf.flag || !buf.coll_src || !buf.coll_dst) {
        fprintf(stderr, "bench_cpp: nvshmem_malloc failed (raise NVSHMEM_SYMMETRIC_SIZE)\n");
        return 2;
    }
    CUDA_CHECK(cudaMemset(buf.a, 0, buf.max_bytes));
    CUDA_CHECK(cudaMemset(buf.b, 0, buf.max_bytes));
    CUDA_CHECK(cudaMemset(buf.lat, 0, LAT_SLOTS * sizeof(float)));
    CUDA_CHECK(cudaMemset(buf.u64, 0, 32 * sizeof(uint64_t)));
    CUDA_CHECK(cudaMemset(buf.coll_src, 0, coll_bytes));
    CUDA_CHECK(cudaMemset(buf.coll_dst, 0, coll_bytes));
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    g_buf = &buf;
    Timer t;

    if (enabled("put_bw")) {
        bw_one<THREAD, false>(t, p, buf, peer);
        bw_one<WARP, false>(t, p, buf, peer);
        bw_one<BLOCK, false>(t, p, buf, peer);
    }
    if (enabled("get_bw")) {
        bw_one<THREAD, true>(t, p, buf, peer);
        bw_one<WARP, true>(t, p, buf, peer);
        bw_one<BLOCK, true>(t, p, buf, peer);
    }
    if (enabled("p_lat")) {
        int it = p.lat_iters;
        auto s = t.run(p.reps, [&](cudaStream_t st) { p_lat<<<1, 1, 0, st>>>(buf.lat, it, peer); });
        emit("p_lat", "thread", 4, per_op(s, it, 1e9), "ns/op", false, it);
        s = t.run(p.reps, [&](cudaStream_t st) { p_lat_peer_ptr<<<1, 1, 0, st>>>(buf.lat, it, peer); });
        emit("p_lat", "peer_ptr", 4, per_op(s, it, 1e9), "ns/op", false, it);
    }
    if (enabled("g_lat")) {
        int it = p.lat_iters;
        auto s = t.run(p.reps, [&](cudaStream_t st) { g_lat<<<1, 1, 0, st>>>(buf.lat, buf.out, it, peer); });
        emit("g_lat", "thread", 4, per_op(s, it, 1e9), "ns/op", false, it);
        s = t.run(p.reps, [&](cudaStream_t st) { g_lat_peer_ptr<<<1, 1, 0, st>>>(buf.lat, buf.out, it, peer); });
        emit("g_lat", "peer_ptr", 4, per_op(s, it, 1e9), "ns/op", false, it);
    }
    if (enabled("amo_lat")) {
        int it = p.amo_iters;
        auto s = t.run(p.reps, [&](cudaStream_t st) { amo_lat<<<1, 1, 0, st>>>(buf.u64, buf.u64 + 1, it, peer); });
        emit("atomic_fetch_add_lat", "thread", 8, per_op(s, it, 1e9), "ns/op", false, it);
        s = t.run(p.reps, [&](cudaStream_t st) { amo_lat_peer_ptr<<<1, 1, 0, st>>>(buf.u64, buf.u64 + 1, it, peer); });
        emit("atomic_fetch_add_lat", "peer_ptr", 8, per_op(s, it, 1e9), "ns/op", false, it);
    }
    if (enabled("pingpong") && npes >= 2) {
        int it = p.pingpong_iters;
        auto s = t.run(
            p.reps,
            [&](cudaStream_t st) {
                pingpong<<<1, 1, 0, st>>>(buf.u64 + 8, buf.u64 + 9, buf.u64 + 16, it, me, peer);
            },
            reset_signal);
        emit("put_signal_pingpong", "thread", 8, per_op(s, 2.0 * it, 1e6), "us", false, it);
    }
    if (enabled("barrier")) {
        int it = p.barrier_iters;
        auto s = t.run(p.reps, [&](cudaStream_t st) { barrier_lat<<<1, BARRIER_BLOCK, 0, st>>>(it); });
        emit("barrier_all_block_lat", "block", 0, per_op(s, it, 1e6), "us", false, it);
    }
    if (enabled("coll_lat") || enabled("coll_bw"))
        coll_benchmarks(t, p, buf.coll_dst, buf.coll_src, npes, enabled("coll_lat"), enabled("coll_bw"));
    if (enabled("launch")) {
        std::vector<double> v;
        for (int r = -1; r < p.reps; r++) {
            CUDA_CHECK(cudaStreamSynchronize(t.stream));
            spin<<<1, 1, 0, t.stream>>>(SPIN_US_BEFORE_LAUNCHES);
            double t0 = now_s();
            for (int i = 0; i < p.launches; i++) empty_kernel<<<1, 1, 0, t.stream>>>(buf.flag, 1);
            double t1 = now_s();
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaStreamSynchronize(t.stream));
            if (r >= 0) v.push_back((t1 - t0) / p.launches * 1e6);
        }
        emit("launch_overhead", "", 0, v, "us", false, p.launches);
    }
    if (enabled("host")) {
        std::vector<double> v;
        volatile int sink = 0;
        for (int r = 0; r < p.reps; r++) {
            double t0 = now_s();
            for (int i = 0; i < p.host_calls; i++) sink += nvshmem_my_pe();
            v.push_back((now_s() - t0) / p.host_calls * 1e9);
        }
        (void)sink;
        emit("host_my_pe", "", 0, v, "ns", false, p.host_calls);
        v.clear();
        nvshmem_barrier_all();
        for (int r = 0; r < p.reps; r++) {
            double t0 = now_s();
            for (int i = 0; i < p.alloc_reps; i++) {
                void* x = nvshmem_malloc(ALLOC_BYTES);
                nvshmem_free(x);
            }
            v.push_back((now_s() - t0) / p.alloc_reps * 1e6);
        }
        emit("host_alloc_free", "", (long long)ALLOC_BYTES, v, "us", false, p.alloc_reps);
        // host time to enqueue each on-stream call on the legacy default stream, queued behind a spin
        // (= _common.host_benchmarks): a put of 8 B to the peer, a sum reduce of 8 B, a barrier_all
        float *dst = buf.out, *src = buf.out + 8;
        const int calls = std::min(p.launches, ON_STREAM_CALLS);
        const std::pair<const char*, long long> rows[] = {{"host_put_on_stream", 8},
                                                          {"host_reduce_on_stream", 8},
                                                          {"host_barrier_all_on_stream", 0}};
        for (int row = 0; row < 3; row++) {
            nvshmem_barrier_all();
            v.clear();
            for (int r = -1; r < p.reps; r++) {
                CUDA_CHECK(cudaStreamSynchronize(0));
                spin<<<1, 1, 0, 0>>>(SPIN_US_BEFORE_LAUNCHES);
                double t0 = now_s();
                for (int i = 0; i < calls; i++) {
                    if (row == 0) nvshmemx_float_put_on_stream(dst, src, 2, peer, 0);
                    else if (row == 1) nvshmemx_float_sum_reduce_on_stream(NVSHMEM_TEAM_WORLD, dst, src, 2, 0);
                    else nvshmemx_barrier_all_on_stream(0);
                }
                double t1 = now_s();
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaStreamSynchronize(0));
                if (r >= 0) v.push_back((t1 - t0) / calls * 1e6);
            }
            emit(rows[row].first, "", rows[row].second, v, "us", false, calls);
        }
    }

    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    nvshmem_free(buf.coll_dst);
    nvshmem_free(buf.coll_src);
    nvshmem_free(buf.flag);
    nvshmem_free(buf.u64);
    nvshmem_free(buf.out);
    nvshmem_free(buf.lat);
    nvshmem_free(buf.b);
    nvshmem_free(buf.a);
    nvshmem_finalize();
    return 0;
}
