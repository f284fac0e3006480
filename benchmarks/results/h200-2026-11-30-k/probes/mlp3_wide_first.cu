/*
 * mlp3_wide.cu -- a whole W8A16 model step, [LayerNorm ->] Linear -> GELU -> Linear -> GELU -> Linear,
 * in one launch for models up to TG_MLP3W_WIDTH wide (256, 512 or 1,024), on a thread-block cluster.
 *
 * Why. A signal model's step is a few microseconds of GPU work. Run layer by layer it is 4 launches
 * in a graph, and every launch boundary costs ~1-2 us of a dependent chain; a grid-wide barrier in
 * one cooperative launch cost as much (benchmarks/results/h200-2026-11-30-i). A cluster's barrier is
 * hardware, its blocks see each other's shared memory, and a block can fetch its share of every
 * layer's weights before the step's input has even arrived:
 *
 * - The cluster (TG_MLP3W_CLUSTER blocks) takes 16 tokens; block r owns output channels
 *   [r * S, r * S + S) of each layer (S = the layer's width over the cluster, rounded up to 16).
 * - At the start each block issues bulk copies (cp.async.bulk, completion on an mbarrier) of its
 *   slices of layers 1 and 2 -- contiguous rows of the K-major weights -- into shared memory, and
 *   reads its layers' scales and biases, while the input rows are still crossing PCIe (the step's
 *   input is mapped host memory). Layer 3's slice follows into layer 1's space once layer 1 is done.
 * - LayerNorm: each block normalizes 16 / C of the cluster's tokens (one warp a token) and writes
 *   them, rounded to float16, into every block's activation buffer (distributed shared memory).
 * - A layer: each block multiplies the whole float16 activation tile (16 tokens x K) by its weight
 *   slice on the tensor cores (mma.sync m16n8k16: weights the A operand, 16 channels, widened from
 *   int8 in registers; tokens the B operand, as in w8a16.cu, whose notes hold for the k order and
 *   the widening), its warps splitting the channels in MG groups and K in KP parts. The parts meet
 *   in shared memory and are added in order (deterministic), then the float32 epilogue: * scale,
 *   + bias, GELU; the float16 results go to every block's next activation buffer (two buffers,
 *   used in turn, so one cluster barrier a layer suffices). Layer 3 writes float32 to y.
 *
 * Operation for operation this is the layer-by-layer step (layernorm_kernel, then a W8A16 GEMM a
 * layer with float16 hidden activations); only the float32 sums run in another order. Outputs are
 * float32 (the caller rounds to float16 / bfloat16 as a kernel's store would). A row that is not
 * finite gives NaN outputs in its own row only.
 *
 * Contract (mlp3_fused_kernel's parameters; the W16A8 limbs and offsets are not read): weights
 * 16-byte aligned, K-major, rows stride_w{1,2,3} bytes apart (multiples of 16, >= K, zero padded);
 * K0, H1, H2, N <= TG_MLP3W_WIDTH; the activations need no alignment. Grid (ceil(M / 16) * C, 1,
 * 1), block 256 threads, tg_mlp3w::SMEM bytes of dynamic shared memory (the builder computes the
 * same figure and passes it as -DTG_MLP3W_SMEM, asserted equal below; a launch with less traps).
 * sm_90 and later (clusters, bulk copies).
 *
 * Built ahead of time by `tickgpu build-kernels` (nvcc -cubin -fmad=false), one cubin per variant:
 * -DTG_MLP3W_WIDTH, -DTG_MLP3W_CLUSTER, -DTG_MLP3W_LN select the one extern "C" kernel,
 * tg_mlp3_w8a16_wide_kernel.
 */
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <stdint.h>

#ifndef TG_MLP3W_WIDTH
#define TG_MLP3W_WIDTH 1024
#endif
#ifndef TG_MLP3W_CLUSTER
#define TG_MLP3W_CLUSTER 16
#endif
#ifndef TG_MLP3W_LN
#define TG_MLP3W_LN 1
#endif

namespace cg = cooperative_groups;

namespace tg_mlp3w {

constexpr int C = TG_MLP3W_CLUSTER;
constexpr int HW = TG_MLP3W_WIDTH;
constexpr int WARPS = 8;
constexpr int TOK = 16;                                        // tokens a cluster
constexpr int SLICE = ((HW + C - 1) / C + 15) / 16 * 16;       // most channels a block owns in a layer
constexpr int MT = SLICE / 16;                                 // m16 tiles of a full slice
constexpr int MG = MT >= 2 ? 2 : 1;                            // warp groups over the tiles
constexpr int KP = WARPS / MG;                                 // warps of a group, splitting K
constexpr int MTW = (MT + MG - 1) / MG;                        // tiles a warp owns at most
constexpr int ASTR = HW + 8;                                   // halves between activation rows
constexpr int ACT_BYTES = TOK * ASTR * 2;
constexpr int W_BYTES = SLICE * HW + 64;                       // + the last row's reads past its end
constexpr int RED_BYTES = KP * TOK * SLICE * 4;
constexpr int PAR_BYTES = 3 * 2 * SLICE * 4;                   // scale and bias slices, three layers
constexpr int OFF_ACT = 0;
constexpr int OFF_WA = OFF_ACT + 2 * ACT_BYTES;                // layer 1's weights, then layer 3's
constexpr int OFF_WB = OFF_WA + W_BYTES;                       // layer 2's
constexpr int OFF_RED = OFF_WB + W_BYTES;
constexpr int OFF_PAR = OFF_RED + RED_BYTES;
constexpr int OFF_BAR = OFF_PAR + PAR_BYTES;
constexpr int SMEM = OFF_BAR + 3 * 8;

#ifdef TG_MLP3W_SMEM
static_assert(SMEM == TG_MLP3W_SMEM, "the builder's figure (tickgpu.kernels.quant.mlp3_wide_shared) is this layout's");
#endif
static_assert(HW % 256 == 0, "the LayerNorm writes rows 256 halves at a time");
static_assert(ACT_BYTES % 16 == 0 && W_BYTES % 16 == 0 && RED_BYTES % 16 == 0, "16-byte aligned regions");
static_assert(TOK * SLICE / 8 <= WARPS * 32, "one epilogue group of 8 channels a thread");

__device__ __forceinline__ void widen(uint32_t w, uint32_t &lo, uint32_t &hi)
{
    const uint32_t u = w ^ 0x80808080u;
    lo = __byte_perm(u, 0x64646464u, 0x4140);
    hi = __byte_perm(u, 0x64646464u, 0x4342);
    asm("sub.f16x2 %0, %0, %1;" : "+r"(lo) : "r"(0x64806480u));
    asm("sub.f16x2 %0, %0, %1;" : "+r"(hi) : "r"(0x64806480u));
}

__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* Bulk copy of `bytes` (a multiple of 16) from global `src` into this block's shared `dst`,
 * completing on mbarrier `bar` (armed here for that many bytes). */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

__device__ __forceinline__ void bulk_wait(uint64_t *bar)
{
    uint32_t done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(smem_u32(bar))
                     : "memory");
}

struct Layer {
    const int8_t *w;   // this block's slice in shared memory
    int sw, K, N;      // weight row stride (bytes), reduction and output widths
    int n0, count;     // this block's first channel and how many it owns (0 .. SLICE)
    const float *scale, *bias;   // the slice's, in shared memory
};

/* The slice of a layer of N channels that block `rank` owns. */
__device__ __forceinline__ void slice_of(int N, int rank, int &n0, int &count)
{
    const int s = ((N + C - 1) / C + 15) / 16 * 16;
    n0 = rank * s;
    count = min(max(N - n0, 0), s);
}

/* This warp's partial sums of the layer over its K part, into red[kp][token][channel]. */
template <int T>
__device__ __forceinline__ void gemm_part(const Layer &L, const __half *act, float *red, int warp, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    const int mg = warp % MG, kp = warp / MG;
    const int tiles = (L.count + 15) / 16;
    float acc[MTW][T][4];
#pragma unroll
    for (int i = 0; i < MTW; ++i)
#pragma unroll
        for (int tt = 0; tt < T; ++tt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                acc[i][tt][r] = 0.0f;

    const int chunks = (L.K + 63) / 64;
    for (int c = kp; c < chunks; c += KP) {
        const int kb = c * 64 + 16 * t;
        uint32_t x[T][8];
#pragma unroll
        for (int tt = 0; tt < T; ++tt) {
            const uint4 *p = reinterpret_cast<const uint4 *>(act + (tt * 8 + g) * ASTR + kb);
            const uint4 v0 = p[0], v1 = p[1];
            x[tt][0] = v0.x, x[tt][1] = v0.y, x[tt][2] = v0.z, x[tt][3] = v0.w;
            x[tt][4] = v1.x, x[tt][5] = v1.y, x[tt][6] = v1.z, x[tt][7] = v1.w;
            if (kb + 16 > L.K) {   // the row's tail: columns past K may hold an earlier layer's values
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const int k = kb + 2 * e;
                    x[tt][e] &= (k < L.K ? 0x0000ffffu : 0u) | (k + 1 < L.K ? 0xffff0000u : 0u);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < MTW; ++i) {
            const int tile = mg + i * MG;
            if (tile >= tiles)
                break;
            const int8_t *row = L.w + (tile * 16 + g) * L.sw + c * 64 + 16 * t;
            const uint4 w0 = *reinterpret_cast<const uint4 *>(row);
            const uint4 w1 = *reinterpret_cast<const uint4 *>(row + 8 * L.sw);
            const uint32_t ww0[4] = {w0.x, w0.y, w0.z, w0.w}, ww1[4] = {w1.x, w1.y, w1.z, w1.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                uint32_t frag[4];
                widen(ww0[j], frag[0], frag[2]);
                widen(ww1[j], frag[1], frag[3]);
#pragma unroll
                for (int tt = 0; tt < T; ++tt)
                    mma(acc[i][tt], frag, x[tt][2 * j], x[tt][2 * j + 1]);
            }
        }
    }
    /* D fragment: d0, d1 = (channel g, tokens 2t, 2t + 1); d2, d3 = (channel g + 8, same tokens). */
#pragma unroll
    for (int i = 0; i < MTW; ++i) {
        const int tile = mg + i * MG;
        if (tile >= tiles)
            break;
#pragma unroll
        for (int tt = 0; tt < T; ++tt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int ch = tile * 16 + g + (r >= 2 ? 8 : 0);
                const int tok = tt * 8 + 2 * t + (r & 1);
                red[(kp * TOK + tok) * SLICE + ch] = acc[i][tt][r];
            }
    }
}

/* The layer's outputs from the parts in red: float16 into every block's `next` activations (hidden
 * layers, with GELU), or float32 into y (the last layer). Thread (token, group of 8 channels). */
template <bool LAST>
__device__ __forceinline__ void epilogue(const Layer &L, const float *red, int rows, cg::cluster_group &cluster,
                                         __half *next, float *y, int stride_ym)
{
    const int groups = (L.count + 7) / 8;
    for (int idx = threadIdx.x; idx < TOK * groups; idx += WARPS * 32) {
        const int tok = idx / groups, grp = idx % groups;
        if (tok >= rows)
            continue;
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int ch = grp * 8 + e;
            v[e] = 0.0f;
            if (ch >= L.count)
                continue;
            float s = red[tok * SLICE + ch];
#pragma unroll
            for (int p = 1; p < KP; ++p)
                s += red[(p * TOK + tok) * SLICE + ch];
            float o = s * L.scale[ch];
            o = o + L.bias[ch];
            if (!LAST)
                o = 0.5f * o * (1.0f + erff(o * 0.7071067811865476f));
            v[e] = o;
        }
        if (LAST) {
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (grp * 8 + e < L.count)
                    y[(size_t)tok * stride_ym + L.n0 + grp * 8 + e] = v[e];
        } else {
            uint4 packed;
            uint32_t *pw = reinterpret_cast<uint32_t *>(&packed);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const __half2 h = __floats2half2_rn(v[2 * e], v[2 * e + 1]);
                pw[e] = *reinterpret_cast<const uint32_t *>(&h);
            }
            __half *dst = next + tok * ASTR + L.n0 + grp * 8;
#pragma unroll
            for (int q = 0; q < C; ++q)
                *reinterpret_cast<uint4 *>(cluster.map_shared_rank(dst, q)) = packed;
        }
    }
}

template <bool LAST>
__device__ __forceinline__ void layer(const Layer &L, const __half *act, float *red, int rows,
                                      cg::cluster_group &cluster, __half *next, float *y, int stride_ym,
                                      int warp, int lane)
{
    if (L.count > 0) {
        if (rows > 8)
            gemm_part<2>(L, act, red, warp, lane);
        else
            gemm_part<1>(L, act, red, warp, lane);
    }
    __syncthreads();
    if (L.count > 0)
        epilogue<LAST>(L, red, rows, cluster, next, y, stride_ym);
}

}  // namespace tg_mlp3w

extern "C" __global__ void __cluster_dims__(TG_MLP3W_CLUSTER, 1, 1) __launch_bounds__(256, 1)
    tg_mlp3_w8a16_wide_kernel(const float *__restrict__ x, const float *__restrict__ gamma,
                              const float *__restrict__ beta, const int8_t *__restrict__ w1,
                              const int8_t *__restrict__ w1b, const float *__restrict__ s1,
                              const float *__restrict__ o1, const float *__restrict__ b1,
                              const int8_t *__restrict__ w2, const int8_t *__restrict__ w2b,
                              const float *__restrict__ s2, const float *__restrict__ o2,
                              const float *__restrict__ b2, const int8_t *__restrict__ w3,
                              const int8_t *__restrict__ w3b, const float *__restrict__ s3,
                              const float *__restrict__ o3, const float *__restrict__ b3, float *__restrict__ y,
                              int M, int K0, int H1, int H2, int N, int stride_xm, int stride_w1, int stride_w2,
                              int stride_w3, int stride_ym, float ln_eps)
{
    using namespace tg_mlp3w;
    extern __shared__ __align__(16) unsigned char smem[];
    uint32_t have;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
    if (have < (uint32_t)SMEM)
        __trap();

    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int tok0 = (int)(blockIdx.x / C) * TOK;
    const int rows = min(TOK, M - tok0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    __half *act[2] = {reinterpret_cast<__half *>(smem + OFF_ACT),
                      reinterpret_cast<__half *>(smem + OFF_ACT + ACT_BYTES)};
    int8_t *wa = reinterpret_cast<int8_t *>(smem + OFF_WA);
    int8_t *wb = reinterpret_cast<int8_t *>(smem + OFF_WB);
    float *red = reinterpret_cast<float *>(smem + OFF_RED);
    float *par = reinterpret_cast<float *>(smem + OFF_PAR);
    uint64_t *bar = reinterpret_cast<uint64_t *>(smem + OFF_BAR);

    Layer L1, L2, L3;
    L1.w = wa, L1.sw = stride_w1, L1.K = K0, L1.N = H1;
    L2.w = wb, L2.sw = stride_w2, L2.K = H1, L2.N = H2;
    L3.w = wa, L3.sw = stride_w3, L3.K = H2, L3.N = N;
    slice_of(H1, rank, L1.n0, L1.count);
    slice_of(H2, rank, L2.n0, L2.count);
    slice_of(N, rank, L3.n0, L3.count);
    L1.scale = par, L1.bias = par + SLICE;
    L2.scale = par + 2 * SLICE, L2.bias = par + 3 * SLICE;
    L3.scale = par + 4 * SLICE, L3.bias = par + 5 * SLICE;

    /* Weights of layers 1 and 2 on their way before anything else. */
    if (threadIdx.x == 0) {
#pragma unroll
        for (int i = 0; i < 3; ++i)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar + i)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        if (L1.count > 0)
            bulk_load(wa, w1 + (size_t)L1.n0 * stride_w1, (uint32_t)(L1.count * stride_w1), bar + 0);
        if (L2.count > 0)
            bulk_load(wb, w2 + (size_t)L2.n0 * stride_w2, (uint32_t)(L2.count * stride_w2), bar + 1);
    }
    /* Scales and biases of this block's slices. */
    for (int ch = threadIdx.x; ch < SLICE; ch += WARPS * 32) {
        par[ch] = ch < L1.count ? s1[L1.n0 + ch] : 0.0f;
        par[SLICE + ch] = ch < L1.count ? b1[L1.n0 + ch] : 0.0f;
        par[2 * SLICE + ch] = ch < L2.count ? s2[L2.n0 + ch] : 0.0f;
        par[3 * SLICE + ch] = ch < L2.count ? b2[L2.n0 + ch] : 0.0f;
        par[4 * SLICE + ch] = ch < L3.count ? s3[L3.n0 + ch] : 0.0f;
        par[5 * SLICE + ch] = ch < L3.count ? b3[L3.n0 + ch] : 0.0f;
    }
    cluster.sync();   // every block runs (its shared memory may be written) and its barriers are set

    /* LayerNorm (or the float16 rounding alone): warp w of block r takes token r + C w. Lane l
     * reads the row's elements 256 i + 32 e + l (with gamma and beta, all loads issued at once),
     * writes them rounded to this block's row, then sends 8 of them at a time to the others. */
    for (int lt = rank + C * warp; lt < rows; lt += C * WARPS) {
        const float *row = x + (size_t)(tok0 + lt) * stride_xm;
        constexpr int NB = HW / 256;
        float v[NB][8];
#if TG_MLP3W_LN
        float gv[NB][8], bv[NB][8];
#endif
#pragma unroll
        for (int i = 0; i < NB; ++i)
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int k = 256 * i + 32 * e + lane;
                const bool in = k < K0;
                v[i][e] = in ? row[k] : 0.0f;
#if TG_MLP3W_LN
                gv[i][e] = in ? gamma[k] : 0.0f;
                bv[i][e] = in ? beta[k] : 0.0f;
#endif
            }
#if TG_MLP3W_LN
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < NB; ++i)
#pragma unroll
            for (int e = 0; e < 8; ++e)
                sum += v[i][e];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float mean = sum / (float)K0;
        float sq = 0.0f;
#pragma unroll
        for (int i = 0; i < NB; ++i)
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float d = 256 * i + 32 * e + lane < K0 ? v[i][e] - mean : 0.0f;
                v[i][e] = d;
                sq += d * d;
            }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
        const float var = sq / (float)K0;
        const float rstd = __frcp_rn(__fsqrt_rn(var + ln_eps));
#pragma unroll
        for (int i = 0; i < NB; ++i)
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[i][e] = v[i][e] * rstd * gv[i][e] + bv[i][e];   // zero past K0: gamma, beta are 0 there
#endif
        __half *own = act[0] + lt * ASTR;
#pragma unroll
        for (int i = 0; i < NB; ++i)
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (256 * i < K0)
                    own[256 * i + 32 * e + lane] = __float2half_rn(v[i][e]);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < NB; ++i) {
            if (256 * i >= K0)
                break;
            const uint4 packed = *reinterpret_cast<const uint4 *>(own + 256 * i + 8 * lane);
            for (int q = 0; q < C; ++q)
                if (q != rank)
                    *reinterpret_cast<uint4 *>(cluster.map_shared_rank(own + 256 * i + 8 * lane, q)) = packed;
        }
    }
    cluster.sync();

    if (L1.count > 0)
        bulk_wait(bar + 0);
    layer<false>(L1, act[0], red, rows, cluster, act[1], nullptr, 0, warp, lane);
    if (threadIdx.x == 0 && L3.count > 0) {
        /* Every warp is past layer 1's weights (the barrier in `layer`): layer 3's may replace them. */
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        bulk_load(wa, w3 + (size_t)L3.n0 * stride_w3, (uint32_t)(L3.count * stride_w3), bar + 2);
    }
    cluster.sync();

    if (L2.count > 0)
        bulk_wait(bar + 1);
    layer<false>(L2, act[1], red, rows, cluster, act[0], nullptr, 0, warp, lane);
    cluster.sync();

    if (L3.count > 0)
        bulk_wait(bar + 2);
    layer<true>(L3, act[0], red, rows, cluster, nullptr, y + (size_t)tok0 * stride_ym, stride_ym, warp, lane);
}
