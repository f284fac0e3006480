/*
 * w8a16.cu -- weight-only int8 GEMM for small batches (M <= 32): C = epilogue(A @ (B * scale)^T).
 *
 * A is float16 (M x K, row stride stride_am elements), B int8 (N x K, K contiguous, row stride
 * stride_bn bytes), scale and bias float32 (N,), C (M x N, row stride stride_cm) float32, float16
 * or bfloat16. The same contract as the Triton kernel w8a16_gemm_kernel (tickgpu/kernels/quant.py),
 * which serves larger batches.
 *
 * Why a kernel of its own. At M <= 16 the GEMM is a stream of weight bytes: at N = K = 4096 the
 * 16 MB of int8 weights are the work, and the Triton tile kernel reached only ~2 TB/s of them. Here
 * the operands are swapped, so the weights are the tensor cores' A operand (16 output channels a
 * tile) and the tokens their 8-wide B operand, and the weights go from global memory straight into
 * the registers of the MMA fragment, widened in place:
 *
 * - mma.sync m16n8k16 (float16 in, float32 accumulate) computes D[n][m] = sum_k W[n][k] X[m][k].
 *   Its k order is immaterial as long as A and B agree, so each thread reads 16 contiguous weight
 *   bytes of a row (one 16-byte load) and the 16 matching activations, and the 64-wide chunk's four
 *   MMA steps take them four at a time: step j, lane (g, t) holds the actual k = 16 t + 4 j + 0..3
 *   where the fragment layout puts the columns 2t, 2t+1, 2t+8, 2t+9 (for A and B alike).
 * - int8 -> float16 is exact and costs three integer operations and two float16x2 subtractions per
 *   four weights: x ^ 0x80 is x + 128 as an unsigned byte; under the float16 exponent byte 0x64 it
 *   reads 1024 + (x + 128), and subtracting 1152 leaves x.
 * - A block of TG_W8A16_WARPS warps owns 16 * NT output channels and all M (<= 8 * MT) tokens; its
 *   warps split K (64-wide chunks dealt round robin, so neighbouring warps read neighbouring bytes
 *   of the same rows) and each warp issues the loads of TG_W8A16_GROUP chunks before using any,
 *   to keep enough bytes in flight. The warps' partial sums meet in shared memory and are added in
 *   warp order (deterministic), then the float32 epilogue: * scale, + bias, optional GELU, rounding
 *   to the output type. Compiled without FMA contraction so the epilogue is the reference's
 *   operations one at a time.
 *
 * Requirements (the runtime's manifest says aligned16 with stride_bn a multiple of 16): b 16-byte
 * aligned, stride_bn a multiple of 16 and >= K rounded up to 16 (the weight padding may hold any
 * int8: the activations beyond K are read as zero). A needs no alignment: rows whose stride is a
 * multiple of 8 and a 16-byte aligned a take 16-byte loads, others element loads.
 * Grid: (ceil(M / (8 * MT)) * ceil(N / (16 * NT)), 1, 1), block (32 * TG_W8A16_WARPS, 1, 1).
 *
 * Built ahead of time by `tickgpu build-kernels` (nvcc -cubin -fmad=false), one cubin per variant:
 * -DTG_W8A16_MT, -DTG_W8A16_OUT (0 float32, 1 float16, 2 bfloat16), -DTG_W8A16_GELU select the
 * one extern "C" kernel, tg_w8a16_small_kernel.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#ifndef TG_W8A16_WARPS
#define TG_W8A16_WARPS 8
#endif
#ifndef TG_W8A16_NT
#define TG_W8A16_NT 2
#endif
#ifndef TG_W8A16_GROUP
#define TG_W8A16_GROUP 2
#endif

namespace tg_w8a16 {

/* Four int8 (one 32-bit word) -> four float16: lo = bytes 0, 1; hi = bytes 2, 3 (low half first). */
__device__ __forceinline__ void widen(uint32_t w, uint32_t &lo, uint32_t &hi)
{
    const uint32_t u = w ^ 0x80808080u;
    lo = __byte_perm(u, 0x64646464u, 0x4140);
    hi = __byte_perm(u, 0x64646464u, 0x4342);
    asm("sub.f16x2 %0, %0, %1;" : "+r"(lo) : "r"(0x64806480u));
    asm("sub.f16x2 %0, %0, %1;" : "+r"(hi) : "r"(0x64806480u));
}

/* 16 weight bytes, each read once: not kept in L1, which the activations (read by every block of
 * the same tokens) then keep to themselves. 2-3% faster at M = 12-16, N = K = 4096, weights in L2 or
 * not (benchmarks/results/h200-2026-12-04-b/, w8a16hint-probe.json); the same bits. */
__device__ __forceinline__ uint4 load_w(const int8_t *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void store(float *p, float v) { *p = v; }
__device__ __forceinline__ void store(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* The 16 activations X[m][k .. k + 15] of one token row, zero where m or k is out of range. */
__device__ __forceinline__ void load_x(uint4 (&dst)[2], const __half *row, bool ok, int k, int K, bool vec)
{
    dst[0] = dst[1] = make_uint4(0, 0, 0, 0);
    if (!ok || k >= K)
        return;
    if (vec && k + 16 <= K) {
        const uint4 *p = reinterpret_cast<const uint4 *>(row + k);
        dst[0] = __ldg(p);
        dst[1] = __ldg(p + 1);
    } else {
        const unsigned short *src = reinterpret_cast<const unsigned short *>(row) + k;
        uint32_t w[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const uint32_t lo = k + 2 * e < K ? __ldg(src + 2 * e) : 0u;
            const uint32_t hi = k + 2 * e + 1 < K ? __ldg(src + 2 * e + 1) : 0u;
            w[e] = lo | hi << 16;
        }
        dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
        dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
}

/* Programmatic dependent launch (sm_90 on): the next kernel of a model step's graph may launch
 * now; nothing the previous one wrote is read before it has finished. No-ops when launched
 * without the attribute. */
__device__ __forceinline__ void dependent_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <int MT, int NT, int WARPS, int GROUP, typename OutT, bool GELU>
__device__ __forceinline__ void gemm(const __half *__restrict__ a, const int8_t *__restrict__ b,
                                     const float *__restrict__ scale, const float *__restrict__ bias,
                                     OutT *__restrict__ c, int M, int N, int K, int stride_am, int stride_bn,
                                     int stride_cm)
{
    constexpr int BM = 8 * MT, BN = 16 * NT;
    __shared__ float part[WARPS][BM * BN];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n_tiles = (N + BN - 1) / BN;
    const int m0 = (int)(blockIdx.x / n_tiles) * BM, n0 = (int)(blockIdx.x % n_tiles) * BN;

    const int8_t *wrow[NT][2];
    bool wok[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + nt * 16 + g + 8 * h;
            wok[nt][h] = n < N;
            wrow[nt][h] = b + (size_t)(n < N ? n : 0) * stride_bn;
        }
    const __half *xrow[MT];
    bool xok[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int m = m0 + mt * 8 + g;
        xok[mt] = m < M;
        xrow[mt] = a + (size_t)(m < M ? m : 0) * stride_am;
    }
    const bool xvec = stride_am % 8 == 0 && (reinterpret_cast<uintptr_t>(a) & 15) == 0;

    float acc[NT][MT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                acc[nt][mt][r] = 0.0f;

    const int chunks = (K + 63) / 64;
    for (int q = warp * GROUP; q < chunks; q += WARPS * GROUP) {
        uint4 wv[GROUP][NT][2];
        uint4 xv[GROUP][MT][2];
#pragma unroll
        for (int i = 0; i < GROUP; ++i) {
            const int k = (q + i) * 64 + 16 * t;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    wv[i][nt][h] = (wok[nt][h] && k < K)
                                       ? load_w(wrow[nt][h] + k)
                                       : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                load_x(xv[i][mt], xrow[mt], xok[mt], k, K, xvec);
        }
#pragma unroll
        for (int i = 0; i < GROUP; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                uint32_t bx[MT][2];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const uint32_t *xw = reinterpret_cast<const uint32_t *>(xv[i][mt]);
                    bx[mt][0] = xw[2 * j];
                    bx[mt][1] = xw[2 * j + 1];
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const uint32_t w0 = reinterpret_cast<const uint32_t *>(&wv[i][nt][0])[j];
                    const uint32_t w1 = reinterpret_cast<const uint32_t *>(&wv[i][nt][1])[j];
                    uint32_t frag[4];
                    widen(w0, frag[0], frag[2]);
                    widen(w1, frag[1], frag[3]);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
                        mma(acc[nt][mt], frag, bx[mt][0], bx[mt][1]);
                }
            }
        }
    }

    /* D fragment: d0, d1 = (channel g, tokens 2t, 2t + 1); d2, d3 = (channel g + 8, same tokens). */
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int nl = nt * 16 + g + (r >= 2 ? 8 : 0);
                const int ml = mt * 8 + 2 * t + (r & 1);
                part[warp][ml * BN + nl] = acc[nt][mt][r];
            }
    __syncthreads();
    for (int idx = threadIdx.x; idx < BM * BN; idx += WARPS * 32) {
        const int ml = idx / BN, nl = idx % BN;
        const int m = m0 + ml, n = n0 + nl;
        if (m >= M || n >= N)
            continue;
        float s = part[0][idx];
#pragma unroll
        for (int w = 1; w < WARPS; ++w)
            s += part[w][idx];
        float y = s * scale[n];
        y = y + bias[n];
        if (GELU)
            y = 0.5f * y * (1.0f + erff(y * 0.7071067811865476f));
        store(c + (size_t)m * stride_cm + n, y);
    }
}

}  // namespace tg_w8a16

#define TG_W8A16_PARAMS(OutT)                                                                      \
    const __half *__restrict__ a, const int8_t *__restrict__ b, const float *__restrict__ scale,  \
        const float *__restrict__ bias, OutT *__restrict__ c, int M, int N, int K, int stride_am,  \
        int stride_bn, int stride_cm
#define TG_W8A16_ARGS a, b, scale, bias, c, M, N, K, stride_am, stride_bn, stride_cm

#if defined(TG_W8A16_MT) && defined(TG_W8A16_OUT) && defined(TG_W8A16_GELU)
#if TG_W8A16_OUT == 0
typedef float tg_w8a16_out_t;
#elif TG_W8A16_OUT == 1
typedef __half tg_w8a16_out_t;
#else
typedef __nv_bfloat16 tg_w8a16_out_t;
#endif
extern "C" __global__ void __launch_bounds__(TG_W8A16_WARPS * 32)
    tg_w8a16_small_kernel(TG_W8A16_PARAMS(tg_w8a16_out_t))
{
    tg_w8a16::dependent_launch();
    tg_w8a16::gemm<TG_W8A16_MT, TG_W8A16_NT, TG_W8A16_WARPS, TG_W8A16_GROUP, tg_w8a16_out_t,
                   (TG_W8A16_GELU != 0)>(TG_W8A16_ARGS);
}
#endif
