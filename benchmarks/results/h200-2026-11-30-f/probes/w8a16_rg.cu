#include "/work/main/csrc/cuda/w8a16.cu"
namespace tg_w8a16 {
template <int MT, int NT, int WARPS, int GROUP, typename OutT, bool GELU, int RG>
__device__ __forceinline__ void gemm_rg(const __half *__restrict__ a, const int8_t *__restrict__ b,
                                     const float *__restrict__ scale, const float *__restrict__ bias,
                                     OutT *__restrict__ c, int M, int N, int K, int stride_am, int stride_bn,
                                     int stride_cm)
{
    constexpr int BM = 8 * MT, BN = 16 * NT, KW = WARPS / RG;
    __shared__ float part[WARPS][BM * BN];

    const int lane = threadIdx.x & 31, warp_id = threadIdx.x >> 5;
    const int rg = warp_id / KW, warp = warp_id % KW;
    const int g = lane >> 2, t = lane & 3;
    const int n_tiles = (N + BN * RG - 1) / (BN * RG);
    const int m0 = (int)(blockIdx.x / n_tiles) * BM, n0 = (int)(blockIdx.x % n_tiles) * BN * RG + rg * BN;

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
    for (int q = warp * GROUP; q < chunks; q += KW * GROUP) {
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
                part[warp_id][ml * BN + nl] = acc[nt][mt][r];
            }
    __syncthreads();
    for (int j = threadIdx.x; j < RG * BM * BN; j += WARPS * 32) {
        const int r = j / (BM * BN), idx = j % (BM * BN);
        const int ml = idx / BN, nl = idx % BN;
        const int m = m0 + ml, n = n0 - rg * BN + r * BN + nl;
        if (m >= M || n >= N)
            continue;
        float s = part[r * KW][idx];
#pragma unroll
        for (int w = 1; w < KW; ++w)
            s += part[r * KW + w][idx];
        float y = s * scale[n];
        y = y + bias[n];
        if (GELU)
            y = 0.5f * y * (1.0f + erff(y * 0.7071067811865476f));
        store(c + (size_t)m * stride_cm + n, y);
    }
}

}
