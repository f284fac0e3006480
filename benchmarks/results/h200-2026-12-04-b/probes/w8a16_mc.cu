/*
 * w8a16_mc.cu -- the small-batch W8A16 GEMM of w8a16.cu with its activations shared by a cluster
 * (sm_90a): C = epilogue(A @ (B * scale)^T) for M <= 16, the same contract and arguments.
 *
 * Why. At M = 16, N = K = 4096 every block of w8a16.cu reads all of A (16 x 4096 float16, 128 KB)
 * from L2 next to its own weights: 256 blocks of 16 channels move 32 MB of activations for 16 MB of
 * weights, and the L2's bandwidth, not the weights, sets the time. Here the blocks of a cluster
 * (TG_W8A16_CL of them, each its own 16 * NT output channels) load A once between them: each
 * issues bulk copies (cp.async.bulk ... multicast::cluster) of its share of A's rows, and every
 * copy lands in the shared memory of every block of the cluster. A stays resident for the whole
 * K loop (16 rows of K + 8 float16, the 16-byte pad keeping the rows' MMA reads off each other's
 * banks), so the activations cost L2 reads of 128 KB a cluster instead of a block.
 *
 * The K loop is as in w8a16.cu (the weights go from global memory straight into MMA fragments,
 * widened in place; the warps split K in 64-wide chunks; partial sums meet in warp order), but a
 * chunk's activations come from shared memory, after its stage's mbarrier has seen all its bytes.
 * A is copied in TG_W8A16_STAGES stages along K, so the first chunks start while the rest arrive.
 *
 * Requirements, on top of w8a16.cu's: M <= 16; K a multiple of 8; A 16-byte aligned with a row
 * stride a multiple of 8 elements (the bulk copies' 16-byte rule); dynamic shared memory of
 * tg_w8a16_mc_shared(K) bytes (16 * (2 * round_up(K, 64) + 16)), which caps K (mc_max_k in
 * tickgpu.kernels.quant); a grid of ceil(N / (16 * NT)) blocks rounded up to a multiple of the
 * cluster (blocks past N load their share of A and write nothing).
 *
 * Built ahead of time (nvcc -cubin -arch=sm_90a -fmad=false): -DTG_MC_MT, -DTG_MC_OUT,
 * -DTG_MC_GELU, -DTG_W8A16_NT, -DTG_W8A16_WARPS, -DTG_W8A16_GROUP, -DTG_W8A16_CL and
 * -DTG_W8A16_STAGES select the one extern "C" kernel, tg_w8a16_mc_kernel.
 */
#include "../../../../csrc/cuda/w8a16.cu"

#ifndef TG_W8A16_CL
#define TG_W8A16_CL 4
#endif
#ifndef TG_W8A16_STAGES
#define TG_W8A16_STAGES 4
#endif

namespace tg_w8a16_mc {

using namespace tg_w8a16;

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cluster_sync_all()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ uint32_t cluster_rank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void wait_stage(uint32_t bar)
{
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(bar)
                     : "memory");
}

template <int MT, int NT, int WARPS, int GROUP, int CL, int STAGES, typename OutT, bool GELU>
__device__ __forceinline__ void gemm(const __half *__restrict__ a, const int8_t *__restrict__ b,
                                     const float *__restrict__ scale, const float *__restrict__ bias,
                                     OutT *__restrict__ c, int M, int N, int K, int stride_am, int stride_bn,
                                     int stride_cm)
{
    constexpr int BM = 8 * MT, BN = 16 * NT;
    static_assert(BM <= 16 && CL >= 1 && CL <= 8 && STAGES >= 1, "M <= 16, clusters of 1-8");
    __shared__ float part[WARPS][BM * BN];
    __shared__ __align__(8) uint64_t bar[STAGES];
    extern __shared__ __align__(16) unsigned char xs_raw[];
    __half *xs = reinterpret_cast<__half *>(xs_raw);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = (int)blockIdx.x * BN;
    const int chunks = (K + 63) / 64;
    const int kp = chunks * 64 + 8;                  /* a row of xs, in elements */
    const int per_stage = (chunks + STAGES - 1) / STAGES;   /* chunks */
    const int rows = M < BM ? M : BM;

    /* Zeros where the copies do not write: each copied row's tail past K, and the rows past M. */
    const int tail = (kp - K) / 8;   /* 16-byte groups a row */
    for (int i = threadIdx.x; i < rows * tail; i += WARPS * 32)
        *reinterpret_cast<uint4 *>(xs + (size_t)(i / tail) * kp + K + (i % tail) * 8) = make_uint4(0, 0, 0, 0);
    for (int i = threadIdx.x; i < (BM - rows) * (kp / 8); i += WARPS * 32)
        *reinterpret_cast<uint4 *>(xs + (size_t)rows * kp + (size_t)i * 8) = make_uint4(0, 0, 0, 0);
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    /* Every block's barriers exist before any block's copies can complete on them. */
    cluster_sync_all();
    dependent_launch();   /* A may be the previous kernel's output */

    if (threadIdx.x == 0) {
        const uint32_t rank = cluster_rank();
        const uint16_t mask = (uint16_t)((1u << CL) - 1u);
        for (int s = 0; s < STAGES; ++s) {
            const int e0 = s * per_stage * 64;
            const int e1 = min(K, (s + 1) * per_stage * 64);
            const uint32_t bytes = e1 > e0 ? (uint32_t)(e1 - e0) * 2u : 0u;
            const uint32_t b = smem_addr(&bar[s]);
            asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                         ::"r"(b), "r"(bytes * (uint32_t)rows) : "memory");
            if (!bytes)
                continue;
            for (int r = (int)rank; r < rows; r += CL) {
                const __half *src = a + (size_t)r * stride_am + e0;
                const uint32_t dst = smem_addr(xs + (size_t)r * kp + e0);
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                             " [%0], [%1], %2, [%3], %4;"
                             ::"r"(dst), "l"(src), "r"(bytes), "r"(b), "h"(mask) : "memory");
            }
        }
    }

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

    float acc[NT][MT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                acc[nt][mt][r] = 0.0f;

    int ready = -1;   /* stages this thread has seen complete */
    for (int q = warp * GROUP; q < chunks; q += WARPS * GROUP) {
        uint4 wv[GROUP][NT][2];
#pragma unroll
        for (int i = 0; i < GROUP; ++i) {
            const int k = (q + i) * 64 + 16 * t;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    wv[i][nt][h] = (wok[nt][h] && k < K)
                                       ? __ldg(reinterpret_cast<const uint4 *>(wrow[nt][h] + k))
                                       : make_uint4(0, 0, 0, 0);
        }
        const int need = min(q + GROUP - 1, chunks - 1) / per_stage;
        while (ready < need)
            wait_stage(smem_addr(&bar[++ready]));
#pragma unroll
        for (int i = 0; i < GROUP; ++i) {
            if (q + i >= chunks)
                break;
            const int k = (q + i) * 64 + 16 * t;
            uint4 xv[MT][2];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const uint4 *p = reinterpret_cast<const uint4 *>(xs + (size_t)(mt * 8 + g) * kp + k);
                xv[mt][0] = p[0];
                xv[mt][1] = p[1];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                uint32_t bx[MT][2];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const uint32_t *xw = reinterpret_cast<const uint32_t *>(xv[mt]);
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
    /* A warp with no chunk of some stage never waited on it: every copy into this block is done
     * before it may exit (and so before its shared memory goes), and the cluster's copies issued
     * here are done before the barrier below lets any block of it go. */
    while (ready < STAGES - 1)
        wait_stage(smem_addr(&bar[++ready]));
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");

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
        const int m = ml, n = n0 + nl;
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
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

}  // namespace tg_w8a16_mc

#if defined(TG_MC_MT) && defined(TG_MC_OUT) && defined(TG_MC_GELU)
#if TG_MC_OUT == 0
typedef float tg_w8a16_mc_out_t;
#elif TG_MC_OUT == 1
typedef __half tg_w8a16_mc_out_t;
#else
typedef __nv_bfloat16 tg_w8a16_mc_out_t;
#endif
extern "C" __global__ void __cluster_dims__(TG_W8A16_CL, 1, 1) __launch_bounds__(TG_W8A16_WARPS * 32)
    tg_w8a16_mc_kernel(TG_W8A16_PARAMS(tg_w8a16_mc_out_t))
{
    tg_w8a16_mc::gemm<TG_MC_MT, TG_W8A16_NT, TG_W8A16_WARPS, TG_W8A16_GROUP, TG_W8A16_CL, TG_W8A16_STAGES,
                      tg_w8a16_mc_out_t, (TG_MC_GELU != 0)>(TG_W8A16_ARGS);
}
#endif
