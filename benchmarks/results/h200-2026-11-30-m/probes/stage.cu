// How the host's staging copies interact with a kernel on mapped staging (a 1,024-option greeks
// tick: 7 inputs, 28 KB in; 10 outputs, 40 KB out). Per iteration: user arrays -> staging (variant),
// graph (one kernel reading and writing staging over PCIe), wait, staging -> user block (variant).
// nvcc -O2 -arch=sm_90 -Xcompiler -O2 stage.cu -o stage
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <vector>
#include <algorithm>
#include <emmintrin.h>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t ck_ = (x); if (ck_ != cudaSuccess) { printf("ERR %s line %d: %s\n", #x, __LINE__, cudaGetErrorName(ck_)); exit(1);} } while (0)

constexpr int N = 1024;

__global__ void tick(const float* in, const unsigned char* flags, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = in[i], k = in[n + i], t = in[2 * n + i], r = in[3 * n + i], v = in[4 * n + i], q = in[5 * n + i];
    float w = flags[i] ? 1.0f : -1.0f;
    float a = s * 1.0001f + k * w, b = t * r + v * q;
    for (int j = 0; j < 10; j++) out[j * n + i] = a + j * b;
}

using clk = std::chrono::high_resolution_clock;

static void copy_plain(void* dst, const void* src, size_t b) { memcpy(dst, src, b); }
static void flush(const void* p, size_t b) {
    const char* c = (const char*)p;
    for (size_t o = 0; o < b; o += 64) _mm_clflush(c + o);
}
static void copy_nt(void* dst, const void* src, size_t b) {
    // dst 16-byte aligned, b a multiple of 16 here
    __m128i* d = (__m128i*)dst;
    const __m128i* s = (const __m128i*)src;
    for (size_t i = 0; i < b / 16; i++) _mm_stream_si128(d + i, _mm_loadu_si128(s + i));
}

int main(int argc, char** argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 20000;
    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    size_t in_bytes = 6 * N * 4 + N, out_bytes = 10 * N * 4;
    char *hin, *hout;
    CK(cudaHostAlloc(&hin, in_bytes, cudaHostAllocMapped));
    CK(cudaHostAlloc(&hout, out_bytes, cudaHostAllocMapped));
    char *din, *dout;
    CK(cudaHostGetDevicePointer(&din, hin, 0));
    CK(cudaHostGetDevicePointer(&dout, hout, 0));
    // the caller's arrays (pageable) and result block
    std::vector<float> user_in(6 * N);
    std::vector<unsigned char> user_flags(N, 1);
    for (int i = 0; i < 6 * N; i++) user_in[i] = 1.0f + (i % 97) * 0.01f;
    std::vector<float> result(10 * N);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    tick<<<(N + 255) / 256, 256, 0, st>>>((const float*)din, (const unsigned char*)(din + 6 * N * 4), (float*)dout, N);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));

    const char* names[] = {"graph only", "memcpy in/out", "in: memcpy+clflush", "in: stream stores",
                           "in: stream stores; out: memcpy+clflush", "in: memcpy; out: memcpy+clflush",
                           "in only (memcpy)", "out only (memcpy)"};
    for (int round = 0; round < 2; round++)
    for (int var = 0; var < 8; var++) {
        std::vector<double> v, vin, vout;
        for (int it = 0; it < iters; it++) {
            user_in[0] = (float)it;
            auto a = clk::now();
            if (var == 1 || var == 5 || var == 6) {
                copy_plain(hin, user_in.data(), 6 * N * 4);
                copy_plain(hin + 6 * N * 4, user_flags.data(), N);
            } else if (var == 2) {
                copy_plain(hin, user_in.data(), 6 * N * 4);
                copy_plain(hin + 6 * N * 4, user_flags.data(), N);
                flush(hin, in_bytes);
            } else if (var == 3 || var == 4) {
                copy_nt(hin, user_in.data(), 6 * N * 4);
                copy_nt(hin + 6 * N * 4, user_flags.data(), N);
                _mm_sfence();
            }
            auto b = clk::now();
            CK(cudaGraphLaunch(ge, st));
            CK(cudaStreamSynchronize(st));
            auto c = clk::now();
            if (var != 0 && var != 6 && var != 2 && var != 3)
                copy_plain(result.data(), hout, out_bytes);
            if (var == 2 || var == 3)
                copy_plain(result.data(), hout, out_bytes);
            if (var == 4 || var == 5)
                flush(hout, out_bytes);
            auto d = clk::now();
            if (it > 500) {
                v.push_back(std::chrono::duration<double, std::micro>(d - a).count());
                vin.push_back(std::chrono::duration<double, std::micro>(b - a).count());
                vout.push_back(std::chrono::duration<double, std::micro>(d - c).count());
            }
        }
        std::sort(v.begin(), v.end());
        std::sort(vin.begin(), vin.end());
        std::sort(vout.begin(), vout.end());
        size_t m = v.size() / 2;
        printf("round %d %-42s total p50=%6.2f p99=%6.2f | in %5.2f | graph+wait %6.2f | out %5.2f us\n", round, names[var],
               v[m], v[(size_t)(v.size() * 0.99)], vin[m], v[m] - vin[m] - vout[m], vout[m]);
        fflush(stdout);
        if (result[5] == 12345.0f) printf("x");
    }
    return 0;
}
