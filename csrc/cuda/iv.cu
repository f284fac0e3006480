/*
 * iv.cu -- Black-Scholes-Merton implied volatility on the GPU, one option per thread.
 *
 * The per-option work is the shared "Let's Be Rational" core, csrc/cpu/lbr_core.h, compiled here
 * as __host__ __device__ code: the CPU backend (csrc/cpu/iv.c) calls the same two functions,
 * tg_lbr_implied_vol_bsm (float64) and tg_lbr_implied_vol_bsm_f32 (float32 inputs solved in
 * double, then narrowed), so both backends give the same vols and the same statuses. Those
 * functions do the discounting step of the contract (forward and strike brought to one date; the
 * bounds taken on S e^{-qt} and K e^{-rt}) and return status BAD_INPUT for t <= 0, non-finite
 * input, S <= 0, K <= 0 or price < 0.
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

#define TG_IV_BLOCK 128

/* Strides are 0 or 1, so i * stride never overflows an int. */
#define TG_IV_AT(p, s, i) ((p)[(i) * (s)])

/* The bundle builder compiles one kernel per cubin (-DTG_IV_ONLY_F64 or -DTG_IV_ONLY_F32): each
   inlines the whole solver, a few hundred KB of SASS, so a cubin holding both would double every
   module load. Without either macro both kernels are built. */
#ifndef TG_IV_ONLY_F32

/* The LBR iteration is register-hungry and branchy; 128 threads keep the register file from
   capping occupancy below four blocks per SM while letting divergent warps interleave. */
extern "C" __global__ void __launch_bounds__(TG_IV_BLOCK)
tg_implied_vol_f64_kernel(const double *__restrict__ price_ptr, int s_price,
                          const double *__restrict__ spot_ptr, int s_spot,
                          const double *__restrict__ strike_ptr, int s_strike,
                          const double *__restrict__ t_ptr, int s_t,
                          const double *__restrict__ rate_ptr, int s_rate,
                          const double *__restrict__ div_ptr, int s_div,
                          const uint8_t *__restrict__ call_ptr, int s_call,
                          double *__restrict__ vol_ptr, int8_t *__restrict__ status_ptr, int n)
{
    int i = blockIdx.x * TG_IV_BLOCK + threadIdx.x;
    if (i >= n)
        return;
    int status;
    double theta = TG_IV_AT(call_ptr, s_call, i) ? 1.0 : -1.0;
    double vol = tg_lbr_implied_vol_bsm(TG_IV_AT(price_ptr, s_price, i), TG_IV_AT(spot_ptr, s_spot, i),
                                        TG_IV_AT(strike_ptr, s_strike, i), TG_IV_AT(t_ptr, s_t, i),
                                        TG_IV_AT(rate_ptr, s_rate, i), TG_IV_AT(div_ptr, s_div, i),
                                        theta, &status);
    vol_ptr[i] = vol;
    status_ptr[i] = (int8_t)status;
}

#endif /* TG_IV_ONLY_F32 */

#ifndef TG_IV_ONLY_F64

/* float32 in and out; the solve runs in double (tg_lbr_implied_vol_bsm_f32), which also flags with
   PRECISION the prices whose float32 rounding leaves no correct digit of time value. */
extern "C" __global__ void __launch_bounds__(TG_IV_BLOCK)
tg_implied_vol_f32_kernel(const float *__restrict__ price_ptr, int s_price,
                          const float *__restrict__ spot_ptr, int s_spot,
                          const float *__restrict__ strike_ptr, int s_strike,
                          const float *__restrict__ t_ptr, int s_t,
                          const float *__restrict__ rate_ptr, int s_rate,
                          const float *__restrict__ div_ptr, int s_div,
                          const uint8_t *__restrict__ call_ptr, int s_call,
                          float *__restrict__ vol_ptr, int8_t *__restrict__ status_ptr, int n)
{
    int i = blockIdx.x * TG_IV_BLOCK + threadIdx.x;
    if (i >= n)
        return;
    int status;
    float theta = TG_IV_AT(call_ptr, s_call, i) ? 1.0f : -1.0f;
    float vol = tg_lbr_implied_vol_bsm_f32(TG_IV_AT(price_ptr, s_price, i), TG_IV_AT(spot_ptr, s_spot, i),
                                           TG_IV_AT(strike_ptr, s_strike, i), TG_IV_AT(t_ptr, s_t, i),
                                           TG_IV_AT(rate_ptr, s_rate, i), TG_IV_AT(div_ptr, s_div, i),
                                           theta, &status);
    vol_ptr[i] = vol;
    status_ptr[i] = (int8_t)status;
}

#endif /* TG_IV_ONLY_F64 */
