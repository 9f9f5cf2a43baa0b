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
