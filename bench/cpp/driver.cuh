// What the C++ drivers of the communication kernels (comm.cu, moe.cu) share: argument parsing, JSON
// numbers, medians and the spin kernel that holds a stream while timed calls are enqueued behind it.
#pragma once
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nvshmem.h>
#include <nvshmemx.h>

static bool parse_i64(const std::string& s, int64_t* v) {
    if (s.empty()) return false;
    char* end = nullptr;
    errno = 0;
    long long x = strtoll(s.c_str(), &end, 10);
    if (errno || *end) return false;
    *v = x;
    return true;
}

static bool parse_f64(const std::string& s, double* v) {
    if (s.empty()) return false;
    char* end = nullptr;
    errno = 0;
    double x = strtod(s.c_str(), &end);
    if (errno || *end || !std::isfinite(x)) return false;
    *v = x;
    return true;
}

static void json_num(char* buf, size_t len, double v) {
    if (std::isfinite(v))
        snprintf(buf, len, "%.9g", v);
    else
        snprintf(buf, len, "null");
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

__global__ void __launch_bounds__(1) spin_ns(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(500);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
}

// The run's first JSON line: the device, the CUDA and NVSHMEM versions, and the program's own
// settings (``extra``: more "key":value pairs, without braces).
static void print_meta(const char* program, long long me, long long npes, double init_s, const std::string& extra) {
    int dev = 0, rt = 0, drv = 0, maj = 0, min = 0, pat = 0;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    nvshmemx_vendor_get_version_info(&maj, &min, &pat);
    printf("{\"impl\":\"cpp\",\"bench\":\"meta\",\"program\":\"%s\",\"pe\":%lld,\"npes\":%lld,"
           "\"device\":\"%s\",\"cc\":\"%d.%d\",\"nvshmem\":\"%d.%d.%d\",\"nvshmem_headers\":\"%d.%d.%d\","
           "\"cuda_runtime\":%d,\"cuda_driver\":%d,%s,\"init_s\":%.3f}\n",
           program, me, npes, prop.name, prop.major, prop.minor, maj, min, pat, NVSHMEM_VENDOR_MAJOR_VERSION,
           NVSHMEM_VENDOR_MINOR_VERSION, NVSHMEM_VENDOR_PATCH_VERSION, rt, drv, extra.c_str(), init_s);
    fflush(stdout);
}
