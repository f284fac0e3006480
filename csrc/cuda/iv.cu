/*
 * iv.cu -- Black-Scholes-Merton implied volatility on the GPU, one option per thread.
 *
 * The per-option work is the shared "Let's Be Rational" core, csrc/cpu/lbr_core.h, compiled here
 * as __host__ __device__ code: the CPU backend (csrc/cpu/iv.c) runs the same functions in the same
 * order (tg_lbr_bsm_setup, tg_lbr_otm_pivot_point, tg_lbr_otm_guess_from, tg_lbr_otm_refine:
 * what tg_lbr_implied_vol_bsm and tg_lbr_implied_vol_bsm_f32 call), so both backends give the
 * same vols and the same statuses.
 * The setup does the discounting step of the contract (forward and strike brought to one date;
 * the bounds taken on S e^{-qt} and K e^{-rt}) and returns status BAD_INPUT for t <= 0,
 * non-finite input, S <= 0, K <= 0 or price < 0.
 *
 * Why the threads of a block are regrouped. The solver has four branches (where the price lies
 * against the inflection point and the two tangent points of b(s)), each with its own initial
 * guess and objective, and the normalised price b(s) it iterates on is evaluated in three regions
 * (asymptotic series, Taylor series, erfcx difference). Options of a random chain fall into all of
 * them, so a warp of 32 runs every branch's and region's code in turn with most lanes idle: a model
 * of the branches taken (bench inputs: spot and strike 50-150, t up to 3 years, vol 0.05-0.9; each
 * code region costed by its operations, a warp paying for every region any lane enters) puts a
 * warp's cost at ~3.5x the average lane's. So a block solves in stages, regrouping its options
 * between them in shared memory (a counting sort by class, the options already answered last):
 *   1. each thread sets up its own option (bounds, normalisation) and finds the inflection point;
 *   2. (TG_IV_REGROUP >= 2) sorted by lower / upper branches and series / closed form, each
 *      thread makes the initial guess of the option at its sorted position;
 *   3. (TG_IV_REGROUP >= 1) sorted by (branch, region of the first evaluation), each thread runs
 *      the two refinement steps and writes the vol to the option's own index.
 * The model puts the warp cost at ~1.7x the average lane's with both regroupings in blocks of 256
 * (~2.2x with the last one alone, ~1.55x in blocks of 512): about twice the throughput. Same
 * functions per option, same results; only which thread runs which option changes.
 * TG_IV_REGROUP=0 is the plain one-option-per-thread kernel.
 *
 * Built ahead of time by `tickgpu build-kernels` (nvcc -cubin, no fast math: the solver's
 * accuracy rests on IEEE exp/log/erfc) and launched by tickgpu.runtime with
 * block = (TG_IV_BLOCK, 1, 1) and grid = ceil(n / TG_IV_BLOCK).
 *
 * Kernel arguments, in order (all pointers to device memory; each input is followed by its
 * element stride, 0 to broadcast one value or 1 for contiguous):
 *   price, s_price, spot, s_spot, strike, s_strike, t, s_t, rate, s_rate, div, s_div,
 *   call (uint8, nonzero = call), s_call, vol_out, status_out (int8 tg_iv_status), n
 * vol_out is NaN where there is no answer (0 at intrinsic), per sqrt(year).
 */
#include <stdint.h>

#include "lbr_core.h"

#ifndef TG_IV_BLOCK
#define TG_IV_BLOCK 256
#endif
#ifndef TG_IV_REGROUP
#define TG_IV_REGROUP 2
#endif
/* Minimum resident blocks per SM for __launch_bounds__ (0: let the compiler choose registers). */
#ifndef TG_IV_MIN_BLOCKS
#define TG_IV_MIN_BLOCKS 0
#endif

#if TG_IV_MIN_BLOCKS > 0
#define TG_IV_LAUNCH_BOUNDS __launch_bounds__(TG_IV_BLOCK, TG_IV_MIN_BLOCKS)
#else
#define TG_IV_LAUNCH_BOUNDS __launch_bounds__(TG_IV_BLOCK)
#endif

/* Strides are 0 or 1, so i * stride never overflows an int. */
#define TG_IV_AT(p, s, i) ((p)[(i) * (s)])

#if TG_IV_REGROUP
/* Regrouping classes (at most 15), and one for options already answered, sorted last. */
#define TG_IV_CLASSES 16
#define TG_IV_DONE (TG_IV_CLASSES - 1)

/* The class of a refinement: its branch and the region in which tg_lbr_delta (branches 0 and 1,
   and 2 below h + t = 1) first evaluates b(s), as tg_lbr_delta picks it; branch 3 and the
   upper part of branch 2 evaluate two erfcx (tg_lbr_gamma), region 2. */
__device__ static inline int tg_iv_refine_class(const tg_lbr_otm_state *st)
{
    double h = st->x / st->s, t = 0.5 * st->s;
    int region;
    if (st->branch == 3 || h + t > 1.0)
        region = 2;
    else if (-(h + t) >= TG_LBR_ASYMPTOTIC_U)
        region = 0;
    else if (t <= TG_LBR_SMALL_T)
        region = 1;
    else
        region = 2;
    return st->branch * 3 + region;
}

#if TG_IV_REGROUP >= 2
/* The class of an initial guess: lower or upper branches, and whether the inflection point is
   close enough to 0 for the series forms (t_c <= TG_LBR_SMALL_T). */
__device__ static inline int tg_iv_guess_class(const tg_lbr_otm_pivot *pv)
{
    return (pv->beta < pv->b_c ? 0 : 2) + (pv->t_c <= TG_LBR_SMALL_T ? 0 : 1);
}
#endif

/* Counting sort of the block's threads by class, in shared memory: this thread's slot in class
   order, and in *npending the number of slots before the DONE class. The order within a class is
   whatever the atomics give: each option's result depends on its own inputs only, so the outputs
   are deterministic all the same. Every thread of the block must call it. */
__device__ static inline int tg_iv_slot(int cls, int *sh_count, int *npending)
{
    if (threadIdx.x < TG_IV_CLASSES)
        sh_count[threadIdx.x] = 0;
    __syncthreads();
    int rank = atomicAdd(&sh_count[cls], 1);
    __syncthreads();
    int pos = rank;
    for (int c = 0; c < cls; c++)
        pos += sh_count[c];
    *npending = TG_IV_BLOCK - sh_count[TG_IV_DONE];
    return pos;
}
#endif

/* One block of options: T is the I/O type (double or float), F32 the float32 resolvability rule
   of tg_lbr_implied_vol_bsm_f32 (solved in double either way). */
template <typename T, int F32>
__device__ static inline void tg_iv_block(const T *__restrict__ price_ptr, int s_price,
                                          const T *__restrict__ spot_ptr, int s_spot,
                                          const T *__restrict__ strike_ptr, int s_strike,
                                          const T *__restrict__ t_ptr, int s_t,
                                          const T *__restrict__ rate_ptr, int s_rate,
                                          const T *__restrict__ div_ptr, int s_div,
                                          const uint8_t *__restrict__ call_ptr, int s_call,
                                          T *__restrict__ vol_ptr, int8_t *__restrict__ status_ptr, int n)
{
    const int tid = threadIdx.x;
    const int base = blockIdx.x * TG_IV_BLOCK;
    const int i = base + tid;
    tg_lbr_otm_pivot pv;
    tg_lbr_otm_state st;
    double t = 1.0;
    int pending = 0;
    if (i < n) {
        double vol, beta, xn, b_max;
        int status;
        t = (double)TG_IV_AT(t_ptr, s_t, i);
        double theta = TG_IV_AT(call_ptr, s_call, i) ? 1.0 : -1.0;
        pending = tg_lbr_bsm_setup((double)TG_IV_AT(price_ptr, s_price, i), (double)TG_IV_AT(spot_ptr, s_spot, i),
                                   (double)TG_IV_AT(strike_ptr, s_strike, i), t,
                                   (double)TG_IV_AT(rate_ptr, s_rate, i), (double)TG_IV_AT(div_ptr, s_div, i),
                                   theta, F32, &vol, &status, &beta, &xn, &b_max);
        if (pending)
            tg_lbr_otm_pivot_point(beta, xn, b_max, &pv);
        else
            vol_ptr[i] = (T)vol;
        status_ptr[i] = (int8_t)status;   /* OK for the pending ones: the refinement cannot fail */
    }
    int me = tid;                         /* the block-local index of the option this thread solves */

#if TG_IV_REGROUP
    /* Structure of arrays: consecutive threads touch consecutive words (no bank conflicts). Each
       regrouping stage writes its state here after a barrier that follows every read of the
       previous one. */
    __shared__ double sh_d[7][TG_IV_BLOCK];
    __shared__ double sh_t[TG_IV_BLOCK];
    __shared__ short sh_index[TG_IV_BLOCK];
    __shared__ signed char sh_branch[TG_IV_BLOCK];
    __shared__ int sh_count[TG_IV_CLASSES];
    int npending, pos;

#if TG_IV_REGROUP >= 2
    pos = tg_iv_slot(pending ? tg_iv_guess_class(&pv) : TG_IV_DONE, sh_count, &npending);
    if (pending) {
        sh_d[0][pos] = pv.beta;
        sh_d[1][pos] = pv.x;
        sh_d[2][pos] = pv.b_max;
        sh_d[3][pos] = pv.s_c;
        sh_d[4][pos] = pv.v_c;
        sh_d[5][pos] = pv.t_c;
        sh_d[6][pos] = pv.b_c;
        sh_t[pos] = t;
        sh_index[pos] = (short)tid;
    }
    __syncthreads();
    pending = tid < npending;
    if (pending) {
        pv.beta = sh_d[0][tid];
        pv.x = sh_d[1][tid];
        pv.b_max = sh_d[2][tid];
        pv.s_c = sh_d[3][tid];
        pv.v_c = sh_d[4][tid];
        pv.t_c = sh_d[5][tid];
        pv.b_c = sh_d[6][tid];
        t = sh_t[tid];
        me = sh_index[tid];
    }
#endif
    if (pending)
        tg_lbr_otm_guess_from(&pv, &st);

    pos = tg_iv_slot(pending ? tg_iv_refine_class(&st) : TG_IV_DONE, sh_count, &npending);
    if (pending) {
        sh_d[0][pos] = st.beta;
        sh_d[1][pos] = st.x;
        sh_d[2][pos] = st.b_max;
        sh_d[3][pos] = st.s;
        sh_d[4][pos] = st.lo;
        sh_d[5][pos] = st.hi;
        sh_t[pos] = t;
        sh_branch[pos] = (signed char)st.branch;
        sh_index[pos] = (short)me;
    }
    __syncthreads();
    if (tid < npending) {
        st.beta = sh_d[0][tid];
        st.x = sh_d[1][tid];
        st.b_max = sh_d[2][tid];
        st.s = sh_d[3][tid];
        st.lo = sh_d[4][tid];
        st.hi = sh_d[5][tid];
        st.branch = sh_branch[tid];
        vol_ptr[base + sh_index[tid]] = (T)(tg_lbr_otm_refine(&st) / sqrt(sh_t[tid]));
    }
#else
    if (pending) {
        tg_lbr_otm_guess_from(&pv, &st);
        vol_ptr[base + me] = (T)(tg_lbr_otm_refine(&st) / sqrt(t));
    }
#endif
}

/* The bundle builder compiles one kernel per cubin (-DTG_IV_ONLY_F64 or -DTG_IV_ONLY_F32): each
   inlines the whole solver, a few hundred KB of SASS, so a cubin holding both would double every
   module load. Without either macro both kernels are built. */
#ifndef TG_IV_ONLY_F32

extern "C" __global__ void TG_IV_LAUNCH_BOUNDS
tg_implied_vol_f64_kernel(const double *__restrict__ price_ptr, int s_price,
                          const double *__restrict__ spot_ptr, int s_spot,
                          const double *__restrict__ strike_ptr, int s_strike,
                          const double *__restrict__ t_ptr, int s_t,
                          const double *__restrict__ rate_ptr, int s_rate,
                          const double *__restrict__ div_ptr, int s_div,
                          const uint8_t *__restrict__ call_ptr, int s_call,
                          double *__restrict__ vol_ptr, int8_t *__restrict__ status_ptr, int n)
{
    tg_iv_block<double, 0>(price_ptr, s_price, spot_ptr, s_spot, strike_ptr, s_strike, t_ptr, s_t,
                           rate_ptr, s_rate, div_ptr, s_div, call_ptr, s_call, vol_ptr, status_ptr, n);
}

#endif /* TG_IV_ONLY_F32 */

#ifndef TG_IV_ONLY_F64

/* float32 in and out; the solve runs in double, with the PRECISION rule of
   tg_lbr_implied_vol_bsm_f32 for prices whose float32 rounding leaves no correct digit of time
   value. */
extern "C" __global__ void TG_IV_LAUNCH_BOUNDS
tg_implied_vol_f32_kernel(const float *__restrict__ price_ptr, int s_price,
                          const float *__restrict__ spot_ptr, int s_spot,
                          const float *__restrict__ strike_ptr, int s_strike,
                          const float *__restrict__ t_ptr, int s_t,
                          const float *__restrict__ rate_ptr, int s_rate,
                          const float *__restrict__ div_ptr, int s_div,
                          const uint8_t *__restrict__ call_ptr, int s_call,
                          float *__restrict__ vol_ptr, int8_t *__restrict__ status_ptr, int n)
{
    tg_iv_block<float, 1>(price_ptr, s_price, spot_ptr, s_spot, strike_ptr, s_strike, t_ptr, s_t,
                          rate_ptr, s_rate, div_ptr, s_div, call_ptr, s_call, vol_ptr, status_ptr, n);
}

#endif /* TG_IV_ONLY_F64 */
