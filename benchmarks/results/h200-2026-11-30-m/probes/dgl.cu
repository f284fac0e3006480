// Round trip of a chain of N small dependent kernels (a model step), host to host, four ways:
//  A  host graph launch + cuStreamSynchronize (the runtime's StepGraph today)
//  A2 host graph launch, the graph's last node a 1-thread signal kernel writing seq to mapped
//     memory; the host spins on it (no stream sync on the call's path)
//  B  resident poller (in a host-launched graph) device-launches the step graph fire-and-forget on
//     each request; the step's signal kernel answers; the poller relaunches itself (tail) every 100
//  C  tail-launch ping-pong: the poller tail-launches the step and exits; the step's signal kernel
//     answers and tail-launches the poller
// nvcc -O2 -arch=sm_90 -rdc=true dgl.cu -lcudadevrt -o dgl
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t ck_ = (x); if (ck_ != cudaSuccess) { printf("ERR %s line %d: %s\n", #x, __LINE__, cudaGetErrorName(ck_)); exit(1);} } while (0)

struct Box {
    volatile unsigned long long seq_in; unsigned long long pad0[15];
    volatile unsigned long long seq_out; unsigned long long pad1[15];
    volatile int stop; int launch_err; int relaunches; int pad2[29];
};

constexpr int G = 32, T = 128, NV = 1024;

__global__ void layer(const float* in, float* out, int n) {
    __shared__ float s[T];
    float acc = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += in[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = T / 2; w > 0; w >>= 1) { if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w]; __syncthreads(); }
    if (threadIdx.x < 32) out[blockIdx.x * 32 + threadIdx.x] = s[0] * 1e-3f + threadIdx.x;
}

__device__ unsigned long long d_seq;
__device__ cudaGraphExec_t d_poller_exec;

__global__ void signal(Box* box) {
    __threadfence_system();
    box->seq_out = d_seq;
}

// C: the step's last node: answer, then start the poller again once this graph is done.
__global__ void signal_tail(Box* box) {
    __threadfence_system();
    box->seq_out = d_seq;
    if (!box->stop) {
        cudaError_t e = cudaGraphLaunch(d_poller_exec, cudaStreamGraphTailLaunch);
        if (e != cudaSuccess) box->launch_err = (int)e;
    }
}

__device__ __forceinline__ bool poll(Box* box, unsigned long long last, unsigned long long* got) {
    for (;;) {
        unsigned long long s = box->seq_in;
        if (box->stop) return false;
        if (s != last) { *got = s; return true; }
    }
}

// B: fire-and-forget per request, self relaunch (tail) every 100 requests.
__global__ void poller_ff(Box* box, cudaGraphExec_t step) {
    unsigned long long last = d_seq, s;
    for (int k = 0; k < 100; k++) {
        if (!poll(box, last, &s)) return;
        d_seq = s;
        __threadfence();
        cudaError_t e = cudaGraphLaunch(step, cudaStreamGraphFireAndForget);
        if (e != cudaSuccess) { box->launch_err = (int)e; return; }
        last = s;
    }
    // the next instance starts after this graph and its fire-and-forget children are done
    box->relaunches++;
    cudaError_t e = cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
    if (e != cudaSuccess) box->launch_err = 1000 + (int)e;
}

// C: one request, then hand over to the step.
__global__ void poller_tail(Box* box, cudaGraphExec_t step) {
    unsigned long long s;
    if (!poll(box, d_seq, &s)) return;
    d_seq = s;
    __threadfence();
    cudaError_t e = cudaGraphLaunch(step, cudaStreamGraphTailLaunch);
    if (e != cudaSuccess) box->launch_err = 2000 + (int)e;
}

using clk = std::chrono::high_resolution_clock;

static void report(const char* name, int n, std::vector<double>& v, int bad, Box* box) {
    std::sort(v.begin(), v.end());
    printf("%-3s N=%d p50=%6.2f us p99=%6.2f p99.9=%6.2f min=%6.2f bad=%d err=%d relaunch=%d\n", name, n, v[v.size() / 2],
           v[(size_t)(v.size() * 0.99)], v[(size_t)(v.size() * 0.999)], v[0], bad, box ? box->launch_err : 0,
           box ? box->relaunches : 0);
    fflush(stdout);
}

int main(int argc, char** argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 20000;
    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    CK(cudaFree(0));
    Box* box; float *hx, *hy, *dx, *dy;
    CK(cudaHostAlloc(&box, sizeof(Box), cudaHostAllocMapped));
    CK(cudaHostAlloc(&hx, NV * 4, cudaHostAllocMapped));
    CK(cudaHostAlloc(&hy, NV * 4, cudaHostAllocMapped));
    Box* dbox;
    CK(cudaHostGetDevicePointer(&dbox, box, 0));
    CK(cudaHostGetDevicePointer(&dx, hx, 0));
    CK(cudaHostGetDevicePointer(&dy, hy, 0));
    float* buf[8];
    for (auto& b : buf) CK(cudaMalloc(&b, NV * 4));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    for (int N : {1, 4, 6}) {
        // the step: N layers, mapped x in, mapped y out, optionally a signal node
        auto capture = [&](int sig, unsigned flags) {
            cudaGraph_t g;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < N; i++) {
                const float* in = i == 0 ? dx : buf[i - 1];
                float* out = i == N - 1 ? dy : buf[i];
                layer<<<G, T, 0, st>>>(in, out, NV);
            }
            if (sig == 1) signal<<<1, 1, 0, st>>>(dbox);
            if (sig == 2) signal_tail<<<1, 1, 0, st>>>(dbox);
            CK(cudaStreamEndCapture(st, &g));
            cudaGraphExec_t e;
            CK(cudaGraphInstantiateWithFlags(&e, g, flags));
            CK(cudaGraphUpload(e, st));
            CK(cudaStreamSynchronize(st));
            return e;
        };
        auto check = [&](unsigned long long it) {
            // y[j] = sum(previous) * 1e-3 + j % 32: just check the tail of the chain moved with x
            return hy[5] != 0.0f;
        };
        // A
        {
            cudaGraphExec_t e = capture(0, 0);
            std::vector<double> v; int bad = 0;
            for (int it = 1; it <= iters; it++) {
                for (int i = 0; i < NV; i++) hx[i] = (float)((it + i) & 7);
                hy[5] = 0;
                auto a = clk::now();
                CK(cudaGraphLaunch(e, st));
                CK(cudaStreamSynchronize(st));
                auto b = clk::now();
                if (!check(it)) bad++;
                if (it > 200) v.push_back(std::chrono::duration<double, std::micro>(b - a).count());
            }
            report("A", N, v, bad, nullptr);
        }
        // A2
        {
            cudaGraphExec_t e = capture(1, 0);
            std::vector<double> v; int bad = 0;
            unsigned long long seq = 0;
            box->seq_out = 0;
            for (int it = 1; it <= iters; it++) {
                for (int i = 0; i < NV; i++) hx[i] = (float)((it + i) & 7);
                hy[5] = 0;
                seq++;
                CK(cudaMemcpyToSymbolAsync(d_seq, &seq, 8, 0, cudaMemcpyHostToDevice, st));  // untimed, before
                CK(cudaStreamSynchronize(st));
                auto a = clk::now();
                CK(cudaGraphLaunch(e, st));
                while (box->seq_out != seq) {}
                auto b = clk::now();
                if (!check(it)) bad++;
                if (it > 200) v.push_back(std::chrono::duration<double, std::micro>(b - a).count());
            }
            CK(cudaStreamSynchronize(st));
            report("A2", N, v, bad, nullptr);
        }
        // B
        {
            cudaGraphExec_t step = capture(1, cudaGraphInstantiateFlagDeviceLaunch);
            box->seq_in = 0; box->seq_out = 0; box->stop = 0; box->launch_err = 0; box->relaunches = 0;
            unsigned long long zero = 0;
            CK(cudaMemcpyToSymbol(d_seq, &zero, 8));
            cudaGraph_t pg;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            poller_ff<<<1, 32, 0, st>>>(dbox, step);
            CK(cudaStreamEndCapture(st, &pg));
            cudaGraphExec_t pe;
            CK(cudaGraphInstantiateWithFlags(&pe, pg, cudaGraphInstantiateFlagDeviceLaunch));
            CK(cudaGraphUpload(pe, st));
            CK(cudaGraphLaunch(pe, st));
            std::vector<double> v; int bad = 0;
            int it;
            for (it = 1; it <= iters; it++) {
                for (int i = 0; i < NV; i++) hx[i] = (float)((it + i) & 7);
                hy[5] = 0;
                auto a = clk::now();
                __sync_synchronize();
                box->seq_in = it;
                auto t0 = clk::now();
                bool ok = true;
                while (box->seq_out != (unsigned long long)it) {
                    if (std::chrono::duration<double>(clk::now() - t0).count() > 1.0) { ok = false; break; }
                }
                auto b = clk::now();
                if (!ok) { printf("B N=%d: timeout at %d err=%d relaunch=%d\n", N, it, box->launch_err, box->relaunches); break; }
                if (!check(it)) bad++;
                if (it > 200) v.push_back(std::chrono::duration<double, std::micro>(b - a).count());
            }
            box->stop = 1;
            cudaError_t se = cudaStreamSynchronize(st);
            if (se != cudaSuccess) printf("B sync: %s\n", cudaGetErrorName(se));
            if (v.size() > 100) report("B", N, v, bad, box);
        }
        // C
        {
            cudaGraphExec_t step = capture(2, cudaGraphInstantiateFlagDeviceLaunch);
            box->seq_in = 0; box->seq_out = 0; box->stop = 0; box->launch_err = 0; box->relaunches = 0;
            unsigned long long zero = 0;
            CK(cudaMemcpyToSymbol(d_seq, &zero, 8));
            cudaGraph_t pg;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            poller_tail<<<1, 32, 0, st>>>(dbox, step);
            CK(cudaStreamEndCapture(st, &pg));
            cudaGraphExec_t pe;
            CK(cudaGraphInstantiateWithFlags(&pe, pg, cudaGraphInstantiateFlagDeviceLaunch));
            CK(cudaGraphUpload(pe, st));
            CK(cudaMemcpyToSymbol(d_poller_exec, &pe, sizeof(pe)));
            CK(cudaGraphLaunch(pe, st));
            std::vector<double> v; int bad = 0;
            for (int it = 1; it <= iters; it++) {
                for (int i = 0; i < NV; i++) hx[i] = (float)((it + i) & 7);
                hy[5] = 0;
                auto a = clk::now();
                __sync_synchronize();
                box->seq_in = it;
                auto t0 = clk::now();
                bool ok = true;
                while (box->seq_out != (unsigned long long)it) {
                    if (std::chrono::duration<double>(clk::now() - t0).count() > 1.0) { ok = false; break; }
                }
                auto b = clk::now();
                if (!ok) { printf("C N=%d: timeout at %d err=%d\n", N, it, box->launch_err); break; }
                if (!check(it)) bad++;
                if (it > 200) v.push_back(std::chrono::duration<double, std::micro>(b - a).count());
            }
            box->stop = 1;
            cudaError_t se = cudaStreamSynchronize(st);
            if (se != cudaSuccess) printf("C sync: %s\n", cudaGetErrorName(se));
            if (v.size() > 100) report("C", N, v, bad, box);
        }
    }
    return 0;
}
