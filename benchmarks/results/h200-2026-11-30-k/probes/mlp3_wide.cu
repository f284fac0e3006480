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
 *   the widening), its 16 warps splitting the channels in MG groups and K in KP parts (the step is
 *   a chain of short dependent stages: the more warps share one, the sooner it ends). The parts meet
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
 * 1), block 512 threads, tg_mlp3w::SMEM bytes of dynamic shared memory (the builder computes the
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
#define TG_MLP3W_THREADS 512

namespace tg_mlp3w {

constexpr int C = TG_MLP3W_CLUSTER;
constexpr int HW = TG_MLP3W_WIDTH;
constexpr int WARPS = TG_MLP3W_THREADS / 32;
constexpr int TOK = 16;                                        // tokens a cluster
constexpr int SLICE = ((HW + C - 1) / C + 15) / 16 * 16;       // most channels a block owns in a layer
constexpr int MT = SLICE / 16;                                 // m16 tiles of a full slice
constexpr int MG = MT < 4 ? MT : 4;                            // warp groups over the tiles
constexpr int KP = WARPS / MG;                                 // warps of a group, splitting K
constexpr int MTW = (MT + MG - 1) / MG;                        // tiles a warp owns at most
/* Activations, float16, two layouts. The LayerNorm's rows: row-major, ASTR halves a token. A
 * hidden layer's outputs: one block of TOK x BSTR halves per producing block (its channel slice),
 * so that each producer's share is one contiguous copy. Rows are 16 bytes longer than their data
 * (banks). */
constexpr int ASTR = HW + 8;
constexpr int BSTR = SLICE + 8;
constexpr int BLK = TOK * BSTR;                                // halves of a producer's block
constexpr int ROW_BYTES = TOK * ASTR * 2, BLK_BYTES = C * BLK * 2;
constexpr int BUF_BYTES = ROW_BYTES > BLK_BYTES ? ROW_BYTES : BLK_BYTES;
constexpr int W_BYTES = SLICE * HW + 64;                       // + the last row's reads past its end
constexpr int RED_BYTES = KP * TOK * SLICE * 4;
constexpr int PAR_BYTES = 3 * 2 * SLICE * 4;                   // scale and bias slices, three layers
constexpr int LNP_BYTES = TG_MLP3W_LN ? 2 * HW * 4 : 0;       // the LayerNorm's gamma and beta
constexpr int OFF_BUF = 0;                                     // two activation buffers
constexpr int OFF_WA = OFF_BUF + 2 * BUF_BYTES;                // layer 1's weights, then layer 3's
constexpr int OFF_WB = OFF_WA + W_BYTES;                       // layer 2's
constexpr int OFF_RED = OFF_WB + W_BYTES;
constexpr int OFF_PAR = OFF_RED + RED_BYTES;
constexpr int OFF_LNP = OFF_PAR + PAR_BYTES;
constexpr int OFF_BAR = OFF_LNP + LNP_BYTES;                   // mbarriers: 3 weights, 3 activations
constexpr int SMEM = OFF_BAR + 6 * 8;

#ifdef TG_MLP3W_SMEM
static_assert(SMEM == TG_MLP3W_SMEM, "the builder's figure (tickgpu.kernels.quant.mlp3_wide_shared) is this layout's");
#endif
static_assert(HW % 256 == 0, "the LayerNorm reads rows 256 elements at a time");
static_assert(BUF_BYTES % 16 == 0 && W_BYTES % 16 == 0 && RED_BYTES % 16 == 0 && (BLK * 2) % 16 == 0,
              "16-byte aligned regions and copies");

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

/* Arm mbarrier `bar` for `bytes` of transactions (its one arrival). */
__device__ __forceinline__ void expect(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}

/* Bulk copy of `bytes` (a multiple of 16) from global `src` into this block's `dst`, completing on
 * this block's `bar` (armed for them). */
__device__ __forceinline__ void bulk_from_global(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

/* Bulk copy of `bytes` from this block's `src` to the same offset in block `rank` of the cluster,
 * completing on that block's mbarrier at `bar`'s offset. */
__device__ __forceinline__ void bulk_to_peer(const void *src, uint32_t bytes, const uint64_t *bar, int rank)
{
    uint32_t dst, rbar;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(smem_u32(src)), "r"(rank));
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(smem_u32(bar)), "r"(rank));
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "r"(smem_u32(src)), "r"(bytes), "r"(rbar)
                 : "memory");
}

/* Generic-proxy writes to shared memory made visible to the bulk copies that read it. */
__device__ __forceinline__ void fence_to_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void wait(uint64_t *bar)
{
    uint32_t done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(smem_u32(bar))
                     : "memory");
}

/* Four bytes global -> shared without waiting (cp.async; cp.async.wait_all before use). */
__device__ __forceinline__ void load_async(float *dst, const float *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}

struct Layer {
    const int8_t *w;   // this block's slice in shared memory
    int sw, K, N;      // weight row stride (bytes), reduction and output widths
    int n0, count;     // this block's first channel and how many it owns (0 .. SLICE)
    int s;             // the slice width (channels a block owns, all but the last)
    int s_in;          // the input's layout: 0 row-major, else the producing layer's slice width
    const float *scale, *bias;   // the slice's, in shared memory
};

/* The slice of a layer of N channels that block `rank` owns. */
__device__ __forceinline__ void slice_of(Layer &L, int rank)
{
    L.s = ((L.N + C - 1) / C + 15) / 16 * 16;
    L.n0 = rank * L.s;
    L.count = min(max(L.N - L.n0, 0), L.s);
}

/* Blocks of the cluster that own channels of a layer of N (each sends its block). */
__device__ __forceinline__ int producers(int N)
{
    const int s = ((N + C - 1) / C + 15) / 16 * 16;
    return (N + s - 1) / s;
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
        const __half *base = L.s_in ? act + (kb / L.s_in) * BLK + kb % L.s_in : act + kb;
        const int rstride = L.s_in ? BSTR : ASTR;
        uint32_t x[T][8];
#pragma unroll
        for (int tt = 0; tt < T; ++tt) {
            const uint4 *p = reinterpret_cast<const uint4 *>(base + (tt * 8 + g) * rstride);
            const uint4 v0 = p[0], v1 = p[1];
            x[tt][0] = v0.x, x[tt][1] = v0.y, x[tt][2] = v0.z, x[tt][3] = v0.w;
            x[tt][4] = v1.x, x[tt][5] = v1.y, x[tt][6] = v1.z, x[tt][7] = v1.w;
            if (kb + 16 > L.K) {   // the row's tail: columns past K may hold anything
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

/* The layer's outputs from the parts in red, a thread per (token, channel): hidden layers with
 * GELU, rounded to float16, into this block's own block of `next` (then sent to the others); the
 * last layer in float32 to y. */
template <bool LAST>
__device__ __forceinline__ void epilogue(const Layer &L, const float *red, int rows, __half *next, float *y,
                                         int stride_ym, int rank)
{
    for (int idx = threadIdx.x; idx < rows * L.count; idx += WARPS * 32) {
        const int tok = idx / L.count, ch = idx % L.count;
        float acc = red[tok * SLICE + ch];
#pragma unroll
        for (int p = 1; p < KP; ++p)
            acc += red[(p * TOK + tok) * SLICE + ch];
        float o = acc * L.scale[ch];
        o = o + L.bias[ch];
        if (LAST) {
            y[(size_t)tok * stride_ym + L.n0 + ch] = o;
        } else {
            o = 0.5f * o * (1.0f + erff(o * 0.7071067811865476f));
            next[rank * BLK + tok * BSTR + ch] = __float2half_rn(o);
        }
    }
}

/* One layer on this block's slice. Hidden layers end with this block's outputs on their way to
 * every other block (bulk copies completing on their `arrived` barrier). */
template <bool LAST>
__device__ __forceinline__ void layer(const Layer &L, const __half *act, float *red, int rows, __half *next,
                                      const uint64_t *arrived, float *y, int stride_ym, int rank, int warp,
                                      int lane)
{
    if (L.count > 0) {
        if (rows > 8)
            gemm_part<2>(L, act, red, warp, lane);
        else
            gemm_part<1>(L, act, red, warp, lane);
    }
    __syncthreads();
    if (L.count > 0)
        epilogue<LAST>(L, red, rows, next, y, stride_ym, rank);
    if (!LAST) {
        fence_to_async();
        __syncthreads();
        if (threadIdx.x == 0 && L.count > 0)
            for (int q = 0; q < C; ++q)
                if (q != rank)
                    bulk_to_peer(next + rank * BLK, BLK * 2, arrived, q);
    }
}

}  // namespace tg_mlp3w

extern "C" __global__ void __cluster_dims__(TG_MLP3W_CLUSTER, 1, 1) __launch_bounds__(TG_MLP3W_THREADS, 1)
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

    __half *buf[2] = {reinterpret_cast<__half *>(smem + OFF_BUF),
                      reinterpret_cast<__half *>(smem + OFF_BUF + BUF_BYTES)};
    int8_t *wa = reinterpret_cast<int8_t *>(smem + OFF_WA);
    int8_t *wb = reinterpret_cast<int8_t *>(smem + OFF_WB);
    float *red = reinterpret_cast<float *>(smem + OFF_RED);
    float *par = reinterpret_cast<float *>(smem + OFF_PAR);
    float *lnp = reinterpret_cast<float *>(smem + OFF_LNP);
    uint64_t *bar = reinterpret_cast<uint64_t *>(smem + OFF_BAR);   // weights 0-2, activations 3-5

    Layer L1, L2, L3;
    L1.w = wa, L1.sw = stride_w1, L1.K = K0, L1.N = H1, L1.s_in = 0;
    L2.w = wb, L2.sw = stride_w2, L2.K = H1, L2.N = H2;
    L3.w = wa, L3.sw = stride_w3, L3.K = H2, L3.N = N;
    slice_of(L1, rank);
    slice_of(L2, rank);
    slice_of(L3, rank);
    L2.s_in = L1.s, L3.s_in = L2.s;
    L1.scale = par, L1.bias = par + SLICE;
    L2.scale = par + 2 * SLICE, L2.bias = par + 3 * SLICE;
    L3.scale = par + 4 * SLICE, L3.bias = par + 5 * SLICE;

    /* What this block will receive: the LayerNorm's rows of the tokens other blocks normalize
     * (token t is block t % C's), then the other producers' blocks of layers 1 and 2. */
    const int row_bytes = (K0 + 7) / 8 * 16;
    int ln_in = 0;
    for (int t = 0; t < rows; ++t)
        ln_in += t % C != rank;
    const uint32_t in_bytes[3] = {(uint32_t)(ln_in * row_bytes),
                                  (uint32_t)((producers(H1) - (L1.count > 0)) * BLK * 2),
                                  (uint32_t)((producers(H2) - (L2.count > 0)) * BLK * 2)};

    /* Barriers armed and the weights of layers 1 and 2 on their way before anything else. */
    if (threadIdx.x == 0) {
#pragma unroll
        for (int i = 0; i < 6; ++i)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar + i)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        if (L1.count > 0) {
            expect(bar + 0, (uint32_t)(L1.count * stride_w1));
            bulk_from_global(wa, w1 + (size_t)L1.n0 * stride_w1, (uint32_t)(L1.count * stride_w1), bar + 0);
        }
        if (L2.count > 0) {
            expect(bar + 1, (uint32_t)(L2.count * stride_w2));
            bulk_from_global(wb, w2 + (size_t)L2.n0 * stride_w2, (uint32_t)(L2.count * stride_w2), bar + 1);
        }
        for (int i = 0; i < 3; ++i)
            if (in_bytes[i])
                expect(bar + 3 + i, in_bytes[i]);
    }
    /* Scales and biases of this block's slices, in the background. */
    for (int ch = threadIdx.x; ch < SLICE; ch += WARPS * 32) {
        const Layer *Ls[3] = {&L1, &L2, &L3};
        const float *src[3][2] = {{s1, b1}, {s2, b2}, {s3, b3}};
#pragma unroll
        for (int l = 0; l < 3; ++l)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                float *dst = par + (2 * l + j) * SLICE + ch;
                if (ch < Ls[l]->count)
                    load_async(dst, src[l][j] + Ls[l]->n0 + ch);
                else
                    *dst = 0.0f;
            }
    }
#if TG_MLP3W_LN
    for (int k = threadIdx.x; k < K0; k += WARPS * 32) {
        load_async(lnp + k, gamma + k);
        load_async(lnp + HW + k, beta + k);
    }
#endif
    asm volatile("cp.async.commit_group;" ::: "memory");

    /* LayerNorm (or the float16 rounding alone): warp w of block r takes token r + C w. Lane l
     * reads the row's elements 256 i + 32 e + l (the loads issued before the cluster barrier),
     * writes them rounded to this block's row, and the row goes to every other block. */
    __half *act0 = buf[0];
    const int ln_warps = (rows - rank + C - 1) / C;   // warps with a token (rows >= 1, rank < C)
    constexpr int NB = HW / 256;
    float v[NB][8];
    if (warp < ln_warps) {
        const float *row = x + (size_t)(tok0 + rank + C * warp) * stride_xm;
#pragma unroll
        for (int i = 0; i < NB; ++i)
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int k = 256 * i + 32 * e + lane;
                v[i][e] = k < K0 ? row[k] : 0.0f;
            }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    cluster.sync();   // every block runs, its barriers are armed: copies to it may start; scales in
    if (warp < ln_warps) {
        const int lt = rank + C * warp;
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
            for (int e = 0; e < 8; ++e) {
                const int k = 256 * i + 32 * e + lane;
                if (k < K0)
                    v[i][e] = v[i][e] * rstd * lnp[k] + lnp[HW + k];
            }
#endif
        __half *own = act0 + lt * ASTR;
#pragma unroll
        for (int i = 0; i < NB; ++i)
#pragma unroll
            for (int e = 0; e < 8; ++e)
                if (256 * i + 32 * e + lane < (K0 + 7) / 8 * 8)
                    own[256 * i + 32 * e + lane] = __float2half_rn(v[i][e]);
        fence_to_async();
        __syncwarp();
        if (lane == 0)
            for (int q = 0; q < C; ++q)
                if (q != rank)
                    bulk_to_peer(own, (uint32_t)row_bytes, bar + 3, q);
    }
    if (in_bytes[0])
        wait(bar + 3);
    __syncthreads();   // this block's own rows
    /* Layer 2's blocks overwrite buf[0], the source of this block's rows on their way to the
     * others. Each block that produces layer 1 outputs has them all before it sends its own, so
     * waiting for those covers it; where some blocks produce none, a cluster barrier does. */
    if (producers(H1) < C)
        cluster.sync();

    if (L1.count > 0)
        wait(bar + 0);
    layer<false>(L1, act0, red, rows, buf[1], bar + 4, nullptr, 0, rank, warp, lane);
    if (threadIdx.x == 0 && L3.count > 0) {
        /* Every warp is past layer 1's weights (the barrier in `layer`): layer 3's may replace them. */
        fence_to_async();
        expect(bar + 2, (uint32_t)(L3.count * stride_w3));
        bulk_from_global(wa, w3 + (size_t)L3.n0 * stride_w3, (uint32_t)(L3.count * stride_w3), bar + 2);
    }
    /* Layer 2 reads buf[1] (layer 1's blocks); its own blocks go to buf[0], which every block is
     * done reading: a block sends them only after it has all of buf[1], which each block sent
     * after its layer 1 read buf[0]. */
    if (in_bytes[1])
        wait(bar + 4);
    if (L2.count > 0)
        wait(bar + 1);
    layer<false>(L2, buf[1], red, rows, buf[0], bar + 5, nullptr, 0, rank, warp, lane);

    if (in_bytes[2])
        wait(bar + 5);
    /* This block has everything it will receive; the others' copies from it complete once they
     * have theirs: none may leave before all have arrived here. */
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    if (L3.count > 0)
        wait(bar + 2);
    layer<true>(L3, buf[0], red, rows, nullptr, nullptr, y + (size_t)tok0 * stride_ym, stride_ym, rank, warp,
                lane);
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
