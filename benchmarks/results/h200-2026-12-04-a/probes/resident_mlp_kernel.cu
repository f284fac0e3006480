/*
 * resident_mlp.cu -- a resident (persistent) W8A16 model step: [LayerNorm ->] Linear -> GELU ->
 * ... -> Linear on up to 64 rows, answered through a mailbox of rows in mapped pinned host memory
 * (csrc/hot/mailbox_protocol.h, tg_mb_rows_*), so that a step costs no launch at all. The plan
 * (tg_rm_plan, csrc/tickgpu.h) is written once by tickgpu.quant.resident.
 *
 * Why. A model step of a few microseconds of GPU work behind a graph launch pays the launch
 * (~6 us of the floor's 11 us graph round trip, DESIGN.md) plus one kernel boundary per layer
 * (~1-2 us each). Here the kernel is already running; the layers are separated by a barrier of
 * the blocks that share a token group (~1 us), and the weights never move: each block holds its
 * slice of every layer in shared memory for the kernel's life.
 *
 * Work split. The grid is token_groups x channel_blocks blocks of TG_RM_THREADS threads, all
 * resident at once (a cooperative launch). Block (t, c) computes rows [16 t, 16 t + 16) of
 * every layer's output channels [c * channels, (c + 1) * channels), reading the whole input row
 * of its token group; the groups never wait for each other. A layer's math is csrc/cuda/w8a16.cu's:
 * mma.sync m16n8k16 with the weights as the A operand (16 channels a tile, int8 widened to float16
 * in registers, exactly) and the tokens as B (8 a tile), the eight warps splitting K in 64-wide
 * chunks, their partial sums added in warp order (deterministic), then the float32 epilogue
 * (* scale, + bias, GELU) one operation at a time (built with -fmad=false). Hidden activations
 * travel as float16 through device memory (each layer's input rows, read through L2 with ld.cg:
 * other SMs wrote them); the last layer's float32 rows go straight to the mailbox.
 *
 * A request, block 0 leading:
 *  1. block 0's thread 0 polls the mailbox (tg_mb_wait_request) and publishes the request in
 *     device memory (rows, then `go` = seq with release ordering); the others spin on `go`, never
 *     on the link;
 *  2. each block reads its share of its token group's input rows across PCIe (rows c, c + G, ...:
 *     the reads of a request are spread over the SMs, one link round trip), applies the LayerNorm
 *     in float32 (two passes: mean, then the centred variance) and writes float16 rows into layer
 *     0's input;
 *  3. a barrier of the token group's blocks, then each layer, then a barrier (an arrival count in
 *     device memory: every block arrives at every barrier and waits at all but the last, where
 *     only the blocks of the last layer wait -- a block that skipped a wait could arrive at the
 *     next barrier early and be counted in place of a block still computing);
 *  4. the last layer's blocks write their rows and `status`, `served` (every one the same values),
 *     fence system-wide and take a ticket; the last one writes `done` with release ordering.
 * A narrow last layer (out_features <= TG_RM_FUSED_OUT, plan.fuse_last) takes no layer of its
 * own: in the epilogue of the layer before it, each block multiplies its channels' float16
 * activations by its slice of the last layer's K (exact products, float32 sums in channel order)
 * and stores the partial rows; the token group's last block to take a ticket adds the partials in
 * block order, applies the scale and bias and writes the rows (then step 4 as above, a ticket
 * a group). One barrier and one pass over the hidden rows fewer.
 * Token groups beyond the request's rows take no part. The idle timeout, the quit bit and the
 * exit state are the mailbox's (block 0 times out and tells the others through `stop`).
 *
 * Built with -DTG_RM_TRACE, thread 0 of each of the first 64 blocks stamps the globaltimer at each
 * stage of the last 64 requests into tg_rm_trace (benchmarks/floor/resident_mlp.cu reads them).
 *
 * Launch: cooperative, grid (token_groups * channel_blocks, 1, 1), block (TG_RM_THREADS, 1, 1),
 * dynamic shared memory plan.smem_bytes; arguments: the mailbox's device address and the plan's.
 * A plan or mailbox that is not this kernel's (magic, version, grid, shared memory, capacity)
 * makes every block return at once, block 0 writing status TG_MB_STATUS_BAD_CONFIG and exited
 * TG_MB_EXIT_CONFIG.
 */
#include <cuda_fp16.h>
#include <stdint.h>

#include "../tickgpu.h"
#include "resident.cuh"

#define RM_WARPS (TG_RM_THREADS / 32)
#define RM_TILES (TG_RM_MAX_CHANNELS / 16)
#define RM_MAX_GROUPS (TG_RM_MAX_ROWS / TG_RM_TOKENS)

#ifdef TG_RM_TRACE
#define RM_TRACE_BLOCKS 64
#define RM_TRACE_REQUESTS 64
#define RM_TRACE_STAGES 12
__device__ uint64_t tg_rm_trace[RM_TRACE_BLOCKS][RM_TRACE_REQUESTS][RM_TRACE_STAGES];
__device__ uint64_t tg_rm_clock[RM_TRACE_BLOCKS][RM_TRACE_REQUESTS][RM_TRACE_STAGES];
#define RM_STAMP(served, stage)                                                                   \
    do {                                                                                          \
        if (threadIdx.x == 0 && blockIdx.x < RM_TRACE_BLOCKS) {                                    \
            tg_rm_trace[blockIdx.x][(served) % RM_TRACE_REQUESTS][stage] = tg_globaltimer_ns();     \
            tg_rm_clock[blockIdx.x][(served) % RM_TRACE_REQUESTS][stage] = clock64();              \
        }                                                                                         \
    } while (0)
__device__ uint32_t tg_rm_request[RM_TRACE_BLOCKS];   /* the request a block is on, for the stamps below */
#define RM_STAMP_IN(stage)                                                                        \
    do {                                                                                          \
        if (threadIdx.x == 0 && blockIdx.x < RM_TRACE_BLOCKS)                                      \
            RM_STAMP(tg_rm_request[blockIdx.x], stage);                                            \
    } while (0)
#else
#define RM_STAMP(served, stage) ((void)0)
#define RM_STAMP_IN(stage) ((void)0)
#endif

namespace tg_rm {

/* The blocks' hand-over words (TG_RM_SYNC_BYTES of device memory, zeroed before every launch);
   each that one side writes and others poll sits on a 128-byte line of its own. */
struct Line {
    uint32_t count;
    uint8_t pad[124];
};
struct Sync {
    uint64_t go;            /* seq of the request in flight, published by block 0 (release) */
    uint32_t rows;          /* its rows, written before go */
    uint32_t stop;          /* block 0 returned (quit, idle, stall): every block returns */
    uint8_t pad0[112];
    Line finish;            /* tickets of the blocks (or groups) that end a request */
    Line arrive[RM_MAX_GROUPS];   /* arrivals at a token group's barriers since the launch */
    Line partials[RM_MAX_GROUPS]; /* a token group's blocks done with their partial rows (fuse_last) */
};
static_assert(sizeof(Sync) <= TG_RM_SYNC_BYTES, "the hand-over words fit their allocation");

__device__ __forceinline__ uint64_t ld_acquire(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release(uint64_t *p, uint64_t v)
{
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Four int8 (one 32-bit word) -> four float16, exactly (csrc/cuda/w8a16.cu says how). */
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

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ uint32_t dynamic_smem_bytes(void)
{
    uint32_t v;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
    return v;
}

__device__ __forceinline__ float gelu(float v)
{
    return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
}

/* Output channels of layer l that block c owns (0 where it owns none). */
__device__ __forceinline__ int owned(const tg_rm_plan &P, int l, int c)
{
    const int n = (int)P.layer[l].n - c * (int)P.channels;
    return n <= 0 ? 0 : (n < (int)P.channels ? n : (int)P.channels);
}

/* The layer whose epilogue ends a request: the last, or the one before it where that is fused. */
__device__ __forceinline__ int final_layer(const tg_rm_plan &P)
{
    return (int)P.n_layers - 1 - (P.fuse_last ? 1 : 0);
}

/* Every block, once a launch: its slices of every layer into shared memory -- weights (rows past
   the layer's n and bytes past k_pad zero, up to the slice's stride), scales and biases; for a
   fused last layer its K slice (out_features x channels) and the whole scale and bias vectors --
   and the staged rows zeroed. */
__device__ void load_slices(const tg_rm_plan &P, int c, unsigned char *smem)
{
    const uint32_t n0 = (uint32_t)c * P.channels;
    for (uint32_t l = 0; l < P.n_layers; ++l) {
        const tg_rm_layer &L = P.layer[l];
        const int8_t *w = reinterpret_cast<const int8_t *>(L.weight);
        const bool fused = P.fuse_last && l + 1 == P.n_layers;
        const uint32_t first = fused ? 0 : n0;
        float *sb = reinterpret_cast<float *>(smem + L.smem_sb);
        for (uint32_t r = threadIdx.x; r < L.rows_w; r += TG_RM_THREADS) {
            const bool in = first + r < L.n;
            sb[r] = in ? __ldg(reinterpret_cast<const float *>(L.scale) + first + r) : 0.0f;
            sb[L.rows_w + r] = in ? __ldg(reinterpret_cast<const float *>(L.bias) + first + r) : 0.0f;
        }
        if (fused) {
            int8_t *dst = reinterpret_cast<int8_t *>(smem + P.smem_last);
            for (uint32_t i = threadIdx.x; i < L.n * P.channels; i += TG_RM_THREADS) {
                const uint32_t o = i / P.channels, k = n0 + i % P.channels;
                dst[i] = k < L.k ? w[(size_t)o * L.k_pad + k] : (int8_t)0;
            }
            continue;
        }
        const uint32_t vecs = L.stride_w / 16;
        uint4 *dst = reinterpret_cast<uint4 *>(smem + L.smem_w);
        for (uint32_t i = threadIdx.x; i < L.rows_w * vecs; i += TG_RM_THREADS) {
            const uint32_t r = i / vecs, col = (i % vecs) * 16;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (n0 + r < L.n && col < L.k_pad)
                v = __ldg(reinterpret_cast<const uint4 *>(w + (size_t)(n0 + r) * L.k_pad + col));
            dst[i] = v;
        }
    }
    uint4 *a = reinterpret_cast<uint4 *>(smem + P.smem_a);
    for (uint32_t i = threadIdx.x; i < TG_RM_TOKENS * P.stride_a / 8; i += TG_RM_THREADS)
        a[i] = make_uint4(0, 0, 0, 0);
}

/* Block c's share of its token group's input rows: rows row0 + c, row0 + c + G, ... below
   row0 + nr, from the mailbox (float32, across PCIe) through the LayerNorm into layer 0's float16
   input rows. A warp a row. */
__device__ void stage_rows(const tg_rm_plan &P, const float *x, int row0, int nr, int c, unsigned char *smem)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, G = (int)P.channel_blocks;
    const int K = (int)P.in_features, k64 = (int)P.layer[0].k64;
    const int mine = c < nr ? (nr - c + G - 1) / G : 0;   /* rows of this block */
    if (mine == 0)
        return;
    float *sx = reinterpret_cast<float *>(smem + P.smem_x);
    /* __ldcv: fetched again on every request, never from a line an earlier one left in L1. All of
       the block's loads are issued before any is used: one round trip across the link. */
    for (int i = threadIdx.x; i < mine * K; i += TG_RM_THREADS) {
        const int j = i / K, col = i % K;
        sx[i] = __ldcv(x + (size_t)(row0 + c + j * G) * K + col);
    }
    __syncthreads();
    RM_STAMP_IN(1);
    __half *dst = reinterpret_cast<__half *>(P.layer[0].input);
    const float *gamma = reinterpret_cast<const float *>(P.gamma);
    const float *beta = reinterpret_cast<const float *>(P.beta);
    for (int j = warp; j < mine; j += RM_WARPS) {
        const float *row = sx + (size_t)j * K;
        __half *out = dst + (size_t)(row0 + c + j * G) * k64;
        if (P.has_ln) {
            float s = 0.0f;
            for (int i = lane; i < K; i += 32)
                s += row[i];
            const float mean = __fdiv_rn(warp_sum(s), (float)K);
            float v = 0.0f;
            for (int i = lane; i < K; i += 32) {
                const float d = row[i] - mean;
                v += d * d;
            }
            const float var = __fdiv_rn(warp_sum(v), (float)K);
            const float rstd = __fdiv_rn(1.0f, __fsqrt_rn(var + P.ln_eps));
            for (int i = lane; i < K; i += 32)
                out[i] = __float2half_rn((row[i] - mean) * rstd * __ldg(gamma + i) + __ldg(beta + i));
        } else {
            for (int i = lane; i < K; i += 32)
                out[i] = __float2half_rn(row[i]);
        }
    }
}

/* Layer l for block c's channels and the token group's rows [row0, row0 + rows): staged input,
   MMA over K, partial sums, epilogue into the next layer's input (float16), the mailbox's output
   rows (float32, the last layer), or, where the next layer is fused, this block's partial rows of
   it. Returns with the block's shared memory free again. */
__device__ void run_layer(const tg_rm_plan &P, int l, int c, int t, int row0, int rows, unsigned char *smem,
                          float *y)
{
    const tg_rm_layer &L = P.layer[l];
    const int cnt = owned(P, l, c);
    if (cnt == 0)
        return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const int k64 = (int)L.k64, sa = (int)P.stride_a, ch = (int)P.channels;
    __half *sA = reinterpret_cast<__half *>(smem + P.smem_a);

    /* The group's input rows (other blocks wrote them: through L2). Rows past `rows` keep what
       they held: they feed only token columns that are never stored. */
    const int vpr = k64 / 8;
    const uint4 *src = reinterpret_cast<const uint4 *>(L.input) + (size_t)row0 * vpr;
    for (int i = threadIdx.x; i < rows * vpr; i += TG_RM_THREADS) {
        const int r = i / vpr, q = i % vpr;
        *reinterpret_cast<uint4 *>(sA + r * sa + q * 8) = __ldcg(src + i);
    }
    __syncthreads();
    RM_STAMP_IN(4 + 3 * l);

    const int tiles = (cnt + 15) / 16, mts = rows > 8 ? 2 : 1, chunks = k64 / 64;
    const unsigned char *sW = smem + L.smem_w;
    const int sw = (int)L.stride_w;
    float acc[RM_TILES][2][4];
#pragma unroll
    for (int nt = 0; nt < RM_TILES; ++nt)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                acc[nt][mt][r] = 0.0f;
    for (int q = warp; q < chunks; q += RM_WARPS) {
        /* Lane (g, tq) holds k = 64 q + 16 tq + 4 j + 0..3 in MMA step j, for A and B alike. */
        const int kb = q * 64 + 16 * tq;
        uint4 wv[RM_TILES][2], xv[2][2];
#pragma unroll
        for (int nt = 0; nt < RM_TILES; ++nt)
            if (nt < tiles)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    wv[nt][h] = *reinterpret_cast<const uint4 *>(sW + (nt * 16 + g + 8 * h) * sw + kb);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
            if (mt < mts) {
                const __half *row = sA + (mt * 8 + g) * sa + kb;
                xv[mt][0] = *reinterpret_cast<const uint4 *>(row);
                xv[mt][1] = *reinterpret_cast<const uint4 *>(row + 8);
            }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            uint32_t bx[2][2];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                const uint32_t *xw = reinterpret_cast<const uint32_t *>(xv[mt]);
                bx[mt][0] = xw[2 * j];
                bx[mt][1] = xw[2 * j + 1];
            }
#pragma unroll
            for (int nt = 0; nt < RM_TILES; ++nt)
                if (nt < tiles) {
                    uint32_t frag[4];
                    widen(reinterpret_cast<const uint32_t *>(&wv[nt][0])[j], frag[0], frag[2]);
                    widen(reinterpret_cast<const uint32_t *>(&wv[nt][1])[j], frag[1], frag[3]);
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt)
                        if (mt < mts)
                            mma(acc[nt][mt], frag, bx[mt][0], bx[mt][1]);
                }
        }
    }

    /* D fragment: d0, d1 = (channel g, tokens 2 tq, 2 tq + 1); d2, d3 = (channel g + 8, same). */
    float *part = reinterpret_cast<float *>(smem + P.smem_part);   /* [warp][token][channel] */
    const int active = chunks < RM_WARPS ? chunks : RM_WARPS;
    if (warp < active) {
#pragma unroll
        for (int nt = 0; nt < RM_TILES; ++nt)
            if (nt < tiles)
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
                    if (mt < mts)
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            const int nl = nt * 16 + g + (r >= 2 ? 8 : 0);
                            const int ml = mt * 8 + 2 * tq + (r & 1);
                            part[(warp * TG_RM_TOKENS + ml) * ch + nl] = acc[nt][mt][r];
                        }
    }
    __syncthreads();
    RM_STAMP_IN(5 + 3 * l);
    const float *sb = reinterpret_cast<const float *>(smem + L.smem_sb);
    const bool last = l + 1 == (int)P.n_layers;
    const bool fused_next = !last && P.fuse_last && l + 2 == (int)P.n_layers;
    const int n0 = c * ch;
    __half *next = last ? nullptr : reinterpret_cast<__half *>(P.layer[l + 1].input);
    const int next_k64 = last ? 0 : (int)P.layer[l + 1].k64;
    float *hid = reinterpret_cast<float *>(smem + P.smem_last + TG_RM_FUSED_OUT * ch);   /* fused_next */
    for (int i = threadIdx.x; i < rows * cnt; i += TG_RM_THREADS) {
        const int ml = i / cnt, nl = i % cnt;
        float s = part[ml * ch + nl];
        for (int w = 1; w < active; ++w)
            s += part[(w * TG_RM_TOKENS + ml) * ch + nl];
        float v = s * sb[nl];
        v = v + sb[L.rows_w + nl];
        if (L.gelu)
            v = gelu(v);
        if (last)
            y[(size_t)(row0 + ml) * L.n + n0 + nl] = v;
        else if (fused_next)
            hid[ml * ch + nl] = __half2float(__float2half_rn(v));
        else
            next[(size_t)(row0 + ml) * next_k64 + n0 + nl] = __float2half_rn(v);
    }
    if (fused_next) {
        /* This block's share of the last layer: its channels are a slice of that layer's K. */
        __syncthreads();
        const tg_rm_layer &F = P.layer[l + 1];
        const int8_t *wl = reinterpret_cast<const int8_t *>(smem + P.smem_last);
        float *out = reinterpret_cast<float *>(P.partial)
                     + ((size_t)(t * (int)P.channel_blocks + c) * TG_RM_TOKENS) * F.n;
        for (int i = threadIdx.x; i < rows * (int)F.n; i += TG_RM_THREADS) {
            const int ml = i / (int)F.n, o = i % (int)F.n;
            float s = 0.0f;
            for (int j = 0; j < cnt; ++j)
                s += hid[ml * ch + j] * (float)wl[o * ch + j];
            out[ml * F.n + o] = s;
        }
    }
    __syncthreads();
}

/* A barrier wait that outlasts this is a fault (a healthy one takes microseconds): the kernel
   returns rather than hold its SMs for ever, and says so (TG_MB_EXIT_STALLED). */
#define RM_STALL_NS 1000000000ull

/* Thread 0: wait until *count reaches target. False when the kernel must return instead (stop
   set, or the wait stalled: then this sets stop and the mailbox's exit state). */
__device__ bool wait_count(uint32_t *count, uint32_t target, volatile unsigned int *stop,
                           volatile tg_mb_response *resp)
{
    const uint64_t t0 = tg_globaltimer_ns();
    while ((int32_t)(ld_acquire(count) - target) < 0) {
        if (*stop)
            return false;
        if (tg_globaltimer_ns() - t0 > RM_STALL_NS) {
            *stop = 1u;
            __threadfence();
            resp->exited = TG_MB_EXIT_STALLED;
            __threadfence_system();
            return false;
        }
    }
    return true;
}

/* The token group's barrier: every block arrives; `wait` ones wait for all. False when the kernel
   must return instead (see wait_count). */
__device__ bool group_barrier(uint32_t *count, uint32_t target, bool wait, volatile unsigned int *stop,
                              volatile tg_mb_response *resp)
{
    __shared__ int s_ok;
    __syncthreads();
    if (threadIdx.x == 0) {
        /* NOTE: release the block's writes (ordered before thread 0 by the barrier above) before
           the arrival; the waiters acquire them with the count. */
        __threadfence();
        atomicAdd(count, 1u);
        s_ok = wait ? wait_count(count, target, stop, resp) : 1;
    }
    __syncthreads();
    return s_ok != 0;
}

/* fuse_last: the token group's last block to finish its partial rows adds them (block order),
   applies the last layer's scale and bias and writes the group's output rows. True for that
   block (which then ends the request for its group), false for the others. */
__device__ bool sum_partials(const tg_rm_plan &P, Sync *sync, int t, int row0, int rows, unsigned char *smem,
                             float *y)
{
    __shared__ int s_last;
    const int G = (int)P.channel_blocks;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();   /* NOTE: release this block's partial rows before its ticket */
        const unsigned int ticket = atomicAdd(&sync->partials[t].count, 1u);
        s_last = ticket == (unsigned int)G - 1;
        if (s_last) {
            atomicExch(&sync->partials[t].count, 0u);
            __threadfence();   /* NOTE: acquire the other blocks' partial rows */
        }
    }
    __syncthreads();
    if (!s_last)
        return false;
    const int L = (int)P.n_layers;
    const tg_rm_layer &F = P.layer[L - 1];
    const int nb = ((int)P.layer[L - 2].n + (int)P.channels - 1) / (int)P.channels;   /* blocks with partials */
    const int n = (int)F.n;
    const float *part = reinterpret_cast<const float *>(P.partial) + (size_t)t * G * TG_RM_TOKENS * n;
    const float *sb = reinterpret_cast<const float *>(smem + F.smem_sb);
    for (int i = threadIdx.x; i < rows * n; i += TG_RM_THREADS) {
        const int ml = i / n, o = i % n;
        float s = __ldcg(part + ml * n + o);
        for (int b = 1; b < nb; ++b)
            s += __ldcg(part + ((size_t)b * TG_RM_TOKENS + ml) * n + o);
        float v = s * sb[o];
        v = v + sb[F.rows_w + o];
        y[(size_t)(row0 + ml) * n + o] = v;
    }
    return true;
}

/* Plan and launch agree (every block computes the same answer from the same plan). */
__device__ bool plan_fits(const tg_rm_plan &P)
{
    if (P.magic != TG_RM_MAGIC || P.version != TG_RM_VERSION || P.n_layers < 1 || P.n_layers > TG_RM_MAX_LAYERS)
        return false;
    if (P.channels < 16 || P.channels > TG_RM_MAX_CHANNELS || P.channels % 16 != 0)
        return false;
    if (P.token_groups < 1 || P.token_groups > RM_MAX_GROUPS || P.capacity < 1
        || P.capacity > P.token_groups * TG_RM_TOKENS || gridDim.x != P.token_groups * P.channel_blocks)
        return false;
    if (blockDim.x != TG_RM_THREADS || P.smem_bytes > dynamic_smem_bytes())
        return false;
    if (P.layer[0].k != P.in_features || P.layer[P.n_layers - 1].n != P.out_features)
        return false;
    if (P.fuse_last && (P.n_layers < 2 || P.out_features > TG_RM_FUSED_OUT || P.partial == 0
                        || P.layer[P.n_layers - 1].rows_w != P.out_features))
        return false;
    for (uint32_t l = 0; l < P.n_layers; ++l) {
        const tg_rm_layer &L = P.layer[l];
        if (P.fuse_last && l + 1 == P.n_layers)
            continue;   /* no slice of N, no staged input */
        if (L.k64 % 64 != 0 || L.k64 < L.k || L.k64 + 8 > P.stride_a || L.stride_w < L.k64 || L.stride_w % 16 != 0
            || L.rows_w < (uint32_t)(owned(P, l, 0) + 15) / 16 * 16
            || (l + 1 < P.n_layers && P.layer[l + 1].k != L.n))
            return false;
    }
    return true;
}

}  // namespace tg_rm

extern "C" __global__ void __launch_bounds__(TG_RM_THREADS, 1)
tg_resident_mlp_w8a16_kernel(tg_mb_header *box, const tg_rm_plan *plan)
{
    using namespace tg_rm;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ tg_rm_plan P;
    __shared__ uint64_t s_seq;
    __shared__ uint32_t s_rows;
    __shared__ int s_go;

    for (uint32_t i = threadIdx.x; i < sizeof(tg_rm_plan) / 4; i += TG_RM_THREADS)
        reinterpret_cast<uint32_t *>(&P)[i] = reinterpret_cast<const uint32_t *>(plan)[i];
    __syncthreads();
    if (!plan_fits(P)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            box->response.status = TG_MB_STATUS_BAD_CONFIG;
            tg_fence_acq_rel_sys();   /* NOTE: release: the status before the exit it explains */
            ((volatile tg_mb_response *)&box->response)->exited = TG_MB_EXIT_CONFIG;
        }
        return;
    }
    Sync *sync = reinterpret_cast<Sync *>(P.sync);
    volatile unsigned int *stop = &sync->stop;
    const int G = (int)P.channel_blocks;
    const int t = (int)blockIdx.x / G, c = (int)blockIdx.x % G;
    const bool leader = blockIdx.x == 0;
    volatile tg_mb_response *resp = &box->response;
    /* The config was written before the launch (a launch orders the host's earlier writes). */
    const tg_mb_config cfg = box->config;
    if (leader && threadIdx.x == 0
        && (cfg.magic != TG_MB_MAGIC || cfg.version != TG_MB_VERSION || cfg.elem_size != 4
            || cfg.capacity != P.capacity)) {
        resp->status = TG_MB_STATUS_BAD_CONFIG;
        *stop = 1u;
        __threadfence();
        tg_fence_acq_rel_sys();
        resp->exited = TG_MB_EXIT_CONFIG;
    }
    load_slices(P, c, smem);
    __syncthreads();

    unsigned char *base = reinterpret_cast<unsigned char *>(box);
    const float *x = reinterpret_cast<const float *>(base + tg_mb_rows_input_offset());
    float *y = reinterpret_cast<float *>(base + tg_mb_rows_output_offset(P.capacity, P.in_features));
    const int L = (int)P.n_layers, F = final_layer(P);
    /* The blocks that end a request for their token group: the last layer's, or (fused) one. */
    const int enders = P.fuse_last ? 1 : (int)((P.out_features + P.channels - 1) / P.channels);
    const bool in_last = !P.fuse_last && owned(P, L - 1, c) > 0;
    /* Block 0 starts from the last answer (a relaunch keeps it), the others from go's zero. */
    uint64_t last = leader ? resp->done : 0;
    uint64_t served = 0;   /* requests answered since the launch: every block sees every one */
    uint32_t epoch = 0;    /* barriers this block's token group has passed */
    for (;;) {
        if (threadIdx.x == 0) {
            int go = 0;
            if (leader) {
                uint64_t seq = last, ctl = 0;
                go = !*stop && tg_mb_wait_request(box, cfg, last, stop, true, &seq, &ctl);
                const uint32_t rows = tg_mb_ctl_n(ctl);
                if (!go) {
                    *stop = 1u;   /* quit (or already set): the others poll device memory only */
                    __threadfence();
                } else if (rows >= 1 && rows <= P.capacity) {
                    sync->rows = rows;
                    /* NOTE: release: the row count before `go`. */
                    st_release(&sync->go, seq);
                }
                s_seq = seq;
                s_rows = rows;
            } else {
                tg_backoff b = tg_backoff_start();
                for (;;) {
                    const uint64_t v = ld_acquire(&sync->go);
                    if (v != last) {
                        s_seq = v;
                        s_rows = __ldcg(&sync->rows);
                        go = 1;
                        break;
                    }
                    if (*stop)
                        break;
                    tg_backoff_pause(&b, cfg);
                }
            }
            s_go = go;
        }
        __syncthreads();
        if (!s_go)
            return;
        const uint64_t seq = s_seq;
        const int rows = (int)s_rows;
        last = seq;
        if (leader && (rows < 1 || rows > (int)P.capacity)) {
            if (threadIdx.x == 0) {
                resp->status = TG_MB_STATUS_BAD_REQUEST;
                tg_fence_acq_rel_sys();   /* NOTE: release: the status before `done` */
                resp->done = seq;
            }
            continue;   /* never published: the others never see it */
        }
#ifdef TG_RM_TRACE
        if (threadIdx.x == 0 && blockIdx.x < RM_TRACE_BLOCKS)
            tg_rm_request[blockIdx.x] = (uint32_t)served;
#endif
        RM_STAMP(served, 0);
        const int row0 = t * TG_RM_TOKENS;
        if (row0 >= rows) {
            served++;
            continue;   /* this token group has no rows in this request */
        }
        const int nr = rows - row0 < TG_RM_TOKENS ? rows - row0 : TG_RM_TOKENS;
        stage_rows(P, x, row0, nr, c, smem);
        RM_STAMP(served, 2);
        uint32_t *arrive = &sync->arrive[t].count;
        bool ok = group_barrier(arrive, ++epoch * (uint32_t)G, true, stop, resp);
        RM_STAMP(served, 3);
        for (int l = 0; ok && l <= F; ++l) {
            run_layer(P, l, c, t, row0, nr, smem, y);
            RM_STAMP(served, 6 + 3 * l);
            if (l < F)
                ok = group_barrier(arrive, ++epoch * (uint32_t)G, l + 1 < F || in_last, stop, resp);
        }
        if (!ok)
            return;
        served++;
        bool ends;
        if (P.fuse_last)
            ends = sum_partials(P, sync, t, row0, nr, smem, y);
        else
            ends = in_last;
        if (!ends)
            continue;
        RM_STAMP(served - 1, 10);   /* served counts this request already */
        if (threadIdx.x == 0) {
            /* Known before the answer, the same in every block: written with the outputs, under
               the one fence below. */
            resp->status = TG_MB_STATUS_OK;
            resp->served = served;
        }
        /* NOTE: every thread's output rows are visible system-wide before the block takes a
           ticket, so `done` cannot overtake any block's rows on the way to the host. */
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            const int groups = (rows + TG_RM_TOKENS - 1) / TG_RM_TOKENS;
            const unsigned int total = (unsigned int)(groups * enders);
            if (total == 1) {
                resp->done = seq;   /* NOTE: release: the fence above is cumulative */
            } else {
                const unsigned int ticket = atomicAdd(&sync->finish.count, 1u);
                if (ticket == total - 1) {
                    /* No block takes a ticket again before the next request, which the host posts
                       only after it has seen the `done` below. */
                    atomicExch(&sync->finish.count, 0u);
                    /* NOTE: acquire the other blocks' arrivals (and their fenced writes), release
                       them before `done`. */
                    tg_fence_acq_rel_sys();
                    resp->done = seq;
                }
            }
        }
        RM_STAMP(served - 1, 11);
    }
}
