// The CUDA C++ twins of nvshmem_dsl's communication kernels (one-shot and two-shot all-reduce,
// all-gather, reduce-scatter), the baseline the Numba / Triton / CuTe versions are measured against,
// and their benchmark: bench/cpp/build/comm_cpp (bench/cpp/build.sh).
//
// The protocol (argument order, staging slots, signal words, epochs, launch shape) is that of
// runtime/kernels/_plan.py; the kernels are those of runtime/kernels/numba.py, statement for statement:
// grid = the plan's grid, THREADS threads, block-scope put_signal_nbi_block to every peer in the order
// (me + k) % npes, one thread per peer waits for its signal word (>= epoch), float32 sums in PE order;
// the one-shot's LL protocol (one_shot_ll: stores through nvshmem_ptr of 64-bit words epoch << 32 | bits,
// polled by nvshmem_signal_fetch; no signal, no fence, no quiet) where _plan.plan chose it.
//
// Usage (one process per PE, NVSHMEM's unique-id bootstrap as bench_cpp: init.cuh):
//   python -m nvshmem_dsl.run -n 2 bench/cpp/exec.py bench/cpp/build/comm_cpp --uid-file F \
//       --plans P1,P2,... [--iters N] [--reps R] [--spin-us U]
// where P = kernel:dtype:n:span:chunk:grid (kernel one_shot | one_shot_ll | two_shot | all_gather |
// reduce_scatter, dtype float32 | bfloat16), kernel, n, span, chunk and grid as _plan.plan(kind, dtype, n,
// npes, load_store) gives them (kernel: its .kernel): this program does no grid math of its own (it only
// checks that the plan is one of npes PEs, and that an LL plan's peers are reached by load/store).
//
// Output, one JSON line each on stdout: {"bench":"meta",...} (device, NVSHMEM version); per plan
//   {"impl":"cpp","bench":"comm_check","kind","ll","dtype","n","npes","pe","grid","epoch","ok","mismatches",
//    "first":{"index","got","want"} or null}: one call on x[i] = ((i * 7 + me * 3) % 17) - 8 (exact in
//    bfloat16, and so are the sums of up to 16 PEs), out compared element by element with the host's sums;
//   {"impl":"cpp","bench":"comm","kind","ll","dtype","n","bytes","npes","pe","grid","us","us_min","iters","reps",
//    "ok","host_us","spin_us"}: after 10 warm-up calls, `reps` runs (default 5) of `iters` (default 100)
//    back-to-back calls, each run behind a one-thread kernel that spins `spin-us` microseconds (default
//    2000) so that the events time the GPU, not the host's launches, and behind one more call, untimed,
//    that waits out the PEs' start skew (its peers' spins end apart); us = the median over runs of the
//    time per call, us_min the best run, bytes the element bytes of the largest buffer (all-reduce: n,
//    all-gather / reduce-scatter: npes * n elements), host_us the host's time to enqueue one call.
// The epoch counter starts at 1 and grows by one every call of the run (one signal array for the whole
// run: its words only grow); x, out and the staging array are allocated per plan (the staging array
// after a barrier; an LL plan's words in a zeroed array of their own, 8 bytes an element).  Exit status 1 when a check failed, 2 on bad arguments or a failed allocation.

#define INIT_PROG "comm_cpp"
#include "init.cuh"  // CUDA_CHECK, g_pe / g_npes, now_s, init_nvshmem (shared with bench.cu)
#include "driver.cuh"  // argument parsing, JSON numbers, medians, the spin kernel

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

// ------------------------------------------------------------------ protocol (= runtime/kernels/_plan.py)

static const int THREADS = 512;  // _plan.THREADS
static const int GRID_MAX = 32;  // _plan.GRID_MAX: the signal array holds 2 * GRID_MAX * npes words
static const int WARMUP = 10;

enum Kind { ONE_SHOT = 0, TWO_SHOT, ALL_GATHER, REDUCE_SCATTER, N_KINDS };
static const char* const KIND_NAMES[N_KINDS] = {"one_shot", "two_shot", "all_gather", "reduce_scatter"};
static const int SLOTS[N_KINDS] = {1, 2, 1, 1};  // _plan.SLOTS: staging slots per PE and half
static const char* const LL_KERNEL = "one_shot_ll";  // _plan.LL_KERNEL: the one-shot's LL protocol
static const int LL_WORD_BYTES = 8;                // _plan.LL_WORD_BYTES

// ------------------------------------------------------------------ kernels

// An element type: float32 sums (load / store) and its block-scope put with signal.
template <typename T>
struct Elem;

// bits / word: an element's bits zero-extended (an LL word's data half), and the float32 of a word's.
template <>
struct Elem<float> {
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float v) { return v; }
    static __device__ __forceinline__ uint64_t bits(float v) { return (uint64_t)__float_as_uint(v); }
    static __device__ __forceinline__ float word(uint64_t w) { return __uint_as_float((uint32_t)(w & 0xFFFFFFFFull)); }
    static __device__ __forceinline__ void put_signal_nbi_block(float* dst, const float* src, size_t n,
                                                                uint64_t* sig, uint64_t v, int pe) {
        nvshmemx_float_put_signal_nbi_block(dst, src, n, sig, v, NVSHMEM_SIGNAL_SET, pe);
    }
};

template <>
struct Elem<__nv_bfloat16> {
    static __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
    static __device__ __forceinline__ uint64_t bits(__nv_bfloat16 v) { return (uint64_t)__bfloat16_as_ushort(v); }
    static __device__ __forceinline__ float word(uint64_t w) { return __uint_as_float((uint32_t)((w & 0xFFFFull) << 16)); }
    static __device__ __forceinline__ void put_signal_nbi_block(__nv_bfloat16* dst, const __nv_bfloat16* src,
                                                                size_t n, uint64_t* sig, uint64_t v, int pe) {
        nvshmemx_bfloat16_put_signal_nbi_block(dst, src, n, sig, v, NVSHMEM_SIGNAL_SET, pe);
    }
};

// put_signal_nbi_block of src[0, cnt) to dst on pe, setting pe's word sig to epoch; an empty range
// (cnt <= 0): the signal alone, by thread 0.
template <typename T>
__device__ __forceinline__ void send(T* dst, const T* src, int64_t cnt, uint64_t* sig, uint64_t epoch, int pe) {
    if (cnt > 0) {
        Elem<T>::put_signal_nbi_block(dst, src, (size_t)cnt, sig, epoch, pe);
    } else if (threadIdx.x == 0) {
        nvshmemx_signal_op(sig, epoch, NVSHMEM_SIGNAL_SET, pe);
    }
}

// One thread per peer waits for its word of block b and phase; then the block syncs.
__device__ __forceinline__ void wait_peers(uint64_t* sig, int64_t b, int64_t phase, uint64_t epoch, int64_t me,
                                           int64_t npes) {
    const int64_t t = threadIdx.x;
    if (t < npes && t != me) nvshmem_signal_wait_until(sig + (b * 2 + phase) * npes + t, NVSHMEM_CMP_GE, epoch);
    __syncthreads();
}

__device__ __forceinline__ void finish() {
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}

// kernel(out, x, stage, sig, epoch, n, span, chunk, me, npes): block b works on [lo, hi) of every range.
#define COMM_KERNEL(NAME)                                                                                    \
    template <typename T>                                                                                    \
    __global__ void __launch_bounds__(THREADS)                                                               \
        NAME(T* out, const T* x, T* stage, uint64_t* sig, int64_t epoch, int64_t n, int64_t span, int64_t chunk, \
             int64_t me, int64_t npes)
#define COMM_RANGE                                              \
    const int64_t b = blockIdx.x;                               \
    const int64_t lo = b * chunk;                               \
    const int64_t hi = lo + chunk < span ? lo + chunk : span;   \
    const int64_t par = epoch & 1;                              \
    const uint64_t ep = (uint64_t)epoch

COMM_KERNEL(one_shot) {
    COMM_RANGE;
    const int64_t d = (par * npes + me) * span;
    for (int64_t k = 1; k < npes; k++) {
        const int64_t p = (me + k) % npes;
        send(stage + d + lo, x + lo, hi - lo, sig + (b * 2) * npes + me, ep, (int)p);
    }
    wait_peers(sig, b, 0, ep, me, npes);
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float acc = 0.0f;
        for (int64_t p = 0; p < npes; p++) {
            if (p == me)
                acc += Elem<T>::load(x[i]);
            else
                acc += Elem<T>::load(stage[(par * npes + p) * span + i]);
        }
        out[i] = Elem<T>::store(acc);
    }
    finish();
}

// The LL protocol (_plan.py): `stage` holds the LL words (uint64), word(src, i) = (par * npes + src) * span + i.
template <typename T>
__global__ void __launch_bounds__(THREADS)
    one_shot_ll(T* out, const T* x, uint64_t* ll, uint64_t* sig, int64_t epoch, int64_t n, int64_t span,
                int64_t chunk, int64_t me, int64_t npes) {
    COMM_RANGE;
    const uint64_t tag = ep << 32;
    const int64_t d = (par * npes + me) * span;
    for (int64_t k = 1; k < npes; k++) {  // my words into every peer's slot of me, through its address
        uint64_t* to = (uint64_t*)nvshmem_ptr(ll, (int)((me + k) % npes));
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) to[d + i] = tag | Elem<T>::bits(x[i]);
    }
    const int64_t slots = par * npes * span;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float acc = 0.0f;
        for (int64_t p = 0; p < npes; p++) {
            if (p == me) {
                acc += Elem<T>::load(x[i]);
            } else {
                uint64_t* at = ll + slots + p * span + i;
                uint64_t w = nvshmem_signal_fetch(at);
                while ((w ^ tag) >> 32) w = nvshmem_signal_fetch(at);
                acc += Elem<T>::word(w);
            }
        }
        out[i] = Elem<T>::store(acc);
    }
}

COMM_KERNEL(two_shot) {
    COMM_RANGE;
    const int64_t d = ((par * 2) * npes + me) * span;
    for (int64_t k = 1; k < npes; k++) {  // phase 0: shard p of x to PE p
        const int64_t p = (me + k) % npes;
        const int64_t g0 = p * span + lo < n ? p * span + lo : n;
        const int64_t g1 = p * span + hi < n ? p * span + hi : n;
        send(stage + d + lo, x + g0, g1 - g0, sig + (b * 2) * npes + me, ep, (int)p);
    }
    wait_peers(sig, b, 0, ep, me, npes);
    const int64_t mine = ((par * 2 + 1) * npes + me) * span;
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        const int64_t i = me * span + j;
        if (i < n) {
            float acc = 0.0f;
            for (int64_t p = 0; p < npes; p++) {
                if (p == me)
                    acc += Elem<T>::load(x[i]);
                else
                    acc += Elem<T>::load(stage[((par * 2) * npes + p) * span + j]);
            }
            const T r = Elem<T>::store(acc);
            stage[mine + j] = r;
            out[i] = r;
        }
    }
    __syncthreads();
    const int64_t m0 = me * span + lo < n ? me * span + lo : n;
    const int64_t m1 = me * span + hi < n ? me * span + hi : n;
    const int64_t cnt = m1 - m0 > 0 ? m1 - m0 : 0;
    for (int64_t k = 1; k < npes; k++) {  // phase 1: my reduced shard to every PE
        const int64_t p = (me + k) % npes;
        send(stage + mine + lo, stage + mine + lo, cnt, sig + (b * 2 + 1) * npes + me, ep, (int)p);
    }
    wait_peers(sig, b, 1, ep, me, npes);
    for (int64_t q = 0; q < npes; q++) {
        if (q != me) {
            const int64_t src = ((par * 2 + 1) * npes + q) * span;
            for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
                const int64_t i = q * span + j;
                if (i < n) out[i] = stage[src + j];
            }
        }
    }
    finish();
}

COMM_KERNEL(all_gather) {
    COMM_RANGE;
    const int64_t d = (par * npes + me) * span;
    for (int64_t k = 1; k < npes; k++) {
        const int64_t p = (me + k) % npes;
        send(stage + d + lo, x + lo, hi - lo, sig + (b * 2) * npes + me, ep, (int)p);
    }
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) out[me * n + i] = x[i];
    wait_peers(sig, b, 0, ep, me, npes);
    for (int64_t q = 0; q < npes; q++) {
        if (q != me) {
            const int64_t src = (par * npes + q) * span;
            for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) out[q * n + i] = stage[src + i];
        }
    }
    finish();
}

COMM_KERNEL(reduce_scatter) {
    COMM_RANGE;
    const int64_t d = (par * npes + me) * span;
    for (int64_t k = 1; k < npes; k++) {
        const int64_t p = (me + k) % npes;
        send(stage + d + lo, x + p * n + lo, hi - lo, sig + (b * 2) * npes + me, ep, (int)p);
    }
    wait_peers(sig, b, 0, ep, me, npes);
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float acc = 0.0f;
        for (int64_t p = 0; p < npes; p++) {
            if (p == me)
                acc += Elem<T>::load(x[me * n + i]);
            else
                acc += Elem<T>::load(stage[(par * npes + p) * span + i]);
        }
        out[i] = Elem<T>::store(acc);
    }
    finish();
}

#undef COMM_RANGE
#undef COMM_KERNEL

// Keeps the stream busy for about `ns` nanoseconds (%globaltimer), so that the host's launches of
// the timed calls are enqueued before the first of them can start.

// ------------------------------------------------------------------ plans

struct Plan {
    std::string text;
    int kind;
    bool ll;  // the one-shot's LL protocol (kernel one_shot_ll)
    bool bf16;
    int64_t n, span, chunk;
    int grid;
    size_t size() const { return bf16 ? 2 : 4; }
    const char* dtype() const { return bf16 ? "bfloat16" : "float32"; }
    int64_t x_elems(int64_t npes) const { return kind == REDUCE_SCATTER ? npes * n : n; }
    int64_t out_elems(int64_t npes) const { return kind == ALL_GATHER ? npes * n : n; }
    int64_t stage_elems(int64_t npes) const { return 2 * (int64_t)SLOTS[kind] * npes * span; }
    size_t stage_size() const { return ll ? LL_WORD_BYTES : size(); }  // bytes of a staging element
    // element bytes of the largest buffer
    int64_t bytes(int64_t npes) const {
        return (kind == ONE_SHOT || kind == TWO_SHOT ? n : npes * n) * (int64_t)size();
    }
};

static std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    for (size_t pos = 0; pos <= s.size();) {
        size_t c = s.find(sep, pos);
        if (c == std::string::npos) c = s.size();
        out.push_back(s.substr(pos, c - pos));
        pos = c + 1;
    }
    return out;
}

// kind:dtype:n:span:chunk:grid
static bool parse_plan(const std::string& text, Plan* p, std::string* why) {
    std::vector<std::string> f = split(text, ':');
    if (f.size() != 6) {
        *why = "expected kernel:dtype:n:span:chunk:grid";
        return false;
    }
    p->text = text;
    p->kind = -1;
    p->ll = f[0] == LL_KERNEL;
    for (int k = 0; k < N_KINDS; k++)
        if (f[0] == KIND_NAMES[k]) p->kind = k;
    if (p->ll) p->kind = ONE_SHOT;
    if (p->kind < 0) {
        *why = "unknown kind " + f[0];
        return false;
    }
    if (f[1] != "float32" && f[1] != "bfloat16") {
        *why = "unknown dtype " + f[1] + " (float32 or bfloat16)";
        return false;
    }
    p->bf16 = f[1] == "bfloat16";
    int64_t grid = 0;
    if (!parse_i64(f[2], &p->n) || !parse_i64(f[3], &p->span) || !parse_i64(f[4], &p->chunk) ||
        !parse_i64(f[5], &grid)) {
        *why = "n, span, chunk and grid must be integers";
        return false;
    }
    p->grid = (int)grid;
    if (p->n < 1 || p->span < 1 || p->chunk < 1 || grid < 1 || grid > GRID_MAX) {
        *why = "needs n, span, chunk >= 1 and 1 <= grid <= 32";
        return false;
    }
    return true;
}

// What _plan.plan guarantees and the kernels rely on, for npes PEs (the plan was made for them).
static bool plan_fits(const Plan& p, int64_t npes, std::string* why) {
    int64_t want_span = p.kind == TWO_SHOT ? (p.n + npes - 1) / npes : p.n;
    if (p.span != want_span) {
        *why = "span " + std::to_string(p.span) + " is not that of " + std::to_string(npes) + " PEs (" +
               std::to_string(want_span) + ")";
        return false;
    }
    if ((p.span + p.chunk - 1) / p.chunk != p.grid) {
        *why = "grid is not ceil(span / chunk)";
        return false;
    }
    return true;
}

// Whether this PE reaches every peer by load/store (an LL plan needs it; _plan.py's workspace asks the same).
static bool load_store_everywhere(void* sym, int64_t me, int64_t npes) {
    for (int64_t p = 0; p < npes; p++)
        if (p != me && !nvshmem_ptr(sym, (int)p)) return false;
    return true;
}

// ------------------------------------------------------------------ host side

static const int64_t NO_INDEX = -1;

// The input of PE pe at element i: small integers, exact in bfloat16 (and so are sums of up to 16 PEs).
static float xval(int64_t i, int64_t pe) { return (float)(((i * 7 + pe * 3) % 17) - 8); }

static float to_f32(const void* buf, int64_t i, bool bf16) {
    if (bf16) return __bfloat162float(((const __nv_bfloat16*)buf)[i]);
    return ((const float*)buf)[i];
}

// What out[i] must hold on PE me (sums in float32, in PE order, from 0 as the kernels do).
static float expected(const Plan& p, int64_t i, int64_t me, int64_t npes) {
    float acc = 0.0f;
    switch (p.kind) {
        case ONE_SHOT:
        case TWO_SHOT:
            for (int64_t q = 0; q < npes; q++) acc += xval(i, q);
            return acc;
        case ALL_GATHER:
            return xval(i % p.n, i / p.n);
        default:  // REDUCE_SCATTER
            for (int64_t q = 0; q < npes; q++) acc += xval(me * p.n + i, q);
            return acc;
    }
}

struct Bufs {
    void* x;      // symmetric: x_elems
    void* stage;  // symmetric: stage_elems
    void* out;    // local: out_elems
};

template <typename T>
static void launch_t(const Plan& p, const Bufs& b, uint64_t* sig, int64_t epoch, int64_t me, int64_t npes,
                     cudaStream_t s) {
    T* out = (T*)b.out;
    const T* x = (const T*)b.x;
    T* stage = (T*)b.stage;
    switch (p.kind) {
        case ONE_SHOT:
            if (p.ll)
                one_shot_ll<T><<<p.grid, THREADS, 0, s>>>(out, x, (uint64_t*)b.stage, sig, epoch, p.n, p.span, p.chunk,
                                                          me, npes);
            else
                one_shot<T><<<p.grid, THREADS, 0, s>>>(out, x, stage, sig, epoch, p.n, p.span, p.chunk, me, npes);
            break;
        case TWO_SHOT:
            two_shot<T><<<p.grid, THREADS, 0, s>>>(out, x, stage, sig, epoch, p.n, p.span, p.chunk, me, npes);
            break;
        case ALL_GATHER:
            all_gather<T><<<p.grid, THREADS, 0, s>>>(out, x, stage, sig, epoch, p.n, p.span, p.chunk, me, npes);
            break;
        default:
            reduce_scatter<T><<<p.grid, THREADS, 0, s>>>(out, x, stage, sig, epoch, p.n, p.span, p.chunk, me, npes);
            break;
    }
}

static int64_t g_epoch = 1;  // the next call's epoch: the same on every PE, never reset

static void call(const Plan& p, const Bufs& b, uint64_t* sig, int64_t me, int64_t npes, cudaStream_t s) {
    int64_t e = g_epoch++;
    if (p.bf16)
        launch_t<__nv_bfloat16>(p, b, sig, e, me, npes, s);
    else
        launch_t<float>(p, b, sig, e, me, npes, s);
}

static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s --uid-file PATH --plans kernel:dtype:n:span:chunk:grid[,...] [--iters N] [--reps R] "
            "[--spin-us U]\n"
            "  kernel: one_shot | one_shot_ll | two_shot | all_gather | reduce_scatter; dtype: float32 | bfloat16;\n"
            "  kernel, n, span, chunk, grid: nvshmem_dsl.kernels._plan.plan(kind, dtype, n, npes, load_store)\n",
            prog);
}

int main(int argc, char** argv) {
    std::string uid_file, plans_arg;
    int64_t iters = 100, reps = 5;
    double spin_us = 2000;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        bool has = i + 1 < argc;
        bool ok = true;
        if (a == "--uid-file" && has) uid_file = argv[++i];
        else if (a == "--plans" && has) plans_arg = argv[++i];
        else if (a == "--iters" && has) ok = parse_i64(argv[++i], &iters) && iters >= 1;
        else if (a == "--reps" && has) ok = parse_i64(argv[++i], &reps) && reps >= 1;
        else if (a == "--spin-us" && has) ok = parse_f64(argv[++i], &spin_us) && spin_us >= 0;
        else ok = false;
        if (!ok) {
            usage(argv[0]);
            return 2;
        }
    }
    std::vector<Plan> plans;
    for (const std::string& t : split(plans_arg, ',')) {
        if (t.empty()) continue;
        Plan p;
        std::string why;
        if (!parse_plan(t, &p, &why)) {
            fprintf(stderr, "comm_cpp: bad plan %s: %s\n", t.c_str(), why.c_str());
            return 2;
        }
        plans.push_back(p);
    }
    if (plans.empty()) {
        usage(argv[0]);
        return 2;
    }

    double t_init = now_s();
    init_nvshmem(uid_file);
    t_init = now_s() - t_init;
    const int64_t me = g_pe, npes = g_npes;
    for (const Plan& p : plans) {
        std::string why;
        if (!plan_fits(p, npes, &why)) {
            fprintf(stderr, "comm_cpp: plan %s: %s\n", p.text.c_str(), why.c_str());
            return 2;
        }
    }

    {
        char extra[256];
        snprintf(extra, sizeof extra, "\"threads\":%d,\"iters\":%lld,\"reps\":%lld,\"spin_us\":%.6g", THREADS,
                 (long long)iters, (long long)reps, spin_us);
        print_meta("comm_cpp", (long long)me, (long long)npes, t_init, extra);
    }

    // one signal array for the whole run (its words only grow with the epochs)
    const size_t sig_bytes = 2 * (size_t)GRID_MAX * (size_t)npes * sizeof(uint64_t);
    uint64_t* sig = (uint64_t*)nvshmem_malloc(sig_bytes);
    if (!sig) {
        fprintf(stderr, "comm_cpp: nvshmem_malloc of the signal words failed\n");
        return 2;
    }
    CUDA_CHECK(cudaMemset(sig, 0, sig_bytes));
    for (const Plan& p : plans) {
        if (p.ll && !load_store_everywhere(sig, me, npes)) {
            fprintf(stderr, "comm_cpp: plan %s: the LL protocol needs every peer reached by load/store\n",
                    p.text.c_str());
            return 2;
        }
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    nvshmem_barrier_all();

    cudaStream_t stream;
    cudaEvent_t ev_a, ev_b;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&ev_a));
    CUDA_CHECK(cudaEventCreate(&ev_b));

    bool all_ok = true;
    for (const Plan& p : plans) {
        const int64_t nx = p.x_elems(npes), nout = p.out_elems(npes), nstage = p.stage_elems(npes);
        const size_t sz = p.size(), ssz = p.stage_size();
        Bufs b;
        b.x = nvshmem_malloc((size_t)nx * sz);
        b.stage = nvshmem_malloc((size_t)nstage * ssz);
        if (!b.x || !b.stage) {
            fprintf(stderr,
                    "comm_cpp: plan %s: nvshmem_malloc of %lld + %lld bytes failed (raise NVSHMEM_SYMMETRIC_SIZE)\n",
                    p.text.c_str(), (long long)(nx * sz), (long long)(nstage * ssz));
            return 2;
        }
        CUDA_CHECK(cudaMalloc(&b.out, (size_t)nout * sz));

        // ---- correctness: one call
        {
            std::vector<unsigned char> host((size_t)nx * sz);
            for (int64_t i = 0; i < nx; i++) {
                float v = xval(i, me);
                if (p.bf16)
                    ((__nv_bfloat16*)host.data())[i] = __float2bfloat16_rn(v);
                else
                    ((float*)host.data())[i] = v;
            }
            CUDA_CHECK(cudaMemcpy(b.x, host.data(), host.size(), cudaMemcpyHostToDevice));
        }
        CUDA_CHECK(cudaMemset(b.out, 0xFF, (size_t)nout * sz));  // NaN: an element left unwritten shows
        CUDA_CHECK(cudaMemset(b.stage, 0, (size_t)nstage * ssz));  // LL: no word of epoch >= 1
        CUDA_CHECK(cudaDeviceSynchronize());
        nvshmem_barrier_all();  // every PE's x and stage are ready before any put
        call(p, b, sig, me, npes, stream);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaStreamSynchronize(stream));
        std::vector<unsigned char> got((size_t)nout * sz);
        CUDA_CHECK(cudaMemcpy(got.data(), b.out, got.size(), cudaMemcpyDeviceToHost));
        int64_t bad = 0, first = NO_INDEX;
        float first_got = 0, first_want = 0;
        for (int64_t i = 0; i < nout; i++) {
            float g = to_f32(got.data(), i, p.bf16), w = expected(p, i, me, npes);
            if (!(g == w)) {
                if (first == NO_INDEX) {
                    first = i;
                    first_got = g;
                    first_want = w;
                }
                bad++;
            }
        }
        const bool ok = bad == 0;
        all_ok = all_ok && ok;
        char first_json[160] = "null";
        if (!ok) {
            char g[40], w[40];
            json_num(g, sizeof g, first_got);
            json_num(w, sizeof w, first_want);
            snprintf(first_json, sizeof first_json, "{\"index\":%lld,\"got\":%s,\"want\":%s}", (long long)first, g, w);
        }
        printf("{\"impl\":\"cpp\",\"bench\":\"comm_check\",\"kind\":\"%s\",\"ll\":%s,\"dtype\":\"%s\",\"n\":%lld,\"npes\":%lld,"
               "\"pe\":%lld,\"grid\":%d,\"epoch\":%lld,\"ok\":%s,\"mismatches\":%lld,\"first\":%s}\n",
               KIND_NAMES[p.kind], p.ll ? "true" : "false", p.dtype(), (long long)p.n, (long long)npes,
               (long long)me, p.grid,
               (long long)(g_epoch - 1), ok ? "true" : "false", (long long)bad, first_json);
        fflush(stdout);

        // ---- timing
        nvshmem_barrier_all();
        for (int w = 0; w < WARMUP; w++) call(p, b, sig, me, npes, stream);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaStreamSynchronize(stream));
        std::vector<double> us, host_us;
        for (int64_t r = 0; r < reps; r++) {
            nvshmem_barrier_all();
            double h0 = now_s();
            spin_ns<<<1, 1, 0, stream>>>((long long)(spin_us * 1000));
            call(p, b, sig, me, npes, stream);  // untimed: it waits out the PEs' start skew
            CUDA_CHECK(cudaEventRecord(ev_a, stream));
            for (int64_t it = 0; it < iters; it++) call(p, b, sig, me, npes, stream);
            CUDA_CHECK(cudaEventRecord(ev_b, stream));
            host_us.push_back((now_s() - h0) * 1e6);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaEventSynchronize(ev_b));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, ev_a, ev_b));
            us.push_back((double)ms * 1e3 / (double)iters);
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const double enqueue = median(host_us);  // the host's time to enqueue one rep
        if (enqueue > spin_us)
            fprintf(stderr,
                    "comm_cpp: plan %s: enqueueing %lld calls took %.0f us, more than the %.0f us spin: the time "
                    "includes launch gaps (raise --spin-us)\n",
                    p.text.c_str(), (long long)iters, enqueue, spin_us);
        printf("{\"impl\":\"cpp\",\"bench\":\"comm\",\"kind\":\"%s\",\"ll\":%s,\"dtype\":\"%s\",\"n\":%lld,\"bytes\":%lld,"
               "\"npes\":%lld,\"pe\":%lld,\"grid\":%d,\"us\":%.6g,\"us_min\":%.6g,\"iters\":%lld,\"reps\":%lld,"
               "\"ok\":%s,\"host_us\":%.6g,\"spin_us\":%.6g}\n",
               KIND_NAMES[p.kind], p.ll ? "true" : "false", p.dtype(), (long long)p.n, (long long)p.bytes(npes),
               (long long)npes,
               (long long)me, p.grid, median(us), *std::min_element(us.begin(), us.end()), (long long)iters,
               (long long)reps, ok ? "true" : "false", enqueue / (double)iters, spin_us);
        fflush(stdout);

        CUDA_CHECK(cudaDeviceSynchronize());
        nvshmem_barrier_all();  // every PE is done with this plan's staging before it is freed
        CUDA_CHECK(cudaFree(b.out));
        nvshmem_free(b.stage);
        nvshmem_free(b.x);
    }

    CUDA_CHECK(cudaEventDestroy(ev_a));
    CUDA_CHECK(cudaEventDestroy(ev_b));
    CUDA_CHECK(cudaStreamDestroy(stream));
    nvshmem_barrier_all();
    nvshmem_free(sig);
    nvshmem_finalize();
    return all_ok ? 0 : 1;
}
