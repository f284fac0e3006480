/*
 * tickgpu.h -- the one C ABI of tickgpu's native core.
 *
 * The Python binding (CFFI, API mode) reads its cdef from the region between the two
 * TICKGPU_CDEF markers below, so that region holds only declarations CFFI can parse:
 * no preprocessor lines, no inline code. Everything outside it is for C callers only.
 *
 * Conventions
 *   - Every function returns a tg_status (0 on success); per-element problems are not
 *     errors of the call: they give NaN (and a per-element status where documented).
 *   - Array inputs come with an element stride: 1 for contiguous, 0 to broadcast one value.
 *   - `nthreads` <= 0 means "decide": one thread below TG_PARALLEL_MIN elements, else all cores.
 *   - Output pointers may be NULL where documented, to skip that output.
 */
#ifndef TICKGPU_H
#define TICKGPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* TICKGPU_CDEF_BEGIN */

typedef enum {
    TG_OK = 0,
    TG_EINVAL = 1,      /* a bad argument (NULL pointer, negative size, bad enum) */
    TG_ENOMEM = 2,      /* allocation failed */
    TG_ERANGE = 3,      /* an index or size beyond a capacity */
    TG_EDATA = 4,       /* data inconsistent with the state it is applied to */
    TG_ENODRIVER = 5,   /* the CUDA driver library could not be loaded or lacks a symbol */
    TG_ECUDA = 6,       /* a CUDA driver call failed; the CUresult is reported separately */
    TG_ETHREAD = 7      /* a worker thread could not be started */
} tg_status;

const char *tg_status_name(int status);
int tg_num_cores(void);

/* ---- Black-Scholes-Merton greeks (csrc/cpu/greeks.c) ------------------------------------
 * Inputs: spot S, strike K, time t (years), rate r, vol sigma (per sqrt(year)), dividend q
 * (continuous), call (nonzero = call). Element strides s_* (0 broadcasts).
 * Outputs (any may be NULL): price, delta, gamma, vega (per 1.00 vol), theta (per year),
 * rho (per 1.00 rate), phi (dividend rho, per 1.00 q), vanna (d delta / d sigma),
 * volga (d vega / d sigma), charm (d delta / d t, per year of calendar time, i.e. -d/dT).
 * Invalid elements (non-finite, S <= 0, K <= 0, t < 0, sigma <= 0) give NaN in every output.
 * t == 0 (or sigma sqrt(t) too small for its reciprocal to be finite) gives the zero-total-
 * variance limit: price max(w (S e^{-qt} - K e^{-rt}), 0) with w = +1 call / -1 put; in the money:
 * delta w e^{-qt}, theta w (q S e^{-qt} - r K e^{-rt}), rho w t K e^{-rt}, phi -w t S e^{-qt},
 * charm w q e^{-qt}; out of the money all of these 0; gamma, vega, vanna, volga 0. Exactly at
 * the money the limits along S == K as t -> 0: delta w/2, gamma +inf, theta -inf, charm
 * -sign(r - q + sigma^2/2) inf (w q / 2 where that is 0), the rest half the ITM values or 0.
 * Valid inputs whose results exceed the type's range (S e^{-qt} overflowing) give inf or NaN.
 * Any stride < 0, a NULL input pointer (n > 0) or n < 0 is TG_EINVAL. */
typedef struct {
    const void *spot;   int64_t s_spot;
    const void *strike; int64_t s_strike;
    const void *t;      int64_t s_t;
    const void *rate;   int64_t s_rate;
    const void *vol;    int64_t s_vol;
    const void *div;    int64_t s_div;
    const uint8_t *call; int64_t s_call;
} tg_bsm_inputs;

typedef struct {
    void *price, *delta, *gamma, *vega, *theta, *rho, *phi, *vanna, *volga, *charm;
} tg_greeks_outputs;

int tg_greeks_f64(int64_t n, const tg_bsm_inputs *in, const tg_greeks_outputs *out, int nthreads);
int tg_greeks_f32(int64_t n, const tg_bsm_inputs *in, const tg_greeks_outputs *out, int nthreads);

/* ---- Implied volatility (csrc/cpu/iv.c) ---------------------------------------------------
 * Inputs as tg_bsm_inputs, with `vol` unused and `price` the option's premium.
 * Outputs: vol[n] (NaN where there is no answer) and status[n] (tg_iv_status, may be NULL). */
typedef enum {
    TG_IV_OK = 0,
    TG_IV_BELOW_INTRINSIC = 1,  /* price below the discounted intrinsic value: no vol exists */
    TG_IV_ABOVE_MAXIMUM = 2,    /* price at or above the no-arbitrage maximum (S e^{-qt} call, K e^{-rt} put) */
    TG_IV_BAD_INPUT = 3,        /* non-finite, S <= 0, K <= 0, t <= 0, price < 0 */
    TG_IV_AT_INTRINSIC = 4,     /* price equals intrinsic: vol is 0 (reported as 0, not NaN) */
    TG_IV_PRECISION = 5         /* float32 cannot resolve this price (time value below its resolution) */
} tg_iv_status;

typedef struct {
    const void *price;  int64_t s_price;
    const void *spot;   int64_t s_spot;
    const void *strike; int64_t s_strike;
    const void *t;      int64_t s_t;
    const void *rate;   int64_t s_rate;
    const void *div;    int64_t s_div;
    const uint8_t *call; int64_t s_call;
} tg_iv_inputs;

int tg_implied_vol_f64(int64_t n, const tg_iv_inputs *in, double *vol, int8_t *status, int nthreads);
int tg_implied_vol_f32(int64_t n, const tg_iv_inputs *in, float *vol, int8_t *status, int nthreads);
/* Black price of a normalised, undiscounted option at total vol s = sigma sqrt(t), x = ln(F/K),
   theta = +1 call / -1 put: b(x, s, theta) / sqrt(F K). Exposed for tests. */
double tg_normalised_black(double x, double s, double theta);

/* ---- Volatility surface (csrc/cpu/surface.c) ----------------------------------------------
 * Grid: nk strictly increasing strikes, nt strictly increasing positive expiries (years),
 * vols[it * nk + ik]. mode 0: bilinear in total variance sigma^2 t with an implicit zero at t = 0
 * (QuantLib BlackVarianceSurface); mode 1: bilinear in vol. Extrapolation: flat in strike,
 * flat vol beyond the last expiry, and (mode 0) variance linear in t before the first expiry
 * (mode 1: flat vol there). what 0: vol, 1: total variance sigma^2 t.
 * A query with a non-finite strike or t, or t < 0, gives NaN; at t == 0 the variance is 0 and the
 * vol its limit (the first expiry's). The grid is checked on every call: nk, nt >= 1, finite
 * strictly increasing strikes, finite strictly increasing expiries > 0, finite vols >= 0, mode
 * and what 0 or 1, strides >= 0; anything else is TG_EINVAL (no calendar-arbitrage check). */
typedef struct {
    int32_t nk, nt;
    const double *strikes;
    const double *expiries;
    const double *vols;
    int32_t mode;
} tg_surface;

int tg_surface_eval(const tg_surface *surf, int64_t n, const double *strike, int64_t s_strike,
                    const double *t, int64_t s_t, double *out, int32_t what, int nthreads);

/* ---- Order book (csrc/cpu/book.c) -------------------------------------------------------- */
/* see the BOOK section, owned by book.c */

/* ---- Hot path: CUDA driver through function pointers (csrc/hot/) --------------------------- */
/* see the HOT section, owned by csrc/hot */

/* TICKGPU_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* TICKGPU_H */
