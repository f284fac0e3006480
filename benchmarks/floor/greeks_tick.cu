/*
 * greeks_tick.cu -- the floor of a greeks tick's own work, in C: what `tickgpu.greeks` does for
 * NumPy inputs of n options (n <= the mapped-staging limit), with no Python and no library around it.
 *
 * The floor programs (../shared/tools/floor) move 1,024 floats each way. A greeks tick moves more:
 * seven inputs in (six arrays of n reals and n call flags) and ten outputs out. This program does
 * that work the way the runtime's tick does it, so that the runtime's figures can be set beside
 * the same work done directly:
 *   1. the caller's arrays (pageable) copied into pinned, mapped staging (memcpy);
 *   2. one replayed graph of one kernel reading the inputs from staging and writing the ten
 *      outputs into staging, across PCIe; then a wait (cudaStreamSynchronize);
 *   3. the outputs copied out of staging into the caller's (pageable) result block.
 * It also times step 2 alone. The kernel computes the project's greeks (csrc/cpu/greeks_kernel.h,
 * the source the CPU backend and the resident kernel compile; csrc/cpu/greeks_instances.h), one
 * thread an option.
 *
 * Output lines have the floor programs' format, so `tickgpu.bench.gpu.parse_floor` reads them:
 *   NATIVE greeks tick f32 1024 in+graph+out          p50=... us  p99=... us  min=... us
 *
 * Build and run (scripts/device-check does): nvcc -O2 -arch=sm_90 -Icsrc greeks_tick.cu -o greeks_tick
 */
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#define CK(x)                                                                                             \
    do {                                                                                                  \
        cudaError_t ck_ = (x);                                                                            \
        if (ck_ != cudaSuccess) {                                                                         \
            printf("ERR %s line %d: %s\n", #x, __LINE__, cudaGetErrorName(ck_));                          \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

#include "cpu/greeks_instances.h"

__device__ static inline void greeks_one(double S, double K, double t, double r, double s, double q, double w, double *o)
{
    if (greeks_element_f64(S, K, t, r, s, q, w, o))
        greeks_limit_f64(S, K, t, r, s, q, w, o);
}
__device__ static inline void greeks_one(float S, float K, float t, float r, float s, float q, float w, float *o)
{
    if (greeks_element_f32(S, K, t, r, s, q, w, o))
        greeks_limit_f32(S, K, t, r, s, q, w, o);
}

/* Inputs: six arrays of n REALs, then n flags; outputs: ten rows of n REALs. */
template <typename REAL>
__global__ void tick_kernel(const REAL *in, const unsigned char *call, REAL *out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    REAL o[10];
    greeks_one(in[i], in[n + i], in[2 * n + i], in[3 * n + i], in[4 * n + i], in[5 * n + i],
               call[i] ? (REAL)1 : (REAL)-1, o);
    for (int k = 0; k < 10; k++)
        out[(size_t)k * n + i] = o[k];
}

using clk = std::chrono::high_resolution_clock;

static void report(const char *name, std::vector<double> &v)
{
    std::sort(v.begin(), v.end());
    printf("NATIVE %-44s p50=%8.2f us  p99=%8.2f us  min=%8.2f us\n", name, v[v.size() / 2],
           v[(size_t)(v.size() * 0.99)], v[0]);
    fflush(stdout);
}

template <typename REAL>
static int run(const char *tag, int n, cudaStream_t st)
{
    const size_t in_bytes = 6 * (size_t)n * sizeof(REAL) + n, out_bytes = 10 * (size_t)n * sizeof(REAL);
    char *hin, *hout, *din, *dout;
    CK(cudaHostAlloc(&hin, in_bytes, cudaHostAllocMapped));
    CK(cudaHostAlloc(&hout, out_bytes, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&din, hin, 0));
    CK(cudaHostGetDevicePointer(&dout, hout, 0));
    /* The caller's arrays: spot, strike in [50, 150], t in [0.1, 2], rate, vol, div; calls. */
    std::vector<REAL> user(6 * (size_t)n), result(10 * (size_t)n);
    std::vector<unsigned char> calls(n);
    srand(7);
    for (int i = 0; i < n; i++) {
        const double u[6] = {rand() / (double)RAND_MAX, rand() / (double)RAND_MAX, rand() / (double)RAND_MAX,
                             rand() / (double)RAND_MAX, rand() / (double)RAND_MAX, rand() / (double)RAND_MAX};
        user[i] = (REAL)(50 + 100 * u[0]);
        user[n + i] = (REAL)(50 + 100 * u[1]);
        user[2 * n + i] = (REAL)(0.1 + 1.9 * u[2]);
        user[3 * n + i] = (REAL)(0.05 * u[3]);
        user[4 * n + i] = (REAL)(0.1 + 0.4 * u[4]);
        user[5 * n + i] = (REAL)(0.03 * u[5]);
        calls[i] = (unsigned char)(i & 1);
    }
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    tick_kernel<REAL><<<(n + 255) / 256, 256, 0, st>>>((const REAL *)din, (const unsigned char *)(din + 6 * (size_t)n * sizeof(REAL)),
                                                        (REAL *)dout, n);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<double> all, graph_only;
    for (int it = 0; it < 5500; it++) {
        user[0] = (REAL)(50 + (it % 100));   /* a new tick's spot */
        auto a = clk::now();
        memcpy(hin, user.data(), 6 * (size_t)n * sizeof(REAL));
        memcpy(hin + 6 * (size_t)n * sizeof(REAL), calls.data(), n);
        CK(cudaGraphLaunch(ge, st));
        CK(cudaStreamSynchronize(st));
        memcpy(result.data(), hout, out_bytes);
        auto b = clk::now();
        if (it >= 500)
            all.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    }
    for (int it = 0; it < 5500; it++) {
        auto a = clk::now();
        CK(cudaGraphLaunch(ge, st));
        CK(cudaStreamSynchronize(st));
        auto b = clk::now();
        if (it >= 500)
            graph_only.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    }
    /* Sanity: prices >= 0 and finite, |delta| <= 1 (the figures are of real work). */
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (!(result[i] >= 0 && std::isfinite((double)result[i]) && std::fabs((double)result[n + i]) <= 1))
            bad++;
    char name[64];
    snprintf(name, sizeof name, "greeks tick %s %d in+graph+out", tag, n);
    report(name, all);
    snprintf(name, sizeof name, "greeks tick %s %d graph only", tag, n);
    report(name, graph_only);
    if (bad)
        printf("ERR greeks tick %s %d: %d implausible results\n", tag, n, bad);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaFreeHost(hin));
    CK(cudaFreeHost(hout));
    return bad;
}

int main()
{
    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int bad = 0;
    for (int n : {16, 1024, 4096}) {
        bad += run<float>("f32", n, st);
        bad += run<double>("f64", n, st);
    }
    return bad ? 1 : 0;
}
