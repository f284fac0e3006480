// Does programmatic dependent launch shorten a graph of small dependent kernels (an MLP step)?
#include <cstdio>
#include <vector>
#include <algorithm>
#include <chrono>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("ERR %s %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); return 1; } } while (0)
// Each block: 16 KB of weights (int4 loads), a dot with the 256-float activation, one output per block.
template <int MODE>   // 0: plain; 1: wait first; 2: weights loaded, then wait; both trigger dependents at once
__global__ void layer(const int4 *w, const float *x, float *y) {
  if (MODE == 2) asm volatile("griddepcontrol.launch_dependents;");
  int4 acc[4];
  const int4 *wb = w + blockIdx.x * 1024;
  if (MODE == 1) { asm volatile("griddepcontrol.launch_dependents;"); asm volatile("griddepcontrol.wait;" ::: "memory"); }
  for (int i = 0; i < 4; i++) acc[i] = wb[threadIdx.x + 256 * i];
  if (MODE == 2) asm volatile("griddepcontrol.wait;" ::: "memory");
  float s = x[threadIdx.x];
  float v = s * (acc[0].x + acc[1].y + acc[2].z + acc[3].w);
  __shared__ float r[256];
  r[threadIdx.x] = v; __syncthreads();
  for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) r[threadIdx.x] += r[threadIdx.x + k]; __syncthreads(); }
  if (threadIdx.x == 0) y[blockIdx.x] = r[0] * 1e-9f + 1.0f;
}
template <int MODE> int run(int layers, int blocks, float *host_in, float *host_out) {
  int4 *w; float *buf;
  CK(cudaMalloc(&w, (size_t)layers * blocks * 16384)); CK(cudaMemset(w, 1, (size_t)layers * blocks * 16384));
  CK(cudaMalloc(&buf, (layers + 1) * 4096 * 4)); CK(cudaMemset(buf, 0, (layers + 1) * 4096 * 4));
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int l = 0; l < layers; l++) {
    const float *x = l == 0 ? host_in : buf + l * 4096;
    float *y = l == layers - 1 ? host_out : buf + (l + 1) * 4096;
    cudaLaunchConfig_t cfg = {}; cfg.gridDim = blocks; cfg.blockDim = 256; cfg.stream = s;
    cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = (MODE != 0 && l > 0) ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, layer<MODE>, (const int4 *)(w + (size_t)l * blocks * 1024), x, y));
  }
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
  std::vector<double> v;
  for (int it = 0; it < 20000; it++) {
    auto a = std::chrono::high_resolution_clock::now();
    CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
    auto b = std::chrono::high_resolution_clock::now();
    if (it > 500) v.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  std::sort(v.begin(), v.end());
  printf("mode %d layers %d blocks %3d: p50 %6.2f us p99 %6.2f\n", MODE, layers, blocks, v[v.size() / 2], v[v.size() * 99 / 100]);
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g); cudaFree(w); cudaFree(buf); cudaStreamDestroy(s);
  return 0;
}
int main() {
  CK(cudaSetDeviceFlags(cudaDeviceMapHost));
  float *hin, *hout, *din, *dout;
  CK(cudaHostAlloc(&hin, 4096 * 4, cudaHostAllocMapped)); CK(cudaHostAlloc(&hout, 4096 * 4, cudaHostAllocMapped));
  CK(cudaHostGetDevicePointer(&din, hin, 0)); CK(cudaHostGetDevicePointer(&dout, hout, 0));
  for (int layers : {1, 3, 5}) for (int blocks : {16, 64}) {
    if (run<0>(layers, blocks, din, dout) || run<1>(layers, blocks, din, dout) || run<2>(layers, blocks, din, dout)) return 1;
  }
  return 0;
}
