// Probe: split-K over a 2-CTA cluster (sm_90), partial sums met through distributed shared memory.
#include <cooperative_groups.h>
#include "/work/main/csrc/cuda/w8a16.cu"
namespace cg = cooperative_groups;

template <int MT, int NT, int WARPS, int GROUP, int CL>
__device__ __forceinline__ void gemm_cl(const __half *__restrict__ a, const int8_t *__restrict__ b,
                                     const float *__restrict__ scale, const float *__restrict__ bias,
                                     __half *__restrict__ c, int M, int N, int K, int stride_am, int stride_bn,
                                     int stride_cm)
{
    using namespace tg_w8a16;
    constexpr int BM = 8 * MT, BN = 16 * NT;
    __shared__ float part[WARPS][BM * BN];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n_tiles = (N + BN - 1) / BN;
    const int pair = blockIdx.x / CL;
    const int m0 = (pair / n_tiles) * BM, n0 = (pair % n_tiles) * BN;

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
    for (int q = (rank * WARPS + warp) * GROUP; q < chunks; q += WARPS * CL * GROUP) {
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
                                       ? __ldg(reinterpret_cast<const uint4 *>(wrow[nt][h] + k))
                                       : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                load_x(xv[i][mt], xrow[mt], xok[mt], k, K, xvec);
        }
#pragma unroll
        for (int i = 0; i < GROUP; ++i)
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
        float s = part[0][idx];
#pragma unroll
        for (int w = 1; w < WARPS; ++w)
            s += part[w][idx];
        part[0][idx] = s;
    }
    cluster.sync();
    if (rank == 0) {
        for (int idx = threadIdx.x; idx < BM * BN; idx += WARPS * 32) {
            const int ml = idx / BN, nl = idx % BN;
            const int m = m0 + ml, n = n0 + nl;
            if (m >= M || n >= N)
                continue;
            float s = part[0][idx];
#pragma unroll
            for (int r = 1; r < CL; ++r)
                s += cluster.map_shared_rank(&part[0][0], r)[idx];
            float y = s * scale[n];
            y = y + bias[n];
            store(c + (size_t)m * stride_cm + n, y);
        }
    }
    cluster.sync();
}
