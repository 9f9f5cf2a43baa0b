// The CUDA C++ twin of nvshmem_dsl's MoE dispatch and combine (low-latency mode), the baseline the
// Numba / Triton versions are measured against, and its driver: bench/cpp/build/moe_cpp
// (bench/cpp/build.sh, target moe).
//
// The protocol and buffer layout are those of runtime/kernels/moe/_layout.py; the kernels are those of
// runtime/kernels/moe/triton.py (and numba.py), the same algorithm: grid = min(GRID_MAX, E) blocks of
// THREADS threads, block b taking experts e = b, b + grid, ....
// Dispatch reads topk in vectors of THREADS entries (a thread an entry, in token order; a token's
// repeated expert counts at its first slot), the matches' running count (a ballot a warp, the warps'
// totals) being each one's slot.  Rows move as NVSHMEM moves them: where the PE is reached by load/store
// (nvshmem_ptr not null: NVLink, or the same GPU), as put_nbi's P2P path, by 16-byte vector stores
// through the peer's address, a warp a row (ROWS = 16 rows at once), and the row's t * K + j stored
// to recv_src on the peer (p's P2P path), then __syncthreads before thread 0's fence; else
// put_nbi_block a row and thread 0's p.  Then fence and signal_op(word, epoch << 32 | count, SET); then
// thread 0 waits for the block's own words and writes their counts.
// Combine puts the experts' rows back the same way (a warp a row by stores where reachable, else
// put_nbi_block), fence and signal_op(epoch); the E combine words are polled by the block's threads at
// once (a word a thread, volatile loads), then thread 0's wait_until of the last (NVSHMEM's step after a
// wait); out[t] = the sum over j in order of weight * row in float32, product and sum each rounded
// (__fmul_rn, __fadd_rn: never an fma), a slot of no expert left out by a select after its row's load,
// rounded to bfloat16 to nearest even; a row of H <= BLOCK_H = 8192 in one step (two 16-byte vectors a
// thread), the slot loop unrolled by 4; a repeated expert's slots read the row of its first slot.
// Both end with __syncthreads and thread 0's nvshmem_quiet.  Vectors need H a multiple of 8 (else
// elements).
//
// Usage (one process per PE, NVSHMEM's unique-id bootstrap as comm_cpp: init.cuh):
//   python -m nvshmem_dsl.run -n 2 bench/cpp/exec.py bench/cpp/build/moe_cpp --uid-file F \
//       --tokens T --hidden H --experts E --topk K [--iters N] [--reps R] [--spin-us U]
// T tokens on every PE (max_tokens = T, at most MAX_TOKENS), E a multiple of the PEs, K <= E.
//
// Inputs (every PE can recompute every PE's): x[t][h] = ((t * 5 + h * 3 + pe * 7) % 17) - 8 (bfloat16);
// topk[t][j]: K distinct experts a token, drawn by a hash of (pe, t) (splitmix64, rejection of repeats),
// a slot set to -1 where another hash of (pe, t, j) is 7 mod 8; weights[t][j] = 1 / 2^(j % 4).
// The "experts" (a kernel between dispatch and combine, in the check only): y[l][src][s] =
// recv_x[par][l][src][s] * (global expert + 1), rounded to bfloat16.
//
// Output, one JSON line each on stdout: {"bench":"meta",...} (device, NVSHMEM version), then
//   {"impl":"cpp","bench":"moe_check","tokens","hidden","experts","topk","npes","pe","grid","epoch","ok",
//    "routed","received","count_mismatches","src_mismatches","out_mismatches","first":{...} or null}:
//    one dispatch + experts + combine (epoch 1); counts per (local expert, source PE) and recv_src (the
//    t * K + j in token order) against every PE's routing, out against the host's weighted sums (the
//    host rounds y and out as the kernels do: exact, compared element by element); routed / received:
//    the rows this PE sends (topk >= 0) / receives by the routing; first: the first wrong out element;
//   {"impl":"cpp","bench":"moe","op":"round"|"dispatch"|"combine","tokens","hidden","experts","topk",
//    "npes","pe","grid","us","us_min","bytes","routed","iters","reps","ok","host_us","spin_us"}:
//    after 10 warm-up rounds, `reps` runs (default 5) of `iters` (default 100) back-to-back rounds
//    (dispatch then combine, no experts kernel: y keeps the check's results, which every round's
//    routing and x reproduce), each run behind a one-thread kernel that spins `spin-us` microseconds
//    (default 2000) so that the events time the GPU, not the host's launches;
//      op "round": runs with events around the whole run only: us = time per round (dispatch + combine);
//      ops "dispatch" / "combine": other runs with an event after every kernel: us = the summed time of
//      that kernel over the run / iters (each includes its waits for the peers);
//    us = the median over runs, us_min the best run; bytes = the bytes this PE sends in dispatch (its
//    routed rows, topk >= 0, this PE's own included, x H x 2), routed = those rows; ok = the check and a
//    second check of the counts, recv_src and out after the timed runs; host_us: the host's time to enqueue one
//    round (round) or one kernel and its event (dispatch / combine, the same figure).
// The epoch starts at 1 and grows by one every round (dispatch and its combine share it); the signal
// words are zeroed once.  Exit status 1 when a check failed, 2 on bad arguments or a failed allocation.

#define INIT_PROG "moe_cpp"
#include "init.cuh"  // CUDA_CHECK, g_pe / g_npes, now_s, init_nvshmem (shared with bench.cu, comm.cu)
#include "driver.cuh"  // argument parsing, JSON numbers, medians, the spin kernel

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

// ------------------------------------------------------------------ protocol (= runtime/kernels/moe/_layout.py)

static const int THREADS = 512;        // _layout.THREADS
static const int GRID_MAX = 32;        // _layout.GRID_MAX
static const int MAX_TOKENS = 4096;    // _layout.MAX_TOKENS: tokens a PE and call at most
static const int MAX_TOPK = 32;        // _layout.MAX_TOPK: combine's shared slot list of one token
static const int WARMUP = 10;

typedef __nv_bfloat16 bf16;

// ------------------------------------------------------------------ kernels

static const int ROWS = THREADS / 32;  // rows a P2P copy step moves: a warp a row (16)
static const int VEC = 8;       // bfloat16 elements of a 16-byte vector
static const int BLOCK_H = 16 * THREADS;  // elements of one step of combine's sum: two vectors a thread
static const int UNROLL_K = 4;  // combine's slots unrolled (their row loads in flight together)

__device__ __forceinline__ void finish() {
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

// dst[h] = src[h], h < H, by the lanes of a warp: 16-byte vectors (four a lane in flight) where H is a
// multiple of 8 (every row then starts 16-byte aligned), else elements. dst: a peer's address (nvshmem_ptr): stores through
// it are NVSHMEM put_nbi's P2P path.
__device__ __forceinline__ void copy_row(bf16* dst, const bf16* src, int64_t H, int lane) {
    if ((H & (VEC - 1)) == 0) {
        uint4* d = (uint4*)dst;
        const uint4* s = (const uint4*)src;
        const int64_t n = H / VEC;
        int64_t v = lane;
        for (; v + 96 < n; v += 128) {  // four vectors loaded, then stored (the stores may alias the loads)
            const uint4 q0 = s[v], q1 = s[v + 32], q2 = s[v + 64], q3 = s[v + 96];
            d[v] = q0;
            d[v + 32] = q1;
            d[v + 64] = q2;
            d[v + 96] = q3;
        }
        for (; v < n; v += 32) d[v] = s[v];
    } else {
        for (int64_t h = lane; h < H; h += 32) dst[h] = src[h];
    }
}

// Is topk[idx] (slot j = idx % K of its token) a match of expert e? A token's repeated expert counts
// at its first slot only.
__device__ __forceinline__ bool match(const int64_t* topk, int64_t idx, int64_t j, int64_t TK, int64_t e) {
    bool hit = idx < TK && topk[idx] == e;
    if (hit)
        for (int64_t jj = 1; jj <= j; jj++) hit = hit && topk[idx - jj] != e;
    return hit;
}

__global__ void __launch_bounds__(THREADS)
    dispatch(const bf16* x, const int64_t* topk, bf16* recv_x, int* recv_src, uint64_t* sig, int* recv_count,
             int64_t epoch, int64_t T, int64_t K, int64_t H, int64_t L, int64_t me, int64_t npes, int64_t T_max) {
    __shared__ int order[THREADS];       // the t * K + j of this scan vector's matches, in token order
    __shared__ int warp_hits[ROWS];  // matches a warp
    const int64_t b = blockIdx.x;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int w = tid >> 5;
    const int64_t E = L * npes;
    const int64_t TK = T * K;
    const int64_t par = epoch & 1;
    for (int64_t e = b; e < E; e += gridDim.x) {
        const int dst = (int)(e / L);
        const int64_t row0 = ((par * L + e % L) * npes + me) * T_max;  // row s of [par][e % L][me]
        bf16* to_x = (bf16*)nvshmem_ptr(recv_x, dst);
        int* to_src = (int*)nvshmem_ptr(recv_src, dst);
        int64_t count = 0;  // rows sent
        for (int64_t base = 0; base < TK; base += THREADS) {  // topk == e, in token order
            const int64_t idx = base + tid;
            const bool hit = match(topk, idx, idx % K, TK, e);
            // the matches' running count (inclusive): a ballot a warp, the warps' totals in order
            const unsigned bal = __ballot_sync(0xFFFFFFFFu, hit);
            if (lane == 0) warp_hits[w] = __popc(bal);
            __syncthreads();
            int rank = __popc(bal & ((2u << lane) - 1u)), n = 0;
            for (int i = 0; i < ROWS; i++) {
                const int c = warp_hits[i];
                rank += i < w ? c : 0;
                n += c;
            }
            if (hit) {
                order[rank - 1] = (int)idx;
                if (to_src) to_src[row0 + count + rank - 1] = (int)idx;  // p's P2P path: a store
            }
            __syncthreads();
            if (to_x) {  // dst reached by load/store: a warp a row, ROWS rows at once
                for (int s = w; s < n; s += ROWS)
                    copy_row(to_x + (row0 + count + s) * H, x + ((int64_t)order[s] / K) * H, H, lane);
            } else {
                for (int s = 0; s < n; s++) {
                    const int64_t r = row0 + count + s;
                    nvshmemx_bfloat16_put_nbi_block(recv_x + r * H, x + ((int64_t)order[s] / K) * H, (size_t)H,
                                                    dst);
                    if (tid == 0) nvshmem_int_p(recv_src + r, order[s], dst);
                }
            }
            count += n;
            __syncthreads();  // order and warp_hits free again; every thread's stores before thread 0's fence
        }
        if (tid == 0) {
            nvshmem_fence();
            const int64_t word = (e % L) * npes + me;
            nvshmemx_signal_op(sig + word, ((uint64_t)epoch << 32) | (uint64_t)(uint32_t)count, NVSHMEM_SIGNAL_SET,
                               dst);
        }
    }
    if (tid == 0) {
        for (int64_t word = b; word < E; word += gridDim.x) {
            const uint64_t got = nvshmem_signal_wait_until(sig + word, NVSHMEM_CMP_GE, (uint64_t)epoch << 32);
            recv_count[word] = (int)(got & 0xFFFFFFFFull);
        }
    }
    finish();
}

// acc + w * v, the product and the sum each rounded (never contracted to an fma): the DSL kernels' sum.
__device__ __forceinline__ float add_product(float acc, float w, float v) { return __fadd_rn(acc, __fmul_rn(w, v)); }

// The 8 bfloat16 elements of row[h, h + 8) as floats: one 16-byte vector (VECTORS: H a multiple of 8,
// h < H), else elements (0 past H).
template <bool VECTORS>
__device__ __forceinline__ void load8(const bf16* row, int64_t h, int64_t H, float* v) {
    if (VECTORS) {
        const uint4 q = *(const uint4*)(row + h);
        const unsigned u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[2 * i] = __uint_as_float(u[i] << 16);
            v[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
        }
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++) v[i] = h + i < H ? __bfloat162float(row[h + i]) : 0.0f;
    }
}

template <bool VECTORS>
__device__ __forceinline__ void store8(bf16* row, int64_t h, int64_t H, const float* a) {
    if (VECTORS) {
        if (h < H) {
            unsigned u[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const __nv_bfloat162 p = __floats2bfloat162_rn(a[2 * i], a[2 * i + 1]);
                u[i] = *(const unsigned*)&p;
            }
            *(uint4*)(row + h) = make_uint4(u[0], u[1], u[2], u[3]);
        }
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++)
            if (h + i < H) row[h + i] = __float2bfloat16_rn(a[i]);
    }
}

// out[t] = sum over j of weights[t][j] * comb_x[t * K + slot[j]] (slot[j] < 0: left out), a step of
// BLOCK_H elements: two vectors of 8 a thread (h0, h1), the slots' loads unconditional (a vector past H
// reads the row's last vector, its sum not stored), UNROLL_K slots' rows loaded at once (8 vectors in
// flight), then summed in slot order.
template <bool VECTORS>
__device__ __forceinline__ void sum_token(bf16* out, const bf16* comb_x, const float* weights, const int* slot,
                                          int64_t t, int64_t K, int64_t H) {
    for (int64_t h = 0; h < H; h += BLOCK_H) {  // one step where H <= BLOCK_H
        const int64_t h0 = h + (int64_t)threadIdx.x * VEC, h1 = h0 + THREADS * VEC;
        const int64_t l0 = VECTORS ? min(h0, H - VEC) : h0, l1 = VECTORS ? min(h1, H - VEC) : h1;
        float a0[VEC], a1[VEC];
#pragma unroll
        for (int i = 0; i < VEC; i++) a0[i] = a1[i] = 0.0f;
        int64_t j = 0;
        for (; j + UNROLL_K <= K; j += UNROLL_K) {  // UNROLL_K slots' rows loaded, then summed in order
            float v0[UNROLL_K][VEC], v1[UNROLL_K][VEC];
            int r[UNROLL_K];
#pragma unroll
            for (int u = 0; u < UNROLL_K; u++) {  // the rows loaded before the select (no branch around them)
                r[u] = slot[j + u];
                const bf16* row = comb_x + (t * K + max(r[u], 0)) * H;
                load8<VECTORS>(row, l0, H, v0[u]);
                load8<VECTORS>(row, l1, H, v1[u]);
            }
#pragma unroll
            for (int u = 0; u < UNROLL_K; u++) {
                const float wj = weights[t * K + j + u];
#pragma unroll
                for (int i = 0; i < VEC; i++) {
                    a0[i] = r[u] >= 0 ? add_product(a0[i], wj, v0[u][i]) : a0[i];
                    a1[i] = r[u] >= 0 ? add_product(a1[i], wj, v1[u][i]) : a1[i];
                }
            }
        }
        for (; j < K; j++) {
            const int r = slot[j];
            const float wj = weights[t * K + j];
            const bf16* row = comb_x + (t * K + max(r, 0)) * H;
            float v0[VEC], v1[VEC];
            load8<VECTORS>(row, l0, H, v0);
            load8<VECTORS>(row, l1, H, v1);
#pragma unroll
            for (int i = 0; i < VEC; i++) {
                a0[i] = r >= 0 ? add_product(a0[i], wj, v0[i]) : a0[i];
                a1[i] = r >= 0 ? add_product(a1[i], wj, v1[i]) : a1[i];
            }
        }
        store8<VECTORS>(out + t * H, h0, H, a0);
        store8<VECTORS>(out + t * H, h1, H, a1);
    }
}

__global__ void __launch_bounds__(THREADS)
    combine(const bf16* y, const int64_t* topk, const float* weights, const int* recv_src, bf16* comb_x,
            uint64_t* sig, const int* recv_count, bf16* out, int64_t epoch, int64_t T, int64_t K, int64_t H,
            int64_t L, int64_t me, int64_t npes, int64_t T_max) {
    const int64_t b = blockIdx.x;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int w = tid >> 5;
    const int64_t E = L * npes;
    const int64_t par = epoch & 1;
    for (int64_t word = b; word < E; word += gridDim.x) {  // word = l * npes + src: results back to src
        const int64_t l = word / npes;
        const int src = (int)(word % npes);
        const int64_t count = recv_count[word];
        bf16* to = (bf16*)nvshmem_ptr(comb_x, src);
        if (to) {  // src reached by load/store: a warp a row, ROWS rows at once
            for (int64_t s = w; s < count; s += ROWS) {
                const int64_t r = word * T_max + s;
                const int64_t idx = recv_src[par * E * T_max + r];
                copy_row(to + idx * H, y + r * H, H, lane);
            }
        } else {
            for (int64_t s = 0; s < count; s++) {
                const int64_t r = word * T_max + s;
                const int64_t idx = recv_src[par * E * T_max + r];
                nvshmemx_bfloat16_put_nbi_block(comb_x + idx * H, y + r * H, (size_t)H, src);
            }
        }
        __syncthreads();  // every thread's stores before thread 0's fence
        if (tid == 0) {
            nvshmem_fence();
            nvshmemx_signal_op(sig + E + me * L + l, (uint64_t)epoch, NVSHMEM_SIGNAL_SET, src);
        }
    }
    // every combine word: polled by the block's threads at once (a word a thread, volatile loads), then
    // thread 0's wait_until of the last one, already set (NVSHMEM's step after a wait)
    {
        volatile uint64_t* words = sig + E;
        for (int64_t w0 = 0; w0 < E; w0 += THREADS) {
            const int64_t i = w0 + tid;
            if (i < E)
                while (words[i] < (uint64_t)epoch) {
                }
        }
        __syncthreads();
        if (tid == 0) nvshmem_uint64_wait_until(sig + E + E - 1, NVSHMEM_CMP_GE, (uint64_t)epoch);
    }
    __shared__ int slot[MAX_TOPK];  // slot j's row: that of its expert's first slot; -1: none
    for (int64_t t = b; t < T; t += gridDim.x) {
        __syncthreads();
        if (tid < K) {
            const int64_t e = topk[t * K + tid];
            int first = tid;
            for (int jj = tid - 1; jj >= 0; jj--) if (topk[t * K + jj] == e) first = jj;
            slot[tid] = e >= 0 ? first : -1;
        }
        __syncthreads();
        if ((H & (VEC - 1)) == 0) sum_token<true>(out, comb_x, weights, slot, t, K, H);
        else sum_token<false>(out, comb_x, weights, slot, t, K, H);
    }
    finish();
}

// The experts of this benchmark: y[l][src][s] = recv_x[par][l][src][s] * (me * L + l + 1), rows below the
// counts; one block a word l * npes + src.
__global__ void __launch_bounds__(THREADS)
    experts(const bf16* recv_x, bf16* y, const int* recv_count, int64_t epoch, int64_t H, int64_t L, int64_t me,
            int64_t npes, int64_t T_max) {
    const int64_t word = blockIdx.x;
    const int64_t l = word / npes;
    const float mult = (float)(me * L + l + 1);
    const int64_t half = (epoch & 1) * L * npes * T_max * H;
    const int64_t n = (int64_t)recv_count[word] * H;
    const int64_t base = word * T_max * H;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        y[base + i] = __float2bfloat16_rn(__bfloat162float(recv_x[half + base + i]) * mult);
}

// Keeps the stream busy for about `ns` nanoseconds (%globaltimer), so that the host's launches of
// the timed calls are enqueued before the first of them can start.

// ------------------------------------------------------------------ inputs (every PE's, on any host)

static uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// PE pe's routing of token t: K distinct experts of E (draws of a hash of (pe, t, n), repeats rejected),
// a slot -1 where a hash of (pe, t, j) is 7 mod 8.
static void route(int64_t pe, int64_t t, int64_t E, int64_t K, int64_t* out) {
    const uint64_t seed = mix64(((uint64_t)pe << 40) ^ (uint64_t)t);
    uint64_t n = 0;
    for (int64_t j = 0; j < K; j++) {
        int64_t e;
        bool repeat;
        do {
            e = (int64_t)(mix64(seed + n++) % (uint64_t)E);
            repeat = false;
            for (int64_t i = 0; i < j; i++) repeat = repeat || out[i] == e;
        } while (repeat);
        out[j] = e;
    }
    for (int64_t j = 0; j < K; j++)
        if (mix64(seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(j + 1))) % 8 == 7) out[j] = -1;
}

static float xval(int64_t pe, int64_t t, int64_t h) { return (float)(((t * 5 + h * 3 + pe * 7) % 17) - 8); }

static float weight(int64_t j) { return 1.0f / (float)(1 << (j % 4)); }

// ------------------------------------------------------------------ host side

struct Moe {
    int64_t T, H, E, K, L, me, npes, T_max;
    int grid;
    // symmetric
    bf16* x;          // [T][H]
    bf16* recv_x;     // [2][L][npes][T_max][H]
    int* recv_src;    // [2][L][npes][T_max]
    bf16* comb_x;     // [T_max * K][H]
    uint64_t* sig;    // [L * npes + E] words, then recv_count
    int* recv_count;  // [L * npes] (after the words, as MoEBuffer keeps it)
    bf16* y;          // [L][npes][T_max][H]
    // local
    int64_t* topk;    // [T][K]
    float* weights;   // [T][K]
    bf16* out;        // [T][H]
    int64_t rows() const { return L * npes * T_max; }
    int64_t words() const { return L * npes + E; }
};

static int64_t g_epoch = 1;  // the next round's epoch: the same on every PE, never reset

static void launch_dispatch(const Moe& m, int64_t epoch, cudaStream_t s) {
    dispatch<<<m.grid, THREADS, 0, s>>>(m.x, m.topk, m.recv_x, m.recv_src, m.sig, m.recv_count, epoch, m.T, m.K,
                                        m.H, m.L, m.me, m.npes, m.T_max);
}

static void launch_combine(const Moe& m, int64_t epoch, cudaStream_t s) {
    combine<<<m.grid, THREADS, 0, s>>>(m.y, m.topk, m.weights, m.recv_src, m.comb_x, m.sig, m.recv_count, m.out,
                                       epoch, m.T, m.K, m.H, m.L, m.me, m.npes, m.T_max);
}

struct Check {
    int64_t counts = 0, srcs = 0, outs = 0;
    int64_t first_t = -1, first_h = -1;
    float first_got = 0, first_want = 0;
    bool ok() const { return counts == 0 && srcs == 0 && outs == 0; }
};

// The host's view of every PE's routing and of this PE's expected results.
struct Expect {
    std::vector<int64_t> topk_all;   // [npes][T][K]
    std::vector<int> counts;         // [L][npes]: rows this PE receives
    std::vector<std::vector<int>> srcs;  // [L * npes]: their t * K + j in token order
    std::vector<float> out;          // [T][H]
    int64_t routed = 0;              // rows this PE sends (topk >= 0)
};

static Expect expect(const Moe& m) {
    Expect x;
    const int64_t T = m.T, K = m.K, E = m.E, L = m.L, npes = m.npes, me = m.me, H = m.H;
    x.topk_all.resize((size_t)(npes * T * K));
    for (int64_t pe = 0; pe < npes; pe++)
        for (int64_t t = 0; t < T; t++) route(pe, t, E, K, &x.topk_all[(size_t)((pe * T + t) * K)]);
    x.counts.assign((size_t)(L * npes), 0);
    x.srcs.assign((size_t)(L * npes), {});
    for (int64_t src = 0; src < npes; src++)
        for (int64_t idx = 0; idx < T * K; idx++) {
            const int64_t e = x.topk_all[(size_t)(src * T * K + idx)];
            if (e >= 0 && e / L == me) {
                const int64_t wd = (e % L) * npes + src;
                x.counts[(size_t)wd]++;
                x.srcs[(size_t)wd].push_back((int)idx);
            }
        }
    const int64_t* mine = &x.topk_all[(size_t)(me * T * K)];
    for (int64_t i = 0; i < T * K; i++) x.routed += mine[i] >= 0;
    x.out.resize((size_t)(T * H));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < K; j++) {
                const int64_t e = mine[t * K + j];
                if (e < 0) continue;
                // the expert's bfloat16 result, as the experts kernel rounds it
                const float yv = __bfloat162float(__float2bfloat16_rn(
                    __bfloat162float(__float2bfloat16_rn(xval(me, t, h))) * (float)(e + 1)));
                acc += weight(j) * yv;
            }
            x.out[(size_t)(t * H + h)] = __bfloat162float(__float2bfloat16_rn(acc));
        }
    return x;
}

// Counts, (optionally) recv_src of epoch's half, and out against the host's.
static Check check(const Moe& m, const Expect& want, int64_t epoch, bool with_src) {
    Check c;
    const int64_t W = m.L * m.npes;
    std::vector<int> counts((size_t)W);
    CUDA_CHECK(cudaMemcpy(counts.data(), m.recv_count, counts.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (int64_t wd = 0; wd < W; wd++) c.counts += counts[(size_t)wd] != want.counts[(size_t)wd];
    if (with_src) {
        std::vector<int> src((size_t)m.rows());
        CUDA_CHECK(cudaMemcpy(src.data(), m.recv_src + (epoch & 1) * m.rows(), src.size() * sizeof(int),
                              cudaMemcpyDeviceToHost));
        for (int64_t wd = 0; wd < W; wd++) {
            const std::vector<int>& ws = want.srcs[(size_t)wd];
            for (size_t s = 0; s < ws.size() && (int64_t)s < m.T_max; s++)
                c.srcs += src[(size_t)(wd * m.T_max) + s] != ws[s];
        }
    }
    std::vector<bf16> out((size_t)(m.T * m.H));
    CUDA_CHECK(cudaMemcpy(out.data(), m.out, out.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < m.T * m.H; i++) {
        const float g = __bfloat162float(out[(size_t)i]), w = want.out[(size_t)i];
        if (!(g == w)) {
            if (c.first_t < 0) {
                c.first_t = i / m.H;
                c.first_h = i % m.H;
                c.first_got = g;
                c.first_want = w;
            }
            c.outs++;
        }
    }
    return c;
}

static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s --uid-file PATH --tokens T --hidden H --experts E --topk K [--iters N] [--reps R] "
            "[--spin-us U]\n"
            "  T tokens on every PE (1..%d), E a multiple of the PEs, 1 <= K <= E\n",
            prog, MAX_TOKENS);
}

int main(int argc, char** argv) {
    std::string uid_file;
    int64_t T = 0, H = 0, E = 0, K = 0, iters = 100, reps = 5;
    double spin_us = 2000;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        bool has = i + 1 < argc;
        bool ok = true;
        if (a == "--uid-file" && has) uid_file = argv[++i];
        else if (a == "--tokens" && has) ok = parse_i64(argv[++i], &T);
        else if (a == "--hidden" && has) ok = parse_i64(argv[++i], &H);
        else if (a == "--experts" && has) ok = parse_i64(argv[++i], &E);
        else if (a == "--topk" && has) ok = parse_i64(argv[++i], &K);
        else if (a == "--iters" && has) ok = parse_i64(argv[++i], &iters) && iters >= 1;
        else if (a == "--reps" && has) ok = parse_i64(argv[++i], &reps) && reps >= 1;
        else if (a == "--spin-us" && has) ok = parse_f64(argv[++i], &spin_us) && spin_us >= 0;
        else ok = false;
        if (!ok) {
            usage(argv[0]);
            return 2;
        }
    }
    if (T < 1 || T > MAX_TOKENS || H < 1 || E < 1 || K < 1 || K > E || K > MAX_TOPK || E > (int64_t)1 << 30) {
        fprintf(stderr, "moe_cpp: bad sizes: tokens %lld (1..%d), hidden %lld (>= 1), experts %lld (>= 1), "
                        "topk %lld (1..experts, at most %d)\n",
                (long long)T, MAX_TOKENS, (long long)H, (long long)E, (long long)K, MAX_TOPK);
        usage(argv[0]);
        return 2;
    }

    double t_init = now_s();
    init_nvshmem(uid_file);
    t_init = now_s() - t_init;
    const int64_t me = g_pe, npes = g_npes;
    if (E % npes) {
        fprintf(stderr, "moe_cpp: experts (%lld) must be a multiple of the %lld PEs\n", (long long)E,
                (long long)npes);
        return 2;
    }

    Moe m;
    m.T = T;
    m.H = H;
    m.E = E;
    m.K = K;
    m.L = E / npes;
    m.me = me;
    m.npes = npes;
    m.T_max = T;
    m.grid = (int)std::min<int64_t>(GRID_MAX, E);

    {
        char extra[256];
        snprintf(extra, sizeof extra, "\"threads\":%d,\"grid\":%d,\"iters\":%lld,\"reps\":%lld,\"spin_us\":%.6g",
                 THREADS, m.grid, (long long)iters, (long long)reps, spin_us);
        print_meta("moe_cpp", (long long)me, (long long)npes, t_init, extra);
    }

    // ---- buffers (symmetric: the same sizes on every PE)
    const size_t rows = (size_t)m.rows();
    const size_t sz_x = (size_t)(T * H) * sizeof(bf16), sz_recv_x = 2 * rows * (size_t)H * sizeof(bf16),
                 sz_recv_src = 2 * rows * sizeof(int), sz_comb = (size_t)(T * K * H) * sizeof(bf16),
                 sz_sig = (size_t)m.words() * sizeof(uint64_t) + (size_t)(m.L * npes) * sizeof(int),
                 sz_y = rows * (size_t)H * sizeof(bf16);
    m.x = (bf16*)nvshmem_malloc(sz_x);
    m.recv_x = (bf16*)nvshmem_malloc(sz_recv_x);
    m.recv_src = (int*)nvshmem_malloc(sz_recv_src);
    m.comb_x = (bf16*)nvshmem_malloc(sz_comb);
    m.sig = (uint64_t*)nvshmem_malloc(sz_sig);
    m.y = (bf16*)nvshmem_malloc(sz_y);
    if (!m.x || !m.recv_x || !m.recv_src || !m.comb_x || !m.sig || !m.y) {
        fprintf(stderr, "moe_cpp: nvshmem_malloc of %.1f MiB failed (raise NVSHMEM_SYMMETRIC_SIZE)\n",
                (double)(sz_x + sz_recv_x + sz_recv_src + sz_comb + sz_sig + sz_y) / (1 << 20));
        return 2;
    }
    m.recv_count = (int*)(m.sig + m.words());
    CUDA_CHECK(cudaMalloc(&m.topk, (size_t)(T * K) * sizeof(int64_t)));
    CUDA_CHECK(cudaMalloc(&m.weights, (size_t)(T * K) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&m.out, (size_t)(T * H) * sizeof(bf16)));

    const Expect want = expect(m);
    {
        std::vector<bf16> hx((size_t)(T * H));
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) hx[(size_t)(t * H + h)] = __float2bfloat16_rn(xval(me, t, h));
        CUDA_CHECK(cudaMemcpy(m.x, hx.data(), sz_x, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(m.topk, &want.topk_all[(size_t)(me * T * K)], (size_t)(T * K) * sizeof(int64_t),
                              cudaMemcpyHostToDevice));
        std::vector<float> hw((size_t)(T * K));
        for (int64_t i = 0; i < T * K; i++) hw[(size_t)i] = weight(i % K);
        CUDA_CHECK(cudaMemcpy(m.weights, hw.data(), hw.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    CUDA_CHECK(cudaMemset(m.sig, 0, sz_sig));
    CUDA_CHECK(cudaMemset(m.recv_x, 0, sz_recv_x));
    CUDA_CHECK(cudaMemset(m.recv_src, 0xFF, sz_recv_src));
    CUDA_CHECK(cudaMemset(m.comb_x, 0xFF, sz_comb));  // NaN: a row that never came shows
    CUDA_CHECK(cudaMemset(m.y, 0, sz_y));
    CUDA_CHECK(cudaMemset(m.out, 0xFF, (size_t)(T * H) * sizeof(bf16)));
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();  // every PE's buffers are ready before any put

    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const int64_t bytes = want.routed * H * (int64_t)sizeof(bf16);

    // ---- correctness: one dispatch, the experts, one combine
    const int64_t e1 = g_epoch++;
    launch_dispatch(m, e1, stream);
    experts<<<(unsigned)(m.L * npes), THREADS, 0, stream>>>(m.recv_x, m.y, m.recv_count, e1, H, m.L, me, npes,
                                                           m.T_max);
    launch_combine(m, e1, stream);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const Check c1 = check(m, want, e1, true);
    int64_t received = 0;
    for (int v : want.counts) received += v;
    {
        char first_json[200] = "null";
        if (c1.first_t >= 0) {
            char g[40], w[40];
            json_num(g, sizeof g, c1.first_got);
            json_num(w, sizeof w, c1.first_want);
            snprintf(first_json, sizeof first_json, "{\"token\":%lld,\"h\":%lld,\"got\":%s,\"want\":%s}",
                     (long long)c1.first_t, (long long)c1.first_h, g, w);
        }
        printf("{\"impl\":\"cpp\",\"bench\":\"moe_check\",\"tokens\":%lld,\"hidden\":%lld,\"experts\":%lld,"
               "\"topk\":%lld,\"npes\":%lld,\"pe\":%lld,\"grid\":%d,\"epoch\":%lld,\"ok\":%s,\"routed\":%lld,"
               "\"received\":%lld,\"count_mismatches\":%lld,\"src_mismatches\":%lld,\"out_mismatches\":%lld,"
               "\"first\":%s}\n",
               (long long)T, (long long)H, (long long)E, (long long)K, (long long)npes, (long long)me, m.grid,
               (long long)e1, c1.ok() ? "true" : "false", (long long)want.routed, (long long)received,
               (long long)c1.counts, (long long)c1.srcs, (long long)c1.outs, first_json);
        fflush(stdout);
    }

    // ---- timing: rounds of dispatch + combine (y keeps the check's results)
    std::vector<cudaEvent_t> ev((size_t)(2 * iters + 1));
    for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
    nvshmem_barrier_all();
    for (int w = 0; w < WARMUP; w++) {
        const int64_t e = g_epoch++;
        launch_dispatch(m, e, stream);
        launch_combine(m, e, stream);
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> round_us, round_host, disp_us, comb_us, split_host;
    for (int split = 0; split < 2; split++) {
        for (int64_t r = 0; r < reps; r++) {
            nvshmem_barrier_all();
            const double h0 = now_s();
            spin_ns<<<1, 1, 0, stream>>>((long long)(spin_us * 1000));
            {  // one round untimed: it waits out the PEs' start skew
                const int64_t e = g_epoch++;
                launch_dispatch(m, e, stream);
                launch_combine(m, e, stream);
            }
            CUDA_CHECK(cudaEventRecord(ev[0], stream));
            for (int64_t it = 0; it < iters; it++) {
                const int64_t e = g_epoch++;
                launch_dispatch(m, e, stream);
                if (split) CUDA_CHECK(cudaEventRecord(ev[(size_t)(2 * it + 1)], stream));
                launch_combine(m, e, stream);
                if (split) CUDA_CHECK(cudaEventRecord(ev[(size_t)(2 * it + 2)], stream));
            }
            if (!split) CUDA_CHECK(cudaEventRecord(ev[(size_t)(2 * iters)], stream));
            const double host = (now_s() - h0) * 1e6;
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaEventSynchronize(ev[(size_t)(2 * iters)]));
            if (!split) {
                float ms = 0;
                CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[(size_t)(2 * iters)]));
                round_us.push_back((double)ms * 1e3 / (double)iters);
                round_host.push_back(host);
            } else {
                double d = 0, c = 0;
                for (int64_t it = 0; it < iters; it++) {
                    float a = 0, b = 0;
                    CUDA_CHECK(cudaEventElapsedTime(&a, ev[(size_t)(2 * it)], ev[(size_t)(2 * it + 1)]));
                    CUDA_CHECK(cudaEventElapsedTime(&b, ev[(size_t)(2 * it + 1)], ev[(size_t)(2 * it + 2)]));
                    d += a;
                    c += b;
                }
                disp_us.push_back(d * 1e3 / (double)iters);
                comb_us.push_back(c * 1e3 / (double)iters);
                split_host.push_back(host);
            }
        }
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const Check c2 = check(m, want, g_epoch - 1, true);  // the last round's counts, recv_src and out
    const bool ok = c1.ok() && c2.ok();
    if (!c2.ok())
        fprintf(stderr, "moe_cpp: after the timed rounds: %lld count, %lld recv_src and %lld out mismatches\n",
                (long long)c2.counts, (long long)c2.srcs, (long long)c2.outs);
    for (const double enq : {median(round_host), median(split_host)})
        if (enq > spin_us)
            fprintf(stderr,
                    "moe_cpp: enqueueing %lld rounds took %.0f us, more than the %.0f us spin: the time includes "
                    "launch gaps (raise --spin-us)\n",
                    (long long)iters, enq, spin_us);
    struct Row {
        const char* op;
        const std::vector<double>* us;
        double host_us;
    };
    const Row rows_out[3] = {{"round", &round_us, median(round_host) / (double)iters},
                             {"dispatch", &disp_us, median(split_host) / (double)(2 * iters)},
                             {"combine", &comb_us, median(split_host) / (double)(2 * iters)}};
    for (const Row& row : rows_out) {
        printf("{\"impl\":\"cpp\",\"bench\":\"moe\",\"op\":\"%s\",\"tokens\":%lld,\"hidden\":%lld,\"experts\":%lld,"
               "\"topk\":%lld,\"npes\":%lld,\"pe\":%lld,\"grid\":%d,\"us\":%.6g,\"us_min\":%.6g,\"bytes\":%lld,"
               "\"routed\":%lld,\"iters\":%lld,\"reps\":%lld,\"ok\":%s,\"host_us\":%.6g,\"spin_us\":%.6g}\n",
               row.op, (long long)T, (long long)H, (long long)E, (long long)K, (long long)npes, (long long)me, m.grid,
               median(*row.us), *std::min_element(row.us->begin(), row.us->end()), (long long)bytes,
               (long long)want.routed, (long long)iters, (long long)reps, ok ? "true" : "false", row.host_us,
               spin_us);
    }
    fflush(stdout);

    for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventDestroy(e));
    CUDA_CHECK(cudaStreamDestroy(stream));
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();  // every PE is done with the buffers before they are freed
    CUDA_CHECK(cudaFree(m.out));
    CUDA_CHECK(cudaFree(m.weights));
    CUDA_CHECK(cudaFree(m.topk));
    nvshmem_free(m.y);
    nvshmem_free(m.sig);
    nvshmem_free(m.comb_x);
    nvshmem_free(m.recv_src);
    nvshmem_free(m.recv_x);
    nvshmem_free(m.x);
    nvshmem_finalize();
    return ok ? 0 : 1;
}
